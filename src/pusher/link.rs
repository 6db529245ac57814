//! The link between two versions' cluster routers that a linked cutover moves the bindings
//! over ([`super::CutoverOrder::Linked`]): what it is made of, decided purely.
//!
//! A cutover moves each pod's binding from its old port to its new one. Without a path
//! between the two versions, a pod already on the new topology cannot reach one still on
//! the old, so the longest interruption is the whole cutover. The link is that path: one
//! router port on each version's cluster router, linked to each other, and *mirrors* of
//! the routes into the node bridges:
//!
//! - on the **new** router, for each host whose bindings are still to move, each route
//!   into that node's new bridge, through the link, one weight lower than the route it
//!   mirrors: it wins (same prefix, lower weight: midolman's `RoutingTable` picks the
//!   lowest weight among the longest prefixes; `dataplane/src/engine/router.rs`), so the
//!   node's pods are reached on the old topology. A host's mirrors go just before its
//!   batch moves, and the new router routes to the node's new bridge again;
//! - on the **old** router, for each route into a node bridge of either version, through
//!   the link, one weight higher than the route it mirrors: it loses while the node's old
//!   bridge is linked, and wins once the cutover has deleted that bridge (its router
//!   port, no longer linked, no longer publishes its routes), so the old topology reaches
//!   the node's pods on the new one. A node only the new version has is reached from the
//!   start.
//!
//! A pair of pods is therefore apart only while one of their hosts' batch runs. Service
//! traffic is translated on the source's node bridge, and its reply comes back through it.
//!
//! **Guaranteed**: [`plan`] is deterministic in its input (IDs are derived from the two
//! routers and each route's content), so a restart in the middle of a cutover plans the
//! same resources again; its resources are in push order; the Translation it describes
//! (named [`translation_name`], labelled [`LINK_LABEL`]) claims everything the link adds
//! but the new router's mirrors, so neither the orphan sweep nor a crash loses track of
//! it. The new router's mirrors live only during the cutover, which deletes them host by
//! host (a Translation claiming them would push them again); deleting the new router's
//! link port, which the Translation claims, takes any left with it.
//!
//! **Assumed**: a node's Translation holds its bridge, the bridge's port, the router port
//! linked to it, the routes through that router port, and the binding of the node's own
//! interface (one host); every such route of one version is on one router (its cluster
//! router); the link network [`LINK_NETWORK`] is used by nothing else the routers route.
//!
//! **Left to others**: writing the Translation, pushing the link, removing a host's
//! mirrors and retiring the link with the bump ([`super::cutover`],
//! [`super::rollout`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use midonet_translators::ids::{mac_for_key, sub_id};
use midonet_translators::meta::VERSION_LABEL;
use midonet_translators::model::{Ipv4Cidr, Port, PortLink, PortType, Resource, Route};
use midonet_translators::translate::GLOBAL_TRANSLATION_NAMESPACE;
use midonet_translators::DesiredTranslation;
use uuid::Uuid;

use super::steps::Desired;

/// Label on the link's Translation (value `"true"`): no translator writes it, the rollout
/// deletes it once the bump is over.
pub const LINK_LABEL: &str = "midonet.org/version-link";

/// The link's network: the new router's port is its first address, the old router's the
/// second. Link-local, outside any pod, Service or node network.
pub const LINK_NETWORK: Ipv4Cidr = Ipv4Cidr {
    addr: Ipv4Addr::new(169, 254, 127, 0),
    prefix_len: 30,
};
const NEW_SIDE: Ipv4Addr = Ipv4Addr::new(169, 254, 127, 1);
const OLD_SIDE: Ipv4Addr = Ipv4Addr::new(169, 254, 127, 2);

/// The name of the link's Translation to version `new_version`.
pub fn translation_name(new_version: &str) -> String {
    format!("version-link.{new_version}")
}

/// The routes into a node's bridges that one Translation holds, and the host whose
/// interface it binds.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRoutes {
    pub host: Uuid,
    pub routes: Vec<Route>,
}

