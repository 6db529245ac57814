//! Applying the configured [`Faults`] to one API request.

use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

use super::admin::Faults;

/// What fault injection decided for a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Handle it normally.
    Pass,
    /// Answer this status instead.
    Fail(u16),
    /// Close the connection without answering.
    Drop,
}

pub(crate) struct FaultInjector {
    faults: Mutex<Faults>,
}

impl FaultInjector {
    pub fn new(initial: Faults) -> FaultInjector {
        FaultInjector {
            faults: Mutex::new(initial),
        }
    }

    pub fn get(&self) -> Faults {
        self.faults.lock().map(|f| f.clone()).unwrap_or_default()
    }

    pub fn set(&self, faults: Faults) -> Faults {
        if let Ok(mut f) = self.faults.lock() {
            *f = faults;
        }
        self.get()
    }

    /// The latency to add to every request.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.faults.lock().map(|f| f.latency_ms).unwrap_or(0))
    }

    /// Decides the fate of one request; consumes one `dropNext`/`failNext` if used.
    pub fn decide(&self, method: &str) -> Verdict {
        let Ok(mut f) = self.faults.lock() else {
            return Verdict::Pass;
        };
        let status = if f.error_status == 0 {
            503
        } else {
            f.error_status
        };
        let mut rng = rand::rng();
        if f.drop_next > 0 {
            f.drop_next -= 1;
            return Verdict::Drop;
        }
        if f.drop_rate > 0.0 && rng.random_bool(f.drop_rate.clamp(0.0, 1.0)) {
            return Verdict::Drop;
        }
        if f.down {
            return Verdict::Fail(503);
        }
        if f.fail_next > 0 {
            f.fail_next -= 1;
            return Verdict::Fail(status);
        }
        let rate = f
            .error_rate
            .get(method)
            .or_else(|| f.error_rate.get("*"))
            .copied()
            .unwrap_or(0.0);
        if rate > 0.0 && rng.random_bool(rate.clamp(0.0, 1.0)) {
            return Verdict::Fail(status);
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_faults_are_consumed_in_order() {
        let inj = FaultInjector::new(Faults {
            drop_next: 1,
            fail_next: 2,
            error_status: 500,
            ..Faults::default()
        });
        assert_eq!(inj.decide("GET"), Verdict::Drop);
        assert_eq!(inj.decide("GET"), Verdict::Fail(500));
        assert_eq!(inj.decide("POST"), Verdict::Fail(500));
        assert_eq!(inj.decide("POST"), Verdict::Pass);
        assert_eq!(inj.get().fail_next, 0);
    }

    #[test]
    fn rates_and_down_mode() {
        let mut rates = std::collections::BTreeMap::new();
        rates.insert("POST".to_string(), 1.0);
        let inj = FaultInjector::new(Faults {
            error_rate: rates,
            ..Faults::default()
        });
        assert_eq!(inj.decide("POST"), Verdict::Fail(503));
        assert_eq!(inj.decide("GET"), Verdict::Pass);
        inj.set(Faults {
            down: true,
            ..Faults::default()
        });
        assert_eq!(inj.decide("GET"), Verdict::Fail(503));
        // Out-of-range probabilities are clamped, never a panic.
        inj.set(Faults {
            drop_rate: 7.0,
            ..Faults::default()
        });
        assert_eq!(inj.decide("GET"), Verdict::Drop);
    }
}
