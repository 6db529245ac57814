//! Node: a bridge for the node's pods, linked to the cluster router, and the node's own port;
//! with an edge, the jump from the node's addresses to the node ports ([`crate::edge`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;
use uuid::Uuid;

use crate::addr::{parse_cidr, parse_ipv4, AddrError, CidrError, CidrRules};
use crate::annotations::mac_address;
use crate::filters::{node_bridge_egress_filter, node_egress, node_ingress};
use crate::ids::{mac_for_key, sub_id};
use crate::meta::{HOST_ID_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION, TUNNEL_ZONE_ID_ANNOTATION};
use crate::model::{
    Bridge, Chain, FlowAction, HostInterfacePort, Ipv4Cidr, Ipv4MacPair, MacPort, NatTarget, Port,
    PortLink, Resource, Route, RouteType, Rule, RuleType, TunnelZoneHost,
};
use crate::naming::{backend_name, NameKey, Part, NODE_INTERFACE_NAME};
pub use crate::topology::NODE_KIND;
use crate::topology::{
    cluster_router_id, default_tunnel_zone_id, edge_nodes_chain_id, main_chain_id, node_bridge_id,
    node_local_nodeports_chain_id, node_nodeports_chain_id, nodeports_chain_id, services_chain_id,
    SNAT_PORT_FROM, SNAT_PORT_TO,
};
use crate::translate::{
    object_name, reason, DesiredTranslation, Translated, TranslatorConfig,
    NODE_TRANSLATION_NAMESPACE,
};

/// Kinds of the Node's version-independent Translations.
pub const NODE_MAC_KIND: &str = "Node-MAC";
pub const NODE_ARP_KIND: &str = "Node-ARP";
pub const NODE_TUNNEL_ENDPOINT_KIND: &str = "Node-Tunnel-Endpoint";

/// Weight of the routes we create (MidoNet's usual default).
pub const ROUTE_WEIGHT: u32 = 100;

/// Addresses the pod CIDR reserves for the network plumbing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubnetInfo {
    pub subnet: Ipv4Cidr,
    /// First address: the cluster router's port on this node's bridge, the pods' gateway.
    pub gateway: Ipv4Addr,
    /// Second address: the node's own interface on the bridge.
    pub node_ip: Ipv4Addr,
}

impl SubnetInfo {
    /// A pod CIDR as written in a Node, parsed with [`CidrRules::POD_CIDR`].
    pub fn parse(s: &str) -> Result<Self, CidrError> {
        let subnet = parse_cidr(s, CidrRules::POD_CIDR)?;
        match (subnet.nth(1), subnet.nth(2)) {
            (Some(gateway), Some(node_ip)) => Ok(Self {
                subnet,
                gateway,
                node_ip,
            }),
            // The rules leave room for both; were they to change, say what is missing.
            _ => Err(CidrError::PrefixTooLong {
                max: CidrRules::POD_CIDR.max_prefix,
            }),
        }
    }
}

/// The IDs of a Node's resources, all below its bridge's.
struct NodeIds {
    bridge: Uuid,
    bridge_port: Uuid,
    router_port: Uuid,
    chain: Uuid,
    port: Uuid,
    router: Uuid,
}

impl NodeIds {
    fn new(cfg: &TranslatorConfig, name: &str) -> NodeIds {
        let base = node_bridge_id(cfg, name);
        NodeIds {
            bridge: base,
            bridge_port: sub_id(base, "Bridge Port"),
            router_port: sub_id(base, "Router Port"),
            chain: sub_id(base, "Node Port Chain"),
            port: sub_id(base, "Node Port"),
            router: cluster_router_id(cfg),
        }
    }
}

