//! The translator controllers: one generic, level-triggered runner ([`run`]) drives every
//! kind but NetworkPolicy ([`netpol`]), on the controller scaffold ([`crate::scaffold`]).
//!
//! **Guaranteed**, for each object of a kind ([`TranslatorKind`]):
//! - its desired Translations are computed with the pure translators
//!   (`midonet-translators`) and written (created, or updated with a merge patch, see
//!   [`sync`]): owner-referenced, labelled with the owner's UID and the Translation
//!   version, with the `midonet.org/deleter` finalizer; its Translations no longer desired
//!   are pruned;
//! - it is translated again when it changes, when what its translation reads (its
//!   [`Dependency`]) changes, when one of its Translations disappears, and on every resync;
//! - when the watch shows it deleted, its Translations are deleted at once
//!   ([`delete_orphans`]), each only if the cache still shows it owned by that object and
//!   unchanged (its UID and resourceVersion as preconditions). Garbage collection through
//!   the owner references deletes them too, and is what deletes them when the controllers
//!   were not running at the time;
//! - a translation's warnings are logged, counted and published as Warning events on the
//!   object, once per distinct set of warnings;
//! - a failed reconcile is retried soon (`RETRY`) and counted.
//!
//! **Assumed**: no object is translated before the Translation informer and the object's
//! dependency cache hold their initial lists (the runner waits for both); the global
//! Translations ([`globals`]) are written before any other.

pub mod dispatch;
pub mod globals;
pub mod index;
#[cfg(test)]
mod io_tests;
pub mod kinds;
mod metrics;
pub mod netpol;
pub mod pods;
pub mod slices;
mod sync;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use midonet_translators::{Translated, TranslatorConfig};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::authz::{Attempt, Authz};
use crate::cache::{Cached, SharedCache};
use crate::crd::{Translation, TranslationKey};
use crate::events::{EventPublisher, Events};
use crate::health::Health;
use crate::retry::RetryPolicy;
use crate::scaffold::{Action, OwnedTask, Reconciler, Retry, Scaffold};
pub use metrics::TranslatorMetrics;
pub use sync::{
    build as translation_object, sync_translations, up_to_date, update_patch, SyncOutcome,
    FIELD_MANAGER,
};

/// A failed translation is retried after 0.5–2.5 s: its Kubernetes writes failed, which
/// is an apiserver outage or a conflict, both short; the wide jitter spreads many objects
/// failing together.
const RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(1500), Duration::from_millis(1500)).with_jitter(0.67);

/// One Kubernetes kind the runner translates.
pub trait TranslatorKind: Send + Sync + 'static {
    /// The watched kind; it owns the Translations made from it.
    type Object: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// A kind the translation also reads (a Pod reads its Node), or [`NoDependency`].
    type Dependency: Dependency;
    /// Controller name as used in `--controllers`.
    const NAME: &'static str;
    /// Whether `Object` is namespaced (its ObjectRefs carry a namespace).
    const NAMESPACED: bool;

    /// The dependency an object's translation reads, if any.
    fn dependency_of(_obj: &Self::Object) -> Option<ObjectRef<Self::Dependency>> {
        None
    }
    /// The objects whose translation reads `dep`.
    fn dependents_of(
        _dep: &Self::Dependency,
        _objects: &Store<Self::Object>,
    ) -> Vec<ObjectRef<Self::Object>> {
        Vec::new()
    }
    /// The process's cache of `Object` when another controller reads it too (trimmed to
    /// what all its readers need, as the Pod cache is); `None` for a cache of the runner's
    /// own, which keeps objects whole (but for their managedFields).
    fn shared_cache(_shared: &TranslatorContext) -> Option<SharedCache<Self::Object>> {
        None
    }

    /// The pure translation.
    fn translate(
        cfg: &TranslatorConfig,
        obj: &Self::Object,
        dep: Option<&Self::Dependency>,
    ) -> Translated;

    /// The dependencies an object's translation reads: by default the one
    /// [`dependency_of`](Self::dependency_of) names. A kind that reads several (a Service
    /// reads all its EndpointSlices) overrides this and [`translate_all`](Self::translate_all).
    fn dependencies(
        obj: &Self::Object,
        store: &Store<Self::Dependency>,
    ) -> Vec<Arc<Self::Dependency>> {
        Self::dependency_of(obj)
            .and_then(|r| store.get(&r))
            .into_iter()
            .collect()
    }

    /// The pure translation over [`dependencies`](Self::dependencies).
    fn translate_all(
        cfg: &TranslatorConfig,
        obj: &Self::Object,
        deps: &[Arc<Self::Dependency>],
    ) -> Translated {
        Self::translate(cfg, obj, deps.first().map(|d| &**d))
    }

    /// Translations owned by another object that this object's translation takes over:
    /// kept (and re-owned) when desired, pruned otherwise, like its own.
    fn inherited(_obj: &Self::Object, _index: &index::OwnerIndex) -> Vec<TranslationKey> {
        Vec::new()
    }
}

