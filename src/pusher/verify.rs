//! Drift repair: verify that what Translations pushed still exists in the backend, and have
//! the pusher re-create what went missing.
//!
//! Verification is a GET per resource a Translation's status records as pushed (for a
//! device or port, it also checks that the filter chains it names are still named), spread
//! out to at most `verify_rate` requests per second so it never competes with real work. A
//! Translation with missing resources is queued for a reconcile that creates exactly those
//! again. It runs:
//! - every `verify_period`, over every Translation whatever its state (Ready, waiting for a
//!   referent, failing, awaiting a bump's cutover), but those being deleted and an old
//!   version's once a bump cuts over (taken apart on purpose): what a Translation records as
//!   pushed is what it will never push again unless told it is gone;
//! - at once, for the Translations recorded as having pushed a referent the backend says is
//!   missing (a push refused with 404 or 400; that Translation itself for one of its own
//!   resources): a backend that restarted empty is noticed by the first push it refuses, not
//!   a period later. A Translation is rechecked so at most once per [`RECHECK_SPACING`].
//!
//! What the pusher's own deletions take is not left to that period: MidoNet deletes a
//! bridge's ports, a chain's rules, a port's routes with them, and the rules of other chains
//! jumping to a deleted chain; it clears the filter references of bridges, routers and ports
//! to it. Those may belong to other Translations (an Endpoints' rules in a Service's chain,
//! a Service's jump in KUBE-SERVICES, a node bridge's inbound filter KUBE-MAIN). A deletion
//! (or a removal from a shrunk spec) notes the Translations built on what it took; when a
//! provider pushes such a referent again (a re-created Service's chain, a restored global
//! Translation), what they had under it is verified, and what is gone or cleared is pushed
//! again the same way. A referent found missing and re-created is such a referent too (the
//! reconcile notes it): what other Translations had under a lost node bridge is verified as
//! soon as the bridge is back.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use midonet_translators::model::{Kind, Referent, Resource};
use uuid::Uuid;

pub use super::tracked::Cause;
use super::{deps, steps, PusherContext};
use crate::crd::{PushedResource, Translation};

type Key = ObjectRef<Translation>;

/// The shortest time between two rechecks of one Translation prompted by refused pushes
/// (see [`recheck_providers`]): a referent refused again within it is awaited, not
/// verified again; a node's pods refused together cost one verification of the node.
pub const RECHECK_SPACING: Duration = Duration::from_secs(10);

/// When each Translation was last rechecked after a refused push.
#[derive(Debug, Default)]
pub struct Rechecks {
    last: Mutex<HashMap<Key, Instant>>,
}

impl Rechecks {
    /// Whether `key` may be rechecked now (not within [`RECHECK_SPACING`] of the last
    /// time); if so, now is the last time.
    fn begin(&self, key: &Key, now: Instant) -> bool {
        let mut last = crate::locks::lock(&self.last);
        last.retain(|_, at| now.duration_since(*at) < RECHECK_SPACING);
        if last.contains_key(key) {
            return false;
        }
        last.insert(key.clone(), now);
        true
    }
}

/// Whether what `tr` records as pushed is verified: not while it is being deleted (its
/// deletion deletes what it recorded, and a DELETE of what is gone succeeds), nor an old
/// version's from a bump's cutover on (taken apart on purpose: repairing it would build
/// it up again).
fn verifiable(ctx: &PusherContext, tr: &Translation) -> bool {
    verified_when(tr, ctx.rollout.is_old(tr) && ctx.rollout.phase().cut_over())
}

/// [`verifiable`], decided: `retired_on_purpose` says `tr` is an old version's and the bump
/// has cut over. Whatever the Ready condition says.
fn verified_when(tr: &Translation, retired_on_purpose: bool) -> bool {
    tr.metadata.deletion_timestamp.is_none() && !retired_on_purpose
}

