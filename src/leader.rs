//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! Several replicas run; only the one holding the Lease works. The rules:
//!
//! * A candidate takes the Lease when nobody holds it (no Lease, or an empty
//!   `holderIdentity` after a [`LeaderGuard::release`]), when it holds it already (same
//!   identity), or when the holder's record has not changed for `leaseDurationSeconds`
//!   *as measured on the candidate's own monotonic clock* from the moment it first saw that
//!   record. Clocks of different machines are never compared: a holder's `renewTime` is
//!   informative only.
//! * Every write is a replace carrying the `resourceVersion` read just before (or a create
//!   that fails with 409 if someone else created it first), so two candidates can never
//!   both win the same round.
//! * The holder renews every `retry_period`. If it has not renewed successfully for
//!   `renew_deadline` (counted from the moment it *sent* its last successful write), or it
//!   reads the Lease and finds another holder, it reports [`LeaderGuard::lost`]. Because
//!   `renew_deadline < lease_duration`, a holder gives up before any candidate may take
//!   over, so there are never two leaders as long as the holder stops working at once.
//! * Takeover by a new identity sets `acquireTime` and increments `leaseTransitions`.
//!
//! State for metrics: [`LeaderElector::subscribe`] gives a `watch::Receiver<bool>` that is
//! `true` exactly while this instance holds the Lease.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use rand::Rng;
use tokio::sync::{watch, Mutex, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Default name of the Lease (`MIDONETKUBE_LEADER_ELECTION_NAME`).
pub const DEFAULT_LEASE_NAME: &str = "midonet-kube-controllers";
/// How long a candidate waits on an unchanged Lease record before taking it over.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long the holder keeps trying to renew before it gives leadership up.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Interval between acquire attempts and between renewals.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Configuration of a [`LeaderElector`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub lease_namespace: String,
    /// Unique per running process (the Pod name in a Deployment): an instance that finds
    /// its own identity in the Lease takes it back at once.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// A configuration with the default timings (15 s / 10 s / 2 s).
    pub fn new(
        lease_name: impl Into<String>,
        lease_namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaderConfig {
            lease_name: lease_name.into(),
            lease_namespace: lease_namespace.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Checks the invariants the "never two leaders" guarantee rests on.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let invalid = |msg: &str| Err(LeaderError::InvalidConfig(msg.to_string()));
        if self.lease_name.is_empty() || self.lease_namespace.is_empty() {
            return invalid("the lease name and namespace must not be empty");
        }
        if self.identity.is_empty() {
            return invalid("the identity must not be empty");
        }
        if self.retry_period.is_zero() {
            return invalid("retry_period must be positive");
        }
        if self.renew_deadline <= self.retry_period {
            return invalid("renew_deadline must be longer than retry_period");
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("lease_duration must be longer than renew_deadline");
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            return invalid("lease_duration is too long");
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written to the Lease: rounded up, so that the duration
    /// other candidates wait is never shorter than ours and stays above our renew deadline.
    fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }
}

/// An identity for this process: `POD_NAME` when set (Deployment, downward API), else
/// the host name with a random suffix so that two processes on one host differ.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "midonet-kube-controllers".to_string());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("invalid leader election configuration: {0}")]
    InvalidConfig(String),
    /// Retrying cannot help: RBAC or credentials are wrong.
    #[error("not allowed to use Lease {namespace}/{name}: {source}")]
    Denied {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Competes for one Lease. Cheap to share by reference; one [`LeaderGuard`] at a time.
pub struct LeaderElector {
    inner: Arc<Inner>,
    /// Held by the acquire loop, then by the renew loop of the current term: a second
    /// `acquire` on the same elector waits for the first term to end instead of running two
    /// renew loops on one identity.
    term: Arc<Mutex<()>>,
}

struct Inner {
    api: Api<Lease>,
    cfg: LeaderConfig,
    /// `true` while this instance holds the Lease; see [`LeaderElector::subscribe`].
    state: watch::Sender<bool>,
}

/// The Lease record as last read, and when (on our clock) it was first seen in that form.
struct Observed {
    spec: LeaseSpec,
    since: Instant,
}

enum Attempt {
    /// We hold the Lease; `sent_at` is when the winning request sequence started, the
    /// conservative start of our validity.
    Held { sent_at: Instant },
    /// Someone else holds it (validly, when acquiring; at all, when renewing).
    HeldByOther { holder: String },
    /// Our write lost an optimistic-concurrency race; read again next round.
    Conflict,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Acquire,
    Renew,
}

impl LeaderElector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Self {
        let api = Api::namespaced(client, &cfg.lease_namespace);
        let (state, _) = watch::channel(false);
        LeaderElector {
            inner: Arc::new(Inner { api, cfg, state }),
            term: Arc::new(Mutex::new(())),
        }
    }

    pub fn config(&self) -> &LeaderConfig {
        &self.inner.cfg
    }

    /// Leadership state for metrics and logs: `true` exactly while this instance holds the
    /// Lease. It turns `false` just before [`LeaderGuard::lost`] resolves, and when the
    /// guard is released or dropped.
    ///
    /// Do not gate readiness on it: a healthy standby must be Ready, or a rolling update
    /// of a Deployment with a standby never completes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.state.subscribe()
    }

    /// Blocks until this instance holds the lease (acquiring when free or expired), then
    /// keeps renewing it in a background task until the returned guard reports `lost`,
    /// is released, or is dropped.
    ///
    /// Errors only on an invalid configuration or when the API server denies access to the
    /// Lease (401/403); everything else (unreachable API server, conflicts) is retried every
    /// `retry_period`. Cancelling the future is safe: at worst a Lease write that was in
    /// flight lands, and the others wait one lease duration before taking over.
    pub async fn acquire(&self) -> Result<LeaderGuard, LeaderError> {
        let cfg = &self.inner.cfg;
        cfg.validate()?;
        let term = Arc::clone(&self.term).lock_owned().await;
        let mut observed = None;
        let mut reported_holder: Option<String> = None;
        loop {
            let attempt = tokio::time::timeout(
                cfg.renew_deadline,
                self.inner
                    .try_acquire_or_renew(&mut observed, Mode::Acquire),
            )
            .await;
            match attempt {
                Ok(Ok(Attempt::Held { sent_at })) => {
                    tracing::info!(
                        lease = %cfg.lease_name,
                        namespace = %cfg.lease_namespace,
                        identity = %cfg.identity,
                        "acquired leadership"
                    );
                    return Ok(LeaderGuard::start(Arc::clone(&self.inner), sent_at, term));
                }
                Ok(Ok(Attempt::HeldByOther { holder })) => {
                    if reported_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(lease = %cfg.lease_name, %holder, "waiting: the lease is held by another instance");
                        reported_holder = Some(holder);
                    }
                }
                Ok(Ok(Attempt::Conflict)) => {
                    tracing::debug!(lease = %cfg.lease_name, "lost a race for the lease; retrying");
                }
                Ok(Err(err)) if is_denied(&err) => {
                    return Err(LeaderError::Denied {
                        namespace: cfg.lease_namespace.clone(),
                        name: cfg.lease_name.clone(),
                        source: err,
                    });
                }
                Ok(Err(err)) => {
                    tracing::warn!(lease = %cfg.lease_name, error = %err, "cannot read or write the lease; retrying");
                }
                Err(_) => {
                    tracing::warn!(lease = %cfg.lease_name, "lease request timed out; retrying");
                }
            }
            // Jitter keeps candidates that started together from colliding every round.
            let jitter = rand::rng().random_range(0.0..0.2);
            tokio::time::sleep(cfg.retry_period.mul_f64(1.0 + jitter)).await;
        }
    }
}

