//! Ordering by dependency: which Translation provides each backend referent (a bridge, a
//! chain, a host's tunnel zone membership, …), so the pusher can hold back a Translation
//! whose referent another Translation will create but has not pushed yet, and wake it the
//! moment that happens.
//!
//! Without this, Translations are pushed in whatever order the watch delivers them; a pod
//! port POSTed before its node's bridge gets a 404, and the retry costs a request and a
//! backoff delay. The same goes for a host interface, which MidoNet binds to one port at a
//! time: a new binding (a re-created pod of the same name, a version bump) waits until the
//! Translation that bound the interface before has deleted its binding.
//!
//! The hold is only an optimisation, never a correctness rule: a Translation is held at
//! most [`MAX_HOLD`], then pushed anyway and the backend decides (cycles, or a provider
//! that keeps failing, cannot wedge anything). Past [`MAX_HOLD`] it is held on only while
//! its provider is *progressing* (live, not held back itself, its last push not failed:
//! in a long queue, as in a large initial sync), looked at again every [`PROGRESS_RECHECK`]
//! and for at most [`HOLD_WHILE_PROGRESSING`] in all: a push tried then would only be
//! refused, and retried. A cycle of holds is no provider progressing, so it ends at
//! [`MAX_HOLD`].

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use midonet_translators::model::{Kind, Referent, Resource};
use uuid::Uuid;

use super::steps::{self, Desired};
use crate::crd::{Translation, TranslationStatus};

/// The longest a Translation is held back for a referent another Translation provides, or
/// for an interface another Translation has bound. Long enough for the pusher to work
/// through a version bump's retirement, every old Translation deleted, before a new binding
/// is tried anyway: tried earlier, MidoNet refuses it while the old one stands.
pub const MAX_HOLD: Duration = Duration::from_secs(30);

/// The longest a Translation is held back in all while its provider is progressing.
pub const HOLD_WHILE_PROGRESSING: Duration = Duration::from_secs(300);

/// Past [`MAX_HOLD`], how often a held Translation looks again whether its provider is
/// still progressing. Its provider's push wakes it sooner; this is only for a provider
/// that failed meanwhile, whose referent a push would be refused anyway. Not shorter:
/// the waiters can be thousands (every pod of a large initial sync), and each look is a
/// reconcile in the queue their providers are in.
pub const PROGRESS_RECHECK: Duration = MAX_HOLD;

/// The longest a Translation is held back for a referent no Translation provides yet: its
/// provider is often written a moment later (the translators run side by side, and an
/// Endpoints' Translation may come before its Service's). Shorter than [`MAX_HOLD`]: the
/// referent may also be one nobody will ever provide (a hand-written Translation's).
pub const UNPROVIDED_HOLD: Duration = Duration::from_secs(3);

type Key = ObjectRef<Translation>;

/// A key as the index stores it: one allocation per Translation, shared by every map that
/// names it (a Translation is named in many entries, and each copy of an `ObjectRef` would
/// be two strings more).
type SharedKey = std::sync::Arc<Key>;

fn unshared(key: &SharedKey) -> Key {
    Key::clone(key)
}

/// What a push made possible (see [`Dependencies::pushed`]).
#[derive(Debug, Default)]
pub struct Pushed {
    /// Translations held back or refused for want of the referents.
    pub woken: Vec<Key>,
    /// Translations that may have lost resources under the referents' previous incarnation,
    /// with those referents.
    pub cascaded: Vec<(Key, HashSet<Referent>)>,
}

/// A host interface, by host and interface name.
pub type Interface = (Uuid, String);

/// What a held Translation waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// A referent to be pushed.
    Referent(Referent),
    /// A host interface another Translation's binding holds, to be released.
    Interface(Interface),
}

/// What holds a Translation back: a referent some other Translation provides and has not
/// pushed yet, or that no Translation provides yet (`provider` None); or an interface
/// another Translation has bound (`provider` the binder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub awaited: Awaited,
    pub provider: Option<Key>,
}

#[derive(Default)]
struct State {
    /// Every Translation in the index, with what it filed in the maps below (to undo its
    /// entries): one record per Translation, rather than a map per kind of entry keyed by
    /// the Translation, which would repeat the key in each.
    filed: HashMap<SharedKey, Filed>,
    /// Who provides each referent, and the [`path_hash`] of the backend path that does
    /// (a number instead of the path: one entry per resource that provides something).
    providers: HashMap<Referent, (SharedKey, u64)>,
    /// Who needs each referent another Translation provides (reverse of [`Filed::requires`]).
    consumers: HashMap<Referent, HashSet<SharedKey>>,
    /// Translations listed by a (re-)list in progress, with what they provide and need.
    relisted: Vec<(Key, Links)>,
    /// Translations held back, by the referent they wait for.
    waiters: HashMap<Referent, HashSet<SharedKey>>,
    /// Translations built on a referent whose provider deleted it (MidoNet then deleted
    /// what they had under it), to verify once a provider pushes it again.
    cascaded: HashMap<Referent, HashSet<SharedKey>>,
    /// When each held Translation was first held.
    held_since: HashMap<SharedKey, Instant>,
    /// Who binds each host interface, at which backend path.
    /// (Nearly always one; a Vec costs far less memory per entry than a map.)
    binders: HashMap<Interface, Vec<(SharedKey, String)>>,
    /// Translations held back or refused for a bound interface, by host.
    interface_waiters: HashMap<Uuid, HashSet<SharedKey>>,
    /// Interfaces whose binding a Translation lost to another's (a version bump's cutover):
    /// it binds them no more, whatever its spec says, until it is gone.
    released: HashSet<(SharedKey, Interface)>,
    /// How many live (not deleting) Translations desire each backend path, by the path's
    /// [`path_hash`]: a deletion leaves a path another Translation claims alone.
    claims: HashMap<u64, u32>,
}

/// What one Translation filed in the index, exactly sized: it stays until the Translation
/// changes or goes.
#[derive(Debug, Default)]
struct Filed {
    /// The referents it provides.
    provides: Box<[Referent]>,
    /// The referents it needs from other Translations.
    requires: Box<[Referent]>,
    /// The host interfaces it binds.
    binds: Vec<Interface>,
    /// The [`path_hash`] of each backend path it claims (none while it is being deleted).
    claims: Box<[u64]>,
    /// The [`stamp`] of the Translation these entries were derived from.
    stamp: Option<u64>,
}

/// A backend path's key in the claims index: a 64-bit hash instead of the path (a
/// collision, unlikely at any cluster's size, would only keep a resource for the orphan
/// sweep).
fn path_hash(path: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish()
}