/// A kind a translation reads besides its object: the runner caches and watches it, and a
/// change of one re-translates the objects that read it.
pub trait Dependency:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// Whether the runner watches it; only [`NoDependency`] is not.
    const WATCHED: bool = true;
}

impl Dependency for k8s_openapi::api::core::v1::Node {}
impl Dependency for k8s_openapi::api::core::v1::Service {}

/// The dependency of a kind whose translation reads nothing but its object. It has no
/// values, so its cache is always empty, and it is never watched: its `Resource`
/// description names no API and is never asked for.
#[derive(Clone, Debug, serde::Deserialize)]
pub enum NoDependency {}

impl Dependency for NoDependency {
    const WATCHED: bool = false;
}

impl Resource for NoDependency {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match *self {}
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match *self {}
    }
}

/// What every translator controller shares: clients, caches, config. One per process.
pub struct TranslatorContext {
    pub kube: Client,
    pub config: TranslatorConfig,
    pub translations: Store<Translation>,
    /// Every Pod, for the Pod and NetworkPolicy translators (see [`pods`]); watched while
    /// `pods.run()` runs.
    pub pods: SharedCache<pods::CachedPod>,
    /// Resolves once `translations` holds the initial list.
    pub translations_synced: crate::informer::Synced,
    pub index: index::OwnerIndex,
    pub recent: Arc<index::Recent>,
    /// Notified when the informer shows a global Translation changed or gone (see
    /// [`globals`]).
    globals_changed: Arc<tokio::sync::Notify>,
    pub events: Events,
    pub metrics: TranslatorMetrics,
    pub authz: Authz,
    /// Digest of the last warnings published per owner UID, so a repeated translation with
    /// the same bad input does not publish the same warnings again.
    warned: Mutex<HashMap<String, u64>>,
}

impl TranslatorContext {
    /// Builds the context over the process's Translation informer, which keeps the owner
    /// index up to date.
    pub fn new(
        kube: Client,
        config: TranslatorConfig,
        metrics: TranslatorMetrics,
        authz: Authz,
        events: &EventPublisher,
        informer: &mut crate::informer::TranslationInformer,
    ) -> Arc<Self> {
        let translations = informer.store.clone();
        let index = index::OwnerIndex::default();
        let recent = Arc::new(index::Recent::new(translations.clone()));
        let globals_changed = Arc::new(tokio::sync::Notify::new());
        let global_names = globals::names(&config);
        let (observed, forgotten, changed) =
            (index.clone(), recent.clone(), globals_changed.clone());
        informer.observe(Box::new(move |event| {
            observed.observe(event);
            match event {
                watcher::Event::Apply(tr) => {
                    if let Some(key) = tr.key() {
                        forgotten.seen(&key, tr.metadata.resource_version.as_deref());
                    }
                }
                watcher::Event::Delete(tr) => {
                    if let Some(key) = tr.key() {
                        forgotten.forget(&key);
                    }
                }
                _ => {}
            }
            if globals::concerns(event, &global_names) {
                // Stores a permit when the controller is busy: one pass follows any burst.
                changed.notify_one();
            }
        }));
        Arc::new(TranslatorContext {
            translations_synced: informer.synced(),
            pods: pods::cache(kube.clone(), &authz),
            events: events.for_controller("midonet-kube-controllers"),
            kube,
            config,
            translations,
            index,
            recent,
            globals_changed,
            metrics,
            authz,
            warned: Mutex::default(),
        })
    }

