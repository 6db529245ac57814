//! What a trace read of a topology, and what a batch of changes to it touched: whether a
//! verdict worked out before the changes still holds after them.
//!
//! - **Guarantees.** A trace that read no key a batch touched ([`Changes::touches`] is
//!   false) takes the same steps on the changed topology, so its verdict stands. The keys
//!   are coarse (a device, a port, a chain, a binding, a load balancer), so a batch may
//!   touch a trace it does not alter; it never misses one it does.
//! - **What a trace reads** (noted by the walk, `engine`, and by `trace`): every port it
//!   enters or leaves and the device each belongs to (a bridge's ports, tables and
//!   filters are read through it; a router's state and filters); which of a bridge's
//!   ports are bound, where it floods (for an ARP request walked without hops, only which
//!   of them have the requested address behind them); every route lookup
//!   (router, destination); every bridge whose ARP knowledge a router peeks at
//!   through a link; every chain a filter or a jump names (missing
//!   or not), and every chain whose jumps the guard index let it skip; every load
//!   balancer a router runs; the binding (host, interface) of each workload it sends
//!   from. An ARP exchange replayed from the memo replays its reads.
//! - **What a change touches** ([`Topology::note_change`], called with the old resource
//!   before it goes and the new one after it is in): the resource's own key and the keys
//!   of what reads it: a bridge port's bridge, a router port's routes (its `Local` route
//!   and the routes through it), and the same of its peer; a binding's port, the (host,
//!   interface) it names and had, and what reads the port's binding through its device:
//!   a bridge's floods (not the bridge: its unicast forwarding and ARP answers read no
//!   binding), a router port's routes as for the port; a rule's chain; a
//!   route's destination on its router (it alters the lookups whose destination it
//!   contains: any route a lookup could choose contains the destination); a table
//!   entry's bridge; a pool's, a VIP's or a member's load balancer. A port group
//!   membership touches the member port and the group: a walk reads the groups of a port
//!   through the port (the exterior port it entered through, its in- and out-port where a
//!   rule asks about theirs), so no other walk can tell. An address group's member
//!   touches the group; [`Topology::settle`] turns each such group into the chains whose
//!   rules name it and the chains that jump to those (the rule and guard indexes may have
//!   skipped the rule unseen, so a trace that skipped it read only the chain).
//! - **Leaves to others.** Attachments (the workloads plugged in) are fixed for the life
//!   of a [`crate::LiveTopology`]; anything else is [`Changes::everything`].

use std::net::Ipv4Addr;

use rustc_hash::{FxHashMap, FxHashSet};
use uuid::Uuid;

use midonet_translators::model::{HostInterfacePort, Port, PortType, Resource, RuleType};

use crate::topology::{contains_len, peer_of, Topology};

/// One thing a trace can read and a change can touch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A port, a device, a chain or a load balancer, by id. A router's id stands for the
    /// router itself (its state, filters, load balancer), not for its routes.
    Id(Uuid),
    /// Every route of a router (the router itself changed): touches each lookup on it.
    Routes(Uuid),
    /// Which port the interface `(host, name)` is bound to.
    Binding(Uuid, String),
    /// Which ports of a bridge are bound: what a flood reads (it copies the frame to
    /// each).
    Exterior(Uuid),
    /// Which bound ports of a bridge have a workload owning the address behind them:
    /// what a flooded ARP request reads instead of [`Key::Exterior`] (it is walked to
    /// those ports only, and a walk that records hops reads the whole flood).
    Owner(Uuid, Ipv4Addr),
}

/// What one trace read: keys, and the route lookups it made (router, destination).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    keys: FxHashSet<Key>,
    lookups: FxHashSet<(Uuid, Ipv4Addr)>,
}

impl Reads {
    pub(crate) fn id(&mut self, id: Uuid) {
        self.keys.insert(Key::Id(id));
    }

    pub(crate) fn key(&mut self, key: &Key) {
        if !self.keys.contains(key) {
            self.keys.insert(key.clone());
        }
    }

    /// A route lookup on `router` for `dst`: what a change of a route whose destination
    /// contains `dst` (or of every route of the router) may alter.
    pub(crate) fn lookup(&mut self, router: Uuid, dst: Ipv4Addr) {
        self.lookups.insert((router, dst));
    }

