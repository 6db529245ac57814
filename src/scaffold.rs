//! The controller scaffold: how every kube-runtime controller of the process runs a
//! reconcile, reports it and retries it, in the shape of kube-runtime's `Controller` as
//! kube-rs' `controller-rs` uses it: a context shared by the reconciles, a reconcile, an
//! error policy.
//!
//! A controller implements [`Reconciler`] on its context, builds its kube-runtime
//! `Controller` with [`Scaffold::controller`] or [`Scaffold::shared_controller`], adds the
//! triggers only it has (resyncs, watched dependencies, wake-ups), and hands both to
//! [`Scaffold::run`].
//!
//! **Guaranteed** for every controller run this way:
//! - *span*: each reconcile runs inside [`crate::logfields::object_span`], and its error
//!   policy logs inside the same fields, so every line names the controller and the object;
//! - *liveness*: each object of the main trigger is queued work on the controller's
//!   [`LoopProbe`], each reconcile is recorded from its start to its end, and every result
//!   the controller yields is progress ([`crate::health`] says when that makes a wedge);
//!   the loop counts as ended (a wedge unless the process is stopping) once
//!   [`Scaffold::run`] has returned or its task was aborted;
//! - *error policy*: a failed reconcile is retried after the delay its
//!   [`Reconciler::failed`] returns (a [`crate::retry`] policy), and logged once per
//!   failure: as a warning, or at debug when the apiserver refused the request for want of
//!   an RBAC rule, which [`crate::authz`] reports (rate limited) as an authorization error;
//! - *queue errors*: what kube-runtime yields without a reconcile (an object the store
//!   does not hold yet, a trigger's error) is logged at debug: the next trigger brings the
//!   object again;
//! - *workers, in order*: at most `workers` reconciles run at once; a queued reconcile
//!   waits for a worker in its lane ([`Reconciler::lane`]), first come, first served, the
//!   urgent lane first ([`crate::workers`], which says why kube-runtime's own bound is not
//!   used), then reads the object from the store (what was written while it waited is in
//!   it; an object gone from the store is not reconciled);
//! - *shutdown*: once the `shutdown` future handed to the builder resolves, the controller
//!   takes no new work (the reconciles still waiting for a worker end without running)
//!   and [`Scaffold::run`] returns when the reconciles in flight are done.
//!
//! **Assumed**: a reconciler that backs off per object counts that object's failures
//! itself (the scaffold keeps no per-object state) and resets the count on success; it
//! keeps its own metrics. Event reasons are in [`crate::events::reason`].
//!
//! **Left to the controller**: its triggers besides the main one, its readiness checks and
//! its background tasks (owned by it, see [`OwnedTask`], so that they stop with it).
//!
//! Loops without objects (the global Translations, the NetworkPolicy groups) run one pass
//! over everything they keep; [`NextPass`] is their schedule.

use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::Resource;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::authz::{Attempt, Authz};
use crate::health::{Health, LoopProbe};
use crate::retry::RetryPolicy;
use crate::workers::{Lane, Worker, Workers};

/// A controller's context: what its reconciles share, its reconcile and its error policy.
pub trait Reconciler: Send + Sync + Sized + 'static {
    /// The reconciled kind.
    type Object: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    type Error: std::error::Error + Send + Sync + 'static;
    /// The controller's name, as in `--controllers`: in its spans, logs and liveness.
    const NAME: &'static str;

    /// Makes the world match `obj`; says when to look again.
    fn reconcile(
        self: Arc<Self>,
        obj: Arc<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send + 'static;

    /// A reconcile of `obj` failed with `err`: counts it, and says when to retry and which
    /// Kubernetes request failed (reported as an authorization error if RBAC refused it).
    fn failed<'a>(&'a self, obj: &'a Self::Object, err: &'a Self::Error) -> Retry<'a>;

    /// Where refused requests are reported.
    fn authz(&self) -> &Authz;

    /// Which lane the reconcile of `obj` waits in for a worker (see [`crate::workers`]):
    /// by default every reconcile is somebody's wait.
    fn lane(&self, obj: &Self::Object) -> Lane {
        let _ = obj;
        Lane::Now
    }
}

/// What a failed reconcile does next.
#[derive(Debug)]
pub struct Retry<'a> {
    /// The delay before the retry.
    pub after: Duration,
    /// The Kubernetes request that failed, when the error is the apiserver's answer.
    pub refused: Option<(Attempt<'a>, &'a kube::Error)>,
    /// Consecutive failures of this object, for a controller that counts them.
    pub failures: Option<u32>,
}

