//! NetworkPolicy (`networking.k8s.io/v1`): IP address groups, port groups and rule chains
//! behind the filters of every pod port.
//!
//! Every pod port carries two fixed global chains (see [`policy_globals`]):
//! `outboundFilterId` = KUBE-NP-INGRESS (what is delivered to the pod) and
//! `inboundFilterId` = KUBE-NP-EGRESS (what the pod sends). Each is
//!
//! ```text
//! 1 accept  matchReturnFlow           replies of allowed connections, both directions
//! 2 jump    KUBE-NP-<dir>-ALLOW       one jump per policy: accepts what that policy allows
//! 3 jump    KUBE-NP-<dir>-ISOLATE     one drop per policy: the pods it selects
//! (runs out: accepted)                pods no policy selects stay open
//! ```
//!
//! The shared ALLOW and ISOLATE chains only ever hold rules whose order does not matter
//! (an ALLOW jump accepts or falls through; an ISOLATE rule drops or falls through), so many
//! policies can add and remove their rules there independently: all allows of all policies
//! are tried before any isolation, which is exactly the union semantics of NetworkPolicy.
//!
//! A policy's own chains form a *generation*, named by a hash of what they match: a change
//! of the policy (or of the named ports it resolves) is a new set of chains under new IDs,
//! complete before its ALLOW jump is pushed, and the old one is removed afterwards.
//! The selected pods and the peers are IP address groups (and, for egress, a port group of
//! the selected pods' ports) whose members change in place as pods come, go or change labels.
//! See `MAPPING.md` for the update order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::addr::{parse_ipv4, AddrError};
use crate::global::main_chain_id;
use crate::ids::{id_for_key, sub_id};
use crate::model::{
    Chain, IpAddrGroup, IpAddrGroupAddr, Ipv4Cidr, Port, PortGroup, PortGroupPort, PortRange,
    Resource, Rule, RuleType,
};
use crate::naming::backend_name;
use crate::translate::{reason, DesiredTranslation, Translated, TranslatorConfig};

/// Kind used in a policy's IDs and Translation name.
pub const NETWORK_POLICY_KIND: &str = "NetworkPolicy";

/// Warning reasons of this translator.
pub const INVALID_SELECTOR: &str = "InvalidSelector";
pub const INVALID_IP_BLOCK: &str = "InvalidIPBlock";

/// Chain names, as they appear in MidoNet.
pub const INGRESS_CHAIN_NAME: &str = "KUBE-NP-INGRESS";
pub const EGRESS_CHAIN_NAME: &str = "KUBE-NP-EGRESS";

const IPV4: u16 = 0x0800;

/// A direction of policy enforcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Traffic delivered to a selected pod (its port's outbound filter).
    Ingress,
    /// Traffic sent by a selected pod (its port's inbound filter).
    Egress,
}

impl Direction {
    fn tag(self) -> &'static str {
        match self {
            Direction::Ingress => "INGRESS",
            Direction::Egress => "EGRESS",
        }
    }
}

/// The global chain of `dir` every pod port filters through.
pub fn filter_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(main_chain_id(cfg), &format!("Policy {} Chain", dir.tag()))
}

fn allow_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(
        main_chain_id(cfg),
        &format!("Policy {} Allow Chain", dir.tag()),
    )
}

fn isolate_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(
        main_chain_id(cfg),
        &format!("Policy {} Isolate Chain", dir.tag()),
    )
}

/// The global Translation `network-policy`: the two filter chains of every pod port and
/// the shared ALLOW and ISOLATE chains they jump to. Pushed before any pod port names them.
pub fn policy_globals(cfg: &TranslatorConfig) -> DesiredTranslation {
    let mut resources = Vec::new();
    let mut rules = Vec::new();
    for dir in [Direction::Ingress, Direction::Egress] {
        let main = filter_chain_id(cfg, dir);
        let allow = allow_chain_id(cfg, dir);
        let isolate = isolate_chain_id(cfg, dir);
        let name = |suffix: &str| format!("KUBE-NP-{}{suffix}", dir.tag());
        resources.push(chain(cfg, main, name("")));
        resources.push(chain(cfg, allow, name("-ALLOW")));
        resources.push(chain(cfg, isolate, name("-ISOLATE")));
        let mut replies = Rule::new(main, sub_id(main, "Return Flow"), RuleType::Accept);
        replies.condition.match_return_flow = Some(true);
        replies.position = Some(1);
        let mut to_allow = Rule::jump(main, sub_id(main, "Jump To Allow"), allow);
        to_allow.position = Some(2);
        let mut to_isolate = Rule::jump(main, sub_id(main, "Jump To Isolate"), isolate);
        to_isolate.position = Some(3);
        rules.extend([replies, to_allow, to_isolate].map(entry));
    }
    resources.extend(rules);
    crate::global::global_translation(cfg, "network-policy", resources)
}

