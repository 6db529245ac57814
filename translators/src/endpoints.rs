//! Endpoints: load-balancing a service port over its ready endpoints.
//!
//! # What is produced
//!
//! Per service port that has ready endpoints, one Translation (a *generation*) holding, in
//! push order:
//!
//! 1. a chain `KUBE-SEP-<namespace>/<name>/<port>/<hash>` (the generation chain);
//! 2. position 1: one DNAT rule (flowAction `continue`) whose `natTargets` are all ready
//!    `address:port` pairs. MidoNet picks one target at random for each new flow (midolman
//!    `NATState.chooseRandomNatTarget`): that is the load balancing. The original integration
//!    sent everything to whichever endpoint's rule came first (MNA-1264);
//! 3. positions 2..=n+1: one hairpin SNAT rule per distinct endpoint address E, matching
//!    `src = E and dst = E` after the DNAT, i.e. an endpoint that was balanced onto itself;
//!    the source becomes the cluster IP (ports 30000–60000), flowAction `continue`;
//! 4. position n+2: an `accept` rule, which ends rule processing like an accepting DNAT rule
//!    would;
//! 5. for a sticky port (`sessionAffinity: ClientIP` with an edge, see [`crate::affinity`]):
//!    a pool member per target (weight 1) in the port's pool on the edge's load balancer
//!    (made by the Service translator; see `pool_members`);
//! 6. with `externalTrafficPolicy: Local` and a node port, per node with endpoints of it:
//!    a DNAT of the port's node port onto that node's endpoints in the node's
//!    `KUBE-NODEPORTS-LOCAL-<node>` chain (see `local_node_port_rules`; a Cluster
//!    policy's node port reaches the `KUBE-SVC-…` chain through KUBE-NODEPORTS instead);
//! 7. a jump from the service port's `KUBE-SVC-…` chain (made by the Service translator) to
//!    the generation chain, at position 1.
//!
//! With `internalTrafficPolicy: Local` step 2 is several rules (see `balancing_rules`):
//! the DNAT onto every target for the Service's addresses but the cluster IP, then per node
//! with endpoints a DNAT of the cluster IP onto that node's own endpoints on that node's
//! bridge (`traversedDevice`), then a `drop` of what is left for the cluster IP (a node
//! without an endpoint of its own). The node of an endpoint is its `nodeName` (Endpoints
//! addresses, EndpointSlice endpoints; the runner moves a `v1beta1` slice's `topology`
//! there as it reads it); an endpoint without one is local to no node. The per-node sets
//! are chosen like the cluster's ([`select`]) among the node's endpoints, and are part of
//! the `<hash>`, as is the node port of step 5.
//!
//! `<hash>` is a hash of the cluster IP and the sorted target set, and it is part of the
//! Translation's name and of every ID in it. Rules cannot be updated, so a changed target set
//! is a new generation: a new Translation with new IDs; the runner deletes the old one once
//! the new one is pushed.
//!
//! # Why the hairpin SNAT comes after the DNAT
//!
//! MidoNet keeps NAT state per device (the `NatKey` holds the bridge the rule ran on) and
//! KUBE-PRE undoes NAT on replies as `[rev_snat (continue), rev_dnat (accept)]`, i.e. in the
//! reverse of DNAT-then-SNAT. Both facts require the DNAT to come first and the SNAT to apply
//! only to true hairpin traffic:
//!
//! - SNAT before DNAT leaves the reply `E -> clusterIP:P` with a DNAT reversal whose key no
//!   longer matches once `rev_snat` would have run, and `rev_dnat` accepting first leaves a
//!   packet addressed to the cluster IP, which nothing routes.
//! - SNAT on *all* traffic from an endpoint breaks the common case where endpoint E reaches
//!   its own service and is balanced onto another endpoint F on another node: F's reply goes
//!   to the cluster IP, the reverse-SNAT state sits on E's bridge, and F's bridge has none.
//!   Without SNAT, F answers E directly, the reply enters E's bridge and `rev_dnat` there
//!   restores the cluster IP as source, as for any other client.
//!
//! Only when E is balanced onto itself would the reply never leave E, so only then is SNAT
//! needed; that is what `dst = E` (matched after the DNAT rewrote the destination) selects.
//!
//! # Chain order under updates
//!
//! MidoNet inserts a POSTed rule at its `position` (1-based, default 1 = the head) and rejects
//! positions beyond `rules + 1`.
//!
//! - Inside the generation chain the order is fixed by explicit positions 1..=n+2, pushed in
//!   that order. The chain belongs to this Translation alone, so when the rule at position k
//!   is POSTed the k-1 rules before it are already there: every position is valid and the
//!   resulting order is the push order. A rule re-created later (drift repair) goes back to
//!   its own position.
//! - The jump into the generation chain is pushed last, at the head of `KUBE-SVC-…`. Until it
//!   exists the new generation is invisible and the previous one, whose jump sits further
//!   down, keeps serving; once it exists it shadows the previous one (the chain ends in
//!   `accept`, so nothing falls through to an older generation). Traffic switches between two
//!   complete, correctly ordered rule sets, never to a half-pushed one, whatever order the
//!   pusher handles the new and the pruned Translation in, and even if two generations are
//!   pushed concurrently: each generation's rules stay together in its own chain.
//! - What serves is the generation whose jump was pushed last, not the newest one: when two
//!   generations are pushed concurrently and the older one's jump comes last (it was still
//!   being pushed when the newer was written), the older serves until it is pruned. The
//!   runner prunes it once the newer one is pushed, and the pusher does not defer the
//!   deletion of a Translation holding rules in another's chain
//!   (`pusher::steps::holds_rules_in_others_chains`), so that lasts as long as one
//!   deletion waits for a worker, not the seconds a deletion nobody waits for may step
//!   aside.
//!
//! The tempting alternative, the rules directly in `KUBE-SVC-…` with one Translation for the
//! DNAT rule and one per endpoint for its SNAT rule, breaks on the first update: the replaced
//! DNAT rule is POSTed at the head, in front of the surviving SNAT rules, and explicit
//! positions cannot fix that in a chain other Translations insert into and delete from.
//!
//! # Pairing
//!
//! An Endpoints object is paired with the Service of the same namespace/name, and its ports
//! with the service ports of the same name and protocol (an unnamed port pairs with the
//! unnamed port). Without the Service, or without a usable cluster IP, nothing is produced;
//! the runner re-translates the Endpoints when the Service appears or changes.
//!
//! # Sources: Endpoints or EndpointSlices
//!
//! The translation works on a source-neutral [`ServiceEndpoints`]: groups of addresses (each
//! with its `ready`, `serving` and `terminating` conditions) that share a list of ports. An
//! Endpoints subset is one group ([`ServiceEndpoints::from_endpoints`]: `addresses` are
//! ready, `notReadyAddresses` are neither ready nor serving); an EndpointSlice is one group
//! ([`ServiceEndpoints::from_slices`]), and all slices of a Service are merged. Which
//! addresses get traffic is decided per service port as kube-proxy does
//! ([`Conditions`], [`select`]): the ready ones; when none is ready, the ones that are still
//! serving while terminating, so that connections are not refused during a rolling update
//! whose last pods are shutting down.
//!
//! Both sources give the same generation (same Translation name, same IDs) for the same
//! target set: switching a cluster from Endpoints to EndpointSlices leaves the backend as it
//! is. The owner differs: the Endpoints object, or the Service for slices (a Service has
//! several slices, and a Translation needs one owner that lives as long as it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::addr::{parse_ipv4, AddrError};
use crate::affinity::sticky_ports;
use crate::ids::{id_for_key, sub_id};
use crate::model::{
    Chain, FlowAction, NatTarget, PoolMember, PortRange, Resource, Rule, RuleType, DL_TYPE_IPV4,
};
use crate::naming::{backend_name, NameKey, Part};
use crate::service_spec::{
    cluster_ipv4, external_traffic_local, internal_traffic_local, node_port, port_number,
    protocol_number, service_ips, valid_ports,
};
use crate::topology::{
    node_bridge_id, node_local_nodeports_chain_id, service_port_chain_id, service_port_key,
    service_port_pool_id, SNAT_PORT_FROM, SNAT_PORT_TO,
};
use crate::translate::{reason, DesiredTranslation, NamespacedName, Translated, TranslatorConfig};

