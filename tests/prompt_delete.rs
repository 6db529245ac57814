//! Translations of deleted objects are deleted by the translators at once, not left to the
//! kube-controller-manager's garbage collection (rate limited: a burst of deletions took
//! it up to a minute at scale S). Its own test binary: kube-controller-manager is stopped,
//! so whatever deletes the Translations here can only be the controllers.

mod support;

use std::time::Duration;

use kube::api::{Api, ListParams};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::meta::OWNER_UID_LABEL;
use support::objects::metric;
use support::scenario::{Scale, Scenario, ScenarioApi};
use support::stack::{start_sim_with, wait_exact, Controllers};
use support::*;

#[tokio::test]
async fn translations_of_deleted_objects_go_without_garbage_collection() {
    let client = admin_client().await;
    stop_controller_manager().await;
    let scenario = Scenario::new(
        "prompt",
        Scale {
            nodes: 2,
            pods: 20,
            services: 4,
            endpoints_per_service: 2,
            namespaces: 1,
        },
    );
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
    wait_exact(&client, &admin, "created", Duration::from_secs(120)).await;

    // Owners of the Translations about to go.
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), &scenario.namespace(0));
    let mut gone_uids = Vec::new();
    for i in 0..10 {
        let pod = pods.get(&Scenario::pod_name(i)).await.unwrap();
        gone_uids.extend(pod.metadata.uid);
    }
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &scenario.namespace(0));
    gone_uids.extend(
        services
            .get(&Scenario::service_name(0))
            .await
            .unwrap()
            .metadata
            .uid,
    );

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
    let trs: Api<Translation> = Api::all(client.clone());
    wait_until(
        "the deleted objects' Translations are gone",
        Duration::from_secs(60),
        || async {
            let left = trs.list(&ListParams::default()).await.ok()?;
            (!left.items.iter().any(|t| {
                t.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OWNER_UID_LABEL))
                    .is_some_and(|uid| gone_uids.contains(uid))
            }))
            .then_some(())
        },
    )
    .await;
    wait_exact(&client, &admin, "after deletions", Duration::from_secs(60)).await;
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