/// A Translation's routes into its own bridges: those through a router port it links to a
/// bridge port it also holds. `None` unless it has such routes and binds exactly one host.
pub fn node_routes(resources: &[Desired]) -> Option<NodeRoutes> {
    let port_type = |id: Uuid| {
        resources.iter().find_map(|d| match &d.resource {
            Resource::Port(p) if p.id == id => Some(p.port_type),
            _ => None,
        })
    };
    let into_bridge: BTreeSet<Uuid> = resources
        .iter()
        .filter_map(|d| match &d.resource {
            Resource::PortLink(l) => Some((l.port_id.unwrap_or(l.parent), l.peer_id)),
            _ => None,
        })
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .filter(|(r, b)| {
            port_type(*r) == Some(PortType::Router) && port_type(*b) == Some(PortType::Bridge)
        })
        .map(|(r, _)| r)
        .collect();
    let routes: Vec<Route> = resources
        .iter()
        .filter_map(|d| match &d.resource {
            Resource::Route(r) if r.next_hop_port.is_some_and(|p| into_bridge.contains(&p)) => {
                Some(r.clone())
            }
            _ => None,
        })
        .collect();
    let hosts: BTreeSet<Uuid> = resources
        .iter()
        .filter_map(|d| match &d.resource {
            Resource::HostInterfacePort(b) => Some(b.parent),
            _ => None,
        })
        .collect();
    match (routes.is_empty(), hosts.len()) {
        (false, 1) => hosts.first().map(|&host| NodeRoutes { host, routes }),
        _ => None,
    }
}

/// Why two versions cannot be linked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unlinkable {
    #[error("the {0} version has no node routes to mirror")]
    NoRoutes(&'static str),
    #[error("the {0} version's node routes are on {1} routers, not one cluster router")]
    ManyRouters(&'static str, usize),
    #[error("route {0} has weight 0: no route can win over it")]
    WeightZero(Uuid),
}

/// What a linked cutover adds, and when each part goes.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkPlan {
    /// Everything the link adds, in push order.
    pub resources: Vec<Resource>,
    /// The new router's mirrors of each host's routes: removed before its batch.
    pub new_mirrors: BTreeMap<Uuid, Vec<Route>>,
    /// The host of each of the new router's mirrors, by the mirror's ID.
    mirror_hosts: BTreeMap<Uuid, Uuid>,
    pub new_router: Uuid,
    pub old_router: Uuid,
}

impl LinkPlan {
    /// The host whose routes the resource `id` mirrors on the new router, if it is one of
    /// those mirrors.
    pub fn new_mirror_host(&self, id: Uuid) -> Option<Uuid> {
        self.mirror_hosts.get(&id).copied()
    }

    /// The Translation claiming the link to version `new_version`: all but the new
    /// router's mirrors, which only the cutover makes and deletes.
    pub fn translation(&self, new_version: &str) -> DesiredTranslation {
        DesiredTranslation {
            name: translation_name(new_version),
            namespace: GLOBAL_TRANSLATION_NAMESPACE.to_string(),
            labels: BTreeMap::from([
                (VERSION_LABEL.to_string(), new_version.to_string()),
                (LINK_LABEL.to_string(), "true".to_string()),
            ]),
            resources: self
                .resources
                .iter()
                .filter(|r| {
                    r.own_id()
                        .is_none_or(|id| self.new_mirror_host(id).is_none())
                })
                .map(Resource::to_entry)
                .collect(),
        }
    }
}

/// The link between the routers of `old` and `new` (each version's node routes), with the
/// new router's mirrors for the hosts in `pending` (those whose bindings are still to
/// move).
pub fn plan(
    old: &[NodeRoutes],
    new: &[NodeRoutes],
    pending: &BTreeSet<Uuid>,
) -> Result<LinkPlan, Unlinkable> {
    let old_router = one_router("old", old)?;
    let new_router = one_router("new", new)?;
    // The side is in the IDs: a rollback links the same two routers the other way round
    // while the first link may still be there.
    let new_port = sub_id(new_router, &format!("Version Link New Side/{old_router}"));
    let old_port = sub_id(old_router, &format!("Version Link Old Side/{new_router}"));
    let mut resources: Vec<Resource> = vec![
        link_port(new_router, new_port, NEW_SIDE).into(),
        link_port(old_router, old_port, OLD_SIDE).into(),
        PortLink::between(new_port, old_port).into(),
    ];
    // Old side: every destination either version routes into a node bridge, the highest
    // weight among them plus one.
    let mut old_side: BTreeMap<(Ipv4Cidr, Ipv4Cidr), u32> = BTreeMap::new();
    for r in old.iter().chain(new).flat_map(|n| &n.routes) {
        let w = old_side.entry(prefixes(r)).or_default();
        *w = (*w).max(weight(r).saturating_add(1));
    }
    for ((dst, src), w) in old_side {
        resources.push(mirror(old_router, old_port, NEW_SIDE, dst, src, w).into());
    }
    let mut new_mirrors: BTreeMap<Uuid, Vec<Route>> = BTreeMap::new();
    for n in new.iter().filter(|n| pending.contains(&n.host)) {
        for r in &n.routes {
            let w = weight(r)
                .checked_sub(1)
                .ok_or(Unlinkable::WeightZero(r.id))?;
            let (dst, src) = prefixes(r);
            let m = mirror(new_router, new_port, OLD_SIDE, dst, src, w);
            resources.push(m.clone().into());
            new_mirrors.entry(n.host).or_default().push(m);
        }
    }
    let mirror_hosts = new_mirrors
        .iter()
        .flat_map(|(host, routes)| routes.iter().map(|r| (r.id, *host)))
        .collect();
    Ok(LinkPlan {
        resources,
        new_mirrors,
        mirror_hosts,
        new_router,
        old_router,
    })
}