    /// Adds what `other` read.
    pub(crate) fn extend(&mut self, other: &Reads) {
        for k in &other.keys {
            self.key(k);
        }
        self.lookups.extend(other.lookups.iter().copied());
    }
}

/// The keys a batch of changes touched, or everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    everything: bool,
    keys: FxHashSet<Key>,
    /// Router → the destinations (address, prefix length) of the routes that changed on
    /// it, listed, `Local` or published or not.
    routes: FxHashMap<Uuid, Vec<(Ipv4Addr, u8)>>,
    /// Address groups whose members changed, until [`Topology::settle`] turns them into
    /// chains.
    groups: FxHashSet<Uuid>,
}

impl Changes {
    /// Touches every trace (a topology started over, attachments changed).
    pub fn everything() -> Changes {
        Changes {
            everything: true,
            ..Changes::default()
        }
    }

    /// Whether it touches nothing.
    pub fn is_empty(&self) -> bool {
        !self.everything && self.keys.is_empty() && self.routes.is_empty() && self.groups.is_empty()
    }

    /// Whether a trace that read `reads` may go otherwise now.
    pub fn touches(&self, reads: &Reads) -> bool {
        if self.everything {
            return true;
        }
        let (small, large) = match self.keys.len() <= reads.keys.len() {
            true => (&self.keys, &reads.keys),
            false => (&reads.keys, &self.keys),
        };
        small.iter().any(|k| large.contains(k))
            || reads.lookups.iter().any(|l| self.alters_lookup(*l))
    }

    /// Whether a route lookup on `router` for `dst` may choose otherwise now: every
    /// route it could choose has a destination that contains `dst`.
    fn alters_lookup(&self, (router, dst): (Uuid, Ipv4Addr)) -> bool {
        self.keys.contains(&Key::Routes(router))
            || self.routes.get(&router).is_some_and(|changed| {
                changed
                    .iter()
                    .any(|(addr, len)| contains_len(Some(*addr), Some(*len), dst))
            })
    }

    fn id(&mut self, id: Uuid) {
        self.keys.insert(Key::Id(id));
    }

    /// A route to `dst` on `router` changed (a route without a destination goes
    /// everywhere).
    fn route(&mut self, router: Uuid, dst: Option<Ipv4Addr>, len: Option<u8>) {
        let dst = match (dst, len) {
            (Some(a), Some(l)) => (a, l.min(32)),
            _ => (Ipv4Addr::UNSPECIFIED, 0),
        };
        self.routes.entry(router).or_default().push(dst);
    }
}

impl Topology {
    /// Notes in `into` what a change of `r` touches: call it with the old resource before
    /// [`Topology::remove`] and with the new one after [`Topology::add`] (see the module
    /// docs), and [`Topology::settle`] once the batch is in.
    pub fn note_change(&self, r: &Resource, into: &mut Changes) {
        match r {
            Resource::Bridge(b) => into.id(b.id),
            Resource::Router(x) => {
                into.id(x.id);
                into.keys.insert(Key::Routes(x.id));
            }
            Resource::Port(p) => {
                self.note_port(p.id, into);
                self.note_device(p, into);
                for peer in peer_of(p).into_iter().chain(self.peers.get(&p.id).copied()) {
                    self.note_port(peer, into);
                }
            }
            Resource::PortLink(l) => {
                self.note_port(l.parent, into);
                self.note_port(l.peer_id, into);
            }
            Resource::Route(x) => into.route(x.parent, x.dst_network_addr, x.dst_network_length),
            Resource::Chain(c) => into.id(c.id),
            Resource::Rule(x) => into.id(x.parent),
            Resource::HostInterfacePort(b) => self.note_binding(b, into),
            Resource::MacPort(m) => into.id(m.parent),
            Resource::Ipv4MacPair(a) => into.id(a.parent),
            // A port's memberships are read through the port alone (`engine::condition`).
            Resource::PortGroupPort(m) => {
                into.id(m.port_id);
                into.id(m.parent);
            }
            Resource::IpAddrGroupAddr(a) => {
                into.groups.insert(a.parent);
            }
            // Nothing of these is modelled (see `Topology::add`).
            Resource::PortGroup(_)
            | Resource::IpAddrGroup(_)
            | Resource::TunnelZone(_)
            | Resource::TunnelZoneHost(_)
            | Resource::Host(_) => {}
            Resource::LoadBalancer(lb) => into.id(lb.id),
            Resource::Pool(p) => {
                into.id(p.id);
                into.id(p.parent);
            }
            Resource::PoolMember(m) => self.note_pool(m.parent, into),
            Resource::Vip(v) => self.note_pool(v.parent, into),
        }
    }

