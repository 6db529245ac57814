//! `check`: the connectivity Kubernetes promises, evaluated on the model.
//!
//! Expectations come from Kubernetes objects alone ([`crate::cluster`]):
//! - every pod reaches every other pod's IP, on its node and across nodes, and the reply
//!   comes back from that IP;
//! - a pod reaches every port of every Service with a cluster IP (whatever its type)
//!   exactly at its ready endpoints, and the reply comes back from the cluster IP and
//!   port; this holds for an endpoint calling its own Service too (hairpin);
//! - a Service port without a ready endpoint delivers nothing; with
//!   `internalTrafficPolicy: Local` a client reaches the cluster IP exactly at the
//!   endpoints on its own node, and nothing on a node without one;
//! - a node reaches the pods (its own and another node's), and pods reach the node;
//! - with an edge ([`crate::outside`]): an outside client, behind each uplink, reaches every
//!   Service port at each outside address exactly at the endpoints Kubernetes allows (with
//!   `externalTrafficPolicy: Local` seeing the client's own address), the reply from the
//!   address used; every pod class reaches an outside address;
//! - with an edge, `sessionAffinity: ClientIP` at an external or ingress IP and a TCP port:
//!   an outside client's second connection (another source port, through each uplink)
//!   lands on the endpoint its first reached, in every history of the random choices
//!   (`trace::trace_sequence`: the second sees the first's flow state).
//!
//! What Kubernetes promises that the network does not serve by design is listed in
//! `not_served`, not checked: `sessionAffinity: ClientIP` everywhere else (the cluster
//! IP, pods' connections, node ports, UDP ports, a cluster without an edge: each
//! connection is balanced on its own, `translators/MAPPING.md`).
//!
//! ## Equivalent sources
//!
//! The check does not trace every pod pair: pods that nothing in the topology can tell
//! apart as the source of a flow are grouped, and one representative's trace stands for
//! the flow from each of them; every pod is still the destination of flows from its own
//! group and from another one, and every endpoint calls its own Service itself.
//!
//! What a walk reads of its source is its port (the bridge it sits on, the port's filters,
//! the port groups it is in), its link (on-link network and gateway), its MAC and address
//! (its ARP frames, MAC learning and resolution on the bridge, the bridge's static MAC and
//! ARP entries), and the address, port and MAC through every condition that looks at them
//! on the way, its ARP frames' included: rule conditions (`nwSrc`/`nwDst` prefixes,
//! address groups, in/out ports, `traversedDevice`, `dlSrc`/`dlDst` with masks, the
//! addresses an ICMP error quotes), NAT target ranges, route prefixes, and the
//! connection's NAT and conntrack state (keyed by tuple, so it treats every source alike).
//! Hence two steps:
//!
//! 1. A **class** is fixed once: pods with the same bridge, port filters, port groups,
//!    link, and whether the bridge's static MAC table sends their MAC to their own port
//!    and its ARP table answers their address with their own MAC. A pod with any other
//!    static entry for it, or more than one address, is a class of its own. With
//!    NetworkPolicies the expectations differ too: the class also holds everything the
//!    policies read of a client (`policy::Policies::client_key`: namespace, labels, node,
//!    the `ipBlock` peers its address falls in).
//! 2. **Per flow**, the representative's trace records the chains it ran, the guards their
//!    index let it skip (`chainrules`: a jump to a policy's chain whose guard returns at
//!    once is not run), and the routers it routed through (`engine::Consulted`). A member
//!    is split off and traced itself if any rule of those chains, any of those guards or
//!    any route of those routers treats it differently: an address prefix, address group,
//!    NAT target range, in/out port set, traversed device or MAC condition that holds it
//!    but not the representative, or the other way round (`told_apart`). A prefix
//!    holding every member or none is skipped at once; results are memoised per class and
//!    chain or router, since most flows consult the same few chains. E.g. an endpoint of
//!    a Service is split off for the flows to that Service (its hairpin SNAT rule names
//!    its address; the DNAT targets hold it) and stays grouped for every other flow.
//!
//! Every other step of the walk is the same for all members with the representative's
//! address and port renamed, so the verdict, the delivery, the reply path and the source
//! address the client sees are the same.
//!
//! A flow whose trace meets something the model does not simulate (a rule it refuses)
//! fails, naming it. A path dropped on its way to an endpoint no workload owns, or to one
//! the NetworkPolicies refuse the client, does not count against the flow: nothing there
//! could receive it, or Kubernetes balances onto it and the policy drops it. Flows are evaluated in parallel, traced without
//! hops (a failure is traced again with them for the report); the outcome does not depend
//! on the threads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;

use serde::Serialize;
use uuid::Uuid;

use crate::cluster::{Cluster, ServicePortRef};
use crate::engine::Consulted;
use crate::packet::{Protocol, SocketV4};
use crate::topology::{prefix_mask, Attachment, BuildProblem, Topology};
use crate::trace::{trace, trace_consulting, trace_sequence, Path, Probe, Trace};
use midonet_translators::affinity::not_sticky;
use midonet_translators::model::Rule;
use midonet_translators::service_spec::{cluster_ipv4, service_ips, valid_ports};

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
    /// With an edge: an outside client to a Service's external, ingress or node address.
    OutsideToService,
    /// With an edge: a pod to an address outside the cluster.
    PodToOutside,
    /// A node's host, forwarding what reached its own address at a node port (masqueraded
    /// to its address on the node's bridge), to that node port.
    NodeToNodePort,
    /// With an edge: an outside client's second connection (another source port) to a
    /// sticky address and port (`sessionAffinity: ClientIP` at an external or ingress IP,
    /// TCP) lands on the endpoint of its first.
    OutsideSticky,
}

