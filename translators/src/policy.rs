//! NetworkPolicy (`networking.k8s.io/v1`): IP address groups, port groups and rule chains
//! behind the filters of every pod port.
//!
//! What a policy allows and isolates goes into the shared ALLOW and ISOLATE chains of the
//! two fixed filter chains every pod port (ingress) and node bridge (egress) filters
//! through ([`crate::filters`]). The egress chain sits on the bridge's way *out*, after
//! KUBE-MAIN's Service DNAT in the bridge's inbound filter, so that egress rules, like
//! ingress rules, see the load-balanced destination: a pod allowed to reach some pods
//! reaches them through their Service too, and a Service address lets through nothing its
//! backends' policies refuse.
//!
//! The shared ALLOW and ISOLATE chains only ever hold rules whose order does not matter
//! (an ALLOW jump accepts or falls through; an ISOLATE rule drops or falls through), so many
//! policies can add and remove their rules there independently: all allows of all policies
//! are tried before any isolation, which is exactly the union semantics of NetworkPolicy.
//!
//! A policy's own chains form a *generation*, named by a hash of what they match: a change
//! of the policy (or of the named ports it resolves) is a new set of chains under new IDs,
//! complete before its ALLOW jump is pushed, and the old one is removed afterwards.
//!
//! The selected pods and the peers are IP address groups (and, for egress, a port group of
//! the selected pods' ports) whose members change in place as pods come, go or change labels.
//! A group is keyed by *what it selects*, not by the policy ([`GroupKey`]: the namespace or
//! the canonical namespace selector, and the canonical pod selector), so every policy with
//! the same selector names the same group, and a pod's arrival is one member added once,
//! however many policies match it. A group lives in its own Translation
//! ([`address_group`], `networkpolicygroup.<v>.<hash>`), not in any policy's: two
//! Translations must never provide the same backend resource. [`address_groups`] is the set
//! a list of policies uses; the controller keeps exactly that set written. See `MAPPING.md`
//! for the update order.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use uuid::Uuid;

use crate::addr::{parse_cidr, parse_ipv4, CidrError, CidrRules};
pub use crate::filters::{GROUP_NAME_PREFIX, NODE_PORT_GROUP_NAME};
use crate::ids::{id_for_key, sub_id};
use crate::model::{IpAddrGroup, IpAddrGroupAddr, Ipv4Cidr, PortGroup, PortGroupPort, Resource};
use crate::naming::{backend_name, NameKey, Part};
pub use crate::topology::{filter_chain_id, Direction};
use crate::topology::{pod_port_id, POD_KIND};
use crate::translate::{
    reason, DesiredTranslation, NamespacedName, Translated, TranslatorConfig,
    GLOBAL_TRANSLATION_NAMESPACE,
};

mod encoding;
mod generation;

/// Kind used in a policy's IDs and Translation name.
pub const NETWORK_POLICY_KIND: &str = "NetworkPolicy";

/// Kind used in the IDs and Translation names of the shared address and port groups.
pub const GROUP_KIND: &str = "NetworkPolicyGroup";
/// Label on the group Translations (they have no owner: the NetworkPolicy controller
/// keeps them while some policy uses them).
pub const GROUP_LABEL: &str = "midonet.org/network-policy-group";

/// Warning reasons of this translator.
pub const INVALID_SELECTOR: &str = "InvalidSelector";
pub const INVALID_IP_BLOCK: &str = "InvalidIPBlock";

const IPV4: u16 = 0x0800;

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
    /// finished) or that have no name or namespace (no port is made for them either):
    /// policies neither select them nor match them as peers.
    pub fn from_pod(pod: &Pod) -> Option<PolicyPod> {
        let id = NamespacedName::of(POD_KIND, &pod.metadata).ok()?;
        let (namespace, name) = (id.namespace.to_string(), id.name.to_string());
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
        let mut ports: Vec<NamedPort> = serving_containers(spec)
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

/// The containers whose ports a pod serves: its containers and its sidecars (init
/// containers with `restartPolicy: Always`, Kubernetes 1.28+), which run beside them for the
/// pod's life. Named ports are looked up in both, as the endpoints controller does for a
/// Service's `targetPort` since 1.32; a plain init container has ended before the pod serves.
pub fn serving_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers.iter().chain(sidecars)
}

