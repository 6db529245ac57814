//! A version bump's cutover: every withheld binding moved in one batch.
//!
//! Between the first binding moved to the new version and the last one, a flow between a
//! pod already on the new topology and one still on the old has no path: the two versions'
//! routers do not know each other's ports. The width of that window is what an
//! interruption costs at scale, so the cutover does nothing else: the rollout loop moves
//! every binding (delete the old binding, create the new one, a request apart), with many
//! requests in flight, and only afterwards do the Translations' own reconciles record what
//! was done (one status write each, see [`super::tracked::Tracker::cut_over`]).
//!
//! [`CutoverOrder::HostByHost`] moves one host's bindings after another's instead: the
//! pods of one host then reach each other throughout, but two hosts' pods are apart from
//! the first host's batch to the second's. The benchmark measures both
//! (`docs/benchmark.md`); all at once is the default.
//!
//! A move that fails is left to its Translation's reconcile, which makes the same two
//! requests itself (see `bindings_in_bump` in the reconcile). Both ways are idempotent: a
//! missing old binding counts as deleted, and an existing new one as created, so a restart
//! in the middle of the batch repeats it harmlessly.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use midonet_translators::model::Kind;

use super::deps::{interface_of, Interface};
use super::plan::{self, Desired};
use super::{CutoverOrder, PusherContext};
use crate::crd::{PushedResource, Translation};

type Key = ObjectRef<Translation>;

/// Requests of the cutover in flight at once.
const IN_FLIGHT: usize = 32;

/// One binding to move.
#[derive(Clone, Debug)]
pub(super) struct Move {
    /// The new version's Translation, and its UID.
    pub key: Key,
    pub uid: String,
    /// Its withheld binding.
    pub binding: Desired,
    pub interface: Interface,
    /// The old versions' bindings of the interface (Translation, binding path).
    pub old: Vec<(Key, String)>,
}

/// The bindings to move: each binding a new-version Translation asks for, has not
/// pushed and the cutover has not created yet, of an interface an old version binds.
/// `pushed` is what a Translation's status records; `old_binders` the old versions'
/// bindings of an interface.
pub(super) fn moves<'a>(
    awaiting: impl IntoIterator<Item = &'a Translation>,
    pushed: impl Fn(&Translation) -> Vec<PushedResource>,
    is_cut_over: impl Fn(&str, &str) -> bool,
    old_binders: impl Fn(&Key, &Interface) -> Vec<(Key, String)>,
) -> Vec<Move> {
    let mut out = Vec::new();
    for tr in awaiting {
        let Some(uid) = tr.uid() else { continue };
        let key = ObjectRef::from_obj(tr);
        let recorded = pushed(tr);
        for desired in plan::parse_lenient(tr.desired_resources()) {
            let Some(interface) = interface_of(&desired.resource) else {
                continue;
            };
            if recorded.iter().any(|p| p.path == desired.path) || is_cut_over(&uid, &desired.path) {
                continue;
            }
            let old = old_binders(&key, &interface);
            if old.is_empty() {
                continue;
            }
            out.push(Move {
                key: key.clone(),
                uid: uid.clone(),
                binding: desired,
                interface,
                old,
            });
        }
    }
    out
}

