//! Sample cluster objects at scale, for the benchmark (`bench/`) and the load and
//! chaos tests: Nodes with their host-id and tunnel-endpoint annotations preset (so no
//! nodeannotator is needed), Pods spread over the Nodes, Services with their Endpoints, in a
//! few namespaces. The Services are ClusterIP, or, with [`Scenario::edge_services_every`],
//! a fixed share NodePort and LoadBalancer ([`Scenario::service_type`]). Only the objects:
//! creating them is the caller's business ([`api_in_namespace_of`] helps).
//!
//! Pods get an address in their node's pod CIDR as a kubelet and the CNI plugin would give
//! them: `status.podIP` ([`Scenario::pod_status`], written through the status subresource
//! after the create, since a create drops the status) and, for every other pod by default
//! ([`Scenario::pod_mac_every`]), the `midonet.org/mac-address` annotation (the others'
//! MAC is learned by the bridge). The Endpoints list pod addresses, each with its pod's node
//! as the endpoints controller writes it ([`Scenario::endpoint_address`]), so `check` can
//! verify every Service against workloads and `externalTrafficPolicy: Local` knows each
//! endpoint's node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace, Node,
    NodeAddress, NodeSpec, NodeStatus, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Api, Client};
use std::net::Ipv4Addr;

use midonet_translators::meta::{
    HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION,
};
use uuid::Uuid;

/// For namespaced objects: an `Api` in each object's own namespace (`default` if unset).
pub fn api_in_namespace_of<K>(client: &Client) -> impl Fn(&K) -> Api<K> + '_
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    move |o: &K| {
        Api::namespaced(
            client.clone(),
            o.meta().namespace.as_deref().unwrap_or("default"),
        )
    }
}

/// Node `i`'s pod CIDR is `10.(POD_NET_OCTET + i / 256).(i % 256).0/24`: outside the test
/// apiserver's service range (10.96.0.0/12), since a cluster IP inside a node's pod CIDR
/// would be on-link for its pods.
const POD_NET_OCTET: usize = 200;
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub nodes: usize,
    pub pods: usize,
    pub services: usize,
    pub endpoints_per_service: usize,
    pub namespaces: usize,
}

impl Scale {
    /// Scenario S of the benchmark: 50 Nodes, 2,000 Pods, 300 Services × 4 endpoints.
    pub const S: Scale = Scale {
        nodes: 50,
        pods: 2000,
        services: 300,
        endpoints_per_service: 4,
        namespaces: 4,
    };

    /// The unit tests' cluster: 3 Nodes, 6 Pods, 2 Services × 2 endpoints, 4 namespaces.
    pub const SMALL: Scale = Scale {
        nodes: 3,
        pods: 6,
        services: 2,
        endpoints_per_service: 2,
        namespaces: 4,
    };
}

/// Objects of one scenario; `prefix` keeps several scenarios in one cluster apart.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub prefix: String,
    pub scale: Scale,
    /// Simulator hosts, one per Node: (node name, host id).
    pub hosts: Vec<(String, Uuid)>,
    /// Pods `0, n, 2n, …` carry the MAC annotation, each adding a MAC-table and an ARP
    /// Translation to its pod's; 0 for none. 2 by default (every even pod), so a run
    /// mixes pods whose MAC the translators know with pods whose MAC the bridge learns.
    pub pod_mac_every: usize,
    /// Of every this-many Services, one is NodePort and one LoadBalancer
    /// ([`Scenario::service_type`]); 0 (the default) for ClusterIP Services only.
    pub edge_services_every: usize,
}

/// What Service `i` is: its type and, for NodePort and LoadBalancer, its
/// `externalTrafficPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    ClusterIp,
    NodePort { local: bool },
    LoadBalancer { local: bool },
}

fn meta(name: String, namespace: Option<String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        ..ObjectMeta::default()
    }
}

impl Scenario {
    pub fn new(prefix: &str, scale: Scale) -> Scenario {
        let hosts = (0..scale.nodes)
            .map(|i| (format!("{prefix}-node-{i}"), Uuid::new_v4()))
            .collect();
        Scenario {
            prefix: prefix.to_string(),
            scale,
            hosts,
            pod_mac_every: 2,
            edge_services_every: 0,
        }
    }

