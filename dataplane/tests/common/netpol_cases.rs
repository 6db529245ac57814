//! The NetworkPolicy truth tables, shared by the data-plane test (pure translators) and the
//! integration test on the real apiserver (`tests/netpol.rs`).
//!
//! The cluster is the one of the upstream Kubernetes network-policy e2e suite: namespaces
//! x, y, z labelled `ns=<name>`, pods a, b, c in each labelled `pod=<name>`, serving ports
//! 80 and 81 over TCP and UDP (container ports named `serve-<port>-<proto>`). Each case's
//! expectation is written by hand from the NetworkPolicy specification as a predicate over
//! (client, server, port, protocol); it never looks at Translations. A pod talking to
//! itself does not leave its network namespace and is not part of the matrix.
//!
//! Every server pod is also reached through a Service of its own (cluster IP
//! `P::svc_ip`, service port = pod port + 1000): NetworkPolicy acts on the load-balanced
//! destination, so each Service cell must equal the pod cell it balances onto. A
//! kube-dns-like server (`kube-system/dns`, label `k8s-app=kube-dns`, on n2, serving port 53
//! over UDP and TCP behind the Service `kube-system/kube-dns`) is a server of the matrix
//! too. And each node's host stack reaches every pod on that node whatever the policies
//! (the Kubernetes documentation: traffic from the node a pod runs on is always allowed).
//! The other direction has its own table ([`host_cases`]): each pod to each node's host
//! addresses, where a pod always reaches its own node.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use midonet_dataplane::{trace, trace_without_hops, Probe, Protocol, SocketV4, Topology};
use serde_json::json;

pub const NAMESPACES: [&str; 3] = ["x", "y", "z"];
pub const PODS: [&str; 3] = ["a", "b", "c"];
/// The ports and protocols of the matrix.
pub const PROBES: [(u16, Protocol); 4] = [
    (80, Protocol::Tcp),
    (80, Protocol::Udp),
    (81, Protocol::Tcp),
    (81, Protocol::Udp),
];

/// A pod of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct P {
    pub ns: &'static str,
    pub pod: &'static str,
}

impl P {
    pub fn is(&self, ns: &str, pod: &str) -> bool {
        self.ns == ns && self.pod == pod
    }

    pub fn name(&self) -> String {
        format!("{}/{}", self.ns, self.pod)
    }

    /// Pods a and c on node n1, b (and the DNS server) on n2: every case crosses nodes and
    /// stays on one.
    pub fn node(&self) -> &'static str {
        if self.pod == "b" || self.is_dns() {
            "n2"
        } else {
            "n1"
        }
    }

    pub fn is_dns(&self) -> bool {
        *self == DNS
    }

    pub fn ip(&self) -> Ipv4Addr {
        let n = if self.node() == "n1" { 1 } else { 2 };
        if self.is_dns() {
            return Ipv4Addr::new(10, 1, n, 53);
        }
        let ns = NAMESPACES.iter().position(|x| *x == self.ns).unwrap_or(0) as u8;
        let pod = PODS.iter().position(|x| *x == self.pod).unwrap_or(0) as u8;
        Ipv4Addr::new(10, 1, n, 10 + ns * 10 + pod)
    }

    /// The cluster IP of the pod's own Service (`kube-dns` for the DNS server).
    pub fn svc_ip(&self) -> Ipv4Addr {
        let o = self.ip().octets();
        Ipv4Addr::new(10, 96, 200 + o[2], o[3])
    }

    /// The Service's name.
    pub fn svc_name(&self) -> String {
        if self.is_dns() {
            "kube-dns".to_string()
        } else {
            format!("svc-{}", self.pod)
        }
    }

    /// The (target port, protocol) pairs the server serves.
    pub fn probes(&self) -> Vec<(u16, Protocol)> {
        if self.is_dns() {
            vec![(53, Protocol::Udp), (53, Protocol::Tcp)]
        } else {
            PROBES.to_vec()
        }
    }

    /// The service port that balances onto `target`.
    pub fn svc_port(&self, target: u16) -> u16 {
        if self.is_dns() {
            target
        } else {
            target + 1000
        }
    }

    pub fn mac(&self) -> String {
        let o = self.ip().octets();
        format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
    }
}

