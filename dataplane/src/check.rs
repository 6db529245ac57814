//! `check`: the connectivity Kubernetes promises, evaluated on the model.
//!
//! Expectations come from Kubernetes objects alone ([`crate::cluster`]):
//! - every pod reaches every other pod's IP, on its node and across nodes, and the reply
//!   comes back from that IP;
//! - a pod reaches every port of every Service with a cluster IP (whatever its type)
//!   exactly at its ready endpoints, and the reply comes back from the cluster IP and
//!   port; this holds for an endpoint calling its own Service too (hairpin);
//! - a Service port without a ready endpoint delivers nothing;
//! - a node reaches the pods (its own and another node's), and pods reach the node.
//!
//! Sources are grouped so that the check does not need a trace per pod pair: pods whose
//! ports sit on the same bridge with the same port filters and port groups are
//! equivalent, so one representative of each group stands for it, while every pod is
//! still the destination of flows from its own group and from another one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde::Serialize;
use uuid::Uuid;

use crate::cluster::{Cluster, ServicePortRef};
use crate::packet::{Protocol, SocketV4};
use crate::topology::{Attachment, BuildProblem, Topology};
use crate::trace::{trace, Path, Probe, Trace};

/// The source port of every checked connection.
pub const CLIENT_PORT: u16 = 40000;
/// The destination port of pod-to-pod and pod-to-node connections.
pub const POD_PORT: u16 = 8080;

/// What a flow stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowKind {
    PodToPod,
    PodToService,
    Hairpin,
    NoEndpoints,
    NodeToPod,
    PodToNode,
}

impl FlowKind {
    pub const ALL: [FlowKind; 6] = [
        FlowKind::PodToPod,
        FlowKind::PodToService,
        FlowKind::Hairpin,
        FlowKind::NoEndpoints,
        FlowKind::NodeToPod,
        FlowKind::PodToNode,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FlowKind::PodToPod => "pod-to-pod",
            FlowKind::PodToService => "pod-to-service",
            FlowKind::Hairpin => "hairpin",
            FlowKind::NoEndpoints => "no-endpoints",
            FlowKind::NodeToPod => "node-to-pod",
            FlowKind::PodToNode => "pod-to-node",
        }
    }
}

/// One flow that did not behave as Kubernetes promises.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub kind: FlowKind,
    pub from: String,
    pub to: String,
    pub protocol: Protocol,
    /// What Kubernetes says should receive it (`name ip:port`), empty for "nothing".
    pub expected: Vec<String>,
    /// What the model delivered it to.
    pub reached: Vec<String>,
    pub problem: String,
    pub trace: Trace,
}

/// Counts per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub checked: usize,
    pub failed: usize,
}

/// The result of a check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub flows_checked: usize,
    pub by_kind: BTreeMap<FlowKind, Tally>,
    pub failures: Vec<Failure>,
    /// Workloads Kubernetes knows that are not plugged into any port.
    pub unplugged: Vec<String>,
    /// Endpoint addresses no workload owns: their delivery cannot be checked.
    pub unverifiable_endpoints: Vec<String>,
    pub topology_problems: Vec<BuildProblem>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A planned flow.
struct Flow {
    kind: FlowKind,
    from: String,
    to: SocketV4,
    to_name: String,
    protocol: Protocol,
    /// `None`: nothing may receive it. `Some(set)`: exactly these (name, address) do.
    expected: Option<BTreeSet<(String, SocketV4)>>,
    /// Endpoint addresses no workload owns: a path dropped on its way to one of them
    /// is not held against the network, since nothing there could have received it.
    unverifiable: BTreeSet<Ipv4Addr>,
}

impl Failure {
    fn new(flow: Flow, problem: String, reached: Vec<String>, trace: Trace) -> Failure {
        Failure {
            kind: flow.kind,
            to: format!("{} ({})", flow.to_name, flow.to),
            from: flow.from,
            protocol: flow.protocol,
            expected: expected_names(&flow.expected),
            reached,
            problem,
            trace,
        }
    }
}