    /// Every translator's error policy: count, and retry soon (see [`RETRY`]). The
    /// Translations a reconcile writes are mostly in the object's namespace; the apiserver's
    /// message names the exact request.
    pub(crate) fn translation_failed<'a, O: Resource<DynamicType = ()>>(
        &'a self,
        kind: &str,
        obj: &'a O,
        err: &'a RunnerError,
    ) -> Retry<'a> {
        self.metrics
            .reconciles
            .with_label_values(&[kind, "error"])
            .inc();
        let refused = match err {
            RunnerError::Kube(e) => Some((
                Attempt::new("patch", "translations", obj.meta().namespace.as_deref()),
                e,
            )),
            RunnerError::Encode(_) => None,
        };
        Retry {
            after: RETRY.delay(1),
            refused,
            failures: None,
        }
    }

    /// True when these warnings differ from the last ones published for `uid`.
    fn warnings_changed(&self, uid: &str, digest: u64) -> bool {
        let mut warned = crate::locks::lock(&self.warned);
        warned.insert(uid.to_string(), digest) != Some(digest)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode a Translation: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The context of kind `K`'s controller: the shared one, and its dependencies' cache.
struct KindContext<K: TranslatorKind> {
    shared: Arc<TranslatorContext>,
    dependencies: Dependencies<K>,
}

/// The cache of what kind `K`'s translation reads besides its object.
struct Dependencies<K: TranslatorKind> {
    /// `None` for [`NoDependency`].
    store: Option<Store<K::Dependency>>,
    /// Whether `store` holds its initial list. Until then a dependency listed already
    /// triggers its dependents while the store does not show it yet (the reflector stores
    /// the initial list at its end), and translating them then would miss it for good.
    listed: Arc<AtomicBool>,
}

impl<K: TranslatorKind> Reconciler for KindContext<K> {
    type Object = K::Object;
    type Error = RunnerError;
    const NAME: &'static str = K::NAME;

    fn reconcile(
        self: Arc<Self>,
        obj: Arc<K::Object>,
    ) -> impl std::future::Future<Output = Result<Action, RunnerError>> + Send + 'static {
        reconcile::<K>(obj, self)
    }

    fn failed<'a>(&'a self, obj: &'a K::Object, err: &'a RunnerError) -> Retry<'a> {
        self.shared.translation_failed(K::NAME, obj, err)
    }

    fn authz(&self) -> &Authz {
        &self.shared.authz
    }
}

/// The owner reference a translator puts on the Translations of `obj`.
pub fn owner_reference<O: Resource<DynamicType = ()>>(obj: &O) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: O::api_version(&()).into_owned(),
        kind: O::kind(&()).into_owned(),
        name: obj.meta().name.clone()?,
        uid: obj.meta().uid.clone()?,
        ..OwnerReference::default()
    })
}

async fn reconcile<K: TranslatorKind>(
    obj: Arc<K::Object>,
    ctx: Arc<KindContext<K>>,
) -> Result<Action, RunnerError> {
    // A deleted object's Translations are garbage-collected through their ownerReferences.
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (Some(owner), Some(uid)) = (owner_reference(&*obj), obj.uid()) else {
        return Ok(Action::await_change());
    };
    if K::Dependency::WATCHED && !ctx.dependencies.listed.load(Ordering::Acquire) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let timer = ctx
        .shared
        .metrics
        .reconcile_duration
        .with_label_values(&[K::NAME])
        .start_timer();
    let translated =
        dispatch::translate_object::<K>(&ctx.shared.config, &obj, ctx.dependencies.store.as_ref());
    let oref = obj.object_ref(&());
    let inherited = K::inherited(&obj, &ctx.shared.index);
    let action = apply_translated(
        &ctx.shared,
        K::NAME,
        (owner, oref),
        &uid,
        &inherited,
        translated,
    )
    .await?;
    timer.observe_duration();
    Ok(action)
}

/// The end of every translator's reconcile: report the translation's warnings, make the
/// owner's Translations the translated ones, count the outcome and say when to look again.
pub(crate) async fn apply_translated(
    shared: &TranslatorContext,
    kind: &str,
    (owner, oref): (OwnerReference, k8s_openapi::api::core::v1::ObjectReference),
    uid: &str,
    inherited: &[TranslationKey],
    translated: Translated,
) -> Result<Action, RunnerError> {
    publish_warnings(shared, kind, uid, &oref, &translated).await;
    let outcome = sync_translations(
        shared,
        kind,
        Some((owner, oref)),
        uid,
        inherited,
        translated.translations,
    )
    .await?;
    shared
        .metrics
        .reconciles
        .with_label_values(&[kind, outcome.result()])
        .inc();
    Ok(match outcome {
        // A desired name is held by a Translation being deleted: look again soon (its
        // deletion also triggers this owner).
        SyncOutcome::WaitingForDeletion => Action::requeue(Duration::from_secs(2)),
        // The replaced Translation goes once its replacement is pushed (or stuck).
        SyncOutcome::WaitingForPush => Action::requeue(Duration::from_millis(500)),
        _ => Action::await_change(),
    })
}

