//! The pusher: the only component that changes the backend.
//!
//! It watches Translations in all namespaces and makes the backend match them, guarded by
//! the `midonet.org/deleter` finalizer, and records on each Translation's status subresource
//! exactly what it pushed. That record is what makes a restart free (an in-sync Translation
//! costs no backend request), deletion exact (it deletes what was created, even when the spec
//! changed or became unreadable) and shrinking specs safe (removed resources are deleted).

pub(crate) mod cutover;
mod deps;
pub mod metrics;
pub mod plan;
mod reconcile;
pub mod rollout;
pub mod status;
mod tracked;
pub mod verify;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::authz::{Attempt, Authz};
use crate::backend::BackendClient;
use crate::crd::{Translation, TranslationStatus};
use crate::events::{EventPublisher, Events};
use crate::informer::TranslationInformer;
use crate::retry::RetryPolicy;
pub use metrics::PusherMetrics;

/// The controller's name, as in `--controllers`.
pub const CONTROLLER: &str = "pusher";

/// The pusher's name in the Translations' `managedFields` (the status, the finalizer).
pub const FIELD_MANAGER: &str = "midonet-kube-controllers-pusher";

#[derive(Clone, Debug)]
pub struct PusherConfig {
    /// Translations reconciled at the same time (each Translation by one worker at a time).
    pub workers: u16,
    /// Period of the full resync (costs no backend request for in-sync Translations).
    pub resync: Duration,
    /// First retry delay after a failure; doubled per consecutive failure.
    pub retry_base: Duration,
    /// Upper bound of the retry delay.
    pub retry_cap: Duration,
    /// Period of drift verification (GET of every pushed resource); `None` disables it.
    pub verify_period: Option<Duration>,
    /// Upper bound of backend GETs per second spent on drift verification.
    pub verify_rate: u32,
    /// The configured Translation version (see [`rollout`]).
    pub version: String,
    /// How a bump's cutover moves the bindings (see [`cutover`]).
    pub cutover: CutoverOrder,
}

/// How a version bump's cutover moves the host-interface bindings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CutoverOrder {
    /// Every binding in one batch: the shortest window in which pods on the two versions
    /// cannot reach each other.
    #[default]
    AllAtOnce,
    /// One host's bindings after another's, each host's in one batch.
    HostByHost,
}

impl Default for PusherConfig {
    fn default() -> Self {
        PusherConfig {
            workers: 8,
            resync: Duration::from_secs(600),
            retry_base: Duration::from_millis(200),
            retry_cap: Duration::from_secs(60),
            verify_period: None,
            verify_rate: 50,
            version: midonet_translators::TranslatorConfig::default().version,
            cutover: CutoverOrder::default(),
        }
    }
}

/// Everything the pusher's reconciles share. No global state: one of these per pusher.
pub struct PusherContext {
    pub kube: Client,
    pub backend: BackendClient,
    pub events: Events,
    pub metrics: PusherMetrics,
    pub config: PusherConfig,
    pub authz: Authz,
    /// What the pusher remembers per Translation between reconciles.
    tracker: tracked::Tracker,
    /// Which Translation provides which referent, and who waits for it.
    deps: deps::Dependencies,
    /// Where a version bump stands.
    rollout: rollout::Rollout,
    /// When each provider of a refused referent was last verified.
    rechecks: verify::Rechecks,
    /// Translations to reconcile now: woken dependents, drift repairs.
    wake_tx: mpsc::UnboundedSender<ObjectRef<Translation>>,
    wake_rx: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Translation>>>>,
}