    /// A port and what reads it through its device (if it is in).
    fn note_port(&self, port: Uuid, into: &mut Changes) {
        into.id(port);
        if let Some(p) = self.ports.get(&port) {
            self.note_device(p, into);
        }
    }

    /// A binding: its port (a walk through the port reads its binding), the interface it
    /// names and the one the port had, and what reads the port's binding through its
    /// device. On a bridge that is its floods only ([`Key::Exterior`]; [`Key::Owner`] of
    /// each address of the workloads behind both interfaces), not the bridge itself: a
    /// bridge reads no binding when it forwards a unicast frame or answers ARP. On a
    /// router it is the routes through the port, as for the port itself.
    fn note_binding(&self, b: &HostInterfacePort, into: &mut Changes) {
        into.id(b.port_id);
        let named = b.interface_name.clone().map(|n| (b.parent, n));
        let interfaces: Vec<(Uuid, String)> = named
            .into_iter()
            .chain(self.bindings.get(&b.port_id).cloned())
            .collect();
        for (host, name) in &interfaces {
            into.keys.insert(Key::Binding(*host, name.clone()));
        }
        let Some(port) = self.ports.get(&b.port_id) else {
            // A port not in the topology is on no bridge's flood nor router's table.
            return;
        };
        match port.port_type {
            PortType::Router => self.note_device(port, into),
            PortType::Bridge => {
                into.keys.insert(Key::Exterior(port.parent));
                let behind = interfaces.iter().filter_map(|i| self.attachments.get(i));
                for ip in behind.flat_map(|a| &a.ips) {
                    into.keys.insert(Key::Owner(port.parent, *ip));
                }
            }
        }
    }

    /// What reads port `p` through its device: a bridge (its ports are where it floods,
    /// its bound ones what it delivers to); on a router, the routes the port makes or
    /// publishes: its `Local` route, and the routes through it (published while it is
    /// plugged). A walk reads a router's other ports only by their own ids.
    fn note_device(&self, p: &Port, into: &mut Changes) {
        match p.port_type {
            PortType::Bridge => into.id(p.parent),
            PortType::Router => {
                if let Some((addr, _)) = Topology::port_ipv4(p) {
                    into.route(p.parent, Some(addr), Some(32));
                }
                let through = self.routes.get(&p.parent).into_iter().flatten();
                for r in through.filter(|r| r.next_hop_port == Some(p.id)) {
                    into.route(p.parent, r.dst_network_addr, r.dst_network_length);
                }
            }
        }
    }

    /// A pool and its load balancer (a pool not in yet reaches no load balancer: its own
    /// arrival touches it).
    fn note_pool(&self, pool: Uuid, into: &mut Changes) {
        into.id(pool);
        if let Some(p) = self.pools.get(&pool) {
            into.id(p.parent);
        }
    }

