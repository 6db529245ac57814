//! Health of the process: readiness (`/readyz`) and liveness (`/healthz`).
//!
//! **Readiness** is a set of named checks that the process's parts flip (a controller's
//! cache, the MidoNet API, leader election); the process is ready when every registered
//! check is. The MidoNet API check follows the API's reachability for the whole life of the
//! process ([`follow_backend`]): a pod that cannot reach MidoNet is not ready, and is ready
//! again once MidoNet answers.
//!
//! **Liveness** answers a different question: is the process still making progress, or is
//! it wedged so that only a restart helps? A MidoNet outage is not a wedge (every reconcile
//! fails quickly and is retried; a restart would change nothing). A wedge is a controller
//! loop that no longer moves: a reconcile that has not returned far beyond the time its
//! requests' own timeouts allow, a loop that has work queued but neither starts nor finishes
//! any reconcile, or a loop that ended while the process is not shutting down (its task
//! panicked). Each controller run on the scaffold ([`crate::scaffold`]) reports to a
//! [`LoopProbe`]; [`Liveness::wedges`] tells what is wedged, and `/healthz` fails while
//! anything is, so the liveness probe restarts the pod.
//!
//! **Caveat**: the pass loops without objects (the global Translations', the NetworkPolicy
//! groups') have no probe: the groups' pass runs inside the NetworkPolicy controller's task
//! (it ends with it), but a global Translations' loop that ended would go unnoticed here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};

use crate::backend::BackendClient;
use crate::retry::RetryPolicy;

/// Readiness checks plus the liveness of the controller loops. Cheap to clone: clones share
/// their state.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
    liveness: Liveness,
}

impl Health {
    /// Readiness checks, and liveness with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Readiness checks, and liveness with these limits.
    pub fn with_limits(limits: LivenessLimits) -> Self {
        Health {
            checks: Arc::default(),
            liveness: Liveness::new(limits),
        }
    }

    /// Registers a check, not ready yet.
    pub fn register(&self, name: &str) {
        self.lock().entry(name.to_string()).or_insert(false);
    }

    /// Registers the readiness check `name` of a cache (not ready yet). Returns the callback
    /// the cache calls with each list's outcome, which sets the check, and a flag that turns
    /// true with the first successful list and stays so (a reconcile reads it before trusting
    /// the cache).
    pub fn cache_check(
        &self,
        name: &str,
    ) -> (impl Fn(bool) + Send + Sync + 'static, Arc<AtomicBool>) {
        self.register(name);
        let listed = Arc::new(AtomicBool::new(false));
        let (health, name, flag) = (self.clone(), name.to_string(), listed.clone());
        let synced = move |ok: bool| {
            if ok {
                flag.store(true, Ordering::Release);
            }
            health.set(&name, ok)
        };
        (synced, listed)
    }

    pub fn set(&self, name: &str, ready: bool) {
        self.lock().insert(name.to_string(), ready);
    }

    /// Every check with its state.
    pub fn checks(&self) -> Vec<(String, bool)> {
        self.lock().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    pub fn is_ready(&self) -> bool {
        self.lock().values().all(|v| *v)
    }

    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, bool>> {
        // A poisoned lock only means a panic elsewhere while holding it; the map is still
        // consistent (single inserts), so keep serving.
        crate::locks::lock(&self.checks)
    }
}

/// When a controller loop counts as wedged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivenessLimits {
    /// A reconcile running longer than this is wedged. Every request a reconcile makes has
    /// its own timeout (a MidoNet request `--backend-timeout`, retried for at most 30 s),
    /// so this is far beyond what a working reconcile takes.
    pub reconcile: Duration,
    /// A loop with work queued that has neither started nor finished a reconcile for this
    /// long is wedged.
    pub stall: Duration,
}

impl Default for LivenessLimits {
    fn default() -> Self {
        LivenessLimits {
            reconcile: Duration::from_secs(300),
            stall: Duration::from_secs(300),
        }
    }
}

/// Why a controller loop counts as wedged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wedge {
    /// A reconcile has been running for longer than the limit.
    ReconcileStuck {
        controller: String,
        running_for: Duration,
        limit: Duration,
    },
    /// Work has been queued for longer than the limit without any reconcile starting or
    /// finishing.
    Stalled {
        controller: String,
        queued_for: Duration,
        limit: Duration,
    },
    /// The loop ended although the process is not shutting down.
    Ended { controller: String },
}

impl Wedge {
    pub fn controller(&self) -> &str {
        match self {
            Wedge::ReconcileStuck { controller, .. }
            | Wedge::Stalled { controller, .. }
            | Wedge::Ended { controller } => controller,
        }
    }
}

impl fmt::Display for Wedge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wedge::ReconcileStuck {
                controller,
                running_for,
                limit,
            } => write!(
                f,
                "{controller}: a reconcile has been running for {}s (limit {}s)",
                running_for.as_secs(),
                limit.as_secs()
            ),
            Wedge::Stalled {
                controller,
                queued_for,
                limit,
            } => write!(
                f,
                "{controller}: work queued for {}s without any reconcile starting or finishing (limit {}s)",
                queued_for.as_secs(),
                limit.as_secs()
            ),
            Wedge::Ended { controller } => {
                write!(f, "{controller}: the controller loop has ended")
            }
        }
    }
}

