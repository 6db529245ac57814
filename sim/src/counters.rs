//! Counting the API requests the simulator receives, for tests and the benchmark.

use std::sync::Mutex;

use super::admin::RequestCounts;

#[derive(Default)]
pub(crate) struct RequestCounter {
    counts: Mutex<RequestCounts>,
}

impl RequestCounter {
    fn with(&self, f: impl FnOnce(&mut RequestCounts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }

    /// A request arrived. Logins are counted apart from the per-kind counts.
    pub fn request(&self, kind: &str, method: &str, login: bool) {
        self.with(|c| {
            c.total += 1;
            if login {
                c.login += 1;
                return;
            }
            *c.by_method.entry(method.to_string()).or_default() += 1;
            *c.by_kind
                .entry(kind.to_string())
                .or_default()
                .entry(method.to_string())
                .or_default() += 1;
        });
    }

    pub fn answered(&self, status: u16) {
        self.with(|c| *c.by_status.entry(status.to_string()).or_default() += 1);
    }

    pub fn fault(&self) {
        self.with(|c| c.faults_injected += 1);
    }

    pub fn snapshot(&self) -> RequestCounts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn reset(&self) {
        self.with(|c| *c = RequestCounts::default());
    }
}
