//! Traffic from outside the cluster through the edge (`--edge-config`), on the real parts:
//! the control plane, the simulator and the controllers converge on a cluster with an edge
//! of two uplinks; a truth table written from the Kubernetes Service specification (type
//! NodePort / LoadBalancer / externalIPs × `externalTrafficPolicy` × endpoints local,
//! remote or none, at a node's address and at a Service address, plus NetworkPolicy
//! `ipBlock` from an outside client) is traced from an
//! outside client on the data-plane model fed by the simulator; `check` with the edge
//! passes with its outside flows; and once the edge's jump to the Services is deleted
//! behind the controllers' back, `check` and the table notice exactly the flows it served.
//! `sessionAffinity: ClientIP` (served from outside at external and ingress IPs, TCP):
//! one client's successive connections keep their endpoint, follow a removed endpoint's
//! replacement, a None Service on a sticky address and UDP ports stay per connection, and
//! a VIP or a sticky accept deleted behind the controllers' back fails exactly its row.
//! Its own test binary: the check covers every object in the cluster.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use midonet_dataplane::{trace_sequence, FlowKind, Probe, Protocol, Session, SocketV4};
use midonet_kube_controllers::netcheck::cli::{trace_live, Live};
use midonet_translators::model::{Kind, Resource, RuleType};
use serde_json::json;
use support::check::{assert_check_passes_with, check_with, describe};
use support::objects::{endpoints, node_at, pod, set_pod_ip, wait_host_ids};
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

/// The outside client every row connects from, and one a NetworkPolicy refuses.
const CLIENT: &str = "198.18.0.10";
const REFUSED_CLIENT: &str = "198.18.7.7";

/// The edge settings: two uplinks on one gateway host (ECMP between them).
fn edge_file(dir: &std::path::Path, gateway: Uuid) -> String {
    let path = dir.join("edge.yaml");
    let yaml = format!(
        "uplinks:\n\
         - name: a\n  host: {gateway}\n  interface: uplink-a\n  address: 192.0.2.2/24\n  nextHops: [192.0.2.1]\n  tunnelIp: 10.0.0.100\n\
         - name: b\n  host: {gateway}\n  interface: uplink-b\n  address: 192.0.3.2/24\n  nextHops: [192.0.3.1]\n  tunnelIp: 10.0.0.100\n\
         clusterCidrs: [10.244.0.0/16]\n\
         serviceCidrs: [10.96.0.0/12]\n\
         externalCidrs: [203.0.113.0/24]\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

/// A Service of `type` with `externalTrafficPolicy` (NodePort and LoadBalancer only) and
/// external IPs, port `http` 80 → 8080.
fn svc(name: &str, type_: &str, policy: Option<&str>, external_ips: &[&str]) -> Service {
    let mut spec = json!({"type": type_, "externalIPs": external_ips,
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
    if let Some(p) = policy {
        spec["externalTrafficPolicy"] = json!(p);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name}, "spec": spec}))
    .unwrap()
}

/// One row of the truth table: an outside client's connection and what Kubernetes says
/// receives it (pod names; empty: nothing), the reply coming from the address used and,
/// the edge never SNATing what comes in, the pod seeing the client's own address.
struct Row {
    what: &'static str,
    to: SocketV4,
    from_ip: &'static str,
    receivers: &'static [&'static str],
}

fn row(
    what: &'static str,
    to: SocketV4,
    from_ip: &'static str,
    receivers: &'static [&'static str],
) -> Row {
    Row {
        what,
        to,
        from_ip,
        receivers,
    }
}

/// Node address `ip` at the node port of Service `name` (`np`: the node ports).
fn at_node_port(np: &BTreeMap<&str, u16>, ip: &str, name: &str) -> SocketV4 {
    SocketV4::new(ip.parse().unwrap(), np[name])
}

/// Traces `row` (TCP) from an outside client through `uplink`; answers the problem, if any.
fn judge(live: &Live, ns: &str, row: &Row, uplink: &str) -> Option<String> {
    judge_protocol(live, ns, row, uplink, Protocol::Tcp)
}

/// Traces `row` over `protocol` from an outside client through `uplink`; answers the
/// problem, if any.
fn judge_protocol(
    live: &Live,
    ns: &str,
    row: &Row,
    uplink: &str,
    protocol: Protocol,
) -> Option<String> {
    let from = format!("external/{}/{uplink}", row.from_ip);
    let (t, _) = match trace_live(live, &from, &row.to.to_string(), Some(protocol), 40000) {
        Ok(t) => t,
        Err(e) => return Some(format!("{}: cannot trace: {e}", row.what)),
    };
    let got: BTreeSet<String> = t.candidates().into_iter().map(|(n, _)| n).collect();
    let want: BTreeSet<String> = row
        .receivers
        .iter()
        .map(|p| format!("pod/{ns}/{p}"))
        .collect();
    if got != want {
        let why: Vec<&str> = t
            .paths
            .iter()
            .filter_map(|p| p.forward.drop_reason.as_deref())
            .collect();
        return Some(format!(
            "{} via {uplink}: reached {got:?}, Kubernetes says {want:?} (dropped: {why:?})",
            row.what
        ));
    }
    if want.is_empty() {
        return None;
    }
    let client: Ipv4Addr = row.from_ip.parse().unwrap();
    for p in &t.paths {
        if p.client_sees != Some(row.to) || !p.works {
            let why = p.reply.as_ref().and_then(|r| r.drop_reason.clone());
            return Some(format!(
                "{} via {uplink}: the client sees the reply from {:?}, not {} ({why:?})",
                row.what, p.client_sees, row.to
            ));
        }
        if let Some(rx) = p.forward.received {
            if rx.src.ip != client {
                return Some(format!(
                    "{} via {uplink}: the pod sees {}, not the client",
                    row.what, rx.src.ip
                ));
            }
        }
    }
    None
}