/// The kube-dns-like server.
pub const DNS: P = P {
    ns: "kube-system",
    pod: "dns",
};

/// Every server of the matrix: the e2e pods and the DNS server.
pub fn servers() -> Vec<P> {
    let mut out = all_pods();
    out.push(DNS);
    out
}

/// The e2e pods (the clients of the matrix).
pub fn all_pods() -> Vec<P> {
    NAMESPACES
        .iter()
        .flat_map(|ns| PODS.iter().map(move |pod| P { ns, pod }))
        .collect()
}

pub fn host_id(node: &str) -> String {
    match node {
        "n1" => "7d3a4e2c-1b0f-4a53-9d0e-2f7a4a4b9c01".into(),
        _ => "7d3a4e2c-1b0f-4a53-9d0e-2f7a4a4b9c02".into(),
    }
}

pub fn node(name: &str) -> Node {
    let n = if name == "n1" { 1 } else { 2 };
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {
            "midonet.org/host-id": host_id(name),
            "midonet.org/mac-address": format!("52:54:00:00:00:0{n}")}},
        "spec": {"podCIDR": format!("10.1.{n}.0/24")},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{n}")}]}
    }))
    .unwrap()
}

pub fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// x, y and z (labelled `ns=<name>`), and kube-system (as an apiserver v1.20 has it: no
/// labels), where the DNS server runs.
pub fn namespaces() -> Vec<Namespace> {
    NAMESPACES
        .iter()
        .map(|ns| namespace(ns, &[("ns", ns)]))
        .chain([namespace("kube-system", &[])])
        .collect()
}

/// The pod as the apiserver returns it once it is running (`status` included).
pub fn pod(p: P, labels: &[(&str, &str)]) -> Pod {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let ports: Vec<serde_json::Value> = p
        .probes()
        .into_iter()
        .map(|(port, proto)| {
            let proto = match proto {
                Protocol::Tcp => "TCP",
                Protocol::Udp => "UDP",
                // The truth tables probe TCP and UDP only.
                Protocol::Icmp => unreachable!("no ICMP probes"),
            };
            json!({"name": format!("serve-{port}-{}", proto.to_lowercase()),
                   "containerPort": port, "protocol": proto})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": p.pod, "namespace": p.ns, "labels": labels,
                     "annotations": {"midonet.org/mac-address": p.mac()}},
        "spec": {"nodeName": p.node(), "containers": [{"name": "server", "image": "agnhost",
            "ports": ports}]},
        "status": {"phase": "Running", "podIP": p.ip().to_string(),
                   "podIPs": [{"ip": p.ip().to_string()}]}
    }))
    .unwrap()
}

/// The labels of a server as created: `pod=<name>`, or `k8s-app=kube-dns`.
pub fn labels_of(p: P) -> Vec<(&'static str, &'static str)> {
    if p.is_dns() {
        vec![("k8s-app", "kube-dns")]
    } else {
        vec![("pod", p.pod)]
    }
}

/// Every server pod with its labels.
pub fn pods() -> Vec<Pod> {
    servers()
        .into_iter()
        .map(|p| pod(p, &labels_of(p)))
        .collect()
}

fn port_name(port: u16, proto: Protocol) -> String {
    format!(
        "{}-{port}",
        if proto == Protocol::Tcp { "tcp" } else { "udp" }
    )
}

fn proto_name(proto: Protocol) -> &'static str {
    if proto == Protocol::Tcp {
        "TCP"
    } else {
        "UDP"
    }
}

