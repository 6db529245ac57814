//! Crash recovery: what a push cut between a backend write and its record leaves behind.
//!
//! A push writes the backend first and records what it wrote in the Translation's status
//! afterwards; MidoNet and the apiserver share no transaction. A pusher killed in between
//! leaves resources no status records. They are still claimed by the spec that asked for
//! them, and the next push of that spec records them (a creation answered 409 is settled).
//! But if the spec changes first (a Service deleted and created again with a new cluster
//! IP: its Translation is updated in place, and the jump rule's ID covers the address),
//! nothing names them any more: the pusher cannot delete what it cannot name.
//!
//! **Guaranteed**:
//! - while a pusher runs, the *run marker* (a Lease named [`marker_name`], next to the
//!   leader-election Lease) names it as holder; a pusher that stops cleanly (its workers
//!   drained, no recovery pending) clears the holder ([`Running::clean_stop`]);
//! - a pusher that finds the marker held when it starts (its predecessor was killed, lost
//!   its lease, or overran the shutdown grace), or cannot read it, runs one *recovery
//!   sweep*: two orphan sweeps ([`crate::sweep::find_orphans`]) [`CONFIRM_AFTER`] apart,
//!   the first [`FIRST_PASS_AFTER`] after the start, and deletes what both found
//!   ([`to_delete`]). An orphan found twice that far apart is no push in flight: a push
//!   records what it creates, or the next one deletes it;
//! - a failed pass is retried (the crate's retry policy) until it succeeds or the pusher
//!   stops; a stop while the recovery is pending leaves the marker held, so the next start
//!   recovers again. A clean restart costs two Lease requests, no backend request.
//!
//! **Assumed**: one pusher works at a time (leader election; see [`crate::leader`]), and the
//! tenant is this cluster's alone (what the periodic sweep assumes too).
//!
//! **Left to others**: NetworkPolicy groups, which only their name marks as ours (another
//! cluster's could share it), are reported, never deleted here; their Translations are
//! named after their content, so a changed spec never drops one. Strays made by hand and
//! the leftovers of a force-removed finalizer are the periodic sweep's
//! (`--orphan-sweep-period`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use midonet_translators::model::Kind;

use crate::backend::BackendClient;
use crate::retry::RetryPolicy;
use crate::scaffold::OwnedTask;
use crate::sweep::{Orphan, SweepError, SweepMetrics};

/// Delay from the start to the recovery's first pass: the new pusher's first pushes
/// (what the killed one was doing) go first.
pub const FIRST_PASS_AFTER: Duration = Duration::from_secs(30);
/// Delay between the recovery's two passes: longer than any push's requests take, so an
/// orphan found by both is no push in flight.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(30);
/// Retries of a failed marker write or pass.
const RETRY: RetryPolicy = RetryPolicy::new(Duration::from_secs(2), Duration::from_secs(60));

/// The run marker's name for the leader-election Lease `lease_name`.
pub fn marker_name(lease_name: &str) -> String {
    format!("{lease_name}-pusher")
}

/// What the run marker says of the pusher before this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Predecessor {
    /// No marker: no pusher of this kind ran against this cluster before.
    None,
    /// The last pusher stopped cleanly.
    Clean,
    /// The marker names a holder: that pusher did not stop cleanly.
    Unclean(String),
}

impl Predecessor {
    /// Whether its pushes may have left resources nothing records.
    pub fn needs_recovery(&self) -> bool {
        matches!(self, Predecessor::Unclean(_))
    }
}

/// What `lease` (the marker as read, if any) says of the pusher before this one.
pub fn predecessor(lease: Option<&Lease>) -> Predecessor {
    let Some(lease) = lease else {
        return Predecessor::None;
    };
    match lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
    {
        Some(holder) if !holder.is_empty() => Predecessor::Unclean(holder.to_string()),
        _ => Predecessor::Clean,
    }
}

/// The orphans of a recovery's two passes it deletes: those of the second pass the first
/// found too, but the NetworkPolicy groups (see the module doc).
pub fn to_delete(first: &[Orphan], second: Vec<Orphan>) -> Vec<Orphan> {
    second
        .into_iter()
        .filter(|o| !matches!(o.kind, Kind::PortGroup | Kind::IpAddrGroup))
        .filter(|o| first.iter().any(|f| f.path == o.path))
        .collect()
}

/// The run marker: a Lease its holder holds while it pushes.
#[derive(Clone)]
pub struct RunMarker {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl RunMarker {
    pub fn new(kube: kube::Client, namespace: &str, name: String, identity: String) -> Self {
        RunMarker {
            api: Api::namespaced(kube, namespace),
            name,
            identity,
        }
    }

    /// Names this pusher as the holder; says what the marker said before.
    pub async fn acquire(&self) -> Result<Predecessor, kube::Error> {
        let found = self.api.get_opt(&self.name).await?;
        let before = predecessor(found.as_ref());
        let now = MicroTime(Timestamp::now());
        match found {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        acquire_time: Some(now),
                        ..LeaseSpec::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.holder_identity = Some(self.identity.clone());
                spec.acquire_time = Some(now);
                // The resourceVersion read above: a concurrent write fails this with 409.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(before)
    }

    /// Clears the holder if it is still this pusher. Says whether it did.
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(true)
    }
}

/// Everything a recovery needs.
pub struct CrashRecovery {
    pub marker: RunMarker,
    pub kube: kube::Client,
    pub backend: BackendClient,
    pub tenant: String,
    pub metrics: SweepMetrics,
}

/// A started [`CrashRecovery`]: the marker is (being) acquired, a recovery may run.
pub struct Running {
    marker: RunMarker,
    /// Set once the marker names this pusher and no recovery is left to do.
    settled: Arc<AtomicBool>,
    _task: OwnedTask,
}

impl CrashRecovery {
    /// Acquires the marker and, if the predecessor did not stop cleanly, recovers, in the
    /// background: the pushes do not wait for it.
    pub fn start(self) -> Running {
        let settled = Arc::new(AtomicBool::new(false));
        let marker = self.marker.clone();
        let task = OwnedTask::spawn(self.run(settled.clone()));
        Running {
            marker,
            settled,
            _task: task,
        }
    }