/// A pod's bridge port, filtered by the policy chains from its creation on: a pod is
/// never reachable before the policies apply to it.
pub fn pod_port(cfg: &TranslatorConfig, bridge: Uuid, port: Uuid) -> Resource {
    let mut p = Port::bridge_port(bridge, port);
    p.inbound_filter_id = Some(filter_chain_id(cfg, Direction::Egress));
    p.outbound_filter_id = Some(filter_chain_id(cfg, Direction::Ingress));
    entry(p)
}

fn chain(cfg: &TranslatorConfig, id: Uuid, name: String) -> Resource {
    let mut c = Chain::new(id);
    c.tenant_id = Some(cfg.tenant.clone());
    c.name = Some(backend_name(name));
    entry(c)
}

fn entry(o: impl Into<Resource>) -> Resource {
    o.into()
}

// --- What a policy reads of the cluster ------------------------------------------------

/// L4 protocols a policy port can name that MidoNet rules match here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum L4 {
    Tcp,
    Udp,
}

impl L4 {
    /// `TCP` (also the default when absent) or `UDP`; anything else (SCTP) is `None`.
    pub fn parse(protocol: Option<&str>) -> Option<L4> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(L4::Tcp),
            "UDP" => Some(L4::Udp),
            _ => None,
        }
    }

    pub fn number(self) -> u8 {
        match self {
            L4::Tcp => 6,
            L4::Udp => 17,
        }
    }
}

/// A named container port of a pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NamedPort {
    pub name: String,
    pub protocol: L4,
    pub port: u16,
}

/// What policies read of a pod on the pod network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyPod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The pod's IPv4 address; a pod without one is in no group yet.
    pub ip: Option<Ipv4Addr>,
    pub ports: Vec<NamedPort>,
}

impl PolicyPod {
    /// `None` for pods that are not on the pod network (unscheduled, `hostNetwork`,
    /// finished): policies neither select them nor match them as peers.
    pub fn from_pod(pod: &Pod) -> Option<PolicyPod> {
        let name = pod.metadata.name.clone().filter(|n| !n.is_empty())?;
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let spec = pod.spec.as_ref()?;
        spec.node_name.as_deref().filter(|n| !n.is_empty())?;
        if spec.host_network == Some(true) {
            return None;
        }
        let status = pod.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            return None;
        }
        let ip = status.and_then(|s| {
            s.pod_ip
                .iter()
                .map(String::as_str)
                .chain(
                    s.pod_ips
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .map(|p| p.ip.as_str()),
                )
                .find_map(|raw| parse_ipv4(raw).ok())
        });
        let mut ports: Vec<NamedPort> = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.as_deref().unwrap_or_default())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone().filter(|n| !n.is_empty())?,
                    protocol: L4::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.container_port).ok().filter(|p| *p > 0)?,
                })
            })
            .collect();
        ports.sort();
        ports.dedup();
        Some(PolicyPod {
            namespace,
            name,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            ip,
            ports,
        })
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The cluster as policies see it: namespace labels and the pods on the pod network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyCluster {
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub pods: Vec<PolicyPod>,
}

impl PolicyCluster {
    pub fn new<'a>(
        namespaces: impl IntoIterator<Item = &'a Namespace>,
        pods: impl IntoIterator<Item = &'a Pod>,
    ) -> PolicyCluster {
        let namespaces = namespaces
            .into_iter()
            .filter_map(|ns| {
                Some((
                    ns.metadata.name.clone()?,
                    ns.metadata.labels.clone().unwrap_or_default(),
                ))
            })
            .collect();
        let mut pods: Vec<PolicyPod> = pods.into_iter().filter_map(PolicyPod::from_pod).collect();
        pods.sort_by_key(PolicyPod::key);
        PolicyCluster { namespaces, pods }
    }
}

