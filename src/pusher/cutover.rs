//! A version bump's cutover: every withheld binding moved in one batch.
//!
//! Between the first binding moved to the new version and the last one, a flow between a
//! pod already on the new topology and one still on the old has no path: the two versions'
//! routers do not know each other's ports. The width of that window is what a bump's
//! interruption costs, so the cutover does nothing else: the rollout loop frees
//! every interface and creates its new binding, with many requests in flight, and only
//! afterwards do the Translations' own reconciles record what was done (one status write
//! each, see [`super::tracked::Tracker::cut_over`]). Nor does the rest of the pusher:
//! its reconciles are paused for the batch ([`crate::workers::Pause`]). Those in flight
//! finish first (waited for up to [`DRAIN`]), and those that come due meanwhile (a
//! resync's, a re-list's: thousands at scale, each a plan computed on the process's
//! cores) wait until the batch is done.
//!
//! An interface is freed by deleting the old version's bridge its old port is on
//! ([`OldBridge`]): MidoNet's cascade takes the bridge's ports and their bindings with it,
//! so one DELETE frees every interface of a node instead of one DELETE per binding. The
//! bridge was going anyway (the old version's retirement deletes it, first of all its
//! Translation's resources); it goes earlier, and its Translation's deletion does not send
//! that DELETE again ([`super::tracked::Tracker::deleted_by_cutover`]). A bridge's pods lose
//! the old topology with it, which is what the cutover does to them anyway. An old port
//! that is not on such a bridge (its bridge is another version's, or a global one) has its
//! binding deleted on its own.
//!
//! [`CutoverOrder::HostByHost`] moves one host's bindings after another's instead: the
//! pods of one host then reach each other throughout, but two hosts' pods are apart from
//! the first host's batch to the second's. All at once keeps the window in which any two
//! pods may be apart shortest without a path between the versions.
//!
//! [`CutoverOrder::Linked`] makes that path first ([`super::link`]): it writes the link's
//! Translation, pushes the link and the mirror routes, then goes host by host, each
//! host's batch beginning by deleting the new router's mirrors of that host's routes
//! (alongside its old bridge). Two pods are then apart only during one of their hosts'
//! batches, however many hosts there are. The new router's mirrors are the cutover's
//! alone: no Translation claims them (a Translation would push them again once the cutover
//! had deleted them), so a pusher that restarts in the middle deletes the mirrors of the
//! hosts already moved before it goes on; the link's Translation claims the rest, and
//! deleting its port on the new router takes any mirror left with it. Versions that
//! cannot be linked ([`super::link::Unlinkable`]) are cut over all at once, with a
//! warning. The longest batch is the metric `rollout_cutover_longest_batch_seconds`.
//!
//! A move that fails is left to its Translation's reconcile, which deletes the old binding
//! and creates the new one itself (see `bindings_in_bump` in the reconcile). Every step is
//! idempotent: a missing old bridge or binding counts as deleted, and an existing new
//! binding as created, so a restart in the middle of the batch repeats it harmlessly.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use midonet_translators::model::{Kind, Referent, Resource};
use midonet_translators::DesiredTranslation;
use uuid::Uuid;

use super::deps::{interface_of, Interface};
use super::link::{self, LinkPlan, NodeRoutes};
use super::steps::{self, Desired};
use super::{CutoverOrder, PusherContext, PusherWorkers};
use crate::crd::{PushedResource, Translation};
use crate::scaffold::QueuedName;
use crate::workers::Pause;

type Key = ObjectRef<Translation>;

/// Requests of the cutover in flight at once.
const IN_FLIGHT: usize = 32;

/// The longest the cutover waits for the reconciles in flight to finish before it begins
/// all the same (a reconcile's requests time out well before).
const DRAIN: Duration = Duration::from_secs(30);

/// One binding to move.
#[derive(Clone, Debug)]
pub(super) struct Move {
    /// The new version's Translation, and its UID.
    pub key: Key,
    pub uid: String,
    /// Its withheld binding.
    pub binding: Desired,
    pub interface: Interface,
    /// The old versions' bindings of the interface.
    pub old: Vec<OldBinding>,
}

