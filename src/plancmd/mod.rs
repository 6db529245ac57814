//! `plan`: what the controllers would do now, or after a Translation version bump, without
//! doing any of it.
//!
//! The decision is pure ([`desired`] and [`plan`]): from the cluster's objects it computes the
//! Translations the translators would write for the planned version (the translators the
//! runner runs, chosen by the same [`for_each_translator`], each object translated by the
//! same [`translate_object`] and built into a Translation object the way the runner builds it),
//! compares them with the Translations that exist, and counts what follows:
//!
//! - the Translations created, updated and deleted, by kind (the first segment of the name)
//!   and by [`Reason`];
//! - the backend requests the pusher sends for them: creates and updates from
//!   [`plan_apply`](crate::pusher::steps::plan_apply) against what each Translation's status
//!   records as pushed; deletions from [`plan_delete`](crate::pusher::steps::plan_delete), so
//!   that what MidoNet's cascades delete (a bridge's ports, a chain's rules, a port's binding)
//!   costs nothing, counting as taken by another deletion what a Translation deleted in the
//!   same plan provides; a bump's cutover frees the interfaces by deleting the old node
//!   bridges their old ports are on (one DELETE per bridge, which the retirement then does
//!   not send; an old port on no such bridge has its binding deleted on its own), see
//!   [`crate::pusher::cutover`];
//! - the host interfaces whose binding moves to another port;
//! - the duration those requests take at a given request rate.
//!
//! Only the Translations of the enabled controllers are planned ([`Scope`]); every
//! Translation of another version goes, whatever its kind, as the pusher's retirement of a
//! bump deletes them all. The original Go controller's Translations are of another version
//! ([`Translation::version`]): a migration from it is planned as a bump. The I/O shell
//! ([`cli`]) lists the objects once and writes nothing.

pub mod cli;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use midonet_dataplane::Cluster;
use midonet_translators::meta::{GLOBAL_LABEL, VERSION_LABEL};
use midonet_translators::model::{Referent, Resource};
use midonet_translators::policy::{PolicyCluster, GROUP_LABEL};
use midonet_translators::{DesiredTranslation, TranslatorConfig};
use serde::Serialize;

use crate::config::Controller;
use crate::crd::{PushedResource, Translation, TranslationKey};
use crate::pusher::rollout::owner_of;
use crate::pusher::steps::{
    parse_all, parse_lenient, plan_apply, plan_delete, ApplyPlan, Desired, Step,
};
use crate::pusher::{cutover, link, CutoverOrder};
use crate::translate::dispatch::{for_each_translator, translate_object, Translators};
use crate::translate::pods::CachedPod;
use crate::translate::slices::EndpointsSource;
use crate::translate::{
    owner_reference, translation_object, up_to_date, Dependency, TranslatorKind,
};

/// Backend requests per second the estimate assumes unless told otherwise: the rate the
/// benchmark's version bump reaches (`docs/benchmark.md` gives the current figure and the
/// command that measures it), so that the estimate is of this implementation, not a guess;
/// `--request-rate` gives a cluster's own.
pub const DEFAULT_REQUEST_RATE: f64 = 124.0;

/// Why a Translation is created, updated or deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// It exists only in another version, or is replaced by the planned version's.
    VersionBump,
    /// Same name, other resources (or labels, owner) than its object now asks for.
    ChangedObject,
    /// No object wants it any more.
    Stale,
    /// Its object has no Translation yet.
    NewObject,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::VersionBump => "version-bump",
            Reason::ChangedObject => "changed-object",
            Reason::Stale => "stale",
            Reason::NewObject => "new-object",
        }
    }
}

/// Which controllers are enabled: what `plan` plans for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enabled {
    pub node: bool,
    pub pod: bool,
    pub service: bool,
    pub endpoints: bool,
    pub network_policy: bool,
}

impl Enabled {
    pub const ALL: Enabled = Enabled {
        node: true,
        pod: true,
        service: true,
        endpoints: true,
        network_policy: true,
    };

    pub fn any(&self) -> bool {
        self.node || self.pod || self.service || self.endpoints || self.network_policy
    }