/// Checks the cluster's connectivity on `topo`. `progress(done, total)` is called as
/// flows are evaluated.
pub fn check(topo: &Topology, cluster: &Cluster, progress: &mut dyn FnMut(usize, usize)) -> Report {
    let mut report = Report {
        topology_problems: topo.problems().to_vec(),
        ..Report::default()
    };
    let flows = plan(topo, cluster, &mut report);
    let total = flows.len();
    for (i, flow) in flows.into_iter().enumerate() {
        evaluate(topo, flow, &mut report);
        if i % 64 == 0 || i + 1 == total {
            progress(i + 1, total);
        }
    }
    report
}

fn plan(topo: &Topology, cluster: &Cluster, report: &mut Report) -> Vec<Flow> {
    let attachments = cluster.attachments();
    let mut pods: Vec<&Attachment> = attachments
        .iter()
        .filter(|a| a.name.starts_with("pod/"))
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let nodes: Vec<&Attachment> = attachments
        .iter()
        .filter(|a| a.name.starts_with("node/"))
        .collect();
    report.unplugged = attachments
        .iter()
        .filter(|a| topo.port_of(a).is_none())
        .map(|a| a.name.clone())
        .collect();

    // Equivalence classes of plugged-in pods, each with a representative.
    // Policies tell pods apart by labels and addresses: then every pod is its own class.
    let alone = !cluster.network_policies.is_empty();
    let class_of = |topo: &Topology, a: &Attachment| {
        class_of(topo, a).map(|mut k| {
            if alone {
                k.pod = Some(a.name.clone());
            }
            k
        })
    };
    let mut classes: BTreeMap<ClassKey, Vec<&Attachment>> = BTreeMap::new();
    for p in &pods {
        if let Some(k) = class_of(topo, p) {
            classes.entry(k).or_default().push(p);
        }
    }
    let reps: Vec<&Attachment> = classes
        .values()
        .filter_map(|m| m.first().copied())
        .collect();
    let class_of_pod: BTreeMap<&str, ClassKey> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), class_of(topo, p)?)))
        .collect();
    let by_ip: BTreeMap<Ipv4Addr, &Attachment> = attachments
        .iter()
        .flat_map(|a| a.ips.iter().map(move |ip| (*ip, a)))
        .collect();

    let mut flows = Vec::new();
    let pod_flow = |kind: FlowKind, from: &Attachment, to: &Attachment, ip: Ipv4Addr| Flow {
        kind,
        from: from.name.clone(),
        to: SocketV4::new(ip, POD_PORT),
        to_name: to.name.clone(),
        protocol: Protocol::Tcp,
        expected: Some(BTreeSet::from([(
            to.name.clone(),
            SocketV4::new(ip, POD_PORT),
        )])),
        unverifiable: BTreeSet::new(),
    };

    // Pod to pod: every pod from its own group and from another group, and every pair
    // of groups.
    for dst in &pods {
        let Some(ip) = dst.primary_ip() else { continue };
        let own = class_of_pod.get(dst.name.as_str());
        let same = own
            .and_then(|k| classes.get(k))
            .and_then(|m| m.iter().find(|p| p.name != dst.name));
        let other = classes
            .iter()
            .find(|(k, _)| Some(*k) != own && k.bridge != own.map(|o| o.bridge).unwrap_or_default())
            .and_then(|(_, m)| m.first());
        for src in same.into_iter().chain(other) {
            flows.push(pod_flow(FlowKind::PodToPod, src, dst, ip));
        }
    }
    for a in &reps {
        for b in &reps {
            if a.name != b.name {
                if let Some(ip) = b.primary_ip() {
                    flows.push(pod_flow(FlowKind::PodToPod, a, b, ip));
                }
            }
        }
    }

    // Pods to Services, and endpoints to their own Service.
    for sp in cluster.service_ports() {
        let mut expected = BTreeSet::new();
        let mut unverifiable = BTreeSet::new();
        for ep in &sp.endpoints {
            match by_ip.get(&ep.ip) {
                Some(a) => {
                    expected.insert((a.name.clone(), *ep));
                }
                None => {
                    unverifiable.insert(ep.ip);
                    report
                        .unverifiable_endpoints
                        .push(format!("{} → {ep}", sp.display()));
                }
            }
        }
        let (kind, expect) = if sp.endpoints.is_empty() {
            (FlowKind::NoEndpoints, None)
        } else {
            (FlowKind::PodToService, Some(expected.clone()))
        };
        for src in &reps {
            flows.push(service_flow(
                kind,
                &src.name,
                &sp,
                expect.clone(),
                &unverifiable,
            ));
        }
        for (name, _) in &expected {
            if name.starts_with("pod/") {
                flows.push(service_flow(
                    FlowKind::Hairpin,
                    name,
                    &sp,
                    Some(expected.clone()),
                    &unverifiable,
                ));
            }
        }
    }

    // Nodes and pods.
    for node in &nodes {
        let own_bridge = class_bridge(topo, node);
        let local = pods
            .iter()
            .find(|p| class_bridge(topo, p) == own_bridge && own_bridge.is_some());
        let remote = pods
            .iter()
            .find(|p| class_bridge(topo, p) != own_bridge && class_bridge(topo, p).is_some());
        for pod in local.into_iter().chain(remote) {
            if let Some(ip) = pod.primary_ip() {
                flows.push(pod_flow(FlowKind::NodeToPod, node, pod, ip));
            }
            for ip in node.ips.iter().take(2) {
                flows.push(pod_flow(FlowKind::PodToNode, pod, node, *ip));
            }
        }
    }
    restrict_to_policies(cluster, &attachments, &mut flows);
    flows
}