/// Traces `row` from node `node`'s host, as the host forwards what reached its own
/// interface (masqueraded to its address on the node's bridge: the pod sees that one);
/// answers the problem, if any.
fn judge_host(live: &Live, ns: &str, node: &str, row: &Row) -> Option<String> {
    let from = format!("node/{node}");
    let (t, _) = match trace_live(live, &from, &row.to.to_string(), None, 40000) {
        Ok(t) => t,
        Err(e) => return Some(format!("{}: cannot trace: {e}", row.what)),
    };
    let got: BTreeSet<String> = t.candidates().into_iter().map(|(n, _)| n).collect();
    let mut want: BTreeSet<String> = row
        .receivers
        .iter()
        .map(|p| format!("pod/{ns}/{p}"))
        .collect();
    // No endpoint takes it: it comes back to the host, where nothing listens at a node
    // port (no kube-proxy), so the client is refused.
    if want.is_empty() {
        want.insert(from.clone());
    }
    if got != want {
        return Some(format!(
            "{} from {from}: reached {got:?}, Kubernetes says {want:?}",
            row.what
        ));
    }
    let broken = t
        .paths
        .iter()
        .find(|p| p.client_sees != Some(row.to) || !p.works);
    broken.map(|p| {
        format!(
            "{} from {from}: the host sees the reply from {:?}, not {}",
            row.what, p.client_sees, row.to
        )
    })
}

/// The host path: each node's host to the node ports at its own address (`from_ip` names
/// the node). Node edge-a is 192.168.10.1, edge-b 192.168.10.2.
fn host_rows(np: &BTreeMap<&str, u16>) -> Vec<Row> {
    let at = |ip: &str, name: &str| at_node_port(np, ip, name);
    let row = |what, from_ip, to, receivers| row(what, to, from_ip, receivers);
    vec![
        row(
            "host path, NodePort Cluster, endpoint on the node",
            "edge-a",
            at("192.168.10.1", "np-c"),
            &["a1"],
        ),
        row(
            "host path, NodePort Cluster, endpoint on another node",
            "edge-b",
            at("192.168.10.2", "np-c"),
            &["a1"],
        ),
        row(
            "host path, NodePort, no endpoints",
            "edge-a",
            at("192.168.10.1", "np-none"),
            &[],
        ),
        row(
            "host path, LoadBalancer Cluster at a node port",
            "edge-b",
            at("192.168.10.2", "lb-c"),
            &["a1", "b1"],
        ),
        row(
            "host path, NodePort Local, endpoint on the node",
            "edge-a",
            at("192.168.10.1", "ext-l"),
            &["a1"],
        ),
        row(
            "host path, NodePort Local, endpoint on another node only",
            "edge-b",
            at("192.168.10.2", "ext-l"),
            &[],
        ),
        row(
            "host path, LoadBalancer Local, endpoint on the node",
            "edge-b",
            at("192.168.10.2", "lb-l"),
            &["b1"],
        ),
    ]
}

/// Every host row's problems.
fn host_failures(live: &Live, ns: &str, rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| judge_host(live, ns, r.from_ip, r))
        .collect()
}

/// Every row's problems, through both uplinks.
fn failures(live: &Live, ns: &str, rows: &[Row]) -> Vec<String> {
    rows.iter()
        .flat_map(|r| {
            ["a", "b"]
                .into_iter()
                .filter_map(move |u| judge(live, ns, r, u))
        })
        .collect()
}

async fn node_port(services: &Api<Service>, name: &str) -> u16 {
    let s = services.get(name).await.unwrap();
    let p = s
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.first().and_then(|p| p.node_port));
    u16::try_from(p.expect("a node port")).unwrap()
}

/// The nodes, pods, Services (with their Endpoints and ingress IPs) and the NetworkPolicy of
/// the truth table; answers the namespace.
/// The Endpoints of `name` at `ips`, each address with the node of the pod that has it, as
/// the endpoints controller writes them (`externalTrafficPolicy: Local` needs the node).
fn endpoints_on_nodes(name: &str, ips: &[&str]) -> Endpoints {
    let mut ep = endpoints(name, ips);
    for subset in ep.subsets.iter_mut().flatten() {
        for a in subset.addresses.iter_mut().flatten() {
            let node = if a.ip.starts_with("10.244.1.") {
                "edge-a"
            } else {
                "edge-b"
            };
            a.node_name = Some(node.to_string());
        }
    }
    ep
}