async fn publish_warnings(
    shared: &TranslatorContext,
    kind: &str,
    uid: &str,
    oref: &k8s_openapi::api::core::v1::ObjectReference,
    translated: &Translated,
) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for w in &translated.warnings {
        w.reason.hash(&mut h);
        w.message.hash(&mut h);
    }
    if !shared.warnings_changed(uid, h.finish()) {
        return;
    }
    for w in &translated.warnings {
        // The reconcile's span names the object.
        tracing::warn!(reason = %w.reason, "{}", w.message);
        shared
            .metrics
            .warnings
            .with_label_values(&[kind, &w.reason])
            .inc();
        shared
            .events
            .warning(oref, &w.reason, w.message.clone())
            .await;
    }
}

/// Options of one translator controller.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    pub workers: u16,
    pub resync: Duration,
}

/// Runs the controller of kind `K` until `shutdown` resolves.
pub async fn run<K: TranslatorKind>(
    shared: Arc<TranslatorContext>,
    config: RunnerConfig,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scaffold = Scaffold::<KindContext<K>>::register(&health).resync_every(config.resync);
    let (cache, own_watch) = object_cache::<K>(&shared);
    let objects = cache.store();
    let (applied, deleted) = applied_objects(&cache, &health, format!("{}-cache", K::NAME));
    let _cleanup = OwnedTask::spawn(delete_orphans::<K>(shared.clone(), deleted, config.workers));
    let controller = scaffold
        .shared_controller(applied, objects.clone(), config.workers, shutdown)
        .reconcile_on(owners_of_gone_translations::<K>(&shared));
    let (controller, dependencies) = with_dependencies::<K>(controller, &shared, &health, objects);
    // Decisions read the Translation cache: wait for it before the first reconcile.
    shared.translations_synced.wait().await;
    let ctx = Arc::new(KindContext::<K> {
        shared,
        dependencies,
    });
    let controller = scaffold.run(controller, ctx);
    // An own cache's watch ends with the controller (a shared one is run by its owner).
    match own_watch {
        Some(watch) => {
            tokio::select! {
                _ = controller => {}
                _ = watch => {}
            }
        }
        None => controller.await,
    }
}

/// The owners of `K`'s kind whose Translations disappear: re-triggered, so that what went
/// is written again (level-triggered repair).
fn owners_of_gone_translations<K: TranslatorKind>(
    shared: &TranslatorContext,
) -> impl futures::Stream<Item = ObjectRef<K::Object>> + Send + 'static {
    let (gone_tx, gone_rx) = mpsc::unbounded_channel::<ObjectRef<K::Object>>();
    shared.index.on_owned_deleted(
        &K::Object::kind(&()),
        Box::new(move |name, namespace| {
            let mut r = ObjectRef::<K::Object>::new(name);
            if K::NAMESPACED {
                r = r.within(namespace);
            }
            let _ = gone_tx.send(r);
        }),
    );
    crate::streams::unbounded(gone_rx)
}

/// The cache of `K`'s objects: the process's shared one, or one of its own with the watch
/// to run beside the controller.
fn object_cache<K: TranslatorKind>(
    shared: &TranslatorContext,
) -> (
    SharedCache<K::Object>,
    Option<impl std::future::Future<Output = ()> + Send + 'static>,
) {
    match K::shared_cache(shared) {
        Some(cache) => (cache, None),
        None => {
            let api: Api<K::Object> = Api::all(shared.kube.clone());
            let cache = SharedCache::new(api, &shared.authz, |_| {});
            (cache.clone(), Some(cache.run()))
        }
    }
}

