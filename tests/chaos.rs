//! Faults: a backend answering random 500s with added latency, malformed Kubernetes objects
//! and hand-written malformed Translations applied during the run, and a backend outage
//! during a burst of deletions. Each ends with an exact comparison of the simulator's state
//! against what the Translations ask for, and with `check` passing on it.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use midonet_dataplane::FlowKind;
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::Faults;
use serde_json::json;
use support::check::assert_check_passes;
use support::objects::{pod, set_pod_ip};
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

async fn warning_reasons(client: &kube::Client) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.reason)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn converges_through_faults_and_bad_input() {
    let client = admin_client().await;
    let host = Uuid::new_v4();
    let (sim, admin) = stack::start_sim(&[("chaos-node", host)]).await;
    let controllers = Controllers::start(&control_plane().kubeconfig, &sim, &[]).await;

    // 10 % of requests fail with 500, every request takes 50 ms more.
    admin
        .set_faults(Faults {
            latency_ms: 50,
            error_rate: [("*".to_string(), 0.1)].into_iter().collect(),
            error_status: 500,
            ..Faults::default()
        })
        .await
        .unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "chaos-node"},
        "spec": {"podCIDR": "10.250.1.0/24"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.50.1"}]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // A malformed object the apiserver lets in: a Service with an SCTP port (below).
    let ns = unique_namespace(&client, "chaos").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..10 {
        let name = format!("p{i}");
        // No MAC annotation: one Translation per pod, as the outage below counts them.
        pods.create(&PostParams::default(), &pod(&name, "chaos-node", None))
            .await
            .unwrap();
        set_pod_ip(&pods, &name, &format!("10.250.1.{}", 10 + i)).await;
    }
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "sctp"},
        "spec": {"type": "ClusterIP", "ports": [{"name": "s", "port": 9999, "protocol": "SCTP"}, {"name": "t", "port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    // A hand-written malformed Translation.
    let trs: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let bad_tr: Translation = serde_json::from_value(json!({
        "apiVersion": "midonet.org/v1", "kind": "Translation",
        "metadata": {"name": "hand-written"},
        "spec": {"resources": [{"kind": "Bridge", "parent": "", "body": "{\"name\": 1}"}]}
    }))
    .unwrap();
    trs.create(&PostParams::default(), &bad_tr).await.unwrap();

    // Everything valid converges despite the faults; the bad parts are reported.
    let start = std::time::Instant::now();
    loop {
        let reasons = warning_reasons(&client).await;
        if reasons.iter().any(|r| r == "TranslationUpdateError")
            && reasons.iter().any(|r| r == "UnsupportedProtocol")
        {
            break;
        }
        assert!(
            start.elapsed() < CEILING,
            "bad input not reported; warnings seen: {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    trs.delete("hand-written", &DeleteParams::default())
        .await
        .unwrap();
    // Converges while the faults are still on.
    wait_converged(&client, &admin, "despite random 500s").await;
    let faults_seen = admin.requests().await.unwrap().faults_injected;
    assert!(faults_seen > 0, "the fault injection was exercised");
    admin.clear_faults().await.unwrap();
    wait_converged(&client, &admin, "after random 500s").await;
    let api = sim.api_url().to_string();
    assert_check_passes(&api, "after random 500s").await;

    // Bounded retry rate: with nothing left to do, the backend is left alone.
    admin.reset_requests().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = admin.requests().await.unwrap();
    assert!(
        idle.total - idle.login <= 2,
        "no retry loop when converged: {idle:?}"
    );

    // Backend down during a burst of deletions: finalizers hold, then everything is cleaned.
    admin
        .set_faults(Faults {
            down: true,
            ..Faults::default()
        })
        .await
        .unwrap();
    for i in 0..10 {
        pods.delete(&format!("p{i}"), &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    wait_until("pod Translations held Terminating", CEILING, || async {
        let list = trs.list(&ListParams::default()).await.ok()?;
        let terminating = list
            .items
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_some())
            .count();
        (terminating == 10).then_some(())
    })
    .await;
    wait_until("deletion warnings", CEILING, || async {
        warning_reasons(&client)
            .await
            .iter()
            .any(|r| r == "TranslationDeletionError")
            .then_some(())
    })
    .await;
    admin.clear_faults().await.unwrap();
    wait_until("all pod Translations gone", CEILING, || async {
        let list = trs.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|t| !t.metadata.name.as_deref().unwrap_or("").starts_with("pod."))
            .then_some(())
    })
    .await;
    wait_converged(&client, &admin, "after the outage").await;
    // A pod created after the outage is wired as if nothing had happened.
    pods.create(&PostParams::default(), &pod("p10", "chaos-node", None))
        .await
        .unwrap();
    set_pod_ip(&pods, "p10", "10.250.1.20").await;
    wait_converged(&client, &admin, "a pod after the outage").await;
    let report = assert_check_passes(&api, "a pod after the outage").await;
    assert!(
        report
            .by_kind
            .get(&FlowKind::NodeToPod)
            .is_some_and(|t| t.checked > 0)
            && report
                .by_kind
                .get(&FlowKind::NoEndpoints)
                .is_some_and(|t| t.checked > 0),
        "{:?}",
        report.by_kind
    );

    controllers.stop().await;
    sim.shutdown().await;
}
