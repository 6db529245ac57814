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
//!   [`LoopProbe`], each reconcile is recorded from its start to its end, and a queued
//!   object found gone is progress ([`crate::health`] says when that makes a wedge); the
//!   loop counts as ended (a wedge unless the process is stopping) once [`Scaffold::run`]
//!   has returned or its task was aborted;
//! - *error policy*: a failed reconcile is retried after the delay its
//!   [`Reconciler::failed`] returns (a [`crate::retry`] policy), and logged once per
//!   failure: as a warning, or at debug when the apiserver refused the request for want of
//!   an RBAC rule, which [`crate::authz`] reports (rate limited) as an authorization error;
//!   a reconcile that asks for it ([`Action::requeue`]) runs again after its delay; either
//!   is queued again then, in the lane its object is in then, unless it is gone from the
//!   store;
//! - *queue errors*: what kube-runtime yields without a reconcile (an object the store
//!   does not hold yet, a trigger's error) is logged at debug: the next trigger brings the
//!   object again;
//! - *workers, in order*: kube-runtime only says which objects are due; their names wait
//!   in the controller's own queue ([`crate::workers`], which says why kube-runtime's bound
//!   is not used), once each, first come, first served, in their lane
//!   ([`Reconciler::lane`]), the urgent lane first; `workers` workers take them, so at
//!   most that many reconciles run at once and never two of one object. A worker reads the
//!   object from the store when it takes its name (what was written while it waited is in
//!   it; an object gone from the store is not reconciled);
//! - *resync*: with [`Scaffold::resync_every`], every object of the store is queued once
//!   per period in the deferrable lane: nobody waits for a resync, so what changed
//!   meanwhile goes first (its name moves to the urgent lane if the resync queued it);
//! - *shutdown*: once the `shutdown` future handed to the builder resolves, the controller
//!   takes no new work (the names still waiting are dropped) and [`Scaffold::run`]
//!   returns when the reconciles in flight are done.
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

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::time::{delay_queue, DelayQueue};
use tracing::Instrument;

use crate::authz::{Attempt, Authz};
use crate::health::{Health, LoopProbe};
use crate::retry::RetryPolicy;
use crate::workers::{Lane, Workers};

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
pub struct Scaffold<R: Reconciler> {
    probe: LoopProbe,
    gate: Gate<R::Object>,
    resync: Option<Duration>,
    reconciler: PhantomData<fn() -> R>,
}

/// The name of an object in a controller's queue ([`Workers`]): its reference without
/// the UID and resourceVersion, shared by the queue's lane and its index.
pub type QueuedName<K> = Arc<ObjectRef<K>>;

/// The queue and workers of a controller ([`Workers`]), closed at shutdown. Their number is
/// set by the builder ([`Scaffold::controller`]), the only way to a controller
/// [`Scaffold::run`] runs.
struct Gate<K: Resource>(Arc<std::sync::OnceLock<Arc<Workers<QueuedName<K>>>>>);

impl<K: Resource> Clone for Gate<K> {
    fn clone(&self) -> Self {
        Gate(self.0.clone())
    }
}

impl<K: Resource> Default for Gate<K> {
    fn default() -> Self {
        Gate(Arc::default())
    }
}

impl<K: Resource<DynamicType = ()> + Send + Sync + 'static> Gate<K> {
    /// Sets the number of workers; returns the shutdown that closes the queue first.
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

    fn workers(&self) -> Option<Arc<Workers<QueuedName<K>>>> {
        self.0.get().cloned()
    }
}