async fn create_cluster(client: &kube::Client, host_a: Uuid, host_b: Uuid) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    for n in [
        node_at("edge-a", "10.244.1.0/24", "192.168.10.1"),
        node_at("edge-b", "10.244.2.0/24", "192.168.10.2"),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    wait_host_ids(&nodes, &[("edge-a", host_a), ("edge-b", host_b)]).await;
    let ns = unique_namespace(client, "edge").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node, ip) in [
        ("a1", "edge-a", "10.244.1.10"),
        ("b1", "edge-b", "10.244.2.10"),
        ("g1", "edge-b", "10.244.2.11"),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, None))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    let table: [(&str, Service, &[&str]); 9] = [
        (
            "np-c",
            svc("np-c", "NodePort", Some("Cluster"), &[]),
            &["10.244.1.10"],
        ),
        ("np-none", svc("np-none", "NodePort", None, &[]), &[]),
        (
            "lb-c",
            svc("lb-c", "LoadBalancer", Some("Cluster"), &[]),
            &["10.244.1.10", "10.244.2.10"],
        ),
        (
            "lb-l",
            svc("lb-l", "LoadBalancer", Some("Local"), &[]),
            &["10.244.2.10"],
        ),
        (
            "lb-none",
            svc("lb-none", "LoadBalancer", Some("Local"), &[]),
            &[],
        ),
        (
            "ext-c",
            svc("ext-c", "ClusterIP", None, &["203.0.113.20"]),
            &["10.244.2.10"],
        ),
        (
            "ext-l",
            svc("ext-l", "NodePort", Some("Local"), &["203.0.113.21"]),
            &["10.244.1.10"],
        ),
        (
            "guarded-c",
            svc("guarded-c", "ClusterIP", None, &["203.0.113.31"]),
            &["10.244.2.11"],
        ),
        (
            "guarded",
            svc("guarded", "LoadBalancer", Some("Local"), &["203.0.113.30"]),
            &["10.244.2.11"],
        ),
    ];
    for (name, s, ips) in &table {
        services.create(&PostParams::default(), s).await.unwrap();
        eps.create(&PostParams::default(), &endpoints_on_nodes(name, ips))
            .await
            .unwrap();
    }
    // No cloud here: the load-balancer ingress IPs are written as an IPAM or a cloud would.
    for (name, ip) in [
        ("lb-c", "203.0.113.10"),
        ("lb-l", "203.0.113.11"),
        ("lb-none", "203.0.113.12"),
    ] {
        services
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
            )
            .await
            .unwrap();
    }
    // g1 takes traffic from outside only from 198.18.0.0/16 but REFUSED_CLIENT's /24.
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    pods.patch(
        "g1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "guarded"}}})),
    )
    .await
    .unwrap();
    let np: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "outside-only"},
        "spec": {"podSelector": {"matchLabels": {"app": "guarded"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"ipBlock": {"cidr": "198.18.0.0/16", "except": ["198.18.7.0/24"]}}]}]}
    }))
    .unwrap();
    policies.create(&PostParams::default(), &np).await.unwrap();
    ns
}

/// The `sessionAffinity` Services, with their Endpoints on a1 (edge-a) and b1 (edge-b):
/// - `sticky`: LoadBalancer, `ClientIP`, external IP 203.0.113.40, ingress IP 203.0.113.41,
///   TCP `http` 80 → 8080, endpoints a1 and b1;
/// - `sticky-mixed`: `ClientIP`, external IP 203.0.113.43, TCP `http` 80 → 8080 and UDP
///   `dns` 53 → 5353 (a LoadBalancer may not mix protocols on v1.20), endpoints a1 and b1;
/// - `sticky-none`: `ClientIP`, external IP 203.0.113.42, no endpoints;
/// - `plain-81`: `None`, external IP 203.0.113.40 (the sticky Service's address) on port
///   81 → 8080, endpoints a1 and b1.
async fn create_affinity_services(client: &kube::Client, ns: &str) {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let both = ["10.244.1.10", "10.244.2.10"];
    let http =
        |port: u16| json!({"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"});
    let dns = json!({"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"});
    let table = [
        (
            "sticky",
            "LoadBalancer",
            "ClientIP",
            "203.0.113.40",
            json!([http(80)]),
            &both[..],
        ),
        (
            "sticky-mixed",
            "ClusterIP",
            "ClientIP",
            "203.0.113.43",
            json!([http(80), dns]),
            &both[..],
        ),
        (
            "sticky-none",
            "ClusterIP",
            "ClientIP",
            "203.0.113.42",
            json!([http(80)]),
            &[][..],
        ),
        (
            "plain-81",
            "ClusterIP",
            "None",
            "203.0.113.40",
            json!([http(81)]),
            &both[..],
        ),
    ];
    for (name, type_, affinity, external_ip, ports, ips) in table {
        let s: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": type_, "sessionAffinity": affinity, "externalIPs": [external_ip],
                     "ports": ports}}))
        .unwrap();
        services.create(&PostParams::default(), &s).await.unwrap();
        let mut ep = endpoints_on_nodes(name, ips);
        if name == "sticky-mixed" {
            for subset in ep.subsets.iter_mut().flatten() {
                subset.ports.get_or_insert_with(Vec::new).push(
                    serde_json::from_value(json!({"name": "dns", "port": 5353, "protocol": "UDP"}))
                        .unwrap(),
                );
            }
        }
        eps.create(&PostParams::default(), &ep).await.unwrap();
    }
    services
        .patch_status(
            "sticky",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.41"}]}}}),
            ),
        )
        .await
        .unwrap();
}

