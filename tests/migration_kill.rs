//! A migration from the original Go controller (see `tests/migration.rs`) whose
//! controllers are SIGKILLed once in each phase of the bump it is (building, cutting over,
//! retiring) and restarted at once: it must go on from where it was and end exactly at the
//! new version (`exact_state`: every old Translation deleted, nothing leaked, nothing
//! twice), with `check` passing. The phase is read off the controllers' `rollout_phase`
//! metric; slow backend requests stretch each phase over many reads.
//!
//! This test replaces the Translation CRD: it runs alone in its binary.

mod support;

use support::check::assert_check_passes;
use support::child::ChildControllers;
use support::original::deployed_for;
use support::rollout::{spawn_at, wait_phase, SCALE};
use support::scenario::{Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_survives_sigkills_in_every_phase() {
    let client = admin_client().await;
    let scenario = Scenario::new("migkill", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 1).await;
    let api_url = sim.api_url().to_string();
    scenario.create(&client).await;
    let old = deployed_for(&client, &sim, &admin).await;
    let mut faults = admin.faults().await.unwrap();
    faults.latency_ms = 40;
    admin.set_faults(faults).await.unwrap();

    let log = ChildControllers::log_path("migration-kill");
    let _ = std::fs::remove_file(&log);
    let version = midonet_translators::TRANSLATION_VERSION;
    let mut child = spawn_at(&api_url, &log, version);
    let mut killed = Vec::new();
    for phase in ["building", "cutting_over", "retiring"] {
        if wait_phase(child.metrics, &[phase], CEILING).await.is_none() {
            panic!(
                "phase {phase} never seen; killed in {killed:?}; log: {}",
                log.display()
            );
        }
        child.sigkill();
        killed.push(phase);
        eprintln!("migration: SIGKILL while {phase}");
        child = spawn_at(&api_url, &log, version);
    }
    admin.clear_faults().await.unwrap();
    wait_until("the original's Translations retired", CEILING, || async {
        let all: kube::Api<midonet_kube_controllers::crd::Translation> =
            kube::Api::all(client.clone());
        let left = all
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|t| {
                use kube::ResourceExt;
                old.contains(&(t.namespace().unwrap_or_default(), t.name_any()))
            })
            .count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} old Translations left"))
        }
    })
    .await;
    wait_exact(&client, &admin, "migrated after the kills", CEILING).await;
    assert_check_passes(&api_url, "migrated after the kills").await;
    assert!(child.is_running(), "log: {}", log.display());
    drop(child);
    sim.shutdown().await;
}