/// Whether `selector` matches `labels` (`matchLabels` and `matchExpressions` with `In`,
/// `NotIn`, `Exists`, `DoesNotExist`; the empty selector matches everything).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    for (k, v) in selector.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => return Err(format!("unknown label selector operator {other:?}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

// --- The plan of one policy -------------------------------------------------------------

/// One port clause of a rule after resolution.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PortMatch {
    proto: Option<u8>,
    range: Option<(u16, u16)>,
    /// For a named port: the pod it was resolved on (destination address).
    pod_ip: Option<Ipv4Addr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PeerMatch {
    Any,
    /// Index into the policy's peer groups.
    Group(usize),
    Block {
        cidr: Ipv4Cidr,
        except: Vec<Ipv4Cidr>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RulePlan {
    /// `None`: every port and protocol.
    ports: Option<Vec<PortMatch>>,
    peers: Vec<PeerMatch>,
}

/// An IP address group of peers: its key part and its addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PeerGroup {
    label: String,
    addrs: BTreeSet<Ipv4Addr>,
}

struct Ctx<'a> {
    cluster: &'a PolicyCluster,
    namespace: &'a str,
    out: &'a mut Translated,
}

impl Ctx<'_> {
    fn matches(&mut self, selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
        match selector_matches(selector, labels) {
            Ok(m) => m,
            Err(e) => {
                self.out.warn(INVALID_SELECTOR, e);
                false
            }
        }
    }

    /// The pods a peer's selectors pick (with their addresses).
    fn peer_pods(&mut self, peer: &NetworkPolicyPeer) -> BTreeSet<Ipv4Addr> {
        let namespaces: Vec<String> = match &peer.namespace_selector {
            None => vec![self.namespace.to_string()],
            Some(sel) => {
                let all: Vec<(String, BTreeMap<String, String>)> = self
                    .cluster
                    .namespaces
                    .iter()
                    .map(|(n, l)| (n.clone(), l.clone()))
                    .collect();
                all.into_iter()
                    .filter(|(_, labels)| self.matches(sel, labels))
                    .map(|(n, _)| n)
                    .collect()
            }
        };
        let empty = LabelSelector::default();
        let pod_sel = peer.pod_selector.as_ref().unwrap_or(&empty);
        let mut out = BTreeSet::new();
        for pod in &self.cluster.pods {
            if namespaces.contains(&pod.namespace) && self.matches(pod_sel, &pod.labels) {
                out.extend(pod.ip);
            }
        }
        out
    }
}

/// Parses an ipBlock CIDR (host bits are dropped, as Kubernetes validation allows them).
fn parse_cidr(raw: &str) -> Result<Ipv4Cidr, AddrError> {
    let (addr, len) = raw.split_once('/').ok_or(AddrError::Invalid)?;
    let addr = parse_ipv4(addr)?;
    let len: u8 = len.parse().map_err(|_| AddrError::Invalid)?;
    let cidr = Ipv4Cidr::new(addr, len).ok_or(AddrError::Invalid)?;
    Ipv4Cidr::new(cidr.network(), len).ok_or(AddrError::Invalid)
}

fn ip_block(block: &IPBlock, out: &mut Translated) -> Option<PeerMatch> {
    let cidr = match parse_cidr(&block.cidr) {
        Ok(c) => c,
        Err(AddrError::Ipv6) => {
            out.warn(
                reason::UNSUPPORTED_IP_FAMILY,
                format!("ipBlock {} is IPv6; the peer is skipped", block.cidr),
            );
            return None;
        }
        Err(AddrError::Invalid) => {
            out.warn(
                INVALID_IP_BLOCK,
                format!(
                    "ipBlock cidr {:?} is not a CIDR; the peer is skipped",
                    block.cidr
                ),
            );
            return None;
        }
    };
    let mut except = Vec::new();
    for raw in block.except.iter().flatten() {
        match parse_cidr(raw) {
            Ok(c) => except.push(c),
            // An IPv6 exception cannot carve anything out of an IPv4 block.
            Err(AddrError::Ipv6) => {}
            Err(AddrError::Invalid) => {
                // Skipping the exception would allow what the policy excepts: skip the peer.
                out.warn(
                    INVALID_IP_BLOCK,
                    format!("ipBlock except {raw:?} is not a CIDR; the peer is skipped"),
                );
                return None;
            }
        }
    }
    Some(PeerMatch::Block { cidr, except })
}

