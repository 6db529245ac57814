//! Informer caches: a reflector store plus the stream of applied objects that feeds a
//! controller. The store is created here (not by `Controller::new`) so that readiness
//! checks can wait for its initial list. Cached objects are trimmed of
//! `metadata.managedFields`: nothing reads them, and they are a large part of every object.
//!
//! Every watch of the process is built here, so that a list or watch the API server
//! refuses is reported as a named authorization error (see [`crate::authz`]) and not only
//! retried with backoff.
//!
//! Every list is a consistent read from etcd, in pages of 500 objects (kube-runtime's
//! default): at most a page of full objects is held before trimming. A list from the
//! apiserver's watch cache (`resourceVersion=0`, as client-go's informers list) would spare
//! etcd, but the apiserver (v1.20) serves it whole, whatever the page size, and kube-core
//! sends `resourceVersion=0` only without a page size: every Pod of the cluster would
//! arrive in one response, held at once.
//!
//! A kind that several controllers read is watched once, in a [`SharedCache`]: one store,
//! and each controller subscribes to the changes it applies. (kube-runtime's shared store
//! broadcasts no deletions, which both Pod readers need.)
//!
//! A re-list (the watch expired, say over an apiserver restart) replaces the store whole,
//! and kube-runtime reports nothing about the objects it no longer holds: they were
//! deleted while the watch was down. Every watch built here reports each of them as a
//! deletion right after the re-list ([`with_tombstones`]), as client-go's informers do, so
//! that a Pod or Service deleted during an outage has its Translations deleted at once and
//! a deleted EndpointSlice re-translates its Service, instead of waiting for garbage
//! collection or the next resync.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::{self, store::Writer, Lookup, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::authz::Authz;
use crate::locks::lock;
use crate::retry::RetryPolicy;

/// A cache of `K` and the stream of its applied objects (for `Controller::for_stream`).
/// `synced(true)` runs each time the initial (or a re-)list has been stored, `synced(false)`
/// when a list was refused for lack of rights (the cache is going stale until it is fixed).
pub fn cached<K>(
    api: Api<K>,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflected(writer, api, authz, synced).applied_objects();
    (reader, stream)
}

/// The watcher events of `K`, stored into `writer`, with [`WatchBackoff`] on errors.
/// `synced` as for [`cached`].
pub fn reflected<K>(
    writer: Writer<K>,
    api: Api<K>,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    reflected_trimmed(writer, api, authz, synced, |_| {})
}

/// [`reflected`], with `trim` dropping from each object what nobody reads before it is
/// cached (as client-go's transform functions do). `trim` sees the object whole; its
/// managedFields are dropped after it.
pub fn reflected_trimmed<K>(
    writer: Writer<K>,
    api: Api<K>,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
    trim: fn(&mut K),
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let resource = K::plural(&K::DynamicType::default()).into_owned();
    let authz = authz.clone();
    // Paged lists (see the module docs): kube-runtime's default.
    let events = watcher(api, watcher::Config::default()).modify(move |o| {
        trim(o);
        o.managed_fields_mut().clear();
    });
    let store = writer.as_reader();
    with_tombstones(
        resource.clone(),
        store,
        reflector::reflector(writer, events),
    )
    .inspect(move |event| match event {
        Ok(watcher::Event::InitDone) => synced(true),
        Err(err) => {
            let denied = authz.report_watch(&resource, err);
            if denied && matches!(err, watcher::Error::InitialListFailed(_)) {
                synced(false);
            }
        }
        Ok(_) => {}
    })
    .backoff(WATCH_RETRY.backoff())
}

/// `events` (already applied to `store`), with a [`watcher::Event::Delete`] after each
/// re-list for every object the store held before it and holds no more: deleted while the
/// watch was down. An object deleted and created again under its name meanwhile is not
/// reported: the store holds one of that name, as client-go's informers see it.
pub fn with_tombstones<K, S>(
    resource: String,
    store: Store<K>,
    events: S,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    // What the store held when the list in progress began (the reflector swaps the listed
    // objects in only at its end, so the store still held them at `Init`).
    let mut before: Option<Vec<Arc<K>>> = None;
    events.flat_map(move |event| {
        let tombstones = match &event {
            Ok(watcher::Event::Init) => {
                before = Some(store.state());
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let gone = vanished(before.take().unwrap_or_default(), &store);
                if !gone.is_empty() {
                    tracing::info!(
                        %resource,
                        deleted = gone.len(),
                        "re-listed: objects deleted while the watch was down are handled as deleted"
                    );
                }
                gone
            }
            _ => Vec::new(),
        };
        let deletions = tombstones
            .into_iter()
            .map(|gone| Ok(watcher::Event::Delete(gone)));
        futures::stream::iter(std::iter::once(event).chain(deletions))
    })
}