    /// The enabled controllers, in [`Controller::ALL`]'s order.
    pub fn controllers(&self) -> Vec<Controller> {
        Controller::ALL
            .into_iter()
            .filter(|c| match c {
                Controller::Node => self.node,
                Controller::Pod => self.pod,
                Controller::Service => self.service,
                Controller::Endpoints => self.endpoints,
                Controller::NetworkPolicy => self.network_policy,
                Controller::Pusher | Controller::NodeAnnotator | Controller::LbIpam => false,
            })
            .collect()
    }
}

/// The Translations of the planned version's own (current) kinds that the enabled
/// controllers manage, and so prune when no object wants them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Kinds of owner objects (`Pod`, `Service`, …).
    pub owner_kinds: BTreeSet<String>,
    pub globals: bool,
    pub groups: bool,
}

impl Scope {
    pub fn manages(&self, tr: &Translation) -> bool {
        if tr.has_label(GLOBAL_LABEL) {
            return self.globals;
        }
        if tr.has_label(GROUP_LABEL) {
            return self.groups;
        }
        tr.owner_references()
            .first()
            .is_some_and(|o| self.owner_kinds.contains(&o.kind))
    }
}

fn live<K: kube::Resource<DynamicType = ()>>(obj: &K) -> bool {
    obj.meta().deletion_timestamp.is_none() && owner_reference(obj).is_some()
}

fn built<K: kube::Resource<DynamicType = ()>>(
    out: &mut Vec<Translation>,
    obj: &K,
    desired: Vec<DesiredTranslation>,
) {
    let owner = owner_reference(obj);
    out.extend(
        desired
            .iter()
            .map(|d| translation_object(d, owner.as_ref())),
    );
}

/// The Translations the enabled translators write for `cluster` at `cfg.version`, as the
/// runner builds them (owner reference, owner-UID label, finalizer), and the scope they are
/// pruned in. Endpoints come from `cluster.endpoint_slices` when it is `Some` (the runner's
/// Service controller then translates them), else from `cluster.endpoints`.
pub fn desired(
    cfg: &TranslatorConfig,
    cluster: &Cluster,
    enabled: &Enabled,
) -> (Vec<Translation>, Scope) {
    let mut out = Vec::new();
    let mut scope = Scope::default();
    if !enabled.any() {
        return (out, scope);
    }
    scope.globals = true;
    out.extend(
        midonet_translators::global(cfg)
            .iter()
            .map(|d| translation_object(d, None)),
    );
    // Without the endpoints controller the Service controller translates Services only.
    let source = match &cluster.endpoint_slices {
        Some(_) if enabled.endpoints => EndpointsSource::SlicesV1,
        _ => EndpointsSource::Endpoints,
    };
    if enabled.endpoints {
        // With slices the Service translator takes the Endpoints' Translations over.
        scope.owner_kinds.insert("Endpoints".into());
    }
    let mut planned = Planned {
        cfg,
        lists: Lists::new(cluster),
        out,
        scope,
    };
    for_each_translator(&enabled.controllers(), source, &mut planned);
    (planned.out, planned.scope)
}

/// The cluster's objects by type, as the runner's caches hold them: Pods as
/// [`CachedPod`]s.
struct Lists<'a> {
    cluster: &'a Cluster,
    pods: Vec<CachedPod>,
}

impl<'a> Lists<'a> {
    fn new(cluster: &'a Cluster) -> Self {
        let pods = cluster
            .pods
            .iter()
            .filter_map(|pod| match CachedPod::cached(pod) {
                Ok(cached) => Some(cached),
                Err(err) => {
                    tracing::error!(pod = %pod.name_any(), error = %err,
                        "the Pod cache could not hold this pod; it is not planned");
                    None
                }
            })
            .collect();
        Lists { cluster, pods }
    }

    /// The objects of type `T` the cluster lists, if it lists that type.
    fn listed<T: 'static>(&self) -> Option<&[T]> {
        let cluster = self.cluster;
        let slices: Option<&dyn Any> = cluster.endpoint_slices.as_ref().map(|s| s as &dyn Any);
        let lists: [Option<&dyn Any>; 7] = [
            Some(&cluster.nodes),
            Some(&self.pods),
            Some(&cluster.services),
            Some(&cluster.endpoints),
            Some(&cluster.namespaces),
            Some(&cluster.network_policies),
            slices,
        ];
        lists
            .into_iter()
            .flatten()
            .find_map(|l| l.downcast_ref::<Vec<T>>())
            .map(Vec::as_slice)
    }
}