/// With NetworkPolicies, only what they allow may be received ([`crate::policy`]).
fn restrict_to_policies(cluster: &Cluster, attachments: &[Attachment], flows: &mut [Flow]) {
    if cluster.network_policies.is_empty() {
        return;
    }
    let policies = crate::policy::Policies {
        policies: &cluster.network_policies,
        namespaces: &cluster.namespaces,
    };
    fn party<'a>(cluster: &'a Cluster, name: &'a str, ip: Ipv4Addr) -> crate::policy::Party<'a> {
        let pod = name.strip_prefix("pod/").and_then(|rest| {
            let (ns, pod) = rest.split_once('/')?;
            cluster.pods.iter().find(|p| {
                p.metadata.namespace.as_deref() == Some(ns)
                    && p.metadata.name.as_deref() == Some(pod)
                    && p.spec.as_ref().and_then(|s| s.host_network) != Some(true)
            })
        });
        match (pod, name.strip_prefix("node/")) {
            (Some(p), _) => crate::policy::Party::Pod(p, ip),
            (None, Some(node)) => crate::policy::Party::Node(node, ip),
            (None, None) => crate::policy::Party::Address(ip),
        }
    }
    for flow in flows.iter_mut() {
        let Some(from_ip) = attachments
            .iter()
            .find(|a| a.name == flow.from)
            .and_then(Attachment::primary_ip)
        else {
            continue;
        };
        let client = party(cluster, &flow.from, from_ip);
        if let Some(expected) = flow.expected.as_mut() {
            expected.retain(|(name, to)| {
                policies.allows(client, party(cluster, name, to.ip), to.port, flow.protocol)
            });
            if expected.is_empty() {
                flow.expected = None;
            }
        }
    }
}

fn service_flow(
    kind: FlowKind,
    from: &str,
    sp: &ServicePortRef,
    expected: Option<BTreeSet<(String, SocketV4)>>,
    unverifiable: &BTreeSet<Ipv4Addr>,
) -> Flow {
    Flow {
        kind,
        from: from.to_string(),
        to: sp.address,
        to_name: sp.display(),
        protocol: sp.protocol,
        expected,
        unverifiable: unverifiable.clone(),
    }
}