/// What one controller loop reported.
#[derive(Debug)]
struct LoopState {
    /// Start times of the reconciles in flight, by a per-loop sequence number.
    running: BTreeMap<u64, Instant>,
    next_id: u64,
    /// Since when work has been queued without a reconcile starting or finishing.
    queued_since: Option<Instant>,
    ended: bool,
}

#[derive(Debug, Default)]
struct LivenessState {
    loops: BTreeMap<String, LoopState>,
}

/// The liveness of the controller loops.
#[derive(Clone, Default)]
pub struct Liveness {
    limits: LivenessLimits,
    state: Arc<Mutex<LivenessState>>,
    stopping: Arc<AtomicBool>,
}

impl Liveness {
    pub fn new(limits: LivenessLimits) -> Self {
        Liveness {
            limits,
            ..Liveness::default()
        }
    }

    pub fn limits(&self) -> LivenessLimits {
        self.limits
    }

    /// Registers a controller loop; it counts as ended once every clone of the probe is
    /// dropped (the loop returned, or its task panicked or was aborted).
    pub fn register(&self, controller: &str) -> LoopProbe {
        self.lock().loops.insert(
            controller.to_string(),
            LoopState {
                running: BTreeMap::new(),
                next_id: 0,
                queued_since: None,
                ended: false,
            },
        );
        LoopProbe {
            inner: Arc::new(ProbeInner {
                controller: controller.to_string(),
                liveness: self.clone(),
            }),
        }
    }

    /// The process is shutting down: loops that end now are not wedged.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// The registered controller loops.
    pub fn controllers(&self) -> Vec<String> {
        self.lock().loops.keys().cloned().collect()
    }

    /// What is wedged now (empty when every loop is live).
    pub fn wedges(&self) -> Vec<Wedge> {
        self.wedges_at(Instant::now())
    }

    fn wedges_at(&self, now: Instant) -> Vec<Wedge> {
        let stopping = self.stopping.load(Ordering::Acquire);
        let state = self.lock();
        let mut out = Vec::new();
        for (name, l) in &state.loops {
            if l.ended {
                if !stopping {
                    out.push(Wedge::Ended {
                        controller: name.clone(),
                    });
                }
                continue;
            }
            if let Some(oldest) = l.running.values().min() {
                let running_for = now.saturating_duration_since(*oldest);
                if running_for > self.limits.reconcile {
                    out.push(Wedge::ReconcileStuck {
                        controller: name.clone(),
                        running_for,
                        limit: self.limits.reconcile,
                    });
                }
            }
            if let Some(since) = l.queued_since {
                let queued_for = now.saturating_duration_since(since);
                if queued_for > self.limits.stall {
                    out.push(Wedge::Stalled {
                        controller: name.clone(),
                        queued_for,
                        limit: self.limits.stall,
                    });
                }
            }
        }
        out
    }

    fn with_loop(&self, controller: &str, f: impl FnOnce(&mut LoopState)) {
        if let Some(l) = self.lock().loops.get_mut(controller) {
            f(l);
        }
    }

    fn lock(&self) -> MutexGuard<'_, LivenessState> {
        // Every update is a single field change; a panic elsewhere leaves it consistent.
        crate::locks::lock(&self.state)
    }
}

struct ProbeInner {
    controller: String,
    liveness: Liveness,
}

impl Drop for ProbeInner {
    fn drop(&mut self) {
        self.liveness
            .with_loop(&self.controller, |l| l.ended = true);
    }
}

/// What one controller loop reports about its progress. Cheap to clone.
#[derive(Clone)]
pub struct LoopProbe {
    inner: Arc<ProbeInner>,
}

impl LoopProbe {
    /// Work arrived for the loop (an object to reconcile).
    pub fn queued(&self) {
        let now = Instant::now();
        self.with_loop(|l| {
            l.queued_since.get_or_insert(now);
        });
    }

    /// The loop moved: a reconcile started or finished, or it reported a result.
    pub fn progressed(&self) {
        self.with_loop(|l| l.queued_since = None);
    }

    /// Marks every item of `triggers` (the objects the loop is asked to reconcile) as
    /// queued work.
    pub fn queue_of<S: Stream>(&self, triggers: S) -> impl Stream<Item = S::Item> {
        let probe = self.clone();
        triggers.inspect(move |_| probe.queued())
    }

    /// Records a reconcile from its start until it returns or is dropped.
    pub fn reconcile<F: std::future::Future>(
        &self,
        reconcile: F,
    ) -> impl std::future::Future<Output = F::Output> {
        let guard = self.start();
        async move {
            let out = reconcile.await;
            drop(guard);
            out
        }
    }

    /// A reconcile starts; it ends when the guard is dropped.
    pub fn start(&self) -> ReconcileGuard {
        let now = Instant::now();
        let mut id = 0;
        self.with_loop(|l| {
            id = l.next_id;
            l.next_id = l.next_id.wrapping_add(1);
            l.running.insert(id, now);
            l.queued_since = None;
        });
        ReconcileGuard {
            probe: self.clone(),
            id,
        }
    }

