//! The cluster as Kubernetes describes it: which workloads sit behind which interfaces,
//! and what connectivity Kubernetes promises between them.
//!
//! The workloads follow the contract between the node agent, the CNI plugin and the
//! translators: a pod sits behind `mido<hash>` on its node's host with its `status.podIP`
//! and (if annotated) `midonet.org/mac-address`, on the node's pod CIDR with the CIDR's
//! first address as gateway; a node's host stack sits behind `midokube-mido` with the pod
//! CIDR's second address plus its InternalIP/ExternalIP addresses. The *expectations* are
//! written from Kubernetes semantics alone (Service, Endpoints or EndpointSlices, pod IPs),
//! never from Translations, so a translator that builds the wrong network fails them.
//!
//! A Service port is expected at each of the Service's addresses: the cluster IP, every
//! `spec.externalIPs` entry and every `status.loadBalancer.ingress[].ip` (kube-proxy's
//! reading; ingress entries with `ipMode: Proxy` are the load balancer's business). Traffic
//! from outside the cluster is modelled only with an edge (`edge`): the upstream behind each
//! uplink is then a workload, and [`crate::outside`] says what outside clients are promised.
//!
//! With `internalTrafficPolicy: Local`, a client reaching the cluster IP is sent only to
//! the endpoints on its own node (`nodeName`), chosen the same way among them, and to
//! nothing when there are none (Kubernetes drops that traffic); the Service's other
//! addresses keep the Cluster policy.
//!
//! Which endpoints a port is sent to is decided with the translators' own reading of the
//! endpoint sources (`midonet_translators::endpoints`: one source-neutral model, the
//! `ready`/`serving`/`terminating` rule), but the pairing of a service port with endpoint
//! ports and the resulting addresses are derived here, from the objects.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use midonet_translators::addr::parse_mac;
use midonet_translators::endpoints::{select, Eligibility, ServiceEndpoints, SliceView};
use midonet_translators::meta::{HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION};
use midonet_translators::model::MacAddr;
use midonet_translators::naming::{pod_interface_name, NODE_INTERFACE_NAME};
use midonet_translators::node::SubnetInfo;
use midonet_translators::service_spec::internal_traffic_local;
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
    /// Namespaces (their labels) and NetworkPolicies: what policies let through
    /// ([`crate::policy`]).
    pub namespaces: Vec<Namespace>,
    pub network_policies: Vec<NetworkPolicy>,
    /// `Some` when the cluster's endpoints come from EndpointSlices (the apiserver serves
    /// them, so the controllers read them): expectations then follow the slices, merged per
    /// Service, and `endpoints` is not read. `discovery.k8s.io/v1beta1` slices are given in
    /// the v1 shape (the fields read are the same).
    pub endpoint_slices: Option<Vec<EndpointSlice>>,
    /// The edge toward the outside (`--edge-config`), if the cluster has one: the
    /// upstream behind each uplink is a workload, and Kubernetes' promises to outside
    /// clients are checked ([`crate::outside`]).
    pub edge: Option<std::sync::Arc<midonet_translators::config::Edge>>,
}

/// Which of a Service's addresses a client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceAddressKind {
    ClusterIp,
    /// A `spec.externalIPs` entry.
    ExternalIp,
    /// A `status.loadBalancer.ingress[].ip`.
    LoadBalancerIngress,
    /// A node's address at the port's `nodePort`.
    NodePort,
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
    /// One of the Service's addresses and the service port.
    pub address: SocketV4,
    /// Which kind of address `address` is.
    pub via: ServiceAddressKind,
    /// The ready endpoints Kubernetes sends this port to: `(ip, target port)`.
    pub endpoints: Vec<SocketV4>,
    /// At the cluster IP of a Service with `internalTrafficPolicy: Local`: the endpoints
    /// a client on each node is sent to instead, chosen among that node's own (a node
    /// missing here has none: its clients' traffic is dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_endpoints: Option<BTreeMap<String, Vec<SocketV4>>>,
}