/// Kind of the per-port generation Translations and of their IDs.
pub const ENDPOINTS_PORT_KIND: &str = "Endpoints-Port";

/// The kinds read here, as warnings name them.
const ENDPOINTS_KIND: &str = "Endpoints";
const SERVICE_KIND: &str = "Service";

/// The label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The state of one endpoint address, with the EndpointSlice meaning of each field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conditions {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl Conditions {
    /// Ready (and so serving, not terminating).
    pub const READY: Conditions = Conditions {
        ready: true,
        serving: true,
        terminating: false,
    };
    /// Neither ready nor serving: gets no traffic.
    pub const NOT_READY: Conditions = Conditions {
        ready: false,
        serving: false,
        terminating: false,
    };

    /// The API's conditions with its defaults: a nil `ready` or `serving` is "true", a nil
    /// `terminating` is "false" (`discovery.k8s.io/v1` EndpointConditions). An apiserver
    /// without the `EndpointSliceTerminatingCondition` feature drops `serving` and
    /// `terminating`, which then read as "serving, not terminating".
    pub fn of(c: Option<&k8s_openapi::api::discovery::v1::EndpointConditions>) -> Conditions {
        let c = c.cloned().unwrap_or_default();
        Conditions {
            ready: c.ready.unwrap_or(true),
            serving: c.serving.unwrap_or(true),
            terminating: c.terminating.unwrap_or(false),
        }
    }
}

/// Which addresses of one service port get traffic, as kube-proxy chooses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Eligibility {
    /// Ready: always used.
    Ready,
    /// Not ready, but serving while terminating: used only when no address is ready.
    Fallback,
    /// Never used.
    None,
}

impl Conditions {
    pub fn eligibility(self) -> Eligibility {
        if self.ready {
            Eligibility::Ready
        } else if self.serving && self.terminating {
            Eligibility::Fallback
        } else {
            Eligibility::None
        }
    }
}

/// The addresses of one service port that get traffic: the ready ones, or, when there are
/// none, the serving terminating ones (kube-proxy's `CategorizeEndpoints` for cluster
/// traffic). `candidates` are (address, eligibility) pairs of that port.
pub fn select<T: Ord + Clone>(candidates: &[(T, Eligibility)]) -> BTreeSet<T> {
    let of = |want: Eligibility| -> BTreeSet<T> {
        candidates
            .iter()
            .filter(|(_, e)| *e == want)
            .map(|(t, _)| t.clone())
            .collect()
    };
    let ready = of(Eligibility::Ready);
    if ready.is_empty() {
        of(Eligibility::Fallback)
    } else {
        ready
    }
}

/// One port of an endpoint group, as written in the source (validated when paired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPort {
    pub name: String,
    pub protocol: Option<String>,
    pub port: i32,
}

/// One address of an endpoint group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupAddress {
    pub ip: String,
    pub conditions: Conditions,
    /// The node the endpoint runs on (`nodeName`), when the source says.
    pub node: Option<String>,
}

/// Addresses that all serve the same ports: an Endpoints subset or an EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointGroup {
    pub ports: Vec<GroupPort>,
    pub addresses: Vec<GroupAddress>,
}

/// The endpoints of one Service, whatever API they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceEndpoints {
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    pub groups: Vec<EndpointGroup>,
}

/// The parts of an EndpointSlice the translation reads; `discovery.k8s.io/v1beta1` slices
/// have the same shape for these fields.
#[derive(Clone, Copy, Debug)]
pub struct SliceView<'a> {
    pub namespace: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub address_type: &'a str,
    pub endpoints: &'a [Endpoint],
    pub ports: &'a [EndpointPort],
}

impl<'a> From<&'a EndpointSlice> for SliceView<'a> {
    fn from(s: &'a EndpointSlice) -> Self {
        SliceView {
            namespace: s.metadata.namespace.as_deref(),
            labels: s.metadata.labels.as_ref(),
            address_type: &s.address_type,
            endpoints: &s.endpoints,
            ports: s.ports.as_deref().unwrap_or_default(),
        }
    }
}