/// The objects of `before` that `now` holds none of by their name (and namespace).
fn vanished<K>(before: Vec<Arc<K>>, now: &Store<K>) -> Vec<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    before
        .into_iter()
        .filter(|old| {
            now.get(&old.to_object_ref(K::DynamicType::default()))
                .is_none()
        })
        .map(Arc::unwrap_or_clone)
        .collect()
}

/// A change a [`SharedCache`] applied, as its subscribers see it.
#[derive(Clone, Debug)]
pub enum Cached<K> {
    /// Created or changed (or listed): the object as the store now holds it.
    Applied(Arc<K>),
    /// Deleted: the object as last seen (the store no longer holds it).
    Deleted(Arc<K>),
}

impl<K> Cached<K> {
    /// The object, applied or deleted.
    pub fn object(self) -> Arc<K> {
        match self {
            Cached::Applied(o) | Cached::Deleted(o) => o,
        }
    }
}

/// One watch and store of `K` for every controller that reads it: each
/// [`subscribes`](Self::subscribe) to the changes, and all read the one store. The watch runs
/// in [`Self::run`]; a subscriber may come before or after it starts (it is first sent
/// everything the store holds). Each object is kept once, as `trim` leaves it: the trim must
/// keep what every subscriber reads.
pub struct SharedCache<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    inner: Arc<SharedInner<K>>,
}

impl<K> Clone for SharedCache<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        SharedCache {
            inner: self.inner.clone(),
        }
    }
}

struct SharedInner<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    /// What [`SharedCache::run`] watches with; taken by the first run.
    source: Mutex<Option<Source<K>>>,
    subscribers: Mutex<Subscribers<K>>,
}

struct Source<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    api: Api<K>,
    authz: Authz,
    trim: fn(&mut K),
}

struct Subscribers<K> {
    /// The last list's outcome (as `synced` of [`cached`]), for a late subscriber.
    listed: Option<bool>,
    all: Vec<Subscriber<K>>,
}

struct Subscriber<K> {
    tx: mpsc::UnboundedSender<Cached<K>>,
    synced: Box<dyn Fn(bool) + Send + Sync>,
}

impl<K> SharedCache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// A cache of what `api` lists, each object trimmed by `trim` (after its
    /// managedFields) before it is stored. Nothing is watched until [`Self::run`].
    pub fn new(api: Api<K>, authz: &Authz, trim: fn(&mut K)) -> Self {
        let (store, writer) = reflector::store();
        Self::with_source(
            store,
            Some(Source {
                writer,
                api,
                authz: authz.clone(),
                trim,
            }),
        )
    }

    fn with_source(store: Store<K>, source: Option<Source<K>>) -> Self {
        SharedCache {
            inner: Arc::new(SharedInner {
                store,
                source: Mutex::new(source),
                subscribers: Mutex::new(Subscribers {
                    listed: None,
                    all: Vec::new(),
                }),
            }),
        }
    }

    /// The one store (a handle to it).
    pub fn store(&self) -> Store<K> {
        self.inner.store.clone()
    }

    /// The changes from now on, after everything the store holds now (as applied).
    /// `synced` as for [`cached`]; it is called at once with the last list's outcome if
    /// there was one.
    pub fn subscribe(
        &self,
        synced: impl Fn(bool) + Send + Sync + 'static,
    ) -> impl Stream<Item = Cached<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = lock(&self.inner.subscribers);
        if let Some(ok) = subscribers.listed {
            synced(ok);
        }
        for obj in self.inner.store.state() {
            let _ = tx.send(Cached::Applied(obj));
        }
        subscribers.all.push(Subscriber {
            tx,
            synced: Box::new(synced),
        });
        crate::streams::unbounded(rx)
    }

    /// Runs the watch, forever (the caller drops it to stop). Only the first run of a
    /// cache watches; any other returns at once.
    pub async fn run(self) {
        let Some(source) = lock(&self.inner.source).take() else {
            return;
        };
        let synced = self.clone();
        let events = reflected_trimmed(
            source.writer,
            source.api,
            &source.authz,
            move |ok| synced.set_synced(ok),
            source.trim,
        );
        self.fan_out(events).await;
    }

    /// Sends each stored event to the subscribers.
    async fn fan_out(&self, events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>) {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(event) = event {
                self.dispatch(event);
            }
        }
    }

    fn set_synced(&self, ok: bool) {
        let mut subscribers = lock(&self.inner.subscribers);
        subscribers.listed = Some(ok);
        subscribers.all.iter().for_each(|s| (s.synced)(ok));
    }

    /// Sends what the store applied of `event`: an object as stored (the store's own
    /// `Arc`, no copy), a deleted one as it was, and after a (re-)list everything listed.
    fn dispatch(&self, event: watcher::Event<K>) {
        let changes = match event {
            watcher::Event::Apply(obj) => {
                let key = obj.to_object_ref(K::DynamicType::default());
                let stored = self.inner.store.get(&key).unwrap_or_else(|| Arc::new(obj));
                vec![Cached::Applied(stored)]
            }
            watcher::Event::Delete(obj) => vec![Cached::Deleted(Arc::new(obj))],
            watcher::Event::InitDone => self
                .inner
                .store
                .state()
                .into_iter()
                .map(Cached::Applied)
                .collect(),
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        };
        let mut subscribers = lock(&self.inner.subscribers);
        // A subscriber gone (its controller stopped) is forgotten.
        subscribers.all.retain(|s| {
            changes
                .iter()
                .all(|change| s.tx.send(change.clone()).is_ok())
        });
    }
}