pub fn node(cfg: &TranslatorConfig, node: &Node) -> Translated {
    let name = match object_name(NODE_KIND, &node.metadata) {
        Ok(name) => name,
        Err(w) => return Translated::refused(w),
    };
    let mut out = Translated::default();
    let empty = BTreeMap::new();
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let Some(host) = host_id(annotations, &mut out) else {
        return out;
    };
    let subnet = pod_subnet(node, &mut out);
    let addresses = node_addresses(node, &mut out);
    let ids = NodeIds::new(cfg, name);
    let mut resources = bridge_resources(cfg, name, &ids, subnet);
    resources.extend(port_resources(cfg, name, &ids, host, subnet));
    if let Some(s) = subnet {
        resources.extend(host_resources(cfg, &ids, s, &addresses));
    }
    resources.extend(node_port_chains(cfg, name, &ids, &addresses));
    if cfg.edge.is_some() {
        resources.extend(edge_node_ports(cfg, name, &ids, &addresses));
    }
    out.translations.push(DesiredTranslation::versioned(
        cfg,
        NODE_KIND,
        &NameKey::object(name),
        NODE_TRANSLATION_NAMESPACE,
        resources,
    ));
    if let Some(tr) = tunnel_zone_membership(cfg, name, host, annotations, &mut out) {
        out.translations.push(tr);
    }
    let entries = mac_entries(cfg, name, &ids, subnet, annotations, &mut out);
    out.translations.extend(entries);
    out
}

/// The node's host, from the annotation the node agent writes once the MidoNet agent on
/// the node registered. Until then there is nothing to bind the node's port to: `None`,
/// quietly (the Node is translated again when annotated); a malformed one is reported.
fn host_id(annotations: &BTreeMap<String, String>, out: &mut Translated) -> Option<Uuid> {
    let raw = annotations.get(HOST_ID_ANNOTATION)?;
    if raw.trim().is_empty() {
        return None;
    }
    match Uuid::parse_str(raw.trim()) {
        Ok(id) => Some(id),
        Err(_) => {
            out.warn(
                reason::INVALID_HOST_ID,
                format!("annotation {HOST_ID_ANNOTATION}={raw:?} is not a UUID"),
            );
            None
        }
    }
}

/// The node's bridge and, with a pod subnet, its link to the cluster router: the bridge,
/// its port to the router, the router's port (the pods' gateway), the link and the route to
/// the subnet.
fn bridge_resources(
    cfg: &TranslatorConfig,
    name: &str,
    ids: &NodeIds,
    subnet: Option<SubnetInfo>,
) -> Vec<Resource> {
    let mut bridge = Bridge::named(
        ids.bridge,
        cfg.tenant.as_str(),
        backend_name(name.to_string()),
    );
    bridge.inbound_filter_id = Some(main_chain_id(cfg));
    // Egress policies run on the way out of the bridge, after KUBE-MAIN's Service DNAT.
    bridge.outbound_filter_id = Some(node_bridge_egress_filter(cfg));
    let mut resources: Vec<Resource> = vec![
        bridge.into(),
        Port::bridge_port(ids.bridge, ids.bridge_port).into(),
    ];
    let Some(s) = subnet else {
        return resources;
    };
    let mut port = Port::router_port(ids.router, ids.router_port).with_address(s.gateway, s.subnet);
    port.port_mac = Some(mac_for_key(name));
    resources.extend([
        port.into(),
        PortLink::between(ids.bridge_port, ids.router_port).into(),
        // Routes and rules cannot be updated in MidoNet, so their IDs include everything
        // their bodies depend on: a different body is a different resource.
        route(
            ids.router,
            sub_id(ids.bridge, &format!("Route/{}", s.subnet)),
            s.subnet,
            ids.router_port,
            None,
        ),
    ]);
    resources
}

/// The node's own port on its bridge, bound to the node's host interface, behind the node
/// chain (with a pod subnet, the chain SNATs what the router sends from the node's own
/// address).
fn port_resources(
    cfg: &TranslatorConfig,
    name: &str,
    ids: &NodeIds,
    host: Uuid,
    subnet: Option<SubnetInfo>,
) -> Vec<Resource> {
    let mut resources: Vec<Resource> = vec![Chain::named(
        ids.chain,
        cfg.tenant.as_str(),
        backend_name(format!("KUBE-NODE-{name}")),
    )
    .into()];
    if let Some(s) = subnet {
        // Traffic the cluster router sends to the node from the node's own address (e.g.
        // the apiserver answering a pod through a service) is SNATed to the gateway, so that
        // its replies come back through MidoNet and can be reverse-NATed.
        resources.push(
            Rule::new(
                ids.chain,
                sub_id(ids.bridge, &format!("Node Port SNAT Rule/{}", s.subnet)),
                RuleType::Snat,
            )
            .at(1)
            .with_flow_action(FlowAction::Continue)
            .from_host(s.node_ip)
            .with_nat_targets(vec![NatTarget::to_ports(
                s.gateway,
                Some(SNAT_PORT_FROM),
                Some(SNAT_PORT_TO),
            )])
            .into(),
        );
    }
    let mut port = Port::bridge_port(ids.bridge, ids.port);
    port.outbound_filter_id = Some(ids.chain);
    resources.extend([
        port.into(),
        HostInterfacePort::new(host, ids.port, NODE_INTERFACE_NAME).into(),
    ]);
    resources
}

