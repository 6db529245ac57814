//! Upgrading a live deployment of the original Go controller in place, on a real apiserver
//! with the simulator, without an outage.
//!
//! The starting point is what the original leaves behind (`tests/support/original.rs`):
//! its version-4 Translations in its form (no `spec`, no status) under its CRD, upgraded in
//! place to this project's CRD, with the backend resources it pushed, for a cluster of
//! pods on three nodes and Services across two namespaces. `plan` must say what the
//! migration does (every object's Translations replaced, the original's deleted, every
//! interface rebound, a cutover deleting each old node bridge) and the simulator must then
//! count exactly its requests. The new controllers run under the flow probe (every pod to
//! every Service and pod to pod across nodes, sampled on the simulator's data plane): the
//! original's Translations are an old version, so the migration is a blue/green bump, and
//! no flow may be interrupted longer than the cutover the controllers report, nor a second.
//! It ends with every old Translation deleted, nothing of the original's versioned
//! resources left, the backend exactly what the new Translations ask for (nothing twice),
//! and `check` passing. `tests/migration_kill.rs` kills the controllers in every phase.
//!
//! This test replaces the Translation CRD: it runs alone in its binary, and it must not be
//! pointed at a shared control plane (`MIDONETKUBE_TEST_K8S_DIR`) while other tests run.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Parser;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use midonet_kube_controllers::crd::{Translation, ORIGINAL_VERSION};
use midonet_kube_controllers::plancmd::{cli::compute, Reason};
use midonet_translators::meta::VERSION_LABEL;
use support::check::assert_check_passes;
use support::original::deployed_for;
use support::probe::EVERY_FLOW;
use support::rollout::{assert_within_cutover, watch_cutover, CONTROLLERS, SCALE};
use support::scenario::{Scenario, ScenarioApi};
use support::stack::{exact_state, start_sim_for, wait_exact, Controllers};
use support::*;

/// How often the probe samples every flow.
const SAMPLE: Duration = Duration::from_millis(20);

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: midonet_kube_controllers::config::RunArgs,
}

/// `Ok` once none of `old` (namespace, name) is left.
async fn old_ones_gone(
    client: &kube::Client,
    old: &BTreeSet<(String, String)>,
) -> Result<(), String> {
    let all: Api<Translation> = Api::all(client.clone());
    let now = all
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list: {e}"))?
        .items;
    let left: Vec<String> = now
        .iter()
        .filter(|t| old.contains(&(t.namespace().unwrap_or_default(), t.name_any())))
        .map(|t| t.name_any())
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("{} old Translations left: {left:?}", left.len()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_a_live_deployment_of_the_original_controller() {
    let client = admin_client().await;
    let scenario = Scenario::new("mig", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 1).await;
    let api_url = sim.api_url().to_string();
    scenario.create(&client).await;
    let old = deployed_for(&client, &sim, &admin).await;
    let original_paths = admin.state().await.unwrap().translation_paths();

    // What `plan` says the migration does, with the settings the controllers get.
    let kubeconfig = control_plane().kubeconfig.display().to_string();
    let cfg = Cli::try_parse_from([
        "plan",
        "--kubeconfig",
        &kubeconfig,
        "--midonet-api",
        &api_url,
        "--controllers",
        CONTROLLERS,
    ])
    .unwrap()
    .run
    .validate()
    .unwrap();
    admin.reset_requests().await.unwrap();
    let plan = compute(&cfg, 100.0).await.unwrap();
    eprintln!("{}", plan.render_text());
    assert_eq!(
        admin.requests().await.unwrap().total,
        0,
        "plan is read-only"
    );
    assert_eq!(
        plan.existing_versions.keys().collect::<Vec<_>>(),
        [ORIGINAL_VERSION],
        "the original's Translations are one old version"
    );
    let deletes = &plan.translations.delete;
    let deleted: usize = deletes.values().flat_map(|m| m.values()).sum();
    assert_eq!(deleted, old.len(), "every old Translation deleted");
    assert!(
        deletes
            .values()
            .all(|m| m.keys().all(|r| *r == Reason::VersionBump)),
        "{deletes:?}"
    );
    for kind in ["pod", "node", "service", "midonet-global"] {
        let reasons: Vec<Reason> = plan.translations.create[kind].keys().copied().collect();
        assert_eq!(reasons, [Reason::VersionBump], "{kind}");
    }
    assert_eq!(plan.rebinds.by_kind.get("pod"), Some(&SCALE.pods));
    assert_eq!(plan.rebinds.by_kind.get("node"), Some(&SCALE.nodes));
    // Every interface is freed by deleting its old node bridge, one per node; the rest of
    // the cutover's DELETEs are the new router's mirrors of the link to the original's
    // router, each node's deleted before its batch.
    let link = plan
        .link
        .clone()
        .expect("the original's cluster router linked to the new one");
    assert!(link.mirrors_deleted >= SCALE.nodes, "{link:?}");
    assert_eq!(
        plan.backend.deletes_cutover,
        SCALE.nodes + link.mirrors_deleted
    );

    // The migration, under the probe.
    let probe = support::probe::start(&sim, EVERY_FLOW, SAMPLE).await;
    admin.reset_requests().await.unwrap();
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--controllers", CONTROLLERS],
    )
    .await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(watch_cutover(controllers.metrics_port, stop_rx));
    wait_until("the original's Translations retired", CEILING, || {
        old_ones_gone(&client, &old)
    })
    .await;
    wait_exact(&client, &admin, "after the migration", CEILING).await;
    let _ = stop_tx.send(true);
    let cutover = watcher.await.unwrap();
    let report = probe.stop().await;
    let (first, last) = cutover.expect("the controllers reported a cutover phase");
    let window = last - first;
    eprintln!("migration: cutover seen for {window:?}");
    assert_within_cutover(&report, window, SAMPLE);
    controllers.stop().await;

    // What the simulator counted is what `plan` said.
    let counted = admin.requests().await.unwrap();
    eprintln!("simulator: {counted:?}");
    assert_eq!(
        (
            counted.of_method("POST"),
            counted.of_method("PUT"),
            counted.of_method("DELETE")
        ),
        (
            plan.backend.creates as u64,
            plan.backend.updates as u64,
            plan.backend.deletes as u64
        ),
        "plan (POST, PUT, DELETE) vs the migration"
    );

    // Nothing of the original's versioned resources is left: only version-independent
    // ones (content-addressed) may be the original's.
    let now: Vec<Translation> = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(now.iter().all(|t| !t.is_legacy()));
    let version_independent: BTreeSet<String> = now
        .iter()
        .filter(|t| !t.has_label(VERSION_LABEL))
        .flat_map(Translation::desired_paths)
        .collect();
    let state = admin.state().await.unwrap();
    for p in state.translation_paths().intersection(&original_paths) {
        assert!(
            version_independent.contains(p),
            "an old versioned resource is left in the backend: {p}"
        );
    }
    exact_state(&client, &admin).await.unwrap();
    assert_check_passes(&api_url, "after the migration").await;
    sim.shutdown().await;
}