/// A cache of the listed objects of type `T`, as the runner's informer holds them.
fn cached<T>(objects: &[T]) -> Store<T>
where
    T: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    for obj in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(obj.clone()));
    }
    store
}

/// Translates the cluster's objects with each translator it is given.
struct Planned<'a> {
    cfg: &'a TranslatorConfig,
    lists: Lists<'a>,
    out: Vec<Translation>,
    scope: Scope,
}

impl Translators for Planned<'_> {
    fn kind<K: TranslatorKind>(&mut self) {
        self.scope
            .owner_kinds
            .insert(<K::Object as kube::Resource>::kind(&()).into_owned());
        let objects = self.lists.listed::<K::Object>();
        let dependencies = if K::Dependency::WATCHED {
            self.lists.listed::<K::Dependency>().map(cached)
        } else {
            None
        };
        // A kind the cluster does not list would be planned as empty; the tests of
        // `desired` cover every translator.
        if objects.is_none() || (K::Dependency::WATCHED && dependencies.is_none()) {
            tracing::error!(
                kind = K::NAME,
                "plan does not list the objects this kind reads"
            );
        }
        for obj in objects.unwrap_or_default().iter().filter(|o| live(*o)) {
            let translated = translate_object::<K>(self.cfg, obj, dependencies.as_ref());
            built(&mut self.out, obj, translated.translations);
        }
    }

    fn network_policy(&mut self) {
        let (cfg, cluster, out) = (self.cfg, self.lists.cluster, &mut self.out);
        self.scope.owner_kinds.insert("NetworkPolicy".into());
        self.scope.groups = true;
        let pc = PolicyCluster::new(cluster.namespaces.iter(), cluster.pods.iter());
        for np in cluster.network_policies.iter().filter(|n| live(*n)) {
            built(
                out,
                np,
                midonet_translators::network_policy(cfg, np, &pc).translations,
            );
        }
        // As the group pass: no groups for policies of a terminating namespace.
        let terminating: HashSet<String> = cluster
            .namespaces
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_some())
            .map(|ns| ns.name_any())
            .collect();
        let policies = cluster
            .network_policies
            .iter()
            .filter(|np| np.metadata.deletion_timestamp.is_none())
            .filter(|np| {
                !np.metadata
                    .namespace
                    .as_ref()
                    .is_some_and(|ns| terminating.contains(ns))
            });
        out.extend(
            midonet_translators::address_groups(cfg, policies, &pc)
                .iter()
                .map(|d| translation_object(d, None)),
        );
    }
}

/// Counts by kind and reason.
pub type Counts = BTreeMap<String, BTreeMap<Reason, usize>>;

fn total(c: &Counts) -> usize {
    c.values().flat_map(|m| m.values()).sum()
}

fn by_reason(c: &Counts) -> BTreeMap<Reason, usize> {
    let mut out = BTreeMap::new();
    for (reason, n) in c.values().flat_map(|m| m.iter()) {
        *out.entry(*reason).or_default() += n;
    }
    out
}

/// The Translation changes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TranslationChanges {
    pub create: Counts,
    pub update: Counts,
    pub delete: Counts,
    /// Desired and already as desired.
    pub unchanged: usize,
    /// Being deleted already (their backend deletions are counted below).
    pub deleting: usize,
}

/// The backend requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRequests {
    pub creates: usize,
    pub updates: usize,
    /// DELETEs: `deletes_cutover + deletes_removed + deletes_retired`.
    pub deletes: usize,
    /// What a bump's cutover deletes to free the interfaces: old node bridges (their ports'
    /// bindings go with them), and old bindings on no such bridge.
    pub deletes_cutover: usize,
    /// Resources a Translation that stays no longer asks for.
    pub deletes_removed: usize,
    /// Deleted Translations' resources MidoNet's cascades do not take.
    pub deletes_retired: usize,
    /// Deleted Translations' resources MidoNet's cascades take: no request.
    pub cascaded: usize,
    /// Changed resources MidoNet cannot update (the pusher reports them; no request).
    pub immutable: usize,
    /// Translations whose spec cannot be pushed at all (namespace/name: error).
    pub invalid: Vec<String>,
}

impl BackendRequests {
    pub fn total(&self) -> usize {
        self.creates + self.updates + self.deletes
    }
}