/// One connection of an outside client to the `sessionAffinity` Services, TCP (written from
/// the specification): every ready endpoint may take a first connection; the cluster's
/// promise holds at each address. The rows that go through the edge's load balancer.
fn sticky_rows() -> Vec<Row> {
    let at = |ip: &str, port: u16| SocketV4::new(ip.parse().unwrap(), port);
    vec![
        row(
            "ClientIP at its external IP",
            at("203.0.113.40", 80),
            CLIENT,
            &["a1", "b1"],
        ),
        row(
            "ClientIP at its ingress IP",
            at("203.0.113.41", 80),
            CLIENT,
            &["a1", "b1"],
        ),
        row(
            "ClientIP with a UDP port too, at its TCP port",
            at("203.0.113.43", 80),
            CLIENT,
            &["a1", "b1"],
        ),
        // The pool has no member: the load balancer drops it.
        row(
            "ClientIP, no endpoints",
            at("203.0.113.42", 80),
            CLIENT,
            &[],
        ),
    ]
}

/// The outside client's successive TCP connections to `to` (source ports 40000, 40001,
/// 40002, through uplinks a, b, a), traced one after another on one flow state as the
/// agents would meet them: per history of the random choices, the pod each reached.
fn connections(live: &Live, to: SocketV4) -> Vec<Vec<Option<String>>> {
    let probes: Vec<Probe> = [("a", 40000), ("b", 40001), ("a", 40002)]
        .into_iter()
        .map(|(uplink, port)| outside_probe(uplink, to, port))
        .collect();
    let (histories, truncated) = trace_sequence(&live.topology, &probes).unwrap();
    assert!(!truncated, "{to}: too many histories");
    histories
        .iter()
        .map(|h| h.iter().map(|p| p.forward.delivered_to.clone()).collect())
        .collect()
}

/// A TCP connection of the outside client through `uplink` from source port `port`.
fn outside_probe(uplink: &str, to: SocketV4, port: u16) -> Probe {
    let mut p = Probe::new(format!("upstream/{uplink}"), to, Protocol::Tcp, port);
    p.src_ip = Some(CLIENT.parse().unwrap());
    p
}

/// `sessionAffinity: ClientIP` from outside, written from the specification: the first
/// connection may reach any of `receivers` (pod names), and every later one of the same
/// client reaches the pod its first did. Answers the problem, if any.
fn stickiness(
    live: &Live,
    ns: &str,
    what: &str,
    to: SocketV4,
    receivers: &[&str],
) -> Option<String> {
    let histories = connections(live, to);
    let want: BTreeSet<String> = receivers.iter().map(|p| format!("pod/{ns}/{p}")).collect();
    let firsts: BTreeSet<String> = histories.iter().filter_map(|h| h[0].clone()).collect();
    if firsts != want {
        return Some(format!(
            "{what}: first connections reached {firsts:?}, Kubernetes says {want:?}"
        ));
    }
    histories
        .iter()
        .find(|h| h.iter().any(|e| e != &h[0]))
        .map(|h| format!("{what}: one client's successive connections reached {h:?}"))
}

/// The sticky rows with receivers, as stickiness checks: their problems.
fn stickiness_failures(live: &Live, ns: &str) -> Vec<String> {
    sticky_rows()
        .iter()
        .filter(|r| !r.receivers.is_empty())
        .filter_map(|r| stickiness(live, ns, r.what, r.to, r.receivers))
        .collect()
}

/// The `sessionAffinity` rows on the real parts: one client's connections keep their
/// endpoint; an endpoint removed, the client goes to the remaining one; a None Service at
/// a sticky address is balanced per connection; and the oracle fails once a VIP or a
/// sticky accept is deleted behind the controllers' back (both restored after).
async fn affinity_rows(parts: &Parts<'_>) {
    let (live, ns) = (parts.live().await, parts.ns);
    let wrong = stickiness_failures(&live, ns);
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The None Service on the sticky address: some client's second connection goes to
    // another endpoint than its first.
    let plain = connections(&live, SocketV4::new("203.0.113.40".parse().unwrap(), 81));
    assert!(
        plain.iter().any(|h| h[0] != h[1]),
        "a None Service is balanced per connection: {plain:?}"
    );
    a_removed_endpoint_hands_the_client_over(parts, &live).await;
    a_deleted_vip_or_accept_fails_its_row(parts).await;
    delete_the_edge(parts.client, parts.admin).await;
    let wrong = stickiness_failures(&parts.live().await, ns);
    assert!(wrong.is_empty(), "the edge restored: {wrong:#?}");
}

/// What the `sessionAffinity` rows work on.
struct Parts<'a> {
    client: &'a kube::Client,
    admin: &'a midonet_sim::admin::AdminClient,
    api: &'a str,
    edge_args: &'a [&'a str],
    ns: &'a str,
}