/// Resolves the port clauses of a rule. Named ports resolve on `targets`: the selected pods
/// for ingress, every pod (the destination) for egress. A clause that resolves to nothing
/// matches nothing; it never widens the rule.
fn resolve_ports(
    ports: Option<&[NetworkPolicyPort]>,
    targets: &[&PolicyPod],
    out: &mut Translated,
) -> Option<Vec<PortMatch>> {
    let ports = ports.filter(|p| !p.is_empty())?;
    let mut matches = Vec::new();
    for p in ports {
        let Some(proto) = L4::parse(p.protocol.as_deref()) else {
            out.warn(
                reason::UNSUPPORTED_PROTOCOL,
                format!(
                    "policy port protocol {:?} is not TCP or UDP; that port is skipped",
                    p.protocol.as_deref().unwrap_or_default()
                ),
            );
            continue;
        };
        match &p.port {
            None => matches.push(PortMatch {
                proto: Some(proto.number()),
                range: None,
                pod_ip: None,
            }),
            Some(IntOrString::Int(n)) => {
                let end = p.end_port.unwrap_or(*n);
                match (u16::try_from(*n), u16::try_from(end)) {
                    (Ok(start), Ok(end)) if start > 0 && end >= start => matches.push(PortMatch {
                        proto: Some(proto.number()),
                        range: Some((start, end)),
                        pod_ip: None,
                    }),
                    _ => out.warn(
                        reason::INVALID_PORT,
                        format!(
                            "policy port {n}..{end} is not a valid range; that port is skipped"
                        ),
                    ),
                }
            }
            Some(IntOrString::String(name)) => {
                for pod in targets {
                    let (Some(ip), Some(np)) = (
                        pod.ip,
                        pod.ports
                            .iter()
                            .find(|np| np.name == *name && np.protocol == proto),
                    ) else {
                        continue;
                    };
                    matches.push(PortMatch {
                        proto: Some(proto.number()),
                        range: Some((np.port, np.port)),
                        pod_ip: Some(ip),
                    });
                }
            }
        }
    }
    matches.sort();
    matches.dedup();
    Some(matches)
}

// --- The translator ---------------------------------------------------------------------