    /// What Service `i` is. With [`Scenario::edge_services_every`] `n` (at least 2): Service
    /// `i` is NodePort when `i mod n` is 1, LoadBalancer when it is 2, else ClusterIP; of
    /// the NodePort and LoadBalancer ones, those in the first half of each run of `2n`
    /// Services have `externalTrafficPolicy: Local` (so at `n` = 10 and 300 Services: 30
    /// NodePort and 30 LoadBalancer, 15 of each Local).
    pub fn service_type(&self, i: usize) -> ServiceKind {
        let n = self.edge_services_every;
        if n < 2 {
            return ServiceKind::ClusterIp;
        }
        let local = i % (2 * n) < n;
        match i % n {
            1 => ServiceKind::NodePort { local },
            2 => ServiceKind::LoadBalancer { local },
            _ => ServiceKind::ClusterIp,
        }
    }

    /// The namespace of Pod, Service and Endpoints `i` (and the `i`-th namespace).
    pub fn namespace(&self, i: usize) -> String {
        format!("{}-{}", self.prefix, i % self.scale.namespaces.max(1))
    }

    pub fn namespace_object(&self, i: usize) -> Namespace {
        let mut metadata = meta(self.namespace(i), None);
        // What NetworkPolicies select it by (the apiserver sets no such label before 1.21).
        metadata.labels = Some(BTreeMap::from([(
            "bench/namespace".to_string(),
            self.namespace(i),
        )]));
        Namespace {
            metadata,
            ..Namespace::default()
        }
    }