/// What a Translation's entries in the index derive from, as one number: its UID, its
/// generation (the apiserver bumps it with every change of the spec) and whether it is
/// being deleted. A watch event with the same stamp (most often the pusher's status write)
/// would derive the same entries again, by parsing every body of the spec, so it is not
/// derived. None without a generation (nothing to tell a change by).
fn stamp(tr: &Translation) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let generation = tr.metadata.generation?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tr.metadata.uid.hash(&mut h);
    generation.hash(&mut h);
    tr.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The dependency index over the shared Translation informer.
pub struct Dependencies {
    state: Mutex<State>,
    store: Store<Translation>,
}

/// What one Translation provides (with the path of each), needs from others, binds, and
/// claims (its desired paths, while it is not being deleted).
struct Links {
    provides: Vec<(Referent, String)>,
    requires: Vec<Referent>,
    binds: Vec<(Interface, String)>,
    claims: Vec<u64>,
    stamp: Option<u64>,
}

/// The key the index keeps: namespace and name only. (`ObjectRef::from_obj` also copies the
/// UID and resourceVersion, which equality ignores and every map of the index would keep.)
/// `None` (logged) for a Translation without a namespace or name, which no apiserver
/// sends: the index could not tell it from another.
pub(super) fn key_of(tr: &Translation) -> Option<Key> {
    let key = tr.key().map(|(ns, name)| ObjectRef::new(&name).within(&ns));
    if key.is_none() {
        tracing::error!(translation = ?tr.metadata.name, namespace = ?tr.metadata.namespace, "a Translation without a namespace or name; left out of the pusher's dependency index");
    }
    key
}

/// The host interface a binding names, if it names one.
pub(super) fn interface_of(resource: &Resource) -> Option<Interface> {
    match resource {
        Resource::HostInterfacePort(b) => Some((b.parent, b.interface_name.clone()?)),
        _ => None,
    }
}

impl Links {
    fn of(tr: &Translation) -> Self {
        let desired = steps::parse_lenient(tr.desired_resources());
        let provides: Vec<(Referent, String)> = desired
            .iter()
            .flat_map(|d| {
                d.resource
                    .provides()
                    .into_iter()
                    .map(|r| (r, d.path.clone()))
            })
            .collect();
        let own: HashSet<Referent> = provides.iter().map(|(r, _)| *r).collect();
        let mut requires: Vec<Referent> = desired
            .iter()
            .flat_map(|d| d.resource.requires())
            .filter(|r| !own.contains(r))
            .collect();
        requires.sort();
        requires.dedup();
        let binds = desired
            .iter()
            .filter_map(|d| Some((interface_of(&d.resource)?, d.path.clone())))
            .collect();
        let claims = if tr.metadata.deletion_timestamp.is_some() {
            Vec::new()
        } else {
            desired.iter().map(|d| path_hash(&d.path)).collect()
        };
        Links {
            provides,
            requires,
            binds,
            claims,
            stamp: stamp(tr),
        }
    }
}

/// What a pushed resource, known only by its record (kind and path), made exist: its own
/// ID, the last segment of the path of the kinds that have one; a host's tunnel zone
/// membership for a TunnelZoneHost.
pub fn recorded_referents(kind: &str, path: &str) -> Vec<Referent> {
    let Some(last) = path.rsplit('/').next().and_then(|s| s.parse::<Uuid>().ok()) else {
        return Vec::new();
    };
    match Kind::from_name(kind) {
        Some(
            Kind::TunnelZone
            | Kind::Router
            | Kind::Bridge
            | Kind::Port
            | Kind::Route
            | Kind::Chain
            | Kind::Rule
            | Kind::LoadBalancer
            | Kind::Pool
            | Kind::PoolMember
            | Kind::Vip,
        ) => vec![Referent::Object(last)],
        Some(Kind::TunnelZoneHost) => vec![Referent::TunnelZoneMember(last)],
        _ => Vec::new(),
    }
}

/// What MidoNet's cascade may have done to one resource of a consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hit {
    /// Deleted with its parent or with what it names (a rule with its jump chain, a route
    /// with its next-hop port, a link with its peer).
    Deleted,
    /// Kept, with these references to deleted resources cleared: MidoNet keeps a bridge,
    /// router or port whose filter chain is deleted and only clears `inboundFilterId` /
    /// `outboundFilterId`.
    Cleared(Vec<Uuid>),
}

/// The references of `resource` MidoNet clears, rather than deleting the resource, when
/// what they name is deleted (a device's or port's filter chains): every ID its body names
/// but its parent, for the kinds MidoNet keeps and can update. A GET shows whether they
/// are still there.
pub fn clearable_references(resource: &Resource) -> Vec<Uuid> {
    if !resource.kind().updatable() {
        return Vec::new();
    }
    let parent = resource.parent();
    resource
        .requires()
        .into_iter()
        .filter_map(|r| match r {
            Referent::Object(id) if Some(id) != parent => Some(id),
            _ => None,
        })
        .collect()
}

/// Whether MidoNet keeps `resource` when the referents in `gone` it needs are deleted:
/// only devices and ports, and only for references other than their parent.
fn kept_when_gone(resource: &Resource, gone: &[Referent]) -> bool {
    resource.kind().updatable()
        && gone
            .iter()
            .all(|r| resource.parent().map(Referent::Object) != Some(*r))
}

