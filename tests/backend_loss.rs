//! A MidoNet API that loses its whole state (restarted empty, its hosts kept or not) while
//! the cluster changes: on the real control plane, with every translator and the pusher,
//! the backend is wiped
//! 1. while the Nodes get their pod CIDR (as kube-controller-manager gives it right after
//!    a kubelet registers: the node's Translation grows a router port and a link to its
//!    own bridge port, which the backend no longer has), hosts kept;
//! 2. while Services, Endpoints and NetworkPolicies change, hosts lost too (the agents
//!    register them again once the pusher is rebuilding);
//! 3. while a Translation version bump cuts over.
//!
//! Each ends with the exact state (`exact_state`: the Translations the translators make of
//! the objects, every one Ready, the backend holding exactly what they ask for, nothing
//! twice), and `check` passing. Nobody tells the controllers about the loss: what they
//! notice is the pushes the backend refuses and the periodic verification
//! (`--verify-period` 10 s here), which covers every Translation whatever its state. So
//! the time to expect is about one period, a round of GETs over what is recorded (a few
//! hundred at `--verify-rate` 200/s) and the pushes again: seconds. The bound each phase
//! waits up to is [`CEILING`] (a hang guard, not a timing assertion), after which it fails
//! with what is still missing; the time each took is printed (`backend loss: …`).
//!
//! One test: its controllers act on the whole cluster of this binary.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use midonet_sim::admin::{AdminClient, Faults, HostSeed};
use support::check::assert_check_passes;
use support::rollout::{metric, wait_only_version, wait_phase, SCALE};
use support::scenario::{create_all, Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact, Controllers};
use support::*;

/// Every translator and the pusher, verifying every 10 s.
fn args(version: &'static str) -> [&'static str; 8] {
    [
        "--controllers",
        "node,pod,service,endpoints,networkpolicy,pusher",
        "--translation-version",
        version,
        "--verify-period",
        "10s",
        "--verify-rate",
        "200",
    ]
}

/// Waits for the exact state and `check`; answers how long since `since`.
async fn converged(
    client: &Client,
    admin: &AdminClient,
    api_url: &str,
    what: &str,
    since: Instant,
) -> Duration {
    wait_exact(client, admin, what, CEILING).await;
    let took = since.elapsed();
    eprintln!("backend loss: {what}: exact after {took:.1?}");
    assert_check_passes(api_url, what).await;
    took
}

/// The Nodes as a kubelet registers them: no pod CIDR yet.
fn nodes_without_cidr(scenario: &Scenario) -> Vec<Node> {
    (0..scenario.scale.nodes)
        .map(|i| {
            let mut node = scenario.node(i);
            if let Some(spec) = node.spec.as_mut() {
                spec.pod_cidr = None;
            }
            node
        })
        .collect()
}

/// Gives every Node the pod CIDR the scenario plans for it, as kube-controller-manager's
/// node IPAM does (the apiserver lets it be set once, from empty).
async fn give_pod_cidrs(client: &Client, scenario: &Scenario) {
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..scenario.scale.nodes)
        .for_each_concurrent(8, |i| {
            let nodes = nodes.clone();
            async move {
                let node = scenario.node(i);
                let name = node.metadata.name.clone().unwrap_or_default();
                let cidr = node.spec.and_then(|s| s.pod_cidr).unwrap_or_default();
                let patch = serde_json::json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
                nodes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap_or_else(|e| panic!("give {name} its pod CIDR: {e}"));
            }
        })
        .await;
}

/// The label of the pods the policies isolate: those behind no Service (a pod reaching
/// itself through a Service it backs, hairpinned, is not admitted by a policy isolating
/// it: what `check` expects there is another question than a backend's loss).
const ISOLATED: (&str, &str) = ("backend-loss/isolated", "true");

/// Labels the pods behind no Service with [`ISOLATED`].
async fn label_isolated_pods(client: &Client, scenario: &Scenario) {
    let backing = scenario.scale.services * scenario.scale.endpoints_per_service;
    for i in backing..scenario.scale.pods {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(i));
        let patch = serde_json::json!({"metadata": {"labels": {ISOLATED.0: ISOLATED.1}}});
        pods.patch(
            &Scenario::pod_name(i),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("label a pod");
    }
}

/// A policy isolating the [`ISOLATED`] pods of namespace `i` for ingress but on 8080/TCP
/// from `from`, with selector groups of its own.
fn policy(scenario: &Scenario, i: usize, from: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("np-{i}"), "namespace": scenario.namespace(i)},
        "spec": {
            "podSelector": {"matchLabels": {ISOLATED.0: ISOLATED.1}},
            "ingress": [{"from": from, "ports": [{"port": 8080, "protocol": "TCP"}]}]
        }
    }))
    .expect("NetworkPolicy")
}

/// Policy 0: namespace 0's isolated pods admit 8080 from every namespace.
fn first_policy(scenario: &Scenario) -> NetworkPolicy {
    policy(scenario, 0, serde_json::json!([{"namespaceSelector": {}}]))
}

/// Policy 1: namespace 1's isolated pods admit 8080 from their own namespace's pods and
/// namespace 0.
fn second_policy(scenario: &Scenario) -> NetworkPolicy {
    policy(
        scenario,
        1,
        serde_json::json!([
            {"podSelector": {}},
            {"namespaceSelector": {"matchLabels": {"bench/namespace": scenario.namespace(0)}}}
        ]),
    )
}

/// Creates `np` in its namespace.
async fn apply_policy(client: &Client, np: &NetworkPolicy) {
    let ns = np.metadata.namespace.clone().unwrap_or_default();
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), np)
        .await
        .expect("create NetworkPolicy");
}

