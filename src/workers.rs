//! A controller's work queue and its workers: which objects wait to be reconciled, in
//! which order, and how many reconciles run at once.
//!
//! kube-runtime's own bound keeps the objects it cannot start yet in a hash set and starts
//! them in hash order: under a steady backlog some wait until the backlog is gone while
//! later ones go first. Without its bound, it holds every due reconcile as a future in one
//! table (hundreds of bytes each, the table never shrinking) and polls them all each time
//! one of them wakes: a backlog of an initial sync, thousands, costs memory and the
//! runtime's one thread. So the scaffold (`crate::scaffold`) hands each due object's name
//! to this queue at once, and its workers take the names from here.
//!
//! **Guaranteed**:
//! - *one entry per object*: a name added while it waits is not queued twice (added to
//!   the urgent lane while it waits in the deferrable one, it moves to the urgent one);
//!   a name added while a worker holds it is queued again once that worker is
//!   [`Workers::done`] with it, so an object is never reconciled by two workers at once and
//!   what changed during a reconcile is looked at again;
//! - *order*: the names of a lane are taken first come, first served; a [`Lane::Now`]
//!   name goes before a [`Lane::Deferrable`] one, unless that one has waited
//!   [`MAX_DEFER`] ([`next_lane`]): a deferrable reconcile waits for the urgent ones, never
//!   for ever;
//! - *workers*: at most `workers` names are held (taken and not done) at once;
//! - *pause*: while a [`Pause`] is held, no name is taken ([`Pause::idle`] says when every
//!   held one is done); for work that must not share the process with the controller's
//!   reconciles while it runs (a version bump's cutover);
//! - *shutdown*: once [`Workers::close`]d, the waiting names are dropped, later ones are
//!   not queued and [`Workers::take`] answers `None`.
//!
//! **Assumed**: whoever takes a name calls [`Workers::done`] with it, once, whatever the
//! reconcile's outcome; a [`Pause`] is held for a short piece of work, since every
//! reconcile due meanwhile waits for it. Retries after a delay are the caller's (it adds
//! the name again when the delay is over).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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
    /// Nobody waits for it (the deletion of what nothing needs any more, a full resync).
    Deferrable,
}

impl Lane {
    /// The more urgent of the two.
    fn or(self, other: Lane) -> Lane {
        if self == Lane::Now || other == Lane::Now {
            Lane::Now
        } else {
            Lane::Deferrable
        }
    }
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

/// A controller's queue of names (`T`, an object's reference) and its workers.
pub struct Workers<T> {
    state: Mutex<State<T>>,
    /// Told when a name is queued, a pause ends or the queue closes.
    ready: Notify,
    /// Told when the last held name is done during a pause.
    idle: Notify,
}

struct State<T> {
    workers: usize,
    closed: bool,
    /// The [`Pause`]s held.
    paused: usize,
    /// The lanes, in order. An entry whose name `queued` puts in the other lane (it moved
    /// to the urgent one) or not at all (taken already) is stale and skipped.
    now: VecDeque<T>,
    deferrable: VecDeque<(Instant, T)>,
    /// The names waiting, and their lane.
    queued: HashMap<T, Lane>,
    /// The names held by a worker; `Some` once added again meanwhile, with its lane.
    held: HashMap<T, Option<Lane>>,
}

impl<T: Clone + Eq + Hash> Workers<T> {
    /// A queue served by `workers` workers (at least one).
    pub fn new(workers: usize) -> Arc<Self> {
        Arc::new(Workers {
            state: Mutex::new(State {
                workers: workers.max(1),
                closed: false,
                paused: 0,
                now: VecDeque::new(),
                deferrable: VecDeque::new(),
                queued: HashMap::new(),
                held: HashMap::new(),
            }),
            ready: Notify::new(),
            idle: Notify::new(),
        })
    }

    /// Queues `name` in `lane` (see the module doc for a name already there).
    pub fn add(&self, name: T, lane: Lane) {
        let queued = lock(&self.state).add(name, lane);
        if queued {
            self.ready.notify_one();
        }
    }

