//! The translators' view of existing Translations: an index by owner over the shared
//! informer's cache (see [`crate::informer`]), plus the controller's own recent writes.
//!
//! **Guaranteed**: [`OwnerIndex`] files every cached Translation under its owner key (its
//! first owner's UID, [`POLICY_GROUPS_OWNER`] for a NetworkPolicy group, [`GLOBAL_OWNER`]
//! for a global one; a Translation with none of these is not filed) and under its first
//! owner's kind and name; it follows every informer event, and a re-list replaces it whole
//! once complete. When a filed Translation is deleted, the notifier registered for its
//! owner's kind is called, so that owner is reconciled again. [`Recent`] remembers each
//! write of the runner until the cache shows the object past the version written over, so
//! a second event for the same owner does not write again.
//!
//! **Assumed**: pruning and no-op detection read only this, never an uncached LIST or GET
//! per event; so the cache may lag behind the runner's own writes, which is what `Recent`
//! covers. An owner's Translations are in its namespace (owner references cannot cross
//! namespaces).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use midonet_translators::meta::GLOBAL_LABEL;
use midonet_translators::policy::GROUP_LABEL;

use crate::crd::{Translation, TranslationKey};

/// Owner key of the global Translations (they have no owner).
pub const GLOBAL_OWNER: &str = "global";
/// Owner key of the NetworkPolicy group Translations (they have no owner: the NetworkPolicy
/// controller keeps them while some policy uses them); also the key of their notifier.
pub const POLICY_GROUPS_OWNER: &str = "networkpolicy-groups";

/// Called with (owner kind, owner name, Translation namespace) when an owned Translation is
/// gone, so that owner's controller re-checks it.
pub type OwnerNotifier = Box<dyn Fn(&str, &str) + Send + Sync>;

/// (owner kind, namespace, owner name) of a Translation's first owner.
type OwnerRefKey = (String, String, String);

/// A Translation's (namespace, name). The index names each Translation in three maps and
/// each owner in two: one shared allocation apiece, not one per map.
type Id = Arc<TranslationKey>;

/// The Translations filed under one owner: sorted, exactly sized. An owner has one to a
/// few, which a `BTreeSet` would give a node of room for eleven.
#[derive(Default)]
struct Ids(Vec<Id>);

impl Ids {
    fn insert(&mut self, id: Id) {
        if let Err(at) = self.0.binary_search(&id) {
            self.0.insert(at, id);
            self.0.shrink_to_fit();
        }
    }

    fn remove(&mut self, id: &TranslationKey) {
        if let Ok(at) = self.0.binary_search_by(|probe| (**probe).cmp(id)) {
            self.0.remove(at);
            self.0.shrink_to_fit();
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn to_vec(&self) -> Vec<TranslationKey> {
        self.0.iter().map(|id| (**id).clone()).collect()
    }
}

#[derive(Default)]
struct IndexState {
    by_owner: HashMap<Arc<str>, Ids>,
    /// The same Translations by their first owner's kind and name, for a controller that
    /// takes over the Translations of another kind's object (see
    /// [`super::TranslatorKind::inherited`]).
    by_owner_ref: HashMap<Arc<OwnerRefKey>, Ids>,
    /// Where each Translation is filed, so that a changed owner moves it.
    filed: HashMap<Id, (Arc<str>, Option<Arc<OwnerRefKey>>)>,
    notifiers: HashMap<String, OwnerNotifier>,
    /// (owner key, namespace, name) of the Translations listed by a (re-)list in progress;
    /// they replace the index when the list is complete.
    relisted: Vec<(String, Option<OwnerRefKey>, TranslationKey)>,
}

impl IndexState {
    fn file(&mut self, key: String, by_ref: Option<OwnerRefKey>, id: TranslationKey) {
        self.unfile(&id);
        let id: Id = Arc::new(id);
        let key: Arc<str> = match self.by_owner.get_key_value(key.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => key.into(),
        };
        let by_ref = by_ref.map(|r| match self.by_owner_ref.get_key_value(&r) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(r),
        });
        self.by_owner
            .entry(key.clone())
            .or_default()
            .insert(id.clone());
        if let Some(r) = &by_ref {
            self.by_owner_ref
                .entry(r.clone())
                .or_default()
                .insert(id.clone());
        }
        self.filed.insert(id, (key, by_ref));
    }

    fn unfile(&mut self, id: &TranslationKey) {
        let Some((key, by_ref)) = self.filed.remove(id) else {
            return;
        };
        if let Some(set) = self.by_owner.get_mut(&key) {
            set.remove(id);
            if set.is_empty() {
                self.by_owner.remove(&key);
            }
        }
        if let Some(r) = by_ref {
            if let Some(set) = self.by_owner_ref.get_mut(&r) {
                set.remove(id);
                if set.is_empty() {
                    self.by_owner_ref.remove(&r);
                }
            }
        }
    }
}

/// The (kind, namespace, name) of a Translation's first owner; owners are in the
/// Translation's namespace.
fn owner_ref_key(tr: &Translation) -> Option<OwnerRefKey> {
    let o = tr.owner_references().first()?;
    Some((o.kind.clone(), tr.namespace()?, o.name.clone()))
}

/// The index of Translations by owner UID (or [`GLOBAL_OWNER`]).
#[derive(Clone, Default)]
pub struct OwnerIndex {
    state: Arc<Mutex<IndexState>>,
}

/// The owner key of a Translation: its first owner's UID, or `global`.
pub fn owner_key(tr: &Translation) -> Option<String> {
    if let Some(owner) = tr.owner_references().first() {
        return Some(owner.uid.clone());
    }
    if tr.has_label(GROUP_LABEL) {
        return Some(POLICY_GROUPS_OWNER.to_string());
    }
    tr.has_label(GLOBAL_LABEL).then(|| GLOBAL_OWNER.to_string())
}

impl OwnerIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, IndexState> {
        crate::locks::lock(&self.state)
    }