/// Translates one NetworkPolicy against the cluster's namespaces and pods into the
/// Translation `networkpolicy.<v>.<name>` in the policy's namespace.
pub fn network_policy(
    cfg: &TranslatorConfig,
    np: &NetworkPolicy,
    cluster: &PolicyCluster,
) -> Translated {
    let mut out = Translated::default();
    let name = match np.metadata.name.as_deref() {
        Some(n) if !n.is_empty() => n,
        _ => return out,
    };
    let namespace = np.metadata.namespace.as_deref().unwrap_or("default");
    let Some(spec) = np.spec.as_ref() else {
        return out;
    };
    let key = format!("{namespace}/{name}");
    let base = id_for_key(cfg, NETWORK_POLICY_KIND, &key);
    let types: Vec<&str> = match &spec.policy_types {
        Some(t) if !t.is_empty() => t.iter().map(String::as_str).collect(),
        _ => {
            let mut t = vec!["Ingress"];
            if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                t.push("Egress");
            }
            t
        }
    };
    let ingress_on = types.contains(&"Ingress");
    let egress_on = types.contains(&"Egress");

    let mut ctx = Ctx {
        cluster,
        namespace,
        out: &mut out,
    };
    // An absent pod selector is the empty one: every pod of the namespace.
    let pod_selector = spec.pod_selector.clone().unwrap_or_default();
    let selected: Vec<&PolicyPod> = cluster
        .pods
        .iter()
        .filter(|p| p.namespace == namespace)
        .filter(|p| ctx.matches(&pod_selector, &p.labels))
        .collect();
    let all_pods: Vec<&PolicyPod> = cluster.pods.iter().collect();

    let mut groups: Vec<PeerGroup> = Vec::new();
    let mut plans: Vec<(Direction, Vec<RulePlan>)> = Vec::new();
    if ingress_on {
        let mut rules = Vec::new();
        for (i, r) in spec.ingress.iter().flatten().enumerate() {
            let peers = plan_peers(&mut ctx, &mut groups, r.from.as_deref(), "in", i);
            let ports = resolve_ports(r.ports.as_deref(), &selected, ctx.out);
            rules.push(RulePlan { ports, peers });
        }
        plans.push((Direction::Ingress, rules));
    }
    if egress_on {
        let mut rules = Vec::new();
        for (i, r) in spec.egress.iter().flatten().enumerate() {
            let peers = plan_peers(&mut ctx, &mut groups, r.to.as_deref(), "out", i);
            let ports = resolve_ports(r.ports.as_deref(), &all_pods, ctx.out);
            rules.push(RulePlan { ports, peers });
        }
        plans.push((Direction::Egress, rules));
    }

    let sel_addrs = sub_id(base, "Selected Addresses");
    let sel_ports = sub_id(base, "Selected Ports");
    let group_id = |g: &PeerGroup| sub_id(base, &format!("Peers/{}", g.label));
    let mut resources = Vec::new();
    // Groups and their members first: the chains below name them.
    if ingress_on {
        resources.push(entry(IpAddrGroup::new(
            sel_addrs,
            backend_name(format!("KUBE-NP-SELECTED-{key}")),
        )));
        let addrs: BTreeSet<Ipv4Addr> = selected.iter().filter_map(|p| p.ip).collect();
        resources.extend(
            addrs
                .into_iter()
                .map(|ip| entry(IpAddrGroupAddr::new(sel_addrs, ip))),
        );
    }
    if egress_on {
        resources.push(entry(PortGroup::new(
            sel_ports,
            backend_name(format!("KUBE-NP-SELECTED-{key}")),
        )));
        // Only pods with an address: their port exists (the CNI plugin binds it first).
        let ports: BTreeSet<Uuid> = selected
            .iter()
            .filter(|p| p.ip.is_some())
            .map(|p| crate::pod::port_id(cfg, &p.key()))
            .collect();
        resources.extend(
            ports
                .into_iter()
                .map(|port| entry(PortGroupPort::new(sel_ports, port))),
        );
    }
    for g in &groups {
        let id = group_id(g);
        resources.push(entry(IpAddrGroup::new(
            id,
            backend_name(format!("KUBE-NP-PEERS-{key}/{}", g.label)),
        )));
        resources.extend(
            g.addrs
                .iter()
                .map(|ip| entry(IpAddrGroupAddr::new(id, *ip))),
        );
    }

    // The generation: everything the chains match, hashed.
    let mut desc = String::new();
    let _ = write!(desc, "{plans:?}");
    for g in &groups {
        let _ = write!(desc, "|{}={}", g.label, group_id(g));
    }
    let hash = hex::encode(&Sha256::digest(desc.as_bytes())[..8]);
    let gen = sub_id(base, &format!("Generation/{hash}"));

    let mut chains = Vec::new();
    let mut rules = Vec::new();
    let mut jumps = Vec::new();
    let mut isolation = Vec::new();
    for (dir, plan) in &plans {
        let dir = *dir;
        let tag = match dir {
            Direction::Ingress => "IN",
            Direction::Egress => "OUT",
        };
        let pol = sub_id(gen, &format!("{tag}/Chain"));
        chains.push(chain(cfg, pol, format!("KUBE-NP-{tag}-{key}-{hash}")));
        let mut pos = Positions::default();
        // Not a pod this policy selects: leave the chain, nothing of it applies.
        let mut head = Rule::new(pol, sub_id(pol, "Not Selected"), RuleType::Return);
        match dir {
            Direction::Ingress => {
                head.condition.ip_addr_group_dst = Some(sel_addrs);
                head.condition.inv_ip_addr_group_dst = Some(true);
            }
            Direction::Egress => {
                head.condition.port_group = Some(sel_ports);
                head.condition.inv_port_group = Some(true);
            }
        }
        rules.push(pos.place(head));
        for (i, r) in plan.iter().enumerate() {
            let peers_id = sub_id(pol, &format!("Rule/{i}/Peers"));
            chains.push(chain(
                cfg,
                peers_id,
                format!("KUBE-NP-{tag}-{key}-{hash}-{i}"),
            ));
            match &r.ports {
                None => rules.push(pos.place(Rule::jump(
                    pol,
                    sub_id(pol, &format!("Rule/{i}/Any Port")),
                    peers_id,
                ))),
                Some(ports) => {
                    for (k, p) in ports.iter().enumerate() {
                        let mut j =
                            Rule::jump(pol, sub_id(pol, &format!("Rule/{i}/Port/{k}")), peers_id);
                        j.dl_type = Some(IPV4);
                        j.nw_proto = p.proto;
                        if let Some((start, end)) = p.range {
                            j.tp_dst = Some(PortRange {
                                start: Some(start),
                                end: Some(end),
                                ..PortRange::default()
                            });
                        }
                        if let Some(ip) = p.pod_ip {
                            j.nw_dst_address = Some(ip);
                            j.nw_dst_length = Some(32);
                        }
                        rules.push(pos.place(j));
                    }
                }
            }
            let mut peer_pos = Positions::default();
            for (j, peer) in r.peers.iter().enumerate() {
                let rule_id = sub_id(peers_id, &format!("Peer/{j}"));
                match peer {
                    PeerMatch::Any => {
                        rules.push(peer_pos.place(Rule::new(peers_id, rule_id, RuleType::Accept)))
                    }
                    PeerMatch::Group(g) => {
                        let mut a = Rule::new(peers_id, rule_id, RuleType::Accept);
                        let gid = Some(group_id(&groups[*g]));
                        match dir {
                            Direction::Ingress => a.condition.ip_addr_group_src = gid,
                            Direction::Egress => a.condition.ip_addr_group_dst = gid,
                        }
                        rules.push(peer_pos.place(a));
                    }
                    PeerMatch::Block { cidr, except } if except.is_empty() => {
                        let mut a = Rule::new(peers_id, rule_id, RuleType::Accept);
                        set_net(&mut a, dir, *cidr);
                        rules.push(peer_pos.place(a));
                    }
                    PeerMatch::Block { cidr, except } => {
                        let block = sub_id(peers_id, &format!("Peer/{j}/Block"));
                        chains.push(chain(
                            cfg,
                            block,
                            format!("KUBE-NP-{tag}-{key}-{hash}-{i}-{j}"),
                        ));
                        let mut block_pos = Positions::default();
                        for (e, ex) in except.iter().enumerate() {
                            let mut r = Rule::new(
                                block,
                                sub_id(block, &format!("Except/{e}")),
                                RuleType::Return,
                            );
                            set_net(&mut r, dir, *ex);
                            rules.push(block_pos.place(r));
                        }
                        let mut a = Rule::new(block, sub_id(block, "Accept"), RuleType::Accept);
                        set_net(&mut a, dir, *cidr);
                        rules.push(block_pos.place(a));
                        rules.push(peer_pos.place(Rule::jump(peers_id, rule_id, block)));
                    }
                }
            }
        }
        // Order inside the shared chains does not matter: the head is as good as any place.
        let mut jump = Rule::jump(
            allow_chain_id(cfg, dir),
            sub_id(gen, &format!("{tag}/Jump")),
            pol,
        );
        jump.position = Some(1);
        jumps.push(entry(jump));
        let mut drop = Rule::new(
            isolate_chain_id(cfg, dir),
            sub_id(base, &format!("Isolate {tag}")),
            RuleType::Drop,
        );
        drop.position = Some(1);
        drop.dl_type = Some(IPV4);
        match dir {
            Direction::Ingress => drop.condition.ip_addr_group_dst = Some(sel_addrs),
            Direction::Egress => drop.condition.port_group = Some(sel_ports),
        }
        isolation.push(entry(drop));
    }
    // Push order: groups, the generation's chains and rules, its ALLOW jumps, and only
    // then the isolation, so that a new policy never drops what it allows.
    resources.extend(chains);
    resources.extend(rules);
    resources.extend(jumps);
    resources.extend(isolation);
    out.translations.push(DesiredTranslation::versioned(
        cfg,
        NETWORK_POLICY_KIND,
        name,
        namespace,
        resources,
    ));
    // A bad selector is met once per pod it is tried on: report it once.
    let mut seen = BTreeSet::new();
    out.warnings
        .retain(|w| seen.insert((w.reason.clone(), w.message.clone())));
    out
}