/// What ties the node's host to its pods: the policy exceptions for the node's own traffic
/// and the routes from the pods to the node's addresses.
fn host_resources(
    cfg: &TranslatorConfig,
    ids: &NodeIds,
    s: SubnetInfo,
    addresses: &BTreeSet<Ipv4Addr>,
) -> Vec<Resource> {
    // The node's host stack reaches its own pods whatever their ingress policies.
    let mut resources = node_ingress(cfg, ids.bridge, ids.port, s.node_ip, s.subnet);
    // And its pods reach the node's host whatever their egress policies.
    let host_ips: Vec<Ipv4Addr> = std::iter::once(s.node_ip)
        .chain(addresses.iter().copied())
        .collect();
    resources.extend(node_egress(cfg, ids.bridge, s.subnet, &host_ips));
    // Pods reach the node's own addresses through the node's port.
    for ip in addresses {
        resources.push(route(
            ids.router,
            sub_id(ids.bridge, &format!("Address Route/{ip}/{}", s.node_ip)),
            Ipv4Cidr {
                addr: *ip,
                prefix_len: 32,
            },
            ids.router_port,
            Some(s.node_ip),
        ));
    }
    resources
}

/// The node ports at the node's addresses, wherever the traffic comes from (a pod, the
/// node's host forwarding what reached its own interface, the edge): KUBE-SERVICES jumps
/// from each address to `KUBE-NODE-NODEPORTS-<name>` = `[jump KUBE-NODEPORTS-LOCAL-<name>,
/// jump KUBE-NODEPORTS]`, which returns what no node port takes (the node's other ports
/// stay reachable). `KUBE-NODEPORTS-LOCAL-<name>` (this Translation's, empty) is where the
/// Endpoints generations of `externalTrafficPolicy: Local` Services DNAT their node ports
/// onto this node's endpoints; a Local Service has no jump in KUBE-NODEPORTS. Node ports
/// are unique in the cluster, so the two jumps never compete, and the address jumps of all
/// nodes match disjoint addresses: position 1.
fn node_port_chains(
    cfg: &TranslatorConfig,
    name: &str,
    ids: &NodeIds,
    addresses: &BTreeSet<Ipv4Addr>,
) -> Vec<Resource> {
    let chain = node_nodeports_chain_id(cfg, name);
    let local = node_local_nodeports_chain_id(cfg, name);
    let tenant = cfg.tenant.as_str();
    let mut resources: Vec<Resource> = vec![
        Chain::named(
            local,
            tenant,
            backend_name(format!("KUBE-NODEPORTS-LOCAL-{name}")),
        )
        .into(),
        Chain::named(
            chain,
            tenant,
            backend_name(format!("KUBE-NODE-NODEPORTS-{name}")),
        )
        .into(),
        Rule::jump(chain, sub_id(chain, "Jump To Local NodePorts"), local)
            .at(1)
            .into(),
        Rule::jump(
            chain,
            sub_id(chain, "Jump To NodePorts"),
            nodeports_chain_id(cfg),
        )
        .at(2)
        .into(),
    ];
    for ip in addresses {
        resources.push(
            Rule::jump(
                services_chain_id(cfg),
                sub_id(ids.bridge, &format!("NodePorts Jump/{ip}")),
                chain,
            )
            .at(1)
            .to_host(*ip)
            .into(),
        );
    }
    resources
}