impl PusherContext {
    /// The context of a pusher reading the process's Translation informer.
    pub fn new(
        kube: Client,
        backend: BackendClient,
        metrics: PusherMetrics,
        config: PusherConfig,
        authz: Authz,
        events: &EventPublisher,
        informer: &mut TranslationInformer,
    ) -> Arc<Self> {
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let ctx = Arc::new(PusherContext {
            events: events.for_controller("midonet-kube-controllers-pusher"),
            kube,
            backend,
            metrics,
            config: config.clone(),
            authz,
            tracker: tracked::Tracker::default(),
            deps: deps::Dependencies::new(informer.store.clone()),
            rollout: rollout::Rollout::new(config.version.clone()),
            rechecks: verify::Rechecks::default(),
            wake_tx,
            wake_rx: Mutex::new(Some(wake_rx)),
        });
        let observer = Arc::downgrade(&ctx);
        informer.observe(Box::new(move |event| {
            if let Some(ctx) = observer.upgrade() {
                ctx.deps.observe(event);
                ctx.rollout.observe(event);
                if let watcher::Event::Apply(tr) | watcher::Event::InitApply(tr) = event {
                    if let Some(uid) = tr.uid() {
                        ctx.tracker.observed(&uid, tr.status.as_ref());
                    }
                }
            }
        }));
        // The echo of the pusher's own status write would be reconciled to no effect
        // (the informer asks this before the observer above forgets the write).
        let tracker = Arc::downgrade(&ctx);
        informer.skip_applied(Box::new(move |tr| {
            tracker.upgrade().is_some_and(|ctx| {
                tr.uid().is_some_and(|uid| {
                    ctx.tracker
                        .is_own_write(&uid, tr.status.as_ref(), || tracked::fingerprint(tr))
                })
            })
        }));
        ctx
    }

    /// `referents` now exist in the backend: wakes who waits for them, and verifies what
    /// MidoNet's cascade took from Translations built on their previous incarnation.
    fn pushed(self: &Arc<Self>, referents: Vec<midonet_translators::model::Referent>) {
        let pushed = self.deps.pushed(referents);
        self.wake(pushed.woken);
        verify::recheck_consumers(self, pushed.cascaded);
    }

    /// Reconciles these Translations as soon as possible.
    fn wake(&self, refs: impl IntoIterator<Item = ObjectRef<Translation>>) {
        for r in refs {
            // Only fails once the pusher has stopped, when nothing needs waking.
            let _ = self.wake_tx.send(r);
        }
    }

    /// `key`'s binding at `path` lost its interface to another Translation's (a binding
    /// MidoNet holds for one port at a time): its next push creates it again.
    fn repush_binding(&self, key: ObjectRef<Translation>, path: String) {
        if let Some(uid) = self.deps.store().get(&key).and_then(|t| t.uid()) {
            self.tracker.mark_missing(
                &uid,
                std::iter::once(path).collect(),
                tracked::Cause::Cascade,
            );
            self.wake([key]);
        }
    }

    /// The old versions' Translations other than `key` that bind `interface`, with the
    /// path of each one's binding: what a version bump's cutover takes the interface from.
    fn old_binders(
        &self,
        key: &ObjectRef<Translation>,
        interface: &deps::Interface,
    ) -> Vec<(ObjectRef<Translation>, String)> {
        self.deps
            .other_binders(key, interface)
            .into_iter()
            .filter(|(k, _)| {
                self.deps
                    .store()
                    .get(k)
                    .is_some_and(|t| self.rollout.is_old(&t))
            })
            .collect()
    }

    /// The most recent status: ours if we wrote one, else the object's. For a Translation
    /// of the original controller that records no push (it had no status), what it lists,
    /// taken as pushed ([`status::adopted`]).
    fn recorded_status(&self, tr: &Translation) -> TranslationStatus {
        let uid = tr.uid().unwrap_or_default();
        let recorded = self
            .tracker
            .written(&uid)
            .or_else(|| tr.status.clone())
            .unwrap_or_default();
        if tr.is_legacy() && recorded.pushed_hash.is_none() && recorded.pushed.is_empty() {
            return status::adopted(recorded, tr.desired_resources(), tr.metadata.generation);
        }
        recorded
    }

    /// [`Self::recorded_status`] without the pushed resources found gone from the backend
    /// (not re-created yet): what stands in the backend, as far as the pusher knows.
    fn standing_status(&self, tr: &Translation) -> TranslationStatus {
        let mut status = self.recorded_status(tr);
        let missing = self.tracker.missing(&tr.uid().unwrap_or_default());
        if !missing.is_empty() {
            status.pushed.retain(|p| !missing.contains_key(&p.path));
        }
        status
    }

    fn forget(&self, tr: &Translation, uid: &str) {
        self.deps.release(&ObjectRef::from_obj(tr));
        self.tracker.forget(uid);
    }

    /// The delay before retrying after `failures` consecutive failures.
    fn retry_delay(&self, failures: u32) -> Duration {
        self.retry_policy().delay(failures)
    }

