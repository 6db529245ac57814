//! Drift repair: periodically verify that what in-sync Translations pushed still exists in
//! the backend, and have the pusher re-create what was deleted out of band.
//!
//! Verification is a GET per pushed resource (for a device or port, it also checks that the
//! filter chains it names are still named), spread out to at most `verify_rate` requests
//! per second so it never competes with real work. A Translation with missing resources is
//! queued for a reconcile that creates exactly those again.
//!
//! What the pusher's own deletions take is not left to that period: MidoNet deletes a
//! bridge's ports, a chain's rules, a port's routes with them, and the rules of other chains
//! jumping to a deleted chain; it clears the filter references of bridges, routers and ports
//! to it. Those may belong to other Translations (an Endpoints' rules in a Service's chain,
//! a Service's jump in KUBE-SERVICES, a node bridge's inbound filter KUBE-MAIN). A deletion
//! (or a removal from a shrunk spec) notes the Translations built on what it took; when a
//! provider pushes such a referent again (a re-created Service's chain, a restored global
//! Translation), what they had under it is verified, and what is gone or cleared is pushed
//! again the same way.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use midonet_translators::model::{Kind, Referent};
use uuid::Uuid;

pub use super::tracked::Cause;
use super::{deps, plan, sync_state, PusherContext, SyncState};
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
            if sync_state(&tr) != SyncState::Ready {
                continue;
            }
            // From the cutover on, the old version is being taken apart on purpose (its
            // node bridges go with the cutover): repairing it would build it up again.
            if ctx.rollout.is_old(&tr) && ctx.rollout.phase().cut_over() {
                continue;
            }
            let Some(uid) = tr.uid() else { continue };
            let status = ctx.recorded_status(&tr);
            // References MidoNet may have cleared (a bridge's filter chain), per path.
            let clearable: HashMap<String, Vec<Uuid>> = plan::parse_lenient(tr.desired_resources())
                .into_iter()
                .map(|d| (d.path, deps::clearable_references(&d.resource)))
                .filter(|(_, ids)| !ids.is_empty())
                .collect();
            let mut missing = HashSet::new();
            for pushed in &status.pushed {
                let Some(kind) = Kind::from_name(&pushed.kind) else {
                    continue;
                };
                tokio::time::sleep(pause).await;
                checked += 1;
                let present = match clearable.get(&pushed.path) {
                    Some(ids) => ctx
                        .backend
                        .get(kind, &pushed.path)
                        .await
                        .map(|body| body.is_some_and(|b| names_all(&b, ids))),
                    None => ctx.backend.exists(kind, &pushed.path).await,
                };
                match present {
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
                ctx.tracker.mark_missing(&uid, missing, Cause::Drift);
                ctx.wake([ObjectRef::from_obj(&*tr)]);
            }
        }
        tracing::debug!(checked, repaired, "drift verification round done");
    }
}

/// Referents taken out of the backend were pushed again: verify, in the background, the
/// resources these Translations had built on them (MidoNet deleted those with them), and
/// have the pusher re-create the ones that are gone.
pub(super) fn recheck_consumers(
    ctx: &Arc<PusherContext>,
    cascaded: Vec<(ObjectRef<Translation>, HashSet<Referent>)>,
) {
    if cascaded.is_empty() {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        for (key, taken) in cascaded {
            let Some(tr) = ctx.deps.store().get(&key) else {
                continue;
            };
            let Some(uid) = tr.uid() else { continue };
            if tr.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let pushed: HashSet<String> = ctx
                .recorded_status(&tr)
                .pushed
                .into_iter()
                .map(|p| p.path)
                .collect();
            let desired = plan::parse_lenient(tr.desired_resources());
            let mut missing = HashSet::new();
            for (path, hit) in deps::cascade_hits(&desired, &taken) {
                let Some(d) = desired.iter().find(|d| d.path == path) else {
                    continue;
                };
                if !pushed.contains(&path) {
                    continue;
                }
                let present = match &hit {
                    deps::Hit::Deleted => ctx.backend.exists(d.resource.kind(), &path).await,
                    // Kept with the references cleared: pushed again (a PUT) when the body
                    // does not name them any more.
                    deps::Hit::Cleared(ids) => ctx
                        .backend
                        .get(d.resource.kind(), &path)
                        .await
                        .map(|body| body.is_some_and(|b| names_all(&b, ids))),
                };
                match present {
                    Ok(true) => {}
                    Ok(false) => {
                        missing.insert(path);
                    }
                    // Not known: created again all the same (an existing one answers 409
                    // and is settled), rather than left to the next verification.
                    Err(err) => {
                        tracing::debug!(backend_path = %path, error = %err, "cannot verify a cascade; re-creating");
                        missing.insert(path);
                    }
                }
            }
            if !missing.is_empty() {
                tracing::info!(namespace = tr.namespace().as_deref().unwrap_or(""), translation = %tr.name_any(), backend_paths = ?missing, "backend resources deleted by MidoNet with another Translation's; re-creating");
                ctx.tracker.mark_missing(&uid, missing, Cause::Cascade);
                ctx.wake([key]);
            }
        }
    });
}

/// Whether a backend body names every one of `ids` (at any depth).
fn names_all(body: &serde_json::Value, ids: &[Uuid]) -> bool {
    fn collect(value: &serde_json::Value, out: &mut HashSet<Uuid>) {
        match value {
            serde_json::Value::String(s) => out.extend(s.parse::<Uuid>().ok()),
            serde_json::Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            serde_json::Value::Object(map) => map.values().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut named = HashSet::new();
    collect(body, &mut named);
    ids.iter().all(|id| named.contains(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cleared_filter_is_noticed() {
        let chain = Uuid::new_v4();
        let kept = serde_json::json!({"id": Uuid::new_v4().to_string(), "inboundFilterId": chain.to_string()});
        let cleared = serde_json::json!({"id": Uuid::new_v4().to_string(), "name": "n"});
        assert!(names_all(&kept, &[chain]));
        assert!(!names_all(&cleared, &[chain]));
    }
}