impl Parts<'_> {
    async fn live(&self) -> Live {
        support::check::live_with(self.api, self.edge_args).await
    }
}

/// The endpoint the client is held to goes: its next connection reaches the other (the
/// Endpoints are put back after).
async fn a_removed_endpoint_hands_the_client_over(parts: &Parts<'_>, live: &Live) {
    let (client, admin, ns) = (parts.client, parts.admin, parts.ns);
    let sticky = SocketV4::new("203.0.113.40".parse().unwrap(), 80);
    let mut session = Session::new();
    let first = session
        .trace(&live.topology, &outside_probe("a", sticky, 40000))
        .unwrap();
    let held = first.paths[0]
        .forward
        .delivered_to
        .clone()
        .expect("delivered");
    let (stays, stays_ip) = match held.ends_with("/a1") {
        true => ("b1", "10.244.2.10"),
        false => ("a1", "10.244.1.10"),
    };
    set_endpoints(client, admin, ns, "sticky", &[stays_ip]).await;
    let removed = parts.live().await;
    let next = session
        .trace(&removed.topology, &outside_probe("b", sticky, 40001))
        .unwrap();
    let got: Vec<String> = next.candidates().into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, [format!("pod/{ns}/{stays}")], "held to {held} before");
    assert!(
        next.all_work(),
        "{}",
        serde_json::to_string_pretty(&next).unwrap()
    );
    set_endpoints(client, admin, ns, "sticky", &["10.244.1.10", "10.244.2.10"]).await;
}

/// Breaks stickiness behind the controllers' back: the VIP of 203.0.113.40:80 (nothing
/// takes the accepted traffic: dropped), and the accept of 203.0.113.41:80 (the uplink's
/// DNAT balances it per connection). Exactly those two rows and their `check` flows fail;
/// both are put back after.
async fn a_deleted_vip_or_accept_fails_its_row(parts: &Parts<'_>) {
    let (api, edge_args, ns) = (parts.api, parts.edge_args, parts.ns);
    let spec = service_resources(parts.client, ns, "sticky").await;
    let vip = spec
        .iter()
        .find(|r| matches!(r, Resource::Vip(v) if v.address.to_string() == "203.0.113.40"))
        .expect("the VIP of 203.0.113.40")
        .clone();
    let accept = spec
        .iter()
        .find(|r| {
            matches!(r, Resource::Rule(rule) if rule.rule_type == RuleType::Accept
                && rule.nw_dst_address.map(|a| a.to_string()).as_deref() == Some("203.0.113.41"))
        })
        .expect("the accept of 203.0.113.41")
        .clone();
    let cfg = support::check::config_with(api, edge_args);
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    for r in [&vip, &accept] {
        backend.delete(r).await.unwrap();
    }
    let wrong = stickiness_failures(&parts.live().await, ns);
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    assert!(
        wrong[0].starts_with("ClientIP at its external IP: first connections reached {}"),
        "{wrong:#?}"
    );
    assert!(
        wrong[1].starts_with("ClientIP at its ingress IP: one client's successive connections"),
        "{wrong:#?}"
    );
    let broken = check_with(api, edge_args).await;
    let sticky_failed: BTreeSet<&str> = broken
        .failures
        .iter()
        .filter(|f| f.kind == FlowKind::OutsideSticky)
        .map(|f| f.to.as_str())
        .collect();
    assert_eq!(sticky_failed.len(), 2, "{}", describe(&broken));
    for r in [&vip, &accept] {
        backend.apply(r).await.unwrap();
    }
    let wrong = stickiness_failures(&parts.live().await, ns);
    assert!(wrong.is_empty(), "restored: {wrong:#?}");
}

/// Deletes the edge's global Translation: the pusher deletes its load balancer before the
/// router that names it (MidoNet refuses the router first), MidoNet's cascade takes the
/// Services' pools with the load balancer and their accepts with KUBE-EDGE-STICKY; the
/// globals' controller restores the Translation and the pusher's cascade repair what hung
/// off it. Waits until everything has converged again.
async fn delete_the_edge(client: &kube::Client, admin: &midonet_sim::admin::AdminClient) {
    use midonet_kube_controllers::crd::Translation;
    let api: Api<Translation> = Api::namespaced(client.clone(), "kube-system");
    let edge = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|t| {
            t.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with(".edge"))
        })
        .expect("the edge's Translation");
    let (name, uid) = (edge.metadata.name.unwrap(), edge.metadata.uid.unwrap());
    api.delete(&name, &Default::default()).await.unwrap();
    wait_until(
        "the edge's Translation restored and pushed",
        CEILING,
        || async {
            let t = api.get_opt(&name).await.ok()??;
            (t.metadata.uid.as_deref() != Some(uid.as_str()) && t.is_ready()).then_some(())
        },
    )
    .await;
    wait_converged(client, admin, "the edge restored").await;
    let state = admin.state().await.unwrap();
    assert_eq!(
        state.paths_of(Kind::LoadBalancer).len(),
        1,
        "one load balancer"
    );
}