/// With an edge: what enters through an uplink to one of the node's addresses goes to the
/// node's node ports, and is dropped if none takes it (it would otherwise be routed back out
/// the uplink). KUBE-EDGE-NODES jumps from each address to the node's own chain
/// `KUBE-EDGE-NODE-<name>` = `[jump KUBE-NODE-NODEPORTS-<name>, drop]`; the jumps match
/// disjoint addresses, so their order in the shared chain is irrelevant: position 1.
fn edge_node_ports(
    cfg: &TranslatorConfig,
    name: &str,
    ids: &NodeIds,
    addresses: &BTreeSet<Ipv4Addr>,
) -> Vec<Resource> {
    let chain = sub_id(ids.bridge, "Edge Node Chain");
    let mut resources: Vec<Resource> = vec![
        Chain::named(
            chain,
            cfg.tenant.as_str(),
            backend_name(format!("KUBE-EDGE-NODE-{name}")),
        )
        .into(),
        // Not the ID of the earlier jump straight to KUBE-NODEPORTS: a rule's body cannot
        // change under its ID.
        Rule::jump(
            chain,
            sub_id(chain, "Jump To Node NodePorts"),
            node_nodeports_chain_id(cfg, name),
        )
        .at(1)
        .into(),
        Rule::new(chain, sub_id(chain, "Drop"), RuleType::Drop)
            .at(2)
            .into(),
    ];
    for ip in addresses {
        resources.push(
            Rule::jump(
                edge_nodes_chain_id(cfg),
                sub_id(ids.bridge, &format!("Edge Node Jump/{ip}")),
                chain,
            )
            .at(1)
            .to_host(*ip)
            .into(),
        );
    }
    resources
}

/// With the MAC annotation: the node port's MAC-table entry and, with a pod subnet, the
/// node address's ARP entry, each its own Translation named by its content.
fn mac_entries(
    cfg: &TranslatorConfig,
    name: &str,
    ids: &NodeIds,
    subnet: Option<SubnetInfo>,
    annotations: &BTreeMap<String, String>,
    out: &mut Translated,
) -> Vec<DesiredTranslation> {
    let Some(mac) = mac_address(Some(annotations), out) else {
        return Vec::new();
    };
    let hex = mac.to_hex();
    let mut entries = vec![DesiredTranslation::versioned(
        cfg,
        NODE_MAC_KIND,
        &NameKey::object(name).marked("mac", Part::Label(&hex)),
        NODE_TRANSLATION_NAMESPACE,
        vec![MacPort::new(ids.bridge, mac, ids.port).into()],
    )];
    if let Some(s) = subnet {
        entries.push(DesiredTranslation::versioned(
            cfg,
            NODE_ARP_KIND,
            &NameKey::object(name)
                .marked("ip", Part::Ipv4(s.node_ip))
                .then(Part::Label(&hex)),
            NODE_TRANSLATION_NAMESPACE,
            vec![Ipv4MacPair::new(ids.bridge, s.node_ip, mac).into()],
        ));
    }
    entries
}

/// A `Normal` route of `router` from anywhere to `dst` through `next_hop_port`, with
/// MidoNet's usual weight.
fn route(
    router: Uuid,
    id: Uuid,
    dst: Ipv4Cidr,
    next_hop_port: Uuid,
    next_hop_gateway: Option<Ipv4Addr>,
) -> Resource {
    let mut route = Route::normal(router, id, dst, next_hop_port);
    route.next_hop_gateway = next_hop_gateway;
    route.weight = Some(ROUTE_WEIGHT);
    route.route_type = Some(RouteType::Normal);
    route.into()
}

/// The node's IPv4 pod subnet: `spec.podCIDR`, or the first usable IPv4 entry of
/// `spec.podCIDRs` (dual-stack nodes may list IPv6 first).
fn pod_subnet(node: &Node, out: &mut Translated) -> Option<SubnetInfo> {
    let spec = node.spec.as_ref();
    let mut candidates: Vec<&str> = Vec::new();
    for c in spec.and_then(|s| s.pod_cidr.as_deref()).into_iter().chain(
        spec.and_then(|s| s.pod_cidrs.as_deref())
            .unwrap_or_default()
            .iter()
            .map(String::as_str),
    ) {
        if !c.is_empty() && !candidates.contains(&c) {
            candidates.push(c);
        }
    }
    if candidates.is_empty() {
        out.warn(
            reason::MISSING_POD_CIDR,
            "spec.podCIDR is not set: the node's pods are not connected to the cluster router",
        );
        return None;
    }
    let mut invalid = Vec::new();
    let mut ipv6 = Vec::new();
    for c in &candidates {
        match SubnetInfo::parse(c) {
            Ok(info) => return Some(info),
            Err(CidrError::PrefixTooLong { max }) => {
                invalid.push(format!("{c:?} (needs a prefix of /{max} or shorter)"))
            }
            Err(CidrError::Ipv6) => ipv6.push(format!("{c:?}")),
            Err(CidrError::Invalid) => invalid.push(format!("{c:?}")),
        }
    }
    if !invalid.is_empty() {
        out.warn(
            reason::INVALID_POD_CIDR,
            format!(
                "unusable pod CIDR {}: the node's pods are not connected to the cluster router",
                invalid.join(", ")
            ),
        );
    } else {
        out.warn(
            reason::UNSUPPORTED_IP_FAMILY,
            format!(
                "only IPv6 pod CIDRs ({}); MidoNet needs IPv4",
                ipv6.join(", ")
            ),
        );
    }
    None
}