/// What makes two pods equivalent sources: the bridge and everything on their port that
/// filters or groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct ClassKey {
    bridge: Uuid,
    inbound: Option<Uuid>,
    outbound: Option<Uuid>,
    groups: BTreeSet<Uuid>,
    pod: Option<String>,
}

fn class_of(topo: &Topology, a: &Attachment) -> Option<ClassKey> {
    let port_id = topo.port_of(a)?;
    let port = topo.ports.get(&port_id)?;
    Some(ClassKey {
        bridge: port.parent,
        inbound: port.inbound_filter_id,
        outbound: port.outbound_filter_id,
        groups: topo.port_groups.get(&port_id).cloned().unwrap_or_default(),
        pod: None,
    })
}

fn class_bridge(topo: &Topology, a: &Attachment) -> Option<Uuid> {
    class_of(topo, a).map(|k| k.bridge)
}

fn evaluate(topo: &Topology, flow: Flow, report: &mut Report) {
    report.flows_checked += 1;
    let tally = report.by_kind.entry(flow.kind).or_default();
    tally.checked += 1;
    let probe = Probe {
        from: flow.from.clone(),
        to: flow.to,
        protocol: flow.protocol,
        src_port: CLIENT_PORT,
    };
    let t = match trace(topo, &probe) {
        Ok(t) => t,
        Err(e) => {
            // The source is not plugged in: reported once in `unplugged`, and every flow
            // from it fails.
            tally.failed += 1;
            let empty = Trace {
                from: probe.from,
                sent: crate::packet::FlowTuple {
                    protocol: probe.protocol,
                    src: SocketV4::new(Ipv4Addr::UNSPECIFIED, CLIENT_PORT),
                    dst: probe.to,
                },
                paths: Vec::new(),
                truncated: false,
            };
            report
                .failures
                .push(Failure::new(flow, e.to_string(), Vec::new(), empty));
            return;
        }
    };
    let reached: BTreeSet<(String, SocketV4)> = t.candidates().into_iter().collect();
    // The paths that count: not those dropped on their way to an endpoint no workload
    // owns.
    let counted: Vec<&Path> = t
        .paths
        .iter()
        .filter(|p| {
            p.forward.delivered_to.is_some()
                || !p
                    .forward
                    .dropped_packet
                    .is_some_and(|d| flow.unverifiable.contains(&d.dst.ip))
        })
        .collect();
    let problem = match &flow.expected {
        None => (!reached.is_empty()).then(|| "delivered, but no endpoint is ready".to_string()),
        Some(want) => {
            if &reached != want {
                Some(if reached.is_empty() {
                    let why = counted
                        .iter()
                        .find_map(|p| p.forward.drop_reason.clone())
                        .unwrap_or_default();
                    format!("not delivered: {why}")
                } else {
                    "delivered to other workloads than Kubernetes says".to_string()
                })
            } else if let Some(p) = counted
                .iter()
                .find(|p| p.forward.delivered_to.is_some() && !p.works)
            {
                Some(match (&p.reply, p.client_sees) {
                    (Some(r), None) => format!(
                        "the reply does not come back: {}",
                        r.drop_reason
                            .clone()
                            .unwrap_or_else(|| "delivered elsewhere".into())
                    ),
                    (_, Some(seen)) => {
                        format!("the client sees the reply from {seen}, not {}", flow.to)
                    }
                    (None, None) => "no reply".to_string(),
                })
            } else if counted.iter().any(|p| p.forward.delivered_to.is_none()) {
                Some("some paths drop the connection".to_string())
            } else {
                None
            }
        }
    };
    if let Some(problem) = problem {
        tally.failed += 1;
        let reached = reached.iter().map(|(n, s)| format!("{n} {s}")).collect();
        report
            .failures
            .push(Failure::new(flow, problem, reached, t));
    }
}

fn expected_names(e: &Option<BTreeSet<(String, SocketV4)>>) -> Vec<String> {
    e.iter()
        .flatten()
        .map(|(n, s)| format!("{n} {s}"))
        .collect()
}