impl ServiceEndpoints {
    /// An Endpoints object: each subset is a group; `addresses` are ready,
    /// `notReadyAddresses` neither ready nor serving (Endpoints has no terminating state).
    /// `None` without a name or namespace.
    pub fn from_endpoints(ep: &Endpoints) -> Option<ServiceEndpoints> {
        let id = NamespacedName::of(ENDPOINTS_KIND, &ep.metadata).ok()?;
        Some(ServiceEndpoints::of_endpoints(id, ep))
    }

    fn of_endpoints(id: NamespacedName, ep: &Endpoints) -> ServiceEndpoints {
        let groups = ep
            .subsets
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|subset| {
                let with = |list: &[k8s_openapi::api::core::v1::EndpointAddress], conditions| {
                    list.iter()
                        .map(|a| GroupAddress {
                            ip: a.ip.clone(),
                            conditions,
                            node: a.node_name.clone(),
                        })
                        .collect::<Vec<_>>()
                };
                EndpointGroup {
                    ports: subset
                        .ports
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .map(|p| GroupPort {
                            name: p.name.clone().unwrap_or_default(),
                            protocol: p.protocol.clone(),
                            port: p.port,
                        })
                        .collect(),
                    addresses: [
                        with(
                            subset.addresses.as_deref().unwrap_or_default(),
                            Conditions::READY,
                        ),
                        with(
                            subset.not_ready_addresses.as_deref().unwrap_or_default(),
                            Conditions::NOT_READY,
                        ),
                    ]
                    .concat(),
                }
            })
            .collect();
        ServiceEndpoints {
            namespace: id.namespace.to_string(),
            name: id.name.to_string(),
            groups,
        }
    }

    /// The EndpointSlices of the Service `namespace/name`, merged: every slice in that
    /// namespace labelled `kubernetes.io/service-name: <name>` is one group; other slices
    /// are ignored. Slices of address type `FQDN` are ignored (nothing routes to a name);
    /// `IPv6` ones are kept so that their addresses are reported as unsupported. Of an
    /// endpoint's `addresses` only the first is used: the API says they are fungible and
    /// consumers may use only the first.
    pub fn from_slices<'a>(
        namespace: &str,
        name: &str,
        slices: impl IntoIterator<Item = SliceView<'a>>,
    ) -> ServiceEndpoints {
        let groups = slices
            .into_iter()
            .filter(|s| {
                s.namespace == Some(namespace)
                    && s.labels
                        .and_then(|l| l.get(SERVICE_NAME_LABEL))
                        .map(String::as_str)
                        == Some(name)
                    && s.address_type != "FQDN"
            })
            .map(|s| EndpointGroup {
                // A port without a number is not restricted to one number; kube-proxy
                // skips it, as there is nothing to DNAT to.
                ports: s
                    .ports
                    .iter()
                    .filter_map(|p| {
                        Some(GroupPort {
                            name: p.name.clone().unwrap_or_default(),
                            protocol: p.protocol.clone(),
                            port: p.port?,
                        })
                    })
                    .collect(),
                addresses: s
                    .endpoints
                    .iter()
                    .filter_map(|e| {
                        Some(GroupAddress {
                            ip: e.addresses.first()?.clone(),
                            conditions: Conditions::of(e.conditions.as_ref()),
                            node: e.node_name.clone(),
                        })
                    })
                    .collect(),
            })
            .collect();
        ServiceEndpoints {
            namespace: namespace.to_string(),
            name: name.to_string(),
            groups,
        }
    }
}

/// Endpoints input: see [`service_endpoints`].
pub fn endpoints(cfg: &TranslatorConfig, ep: &Endpoints, svc: Option<&Service>) -> Translated {
    match NamespacedName::of(ENDPOINTS_KIND, &ep.metadata) {
        Ok(id) => service_endpoints(cfg, &ServiceEndpoints::of_endpoints(id, ep), svc),
        Err(w) => Translated::refused(w),
    }
}

/// EndpointSlice input: the slices of `svc` among `slices`, merged (see
/// [`ServiceEndpoints::from_slices`]).
pub fn endpoint_slices<'a>(
    cfg: &TranslatorConfig,
    svc: &Service,
    slices: impl IntoIterator<Item = SliceView<'a>>,
) -> Translated {
    let id = match NamespacedName::of(SERVICE_KIND, &svc.metadata) {
        Ok(id) => id,
        Err(w) => return Translated::refused(w),
    };
    let se = ServiceEndpoints::from_slices(id.namespace, id.name, slices);
    service_endpoints(cfg, &se, Some(svc))
}

/// The generations of a Service's endpoints, paired with the Service `svc`.
pub fn service_endpoints(
    cfg: &TranslatorConfig,
    se: &ServiceEndpoints,
    svc: Option<&Service>,
) -> Translated {
    let mut out = Translated::default();
    let (namespace, name) = (se.namespace.as_str(), se.name.as_str());
    if name.is_empty() {
        return out;
    }
    let Some(svc) = svc.filter(|s| {
        s.metadata.name.as_deref() == Some(name)
            && s.metadata.namespace.as_deref() == Some(namespace)
    }) else {
        return out;
    };
    // A bad cluster IP or port is reported on the Service; here it only means "nothing".
    let Ok(Some(cluster_ip)) = cluster_ipv4(svc) else {
        return out;
    };
    let ports = valid_ports(svc, |_| {});
    let ips = service_ips(svc, cluster_ip, |_| {});
    let sticky: BTreeSet<&str> = sticky_ports(cfg.edge.is_some(), svc, &ports, cluster_ip, &ips)
        .into_iter()
        .map(|s| s.port.name.as_str())
        .collect();
    let service_ports: BTreeMap<String, u8> =
        ports.iter().map(|p| (p.name.clone(), p.proto)).collect();

    let internal_local = internal_traffic_local(svc);
    let external_local = external_traffic_local(svc);
    let targets = targets(se, &service_ports, &mut out);
    for (port_name, targets) in &targets {
        if !targets.all.is_empty() {
            let port = GenerationPort {
                namespace,
                name,
                port_name,
                cluster_ip,
                internal_local,
                local_node_port: external_local
                    .then(|| node_port(svc, port_name))
                    .flatten()
                    .zip(service_ports.get(port_name).copied()),
                pool: sticky.contains(port_name.as_str()).then(|| {
                    service_port_pool_id(cfg, &service_port_key(namespace, name, port_name))
                }),
            };
            out.translations.push(generation(cfg, &port, targets));
        }
    }
    out
}

