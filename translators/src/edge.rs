//! The edge: a provider router between the upstream and the cluster router, built from the
//! validated edge settings ([`Edge`], `--edge-config`), as one global Translation.
//!
//! # What is produced (Translation `midonet-global.<v>.edge`, in push order)
//!
//! - the L4 load balancer of the sticky Service ports (`sessionAffinity: ClientIP`, see
//!   `crate::affinity`), then the router `EdgeRouter` running it (`loadBalancerId`; MidoNet
//!   binds a load balancer to a router by the router naming it);
//! - the chains `KUBE-EDGE-NODES` (each Node jumps from its addresses to its edge chain
//!   `[jump KUBE-NODE-NODEPORTS-<node>, drop]`: `crate::node`), `KUBE-EDGE-STICKY` (each
//!   sticky Service address and TCP port gets an `accept` there: `crate::service`),
//!   `KUBE-EDGE-IN` = `[rev_snat (continue), jump KUBE-EDGE-NODES, jump KUBE-EDGE-STICKY,
//!   jump KUBE-SERVICES]`, the inbound filter of every uplink port, and per uplink
//!   `KUBE-EDGE-OUT-<name>` =
//!   `[rev_dnat (accept), per cluster CIDR: snat to the uplink's address (accept)]`, its
//!   outbound filter;
//! - the gateway hosts' membership in the default tunnel zone, where the settings give a
//!   host's tunnel endpoint (`tunnelIp`);
//! - the stateful port group `KUBE-EDGE-UPLINKS` holding every uplink port (MidoNet shares
//!   the NAT state of a connection among a stateful group's ports, so a reply may leave by
//!   another uplink than the request came in by);
//! - per uplink: the router port (its address on its network, a fixed MAC), its binding to
//!   the gateway host's interface, its group membership, and one default route per next hop,
//!   all of weight [`ROUTE_WEIGHT`]: equal-cost routes, among which midolman picks one per
//!   flow by the flow's hash (`simulation/RouteBalancer.scala`);
//! - the link: an edge port (the link network's first address) and a cluster router port
//!   (its second), linked; routes on the edge from each cluster CIDR to the cluster router,
//!   black-hole routes for the external and Service CIDRs (an address no Service rule
//!   DNATed is dropped at the edge instead of bouncing between the routers), the cluster
//!   router's default route to the edge and its black-hole routes for the Service CIDRs (a
//!   cluster IP without endpoints is not sent upstream).
//!
//! # Guarantees and assumptions
//!
//! Every ID derives from the tenant, the version and the uplink names, so a version bump
//! builds a second edge beside the first (bound to the same interfaces: the pusher's binding
//! hand-over applies). Service DNAT happens on the uplink port, so the NAT state sits on the
//! edge router and its `rev_dnat` restores the address the client used on the way out; the
//! client's source is kept (no SNAT of inbound traffic), and replies come back to the edge
//! through the cluster router's default route. Which endpoints a Service sends to is the
//! Service's `KUBE-SVC-…` chain, made by the Service and Endpoints translators. A sticky
//! address and port is accepted by KUBE-EDGE-STICKY before KUBE-SERVICES could DNAT it,
//! so it reaches the edge router un-translated, where the load balancer (which midolman
//! runs after the port's inbound filter, in the router's pre-routing) balances it with
//! source-IP persistence and undoes it on the reply, which crosses the edge router too.
//!
//! The jump to KUBE-SERVICES is at position 4 under an ID of its own (`Jump To
//! Services/4`): an edge pushed before the sticky chain existed has it at position 3
//! under the old ID, and rules cannot be updated. Applied in place, the pusher creates the
//! sticky jump at 3 (in front of the old jump), the new jump at 4, then deletes the old
//! one: every intermediate chain sends what it does not accept to KUBE-SERVICES.

use uuid::Uuid;

use crate::config::{Edge, Uplink};
use crate::ids::{mac_for_key, sub_id};
use crate::model::{
    Chain, FlowAction, HostInterfacePort, Ipv4Cidr, LoadBalancer, NatTarget, Port, PortGroup,
    PortGroupPort, PortLink, Resource, Route, RouteType, Router, Rule, RuleType, TunnelZoneHost,
    DL_TYPE_IPV4,
};
use crate::naming::backend_name;
use crate::topology::{
    cluster_router_id, default_tunnel_zone_id, edge_load_balancer_id, edge_nodes_chain_id,
    edge_router_id, edge_sticky_chain_id, global_translation, services_chain_id, SNAT_PORT_FROM,
    SNAT_PORT_TO,
};
use crate::translate::{DesiredTranslation, TranslatorConfig};