/// The scaffold of the controller `R`: its liveness probe, and how it runs.
pub struct Scaffold<R> {
    probe: LoopProbe,
    gate: Gate,
    reconciler: PhantomData<fn() -> R>,
}

/// The workers of a controller ([`Workers`]), closed at shutdown. Their number is set by
/// the builder ([`Scaffold::controller`]), the only way to a controller [`Scaffold::run`]
/// runs.
#[derive(Clone, Default)]
struct Gate(Arc<std::sync::OnceLock<Arc<Workers>>>);

impl Gate {
    /// Sets the number of workers; returns the shutdown that closes the gate first.
    fn open(
        &self,
        workers: u16,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> impl Future<Output = ()> + Send + Sync + 'static {
        let workers = self
            .0
            .get_or_init(|| Workers::new(usize::from(workers)))
            .clone();
        async move {
            shutdown.await;
            workers.close();
        }
    }

    /// A worker, once `lane`'s turn comes; `None` once the controller is shutting down
    /// (or, never built by [`Scaffold::controller`], it has no workers).
    async fn worker(&self, lane: Lane) -> Option<Worker> {
        let Some(workers) = self.0.get().cloned() else {
            tracing::error!(
                "a controller not built by its scaffold has no workers: nothing reconciled"
            );
            return None;
        };
        workers.acquire(lane).await
    }
}

impl<R: Reconciler> Scaffold<R> {
    /// The scaffold of a controller whose liveness is registered now under [`Reconciler::NAME`].
    pub fn register(health: &Health) -> Self {
        Self::with_probe(health.liveness().register(R::NAME))
    }

    /// The scaffold of a controller whose liveness probe its caller registered.
    pub fn with_probe(probe: LoopProbe) -> Self {
        Scaffold {
            probe,
            gate: Gate::default(),
            reconciler: PhantomData,
        }
    }

