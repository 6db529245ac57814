//! What NetworkPolicies allow, from the Kubernetes objects alone: the expectation side
//! of `check` once a cluster has policies.
//!
//! Written from the NetworkPolicy specification (`networking.k8s.io/v1`), independently of
//! the translator: a connection from a client to a server on a port is allowed when
//!
//! - the server is not a pod on the pod network, or no policy of its namespace selects it
//!   for Ingress, or some such policy has an ingress rule whose peers match the client and
//!   whose ports match the port (a named port resolved on the server pod); and
//! - the client is not a pod on the pod network, or no policy of its namespace selects it
//!   for Egress, or some such policy has an egress rule whose peers match the server and
//!   whose ports match (a named port resolved on the server pod, if it is one).
//!
//! Traffic between a pod and the node it runs on is allowed both ways whatever the policies
//! (the specification: traffic to and from the node where a Pod is running is always
//! allowed). Replies of an allowed connection are always allowed (policies are stateful).
//! Peers: `podSelector` alone picks pods of the policy's namespace, `namespaceSelector`
//! alone every pod of the matching namespaces, both the matching pods of the matching
//! namespaces; selectors never match something that is not a pod on the pod network;
//! `ipBlock` matches the address (a pod's by its IP) inside the CIDR and outside every
//! `except`. Policy types: `policyTypes`, or Ingress plus Egress when there are egress rules.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::packet::Protocol;
use crate::topology::contains;
use midonet_translators::model::Ipv4Cidr;

/// One end of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Party<'a> {
    /// A pod on the pod network, with its address.
    Pod(&'a Pod, Ipv4Addr),
    /// A node's host stack (by node name) at one of its addresses. NetworkPolicy always
    /// allows traffic between a node and the pods running on it (kubelet probes, a pod
    /// reaching its node's services); to the other pods a node is an address like any other.
    Node(&'a str, Ipv4Addr),
    /// Anything else: a host-network pod, an outside address.
    Address(Ipv4Addr),
}

/// What the policies can tell apart about a client pod ([`Policies::client_key`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClientKey {
    namespace: String,
    labels: BTreeMap<String, String>,
    node: Option<String>,
    ip_blocks: Vec<usize>,
}

impl Party<'_> {
    /// Whether this is the host stack of the node `pod` runs on.
    fn is_node_of(&self, pod: &Pod) -> bool {
        let Party::Node(node, _) = self else {
            return false;
        };
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(*node)
    }

    fn ip(&self) -> Ipv4Addr {
        match self {
            Party::Pod(_, ip) | Party::Node(_, ip) | Party::Address(ip) => *ip,
        }
    }
}

/// The policies and namespaces of a cluster.
#[derive(Clone, Copy, Debug)]
pub struct Policies<'a> {
    pub policies: &'a [NetworkPolicy],
    pub namespaces: &'a [Namespace],
}

fn labels_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// `matchLabels` and `matchExpressions`; an operator the spec does not know matches nothing.
fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && sel.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

fn cidr(raw: &str) -> Option<Ipv4Cidr> {
    let (addr, len) = raw.split_once('/')?;
    Ipv4Cidr::new(addr.parse().ok()?, len.parse().ok()?)
}

