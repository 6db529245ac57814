//! The translators' view of existing Translations: an informer cache plus an index by owner,
//! plus the controller's own recent writes.
//!
//! Pruning and no-op detection read only this (never an uncached LIST/GET per event). The
//! cache can lag behind our own writes (seed 004): `Recent` remembers what we wrote until the
//! cache shows it, so a second event for the same object does not write again.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use midonet_translators::meta::GLOBAL_LABEL;

use crate::authz::Authz;
use crate::crd::Translation;

/// Owner key of the global Translations (they have no owner).
pub const GLOBAL_OWNER: &str = "global";

/// Called with (owner kind, owner name, Translation namespace) when an owned Translation is
/// gone, so that owner's controller re-checks it.
pub type OwnerNotifier = Box<dyn Fn(&str, &str) + Send + Sync>;

#[derive(Default)]
struct IndexState {
    by_owner: HashMap<String, BTreeSet<(String, String)>>,
    notifiers: HashMap<String, OwnerNotifier>,
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
    tr.labels()
        .contains_key(GLOBAL_LABEL)
        .then(|| GLOBAL_OWNER.to_string())
}

impl OwnerIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the notifier for Translations owned by objects of `owner_kind`.
    pub fn on_owned_deleted(&self, owner_kind: &str, notifier: OwnerNotifier) {
        self.lock()
            .notifiers
            .insert(owner_kind.to_string(), notifier);
    }

    /// (namespace, name) of the Translations owned by `owner`.
    pub fn owned_by(&self, owner: &str) -> Vec<(String, String)> {
        self.lock()
            .by_owner
            .get(owner)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn insert(&self, tr: &Translation) {
        if let Some(key) = owner_key(tr) {
            self.lock()
                .by_owner
                .entry(key)
                .or_default()
                .insert((tr.namespace().unwrap_or_default(), tr.name_any()));
        }
    }

    fn remove(&self, tr: &Translation) {
        let Some(key) = owner_key(tr) else { return };
        let id = (tr.namespace().unwrap_or_default(), tr.name_any());
        let mut state = self.lock();
        if let Some(set) = state.by_owner.get_mut(&key) {
            set.remove(&id);
            if set.is_empty() {
                state.by_owner.remove(&key);
            }
        }
        if let Some(owner) = tr.owner_references().first() {
            if let Some(notify) = state.notifiers.get(&owner.kind) {
                notify(&owner.name, &id.0);
            }
        }
    }

    fn reset(&self) {
        self.lock().by_owner.clear();
    }
}

/// What the runner wrote, per (namespace, name), until the cache catches up.
#[derive(Default)]
pub struct Recent {
    writes: Mutex<HashMap<(String, String), RecentWrite>>,
}

struct RecentWrite {
    /// Fingerprint of what we applied.
    fingerprint: String,
    /// The cached object's resourceVersion when we wrote (None: not in the cache).
    cached_rv_before: Option<String>,
    /// True for a deletion.
    deleted: bool,
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), RecentWrite>> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wrote(
        &self,
        key: (String, String),
        fingerprint: String,
        cached_rv_before: Option<String>,
    ) {
        self.lock().insert(
            key,
            RecentWrite {
                fingerprint,
                cached_rv_before,
                deleted: false,
            },
        );
    }

    pub fn deleted(&self, key: (String, String), cached_rv_before: Option<String>) {
        self.lock().insert(
            key,
            RecentWrite {
                fingerprint: String::new(),
                cached_rv_before,
                deleted: true,
            },
        );
    }

    /// True when the cache has not caught up with a write of ours that already produced
    /// `fingerprint` (or, for `fingerprint == None`, a deletion). Forgets writes the cache
    /// has moved past.
    pub fn still_pending(
        &self,
        key: &(String, String),
        cached_rv: Option<&str>,
        fingerprint: Option<&str>,
    ) -> bool {
        let mut writes = self.lock();
        let Some(w) = writes.get(key) else {
            return false;
        };
        if w.cached_rv_before.as_deref() != cached_rv {
            // The cache shows a newer version than the one we wrote over: trust the cache.
            writes.remove(key);
            return false;
        }
        match fingerprint {
            Some(f) => !w.deleted && w.fingerprint == f,
            None => w.deleted,
        }
    }
}

/// Starts the shared Translation informer; returns its store and the owner index.
/// `synced` as for [`crate::cache::cached`].
pub fn start(
    client: Client,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
) -> (Store<Translation>, OwnerIndex) {
    let (reader, writer) = reflector::store();
    let index = OwnerIndex::default();
    let api: Api<Translation> = Api::all(client);
    let stream = crate::cache::reflected(writer, api, watcher::Config::default(), authz, synced);
    let idx = index.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut init: Vec<Translation> = Vec::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(tr)) => idx.insert(&tr),
                Ok(watcher::Event::Delete(tr)) => idx.remove(&tr),
                Ok(watcher::Event::Init) => init.clear(),
                Ok(watcher::Event::InitApply(tr)) => init.push(tr),
                Ok(watcher::Event::InitDone) => {
                    idx.reset();
                    for tr in init.drain(..) {
                        idx.insert(&tr);
                    }
                }
                // A denial was reported (rate-limited) by the stream itself.
                Err(err) if crate::authz::is_forbidden_watch(&err) => {}
                Err(err) => tracing::warn!(error = %err, "Translation watch error; retrying"),
            }
        }
    });
    (reader, index)
}

/// Key of a Translation in the cache.
pub fn cache_ref(namespace: &str, name: &str) -> ObjectRef<Translation> {
    ObjectRef::new(name).within(namespace)
}