/// Services, Endpoints and NetworkPolicies change: Service 0 goes, Service `n` (a new
/// one, in the first namespace, on Service 2's pods) comes, Service 1's endpoints move to other pods, policy 0
/// is replaced by policy 1.
async fn change_services_and_policies(client: &Client, scenario: &Scenario) {
    let n = scenario.scale.services;
    let ns0 = scenario.namespace(0);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns0);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), &ns0);
    let dp = DeleteParams::default();
    services
        .delete(&Scenario::service_name(0), &dp)
        .await
        .expect("delete Service 0");
    // Gone with its Service already, or not yet.
    match endpoints.delete(&Scenario::service_name(0), &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("delete Endpoints 0: {e}"),
    }
    scenario.create_services(client, n..n + 1).await;
    // Backed by Service 2's pods (the scenario's would be isolated ones).
    let mut fresh = scenario.endpoints(n);
    fresh.subsets = scenario.endpoints(2).subsets;
    create_all(vec![fresh], |_| endpoints.clone()).await;
    let mut moved = scenario.endpoints(1);
    moved.subsets = scenario.endpoints(3).subsets;
    Api::<Endpoints>::namespaced(client.clone(), &scenario.namespace(1))
        .replace(&Scenario::service_name(1), &PostParams::default(), &{
            let mut current = Api::<Endpoints>::namespaced(client.clone(), &scenario.namespace(1))
                .get(&Scenario::service_name(1))
                .await
                .expect("get Endpoints 1");
            current.subsets = moved.subsets;
            current
        })
        .await
        .expect("move Service 1's endpoints");
    apply_policy(client, &second_policy(scenario)).await;
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns0)
        .delete("np-0", &dp)
        .await
        .expect("delete NetworkPolicy 0");
}

/// The pusher's drift repairs so far (resources re-created), off its metrics.
async fn drift_repaired(port: u16) -> f64 {
    support::objects::metric(
        port,
        "midonet_kube_controllers_drift_repaired_resources_total",
        "",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_lost_everything_converges_exactly() {
    let client = admin_client().await;
    let scenario = Scenario::new("loss", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 1).await;
    let api_url = sim.api_url().to_string();
    let kubeconfig = control_plane().kubeconfig.clone();
    scenario.create_namespaces(&client).await;
    let nodes: Api<Node> = Api::all(client.clone());
    create_all(nodes_without_cidr(&scenario), |_| nodes.clone()).await;
    scenario.create_pods(&client, 0..scenario.scale.pods).await;
    scenario
        .create_services(&client, 0..scenario.scale.services)
        .await;
    scenario
        .create_endpoints(&client, 0..scenario.scale.services)
        .await;
    label_isolated_pods(&client, &scenario).await;
    apply_policy(&client, &first_policy(&scenario)).await;
    let v1 = Controllers::start(&kubeconfig, &sim, &args("1")).await;
    wait_exact(&client, &admin, "nodes without a pod CIDR", CEILING).await;

    // 1. Wiped (hosts kept) while the Nodes get their pod CIDR.
    admin.wipe().await.unwrap();
    let lost = Instant::now();
    give_pod_cidrs(&client, &scenario).await;
    let t1 = converged(
        &client,
        &admin,
        &api_url,
        "wiped while the nodes got their pod CIDR",
        lost,
    )
    .await;

    // 2. Wiped, hosts too, while Services and NetworkPolicies change; the agents register
    //    their hosts again once the pusher is rebuilding.
    let repaired = drift_repaired(v1.metrics_port).await;
    admin.wipe_all().await.unwrap();
    let lost = Instant::now();
    change_services_and_policies(&client, &scenario).await;
    wait_until("the pusher rebuilds without the hosts", CEILING, || async {
        let now = drift_repaired(v1.metrics_port).await;
        if now > repaired {
            Ok(())
        } else {
            Err(format!("drift repairs still {now}"))
        }
    })
    .await;
    let hosts: Vec<HostSeed> = scenario
        .hosts
        .iter()
        .map(|(name, id)| HostSeed::new(name.clone(), *id))
        .collect();
    admin.add_hosts(&hosts).await.unwrap();
    let t2 = converged(
        &client,
        &admin,
        &api_url,
        "wiped with the hosts while Services and NetworkPolicies changed",
        lost,
    )
    .await;
    v1.stop().await;

    // 3. Wiped while a bump to version 2 cuts over (slow requests stretch the phases).
    admin
        .set_faults(Faults {
            latency_ms: 40,
            ..Faults::default()
        })
        .await
        .unwrap();
    let v2 = Controllers::start(&kubeconfig, &sim, &args("2")).await;
    let phase = wait_phase(v2.metrics_port, &["cutting_over"], CEILING).await;
    assert_eq!(phase.as_deref(), Some("cutting_over"), "the bump cut over");
    admin.wipe().await.unwrap();
    let lost = Instant::now();
    admin.clear_faults().await.unwrap();
    wait_only_version(&client, "2").await;
    let t3 = converged(
        &client,
        &admin,
        &api_url,
        "wiped while a bump cut over",
        lost,
    )
    .await;
    let bindings = metric(
        v2.metrics_port,
        "midonet_kube_controllers_rollout_bindings_cut_over_total ",
    )
    .await;
    eprintln!(
        "backend loss: converged after {t1:.1?} (pod CIDRs), {t2:.1?} (Services and policies, hosts lost), {t3:.1?} (bump cutover; {bindings:?} bindings cut over)"
    );
    v2.stop().await;
    sim.shutdown().await;
}
