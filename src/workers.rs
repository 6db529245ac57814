//! A controller's workers: how many reconciles run at once, and which waiting one goes
//! next.
//!
//! kube-runtime's own bound keeps the objects it cannot start yet in a hash set and starts
//! them in hash order: under a steady backlog some wait until the backlog is gone while
//! later ones go first. The scaffold
//! (`crate::scaffold`) therefore lets kube-runtime start every due reconcile at once and
//! makes each wait here for a [`Worker`].
//!
//! **Guaranteed**:
//! - at most `workers` [`Worker`]s exist at once; one is handed on the moment the previous
//!   holder drops it;
//! - the waiters of a lane are served first come, first served; a [`Lane::Now`] waiter
//!   goes before a [`Lane::Deferrable`] one, unless that one has waited [`MAX_DEFER`]
//!   ([`next_lane`]): a deferrable reconcile waits for the urgent ones, never for ever;
//! - once [`Workers::close`]d (the controller is shutting down), every waiter, and every
//!   later request, gets no worker;
//! - while a [`Pause`] is held, no waiter gets a worker (the reconciles in flight finish,
//!   [`Pause::idle`] says when they all have); once the last one is dropped, the free
//!   workers go to the waiters in the order above. For work that must not share the
//!   process with the controller's reconciles while it runs (a version bump's cutover).
//!
//! **Assumed**: the caller holds the worker for the whole reconcile and decides its lane
//! (see [`crate::scaffold::Reconciler::lane`]); a waiter that gives up (its future dropped)
//! is skipped when its turn comes; a [`Pause`] is held for a short piece of work, since
//! every reconcile due meanwhile waits for it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use crate::locks::lock;

/// The longest a [`Lane::Deferrable`] reconcile waits behind [`Lane::Now`] ones. Long
/// enough for a burst of pushes (a rolling update's) to go first; short enough that what a
/// deleted object leaves in the backend goes within seconds.
pub const MAX_DEFER: Duration = Duration::from_secs(10);

/// Which queue a reconcile waits in for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Somebody waits for what it does (a push of a new pod's network).
    Now,
    /// Nobody waits for it (the deletion of what nothing needs any more).
    Deferrable,
}

/// Which lane the next free worker goes to: the oldest deferrable waiter once it has
/// waited [`MAX_DEFER`], else the urgent lane, else the deferrable one; `None` when no
/// one waits. `oldest_deferrable` is when the head of the deferrable lane started waiting.
pub fn next_lane(
    now_waiting: bool,
    oldest_deferrable: Option<Instant>,
    now: Instant,
) -> Option<Lane> {
    match oldest_deferrable {
        Some(since) if now.saturating_duration_since(since) >= MAX_DEFER => Some(Lane::Deferrable),
        _ if now_waiting => Some(Lane::Now),
        Some(_) => Some(Lane::Deferrable),
        None => None,
    }
}

/// The right to run one reconcile; handed on to the next waiter when dropped.
pub struct Worker {
    workers: Option<Arc<Workers>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(workers) = self.workers.take() {
            workers.release();
        }
    }
}

/// A controller's workers and the reconciles waiting for one.
pub struct Workers {
    state: Mutex<State>,
    /// Told when the last worker in use comes back during a pause.
    idle: Notify,
}

struct State {
    count: usize,
    free: usize,
    closed: bool,
    /// The [`Pause`]s held.
    paused: usize,
    now: VecDeque<oneshot::Sender<Worker>>,
    deferrable: VecDeque<(Instant, oneshot::Sender<Worker>)>,
}

impl Workers {
    /// `count` workers (at least one).
    pub fn new(count: usize) -> Arc<Workers> {
        let count = count.max(1);
        Arc::new(Workers {
            idle: Notify::new(),
            state: Mutex::new(State {
                count,
                free: count,
                closed: false,
                paused: 0,
                now: VecDeque::new(),
                deferrable: VecDeque::new(),
            }),
        })
    }

    /// A worker, once `lane`'s turn comes; `None` once closed.
    pub async fn acquire(self: &Arc<Self>, lane: Lane) -> Option<Worker> {
        let waiting = {
            let mut state = lock(&self.state);
            if state.closed {
                return None;
            }
            if state.free > 0 && state.paused == 0 {
                state.free -= 1;
                return Some(self.worker());
            }
            let (tx, rx) = oneshot::channel();
            match lane {
                Lane::Now => state.now.push_back(tx),
                Lane::Deferrable => state.deferrable.push_back((Instant::now(), tx)),
            }
            rx
        };
        waiting.await.ok()
    }

    /// Turns every waiter away, and every later request.
    pub fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.now.clear();
        state.deferrable.clear();
    }

    /// Holds every waiter back until the returned [`Pause`] is dropped (see the module doc).
    pub fn pause(self: &Arc<Self>) -> Pause {
        lock(&self.state).paused += 1;
        Pause {
            workers: self.clone(),
        }
    }

    fn worker(self: &Arc<Self>) -> Worker {
        Worker {
            workers: Some(self.clone()),
        }
    }

    /// A worker was dropped: hands it to the next waiter, or frees it.
    fn release(self: Arc<Self>) {
        let next = {
            let mut state = lock(&self.state);
            if state.paused > 0 {
                state.free += 1;
                if state.free == state.count {
                    self.idle.notify_waiters();
                }
                return;
            }
            match state.next_waiter() {
                Some(tx) => tx,
                None => {
                    state.free += 1;
                    return;
                }
            }
        };
        self.hand_over(next);
    }

    /// Sent outside the lock: a waiter that gave up hands the worker back, and its drop
    /// releases it to the next one.
    fn hand_over(self: &Arc<Self>, to: oneshot::Sender<Worker>) {
        drop(to.send(self.worker()));
    }

    /// A pause was dropped: the free workers go to the waiters once none is held.
    fn resume(self: &Arc<Self>) {
        let next: Vec<oneshot::Sender<Worker>> = {
            let mut state = lock(&self.state);
            state.paused -= 1;
            let mut next = Vec::new();
            while state.paused == 0 && state.free > 0 {
                let Some(tx) = state.next_waiter() else { break };
                state.free -= 1;
                next.push(tx);
            }
            next
        };
        for tx in next {
            self.hand_over(tx);
        }
    }
}