    async fn run(self, settled: Arc<AtomicBool>) {
        let before = self.acquire().await;
        if before.needs_recovery() {
            tracing::warn!(predecessor = ?before, "the last pusher did not stop cleanly: a recovery sweep runs in {FIRST_PASS_AFTER:?}");
            tokio::time::sleep(FIRST_PASS_AFTER).await;
            self.recover().await;
        }
        settled.store(true, Ordering::SeqCst);
    }

    /// Acquires the marker, retrying until it succeeds.
    async fn acquire(&self) -> Predecessor {
        let what = "marking the pusher running (a crash before this succeeds goes unrecovered)";
        let before = retried(what, || self.marker.acquire()).await;
        tracing::info!(marker = %self.marker.name, predecessor = ?before, "pusher run marker acquired");
        before
    }

    /// The two passes and the deletion, each retried until it succeeds.
    async fn recover(&self) {
        let first = retried("recovery sweep: first pass", || self.find()).await;
        if first.is_empty() {
            tracing::info!("recovery sweep: no orphan");
            return;
        }
        for o in &first {
            tracing::warn!(backend_kind = %o.kind, backend_path = %o.path, description = %o.description, "recovery sweep: orphan, confirmed in {CONFIRM_AFTER:?} or left");
        }
        tokio::time::sleep(CONFIRM_AFTER).await;
        let second = retried("recovery sweep: second pass", || self.find()).await;
        let doomed = to_delete(&first, second);
        for o in &doomed {
            retried("recovery sweep: deletion", || {
                crate::sweep::delete_orphans(&self.backend, std::slice::from_ref(o))
            })
            .await;
            self.metrics.count_deleted(o.kind);
        }
        tracing::info!(
            found = first.len(),
            deleted = doomed.len(),
            "recovery sweep done"
        );
    }

    async fn find(&self) -> Result<Vec<Orphan>, SweepError> {
        crate::sweep::find_orphans(&self.kube, &self.backend, &self.tenant).await
    }
}

/// `attempt`, retried on the crate's policy until it succeeds; each failure logged.
async fn retried<T, E, F, Fut>(what: &str, mut attempt: F) -> T
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut failures = 0;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "{what} failed; retrying");
                tokio::time::sleep(RETRY.delay(failures)).await;
            }
        }
    }
}

impl Running {
    /// After the pushes stopped cleanly: clears the marker, unless the recovery is not
    /// done (then the next start recovers again).
    pub async fn clean_stop(self) {
        if !self.settled.load(Ordering::SeqCst) {
            tracing::info!("pusher stopped before its recovery finished: the marker stays held");
            return;
        }
        match self.marker.release().await {
            Ok(true) => tracing::info!(marker = %self.marker.name, "pusher run marker released"),
            Ok(false) => {
                tracing::info!(marker = %self.marker.name, "pusher run marker held by another pusher: left as it is")
            }
            Err(err) => {
                tracing::warn!(marker = %self.marker.name, error = %err, "cannot release the pusher run marker: the next start runs a recovery sweep")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..LeaseSpec::default()
            }),
        }
    }

    fn orphan(kind: Kind, path: &str) -> Orphan {
        Orphan {
            kind,
            path: path.into(),
            description: String::new(),
        }
    }

    #[test]
    fn a_held_marker_means_the_last_pusher_did_not_stop_cleanly() {
        assert_eq!(predecessor(None), Predecessor::None);
        assert_eq!(predecessor(Some(&lease(None))), Predecessor::Clean);
        assert_eq!(predecessor(Some(&lease(Some("")))), Predecessor::Clean);
        let held = predecessor(Some(&lease(Some("pod-a"))));
        assert_eq!(held, Predecessor::Unclean("pod-a".into()));
        assert!(held.needs_recovery());
        assert!(!Predecessor::Clean.needs_recovery());
        assert!(!Predecessor::None.needs_recovery());
        let no_spec = Lease {
            metadata: ObjectMeta::default(),
            spec: None,
        };
        assert_eq!(predecessor(Some(&no_spec)), Predecessor::Clean);
    }

    #[test]
    fn only_orphans_found_by_both_passes_are_deleted_and_never_policy_groups() {
        let first = vec![
            orphan(Kind::Rule, "/rules/a"),
            orphan(Kind::Rule, "/rules/in-flight"),
            orphan(Kind::PortGroup, "/port_groups/g"),
            orphan(Kind::IpAddrGroup, "/ip_addr_groups/i"),
        ];
        let second = vec![
            orphan(Kind::Rule, "/rules/a"),
            orphan(Kind::Chain, "/chains/new"),
            orphan(Kind::PortGroup, "/port_groups/g"),
            orphan(Kind::IpAddrGroup, "/ip_addr_groups/i"),
        ];
        let paths: Vec<String> = to_delete(&first, second)
            .into_iter()
            .map(|o| o.path)
            .collect();
        assert_eq!(paths, ["/rules/a"]);
    }

    #[test]
    fn the_marker_is_named_after_the_leader_lease() {
        assert_eq!(
            marker_name("midonet-kube-controllers"),
            "midonet-kube-controllers-pusher"
        );
    }
}