    fn with_loop(&self, f: impl FnOnce(&mut LoopState)) {
        self.inner.liveness.with_loop(&self.inner.controller, f)
    }
}

/// A reconcile in flight; dropping it records its end.
pub struct ReconcileGuard {
    probe: LoopProbe,
    id: u64,
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        let id = self.id;
        self.probe.with_loop(|l| {
            l.running.remove(&id);
            l.queued_since = None;
        });
    }
}

/// Name of the readiness check of the MidoNet API.
pub const BACKEND_CHECK: &str = "backend";

/// Logins of the readiness probe while the MidoNet API refuses them.
const LOGIN_RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(500), Duration::from_secs(30));

/// Keeps the readiness check [`BACKEND_CHECK`] true exactly while the MidoNet API is
/// reachable and the client is logged in. Every request the controllers make tells whether
/// the API answers; when none was made for `probe_period`, one `GET` of the API root asks.
/// Transitions are logged. Runs until dropped.
pub async fn follow_backend(backend: BackendClient, health: Health, probe_period: Duration) {
    health.register(BACKEND_CHECK);
    // Often enough to notice a change within a fraction of the period.
    let tick = (probe_period / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut was_ready: Option<bool> = None;
    let mut login_failures: u32 = 0;
    let mut next_login = Instant::now();
    loop {
        let mut reason = None;
        if !backend.is_logged_in() {
            // The login's answer tells the reachability too: no probe before it.
            if Instant::now() >= next_login {
                match backend.login().await {
                    Ok(()) => login_failures = 0,
                    Err(err) => {
                        reason = Some(format!("cannot log in: {err}"));
                        login_failures = login_failures.saturating_add(1);
                        next_login = Instant::now() + LOGIN_RETRY.delay(login_failures);
                    }
                }
            }
        } else if backend
            .reachability()
            .age()
            .is_none_or(|age| age >= probe_period)
        {
            // The outcome is recorded by the client like any request's.
            let _ = backend.probe().await;
        }
        let reason = reason.unwrap_or_else(|| backend.reachability().to_string());
        let ready = backend.reachability().is_reachable() && backend.is_logged_in();
        if was_ready != Some(ready) {
            if ready {
                tracing::info!("the MidoNet API answers: ready");
            } else if !backend.is_logged_in() && backend.reachability().is_reachable() {
                tracing::warn!(%reason, "not logged in to the MidoNet API: not ready");
            } else {
                tracing::warn!(%reason, "the MidoNet API is unreachable: not ready");
            }
            was_ready = Some(ready);
        }
        health.set(BACKEND_CHECK, ready);
        tokio::time::sleep(tick).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LivenessLimits {
        LivenessLimits {
            reconcile: Duration::from_secs(10),
            stall: Duration::from_secs(20),
        }
    }

    #[test]
    fn a_long_reconcile_is_a_wedge_once_past_the_limit() {
        let live = Liveness::new(limits());
        let probe = live.register("pusher");
        let guard = probe.start();
        let now = Instant::now();
        assert!(live.wedges_at(now + Duration::from_secs(9)).is_empty());
        let wedges = live.wedges_at(now + Duration::from_secs(11));
        assert!(
            matches!(&wedges[..], [Wedge::ReconcileStuck { controller, .. }] if controller == "pusher"),
            "{wedges:?}"
        );
        drop(guard);
        assert!(live.wedges_at(now + Duration::from_secs(11)).is_empty());
    }

    #[test]
    fn queued_work_without_progress_is_a_stall() {
        let live = Liveness::new(limits());
        let probe = live.register("pod");
        probe.queued();
        let now = Instant::now();
        assert!(live.wedges_at(now + Duration::from_secs(19)).is_empty());
        assert!(matches!(
            &live.wedges_at(now + Duration::from_secs(21))[..],
            [Wedge::Stalled { .. }]
        ));
        // A reconcile starting is progress.
        let _guard = probe.start();
        assert!(!live
            .wedges_at(now + Duration::from_secs(21))
            .iter()
            .any(|w| matches!(w, Wedge::Stalled { .. })));
    }

    #[test]
    fn an_idle_loop_is_live() {
        let live = Liveness::new(limits());
        let _probe = live.register("node");
        assert!(live
            .wedges_at(Instant::now() + Duration::from_secs(3600))
            .is_empty());
    }

    #[test]
    fn a_loop_that_ends_is_a_wedge_unless_stopping() {
        let live = Liveness::new(limits());
        drop(live.register("service"));
        assert_eq!(
            live.wedges(),
            vec![Wedge::Ended {
                controller: "service".into()
            }]
        );
        live.stopping();
        assert!(live.wedges().is_empty());
    }

    #[test]
    fn a_dropped_reconcile_ends() {
        let live = Liveness::new(limits());
        let probe = live.register("endpoints");
        let fut = probe.reconcile(std::future::pending::<()>());
        drop(fut);
        assert!(live
            .wedges_at(Instant::now() + Duration::from_secs(60))
            .is_empty());
    }
}