impl Policies<'_> {
    fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.namespaces
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .map(|n| labels_of(&n.metadata))
            .unwrap_or_default()
    }

    fn types(np: &NetworkPolicy) -> (bool, bool) {
        let Some(spec) = np.spec.as_ref() else {
            return (false, false);
        };
        match &spec.policy_types {
            Some(t) if !t.is_empty() => (
                t.iter().any(|t| t == "Ingress"),
                t.iter().any(|t| t == "Egress"),
            ),
            _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
        }
    }

    /// The policies selecting `pod` for ingress (`true`) or egress (`false`).
    fn selecting<'p>(&'p self, pod: &Pod, ingress: bool) -> Vec<&'p NetworkPolicy> {
        self.policies
            .iter()
            .filter(|np| np.metadata.namespace.as_deref().unwrap_or("default") == namespace_of(pod))
            .filter(|np| {
                let (i, e) = Self::types(np);
                if ingress {
                    i
                } else {
                    e
                }
            })
            .filter(|np| {
                let sel = np
                    .spec
                    .as_ref()
                    .and_then(|s| s.pod_selector.clone())
                    .unwrap_or_default();
                matches(&sel, &labels_of(&pod.metadata))
            })
            .collect()
    }

    fn peer_matches(&self, policy_ns: &str, peer: &NetworkPolicyPeer, other: Party<'_>) -> bool {
        if let Some(block) = &peer.ip_block {
            let ip = other.ip();
            let Some(c) = cidr(&block.cidr) else {
                return false;
            };
            return contains(c, ip)
                && !block
                    .except
                    .iter()
                    .flatten()
                    .filter_map(|e| cidr(e))
                    .any(|e| contains(e, ip));
        }
        let Party::Pod(pod, _) = other else {
            return false;
        };
        if peer.pod_selector.is_none() && peer.namespace_selector.is_none() {
            return false;
        }
        let ns_ok = match &peer.namespace_selector {
            None => namespace_of(pod) == policy_ns,
            Some(sel) => matches(sel, &self.namespace_labels(namespace_of(pod))),
        };
        ns_ok
            && peer
                .pod_selector
                .as_ref()
                .is_none_or(|sel| matches(sel, &labels_of(&pod.metadata)))
    }

    fn peers_match(
        &self,
        policy_ns: &str,
        peers: Option<&[NetworkPolicyPeer]>,
        other: Party<'_>,
    ) -> bool {
        match peers {
            None | Some([]) => true,
            Some(peers) => peers.iter().any(|p| self.peer_matches(policy_ns, p, other)),
        }
    }

    /// Named ports resolve on `server` (a pod, its containers' and sidecars' ports); a
    /// name on anything else matches nothing.
    fn ports_match(
        ports: Option<&[NetworkPolicyPort]>,
        server: Party<'_>,
        port: u16,
        proto: Protocol,
    ) -> bool {
        let Some(ports) = ports.filter(|p| !p.is_empty()) else {
            return true;
        };
        ports.iter().any(|p| {
            let p_proto = match p.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                _ => return false,
            };
            if p_proto != proto {
                return false;
            }
            match &p.port {
                None => true,
                Some(IntOrString::Int(n)) => {
                    let end = p.end_port.unwrap_or(*n);
                    (*n..=end).contains(&i32::from(port))
                }
                Some(IntOrString::String(name)) => {
                    let Party::Pod(pod, _) = server else {
                        return false;
                    };
                    pod.spec.iter().flat_map(containers_serving).any(|c| {
                        c.ports.iter().flatten().any(|cp| {
                            cp.name.as_deref() == Some(name.as_str())
                                && cp.container_port == i32::from(port)
                                && cp.protocol.as_deref().unwrap_or("TCP")
                                    == p.protocol.as_deref().unwrap_or("TCP")
                        })
                    })
                }
            }
        })
    }

    /// Everything [`Policies::allows`] reads of a pod as a *client*: its namespace, its
    /// labels, its node, and which `ipBlock` peers (numbered in policy order) match its
    /// address. Two pods with the same key get the same verdict from every server.
    pub(crate) fn client_key(&self, pod: &Pod, ip: Ipv4Addr) -> ClientKey {
        let mut blocks = Vec::new();
        let peers = self
            .policies
            .iter()
            .filter_map(|np| np.spec.as_ref())
            .flat_map(|s| {
                let from = s
                    .ingress
                    .iter()
                    .flatten()
                    .flat_map(|r| r.from.iter().flatten());
                let to = s
                    .egress
                    .iter()
                    .flatten()
                    .flat_map(|r| r.to.iter().flatten());
                from.chain(to)
            });
        for (i, peer) in peers.enumerate() {
            if peer.ip_block.is_some() && self.peer_matches("", peer, Party::Address(ip)) {
                blocks.push(i);
            }
        }
        ClientKey {
            namespace: namespace_of(pod).to_string(),
            labels: labels_of(&pod.metadata),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            ip_blocks: blocks,
        }
    }

    /// Whether a new connection from `client` to `server` on `port`/`proto` is allowed.
    pub fn allows(&self, client: Party<'_>, server: Party<'_>, port: u16, proto: Protocol) -> bool {
        let ingress_ok = match server {
            Party::Address(_) | Party::Node(..) => true,
            Party::Pod(pod, _) if client.is_node_of(pod) => true,
            Party::Pod(pod, _) => {
                let selecting = self.selecting(pod, true);
                selecting.is_empty()
                    || selecting.iter().any(|np| {
                        let ns = np.metadata.namespace.as_deref().unwrap_or("default");
                        np.spec
                            .iter()
                            .flat_map(|s| s.ingress.iter().flatten())
                            .any(|r| {
                                self.peers_match(ns, r.from.as_deref(), client)
                                    && Self::ports_match(r.ports.as_deref(), server, port, proto)
                            })
                    })
            }
        };
        let egress_ok = match client {
            Party::Address(_) | Party::Node(..) => true,
            Party::Pod(pod, _) if server.is_node_of(pod) => true,
            Party::Pod(pod, _) => {
                let selecting = self.selecting(pod, false);
                selecting.is_empty()
                    || selecting.iter().any(|np| {
                        let ns = np.metadata.namespace.as_deref().unwrap_or("default");
                        np.spec
                            .iter()
                            .flat_map(|s| s.egress.iter().flatten())
                            .any(|r| {
                                self.peers_match(ns, r.to.as_deref(), server)
                                    && Self::ports_match(r.ports.as_deref(), server, port, proto)
                            })
                    })
            }
        };
        ingress_ok && egress_ok
    }
}