impl FlowKind {
    pub const ALL: [FlowKind; 10] = [
        FlowKind::PodToPod,
        FlowKind::PodToService,
        FlowKind::Hairpin,
        FlowKind::NoEndpoints,
        FlowKind::NodeToPod,
        FlowKind::PodToNode,
        FlowKind::OutsideToService,
        FlowKind::PodToOutside,
        FlowKind::NodeToNodePort,
        FlowKind::OutsideSticky,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FlowKind::PodToPod => "pod-to-pod",
            FlowKind::PodToService => "pod-to-service",
            FlowKind::Hairpin => "hairpin",
            FlowKind::NoEndpoints => "no-endpoints",
            FlowKind::NodeToPod => "node-to-pod",
            FlowKind::PodToNode => "pod-to-node",
            FlowKind::OutsideToService => "outside-to-service",
            FlowKind::PodToOutside => "pod-to-outside",
            FlowKind::NodeToNodePort => "node-to-node-port",
            FlowKind::OutsideSticky => "outside-sticky",
        }
    }

    /// Whether every cluster has flows of this kind: the outside ones need an edge, the
    /// node-port ones a NodePort or LoadBalancer Service, the sticky ones a Service with
    /// `sessionAffinity: ClientIP` and an external or ingress IP too.
    pub fn in_every_cluster(self) -> bool {
        !matches!(
            self,
            FlowKind::OutsideToService
                | FlowKind::PodToOutside
                | FlowKind::NodeToNodePort
                | FlowKind::OutsideSticky
        )
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
    /// What Kubernetes promises that the network does not serve by design (not checked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_served: Vec<String>,
    pub topology_problems: Vec<BuildProblem>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A planned flow.
#[derive(Clone)]
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
    /// Endpoint addresses the NetworkPolicies refuse this client: a path dropped on its
    /// way to one is what Kubernetes promises (the Service balances onto it, the policy
    /// drops it), as the flow probe judges too.
    refused: BTreeSet<Ipv4Addr>,
    /// The class `from` represents (an index into the plan's classes): the flow stands
    /// for the same flow from each other member its trace cannot tell apart from `from`.
    class: Option<usize>,
    /// The source address, if not `from`'s own: an outside client behind an uplink.
    src_ip: Option<Ipv4Addr>,
    /// The receiver must see `src_ip` as the source (`externalTrafficPolicy: Local`).
    keep_source: bool,
    /// `from` (a node's host) forwards the packet to its gateway, its own address as the
    /// destination included (`Probe::host_forward`).
    host_forward: bool,
    /// [`FlowKind::OutsideSticky`]: where the client's second connection comes from (an
    /// upstream: the same client behind any uplink).
    then_from: Option<String>,
}

/// A class of equivalent source pods; the first member is its representative.
struct Class {
    members: Vec<Member>,
    /// The smallest and largest member address, as integers.
    span: (u32, u32),
}

/// A pod as a source: what a trace can tell apart about it besides its class key.
struct Member {
    name: String,
    ip: Ipv4Addr,
    port: Uuid,
    mac: midonet_translators::model::MacAddr,
}

/// What one flow's evaluation adds to the report: one entry per flow evaluated (the
/// planned one and the members its trace could not stand for).
type Outcome = Vec<(FlowKind, Option<Failure>)>;

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
    let (flows, classes) = plan(topo, cluster, &mut report);
    let total = flows.len();
    // Flows are independent: batches of them are evaluated on every core, and their
    // outcomes are added in plan order, so the report does not depend on the threads.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16);
    let batch = 256 * threads;
    let mut done = 0;
    // Each thread keeps its memo from batch to batch: the same few chains come back.
    let mut memos: Vec<Memo> = (0..threads).map(|_| Memo::default()).collect();
    for chunk in flows.chunks(batch) {
        let per_thread = chunk.len().div_ceil(threads).max(1);
        let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .chunks(per_thread)
                .zip(memos.iter_mut())
                .map(|(part, memo)| {
                    let classes = &classes;
                    scope.spawn(move || {
                        part.iter()
                            .flat_map(|f| evaluate(topo, classes, f.clone(), memo))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(v) => v,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        });
        for (kind, failure) in outcomes.into_iter().flatten() {
            report.flows_checked += 1;
            let tally = report.by_kind.entry(kind).or_default();
            tally.checked += 1;
            if let Some(f) = failure {
                tally.failed += 1;
                report.failures.push(f);
            }
        }
        done += chunk.len();
        progress(done, total);
    }
    report
}

fn plan(topo: &Topology, cluster: &Cluster, report: &mut Report) -> (Vec<Flow>, Vec<Class>) {
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
    let pod_objects = pod_objects(cluster);
    let classes = Classes::of(topo, cluster, &pods, &pod_objects);
    let by_ip: BTreeMap<Ipv4Addr, &Attachment> = attachments
        .iter()
        .flat_map(|a| a.ips.iter().map(move |ip| (*ip, a)))
        .collect();
    let mut flows = pod_to_pod_flows(&pods, &classes);
    flows.extend(service_flows(
        cluster,
        &classes,
        &by_ip,
        &pod_objects,
        report,
    ));
    flows.extend(node_flows(topo, &nodes, &pods));
    flows.extend(node_port_flows(cluster, &by_ip, report));
    report.not_served.extend(not_served(cluster));
    if let Some(edge) = &cluster.edge {
        flows.extend(outside_flows(cluster, edge, &classes.reps, &by_ip, report));
    }
    restrict_to_policies(cluster, &attachments, &mut flows);
    (flows, classes.list)
}

/// What the Services ask that the network does not serve by design: a client's
/// stickiness to one endpoint (`sessionAffinity: ClientIP`) everywhere but from outside,
/// through the edge, at the TCP ports of external and load-balancer ingress IPs
/// (`midonet_translators::affinity`, the design's scope).
fn not_served(cluster: &Cluster) -> Vec<String> {
    cluster
        .services
        .iter()
        .filter_map(|s| {
            let m = &s.metadata;
            let cluster_ip = cluster_ipv4(s).ok().flatten()?;
            let ports = valid_ports(s, |_| {});
            let ips = service_ips(s, cluster_ip, |_| {});
            let loose = not_sticky(cluster.edge.is_some(), s, &ports, cluster_ip, &ips);
            (!loose.is_empty()).then(|| {
                Some(format!(
                    "{}/{}: sessionAffinity ClientIP not held (each connection balanced on its own) \
                     for {}",
                    m.namespace.as_deref()?,
                    m.name.as_deref()?,
                    loose.join("; ")
                ))
            })?
        })
        .collect()
}

fn pod_objects(cluster: &Cluster) -> HashMap<String, &k8s_openapi::api::core::v1::Pod> {
    cluster
        .pods
        .iter()
        .filter_map(|p| {
            let m = &p.metadata;
            Some((
                crate::cluster::pod_name(m.namespace.as_deref()?, m.name.as_deref()?),
                p,
            ))
        })
        .collect()
}

/// The equivalence classes of plugged-in pods (see the module docs), each with a
/// representative, the first of its members.
struct Classes<'a> {
    /// Members by class.
    members: BTreeMap<ClassKey, Vec<&'a Attachment>>,
    /// Each pod's class, by its name.
    of_pod: BTreeMap<&'a str, ClassKey>,
    /// The representatives.
    reps: Vec<&'a Attachment>,
    /// Each representative's class (an index into `list`), by its name.
    of_rep: HashMap<&'a str, usize>,
    /// The classes as the report and the flows' sampling see them.
    list: Vec<Class>,
}