/// Host interfaces whose binding moves to another port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rebinds {
    pub total: usize,
    /// By the kind of the Translation that binds it next.
    pub by_kind: BTreeMap<String, usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub requests: usize,
    pub requests_per_second: f64,
    pub seconds: f64,
}

/// What the controllers would do.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The version planned for.
    pub version: String,
    /// The existing Translations by version label (`""`: none).
    pub existing_versions: BTreeMap<String, usize>,
    pub translations: TranslationChanges,
    pub backend: BackendRequests,
    pub rebinds: Rebinds,
    /// What a linked cutover adds (`--bump-cutover linked`, when the versions can be
    /// linked); counted in `backend` too.
    pub link: Option<LinkCost>,
    pub estimate: Estimate,
}

/// The link between the versions' cluster routers a linked cutover makes
/// ([`crate::pusher::link`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkCost {
    /// Resources the cutover creates: the two link ports, their link, the mirror routes.
    pub creates: usize,
    /// The new router's mirror routes, each deleted before its host's batch.
    pub mirrors_deleted: usize,
    /// DELETEs of the link when the bump retires it.
    pub retire_deletes: usize,
}

/// The kind segment of a Translation's name (`pod.1.ns-a` → `pod`).
fn kind_of(name: &str) -> String {
    name.split('.').next().unwrap_or(name).to_string()
}

/// The version a Translation belongs to, the original controller's counting as one (see
/// [`Translation::version`]).
fn version_of(tr: &Translation) -> Option<&str> {
    tr.version()
}

/// A Translation's name without its version segment, the same in every version:
/// `(namespace, "<kind>.<key>")`, `None` for names not versioned this way. The original
/// controller's names have the segment too (its version, or a frozen `3`), but no label
/// saying which.
fn identity(tr: &Translation) -> Option<(String, String)> {
    let name = tr.name_any();
    let (kind, rest) = name.split_once('.')?;
    let key = if tr.is_legacy() {
        rest.split_once('.')?.1
    } else {
        rest.strip_prefix(tr.label(VERSION_LABEL)?)?
            .strip_prefix('.')?
    };
    Some((tr.metadata.namespace.clone()?, format!("{kind}.{key}")))
}

/// A host interface: (host ID, interface name).
type Interface = (uuid::Uuid, String);
type TranslationRef = ObjectRef<Translation>;
/// Another version's Translation binding an interface, and the binding's path.
type Binder = (TranslationRef, String);

fn add(c: &mut Counts, kind: String, reason: Reason) {
    *c.entry(kind).or_default().entry(reason).or_default() += 1;
}

/// Plans the move from `existing` (the cluster's Translations, with their status) to
/// `desired` ([`desired`] for `version`), for the Translations `scope` manages; backend
/// requests at `rate` per second.
pub fn plan(
    version: &str,
    desired: &[Translation],
    existing: &[Translation],
    scope: &Scope,
    rate: f64,
    cutover: CutoverOrder,
) -> Plan {
    let now = Existing::of(existing, version);
    let Pushes {
        mut changes,
        mut backend,
        rebinds,
        cutover_bridges,
        cutover_hosts,
    } = pushes(desired, &now);
    let link = (cutover == CutoverOrder::Linked)
        .then(|| link_cost(desired, &now, &cutover_hosts))
        .flatten();
    if let Some(l) = &link {
        backend.creates += l.creates;
        backend.deletes_cutover += l.mirrors_deleted;
        backend.deletes_retired += l.retire_deletes;
    }
    backend.deletes_cutover += cutover_bridges.len();
    let cutover_bridge_paths: HashSet<String> = cutover_bridges
        .iter()
        .map(|b| format!("/bridges/{b}"))
        .collect();
    let going = going(version, desired, existing, scope, &mut changes);
    let retired = retirement(&going, desired, &now, &cutover_bridge_paths);
    backend.deletes_retired += retired.requests;
    backend.cascaded += retired.cascaded;
    backend.deletes = backend.deletes_cutover + backend.deletes_removed + backend.deletes_retired;
    let requests = backend.total();
    let seconds = if rate > 0.0 {
        requests as f64 / rate
    } else {
        0.0
    };
    Plan {
        version: version.to_string(),
        existing_versions: existing_versions(existing),
        translations: changes,
        backend,
        rebinds,
        link,
        estimate: Estimate {
            requests,
            requests_per_second: rate,
            seconds,
        },
    }
}

