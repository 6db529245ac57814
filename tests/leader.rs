//! Lease-based leader election on a real kube-apiserver, with short timings
//! (lease 2 s, renew deadline 1.5 s, retry 0.3 s). Electors use the restricted user with
//! exactly the Lease rights of `deploy/`, except where noted.

mod support;

use support::rbac;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use midonet_kube_controllers::leader::{LeaderConfig, LeaderElector, LeaderError, LeaderGuard};
use rbac::*;
use support::*;
use tokio::sync::watch;
use tokio::time::Instant;

const LEASE: &str = "midonet-kube-controllers";
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const RETRY_PERIOD: Duration = Duration::from_millis(300);

fn config(ns: &str, identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..LeaderConfig::new(LEASE, ns, identity)
    }
}

/// A namespace where the restricted user has the deploy/ Lease Role.
async fn lease_namespace(admin: &Client, prefix: &str) -> String {
    let ns = unique_namespace(admin, prefix).await;
    bind_deploy_role_to_restricted_user(admin, &ns).await;
    ns
}

async fn lease(admin: &Client, ns: &str) -> Lease {
    Api::<Lease>::namespaced(admin.clone(), ns)
        .get(LEASE)
        .await
        .unwrap()
}

fn holder(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(-1)
}

/// Samples the state of every elector every 5 ms and records the largest number of
/// simultaneous leaders seen; "never two leaders" means it stays at most 1.
struct OverlapMonitor {
    max: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl OverlapMonitor {
    fn start(states: Vec<watch::Receiver<bool>>) -> Self {
        let max = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (max, stop) = (max.clone(), stop.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let leaders = states.iter().filter(|s| *s.borrow()).count();
                    max.fetch_max(leaders, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        OverlapMonitor { max, stop, task }
    }

    async fn max_leaders(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        self.max.load(Ordering::SeqCst)
    }
}

/// Acquires in a background task; the guard arrives on the returned channel.
fn acquire_in_background(
    elector: Arc<LeaderElector>,
) -> tokio::sync::oneshot::Receiver<(LeaderGuard, Instant)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let guard = elector.acquire().await.expect("acquire");
        let _ = tx.send((guard, Instant::now()));
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_exactly_one_leader() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-one").await;
    let user = restricted_client().await;
    let a = Arc::new(LeaderElector::new(user.clone(), config(&ns, "a")));
    let b = Arc::new(LeaderElector::new(user.clone(), config(&ns, "b")));
    let monitor = OverlapMonitor::start(vec![a.subscribe(), b.subscribe()]);

    // Both race for a Lease that does not exist yet.
    let mut rx_a = acquire_in_background(a.clone());
    let mut rx_b = acquire_in_background(b.clone());
    let (guard, winner, mut loser_rx) = tokio::select! {
        r = &mut rx_a => (r.unwrap().0, "a", rx_b),
        r = &mut rx_b => (r.unwrap().0, "b", rx_a),
    };
    assert!(guard.is_leader());
    let created = lease(&admin, &ns).await;
    assert_eq!(holder(&created), winner);
    assert_eq!(transitions(&created), 0);
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(2));
    assert!(spec.acquire_time.is_some());

    // Through several lease durations, the winner renews and the other keeps waiting.
    tokio::time::sleep(LEASE_DURATION * 3).await;
    assert!(
        loser_rx.try_recv().is_err(),
        "the standby became leader while the leader was renewing"
    );
    assert!(guard.is_leader());
    let later = lease(&admin, &ns).await;
    assert_eq!(holder(&later), winner);
    assert_eq!(transitions(&later), 0);
    let later_spec = later.spec.unwrap();
    assert!(later_spec.renew_time.unwrap().0 > spec.renew_time.unwrap().0);
    assert_eq!(later_spec.acquire_time, spec.acquire_time);
    let (leader_state, standby_state) = if winner == "a" {
        (a.subscribe(), b.subscribe())
    } else {
        (b.subscribe(), a.subscribe())
    };
    assert!(*leader_state.borrow());
    assert!(!*standby_state.borrow());
    assert_eq!(monitor.max_leaders().await, 1);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_leader_is_taken_over_after_the_lease_duration() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-drop").await;
    let user = restricted_client().await;
    let a = Arc::new(LeaderElector::new(user.clone(), config(&ns, "a")));
    let b = Arc::new(LeaderElector::new(user.clone(), config(&ns, "b")));
    let guard_a = a.acquire().await.unwrap();
    let first = lease(&admin, &ns).await;
    let monitor = OverlapMonitor::start(vec![a.subscribe(), b.subscribe()]);
    let rx_b = acquire_in_background(b.clone());
    // Let b observe a renewing.
    tokio::time::sleep(LEASE_DURATION).await;

    // a stops without giving the Lease up (as if it hung or was killed).
    let dropped_at = Instant::now();
    drop(guard_a);
    assert!(!*a.subscribe().borrow());
    let (guard_b, acquired_at) = tokio::time::timeout(Duration::from_secs(10), rx_b)
        .await
        .expect("b took over")
        .unwrap();
    let waited = acquired_at - dropped_at;
    // a renewed at most one retry period before the drop; b waits a full lease duration
    // from when it saw that renewal.
    assert!(
        waited >= LEASE_DURATION - RETRY_PERIOD - Duration::from_millis(100),
        "b took over after {waited:?}, before the lease expired"
    );
    assert!(waited < LEASE_DURATION * 3, "b took over after {waited:?}");
    assert!(guard_b.is_leader());

    let taken = lease(&admin, &ns).await;
    assert_eq!(holder(&taken), "b");
    assert_eq!(transitions(&taken), transitions(&first) + 1);
    assert!(
        taken
            .spec
            .as_ref()
            .unwrap()
            .acquire_time
            .as_ref()
            .unwrap()
            .0
            > first
                .spec
                .as_ref()
                .unwrap()
                .acquire_time
                .as_ref()
                .unwrap()
                .0
    );
    assert_eq!(monitor.max_leaders().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_over_at_once() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-release").await;
    let user = restricted_client().await;
    // A long lease: a takeover well within it can only come from the release.
    let long = |id: &str| LeaderConfig {
        lease_duration: Duration::from_secs(30),
        renew_deadline: Duration::from_secs(20),
        retry_period: RETRY_PERIOD,
        ..LeaderConfig::new(LEASE, ns.as_str(), id)
    };
    let a = Arc::new(LeaderElector::new(user.clone(), long("a")));
    let b = Arc::new(LeaderElector::new(user.clone(), long("b")));
    let guard_a = a.acquire().await.unwrap();
    let monitor = OverlapMonitor::start(vec![a.subscribe(), b.subscribe()]);
    let rx_b = acquire_in_background(b.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;

    let released_at = Instant::now();
    guard_a.release().await;
    assert!(!*a.subscribe().borrow());
    let (guard_b, acquired_at) = tokio::time::timeout(Duration::from_secs(5), rx_b)
        .await
        .expect("b took over after the release")
        .unwrap();
    assert!(
        acquired_at - released_at < Duration::from_secs(2),
        "takeover took {:?}",
        acquired_at - released_at
    );
    assert!(guard_b.is_leader());
    let taken = lease(&admin, &ns).await;
    assert_eq!(holder(&taken), "b");
    assert_eq!(transitions(&taken), 1);
    assert_eq!(taken.spec.unwrap().lease_duration_seconds, Some(30));
    assert_eq!(monitor.max_leaders().await, 1);

    // Releasing hands the Lease to nobody in particular: with no standby, it stays empty
    // and the same instance can take it again at once.
    guard_b.release().await;
    assert_eq!(holder(&lease(&admin, &ns).await), "");
    let again = tokio::time::timeout(Duration::from_secs(2), b.acquire())
        .await
        .expect("re-acquire a released lease at once")
        .unwrap();
    assert!(again.is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_takeover_is_reported_as_lost() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-forced").await;
    let user = restricted_client().await;
    let a = LeaderElector::new(user, config(&ns, "a"));
    let guard = a.acquire().await.unwrap();
    let state = a.subscribe();
    assert!(*state.borrow());

    // Someone else writes itself into the Lease.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    wait_until(
        "the intruder's write lands",
        Duration::from_secs(10),
        || async {
            // Retried on 409: a renewal may land between the read and the write.
            let mut current = leases.get(LEASE).await.unwrap();
            current.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
            leases
                .replace(LEASE, &PostParams::default(), &current)
                .await
                .ok()
        },
    )
    .await;
    let edited_at = Instant::now();

    tokio::time::timeout(RETRY_PERIOD * 4, guard.lost())
        .await
        .expect("lost() resolves after the next renewal attempt");
    assert!(
        edited_at.elapsed() < RENEW_DEADLINE,
        "noticed by reading the Lease, not by timeout"
    );
    assert!(!guard.is_leader());
    assert!(!*state.borrow());
    // lost() stays resolved.
    tokio::time::timeout(Duration::from_millis(10), guard.lost())
        .await
        .unwrap();
    // The former leader does not fight back.
    tokio::time::sleep(RETRY_PERIOD * 3).await;
    assert_eq!(holder(&lease(&admin, &ns).await), "intruder");
    // Releasing a lost term leaves the other holder alone.
    guard.release().await;
    assert_eq!(holder(&lease(&admin, &ns).await), "intruder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_that_cannot_renew_steps_down_before_anyone_takes_over() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-deadline").await;
    // a (restricted user) leads; b (admin) keeps working throughout.
    let a = Arc::new(LeaderElector::new(
        restricted_client().await,
        config(&ns, "a"),
    ));
    let b = Arc::new(LeaderElector::new(admin.clone(), config(&ns, "b")));
    let guard_a = a.acquire().await.unwrap();
    let monitor = OverlapMonitor::start(vec![a.subscribe(), b.subscribe()]);
    let rx_b = acquire_in_background(b.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(guard_a.is_leader());

    // a loses access to the Lease: its renewals now fail with 403.
    let revoked_at = Instant::now();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .delete(RESTRICTED_LEASE_ROLE_BINDING, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the revocation is enforced",
        Duration::from_secs(10),
        || async {
            (!restricted_can("update", "coordination.k8s.io", "leases", None, Some(&ns)).await)
                .then_some(())
        },
    )
    .await;

    tokio::time::timeout(Duration::from_secs(5), guard_a.lost())
        .await
        .expect("a gives up after its renew deadline");
    let lost_after = revoked_at.elapsed();
    assert!(
        lost_after >= RENEW_DEADLINE - RETRY_PERIOD - Duration::from_millis(100),
        "a gave up after {lost_after:?}, before its renew deadline"
    );
    let (guard_b, _) = tokio::time::timeout(Duration::from_secs(10), rx_b)
        .await
        .expect("b takes over")
        .unwrap();
    assert!(guard_b.is_leader());
    assert!(!guard_a.is_leader());
    assert_eq!(holder(&lease(&admin, &ns).await), "b");
    // The overlap monitor saw a step down before b's step up.
    assert_eq!(monitor.max_leaders().await, 1);
    // b is not disturbed by a's failed term.
    drop(guard_a);
    tokio::time::sleep(LEASE_DURATION).await;
    assert!(guard_b.is_leader());
}

#[tokio::test]
async fn acquire_without_lease_rights_is_an_error() {
    let admin = admin_client().await;
    // A namespace where the restricted user has no Role.
    let ns = unique_namespace(&admin, "leader-denied").await;
    let elector = LeaderElector::new(restricted_client().await, config(&ns, "a"));
    match tokio::time::timeout(Duration::from_secs(10), elector.acquire()).await {
        Ok(Err(LeaderError::Denied { namespace, .. })) => assert_eq!(namespace, ns),
        Ok(Err(other)) => panic!("expected Denied, got {other}"),
        Ok(Ok(_)) => panic!("acquired without rights"),
        Err(_) => panic!("acquire kept retrying a 403"),
    }
    assert!(Api::<Lease>::namespaced(admin, &ns)
        .get_opt(LEASE)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn unsafe_timings_are_rejected() {
    let admin = admin_client().await;
    let mut cfg = config("default", "a");
    cfg.renew_deadline = cfg.lease_duration;
    let elector = LeaderElector::new(admin, cfg);
    assert!(matches!(
        elector.acquire().await,
        Err(LeaderError::InvalidConfig(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lease_ends_the_term() {
    let admin = admin_client().await;
    let ns = lease_namespace(&admin, "leader-deleted").await;
    let a = LeaderElector::new(restricted_client().await, config(&ns, "a"));
    let guard = a.acquire().await.unwrap();
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .delete(LEASE, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(RETRY_PERIOD * 4, guard.lost())
        .await
        .expect("a deleted Lease ends the term");
    drop(guard);
    // A new term starts normally by re-creating it.
    let again = a.acquire().await.unwrap();
    assert!(again.is_leader());
    assert_eq!(holder(&lease(&admin, &ns).await), "a");
}
