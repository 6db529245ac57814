//! Translations of deleted objects are deleted by the translators at once, not left to the
//! kube-controller-manager's garbage collection (rate limited: a burst of deletions took
//! it up to a minute at scale S). Its own test binary: kube-controller-manager is stopped,
//! so whatever deletes the Translations here can only be the controllers.

mod support;

use support::objects::metric;
use support::scenario::{self, ScenarioApi};
use support::stack::{start_sim_with, wait_exact, Controllers};
use support::*;

#[tokio::test]
async fn translations_of_deleted_objects_go_without_garbage_collection() {
    let client = admin_client().await;
    stop_controller_manager().await;
    let scenario = scenario::small("prompt");
    let (sim, admin) = start_sim_with(midonet_sim::SimConfig {
        hosts: scenario.hosts.clone(),
        ..Default::default()
    })
    .await;
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--controllers", "node,pod,service,endpoints,pusher"],
    )
    .await;
    scenario.create(&client).await;
    wait_exact(&client, &admin, "created", CEILING).await;

    // Owners of the Translations about to go.
    let gone_uids = scenario::owner_uids(&scenario, &client, 0..10, 0..1).await;

    let deleted_before = metric(
        controllers.metrics_port,
        "midonet_kube_controllers_translator_translation_writes_total",
        "operation=\"delete_orphan\"",
    )
    .await;
    scenario.delete_pods(&client, 0..10).await;
    scenario.delete_endpoints(&client, 0..1).await;
    scenario.delete_services(&client, 0..1).await;

    // No garbage collector runs: the Translations go only if the translators delete them,
    // and the backend is cleaned exactly.
    scenario::wait_owned_translations_gone(
        &client,
        &gone_uids,
        "the deleted objects' Translations are gone",
    )
    .await;
    wait_exact(&client, &admin, "after deletions", CEILING).await;
    let deleted = metric(
        controllers.metrics_port,
        "midonet_kube_controllers_translator_translation_writes_total",
        "operation=\"delete_orphan\"",
    )
    .await
        - deleted_before;
    // 10 pods and one service (the Endpoints' Translations may go either with their own
    // deletion or as stale once the Service is gone).
    assert!(deleted >= 11.0, "prompt deletions counted: {deleted}");

    controllers.stop().await;
    sim.shutdown().await;
}