/// The server's Service: no selector (its Endpoints are written as the endpoints
/// controller would), one service port per served port and protocol.
pub fn service(p: P) -> Service {
    let ports: Vec<serde_json::Value> = p
        .probes()
        .into_iter()
        .map(|(port, proto)| {
            json!({"name": port_name(port, proto), "port": p.svc_port(port),
                   "targetPort": port, "protocol": proto_name(proto)})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": p.svc_name(), "namespace": p.ns},
        "spec": {"type": "ClusterIP", "clusterIP": p.svc_ip().to_string(), "ports": ports}
    }))
    .unwrap()
}

/// The server's ready Endpoints: the pod's address on each served port.
pub fn endpoints(p: P) -> Endpoints {
    let ports: Vec<serde_json::Value> = p
        .probes()
        .into_iter()
        .map(|(port, proto)| {
            json!({"name": port_name(port, proto), "port": port, "protocol": proto_name(proto)})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": p.svc_name(), "namespace": p.ns},
        "subsets": [{"addresses": [{"ip": p.ip().to_string()}], "ports": ports}]
    }))
    .unwrap()
}

pub fn policy(ns: &str, name: &str, spec: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .unwrap()
}

/// Expected reachability: (client, server, port, protocol) → allowed.
pub type Expect = fn(P, P, u16, Protocol) -> bool;

/// One case: the policies to apply and, by hand from the specification, what may connect.
pub struct Case {
    pub name: &'static str,
    pub policies: Vec<NetworkPolicy>,
    pub expect: Expect,
}