/// The queued name of `obj`.
fn queued_name<K: Resource<DynamicType = ()>>(obj: &K) -> QueuedName<K> {
    let name = ObjectRef::new(&obj.name_any());
    Arc::new(match obj.meta().namespace.as_deref() {
        Some(ns) => name.within(ns),
        None => name,
    })
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
            resync: None,
            reconciler: PhantomData,
        }
    }

    /// Queues every object of the store in the deferrable lane once per `period` (the
    /// first after one period): a full resync, which nobody waits for.
    pub fn resync_every(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
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

    /// The controller's queue and workers, once its builder ([`Self::controller`]) has set
    /// them: for work that pauses its reconciles ([`Workers::pause`]).
    pub fn workers(&self) -> Option<Arc<Workers<QueuedName<R::Object>>>> {
        self.gate.workers()
    }

    /// Runs `controller` with the context `ctx` until its shutdown (see the module doc).
    pub async fn run(self, controller: Controller<R::Object>, ctx: Arc<R>) {
        let Some(workers) = self.gate.workers() else {
            tracing::error!(
                controller = R::NAME,
                "a controller not built by its scaffold has no workers: nothing reconciled"
            );
            return;
        };
        let store = controller.store();
        let closing = workers.clone();
        let (retries, retry_rx) = mpsc::unbounded_channel();
        let shell = Shell {
            workers: workers.clone(),
            store,
            ctx: ctx.clone(),
            probe: self.probe.clone(),
        };
        let count = workers.count();
        let reconciles = futures::future::join_all((0..count).map(|_| shell.work(retries.clone())));
        // The retries end with the workers (the last sender goes with them).
        drop(retries);
        let delayed = shell.retries(retry_rx);
        let dispatch = controller
            .run(
                move |queued, ctx: Arc<R>| {
                    workers.add(queued_name(&*queued), ctx.lane(&queued));
                    std::future::ready(Ok::<_, R::Error>(
                        kube::runtime::controller::Action::await_change(),
                    ))
                },
                |_, _, _| kube::runtime::controller::Action::await_change(),
                ctx,
            )
            .for_each(|res| {
                if let Err(err) = res {
                    // Nothing queued: the loop moved all the same.
                    self.probe.progressed();
                    tracing::debug!(controller = R::NAME, error = %err, "controller queue");
                }
                std::future::ready(())
            })
            // Ended at shutdown, which closed the queue already, or with its triggers.
            .map(move |()| closing.close());
        // The workers end with their reconciles in flight, and the retries with them; the
        // resync goes with them.
        let work = futures::future::join3(dispatch, reconciles, delayed);
        let resync = shell.resync(self.resync);
        futures::pin_mut!(work, resync);
        futures::future::select(work, resync).await;
    }
}

/// What the workers of a controller share: they take names from its queue, read the
/// objects from its store and reconcile them with its context.
struct Shell<R: Reconciler> {
    workers: Arc<Workers<QueuedName<R::Object>>>,
    store: Store<R::Object>,
    ctx: Arc<R>,
    probe: LoopProbe,
}

impl<R: Reconciler> Shell<R> {
    /// One worker: reconciles the names it takes until the queue closes; a reconcile that
    /// asks to be run again later, or failed, is sent to `retries` with its delay.
    async fn work(&self, retries: mpsc::UnboundedSender<(QueuedName<R::Object>, Instant)>) {
        while let Some(name) = self.workers.take().await {
            // The object as it is now: what a reconcile wrote while this one waited (a
            // status, a finalizer) is in it. Gone from the store: nothing to reconcile, as
            // kube-runtime would say.
            let again = match self.store.get(&name) {
                Some(obj) => self.reconcile(obj).await,
                None => {
                    self.probe.progressed();
                    None
                }
            };
            self.workers.done(&name);
            if let Some(after) = again {
                // Closed only once every worker has ended.
                let _ = retries.send((name, Instant::now() + after));
            }
        }
    }

    /// Queues every object of the store in the deferrable lane once per `period`, if
    /// any; never ends.
    async fn resync(&self, period: Option<Duration>) {
        let Some(period) = period else {
            return std::future::pending().await;
        };
        let ticks = crate::streams::every(period);
        futures::pin_mut!(ticks);
        while ticks.next().await.is_some() {
            let all = self.store.state();
            if !all.is_empty() {
                self.probe.queued();
            }
            for obj in &all {
                self.workers.add(queued_name(&**obj), Lane::Deferrable);
            }
        }
        std::future::pending().await
    }

