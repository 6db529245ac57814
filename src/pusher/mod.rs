//! The pusher: the only component that changes the backend.
//!
//! It watches Translations in all namespaces and makes the backend match them, guarded by
//! the `midonet.org/deleter` finalizer, and records on each Translation's status subresource
//! exactly what it pushed. That record is what makes a restart free (an in-sync Translation
//! costs no backend request), deletion exact (it deletes what was created, even when the spec
//! changed or became unreadable) and shrinking specs safe (removed resources are deleted).
//!
//! It runs on the process's controller scaffold ([`crate::scaffold`]): `PusherContext` is
//! its [`Reconciler`] (a failed reconcile is retried after `PusherContext::retry_delay`
//! of the Translation's consecutive failures, a [`crate::retry`] policy), its liveness probe
//! is registered by the caller ([`Scaffold::with_probe`]), and it adds the triggers only it
//! has: at each resync tick, every Translation a reconcile would change something for
//! ([`steps::needs_reconcile`]: the in-sync ones, nearly all, and those only awaiting a
//! bump's cutover would only take the workers' turns from fresh work); after a re-list,
//! every Translation; one Translation when a dependency wakes it. A guarded deletion that
//! no other Translation's binding waits for, and that takes no rule from another
//! Translation's chain (an endpoint generation's jump, a policy's rules), waits for a
//! worker in the deferrable lane ([`crate::workers`]): nobody waits for it, and the pushes
//! of a rolling update go first. Its background loops (gauges, the bump's driver
//! in [`rollout`], drift verification, the managedFields [`compaction`]) and the
//! verifications its reconciles start are [`OwnedTask`]s
//! stopped when [`run`] returns or is aborted. Its event reasons are in
//! [`crate::events::reason`].
//!
//! **Lock order.** The pusher's state is in these mutexes (each taken through
//! [`crate::locks::lock`]), and the informer's store (a read lock inside
//! `Store::get`/`state`):
//!
//! 1. the dependency index (`deps::Dependencies`): `Dependencies::hold` reads the
//!    store and each provider's recorded status (so the tracker) while holding it, which
//!    is what makes a hold and a provider's push exclusive;
//! 2. the store's read lock and the tracker's (`tracked::Tracker`), each taken with at
//!    most the index's held, never together, and released before returning: nothing is
//!    called out to while holding either;
//! 3. leaves, taken alone and never while another of these is held: the bump's census
//!    (`rollout::Rollout`), the recheck times (`verify::Rechecks`), the wake-up receiver
//!    (taken once by [`run`]) and the running verifications.
//!
//! So a lock is only ever taken after one above it: a new call made while holding a lock
//! must keep to this order (in particular, never call into `deps` while holding the
//! tracker's lock, nor await while holding any of them).

pub mod compaction;
pub(crate) mod cutover;
mod deps;
pub mod link;
pub mod metrics;
mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub mod rollout;
pub mod status;
pub mod steps;
mod tracked;
pub mod verify;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::authz::{Attempt, Authz};
use crate::backend::BackendClient;
use crate::crd::{Translation, TranslationStatus};
use crate::events::{EventPublisher, Events};
use crate::informer::TranslationInformer;
use crate::retry::RetryPolicy;
use crate::scaffold::{Action, OwnedTask, Reconciler, Retry, Scaffold};
use crate::workers::{Lane, Workers};
pub use metrics::PusherMetrics;

/// The pusher's queue and workers (a bump's cutover pauses them).
pub(crate) type PusherWorkers = Workers<crate::scaffold::QueuedName<Translation>>;

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
    /// Least age, and period, of the managedFields compaction (see [`compaction`]);
    /// `None` disables it.
    pub compact_after: Option<Duration>,
}