impl<'a> Classes<'a> {
    /// With policies, the classes tell pods apart by what the policies read of a client.
    fn of(
        topo: &Topology,
        cluster: &Cluster,
        pods: &[&'a Attachment],
        pod_objects: &HashMap<String, &k8s_openapi::api::core::v1::Pod>,
    ) -> Classes<'a> {
        let policies = crate::policy::Policies {
            policies: &cluster.network_policies,
            namespaces: &cluster.namespaces,
        };
        let key_of = |a: &Attachment| {
            class_of(topo, a).map(|mut k| {
                if !cluster.network_policies.is_empty() {
                    match (pod_objects.get(&a.name), a.primary_ip()) {
                        (Some(pod), Some(ip)) => k.policy = Some(policies.client_key(pod, ip)),
                        _ => k.pod = Some(a.name.clone()),
                    }
                }
                k
            })
        };
        let of_pod: BTreeMap<&str, ClassKey> = pods
            .iter()
            .filter_map(|p| Some((p.name.as_str(), key_of(p)?)))
            .collect();
        let mut members: BTreeMap<ClassKey, Vec<&Attachment>> = BTreeMap::new();
        for p in pods {
            if let Some(k) = of_pod.get(p.name.as_str()) {
                members.entry(k.clone()).or_default().push(p);
            }
        }
        let reps: Vec<&Attachment> = members
            .values()
            .filter_map(|m| m.first().copied())
            .collect();
        let (list, of_rep) = class_list(topo, &members);
        Classes {
            members,
            of_pod,
            reps,
            of_rep,
            list,
        }
    }
}

/// The classes with their reachable members, and each one's index by its
/// representative's name.
fn class_list<'a>(
    topo: &Topology,
    classes: &BTreeMap<ClassKey, Vec<&'a Attachment>>,
) -> (Vec<Class>, HashMap<&'a str, usize>) {
    let mut list = Vec::new();
    let mut of_rep = HashMap::new();
    for members in classes.values() {
        let Some(first) = members.first() else {
            continue;
        };
        let members: Vec<Member> = members
            .iter()
            .filter_map(|a| {
                Some(Member {
                    name: a.name.clone(),
                    ip: a.primary_ip()?,
                    port: topo.port_of(a)?,
                    mac: a.mac,
                })
            })
            .collect();
        let Some(reachable) = members.first() else {
            continue;
        };
        // The representative stands for the class when it is one of its members.
        if reachable.name == first.name {
            of_rep.insert(first.name.as_str(), list.len());
        }
        let ips = members.iter().map(|m| u32::from(m.ip));
        let span = (ips.clone().min().unwrap_or(0), ips.max().unwrap_or(0));
        list.push(Class { members, span });
    }
    (list, of_rep)
}

/// A flow from `from` to the pod or node `to` at `ip`, delivered there.
fn pod_flow(kind: FlowKind, from: &Attachment, to: &Attachment, ip: Ipv4Addr) -> Flow {
    Flow {
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
        refused: BTreeSet::new(),
        class: None,
        src_ip: None,
        keep_source: false,
        host_forward: false,
        then_from: None,
    }
}

/// Pod to pod: every pod from its own class and from another class, and every pair of
/// representatives.
fn pod_to_pod_flows(pods: &[&Attachment], classes: &Classes) -> Vec<Flow> {
    let mut flows = Vec::new();
    for dst in pods {
        let Some(ip) = dst.primary_ip() else { continue };
        let own = classes.of_pod.get(dst.name.as_str());
        let same = own
            .and_then(|k| classes.members.get(k))
            .and_then(|m| m.iter().find(|p| p.name != dst.name));
        let other = classes
            .members
            .iter()
            .find(|(k, _)| Some(*k) != own && k.bridge != own.map(|o| o.bridge).unwrap_or_default())
            .and_then(|(_, m)| m.first());
        for src in same.into_iter().chain(other) {
            flows.push(pod_flow(FlowKind::PodToPod, src, dst, ip));
        }
    }
    for a in &classes.reps {
        for b in &classes.reps {
            if a.name != b.name {
                if let Some(ip) = b.primary_ip() {
                    let mut f = pod_flow(FlowKind::PodToPod, a, b, ip);
                    f.class = classes.of_rep.get(a.name.as_str()).copied();
                    flows.push(f);
                }
            }
        }
    }
    flows
}

/// Pods to Services (each representative), and endpoints to their own Service; under
/// `internalTrafficPolicy: Local` a client reaches its own node's endpoints only.
fn service_flows(
    cluster: &Cluster,
    classes: &Classes,
    by_ip: &BTreeMap<Ipv4Addr, &Attachment>,
    pod_objects: &HashMap<String, &k8s_openapi::api::core::v1::Pod>,
    report: &mut Report,
) -> Vec<Flow> {
    let node_of = |name: &str| {
        let pod = pod_objects.get(name)?;
        pod.spec.as_ref()?.node_name.as_deref()
    };
    let mut flows = Vec::new();
    for sp in cluster.service_ports() {
        let (_, unverifiable) = receivers(&sp, by_ip, "", report);
        // What a client on `node` reaches: its node's endpoints under the Local policy.
        let expectation = |node: Option<&str>| {
            let eps = sp.endpoints_from(node);
            let expected: BTreeSet<(String, SocketV4)> = eps
                .iter()
                .filter_map(|ep| Some((by_ip.get(&ep.ip)?.name.clone(), *ep)))
                .collect();
            match eps.is_empty() {
                true => (FlowKind::NoEndpoints, None),
                false => (FlowKind::PodToService, Some(expected)),
            }
        };
        for src in &classes.reps {
            let (kind, expect) = expectation(node_of(&src.name));
            let mut f = service_flow(kind, &src.name, &sp, expect, &unverifiable);
            f.class = classes.of_rep.get(src.name.as_str()).copied();
            flows.push(f);
        }
        for ep in &sp.endpoints {
            let Some(a) = by_ip.get(&ep.ip).filter(|a| a.name.starts_with("pod/")) else {
                continue;
            };
            let (_, expect) = expectation(node_of(&a.name));
            flows.push(service_flow(
                FlowKind::Hairpin,
                &a.name,
                &sp,
                expect,
                &unverifiable,
            ));
        }
    }
    flows
}