/// The cases whose cluster is the fixed one above.
pub fn static_cases() -> Vec<Case> {
    vec![
        Case {
            name: "deny all ingress",
            // Selecting every pod of x with no ingress rule isolates them for ingress.
            // Their own connections out still work: the replies are let back in.
            policies: vec![policy("x", "deny-ingress", json!({"podSelector": {}}))],
            expect: |_, s, _, _| s.ns != "x",
        },
        Case {
            name: "deny all egress",
            policies: vec![policy(
                "x",
                "deny-egress",
                json!({"podSelector": {}, "policyTypes": ["Egress"]}),
            )],
            expect: |c, _, _, _| c.ns != "x",
        },
        Case {
            name: "allow from a namespace",
            policies: vec![policy(
                "x",
                "from-y",
                json!({"podSelector": {"matchLabels": {"pod": "a"}},
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
            )],
            expect: |c, s, _, _| !s.is("x", "a") || c.ns == "y",
        },
        Case {
            name: "allow from a pod in a namespace",
            // Both selectors in one peer: pods b of the namespaces labelled ns=y.
            policies: vec![policy(
                "x",
                "from-y-b",
                json!({"podSelector": {"matchLabels": {"pod": "a"}},
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}},
                                              "podSelector": {"matchLabels": {"pod": "b"}}}]}]}),
            )],
            expect: |c, s, _, _| !s.is("x", "a") || c.is("y", "b"),
        },
        Case {
            name: "allow to a port by name",
            // The name resolves on the server pod to TCP 80; nothing else reaches x/a.
            policies: vec![policy(
                "x",
                "port-by-name",
                json!({"podSelector": {"matchLabels": {"pod": "a"}},
                       "ingress": [{"ports": [{"port": "serve-80-tcp"}]}]}),
            )],
            expect: |_, s, port, proto| !s.is("x", "a") || (port == 80 && proto == Protocol::Tcp),
        },
        Case {
            name: "allow to a port by number and protocol from a namespace",
            policies: vec![policy(
                "x",
                "udp-81-from-z",
                json!({"podSelector": {"matchLabels": {"pod": "a"}},
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}],
                                    "ports": [{"port": 81, "protocol": "UDP"}]}]}),
            )],
            expect: |c, s, port, proto| {
                !s.is("x", "a") || (c.ns == "z" && port == 81 && proto == Protocol::Udp)
            },
        },
        Case {
            name: "allow egress only to DNS",
            // x/a may only send to the DNS pods (label k8s-app=kube-dns in any namespace) on
            // port 53, UDP and TCP: it resolves names through the kube-dns Service, and
            // reaches nothing else, neither a pod nor a Service.
            policies: vec![policy(
                "x",
                "dns-only",
                json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {},
                                           "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                                   "ports": [{"port": 53, "protocol": "UDP"},
                                             {"port": 53, "protocol": "TCP"}]}]}),
            )],
            expect: |c, s, port, _| !c.is("x", "a") || (s.is_dns() && port == 53),
        },
        Case {
            name: "allow egress only to UDP 53",
            // x/a may only send to port 53 over UDP, anywhere: DNS over UDP, not over TCP.
            policies: vec![policy(
                "x",
                "udp-53-only",
                json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                       "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}),
            )],
            expect: |c, _, port, proto| !c.is("x", "a") || (port == 53 && proto == Protocol::Udp),
        },
        Case {
            name: "ipBlock with except",
            // Every pod address is in 10.1.0.0/16; y/b's address is excepted.
            policies: vec![policy(
                "x",
                "ipblock",
                json!({"podSelector": {"matchLabels": {"pod": "a"}},
                       "ingress": [{"from": [{"ipBlock": {"cidr": "10.1.0.0/16",
                                                          "except": [format!("{}/32", P { ns: "y", pod: "b" }.ip())]}}]}]}),
            )],
            expect: |c, s, _, _| !s.is("x", "a") || !c.is("y", "b"),
        },
        Case {
            name: "egress ipBlock with except",
            // x/a may send to node n1's pod subnet only, except to z/c there.
            policies: vec![policy(
                "x",
                "egress-ipblock",
                json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"ipBlock": {"cidr": "10.1.1.0/24",
                                                       "except": [format!("{}/32", P { ns: "z", pod: "c" }.ip())]}}]}]}),
            )],
            expect: |c, s, _, _| !c.is("x", "a") || (s.node() == "n1" && !s.is("z", "c")),
        },
        Case {
            name: "two policies on one pod add up",
            policies: vec![
                policy(
                    "x",
                    "from-y",
                    json!({"podSelector": {"matchLabels": {"pod": "a"}},
                           "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
                ),
                policy(
                    "x",
                    "from-z-b-on-80",
                    json!({"podSelector": {"matchLabels": {"pod": "a"}},
                           "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}},
                                                  "podSelector": {"matchLabels": {"pod": "b"}}}],
                                        "ports": [{"port": 80}]}]}),
                ),
            ],
            expect: |c, s, port, proto| {
                !s.is("x", "a")
                    || c.ns == "y"
                    || (c.is("z", "b") && port == 80 && proto == Protocol::Tcp)
            },
        },
        Case {
            name: "ingress and egress in one policy",
            // x/b: only from x pods, and only to y pods.
            policies: vec![policy(
                "x",
                "both",
                json!({"podSelector": {"matchLabels": {"pod": "b"}},
                       "policyTypes": ["Ingress", "Egress"],
                       "ingress": [{"from": [{"podSelector": {}}]}],
                       "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
            )],
            expect: |c, s, _, _| {
                (!s.is("x", "b") || c.ns == "x") && (!c.is("x", "b") || s.ns == "y")
            },
        },
    ]
}