    /// Runs one reconcile of `obj`; answers when to run it again, if at all.
    async fn reconcile(&self, obj: Arc<R::Object>) -> Option<Duration> {
        let span = crate::logfields::object_span(R::NAME, &*obj);
        let reconcile = self.ctx.clone().reconcile(obj.clone()).instrument(span);
        match Box::pin(self.probe.reconcile(reconcile)).await {
            Ok(action) => action.requeue_after(),
            Err(err) => Some(error_policy::<R>(&obj, &err, &self.ctx)),
        }
    }

    /// Queues each name of `retries` again once its time comes, in the lane its object is
    /// in then (gone from the store by then: not queued). One time per name, the earliest:
    /// a name queued meanwhile by a trigger keeps its retry.
    async fn retries(
        &self,
        mut retries: mpsc::UnboundedReceiver<(QueuedName<R::Object>, Instant)>,
    ) {
        let mut due: DelayQueue<QueuedName<R::Object>> = DelayQueue::new();
        let mut keys: HashMap<QueuedName<R::Object>, delay_queue::Key> = HashMap::new();
        loop {
            tokio::select! {
                next = retries.recv() => {
                    let Some((name, at)) = next else { return };
                    let at = tokio::time::Instant::from_std(at);
                    match keys.get(&name) {
                        Some(key) if due.deadline(key) <= at => {}
                        Some(key) => due.reset_at(key, at),
                        None => {
                            let key = due.insert_at(name.clone(), at);
                            keys.insert(name, key);
                        }
                    }
                }
                Some(expired) = futures::future::poll_fn(|cx| due.poll_expired(cx)) => {
                    let name = expired.into_inner();
                    keys.remove(&name);
                    if let Some(obj) = self.store.get(&name) {
                        self.probe.queued();
                        self.workers.add(name, self.ctx.lane(&obj));
                    }
                }
            }
        }
    }
}

/// A reconcile of `obj` failed with `err`: logs it and answers when to retry.
fn error_policy<R: Reconciler>(obj: &R::Object, err: &R::Error, ctx: &R) -> Duration {
    let retry = ctx.failed(obj, err);
    // Outside the reconcile's span: name the object here.
    let span = crate::logfields::object_span(R::NAME, obj);
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
    retry.after
}