/// Nodes and pods: each node to a pod on its own bridge and one on another, and those pods
/// to the node's first two addresses.
fn node_flows(topo: &Topology, nodes: &[&Attachment], pods: &[&Attachment]) -> Vec<Flow> {
    let mut flows = Vec::new();
    for node in nodes {
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
    flows
}

/// Each node's host to the node ports at its own addresses, as it forwards what reached
/// its interface (masqueraded: the source is its address on the node's bridge, the first
/// of its attachment's): exactly the endpoints Kubernetes allows there (with
/// `externalTrafficPolicy: Local` the node's own), the reply from the address used; with
/// none, back to the host itself.
fn node_port_flows(
    cluster: &Cluster,
    by_ip: &BTreeMap<Ipv4Addr, &Attachment>,
    report: &mut Report,
) -> Vec<Flow> {
    let mut flows = Vec::new();
    for op in crate::outside::node_port_promises(cluster) {
        let sp = &op.port;
        let Some(node) = by_ip
            .get(&sp.address.ip)
            .filter(|a| a.name.starts_with("node/"))
        else {
            continue;
        };
        let (expected, unverifiable) = receivers(sp, by_ip, "node → ", report);
        // Without an endpoint it is routed back to the host, where nothing listens at a
        // node port (no kube-proxy): the client is refused there.
        let expect = match sp.endpoints.is_empty() {
            true => BTreeSet::from([(node.name.clone(), sp.address)]),
            false => expected,
        };
        let mut f = service_flow(
            FlowKind::NodeToNodePort,
            &node.name,
            sp,
            Some(expect),
            &unverifiable,
        );
        f.to_name = format!("{} at {}", sp.display(), sp.address);
        f.host_forward = true;
        flows.push(f);
    }
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
    // Pods on the pod network by attachment name.
    let pods: HashMap<String, &k8s_openapi::api::core::v1::Pod> = cluster
        .pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.host_network) != Some(true))
        .filter_map(|p| {
            let m = &p.metadata;
            Some((
                crate::cluster::pod_name(m.namespace.as_deref()?, m.name.as_deref()?),
                p,
            ))
        })
        .collect();
    fn party<'a>(
        pods: &HashMap<String, &'a k8s_openapi::api::core::v1::Pod>,
        name: &'a str,
        ip: Ipv4Addr,
    ) -> crate::policy::Party<'a> {
        match (pods.get(name), name.strip_prefix("node/")) {
            (Some(p), _) => crate::policy::Party::Pod(p, ip),
            (None, Some(node)) => crate::policy::Party::Node(node, ip),
            (None, None) => crate::policy::Party::Address(ip),
        }
    }
    let from_ips: HashMap<&str, Ipv4Addr> = attachments
        .iter()
        .filter_map(|a| Some((a.name.as_str(), a.primary_ip()?)))
        .collect();
    for flow in flows.iter_mut() {
        let Some(from_ip) = flow
            .src_ip
            .or_else(|| from_ips.get(flow.from.as_str()).copied())
        else {
            continue;
        };
        let client = party(&pods, &flow.from, from_ip);
        if let Some(expected) = flow.expected.as_mut() {
            let refused = &mut flow.refused;
            expected.retain(|(name, to)| {
                let allowed =
                    policies.allows(client, party(&pods, name, to.ip), to.port, flow.protocol);
                if !allowed {
                    refused.insert(to.ip);
                }
                allowed
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
        refused: BTreeSet::new(),
        class: None,
        src_ip: None,
        keep_source: false,
        host_forward: false,
        then_from: None,
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
    /// The workload's own link: its on-link network and gateway.
    link: Option<(Ipv4Addr, u8, Option<Ipv4Addr>)>,
    /// The bridge's static MAC table sends its MAC to its own port; its ARP table answers
    /// its address with its own MAC. (Any other entry for them puts the pod alone.)
    static_mac: bool,
    static_arp: bool,
    /// With NetworkPolicies: what they read of a client.
    policy: Option<crate::policy::ClientKey>,
    /// Set for a pod that is a class of its own.
    pod: Option<String>,
}

fn class_of(topo: &Topology, a: &Attachment) -> Option<ClassKey> {
    let port_id = topo.port_of(a)?;
    let port = topo.ports.get(&port_id)?;
    let bridge = port.parent;
    let mac_entry = topo.mac_tables.get(&bridge).and_then(|t| t.get(&a.mac));
    let ip = a.primary_ip();
    let arp_entry = ip.and_then(|ip| topo.arp_tables.get(&bridge)?.get(&ip));
    let odd = a.ips.len() != 1
        || mac_entry.is_some_and(|p| *p != port_id)
        || arp_entry.is_some_and(|m| *m != a.mac);
    Some(ClassKey {
        bridge,
        inbound: port.inbound_filter_id,
        outbound: port.outbound_filter_id,
        groups: topo.port_groups.get(&port_id).cloned().unwrap_or_default(),
        link: a.subnet.map(|n| (n.addr, n.prefix_len, a.gateway)),
        static_mac: mac_entry.is_some(),
        static_arp: arp_entry.is_some(),
        policy: None,
        pod: odd.then(|| a.name.clone()),
    })
}

fn class_bridge(topo: &Topology, a: &Attachment) -> Option<Uuid> {
    class_of(topo, a).map(|k| k.bridge)
}

/// Evaluates `flow` and, when its source stands for a class, the same flow from each
/// member the trace cannot stand for.
fn evaluate(topo: &Topology, classes: &[Class], flow: Flow, memo: &mut Memo) -> Outcome {
    if flow.kind == FlowKind::OutsideSticky {
        return vec![(flow.kind, evaluate_sticky(topo, flow))];
    }
    let mut probe = Probe::new(flow.from.clone(), flow.to, flow.protocol, CLIENT_PORT);
    probe.src_ip = flow.src_ip;
    probe.host_forward = flow.host_forward;
    let (t, consulted) = match trace_consulting(topo, &probe, false, true) {
        Ok(t) => t,
        Err(e) => {
            // The source is not plugged in: reported once in `unplugged`, and every flow
            // from it fails.
            let empty = untraced(&probe, Vec::new());
            let kind = flow.kind;
            return vec![(
                kind,
                Some(Failure::new(flow, e.to_string(), Vec::new(), empty)),
            )];
        }
    };
    let mut out = Vec::new();
    if let Some(c) = flow.class {
        for m in told_apart(topo, classes, c, &consulted, memo) {
            let mut f = flow.clone();
            f.from = m.name.clone();
            f.class = None;
            out.extend(evaluate(topo, classes, f, memo));
        }
    }
    let kind = flow.kind;
    // Traced without hops; a failure shows them, from the same (deterministic) trace
    // made again with them.
    let failure = judge(flow, t).map(|mut f| {
        if let Ok(full) = trace(topo, &probe) {
            f.trace = full;
        }
        f
    });
    out.insert(0, (kind, failure));
    out
}

/// A trace of `probe` holding `paths` (none: it could not be traced).
fn untraced(probe: &Probe, paths: Vec<Path>) -> Trace {
    Trace {
        from: probe.from.clone(),
        sent: crate::packet::FlowTuple::new(
            probe.protocol,
            SocketV4::new(
                probe.src_ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
                probe.src_port,
            ),
            probe.to,
        ),
        paths,
        truncated: false,
    }
}

/// An [`FlowKind::OutsideSticky`] flow: the client's two connections (source ports
/// [`CLIENT_PORT`] and the next, the second from `then_from`) traced one after the other
/// on one flow state, every history of their random choices; in each where the first
/// reaches an endpoint, the second must reach that same endpoint and hear back from the
/// address it used. Where the first may go is the outside-to-service flow's to judge.
fn evaluate_sticky(topo: &Topology, flow: Flow) -> Option<Failure> {
    let mut first = Probe::new(flow.from.clone(), flow.to, flow.protocol, CLIENT_PORT);
    first.src_ip = flow.src_ip;
    let then = flow.then_from.clone().unwrap_or_else(|| flow.from.clone());
    let mut second = Probe::new(then, flow.to, flow.protocol, CLIENT_PORT + 1);
    second.src_ip = flow.src_ip;
    let histories = match trace_sequence(topo, &[first, second.clone()]) {
        Ok((h, _)) => h,
        Err(e) => {
            let problem = e.to_string();
            return Some(Failure::new(
                flow,
                problem,
                Vec::new(),
                untraced(&second, Vec::new()),
            ));
        }
    };
    let mut delivered = 0;
    for history in &histories {
        let [one, two] = history.as_slice() else {
            continue;
        };
        let problem = match sticky_problem(&flow, one, two) {
            Ok(true) => {
                delivered += 1;
                continue;
            }
            Ok(false) => continue,
            Err(problem) => problem,
        };
        let reached = two.forward.delivered_to.iter().cloned().collect();
        return Some(Failure::new(
            flow,
            problem,
            reached,
            untraced(&second, vec![two.clone()]),
        ));
    }
    (delivered == 0 && flow.expected.is_some()).then(|| {
        let problem = "no first connection reached an endpoint".to_string();
        Failure::new(flow, problem, Vec::new(), untraced(&second, Vec::new()))
    })
}

/// One history of a sticky flow: `Ok(true)` when the first connection reached an endpoint
/// and the second the same one, replied to from the address used; `Ok(false)` when the
/// first reached none (not this flow's to judge); else what went wrong.
fn sticky_problem(flow: &Flow, one: &Path, two: &Path) -> Result<bool, String> {
    let legs = [&one.forward, &two.forward]
        .into_iter()
        .chain(one.reply.iter())
        .chain(two.reply.iter());
    for leg in legs {
        if let Some(why) = &leg.unsupported {
            return Err(format!("the model cannot tell: {why}"));
        }
    }
    let Some(first) = &one.forward.delivered_to else {
        return Ok(false);
    };
    match &two.forward.delivered_to {
        Some(e) if e == first => match two.works && two.client_sees == Some(flow.to) {
            true => Ok(true),
            false => Err(format!(
                "the second connection reached {e} as the first did, but the client sees \
                 its reply from {:?}, not {}",
                two.client_sees, flow.to
            )),
        },
        Some(e) => Err(format!(
            "the first connection reached {first}, the second (another source port) {e}"
        )),
        None => Err(format!(
            "the first connection reached {first}, the second was dropped: {}",
            two.forward.drop_reason.clone().unwrap_or_default()
        )),
    }
}

/// What [`told_apart`] found per (class, what was consulted): the members (by index)
/// that a chain's rules, the guards its index skipped, or a router's routes treat
/// differently from the representative.
type Memo = rustc_hash::FxHashMap<(usize, Consulting), Vec<usize>>;

/// What a walk consulted, as [`told_apart`] weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Consulting {
    Chain(Uuid),
    /// The guards of the jumps a chain's index skipped (`chainrules`).
    GuardsOf(Uuid),
    Router(Uuid),
}

/// The members of class `c` (besides its representative, the first) that something the
/// representative's trace consulted may treat differently from it: a condition on an
/// address, an address group or a port of any rule of a chain it ran, a NAT target range
/// of such a rule, the prefixes of any route of a router it routed through. Everything
/// else a walk reads is the same for every member of a class (see the module docs).
fn told_apart<'c>(
    topo: &Topology,
    classes: &'c [Class],
    c: usize,
    consulted: &Consulted,
    memo: &mut Memo,
) -> Vec<&'c Member> {
    let Some(class) = classes.get(c) else {
        return Vec::new();
    };
    if class.members.len() < 2 {
        return Vec::new();
    }
    let mut apart = BTreeSet::new();
    for chain in &consulted.chains {
        let found = memo
            .entry((c, Consulting::Chain(*chain)))
            .or_insert_with(|| differ_by_rules(topo, class, topo.rules_of(*chain)));
        apart.extend(found.iter().copied());
    }
    // A guard that returned for the representative may not for a member: its condition
    // is weighed as a rule run.
    for chain in &consulted.guarded {
        let found = memo
            .entry((c, Consulting::GuardsOf(*chain)))
            .or_insert_with(|| differ_by_rules(topo, class, &topo.indexed_guards(*chain)));
        apart.extend(found.iter().copied());
    }
    for router in &consulted.routers {
        let found = memo
            .entry((c, Consulting::Router(*router)))
            .or_insert_with(|| differ_by_routes(topo, class, *router));
        apart.extend(found.iter().copied());
    }
    apart
        .into_iter()
        .filter_map(|i| class.members.get(i))
        .collect()
}