impl ServicePortRef {
    /// The endpoints a client on `node` (`None`: on no node) is sent to.
    pub fn endpoints_from(&self, node: Option<&str>) -> &[SocketV4] {
        match &self.local_endpoints {
            None => &self.endpoints,
            Some(by_node) => node.and_then(|n| by_node.get(n)).map_or(&[], Vec::as_slice),
        }
    }

    pub fn display(&self) -> String {
        let port = if self.port_name.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.port_name)
        };
        let via = match self.via {
            ServiceAddressKind::ClusterIp => "",
            ServiceAddressKind::ExternalIp => " via external IP",
            ServiceAddressKind::LoadBalancerIngress => " via load-balancer ingress",
            ServiceAddressKind::NodePort => " via node port",
        };
        format!(
            "svc/{}/{}:{}{port}{via}",
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
        if let Some(edge) = &self.edge {
            out.extend(crate::outside::upstream_attachments(edge));
        }
        out
    }

    /// Every port of every Service that has a cluster IP (whatever its type), at each of
    /// the Service's addresses, and the endpoints Kubernetes sends it to.
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
            let addresses = service_addresses(svc, cluster_ip);
            let se = self.endpoints_of(ns, name);
            for port in spec.ports.iter().flatten() {
                let Some(protocol) = Protocol::from_name(port.protocol.as_deref().unwrap_or("TCP"))
                else {
                    continue;
                };
                let Ok(service_port) = u16::try_from(port.port) else {
                    continue;
                };
                let port_name = port.name.clone().unwrap_or_default();
                let endpoints = port_endpoints(&se, &port_name, protocol, None);
                let local = internal_traffic_local(svc).then(|| {
                    let nodes: BTreeSet<&str> = se
                        .groups
                        .iter()
                        .flat_map(|g| g.addresses.iter().filter_map(|a| a.node.as_deref()))
                        .collect();
                    nodes
                        .into_iter()
                        .map(|n| {
                            (
                                n.to_string(),
                                port_endpoints(&se, &port_name, protocol, Some(n)),
                            )
                        })
                        .filter(|(_, eps)| !eps.is_empty())
                        .collect()
                });
                for (ip, via) in &addresses {
                    out.push(ServicePortRef {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        port_name: port_name.clone(),
                        protocol,
                        address: SocketV4::new(*ip, service_port),
                        via: *via,
                        endpoints: endpoints.clone(),
                        // Only traffic to the cluster IP follows the internal policy.
                        local_endpoints: local
                            .clone()
                            .filter(|_| *via == ServiceAddressKind::ClusterIp),
                    });
                }
            }
        }
        out
    }

    /// The endpoints of Service `ns/name` from the source the cluster uses.
    fn endpoints_of(&self, ns: &str, name: &str) -> ServiceEndpoints {
        match &self.endpoint_slices {
            Some(slices) => {
                ServiceEndpoints::from_slices(ns, name, slices.iter().map(SliceView::from))
            }
            None => self
                .endpoints
                .iter()
                .find(|e| {
                    e.metadata.namespace.as_deref() == Some(ns)
                        && e.metadata.name.as_deref() == Some(name)
                })
                .and_then(ServiceEndpoints::from_endpoints)
                .unwrap_or_default(),
        }
    }
}