/// The paths of `pushed` (what `tr` records as pushed) gone from the backend, or kept with
/// a filter reference MidoNet cleared: one GET each, `pause` apart. `Err` on backend
/// trouble (the caller tries again later).
async fn missing_paths(
    ctx: &PusherContext,
    tr: &Translation,
    pushed: &[PushedResource],
    pause: Duration,
) -> Result<HashSet<String>, crate::backend::BackendError> {
    // References MidoNet may have cleared (a bridge's filter chain), per path.
    let clearable: HashMap<String, Vec<Uuid>> = steps::parse_lenient(tr.desired_resources())
        .into_iter()
        .map(|d| (d.path, deps::clearable_references(&d.resource)))
        .filter(|(_, ids)| !ids.is_empty())
        .collect();
    let mut missing = HashSet::new();
    for pushed in pushed {
        let Some(kind) = Kind::from_name(&pushed.kind) else {
            continue;
        };
        tokio::time::sleep(pause).await;
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
            Err(err) => {
                tracing::warn!(translation = %tr.name_any(), namespace = tr.metadata.namespace.as_deref(), backend_kind = kind.name(), backend_path = %pushed.path, error = %err, "drift verification interrupted");
                return Err(err);
            }
        }
    }
    Ok(missing)
}

/// Verifies what `tr` records as pushed; has what is gone re-created. Answers how many
/// resources were checked, and how many of those were found missing (none on backend
/// trouble).
async fn verify_one(ctx: &PusherContext, tr: &Translation, pause: Duration) -> (usize, usize) {
    let Some(uid) = tr.uid() else {
        return (0, 0);
    };
    let pushed = ctx.recorded_status(tr).pushed;
    let Ok(missing) = missing_paths(ctx, tr, &pushed, pause).await else {
        return (pushed.len(), 0);
    };
    let found = missing.len();
    if found > 0 {
        tracing::warn!(kind = "Translation", namespace = tr.metadata.namespace.as_deref(), object = %tr.name_any(), translation = %tr.name_any(), backend_paths = ?missing, "backend drift: resources missing; repairing");
        ctx.tracker.mark_missing(&uid, missing, Cause::Drift);
        ctx.wake([ObjectRef::from_obj(tr)]);
    }
    (pushed.len(), found)
}

/// The pause between two verification GETs.
fn pace(ctx: &PusherContext) -> Duration {
    Duration::from_secs_f64(1.0 / f64::from(ctx.config.verify_rate.max(1)))
}

pub(super) async fn verify_loop(
    store: Store<Translation>,
    ctx: Arc<PusherContext>,
    period: Duration,
) {
    let pause = pace(&ctx);
    loop {
        tokio::time::sleep(period).await;
        let mut checked = 0usize;
        let mut repaired = 0usize;
        for tr in store.state() {
            if !verifiable(&ctx, &tr) {
                continue;
            }
            let (verified, missing) = verify_one(&ctx, &tr, pause).await;
            checked += verified;
            repaired += missing;
        }
        tracing::debug!(checked, repaired, "drift verification round done");
    }
}

/// The push of `key` was refused for want of a referent `refused` needs (the backend
/// answered 404 or 400): the Translations recorded as having pushed one of those referents
/// (`key` itself, for one of its own resources) may have lost it, with the rest of their
/// resources (a backend that restarted empty). Verifies them in the background, each at
/// most once per [`RECHECK_SPACING`], and has what is gone re-created; the refused
/// Translation is woken by that push (or, for its own, by the recheck).
pub(super) fn recheck_providers(ctx: &Arc<PusherContext>, key: &Key, refused: &Resource) {
    let store = ctx.deps.store();
    let mut providers: Vec<Arc<Translation>> = Vec::new();
    for referent in refused.requires() {
        let Some((provider, path)) = ctx.deps.provider_of(&referent) else {
            continue;
        };
        let Some(tr) = store.get(&provider) else {
            continue;
        };
        let recorded = ctx
            .recorded_status(&tr)
            .pushed
            .iter()
            .any(|p| p.path == path);
        if recorded
            && verifiable(ctx, &tr)
            && !providers
                .iter()
                .any(|p| ObjectRef::from_obj(&**p) == provider)
            && ctx.rechecks.begin(&provider, Instant::now())
        {
            tracing::info!(translation = %key, provider = %provider, referent = ?referent, "a referent recorded as pushed was refused as missing; verifying its provider");
            providers.push(tr);
        }
    }
    if providers.is_empty() {
        return;
    }
    let task_ctx = ctx.clone();
    ctx.spawn_verification(async move {
        let ctx = task_ctx;
        let pause = pace(&ctx);
        for tr in providers {
            verify_one(&ctx, &tr, pause).await;
        }
    });
}