/// A prefix that holds every member of `class` or none cannot tell them apart.
fn splits(class: &Class, addr: Option<Ipv4Addr>, len: Option<u8>) -> bool {
    let Some(a) = addr else { return false };
    let (lo, hi) = class.span;
    let mask = prefix_mask(len.unwrap_or(0));
    let net = u32::from(a) & mask;
    let last = net | !mask;
    let all = lo & mask == net && hi & mask == net;
    let none = hi < net || lo > last;
    !all && !none
}

/// A test of a member: (address, port) → whether a condition holds.
type MemberTest<'t> = Box<dyn Fn(&Member) -> bool + 't>;

/// Indices of the members some test answers differently for than for the representative.
fn differing(class: &Class, tests: &[MemberTest<'_>]) -> Vec<usize> {
    let Some(rep) = class.members.first() else {
        return Vec::new();
    };
    if tests.is_empty() {
        return Vec::new();
    }
    let want: Vec<bool> = tests.iter().map(|t| t(rep)).collect();
    (1..class.members.len())
        .filter(|i| {
            let m = &class.members[*i];
            tests.iter().zip(&want).any(|(t, w)| t(m) != *w)
        })
        .collect()
}

fn prefix_test<'t>(addr: Option<Ipv4Addr>, len: Option<u8>) -> MemberTest<'t> {
    Box::new(move |m: &Member| crate::topology::contains_len(addr, Some(len.unwrap_or(0)), m.ip))
}

fn differ_by_rules(topo: &Topology, class: &Class, rules: &[Rule]) -> Vec<usize> {
    let (lo, hi) = class.span;
    let mut tests: Vec<MemberTest<'_>> = Vec::new();
    for rule in rules {
        for (addr, len) in [
            (rule.nw_src_address, rule.nw_src_length),
            (rule.nw_dst_address, rule.nw_dst_length),
        ] {
            if splits(class, addr, len) {
                tests.push(prefix_test(addr, len));
            }
        }
        let c = &rule.condition;
        for group in [c.ip_addr_group_src, c.ip_addr_group_dst]
            .into_iter()
            .flatten()
        {
            if let Some(set) = topo.ip_addr_groups.get(&group) {
                tests.push(Box::new(move |m: &Member| set.contains(&m.ip)));
            }
        }
        for ports in [&c.in_ports, &c.out_ports].into_iter().flatten() {
            if class.members.iter().any(|m| ports.contains(&m.port)) {
                tests.push(Box::new(move |m: &Member| ports.contains(&m.port)));
            }
        }
        if let Some(d) = c.traversed_device {
            if class.members.iter().any(|m| m.port == d) {
                tests.push(Box::new(move |m: &Member| m.port == d));
            }
        }
        // MAC conditions see a member's MAC (as source or, on replies, destination).
        for (mac, mask) in [(c.dl_src, c.dl_src_mask), (c.dl_dst, c.dl_dst_mask)] {
            if let Some(mac) = mac {
                let mask = mask.unwrap_or(midonet_translators::model::MacMask::ALL);
                tests.push(Box::new(move |m: &Member| mask.same(mac, m.mac)));
            }
        }
        // ICMP errors quote the member's address.
        for (addr, len) in [
            (c.icmp_data_src_ip_address, c.icmp_data_src_ip_length),
            (c.icmp_data_dst_ip_address, c.icmp_data_dst_ip_length),
        ] {
            if splits(class, addr, len) {
                tests.push(prefix_test(addr, len));
            }
        }
        for t in rule.nat_targets.iter().flatten() {
            let Some(from) = t.address_from.or(t.address_to) else {
                continue;
            };
            let (from, to) = (u32::from(from), u32::from(t.address_to.unwrap_or(from)));
            if from <= hi && to >= lo && !(from <= lo && to >= hi) {
                tests.push(Box::new(move |m: &Member| {
                    (from..=to).contains(&u32::from(m.ip))
                }));
            }
        }
    }
    differing(class, &tests)
}

fn differ_by_routes(topo: &Topology, class: &Class, router: Uuid) -> Vec<usize> {
    let mut tests: Vec<MemberTest<'_>> = Vec::new();
    for r in topo.routes.get(&router).into_iter().flatten() {
        for (addr, len) in [
            (r.src_network_addr, r.src_network_length),
            (r.dst_network_addr, r.dst_network_length),
        ] {
            if splits(class, addr, len) {
                tests.push(prefix_test(addr, len));
            }
        }
    }
    differing(class, &tests)
}

/// The failure of a traced flow, if it does not behave as Kubernetes promises.
fn judge(flow: Flow, t: Trace) -> Option<Failure> {
    // What the model cannot simulate it cannot promise either: the flow fails, naming it.
    if let Some(why) = t.unsupported() {
        let problem = format!("the model cannot tell: {why}");
        return Some(Failure::new(flow, problem, Vec::new(), t));
    }
    let reached: BTreeSet<(String, SocketV4)> = t.candidates().into_iter().collect();
    // The paths that count: not those dropped on their way to an endpoint no workload
    // owns, or to one the policies refuse this client.
    let counted: Vec<&Path> = t
        .paths
        .iter()
        .filter(|p| {
            p.forward.delivered_to.is_some()
                || !p.forward.dropped_packet.is_some_and(|d| {
                    flow.unverifiable.contains(&d.dst.ip) || flow.refused.contains(&d.dst.ip)
                })
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
                source_not_kept(&flow, &t)
            }
        }
    };
    let problem = problem?;
    let reached = reached.iter().map(|(n, s)| format!("{n} {s}")).collect();
    Some(Failure::new(flow, problem, reached, t))
}