/// An old version's binding of an interface a move frees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OldBinding {
    /// The old Translation that binds it, and its binding's path.
    pub from: Key,
    pub path: String,
    /// The old version's bridge its port is on, when deleting that frees it.
    pub bridge: Option<OldBridge>,
}

/// An old version's bridge the cutover deletes, and the old Translation providing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OldBridge {
    pub id: Uuid,
    pub path: String,
    pub provider: Key,
}

/// The bridge a port of `from` (the port its binding at `binding_path` binds) is on, if
/// deleting it frees the binding for a cutover: `from`'s desired resources (`resources`)
/// hold that port, and `provider` (who provides a referent, and whether that Translation
/// is of an old version and not global) says an old version's Translation provides the
/// bridge.
pub(crate) fn bridge_of_binding(
    resources: &[Desired],
    binding_path: &str,
    provider: impl Fn(&Referent) -> Option<(Key, String)>,
    old_and_not_global: impl Fn(&Key) -> bool,
) -> Option<OldBridge> {
    let port_id = resources.iter().find_map(|d| match &d.resource {
        Resource::HostInterfacePort(b) if d.path == binding_path => Some(b.port_id),
        _ => None,
    })?;
    let bridge = resources.iter().find_map(|d| match &d.resource {
        Resource::Port(_) if d.resource.own_id() == Some(port_id) => d.resource.parent(),
        _ => None,
    })?;
    let (key, path) = provider(&Referent::Object(bridge))?;
    (path.starts_with("/bridges/") && old_and_not_global(&key)).then_some(OldBridge {
        id: bridge,
        path,
        provider: key,
    })
}

