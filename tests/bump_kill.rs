//! A Translation version bump whose controllers are SIGKILLed once in each phase
//! (building, cutting over, retiring) and restarted at once: it must go on from where it
//! was and end exactly at the new version (`exact_state`: nothing of the old version
//! leaked, nothing twice), with `check` passing. The phase is read off the controllers'
//! `rollout_phase` metric; slow backend requests stretch each phase over many reads.

mod support;

use support::check::assert_check_passes;
use support::rollout::{wait_only_version, wait_phase, AtVersion1, CONVERGE};
use support::stack::wait_exact;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bump_survives_sigkills_in_every_phase() {
    let at = AtVersion1::start("kill").await;
    let AtVersion1 {
        client,
        admin,
        api_url,
        log,
        ..
    } = &at;
    let mut child = at.spawn("2");
    let mut killed = Vec::new();
    for phase in ["building", "cutting_over", "retiring"] {
        if wait_phase(child.metrics, &[phase], CONVERGE)
            .await
            .is_none()
        {
            panic!(
                "phase {phase} never seen; killed in {killed:?}; log: {}",
                log.display()
            );
        }
        child.sigkill();
        killed.push(phase);
        eprintln!("bump: SIGKILL while {phase}");
        child = at.spawn("2");
    }
    wait_only_version(client, "2").await;
    wait_exact(client, admin, "version 2 after the kills", CONVERGE).await;
    assert_check_passes(api_url, "version 2 after the kills").await;
    assert!(child.is_running(), "log: {}", log.display());
    drop(child);
    at.sim.shutdown().await;
}