/// The workloads a Service port's endpoints are, and the endpoint addresses no workload
/// owns (reported, prefixed with `what`, as unverifiable).
fn receivers(
    sp: &ServicePortRef,
    by_ip: &BTreeMap<Ipv4Addr, &Attachment>,
    what: &str,
    report: &mut Report,
) -> (BTreeSet<(String, SocketV4)>, BTreeSet<Ipv4Addr>) {
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
                    .push(format!("{what}{} → {ep}", sp.display()));
            }
        }
    }
    (expected, unverifiable)
}

/// With `keep_source`, the first delivery whose receiver sees another source than the
/// client's address.
fn source_not_kept(flow: &Flow, t: &Trace) -> Option<String> {
    let client = flow.src_ip?;
    if !flow.keep_source {
        return None;
    }
    t.paths
        .iter()
        .filter_map(|p| Some((p.forward.delivered_to.as_ref()?, p.forward.received?)))
        .find(|(_, rx)| rx.src.ip != client)
        .map(|(who, rx)| {
            format!(
                "{who} sees the source {}, not the client's {client} (externalTrafficPolicy: Local)",
                rx.src.ip
            )
        })
}

/// The flows Kubernetes promises with an edge ([`crate::outside`]): an outside client,
/// entering through each uplink, to every Service port at every outside address; every
/// pod class's representative to an outside address.
fn outside_flows(
    cluster: &Cluster,
    edge: &midonet_translators::config::Edge,
    reps: &[&Attachment],
    by_ip: &BTreeMap<Ipv4Addr, &Attachment>,
    report: &mut Report,
) -> Vec<Flow> {
    let mut flows = Vec::new();
    let upstreams: Vec<String> = edge
        .uplinks
        .iter()
        .map(|u| crate::outside::upstream_name(&u.name))
        .collect();
    for op in crate::outside::outside_service_ports(cluster) {
        let sp = &op.port;
        let (expected, unverifiable) = receivers(sp, by_ip, "outside → ", report);
        let expect = (!sp.endpoints.is_empty()).then_some(expected);
        for up in &upstreams {
            let mut f = service_flow(
                FlowKind::OutsideToService,
                up,
                sp,
                expect.clone(),
                &unverifiable,
            );
            f.to_name = format!("{} at {}", sp.display(), sp.address);
            f.src_ip = Some(crate::outside::OUTSIDE_CLIENT);
            f.keep_source = op.keep_source;
            // The client's second connection, through each uplink in turn.
            if op.sticky && expect.is_some() {
                for then in &upstreams {
                    let mut s = f.clone();
                    s.kind = FlowKind::OutsideSticky;
                    s.then_from = Some(then.clone());
                    flows.push(s);
                }
            }
            flows.push(f);
        }
    }
    let outside = SocketV4::new(crate::outside::OUTSIDE_CLIENT, POD_PORT);
    let receivers: BTreeSet<(String, SocketV4)> = edge
        .uplinks
        .iter()
        .filter(|u| !u.next_hops.is_empty())
        .map(|u| (crate::outside::upstream_name(&u.name), outside))
        .collect();
    for rep in reps {
        flows.push(Flow {
            kind: FlowKind::PodToOutside,
            from: rep.name.clone(),
            to: outside,
            to_name: "outside".to_string(),
            protocol: Protocol::Tcp,
            expected: Some(receivers.clone()),
            unverifiable: BTreeSet::new(),
            refused: BTreeSet::new(),
            class: None,
            src_ip: None,
            keep_source: false,
            host_forward: false,
            then_from: None,
        });
    }
    flows
}