    pub fn node(&self, i: usize) -> Node {
        let ip = format!("192.168.{}.{}", i / 250, 1 + i % 250);
        let (name, host) = self
            .hosts
            .get(i)
            .cloned()
            .unwrap_or_else(|| (format!("{}-node-{i}", self.prefix), Uuid::nil()));
        let mut metadata = meta(name, None);
        metadata.annotations = Some(BTreeMap::from([
            (HOST_ID_ANNOTATION.to_string(), host.to_string()),
            (TUNNEL_ENDPOINT_IP_ANNOTATION.to_string(), ip.clone()),
        ]));
        Node {
            metadata,
            spec: Some(NodeSpec {
                pod_cidr: Some(format!("10.{}.{}.0/24", POD_NET_OCTET + i / 256, i % 256)),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip,
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    pub fn pod_name(i: usize) -> String {
        format!("pod-{i}")
    }

    /// The node index of pod `i`.
    fn pod_node(&self, i: usize) -> usize {
        i % self.scale.nodes.max(1)
    }

    /// The address of pod `i`: in its node's pod CIDR (see [`Scenario::node`]), from `.10`
    /// on in the order of the pods on that node (wrapping after 244 pods on one node).
    pub fn pod_ip(&self, i: usize) -> Ipv4Addr {
        let n = self.pod_node(i);
        let k = i / self.scale.nodes.max(1);
        Ipv4Addr::new(
            10,
            u8::try_from(POD_NET_OCTET + n / 256).unwrap_or(u8::MAX),
            (n % 256) as u8,
            10 + (k % 244) as u8,
        )
    }

    /// The node whose pod CIDR holds `ip` (see [`Scenario::node`]), if one of the scale's.
    pub fn node_of_ip(&self, ip: Ipv4Addr) -> Option<String> {
        let [a, b, c, _] = ip.octets();
        let n = (usize::from(b).checked_sub(POD_NET_OCTET)? * 256) + usize::from(c);
        let (name, _) = self.hosts.get(n).filter(|_| a == 10)?;
        Some(name.clone())
    }

    /// An Endpoints address for pod address `ip`, with the node of the pod that has it, as
    /// the endpoints controller writes it.
    pub fn endpoint_address(&self, ip: Ipv4Addr) -> EndpointAddress {
        EndpointAddress {
            ip: ip.to_string(),
            node_name: self.node_of_ip(ip),
            ..EndpointAddress::default()
        }
    }

    /// The MAC the CNI plugin annotates pod `i` with, derived from its address: every
    /// [`Scenario::pod_mac_every`]-th pod has one (every even pod by default), the others
    /// none.
    pub fn pod_mac(&self, i: usize) -> Option<String> {
        let every = self.pod_mac_every;
        let [a, b, c, d] = self.pod_ip(i).octets();
        (every > 0 && i % every == 0).then(|| format!("0a:58:{a:02x}:{b:02x}:{c:02x}:{d:02x}"))
    }

    /// The status a kubelet writes for pod `i` once it runs: a merge patch for the status
    /// subresource.
    pub fn pod_status(&self, i: usize) -> serde_json::Value {
        let ip = self.pod_ip(i).to_string();
        serde_json::json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
    }

    /// Pod `i` on node `i mod nodes`.
    pub fn pod(&self, i: usize) -> Pod {
        let node = match self.hosts.get(self.pod_node(i)) {
            Some((name, _)) => name.clone(),
            None => format!("{}-node-0", self.prefix),
        };
        let mut metadata = meta(Self::pod_name(i), Some(self.namespace(i)));
        if let Some(mac) = self.pod_mac(i) {
            metadata.annotations =
                Some(BTreeMap::from([(MAC_ADDRESS_ANNOTATION.to_string(), mac)]));
        }
        Pod {
            metadata,
            spec: Some(PodSpec {
                node_name: Some(node),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("x".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    pub fn network_policy_name(i: usize) -> String {
        format!("np-{i}")
    }

    /// NetworkPolicy `i` (one per ten pods in the benchmark): in namespace `i`, it isolates
    /// the pods of its namespace for ingress and admits TCP 8080 from the pods of namespace
    /// `i + 1`, selected by namespace label.
    pub fn network_policy(&self, i: usize) -> k8s_openapi::api::networking::v1::NetworkPolicy {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": Self::network_policy_name(i), "namespace": self.namespace(i)},
            "spec": {
                "podSelector": {},
                "ingress": [{
                    "from": [{"namespaceSelector": {"matchLabels": {
                        "bench/namespace": self.namespace(i + 1)}}}],
                    "ports": [{"port": 8080, "protocol": "TCP"}]
                }]
            }
        }))
        .unwrap_or_default()
    }

    pub fn service_name(i: usize) -> String {
        format!("svc-{i}")
    }

    pub fn service(&self, i: usize) -> Service {
        let (type_, local) = match self.service_type(i) {
            ServiceKind::ClusterIp => ("ClusterIP", None),
            ServiceKind::NodePort { local } => ("NodePort", Some(local)),
            ServiceKind::LoadBalancer { local } => ("LoadBalancer", Some(local)),
        };
        let policy = local.map(|l| if l { "Local" } else { "Cluster" });
        Service {
            metadata: meta(Self::service_name(i), Some(self.namespace(i))),
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                external_traffic_policy: policy.map(str::to_string),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    /// The Endpoints of Service `i`: `endpoints_per_service` addresses, port 8080: those
    /// of the pods `i * endpoints_per_service + k` (modulo the pods of the scale, so the
    /// Services share pods when there are fewer pods than endpoints).
    pub fn endpoints(&self, i: usize) -> Endpoints {
        let per = self.scale.endpoints_per_service;
        let mut ips: Vec<Ipv4Addr> = (0..per)
            .map(|k| self.pod_ip((i * per + k) % self.scale.pods.max(1)))
            .collect();
        ips.sort();
        ips.dedup();
        let addresses = ips
            .into_iter()
            .map(|ip| self.endpoint_address(ip))
            .collect();
        Endpoints {
            metadata: meta(Self::service_name(i), Some(self.namespace(i))),
            subsets: Some(vec![EndpointSubset {
                addresses: Some(addresses),
                ports: Some(vec![EndpointPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: Some("TCP".into()),
                    ..EndpointPort::default()
                }]),
                ..EndpointSubset::default()
            }]),
        }
    }
}

/// A scenario's cluster and the backend resources the pure translators make of it: the
/// benchmark's objects without an apiserver nor controllers, for measuring the data-plane
/// model at scale ([`Scenario::translated`]).
#[derive(Clone, Debug)]
pub struct Translated {
    pub cluster: midonet_dataplane::Cluster,
    /// Every Translation's resources, in Translation order (build with
    /// `RuleOrder::Pushed`).
    pub resources: Vec<midonet_translators::model::Resource>,
}

impl Translated {
    /// The resources as the backend's records (`midonet_dataplane::LiveTopology`): a
    /// chain with its rules in evaluation order, every other resource on its own; keys
    /// start with `tag`, and a record's key sorts as its resource comes in the
    /// Translations.
    pub fn records(
        &self,
        tag: &str,
    ) -> BTreeMap<String, Vec<midonet_translators::model::Resource>> {
        use midonet_dataplane::{RuleOrder, Topology};
        use midonet_translators::model::Resource;
        let topo = Topology::new(self.resources.clone(), RuleOrder::Pushed, Vec::new());
        let mut out = BTreeMap::new();
        for (i, r) in self.resources.iter().enumerate() {
            match r {
                Resource::Chain(c) => {
                    let mut rec = vec![r.clone()];
                    rec.extend(topo.rules_of(c.id).iter().cloned().map(Resource::Rule));
                    out.insert(format!("{tag}/chain/{}", c.id), rec);
                }
                Resource::Rule(_) => {}
                _ => {
                    out.insert(format!("{tag}/{i:07}"), vec![r.clone()]);
                }
            }
        }
        out
    }
}

impl Scenario {
    /// The cluster IP Service `i` gets: `10.96.0.0/12` from `10.96.0.10` on.
    pub fn cluster_ip(i: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + i as u32)
    }

    /// The whole scenario as it runs (pods with their status, Services with their cluster
    /// IP, Endpoints, namespaces, `policies` NetworkPolicies), translated by the pure
    /// translators with the default configuration. A resource the typed model refuses is
    /// an error naming it.
    pub fn translated(&self, policies: usize) -> Result<Translated, String> {
        self.translated_with(&midonet_translators::TranslatorConfig::default(), policies)
    }

    /// [`Scenario::translated`] with `cfg` (e.g. another Translation version).
    pub fn translated_with(
        &self,
        cfg: &midonet_translators::TranslatorConfig,
        policies: usize,
    ) -> Result<Translated, String> {
        use midonet_translators::model::Resource;
        use midonet_translators::policy::PolicyCluster;

        let sc = &self.scale;
        let nodes: Vec<Node> = (0..sc.nodes).map(|i| self.node(i)).collect();
        let pods: Vec<Pod> = (0..sc.pods)
            .map(|i| {
                let mut p = self.pod(i);
                p.status = serde_json::from_value(self.pod_status(i)["status"].clone()).ok();
                p
            })
            .collect();
        let services: Vec<Service> = (0..sc.services)
            .map(|i| {
                let mut s = self.service(i);
                if let Some(spec) = s.spec.as_mut() {
                    spec.cluster_ip = Some(Self::cluster_ip(i).to_string());
                }
                s
            })
            .collect();
        let endpoints: Vec<Endpoints> = (0..sc.services).map(|i| self.endpoints(i)).collect();
        let namespaces: Vec<Namespace> = (0..sc.namespaces.max(1))
            .map(|i| self.namespace_object(i))
            .collect();
        let nps: Vec<_> = (0..policies).map(|i| self.network_policy(i)).collect();
        let mut trs = midonet_translators::global(cfg);
        for n in &nodes {
            trs.extend(midonet_translators::node(cfg, n).translations);
        }
        for (i, p) in pods.iter().enumerate() {
            let node = nodes.get(self.pod_node(i));
            trs.extend(midonet_translators::pod(cfg, p, node).translations);
        }
        for (s, e) in services.iter().zip(&endpoints) {
            trs.extend(midonet_translators::service(cfg, s).translations);
            trs.extend(midonet_translators::endpoints(cfg, e, Some(s)).translations);
        }
        let view = PolicyCluster::new(&namespaces, &pods);
        // The shared address groups first: the policies' rules name them.
        trs.extend(midonet_translators::address_groups(cfg, &nps, &view));
        for np in &nps {
            trs.extend(midonet_translators::network_policy(cfg, np, &view).translations);
        }
        let resources = trs
            .iter()
            .flat_map(|t| t.resources.iter())
            .map(|e| {
                Resource::from_entry(e)
                    .map_err(|err| format!("{} (parent {:?}): {err}", e.kind, e.parent))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let cluster = midonet_dataplane::Cluster {
            nodes,
            pods,
            services,
            endpoints,
            namespaces,
            network_policies: nps,
            endpoint_slices: None,
            edge: None,
        };
        Ok(Translated { cluster, resources })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_spread_and_named_consistently() {
        let s = Scenario::new(
            "t",
            Scale {
                nodes: 3,
                pods: 10,
                services: 2,
                endpoints_per_service: 4,
                namespaces: 2,
            },
        );
        let pod = s.pod(4);
        assert_eq!(pod.metadata.namespace.as_deref(), Some("t-0"));
        let node_name = pod.spec.and_then(|p| p.node_name);
        assert_eq!(node_name, s.node(1).metadata.name);
        let node = s.node(1);
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(HOST_ID_ANNOTATION),
            Some(&s.hosts[1].1.to_string())
        );
        assert_eq!(s.endpoints(1).metadata.name, s.service(1).metadata.name);
        let subsets = s.endpoints(1).subsets.unwrap_or_default();
        let ips: Vec<&str> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        // Pods 4..8 (3 nodes): 4 and 7 are the second and third on node 1, 5 the second
        // on node 2, 6 the third on node 0.
        assert_eq!(
            ips,
            vec!["10.200.0.12", "10.200.1.11", "10.200.1.12", "10.200.2.11"]
        );
        assert_eq!(s.pod_ip(4).to_string(), "10.200.1.11");
        assert_eq!(s.pod_mac(4).as_deref(), Some("0a:58:0a:c8:01:0b"));
        assert_eq!(s.pod_mac(5), None);
        let pod = s.pod(4);
        assert_eq!(
            pod.metadata
                .annotations
                .unwrap_or_default()
                .get(MAC_ADDRESS_ANNOTATION)
                .map(String::as_str),
            Some("0a:58:0a:c8:01:0b")
        );
        assert_eq!(s.pod_status(4)["status"]["podIP"], "10.200.1.11");
    }

    #[test]
    fn the_share_of_pods_with_a_mac_is_set_by_pod_mac_every() {
        let mut s = Scenario::new("t", Scale::S);
        s.pod_mac_every = 0;
        assert!((0..10).all(|i| s.pod_mac(i).is_none()));
        assert!(s.pod(4).metadata.annotations.is_none());
        s.pod_mac_every = 3;
        let with: Vec<usize> = (0..10).filter(|&i| s.pod_mac(i).is_some()).collect();
        assert_eq!(with, vec![0, 3, 6, 9]);
    }

    #[test]
    fn a_fixed_share_of_services_is_node_port_and_load_balancer_half_of_them_local() {
        let mut s = Scenario::new("t", Scale::S);
        assert!((0..300).all(|i| s.service_type(i) == ServiceKind::ClusterIp));
        s.edge_services_every = 10;
        let kinds: Vec<ServiceKind> = (0..300).map(|i| s.service_type(i)).collect();
        let count = |k: ServiceKind| kinds.iter().filter(|x| **x == k).count();
        assert_eq!(count(ServiceKind::NodePort { local: true }), 15);
        assert_eq!(count(ServiceKind::NodePort { local: false }), 15);
        assert_eq!(count(ServiceKind::LoadBalancer { local: true }), 15);
        assert_eq!(count(ServiceKind::LoadBalancer { local: false }), 15);
        let spec = |i: usize| s.service(i).spec.unwrap_or_default();
        assert_eq!(spec(1).type_.as_deref(), Some("NodePort"));
        assert_eq!(spec(1).external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(spec(12).type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec(12).external_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(spec(3).type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec(3).external_traffic_policy, None);
    }

    #[test]
    fn each_endpoint_names_the_node_of_its_pod() {
        let s = Scenario::new("t", Scale::S);
        for i in [0, 49, 50, 1999] {
            let node = s.pod(i).spec.and_then(|p| p.node_name);
            assert_eq!(s.node_of_ip(s.pod_ip(i)), node, "pod {i}");
        }
        assert_eq!(s.node_of_ip(Ipv4Addr::new(10, 96, 0, 1)), None);
        assert_eq!(s.node_of_ip(Ipv4Addr::new(10, 200, 60, 10)), None);
        let subsets = s.endpoints(3).subsets.unwrap_or_default();
        let named = subsets[0].addresses.iter().flatten();
        assert!(named.clone().count() == 4 && named.clone().all(|a| a.node_name.is_some()));
    }
}