/// The objects `cache` applies, for the controller (its readiness check `check` follows
/// the cache's lists), and the UIDs of those it deletes, for [`delete_orphans`].
fn applied_objects<O>(
    cache: &SharedCache<O>,
    health: &Health,
    check: String,
) -> (
    impl futures::Stream<Item = Arc<O>> + Send + 'static,
    mpsc::UnboundedReceiver<String>,
)
where
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    health.register(&check);
    let synced = health.clone();
    let (deleted_tx, deleted_rx) = mpsc::unbounded_channel::<String>();
    let stream = cache
        .subscribe(move |ok| synced.set(&check, ok))
        .filter_map(move |change| {
            let applied = match change {
                Cached::Applied(obj) => Some(obj),
                Cached::Deleted(obj) => {
                    if let Some(uid) = obj.uid() {
                        let _ = deleted_tx.send(uid);
                    }
                    None
                }
            };
            std::future::ready(applied)
        });
    (stream, deleted_rx)
}

/// `controller` also triggered by changes of `K`'s dependencies (when it has a watched
/// one), and their cache.
fn with_dependencies<K: TranslatorKind>(
    controller: Controller<K::Object>,
    shared: &TranslatorContext,
    health: &Health,
    objects: Store<K::Object>,
) -> (Controller<K::Object>, Dependencies<K>) {
    if !K::Dependency::WATCHED {
        let none = Dependencies {
            store: None,
            listed: Arc::new(AtomicBool::new(false)),
        };
        return (controller, none);
    }
    // Translations made without their dependency would be wrong: not ready until it has
    // listed too.
    let (synced, listed) =
        health.cache_check(&format!("{}-{}-cache", K::NAME, K::Dependency::plural(&())));
    // Deleted dependencies count too: a Service whose EndpointSlice is deleted must be
    // re-translated without it.
    let (reader, writer) = reflector::store();
    let stream = crate::cache::reflected(
        writer,
        Api::<K::Dependency>::all(shared.kube.clone()),
        &shared.authz,
        synced,
    )
    .touched_objects();
    let controller = controller.watches_stream(stream, move |dep| K::dependents_of(&dep, &objects));
    let dependencies = Dependencies {
        store: Some(reader),
        listed,
    };
    (controller, dependencies)
}

/// Deletes the Translations of objects the watch saw deleted, at once: garbage collection
/// would do it too (and still does when the controllers were offline), but the
/// kube-controller-manager's client is rate limited, which makes a burst of deletions take
/// minutes. Each deletion is of the very Translation the cache showed (its UID and
/// resourceVersion as preconditions): an object re-created under the same name may have
/// re-claimed it since, with a new owner.
async fn delete_orphans<K: TranslatorKind>(
    shared: Arc<TranslatorContext>,
    deleted: mpsc::UnboundedReceiver<String>,
    workers: u16,
) {
    crate::streams::unbounded(deleted)
        .flat_map(|uid| {
            let owned: Vec<(String, String, String)> = shared
                .index
                .owned_by(&uid)
                .into_iter()
                .map(|(namespace, name)| (uid.clone(), namespace, name))
                .collect();
            futures::stream::iter(owned)
        })
        .for_each_concurrent(usize::from(workers.max(1)), |(owner, namespace, name)| {
            let shared = shared.clone();
            async move { delete_orphan(&shared, K::NAME, &owner, &namespace, &name).await }
        })
        .await;
}

/// Deletes `namespace/name` if the cache still shows it owned by `owner` and not being
/// deleted (see [`delete_orphans`]).
async fn delete_orphan(
    shared: &TranslatorContext,
    kind: &str,
    owner: &str,
    namespace: &str,
    name: &str,
) {
    let Some(cached) = shared.translations.get(&index::cache_ref(namespace, name)) else {
        return;
    };
    let still_ours = cached.owner_references().iter().any(|o| o.uid == owner);
    if !still_ours || cached.metadata.deletion_timestamp.is_some() {
        return;
    }
    // Every stored object has a UID; without one there is nothing to delete exactly.
    let Some(uid) = cached.metadata.uid.as_deref() else {
        return;
    };
    let deleted = crate::crd::delete_translation(
        &shared.kube,
        namespace,
        name,
        uid,
        cached.resource_version(),
    )
    .await;
    match deleted {
        Ok(true) => {
            shared
                .metrics
                .writes
                .with_label_values(&[kind, "delete_orphan"])
                .inc();
        }
        // Gone already, or changed since: garbage collection decides.
        Ok(false) => {}
        Err(err) => {
            let attempt = Attempt::new("delete", "translations", Some(namespace));
            if !shared.authz.report(attempt, &err) {
                tracing::warn!(translation = %name, %namespace, error = %err, "cannot delete the Translation of a deleted object; garbage collection will");
            }
        }
    }
}