/// The one router `nodes`' routes are on.
fn one_router(which: &'static str, nodes: &[NodeRoutes]) -> Result<Uuid, Unlinkable> {
    let routers: BTreeSet<Uuid> = nodes
        .iter()
        .flat_map(|n| n.routes.iter().map(|r| r.parent))
        .collect();
    match routers.len() {
        0 => Err(Unlinkable::NoRoutes(which)),
        1 => routers.first().copied().ok_or(Unlinkable::NoRoutes(which)),
        n => Err(Unlinkable::ManyRouters(which, n)),
    }
}

/// MidoNet's default weight for a route that names none.
fn weight(r: &Route) -> u32 {
    r.weight.unwrap_or(100)
}

fn prefixes(r: &Route) -> (Ipv4Cidr, Ipv4Cidr) {
    let cidr = |addr: Option<Ipv4Addr>, len: Option<u8>| Ipv4Cidr {
        addr: addr.unwrap_or(Ipv4Addr::UNSPECIFIED),
        prefix_len: len.unwrap_or(0),
    };
    (
        cidr(r.dst_network_addr, r.dst_network_length),
        cidr(r.src_network_addr, r.src_network_length),
    )
}

fn link_port(router: Uuid, id: Uuid, address: Ipv4Addr) -> Port {
    let mut port = Port::router_port(router, id).with_address(address, LINK_NETWORK);
    port.port_mac = Some(mac_for_key(&id.to_string()));
    port
}

