//! A Translation version bump through outages: MidoNet unreachable while the new version
//! builds, then the kube-apiserver restarted once the bump cuts over or retires. Neither
//! may lose or duplicate anything: the bump must go on once each is back, and end exactly
//! at the new version (`exact_state`: nothing of the old version leaked, nothing twice),
//! with `check` passing and the process alive throughout. A test binary of its own: the
//! apiserver restart would disturb any other test sharing the control plane.

mod support;

use support::check::assert_check_passes;
use support::rollout::{wait_only_version, wait_phase, AtVersion1, CONVERGE};
use support::stack::wait_exact;

use std::time::Duration;

/// How long MidoNet stays unreachable.
const BACKEND_OUTAGE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bump_goes_on_after_backend_and_apiserver_outages() {
    let at = AtVersion1::start("outage").await;
    let AtVersion1 {
        client,
        admin,
        api_url,
        log,
        ..
    } = &at;
    let mut child = at.spawn("2");
    let building = wait_phase(child.metrics, &["building"], CONVERGE).await;
    assert!(
        building.is_some(),
        "no building phase; log: {}",
        log.display()
    );
    let mut faults = admin.faults().await.unwrap();
    faults.down = true;
    admin.set_faults(faults.clone()).await.unwrap();
    eprintln!("bump: MidoNet down while building");
    tokio::time::sleep(BACKEND_OUTAGE).await;
    faults.down = false;
    admin.set_faults(faults).await.unwrap();

    let later = wait_phase(child.metrics, &["cutting_over", "retiring"], CONVERGE).await;
    let Some(phase) = later else {
        panic!(
            "the bump never got past building after the outage; log: {}",
            log.display()
        );
    };
    eprintln!("bump: kube-apiserver restarted while {phase}");
    support::restart_apiserver().await;

    wait_only_version(client, "2").await;
    wait_exact(client, admin, "version 2 after the outages", CONVERGE).await;
    assert_check_passes(api_url, "version 2 after the outages").await;
    assert!(child.is_running(), "log: {}", log.display());
    drop(child);
    at.sim.shutdown().await;
}
