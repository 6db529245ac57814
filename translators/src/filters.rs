//! Where NetworkPolicy is enforced: the fixed global policy chains, and what pods and nodes
//! attach to them.
//!
//! Two fixed global chains filter every pod's traffic: each pod port's `outboundFilterId` is
//! KUBE-NP-INGRESS (what is delivered to the pod), and each node bridge's
//! `outboundFilterId` is KUBE-NP-EGRESS (what leaves the bridge, recognised as a pod's by
//! the port group of the port it entered the network through). Each is
//!
//! ```text
//! 1 accept  matchReturnFlow           replies of allowed connections, both directions
//! 2 jump    KUBE-NP-<dir>-ALLOW       one jump per policy: accepts what that policy allows
//! 3 jump    KUBE-NP-<dir>-ISOLATE     one drop per policy: the pods it selects
//! (runs out: accepted)                pods no policy selects stay open
//! ```
//!
//! This module guarantees that the Pod and Node translators attach their ports and bridges
//! to exactly these chains, and that a node's own traffic to and from its pods is accepted
//! in the ALLOW chains ([`node_ingress`], [`node_egress`]) whatever the policies say. What a
//! policy puts into the ALLOW and ISOLATE chains is the policy translator's (`crate::policy`),
//! which depends on this module, never the other way round.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use uuid::Uuid;

use crate::config::TranslatorConfig;
use crate::ids::sub_id;
use crate::model::{Chain, Ipv4Cidr, Port, PortGroup, PortGroupPort, Resource, Rule, RuleType};
use crate::naming::backend_name;
use crate::topology::{
    allow_chain_id, filter_chain_id, global_translation, isolate_chain_id, node_port_group_id,
    Direction,
};
use crate::translate::DesiredTranslation;

/// Chain names, as they appear in MidoNet.
pub const INGRESS_CHAIN_NAME: &str = "KUBE-NP-INGRESS";
pub const EGRESS_CHAIN_NAME: &str = "KUBE-NP-EGRESS";

/// How the backend name of every port group and IP address group the policies make begins.
/// MidoNet's groups carry no tenant of their own (port groups may, ours do not), so this is
/// what tells the orphan sweep that a group is the policies'.
pub const GROUP_NAME_PREFIX: &str = "KUBE-NP-";

/// The global port group of the nodes' host ports (their traffic to their own pods is
/// always allowed).
pub const NODE_PORT_GROUP_NAME: &str = "KUBE-NP-NODE-PORTS";

/// The name of the filter chain of `dir`.
fn filter_chain_name(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => INGRESS_CHAIN_NAME,
        Direction::Egress => EGRESS_CHAIN_NAME,
    }
}

/// The global Translation `network-policy`: the two filter chains (of every pod port, of
/// every node bridge), the shared ALLOW and ISOLATE chains they jump to, and the port group
/// of the nodes' host ports. Pushed before any pod port or node bridge names them.
pub fn policy_globals(cfg: &TranslatorConfig) -> DesiredTranslation {
    let mut resources = Vec::new();
    let mut rules = Vec::new();
    for dir in [Direction::Ingress, Direction::Egress] {
        let main = filter_chain_id(cfg, dir);
        let allow = allow_chain_id(cfg, dir);
        let isolate = isolate_chain_id(cfg, dir);
        let name = |suffix: &str| format!("{}{suffix}", filter_chain_name(dir));
        resources.push(tenant_chain(cfg, main, name("")));
        resources.push(tenant_chain(cfg, allow, name("-ALLOW")));
        resources.push(tenant_chain(cfg, isolate, name("-ISOLATE")));
        let mut replies = Rule::new(main, sub_id(main, "Return Flow"), RuleType::Accept);
        replies.condition.match_return_flow = Some(true);
        replies.position = Some(1);
        let mut to_allow = Rule::jump(main, sub_id(main, "Jump To Allow"), allow);
        to_allow.position = Some(2);
        let mut to_isolate = Rule::jump(main, sub_id(main, "Jump To Isolate"), isolate);
        to_isolate.position = Some(3);
        rules.extend([replies, to_allow, to_isolate].map(Resource::from));
    }
    resources.push(PortGroup::new(node_port_group_id(cfg), NODE_PORT_GROUP_NAME).into());
    resources.extend(rules);
    global_translation(cfg, "network-policy", resources)
}