    /// The next name to reconcile, once a worker is free and its turn comes; `None` once
    /// closed. The caller is [`Self::done`] with it after its reconcile.
    pub async fn take(&self) -> Option<T> {
        loop {
            // Registered before the check: a notification between the two still wakes it.
            let notified = self.ready.notified();
            {
                let mut state = lock(&self.state);
                if state.closed {
                    return None;
                }
                if let Some(name) = state.take() {
                    return Some(name);
                }
            }
            notified.await;
        }
    }

    /// The worker holding `name` is done with it: queued again if it was added meanwhile.
    pub fn done(&self, name: &T) {
        let (requeued, idle) = {
            let mut state = lock(&self.state);
            let again = state.held.remove(name).flatten();
            let requeued = again.is_some_and(|lane| state.add(name.clone(), lane));
            (requeued, state.paused > 0 && state.held.is_empty())
        };
        if idle {
            self.idle.notify_waiters();
        }
        // A worker's slot is free: whoever waits may take the next name.
        self.ready.notify_one();
        if requeued {
            self.ready.notify_one();
        }
    }

    /// Drops every waiting name and every later one; [`Self::take`] answers `None`.
    pub fn close(&self) {
        {
            let mut state = lock(&self.state);
            state.closed = true;
            state.now.clear();
            state.deferrable.clear();
            state.queued.clear();
        }
        self.ready.notify_waiters();
    }

    /// Holds every waiting name back until the returned [`Pause`] is dropped.
    pub fn pause(self: &Arc<Self>) -> Pause<T> {
        lock(&self.state).paused += 1;
        Pause {
            workers: self.clone(),
        }
    }

    /// How many workers take names.
    pub fn count(&self) -> usize {
        lock(&self.state).workers
    }
}

impl<T: Clone + Eq + Hash> State<T> {
    /// Queues `name` in `lane`; answers whether a worker may now take it.
    fn add(&mut self, name: T, lane: Lane) -> bool {
        if self.closed {
            return false;
        }
        if let Some(again) = self.held.get_mut(&name) {
            *again = Some(again.map_or(lane, |l| l.or(lane)));
            return false;
        }
        match self.queued.get_mut(&name) {
            Some(waiting) if *waiting == Lane::Deferrable && lane == Lane::Now => {
                *waiting = Lane::Now;
                self.now.push_back(name);
                true
            }
            Some(_) => false,
            None => {
                self.queued.insert(name.clone(), lane);
                match lane {
                    Lane::Now => self.now.push_back(name),
                    Lane::Deferrable => self.deferrable.push_back((Instant::now(), name)),
                }
                true
            }
        }
    }

    /// The next name, if a worker is free and nothing pauses them; it is then held.
    fn take(&mut self) -> Option<T> {
        if self.paused > 0 || self.held.len() >= self.workers {
            return None;
        }
        let name = self.next_waiting()?;
        self.held.insert(name.clone(), None);
        Some(name)
    }