/// The cluster as policies see it: namespace labels and the pods on the pod network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyCluster {
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub pods: Vec<PolicyPod>,
}

impl PolicyCluster {
    /// `pods` by reference or by value (each is read once, and dropped before the next).
    pub fn new<'a, P: Borrow<Pod>>(
        namespaces: impl IntoIterator<Item = &'a Namespace>,
        pods: impl IntoIterator<Item = P>,
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
        let mut pods: Vec<PolicyPod> = pods
            .into_iter()
            .filter_map(|p| PolicyPod::from_pod(p.borrow()))
            .collect();
        // One key per pod, not one per comparison: clusters have tens of thousands.
        pods.sort_by_cached_key(PolicyPod::key);
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

// --- Address groups, shared by selector -------------------------------------------------

/// One requirement of a canonical label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    /// Sorted, without duplicates; empty for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

/// A label selector in canonical form: `matchLabels` entries become `In` requirements with
/// one value, and the requirements are sorted and deduplicated (values too). Two selectors
/// that Kubernetes evaluates alike by construction (`{}` and absent, reordered expressions,
/// `matchLabels: {a: b}` and `a In [b]`) have the same canonical form, so they name the
/// same address group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalSelector(pub Vec<Requirement>);

impl CanonicalSelector {
    /// The canonical form of `selector`; `None` (absent) is the empty selector.
    pub fn new(selector: Option<&LabelSelector>) -> CanonicalSelector {
        let Some(selector) = selector else {
            return CanonicalSelector::default();
        };
        let mut reqs: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: "In".to_string(),
                values: vec![v.clone()],
            })
            .collect();
        for e in selector.match_expressions.iter().flatten() {
            let mut values = match e.operator.as_str() {
                "Exists" | "DoesNotExist" => Vec::new(),
                _ => e.values.clone().unwrap_or_default(),
            };
            values.sort();
            values.dedup();
            reqs.push(Requirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values,
            });
        }
        reqs.sort();
        reqs.dedup();
        CanonicalSelector(reqs)
    }

    /// Whether the selector matches `labels`; an unknown operator is an error.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> Result<bool, String> {
        self.validate()?;
        Ok(self.0.iter().all(|r| {
            let have = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => have.is_some_and(|v| r.values.contains(v)),
                "NotIn" => have.is_none_or(|v| !r.values.contains(v)),
                "Exists" => have.is_some(),
                _ => have.is_none(),
            }
        }))
    }

    /// An error naming the first operator Kubernetes does not define.
    pub fn validate(&self) -> Result<(), String> {
        match self.0.iter().find(|r| {
            !matches!(
                r.operator.as_str(),
                "In" | "NotIn" | "Exists" | "DoesNotExist"
            )
        }) {
            Some(r) => Err(format!("unknown label selector operator {:?}", r.operator)),
            None => Ok(()),
        }
    }

    /// Human-readable form for backend names: `app in (web),tier exists`, `{}` when empty.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "{}".to_string();
        }
        self.0
            .iter()
            .map(|r| {
                let op = r.operator.to_lowercase();
                if r.values.is_empty() {
                    format!("{} {op}", r.key)
                } else {
                    format!("{} {op} ({})", r.key, r.values.join(","))
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What a group holds of the pods it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupMembers {
    /// An IP address group of their addresses (peers, and the pods a policy isolates for
    /// ingress).
    Addresses,
    /// A port group of their bridge ports (the pods a policy isolates for egress).
    Ports,
}

/// Which namespaces a group's pod selector applies in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupScope {
    /// One namespace (a policy's own: its `podSelector`, or a peer without
    /// `namespaceSelector`).
    Namespace(String),
    /// Every namespace whose labels match (a peer with `namespaceSelector`).
    Namespaces(CanonicalSelector),
}

/// The identity of an address or port group: what it selects, canonical. Every policy that
/// selects the same pods the same way uses the same group.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub members: GroupMembers,
    pub scope: GroupScope,
    pub pods: CanonicalSelector,
}

impl GroupKey {
    fn hash(&self) -> String {
        encoding::short_hash(&encoding::group_key_text(self))
    }

    /// The group's backend ID (seeded by the Translation version, as every ID), from its
    /// canonical text ([`encoding::group_key_text`]).
    pub fn id(&self, cfg: &TranslatorConfig) -> Uuid {
        id_for_key(cfg, GROUP_KIND, &encoding::group_key_text(self))
    }

    /// Namespace of the group's Translation: the selector's namespace, or the global
    /// Translations' one for a cluster-wide selector.
    pub fn translation_namespace(&self) -> &str {
        match &self.scope {
            GroupScope::Namespace(ns) => ns,
            GroupScope::Namespaces(_) => GLOBAL_TRANSLATION_NAMESPACE,
        }
    }

    fn backend_name(&self) -> String {
        let what = match self.members {
            GroupMembers::Addresses => "ADDRS",
            GroupMembers::Ports => "PORTS",
        };
        let scope = match &self.scope {
            GroupScope::Namespace(ns) => format!("ns={ns}"),
            GroupScope::Namespaces(sel) => format!("namespaces={}", sel.describe()),
        };
        backend_name(format!(
            "{GROUP_NAME_PREFIX}{what}-{scope};pods={}",
            self.pods.describe()
        ))
    }

    /// The pods the group selects (on the pod network, with or without an address).
    fn select<'a>(&self, cluster: &'a PolicyCluster) -> Vec<&'a PolicyPod> {
        let in_scope = |ns: &str| match &self.scope {
            GroupScope::Namespace(own) => own == ns,
            GroupScope::Namespaces(sel) => cluster
                .namespaces
                .get(ns)
                .is_some_and(|labels| sel.matches(labels).unwrap_or(false)),
        };
        cluster
            .pods
            .iter()
            .filter(|p| in_scope(&p.namespace) && self.pods.matches(&p.labels).unwrap_or(false))
            .collect()
    }
}

