//! The one retry policy: a delay that doubles per consecutive failure up to a cap, with
//! jitter so that many objects failing together (an apiserver restart, a backend outage)
//! do not retry in lockstep.
//!
//! **Guaranteed**: the delay before the retry that follows `n` consecutive failures is
//! `min(first · 2ⁿ⁻¹, max)` ([`RetryPolicy::base_delay`]) multiplied by a factor drawn
//! uniformly from `1 ± jitter` ([`RetryPolicy::delay`]); it never exceeds
//! `max · (1 + jitter)`. The three forms below follow that schedule.
//!
//! **Every retry after a failure in this crate is one of these**, each with its own bounds:
//! the reconciles' (the pusher's per Translation, the translators', the nodeannotator's, the LB IPAM's;
//! see [`crate::scaffold`]), the pass loops' (global Translations, NetworkPolicy groups),
//! the start-up retries (writing the global Translations, API discovery), the MidoNet login
//! of the readiness probe, the watches' relists ([`RetryPolicy::backoff`]) and the backend
//! client's request retries ([`RetryPolicy::exponential`], the `backoff` crate's schedule).
//! A test (`crate::conventions`) fails on a delay doubled by hand anywhere else in `src/`.
//!
//! **Not retries, and so not here**: fixed periods (resyncs, drift verification, the
//! orphan sweep) and the leader election's retry period, which client-go's semantics
//! (see [`crate::leader`]) fix and jitter upwards only.
//!
//! **Caveat**: a policy does not count failures; its caller does (per object, per loop),
//! and resets its count on success.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failure.
    pub first: Duration,
    /// Upper bound of the delay (before jitter).
    pub max: Duration,
    /// Relative spread of the jitter: the delay is multiplied by a factor drawn uniformly
    /// from `1 ± jitter`.
    pub jitter: f64,
}

impl RetryPolicy {
    /// ±20 % jitter.
    pub const fn new(first: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            first,
            max,
            jitter: 0.2,
        }
    }

    pub const fn with_jitter(self, jitter: f64) -> RetryPolicy {
        RetryPolicy { jitter, ..self }
    }

    /// The delay before the retry that follows `failures` consecutive failures (1 for the
    /// first), without jitter: `first`, doubled per further failure, at most `max`.
    pub fn base_delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        self.first.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// [`Self::base_delay`] with jitter.
    pub fn delay(&self, failures: u32) -> Duration {
        self.spread(self.base_delay(failures))
    }

    fn spread(&self, delay: Duration) -> Duration {
        let factor = 1.0 - self.jitter + rand::random::<f64>() * 2.0 * self.jitter;
        delay.mul_f64(factor.max(0.0))
    }

    /// The policy as a kube-runtime watcher backoff: an endless series of delays, back to
    /// `first` when the watch succeeds again.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            policy: *self,
            failures: 0,
        }
    }

    /// The policy as the `backoff` crate's schedule, giving up after `max_elapsed`.
    pub fn exponential(&self, max_elapsed: Duration) -> backoff::ExponentialBackoff {
        backoff::ExponentialBackoffBuilder::new()
            .with_initial_interval(self.first)
            .with_max_interval(self.max)
            .with_multiplier(2.0)
            .with_randomization_factor(self.jitter)
            .with_max_elapsed_time(Some(max_elapsed))
            .build()
    }
}

/// [`RetryPolicy::backoff`].
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    failures: u32,
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(self.policy.delay(self.failures))
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    const POLICY: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(1));

    #[test]
    fn doubles_per_failure_up_to_the_cap() {
        let delays: Vec<u128> = (1..=6).map(|n| POLICY.base_delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(POLICY.base_delay(0).as_millis(), 100);
        assert_eq!(POLICY.base_delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_its_spread() {
        for n in 1..=8 {
            let base = POLICY.base_delay(n);
            for _ in 0..50 {
                let d = POLICY.delay(n);
                assert!(
                    d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2),
                    "{d:?} vs {base:?}"
                );
            }
        }
        let none = POLICY.with_jitter(0.0);
        assert_eq!(none.delay(3), Duration::from_millis(400));
    }

    #[test]
    fn the_watch_backoff_grows_and_resets() {
        let mut b = POLICY.with_jitter(0.0).backoff();
        let first: Vec<u128> = b.by_ref().take(3).map(|d| d.as_millis()).collect();
        assert_eq!(first, [100, 200, 400]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }
}