/// Referents taken out of the backend were pushed again: verify, in the background, the
/// resources these Translations had built on them (MidoNet deleted those with them), and
/// have the pusher re-create the ones that are gone.
pub(super) fn recheck_consumers(ctx: &Arc<PusherContext>, cascaded: Vec<(Key, HashSet<Referent>)>) {
    if cascaded.is_empty() {
        return;
    }
    let task_ctx = ctx.clone();
    ctx.spawn_verification(async move {
        let ctx = task_ctx;
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
            let desired = steps::parse_lenient(tr.desired_resources());
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
                tracing::info!(namespace = tr.metadata.namespace.as_deref(), translation = %tr.name_any(), backend_paths = ?missing, "backend resources deleted by MidoNet with another Translation's; re-creating");
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

    fn with_ready(status: &str, reason: &str) -> Translation {
        use crate::crd::{Condition, TranslationSpec, TranslationStatus};
        let mut tr = Translation::new("t", "ns", TranslationSpec::default());
        tr.metadata.generation = Some(2);
        tr.status = Some(TranslationStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                observed_generation: Some(2),
                ..Condition::default()
            }],
            ..TranslationStatus::default()
        });
        tr
    }

    #[test]
    fn every_state_is_verified_but_a_deletion_and_a_retired_version() {
        for (status, reason) in [
            ("True", "Pushed"),
            ("False", "WaitingForReferent"),
            ("False", "BackendError"),
            ("False", "AwaitingCutover"),
            ("Unknown", ""),
        ] {
            let tr = with_ready(status, reason);
            assert!(verified_when(&tr, false), "{status} {reason}");
            assert!(!verified_when(&tr, true), "{status} {reason}");
        }
        let mut deleting = with_ready("True", "Pushed");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert!(!verified_when(&deleting, false));
    }

    #[test]
    fn a_provider_is_rechecked_once_per_spacing() {
        let rechecks = Rechecks::default();
        let (a, b) = (
            ObjectRef::<Translation>::new("a").within("ns"),
            ObjectRef::<Translation>::new("b").within("ns"),
        );
        let t0 = Instant::now();
        assert!(rechecks.begin(&a, t0));
        assert!(!rechecks.begin(&a, t0 + Duration::from_secs(1)));
        assert!(rechecks.begin(&b, t0 + Duration::from_secs(1)));
        assert!(rechecks.begin(&a, t0 + RECHECK_SPACING));
        // Forgotten once past the spacing: the map holds only recent ones.
        assert!(rechecks.begin(&b, t0 + RECHECK_SPACING * 3));
        assert_eq!(crate::locks::lock(&rechecks.last).len(), 1);
    }

    #[test]
    fn a_cleared_filter_is_noticed() {
        let chain = Uuid::new_v4();
        let kept = serde_json::json!({"id": Uuid::new_v4().to_string(), "inboundFilterId": chain.to_string()});
        let cleared = serde_json::json!({"id": Uuid::new_v4().to_string(), "name": "n"});
        assert!(names_all(&kept, &[chain]));
        assert!(!names_all(&cleared, &[chain]));
    }
}