/// The distinct IPv4 InternalIP/ExternalIP addresses of the node, sorted.
fn node_addresses(node: &Node, out: &mut Translated) -> BTreeSet<Ipv4Addr> {
    let mut ips = BTreeSet::new();
    let mut invalid = Vec::new();
    let mut ipv6 = 0usize;
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    for a in addresses {
        if a.type_ != "InternalIP" && a.type_ != "ExternalIP" {
            continue;
        }
        match parse_ipv4(&a.address) {
            Ok(ip) => {
                ips.insert(ip);
            }
            Err(AddrError::Ipv6) => ipv6 += 1,
            Err(AddrError::Invalid) => invalid.push(format!("{}={:?}", a.type_, a.address)),
        }
    }
    if !invalid.is_empty() {
        out.warn(
            reason::INVALID_NODE_ADDRESS,
            format!(
                "node addresses that are not IP addresses: {}",
                invalid.join(", ")
            ),
        );
    }
    // IPv6 next to IPv4 is ordinary dual-stack; only say something when nothing is usable.
    if ips.is_empty() && ipv6 > 0 {
        out.warn(
            reason::UNSUPPORTED_IP_FAMILY,
            "the node has only IPv6 addresses; no routes to them are made",
        );
    }
    ips
}

/// The node's host joining its tunnel zone, from the tunnel annotations.
///
/// Named by the membership's identity (tunnel zone, host) without the version: in a zone
/// named by annotation its backend path is the same in every version, so a version bump
/// relabels the one Translation instead of having an old-version one delete the very
/// membership the new one stands for. The default zone is itself versioned, so there the
/// name (by zone ID) differs per version and the old membership stays until the bump is over.
fn tunnel_zone_membership(
    cfg: &TranslatorConfig,
    name: &str,
    host: Uuid,
    annotations: &BTreeMap<String, String>,
    out: &mut Translated,
) -> Option<DesiredTranslation> {
    let raw_ip = annotations.get(TUNNEL_ENDPOINT_IP_ANNOTATION)?;
    let ip = match parse_ipv4(raw_ip) {
        Ok(ip) => ip,
        Err(AddrError::Ipv6) => {
            out.warn(
                reason::UNSUPPORTED_IP_FAMILY,
                format!("annotation {TUNNEL_ENDPOINT_IP_ANNOTATION}={raw_ip:?} is IPv6; MidoNet tunnels need IPv4"),
            );
            return None;
        }
        Err(AddrError::Invalid) => {
            out.warn(
                reason::INVALID_TUNNEL_ENDPOINT_IP,
                format!(
                    "annotation {TUNNEL_ENDPOINT_IP_ANNOTATION}={raw_ip:?} is not an IP address"
                ),
            );
            return None;
        }
    };
    let zone = match annotations.get(TUNNEL_ZONE_ID_ANNOTATION).map(|z| z.trim()) {
        None | Some("") => default_tunnel_zone_id(cfg),
        Some(raw) => match Uuid::parse_str(raw) {
            Ok(id) => id,
            Err(_) => {
                out.warn(
                    reason::INVALID_TUNNEL_ZONE_ID,
                    format!("annotation {TUNNEL_ZONE_ID_ANNOTATION}={raw:?} is not a UUID"),
                );
                return None;
            }
        },
    };
    Some(DesiredTranslation::named_by_entry(
        cfg,
        NODE_TUNNEL_ENDPOINT_KIND,
        &NameKey::object(name).then(Part::Hashed(&format!("{zone}/{host}"))),
        NODE_TRANSLATION_NAMESPACE,
        vec![TunnelZoneHost::new(zone, host, ip).into()],
    ))
}