/// The existing Translations by version label (`""`: none).
fn existing_versions(existing: &[Translation]) -> BTreeMap<String, usize> {
    let mut by_version: BTreeMap<String, usize> = BTreeMap::new();
    for tr in existing {
        // An unversioned Translation is counted under "", which the text shows as (none).
        let version = version_of(tr).map_or_else(String::new, str::to_string);
        *by_version.entry(version).or_default() += 1;
    }
    by_version
}

/// What the cluster holds now, as the plan compares with it: the live Translations, and
/// what the other versions' Translations hold (the interfaces they bind, the resources the
/// cutover's choice of bridge is made from, by `cutover::bridge_of_binding`, as the pusher
/// makes it).
struct Existing<'a> {
    version: &'a str,
    live: HashMap<TranslationKey, &'a Translation>,
    /// The other versions' Translations' names without their version segment.
    other_versions: HashSet<(String, String)>,
    /// The objects the other versions' Translations stand for.
    other_version_owners: HashSet<String>,
    /// Interfaces bound now: each binding's port, and for another version's binding its
    /// Translation and the binding's path (what the cutover frees).
    bound: HashMap<Interface, Vec<(uuid::Uuid, Option<Binder>)>>,
    /// Another version's Translations' resources, who provides each object among them,
    /// and which are not global.
    old_resources: HashMap<TranslationRef, Vec<Desired>>,
    old_provider: HashMap<uuid::Uuid, (TranslationRef, String)>,
    old_not_global: HashSet<TranslationRef>,
}

impl<'a> Existing<'a> {
    fn of(existing: &'a [Translation], version: &'a str) -> Self {
        let live: HashMap<TranslationKey, &Translation> = existing
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_none())
            .filter_map(|t| Some((t.key()?, t)))
            .collect();
        let mut now = Existing {
            version,
            other_versions: HashSet::new(),
            other_version_owners: HashSet::new(),
            bound: HashMap::new(),
            old_resources: HashMap::new(),
            old_provider: HashMap::new(),
            old_not_global: HashSet::new(),
            live: HashMap::new(),
        };
        for t in live.values() {
            now.index(t);
        }
        now.live = live;
        now
    }

    fn is_old(&self, t: &Translation) -> bool {
        version_of(t).is_some_and(|v| v != self.version)
    }

    /// Files the live Translation `t`.
    fn index(&mut self, t: &Translation) {
        let old = self.is_old(t);
        let resources = parse_lenient(t.desired_resources());
        let key = TranslationRef::from_obj(t);
        for d in &resources {
            if let Resource::HostInterfacePort(b) = &d.resource {
                if let Some(name) = &b.interface_name {
                    let binder = old.then(|| (key.clone(), d.path.clone()));
                    self.bound
                        .entry((b.parent, name.clone()))
                        .or_default()
                        .push((b.port_id, binder));
                }
            }
        }
        if !old {
            return;
        }
        self.other_versions.extend(identity(t));
        self.other_version_owners.extend(owner_of(t));
        for d in &resources {
            if let Some(id) = d.resource.own_id() {
                self.old_provider.insert(id, (key.clone(), d.path.clone()));
            }
        }
        if !t.has_label(GLOBAL_LABEL) {
            self.old_not_global.insert(key.clone());
        }
        self.old_resources.insert(key, resources);
    }

    /// Why `want`, which has no Translation of its name now, is created.
    fn creation_reason(&self, want: &Translation) -> Reason {
        let bump = identity(want).is_some_and(|i| self.other_versions.contains(&i))
            || owner_of(want).is_some_and(|o| self.other_version_owners.contains(&o));
        if bump {
            Reason::VersionBump
        } else {
            Reason::NewObject
        }
    }

    /// What the cutover deletes to free `interface` for `port`: per other version's port
    /// binding it, that port's old node bridge (`Ok`), or the binding on its own (`Err`).
    fn freed_by_cutover(
        &self,
        interface: &Interface,
        port: uuid::Uuid,
    ) -> Vec<Result<uuid::Uuid, ()>> {
        let binders = self
            .bound
            .get(interface)
            .into_iter()
            .flatten()
            .filter(|(p, _)| *p != port)
            .filter_map(|(_, binder)| binder.as_ref());
        binders
            .map(|(binder, path)| {
                let resources = self
                    .old_resources
                    .get(binder)
                    .map_or(&[][..], Vec::as_slice);
                cutover::bridge_of_binding(
                    resources,
                    path,
                    |r| match r {
                        Referent::Object(id) => self.old_provider.get(id).cloned(),
                        Referent::TunnelZoneMember(_) => None,
                    },
                    |k| self.old_not_global.contains(k),
                )
                .map(|bridge| bridge.id)
                .ok_or(())
            })
            .collect()
    }
}