/// A route of `router` to `dst` from `src` through its link port `port`, towards the
/// other side's address `gateway`, of weight `w`; its ID covers its whole body (routes
/// cannot be updated in MidoNet).
fn mirror(
    router: Uuid,
    port: Uuid,
    gateway: Ipv4Addr,
    dst: Ipv4Cidr,
    src: Ipv4Cidr,
    w: u32,
) -> Route {
    let id = sub_id(port, &format!("Mirror Route/{dst}/{src}/{w}"));
    let mut route = Route::normal(router, id, dst, port);
    route.src_network_addr = Some(src.addr);
    route.src_network_length = Some(src.prefix_len);
    route.next_hop_gateway = Some(gateway);
    route.weight = Some(w);
    route
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pusher::steps::parse_lenient;
    use midonet_translators::model::{Bridge, HostInterfacePort};

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn cidr(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    /// A node's resources as the Node translator makes them: bridge `b`, its port, the
    /// router port linked to it on `router`, the route to `subnet`, the node's binding on
    /// `host`.
    fn node(router: u128, b: u128, host: u128, subnet: &str) -> Vec<Desired> {
        let (bridge_port, router_port) = (id(b + 1), id(b + 2));
        let mut route = Route::normal(id(router), id(b + 3), cidr(subnet), router_port);
        route.weight = Some(100);
        let resources: Vec<Resource> = vec![
            Bridge::named(id(b), "t", "n").into(),
            Port::bridge_port(id(b), bridge_port).into(),
            Port::router_port(id(router), router_port).into(),
            PortLink::between(bridge_port, router_port).into(),
            route.into(),
            Port::bridge_port(id(b), id(b + 4)).into(),
            HostInterfacePort::new(id(host), id(b + 4), "node").into(),
        ];
        parse_lenient(&resources.iter().map(Resource::to_entry).collect::<Vec<_>>())
    }

    #[test]
    fn a_node_translation_yields_its_routes_and_host() {
        let n = node_routes(&node(1, 100, 7, "10.1.0.0/24")).unwrap();
        assert_eq!(n.host, id(7));
        assert_eq!(n.routes.len(), 1);
        assert_eq!(n.routes[0].parent, id(1));
        // A pod's: a binding, no routes.
        let pod: Vec<Desired> = node(1, 100, 7, "10.1.0.0/24")
            .into_iter()
            .filter(|d| !matches!(d.resource, Resource::Route(_)))
            .collect();
        assert_eq!(node_routes(&pod), None);
    }

    fn nodes(router: u128, base: u128) -> Vec<NodeRoutes> {
        (0..3u128)
            .map(|i| {
                let subnet = format!("10.1.{i}.0/24");
                node_routes(&node(router, base + 10 * i, 7 + i, &subnet)).unwrap()
            })
            .collect()
    }

    fn routes_on(plan: &LinkPlan, router: Uuid) -> Vec<&Route> {
        plan.resources
            .iter()
            .filter_map(|r| match r {
                Resource::Route(r) if r.parent == router => Some(r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_new_router_mirrors_pending_hosts_lower_the_old_every_node_higher() {
        let (old, new) = (nodes(1, 100), nodes(2, 200));
        let pending = BTreeSet::from([id(7), id(8)]);
        let p = plan(&old, &new, &pending).unwrap();
        assert_eq!((p.old_router, p.new_router), (id(1), id(2)));
        let on_new = routes_on(&p, id(2));
        assert_eq!(on_new.len(), 2, "the pending hosts' routes only");
        assert!(on_new.iter().all(|r| r.weight == Some(99)));
        assert_eq!(
            p.new_mirrors.keys().copied().collect::<Vec<_>>(),
            [id(7), id(8)]
        );
        let on_old = routes_on(&p, id(1));
        assert_eq!(on_old.len(), 3, "one per destination, both versions merged");
        assert!(on_old.iter().all(|r| r.weight == Some(101)));
        // Every mirror goes through its router's link port, which comes first.
        let link_ports: Vec<Uuid> = p.resources[..2].iter().filter_map(|r| r.own_id()).collect();
        for r in on_new.iter().chain(&on_old) {
            assert!(link_ports.contains(&r.next_hop_port.unwrap()));
        }
        assert!(matches!(p.resources[2], Resource::PortLink(_)));
    }

    #[test]
    fn the_plan_is_the_same_each_time_and_its_translation_claims_what_outlives_the_cutover() {
        let (old, new) = (nodes(1, 100), nodes(2, 200));
        let all = BTreeSet::from([id(7), id(8), id(9)]);
        let p = plan(&old, &new, &all).unwrap();
        assert_eq!(p, plan(&old, &new, &all).unwrap());
        let t = p.translation("2");
        assert_eq!(t.name, "version-link.2");
        assert_eq!(t.labels.get(LINK_LABEL).map(String::as_str), Some("true"));
        let parsed = parse_lenient(&t.resources);
        let new_routes = parsed
            .iter()
            .filter(|d| matches!(&d.resource, Resource::Route(r) if r.parent == id(2)))
            .count();
        assert_eq!(
            new_routes, 0,
            "the new router's mirrors are the cutover's alone"
        );
        assert_eq!(parsed.len(), p.resources.len() - 3);
    }

    #[test]
    fn versions_that_cannot_be_linked_say_why() {
        let new = nodes(2, 200);
        let none = BTreeSet::new();
        assert_eq!(plan(&[], &new, &none), Err(Unlinkable::NoRoutes("old")));
        let mut old = nodes(1, 100);
        old.extend(nodes(3, 300));
        assert_eq!(
            plan(&old, &new, &none),
            Err(Unlinkable::ManyRouters("old", 2))
        );
        let mut zero = nodes(2, 200);
        zero[0].routes[0].weight = Some(0);
        let pending = BTreeSet::from([zero[0].host]);
        assert_eq!(
            plan(&nodes(1, 100), &zero, &pending),
            Err(Unlinkable::WeightZero(zero[0].routes[0].id))
        );
    }
}