    /// Turns the address groups whose members changed into the chains that read them: the
    /// chains with a rule naming one, and the chains with a jump to those.
    pub fn settle(&self, into: &mut Changes) {
        if into.groups.is_empty() {
            return;
        }
        let groups = std::mem::take(&mut into.groups);
        let names_one = |g: Option<Uuid>| g.is_some_and(|g| groups.contains(&g));
        let mut readers = FxHashSet::default();
        for (chain, rules) in &self.rules {
            let reads_group = rules.rules().iter().any(|r| {
                let c = &r.condition;
                names_one(c.ip_addr_group_src) || names_one(c.ip_addr_group_dst)
            });
            if reads_group {
                readers.insert(*chain);
            }
        }
        for (chain, rules) in &self.rules {
            let jumps_to_one = rules.rules().iter().any(|r| {
                r.rule_type == RuleType::Jump
                    && r.jump_chain_id.is_some_and(|t| readers.contains(&t))
            });
            if jumps_to_one {
                into.id(*chain);
            }
        }
        for chain in readers {
            into.id(chain);
        }
        for g in groups {
            into.id(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::RuleOrder;
    use midonet_translators::model::{
        Chain, HostInterfacePort, IpAddrGroupAddr, Ipv4Cidr, Port, PortGroupPort, PortType, Route,
        Router, Rule,
    };

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn reads(keys: &[Key]) -> Reads {
        let mut r = Reads::default();
        for k in keys {
            r.key(k);
        }
        r
    }

    fn attachment(host: Uuid, interface: &str, ip: &str) -> crate::Attachment {
        crate::Attachment {
            name: format!("pod/{interface}"),
            host,
            interface: interface.into(),
            mac: midonet_translators::model::MacAddr([2, 0, 0, 0, 0, 1]),
            ips: vec![ip.parse().unwrap()],
            subnet: None,
            gateway: None,
            networks: Vec::new(),
        }
    }

    #[test]
    fn a_binding_touches_its_port_both_interfaces_and_the_bridges_floods_for_them() {
        let (bridge, port, host) = (id(1), id(2), id(3));
        let atts = [
            attachment(host, "a", "10.0.0.1"),
            attachment(host, "b", "10.0.0.2"),
            attachment(host, "c", "10.0.0.3"),
        ];
        let mut topo = Topology::new(Vec::new(), RuleOrder::Listed, atts);
        topo.add(
            Resource::Port(Port::new(bridge, port, PortType::Bridge)),
            RuleOrder::Listed,
        );
        let old = Resource::HostInterfacePort(HostInterfacePort::new(host, port, "a"));
        topo.add(old.clone(), RuleOrder::Listed);
        // Bound to another interface without the old binding going first.
        let new = Resource::HostInterfacePort(HostInterfacePort::new(host, port, "b"));
        let mut touched = Changes::default();
        topo.note_change(&new, &mut touched);
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        for k in [
            Key::Id(port),
            Key::Exterior(bridge),
            Key::Owner(bridge, ip("10.0.0.1")),
            Key::Owner(bridge, ip("10.0.0.2")),
            Key::Binding(host, "a".into()),
            Key::Binding(host, "b".into()),
        ] {
            assert!(touched.touches(&reads(std::slice::from_ref(&k))), "{k:?}");
        }
        // Not the bridge (its unicast forwarding and ARP answers read no binding), nor
        // an ARP request for the workload behind another interface.
        assert!(!touched.touches(&reads(&[
            Key::Id(bridge),
            Key::Id(id(9)),
            Key::Binding(host, "c".into()),
            Key::Owner(bridge, ip("10.0.0.3")),
            Key::Owner(id(9), ip("10.0.0.1")),
        ])));
    }

    #[test]
    fn a_router_ports_binding_touches_the_routes_through_it() {
        let (router, port, host) = (id(1), id(2), id(3));
        let mut topo = Topology::default();
        let mut p = Port::new(router, port, PortType::Router);
        p.port_address = Some("192.168.0.1".parse().unwrap());
        p.network_address = Some("192.168.0.0".parse().unwrap());
        p.network_length = Some(24);
        topo.add(Resource::Port(p), RuleOrder::Listed);
        let bound = Resource::HostInterfacePort(HostInterfacePort::new(host, port, "up"));
        let mut touched = Changes::default();
        topo.note_change(&bound, &mut touched);
        assert!(touched.touches(&looked_up(router, "192.168.0.1")));
        assert!(!touched.touches(&looked_up(router, "192.168.0.2")));
    }

    #[test]
    fn a_group_member_touches_the_chains_naming_the_group_and_those_jumping_to_them() {
        let (group, guarded, jumper, other) = (id(10), id(11), id(12), id(13));
        let mut topo = Topology::default();
        for c in [guarded, jumper, other] {
            topo.add(Resource::Chain(Chain::new(c)), RuleOrder::Listed);
        }
        let mut guard = Rule::new(guarded, id(20), RuleType::Return);
        guard.condition.ip_addr_group_dst = Some(group);
        guard.condition.inv_ip_addr_group_dst = Some(true);
        let mut jump = Rule::new(jumper, id(21), RuleType::Jump);
        jump.jump_chain_id = Some(guarded);
        for r in [guard, jump, Rule::new(other, id(22), RuleType::Accept)] {
            topo.add(Resource::Rule(r), RuleOrder::Listed);
        }
        let member =
            Resource::IpAddrGroupAddr(IpAddrGroupAddr::new(group, "10.0.0.1".parse().unwrap()));
        let mut touched = Changes::default();
        topo.note_change(&member, &mut touched);
        topo.settle(&mut touched);
        // A walk the guard index let skip the guarded chain read only the jumper.
        assert!(touched.touches(&reads(&[Key::Id(jumper)])));
        assert!(touched.touches(&reads(&[Key::Id(guarded)])));
        assert!(!touched.touches(&reads(&[Key::Id(other)])));
    }

    #[test]
    fn a_port_group_member_touches_the_port_and_the_group_not_the_chains_naming_it() {
        let (group, chain, port, bridge) = (id(10), id(11), id(12), id(13));
        let mut topo = Topology::default();
        topo.add(Resource::Chain(Chain::new(chain)), RuleOrder::Listed);
        let mut rule = Rule::new(chain, id(20), RuleType::Drop);
        rule.condition.out_port_group = Some(group);
        topo.add(Resource::Rule(rule), RuleOrder::Listed);
        topo.add(
            Resource::Port(Port::new(bridge, port, PortType::Bridge)),
            RuleOrder::Listed,
        );
        let member = Resource::PortGroupPort(PortGroupPort::new(group, port));
        let mut touched = Changes::default();
        topo.note_change(&member, &mut touched);
        topo.settle(&mut touched);
        assert!(touched.touches(&reads(&[Key::Id(port)])));
        assert!(touched.touches(&reads(&[Key::Id(group)])));
        assert!(!touched.touches(&reads(&[Key::Id(chain), Key::Id(bridge)])));
    }

    fn looked_up(router: Uuid, dst: &str) -> Reads {
        let mut r = Reads::default();
        r.lookup(router, dst.parse().unwrap());
        r
    }

    #[test]
    fn a_route_touches_the_lookups_its_destination_contains_and_a_router_port_its_own() {
        let (router, port, other) = (id(1), id(2), id(3));
        let net = |a: &str, l: u8| Ipv4Cidr::new(a.parse().unwrap(), l).unwrap();
        let mut topo = Topology::default();
        let route = Resource::Route(Route::normal(router, id(4), net("10.1.0.0", 16), port));
        topo.add(route.clone(), RuleOrder::Listed);
        let mut touched = Changes::default();
        topo.note_change(&route, &mut touched);
        assert!(touched.touches(&looked_up(router, "10.1.2.3")));
        assert!(!touched.touches(&looked_up(router, "10.2.0.1")));
        assert!(!touched.touches(&looked_up(other, "10.1.2.3")));
        // The router port the route goes through: its own address and the route's.
        let mut p = Port::new(router, port, PortType::Router);
        p.port_address = Some("192.168.0.1".parse().unwrap());
        p.network_address = Some("192.168.0.0".parse().unwrap());
        p.network_length = Some(24);
        let p = Resource::Port(p);
        topo.add(p.clone(), RuleOrder::Listed);
        let mut touched = Changes::default();
        topo.note_change(&p, &mut touched);
        assert!(touched.touches(&looked_up(router, "10.1.2.3")));
        assert!(touched.touches(&looked_up(router, "192.168.0.1")));
        assert!(!touched.touches(&looked_up(router, "192.168.0.2")));
        assert!(!touched.touches(&reads(&[Key::Id(router)])));
        // The router itself: every lookup on it.
        let mut touched = Changes::default();
        topo.note_change(&Resource::Router(Router::new(router)), &mut touched);
        assert!(touched.touches(&looked_up(router, "172.16.0.1")));
    }

    #[test]
    fn everything_touches_even_a_trace_that_read_nothing() {
        assert!(Changes::everything().touches(&Reads::default()));
        assert!(!Changes::default().touches(&reads(&[Key::Id(id(1))])));
        assert!(Changes::default().is_empty());
    }
}