/// What pushing the desired Translations costs.
#[derive(Default)]
struct Pushes {
    changes: TranslationChanges,
    backend: BackendRequests,
    rebinds: Rebinds,
    /// The old bridges the cutover deletes to free the interfaces on them.
    cutover_bridges: HashSet<uuid::Uuid>,
    /// The hosts whose interfaces the cutover frees.
    cutover_hosts: BTreeSet<uuid::Uuid>,
}

/// What a linked cutover adds, as the pusher plans it ([`link::plan`]) for the hosts it
/// moves; `None` if nothing moves or the versions cannot be linked (the cutover then moves
/// every binding at once).
fn link_cost(
    desired: &[Translation],
    now: &Existing,
    hosts: &BTreeSet<uuid::Uuid>,
) -> Option<LinkCost> {
    if hosts.is_empty() {
        return None;
    }
    let old: Vec<link::NodeRoutes> = now
        .old_resources
        .values()
        .filter_map(|r| link::node_routes(r))
        .collect();
    let new: Vec<link::NodeRoutes> = desired
        .iter()
        .filter_map(|t| link::node_routes(&parse_lenient(t.desired_resources())))
        .collect();
    let planned = link::plan(&old, &new, hosts).ok()?;
    let claimed = parse_lenient(&planned.translation(now.version).resources);
    let pushed: Vec<PushedResource> = claimed.iter().map(Desired::record).collect();
    let retired = plan_delete(&pushed, &claimed, &HashSet::new(), |_| false);
    Some(LinkCost {
        creates: planned.resources.len(),
        mirrors_deleted: planned.new_mirrors.values().map(Vec::len).sum(),
        retire_deletes: retired.requests.len(),
    })
}

/// The Translation changes and backend requests of writing and pushing `desired`.
fn pushes(desired: &[Translation], now: &Existing) -> Pushes {
    let mut out = Pushes::default();
    for want in desired {
        let Some(key) = want.key() else {
            // Only a translator's bug builds one: shown, not planned under a made-up name.
            out.backend
                .invalid
                .push(format!("{}: no namespace", want.name_any()));
            continue;
        };
        let kind = kind_of(&key.1);
        let current = now.live.get(&key).copied();
        match current {
            Some(c) if up_to_date(c, want) => out.changes.unchanged += 1,
            Some(c) => {
                let reason = if version_of(c) != version_of(want) {
                    Reason::VersionBump
                } else {
                    Reason::ChangedObject
                };
                add(&mut out.changes.update, kind.clone(), reason);
            }
            None => add(
                &mut out.changes.create,
                kind.clone(),
                now.creation_reason(want),
            ),
        }
        let pushed: &[PushedResource] = current
            .and_then(|c| c.status.as_ref())
            .map_or(&[], |s| s.pushed.as_slice());
        match parse_all(want.desired_resources()) {
            Ok(parsed) => out.add_steps(&kind, &plan_apply(parsed, pushed), now),
            Err(err) => out
                .backend
                .invalid
                .push(format!("{}/{}: {err}", key.0, key.1)),
        }
    }
    out
}

impl Pushes {
    /// Counts the requests of one Translation's `apply`.
    fn add_steps(&mut self, kind: &str, apply: &ApplyPlan, now: &Existing) {
        for (d, step) in &apply.steps {
            match step {
                Step::Create => {
                    self.backend.creates += 1;
                    if let Resource::HostInterfacePort(b) = &d.resource {
                        if let Some(name) = &b.interface_name {
                            self.add_binding(kind, &(b.parent, name.clone()), b.port_id, now);
                        }
                    }
                }
                Step::Update => self.backend.updates += 1,
                Step::ImmutableChanged => self.backend.immutable += 1,
                // Withheld and CutOver are a bump's marks on a reconcile's plan, never
                // made by plan_apply.
                Step::Unchanged | Step::Withheld | Step::CutOver => {}
            }
        }
        self.backend.deletes_removed += apply.removals.len();
    }