impl State {
    /// The waiter the next free worker goes to ([`next_lane`]), taken from its lane.
    fn next_waiter(&mut self) -> Option<oneshot::Sender<Worker>> {
        let oldest = self.deferrable.front().map(|(since, _)| *since);
        match next_lane(!self.now.is_empty(), oldest, Instant::now())? {
            Lane::Now => self.now.pop_front(),
            Lane::Deferrable => self.deferrable.pop_front().map(|(_, tx)| tx),
        }
    }
}

/// No waiter gets a worker while this is held ([`Workers::pause`]).
pub struct Pause {
    workers: Arc<Workers>,
}

impl Pause {
    /// Resolves once no worker is in use: the reconciles in flight when the pause began
    /// have all finished.
    pub async fn idle(&self) {
        loop {
            // Registered before the check: a release between the two still wakes it.
            let notified = self.workers.idle.notified();
            {
                let state = lock(&self.workers.state);
                if state.free == state.count {
                    return;
                }
            }
            notified.await;
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        self.workers.resume();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_waiters_go_first_and_a_deferred_one_once_it_waited_max_defer() {
        let now = Instant::now();
        assert_eq!(next_lane(false, None, now), None);
        assert_eq!(next_lane(true, None, now), Some(Lane::Now));
        assert_eq!(next_lane(false, Some(now), now), Some(Lane::Deferrable));
        assert_eq!(next_lane(true, Some(now), now), Some(Lane::Now));
        let old = now - MAX_DEFER;
        assert_eq!(next_lane(true, Some(old), now), Some(Lane::Deferrable));
    }

    /// Queues `lane` waiters named `names` on `workers`, each recording its name when it
    /// gets a worker, then handing it on; each says whether it got one.
    fn queue(
        workers: &Arc<Workers>,
        lane: Lane,
        names: &[&'static str],
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> Vec<tokio::task::JoinHandle<bool>> {
        names
            .iter()
            .map(|name| {
                let (workers, order, name) = (workers.clone(), order.clone(), *name);
                tokio::spawn(async move {
                    let worker = workers.acquire(lane).await;
                    lock(&order).push(name);
                    worker.is_some()
                })
            })
            .collect()
    }

    #[tokio::test]
    async fn a_freed_worker_goes_to_the_urgent_lane_first_each_lane_in_order() {
        let workers = Workers::new(1);
        let busy = workers.acquire(Lane::Now).await.expect("a worker");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = queue(&workers, Lane::Deferrable, &["d1", "d2"], &order);
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        waiting.extend(queue(&workers, Lane::Now, &["n1", "n2"], &order));
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        // Each takes the worker in turn and hands it on when its task ends.
        drop(busy);
        for w in waiting {
            assert!(w.await.expect("task"), "every one got a worker");
        }
        assert_eq!(*lock(&order), ["n1", "n2", "d1", "d2"]);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_is_skipped_and_none_get_workers_once_closed() {
        let workers = Workers::new(1);
        let busy = workers.acquire(Lane::Now).await.expect("a worker");
        let gave_up = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire(Lane::Now).await.is_some() }
        });
        tokio::task::yield_now().await;
        gave_up.abort();
        let order = Arc::new(Mutex::new(Vec::new()));
        let next = queue(&workers, Lane::Now, &["next"], &order);
        tokio::task::yield_now().await;
        drop(busy);
        let got = next.into_iter().next().expect("one").await.expect("task");
        assert!(got, "the worker skipped the waiter that gave up");
        let held = workers
            .acquire(Lane::Now)
            .await
            .expect("the worker is free again");

        let late = queue(&workers, Lane::Now, &["late"], &order);
        tokio::task::yield_now().await;
        workers.close();
        let late = late.into_iter().next().expect("one").await.expect("task");
        assert!(!late, "no worker once closed");
        assert!(workers.acquire(Lane::Deferrable).await.is_none());
        drop(held);
    }

    #[tokio::test]
    async fn a_pause_holds_every_waiter_back_and_is_idle_once_the_ones_in_flight_end() {
        let workers = Workers::new(2);
        let busy = workers.acquire(Lane::Now).await.expect("a worker");
        let pause = workers.pause();
        let order = Arc::new(Mutex::new(Vec::new()));
        // A worker is free, yet nobody gets it while the pause is held.
        let waiting = queue(&workers, Lane::Now, &["n1", "n2"], &order);
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert!(lock(&order).is_empty(), "nobody started during the pause");
        {
            let idle = pause.idle();
            futures::pin_mut!(idle);
            assert!(
                futures::poll!(idle.as_mut()).is_pending(),
                "a reconcile is still in flight"
            );
            drop(busy);
            idle.await;
        }
        assert!(lock(&order).is_empty(), "nobody took the worker given back");
        drop(pause);
        for w in waiting {
            assert!(w.await.expect("task"), "every one got a worker");
        }
        assert_eq!(*lock(&order), ["n1", "n2"]);
        assert!(workers.acquire(Lane::Now).await.is_some(), "free again");
    }
}