/// How a version bump's cutover moves the host-interface bindings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CutoverOrder {
    /// Every binding in one batch: without a path between the versions, the shortest
    /// window in which pods on the two versions cannot reach each other.
    AllAtOnce,
    /// One host's bindings after another's, each host's in one batch.
    HostByHost,
    /// Host by host over a link between the two versions' cluster routers
    /// ([`link`]): a pod on the new topology reaches one still on the old through it, so
    /// two pods are apart only during one of their hosts' batches. Falls back to all at
    /// once, with a warning, when the versions cannot be linked.
    #[default]
    Linked,
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
            compact_after: None,
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
    /// Verifications started by reconciles (see [`verify`]); stopped with the pusher.
    verifying: Mutex<Vec<OwnedTask>>,
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
            verifying: Mutex::default(),
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
                    ctx.tracker.is_own_write(&uid, tr.status.as_ref(), || {
                        tracked::reconcile_input_hash(tr)
                    })
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
        // Without a UID the pusher wrote nothing for it (it reconciles none such).
        let recorded = tr
            .uid()
            .and_then(|uid| self.tracker.written(&uid))
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
        let missing = tr
            .uid()
            .map(|uid| self.tracker.missing(&uid))
            .unwrap_or_default();
        if !missing.is_empty() {
            status.pushed.retain(|p| !missing.contains_key(&p.path));
        }
        status
    }

    /// Runs `task` in the background until it ends or the pusher stops ([`run`] returns
    /// or is aborted), whichever comes first.
    fn spawn_verification(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = crate::locks::lock(&self.verifying);
        tasks.retain(|t| !t.is_finished());
        tasks.push(OwnedTask::spawn(task));
    }

    fn forget(&self, tr: &Translation, uid: &str) {
        self.deps.release(&ObjectRef::from_obj(tr));
        self.tracker.forget(uid);
    }

    /// Whether a reconcile of `tr` would change anything ([`steps::needs_reconcile`]).
    fn needs_reconcile(&self, tr: &Translation) -> bool {
        let missing = tr
            .uid()
            .map(|uid| self.tracker.missing(&uid))
            .unwrap_or_default();
        steps::needs_reconcile(tr, &self.recorded_status(tr), &missing)
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

impl Reconciler for PusherContext {
    type Object = Translation;
    type Error = PusherError;
    const NAME: &'static str = CONTROLLER;

    fn reconcile(
        self: Arc<Self>,
        tr: Arc<Translation>,
    ) -> impl std::future::Future<Output = Result<Action, PusherError>> + Send + 'static {
        reconcile::reconcile(tr, self)
    }

    fn failed<'a>(&'a self, tr: &'a Translation, err: &'a PusherError) -> Retry<'a> {
        // A Translation without a UID is never reconciled (see `reconcile::reconcile`).
        let failures = tr.uid().map_or(1, |uid| self.tracker.failed(&uid));
        self.metrics
            .reconciles
            .with_label_values(&["kube_error"])
            .inc();
        // Every Kubernetes write of a reconcile patches the Translation or its status; the
        // API server's message says which.
        let refused = match err {
            PusherError::Kube(e) => Some((
                Attempt::new("patch", "translations", tr.metadata.namespace.as_deref()),
                e,
            )),
            PusherError::Patch(_) => None,
        };
        Retry {
            after: self.retry_delay(failures),
            refused,
            failures: Some(failures),
        }
    }

    fn authz(&self) -> &Authz {
        &self.authz
    }

    /// A deletion nobody waits for steps aside for the pushes (a new pod's network): the
    /// replaced pods' deletions are half of a rolling update's work. Two kinds of deletion
    /// are waited for and do not: one a new binding of the same interface waits for, and
    /// one of rules in other Translations' chains ([`steps::holds_rules_in_others_chains`]:
    /// until they go, they judge traffic meant for others' rules, and an endpoint generation
    /// whose jump was pushed after its successor's shadows it).
    fn lane(&self, tr: &Translation) -> Lane {
        let deleting = tr.metadata.deletion_timestamp.is_some() && steps::guarded(tr);
        if deleting
            && !self.deps.binding_awaited(&ObjectRef::from_obj(tr))
            && !steps::holds_rules_in_others_chains(tr)
        {
            Lane::Deferrable
        } else {
            Lane::Now
        }
    }
}