    /// Counts a binding of `interface` to `port` created: a rebind if another port binds
    /// it now, and what the cutover deletes to free it from another version's port.
    fn add_binding(&mut self, kind: &str, interface: &Interface, port: uuid::Uuid, now: &Existing) {
        let moved = now
            .bound
            .get(interface)
            .is_some_and(|ports| ports.iter().any(|(p, _)| *p != port));
        if moved {
            self.rebinds.total += 1;
            *self.rebinds.by_kind.entry(kind.to_string()).or_default() += 1;
        }
        let freed = now.freed_by_cutover(interface, port);
        if !freed.is_empty() {
            self.cutover_hosts.insert(interface.0);
        }
        for freed in freed {
            match freed {
                Ok(bridge) => {
                    self.cutover_bridges.insert(bridge);
                }
                Err(()) => self.backend.deletes_cutover += 1,
            }
        }
    }
}

/// The Translations that go: every other version's, and the stale ones of the scope;
/// counted in `changes`.
fn going<'a>(
    version: &str,
    desired: &[Translation],
    existing: &'a [Translation],
    scope: &Scope,
    changes: &mut TranslationChanges,
) -> Vec<&'a Translation> {
    let wanted: HashSet<TranslationKey> = desired.iter().filter_map(Translation::key).collect();
    let mut going = Vec::new();
    for t in existing {
        if t.metadata.deletion_timestamp.is_some() {
            changes.deleting += 1;
            going.push(t);
            continue;
        }
        if t.key().is_some_and(|k| wanted.contains(&k)) {
            continue;
        }
        let reason = match version_of(t) {
            Some(v) if v != version => Reason::VersionBump,
            _ if scope.manages(t) => Reason::Stale,
            _ => continue,
        };
        add(&mut changes.delete, kind_of(&t.name_any()), reason);
        going.push(t);
    }
    going
}

/// The backend cost of deleting the Translations that go.
struct Retirement {
    /// DELETEs sent, but for the old bridges the cutover deletes already.
    requests: usize,
    /// Resources MidoNet's cascades take.
    cascaded: usize,
}

/// What deleting `going` costs, given what stays (`desired`, the live Translations that do
/// not go), which claims its paths: they are not deleted.
fn retirement(
    going: &[&Translation],
    desired: &[Translation],
    now: &Existing,
    cutover_bridge_paths: &HashSet<String>,
) -> Retirement {
    let going_keys: HashSet<TranslationKey> = going.iter().filter_map(|g| g.key()).collect();
    let claimed: HashSet<String> = desired
        .iter()
        .chain(
            now.live
                .iter()
                .filter(|(k, _)| !going_keys.contains(*k))
                .map(|(_, t)| *t),
        )
        .flat_map(|t| t.desired_paths().collect::<Vec<_>>())
        .collect();
    let parsed: Vec<_> = going
        .iter()
        .map(|t| parse_lenient(t.desired_resources()))
        .collect();
    // Which deleted Translation provides each ID the deletions take out of the backend.
    let mut provider: HashMap<uuid::Uuid, usize> = HashMap::new();
    for (i, rs) in parsed.iter().enumerate() {
        for d in rs.iter().filter(|d| !claimed.contains(&d.path)) {
            if let Some(id) = d.resource.own_id() {
                provider.insert(id, i);
            }
        }
    }
    let mut out = Retirement {
        requests: 0,
        cascaded: 0,
    };
    for (i, (t, rs)) in going.iter().zip(&parsed).enumerate() {
        let taken: HashSet<uuid::Uuid> = rs
            .iter()
            .flat_map(|d| d.resource.deleted_with())
            .filter(|id| provider.get(id).is_some_and(|p| *p != i))
            .collect();
        let pushed = t.status.as_ref().map_or(&[][..], |s| s.pushed.as_slice());
        let deletion = plan_delete(pushed, rs, &taken, |p| claimed.contains(p));
        out.requests += deletion
            .requests
            .iter()
            .filter(|(_, path)| !cutover_bridge_paths.contains(path))
            .count();
        out.cascaded += deletion.cascaded.len();
    }
    out
}