/// The backend paths of `desired` that MidoNet's cascade may have hit along with `taken`,
/// and how: the resources that need one of them and, within `desired`, whatever needs the
/// deleted ones in turn (a resource merely cleared takes nothing with it).
pub fn cascade_hits(desired: &[Desired], taken: &HashSet<Referent>) -> Vec<(String, Hit)> {
    let mut gone = taken.clone();
    let mut hits: Vec<Option<Hit>> = vec![None; desired.len()];
    loop {
        let mut grew = false;
        for (i, d) in desired.iter().enumerate() {
            if hits[i] == Some(Hit::Deleted) {
                continue;
            }
            let needed: Vec<Referent> = d
                .resource
                .requires()
                .into_iter()
                .filter(|r| gone.contains(r))
                .collect();
            if needed.is_empty() {
                continue;
            }
            let hit = if kept_when_gone(&d.resource, &needed) {
                let ids = needed
                    .iter()
                    .filter_map(|r| match r {
                        Referent::Object(id) => Some(*id),
                        Referent::TunnelZoneMember(_) => None,
                    })
                    .collect();
                Hit::Cleared(ids)
            } else {
                gone.extend(d.resource.provides());
                Hit::Deleted
            };
            if hits[i].as_ref() != Some(&hit) {
                hits[i] = Some(hit);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    desired
        .iter()
        .zip(hits)
        .filter_map(|(d, hit)| Some((d.path.clone(), hit?)))
        .collect()
}

/// The backend paths of `desired` that MidoNet's cascade may have hit along with `taken`.
pub fn cascaded_paths(desired: &[Desired], taken: &HashSet<Referent>) -> Vec<String> {
    cascade_hits(desired, taken)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

impl State {
    /// Whether `provider` is on its way to a push: in the store and not being deleted, not
    /// held back itself, and its last push did not fail (`Ready` is not `False`).
    fn progressing(
        &self,
        store: &Store<Translation>,
        provider: &Key,
        recorded: impl Fn(&Translation) -> TranslationStatus,
    ) -> bool {
        !self.held_since.contains_key(provider)
            && store.get(provider).is_some_and(|tr| {
                tr.metadata.deletion_timestamp.is_none()
                    && super::status::ready_condition(&recorded(&tr))
                        .is_none_or(|c| c.status != "False")
            })
    }

    /// What `key` must wait for before creating `creating` (see [`Dependencies::hold`]):
    /// a referent another live Translation provides but has not `pushed`, else an
    /// interface another Translation has bound, else a referent nobody provides.
    fn blocker(
        &self,
        store: &Store<Translation>,
        key: &Key,
        creating: &[&Desired],
        pushed: impl Fn(&Key, u64) -> bool,
    ) -> Option<Blocker> {
        let own: HashSet<Referent> = creating
            .iter()
            .flat_map(|d| d.resource.provides())
            .collect();
        let hosts: HashSet<Referent> = creating
            .iter()
            .flat_map(|d| d.resource.hosts())
            .map(Referent::Object)
            .collect();
        let mut unprovided = None;
        let referent = creating
            .iter()
            .flat_map(|d| d.resource.requires())
            .filter(|r| !own.contains(r))
            .find_map(|r| {
                let Some((provider, path)) = self.providers.get(&r) else {
                    if unprovided.is_none() && !hosts.contains(&r) {
                        unprovided = Some(r);
                    }
                    return None;
                };
                if **provider == *key {
                    return None;
                }
                let tr = store.get(provider)?;
                // A provider being deleted is about to delete the referent, and with it
                // (MidoNet cascades) whatever we would create under it: wait for whoever
                // provides it next (a re-created Service re-creates the same chain).
                let done = tr.metadata.deletion_timestamp.is_none() && pushed(provider, *path);
                (!done).then(|| Blocker {
                    awaited: Awaited::Referent(r),
                    provider: Some(unshared(provider)),
                })
            });
        // An interface another Translation has bound (and not unbound yet): MidoNet would
        // refuse the binding until that one is deleted.
        let interface = || {
            creating.iter().find_map(|d| {
                let interface = interface_of(&d.resource)?;
                let binders = self.binders.get(&interface)?;
                let (other, _) = binders.iter().find(|(k, path)| {
                    **k != *key && *path != d.path && pushed(k, path_hash(path))
                })?;
                Some(Blocker {
                    awaited: Awaited::Interface(interface),
                    provider: Some(unshared(other)),
                })
            })
        };
        referent.or_else(interface).or_else(|| {
            unprovided.map(|r| Blocker {
                awaited: Awaited::Referent(r),
                provider: None,
            })
        })
    }

    /// Drops what `key` provides, needs and binds; with `gone` (the Translation is deleted,
    /// not merely updated) also what a cascade took from it: a Translation updated, e.g.
    /// marked for deletion, still had its resources taken.
    fn forget(&mut self, key: &Key, gone: bool) {
        if gone {
            self.released.retain(|(k, _)| **k != *key);
        }
        self.unbind(key);
        let Some(filed) = self.filed.remove(key) else {
            return;
        };
        for r in filed.provides.iter() {
            if self.providers.get(r).is_some_and(|(k, _)| **k == *key) {
                self.providers.remove(r);
            }
        }
        for r in filed.requires.iter() {
            let indexes = if gone {
                vec![&mut self.consumers, &mut self.cascaded]
            } else {
                vec![&mut self.consumers]
            };
            for index in indexes {
                if let Some(keys) = index.get_mut(r) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(r);
                    }
                }
            }
        }
        for h in filed.claims.iter() {
            if let Some(n) = self.claims.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    self.claims.remove(h);
                }
            }
        }
    }

    /// Drops `key`'s bindings from the index; returns the interfaces it bound.
    fn unbind(&mut self, key: &Key) -> Vec<Interface> {
        let interfaces = self
            .filed
            .get_mut(key)
            .map(|filed| std::mem::take(&mut filed.binds))
            .unwrap_or_default();
        for i in &interfaces {
            self.drop_binder(i, key);
        }
        interfaces
    }

    /// `key` binds `interface` no more.
    fn drop_binder(&mut self, interface: &Interface, key: &Key) {
        if let Some(binders) = self.binders.get_mut(interface) {
            binders.retain(|(k, _)| **k != *key);
            if binders.is_empty() {
                self.binders.remove(interface);
            }
        }
    }

    fn set(&mut self, key: Key, links: Links) {
        self.forget(&key, false);
        let key: SharedKey = SharedKey::new(key);
        let provides = links.provides.iter().map(|(r, _)| *r).collect();
        for (r, path) in links.provides {
            self.providers.insert(r, (key.clone(), path_hash(&path)));
        }
        for r in &links.requires {
            self.consumers.entry(*r).or_default().insert(key.clone());
        }
        let mut binds = Vec::with_capacity(links.binds.len());
        for (i, path) in links.binds {
            if self.released.contains(&(key.clone(), i.clone())) {
                continue;
            }
            // Nearly always the one binder: room for one (a first push makes four).
            let binders = self
                .binders
                .entry(i.clone())
                .or_insert_with(|| Vec::with_capacity(1));
            binders.push((key.clone(), path));
            binds.push(i);
        }
        for h in &links.claims {
            *self.claims.entry(*h).or_default() += 1;
        }
        let filed = Filed {
            provides,
            requires: links.requires.into_boxed_slice(),
            binds,
            claims: links.claims.into_boxed_slice(),
            stamp: links.stamp,
        };
        self.filed.insert(key, filed);
    }
}

impl Dependencies {
    pub fn new(store: Store<Translation>) -> Self {
        Dependencies {
            state: Mutex::default(),
            store,
        }
    }