    /// Retries after a backend failure.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.config.retry_base, self.config.retry_cap)
    }

    /// Reports `err` if it is an authorization error; returns whether it was.
    fn report_denied(&self, tr: &Translation, err: &PusherError) -> bool {
        match err {
            // Every Kubernetes write of a reconcile patches the Translation or its status;
            // the API server's message says which.
            PusherError::Kube(e) => self.authz.report(
                Attempt::new("patch", "translations", tr.namespace().as_deref()),
                e,
            ),
            PusherError::Patch(_) => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PusherError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot build a patch: {0}")]
    Patch(#[from] serde_json::Error),
}

fn error_policy(tr: Arc<Translation>, err: &PusherError, ctx: Arc<PusherContext>) -> Action {
    let uid = tr.uid().unwrap_or_default();
    let count = ctx.tracker.failed(&uid);
    let delay = ctx.retry_delay(count);
    // Outside the reconcile's span: name the Translation here.
    let span = crate::logfields::object_span(CONTROLLER, &*tr);
    let _entered = span.enter();
    if ctx.report_denied(&tr, err) {
        // Logged as an authorization error (rate-limited); retried all the same.
        tracing::debug!(error = %err, failures = count, retry_in = ?delay, "pusher reconcile failed");
    } else {
        tracing::warn!(error = %err, failures = count, retry_in = ?delay, "pusher reconcile failed");
    }
    ctx.metrics
        .reconciles
        .with_label_values(&["kube_error"])
        .inc();
    Action::requeue(delay)
}

/// Runs the pusher over `translations` (the process's Translation informer, see
/// [`crate::informer`]: its applied objects, and every Translation after a re-list) until
/// `shutdown` resolves; in-flight reconciles are finished first.
pub async fn run(
    ctx: Arc<PusherContext>,
    translations: crate::informer::Started<
        impl futures::Stream<Item = Result<Translation, watcher::Error>> + Send + 'static,
    >,
    store: Store<Translation>,
    liveness: crate::health::LoopProbe,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let relisted = crate::streams::unbounded(translations.relisted);
    let translations = liveness.queue_of(translations.applied);
    let ticks = crate::streams::every(ctx.config.resync);
    let woken = crate::locks::lock(&ctx.wake_rx).take();
    let woken = futures::stream::iter(woken.map(crate::streams::unbounded)).flatten();
    let controller = Controller::for_stream(translations, store.clone())
        .with_config(controller::Config::default().concurrency(ctx.config.workers))
        .reconcile_all_on(ticks)
        .reconcile_all_on(relisted)
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown);

    // Owned here and stopped together when the controller stops.
    let mut background = tokio::task::JoinSet::new();
    background.spawn(gauge_loop(store.clone(), ctx.clone()));
    background.spawn(rollout_loop(store.clone(), ctx.clone()));
    if let Some(period) = ctx.config.verify_period {
        background.spawn(verify::verify_loop(store.clone(), ctx.clone(), period));
    }
    let probe = liveness.clone();
    controller
        .run(
            move |tr, ctx| {
                let span = crate::logfields::object_span(CONTROLLER, &*tr);
                probe.reconcile(reconcile::reconcile(tr, ctx).instrument(span))
            },
            error_policy,
            ctx,
        )
        .for_each(|res| {
            liveness.progressed();
            async move {
                if let Err(err) = res {
                    tracing::debug!(error = %err, "pusher queue");
                }
            }
        })
        .await;
    background.shutdown().await;
}

async fn gauge_loop(store: Store<Translation>, ctx: Arc<PusherContext>) {
    loop {
        update_gauges(&store, &ctx.metrics);
        ctx.metrics.retry_queue.set(ctx.tracker.retrying() as i64);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Sync state of a Translation, as the `translations` gauge counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncState {
    /// The backend matches the current spec.
    Ready,
    /// The Ready condition is for an older generation: the spec changed since the last push.
    Pending,
    NotReady,
    /// Never pushed.
    Unknown,
    Terminating,
}

impl SyncState {
    pub const ALL: [SyncState; 5] = [
        SyncState::Ready,
        SyncState::Pending,
        SyncState::NotReady,
        SyncState::Unknown,
        SyncState::Terminating,
    ];

    /// The gauge's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Ready => "ready",
            SyncState::Pending => "pending",
            SyncState::NotReady => "not_ready",
            SyncState::Unknown => "unknown",
            SyncState::Terminating => "terminating",
        }
    }
}

pub fn sync_state(tr: &Translation) -> SyncState {
    if tr.metadata.deletion_timestamp.is_some() {
        return SyncState::Terminating;
    }
    match tr
        .status
        .as_ref()
        .and_then(status::ready_condition)
        .map(|c| c.status.as_str())
    {
        Some("True") if tr.is_ready() => SyncState::Ready,
        Some("True") => SyncState::Pending,
        Some("False") => SyncState::NotReady,
        _ => SyncState::Unknown,
    }
}

fn update_gauges(store: &Store<Translation>, metrics: &PusherMetrics) {
    let mut by_state: HashMap<SyncState, i64> = HashMap::new();
    let mut by_version: HashMap<String, i64> = HashMap::new();
    for tr in store.state() {
        *by_state.entry(sync_state(&tr)).or_default() += 1;
        let version = tr.version().unwrap_or("none").to_string();
        *by_version.entry(version).or_default() += 1;
    }
    for state in SyncState::ALL {
        metrics
            .translations
            .with_label_values(&[state.as_str()])
            .set(by_state.get(&state).copied().unwrap_or(0));
    }
    metrics.translations_by_version.reset();
    for (version, n) in by_version {
        metrics
            .translations_by_version
            .with_label_values(&[&version])
            .set(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, TranslationSpec};

    fn with_ready(status: &str, observed: i64, generation: i64) -> Translation {
        let mut tr = Translation::new("t", "ns", TranslationSpec::default());
        tr.metadata.generation = Some(generation);
        tr.status = Some(TranslationStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                observed_generation: Some(observed),
                ..Condition::default()
            }],
            ..TranslationStatus::default()
        });
        tr
    }

    #[test]
    fn sync_state_tells_a_spec_changed_since_the_push() {
        assert_eq!(sync_state(&with_ready("True", 2, 2)), SyncState::Ready);
        assert_eq!(sync_state(&with_ready("True", 1, 2)), SyncState::Pending);
        assert_eq!(sync_state(&with_ready("False", 2, 2)), SyncState::NotReady);
        let never = Translation::new("t", "ns", TranslationSpec::default());
        assert_eq!(sync_state(&never), SyncState::Unknown);
        let mut deleted = with_ready("True", 2, 2);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert_eq!(sync_state(&deleted), SyncState::Terminating);
    }
}