/// A policy for the label-change cases: x/a accepts pods labelled `pod=b` from any namespace.
pub fn from_any_b() -> NetworkPolicy {
    policy(
        "x",
        "from-any-b",
        json!({"podSelector": {"matchLabels": {"pod": "a"}},
               "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "b"}}}]}]}),
    )
}

/// Before z/c is relabelled: only the b pods reach x/a.
pub fn expect_any_b(c: P, s: P, _: u16, _: Protocol) -> bool {
    !s.is("x", "a") || c.pod == "b"
}

/// After z/c is relabelled `pod=b`: z/c reaches x/a too.
pub fn expect_any_b_relabelled(c: P, s: P, _: u16, _: Protocol) -> bool {
    !s.is("x", "a") || c.pod == "b" || c.is("z", "c")
}

/// A policy for the namespace-change case: x/a accepts every pod of namespaces `ns=y`.
pub fn from_ns_y() -> NetworkPolicy {
    policy(
        "x",
        "from-ns-y",
        json!({"podSelector": {"matchLabels": {"pod": "a"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
    )
}

pub fn expect_ns_y(c: P, s: P, _: u16, _: Protocol) -> bool {
    !s.is("x", "a") || c.ns == "y"
}

/// After namespace z is labelled `ns=y` too.
pub fn expect_ns_y_and_z(c: P, s: P, _: u16, _: Protocol) -> bool {
    !s.is("x", "a") || c.ns == "y" || c.ns == "z"
}

/// One cell of the matrix: (client, server, port, protocol). The server is `ns/pod` for
/// the pod's own address and port, `svc/ns/pod` for its Service's cluster IP and service
/// port (the cell keeps the target port); the client is `ns/pod`, or `node/<name>` for a
/// node's host stack.
pub type Cell = (String, String, u16, Protocol);

/// A cell to probe: the cell, the client (`pod/ns/name` or `node/name`), the address
/// connected to, and the (client, server) pods when both are pods.
type CellProbe = (Cell, String, SocketV4, Option<(P, P)>);

/// Every cell with its server's address: the pod cells, the Service cells, and the cells
/// from each node's host stack to the pods on that node.
fn cells() -> Vec<CellProbe> {
    let mut out = Vec::new();
    for c in all_pods() {
        for s in servers() {
            if c == s {
                continue;
            }
            for (port, proto) in s.probes() {
                let from = format!("pod/{}/{}", c.ns, c.pod);
                out.push((
                    (c.name(), s.name(), port, proto),
                    from.clone(),
                    SocketV4::new(s.ip(), port),
                    Some((c, s)),
                ));
                out.push((
                    (c.name(), format!("svc/{}", s.name()), port, proto),
                    from,
                    SocketV4::new(s.svc_ip(), s.svc_port(port)),
                    Some((c, s)),
                ));
            }
        }
    }
    for s in servers() {
        for (port, proto) in s.probes() {
            let node = format!("node/{}", s.node());
            out.push((
                (node.clone(), s.name(), port, proto),
                node,
                SocketV4::new(s.ip(), port),
                None,
            ));
        }
    }
    out
}

/// The whole matrix on `topo`: a cell is true when the connection works both ways; a
/// trace that records hops and one that does not must agree on it.
pub fn matrix(topo: &Topology) -> BTreeMap<Cell, bool> {
    cells()
        .into_iter()
        .map(|(cell, from, to, _)| {
            let probe = Probe::new(from, to, cell.3, 40000);
            let works = trace(topo, &probe).map(|t| t.all_work()).unwrap_or(false);
            // The walk that records nothing takes shortcuts (jumps into a policy's chain
            // that returns at once are skipped): it must reach the same verdict.
            let fast = trace_without_hops(topo, &probe)
                .map(|t| t.all_work())
                .unwrap_or(false);
            assert_eq!(works, fast, "{cell:?}: a trace without hops disagrees");
            (cell, works)
        })
        .collect()
}

/// The expected matrix of a predicate: a Service cell as the pod cell it balances onto,
/// and a node's host always reaching its own pods.
pub fn expected(expect: Expect) -> BTreeMap<Cell, bool> {
    cells()
        .into_iter()
        .map(|(cell, _, _, pair)| {
            let allowed = match pair {
                Some((c, s)) => expect(c, s, cell.2, cell.3),
                None => true,
            };
            (cell, allowed)
        })
        .collect()
}

/// The cells where `got` differs from `want`, rendered for a failure message.
pub fn differences(want: &BTreeMap<Cell, bool>, got: &BTreeMap<Cell, bool>) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .map(|((c, s, port, proto), v)| {
            format!(
                "{c} -> {s} {port}/{proto:?}: expected {}, got {}",
                if *v { "allowed" } else { "denied" },
                if *v { "denied" } else { "allowed" }
            )
        })
        .collect()
}

/// The addresses of a node's host a pod may connect to: its interface on the node's bridge
/// (the pod CIDR's second address) and its InternalIP.
pub fn node_ips(node: &str) -> [Ipv4Addr; 2] {
    let n = if node == "n1" { 1 } else { 2 };
    [Ipv4Addr::new(10, 1, n, 2), Ipv4Addr::new(192, 168, 0, n)]
}

/// The nodes of the cluster.
pub const NODES: [&str; 2] = ["n1", "n2"];

/// The port probed on a node's host (the kubelet's).
pub const HOST_PORT: u16 = 10250;

/// Expected reachability of a node's host: (client pod, node name) → allowed.
pub type HostExpect = fn(P, &str) -> bool;

/// A case of the pod → node host table: the policies and, from the specification, which
/// pods reach which node's host (on every address of it, TCP and UDP).
pub struct HostCase {
    pub name: &'static str,
    pub policies: Vec<NetworkPolicy>,
    pub expect: HostExpect,
}

pub fn host_cases() -> Vec<HostCase> {
    vec![
        HostCase {
            name: "deny all egress: a pod still reaches its own node",
            // The pods of x may send nowhere, except to the node they run on (traffic to
            // the node where a Pod is running is always allowed); another node's host is an
            // address like any other. The pods of y and z are not selected.
            policies: vec![policy(
                "x",
                "deny-egress",
                json!({"podSelector": {}, "policyTypes": ["Egress"]}),
            )],
            expect: |c, node| c.ns != "x" || c.node() == node,
        },
        HostCase {
            name: "egress only to y: a pod still reaches its own node",
            policies: vec![policy(
                "x",
                "to-y",
                json!({"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
            )],
            expect: |c, node| !c.is("x", "a") || c.node() == node,
        },
    ]
}

/// The cells of the host table: each e2e pod to each address of each node's host, TCP and
/// UDP. The server is `node/<name>@<address>`.
fn host_cells() -> Vec<(Cell, String, SocketV4, P, &'static str)> {
    let mut out = Vec::new();
    for c in all_pods() {
        for node in NODES {
            for ip in node_ips(node) {
                for proto in [Protocol::Tcp, Protocol::Udp] {
                    out.push((
                        (c.name(), format!("node/{node}@{ip}"), HOST_PORT, proto),
                        format!("pod/{}/{}", c.ns, c.pod),
                        SocketV4::new(ip, HOST_PORT),
                        c,
                        node,
                    ));
                }
            }
        }
    }
    out
}

/// The host table on `topo`: a cell is true when the connection works both ways.
pub fn host_matrix(topo: &Topology) -> BTreeMap<Cell, bool> {
    host_cells()
        .into_iter()
        .map(|(cell, from, to, _, _)| {
            let probe = Probe::new(from, to, cell.3, 40000);
            let works = trace(topo, &probe).map(|t| t.all_work()).unwrap_or(false);
            // The walk that records nothing takes shortcuts (jumps into a policy's chain
            // that returns at once are skipped): it must reach the same verdict.
            let fast = trace_without_hops(topo, &probe)
                .map(|t| t.all_work())
                .unwrap_or(false);
            assert_eq!(works, fast, "{cell:?}: a trace without hops disagrees");
            (cell, works)
        })
        .collect()
}

/// The expected host table of a predicate.
pub fn host_expected(expect: HostExpect) -> BTreeMap<Cell, bool> {
    host_cells()
        .into_iter()
        .map(|(cell, _, _, c, node)| (cell, expect(c, node)))
        .collect()
}