/// Key of the edge's global Translation.
pub const EDGE_KEY: &str = "edge";
/// Weight of every edge route: equal weights make the default routes equal-cost.
pub const ROUTE_WEIGHT: u32 = 100;
/// Chain names, as they appear in MidoNet.
pub const EDGE_IN_CHAIN_NAME: &str = "KUBE-EDGE-IN";
pub const EDGE_NODES_CHAIN_NAME: &str = "KUBE-EDGE-NODES";
pub const EDGE_STICKY_CHAIN_NAME: &str = "KUBE-EDGE-STICKY";
pub const UPLINK_GROUP_NAME: &str = "KUBE-EDGE-UPLINKS";

/// The IDs of the edge's shared resources, all below the edge router's.
struct EdgeIds {
    router: Uuid,
    cluster_router: Uuid,
    edge_in: Uuid,
    group: Uuid,
    edge_link_port: Uuid,
    cluster_link_port: Uuid,
}

impl EdgeIds {
    fn new(cfg: &TranslatorConfig) -> EdgeIds {
        let router = edge_router_id(cfg);
        EdgeIds {
            router,
            cluster_router: cluster_router_id(cfg),
            edge_in: sub_id(router, "Edge In Chain"),
            group: sub_id(router, "Uplink Port Group"),
            edge_link_port: sub_id(router, "Link Port"),
            cluster_link_port: sub_id(router, "Cluster Link Port"),
        }
    }
}

/// The edge's global Translation, if the cluster has an edge.
pub fn edge_translation(cfg: &TranslatorConfig) -> Option<DesiredTranslation> {
    let edge = cfg.edge.as_deref()?;
    let ids = EdgeIds::new(cfg);
    let tenant = cfg.tenant.as_str();
    let lb = edge_load_balancer_id(cfg);
    let mut router = Router::named(ids.router, tenant, "EdgeRouter");
    router.load_balancer_id = Some(lb);
    let mut resources: Vec<Resource> = vec![
        LoadBalancer::new(lb).into(),
        router.into(),
        Chain::named(edge_nodes_chain_id(cfg), tenant, EDGE_NODES_CHAIN_NAME).into(),
        Chain::named(edge_sticky_chain_id(cfg), tenant, EDGE_STICKY_CHAIN_NAME).into(),
    ];
    resources.extend(edge_in_chain(cfg, &ids));
    let mut group = PortGroup::new(ids.group, UPLINK_GROUP_NAME);
    group.tenant_id = Some(tenant.to_string());
    group.stateful = Some(true);
    resources.push(group.into());
    resources.extend(gateway_memberships(cfg, edge));
    for up in &edge.uplinks {
        resources.extend(uplink_resources(cfg, edge, &ids, up));
    }
    resources.extend(link_resources(edge, &ids));
    Some(global_translation(cfg, EDGE_KEY, resources))
}

/// The gateway hosts joining the default tunnel zone, each once, where the settings give
/// their tunnel endpoint: MidoNet binds a port only on a host of a tunnel zone.
fn gateway_memberships(cfg: &TranslatorConfig, edge: &Edge) -> Vec<Resource> {
    let mut seen = std::collections::BTreeSet::new();
    edge.uplinks
        .iter()
        .filter_map(|u| Some((u.host, u.tunnel_ip?)))
        .filter(|(host, _)| seen.insert(*host))
        .map(|(host, ip)| TunnelZoneHost::new(default_tunnel_zone_id(cfg), host, ip).into())
        .collect()
}

/// KUBE-EDGE-IN: replies to the pods' outbound connections are un-SNATed (and go on to be
/// routed), then a node's address at a node port is DNATed, a sticky Service address and
/// port accepted (for the edge router's load balancer), and any other Service address
/// DNATed.
fn edge_in_chain(cfg: &TranslatorConfig, ids: &EdgeIds) -> Vec<Resource> {
    let chain = ids.edge_in;
    vec![
        Chain::named(chain, cfg.tenant.as_str(), EDGE_IN_CHAIN_NAME).into(),
        Rule::new(chain, sub_id(chain, "Reverse SNAT"), RuleType::RevSnat)
            .at(1)
            .with_flow_action(FlowAction::Continue)
            .into(),
        Rule::jump(
            chain,
            sub_id(chain, "Jump To Nodes"),
            edge_nodes_chain_id(cfg),
        )
        .at(2)
        .into(),
        Rule::jump(
            chain,
            sub_id(chain, "Jump To Sticky"),
            edge_sticky_chain_id(cfg),
        )
        .at(3)
        .into(),
        // Its position is in its ID: see the module docs.
        Rule::jump(
            chain,
            sub_id(chain, "Jump To Services/4"),
            services_chain_id(cfg),
        )
        .at(4)
        .into(),
    ]
}