/// A chain of the tenant, its name capped at MidoNet's limit.
pub fn tenant_chain(cfg: &TranslatorConfig, id: Uuid, name: String) -> Resource {
    Chain::named(id, cfg.tenant.as_str(), backend_name(name)).into()
}

/// A pod's bridge port, filtered for ingress from its creation on: a pod is never
/// reachable before the policies apply to it. Its egress is filtered by its node bridge
/// ([`node_bridge_egress_filter`]), which exists before any of its ports.
pub fn pod_port(cfg: &TranslatorConfig, bridge: Uuid, port: Uuid) -> Resource {
    let mut p = Port::bridge_port(bridge, port);
    p.outbound_filter_id = Some(filter_chain_id(cfg, Direction::Ingress));
    p.into()
}

/// The outbound filter of every node bridge: the egress policies, applied after the
/// bridge's inbound filter has load-balanced Service traffic onto an endpoint.
pub fn node_bridge_egress_filter(cfg: &TranslatorConfig) -> Uuid {
    filter_chain_id(cfg, Direction::Egress)
}

/// What a node adds to the policies, in push order, once its host port `node_port` exists:
/// the port's membership in the node port group, then an accept in KUBE-NP-INGRESS-ALLOW
/// of what entered through a node's host port from this node's address (`node_ip`) to this
/// node's pods (`pod_cidr`). NetworkPolicy always allows traffic from a pod's own node;
/// another node's host is subject to the policies like any address. The rule's ID covers
/// everything its body depends on (rules are never updated in place).
pub fn node_ingress(
    cfg: &TranslatorConfig,
    node_base: Uuid,
    node_port: Uuid,
    node_ip: Ipv4Addr,
    pod_cidr: Ipv4Cidr,
) -> Vec<Resource> {
    let group = node_port_group_id(cfg);
    let allow = allow_chain_id(cfg, Direction::Ingress);
    let mut accept = Rule::new(
        allow,
        sub_id(
            node_base,
            &format!("Policy Node Ingress/{node_ip}/{pod_cidr}"),
        ),
        RuleType::Accept,
    )
    .from_host(node_ip);
    accept.nw_dst_address = Some(pod_cidr.addr);
    accept.nw_dst_length = Some(pod_cidr.prefix_len);
    accept.condition.port_group = Some(group);
    // Order inside the shared ALLOW chain does not matter: the head is as good as any place.
    accept.position = Some(1);
    vec![PortGroupPort::new(group, node_port).into(), accept.into()]
}

/// What a node adds to the egress policies: per address of the node's host (`node_ips`: its
/// interface on the bridge and its Node addresses), an accept in KUBE-NP-EGRESS-ALLOW of
/// what its pods (`pod_cidr`) send there. NetworkPolicy always allows traffic to the node a
/// pod runs on; another node's host is subject to the egress rules like any address. The
/// destination is the one after KUBE-MAIN's Service DNAT, so a Service whose endpoint is
/// this node's host is allowed too. One rule per address, its ID covering its body.
pub fn node_egress(
    cfg: &TranslatorConfig,
    node_base: Uuid,
    pod_cidr: Ipv4Cidr,
    node_ips: &[Ipv4Addr],
) -> Vec<Resource> {
    let allow = allow_chain_id(cfg, Direction::Egress);
    let ips: BTreeSet<Ipv4Addr> = node_ips.iter().copied().collect();
    ips.into_iter()
        .map(|ip| {
            let mut accept = Rule::new(
                allow,
                sub_id(node_base, &format!("Policy Node Egress/{pod_cidr}/{ip}")),
                RuleType::Accept,
            )
            .to_host(ip);
            accept.nw_src_address = Some(pod_cidr.addr);
            accept.nw_src_length = Some(pod_cidr.prefix_len);
            // Order inside the shared ALLOW chain does not matter.
            accept.position = Some(1);
            accept.into()
        })
        .collect()
}