/// Retry delays of a failed list/watch: 0.5 s doubling to at most 5 s (±20 % jitter), reset
/// by a successful event. kube-runtime's default grows to 30 s, which after an apiserver
/// restart of a few seconds left the watches down for up to half a minute more; a list or
/// watch costs the apiserver little, so retrying every 5 s at worst is cheap.
pub const WATCH_RETRY: RetryPolicy = RetryPolicy::new(
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(5),
);

/// Trims a cached object's metadata to its identity (name, namespace, uid, resourceVersion,
/// generation, timestamps), its labels when `labels`, and the annotations named in
/// `annotations`: for a controller that reads nothing else of it. Owner references,
/// finalizers and the other annotations of a Pod are a large part of its metadata (each
/// map is a `BTreeMap` node of room for eleven entries).
pub fn trim_metadata(meta: &mut ObjectMeta, labels: bool, annotations: &[&str]) {
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.self_link = None;
    if !labels {
        meta.labels = None;
    }
    meta.annotations = meta.annotations.take().and_then(|mut all| {
        all.retain(|k, _| annotations.contains(&k.as_str()));
        (!all.is_empty()).then_some(all)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            generate_name: Some("p-".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            annotations: Some(BTreeMap::from([
                ("keep".into(), "1".into()),
                ("drop".into(), "2".into()),
            ])),
            owner_references: Some(vec![OwnerReference {
                kind: "ReplicaSet".into(),
                name: "rs".into(),
                ..OwnerReference::default()
            }]),
            finalizers: Some(vec!["f".into()]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn trimmed_metadata_keeps_the_identity_and_what_is_asked_for() {
        let mut m = meta();
        trim_metadata(&mut m, true, &["keep"]);
        let want = ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            annotations: Some(BTreeMap::from([("keep".into(), "1".into())])),
            ..ObjectMeta::default()
        };
        assert_eq!(m, want);
    }

    #[test]
    fn without_labels_or_kept_annotations_both_maps_go() {
        let mut m = meta();
        trim_metadata(&mut m, false, &["other"]);
        assert_eq!((m.labels, m.annotations), (None, None));
        assert_eq!(m.name.as_deref(), Some("p"));
    }

    fn config_map(name: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("v".into(), value.into())])),
            ..Default::default()
        }
    }

    /// (applied or deleted, name, value) of each change.
    fn seen(
        changes: Vec<Cached<k8s_openapi::api::core::v1::ConfigMap>>,
    ) -> Vec<(&'static str, String, String)> {
        changes
            .into_iter()
            .map(|c| {
                let what = match c {
                    Cached::Applied(_) => "applied",
                    Cached::Deleted(_) => "deleted",
                };
                let o = c.object();
                let value = o.data.as_ref().and_then(|d| d.get("v")).cloned();
                (what, o.name_any(), value.unwrap_or_default())
            })
            .collect()
    }

    /// What `changes` holds now (without waiting for more).
    fn queued<T>(changes: impl Stream<Item = T>) -> Vec<T> {
        use futures::FutureExt;
        let mut changes = std::pin::pin!(changes);
        std::iter::from_fn(|| changes.next().now_or_never().flatten()).collect()
    }

    #[tokio::test]
    async fn every_subscriber_sees_each_stored_change_and_a_late_one_the_store_first() {
        use futures::stream;
        use std::sync::Mutex;
        let (store, writer) = reflector::store();
        let cache = SharedCache::with_source(store.clone(), None);
        let early_synced = Arc::new(Mutex::new(Vec::new()));
        let early = {
            let s = early_synced.clone();
            cache.subscribe(move |ok| s.lock().unwrap().push(ok))
        };
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(config_map("a", "1")),
            watcher::Event::InitApply(config_map("b", "1")),
            watcher::Event::InitDone,
            watcher::Event::Apply(config_map("a", "2")),
            watcher::Event::Delete(config_map("b", "1")),
        ];
        cache
            .fan_out(reflector::reflector(
                writer,
                stream::iter(events.into_iter().map(Ok)),
            ))
            .await;
        cache.set_synced(true);
        let mut early = queued(early);
        // The list is sent once stored, in the store's order.
        early[..2].sort_by_key(|c| c.clone().object().name_any());
        let stored_a = store
            .get(&reflector::ObjectRef::new("a").within("ns"))
            .unwrap();
        assert!(matches!(&early[2], Cached::Applied(a) if Arc::ptr_eq(a, &stored_a)));
        assert_eq!(
            seen(early),
            [
                ("applied", "a".into(), "1".into()),
                ("applied", "b".into(), "1".into()),
                ("applied", "a".into(), "2".into()),
                ("deleted", "b".into(), "1".into()),
            ]
        );
        assert_eq!(*early_synced.lock().unwrap(), [true]);

        let late_synced = Arc::new(Mutex::new(Vec::new()));
        let late = {
            let s = late_synced.clone();
            cache.subscribe(move |ok| s.lock().unwrap().push(ok))
        };
        assert_eq!(*late_synced.lock().unwrap(), [true]);
        let late = queued(late);
        assert_eq!(seen(late), [("applied", "a".into(), "2".into())]);
    }

    /// The changes a subscriber sees from `events`, watched with tombstones.
    async fn seen_through_a_shared_cache(
        events: Vec<watcher::Event<k8s_openapi::api::core::v1::ConfigMap>>,
    ) -> Vec<(&'static str, String, String)> {
        use futures::stream;
        let (store, writer) = reflector::store();
        let cache = SharedCache::with_source(store.clone(), None);
        let changes = cache.subscribe(|_| {});
        let events = stream::iter(events.into_iter().map(Ok));
        cache
            .fan_out(with_tombstones(
                "configmaps".into(),
                store,
                reflector::reflector(writer, events),
            ))
            .await;
        seen(queued(changes))
    }

    fn sorted<T: Ord + Clone>(items: &[T]) -> Vec<T> {
        let mut items = items.to_vec();
        items.sort();
        items
    }

    #[tokio::test]
    async fn a_relist_reports_each_object_it_no_longer_holds_as_deleted() {
        use watcher::Event::*;
        let seen = seen_through_a_shared_cache(vec![
            Init,
            InitApply(config_map("a", "1")),
            InitApply(config_map("b", "1")),
            InitApply(config_map("c", "1")),
            InitDone,
            // The watch expired; the re-list finds b deleted and c deleted and created again.
            Init,
            InitApply(config_map("a", "1")),
            InitApply(config_map("c", "2")),
            InitDone,
            Apply(config_map("d", "1")),
        ])
        .await;
        let applied = |name: &str, value: &str| ("applied", name.to_string(), value.to_string());
        // The first list: what it holds, and no deletion.
        assert_eq!(
            sorted(&seen[..3]),
            [applied("a", "1"), applied("b", "1"), applied("c", "1")]
        );
        // The re-list: what it holds, then b as deleted (as last seen); c is the new one.
        assert_eq!(sorted(&seen[3..5]), [applied("a", "1"), applied("c", "2")]);
        assert_eq!(
            seen[5..],
            [("deleted", "b".into(), "1".into()), applied("d", "1")]
        );
    }

    #[tokio::test]
    async fn a_relist_that_fails_and_starts_again_compares_with_the_store_before_it() {
        use watcher::Event::*;
        let seen = seen_through_a_shared_cache(vec![
            Init,
            InitApply(config_map("a", "1")),
            InitApply(config_map("b", "1")),
            InitDone,
            // A re-list broken off (the reflector keeps the store as it was) and begun again.
            Init,
            InitApply(config_map("a", "1")),
            Init,
            InitApply(config_map("b", "1")),
            InitDone,
        ])
        .await;
        assert_eq!(
            seen[2..],
            [
                ("applied", "b".into(), "1".into()),
                ("deleted", "a".into(), "1".into())
            ]
        );
    }
}