/// The service port a generation load-balances, and its traffic policies.
struct GenerationPort<'a> {
    namespace: &'a str,
    name: &'a str,
    port_name: &'a str,
    cluster_ip: Ipv4Addr,
    /// `internalTrafficPolicy: Local`: the cluster IP is balanced per node.
    internal_local: bool,
    /// With `externalTrafficPolicy: Local`: the port's node port and protocol, DNATed per
    /// node onto that node's endpoints.
    local_node_port: Option<(u16, u8)>,
    /// A sticky port (`sessionAffinity: ClientIP`, [`crate::affinity`]): its pool on the
    /// edge's load balancer, where every target is a member.
    pool: Option<Uuid>,
}

/// The targets of one service port: for the cluster, and per node for the endpoints on it.
#[derive(Debug, Default)]
struct PortTargets {
    all: BTreeSet<Target>,
    by_node: ByNode,
}

/// Targets per node name.
type ByNode = BTreeMap<String, BTreeSet<Target>>;

/// The load-balancing rules of a generation, from position 1, into `chain`.
///
/// Cluster policy: one DNAT onto `all`. Local policy (`local`: the targets per node):
/// traffic to the cluster IP is balanced onto the endpoints of the node whose bridge it
/// is on, and dropped on a node without any (Kubernetes drops it too); the Service's other
/// addresses keep the Cluster policy. The first DNAT leaves the cluster IP alone
/// (`invNwDst`); each node's DNAT matches it on that node's bridge (`traversedDevice`:
/// KUBE-MAIN is the inbound filter of every node bridge, and midolman tags the bridge
/// before its inbound filter runs, `Bridge.process`); what is left for the cluster IP
/// is dropped. A rewritten destination matches none of the later rules, so no flow is
/// translated twice.
fn balancing_rules(
    cfg: &TranslatorConfig,
    (chain, base): (Uuid, Uuid),
    cluster_ip: Ipv4Addr,
    all: &BTreeSet<Target>,
    local: Option<&ByNode>,
) -> Vec<Rule> {
    let to = |t: &BTreeSet<Target>| t.iter().map(Target::nat_target).collect();
    let dnat = |id: Uuid, targets: &BTreeSet<Target>| {
        Rule::new(chain, id, RuleType::Dnat)
            .with_flow_action(FlowAction::Continue)
            .with_nat_targets(to(targets))
    };
    let Some(local) = local else {
        return vec![dnat(sub_id(base, "DNAT"), all).at(1)];
    };
    let mut cluster = dnat(sub_id(base, "DNAT"), all).to_host(cluster_ip);
    cluster.condition.inv_nw_dst = Some(true);
    let mut rules = vec![cluster];
    for (node, targets) in local.iter().filter(|(_, t)| !t.is_empty()) {
        let mut rule = dnat(sub_id(base, &format!("DNAT/{node}")), targets).to_host(cluster_ip);
        rule.condition.traversed_device = Some(node_bridge_id(cfg, node));
        rules.push(rule);
    }
    rules.push(Rule::new(chain, sub_id(base, "Drop"), RuleType::Drop).to_host(cluster_ip));
    (1u32..)
        .zip(rules)
        .map(|(position, rule)| rule.at(position))
        .collect()
}

/// The generation of `port` for `targets` (`all` not empty): its chain, the DNAT, a
/// hairpin SNAT per endpoint address, the accept, a sticky port's pool members, the node
/// ports of the Local external policy, and last the jump into the chain from the port's
/// chain.
fn generation(
    cfg: &TranslatorConfig,
    port: &GenerationPort,
    targets: &PortTargets,
) -> DesiredTranslation {
    let port_key = service_port_key(port.namespace, port.name, port.port_name);
    let local = port.internal_local.then_some(&targets.by_node);
    let node_port = port.local_node_port.map(|np| (np, &targets.by_node));
    let hash = generation_hash(port.cluster_ip, &targets.all, local, node_port);
    let generation_key = format!("{port_key}/{hash}");
    let base = id_for_key(cfg, ENDPOINTS_PORT_KIND, &generation_key);
    let chain = base;
    let mut resources: Vec<Resource> = vec![Chain::named(
        chain,
        &cfg.tenant,
        backend_name(format!("KUBE-SEP-{generation_key}")),
    )
    .into()];
    let balancing = balancing_rules(cfg, (chain, base), port.cluster_ip, &targets.all, local);
    let position = u32::try_from(balancing.len()).unwrap_or(u32::MAX);
    resources.extend(balancing.into_iter().map(Resource::from));
    // A node's endpoints are among the cluster's but for serving terminating ones chosen
    // on a node without ready ones: every address the rules may translate to.
    let hosts: BTreeSet<Ipv4Addr> = targets
        .all
        .iter()
        .chain(local.into_iter().flat_map(|l| l.values().flatten()))
        .map(|t| t.ip)
        .collect();
    resources.extend(hairpin_and_accept(
        (chain, base),
        position,
        port.cluster_ip,
        &hosts,
    ));
    if let Some(pool) = port.pool {
        resources.extend(pool_members(base, pool, &targets.all));
    }
    if let Some(((node_port, proto), by_node)) = node_port {
        resources.extend(local_node_port_rules(
            cfg,
            base,
            (node_port, proto),
            by_node,
        ));
    }
    resources.push(
        Rule::jump(
            service_port_chain_id(cfg, &port_key),
            sub_id(base, "Jump"),
            chain,
        )
        .at(1)
        .into(),
    );
    DesiredTranslation::versioned(
        cfg,
        ENDPOINTS_PORT_KIND,
        // A Service's name is a DNS-1123 label; an unnamed port is left out of a readable
        // name.
        &NameKey::new(Part::Label(port.name))
            .then(Part::Label(port.port_name))
            .then(Part::Label(&hash)),
        port.namespace,
        resources,
    )
}