fn expected_names(e: &Option<BTreeSet<(String, SocketV4)>>) -> Vec<String> {
    e.iter()
        .flatten()
        .map(|(n, s)| format!("{n} {s}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_translators::model::{NatTarget, Route, RuleType};

    fn member(name: &str, ip: &str, port: u128) -> Member {
        Member {
            name: name.into(),
            ip: ip.parse().unwrap(),
            port: Uuid::from_u128(port),
            mac: midonet_translators::model::MacAddr([2, 0, 0, 0, 0, port as u8]),
        }
    }

    fn class(members: Vec<Member>) -> Class {
        let ips = members.iter().map(|m| u32::from(m.ip));
        let span = (ips.clone().min().unwrap(), ips.max().unwrap());
        Class { members, span }
    }

    fn names(ms: &[usize], c: &Class) -> Vec<String> {
        ms.iter().map(|i| c.members[*i].name.clone()).collect()
    }

    #[test]
    fn client_ip_affinity_is_listed_as_not_served() {
        let svc = |name: &str, affinity: &str| -> k8s_openapi::api::core::v1::Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"clusterIP": "10.96.0.5", "sessionAffinity": affinity}
            }))
            .unwrap()
        };
        let cluster = Cluster {
            services: vec![svc("sticky", "ClientIP"), svc("plain", "None")],
            ..Cluster::default()
        };
        assert_eq!(
            not_served(&cluster),
            [
                "ns/sticky: sessionAffinity ClientIP not held (each connection balanced on its \
              own) for every connection (there is no edge (--edge-config))"
            ]
        );
    }

    /// Three pods of one class (10.0.0.10 the representative, .11 and .12).
    fn three() -> Class {
        class(vec![
            member("rep", "10.0.0.10", 1),
            member("b", "10.0.0.11", 2),
            member("c", "10.0.0.12", 3),
        ])
    }

    fn rule(f: impl FnOnce(&mut Rule)) -> Rule {
        let mut r = Rule::new(Uuid::from_u128(9), Uuid::from_u128(10), RuleType::Accept);
        f(&mut r);
        r
    }

    #[test]
    fn pods_whose_ports_differ_are_not_in_one_class() {
        use midonet_translators::model::{HostInterfacePort, MacAddr, Port, Resource};
        let (bridge, host) = (Uuid::from_u128(100), Uuid::from_u128(101));
        let mut resources = Vec::new();
        let mut atts = Vec::new();
        for i in 1..=4u8 {
            let id = Uuid::from_u128(u128::from(i));
            let mut port = Port::bridge_port(bridge, id);
            if i == 3 {
                port.inbound_filter_id = Some(Uuid::from_u128(200));
            }
            resources.push(Resource::Port(port));
            let iface = format!("if{i}");
            resources.push(Resource::HostInterfacePort(HostInterfacePort::new(
                host, id, &iface,
            )));
            atts.push(Attachment {
                name: format!("pod/x/p{i}"),
                host,
                interface: iface,
                mac: MacAddr([2, 0, 0, 0, 0, i]),
                ips: vec![Ipv4Addr::new(10, 0, 0, 10 + i)],
                subnet: None,
                gateway: None,
                networks: Vec::new(),
            });
        }
        let mut topo = Topology::new(resources, crate::RuleOrder::Listed, atts.clone());
        // p4 is in a port group.
        topo.add_port_group_member(Uuid::from_u128(300), Uuid::from_u128(4));
        let keys: Vec<ClassKey> = atts.iter().map(|a| class_of(&topo, a).unwrap()).collect();
        assert_eq!(keys[0], keys[1]);
        assert_ne!(keys[0], keys[2], "another inbound filter");
        assert_ne!(keys[0], keys[3], "another port group");
        // A static MAC entry sending p2's MAC elsewhere puts it alone.
        topo.add(
            Resource::MacPort(midonet_translators::model::MacPort::new(
                bridge,
                MacAddr([2, 0, 0, 0, 0, 2]),
                Uuid::from_u128(1),
            )),
            crate::RuleOrder::Listed,
        );
        assert_ne!(class_of(&topo, &atts[0]), class_of(&topo, &atts[1]));
    }

    #[test]
    fn a_prefix_that_holds_every_member_or_none_groups_them() {
        let topo = Topology::default();
        let c = three();
        let rules = [
            rule(|r| {
                r.nw_src_address = Some("10.0.0.0".parse().unwrap());
                r.nw_src_length = Some(24);
            }),
            rule(|r| {
                r.nw_dst_address = Some("10.96.0.10".parse().unwrap());
                r.nw_dst_length = Some(32);
            }),
        ];
        assert!(differ_by_rules(&topo, &c, &rules).is_empty());
    }

    #[test]
    fn a_member_a_rule_names_is_told_apart() {
        let topo = Topology::default();
        let c = three();
        // A hairpin SNAT rule of an endpoint: src and dst /32 on pod b.
        let snat = rule(|r| {
            r.nw_src_address = Some("10.0.0.11".parse().unwrap());
            r.nw_src_length = Some(32);
        });
        assert_eq!(names(&differ_by_rules(&topo, &c, &[snat]), &c), ["b"]);
        // The representative named: every other member differs from it.
        let rep = rule(|r| {
            r.nw_dst_address = Some("10.0.0.10".parse().unwrap());
            r.nw_dst_length = Some(32);
        });
        assert_eq!(names(&differ_by_rules(&topo, &c, &[rep]), &c), ["b", "c"]);
        // A DNAT target range holding c; an in-ports condition naming b's port.
        let dnat = rule(|r| {
            r.nat_targets = Some(vec![NatTarget::to_ports(
                "10.0.0.12".parse().unwrap(),
                Some(8080),
                Some(8080),
            )]);
        });
        assert_eq!(names(&differ_by_rules(&topo, &c, &[dnat]), &c), ["c"]);
        let ports = rule(|r| r.condition.in_ports = Some(vec![Uuid::from_u128(2)]));
        assert_eq!(names(&differ_by_rules(&topo, &c, &[ports]), &c), ["b"]);
    }

    #[test]
    fn a_mac_a_traversed_port_or_a_quoted_address_tells_a_member_apart() {
        let topo = Topology::default();
        let c = three();
        let by_mac = rule(|r| {
            r.condition.dl_src = Some(midonet_translators::model::MacAddr([2, 0, 0, 0, 0, 3]));
        });
        assert_eq!(names(&differ_by_rules(&topo, &c, &[by_mac]), &c), ["c"]);
        // A mask that ignores the last byte holds every member alike.
        let masked = rule(|r| {
            r.condition.dl_src = Some(midonet_translators::model::MacAddr([2, 0, 0, 0, 0, 3]));
            r.condition.dl_src_mask = Some(midonet_translators::model::MacMask(0xffff_ffff_ff00));
        });
        assert!(differ_by_rules(&topo, &c, &[masked]).is_empty());
        let by_port = rule(|r| r.condition.traversed_device = Some(Uuid::from_u128(2)));
        assert_eq!(names(&differ_by_rules(&topo, &c, &[by_port]), &c), ["b"]);
        let quoted = rule(|r| {
            r.condition.icmp_data_src_ip_address = Some("10.0.0.12".parse().unwrap());
            r.condition.icmp_data_src_ip_length = Some(32);
        });
        assert_eq!(names(&differ_by_rules(&topo, &c, &[quoted]), &c), ["c"]);
    }

    #[test]
    fn an_address_group_or_a_route_that_holds_one_member_tells_it_apart() {
        let mut topo = Topology::default();
        let group = Uuid::from_u128(77);
        topo.add_ip_addr_group_member(group, "10.0.0.12".parse().unwrap());
        let c = three();
        let by_group = rule(|r| r.condition.ip_addr_group_src = Some(group));
        assert_eq!(names(&differ_by_rules(&topo, &c, &[by_group]), &c), ["c"]);
        let router = Uuid::from_u128(50);
        let dst = midonet_translators::model::Ipv4Cidr::new("10.0.0.11".parse().unwrap(), 32);
        let route = Route::normal(
            router,
            Uuid::from_u128(51),
            dst.unwrap(),
            Uuid::from_u128(52),
        );
        topo.add(
            midonet_translators::model::Resource::Route(route),
            crate::RuleOrder::Listed,
        );
        assert_eq!(names(&differ_by_routes(&topo, &c, router), &c), ["b"]);
    }

    /// A chain whose one jump goes to a chain guarded by an address group holding `.12`:
    /// a walk that skipped the jump (the representative is not in the group) leaves `c`
    /// to be traced itself, and nothing is told apart without the skip noted.
    #[test]
    fn a_guard_the_index_skipped_tells_apart_a_member_it_would_let_in() {
        use midonet_translators::model::{Chain, Resource};
        let (allow, policy, group) = (
            Uuid::from_u128(60),
            Uuid::from_u128(61),
            Uuid::from_u128(77),
        );
        let mut jump = Rule::new(allow, Uuid::from_u128(62), RuleType::Jump);
        jump.jump_chain_id = Some(policy);
        let mut guard = Rule::new(policy, Uuid::from_u128(63), RuleType::Return);
        guard.condition.ip_addr_group_dst = Some(group);
        guard.condition.inv_ip_addr_group_dst = Some(true);
        let resources = [
            Resource::Chain(Chain::new(allow)),
            Resource::Chain(Chain::new(policy)),
            Resource::Rule(jump),
            Resource::Rule(guard),
        ];
        let mut topo = Topology::new(resources, crate::RuleOrder::Listed, Vec::new());
        topo.add_ip_addr_group_member(group, "10.0.0.12".parse().unwrap());
        let classes = [three()];
        let mut consulted = Consulted::default();
        let mut memo = Memo::default();
        assert!(told_apart(&topo, &classes, 0, &consulted, &mut memo).is_empty());
        consulted.guarded.push(allow);
        let apart = told_apart(&topo, &classes, 0, &consulted, &mut memo);
        let names: Vec<&str> = apart.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["c"]);
    }
}