/// The Translation of one group: the group and its members, in the selector's namespace
/// (see [`GroupKey::translation_namespace`]), named `networkpolicygroup.<v>.<hash>` and
/// labelled [`GROUP_LABEL`]. Bad selectors are reported on the policies (they select nothing
/// here).
pub fn address_group(
    cfg: &TranslatorConfig,
    key: &GroupKey,
    cluster: &PolicyCluster,
) -> DesiredTranslation {
    let id = key.id(cfg);
    let pods = key.select(cluster);
    let mut resources = Vec::new();
    match key.members {
        GroupMembers::Addresses => {
            resources.push(entry(IpAddrGroup::new(id, key.backend_name())));
            let addrs: BTreeSet<Ipv4Addr> = pods.iter().filter_map(|p| p.ip).collect();
            resources.extend(
                addrs
                    .into_iter()
                    .map(|ip| entry(IpAddrGroupAddr::new(id, ip))),
            );
        }
        GroupMembers::Ports => {
            resources.push(entry(PortGroup::new(id, key.backend_name())));
            // Only pods with an address: their port exists (the CNI plugin binds it first).
            let ports: BTreeSet<Uuid> = pods
                .iter()
                .filter(|p| p.ip.is_some())
                .map(|p| pod_port_id(cfg, &p.key()))
                .collect();
            resources.extend(
                ports
                    .into_iter()
                    .map(|port| entry(PortGroupPort::new(id, port))),
            );
        }
    }
    let mut tr = DesiredTranslation::versioned(
        cfg,
        GROUP_KIND,
        &NameKey::new(Part::Label(&key.hash())),
        key.translation_namespace(),
        resources,
    );
    tr.labels
        .insert(GROUP_LABEL.to_string(), "true".to_string());
    tr
}