impl Plan {
    /// Nothing to write, push or delete.
    pub fn nothing_to_do(&self) -> bool {
        let t = &self.translations;
        total(&t.create) == 0
            && total(&t.update) == 0
            && total(&t.delete) == 0
            && t.deleting == 0
            && self.backend.total() == 0
            && self.backend.invalid.is_empty()
            && self.backend.immutable == 0
            && self.rebinds.total == 0
    }

    /// Translations created / updated / deleted.
    pub fn translation_totals(&self) -> (usize, usize, usize) {
        let t = &self.translations;
        (total(&t.create), total(&t.update), total(&t.delete))
    }

    /// The plan for a person.
    pub fn render_text(&self) -> String {
        if self.nothing_to_do() {
            return "nothing to do\n".to_string();
        }
        let estimate = format!(
            "\nEstimated duration: {:.1} s ({} requests at {} requests/s)\n",
            self.estimate.seconds, self.estimate.requests, self.estimate.requests_per_second
        );
        [
            self.heading_text(),
            self.translations_text(),
            self.backend_text(),
            self.rebinds_text(),
            estimate,
        ]
        .concat()
    }

    /// The version planned for, and the existing Translations by version.
    fn heading_text(&self) -> String {
        let versions: Vec<String> = self
            .existing_versions
            .iter()
            .map(|(v, n)| {
                let v = if v.is_empty() { "(none)" } else { v };
                format!("{v}: {n}")
            })
            .collect();
        format!(
            "Plan for Translation version {} (existing Translations by version: {})\n",
            self.version,
            if versions.is_empty() {
                "none".to_string()
            } else {
                versions.join(", ")
            }
        )
    }

    /// The Translations created, updated and deleted, by reason and by kind.
    fn translations_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from("\nTranslations:\n");
        let t = &self.translations;
        let reasons = |by: &BTreeMap<Reason, usize>| -> String {
            let each: Vec<String> = by
                .iter()
                .map(|(r, n)| format!("{} {n}", r.as_str()))
                .collect();
            each.join(", ")
        };
        for (what, counts) in [
            ("create", &t.create),
            ("update", &t.update),
            ("delete", &t.delete),
        ] {
            let line = format!(
                "  {what:<8}{:>7}  {}",
                total(counts),
                reasons(&by_reason(counts))
            );
            let _ = writeln!(s, "{}", line.trim_end());
            for (kind, by) in counts {
                let n: usize = by.values().sum();
                let _ = writeln!(s, "    {kind:<20}{n:>5}  {}", reasons(by));
            }
        }
        let _ = writeln!(s, "  {:<8}{:>7}", "unchanged", t.unchanged);
        if t.deleting > 0 {
            let _ = writeln!(s, "  {:<8}{:>7}", "deleting", t.deleting);
        }
        s
    }

    /// The backend requests, by method, and what is not pushed.
    fn backend_text(&self) -> String {
        use std::fmt::Write;
        let b = &self.backend;
        let mut s = String::new();
        let _ = writeln!(s, "\nBackend requests: {}", b.total());
        let _ = writeln!(s, "  create  {:>7}", b.creates);
        let _ = writeln!(s, "  update  {:>7}", b.updates);
        let _ = writeln!(
            s,
            "  delete  {:>7}  (cutover {}, removed {}, retired {}; {} more deleted by MidoNet's cascades)",
            b.deletes, b.deletes_cutover, b.deletes_removed, b.deletes_retired, b.cascaded
        );
        if let Some(l) = &self.link {
            let _ = writeln!(
                s,
                "  of which the link between the versions: create {}, delete {} mirror routes \
                 host by host and {} when retired",
                l.creates, l.mirrors_deleted, l.retire_deletes
            );
        }
        if b.immutable > 0 {
            let _ = writeln!(
                s,
                "  {} changed resources MidoNet cannot update (reported, not pushed)",
                b.immutable
            );
        }
        for invalid in &b.invalid {
            let _ = writeln!(s, "  invalid: {invalid}");
        }
        s
    }

    /// The host interfaces rebound, by kind.
    fn rebinds_text(&self) -> String {
        let kinds: Vec<String> = self
            .rebinds
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        format!(
            "\nHost interfaces rebound: {}{}\n",
            self.rebinds.total,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        )
    }
}

#[cfg(test)]
mod tests;
