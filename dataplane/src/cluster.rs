//! The cluster as Kubernetes describes it: which workloads sit behind which interfaces,
//! and what connectivity Kubernetes promises between them.
//!
//! The workloads follow the contract between the node agent, the CNI plugin and the
//! translators: a pod sits behind `mido<hash>` on its node's host with its `status.podIP`
//! and (if annotated) `midonet.org/mac-address`, on the node's pod CIDR with the CIDR's
//! first address as gateway; a node's host stack sits behind `midokube-mido` with the pod
//! CIDR's second address plus its InternalIP/ExternalIP addresses. The *expectations* are
//! written from Kubernetes semantics alone (Service, Endpoints, pod IPs), never from
//! Translations, so a translator that builds the wrong network fails them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use midonet_translators::addr::{parse_cidr, parse_mac};
use midonet_translators::meta::{HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION};
use midonet_translators::model::MacAddr;
use midonet_translators::naming::{pod_interface_name, NODE_INTERFACE_NAME};
use midonet_translators::node::SubnetInfo;
use serde::Serialize;
use uuid::Uuid;

use crate::packet::{Protocol, SocketV4};
use crate::topology::Attachment;

/// The objects `check` reads.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub endpoints: Vec<Endpoints>,
}

/// A workload name for a pod: `pod/<namespace>/<name>`.
pub fn pod_name(namespace: &str, name: &str) -> String {
    format!("pod/{namespace}/{name}")
}

/// A workload name for a node's host stack: `node/<name>`.
pub fn node_name(name: &str) -> String {
    format!("node/{name}")
}

/// One port of a Service as a client uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePortRef {
    pub namespace: String,
    pub name: String,
    pub port_name: String,
    pub protocol: Protocol,
    /// A cluster IP (or external IP) and the service port.
    pub address: SocketV4,
    /// The ready endpoints Kubernetes sends this port to: `(ip, target port)`.
    pub endpoints: Vec<SocketV4>,
}

impl ServicePortRef {
    pub fn display(&self) -> String {
        let port = if self.port_name.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.port_name)
        };
        format!(
            "svc/{}/{}:{}{port}",
            self.namespace, self.name, self.address.port
        )
    }
}

impl Cluster {
    /// Every workload the cluster plugs into MidoNet.
    pub fn attachments(&self) -> Vec<Attachment> {
        let mut out = Vec::new();
        let nodes: BTreeMap<&str, &Node> = self
            .nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
            .collect();
        for node in self.nodes.iter() {
            if let Some(a) = node_attachment(node) {
                out.push(a);
            }
        }
        for pod in &self.pods {
            let Some(node) = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| nodes.get(n))
            else {
                continue;
            };
            if let Some(a) = pod_attachment(pod, node) {
                out.push(a);
            }
        }
        out
    }

    /// Every port of every Service that has a cluster IP (whatever its type), and the
    /// ready endpoints Kubernetes sends it to.
    pub fn service_ports(&self) -> Vec<ServicePortRef> {
        let mut out = Vec::new();
        for svc in &self.services {
            let (Some(ns), Some(name)) = (
                svc.metadata.namespace.as_deref(),
                svc.metadata.name.as_deref(),
            ) else {
                continue;
            };
            let Some(spec) = &svc.spec else { continue };
            if spec.type_.as_deref() == Some("ExternalName") {
                continue;
            }
            let cluster_ip = spec
                .cluster_ip
                .as_deref()
                .into_iter()
                .chain(spec.cluster_ips.iter().flatten().map(String::as_str))
                .find_map(|s| s.parse::<Ipv4Addr>().ok());
            let Some(cluster_ip) = cluster_ip else {
                continue; // headless or IPv6-only: no rules, nothing to check
            };
            let ep = self.endpoints.iter().find(|e| {
                e.metadata.namespace.as_deref() == Some(ns)
                    && e.metadata.name.as_deref() == Some(name)
            });
            for port in spec.ports.iter().flatten() {
                let Some(protocol) = Protocol::from_name(port.protocol.as_deref().unwrap_or("TCP"))
                else {
                    continue;
                };
                let Ok(service_port) = u16::try_from(port.port) else {
                    continue;
                };
                let port_name = port.name.clone().unwrap_or_default();
                out.push(ServicePortRef {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    port_name: port_name.clone(),
                    protocol,
                    address: SocketV4::new(cluster_ip, service_port),
                    endpoints: ready_endpoints(ep, &port_name, protocol),
                });
            }
        }
        out
    }
}