/// Moves every binding that waits for the cutover; answers the Translations to wake
/// (whose bindings moved, to record them; or failed to, to move them themselves).
pub(super) async fn cut_over_all(
    awaiting: &[Arc<Translation>],
    ctx: &Arc<PusherContext>,
) -> Vec<Key> {
    let todo = moves(
        awaiting.iter().map(|t| &**t),
        |t| ctx.recorded_status(t).pushed,
        |uid, path| ctx.tracker.is_cut_over(uid, path),
        |key, interface| ctx.old_binders(key, interface),
    );
    if todo.is_empty() {
        return Vec::new();
    }
    let start = Instant::now();
    let total = todo.len();
    let mut results: Vec<(Key, bool)> = Vec::with_capacity(total);
    for batch in batches(todo, ctx.config.cutover) {
        let done: Vec<(Key, bool)> = futures::stream::iter(batch)
            .map(|m| async move {
                let moved = move_binding(&m, ctx).await;
                (m.key, moved)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        results.extend(done);
    }
    let moved = results.iter().filter(|(_, ok)| *ok).count();
    tracing::info!(
        bindings = total,
        moved,
        failed = total - moved,
        took_ms = start.elapsed().as_millis() as u64,
        "version bump: bindings cut over"
    );
    let mut woken: Vec<Key> = results.into_iter().map(|(k, _)| k).collect();
    woken.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    woken.dedup();
    woken
}

/// The moves in the batches `order` makes of them, one after the other.
fn batches(moves: Vec<Move>, order: CutoverOrder) -> Vec<Vec<Move>> {
    match order {
        CutoverOrder::AllAtOnce => vec![moves],
        CutoverOrder::HostByHost => {
            let mut by_host: std::collections::BTreeMap<uuid::Uuid, Vec<Move>> =
                std::collections::BTreeMap::new();
            for m in moves {
                by_host.entry(m.interface.0).or_default().push(m);
            }
            by_host.into_values().collect()
        }
    }
}

/// Deletes the old bindings of the interface and creates the new one; on success the
/// Translation's next push records it. A failure is logged and left to that push.
async fn move_binding(m: &Move, ctx: &PusherContext) -> bool {
    for (from, path) in &m.old {
        if let Err(err) = ctx.backend.delete_path(Kind::HostInterfacePort, path).await {
            tracing::warn!(translation = %m.key, from = %from, backend_path = %path, error = %err, "cutover: cannot delete the old binding; its Translation retries");
            return false;
        }
        ctx.deps.taken_over(&m.interface, from);
        ctx.metrics.bindings_cut_over.inc();
    }
    if let Err(err) = ctx.backend.apply(&m.binding.resource).await {
        tracing::warn!(translation = %m.key, host = %m.interface.0, interface = %m.interface.1, backend_path = %m.binding.path, error = %err, "cutover: cannot create the new binding; its Translation retries");
        return false;
    }
    ctx.tracker.cut_over(&m.uid, &m.binding.path);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{TranslationResource, TranslationSpec};
    use uuid::Uuid;

    const HOST: &str = "5a2b1c7e-0000-4000-8000-000000000001";
    const NEW_PORT: &str = "5a2b1c7e-0000-4000-8000-0000000000a2";

    fn binding_entry(port: &str) -> TranslationResource {
        TranslationResource {
            kind: "HostInterfacePort".into(),
            parent: HOST.into(),
            body: serde_json::json!({"hostId": HOST, "portId": port, "interfaceName": "veth-a"})
                .to_string(),
        }
    }

    fn translation(name: &str, uid: &str, resources: Vec<TranslationResource>) -> Translation {
        let mut tr = Translation::new(name, "ns", TranslationSpec { resources });
        tr.metadata.uid = Some(uid.into());
        tr
    }

    fn old_key() -> Key {
        ObjectRef::new("pod.1.a").within("ns")
    }

    fn old_binder(_: &Key, i: &Interface) -> Vec<(Key, String)> {
        if i.1 == "veth-a" {
            vec![(old_key(), format!("/hosts/{HOST}/ports/old"))]
        } else {
            Vec::new()
        }
    }

    #[test]
    fn a_binding_the_old_version_holds_is_moved() {
        let tr = translation("pod.2.a", "u2", vec![binding_entry(NEW_PORT)]);
        let moves = moves([&tr], |_| Vec::new(), |_, _| false, old_binder);
        assert_eq!(moves.len(), 1);
        let m = &moves[0];
        assert_eq!(m.uid, "u2");
        assert_eq!(
            m.interface,
            (Uuid::parse_str(HOST).unwrap(), "veth-a".into())
        );
        assert_eq!(m.old, vec![(old_key(), format!("/hosts/{HOST}/ports/old"))]);
        assert_eq!(m.binding.path, format!("/hosts/{HOST}/ports/{NEW_PORT}"));
    }

    #[test]
    fn host_by_host_makes_one_batch_per_host_all_at_once_one() {
        let tr = |name: &str, host: &str| {
            let mut entry = binding_entry(NEW_PORT);
            entry.parent = host.into();
            entry.body = entry.body.replace(HOST, host);
            translation(name, name, vec![entry])
        };
        let other = "5a2b1c7e-0000-4000-8000-000000000002";
        let trs = [tr("a", HOST), tr("b", other), tr("c", HOST)];
        let all = moves(&trs, |_| Vec::new(), |_, _| false, old_binder);
        assert_eq!(all.len(), 3);
        let names = |b: &Vec<Move>| -> Vec<String> { b.iter().map(|m| m.uid.clone()).collect() };
        let at_once = batches(all.clone(), CutoverOrder::AllAtOnce);
        assert_eq!(
            at_once.iter().map(names).collect::<Vec<_>>(),
            vec![vec!["a", "b", "c"]]
        );
        let by_host = batches(all, CutoverOrder::HostByHost);
        assert_eq!(
            by_host.iter().map(names).collect::<Vec<_>>(),
            vec![vec!["a", "c"], vec!["b"]]
        );
    }

    #[test]
    fn nothing_moves_that_is_pushed_cut_over_or_free() {
        let tr = translation("pod.2.a", "u2", vec![binding_entry(NEW_PORT)]);
        let path = format!("/hosts/{HOST}/ports/{NEW_PORT}");
        let recorded = vec![PushedResource {
            kind: "HostInterfacePort".into(),
            path: path.clone(),
            body_hash: String::new(),
        }];
        // Recorded by the Translation's status.
        assert!(moves([&tr], |_| recorded.clone(), |_, _| false, old_binder).is_empty());
        // Created by an earlier batch, not recorded yet.
        assert!(moves(
            [&tr],
            |_| Vec::new(),
            |u, p| u == "u2" && p == path,
            old_binder
        )
        .is_empty());
        // No old version binds the interface: the Translation's own push creates it.
        assert!(moves([&tr], |_| Vec::new(), |_, _| false, |_, _| Vec::new()).is_empty());
    }
}