    /// Registers the notifier for Translations owned by objects of `owner_kind`.
    pub fn on_owned_deleted(&self, owner_kind: &str, notifier: OwnerNotifier) {
        self.lock()
            .notifiers
            .insert(owner_kind.to_string(), notifier);
    }

    /// (namespace, name) of the Translations owned by `owner`.
    pub fn owned_by(&self, owner: &str) -> Vec<TranslationKey> {
        self.lock()
            .by_owner
            .get(owner)
            .map(Ids::to_vec)
            .unwrap_or_default()
    }

    /// (namespace, name) of the Translations whose first owner is the `kind` object
    /// `namespace/name`.
    pub fn owned_by_ref(&self, kind: &str, namespace: &str, name: &str) -> Vec<TranslationKey> {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        self.lock()
            .by_owner_ref
            .get(&key)
            .map(Ids::to_vec)
            .unwrap_or_default()
    }

    /// Follows the shared Translation informer (see [`crate::informer`]).
    pub fn observe(&self, event: &watcher::Event<Translation>) {
        match event {
            watcher::Event::Apply(tr) => self.insert(tr),
            watcher::Event::Delete(tr) => self.remove(tr),
            watcher::Event::Init => self.lock().relisted.clear(),
            watcher::Event::InitApply(tr) => {
                if let (Some(key), Some(id)) = (owner_key(tr), tr.key()) {
                    let by_ref = owner_ref_key(tr);
                    self.lock().relisted.push((key, by_ref, id));
                }
            }
            watcher::Event::InitDone => {
                let mut state = self.lock();
                let relisted = std::mem::take(&mut state.relisted);
                state.by_owner.clear();
                state.by_owner_ref.clear();
                state.filed.clear();
                for (key, by_ref, id) in relisted {
                    state.file(key, by_ref, id);
                }
            }
        }
    }

    fn insert(&self, tr: &Translation) {
        // Every stored Translation has a key (see `Translation::key`).
        let Some(id) = tr.key() else {
            return;
        };
        let mut state = self.lock();
        match owner_key(tr) {
            Some(key) => state.file(key, owner_ref_key(tr), id),
            None => state.unfile(&id),
        }
    }

    fn remove(&self, tr: &Translation) {
        let Some(id) = tr.key() else {
            return;
        };
        let mut state = self.lock();
        state.unfile(&id);
        if owner_key(tr).is_none() {
            return;
        }
        if let Some(owner) = tr.owner_references().first() {
            if let Some(notify) = state.notifiers.get(&owner.kind) {
                notify(&owner.name, &id.0);
            }
        } else if tr.has_label(GROUP_LABEL) {
            if let Some(notify) = state.notifiers.get(POLICY_GROUPS_OWNER) {
                notify(&id.1, &id.0);
            }
        }
    }
}