/// After the balancing rules (the last at `position`): a hairpin SNAT per address in
/// `hosts` (onto the cluster IP), then the accept that ends the chain.
fn hairpin_and_accept(
    (chain, base): (Uuid, Uuid),
    mut position: u32,
    cluster_ip: Ipv4Addr,
    hosts: &BTreeSet<Ipv4Addr>,
) -> Vec<Resource> {
    let mut resources = Vec::new();
    for ip in hosts {
        position += 1;
        resources.push(
            Rule::new(chain, sub_id(base, &format!("SNAT/{ip}")), RuleType::Snat)
                .at(position)
                .with_flow_action(FlowAction::Continue)
                .from_host(*ip)
                .to_host(*ip)
                .with_nat_targets(vec![NatTarget::to_ports(
                    cluster_ip,
                    Some(SNAT_PORT_FROM),
                    Some(SNAT_PORT_TO),
                )])
                .into(),
        );
    }
    resources.push(
        Rule::new(chain, sub_id(base, "Accept"), RuleType::Accept)
            .at(position + 1)
            .into(),
    );
    resources
}

/// `externalTrafficPolicy: Local` at a node port: per node with endpoints, in that node's
/// `KUBE-NODEPORTS-LOCAL-<node>` (the Node translator's, jumped to for what is addressed to
/// the node's own addresses), a DNAT of the node port onto the node's own endpoints that
/// accepts. Nothing here SNATs (through the edge the client's source is kept, and the
/// edge's `rev_dnat` answers from the node's address). A newer generation's rule goes
/// in at the head and shadows this one until this one's Translation is deleted; node ports
/// are unique in the cluster, so no other Service's rule competes. A node without
/// endpoints has no rule: its node port meets the drop of its edge chain through the edge,
/// and goes back to the node's host on the host path.
///
/// These rules make the generation wait for each endpoint node's Translation (its chain),
/// as a pod waits for its node; an endpoint without a node is local to none.
fn local_node_port_rules(
    cfg: &TranslatorConfig,
    base: Uuid,
    (node_port, proto): (u16, u8),
    by_node: &ByNode,
) -> Vec<Resource> {
    by_node
        .iter()
        .filter(|(_, targets)| !targets.is_empty())
        .map(|(node, targets)| {
            let mut rule = Rule::new(
                node_local_nodeports_chain_id(cfg, node),
                sub_id(base, &format!("NodePort/{node}")),
                RuleType::Dnat,
            )
            .at(1)
            .with_flow_action(FlowAction::Accept)
            .with_nat_targets(targets.iter().map(Target::nat_target).collect());
            rule.dl_type = Some(DL_TYPE_IPV4);
            rule.nw_proto = Some(proto);
            rule.tp_dst = Some(PortRange::single(node_port));
            rule.into()
        })
        .collect()
}

/// A sticky port's members: every target the DNAT of the Service's addresses balances
/// onto (`all`), weight 1, in `pool`. Their IDs descend from the generation: the next
/// generation's members of the same `address:port` coexist with these until this one is
/// deleted, and midolman keeps a client on its member as long as some active member has
/// that address and port (`Pool.isActiveBackend`), so the client's affinity survives the
/// hand-over. The generation's hash leaves the pool out: a Service turning sticky adds
/// members to the generation it has.
fn pool_members(base: Uuid, pool: Uuid, all: &BTreeSet<Target>) -> Vec<Resource> {
    all.iter()
        .map(|t| {
            let id = sub_id(base, &format!("Member/{}:{}", t.ip, t.port));
            PoolMember::new(pool, id, t.ip, t.port).into()
        })
        .collect()
}

/// One endpoint `address:port`, ordered by address then port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    ip: Ipv4Addr,
    port: u16,
}

impl Target {
    fn nat_target(&self) -> NatTarget {
        NatTarget::to(self.ip, Some(self.port))
    }
}