/// One uplink: its outbound chain, port, binding, group membership and default routes.
fn uplink_resources(
    cfg: &TranslatorConfig,
    edge: &Edge,
    ids: &EdgeIds,
    up: &Uplink,
) -> Vec<Resource> {
    let base = sub_id(ids.router, &format!("Uplink/{}", up.name));
    let (port_id, out) = (sub_id(base, "Port"), sub_id(base, "Out Chain"));
    let mut resources: Vec<Resource> = vec![
        Chain::named(
            out,
            cfg.tenant.as_str(),
            backend_name(format!("KUBE-EDGE-OUT-{}", up.name)),
        )
        .into(),
        Rule::new(out, sub_id(out, "Reverse DNAT"), RuleType::RevDnat)
            .at(1)
            .with_flow_action(FlowAction::Accept)
            .into(),
    ];
    for (i, net) in edge.cluster_cidrs.iter().enumerate() {
        let mut snat = Rule::new(out, sub_id(out, &format!("SNAT/{net}")), RuleType::Snat)
            .at(2 + i as u32)
            .with_flow_action(FlowAction::Accept)
            .with_nat_targets(vec![NatTarget::to_ports(
                up.address,
                Some(SNAT_PORT_FROM),
                Some(SNAT_PORT_TO),
            )]);
        snat.dl_type = Some(DL_TYPE_IPV4);
        snat.nw_src_address = Some(net.network());
        snat.nw_src_length = Some(net.prefix_len);
        resources.push(snat.into());
    }
    let mut port = Port::router_port(ids.router, port_id).with_address(up.address, up.subnet);
    port.port_mac = Some(mac_for_key(&format!("edge-uplink/{}", up.name)));
    port.inbound_filter_id = Some(ids.edge_in);
    port.outbound_filter_id = Some(out);
    resources.extend([
        port.into(),
        HostInterfacePort::new(up.host, port_id, up.interface.clone()).into(),
        PortGroupPort::new(ids.group, port_id).into(),
    ]);
    for hop in &up.next_hops {
        let mut r = route(
            ids.router,
            sub_id(base, &format!("Default Route/{hop}")),
            Ipv4Cidr {
                addr: std::net::Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
            },
            port_id,
        );
        r.next_hop_gateway = Some(*hop);
        resources.push(r.into());
    }
    resources
}

/// The link between the edge and the cluster router, and the routes across it.
fn link_resources(edge: &Edge, ids: &EdgeIds) -> Vec<Resource> {
    let (Some(edge_ip), Some(cluster_ip)) = (edge.link.nth(1), edge.link.nth(2)) else {
        // The settings' validation keeps the link at /30 or wider.
        return Vec::new();
    };
    let mut edge_port =
        Port::router_port(ids.router, ids.edge_link_port).with_address(edge_ip, edge.link);
    edge_port.port_mac = Some(mac_for_key("edge-link/edge"));
    let mut cluster_port = Port::router_port(ids.cluster_router, ids.cluster_link_port)
        .with_address(cluster_ip, edge.link);
    cluster_port.port_mac = Some(mac_for_key("edge-link/cluster"));
    let mut resources: Vec<Resource> = vec![
        edge_port.into(),
        cluster_port.into(),
        PortLink::between(ids.edge_link_port, ids.cluster_link_port).into(),
    ];
    for net in &edge.cluster_cidrs {
        let mut r = route(
            ids.router,
            sub_id(ids.router, &format!("Cluster Route/{net}/{cluster_ip}")),
            *net,
            ids.edge_link_port,
        );
        r.next_hop_gateway = Some(cluster_ip);
        resources.push(r.into());
    }
    for net in edge.external_cidrs.iter().chain(&edge.service_cidrs) {
        resources.push(black_hole(
            ids.router,
            sub_id(ids.router, &format!("External Route/{net}")),
            *net,
        ));
    }
    for net in &edge.service_cidrs {
        let id = sub_id(ids.router, &format!("Cluster Service Route/{net}"));
        resources.push(black_hole(ids.cluster_router, id, *net));
    }
    let mut default = route(
        ids.cluster_router,
        sub_id(ids.router, &format!("Cluster Default Route/{edge_ip}")),
        Ipv4Cidr {
            addr: std::net::Ipv4Addr::UNSPECIFIED,
            prefix_len: 0,
        },
        ids.cluster_link_port,
    );
    default.next_hop_gateway = Some(edge_ip);
    resources.push(default.into());
    resources
}

