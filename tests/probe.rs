//! The flow probe (`midonet_testkit::probe`) on the real parts: it must report a flow interrupted
//! for as long as its pod's port is unbound behind the controllers' back, every other flow
//! uninterrupted, and nothing at all while nothing changes. How fast it samples at scale S is
//! the benchmark's to measure (`docs/benchmark.md`, the version bump under the flow probe),
//! and the cost of one sample is `testkit/examples/check_at_scale.rs`'s.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_translators::Resource;

/// Two nodes, two pods on each; Service `web` on p2 (node a) and p4 (node b), Service `api`
/// on p4. The probe's sources are the first pod by name on each node, p1 and p3; each calls
/// both Services and the first pod of the other node. Nothing changes for two seconds:
/// nothing is interrupted. Then p3's port is unbound for two seconds behind the
/// controllers' back and bound again: every flow from or to p3, and only those, is
/// interrupted once, for about two seconds.
#[tokio::test]
async fn the_probe_sees_exactly_the_flows_an_unbound_port_interrupts_and_for_how_long() {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use kube::api::{Api, PostParams};
    use support::objects::{endpoints, node_at, pod, service, set_pod_ip, wait_host_ids};
    use support::stack::{start_sim, wait_converged, Controllers};
    use support::*;

    let client = admin_client().await;
    let (host_a, host_b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let (sim, admin) = start_sim(&[("pr-node-a", host_a), ("pr-node-b", host_b)]).await;
    // Drift repair must not bind the port again before the test does.
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--verify-period", "1h"],
    )
    .await;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for n in [
        node_at("pr-node-a", "10.244.1.0/24", "192.168.0.11"),
        node_at("pr-node-b", "10.244.2.0/24", "192.168.0.12"),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    wait_host_ids(&nodes, &[("pr-node-a", host_a), ("pr-node-b", host_b)]).await;
    let ns = unique_namespace(&client, "probe").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node, ip, mac) in [
        ("p1", "pr-node-a", "10.244.1.10", Some("0a:00:00:00:01:0a")),
        ("p2", "pr-node-a", "10.244.1.11", None),
        ("p3", "pr-node-b", "10.244.2.10", Some("0a:00:00:00:02:0a")),
        ("p4", "pr-node-b", "10.244.2.11", None),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, mac))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    for (name, ips) in [
        ("web", &["10.244.1.11", "10.244.2.11"][..]),
        ("api", &["10.244.2.11"][..]),
    ] {
        services
            .create(&PostParams::default(), &service(name))
            .await
            .unwrap();
        eps.create(&PostParams::default(), &endpoints(name, ips))
            .await
            .unwrap();
    }
    wait_converged(&client, &admin, "probe cluster").await;
    let ip_of = |name: &str| {
        let services = services.clone();
        let name = name.to_string();
        async move {
            services
                .get(&name)
                .await
                .unwrap()
                .spec
                .and_then(|s| s.cluster_ip)
                .unwrap()
        }
    };
    let (web, api) = (ip_of("web").await, ip_of("api").await);

    // Written by hand from the objects above. The apiserver's own Service has no
    // endpoint a workload owns: not sampled.
    let from = |p: &str| format!("pod/{ns}/{p}");
    let to_svc = |s: &str, ip: &str| format!("svc/{ns}/{s}:80 (http) {ip}:80 tcp");
    let (p1_web, p1_api, p1_p3) = (
        format!("{} -> {}", from("p1"), to_svc("web", &web)),
        format!("{} -> {}", from("p1"), to_svc("api", &api)),
        format!("{} -> {} 10.244.2.10:8080 tcp", from("p1"), from("p3")),
    );
    let (p3_web, p3_api, p3_p1) = (
        format!("{} -> {}", from("p3"), to_svc("web", &web)),
        format!("{} -> {}", from("p3"), to_svc("api", &api)),
        format!("{} -> {} 10.244.1.10:8080 tcp", from("p3"), from("p1")),
    );
    let mut want = vec![
        p1_web.clone(),
        p1_api.clone(),
        p1_p3.clone(),
        p3_web.clone(),
        p3_api.clone(),
        p3_p1.clone(),
    ];
    want.sort();

    // Nothing changes: nothing is interrupted.
    let period = Duration::from_millis(50);
    let probe = support::probe::start(&sim, support::probe::EVERY_FLOW, period).await;
    let mut got = probe.names();
    got.sort();
    assert_eq!(got, want);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet = probe.stop().await;
    assert_eq!(quiet.flows, 6);
    assert!(quiet.samples >= 10, "{}", quiet.summary());
    assert_eq!(quiet.interrupted, 0, "{:?}", quiet.interrupted_flows);
    assert_eq!(quiet.max_seconds, 0.0);

    // p3's port unbound for two seconds.
    let iface = midonet_translators::naming::pod_interface_name(&format!("{ns}/p3"));
    let binding = sim
        .reader()
        .resources()
        .unwrap()
        .into_iter()
        .find(|r| {
            matches!(r, Resource::HostInterfacePort(b) if b.interface_name.as_deref() == Some(iface.as_str()))
        })
        .expect("p3's port is bound");
    let backend = BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            ..BackendConfig::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap();
    let hold = Duration::from_secs(2);
    let probe = support::probe::start(&sim, support::probe::EVERY_FLOW, period).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    backend.delete(&binding).await.unwrap();
    tokio::time::sleep(hold).await;
    backend.apply(&binding).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let broken = probe.stop().await;
    assert_eq!(broken.flows, 6);
    let mut interrupted: Vec<&str> = broken
        .interrupted_flows
        .iter()
        .map(|f| f.flow.as_str())
        .collect();
    interrupted.sort();
    let mut want_interrupted = vec![
        p1_p3.as_str(),
        p3_web.as_str(),
        p3_api.as_str(),
        p3_p1.as_str(),
    ];
    want_interrupted.sort();
    assert_eq!(interrupted, want_interrupted, "{}", broken.summary());
    for f in &broken.interrupted_flows {
        assert_eq!(f.outages, 1, "{f:?}");
        // The outage as sampled is within a sample period (and the scheduling of this
        // test) of the time the port was unbound.
        let off = (f.longest_seconds - hold.as_secs_f64()).abs();
        assert!(
            off < 0.3,
            "{f:?}: {off:.2} s off the {hold:?} the port was unbound"
        );
    }
    assert!((broken.max_seconds - hold.as_secs_f64()).abs() < 0.3);
    let source_gone = broken.flow(&p3_web).unwrap();
    assert!(source_gone.reason.contains("not bound"), "{source_gone:?}");
    // p1's calls to the Services reach p2 and p4, which stayed bound.
    assert!(broken.flow(&p1_web).is_none() && broken.flow(&p1_api).is_none());
    support::probe::assert_interrupted_at_most(&broken, hold + Duration::from_millis(300));

    controllers.stop().await;
}
