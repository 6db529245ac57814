//! Clients outside the cluster, behind the edge's uplinks, and what Kubernetes promises
//! them: the expectation side of `check`'s outside flows, from the Service objects and the
//! edge settings alone (never from Translations).
//!
//! - The upstream behind each uplink is a workload (`upstream/<uplink>`): it owns the
//!   uplink's next hops, sits on the uplink's network with the uplink port's address as its
//!   gateway, and stands for the whole outside (`0.0.0.0/0` behind it). An outside client is
//!   any address there; `check` uses [`OUTSIDE_CLIENT`].
//! - A Service port is promised to outside clients at every `spec.externalIPs` entry and
//!   every `status.loadBalancer.ingress[].ip` (the addresses kube-proxy serves), and, for
//!   NodePort and LoadBalancer Services, at every node's InternalIP/ExternalIP and the
//!   port's `nodePort`, with the reply from the address the client used.
//! - `externalTrafficPolicy: Local` keeps the client's source address. At a node's address
//!   only that node's endpoints receive (its `nodeName`, as kube-proxy reads it; none:
//!   nothing does). At an external or ingress IP the edge is the load
//!   balancer, and the nodes it may use are those with local endpoints: every ready
//!   endpoint is on one of them, so every ready endpoint may receive.
//!   `Cluster`: every ready endpoint may receive, whatever the source it sees.
//! - `sessionAffinity: ClientIP` holds one outside client to one endpoint across its
//!   connections at an external or ingress IP and a TCP port ([`OutsidePort::sticky`]):
//!   the scope the design serves (`translators/MAPPING.md`, "`sessionAffinity:
//!   ClientIP`"); everywhere else Kubernetes' affinity is listed as not served.
//! - A pod reaches an outside address, and the reply comes back from it.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use midonet_translators::config::Edge;
use midonet_translators::ids::mac_for_key;
use midonet_translators::model::Ipv4Cidr;
use midonet_translators::service_spec::{client_ip_affinity, external_traffic_local, node_port};

use crate::cluster::{node_addresses, Cluster, ServiceAddressKind, ServicePortRef};
use crate::packet::{Protocol, SocketV4};
use crate::topology::Attachment;

/// The outside client `check` connects from: in the benchmarking range (RFC 2544), which
/// no cluster network should use.
pub const OUTSIDE_CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);

/// The workload name of the upstream behind uplink `uplink`: `upstream/<uplink>`.
pub fn upstream_name(uplink: &str) -> String {
    format!("upstream/{uplink}")
}

/// The upstream behind every uplink of `edge`.
pub fn upstream_attachments(edge: &Edge) -> Vec<Attachment> {
    edge.uplinks
        .iter()
        .map(|u| Attachment {
            name: upstream_name(&u.name),
            host: u.host,
            interface: u.interface.clone(),
            mac: mac_for_key(&format!("upstream/{}", u.name)),
            ips: u.next_hops.clone(),
            subnet: Some(u.subnet),
            gateway: Some(u.address),
            networks: vec![Ipv4Cidr {
                addr: Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
            }],
        })
        .collect()
}

/// A Service port as an outside client uses it.
#[derive(Clone, Debug)]
pub struct OutsidePort {
    pub port: ServicePortRef,
    /// `externalTrafficPolicy: Local`: the endpoint must see the client's own address.
    pub keep_source: bool,
    /// `sessionAffinity: ClientIP` at an external or ingress IP and a TCP port: one
    /// client's successive connections must land on one endpoint.
    pub sticky: bool,
}

/// Every Service port Kubernetes promises to outside clients, at each address, with the
/// endpoints that may receive (see the module docs).
pub fn outside_service_ports(cluster: &Cluster) -> Vec<OutsidePort> {
    let mut out = Vec::new();
    for sp in cluster.service_ports() {
        let Some(svc) = service_of(cluster, &sp) else {
            continue;
        };
        let local = external_traffic_local(svc);
        match sp.via {
            ServiceAddressKind::ExternalIp | ServiceAddressKind::LoadBalancerIngress => {
                let sticky = client_ip_affinity(svc) && sp.protocol == Protocol::Tcp;
                out.push(OutsidePort {
                    port: sp,
                    keep_source: local,
                    sticky,
                })
            }
            ServiceAddressKind::ClusterIp => out.extend(node_ports(cluster, svc, &sp, local)),
            ServiceAddressKind::NodePort => {}
        }
    }
    out
}

/// Every Service port's node port at every node's address (NodePort and LoadBalancer
/// Services), with the endpoints that may receive there (see the module docs). Outside
/// clients use them through the edge; a node's host forwards to its own ones (`check`'s
/// node-to-node-port flows).
pub fn node_port_promises(cluster: &Cluster) -> Vec<OutsidePort> {
    let mut out = Vec::new();
    for sp in cluster.service_ports() {
        if sp.via != ServiceAddressKind::ClusterIp {
            continue;
        }
        if let Some(svc) = service_of(cluster, &sp) {
            out.extend(node_ports(cluster, svc, &sp, external_traffic_local(svc)));
        }
    }
    out
}