/// The addresses a Service is reached at, each once: the cluster IP, the IPv4
/// `spec.externalIPs`, the IPv4 `status.loadBalancer.ingress[].ip` whose `ipMode` is not
/// `Proxy` (with `Proxy` the load balancer delivers to the nodes or pods itself).
pub fn service_addresses(
    svc: &Service,
    cluster_ip: Ipv4Addr,
) -> Vec<(Ipv4Addr, ServiceAddressKind)> {
    let external = svc
        .spec
        .iter()
        .flat_map(|s| s.external_ips.iter().flatten())
        .map(|ip| (ip.as_str(), ServiceAddressKind::ExternalIp));
    let ingress = svc
        .status
        .iter()
        .flat_map(|s| s.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter(|i| i.ip_mode.as_deref() != Some("Proxy"))
        .filter_map(|i| Some((i.ip.as_deref()?, ServiceAddressKind::LoadBalancerIngress)));
    let mut out = vec![(cluster_ip, ServiceAddressKind::ClusterIp)];
    for (raw, via) in external.chain(ingress) {
        if let Ok(ip) = raw.parse::<Ipv4Addr>() {
            if !out.iter().any(|(seen, _)| *seen == ip) {
                out.push((ip, via));
            }
        }
    }
    out
}

impl Cluster {
    /// The endpoints of `sp`'s port whose `nodeName` is `node`, chosen among them as the
    /// cluster's are (`externalTrafficPolicy: Local` at that node's address).
    pub(crate) fn endpoints_on(&self, sp: &ServicePortRef, node: &str) -> Vec<SocketV4> {
        let se = self.endpoints_of(&sp.namespace, &sp.name);
        port_endpoints(&se, &sp.port_name, sp.protocol, Some(node))
    }
}

/// The addresses a service port is sent to: of every endpoint group, the port named like
/// the service port with its protocol (kube-proxy's pairing), at the addresses that get
/// traffic — the ready ones, or, when none is ready, the serving terminating ones. With
/// `on: Some(node)`, among the endpoints whose `nodeName` is that node only.
fn port_endpoints(
    se: &ServiceEndpoints,
    port_name: &str,
    protocol: Protocol,
    on: Option<&str>,
) -> Vec<SocketV4> {
    let mut candidates: Vec<(SocketV4, Eligibility)> = Vec::new();
    for group in &se.groups {
        let Some(port) = group.ports.iter().find(|p| {
            p.name == port_name
                && Protocol::from_name(p.protocol.as_deref().unwrap_or("TCP")) == Some(protocol)
        }) else {
            continue;
        };
        let Some(target) = u16::try_from(port.port).ok().filter(|p| *p != 0) else {
            continue;
        };
        for a in group
            .addresses
            .iter()
            .filter(|a| on.is_none() || a.node.as_deref() == on)
        {
            if let Ok(ip) = a.ip.parse::<Ipv4Addr>() {
                candidates.push((SocketV4::new(ip, target), a.conditions.eligibility()));
            }
        }
    }
    select(&candidates).into_iter().collect()
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
        .find_map(|s| SubnetInfo::parse(s).ok())
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
    for ip in node_addresses(node) {
        if !ips.contains(&ip) {
            ips.push(ip);
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
        networks: Vec::new(),
    })
}

/// The node's IPv4 InternalIP and ExternalIP addresses, each once, in status order.
pub(crate) fn node_addresses(node: &Node) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for a in node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
    {
        if a.type_ == "InternalIP" || a.type_ == "ExternalIP" {
            if let Ok(ip) = a.address.parse::<Ipv4Addr>() {
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
        }
    }
    out
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
        networks: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    /// (address, via, endpoints) of every service port, as strings.
    fn ports(c: &Cluster) -> Vec<(String, ServiceAddressKind, Vec<String>)> {
        c.service_ports()
            .into_iter()
            .map(|sp| {
                (
                    format!("{}/{}", sp.display(), sp.address),
                    sp.via,
                    sp.endpoints.iter().map(|e| e.to_string()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_service_port_is_expected_at_each_address_kube_proxy_serves() {
        use ServiceAddressKind::*;
        let c = Cluster {
            services: vec![
                svc(json!({
                    "metadata": {"name": "lb", "namespace": "ns"},
                    "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.5",
                             "externalIPs": ["203.0.113.1", "fd00::1", "nonsense", "10.96.0.5"],
                             "ports": [{"name": "http", "port": 80}]},
                    "status": {"loadBalancer": {"ingress": [
                        {"ip": "192.0.2.1"}, {"hostname": "lb.example.com"},
                        {"ip": "192.0.2.2", "ipMode": "Proxy"}, {"ip": "203.0.113.1"}]}}
                })),
                svc(json!({"metadata": {"name": "headless", "namespace": "ns"},
                           "spec": {"clusterIP": "None", "externalIPs": ["203.0.113.9"],
                                    "ports": [{"port": 80}]}})),
                svc(json!({"metadata": {"name": "name", "namespace": "ns"},
                           "spec": {"type": "ExternalName", "externalName": "x.example.com",
                                    "externalIPs": ["203.0.113.8"], "ports": [{"port": 80}]}})),
            ],
            ..Cluster::default()
        };
        let got: Vec<(String, ServiceAddressKind)> =
            ports(&c).into_iter().map(|(a, v, _)| (a, v)).collect();
        assert_eq!(
            got,
            [
                ("svc/ns/lb:80 (http)/10.96.0.5:80".to_string(), ClusterIp),
                (
                    "svc/ns/lb:80 (http) via external IP/203.0.113.1:80".to_string(),
                    ExternalIp
                ),
                (
                    "svc/ns/lb:80 (http) via load-balancer ingress/192.0.2.1:80".to_string(),
                    LoadBalancerIngress
                ),
            ]
        );
    }

    #[test]
    fn endpoints_pair_by_port_name_and_protocol_and_only_ready_addresses_count() {
        let c = Cluster {
            services: vec![svc(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"clusterIP": "10.96.0.5",
                         "ports": [{"name": "http", "port": 80},
                                   {"name": "dns", "port": 53, "protocol": "UDP"}]}
            }))],
            endpoints: vec![serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "subsets": [
                    {"addresses": [{"ip": "10.1.0.2"}, {"ip": "10.1.0.1"}],
                     "notReadyAddresses": [{"ip": "10.1.0.3"}],
                     "ports": [{"name": "http", "port": 8080},
                               {"name": "dns", "port": 5353, "protocol": "TCP"}]},
                    {"addresses": [{"ip": "10.1.0.4"}],
                     "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]}]
            }))
            .unwrap()],
            ..Cluster::default()
        };
        let eps: Vec<Vec<String>> = ports(&c).into_iter().map(|(_, _, e)| e).collect();
        assert_eq!(
            eps,
            [
                vec!["10.1.0.1:8080", "10.1.0.2:8080"],
                vec!["10.1.0.4:5353"]
            ]
        );
    }

    #[test]
    fn with_slices_the_endpoints_objects_are_not_read() {
        let mut c = Cluster {
            services: vec![svc(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80}]}
            }))],
            endpoints: vec![serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "subsets": [{"addresses": [{"ip": "10.1.0.9"}],
                             "ports": [{"name": "http", "port": 8080}]}]
            }))
            .unwrap()],
            ..Cluster::default()
        };
        let slice = |name: &str, eps: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4", "endpoints": eps,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }))
            .unwrap()
        };
        let draining = json!({"ready": false, "serving": true, "terminating": true});
        c.endpoint_slices = Some(vec![
            slice(
                "a",
                json!([{"addresses": ["10.1.0.1"], "conditions": draining}]),
            ),
            slice(
                "b",
                json!([{"addresses": ["10.1.0.2"], "conditions": {"ready": false}}]),
            ),
        ]);
        // Nothing ready: the serving terminating endpoint takes the traffic.
        assert_eq!(ports(&c)[0].2, ["10.1.0.1:8080"]);
        c.endpoint_slices
            .as_mut()
            .unwrap()
            .push(slice("c", json!([{"addresses": ["10.1.0.3"]}])));
        assert_eq!(ports(&c)[0].2, ["10.1.0.3:8080"]);
        c.endpoint_slices = None;
        assert_eq!(ports(&c)[0].2, ["10.1.0.9:8080"]);
    }
}
