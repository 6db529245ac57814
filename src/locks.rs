//! Locks that survive a panic elsewhere.
//!
//! The process's mutexes guard caches and bookkeeping whose every update leaves them
//! consistent; a panic in another task while holding one (a bug) must not take every later
//! reconcile down with it, so a poisoned lock is used as it is.

use std::sync::{Mutex, MutexGuard};

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