/// Ready addresses of the Endpoints subset port named like the service port (kube-proxy's
/// pairing: by name and protocol).
fn ready_endpoints(ep: Option<&Endpoints>, port_name: &str, protocol: Protocol) -> Vec<SocketV4> {
    let mut out = Vec::new();
    for subset in ep.and_then(|e| e.subsets.as_ref()).into_iter().flatten() {
        let Some(port) = subset.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name
                && Protocol::from_name(p.protocol.as_deref().unwrap_or("TCP")) == Some(protocol)
        }) else {
            continue;
        };
        let Ok(target) = u16::try_from(port.port) else {
            continue;
        };
        for a in subset.addresses.iter().flatten() {
            if let Ok(ip) = a.ip.parse::<Ipv4Addr>() {
                out.push(SocketV4::new(ip, target));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn host_id(node: &Node) -> Option<Uuid> {
    let s = node
        .metadata
        .annotations
        .as_ref()?
        .get(HOST_ID_ANNOTATION)?;
    Uuid::parse_str(s).ok()
}

/// The node's pod subnet and the addresses it reserves, chosen as the Node translator
/// chooses them.
fn pod_subnet(node: &Node) -> Option<SubnetInfo> {
    let spec = node.spec.as_ref()?;
    spec.pod_cidr
        .as_deref()
        .into_iter()
        .chain(spec.pod_cidrs.iter().flatten().map(String::as_str))
        .find_map(|s| SubnetInfo::new(parse_cidr(s).ok()?))
}

/// The MAC a workload uses: its annotation, else a stable locally administered one (the
/// CNI plugin's choice; the bridge learns it).
fn workload_mac(annotations: Option<&BTreeMap<String, String>>, key: &str) -> MacAddr {
    if let Some(m) = annotations
        .and_then(|a| a.get(MAC_ADDRESS_ANNOTATION))
        .and_then(|s| parse_mac(s))
    {
        return m;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    MacAddr([0x02, b[0], b[1], b[2], b[3], b[4]])
}

fn node_attachment(node: &Node) -> Option<Attachment> {
    let name = node.metadata.name.as_deref()?;
    let host = host_id(node)?;
    let subnet = pod_subnet(node)?;
    let mut ips = vec![subnet.node_ip];
    for a in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
    {
        if a.type_ == "InternalIP" || a.type_ == "ExternalIP" {
            if let Ok(ip) = a.address.parse::<Ipv4Addr>() {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
        }
    }
    Some(Attachment {
        name: node_name(name),
        host,
        interface: NODE_INTERFACE_NAME.to_string(),
        mac: workload_mac(node.metadata.annotations.as_ref(), &format!("node/{name}")),
        ips,
        subnet: Some(subnet.subnet),
        gateway: Some(subnet.gateway),
    })
}

fn pod_attachment(pod: &Pod, node: &Node) -> Option<Attachment> {
    let ns = pod.metadata.namespace.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    let spec = pod.spec.as_ref()?;
    if spec.host_network == Some(true) {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
        return None;
    }
    let ip = status
        .pod_ip
        .as_deref()
        .into_iter()
        .chain(status.pod_ips.iter().flatten().map(|p| p.ip.as_str()))
        .find_map(|s| s.parse::<Ipv4Addr>().ok())?;
    let host = host_id(node)?;
    let subnet = pod_subnet(node)?;
    let key = format!("{ns}/{name}");
    Some(Attachment {
        name: pod_name(ns, name),
        host,
        interface: pod_interface_name(&key),
        mac: workload_mac(pod.metadata.annotations.as_ref(), &key),
        ips: vec![ip],
        subnet: Some(subnet.subnet),
        gateway: Some(subnet.gateway),
    })
}