    /// The next waiting name in [`next_lane`]'s order, taken from its lane.
    fn next_waiting(&mut self) -> Option<T> {
        loop {
            let oldest = self.deferrable.front().map(|(since, _)| *since);
            let (lane, name) = match next_lane(!self.now.is_empty(), oldest, Instant::now())? {
                Lane::Now => (Lane::Now, self.now.pop_front()?),
                Lane::Deferrable => (Lane::Deferrable, self.deferrable.pop_front()?.1),
            };
            if self.queued.get(&name) == Some(&lane) {
                self.queued.remove(&name);
                return Some(name);
            }
        }
    }
}

/// No name is taken while this is held ([`Workers::pause`]).
pub struct Pause<T: Clone + Eq + Hash> {
    workers: Arc<Workers<T>>,
}

impl<T: Clone + Eq + Hash> Pause<T> {
    /// Resolves once no name is held: the reconciles in flight when the pause began have
    /// all finished.
    pub async fn idle(&self) {
        loop {
            // Registered before the check: a `done` between the two still wakes it.
            let notified = self.workers.idle.notified();
            if lock(&self.workers.state).held.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

impl<T: Clone + Eq + Hash> Drop for Pause<T> {
    fn drop(&mut self) {
        lock(&self.workers.state).paused -= 1;
        self.workers.ready.notify_waiters();
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

    /// The names taken now, one after the other, each done at once.
    fn drain(workers: &Workers<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        loop {
            let Some(name) = lock(&workers.state).take() else {
                return out;
            };
            workers.done(&name);
            out.push(name);
        }
    }

    #[test]
    fn urgent_names_go_first_each_lane_in_order_and_a_name_waits_once() {
        let workers = Workers::new(1);
        workers.add("d1", Lane::Deferrable);
        workers.add("d2", Lane::Deferrable);
        workers.add("n1", Lane::Now);
        workers.add("d1", Lane::Deferrable);
        workers.add("n2", Lane::Now);
        workers.add("n1", Lane::Now);
        // Promoted: it goes with the urgent ones, and only once.
        workers.add("d2", Lane::Now);
        assert_eq!(lock(&workers.state).queued.len(), 4);
        assert_eq!(drain(&workers), ["n1", "n2", "d2", "d1"]);
        assert_eq!(lock(&workers.state).queued.len(), 0);
    }

    #[test]
    fn a_held_name_is_not_taken_twice_and_comes_back_if_added_meanwhile() {
        let workers = Workers::new(2);
        workers.add("a", Lane::Deferrable);
        workers.add("b", Lane::Now);
        let first = lock(&workers.state).take().expect("b");
        assert_eq!(first, "b");
        workers.add("b", Lane::Deferrable);
        assert_eq!(lock(&workers.state).take(), Some("a"), "b is held");
        assert_eq!(lock(&workers.state).take(), None, "two workers, both busy");
        workers.add("b", Lane::Now);
        workers.done(&"b");
        assert_eq!(
            lock(&workers.state).take(),
            Some("b"),
            "queued again, urgent"
        );
        workers.done(&"a");
        workers.done(&"b");
        assert_eq!(drain(&workers), Vec::<&str>::new(), "once only");
    }

    #[tokio::test]
    async fn workers_wait_for_names_and_none_is_taken_once_closed() {
        let workers: Arc<Workers<&'static str>> = Workers::new(1);
        let waiting = tokio::spawn({
            let workers = workers.clone();
            async move { workers.take().await }
        });
        tokio::task::yield_now().await;
        workers.add("x", Lane::Now);
        assert_eq!(waiting.await.expect("task"), Some("x"));
        workers.add("y", Lane::Now);
        let blocked = tokio::spawn({
            let workers = workers.clone();
            async move { workers.take().await }
        });
        tokio::task::yield_now().await;
        assert!(!blocked.is_finished(), "its one worker holds x");
        workers.done(&"x");
        assert_eq!(blocked.await.expect("task"), Some("y"));
        workers.done(&"y");
        workers.add("z", Lane::Now);
        workers.close();
        assert_eq!(workers.take().await, None, "nothing once closed");
        workers.add("late", Lane::Now);
        assert_eq!(lock(&workers.state).queued.len(), 0);
    }

    #[tokio::test]
    async fn a_pause_holds_every_name_back_and_is_idle_once_the_ones_in_flight_end() {
        let workers: Arc<Workers<&'static str>> = Workers::new(2);
        workers.add("busy", Lane::Now);
        let busy = workers.take().await.expect("busy");
        let pause = workers.pause();
        workers.add("n1", Lane::Now);
        workers.add("n2", Lane::Now);
        let taker = tokio::spawn({
            let workers = workers.clone();
            async move { workers.take().await }
        });
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert!(
            !taker.is_finished(),
            "a worker is free, yet nothing is taken"
        );
        {
            let idle = pause.idle();
            futures::pin_mut!(idle);
            assert!(
                futures::poll!(idle.as_mut()).is_pending(),
                "a reconcile is still in flight"
            );
            workers.done(&busy);
            idle.await;
        }
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert!(!taker.is_finished(), "still paused");
        drop(pause);
        assert_eq!(taker.await.expect("task"), Some("n1"));
        assert_eq!(workers.take().await, Some("n2"));
    }
}