/// The port at every node's address and its `nodePort`, if the Service has one.
fn node_ports(
    cluster: &Cluster,
    svc: &Service,
    sp: &ServicePortRef,
    local: bool,
) -> Vec<OutsidePort> {
    if !matches!(
        svc.spec.as_ref().and_then(|s| s.type_.as_deref()),
        Some("NodePort") | Some("LoadBalancer")
    ) {
        return Vec::new();
    }
    let Some(node_port) = node_port(svc, &sp.port_name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for node in &cluster.nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let endpoints = match local {
            true => cluster.endpoints_on(sp, name),
            false => sp.endpoints.clone(),
        };
        for ip in node_addresses(node) {
            let mut port = sp.clone();
            port.address = SocketV4::new(ip, node_port);
            port.via = ServiceAddressKind::NodePort;
            port.endpoints = endpoints.clone();
            out.push(OutsidePort {
                port,
                keep_source: local,
                sticky: false,
            });
        }
    }
    out
}

fn service_of<'c>(cluster: &'c Cluster, sp: &ServicePortRef) -> Option<&'c Service> {
    cluster.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(sp.namespace.as_str())
            && s.metadata.name.as_deref() == Some(sp.name.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(policy: &str) -> Cluster {
        let node = |name: &str, ip: &str| {
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}))
            .unwrap()
        };
        let pod = |name: &str, node: &str, ip: &str| {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"nodeName": node, "containers": []}, "status": {"podIP": ip}}))
            .unwrap()
        };
        Cluster {
            nodes: vec![node("a", "192.168.0.1"), node("b", "192.168.0.2")],
            pods: vec![pod("p", "a", "10.244.1.5")],
            services: vec![serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9",
                         "externalTrafficPolicy": policy,
                         "ports": [{"name": "http", "port": 80, "nodePort": 30080}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}}))
            .unwrap()],
            endpoints: vec![serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "subsets": [{"addresses": [{"ip": "10.244.1.5", "nodeName": "a"}],
                             "ports": [{"name": "http", "port": 8080}]}]}))
            .unwrap()],
            ..Cluster::default()
        }
    }

    fn promised(c: &Cluster) -> Vec<(String, usize, bool)> {
        outside_service_ports(c)
            .into_iter()
            .map(|o| {
                (
                    o.port.address.to_string(),
                    o.port.endpoints.len(),
                    o.keep_source,
                )
            })
            .collect()
    }

    #[test]
    fn local_keeps_the_source_and_a_node_port_uses_only_that_nodes_endpoints() {
        let at = |a: &str, n, k| (a.to_string(), n, k);
        assert_eq!(
            promised(&cluster("Cluster")),
            [
                at("192.168.0.1:30080", 1, false),
                at("192.168.0.2:30080", 1, false),
                at("203.0.113.5:80", 1, false)
            ]
        );
        // The endpoint is on the first node: the second's node port reaches nothing.
        assert_eq!(
            promised(&cluster("Local")),
            [
                at("192.168.0.1:30080", 1, true),
                at("192.168.0.2:30080", 0, true),
                at("203.0.113.5:80", 1, true)
            ]
        );
    }

    #[test]
    fn client_ip_affinity_is_promised_at_external_and_ingress_ips_on_tcp_ports_only() {
        let mut c = cluster("Cluster");
        let svc = &mut c.services[0];
        let spec = svc.spec.as_mut().unwrap();
        spec.session_affinity = Some("ClientIP".into());
        spec.external_ips = Some(vec!["203.0.113.6".into()]);
        let sticky: Vec<(String, bool)> = outside_service_ports(&c)
            .into_iter()
            .map(|o| (o.port.address.to_string(), o.sticky))
            .collect();
        assert_eq!(
            sticky,
            [
                ("192.168.0.1:30080".to_string(), false),
                ("192.168.0.2:30080".to_string(), false),
                ("203.0.113.6:80".to_string(), true),
                ("203.0.113.5:80".to_string(), true),
            ]
        );
        // A UDP port is not: MidoNet's load balancer is TCP only.
        let spec = c.services[0].spec.as_mut().unwrap();
        for p in spec.ports.iter_mut().flatten() {
            p.protocol = Some("UDP".into());
        }
        c.endpoints[0].subsets.iter_mut().flatten().for_each(|s| {
            s.ports
                .iter_mut()
                .flatten()
                .for_each(|p| p.protocol = Some("UDP".into()))
        });
        assert!(outside_service_ports(&c).iter().all(|o| !o.sticky));
    }
}