fn set_net(r: &mut Rule, dir: Direction, cidr: Ipv4Cidr) {
    r.dl_type = Some(IPV4);
    match dir {
        Direction::Ingress => {
            r.nw_src_address = Some(cidr.addr);
            r.nw_src_length = Some(cidr.prefix_len);
        }
        Direction::Egress => {
            r.nw_dst_address = Some(cidr.addr);
            r.nw_dst_length = Some(cidr.prefix_len);
        }
    }
}

/// Ascending positions of the rules of one chain, pushed in that order.
#[derive(Default)]
struct Positions(u32);

impl Positions {
    fn place(&mut self, mut r: Rule) -> Resource {
        self.0 += 1;
        r.position = Some(self.0);
        entry(r)
    }
}

fn plan_peers(
    ctx: &mut Ctx<'_>,
    groups: &mut Vec<PeerGroup>,
    peers: Option<&[NetworkPolicyPeer]>,
    dir: &str,
    rule: usize,
) -> Vec<PeerMatch> {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return vec![PeerMatch::Any];
    };
    let mut out = Vec::new();
    for (j, peer) in peers.iter().enumerate() {
        if let Some(block) = &peer.ip_block {
            out.extend(ip_block(block, ctx.out));
            continue;
        }
        if peer.pod_selector.is_none() && peer.namespace_selector.is_none() {
            // The API server refuses such a peer; it selects nothing.
            continue;
        }
        // The group's identity covers the selectors, so an edited peer is a new group
        // that the old generation never sees.
        let spec = serde_json::to_string(peer).unwrap_or_default();
        let hash = hex::encode(&Sha256::digest(spec.as_bytes())[..6]);
        let addrs = ctx.peer_pods(peer);
        out.push(PeerMatch::Group(groups.len()));
        groups.push(PeerGroup {
            label: format!("{dir}/{rule}/{j}/{hash}"),
            addrs,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_follow_the_label_selector_rules() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        let l = labels(&[("app", "web"), ("tier", "a")]);
        assert_eq!(selector_matches(&sel, &l), Ok(true));
        let l = labels(&[("app", "web"), ("tier", "c")]);
        assert_eq!(selector_matches(&sel, &l), Ok(false));
        let l = labels(&[("app", "web"), ("tier", "a"), ("canary", "")]);
        assert_eq!(selector_matches(&sel, &l), Ok(false));
        assert_eq!(
            selector_matches(&LabelSelector::default(), &BTreeMap::new()),
            Ok(true)
        );
        let bad: LabelSelector =
            serde_json::from_value(json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}))
                .unwrap();
        assert!(selector_matches(&bad, &BTreeMap::new()).is_err());
    }

    #[test]
    fn ip_blocks_drop_host_bits_and_refuse_garbage() {
        assert_eq!(
            parse_cidr("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert!(matches!(parse_cidr("fd00::/8"), Err(AddrError::Ipv6)));
        assert!(matches!(parse_cidr("10.0.0.0"), Err(AddrError::Invalid)));
        assert!(matches!(parse_cidr("10.0.0.0/40"), Err(AddrError::Invalid)));
    }

    #[test]
    fn unsupported_ports_never_widen_a_rule() {
        let mut out = Translated::default();
        let ports: Vec<NetworkPolicyPort> =
            serde_json::from_value(json!([{"protocol": "SCTP", "port": 80}])).unwrap();
        let resolved = resolve_ports(Some(&ports), &[], &mut out);
        assert_eq!(resolved, Some(Vec::new()));
        assert_eq!(out.warnings.len(), 1);
        let named: Vec<NetworkPolicyPort> =
            serde_json::from_value(json!([{"port": "http"}])).unwrap();
        assert_eq!(resolve_ports(Some(&named), &[], &mut out), Some(Vec::new()));
        assert_eq!(resolve_ports(None, &[], &mut out), None);
    }
}