/// The group Translations the given policies use, one per distinct group, sorted by name.
pub fn address_groups<'a>(
    cfg: &TranslatorConfig,
    policies: impl IntoIterator<Item = &'a NetworkPolicy>,
    cluster: &PolicyCluster,
) -> Vec<DesiredTranslation> {
    let keys: BTreeSet<GroupKey> = policies.into_iter().flat_map(policy_groups).collect();
    let mut out: Vec<DesiredTranslation> = keys
        .iter()
        .map(|k| address_group(cfg, k, cluster))
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// The policy types in force: `policyTypes`, or Ingress plus Egress when it has egress rules.
fn policy_types(spec: &NetworkPolicySpec) -> (bool, bool) {
    match &spec.policy_types {
        Some(t) if !t.is_empty() => (
            t.iter().any(|t| t == "Ingress"),
            t.iter().any(|t| t == "Egress"),
        ),
        _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    }
}

/// The group of the pods a policy selects, holding `members`.
fn selected_group(namespace: &str, spec: &NetworkPolicySpec, members: GroupMembers) -> GroupKey {
    GroupKey {
        members,
        scope: GroupScope::Namespace(namespace.to_string()),
        // An absent pod selector is the empty one: every pod of the namespace.
        pods: CanonicalSelector::new(spec.pod_selector.as_ref()),
    }
}

/// The address group of a selector peer; `None` for an ipBlock, or a peer with neither
/// selector (the API server refuses it; it selects nothing).
fn peer_group(namespace: &str, peer: &NetworkPolicyPeer) -> Option<GroupKey> {
    if peer.ip_block.is_some() || (peer.pod_selector.is_none() && peer.namespace_selector.is_none())
    {
        return None;
    }
    Some(GroupKey {
        members: GroupMembers::Addresses,
        scope: match &peer.namespace_selector {
            None => GroupScope::Namespace(namespace.to_string()),
            Some(sel) => GroupScope::Namespaces(CanonicalSelector::new(Some(sel))),
        },
        pods: CanonicalSelector::new(peer.pod_selector.as_ref()),
    })
}

/// Every group a policy's translation refers to.
pub fn policy_groups(np: &NetworkPolicy) -> Vec<GroupKey> {
    // A policy without a name or namespace is not translated (see [`network_policy`]).
    let (Ok(id), Some(spec)) = (
        NamespacedName::of(NETWORK_POLICY_KIND, &np.metadata),
        np.spec.as_ref(),
    ) else {
        return Vec::new();
    };
    let namespace = id.namespace;
    let (ingress_on, egress_on) = policy_types(spec);
    let mut out = Vec::new();
    if ingress_on {
        out.push(selected_group(namespace, spec, GroupMembers::Addresses));
        out.extend(
            spec.ingress
                .iter()
                .flatten()
                .flat_map(|r| r.from.iter().flatten())
                .filter_map(|p| peer_group(namespace, p)),
        );
    }
    if egress_on {
        out.push(selected_group(namespace, spec, GroupMembers::Ports));
        out.extend(
            spec.egress
                .iter()
                .flatten()
                .flat_map(|r| r.to.iter().flatten())
                .filter_map(|p| peer_group(namespace, p)),
        );
    }
    out.sort();
    out.dedup();
    out
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
    /// The shared address group of the peer's selectors, by ID.
    Group(Uuid),
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

/// Warns about a selector with an operator Kubernetes does not define (it matches nothing).
fn check_selector(selector: Option<&LabelSelector>, out: &mut Translated) {
    if let Err(e) = CanonicalSelector::new(selector).validate() {
        out.warn(INVALID_SELECTOR, e);
    }
}

fn ip_block(block: &IPBlock, out: &mut Translated) -> Option<PeerMatch> {
    let cidr = match parse_cidr(&block.cidr, CidrRules::IP_BLOCK) {
        Ok(c) => c,
        Err(CidrError::Ipv6) => {
            out.warn(
                reason::UNSUPPORTED_IP_FAMILY,
                format!("ipBlock {} is IPv6; the peer is skipped", block.cidr),
            );
            return None;
        }
        Err(CidrError::Invalid | CidrError::PrefixTooLong { .. }) => {
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
        match parse_cidr(raw, CidrRules::IP_BLOCK) {
            Ok(c) => except.push(c),
            // An IPv6 exception cannot carve anything out of an IPv4 block.
            Err(CidrError::Ipv6) => {}
            Err(CidrError::Invalid | CidrError::PrefixTooLong { .. }) => {
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

/// Translates one NetworkPolicy against the cluster's pods (for named ports) into the
/// Translation `networkpolicy.<v>.<name>` in the policy's namespace: its chains and rules.
/// The groups they match on are not part of it: see [`address_groups`].
pub fn network_policy(
    cfg: &TranslatorConfig,
    np: &NetworkPolicy,
    cluster: &PolicyCluster,
) -> Translated {
    let id = match NamespacedName::of(NETWORK_POLICY_KIND, &np.metadata) {
        Ok(id) => id,
        Err(w) => return Translated::refused(w),
    };
    let mut out = Translated::default();
    let Some(spec) = np.spec.as_ref() else {
        return out;
    };
    check_selector(spec.pod_selector.as_ref(), &mut out);
    let addresses = selected_group(id.namespace, spec, GroupMembers::Addresses);
    let selected_pods: Vec<&PolicyPod> = addresses.select(cluster);
    let selected = generation::Selected {
        addresses: addresses.id(cfg),
        ports: selected_group(id.namespace, spec, GroupMembers::Ports).id(cfg),
    };
    let plans = rule_plans(cfg, id.namespace, spec, &selected_pods, cluster, &mut out);
    // The generation: everything the chains match, hashed.
    let text = encoding::generation_text(&plans, selected.addresses, selected.ports);
    let hash = encoding::short_hash(&text);
    let key = id.key();
    let policy = id_for_key(cfg, NETWORK_POLICY_KIND, &key);
    let generation = generation::Generation {
        policy,
        id: sub_id(policy, &format!("Generation/{hash}")),
        hash: &hash,
        key: &key,
    };
    // The groups the rules name are in their own Translations, which the pusher pushes
    // first (referents).
    let resources = generation::resources(cfg, &generation, &plans, &selected);
    out.translations.push(DesiredTranslation::versioned(
        cfg,
        NETWORK_POLICY_KIND,
        &NameKey::object(id.name),
        id.namespace,
        resources,
    ));
    // A bad selector is met once per pod it is tried on: report it once.
    let mut seen = BTreeSet::new();
    out.warnings
        .retain(|w| seen.insert((w.reason.clone(), w.message.clone())));
    out
}

/// The rule plans of each direction the policy has, in that order: ingress, egress.
fn rule_plans(
    cfg: &TranslatorConfig,
    namespace: &str,
    spec: &NetworkPolicySpec,
    selected: &[&PolicyPod],
    cluster: &PolicyCluster,
    out: &mut Translated,
) -> Vec<(Direction, Vec<RulePlan>)> {
    let (ingress_on, egress_on) = policy_types(spec);
    let all_pods: Vec<&PolicyPod> = cluster.pods.iter().collect();
    let mut plans: Vec<(Direction, Vec<RulePlan>)> = Vec::new();
    if ingress_on {
        let mut rules = Vec::new();
        for r in spec.ingress.iter().flatten() {
            let peers = plan_peers(cfg, namespace, r.from.as_deref(), out);
            let ports = resolve_ports(r.ports.as_deref(), selected, out);
            rules.push(RulePlan { ports, peers });
        }
        plans.push((Direction::Ingress, rules));
    }
    if egress_on {
        let mut rules = Vec::new();
        for r in spec.egress.iter().flatten() {
            let peers = plan_peers(cfg, namespace, r.to.as_deref(), out);
            let ports = resolve_ports(r.ports.as_deref(), &all_pods, out);
            rules.push(RulePlan { ports, peers });
        }
        plans.push((Direction::Egress, rules));
    }
    plans
}

fn plan_peers(
    cfg: &TranslatorConfig,
    namespace: &str,
    peers: Option<&[NetworkPolicyPeer]>,
    out: &mut Translated,
) -> Vec<PeerMatch> {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return vec![PeerMatch::Any];
    };
    let mut matches = Vec::new();
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            matches.extend(ip_block(block, out));
            continue;
        }
        check_selector(peer.namespace_selector.as_ref(), out);
        check_selector(peer.pod_selector.as_ref(), out);
        // The group's identity is the canonical selectors, so an edited peer is another
        // group that the old generation never sees.
        if let Some(group) = peer_group(namespace, peer) {
            matches.push(PeerMatch::Group(group.id(cfg)));
        }
    }
    matches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::TranslationResource;
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

    fn pod(ns: &str, name: &str, labels: serde_json::Value, ip: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "podIP": ip}
        }))
        .unwrap()
    }

    fn policy(name: &str, spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn a_pods_named_ports_include_its_sidecars_not_its_plain_init_containers() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "shop"},
            "spec": {"nodeName": "n1",
                     "containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 80}]}],
                     "initContainers": [
                         {"name": "proxy", "restartPolicy": "Always",
                          "ports": [{"name": "tls", "containerPort": 8443}]},
                         {"name": "setup", "ports": [{"name": "setup", "containerPort": 99}]}]},
            "status": {"phase": "Running", "podIP": "10.1.0.1"}
        }))
        .unwrap();
        let ports = PolicyPod::from_pod(&pod).map(|p| p.ports);
        let names: Option<Vec<(String, u16)>> =
            ports.map(|p| p.into_iter().map(|n| (n.name, n.port)).collect());
        assert_eq!(names, Some(vec![("http".into(), 80), ("tls".into(), 8443)]));
    }

    /// The group IDs a policy's rules match on, in rule order.
    fn groups_named(tr: &DesiredTranslation) -> Vec<String> {
        let mut out = Vec::new();
        for r in &tr.resources {
            let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            for k in ["ipAddrGroupSrc", "ipAddrGroupDst", "portGroup"] {
                if let Some(id) = body.get(k).and_then(|v| v.as_str()) {
                    out.push(id.to_string());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Two namespaces (`shop` of team a, `ops` of team b), web pods of tiers a and b, a db
    /// pod, and three policies naming the same selectors in different writings.
    fn shared_fixture() -> (PolicyCluster, [NetworkPolicy; 3]) {
        let namespaces: Vec<Namespace> = serde_json::from_value(json!([
            {"metadata": {"name": "shop", "labels": {"team": "a"}}},
            {"metadata": {"name": "ops", "labels": {"team": "b"}}}
        ]))
        .unwrap();
        let pods = vec![
            pod(
                "shop",
                "web-1",
                json!({"app": "web", "tier": "a"}),
                "10.1.0.1",
            ),
            pod(
                "shop",
                "web-2",
                json!({"app": "web", "tier": "b"}),
                "10.1.0.2",
            ),
            pod("shop", "db", json!({"app": "db"}), "10.1.0.3"),
            pod("ops", "mon", json!({"app": "mon"}), "10.2.0.1"),
        ];
        // The same selectors written two ways: matchLabels versus an `In` expression, and
        // expressions in another order with repeated values; an absent peer podSelector
        // versus `{}` beside a namespaceSelector.
        let one = policy(
            "one",
            json!({"podSelector": {"matchLabels": {"app": "web"},
                                   "matchExpressions": [{"key": "tier", "operator": "In",
                                                         "values": ["b", "a"]}]},
                   "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
        );
        let two = policy(
            "two",
            json!({"podSelector": {"matchExpressions": [
                       {"key": "tier", "operator": "In", "values": ["a", "b", "a"]},
                       {"key": "app", "operator": "In", "values": ["web"]}]},
                   "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}},
                                          "podSelector": {}}]}]}),
        );
        let three = policy(
            "three",
            json!({"podSelector": {"matchLabels": {"app": "db"}},
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web", "tier": "a"}}},
                                         {"podSelector": {"matchLabels": {"app": "web"},
                                                          "matchExpressions": [
                                                              {"key": "tier", "operator": "In",
                                                               "values": ["a", "b"]}]}}]}]}),
        );
        (PolicyCluster::new(&namespaces, &pods), [one, two, three])
    }

    /// A group Translation's group ID and its member addresses, sorted.
    fn members(tr: &DesiredTranslation) -> (String, Vec<String>) {
        let body = |r: &TranslationResource| -> serde_json::Value {
            serde_json::from_str(&r.body).unwrap()
        };
        let mut addrs: Vec<String> = tr
            .resources
            .iter()
            .filter(|r| r.kind == "IpAddrGroupAddr")
            .map(|r| body(r)["addr"].as_str().unwrap().to_string())
            .collect();
        addrs.sort();
        let id = body(&tr.resources[0])["id"].as_str().unwrap().to_string();
        (id, addrs)
    }

    #[test]
    fn a_policy_without_named_ports_reads_no_pod() {
        // What lets the controller skip reading the pods for such a policy.
        let cfg = TranslatorConfig::default();
        let (cluster, policies) = shared_fixture();
        for np in &policies {
            let with = network_policy(&cfg, np, &cluster);
            let without = network_policy(&cfg, np, &PolicyCluster::default());
            assert_eq!(with.translations, without.translations);
            assert_eq!(with.warnings, without.warnings);
        }
    }

    #[test]
    fn policies_with_the_same_selectors_share_their_groups() {
        let cfg = TranslatorConfig::default();
        let (cluster, policies) = shared_fixture();
        let groups = address_groups(&cfg, &policies, &cluster);
        // one and two: the selected web pods and the pods of team-b namespaces (two groups);
        // three: the selected db pod (a third), the web pods of tier a (a fourth), and the
        // web pods of tiers a and b as peers: the very group one and two select.
        assert_eq!(groups.len(), 4, "{groups:#?}");
        let by_members: BTreeMap<Vec<String>, (String, String)> = groups
            .iter()
            .map(|g| {
                let (id, addrs) = members(g);
                (addrs, (id, g.namespace.clone()))
            })
            .collect();
        let group = |addrs: &[&str]| {
            by_members[&addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>()].clone()
        };
        let web = group(&["10.1.0.1", "10.1.0.2"]);
        let web_a = group(&["10.1.0.1"]);
        let team_b = group(&["10.2.0.1"]);
        let db = group(&["10.1.0.3"]);
        // The web pods are one group although three policies name them (two as the pods
        // they select, one as peers): a label selector's canonical form, not its writing.
        assert_eq!(by_members.len(), 4);
        for g in [&web, &web_a, &db] {
            assert_eq!(g.1, "shop");
        }
        // A namespaceSelector group spans namespaces: it lives with the global Translations.
        assert_eq!(team_b.1, GLOBAL_TRANSLATION_NAMESPACE);
        let rules: Vec<Vec<String>> = policies
            .iter()
            .map(|np| {
                let out = network_policy(&cfg, np, &cluster);
                assert!(out.warnings.is_empty(), "{:?}", out.warnings);
                assert_eq!(out.translations.len(), 1);
                groups_named(&out.translations[0])
            })
            .collect();
        let sorted = |mut ids: Vec<String>| {
            ids.sort();
            ids
        };
        let shared = sorted(vec![web.0.clone(), team_b.0]);
        assert_eq!(rules[0], shared);
        assert_eq!(rules[1], shared);
        assert_eq!(rules[2], sorted(vec![web.0, web_a.0, db.0]));
    }

    #[test]
    fn groups_are_translations_of_their_own() {
        let cfg = TranslatorConfig::default();
        let (cluster, policies) = shared_fixture();
        let groups = address_groups(&cfg, &policies, &cluster);
        // The orphan sweep knows the policies' groups by their name.
        for g in &groups {
            let b: serde_json::Value = serde_json::from_str(&g.resources[0].body).unwrap();
            let name = b["name"].as_str().unwrap();
            assert!(name.starts_with(GROUP_NAME_PREFIX), "{name}");
        }
        assert!(NODE_PORT_GROUP_NAME.starts_with(GROUP_NAME_PREFIX));
        // Each group is a Translation of its own, labelled as such with the version.
        let version = cfg.version.as_str();
        for g in &groups {
            assert_eq!(g.labels.get(GROUP_LABEL).map(String::as_str), Some("true"));
            assert_eq!(
                g.labels.get(crate::meta::VERSION_LABEL).map(String::as_str),
                Some(version)
            );
            let prefix = format!("networkpolicygroup.{version}.");
            assert!(g.name.starts_with(&prefix), "{}", g.name);
        }
        // A version bump moves every group to new IDs and names.
        let bumped_cfg = TranslatorConfig {
            version: "7".into(),
            ..TranslatorConfig::default()
        };
        let bumped = address_groups(&bumped_cfg, &policies, &cluster);
        for (old, new) in groups.iter().zip(&bumped) {
            assert_ne!(old.name, new.name);
            assert_ne!(members(old).0, members(new).0);
            assert_eq!(members(old).1, members(new).1);
        }
    }

    #[test]
    fn canonical_selectors_ignore_the_writing_only() {
        let sel = |v: serde_json::Value| {
            CanonicalSelector::new(Some(&serde_json::from_value::<LabelSelector>(v).unwrap()))
        };
        assert_eq!(CanonicalSelector::new(None), sel(json!({})));
        assert_eq!(
            sel(json!({"matchLabels": {"a": "1"}})),
            sel(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}))
        );
        assert_eq!(
            sel(
                json!({"matchExpressions": [{"key": "b", "operator": "Exists"},
                                            {"key": "a", "operator": "NotIn", "values": ["y", "x"]}]})
            ),
            sel(
                json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x", "y"]},
                                            {"key": "b", "operator": "Exists"}]})
            )
        );
        // Different selections stay different.
        assert_ne!(
            sel(json!({"matchLabels": {"a": "1"}})),
            sel(json!({"matchLabels": {"a": "2"}}))
        );
        assert_ne!(
            sel(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]})),
            sel(json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}))
        );
        assert_ne!(sel(json!({})), sel(json!({"matchLabels": {"a": "1"}})));
    }

    #[test]
    fn ip_blocks_are_parsed_as_ip_blocks() {
        let block = |cidr: &str, except: &[&str]| IPBlock {
            cidr: cidr.into(),
            except: Some(except.iter().map(|e| e.to_string()).collect()),
        };
        let mut out = Translated::default();
        let net = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        // Host bits cleared, a /32 is one host, an IPv6 exception carves nothing out.
        assert_eq!(
            ip_block(
                &block("10.1.2.3/16", &["10.1.2.3/32", "fd00::/8"]),
                &mut out
            ),
            Some(PeerMatch::Block {
                cidr: net("10.1.0.0/16"),
                except: vec![net("10.1.2.3/32")]
            })
        );
        assert!(out.warnings.is_empty());
        assert_eq!(ip_block(&block("fd00::/8", &[]), &mut out), None);
        assert_eq!(
            out.warnings.pop().unwrap().reason,
            reason::UNSUPPORTED_IP_FAMILY
        );
        for bad in ["10.0.0.0", "10.0.0.0/40", "10.0.0.0/+8"] {
            assert_eq!(ip_block(&block(bad, &[]), &mut out), None);
            assert_eq!(
                out.warnings.pop().unwrap().reason,
                INVALID_IP_BLOCK,
                "{bad}"
            );
        }
        // A bad exception skips the whole peer: skipping only the exception would widen it.
        assert_eq!(
            ip_block(&block("10.0.0.0/8", &["10.1.0.0"]), &mut out),
            None
        );
        assert_eq!(out.warnings.pop().unwrap().reason, INVALID_IP_BLOCK);
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