/// What a successful reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile the object again after `after`, unless a change brings it earlier.
    pub const fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Reconcile the object again when it, or what it depends on, changes.
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    /// When to reconcile the object again without a change, if at all.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
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

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;
    use std::sync::Mutex;

    /// Records the names it reconciles; `again` asks for a second run after 50 ms, `fail`
    /// fails its first, `slow` takes 200 ms and the other names beginning with `s` 10 ms.
    struct Recorder {
        seen: Mutex<Vec<String>>,
        authz: Authz,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("refused on purpose")]
    struct Refused;

    impl Reconciler for Recorder {
        type Object = ConfigMap;
        type Error = Refused;
        const NAME: &'static str = "test";

        async fn reconcile(self: Arc<Self>, obj: Arc<ConfigMap>) -> Result<Action, Refused> {
            let name = obj.name_any();
            let runs = {
                let mut seen = crate::locks::lock(&self.seen);
                seen.push(name.clone());
                seen.iter().filter(|n| **n == name).count()
            };
            match name.as_str() {
                "slow" => tokio::time::sleep(Duration::from_millis(200)).await,
                paced if paced.starts_with('s') => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                "again" if runs == 1 => return Ok(Action::requeue(Duration::from_millis(50))),
                "fail" if runs == 1 => return Err(Refused),
                _ => {}
            }
            Ok(Action::await_change())
        }

        fn failed<'a>(&'a self, _: &'a ConfigMap, _: &'a Refused) -> Retry<'a> {
            Retry {
                after: Duration::from_millis(50),
                refused: None,
                failures: None,
            }
        }

        fn authz(&self) -> &Authz {
            &self.authz
        }
    }

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm
    }

    /// Polls `done` every 10 ms, for at most 30 s: a generous ceiling, so that a loaded
    /// machine slows the test down without failing it.
    async fn wait_for(what: &str, done: impl Fn() -> bool) {
        for _ in 0..3000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn objects_are_reconciled_in_arrival_order_retried_when_asked_and_not_past_shutdown() {
        let names = ["slow", "b", "again", "fail", "c", "b"];
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        for n in names {
            writer.apply_watcher_event(&Event::InitApply(config_map(n)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let (objects_tx, objects_rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let health = Health::new();
        let scaffold = Scaffold::<Recorder>::register(&health);
        let objects = crate::streams::unbounded(objects_rx);
        let controller = scaffold.controller(objects, store, 1, async move {
            let _ = stop_rx.await;
        });
        let ctx = Arc::new(Recorder {
            seen: Mutex::new(Vec::new()),
            authz: Authz::new(&prometheus::Registry::new()).expect("metrics"),
        });
        let running = tokio::spawn(scaffold.run(controller, ctx.clone()));
        for n in names {
            objects_tx.send(Ok(config_map(n))).expect("sent");
            // kube-runtime's scheduler hands out what comes due in the same millisecond in
            // any order: arrivals are apart, as a steady stream's are.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = || crate::locks::lock(&ctx.seen).clone();
        wait_for("every object, the retries too", || seen().len() == 7).await;
        // One worker: in arrival order, "b" once (it waited while queued), then the
        // retries.
        assert_eq!(seen(), ["slow", "b", "again", "fail", "c", "again", "fail"]);

        // At shutdown the reconcile in flight finishes; what waited is not run.
        objects_tx.send(Ok(config_map("slow"))).expect("sent");
        objects_tx.send(Ok(config_map("c"))).expect("sent");
        wait_for("the slow one started", || seen().len() == 8).await;
        let _ = stop_tx.send(());
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("run returns at shutdown")
            .expect("task");
        assert_eq!(seen().len(), 8, "nothing started after the shutdown");
    }

    #[tokio::test]
    async fn a_resync_queues_every_object_behind_what_changes_meanwhile() {
        let names: Vec<String> = (0..20).map(|n| format!("s{n}")).collect();
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        for n in &names {
            writer.apply_watcher_event(&Event::InitApply(config_map(n)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let (objects_tx, objects_rx) = mpsc::unbounded_channel();
        let health = Health::new();
        let scaffold =
            Scaffold::<Recorder>::register(&health).resync_every(Duration::from_millis(300));
        // The resync queues the store's objects in the order the store lists them.
        let last = store
            .state()
            .last()
            .map(|cm| cm.name_any())
            .expect("objects");
        let controller = scaffold.controller(
            crate::streams::unbounded(objects_rx),
            store,
            1,
            std::future::pending(),
        );
        let ctx = Arc::new(Recorder {
            seen: Mutex::new(Vec::new()),
            authz: Authz::new(&prometheus::Registry::new()).expect("metrics"),
        });
        let running = tokio::spawn(scaffold.run(controller, ctx.clone()));
        let seen = || crate::locks::lock(&ctx.seen).clone();
        wait_for("the resync began", || !seen().is_empty()).await;
        // Each reconcile takes 10 ms: what changes now, the last of the pass, goes before
        // the rest of it.
        objects_tx.send(Ok(config_map(&last))).expect("sent");
        wait_for("the whole pass", || {
            let seen = seen();
            names.iter().all(|n| seen.contains(n))
        })
        .await;
        let pass = seen();
        let at = pass.iter().position(|n| *n == last).expect("reconciled");
        assert!(at <= 5, "the change went before the pass: {pass:?}");
        running.abort();
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
