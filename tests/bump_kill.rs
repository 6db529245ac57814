//! A Translation version bump whose controllers are SIGKILLed once in each phase
//! (building, cutting over, retiring) and restarted at once: it must go on from where it
//! was and end exactly at the new version (`exact_state`: nothing of the old version
//! leaked, nothing twice), with `check` passing. The phase is read off the controllers'
//! `rollout_phase` metric; slow backend requests stretch each phase over many reads.

mod support;

use support::check::assert_check_passes;
use support::child::ChildControllers;
use support::rollout::{spawn_at, wait_only_version, wait_phase, CONVERGE, SCALE};
use support::scenario::{Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bump_survives_sigkills_in_every_phase() {
    let client = admin_client().await;
    let scenario = Scenario::new("kill", SCALE);
    // Slow requests stretch every phase over several of the probe's polls.
    let (sim, admin) = start_sim_for(&scenario, 40).await;
    scenario.create(&client).await;
    let api_url = sim.api_url().to_string();
    let log = ChildControllers::log_path("bump-kill");
    let _ = std::fs::remove_file(&log);
    let spawn = |v: &str| spawn_at(&api_url, &log, v);
    let v1 = spawn("1");
    wait_exact(&client, &admin, "version 1", CONVERGE).await;
    assert_check_passes(&api_url, "version 1").await;
    v1.sigkill();

    let mut child = spawn("2");
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
        child = spawn("2");
    }
    wait_only_version(&client, "2").await;
    wait_exact(&client, &admin, "version 2 after the kills", CONVERGE).await;
    assert_check_passes(&api_url, "version 2 after the kills").await;
    assert!(child.is_running(), "log: {}", log.display());
    drop(child);
    sim.shutdown().await;
}