/// A refusal that retrying does not heal. A freshly restarted API server's 403 "not yet
/// ready" is not one: it passes once the server's caches are warm.
fn is_denied(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status)
        if (status.code == 401 || status.code == 403) && !crate::authz::is_not_ready_yet(status))
}

fn holder_of(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Inner {
    /// One round of client-go's `tryAcquireOrRenew`: read the Lease, decide, write it with
    /// the `resourceVersion` just read.
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
        mode: Mode,
    ) -> Result<Attempt, kube::Error> {
        let cfg = &self.cfg;
        let sent_at = Instant::now();
        let Some(mut lease) = self.api.get_opt(&cfg.lease_name).await? else {
            if mode == Mode::Renew {
                // Deleted under us: someone else may already have re-created it; our term
                // is over either way.
                return Ok(Attempt::HeldByOther {
                    holder: String::new(),
                });
            }
            return match self
                .api
                .create(&PostParams::default(), &self.new_lease())
                .await
            {
                Ok(_) => Ok(Attempt::Held { sent_at }),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
                Err(err) => Err(err),
            };
        };

        let spec = lease.spec.clone().unwrap_or_default();
        // The expiry clock restarts whenever the record changes, as seen by us.
        match observed {
            Some(o) if o.spec == spec => {}
            _ => {
                *observed = Some(Observed {
                    spec: spec.clone(),
                    since: sent_at,
                })
            }
        }
        let holder = holder_of(&spec).to_string();
        let ours = holder == cfg.identity;
        match mode {
            Mode::Renew if !ours => return Ok(Attempt::HeldByOther { holder }),
            Mode::Acquire if !ours && !holder.is_empty() => {
                let valid_for = spec
                    .lease_duration_seconds
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(s as u64))
                    .unwrap_or(cfg.lease_duration);
                let since = observed.as_ref().map_or(sent_at, |o| o.since);
                if since + valid_for > Instant::now() {
                    return Ok(Attempt::HeldByOther { holder });
                }
                tracing::info!(lease = %cfg.lease_name, previous = %holder, "the lease expired; taking it over");
            }
            _ => {}
        }

        lease.spec = Some(self.held_spec(&spec, ours));
        // `lease.metadata.resourceVersion` is the one just read: a concurrent writer makes
        // this fail with 409 instead of being overwritten.
        match self
            .api
            .replace(&cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Held { sent_at }),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(err) => Err(err),
        }
    }

    /// The Lease this candidate creates when there is none: held by it.
    fn new_lease(&self) -> Lease {
        let cfg = &self.cfg;
        Lease {
            metadata: ObjectMeta {
                name: Some(cfg.lease_name.clone()),
                namespace: Some(cfg.lease_namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(cfg.lease_duration_seconds()),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    /// `spec` renewed by this candidate (`ours`) or taken over by it: a takeover sets
    /// `acquireTime` and counts a transition.
    fn held_spec(&self, spec: &LeaseSpec, ours: bool) -> LeaseSpec {
        let cfg = &self.cfg;
        let mut new_spec = spec.clone();
        let stamp = now();
        if !ours {
            new_spec.acquire_time = Some(stamp.clone());
            new_spec.lease_transitions =
                Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        new_spec.holder_identity = Some(cfg.identity.clone());
        new_spec.lease_duration_seconds = Some(cfg.lease_duration_seconds());
        new_spec.renew_time = Some(stamp);
        new_spec
    }

    /// Gives the Lease up if we still hold it: no holder, a 1 s duration, so a standby
    /// takes over on its next attempt instead of waiting out the lease duration.
    async fn release_lease(&self) -> Result<(), kube::Error> {
        let cfg = &self.cfg;
        let Some(mut lease) = self.api.get_opt(&cfg.lease_name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if holder_of(spec) != cfg.identity {
            return Ok(());
        }
        let stamp = now();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(stamp.clone());
        spec.renew_time = Some(stamp);
        match self
            .api
            .replace(&cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            // 409: someone wrote the Lease since we read it, so it is no longer ours.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Proof of leadership, renewed in the background while it lives.
///
/// Dropping it stops renewing without giving the Lease up (others take over after the
/// lease duration); [`LeaderGuard::release`] gives it up at once.
pub struct LeaderGuard {
    inner: Arc<Inner>,
    /// `true` while this term lasts; the renew task turns it `false` (or drops it) on loss.
    term_rx: watch::Receiver<bool>,
    cancel: CancellationToken,
    /// The renew loop; returns whether this instance still held the Lease when it ended.
    task: Option<JoinHandle<bool>>,
}

impl LeaderGuard {
    fn start(inner: Arc<Inner>, sent_at: Instant, term: OwnedMutexGuard<()>) -> Self {
        let (term_tx, term_rx) = watch::channel(true);
        inner.state.send_replace(true);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(renew_loop(
            Arc::clone(&inner),
            sent_at,
            term_tx,
            cancel.clone(),
            term,
        ));
        LeaderGuard {
            inner,
            term_rx,
            cancel,
            task: Some(task),
        }
    }

    /// Resolves when leadership is lost (renewal failed past renew_deadline, or another
    /// holder took the lease). Callers stop all work immediately when it resolves.
    /// Resolves at once if it is already lost; may be awaited any number of times.
    pub async fn lost(&self) {
        let mut rx = self.term_rx.clone();
        // An error means the renew task is gone (it panicked): no longer leader either.
        let _ = rx.wait_for(|leading| !*leading).await;
    }

    pub fn is_leader(&self) -> bool {
        self.term_rx.has_changed().is_ok() && *self.term_rx.borrow()
    }

    /// Gives the lease up (clears holderIdentity and sets a 1 s duration) so a standby
    /// takes over at once; used on SIGTERM. Call it only after all work has stopped.
    /// Best effort: a failure is logged and the Lease then expires normally.
    pub async fn release(mut self) {
        self.cancel.cancel();
        // Wait for the renew loop to end so that no renewal lands after the release.
        let was_leader = match self.task.take() {
            Some(task) => task.await.unwrap_or(false),
            None => false,
        };
        self.inner.state.send_replace(false);
        if !was_leader {
            return;
        }
        let cfg = &self.inner.cfg;
        match tokio::time::timeout(cfg.renew_deadline, self.inner.release_lease()).await {
            Ok(Ok(())) => tracing::info!(lease = %cfg.lease_name, "released leadership"),
            Ok(Err(err)) => {
                tracing::warn!(lease = %cfg.lease_name, error = %err, "cannot release the lease; it will expire")
            }
            Err(_) => {
                tracing::warn!(lease = %cfg.lease_name, "releasing the lease timed out; it will expire")
            }
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.inner.state.send_replace(false);
    }
}

/// Renews every `retry_period` until cancelled, or until leadership is lost: no successful
/// renewal for `renew_deadline`, or another holder in the Lease.
async fn renew_loop(
    inner: Arc<Inner>,
    mut last_renew: Instant,
    term_tx: watch::Sender<bool>,
    cancel: CancellationToken,
    // Held until the loop has ended, so the next term of this elector cannot start (and
    // set the state to `true`) while this loop may still set it to `false`.
    _term: OwnedMutexGuard<()>,
) -> bool {
    let cfg = &inner.cfg;
    let mut observed = None;
    loop {
        let deadline = last_renew + cfg.renew_deadline;
        let renew = async {
            tokio::time::sleep(cfg.retry_period).await;
            inner.try_acquire_or_renew(&mut observed, Mode::Renew).await
        };
        tokio::select! {
            // Order matters: cancellation first, then the deadline, so that a renewal
            // completing at the deadline does not extend a term that has run out.
            biased;
            _ = cancel.cancelled() => {
                inner.state.send_replace(false);
                return true;
            }
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(
                    lease = %cfg.lease_name,
                    renew_deadline = ?cfg.renew_deadline,
                    "could not renew the lease in time; leadership lost"
                );
                break;
            }
            result = renew => match result {
                Ok(Attempt::Held { sent_at }) => last_renew = sent_at,
                Ok(Attempt::HeldByOther { holder }) => {
                    tracing::warn!(lease = %cfg.lease_name, %holder, "the lease was taken over; leadership lost");
                    break;
                }
                Ok(Attempt::Conflict) => {
                    tracing::debug!(lease = %cfg.lease_name, "conflict renewing the lease; retrying");
                }
                Err(err) => {
                    tracing::warn!(lease = %cfg.lease_name, error = %err, "cannot renew the lease; retrying");
                }
            },
        }
    }
    // State first: whoever wakes up from `lost()` already sees it `false`.
    inner.state.send_replace(false);
    term_tx.send_replace(false);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_unsafe_timings() {
        let mut cfg = LeaderConfig::new("l", "ns", "me");
        assert!(cfg.validate().is_ok());
        cfg.renew_deadline = cfg.lease_duration;
        assert!(cfg.validate().is_err());
        let mut cfg = LeaderConfig::new("l", "ns", "me");
        cfg.retry_period = cfg.renew_deadline;
        assert!(cfg.validate().is_err());
        assert!(LeaderConfig::new("l", "ns", "").validate().is_err());
    }

    #[test]
    fn lease_duration_seconds_rounds_up() {
        let mut cfg = LeaderConfig::new("l", "ns", "me");
        assert_eq!(cfg.lease_duration_seconds(), 15);
        cfg.lease_duration = Duration::from_millis(1500);
        assert_eq!(cfg.lease_duration_seconds(), 2);
        cfg.lease_duration = Duration::from_millis(200);
        assert_eq!(cfg.lease_duration_seconds(), 1);
    }

    #[test]
    fn only_a_lasting_refusal_counts_as_denied() {
        let refused = |code: u16, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.to_string(),
                reason: "Forbidden".into(),
                ..Default::default()
            }))
        };
        let rbac = r#"leases.coordination.k8s.io "l" is forbidden: User "u" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "ns""#;
        assert!(is_denied(&refused(403, rbac)));
        assert!(is_denied(&refused(401, "Unauthorized")));
        let warming_up =
            r#"leases.coordination.k8s.io "l" is forbidden: not yet ready to handle request"#;
        assert!(!is_denied(&refused(403, warming_up)));
        assert!(!is_denied(&refused(503, "unavailable")));
    }
}
