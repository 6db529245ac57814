//! The LB IPAM (`--controllers lbipam --lb-pool …`) on the real apiserver, run as the
//! restricted user with exactly the ClusterRole of `deploy/` (so `services/status` patch is
//! proven enough). One test, in phases: the IPAM is cluster-wide, so two of them in one
//! control plane would fight over the same Services.
//!
//! Expectations are the documented semantics (docs/operations.md, "LoadBalancer
//! addresses"), not the IPAM's output: the lowest usable pool address in pool order, the
//! requested `spec.loadBalancerIP` when free and in a pool, no address twice, a Warning
//! event when none can be given, release on delete and type change, and an allocation
//! that survives a restart because it is read back from the Services' status.

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use midonet_kube_controllers::lbipam::decide::shown;
use serde_json::json;
use support::rbac::bind_deploy_role_to_restricted_user;
use support::stack::{start_sim, Controllers};
use support::*;

/// 192.0.2.1, 192.0.2.2 (a /30 without network and broadcast), then 198.51.100.10.
const POOLS: &str = "192.0.2.0/30,198.51.100.10/32";

async fn start_ipam(sim: &midonet_sim::SimHandle) -> Controllers {
    Controllers::start(
        &control_plane().restricted_kubeconfig,
        sim,
        &["--controllers", "lbipam", "--lb-pool", POOLS],
    )
    .await
}

fn service(name: &str, type_: &str, extra: serde_json::Value) -> Service {
    let mut spec = json!({"type": type_, "ports": [{"port": 80, "protocol": "TCP"}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("service")
}

async fn create(api: &Api<Service>, name: &str, type_: &str, extra: serde_json::Value) {
    api.create(&PostParams::default(), &service(name, type_, extra))
        .await
        .expect("create service");
}

/// The ingress addresses of every Service of `ns`, by name.
async fn addresses(api: &Api<Service>) -> BTreeMap<String, Vec<String>> {
    let list = api
        .list(&ListParams::default())
        .await
        .expect("list services");
    list.items
        .iter()
        .map(|s| {
            let ips = shown(s).iter().map(|ip| ip.to_string()).collect();
            (s.metadata.name.clone().unwrap_or_default(), ips)
        })
        .collect()
}

/// Waits until `name` shows exactly `want`, checking on every poll that no address is
/// shown by two Services.
async fn wait_ingress(api: &Api<Service>, name: &str, want: &[&str]) {
    wait_until(&format!("{name} shows {want:?}"), CEILING, || async {
        let all = addresses(api).await;
        assert_unique(&all);
        let got = all.get(name).cloned().unwrap_or_default();
        (got == want)
            .then_some(())
            .ok_or(format!("{name} shows {got:?}"))
    })
    .await
}

fn assert_unique(all: &BTreeMap<String, Vec<String>>) {
    let mut seen = BTreeMap::new();
    for (svc, ips) in all {
        for ip in ips {
            if let Some(other) = seen.insert(ip.clone(), svc.clone()) {
                panic!("{ip} given to both {other} and {svc}: {all:?}");
            }
        }
    }
}

async fn no_address(api: &Api<Service>, name: &str) {
    let all = addresses(api).await;
    assert_eq!(
        all.get(name),
        Some(&vec![]),
        "{name} has no address: {all:?}"
    );
}

#[tokio::test]
async fn load_balancer_addresses_are_assigned_released_and_survive_a_restart() {
    let admin = admin_client().await;
    let ns = unique_namespace(&admin, "lbipam").await;
    bind_deploy_role_to_restricted_user(&admin, &ns).await;
    let api: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let (sim, _admin) = start_sim(&[]).await;
    let ipam = start_ipam(&sim).await;

    assign_and_refuse(&admin, &api, &ns).await;
    release_and_wake(&admin, &api, &ns).await;

    // Restart: a Service created while no IPAM runs must not get an address held by
    // another; every assignment stays where it was.
    ipam.stop().await;
    let before = addresses(&api).await;
    create(&api, "late", "LoadBalancer", json!({})).await;
    let ipam = start_ipam(&sim).await;
    wait_event(&admin, &ns, Some("late"), "LoadBalancerPoolExhausted").await;
    no_address(&api, "late").await;
    let mut after = addresses(&api).await;
    after.remove("late");
    assert_eq!(
        after, before,
        "the allocation is read back from the Services"
    );
    ipam.stop().await;
    sim.shutdown().await;
}

/// Assignment in pool order, the requested address, a Service that is no LoadBalancer, a
/// requested address held by another and an exhausted pool.
async fn assign_and_refuse(admin: &Client, api: &Api<Service>, ns: &str) {
    create(api, "a", "LoadBalancer", json!({})).await;
    wait_ingress(api, "a", &["192.0.2.1"]).await;
    wait_event(admin, ns, Some("a"), "LoadBalancerIPAssigned").await;
    let requested = json!({"loadBalancerIP": "198.51.100.10"});
    create(api, "b", "LoadBalancer", requested.clone()).await;
    wait_ingress(api, "b", &["198.51.100.10"]).await;
    create(api, "c", "LoadBalancer", requested).await;
    wait_event(admin, ns, Some("c"), "LoadBalancerIPUnavailable").await;
    no_address(api, "c").await;
    let outside = json!({"loadBalancerIP": "203.0.113.1"});
    create(api, "outside", "LoadBalancer", outside).await;
    wait_event(admin, ns, Some("outside"), "LoadBalancerIPUnavailable").await;
    no_address(api, "outside").await;
    create(api, "plain", "ClusterIP", json!({})).await;
    create(api, "d", "LoadBalancer", json!({})).await;
    wait_ingress(api, "d", &["192.0.2.2"]).await;
    create(api, "e", "LoadBalancer", json!({})).await;
    wait_event(admin, ns, Some("e"), "LoadBalancerPoolExhausted").await;
    no_address(api, "e").await;
    no_address(api, "plain").await;
}

/// Release on type change and on delete; the Services waiting get the freed addresses.
async fn release_and_wake(admin: &Client, api: &Api<Service>, ns: &str) {
    // LoadBalancer → ClusterIP (the node port goes with the new port list).
    let to_cluster_ip = json!({"spec": {"type": "ClusterIP",
        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}});
    api.patch("a", &PatchParams::default(), &Patch::Merge(&to_cluster_ip))
        .await
        .expect("type change");
    wait_ingress(api, "a", &[]).await;
    wait_event(admin, ns, Some("a"), "LoadBalancerIPReleased").await;
    wait_ingress(api, "e", &["192.0.2.1"]).await;

    create(api, "f", "LoadBalancer", json!({})).await;
    wait_event(admin, ns, Some("f"), "LoadBalancerPoolExhausted").await;
    api.delete("d", &DeleteParams::default())
        .await
        .expect("delete d");
    wait_ingress(api, "f", &["192.0.2.2"]).await;
    // The requested address comes free: its requester gets it.
    api.delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
    wait_ingress(api, "c", &["198.51.100.10"]).await;
}