/// Runs the pusher over `translations` (the process's Translation informer, see
/// [`crate::informer`]: its applied objects, and every Translation after a re-list) until
/// `shutdown` resolves; in-flight reconciles are finished first. With `recovery`, it holds
/// the run marker while it runs and recovers after a predecessor that did not stop cleanly
/// (see [`crate::recovery`]).
pub async fn run(
    ctx: Arc<PusherContext>,
    translations: crate::informer::Started<
        impl futures::Stream<Item = Result<Translation, watcher::Error>> + Send + 'static,
    >,
    store: Store<Translation>,
    liveness: crate::health::LoopProbe,
    recovery: Option<crate::recovery::CrashRecovery>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let recovery = recovery.map(crate::recovery::CrashRecovery::start);
    let scaffold = Scaffold::<PusherContext>::with_probe(liveness);
    let relisted = crate::streams::unbounded(translations.relisted);
    let woken = crate::locks::lock(&ctx.wake_rx).take();
    let woken = futures::stream::iter(woken.map(crate::streams::unbounded)).flatten();
    let controller = scaffold
        .controller(
            translations.applied,
            store.clone(),
            ctx.config.workers,
            shutdown,
        )
        .reconcile_all_on(relisted)
        .reconcile_on(woken);
    let background = Background::start(&store, &ctx, scaffold.workers());
    scaffold.run(controller, ctx).await;
    // Only a drained stop gets here: an aborted one leaves the run marker held.
    drop(background);
    if let Some(recovery) = recovery {
        recovery.clean_stop().await;
    }
}

/// The pusher's background tasks: its loops, and the verifications its reconciles start.
/// Dropped when [`run`] returns or its task is aborted, which stops them all.
struct Background {
    _loops: Vec<OwnedTask>,
    ctx: Arc<PusherContext>,
}

impl Background {
    /// `workers` are the reconciles' (a bump's cutover pauses them).
    fn start(
        store: &Store<Translation>,
        ctx: &Arc<PusherContext>,
        workers: Option<Arc<PusherWorkers>>,
    ) -> Self {
        let mut loops = vec![
            OwnedTask::spawn(gauge_loop(store.clone(), ctx.clone())),
            OwnedTask::spawn(rollout::rollout_loop(store.clone(), ctx.clone(), workers)),
            OwnedTask::spawn(resync_loop(store.clone(), ctx.clone())),
        ];
        if let Some(after) = ctx.config.compact_after {
            loops.push(OwnedTask::spawn(compaction::compaction_loop(
                store.clone(),
                ctx.clone(),
                after,
            )));
        }
        if let Some(period) = ctx.config.verify_period {
            loops.push(OwnedTask::spawn(verify::verify_loop(
                store.clone(),
                ctx.clone(),
                period,
            )));
        }
        Background {
            _loops: loops,
            ctx: ctx.clone(),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The verifications hold the context: stopping them here also frees it.
        crate::locks::lock(&self.ctx.verifying).clear();
    }
}

/// Translations a resync looks at between two yields to the runtime.
const RESYNC_CHUNK: usize = 256;

/// At each resync period, wakes the Translations a reconcile would change something for.
async fn resync_loop(store: Store<Translation>, ctx: Arc<PusherContext>) {
    let ticks = crate::streams::every(ctx.config.resync);
    futures::pin_mut!(ticks);
    while ticks.next().await.is_some() {
        let all = store.state();
        let mut due = 0usize;
        for chunk in all.chunks(RESYNC_CHUNK) {
            let refs: Vec<ObjectRef<Translation>> = chunk
                .iter()
                .filter(|tr| ctx.needs_reconcile(tr))
                .map(|tr| ObjectRef::from_obj(&**tr))
                .collect();
            due += refs.len();
            ctx.wake(refs);
            tokio::task::yield_now().await;
        }
        tracing::debug!(translations = all.len(), due, "resync");
    }
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