/// Event reasons of a version bump, one per phase entered.
pub mod rollout_event {
    pub const BUILDING: &str = "VersionBumpBuilding";
    pub const CUTTING_OVER: &str = "VersionBumpCuttingOver";
    pub const RETIRING: &str = "VersionBumpRetiring";
    pub const COMPLETE: &str = "VersionBumpComplete";
}

/// How often the bump's phase is assessed.
const ROLLOUT_TICK: Duration = Duration::from_millis(500);

/// Drives a version bump (see [`rollout`]): reports each phase (log line, Event on the
/// configured version's global Translations, metrics), wakes the Translations awaiting the
/// cutover when it begins, and deletes the old versions' Translations once it is over.
async fn rollout_loop(store: Store<Translation>, ctx: Arc<PusherContext>) {
    let mut last = rollout::Phase::Steady;
    // The UIDs of old Translations already asked to be deleted in this phase.
    let mut retired: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut ticks = 0u64;
    loop {
        tokio::time::sleep(ROLLOUT_TICK).await;
        ticks += 1;
        let progress = ctx.rollout.assess();
        let phase = progress.phase;
        for p in rollout::Phase::ALL {
            ctx.metrics
                .rollout_phase
                .with_label_values(&[p.as_str()])
                .set(i64::from(p == phase));
        }
        for (what, n) in rollout::counts(&progress) {
            ctx.metrics
                .rollout_translations
                .with_label_values(&[what])
                .set(n as i64);
        }
        let entered = phase != last;
        if entered {
            let message = rollout::describe(&progress);
            tracing::info!(phase = phase.as_str(), progress = %message, "Translation version bump");
            let reason = match phase {
                rollout::Phase::Building => rollout_event::BUILDING,
                rollout::Phase::CuttingOver => rollout_event::CUTTING_OVER,
                rollout::Phase::Retiring => rollout_event::RETIRING,
                rollout::Phase::Steady => rollout_event::COMPLETE,
            };
            if let Some(global) = store.state().into_iter().find(|t| {
                t.has_label(midonet_translators::meta::GLOBAL_LABEL) && !ctx.rollout.is_old(t)
            }) {
                use kube::Resource;
                ctx.events
                    .normal(&global.object_ref(&()), reason, message)
                    .await;
            }
            last = phase;
            retired.clear();
        }
        match phase {
            rollout::Phase::CuttingOver => {
                let awaiting: Vec<Arc<Translation>> = store
                    .state()
                    .into_iter()
                    .filter(|t| {
                        !ctx.rollout.is_old(t)
                            && rollout::Member::of(t).settled == rollout::Settled::AwaitingCutover
                    })
                    .collect();
                // The bindings move in one batch; their Translations record it afterwards.
                let moved = cutover::cut_over_all(&awaiting, &ctx).await;
                ctx.wake(moved);
                // The others on entering the phase (a binding whose old holder is gone
                // is simply created), and every few seconds (a wake lost to a restart of
                // the queue costs a few ticks, not the bump).
                if entered || ticks % 10 == 0 {
                    ctx.wake(awaiting.iter().map(|t| ObjectRef::from_obj(&**t)));
                }
            }
            rollout::Phase::Retiring if cut_back(&store, &ctx) == 0 => {
                retire(&store, &ctx, &mut retired).await
            }
            _ => {}
        }
    }
}