/// The bindings to move: each binding a new-version Translation asks for, has not
/// pushed and the cutover has not created yet, of an interface an old version binds.
/// `pushed` is what a Translation's status records; `old_binders` the old versions'
/// bindings of an interface, each with the bridge that frees it ([`bridge_of_binding`]).
pub(super) fn moves<'a>(
    awaiting: impl IntoIterator<Item = &'a Translation>,
    pushed: impl Fn(&Translation) -> Vec<PushedResource>,
    is_cut_over: impl Fn(&str, &str) -> bool,
    old_binders: impl Fn(&Key, &Interface) -> Vec<OldBinding>,
) -> Vec<Move> {
    let mut out = Vec::new();
    for tr in awaiting {
        let Some(uid) = tr.uid() else { continue };
        let key = ObjectRef::from_obj(tr);
        let recorded = pushed(tr);
        for desired in steps::parse_lenient(tr.desired_resources()) {
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

/// Moves every binding that waits for the cutover, with the pusher's reconciles (their
/// `workers`) paused; answers the Translations to wake (whose bindings moved, to record
/// them; or failed to, to move them themselves). `linked` is what this pusher did to link
/// the versions in this phase (see [`super::link`]).
pub(super) async fn cut_over_all(
    awaiting: &[Arc<Translation>],
    ctx: &Arc<PusherContext>,
    workers: Option<&Arc<PusherWorkers>>,
    linked: &mut LinkState,
) -> Vec<Key> {
    let pending = || {
        moves(
            awaiting.iter().map(|t| &**t),
            |t| ctx.recorded_status(t).pushed,
            |uid, path| ctx.tracker.is_cut_over(uid, path),
            |key, interface| old_bindings(ctx, key, interface),
        )
    };
    if pending().is_empty() {
        return Vec::new();
    }
    let _paused = pause_reconciles(workers).await;
    // What the reconciles that finished meanwhile pushed is in their recorded status.
    let todo = pending();
    if todo.is_empty() {
        return Vec::new();
    }
    let start = Instant::now();
    let total = todo.len();
    let (order, link) = match ctx.config.cutover {
        CutoverOrder::Linked => match link_versions(ctx, &todo, linked).await {
            Some(link) => (CutoverOrder::HostByHost, Some(link)),
            None => (CutoverOrder::AllAtOnce, None),
        },
        order => (order, None),
    };
    let mut results: Vec<(Key, bool)> = Vec::with_capacity(total);
    let mut bridges_deleted = 0;
    let mut longest = Duration::ZERO;
    for batch in batches(todo, order) {
        let batch_start = Instant::now();
        let (freed, ()) = futures::join!(
            delete_bridges(&batch, ctx),
            unlink_host(ctx, link.as_ref(), &batch, &mut linked.unlinked)
        );
        bridges_deleted += freed.len();
        let freed = &freed;
        let done: Vec<(Key, bool)> = futures::stream::iter(batch)
            .map(|m| async move {
                let moved = move_binding(&m, freed, ctx).await;
                (m.key, moved)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        results.extend(done);
        longest = longest.max(batch_start.elapsed());
    }
    ctx.metrics.cutover_longest_batch.set(longest.as_secs_f64());
    let moved = results.iter().filter(|(_, ok)| *ok).count();
    tracing::info!(
        bindings = total,
        moved,
        failed = total - moved,
        bridges_deleted,
        linked = link.is_some(),
        longest_batch_ms = longest.as_millis() as u64,
        took_ms = start.elapsed().as_millis() as u64,
        "version bump: bindings cut over"
    );
    let mut woken: Vec<Key> = results.into_iter().map(|(k, _)| k).collect();
    woken.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    woken.dedup();
    woken
}

/// What a pusher did to link the versions during one cutover phase.
#[derive(Debug, Default)]
pub(super) struct LinkState {
    /// The link's Translation as last written, and its UID.
    written: Option<(DesiredTranslation, String)>,
    /// The link's resources pushed.
    pushed: HashSet<Uuid>,
    /// The new router's mirrors deleted (or found gone): never pushed again in the phase.
    unlinked: HashSet<Uuid>,
}

/// Links the old and the new version for the moves `todo` ([`super::link`]): writes the
/// link's Translation, pushes the link and the new router's mirrors of the hosts `todo`
/// moves, and, if another pusher wrote the link's Translation first (a restart in the
/// middle of the cutover), deletes those of the hosts it no longer moves; what `state`
/// says was done is not done again. `None` when the versions cannot be linked or
/// the Translation cannot be written: the cutover then moves every binding at once.
async fn link_versions(
    ctx: &PusherContext,
    todo: &[Move],
    state: &mut LinkState,
) -> Option<LinkPlan> {
    let pending: BTreeSet<Uuid> = todo.iter().map(|m| m.interface.0).collect();
    let (old, new) = node_routes_by_side(ctx);
    let all_new: BTreeSet<Uuid> = new.iter().map(|n| n.host).collect();
    let plan = match link::plan(&old, &new, &all_new) {
        Ok(plan) => plan,
        Err(err) => {
            tracing::warn!(error = %err, "version bump: cannot link the two versions; cutting over all at once");
            return None;
        }
    };
    let desired = plan.translation(&ctx.config.version);
    // A link's Translation this pusher has not written: another pusher's (a restart in the
    // middle of the cutover), which may have pushed mirrors of hosts moved since.
    let resumed = state.written.is_none()
        && ctx
            .deps
            .store()
            .get(&ObjectRef::new(&desired.name).within(&desired.namespace))
            .is_some();
    let uid = match &state.written {
        Some((written, uid)) if *written == desired => uid.clone(),
        _ => match write_link(ctx, &desired).await {
            Ok(uid) => {
                state.written = Some((desired, uid.clone()));
                uid
            }
            Err(err) => {
                tracing::warn!(translation = %desired.name, error = %err, "version bump: cannot write the link's Translation; cutting over all at once");
                return None;
            }
        },
    };
    if resumed {
        let done_hosts: Vec<Uuid> = all_new.difference(&pending).copied().collect();
        unlink_hosts(ctx, &plan, &done_hosts, &mut state.unlinked).await;
    }
    let to_push: Vec<&Resource> = plan
        .resources
        .iter()
        .filter(|r| {
            r.own_id().is_none_or(|id| {
                !state.pushed.contains(&id)
                    && !state.unlinked.contains(&id)
                    && plan
                        .new_mirror_host(id)
                        .is_none_or(|host| pending.contains(&host))
            })
        })
        .collect();
    push_link(ctx, &plan, &to_push, &uid, &mut state.pushed).await;
    Some(plan)
}

/// Pushes `to_push`, part of `plan`: the ports and their link first, one after the other,
/// then the routes through them, a few at a time; adds what is there to `pushed`. What
/// the link's Translation (UID `uid`) claims is recorded for its next push; the new
/// router's mirrors are the cutover's alone.
async fn push_link(
    ctx: &PusherContext,
    plan: &LinkPlan,
    to_push: &[&Resource],
    uid: &str,
    pushed: &mut HashSet<Uuid>,
) {
    let started = Instant::now();
    let (link, routes): (Vec<&Resource>, Vec<&Resource>) = to_push
        .iter()
        .partition(|r| !matches!(r, Resource::Route(_)));
    let record = |r: &Resource| {
        r.own_id()
            .is_none_or(|id| plan.new_mirror_host(id).is_none())
            .then_some(uid)
    };
    let mut done = Vec::new();
    for r in link {
        done.push(push_link_part(ctx, r, record(r)).await);
    }
    if done.iter().all(Result::is_ok) {
        let routes: Vec<(Resource, Option<String>)> = routes
            .into_iter()
            .map(|r| (r.clone(), record(r).map(str::to_string)))
            .collect();
        done.extend(
            futures::stream::iter(routes)
                .map(|(r, uid)| async move { push_link_part(ctx, &r, uid.as_deref()).await })
                .buffer_unordered(IN_FLIGHT)
                .collect::<Vec<_>>()
                .await,
        );
    }
    let failed = to_push.len() - done.iter().filter(|p| p.is_ok()).count();
    pushed.extend(done.into_iter().flatten().flatten());
    tracing::info!(
        pushed = to_push.len(),
        failed,
        took_ms = started.elapsed().as_millis() as u64,
        "version bump: the two versions' cluster routers linked"
    );
}

/// Pushes `r`, part of the link; answers whether it is there, with its ID if it has one.
/// With `record`, the UID of the link's Translation, whose next push then records it.
async fn push_link_part(
    ctx: &PusherContext,
    r: &Resource,
    record: Option<&str>,
) -> Result<Option<Uuid>, ()> {
    match ctx.backend.apply(r).await {
        Ok(()) => {
            if let Some(uid) = record {
                ctx.tracker.cut_over(uid, &r.item_path());
            }
            Ok(r.own_id())
        }
        Err(err) => {
            tracing::warn!(backend_path = %r.item_path(), error = %err, "version bump: cannot push part of the link; pods on the two versions may be apart longer");
            Err(())
        }
    }
}

/// The node routes of the old versions' and of the current version's Translations.
fn node_routes_by_side(ctx: &PusherContext) -> (Vec<NodeRoutes>, Vec<NodeRoutes>) {
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for t in ctx.deps.store().state() {
        if t.metadata.deletion_timestamp.is_some() || t.has_label(link::LINK_LABEL) {
            continue;
        }
        let Some(routes) = link::node_routes(&steps::parse_lenient(t.desired_resources())) else {
            continue;
        };
        if ctx.rollout.is_old(&t) {
            old.push(routes);
        } else {
            new.push(routes);
        }
    }
    (old, new)
}

/// Writes the link's Translation (server-side apply, as the translators write theirs);
/// answers its UID.
async fn write_link(ctx: &PusherContext, desired: &DesiredTranslation) -> Result<String, String> {
    let api: Api<Translation> = Api::namespaced(ctx.kube.clone(), &desired.namespace);
    let object = crate::translate::translation_object(desired, None);
    let params = PatchParams::apply(crate::translate::FIELD_MANAGER).force();
    let written = api
        .patch(&desired.name, &params, &Patch::Apply(&object))
        .await
        .map_err(|e| e.to_string())?;
    written
        .uid()
        .ok_or_else(|| "the apiserver answered it without a UID".to_string())
}

/// Before a host's batch: deletes the new router's mirrors of its routes, so that the new
/// router routes to the node's new bridge again.
async fn unlink_host(
    ctx: &PusherContext,
    link: Option<&LinkPlan>,
    batch: &[Move],
    unlinked: &mut HashSet<Uuid>,
) {
    let (Some(plan), Some(first)) = (link, batch.first()) else {
        return;
    };
    unlink_hosts(ctx, plan, &[first.interface.0], unlinked).await;
}

/// Deletes the new router's mirrors of `hosts`' routes not in `unlinked`; adds those
/// deleted (or already gone) to it.
async fn unlink_hosts(
    ctx: &PusherContext,
    plan: &LinkPlan,
    hosts: &[Uuid],
    unlinked: &mut HashSet<Uuid>,
) {
    let routes: Vec<(Uuid, String)> = hosts
        .iter()
        .filter_map(|h| plan.new_mirrors.get(h))
        .flatten()
        .filter(|r| !unlinked.contains(&r.id))
        .map(|r| (r.id, Resource::from(r.clone()).item_path()))
        .collect();
    let gone: Vec<Uuid> = futures::stream::iter(routes)
        .map(|(id, path)| async move {
            match ctx.backend.delete_path(Kind::Route, &path).await {
                Ok(()) => Some(id),
                Err(err) => {
                    tracing::warn!(backend_path = %path, error = %err, "version bump: cannot delete a mirror route of the link; the next pass retries");
                    None
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(|id| async move { id })
        .collect()
        .await;
    unlinked.extend(gone);
}

/// Pauses the reconciles of `workers` and waits for those in flight, up to [`DRAIN`].
async fn pause_reconciles(
    workers: Option<&Arc<PusherWorkers>>,
) -> Option<Pause<QueuedName<Translation>>> {
    let pause = workers?.pause();
    let start = Instant::now();
    if tokio::time::timeout(DRAIN, pause.idle()).await.is_err() {
        tracing::warn!(
            waited_s = DRAIN.as_secs(),
            "version bump: reconciles still in flight; cutting over beside them"
        );
    }
    tracing::debug!(
        waited_ms = start.elapsed().as_millis() as u64,
        "version bump: the pusher's reconciles paused for the cutover"
    );
    Some(pause)
}

/// The old versions' bindings of `interface` other than `key`'s, each with the old bridge
/// whose deletion frees it.
fn old_bindings(ctx: &PusherContext, key: &Key, interface: &Interface) -> Vec<OldBinding> {
    ctx.old_binders(key, interface)
        .into_iter()
        .map(|(from, path)| {
            let bridge = ctx.deps.store().get(&from).and_then(|old| {
                bridge_of_binding(
                    &steps::parse_lenient(old.desired_resources()),
                    &path,
                    |r| ctx.deps.provider_of(r),
                    |k| {
                        ctx.deps.store().get(k).is_some_and(|t| {
                            ctx.rollout.is_old(&t)
                                && !t.has_label(midonet_translators::meta::GLOBAL_LABEL)
                        })
                    },
                )
            });
            OldBinding { from, path, bridge }
        })
        .collect()
}

/// Deletes the old bridges of `batch`'s moves; answers those deleted (or already gone).
/// The Translation providing each remembers it is gone, and those built on it that
/// MidoNet's cascade took their resources with it.
async fn delete_bridges(batch: &[Move], ctx: &PusherContext) -> HashSet<Uuid> {
    let bridges: BTreeMap<Uuid, OldBridge> = batch
        .iter()
        .flat_map(|m| m.old.iter().filter_map(|o| o.bridge.clone()))
        .map(|b| (b.id, b))
        .collect();
    futures::stream::iter(bridges.into_values())
        .map(|b| async move {
            match ctx.backend.delete_path(Kind::Bridge, &b.path).await {
                Ok(()) => {
                    if let Some(uid) = ctx.deps.store().get(&b.provider).and_then(|t| t.uid()) {
                        ctx.tracker.deleted_by_cutover(&uid, &b.path);
                    }
                    ctx.deps
                        .note_cascade(&HashSet::from([Referent::Object(b.id)]), &b.provider);
                    Some(b.id)
                }
                Err(err) => {
                    tracing::warn!(translation = %b.provider, backend_path = %b.path, error = %err, "cutover: cannot delete the old bridge; its bindings are deleted one by one");
                    None
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(|id| async move { id })
        .collect()
        .await
}

/// The moves in the batches `order` makes of them, one after the other.
fn batches(moves: Vec<Move>, order: CutoverOrder) -> Vec<Vec<Move>> {
    match order {
        CutoverOrder::AllAtOnce => vec![moves],
        CutoverOrder::HostByHost | CutoverOrder::Linked => {
            let mut by_host: BTreeMap<Uuid, Vec<Move>> = BTreeMap::new();
            for m in moves {
                by_host.entry(m.interface.0).or_default().push(m);
            }
            by_host.into_values().collect()
        }
    }
}

/// Frees the interface (its old bindings went with their bridge if it is in `freed`, or
/// are deleted one by one) and creates the new binding; on success the Translation's next
/// push records it. A failure is logged and left to that push.
async fn move_binding(m: &Move, freed: &HashSet<Uuid>, ctx: &PusherContext) -> bool {
    for old in &m.old {
        let with_bridge = old.bridge.as_ref().is_some_and(|b| freed.contains(&b.id));
        if !with_bridge {
            if let Err(err) = ctx
                .backend
                .delete_path(Kind::HostInterfacePort, &old.path)
                .await
            {
                tracing::warn!(translation = %m.key, from = %old.from, backend_path = %old.path, error = %err, "cutover: cannot delete the old binding; its Translation retries");
                return false;
            }
        }
        ctx.deps.taken_over(&m.interface, &old.from);
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

    fn old_binding() -> OldBinding {
        OldBinding {
            from: old_key(),
            path: format!("/hosts/{HOST}/ports/old"),
            bridge: None,
        }
    }

    fn old_binder(_: &Key, i: &Interface) -> Vec<OldBinding> {
        if i.1 == "veth-a" {
            vec![old_binding()]
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
        assert_eq!(m.old, vec![old_binding()]);
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

    const OLD_BRIDGE: &str = "5a2b1c7e-0000-4000-8000-0000000000b1";
    const OLD_PORT: &str = "5a2b1c7e-0000-4000-8000-0000000000a1";

    /// An old pod Translation: its port on the old node bridge, and the port's binding.
    fn old_pod_resources(bridge: &str) -> Vec<Desired> {
        let entries = vec![
            TranslationResource {
                kind: "Port".into(),
                parent: bridge.into(),
                body: serde_json::json!({"id": OLD_PORT, "type": "Bridge"}).to_string(),
            },
            binding_entry(OLD_PORT),
        ];
        steps::parse_lenient(&entries)
    }

    fn node_key() -> Key {
        ObjectRef::new("node.1.n1")
    }

    fn provider(r: &Referent) -> Option<(Key, String)> {
        (*r == Referent::Object(Uuid::parse_str(OLD_BRIDGE).unwrap()))
            .then(|| (node_key(), format!("/bridges/{OLD_BRIDGE}")))
    }

    #[test]
    fn an_old_binding_is_freed_by_deleting_the_old_bridge_its_port_is_on() {
        let resources = old_pod_resources(OLD_BRIDGE);
        let binding = format!("/hosts/{HOST}/ports/{OLD_PORT}");
        let bridge = bridge_of_binding(&resources, &binding, provider, |k| *k == node_key());
        assert_eq!(
            bridge,
            Some(OldBridge {
                id: Uuid::parse_str(OLD_BRIDGE).unwrap(),
                path: format!("/bridges/{OLD_BRIDGE}"),
                provider: node_key(),
            })
        );
    }

    #[test]
    fn a_bridge_of_the_new_version_a_global_one_or_nobodys_is_left_alone() {
        let resources = old_pod_resources(OLD_BRIDGE);
        let binding = format!("/hosts/{HOST}/ports/{OLD_PORT}");
        // The provider is not an old version's (or is global): its binding goes alone.
        assert_eq!(
            bridge_of_binding(&resources, &binding, provider, |_| false),
            None
        );
        // Nobody provides the bridge.
        assert_eq!(
            bridge_of_binding(&resources, &binding, |_| None, |_| true),
            None
        );
        // The binding is not the Translation's.
        assert_eq!(
            bridge_of_binding(&resources, "/hosts/x/ports/y", provider, |_| true),
            None
        );
        // A router port: deleting its device would take far more than a node's pods.
        let router_port =
            |r: &Referent| provider(r).map(|(k, _)| (k, format!("/routers/{OLD_BRIDGE}")));
        assert_eq!(
            bridge_of_binding(&resources, &binding, router_port, |_| true),
            None
        );
    }
}
