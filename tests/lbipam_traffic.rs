//! The LB IPAM with every other controller, on the real apiserver and the simulator: the
//! address it gives a LoadBalancer Service is translated like any ingress address, and a
//! pod reaches the Service's endpoints there, the reply coming from that address (checked
//! with the data-plane model on what the simulator holds). Its own test binary: the IPAM
//! and the check cover every object in the cluster.

mod support;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, PostParams};
use midonet_dataplane::SocketV4;
use midonet_kube_controllers::netcheck::cli::trace_live_via;
use midonet_kube_controllers::netcheck::Via;
use support::check::assert_check_passes;
use support::objects::{endpoints, node_at, pod, service, set_pod_ip, wait_host_ids};
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

#[tokio::test]
async fn a_pod_reaches_a_load_balancer_service_at_the_address_the_ipam_gave_it() {
    let client = admin_client().await;
    let (host_a, host_b) = (Uuid::new_v4(), Uuid::new_v4());
    let (sim, admin) = stack::start_sim(&[("lb-node-a", host_a), ("lb-node-b", host_b)]).await;
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--lb-pool", "192.0.2.0/30"],
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    for n in [
        node_at("lb-node-a", "10.244.1.0/24", "192.168.0.11"),
        node_at("lb-node-b", "10.244.2.0/24", "192.168.0.12"),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    wait_host_ids(&nodes, &[("lb-node-a", host_a), ("lb-node-b", host_b)]).await;
    let ns = unique_namespace(&client, "lbipam-traffic").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node, ip) in [
        ("server", "lb-node-a", "10.244.1.10"),
        ("client", "lb-node-b", "10.244.2.10"),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, None))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut web = service("web");
    if let Some(spec) = web.spec.as_mut() {
        spec.type_ = Some("LoadBalancer".into());
    }
    services.create(&PostParams::default(), &web).await.unwrap();
    Api::<Endpoints>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &endpoints("web", &["10.244.1.10"]))
        .await
        .unwrap();

    // The first usable address of the pool, in the status; then the backend follows.
    wait_until("web gets 192.0.2.1", CEILING, || async {
        let svc = services.get("web").await.ok()?;
        let ips = midonet_kube_controllers::lbipam::decide::shown(&svc);
        (ips == ["192.0.2.1".parse::<std::net::Ipv4Addr>().ok()?]).then_some(())
    })
    .await;
    wait_converged(&client, &admin, "the LoadBalancer Service translated").await;

    // Every promised flow, the pods' to the ingress address included.
    let api = sim.api_url().to_string();
    assert_check_passes(&api, "a cluster with an IPAM-addressed LoadBalancer").await;
    let live = support::check::live(&api).await;
    let from = format!("pod/{ns}/client");
    let to = format!("svc/{ns}/web:http");
    let (t, dest) = trace_live_via(&live, &from, &to, Via::LoadBalancer, None, 40000).unwrap();
    let ingress = SocketV4::new("192.0.2.1".parse().unwrap(), 80);
    assert_eq!(dest.address, ingress);
    let server = SocketV4::new("10.244.1.10".parse().unwrap(), 8080);
    assert_eq!(t.candidates(), vec![(format!("pod/{ns}/server"), server)]);
    assert!(
        t.all_work(),
        "{}",
        serde_json::to_string_pretty(&t).unwrap()
    );
    for p in &t.paths {
        assert_eq!(
            p.client_sees,
            Some(ingress),
            "the reply comes from the address used"
        );
    }
    controllers.stop().await;
    sim.shutdown().await;
}
