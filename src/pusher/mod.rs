//! The pusher: the only component that changes the backend.
//!
//! It watches Translations in all namespaces and makes the backend match them, guarded by
//! the `midonet.org/deleter` finalizer, and records on each Translation's status subresource
//! exactly what it pushed. That record is what makes a restart free (an in-sync Translation
//! costs no backend request), deletion exact (it deletes what was created, even when the spec
//! changed or became unreadable) and shrinking specs safe (removed resources are deleted).

mod deps;
pub mod metrics;
pub mod plan;
mod reconcile;
pub mod verify;

use std::collections::{HashMap, HashSet};
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
        }
    }
}

/// Consecutive failures of one Translation, for backoff and for not repeating events.
#[derive(Default, Debug)]
struct Failures {
    count: u32,
    last_warning: Option<String>,
    /// The failures are of deleting (not of applying) the Translation.
    deleting: bool,
}

/// Everything the pusher's reconciles share. No global state: one of these per pusher.
pub struct PusherContext {
    pub kube: Client,
    pub backend: BackendClient,
    pub events: Events,
    pub metrics: PusherMetrics,
    pub config: PusherConfig,
    pub authz: Authz,
    /// The status this process last wrote per Translation UID: the informer cache may not
    /// show our own write yet, and acting on the stale status would repeat backend calls.
    written: Mutex<HashMap<String, TranslationStatus>>,
    failures: Mutex<HashMap<String, Failures>>,
    /// Pushed paths found missing, per Translation UID, with how they went missing.
    missing: Mutex<HashMap<String, HashMap<String, verify::Cause>>>,
    /// Which Translation provides which referent, and who waits for it.
    deps: deps::Dependencies,
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
            config,
            authz,
            written: Mutex::default(),
            failures: Mutex::default(),
            missing: Mutex::default(),
            deps: deps::Dependencies::new(informer.store.clone()),
            wake_tx,
            wake_rx: Mutex::new(Some(wake_rx)),
        });
        let observer = Arc::downgrade(&ctx);
        informer.observe(Box::new(move |event| {
            if let Some(ctx) = observer.upgrade() {
                ctx.deps.observe(event);
            }
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

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recent status: ours if we wrote one, else the object's.
    fn recorded_status(&self, tr: &Translation) -> TranslationStatus {
        let uid = tr.uid().unwrap_or_default();
        Self::lock(&self.written)
            .get(&uid)
            .cloned()
            .or_else(|| tr.status.clone())
            .unwrap_or_default()
    }

    fn remember_status(&self, uid: &str, status: TranslationStatus) {
        Self::lock(&self.written).insert(uid.to_string(), status);
    }

    fn forget(&self, tr: &Translation, uid: &str) {
        self.deps.release(&ObjectRef::from_obj(tr));
        Self::lock(&self.written).remove(uid);
        Self::lock(&self.missing).remove(uid);
        self.succeeded(uid);
    }

    /// Records a failure; returns the consecutive count and the delay before the retry.
    fn failed(&self, uid: &str) -> (u32, Duration) {
        let mut failures = Self::lock(&self.failures);
        let entry = failures.entry(uid.to_string()).or_default();
        entry.count = entry.count.saturating_add(1);
        let count = entry.count;
        self.metrics.retry_queue.set(failures.len() as i64);
        (count, self.retry_delay(count))
    }

    /// A deletion starts afresh: the backoff that failed pushes built up must not delay
    /// it (a Translation that could never be pushed is often deleted for that reason).
    fn begin_deletion(&self, uid: &str) {
        let mut failures = Self::lock(&self.failures);
        let entry = failures.entry(uid.to_string()).or_default();
        if !entry.deleting {
            *entry = Failures {
                deleting: true,
                ..Failures::default()
            };
        }
    }

    fn succeeded(&self, uid: &str) {
        let mut failures = Self::lock(&self.failures);
        failures.remove(uid);
        self.metrics.retry_queue.set(failures.len() as i64);
    }

    /// True when this warning differs from the last one emitted for the Translation, so the
    /// same failure repeated on every retry yields one event, not one per attempt.
    fn should_warn(&self, uid: &str, message: &str) -> bool {
        let mut failures = Self::lock(&self.failures);
        let entry = failures.entry(uid.to_string()).or_default();
        if entry.last_warning.as_deref() == Some(message) {
            return false;
        }
        entry.last_warning = Some(message.to_string());
        true
    }

    fn retry_delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(16);
        let delay = self.config.retry_base.saturating_mul(1u32 << exp);
        let delay = delay.min(self.config.retry_cap);
        // ±20 % jitter so many Translations failing together do not retry in lockstep.
        let jitter = rand::random::<f64>() * 0.4 + 0.8;
        delay.mul_f64(jitter)
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

    /// The paths to create again; each stays marked until [`Self::recreated`] says it was,
    /// so a push that fails or is held before getting to it does not forget it.
    fn missing(&self, uid: &str) -> HashMap<String, verify::Cause> {
        Self::lock(&self.missing)
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    fn recreated(&self, uid: &str, path: &str) {
        let mut missing = Self::lock(&self.missing);
        if let Some(paths) = missing.get_mut(uid) {
            paths.remove(path);
            if paths.is_empty() {
                missing.remove(uid);
            }
        }
    }

    fn mark_missing(&self, uid: &str, paths: HashSet<String>, cause: verify::Cause) {
        Self::lock(&self.missing)
            .entry(uid.to_string())
            .or_default()
            .extend(paths.into_iter().map(|p| (p, cause)));
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
    let (count, delay) = ctx.failed(&uid);
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

/// Runs the pusher over `translations` (the applied objects of the process's Translation
/// informer, see [`crate::informer`]) until `shutdown` resolves; in-flight reconciles are
/// finished first.
pub async fn run(
    ctx: Arc<PusherContext>,
    translations: impl futures::Stream<Item = Result<Translation, watcher::Error>> + Send + 'static,
    store: Store<Translation>,
    liveness: crate::health::LoopProbe,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let translations = liveness.queue_of(translations);
    let ticks = crate::streams::every(ctx.config.resync);
    let woken = PusherContext::lock(&ctx.wake_rx).take();
    let woken = futures::stream::iter(woken.map(crate::streams::unbounded)).flatten();
    let controller = Controller::for_stream(translations, store.clone())
        .with_config(controller::Config::default().concurrency(ctx.config.workers))
        .reconcile_all_on(ticks)
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown);

    let background = tokio::spawn(background_tasks(store, ctx.clone()));
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
    background.abort();
}

async fn background_tasks(store: Store<Translation>, ctx: Arc<PusherContext>) {
    if let Some(period) = ctx.config.verify_period {
        tokio::spawn(verify::verify_loop(store.clone(), ctx.clone(), period));
    }
    loop {
        update_gauges(&store, &ctx.metrics);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Sync state of a Translation, as the `translations` gauge counts it and drift
/// verification selects it: `ready` (the backend matches the current spec), `pending` (the
/// Ready condition is for an older generation: the spec changed since the last push),
/// `not_ready`, `unknown` (never pushed) or `terminating`.
pub fn sync_state(tr: &Translation) -> &'static str {
    if tr.metadata.deletion_timestamp.is_some() {
        return "terminating";
    }
    let ready = tr
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    match ready.map(|c| c.status.as_str()) {
        Some("True") if tr.is_ready() => "ready",
        // Ready for an older generation: the spec changed since the last push.
        Some("True") => "pending",
        Some("False") => "not_ready",
        _ => "unknown",
    }
}

fn update_gauges(store: &Store<Translation>, metrics: &PusherMetrics) {
    let mut by_state: HashMap<&'static str, i64> = HashMap::new();
    let mut by_version: HashMap<String, i64> = HashMap::new();
    for tr in store.state() {
        *by_state.entry(sync_state(&tr)).or_default() += 1;
        let version = tr
            .labels()
            .get(midonet_translators::meta::VERSION_LABEL)
            .cloned()
            .unwrap_or_else(|| "none".into());
        *by_version.entry(version).or_default() += 1;
    }
    for state in ["ready", "pending", "not_ready", "unknown", "terminating"] {
        metrics
            .translations
            .with_label_values(&[state])
            .set(by_state.get(state).copied().unwrap_or(0));
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
        assert_eq!(sync_state(&with_ready("True", 2, 2)), "ready");
        assert_eq!(sync_state(&with_ready("True", 1, 2)), "pending");
        assert_eq!(sync_state(&with_ready("False", 2, 2)), "not_ready");
        let never = Translation::new("t", "ns", TranslationSpec::default());
        assert_eq!(sync_state(&never), "unknown");
        let mut deleted = with_ready("True", 2, 2);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert_eq!(sync_state(&deleted), "terminating");
    }
}