    /// The Translation cache this index follows.
    pub fn store(&self) -> &Store<Translation> {
        &self.store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    /// Follows the shared Translation informer (see [`crate::informer`]).
    pub fn observe(&self, event: &watcher::Event<Translation>) {
        match event {
            watcher::Event::Apply(tr) => {
                let Some(key) = key_of(tr) else { return };
                let unchanged = stamp(tr).is_some_and(|stamp| {
                    self.lock()
                        .filed
                        .get(&key)
                        .is_some_and(|filed| filed.stamp == Some(stamp))
                });
                if !unchanged {
                    let links = Links::of(tr);
                    self.lock().set(key, links);
                }
            }
            watcher::Event::Delete(tr) => {
                if let Some(key) = key_of(tr) {
                    self.lock().forget(&key, true)
                }
            }
            watcher::Event::Init => self.lock().relisted.clear(),
            watcher::Event::InitApply(tr) => {
                if let Some(key) = key_of(tr) {
                    let links = Links::of(tr);
                    self.lock().relisted.push((key, links));
                }
            }
            watcher::Event::InitDone => {
                let mut state = self.lock();
                let relisted = std::mem::take(&mut state.relisted);
                state.filed.clear();
                state.providers.clear();
                state.consumers.clear();
                state.binders.clear();
                state.claims.clear();
                for (key, links) in relisted {
                    state.set(key, links);
                }
                // Who is gone by now has nothing left to verify, nor any binding released.
                let State {
                    cascaded,
                    filed,
                    released,
                    ..
                } = &mut *state;
                released.retain(|(k, _)| filed.contains_key(k));
                cascaded.retain(|_, keys| {
                    keys.retain(|k| filed.contains_key(k));
                    !keys.is_empty()
                });
            }
        }
    }

    /// Whether `key` should wait before creating `creating`: the first referent they need
    /// that another live Translation provides but has not pushed (per `recorded`), else
    /// the first that no Translation provides yet (hosts excepted: MidoNet registers them).
    /// When there is one, `key` is registered to be woken by [`Self::pushed`] and the time
    /// left of its hold is returned; after [`MAX_HOLD`] (for a referent nobody provides,
    /// [`UNPROVIDED_HOLD`]) it is not held any more and the backend decides, unless its
    /// provider is progressing (see the module's doc).
    pub fn hold(
        &self,
        key: &Key,
        creating: &[&Desired],
        recorded: impl Fn(&Translation) -> TranslationStatus,
    ) -> Option<(Blocker, Duration)> {
        self.hold_at(key, creating, recorded, Instant::now())
    }

    /// [`Self::hold`] at `now`.
    fn hold_at(
        &self,
        key: &Key,
        creating: &[&Desired],
        recorded: impl Fn(&Translation) -> TranslationStatus,
        now: Instant,
    ) -> Option<(Blocker, Duration)> {
        // Checked and registered under one lock: a provider's `pushed` either comes before
        // (the check sees its record) or after (it finds us registered).
        let mut state = self.lock();
        let pushed = |other: &Key, path: u64| {
            self.store.get(other).is_some_and(|tr| {
                recorded(&tr)
                    .pushed
                    .iter()
                    .any(|p| path_hash(&p.path) == path)
            })
        };
        let Some(blocker) = state.blocker(&self.store, key, creating, pushed) else {
            state.held_since.remove(key);
            return None;
        };
        let since = *state
            .held_since
            .entry(SharedKey::new(key.clone()))
            .or_insert(now);
        let held = now.saturating_duration_since(since);
        let left = match &blocker.provider {
            None => UNPROVIDED_HOLD.checked_sub(held)?,
            Some(provider) => match MAX_HOLD.checked_sub(held) {
                Some(left) => left,
                None if state.progressing(&self.store, provider, &recorded) => {
                    let left = HOLD_WHILE_PROGRESSING.saturating_sub(held);
                    if left.is_zero() {
                        return None;
                    }
                    PROGRESS_RECHECK.min(left)
                }
                None => return None,
            },
        };
        match &blocker.awaited {
            Awaited::Referent(r) => state.waiters.entry(*r).or_default(),
            Awaited::Interface((host, _)) => state.interface_waiters.entry(*host).or_default(),
        }
        .insert(SharedKey::new(key.clone()));
        Some((blocker, left))
    }

    /// `key` was refused a binding on `host` (the interface is bound already): wake it when
    /// a binding on that host is deleted.
    pub fn wait_for_interface(&self, key: &Key, host: Uuid) {
        self.lock()
            .interface_waiters
            .entry(host)
            .or_default()
            .insert(SharedKey::new(key.clone()));
    }

    /// `key`'s bindings are deleted from the backend (its deletion is being pushed): they
    /// bind nothing any more; returns who waits for an interface on those hosts.
    pub fn bindings_deleted(&self, key: &Key) -> Vec<Key> {
        let mut state = self.lock();
        let mut woken = Vec::new();
        for (host, _) in state.unbind(key) {
            woken.extend(
                state
                    .interface_waiters
                    .remove(&host)
                    .unwrap_or_default()
                    .iter()
                    .map(unshared),
            );
        }
        woken
    }

    /// `key` failed for want of one of `referents` (the backend said so): wake it when any
    /// of them is pushed, whoever provides it (the provider may not even exist yet).
    pub fn wait_for(&self, key: &Key, referents: impl IntoIterator<Item = Referent>) {
        let mut state = self.lock();
        for r in referents {
            if state.providers.get(&r).is_some_and(|(k, _)| **k == *key) {
                continue;
            }
            state
                .waiters
                .entry(r)
                .or_default()
                .insert(SharedKey::new(key.clone()));
        }
    }

    /// `deleted` took `taken` out of the backend, and MidoNet with them what other
    /// Translations had built under them. Those are remembered, to be verified when a
    /// provider pushes the referent again ([`Self::pushed`]): only then can anything be
    /// re-created, and a referent nobody provides any more (a version bump, a Service
    /// deleted for good) costs nothing.
    pub fn note_cascade(&self, taken: &HashSet<Referent>, deleted: &Key) {
        let mut state = self.lock();
        for r in taken {
            let Some(consumers) = state.consumers.get(r) else {
                continue;
            };
            let consumers: Vec<SharedKey> = consumers
                .iter()
                .filter(|k| ***k != *deleted)
                .cloned()
                .collect();
            if !consumers.is_empty() {
                state.cascaded.entry(*r).or_default().extend(consumers);
            }
        }
    }

    /// Whether a live Translation desires `path` (a deleting one claims nothing).
    pub fn claimed(&self, path: &str) -> bool {
        self.lock().claims.contains_key(&path_hash(path))
    }

    /// The IDs among those `desired` resources are deleted with ([`Resource::deleted_with`])
    /// that another Translation's deletion takes (or took) out of the backend: its provider
    /// is being deleted and no live Translation claims it, or its provider deleted it
    /// since `key` was built on it.
    pub fn taken_elsewhere(&self, key: &Key, desired: &[Desired]) -> HashSet<Uuid> {
        let state = self.lock();
        desired
            .iter()
            .flat_map(|d| d.resource.deleted_with())
            .filter(|id| {
                let r = Referent::Object(*id);
                if state
                    .cascaded
                    .get(&r)
                    .is_some_and(|keys| keys.contains(key))
                {
                    return true;
                }
                let Some((provider, path)) = state.providers.get(&r) else {
                    return false;
                };
                **provider != *key
                    && !state.claims.contains_key(path)
                    && self
                        .store
                        .get(provider)
                        .is_some_and(|tr| tr.metadata.deletion_timestamp.is_some())
            })
            .collect()
    }

    /// Every Translation binding `interface`, with the path of each one's binding.
    pub fn binders(&self, interface: &Interface) -> Vec<(Key, String)> {
        self.lock()
            .binders
            .get(interface)
            .map(|b| {
                b.iter()
                    .map(|(k, path)| (unshared(k), path.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The other Translations binding `interface`, with the path of each one's binding.
    pub fn other_binders(&self, key: &Key, interface: &Interface) -> Vec<(Key, String)> {
        self.lock()
            .binders
            .get(interface)
            .map(|b| {
                b.iter()
                    .filter(|(k, _)| **k != *key)
                    .map(|(k, path)| (unshared(k), path.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `from`'s binding of `interface` was deleted for another Translation's (a version
    /// bump's cutover): it binds it no more.
    pub fn taken_over(&self, interface: &Interface, from: &Key) {
        let mut state = self.lock();
        state
            .released
            .insert((SharedKey::new(from.clone()), interface.clone()));
        state.drop_binder(interface, from);
        if let Some(filed) = state.filed.get_mut(from) {
            filed.binds.retain(|i| i != interface);
        }
    }

    /// The other Translations that provide what `key` builds on.
    pub fn providers_of(&self, key: &Key) -> Vec<Key> {
        let state = self.lock();
        let mut out: Vec<Key> = state
            .filed
            .get(key)
            .into_iter()
            .flat_map(|filed| filed.requires.iter())
            .filter_map(|r| state.providers.get(r))
            .filter(|(k, _)| **k != *key)
            .map(|(k, _)| unshared(k))
            .collect();
        out.dedup();
        out
    }

    /// The Translation that provides `referent`, and the path of the resource that does
    /// (read from that Translation in the cache: the index keeps only its hash).
    pub fn provider_of(&self, referent: &Referent) -> Option<(Key, String)> {
        let (key, hash) = {
            let state = self.lock();
            let (key, hash) = state.providers.get(referent)?;
            (unshared(key), *hash)
        };
        let tr = self.store.get(&key)?;
        let path = steps::parse_lenient(tr.desired_resources())
            .into_iter()
            .find(|d| path_hash(&d.path) == hash && d.resource.provides().contains(referent))?
            .path;
        Some((key, path))
    }

    /// Whether another Translation binds an interface `key` binds: a new binding that
    /// waits for `key`'s to go.
    pub fn binding_awaited(&self, key: &Key) -> bool {
        let state = self.lock();
        let Some(filed) = state.filed.get(key) else {
            return false;
        };
        filed.binds.iter().any(|interface| {
            state
                .binders
                .get(interface)
                .is_some_and(|b| b.iter().any(|(k, _)| **k != *key))
        })
    }

    /// The interfaces `key` binds.
    pub fn interfaces_of(&self, key: &Key) -> Vec<Interface> {
        self.lock()
            .filed
            .get(key)
            .map(|filed| filed.binds.clone())
            .unwrap_or_default()
    }

    /// `key` is not held any more (pushed, deleted or gone).
    pub fn release(&self, key: &Key) {
        self.lock().held_since.remove(key);
    }

    /// `referents` now exist in the backend: the Translations waiting for them, and those
    /// to verify because a cascade may have taken what they had under them.
    pub fn pushed(&self, referents: impl IntoIterator<Item = Referent>) -> Pushed {
        let mut state = self.lock();
        let mut out = Pushed::default();
        let mut cascaded: HashMap<Key, HashSet<Referent>> = HashMap::new();
        for r in referents {
            if let Some(keys) = state.waiters.remove(&r) {
                out.woken.extend(keys.iter().map(unshared));
            }
            for key in state.cascaded.remove(&r).unwrap_or_default() {
                cascaded.entry(unshared(&key)).or_default().insert(r);
            }
        }
        out.cascaded = cascaded.into_iter().collect();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{PushedResource, TranslationSpec};
    use kube::runtime::reflector;
    use midonet_translators::entry::TranslationResource;

    const BRIDGE: &str = "11111111-1111-4111-8111-111111111111";
    const PORT: &str = "22222222-2222-4222-8222-222222222222";
    const HOST: &str = "33333333-3333-4333-8333-333333333333";

    fn bridge() -> TranslationResource {
        TranslationResource::new("Bridge", "", format!(r#"{{"id":"{BRIDGE}"}}"#))
    }
    fn port() -> TranslationResource {
        TranslationResource::new(
            "Port",
            BRIDGE,
            format!(r#"{{"id":"{PORT}","type":"Bridge"}}"#),
        )
    }
    fn tr(name: &str, resources: Vec<TranslationResource>) -> Translation {
        Translation::new(name, "ns", TranslationSpec { resources })
    }

    /// A node-like provider (the bridge) and a pod-like consumer (a port on it), both cached.
    fn setup(provider: Translation) -> (Dependencies, Translation) {
        setup_with(vec![provider])
    }

    /// Like [`setup`], with several providers.
    fn setup_with(providers: Vec<Translation>) -> (Dependencies, Translation) {
        let (store, mut writer) = reflector::store::<Translation>();
        let consumer = tr("pod", vec![port()]);
        let all: Vec<Translation> = providers.into_iter().chain([consumer.clone()]).collect();
        for t in &all {
            writer.apply_watcher_event(&watcher::Event::Apply(t.clone()));
        }
        let deps = Dependencies::new(store);
        for t in all {
            deps.observe(&watcher::Event::Apply(t));
        }
        (deps, consumer)
    }

    /// HOST's membership of a tunnel zone.
    fn membership() -> TranslationResource {
        const ZONE: &str = "55555555-5555-4555-8555-555555555555";
        TranslationResource::new(
            "TunnelZoneHost",
            ZONE,
            format!(r#"{{"hostId":"{HOST}","ipAddress":"10.0.0.1"}}"#),
        )
    }

    fn creating(t: &Translation) -> Vec<Desired> {
        steps::parse_lenient(t.desired_resources())
    }

    fn nothing_pushed(_: &Translation) -> TranslationStatus {
        TranslationStatus::default()
    }

    fn everything_pushed(t: &Translation) -> TranslationStatus {
        TranslationStatus {
            pushed: steps::parse_lenient(t.desired_resources())
                .into_iter()
                .map(|d| PushedResource {
                    kind: d.resource.kind().name().into(),
                    path: d.path,
                    ..PushedResource::default()
                })
                .collect(),
            ..TranslationStatus::default()
        }
    }

    #[test]
    fn the_provider_of_a_referent_and_its_path() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let bridge_ref = Referent::Object(BRIDGE.parse().unwrap());
        let (key, path) = deps.provider_of(&bridge_ref).expect("provided");
        assert_eq!(key.name, "node");
        assert_eq!(path, format!("/bridges/{BRIDGE}"));
        assert_eq!(
            deps.providers_of(&ObjectRef::from_obj(&consumer)),
            vec![key]
        );
        let port_ref = Referent::Object(PORT.parse().unwrap());
        assert_eq!(
            deps.provider_of(&port_ref).map(|(k, _)| k.name).as_deref(),
            Some("pod")
        );
        assert!(deps.provider_of(&Referent::Object(Uuid::nil())).is_none());
    }

    #[test]
    fn held_until_the_provider_pushes_then_woken() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let key = ObjectRef::from_obj(&consumer);
        let desired = creating(&consumer);
        let refs: Vec<&Desired> = desired.iter().collect();

        let (blocker, left) = deps.hold(&key, &refs, nothing_pushed).expect("held");
        let bridge_ref = Referent::Object(BRIDGE.parse().unwrap());
        assert_eq!(blocker.awaited, Awaited::Referent(bridge_ref));
        assert_eq!(blocker.provider.map(|p| p.name).as_deref(), Some("node"));
        assert!(left <= MAX_HOLD);

        // The provider's push wakes exactly the waiter, once.
        assert_eq!(deps.pushed([bridge_ref]).woken, vec![key.clone()]);
        assert!(deps.pushed([bridge_ref]).woken.is_empty());

        // With the bridge recorded as pushed, nothing holds it any more.
        let pushed = |_: &Translation| TranslationStatus {
            pushed: vec![PushedResource {
                kind: "Bridge".into(),
                path: format!("/bridges/{BRIDGE}"),
                ..PushedResource::default()
            }],
            ..TranslationStatus::default()
        };
        assert!(deps.hold(&key, &refs, pushed).is_none());
    }

    #[test]
    fn held_past_max_hold_only_while_the_provider_progresses() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let key = ObjectRef::from_obj(&consumer);
        let desired = creating(&consumer);
        let refs: Vec<&Desired> = desired.iter().collect();
        let start = Instant::now();
        assert!(deps.hold_at(&key, &refs, nothing_pushed, start).is_some());
        let late = start + MAX_HOLD + Duration::from_secs(1);
        // The provider is live, not held, never failed: still held, looked at again soon.
        let (_, left) = deps
            .hold_at(&key, &refs, nothing_pushed, late)
            .expect("held while the provider progresses");
        assert_eq!(left, PROGRESS_RECHECK);
        // Its push failed: the waiter goes, and the backend decides.
        let failed = |_: &Translation| TranslationStatus {
            conditions: vec![crate::crd::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "BackendError".into(),
                ..crate::crd::Condition::default()
            }],
            ..TranslationStatus::default()
        };
        assert!(deps.hold_at(&key, &refs, failed, late).is_none());
        // However long it progresses, never past HOLD_WHILE_PROGRESSING.
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let key = ObjectRef::from_obj(&consumer);
        assert!(deps.hold_at(&key, &refs, nothing_pushed, start).is_some());
        let end = start + HOLD_WHILE_PROGRESSING;
        assert!(deps.hold_at(&key, &refs, nothing_pushed, end).is_none());
    }

    #[test]
    fn a_provider_held_itself_does_not_extend_a_hold() {
        // Two Translations each waiting on the other: neither progresses, so both go at
        // MAX_HOLD (the backend decides).
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let key = ObjectRef::from_obj(&consumer);
        let desired = creating(&consumer);
        let refs: Vec<&Desired> = desired.iter().collect();
        let node = ObjectRef::from_obj(&tr("node", vec![bridge()]));
        let start = Instant::now();
        assert!(deps.hold_at(&key, &refs, nothing_pushed, start).is_some());
        deps.lock().held_since.insert(SharedKey::new(node), start);
        let late = start + MAX_HOLD + Duration::from_secs(1);
        assert!(deps.hold_at(&key, &refs, nothing_pushed, late).is_none());
    }

    #[test]
    fn not_held_for_what_it_provides_itself() {
        let (deps, _) = setup(tr("node", vec![bridge()]));
        let both = tr("both", vec![bridge(), port()]);
        deps.observe(&watcher::Event::Apply(both.clone()));
        let desired = creating(&both);
        let refs: Vec<&Desired> = desired.iter().collect();
        assert!(deps
            .hold(&ObjectRef::from_obj(&both), &refs, nothing_pushed)
            .is_none());
    }

    #[test]
    fn held_briefly_for_a_referent_nobody_provides_yet() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        deps.observe(&watcher::Event::Delete(tr("node", vec![bridge()])));
        let key = ObjectRef::from_obj(&consumer);
        let desired = creating(&consumer);
        let refs: Vec<&Desired> = desired.iter().collect();
        let (blocker, left) = deps.hold(&key, &refs, nothing_pushed).expect("held");
        assert_eq!(blocker.provider, None);
        assert!(left <= UNPROVIDED_HOLD);
        // Whoever pushes the bridge wakes it.
        let Awaited::Referent(bridge_ref) = blocker.awaited else {
            panic!("held for {:?}", blocker.awaited)
        };
        assert_eq!(deps.pushed([bridge_ref]).woken, vec![key]);
    }

    #[test]
    fn entries_are_derived_again_only_when_the_spec_or_the_deletion_changed() {
        let interface: Interface = (HOST.parse().unwrap(), "eth0".into());
        let mut pod = tr("pod", vec![binding(PORT)]);
        pod.metadata.uid = Some("u".into());
        pod.metadata.generation = Some(1);
        let deps = Dependencies::new(reflector::store::<Translation>().0);
        deps.observe(&watcher::Event::Apply(pod.clone()));
        let key = ObjectRef::from_obj(&pod);
        assert_eq!(deps.interfaces_of(&key), vec![interface.clone()]);
        // Its deletion deleted the binding; the status it writes meanwhile does not bring
        // the binding back into the index.
        deps.bindings_deleted(&key);
        let mut with_status = pod.clone();
        with_status.status = Some(TranslationStatus::default());
        deps.observe(&watcher::Event::Apply(with_status.clone()));
        assert!(deps.interfaces_of(&key).is_empty());
        // A new spec is derived again.
        let mut changed = with_status;
        changed.metadata.generation = Some(2);
        deps.observe(&watcher::Event::Apply(changed));
        assert_eq!(deps.interfaces_of(&key), vec![interface]);
    }

    fn binding(port: &str) -> TranslationResource {
        TranslationResource::new(
            "HostInterfacePort",
            HOST,
            format!(r#"{{"hostId":"{HOST}","portId":"{port}","interfaceName":"eth0"}}"#),
        )
    }

    #[test]
    fn a_bound_interface_holds_a_new_binding_until_the_old_one_is_deleted() {
        const NEW_PORT: &str = "66666666-6666-4666-8666-666666666666";
        // The old pod's Translation bound eth0 (to PORT); the new one binds it to NEW_PORT.
        let (deps, _) = setup_with(vec![
            tr("old-pod", vec![binding(PORT)]),
            tr("tunnel-endpoint", vec![membership()]),
        ]);
        let new_port = TranslationResource::new(
            "Port",
            BRIDGE,
            format!(r#"{{"id":"{NEW_PORT}","type":"Bridge"}}"#),
        );
        let new = tr("new-pod", vec![bridge(), new_port, binding(NEW_PORT)]);
        deps.observe(&watcher::Event::Apply(new.clone()));
        let key = ObjectRef::from_obj(&new);
        let desired = creating(&new);
        let refs: Vec<&Desired> = desired.iter().collect();

        // Not held while the old binding was never pushed: nothing is bound in MidoNet.
        let all_but_the_old_pod = |t: &Translation| match t.metadata.name.as_deref() {
            Some("old-pod") => TranslationStatus::default(),
            _ => everything_pushed(t),
        };
        assert_eq!(deps.hold(&key, &refs, all_but_the_old_pod), None);

        // The old pod's deletion is awaited: it does not step aside for pushes.
        let old_key = ObjectRef::<Translation>::new("old-pod").within("ns");
        assert!(deps.binding_awaited(&old_key));
        let tunnel = ObjectRef::<Translation>::new("tunnel-endpoint").within("ns");
        assert!(!deps.binding_awaited(&tunnel), "it binds nothing");

        let (blocker, left) = deps.hold(&key, &refs, everything_pushed).expect("held");
        let host: Uuid = HOST.parse().unwrap();
        assert_eq!(blocker.awaited, Awaited::Interface((host, "eth0".into())));
        assert_eq!(blocker.provider.map(|p| p.name).as_deref(), Some("old-pod"));
        assert!(left <= MAX_HOLD);

        // The old binding's deletion wakes it, and frees the interface.
        let old = ObjectRef::<Translation>::new("old-pod").within("ns");
        assert_eq!(deps.bindings_deleted(&old), vec![key.clone()]);
        assert_eq!(deps.hold(&key, &refs, everything_pushed), None);
        assert!(!deps.binding_awaited(&key), "nobody else binds eth0 now");
    }

    #[test]
    fn a_refused_binding_waits_for_a_binding_on_its_host_to_go() {
        let (store, _writer) = reflector::store::<Translation>();
        let deps = Dependencies::new(store);
        let key = ObjectRef::<Translation>::new("pod").within("ns");
        let old = tr("old-pod", vec![binding(PORT)]);
        deps.observe(&watcher::Event::Apply(old.clone()));
        deps.wait_for_interface(&key, HOST.parse().unwrap());
        assert_eq!(deps.bindings_deleted(&ObjectRef::from_obj(&old)), vec![key]);
    }

    #[test]
    fn a_binding_taken_over_stays_released_when_its_old_translation_changes() {
        let (store, _writer) = reflector::store::<Translation>();
        let deps = Dependencies::new(store);
        let old = tr("old-pod", vec![binding(PORT)]);
        deps.observe(&watcher::Event::Apply(old.clone()));
        let key = ObjectRef::from_obj(&old);
        let eth0: Interface = (HOST.parse().unwrap(), "eth0".into());
        assert_eq!(deps.interfaces_of(&key), vec![eth0.clone()]);
        deps.taken_over(&eth0, &key);
        // Marked for deletion (or any other update): its spec still names the binding.
        deps.observe(&watcher::Event::Apply(old.clone()));
        assert!(deps.interfaces_of(&key).is_empty());
        assert!(deps.binders(&eth0).is_empty());
        // Gone and written again: a new Translation of that name binds what it says.
        deps.observe(&watcher::Event::Delete(old.clone()));
        deps.observe(&watcher::Event::Apply(old));
        assert_eq!(deps.interfaces_of(&key), vec![eth0]);
    }

    #[test]
    fn never_held_for_a_host() {
        let binding = TranslationResource::new(
            "HostInterfacePort",
            HOST,
            format!(r#"{{"hostId":"{HOST}","portId":"{PORT}","interfaceName":"eth0"}}"#),
        );
        // The host's membership is provided (and pushed) by another Translation; the host
        // itself by nobody.
        let (deps, _) = setup(tr("tunnel-endpoint", vec![membership()]));
        let pod = tr("pod2", vec![bridge(), port(), binding]);
        deps.observe(&watcher::Event::Apply(pod.clone()));
        let desired = creating(&pod);
        let refs: Vec<&Desired> = desired.iter().collect();
        assert_eq!(
            deps.hold(&ObjectRef::from_obj(&pod), &refs, everything_pushed),
            None
        );
    }

    #[test]
    fn held_while_the_provider_is_being_deleted() {
        let mut node = tr("node", vec![bridge()]);
        node.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let (deps, consumer) = setup(node);
        let desired = creating(&consumer);
        let refs: Vec<&Desired> = desired.iter().collect();
        assert!(deps
            .hold(&ObjectRef::from_obj(&consumer), &refs, everything_pushed)
            .is_some());
    }

    /// The Translations a cascade of `referents` from `except` would have verified.
    fn consumers_of(deps: &Dependencies, referents: &HashSet<Referent>, except: &Key) -> Vec<Key> {
        deps.note_cascade(referents, except);
        let mut keys: Vec<Key> = deps
            .pushed(referents.iter().copied())
            .cascaded
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.sort_by(|a, b| a.name.cmp(&b.name));
        keys
    }

    #[test]
    fn consumers_are_indexed_by_what_they_need_from_others() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let bridge_ref: HashSet<Referent> = [Referent::Object(BRIDGE.parse().unwrap())].into();
        let node = ObjectRef::<Translation>::new("node").within("ns");
        assert_eq!(
            consumers_of(&deps, &bridge_ref, &node),
            vec![ObjectRef::from_obj(&consumer)]
        );
        // What a Translation provides itself does not make it a consumer.
        deps.observe(&watcher::Event::Apply(tr("both", vec![bridge(), port()])));
        assert_eq!(consumers_of(&deps, &bridge_ref, &node).len(), 1);
        // Forgotten when deleted, and after a re-list that no longer lists it.
        deps.observe(&watcher::Event::Delete(consumer));
        assert!(consumers_of(&deps, &bridge_ref, &node).is_empty());
        deps.observe(&watcher::Event::Init);
        deps.observe(&watcher::Event::InitApply(tr("pod2", vec![port()])));
        deps.observe(&watcher::Event::InitDone);
        let pod2 = ObjectRef::<Translation>::new("pod2").within("ns");
        assert_eq!(consumers_of(&deps, &bridge_ref, &node), vec![pod2.clone()]);
        assert!(consumers_of(&deps, &bridge_ref, &pod2).is_empty());
    }

    #[test]
    fn a_cascade_is_verified_when_the_referent_is_pushed_again() {
        let (deps, consumer) = setup(tr("node", vec![bridge()]));
        let bridge_ref = Referent::Object(BRIDGE.parse().unwrap());
        let node = ObjectRef::<Translation>::new("node").within("ns");
        deps.observe(&watcher::Event::Delete(tr("node", vec![bridge()])));
        deps.note_cascade(&[bridge_ref].into(), &node);
        // Pushed again (by a new provider): the consumer is to be verified, once.
        let pushed = deps.pushed([bridge_ref]);
        assert_eq!(
            pushed.cascaded,
            vec![(ObjectRef::from_obj(&consumer), [bridge_ref].into())]
        );
        assert!(deps.pushed([bridge_ref]).cascaded.is_empty());
        // A consumer deleted before the referent comes back has nothing to verify.
        deps.note_cascade(&[bridge_ref].into(), &node);
        deps.observe(&watcher::Event::Delete(consumer));
        assert!(deps.pushed([bridge_ref]).cascaded.is_empty());
    }

    #[test]
    fn cascaded_paths_follow_dependencies_within_the_consumer() {
        const OTHER: &str = "44444444-4444-4444-8444-444444444444";
        let binding = TranslationResource::new(
            "HostInterfacePort",
            HOST,
            format!(r#"{{"hostId":"{HOST}","portId":"{PORT}","interfaceName":"eth0"}}"#),
        );
        let unrelated = TranslationResource::new("Bridge", "", format!(r#"{{"id":"{OTHER}"}}"#));
        let consumer = tr("pod", vec![port(), binding, unrelated]);
        let desired = creating(&consumer);
        let taken: HashSet<Referent> = [Referent::Object(BRIDGE.parse().unwrap())].into();
        assert_eq!(
            cascaded_paths(&desired, &taken),
            vec![
                format!("/ports/{PORT}"),
                format!("/hosts/{HOST}/ports/{PORT}"),
            ]
        );
        assert!(cascaded_paths(&desired, &HashSet::new()).is_empty());
    }

    #[test]
    fn a_records_referents_follow_from_its_path() {
        let bridge: Uuid = BRIDGE.parse().unwrap();
        let host: Uuid = HOST.parse().unwrap();
        assert_eq!(
            recorded_referents("Bridge", &format!("/bridges/{BRIDGE}")),
            vec![Referent::Object(bridge)]
        );
        assert_eq!(
            recorded_referents(
                "TunnelZoneHost",
                &format!("/tunnel_zones/{PORT}/hosts/{HOST}")
            ),
            vec![Referent::TunnelZoneMember(host)]
        );
        assert!(recorded_referents("PortLink", &format!("/ports/{PORT}/link")).is_empty());
        assert!(
            recorded_referents("HostInterfacePort", &format!("/hosts/{HOST}/ports/{PORT}"))
                .is_empty()
        );
    }

    #[test]
    fn a_bridge_whose_filter_chain_is_deleted_is_kept_with_the_filter_cleared() {
        const CHAIN: &str = "77777777-7777-4777-8777-777777777777";
        let filtered = TranslationResource::new(
            "Bridge",
            "",
            format!(r#"{{"id":"{BRIDGE}","inboundFilterId":"{CHAIN}"}}"#),
        );
        let node = tr("node", vec![filtered, port()]);
        let desired = creating(&node);
        let chain: Uuid = CHAIN.parse().unwrap();
        assert_eq!(clearable_references(&desired[0].resource), vec![chain]);
        assert!(clearable_references(&desired[1].resource).is_empty());
        // The bridge stays (its filter cleared), and so do its ports.
        assert_eq!(
            cascade_hits(&desired, &[Referent::Object(chain)].into()),
            vec![(format!("/bridges/{BRIDGE}"), Hit::Cleared(vec![chain]))]
        );
        // A port whose bridge goes is deleted, whatever else it names.
        assert_eq!(
            cascade_hits(
                &desired,
                &[Referent::Object(BRIDGE.parse().unwrap())].into()
            ),
            vec![(format!("/ports/{PORT}"), Hit::Deleted)]
        );
    }

    #[test]
    fn a_refused_push_waits_for_any_provider() {
        let (store, _writer) = reflector::store::<Translation>();
        let deps = Dependencies::new(store);
        let key = ObjectRef::<Translation>::new("pod").within("ns");
        let bridge = Referent::Object(BRIDGE.parse().unwrap());
        deps.wait_for(&key, [bridge]);
        assert_eq!(deps.pushed([bridge]).woken, vec![key]);
    }
}
