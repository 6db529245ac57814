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
//!   [`plan_apply`](crate::pusher::plan::plan_apply) against what each Translation's status
//!   records as pushed; deletions from [`plan_delete`](crate::pusher::plan::plan_delete), so
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
use crate::pusher::cutover;
use crate::pusher::plan::{parse_all, parse_lenient, plan_apply, plan_delete, Desired, Step};
use crate::pusher::rollout::owner_of;
use crate::translate::dispatch::{for_each_translator, translate_object, Translators};
use crate::translate::pods::CachedPod;
use crate::translate::slices::EndpointsSource;
use crate::translate::{
    owner_reference, translation_object, up_to_date, Dependency, TranslatorKind,
};

/// Backend requests per second the estimate assumes unless told otherwise: the rate of the
/// version bump at scale S in `docs/benchmark.md` (21,595 requests in 174 s, 2-core machine,
/// simulator latency 1 ms). A slower machine did 55/s in the same run.
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
    pub estimate: Estimate,
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
) -> Plan {
    let mut changes = TranslationChanges::default();
    let mut backend = BackendRequests::default();
    let mut rebinds = Rebinds::default();
    let mut existing_versions: BTreeMap<String, usize> = BTreeMap::new();
    for tr in existing {
        *existing_versions
            .entry(version_of(tr).unwrap_or_default().to_string())
            .or_default() += 1;
    }
    let live_existing: HashMap<TranslationKey, &Translation> = existing
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .filter_map(|t| Some((t.key()?, t)))
        .collect();
    let other_versions: HashSet<(String, String)> = live_existing
        .values()
        .filter(|t| version_of(t).is_some_and(|v| v != version))
        .filter_map(|t| identity(t))
        .collect();
    let other_version_owners: HashSet<String> = live_existing
        .values()
        .filter(|t| version_of(t).is_some_and(|v| v != version))
        .filter_map(|t| owner_of(t))
        .collect();
    // Interfaces bound now: each binding's port, and for another version's binding its
    // Translation and the binding's path (what the cutover frees).
    let mut bound: HashMap<Interface, Vec<(uuid::Uuid, Option<Binder>)>> = HashMap::new();
    // Another version's Translations: their resources, who provides each object among
    // them, and which are not global; the cutover's choice of bridge is made from these
    // by `cutover::bridge_of_binding`, as the pusher makes it.
    let mut old_resources: HashMap<TranslationRef, Vec<Desired>> = HashMap::new();
    let mut old_provider: HashMap<uuid::Uuid, (TranslationRef, String)> = HashMap::new();
    let mut old_not_global: HashSet<TranslationRef> = HashSet::new();
    for t in live_existing.values() {
        let old = version_of(t).is_some_and(|v| v != version);
        let resources = parse_lenient(t.desired_resources());
        let key = TranslationRef::from_obj(t);
        for d in &resources {
            if let Resource::HostInterfacePort(b) = &d.resource {
                if let Some(name) = &b.interface_name {
                    let binder = old.then(|| (key.clone(), d.path.clone()));
                    bound
                        .entry((b.parent, name.clone()))
                        .or_default()
                        .push((b.port_id, binder));
                }
            }
        }
        if !old {
            continue;
        }
        for d in &resources {
            if let Some(id) = d.resource.own_id() {
                old_provider.insert(id, (key.clone(), d.path.clone()));
            }
        }
        if !t.has_label(GLOBAL_LABEL) {
            old_not_global.insert(key.clone());
        }
        old_resources.insert(key, resources);
    }
    // The old bridges the cutover deletes to free the interfaces on them.
    let mut cutover_bridges: HashSet<uuid::Uuid> = HashSet::new();

    let wanted: HashSet<TranslationKey> = desired.iter().filter_map(Translation::key).collect();
    for want in desired {
        let Some(key) = want.key() else {
            // Only a translator's bug builds one: shown, not planned under a made-up name.
            backend
                .invalid
                .push(format!("{}: no namespace", want.name_any()));
            continue;
        };
        let kind = kind_of(&key.1);
        let current = live_existing.get(&key).copied();
        match current {
            Some(c) if up_to_date(c, want) => changes.unchanged += 1,
            Some(c) => {
                let reason = if version_of(c) != version_of(want) {
                    Reason::VersionBump
                } else {
                    Reason::ChangedObject
                };
                add(&mut changes.update, kind.clone(), reason);
            }
            None => {
                let bump = identity(want).is_some_and(|i| other_versions.contains(&i))
                    || owner_of(want).is_some_and(|o| other_version_owners.contains(&o));
                let reason = if bump {
                    Reason::VersionBump
                } else {
                    Reason::NewObject
                };
                add(&mut changes.create, kind.clone(), reason);
            }
        }
        let pushed: &[PushedResource] = current
            .and_then(|c| c.status.as_ref())
            .map_or(&[], |s| s.pushed.as_slice());
        let parsed = match parse_all(want.desired_resources()) {
            Ok(p) => p,
            Err(err) => {
                backend.invalid.push(format!("{}/{}: {err}", key.0, key.1));
                continue;
            }
        };
        let apply = plan_apply(parsed, pushed);
        for (d, step) in &apply.steps {
            match step {
                Step::Create => {
                    backend.creates += 1;
                    if let Resource::HostInterfacePort(b) = &d.resource {
                        if let Some(name) = &b.interface_name {
                            let before = bound.get(&(b.parent, name.clone()));
                            let moved = before
                                .is_some_and(|ports| ports.iter().any(|(p, _)| *p != b.port_id));
                            if moved {
                                rebinds.total += 1;
                                *rebinds.by_kind.entry(kind.clone()).or_default() += 1;
                            }
                            // The cutover frees the interface from another version's
                            // port first: with the port's bridge, or on its own.
                            let old_binders = before
                                .into_iter()
                                .flatten()
                                .filter(|(p, _)| *p != b.port_id)
                                .filter_map(|(_, binder)| binder.as_ref());
                            for (binder, path) in old_binders {
                                let resources =
                                    old_resources.get(binder).map_or(&[][..], Vec::as_slice);
                                let bridge = cutover::bridge_of_binding(
                                    resources,
                                    path,
                                    |r| match r {
                                        Referent::Object(id) => old_provider.get(id).cloned(),
                                        Referent::TunnelZoneMember(_) => None,
                                    },
                                    |k| old_not_global.contains(k),
                                );
                                match bridge {
                                    Some(bridge) => {
                                        cutover_bridges.insert(bridge.id);
                                    }
                                    None => backend.deletes_cutover += 1,
                                }
                            }
                        }
                    }
                }
                Step::Update => backend.updates += 1,
                Step::ImmutableChanged => backend.immutable += 1,
                // Withheld and CutOver are a bump's marks on a reconcile's plan, never
                // made by plan_apply.
                Step::Unchanged | Step::Withheld | Step::CutOver => {}
            }
        }
        backend.deletes_removed += apply.removals.len();
    }

    backend.deletes_cutover += cutover_bridges.len();
    let cutover_bridge_paths: HashSet<String> = cutover_bridges
        .iter()
        .map(|b| format!("/bridges/{b}"))
        .collect();

    // The Translations that go: every other version's, and the stale ones of the scope.
    let mut going: Vec<&Translation> = Vec::new();
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
    // What stays claims its paths: they are not deleted.
    let going_keys: HashSet<TranslationKey> = going.iter().filter_map(|g| g.key()).collect();
    let claimed: HashSet<String> = desired
        .iter()
        .chain(
            live_existing
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
    for (i, (t, rs)) in going.iter().zip(&parsed).enumerate() {
        let taken: HashSet<uuid::Uuid> = rs
            .iter()
            .flat_map(|d| d.resource.deleted_with())
            .filter(|id| provider.get(id).is_some_and(|p| *p != i))
            .collect();
        let pushed = t.status.as_ref().map_or(&[][..], |s| s.pushed.as_slice());
        let deletion = plan_delete(pushed, rs, &taken, |p| claimed.contains(p));
        backend.deletes_retired += deletion
            .requests
            .iter()
            .filter(|(_, path)| !cutover_bridge_paths.contains(path))
            .count();
        backend.cascaded += deletion.cascaded.len();
    }
    backend.deletes = backend.deletes_cutover + backend.deletes_removed + backend.deletes_retired;
    let requests = backend.total();
    let seconds = if rate > 0.0 {
        requests as f64 / rate
    } else {
        0.0
    };
    Plan {
        version: version.to_string(),
        existing_versions,
        translations: changes,
        backend,
        rebinds,
        estimate: Estimate {
            requests,
            requests_per_second: rate,
            seconds,
        },
    }
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
        use std::fmt::Write;
        if self.nothing_to_do() {
            return "nothing to do\n".to_string();
        }
        let mut s = String::new();
        let versions: Vec<String> = self
            .existing_versions
            .iter()
            .map(|(v, n)| {
                let v = if v.is_empty() { "(none)" } else { v };
                format!("{v}: {n}")
            })
            .collect();
        let _ = writeln!(
            s,
            "Plan for Translation version {} (existing Translations by version: {})",
            self.version,
            if versions.is_empty() {
                "none".to_string()
            } else {
                versions.join(", ")
            }
        );
        let _ = writeln!(s, "\nTranslations:");
        let t = &self.translations;
        for (what, counts) in [
            ("create", &t.create),
            ("update", &t.update),
            ("delete", &t.delete),
        ] {
            let reasons: Vec<String> = by_reason(counts)
                .iter()
                .map(|(r, n)| format!("{} {n}", r.as_str()))
                .collect();
            let line = format!("  {what:<8}{:>7}  {}", total(counts), reasons.join(", "));
            let _ = writeln!(s, "{}", line.trim_end());
            for (kind, by) in counts {
                let reasons: Vec<String> = by
                    .iter()
                    .map(|(r, n)| format!("{} {n}", r.as_str()))
                    .collect();
                let n: usize = by.values().sum();
                let _ = writeln!(s, "    {kind:<20}{n:>5}  {}", reasons.join(", "));
            }
        }
        let _ = writeln!(s, "  {:<8}{:>7}", "unchanged", t.unchanged);
        if t.deleting > 0 {
            let _ = writeln!(s, "  {:<8}{:>7}", "deleting", t.deleting);
        }
        let b = &self.backend;
        let _ = writeln!(s, "\nBackend requests: {}", b.total());
        let _ = writeln!(s, "  create  {:>7}", b.creates);
        let _ = writeln!(s, "  update  {:>7}", b.updates);
        let _ = writeln!(
            s,
            "  delete  {:>7}  (cutover {}, removed {}, retired {}; {} more deleted by MidoNet's cascades)",
            b.deletes, b.deletes_cutover, b.deletes_removed, b.deletes_retired, b.cascaded
        );
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
        let kinds: Vec<String> = self
            .rebinds
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "\nHost interfaces rebound: {}{}",
            self.rebinds.total,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        );
        let _ = writeln!(
            s,
            "\nEstimated duration: {:.1} s ({} requests at {} requests/s)",
            self.estimate.seconds, self.estimate.requests, self.estimate.requests_per_second
        );
        s
    }
}

#[cfg(test)]
mod tests;
