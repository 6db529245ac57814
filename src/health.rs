//! Readiness of the process's parts, reported by `/readyz`.
//!
//! Each part (a controller's cache, the backend login, leader election) registers a named
//! check and flips it; `/readyz` is ready when every registered check is.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a check, not ready yet.
    pub fn register(&self, name: &str) {
        self.lock().entry(name.to_string()).or_insert(false);
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

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        // A poisoned lock only means a panic elsewhere while holding it; the map is still
        // consistent (single inserts), so keep serving.
        self.checks.lock().unwrap_or_else(|e| e.into_inner())
    }
}