/// The containers of a pod that serve traffic: its containers, and its sidecars (init
/// containers with `restartPolicy: Always`), which run beside them for the pod's life.
fn containers_serving(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    let sidecars = spec.init_containers.iter().flatten();
    let sidecars = sidecars.filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers.iter().chain(sidecars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]}
        }))
        .unwrap()
    }

    fn ns(name: &str, labels: serde_json::Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    fn np(ns: &str, spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": ns}, "spec": spec}))
            .unwrap()
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn without_policies_everything_is_allowed() {
        let a = pod("x", "a", json!({}));
        let p = Policies {
            policies: &[],
            namespaces: &[],
        };
        assert!(p.allows(
            Party::Pod(&a, ip("10.0.0.1")),
            Party::Address(ip("1.1.1.1")),
            80,
            Protocol::Tcp
        ));
    }

    #[test]
    fn selectors_ports_and_blocks() {
        let a = pod("x", "a", json!({"pod": "a"}));
        let b = pod("y", "b", json!({"pod": "b"}));
        let c = pod("y", "c", json!({"pod": "c"}));
        let namespaces = [ns("x", json!({"ns": "x"})), ns("y", json!({"ns": "y"}))];
        let policies = [np(
            "x",
            json!({"podSelector": {"matchLabels": {"pod": "a"}},
                   "ingress": [
                     {"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}},
                                "podSelector": {"matchLabels": {"pod": "b"}}}],
                      "ports": [{"port": "http"}]},
                     {"from": [{"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24"]}}]}]}),
        )];
        let p = Policies {
            policies: &policies,
            namespaces: &namespaces,
        };
        let (pa, pb, pc) = (
            Party::Pod(&a, ip("10.0.0.1")),
            Party::Pod(&b, ip("10.0.0.2")),
            Party::Pod(&c, ip("10.0.0.3")),
        );
        assert!(p.allows(pb, pa, 8080, Protocol::Tcp));
        assert!(!p.allows(pb, pa, 8081, Protocol::Tcp));
        assert!(!p.allows(pb, pa, 8080, Protocol::Udp));
        assert!(!p.allows(pc, pa, 8080, Protocol::Tcp));
        assert!(p.allows(Party::Address(ip("192.168.2.9")), pa, 1, Protocol::Udp));
        assert!(!p.allows(Party::Address(ip("192.168.1.9")), pa, 1, Protocol::Udp));
        // Not selected: open.
        assert!(p.allows(pa, pc, 1, Protocol::Tcp));
    }

    #[test]
    fn named_ports_resolve_on_sidecars_not_on_plain_init_containers() {
        let server: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "x", "labels": {"pod": "a"}},
            "spec": {"containers": [{"name": "app"}],
                     "initContainers": [
                         {"name": "proxy", "restartPolicy": "Always",
                          "ports": [{"name": "tls", "containerPort": 8443}]},
                         {"name": "setup", "ports": [{"name": "setup", "containerPort": 99}]}]}
        }))
        .unwrap();
        let policies = [np(
            "x",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": "tls"}, {"port": "setup"}]}]}),
        )];
        let p = Policies {
            policies: &policies,
            namespaces: &[],
        };
        let client = Party::Address(ip("192.168.0.1"));
        let a = Party::Pod(&server, ip("10.0.0.1"));
        assert!(
            p.allows(client, a, 8443, Protocol::Tcp),
            "a sidecar's named port"
        );
        assert!(
            !p.allows(client, a, 99, Protocol::Tcp),
            "a plain init container's"
        );
    }

    #[test]
    fn a_node_always_reaches_its_own_pods_only() {
        let mut a = pod("x", "a", json!({}));
        a.spec = Some(serde_json::from_value(json!({"nodeName": "n1", "containers": []})).unwrap());
        let policies = [np("x", json!({"podSelector": {}}))];
        let p = Policies {
            policies: &policies,
            namespaces: &[],
        };
        let pa = Party::Pod(&a, ip("10.0.0.1"));
        // Deny-all ingress: the pod's own node still reaches it, another node does not,
        // and neither does the same address when it is not a node's.
        assert!(p.allows(Party::Node("n1", ip("10.0.0.2")), pa, 80, Protocol::Tcp));
        assert!(!p.allows(Party::Node("n2", ip("10.0.1.2")), pa, 80, Protocol::Tcp));
        assert!(!p.allows(Party::Address(ip("10.0.0.2")), pa, 80, Protocol::Tcp));
    }

    #[test]
    fn a_pod_always_reaches_its_own_node_only() {
        let mut a = pod("x", "a", json!({}));
        a.spec = Some(serde_json::from_value(json!({"nodeName": "n1", "containers": []})).unwrap());
        let policies = [np(
            "x",
            json!({"podSelector": {}, "policyTypes": ["Egress"]}),
        )];
        let p = Policies {
            policies: &policies,
            namespaces: &[],
        };
        let pa = Party::Pod(&a, ip("10.0.0.1"));
        // Deny-all egress: the pod still reaches its own node, on any of its addresses, not
        // another node, nor the same address when it is not a node's.
        assert!(p.allows(pa, Party::Node("n1", ip("10.0.0.2")), 10250, Protocol::Tcp));
        assert!(p.allows(pa, Party::Node("n1", ip("192.168.0.1")), 53, Protocol::Udp));
        assert!(!p.allows(pa, Party::Node("n2", ip("10.0.1.2")), 10250, Protocol::Tcp));
        assert!(!p.allows(pa, Party::Address(ip("10.0.0.2")), 10250, Protocol::Tcp));
    }

    #[test]
    fn egress_isolation_and_default_types() {
        let a = pod("x", "a", json!({}));
        let policies = [np(
            "x",
            json!({"podSelector": {}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}),
        )];
        let p = Policies {
            policies: &policies,
            namespaces: &[],
        };
        let pa = Party::Pod(&a, ip("10.0.0.1"));
        assert!(p.allows(pa, Party::Address(ip("8.8.8.8")), 53, Protocol::Udp));
        assert!(!p.allows(pa, Party::Address(ip("8.8.8.8")), 53, Protocol::Tcp));
        // Egress rules present: Ingress and Egress, and ingress has no rule: isolated.
        assert!(!p.allows(Party::Address(ip("8.8.8.8")), pa, 80, Protocol::Tcp));
    }
}