/// Replaces the addresses of the Endpoints `name` (port `http` 8080, on their nodes) and
/// waits until the backend's members of the Service's pool are exactly those addresses
/// and everything has converged.
async fn set_endpoints(
    client: &kube::Client,
    admin: &midonet_sim::admin::AdminClient,
    ns: &str,
    name: &str,
    ips: &[&str],
) {
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let subsets = endpoints_on_nodes(name, ips).subsets;
    eps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"subsets": subsets})),
    )
    .await
    .unwrap();
    let want: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
    let pool = pool_of(client, ns, name).await;
    wait_until("the pool members follow the Endpoints", CEILING, || async {
        let state = admin.state().await.ok()?;
        let mut members: Vec<String> = state
            .entries_of(Kind::PoolMember)
            .iter()
            .filter(|e| e.parent == pool)
            .filter_map(|e| e.body["address"].as_str().map(str::to_string))
            .collect();
        members.sort();
        (members == want).then_some(())
    })
    .await;
    wait_converged(client, admin, "the sticky Service's endpoints changed").await;
}

/// The ID of the pool of the Service `name`'s one sticky port, as its Translation has it.
async fn pool_of(client: &kube::Client, ns: &str, name: &str) -> String {
    let pools: Vec<String> = service_resources(client, ns, name)
        .await
        .iter()
        .filter_map(|r| match r {
            Resource::Pool(p) => Some(p.id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(pools.len(), 1, "one sticky port");
    pools[0].clone()
}

/// The resources of the Service `name`'s Translation.
async fn service_resources(client: &kube::Client, ns: &str, name: &str) -> Vec<Resource> {
    let trs: Api<midonet_kube_controllers::crd::Translation> = Api::namespaced(client.clone(), ns);
    let tr = trs.get(&format!("service.2.{name}")).await.unwrap();
    tr.spec
        .expect("a spec")
        .resources
        .iter()
        .map(|e| Resource::from_entry(e).unwrap())
        .collect()
}

/// The rest of the `sessionAffinity` Services' rows, balanced per connection by
/// KUBE-SERVICES as before: (row, protocol).
fn affinity_loose_rows() -> Vec<(Row, Protocol)> {
    let at = |ip: &str, port: u16| SocketV4::new(ip.parse().unwrap(), port);
    vec![
        (
            row(
                "ClientIP, its UDP port",
                at("203.0.113.43", 53),
                CLIENT,
                &["a1", "b1"],
            ),
            Protocol::Udp,
        ),
        (
            row(
                "a None Service on a sticky address, another port",
                at("203.0.113.40", 81),
                CLIENT,
                &["a1", "b1"],
            ),
            Protocol::Tcp,
        ),
    ]
}

/// Every `(row, protocol)`'s problems, through both uplinks.
fn protocol_failures(live: &Live, ns: &str, rows: &[(Row, Protocol)]) -> Vec<String> {
    rows.iter()
        .flat_map(|(r, p)| {
            ["a", "b"]
                .into_iter()
                .filter_map(move |u| judge_protocol(live, ns, r, u, *p))
        })
        .collect()
}

/// The truth table, written from the Service specification, not from the Translations;
/// `np` has each Service's node port. Node edge-a is 192.168.10.1, edge-b 192.168.10.2.
fn truth_table(np: &BTreeMap<&str, u16>) -> Vec<Row> {
    let at = |ip: &str, port: u16| SocketV4::new(ip.parse().unwrap(), port);
    let (np_c, np_none, lb_c) = (np["np-c"], np["np-none"], np["lb-c"]);
    let mut rows = vec![
        Row {
            what: "NodePort Cluster, endpoint on the node addressed",
            to: at("192.168.10.1", np_c),
            from_ip: CLIENT,
            receivers: &["a1"],
        },
        Row {
            what: "NodePort Cluster, endpoint on another node",
            to: at("192.168.10.2", np_c),
            from_ip: CLIENT,
            receivers: &["a1"],
        },
        Row {
            what: "NodePort, no endpoints",
            to: at("192.168.10.1", np_none),
            from_ip: CLIENT,
            receivers: &[],
        },
        Row {
            what: "LoadBalancer Cluster at its ingress IP",
            to: at("203.0.113.10", 80),
            from_ip: CLIENT,
            receivers: &["a1", "b1"],
        },
        Row {
            what: "LoadBalancer Cluster at a node port",
            to: at("192.168.10.2", lb_c),
            from_ip: CLIENT,
            receivers: &["a1", "b1"],
        },
        Row {
            what: "LoadBalancer Local at its ingress IP",
            to: at("203.0.113.11", 80),
            from_ip: CLIENT,
            receivers: &["b1"],
        },
        Row {
            what: "LoadBalancer Local, no endpoints",
            to: at("203.0.113.12", 80),
            from_ip: CLIENT,
            receivers: &[],
        },
        Row {
            what: "externalIPs (Cluster)",
            to: at("203.0.113.20", 80),
            from_ip: CLIENT,
            receivers: &["b1"],
        },
        Row {
            what: "externalIPs, externalTrafficPolicy Local",
            to: at("203.0.113.21", 80),
            from_ip: CLIENT,
            receivers: &["a1"],
        },
        Row {
            what: "ipBlock allows the client (Local)",
            to: at("203.0.113.30", 80),
            from_ip: CLIENT,
            receivers: &["g1"],
        },
        Row {
            what: "ipBlock allows the client (Cluster)",
            to: at("203.0.113.31", 80),
            from_ip: CLIENT,
            receivers: &["g1"],
        },
        Row {
            what: "ipBlock except refuses the client (Cluster)",
            to: at("203.0.113.31", 80),
            from_ip: REFUSED_CLIENT,
            receivers: &[],
        },
        Row {
            what: "ipBlock except refuses the client (Local)",
            to: at("203.0.113.30", 80),
            from_ip: REFUSED_CLIENT,
            receivers: &[],
        },
        Row {
            what: "an external address no Service holds",
            to: at("203.0.113.99", 80),
            from_ip: CLIENT,
            receivers: &[],
        },
    ];
    rows.extend(local_node_port_rows(np));
    rows
}

/// `externalTrafficPolicy: Local` at a node's address and a node port: only that node's
/// endpoints receive, seeing the client's address; a node without one drops it.
fn local_node_port_rows(np: &BTreeMap<&str, u16>) -> Vec<Row> {
    let at = |ip: &str, name: &str| at_node_port(np, ip, name);
    vec![
        row(
            "NodePort Local, endpoint on the node addressed",
            at("192.168.10.1", "ext-l"),
            CLIENT,
            &["a1"],
        ),
        row(
            "NodePort Local, endpoint on another node only",
            at("192.168.10.2", "ext-l"),
            CLIENT,
            &[],
        ),
        row(
            "LoadBalancer Local at a node port, endpoint on that node",
            at("192.168.10.2", "lb-l"),
            CLIENT,
            &["b1"],
        ),
        row(
            "LoadBalancer Local at a node port, endpoint on another node",
            at("192.168.10.1", "lb-l"),
            CLIENT,
            &[],
        ),
        row(
            "LoadBalancer Local at a node port, no endpoints",
            at("192.168.10.2", "lb-none"),
            CLIENT,
            &[],
        ),
        row(
            "ipBlock allows the client (Local, at a node port)",
            at("192.168.10.2", "guarded"),
            CLIENT,
            &["g1"],
        ),
        row(
            "ipBlock except refuses the client (Local, at a node port)",
            at("192.168.10.2", "guarded"),
            REFUSED_CLIENT,
            &[],
        ),
    ]
}

/// Deletes the simulator's rules that `pick` selects (given the translators' settings)
/// behind the controllers' back; answers how many.
async fn delete_rules(
    api: &str,
    admin: &midonet_sim::admin::AdminClient,
    edge_args: &[&str],
    pick: impl Fn(&midonet_translators::TranslatorConfig, &midonet_sim::admin::StateEntry) -> bool,
) -> usize {
    let state = admin.state().await.unwrap();
    let cfg = support::check::config_with(api, edge_args);
    let tcfg = midonet_translators::TranslatorConfig {
        tenant: cfg.tenant.clone(),
        version: cfg.translation_version.clone(),
        edge: cfg.edge.clone(),
    };
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    let paths: Vec<String> = state
        .entries_of(Kind::Rule)
        .into_iter()
        .filter(|e| pick(&tcfg, e))
        .map(|e| e.path.clone())
        .collect();
    for path in &paths {
        backend.delete_path(Kind::Rule, path).await.unwrap();
    }
    paths.len()
}

/// Deletes KUBE-EDGE-IN's jump to KUBE-SERVICES behind the controllers' back.
async fn break_edge(api: &str, admin: &midonet_sim::admin::AdminClient, edge_args: &[&str]) {
    let deleted = delete_rules(api, admin, edge_args, |tcfg, e| {
        let edge_in = midonet_translators::sub_id(
            midonet_translators::topology::edge_router_id(tcfg),
            "Edge In Chain",
        );
        let jump = midonet_translators::sub_id(edge_in, "Jump To Services/4");
        e.path.ends_with(&jump.to_string())
    })
    .await;
    assert_eq!(
        deleted, 1,
        "the edge's jump to the Services is in the simulator"
    );
}

/// Deletes every rule of node edge-a's `KUBE-NODEPORTS-LOCAL-edge-a` (the DNATs of its
/// `externalTrafficPolicy: Local` node ports) behind the controllers' back.
async fn break_local_node_ports(
    api: &str,
    admin: &midonet_sim::admin::AdminClient,
    edge_args: &[&str],
) {
    let deleted = delete_rules(api, admin, edge_args, |tcfg, e| {
        let chain = midonet_translators::topology::node_local_nodeports_chain_id(tcfg, "edge-a");
        e.parent == chain.to_string()
    })
    .await;
    assert!(deleted > 0, "edge-a has Local node-port rules");
}

#[tokio::test]
async fn outside_clients_reach_services_through_the_edge_as_kubernetes_says() {
    let client = admin_client().await;
    let (host_a, host_b, gateway) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (sim, admin) =
        stack::start_sim(&[("edge-a", host_a), ("edge-b", host_b), ("gateway", gateway)]).await;
    let dir = tempfile::tempdir().unwrap();
    let edge = edge_file(dir.path(), gateway);
    let edge_args = ["--edge-config", edge.as_str()];
    let mut args = vec!["--verify-period", "1h"];
    args.extend(edge_args);
    let controllers = Controllers::start(&control_plane().kubeconfig, &sim, &args).await;
    let api = sim.api_url().to_string();

    let ns = create_cluster(&client, host_a, host_b).await;
    create_affinity_services(&client, &ns).await;
    wait_converged(&client, &admin, "edge cluster").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut np = BTreeMap::new();
    for name in [
        "np-c", "np-none", "lb-c", "ext-l", "lb-l", "lb-none", "guarded",
    ] {
        np.insert(name, node_port(&services, name).await);
    }
    let rows = truth_table(&np);
    let live = support::check::live_with(&api, &edge_args).await;
    let wrong = failures(&live, &ns, &rows);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let wrong = failures(&live, &ns, &sticky_rows());
    assert!(wrong.is_empty(), "{wrong:#?}");
    let wrong = protocol_failures(&live, &ns, &affinity_loose_rows());
    assert!(wrong.is_empty(), "{wrong:#?}");
    let parts = Parts {
        client: &client,
        admin: &admin,
        api: &api,
        edge_args: &edge_args,
        ns: &ns,
    };
    affinity_rows(&parts).await;
    let live = support::check::live_with(&api, &edge_args).await;
    let host = host_rows(&np);
    let wrong = host_failures(&live, &ns, &host);
    assert!(wrong.is_empty(), "{wrong:#?}");
    // A pod reaches a node's address at a node port too, the reply from that address.
    let to = at_node_port(&np, "192.168.10.1", "np-c");
    let (t, _) = trace_live(&live, &format!("pod/{ns}/b1"), &to.to_string(), None, 40000).unwrap();
    let got: Vec<String> = t.candidates().into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, [format!("pod/{ns}/a1")]);
    assert!(
        t.paths.iter().all(|p| p.works && p.client_sees == Some(to)),
        "{}",
        serde_json::to_string_pretty(&t).unwrap()
    );

    // A pod reaches the outside (through either uplink) and hears back from the address
    // it used.
    let (t, _) = trace_live(
        &live,
        &format!("pod/{ns}/a1"),
        &format!("{CLIENT}:8080"),
        None,
        40000,
    )
    .unwrap();
    let got: Vec<String> = t.candidates().into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, ["upstream/a", "upstream/b"]);
    assert!(
        t.all_work(),
        "{}",
        serde_json::to_string_pretty(&t).unwrap()
    );

    let report = assert_check_passes_with(&api, &edge_args, "the edge cluster").await;
    for kind in [
        FlowKind::OutsideToService,
        FlowKind::PodToOutside,
        FlowKind::NodeToNodePort,
    ] {
        assert!(
            report.by_kind.get(&kind).is_some_and(|t| t.checked > 0),
            "no {kind:?} flow checked: {:?}",
            report.by_kind
        );
    }

    // Break the edge: delete KUBE-EDGE-IN's jump to KUBE-SERVICES behind the controllers'
    // back. The external and ingress IPs lose their Services; the node ports do not.
    break_edge(&api, &admin, &edge_args).await;

    let live = support::check::live_with(&api, &edge_args).await;
    let wrong = failures(&live, &ns, &rows);
    let served_at_service_addresses = rows
        .iter()
        .filter(|r| r.to.ip.octets()[..3] == [203, 0, 113] && !r.receivers.is_empty())
        .count();
    assert_eq!(wrong.len(), 2 * served_at_service_addresses, "{wrong:#?}");
    assert!(wrong.iter().all(|w| !w.contains("NodePort")), "{wrong:#?}");
    // The sticky addresses and ports never meet KUBE-SERVICES: still served. The same
    // Services' other ports, and the None Service at a sticky address, are not.
    let wrong = failures(&live, &ns, &sticky_rows());
    assert!(wrong.is_empty(), "{wrong:#?}");
    let wrong = stickiness_failures(&live, &ns);
    assert!(wrong.is_empty(), "{wrong:#?}");
    let wrong = protocol_failures(&live, &ns, &affinity_loose_rows());
    assert_eq!(wrong.len(), 2 * 2, "{wrong:#?}");
    let broken = check_with(&api, &edge_args).await;
    assert!(!broken.passed());
    for f in &broken.failures {
        assert!(
            f.kind == FlowKind::OutsideToService && f.to.contains("203.0.113."),
            "unexpected failure: {}",
            describe(&broken)
        );
    }

    // Break the Local node ports of edge-a: exactly the rows that reach an endpoint on
    // edge-a at its own address fail (through both uplinks).
    break_local_node_ports(&api, &admin, &edge_args).await;
    let live = support::check::live_with(&api, &edge_args).await;
    let wrong = failures(&live, &ns, &local_node_port_rows(&np));
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    assert!(
        wrong
            .iter()
            .all(|w| w.starts_with("NodePort Local, endpoint on the node addressed")),
        "{wrong:#?}"
    );
    // The host path goes through the same chain: only edge-a's own Local row fails.
    let wrong = host_failures(&live, &ns, &host);
    assert_eq!(wrong.len(), 1, "{wrong:#?}");
    assert!(
        wrong[0].starts_with("host path, NodePort Local, endpoint on the node"),
        "{wrong:#?}"
    );

    controllers.stop().await;
    sim.shutdown().await;
}