/// A `BlackHole` route of `router` to `dst`: what matches it is dropped.
fn black_hole(router: Uuid, id: Uuid, dst: Ipv4Cidr) -> Resource {
    let mut r = Route::normal(router, id, dst, Uuid::nil());
    r.next_hop_port = None;
    r.route_type = Some(RouteType::BlackHole);
    r.weight = Some(ROUTE_WEIGHT);
    r.into()
}

/// A `Normal` route of `router` to `dst` through `port`, of weight [`ROUTE_WEIGHT`].
fn route(router: Uuid, id: Uuid, dst: Ipv4Cidr, port: Uuid) -> Route {
    let mut r = Route::normal(router, id, dst, port);
    r.weight = Some(ROUTE_WEIGHT);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge_spec::example_config as cfg_with_edge;

    #[test]
    fn no_edge_no_translation() {
        assert!(edge_translation(&TranslatorConfig::default()).is_none());
    }

    #[test]
    fn every_next_hop_is_an_equal_cost_default_route() {
        let tr = edge_translation(&cfg_with_edge()).unwrap();
        let bodies: Vec<serde_json::Value> = tr
            .resources
            .iter()
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect();
        let defaults: Vec<(&str, &serde_json::Value)> = bodies
            .iter()
            .filter(|b| b["dstNetworkLength"] == 0 && b.get("nextHopGateway").is_some())
            .map(|b| (b["nextHopGateway"].as_str().unwrap(), &b["weight"]))
            .collect();
        assert_eq!(
            defaults.iter().map(|d| d.0).collect::<Vec<_>>(),
            ["192.0.2.1", "198.51.100.1", "198.51.100.254", "169.254.0.1"]
        );
        assert!(defaults.iter().all(|d| *d.1 == 100));
        // Both uplinks bound, both in the stateful group.
        let bindings = bodies
            .iter()
            .filter(|b| b["interfaceName"] == "eth1")
            .count();
        assert_eq!(bindings, 2);
        assert!(bodies.iter().any(|b| b["stateful"] == true));
        assert!(bodies
            .iter()
            .any(|b| b["type"] == "BlackHole" && b["dstNetworkAddr"] == "203.0.113.0"));
    }

    #[test]
    fn the_router_runs_the_load_balancer_and_sticky_traffic_is_accepted_before_the_services() {
        let cfg = cfg_with_edge();
        let tr = edge_translation(&cfg).unwrap();
        let bodies: Vec<serde_json::Value> = tr
            .resources
            .iter()
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect();
        let lb = edge_load_balancer_id(&cfg).to_string();
        // The load balancer exists before the router that names it is pushed.
        assert_eq!(tr.resources[0].kind, "LoadBalancer");
        assert_eq!(bodies[0]["id"], lb.as_str());
        assert_eq!(tr.resources[1].kind, "Router");
        assert_eq!(bodies[1]["loadBalancerId"], lb.as_str());
        // KUBE-EDGE-IN: what is sticky is accepted before KUBE-SERVICES could DNAT it.
        let ids = EdgeIds::new(&cfg);
        let mut edge_in: Vec<(u64, String)> = tr
            .resources
            .iter()
            .zip(&bodies)
            .filter(|(r, _)| r.parent == ids.edge_in.to_string())
            .map(|(_, b)| {
                let what = match b["type"].as_str().unwrap() {
                    "jump" => format!("jump {}", b["jumpChainId"].as_str().unwrap()),
                    other => other.to_string(),
                };
                (b["position"].as_u64().unwrap(), what)
            })
            .collect();
        edge_in.sort();
        let jump = |id: Uuid| format!("jump {id}");
        assert_eq!(
            edge_in,
            [
                (1, "rev_snat".to_string()),
                (2, jump(edge_nodes_chain_id(&cfg))),
                (3, jump(edge_sticky_chain_id(&cfg))),
                (4, jump(services_chain_id(&cfg))),
            ]
        );
        // The jump to KUBE-SERVICES moved: a new rule, not a changed body under its old ID.
        let old = sub_id(ids.edge_in, "Jump To Services").to_string();
        assert!(bodies.iter().all(|b| b["id"] != old.as_str()));
        assert!(bodies.iter().any(|b| b["name"] == EDGE_STICKY_CHAIN_NAME
            && b["id"] == edge_sticky_chain_id(&cfg).to_string().as_str()));
    }
}