    /// A kube-runtime controller of `workers` concurrent reconciles over `objects` (its main
    /// trigger, each object queued work), reading `store`, stopping at `shutdown`.
    pub fn controller(
        &self,
        objects: impl Stream<Item = Result<R::Object, watcher::Error>> + Send + 'static,
        store: Store<R::Object>,
        workers: u16,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Controller<R::Object> {
        let shutdown = self.gate.open(workers, shutdown);
        Controller::for_stream(self.probe.queue_of(objects), store).graceful_shutdown_on(shutdown)
    }

    /// [`Self::controller`] over objects of a shared cache.
    pub fn shared_controller(
        &self,
        objects: impl Stream<Item = Arc<R::Object>> + Send + 'static,
        store: Store<R::Object>,
        workers: u16,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Controller<R::Object> {
        let shutdown = self.gate.open(workers, shutdown);
        Controller::for_shared_stream(self.probe.queue_of(objects), store)
            .graceful_shutdown_on(shutdown)
    }

    /// The controller's workers, once its builder ([`Self::controller`]) has set them: for
    /// work that pauses its reconciles ([`Workers::pause`]).
    pub fn workers(&self) -> Option<Arc<Workers>> {
        self.gate.0.get().cloned()
    }

    /// Runs `controller` with the context `ctx` until its shutdown (see the module doc).
    pub async fn run(self, controller: Controller<R::Object>, ctx: Arc<R>) {
        let (probe, gate, store) = (self.probe.clone(), self.gate.clone(), controller.store());
        controller
            .run(
                move |queued, ctx: Arc<R>| {
                    let (probe, gate, store) = (probe.clone(), gate.clone(), store.clone());
                    // While it waits for a worker, a reconcile holds only these handles:
                    // the backlog can be a whole initial sync.
                    let lane = ctx.lane(&queued);
                    async move {
                        let Some(_worker) = gate.worker(lane).await else {
                            return Ok(Action::await_change());
                        };
                        // The object as it is now, not as it was queued: what a reconcile
                        // wrote while this one waited (a status, a finalizer) is in it. Gone
                        // from the store: nothing to reconcile, as kube-runtime would say.
                        let Some(obj) = store.get(&ObjectRef::from_obj(&*queued)) else {
                            return Ok(Action::await_change());
                        };
                        let span = crate::logfields::object_span(R::NAME, &*obj);
                        Box::pin(probe.reconcile(ctx.reconcile(obj).instrument(span))).await
                    }
                },
                error_policy::<R>,
                ctx,
            )
            .for_each(|res| {
                self.probe.progressed();
                if let Err(err) = res {
                    tracing::debug!(controller = R::NAME, error = %err, "controller queue");
                }
                std::future::ready(())
            })
            .await;
    }
}

fn error_policy<R: Reconciler>(obj: Arc<R::Object>, err: &R::Error, ctx: Arc<R>) -> Action {
    let retry = ctx.failed(&obj, err);
    // Outside the reconcile's span: name the object here.
    let span = crate::logfields::object_span(R::NAME, &*obj);
    let _entered = span.enter();
    let denied = retry
        .refused
        .is_some_and(|(attempt, e)| ctx.authz().report(attempt, e));
    if denied {
        // Already logged as an authorization error (rate limited); retried all the same.
        tracing::debug!(error = %err, failures = retry.failures, retry_in = ?retry.after, "reconcile failed; retrying");
    } else {
        tracing::warn!(error = %err, failures = retry.failures, retry_in = ?retry.after, "reconcile failed; retrying");
    }
    Action::requeue(retry.after)
}

/// When a pass loop passes next: after a successful pass, when it asked to (`Some`) or at
/// the resync; after failed ones, on its retry policy's schedule, never later than the
/// resync.
pub struct NextPass {
    retry: RetryPolicy,
    resync: Duration,
    failures: u32,
}

impl NextPass {
    pub fn new(retry: RetryPolicy, resync: Duration) -> Self {
        NextPass {
            retry,
            resync,
            failures: 0,
        }
    }

    /// The wait after a pass that asked to look again after `Some(delay)`, or not.
    pub fn after_success(&mut self, asked: Option<Duration>) -> Duration {
        self.failures = 0;
        asked.unwrap_or(self.resync)
    }

    /// The wait after a failed pass.
    pub fn after_failure(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.retry.delay(self.failures).min(self.resync)
    }
}

/// A background task owned by whoever holds this: aborted when it is dropped, so that it
/// does not outlive its controller (a controller's task aborted on a lost lease takes its
/// tasks with it).
pub struct OwnedTask(tokio::task::JoinHandle<()>);

impl OwnedTask {
    pub fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        OwnedTask(tokio::spawn(task))
    }

    /// Whether the task has ended (or was aborted).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reconciles_wait_for_a_worker_first_come_first_served_and_not_past_shutdown() {
        let gate = Gate::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let closing = tokio::spawn(gate.open(1, async move {
            let _ = stop_rx.await;
        }));
        let busy = gate.worker(Lane::Now).await.expect("a worker");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for n in 0..20 {
            let (gate, order) = (gate.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let worker = gate.worker(Lane::Now).await;
                crate::locks::lock(&order).push(n);
                worker.is_some()
            }));
            // Each is queued before the next comes.
            tokio::task::yield_now().await;
        }
        drop(busy);
        for w in waiting.drain(..) {
            assert!(w.await.expect("task"), "every one got a worker");
        }
        assert_eq!(*crate::locks::lock(&order), (0..20).collect::<Vec<_>>());

        let busy = gate.worker(Lane::Now).await.expect("a worker");
        let late = tokio::spawn({
            let gate = gate.clone();
            async move { gate.worker(Lane::Now).await.is_some() }
        });
        tokio::task::yield_now().await;
        let _ = stop_tx.send(());
        closing.await.expect("closed");
        assert!(!late.await.expect("task"), "no worker once shutting down");
        drop(busy);
        assert!(
            Gate::default().worker(Lane::Now).await.is_none(),
            "no workers unless opened"
        );
    }

    #[test]
    fn a_pass_loop_backs_off_on_failures_within_the_resync() {
        let retry =
            RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60)).with_jitter(0.0);
        let mut next = NextPass::new(retry, Duration::from_secs(5));
        assert_eq!(next.after_failure(), Duration::from_secs(1));
        assert_eq!(next.after_failure(), Duration::from_secs(2));
        assert_eq!(next.after_failure(), Duration::from_secs(4));
        assert_eq!(next.after_failure(), Duration::from_secs(5));
        assert_eq!(next.after_success(None), Duration::from_secs(5));
        assert_eq!(next.after_failure(), Duration::from_secs(1));
        assert_eq!(
            next.after_success(Some(Duration::from_millis(500))),
            Duration::from_millis(500)
        );
    }
}