/// What the runner wrote, per (namespace, name), until the cache catches up. A record goes
/// as soon as the cache shows another version than the one written over ([`Self::seen`],
/// or already at [`Self::wrote`]): kept until the owner's next reconcile instead, every
/// Translation written would keep one for as long as its owner is unchanged.
pub struct Recent {
    writes: Mutex<HashMap<TranslationKey, RecentWrite>>,
    /// The informer's store, updated before its observers (and so [`Self::seen`]) are called.
    cache: Store<Translation>,
}

struct RecentWrite {
    /// Digest of what we applied (see `sync::applied_digest`).
    digest: String,
    /// The cached object's resourceVersion when we wrote (None: not in the cache).
    cached_rv_before: Option<String>,
    /// True for a deletion.
    deleted: bool,
}

impl RecentWrite {
    /// The cache, showing `cached_rv`, has moved past the version this write was made over.
    fn overtaken(&self, cached_rv: Option<&str>) -> bool {
        self.cached_rv_before.as_deref() != cached_rv
    }
}

impl Recent {
    pub fn new(cache: Store<Translation>) -> Recent {
        Recent {
            writes: Mutex::default(),
            cache,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TranslationKey, RecentWrite>> {
        crate::locks::lock(&self.writes)
    }

    pub fn wrote(&self, key: TranslationKey, digest: String, cached_rv_before: Option<String>) {
        self.record(
            key,
            RecentWrite {
                digest,
                cached_rv_before,
                deleted: false,
            },
        );
    }

    pub fn deleted(&self, key: TranslationKey, cached_rv_before: Option<String>) {
        self.record(
            key,
            RecentWrite {
                digest: String::new(),
                cached_rv_before,
                deleted: true,
            },
        );
    }

    /// Records `write` unless the cache has moved past it already (its event came before
    /// the answer to our request). Under the lock [`Self::seen`] takes, so an event cannot
    /// slip between the check and the record.
    fn record(&self, key: TranslationKey, write: RecentWrite) {
        let mut writes = self.lock();
        let cached = self.cache.get(&cache_ref(&key.0, &key.1));
        let cached_rv = cached
            .as_ref()
            .and_then(|t| t.metadata.resource_version.as_deref());
        if write.overtaken(cached_rv) {
            writes.remove(&key);
        } else {
            writes.insert(key, write);
        }
    }

    /// The cache shows `key` at `cached_rv`: a record written over another version is done.
    pub fn seen(&self, key: &TranslationKey, cached_rv: Option<&str>) {
        let mut writes = self.lock();
        if writes.get(key).is_some_and(|w| w.overtaken(cached_rv)) {
            writes.remove(key);
        }
    }

    /// Forgets what was written for `key`: the cache has seen it deleted. Kept until then,
    /// a create's record (written when the cache did not show the name) would look pending
    /// for ever once the name is gone again, and its re-creation would be skipped.
    pub fn forget(&self, key: &TranslationKey) {
        self.lock().remove(key);
    }

    /// True when the cache has not caught up with a write of ours of a Translation whose
    /// digest is `digest` (or, for `digest == None`, a deletion). Forgets writes the cache
    /// has moved past.
    pub fn still_pending(
        &self,
        key: &TranslationKey,
        cached_rv: Option<&str>,
        digest: Option<&str>,
    ) -> bool {
        let mut writes = self.lock();
        let Some(w) = writes.get(key) else {
            return false;
        };
        if w.overtaken(cached_rv) {
            // The cache shows a newer version than the one we wrote over: trust the cache.
            writes.remove(key);
            return false;
        }
        match digest {
            Some(d) => !w.deleted && w.digest == d,
            None => w.deleted,
        }
    }
}

/// Key of a Translation in the cache.
pub fn cache_ref(namespace: &str, name: &str) -> ObjectRef<Translation> {
    ObjectRef::new(name).within(namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TranslationSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owned(name: &str, kind: &str, owner: &str, uid: &str) -> Translation {
        let mut t = Translation::new(name, "ns", TranslationSpec { resources: vec![] });
        t.metadata.owner_references = Some(vec![OwnerReference {
            kind: kind.into(),
            name: owner.into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }]);
        t
    }

    #[test]
    fn a_reowned_translation_moves_to_its_new_owner() {
        let index = OwnerIndex::default();
        let id = ("ns".to_string(), "gen".to_string());
        index.observe(&watcher::Event::Apply(owned(
            "gen",
            "Endpoints",
            "web",
            "ep-uid",
        )));
        assert_eq!(index.owned_by("ep-uid"), vec![id.clone()]);
        assert_eq!(
            index.owned_by_ref("Endpoints", "ns", "web"),
            vec![id.clone()]
        );
        // Taken over by the Service of the same name.
        index.observe(&watcher::Event::Apply(owned(
            "gen", "Service", "web", "svc-uid",
        )));
        assert!(index.owned_by("ep-uid").is_empty());
        assert!(index.owned_by_ref("Endpoints", "ns", "web").is_empty());
        assert_eq!(index.owned_by("svc-uid"), vec![id.clone()]);
        assert_eq!(index.owned_by_ref("Service", "ns", "web"), vec![id]);
        index.observe(&watcher::Event::Delete(owned(
            "gen", "Service", "web", "svc-uid",
        )));
        assert!(index.owned_by("svc-uid").is_empty());
        assert!(index.owned_by_ref("Service", "ns", "web").is_empty());
    }

    #[test]
    fn an_owners_translations_are_listed_in_order_once_each() {
        let index = OwnerIndex::default();
        for name in ["c", "a", "b", "a"] {
            index.observe(&watcher::Event::Apply(owned(name, "Pod", "p", "p-uid")));
        }
        let names = |v: Vec<TranslationKey>| v.into_iter().map(|(_, n)| n).collect::<Vec<_>>();
        assert_eq!(names(index.owned_by("p-uid")), ["a", "b", "c"]);
        index.observe(&watcher::Event::Delete(owned("b", "Pod", "p", "p-uid")));
        assert_eq!(names(index.owned_by_ref("Pod", "ns", "p")), ["a", "c"]);
        let state = index.lock();
        assert_eq!(state.by_owner["p-uid"].0.capacity(), 2);
    }

    #[test]
    fn a_create_is_pending_until_the_cache_shows_it_and_not_after_a_deletion() {
        let (cache, _writer) = kube::runtime::reflector::store::<Translation>();
        let recent = Recent::new(cache);
        let key = (
            "kube-system".to_string(),
            "midonet-global.1.chains".to_string(),
        );
        recent.wrote(key.clone(), "f".into(), None);
        // Not cached yet: our create is in flight.
        assert!(recent.still_pending(&key, None, Some("f")));
        // The cache saw it and then saw it deleted: a create is due again.
        recent.forget(&key);
        assert!(!recent.still_pending(&key, None, Some("f")));
    }

    #[test]
    fn a_write_is_forgotten_once_the_cache_shows_it() {
        let (cache, mut writer) = kube::runtime::reflector::store::<Translation>();
        let recent = Recent::new(cache);
        let key = ("ns".to_string(), "t".to_string());
        let at = |rv: &str| {
            let mut t = Translation::new("t", "ns", TranslationSpec { resources: vec![] });
            t.metadata.resource_version = Some(rv.into());
            t
        };
        // An update over version 1; the cache shows version 2, ours: nothing pending.
        writer.apply_watcher_event(&watcher::Event::Apply(at("1")));
        recent.wrote(key.clone(), "f".into(), Some("1".into()));
        assert!(recent.still_pending(&key, Some("1"), Some("f")));
        writer.apply_watcher_event(&watcher::Event::Apply(at("2")));
        recent.seen(&key, Some("2"));
        assert!(recent.lock().is_empty());
        // The event came before the answer: the write is not recorded at all.
        recent.wrote(key.clone(), "g".into(), Some("1".into()));
        assert!(recent.lock().is_empty());
        // An event for the version written over leaves the record.
        recent.wrote(key.clone(), "h".into(), Some("2".into()));
        recent.seen(&key, Some("2"));
        assert!(recent.still_pending(&key, Some("2"), Some("h")));
    }
}