/// The IPv4 `address:port` targets that get traffic, per service port name, sorted and
/// de-duplicated (see [`select`]). Only addresses that could get traffic are reported when
/// unusable.
fn targets(
    se: &ServiceEndpoints,
    service_ports: &BTreeMap<String, u8>,
    out: &mut Translated,
) -> BTreeMap<String, PortTargets> {
    let mut candidates: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
    let mut invalid_addresses = BTreeSet::new();
    let mut invalid_ports = BTreeSet::new();
    let mut ipv6 = 0usize;
    for group in &se.groups {
        let mut ports = Vec::new();
        for p in &group.ports {
            // Ports the Service translator skipped have no chain to fill.
            let Some(&proto) = service_ports.get(&p.name) else {
                continue;
            };
            if protocol_number(p.protocol.as_deref()) != Some(proto) {
                continue;
            }
            match port_number(p.port) {
                Some(port) => ports.push((&p.name, port)),
                None => {
                    invalid_ports.insert(format!("{:?}={}", p.name, p.port));
                }
            }
        }
        for a in &group.addresses {
            let eligibility = a.conditions.eligibility();
            if eligibility == Eligibility::None {
                continue;
            }
            let ip = match parse_ipv4(&a.ip) {
                Ok(ip) => ip,
                Err(AddrError::Ipv6) => {
                    ipv6 += 1;
                    continue;
                }
                Err(AddrError::Invalid) => {
                    invalid_addresses.insert(format!("{:?}", a.ip));
                    continue;
                }
            };
            for (port_name, port) in &ports {
                candidates.entry((*port_name).clone()).or_default().push((
                    Target { ip, port: *port },
                    eligibility,
                    a.node.as_deref(),
                ));
            }
        }
    }
    if !invalid_addresses.is_empty() {
        out.warn(
            reason::INVALID_ENDPOINT_ADDRESS,
            format!(
                "endpoint addresses that are not IP addresses are skipped: {}",
                invalid_addresses.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if !invalid_ports.is_empty() {
        out.warn(
            reason::INVALID_PORT,
            format!(
                "endpoint ports outside 1-65535 are skipped: {}",
                invalid_ports.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if ipv6 > 0 {
        out.warn(
            reason::UNSUPPORTED_IP_FAMILY,
            format!("{ipv6} IPv6 endpoint address(es) skipped; MidoNet needs IPv4"),
        );
    }
    candidates
        .into_iter()
        .map(|(port, c)| (port, port_targets(&c)))
        .collect()
}

/// A target that may get traffic, how eligible it is, and the node it is on.
type Candidate<'a> = (Target, Eligibility, Option<&'a str>);

/// The targets of one port's candidates, chosen by [`select`] for the cluster and, among
/// each node's own endpoints, for that node (an endpoint without a node is on none).
fn port_targets(candidates: &[Candidate]) -> PortTargets {
    let pick = |on: Option<&str>| -> BTreeSet<Target> {
        let c: Vec<(Target, Eligibility)> = candidates
            .iter()
            .filter(|(_, _, node)| on.is_none() || *node == on)
            .map(|(t, e, _)| (*t, *e))
            .collect();
        select(&c)
    };
    let nodes: BTreeSet<&str> = candidates.iter().filter_map(|(_, _, n)| *n).collect();
    PortTargets {
        all: pick(None),
        by_node: nodes
            .into_iter()
            .map(|n| (n.to_string(), pick(Some(n))))
            .collect(),
    }
}

/// 16 hex digits of SHA-256 over the cluster IP and the sorted targets: names a generation.
/// With a Local policy, the per-node targets too, and for the external one the node port
/// (a Cluster generation's name is what it was before the policies existed).
fn generation_hash(
    cluster_ip: Ipv4Addr,
    targets: &BTreeSet<Target>,
    local: Option<&ByNode>,
    node_port: Option<((u16, u8), &ByNode)>,
) -> String {
    let mut h = Sha256::new();
    h.update(cluster_ip.to_string().as_bytes());
    for t in targets {
        h.update(format!("\n{}:{}", t.ip, t.port).as_bytes());
    }
    let by_node = |h: &mut Sha256, by_node: &ByNode| {
        for (node, targets) in by_node {
            h.update(format!("\n@{node}").as_bytes());
            for t in targets {
                h.update(format!(" {}:{}", t.ip, t.port).as_bytes());
            }
        }
    };
    if let Some(local) = local {
        h.update(b"\ninternalTrafficPolicy=Local");
        by_node(&mut h, local);
    }
    if let Some(((node_port, proto), local)) = node_port {
        h.update(format!("\nexternalTrafficPolicy=Local nodePort={node_port}/{proto}").as_bytes());
        by_node(&mut h, local);
    }
    hex::encode(&h.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc() -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "10.96.0.10",
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]}
        }))
        .unwrap()
    }

    fn slice(service: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{service}-x"), "namespace": "ns",
                         "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
        .unwrap()
    }

    /// The `address:port` targets of the generation of port `http`, read back from the
    /// DNAT rule's body.
    fn http_targets(out: &Translated) -> BTreeSet<String> {
        let tr = out
            .translations
            .iter()
            .filter(|t| t.name.starts_with("endpoints-port.2.web.http."))
            .collect::<Vec<_>>();
        let mut set = BTreeSet::new();
        for t in &tr {
            for r in &t.resources {
                let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
                if body["type"] == "dnat" {
                    for nt in body["natTargets"].as_array().unwrap() {
                        set.insert(format!(
                            "{}:{}",
                            nt["addressFrom"].as_str().unwrap(),
                            nt["portFrom"]
                        ));
                    }
                }
            }
        }
        assert!(tr.len() <= 1, "one generation per port");
        set
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// The generation of port `http` of `svc` over the slice `endpoints`: its rules as
    /// (type, nwDst with `!` when inverted, traversedDevice, targets), in position order.
    fn local_rules(
        svc: &Service,
        endpoints: serde_json::Value,
    ) -> Vec<(String, String, Option<String>, Vec<String>)> {
        let s = slice("web", endpoints);
        let out = endpoint_slices(&TranslatorConfig::default(), svc, [SliceView::from(&s)]);
        let tr = &out.translations[0];
        let mut rules: Vec<(u64, _)> = tr
            .resources
            .iter()
            .map(|r| serde_json::from_str::<serde_json::Value>(&r.body).unwrap())
            .filter(|b| b["position"].is_u64() && b["type"] != "jump")
            .map(|b| {
                let inv = if b["invNwDst"] == true { "!" } else { "" };
                let dst = b["nwDstAddress"].as_str().map(|d| format!("{inv}{d}"));
                let targets = b["natTargets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| t["addressFrom"].as_str().unwrap().to_string())
                    .collect();
                let rule = (
                    b["type"].as_str().unwrap().to_string(),
                    dst.unwrap_or_default(),
                    b["traversedDevice"].as_str().map(str::to_string),
                    targets,
                );
                (b["position"].as_u64().unwrap(), rule)
            })
            .collect();
        rules.sort_by_key(|(p, _)| *p);
        rules.into_iter().map(|(_, r)| r).collect()
    }

    fn local_svc() -> Service {
        let mut s = svc();
        s.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
        s
    }

    #[test]
    fn internal_traffic_policy_local_balances_the_cluster_ip_per_node_and_drops_the_rest() {
        let cfg = TranslatorConfig::default();
        let bridge = |n: &str| Some(node_bridge_id(&cfg, n).to_string());
        let eps = json!([
            {"addresses": ["10.1.1.5"], "nodeName": "n1"},
            {"addresses": ["10.1.1.6"], "nodeName": "n1", "conditions": {"ready": false}},
            {"addresses": ["10.1.2.5"], "nodeName": "n2",
             "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.1.3.5"], "nodeName": "n3", "conditions": {"ready": false}},
            {"addresses": ["10.1.9.9"]},
        ]);
        let rules = local_rules(&local_svc(), eps.clone());
        let ip = "10.96.0.10".to_string();
        let v = |ips: &[&str]| ips.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let expected = vec![
            // The other addresses: every ready endpoint, as with the Cluster policy.
            (
                "dnat".into(),
                format!("!{ip}"),
                None,
                v(&["10.1.1.5", "10.1.9.9"]),
            ),
            ("dnat".into(), ip.clone(), bridge("n1"), v(&["10.1.1.5"])),
            // No ready endpoint on n2: its serving terminating one, as kube-proxy does.
            ("dnat".into(), ip.clone(), bridge("n2"), v(&["10.1.2.5"])),
            // n3 (nothing eligible) and every node without endpoints: dropped.
            ("drop".into(), ip.clone(), None, v(&[])),
            // Hairpin: every address translated to, n2's terminating one included.
            ("snat".into(), "10.1.1.5".into(), None, v(&["10.96.0.10"])),
            ("snat".into(), "10.1.2.5".into(), None, v(&["10.96.0.10"])),
            ("snat".into(), "10.1.9.9".into(), None, v(&["10.96.0.10"])),
            ("accept".into(), String::new(), None, v(&[])),
        ];
        assert_eq!(rules, expected);
        // The Cluster policy: one DNAT, as before the policy was read.
        let cluster = local_rules(&svc(), eps);
        assert_eq!(
            cluster[0],
            (
                "dnat".into(),
                String::new(),
                None,
                v(&["10.1.1.5", "10.1.9.9"])
            )
        );
        assert_eq!(cluster[1].0, "snat");
    }

    #[test]
    fn the_local_policy_and_the_nodes_are_part_of_the_generation() {
        let cfg = TranslatorConfig::default();
        let name = |svc: &Service, node: &str| {
            let s = slice(
                "web",
                json!([{"addresses": ["10.1.1.5"], "nodeName": node}]),
            );
            endpoint_slices(&cfg, svc, [SliceView::from(&s)]).translations[0]
                .name
                .clone()
        };
        assert_ne!(name(&svc(), "n1"), name(&local_svc(), "n1"));
        assert_ne!(name(&local_svc(), "n1"), name(&local_svc(), "n2"));
        assert_eq!(
            name(&svc(), "n1"),
            name(&svc(), "n2"),
            "Cluster: nodes play no part"
        );
        // Endpoints objects say the node too.
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{"addresses": [{"ip": "10.1.1.5", "nodeName": "n1"}],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
        }))
        .unwrap();
        let out = endpoints(&cfg, &ep, Some(&local_svc()));
        assert_eq!(out.translations[0].name, name(&local_svc(), "n1"));
    }

    /// A NodePort Service (`http` at node port 30080) with `externalTrafficPolicy`.
    fn node_port_svc(policy: &str) -> Service {
        let mut s = svc();
        let spec = s.spec.as_mut().unwrap();
        spec.type_ = Some("NodePort".into());
        spec.external_traffic_policy = Some(policy.into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
        s
    }

    #[test]
    fn external_traffic_policy_local_dnats_each_nodes_node_port_onto_its_own_endpoints() {
        let cfg = TranslatorConfig::default();
        let eps = json!([
            {"addresses": ["10.1.1.5"], "nodeName": "n1"},
            {"addresses": ["10.1.1.6"], "nodeName": "n1"},
            {"addresses": ["10.1.2.5"], "nodeName": "n2", "conditions": {"ready": false}},
            {"addresses": ["10.1.9.9"]},
        ]);
        let s = slice("web", eps);
        let local = endpoint_slices(&cfg, &node_port_svc("Local"), [SliceView::from(&s)]);
        let tr = &local.translations[0];
        let node_port_rules: Vec<(Uuid, serde_json::Value)> = tr
            .resources
            .iter()
            .map(|r| (r.parent.clone(), serde_json::from_str(&r.body).unwrap()))
            .filter(|(_, b): &(String, serde_json::Value)| b["tpDst"]["start"] == 30080)
            .map(|(parent, b)| (parent.parse().unwrap(), b))
            .collect();
        // n1 only: n2 has nothing eligible, and an endpoint without a node is on none.
        assert_eq!(node_port_rules.len(), 1, "{node_port_rules:#?}");
        let (chain, rule) = &node_port_rules[0];
        assert_eq!(*chain, node_local_nodeports_chain_id(&cfg, "n1"));
        assert_eq!(rule["type"], "dnat");
        assert_eq!(rule["flowAction"], "accept");
        assert_eq!(rule["nwProto"], 6);
        let targets: Vec<&str> = rule["natTargets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["addressFrom"].as_str().unwrap())
            .collect();
        assert_eq!(targets, ["10.1.1.5", "10.1.1.6"]);
        // The jump into the generation is pushed last, after the node ports.
        assert!(tr
            .resources
            .last()
            .unwrap()
            .body
            .contains("\"type\":\"jump\""));
        // The cluster IP keeps every ready endpoint.
        assert_eq!(
            http_targets(&local),
            set(&["10.1.1.5:8080", "10.1.1.6:8080", "10.1.9.9:8080"])
        );

        // Cluster: no per-node rule, and the generation is named as before the policy.
        let cluster = endpoint_slices(&cfg, &node_port_svc("Cluster"), [SliceView::from(&s)]);
        assert!(cluster.translations[0]
            .resources
            .iter()
            .all(|r| !r.body.contains("30080")));
        assert_ne!(tr.name, cluster.translations[0].name);
    }

    #[test]
    fn absent_conditions_read_as_the_api_defines_them() {
        assert_eq!(Conditions::of(None), Conditions::READY);
        let c = serde_json::from_value(json!({"ready": false})).unwrap();
        assert_eq!(
            Conditions::of(Some(&c)),
            Conditions {
                ready: false,
                serving: true,
                terminating: false
            }
        );
        assert_eq!(Conditions::of(Some(&c)).eligibility(), Eligibility::None);
    }

    #[test]
    fn terminating_serving_endpoints_are_used_only_without_ready_ones() {
        let c = |ready, serving, terminating| {
            Conditions {
                ready,
                serving,
                terminating,
            }
            .eligibility()
        };
        assert_eq!(c(true, true, false), Eligibility::Ready);
        assert_eq!(c(false, true, true), Eligibility::Fallback);
        assert_eq!(c(false, false, true), Eligibility::None);
        assert_eq!(c(false, true, false), Eligibility::None);
        let both = [(1, Eligibility::Ready), (2, Eligibility::Fallback)];
        assert_eq!(select(&both), BTreeSet::from([1]));
        let only_terminating = [(2, Eligibility::Fallback), (3, Eligibility::None)];
        assert_eq!(select(&only_terminating), BTreeSet::from([2]));
        assert!(select::<i32>(&[(3, Eligibility::None)]).is_empty());
    }

    #[test]
    fn several_slices_of_a_service_are_merged_and_others_ignored() {
        let a = slice(
            "web",
            json!([{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2", "10.9.9.9"]}]),
        );
        let b = slice(
            "web",
            json!([{"addresses": ["10.1.0.3"], "conditions": {"ready": true}}]),
        );
        let other = slice("db", json!([{"addresses": ["10.1.0.4"]}]));
        let mut other_ns = slice("web", json!([{"addresses": ["10.1.0.5"]}]));
        other_ns.metadata.namespace = Some("elsewhere".into());
        let out = endpoint_slices(
            &TranslatorConfig::default(),
            &svc(),
            [&a, &b, &other, &other_ns].map(SliceView::from),
        );
        // Only the first address of an endpoint counts.
        assert_eq!(
            http_targets(&out),
            set(&["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"])
        );
        assert!(out.warnings.is_empty());
    }

    #[test]
    fn kube_proxy_fallback_to_serving_terminating_endpoints() {
        let cfg = TranslatorConfig::default();
        let ready = json!({"addresses": ["10.1.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false}});
        let draining = json!({"addresses": ["10.1.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}});
        let dying = json!({"addresses": ["10.1.0.3"], "conditions": {"ready": false, "serving": false, "terminating": true}});
        let starting = json!({"addresses": ["10.1.0.4"], "conditions": {"ready": false, "serving": false, "terminating": false}});
        let with_ready = slice("web", json!([ready, draining, dying, starting]));
        let out = endpoint_slices(&cfg, &svc(), [SliceView::from(&with_ready)]);
        assert_eq!(http_targets(&out), set(&["10.1.0.1:8080"]));
        let without_ready = slice("web", json!([draining, dying, starting]));
        let out = endpoint_slices(&cfg, &svc(), [SliceView::from(&without_ready)]);
        assert_eq!(http_targets(&out), set(&["10.1.0.2:8080"]));
        let none = slice("web", json!([dying, starting]));
        let out = endpoint_slices(&cfg, &svc(), [SliceView::from(&none)]);
        assert!(out.translations.is_empty());
    }

    #[test]
    fn slices_and_endpoints_with_the_same_targets_give_the_same_generation() {
        let cfg = TranslatorConfig::default();
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{"addresses": [{"ip": "10.1.0.1"}, {"ip": "10.1.0.2"}],
                         "notReadyAddresses": [{"ip": "10.1.0.3"}],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
        }))
        .unwrap();
        let s = slice(
            "web",
            json!([{"addresses": ["10.1.0.2"]}, {"addresses": ["10.1.0.1"]},
                   {"addresses": ["10.1.0.3"], "conditions": {"ready": false}}]),
        );
        let from_ep = endpoints(&cfg, &ep, Some(&svc()));
        let from_slices = endpoint_slices(&cfg, &svc(), [SliceView::from(&s)]);
        assert_eq!(from_ep.translations.len(), 1);
        assert_eq!(from_ep, from_slices);
    }

    #[test]
    fn ipv6_and_fqdn_slices_and_portless_entries() {
        let cfg = TranslatorConfig::default();
        let mut v6 = slice("web", json!([{"addresses": ["fd00::1"]}]));
        v6.address_type = "IPv6".into();
        let mut fqdn = slice("web", json!([{"addresses": ["db.example.com"]}]));
        fqdn.address_type = "FQDN".into();
        let mut portless = slice("web", json!([{"addresses": ["10.1.0.9"]}]));
        portless.ports = Some(vec![
            serde_json::from_value(json!({"name": "http"})).unwrap()
        ]);
        let out = endpoint_slices(&cfg, &svc(), [&v6, &fqdn, &portless].map(SliceView::from));
        assert!(out.translations.is_empty());
        let reasons: Vec<_> = out.warnings.iter().map(|w| w.reason.as_str()).collect();
        assert_eq!(reasons, [reason::UNSUPPORTED_IP_FAMILY]);
    }

    /// The pool members of every generation of `out`: (generation's port name,
    /// `address:port`, pool), sorted.
    fn members(out: &Translated) -> Vec<(String, String, String)> {
        let mut found = Vec::new();
        for t in &out.translations {
            for r in t.resources.iter().filter(|r| r.kind == "PoolMember") {
                let b: serde_json::Value = serde_json::from_str(&r.body).unwrap();
                assert_eq!(b["weight"], 1);
                assert_eq!(b["poolId"].as_str(), Some(r.parent.as_str()));
                let port = t.name.split('.').nth(3).unwrap().to_string();
                let at = format!("{}:{}", b["address"].as_str().unwrap(), b["protocolPort"]);
                found.push((port, at, r.parent.clone()));
            }
        }
        found.sort();
        found
    }

    #[test]
    fn a_sticky_ports_ready_endpoints_are_the_members_of_its_pool() {
        let service = |affinity: &str| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                         "sessionAffinity": affinity,
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                   {"name": "dns", "port": 53, "protocol": "UDP"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
            }))
            .unwrap()
        };
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{"addresses": [{"ip": "10.244.1.5"}, {"ip": "10.244.2.6"}],
                         "notReadyAddresses": [{"ip": "10.244.3.7"}],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                                   {"name": "dns", "port": 5353, "protocol": "UDP"}]}]
        }))
        .unwrap();
        let edge = crate::edge_spec::example_config();
        let sticky = endpoints(&edge, &ep, Some(&service("ClientIP")));
        let pool = service_port_pool_id(&edge, "ns/web/http").to_string();
        // The ready endpoints of the TCP port, the targets of its DNAT; not the UDP port's,
        // not the one that is not ready.
        assert_eq!(
            members(&sticky),
            [
                (
                    "http".to_string(),
                    "10.244.1.5:8080".to_string(),
                    pool.clone()
                ),
                ("http".to_string(), "10.244.2.6:8080".to_string(), pool),
            ]
        );
        assert_eq!(
            http_targets(&sticky),
            set(&["10.244.1.5:8080", "10.244.2.6:8080"])
        );
        // `None`, or no edge: no member; the generations are the same ones (same names).
        let plain = endpoints(&edge, &ep, Some(&service("None")));
        assert!(members(&plain).is_empty());
        let names = |out: &Translated| -> Vec<String> {
            out.translations.iter().map(|t| t.name.clone()).collect()
        };
        assert_eq!(names(&plain), names(&sticky));
        let no_edge = endpoints(
            &TranslatorConfig::default(),
            &ep,
            Some(&service("ClientIP")),
        );
        assert!(members(&no_edge).is_empty());
        // No ready endpoint: no generation, so no member; the pool is left empty.
        let none: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{"notReadyAddresses": [{"ip": "10.244.3.7"}],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
        }))
        .unwrap();
        assert!(endpoints(&edge, &none, Some(&service("ClientIP")))
            .translations
            .is_empty());
    }
}