/// Before the old versions go: an interface an old Translation still holds (it took the
/// binding in a bump to its version that was then given up, a rollback) while a current
/// Translation binds it too is taken back by the current one first, or deleting the old
/// port would leave the pod unplugged until the current binding is pushed again. Marks
/// those current bindings missing (their push deletes the old binding and creates theirs)
/// and answers how many interfaces are still held.
fn cut_back(store: &Store<Translation>, ctx: &Arc<PusherContext>) -> usize {
    let mut held = 0;
    for old in store.state() {
        if !ctx.rollout.is_old(&old) || old.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = ObjectRef::from_obj(&*old);
        let pushed = ctx.recorded_status(&old).pushed;
        for interface in ctx.deps.interfaces_of(&key) {
            let binders = ctx.deps.binders(&interface);
            let holds = binders
                .iter()
                .any(|(k, path)| *k == key && pushed.iter().any(|p| &p.path == path));
            if !holds {
                continue;
            }
            let current: Vec<(ObjectRef<Translation>, String)> = binders
                .into_iter()
                .filter(|(k, _)| store.get(k).is_some_and(|t| !ctx.rollout.is_old(&t)))
                .collect();
            if current.is_empty() {
                continue;
            }
            held += 1;
            for (k, path) in current {
                ctx.repush_binding(k, path);
            }
        }
    }
    held
}

/// Deletes the old versions' Translations, parents first: a Translation once none of the
/// old Translations it builds on is left undeleted (global, then Node, then Pod, then its
/// MAC and ARP entries), so that each deletion finds its parents going and leaves their
/// children to MidoNet's cascades (a cycle, which nothing produces, is deleted at once).
/// `asked` holds the UIDs already asked to be deleted in this phase.
async fn retire(
    store: &Store<Translation>,
    ctx: &PusherContext,
    asked: &mut std::collections::HashSet<String>,
) {
    let undeleted = |t: &Translation| {
        ctx.rollout.is_old(t)
            && t.metadata.deletion_timestamp.is_none()
            && t.uid().is_some_and(|u| !asked.contains(&u))
    };
    let old: Vec<Arc<Translation>> = store.state().into_iter().filter(|t| undeleted(t)).collect();
    if old.is_empty() {
        return;
    }
    let mut batch: Vec<Arc<Translation>> = old
        .iter()
        .filter(|t| {
            ctx.deps
                .providers_of(&ObjectRef::from_obj(&***t))
                .iter()
                .all(|p| store.get(p).is_none_or(|p| !undeleted(&p)))
        })
        .cloned()
        .collect();
    if batch.is_empty() {
        batch = old;
    }
    let deletes = batch.into_iter().map(|t| async move {
        let api: kube::Api<Translation> =
            kube::Api::namespaced(ctx.kube.clone(), &t.namespace().unwrap_or_default());
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: t.uid(),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::default()
        };
        match api.delete(&t.name_any(), &params).await {
            Ok(_) => t.uid(),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => t.uid(),
            Err(err) => {
                tracing::warn!(translation = %t.name_any(), namespace = ?t.namespace(), error = %err, "cannot delete an old version's Translation; retrying");
                None
            }
        }
    });
    let done: Vec<Option<String>> = futures::stream::iter(deletes)
        .buffer_unordered(16)
        .collect()
        .await;
    asked.extend(done.into_iter().flatten());
}
