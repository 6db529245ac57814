//! Drift repair: periodically verify that what in-sync Translations pushed still exists in
//! the backend, and have the pusher re-create what was deleted out of band.
//!
//! Verification is a GET per pushed resource, spread out to at most `verify_rate` requests
//! per second so it never competes with real work. A Translation with missing resources is
//! queued for a reconcile that creates exactly those again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use midonet_translators::model::Kind;

use super::{sync_state, PusherContext};
use crate::crd::Translation;

pub(super) async fn verify_loop(
    store: Store<Translation>,
    ctx: Arc<PusherContext>,
    period: Duration,
) {
    let pause = Duration::from_secs_f64(1.0 / f64::from(ctx.config.verify_rate.max(1)));
    loop {
        tokio::time::sleep(period).await;
        let mut checked = 0usize;
        let mut repaired = 0usize;
        for tr in store.state() {
            if sync_state(&tr) != "ready" {
                continue;
            }
            let Some(uid) = tr.uid() else { continue };
            let status = ctx.recorded_status(&tr);
            let mut missing = HashSet::new();
            for pushed in &status.pushed {
                let Some(kind) = Kind::from_name(&pushed.kind) else {
                    continue;
                };
                tokio::time::sleep(pause).await;
                checked += 1;
                match ctx.backend.exists(kind, &pushed.path).await {
                    Ok(true) => {}
                    Ok(false) => {
                        missing.insert(pushed.path.clone());
                    }
                    // Backend trouble: stop this round, the next one tries again.
                    Err(err) => {
                        tracing::warn!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), backend_kind = kind.name(), backend_path = %pushed.path, error = %err, "drift verification interrupted");
                        break;
                    }
                }
            }
            if !missing.is_empty() {
                tracing::warn!(kind = "Translation", namespace = tr.namespace().as_deref().unwrap_or(""), object = %tr.name_any(), translation = %tr.name_any(), backend_paths = ?missing, "backend drift: resources missing; repairing");
                repaired += missing.len();
                ctx.mark_missing(&uid, missing);
                ctx.wake([ObjectRef::from_obj(&*tr)]);
            }
        }
        tracing::debug!(checked, repaired, "drift verification round done");
    }
}
