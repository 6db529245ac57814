//! The virtual topology the model simulates: MidoNet resources indexed the way the agent
//! looks them up, plus what sits behind each bound host interface.
//!
//! Built from the one typed model ([`midonet_translators::model::Resource`]), whether the
//! resources come from the simulator's store, from GETs against a real MidoNet, or straight
//! from Translations. Only rule order needs care: MidoNet keeps a chain's rules in a list
//! and a POST inserts at `position`, so a listing gives the order and a push sequence
//! produces it ([`RuleOrder`]).
//!
//! What MidoNet derives, the topology derives too: each router port's `Local` route (when
//! the resources do not list it, as Translations never do), which routes are published
//! (their port linked, or bound with a workload behind it), what a bridge knows of an
//! address (its linked router ports', its ARP table), where it floods (its bound ports).
//! A VLAN-tagged port is a build problem (not modelled); tagged MAC-table entries do not
//! serve the untagged frames the model sends. Values worked out on first use (ARP
//! exchanges, `Local` routes, the chains' jumps indexed by their targets' guards) are kept
//! per topology, shared by the threads that read it, and emptied by every change.
//!
//! Load balancers, pools, members and VIPs are kept by id; the router that names a load
//! balancer runs it (`engine/l4lb.rs`), which finds the VIPs and members below it by
//! their parents when a packet needs them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use crate::chainrules::{guarded_jumps, ChainRules, Positions};
use midonet_translators::model::{
    Bridge, Chain, Ipv4Cidr, LoadBalancer, MacAddr, Pool, PoolMember, Port, PortType, Resource,
    Route, RouteType, Router, Rule, RuleType, Vip,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A workload behind a bound host interface: a pod, a node's host stack, or anything a
/// test plugs in. It owns addresses, answers ARP for them, and sends what is not on its
/// link to its gateway, like a host with one interface and a default route.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    /// What to call it in a trace, e.g. `pod/default/web-1` or `node/node-1`.
    pub name: String,
    /// The MidoNet host the interface is on.
    pub host: Uuid,
    /// The interface name of the binding.
    pub interface: String,
    pub mac: MacAddr,
    /// Addresses it owns; the first is its source address.
    pub ips: Vec<Ipv4Addr>,
    /// The on-link network; destinations outside it go to `gateway`.
    pub subnet: Option<Ipv4Cidr>,
    pub gateway: Option<Ipv4Addr>,
    /// Networks it receives packets for besides its own addresses: a router or gateway
    /// host standing for what lies behind it (e.g. `0.0.0.0/0` for the outside world
    /// behind an uplink). A trace may start from any address in them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Ipv4Cidr>,
}

impl Attachment {
    /// The address it sends from.
    pub fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.ips.first().copied()
    }

    /// Whether `ip` is one of its own addresses (it answers ARP for those).
    pub fn owns(&self, ip: Ipv4Addr) -> bool {
        self.ips.contains(&ip)
    }

    /// Whether it takes a packet addressed to `ip`: its own, or in a network behind it.
    pub fn accepts(&self, ip: Ipv4Addr) -> bool {
        self.owns(ip) || self.networks.iter().any(|n| contains(*n, ip))
    }

    /// The next hop it sends a packet for `dst` to.
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        match self.subnet {
            Some(net) if contains(net, dst) => Some(dst),
            _ => self.gateway,
        }
    }
}

/// True if `ip` is inside `net`.
pub fn contains(net: Ipv4Cidr, ip: Ipv4Addr) -> bool {
    let mask = prefix_mask(net.prefix_len);
    u32::from(ip) & mask == u32::from(net.addr) & mask
}

/// The netmask of a prefix length (0..=32).
pub fn prefix_mask(len: u8) -> u32 {
    match len {
        0 => 0,
        l if l >= 32 => u32::MAX,
        l => u32::MAX << (32 - u32::from(l)),
    }
}

/// How rules reach the builder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOrder {
    /// In each chain's evaluation order, as MidoNet lists them (`GET /chains/{id}/rules`)
    /// and the simulator dumps them.
    Listed,
    /// In push order: each rule is inserted at its `position` (default 1, the head), as a
    /// POST to MidoNet does. A position beyond the end is what MidoNet refuses; the model
    /// appends and records the problem.
    Pushed,
}

/// A resource the builder could not place, e.g. a rule of an unknown chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuildProblem {
    pub resource: String,
    pub problem: String,
}

/// The indexed topology.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    pub(crate) bridges: FxHashMap<Uuid, Bridge>,
    pub(crate) routers: FxHashMap<Uuid, Router>,
    pub(crate) ports: FxHashMap<Uuid, Port>,
    /// Interior links, both directions.
    pub(crate) peers: FxHashMap<Uuid, Uuid>,
    /// How many resources state each link (both ports' `peerId`, a port link), by the
    /// pair in id order: a link goes when the last of them does.
    pub(crate) links: FxHashMap<(Uuid, Uuid), usize>,
    pub(crate) routes: FxHashMap<Uuid, Vec<Route>>,
    pub(crate) chains: FxHashMap<Uuid, Chain>,
    /// Each chain's rules in evaluation order, indexed by destination.
    pub(crate) rules: FxHashMap<Uuid, ChainRules>,
    /// Port → (host, interface) of its binding.
    pub(crate) bindings: FxHashMap<Uuid, (Uuid, String)>,
    pub(crate) attachments: FxHashMap<(Uuid, String), Attachment>,
    /// Bridge → static MAC table.
    pub(crate) mac_tables: FxHashMap<Uuid, FxHashMap<MacAddr, Uuid>>,
    /// Bridge → ARP table.
    pub(crate) arp_tables: FxHashMap<Uuid, FxHashMap<Ipv4Addr, MacAddr>>,
    /// Port → the port groups it is a member of.
    pub(crate) port_groups: FxHashMap<Uuid, BTreeSet<Uuid>>,
    /// IP address group → its addresses.
    pub(crate) ip_addr_groups: FxHashMap<Uuid, FxHashSet<Ipv4Addr>>,
    /// L4 load balancers, pools, pool members and VIPs by id (a router runs the load
    /// balancer its `loadBalancerId` names: see `engine/l4lb.rs`).
    pub(crate) load_balancers: FxHashMap<Uuid, LoadBalancer>,
    pub(crate) pools: FxHashMap<Uuid, Pool>,
    pub(crate) pool_members: FxHashMap<Uuid, PoolMember>,
    pub(crate) vips: FxHashMap<Uuid, Vip>,
    pub(crate) problems: Vec<BuildProblem>,
    /// How many rules have a `traversedDevice` condition: without any, walks need not
    /// note the devices they traverse.
    pub(crate) traversed_conditions: usize,
    /// ARP exchanges already walked on this topology (emptied by every change; a
    /// `LiveTopology` puts back those its changes did not touch).
    pub(crate) arp_memo: crate::engine::ArpMemo,
    /// Each router's implicit `Local` routes (emptied by every change).
    pub(crate) local_routes: Memo<Uuid, Arc<Vec<Route>>>,
    /// Each chain's jumps indexed by their targets' guards (`chainrules::guarded_jumps`;
    /// emptied by every change).
    pub(crate) guarded_jumps: Memo<Uuid, Option<Arc<Positions>>>,
    /// What `guarded_jumps` reads of every rule (emptied by every change).
    pub(crate) jump_facts: Memo<(), Arc<JumpFacts>>,
    // Indexes derived from the maps above, kept in step by every change: what the walk
    // looks up on every hop would otherwise be a scan of every port or attachment.
    /// Device (bridge or router) → its ports, in id order (a stable flood order).
    pub(crate) device_ports: FxHashMap<Uuid, BTreeSet<Uuid>>,
    /// (host, interface) → the ports bound to it (more than one is a misconfiguration;
    /// the smallest id is taken).
    pub(crate) bound: FxHashMap<(Uuid, String), BTreeSet<Uuid>>,
    /// Attachment name → its (host, interface).
    pub(crate) by_name: FxHashMap<String, (Uuid, String)>,
    /// Address → the (host, interface) of the attachments that own it.
    pub(crate) by_ip: FxHashMap<Ipv4Addr, BTreeSet<(Uuid, String)>>,
    /// MAC → the (host, interface) of the attachments that use it.
    pub(crate) by_mac: FxHashMap<MacAddr, BTreeSet<(Uuid, String)>>,
    /// Address → the IP address groups it is in.
    pub(crate) addr_groups_of: FxHashMap<Ipv4Addr, BTreeSet<Uuid>>,
}

impl Topology {
    /// A topology of `resources` (rules ordered as `order` says) with `attachments`
    /// behind the bound interfaces.
    pub fn new(
        resources: impl IntoIterator<Item = Resource>,
        order: RuleOrder,
        attachments: impl IntoIterator<Item = Attachment>,
    ) -> Topology {
        let mut t = Topology::default();
        for r in resources {
            t.add(r, order);
        }
        for a in attachments {
            t.attach(a);
        }
        t
    }

    /// Adds one resource.
    pub fn add(&mut self, resource: Resource, order: RuleOrder) {
        self.forget_derived();
        match resource {
            Resource::Bridge(b) => {
                self.bridges.insert(b.id, b);
            }
            Resource::Router(r) => {
                self.routers.insert(r.id, r);
            }
            Resource::Port(p) => {
                if let Some(peer) = peer_of(&p) {
                    self.link(p.id, peer);
                }
                if p.vlan_id.unwrap_or(0) != 0 {
                    self.problems.push(BuildProblem {
                        resource: format!("/ports/{}", p.id),
                        problem: "a VLAN-tagged port (a VLAN-aware bridge) is not modelled; \
                                  a trace through it is refused"
                            .into(),
                    });
                }
                let (id, parent) = (p.id, p.parent);
                if let Some(old) = self.ports.insert(id, p) {
                    if old.parent != parent {
                        self.drop_device_port(old.parent, id);
                    }
                }
                self.device_ports.entry(parent).or_default().insert(id);
            }
            Resource::PortLink(l) => self.link(l.parent, l.peer_id),
            Resource::Route(r) => self.routes.entry(r.parent).or_default().push(r),
            Resource::Chain(c) => {
                self.rules.entry(c.id).or_default();
                self.chains.insert(c.id, c);
            }
            Resource::Rule(r) => self.add_rule(r, order),
            Resource::HostInterfacePort(b) => {
                if let Some(iface) = b.interface_name.clone() {
                    self.bind(b.port_id, b.parent, iface);
                }
            }
            // A tagged entry serves frames of its VLAN only; the model's frames are
            // untagged, so only the untagged table (VLAN 0) applies to them.
            Resource::MacPort(m) if m.vlan_id.unwrap_or(0) == 0 => {
                self.mac_tables
                    .entry(m.parent)
                    .or_default()
                    .insert(m.mac_addr, m.port_id);
            }
            Resource::MacPort(_) => {}
            Resource::Ipv4MacPair(a) => {
                self.arp_tables
                    .entry(a.parent)
                    .or_default()
                    .insert(a.ip, a.mac);
            }
            Resource::PortGroupPort(m) => self.add_port_group_member(m.parent, m.port_id),
            Resource::IpAddrGroupAddr(a) => self.add_ip_addr_group_member(a.parent, a.addr),
            // An empty group matches nothing: the members above are all the model needs.
            Resource::PortGroup(_) | Resource::IpAddrGroup(_) => {}
            // Tunnel zones and hosts carry packets between agents; the model simulates
            // one virtual network and does not need them.
            Resource::TunnelZone(_) | Resource::TunnelZoneHost(_) | Resource::Host(_) => {}
            Resource::LoadBalancer(lb) => {
                self.load_balancers.insert(lb.id, lb);
            }
            Resource::Pool(p) => {
                self.pools.insert(p.id, p);
            }
            Resource::PoolMember(m) => {
                self.pool_members.insert(m.id, m);
            }
            Resource::Vip(v) => {
                self.vips.insert(v.id, v);
            }
        }
    }

    fn add_rule(&mut self, rule: Rule, order: RuleOrder) {
        if rule.condition.traversed_device.is_some() {
            self.traversed_conditions += 1;
        }
        let rules = self.rules.entry(rule.parent).or_default();
        match order {
            RuleOrder::Listed => rules.push(rule),
            RuleOrder::Pushed => {
                let pos = rule.position.unwrap_or(1).max(1) as usize;
                if pos > rules.len() + 1 {
                    self.problems.push(BuildProblem {
                        resource: format!("/rules/{}", rule.id),
                        problem: format!(
                            "position {pos} is beyond the end of a chain of {} rules (MidoNet refuses it)",
                            rules.len()
                        ),
                    });
                    rules.push(rule);
                } else {
                    rules.insert(pos - 1, rule);
                }
            }
        }
    }

    fn link(&mut self, a: Uuid, b: Uuid) {
        *self.links.entry(link_key(a, b)).or_default() += 1;
        self.peers.insert(a, b);
        self.peers.insert(b, a);
    }

    /// Withdraws one statement of the link `a`–`b` (a port's `peerId` or a port link);
    /// the ports stay linked while another statement of it remains.
    fn unlink(&mut self, a: Uuid, b: Uuid) {
        let key = link_key(a, b);
        let Some(n) = self.links.get_mut(&key) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.links.remove(&key);
        for (x, y) in [(a, b), (b, a)] {
            if self.peers.get(&x) == Some(&y) {
                self.peers.remove(&x);
            }
        }
    }

    /// Removes one resource that [`Topology::add`] added before: what a full rebuild
    /// without it would hold (rules keep the order of the others; re-adding a chain's
    /// rules in listed order restores it).
    pub fn remove(&mut self, resource: &Resource) {
        self.forget_derived();
        match resource {
            Resource::Bridge(b) => {
                self.bridges.remove(&b.id);
            }
            Resource::Router(r) => {
                self.routers.remove(&r.id);
            }
            Resource::Port(p) => {
                if let Some(peer) = peer_of(p) {
                    self.unlink(p.id, peer);
                }
                if self.ports.get(&p.id).is_some_and(|q| q.parent == p.parent) {
                    self.ports.remove(&p.id);
                    self.drop_device_port(p.parent, p.id);
                }
            }
            Resource::PortLink(l) => self.unlink(l.parent, l.peer_id),
            Resource::Route(r) => {
                if let Some(routes) = self.routes.get_mut(&r.parent) {
                    routes.retain(|x| x.id != r.id);
                    if routes.is_empty() {
                        self.routes.remove(&r.parent);
                    }
                }
            }
            Resource::Chain(c) => {
                self.chains.remove(&c.id);
                if self.rules.get(&c.id).is_some_and(ChainRules::is_empty) {
                    self.rules.remove(&c.id);
                }
            }
            Resource::Rule(r) => self.remove_rule(r),
            Resource::HostInterfacePort(b) => {
                let same = |(h, i): &(Uuid, String)| {
                    *h == b.parent && Some(i.as_str()) == b.interface_name.as_deref()
                };
                if self.bindings.get(&b.port_id).is_some_and(same) {
                    self.unbind(b.port_id);
                }
            }
            Resource::MacPort(_)
            | Resource::Ipv4MacPair(_)
            | Resource::PortGroupPort(_)
            | Resource::IpAddrGroupAddr(_) => self.remove_entry(resource),
            Resource::PortGroup(_)
            | Resource::IpAddrGroup(_)
            | Resource::TunnelZone(_)
            | Resource::TunnelZoneHost(_)
            | Resource::Host(_) => {}
            Resource::LoadBalancer(lb) => {
                self.load_balancers.remove(&lb.id);
            }
            Resource::Pool(p) => {
                self.pools.remove(&p.id);
            }
            Resource::PoolMember(m) => {
                self.pool_members.remove(&m.id);
            }
            Resource::Vip(v) => {
                self.vips.remove(&v.id);
            }
        }
    }

    /// Removes every resource of `resources`, as [`Topology::remove`] one by one would,
    /// but each run of rules of one chain at once: a record of a chain with its thousands
    /// of rules goes in one pass over the chain, not one per rule.
    pub fn remove_all(&mut self, resources: &[Resource]) {
        let mut rest = resources;
        while let Some(first) = rest.first() {
            let Resource::Rule(rule) = first else {
                self.remove(first);
                rest = &rest[1..];
                continue;
            };
            let same_chain =
                |r: &Resource| matches!(r, Resource::Rule(x) if x.parent == rule.parent);
            let run = rest.iter().take_while(|r| same_chain(r)).count();
            let ids: FxHashSet<Uuid> = rest[..run]
                .iter()
                .filter_map(|r| match r {
                    Resource::Rule(x) => Some(x.id),
                    _ => None,
                })
                .collect();
            self.forget_derived();
            self.remove_rules(rule.parent, &ids);
            rest = &rest[run..];
        }
    }

    /// Removes the rules `ids` of `chain` (the chain's entry goes with its last rule once
    /// the chain itself is gone).
    fn remove_rules(&mut self, chain: Uuid, ids: &FxHashSet<Uuid>) {
        let Some(rules) = self.rules.get_mut(&chain) else {
            return;
        };
        let traversing = rules
            .rules()
            .iter()
            .filter(|r| ids.contains(&r.id) && r.condition.traversed_device.is_some())
            .count();
        self.traversed_conditions = self.traversed_conditions.saturating_sub(traversing);
        rules.remove_all(|r| ids.contains(&r.id));
        if rules.is_empty() && !self.chains.contains_key(&chain) {
            self.rules.remove(&chain);
        }
    }

    fn remove_rule(&mut self, r: &Rule) {
        self.remove_rules(r.parent, &FxHashSet::from_iter([r.id]));
    }

    /// Removes a table entry or a group membership (MAC and ARP entries only while they
    /// still say what `resource` says); a table or group left empty goes too.
    fn remove_entry(&mut self, resource: &Resource) {
        match resource {
            Resource::MacPort(m) => {
                if let Some(t) = self.mac_tables.get_mut(&m.parent) {
                    if t.get(&m.mac_addr) == Some(&m.port_id) {
                        t.remove(&m.mac_addr);
                    }
                    if t.is_empty() {
                        self.mac_tables.remove(&m.parent);
                    }
                }
            }
            Resource::Ipv4MacPair(a) => {
                if let Some(t) = self.arp_tables.get_mut(&a.parent) {
                    if t.get(&a.ip) == Some(&a.mac) {
                        t.remove(&a.ip);
                    }
                    if t.is_empty() {
                        self.arp_tables.remove(&a.parent);
                    }
                }
            }
            Resource::PortGroupPort(m) => {
                if let Some(groups) = self.port_groups.get_mut(&m.port_id) {
                    groups.remove(&m.parent);
                    if groups.is_empty() {
                        self.port_groups.remove(&m.port_id);
                    }
                }
            }
            Resource::IpAddrGroupAddr(a) => {
                if let Some(addrs) = self.ip_addr_groups.get_mut(&a.parent) {
                    addrs.remove(&a.addr);
                    if addrs.is_empty() {
                        self.ip_addr_groups.remove(&a.parent);
                    }
                }
                if let Some(groups) = self.addr_groups_of.get_mut(&a.addr) {
                    groups.remove(&a.parent);
                    if groups.is_empty() {
                        self.addr_groups_of.remove(&a.addr);
                    }
                }
            }
            // `remove` sends only the four kinds above.
            _ => {}
        }
    }

    fn bind(&mut self, port: Uuid, host: Uuid, interface: String) {
        self.unbind(port);
        self.bound
            .entry((host, interface.clone()))
            .or_default()
            .insert(port);
        self.bindings.insert(port, (host, interface));
    }

    fn unbind(&mut self, port: Uuid) {
        if let Some(key) = self.bindings.remove(&port) {
            if let Some(ports) = self.bound.get_mut(&key) {
                ports.remove(&port);
                if ports.is_empty() {
                    self.bound.remove(&key);
                }
            }
        }
    }

    fn drop_device_port(&mut self, device: Uuid, port: Uuid) {
        if let Some(ports) = self.device_ports.get_mut(&device) {
            ports.remove(&port);
            if ports.is_empty() {
                self.device_ports.remove(&device);
            }
        }
    }

    /// Plugs a workload in behind the interface `(host, interface)`.
    pub fn attach(&mut self, a: Attachment) {
        self.forget_derived();
        let key = (a.host, a.interface.clone());
        if let Some(old) = self.attachments.insert(key.clone(), a) {
            if self.by_name.get(&old.name) == Some(&key) {
                self.by_name.remove(&old.name);
            }
            for ip in &old.ips {
                if let Some(keys) = self.by_ip.get_mut(ip) {
                    keys.remove(&key);
                }
            }
            if let Some(keys) = self.by_mac.get_mut(&old.mac) {
                keys.remove(&key);
            }
        }
        if let Some(a) = self.attachments.get(&key) {
            self.by_name.insert(a.name.clone(), key.clone());
            for ip in &a.ips {
                self.by_ip.entry(*ip).or_default().insert(key.clone());
            }
            self.by_mac.entry(a.mac).or_default().insert(key);
        }
    }

    /// The attachment named `name` (`pod/NS/NAME`, `node/NAME`).
    pub fn attachment_named(&self, name: &str) -> Option<&Attachment> {
        self.attachments.get(self.by_name.get(name)?)
    }

    /// Makes `port` a member of `group` (MidoNet's port groups).
    pub fn add_port_group_member(&mut self, group: Uuid, port: Uuid) {
        self.forget_derived();
        self.port_groups.entry(port).or_default().insert(group);
    }

    /// Adds `ip` to the IP address group `group`.
    pub fn add_ip_addr_group_member(&mut self, group: Uuid, ip: Ipv4Addr) {
        self.forget_derived();
        self.ip_addr_groups.entry(group).or_default().insert(ip);
        self.addr_groups_of.entry(ip).or_default().insert(group);
    }

    /// Empties what is derived on first use: every change may alter it.
    fn forget_derived(&mut self) {
        self.arp_memo.clear();
        self.local_routes.clear();
        self.guarded_jumps.clear();
        self.jump_facts.clear();
    }

    /// `chain`'s jumps indexed by their targets' guards, for a walk that may skip a jump
    /// to a guard the packet does not pass (`chainrules`); `None` for a chain without
    /// such a jump.
    pub(crate) fn guarded_jumps(&self, chain: Uuid) -> Option<Arc<Positions>> {
        let rules = self.rules.get(&chain)?;
        if !rules.has_jumps() {
            return None;
        }
        if let Some(p) = self.guarded_jumps.get(&chain) {
            return p;
        }
        let facts = self.jump_facts();
        // A target a `traversedDevice` condition names must be traversed to be seen.
        let target_guard = |t: Uuid| {
            (self.chains.contains_key(&t) && !facts.traversal_named.contains(&t)).then_some(())?;
            self.rules.get(&t)?.guard()
        };
        let jumps_to = |t: Uuid| facts.jumps_to.get(&t).copied().unwrap_or(0);
        let index = guarded_jumps(rules, target_guard, jumps_to);
        // None indexed: the walk visits every jump, as it would without the index.
        let p = (!index.is_flat()).then(|| Arc::new(index));
        self.guarded_jumps.put(chain, p.clone());
        p
    }

    /// The guards (first rules) of the targets of `chain`'s jumps that its guard index
    /// may skip: what a walk that skipped them let decide unseen.
    pub(crate) fn indexed_guards(&self, chain: Uuid) -> Vec<Rule> {
        let (Some(rules), Some(index)) = (self.rules.get(&chain), self.guarded_jumps(chain)) else {
            return Vec::new();
        };
        index
            .indexed()
            .filter_map(|at| rules.rules().get(at)?.jump_chain_id)
            .filter_map(|target| self.rules.get(&target)?.rules().first().cloned())
            .collect()
    }

    /// How many jump rules name each chain (whatever their conditions), and the ids the
    /// `traversedDevice` conditions name.
    fn jump_facts(&self) -> Arc<JumpFacts> {
        if let Some(c) = self.jump_facts.get(&()) {
            return c;
        }
        let mut facts = JumpFacts::default();
        for r in self.rules.values().flat_map(|c| c.rules()) {
            if let Some(t) = r.jump_chain_id.filter(|_| r.rule_type == RuleType::Jump) {
                *facts.jumps_to.entry(t).or_default() += 1;
            }
            if let Some(d) = r.condition.traversed_device {
                facts.traversal_named.insert(d);
            }
        }
        let facts = Arc::new(facts);
        self.jump_facts.put((), facts.clone());
        facts
    }

    /// Resources that could not be placed as given.
    pub fn problems(&self) -> &[BuildProblem] {
        &self.problems
    }

    /// The port bound to the interface an attachment sits behind.
    pub fn port_of(&self, attachment: &Attachment) -> Option<Uuid> {
        self.port_at(attachment.host, &attachment.interface)
    }

    /// The port bound to `(host, interface)`.
    pub fn port_at(&self, host: Uuid, interface: &str) -> Option<Uuid> {
        // The key owns its interface name; build it once per look-up.
        self.bound
            .get(&(host, interface.to_string()))
            .and_then(|ports| ports.first().copied())
    }

    /// The attachment behind an exterior port, if one is plugged in.
    pub fn attachment_at(&self, port: Uuid) -> Option<&Attachment> {
        let key = self.bindings.get(&port)?;
        self.attachments.get(key)
    }

    /// The attachment that owns `ip`, if any.
    pub fn attachment_with_ip(&self, ip: Ipv4Addr) -> Option<&Attachment> {
        self.attachments.values().find(|a| a.owns(ip))
    }

    /// Every attachment, sorted by name.
    pub fn attachments(&self) -> Vec<&Attachment> {
        let mut v: Vec<&Attachment> = self.attachments.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The rules of a chain in evaluation order.
    pub fn rules_of(&self, chain: Uuid) -> &[Rule] {
        self.rules.get(&chain).map(ChainRules::rules).unwrap_or(&[])
    }

    /// The rules of a chain with their destination index, if it has any.
    pub(crate) fn chain_rules(&self, chain: Uuid) -> Option<&ChainRules> {
        self.rules.get(&chain)
    }

    /// A display name for a device or chain id.
    pub fn name_of(&self, id: Uuid) -> Option<String> {
        if let Some(b) = self.bridges.get(&id) {
            return Some(format!(
                "bridge {}",
                b.name.clone().unwrap_or_else(|| id.to_string())
            ));
        }
        if let Some(r) = self.routers.get(&id) {
            return Some(format!(
                "router {}",
                r.name.clone().unwrap_or_else(|| id.to_string())
            ));
        }
        if let Some(c) = self.chains.get(&id) {
            return Some(format!(
                "chain {}",
                c.name.clone().unwrap_or_else(|| id.to_string())
            ));
        }
        None
    }

    /// Router ports of `router` and their addresses.
    pub(crate) fn router_ports(&self, router: Uuid) -> impl Iterator<Item = &Port> {
        self.device_ports_of(router, PortType::Router)
    }

    /// Ports of a bridge, sorted by id for a stable flood order.
    pub(crate) fn bridge_ports(&self, bridge: Uuid) -> impl Iterator<Item = &Port> {
        self.device_ports_of(bridge, PortType::Bridge)
    }

    fn device_ports_of(&self, device: Uuid, ty: PortType) -> impl Iterator<Item = &Port> {
        self.device_ports
            .get(&device)
            .into_iter()
            .flatten()
            .filter_map(|id| self.ports.get(id))
            .filter(move |p| p.port_type == ty)
    }

    /// Chains referenced anywhere but missing: what the trace reports as a broken filter.
    pub fn missing_chains(&self) -> BTreeMap<Uuid, String> {
        let mut missing = BTreeMap::new();
        let mut check = |id: Option<Uuid>, what: String| {
            if let Some(id) = id {
                if !self.chains.contains_key(&id) {
                    missing.insert(id, what);
                }
            }
        };
        for b in self.bridges.values() {
            check(
                b.inbound_filter_id,
                format!("inbound filter of bridge {}", b.id),
            );
            check(
                b.outbound_filter_id,
                format!("outbound filter of bridge {}", b.id),
            );
        }
        for p in self.ports.values() {
            check(
                p.inbound_filter_id,
                format!("inbound filter of port {}", p.id),
            );
            check(
                p.outbound_filter_id,
                format!("outbound filter of port {}", p.id),
            );
        }
        missing
    }
}

fn link_key(a: Uuid, b: Uuid) -> (Uuid, Uuid) {
    (a.min(b), a.max(b))
}

/// The peer a port's GET body names (`peerId`).
pub(crate) fn peer_of(p: &Port) -> Option<Uuid> {
    p.extra
        .get("peerId")
        .and_then(|v| v.as_str())
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// True if `ip` is inside `addr/len`; an absent address matches everything.
pub(crate) fn contains_len(addr: Option<Ipv4Addr>, len: Option<u8>, ip: Ipv4Addr) -> bool {
    match addr {
        None => true,
        Some(a) => {
            let mask = prefix_mask(len.unwrap_or(0));
            u32::from(ip) & mask == u32::from(a) & mask
        }
    }
}

impl Topology {
    /// The IPv4 address and prefix length of a router port: `portAddress` with the length
    /// of its network (`networkLength`, else the first `portSubnet`'s), else the first
    /// `portSubnet` entry (midolman `Port.routerPort`: `portAddress4`).
    pub(crate) fn port_ipv4(port: &Port) -> Option<(Ipv4Addr, u8)> {
        let first = port.port_subnet.as_ref().and_then(|s| s.first());
        match (port.port_address, port.network_length, first) {
            (Some(a), Some(len), _) => Some((a, len)),
            (Some(a), None, Some(net)) => Some((a, net.prefix_len)),
            (Some(a), None, None) => Some((a, 32)),
            (None, _, Some(net)) => Some((net.addr, net.prefix_len)),
            (None, _, None) => None,
        }
    }

    /// Whether `ip` is in the subnet of router port `port`.
    pub(crate) fn port_subnet_contains(port: &Port, ip: Ipv4Addr) -> bool {
        Topology::port_ipv4(port).is_some_and(|(a, len)| contains_len(Some(a), Some(len), ip))
    }

    /// Whether a port is plugged in: linked to a peer (interior), or bound to an
    /// interface with a workload behind it (exterior and active).
    pub(crate) fn is_plugged(&self, port: Uuid) -> bool {
        self.peers.contains_key(&port) || self.attachment_at(port).is_some()
    }

    /// Whether a route is in its router's routing table: midolman publishes the routes of
    /// a port while the port is interior, or exterior and active (`RouterMapper`,
    /// `portUpdated`); routes without a next-hop port (black-hole, reject) always.
    pub(crate) fn route_published(&self, router: Uuid, route: &Route) -> bool {
        match route.next_hop_port {
            None => true,
            Some(p) => {
                self.ports.get(&p).is_some_and(|port| port.parent == router) && self.is_plugged(p)
            }
        }
    }

    /// The `Local` routes MidoNet creates with each router port (one to each of its
    /// addresses, weight 0: `RouterPortResource.createFilter`), for the ports whose `Local` route the resources do not
    /// list: Translations never list them, the simulator's dump does. Worked out once per
    /// router and topology.
    pub(crate) fn implicit_local_routes(&self, router: Uuid) -> Arc<Vec<Route>> {
        if let Some(r) = self.local_routes.get(&router) {
            return r;
        }
        let routes = Arc::new(self.work_out_local_routes(router));
        self.local_routes.put(router, routes.clone());
        routes
    }

    fn work_out_local_routes(&self, router: Uuid) -> Vec<Route> {
        let listed = self.routes.get(&router);
        let mut out = Vec::new();
        for p in self.router_ports(router) {
            let Some((addr, len)) = Topology::port_ipv4(p) else {
                continue;
            };
            let is_listed = listed.into_iter().flatten().any(|r| {
                r.route_type == Some(RouteType::Local)
                    && r.next_hop_port == Some(p.id)
                    && r.dst_network_addr == Some(addr)
                    && r.dst_network_length == Some(32)
            });
            if !is_listed {
                // The simulator names the route it makes so; MidoNet picks a random id.
                let id = Uuid::new_v5(&p.id, format!("local-route/{addr}/{len}").as_bytes());
                let mut r = Route::normal(
                    router,
                    id,
                    Ipv4Cidr {
                        addr,
                        prefix_len: 32,
                    },
                    p.id,
                );
                r.route_type = Some(RouteType::Local);
                r.weight = Some(0);
                out.push(r);
            }
        }
        out
    }

    /// The bridge's interior port linked to a router port with MAC `mac`
    /// (`Bridge.macToLogicalPortId`).
    pub(crate) fn logical_port_of_mac(&self, bridge: Uuid, mac: MacAddr) -> Option<Uuid> {
        self.bridge_ports(bridge)
            .find(|p| {
                self.peers
                    .get(&p.id)
                    .and_then(|peer| self.ports.get(peer))
                    .is_some_and(|rp| rp.port_type == PortType::Router && rp.port_mac == Some(mac))
            })
            .map(|p| p.id)
    }

    /// What `bridge` knows of `ip` without asking anyone: the address of a router port
    /// linked to it (`Bridge.ipToMac`), else its ARP table (`ip4MacMap`). This is what a
    /// bridge answers an ARP request with, and what a router peeks at before it sends
    /// one (`Router.peekBridge`).
    pub(crate) fn bridge_knows(&self, bridge: Uuid, ip: Ipv4Addr) -> Option<MacAddr> {
        for p in self.bridge_ports(bridge) {
            if let Some(rp) = self.peers.get(&p.id).and_then(|peer| self.ports.get(peer)) {
                if rp.port_type == PortType::Router
                    && Topology::port_ipv4(rp).is_some_and(|(a, _)| a == ip)
                {
                    if let Some(mac) = rp.port_mac {
                        return Some(mac);
                    }
                }
            }
        }
        self.arp_tables
            .get(&bridge)
            .and_then(|t| t.get(&ip))
            .copied()
    }

    /// The exterior (bound) ports of a bridge, in id order: where it floods
    /// (`Bridge.floodAction` over `BridgeMapper.exteriorPorts`).
    pub(crate) fn exterior_ports(&self, bridge: Uuid) -> Vec<Uuid> {
        self.bridge_ports(bridge)
            .filter(|p| self.bindings.contains_key(&p.id))
            .map(|p| p.id)
            .collect()
    }
}

/// How many jump rules name each chain, and the ids `traversedDevice` conditions name.
#[derive(Debug, Default)]
pub(crate) struct JumpFacts {
    jumps_to: FxHashMap<Uuid, usize>,
    traversal_named: FxHashSet<Uuid>,
}

/// Values derived from a topology on first use, shared by the threads that read it and
/// emptied by every change. Cloning or comparing a topology ignores them.
pub(crate) struct Memo<K, V>(RwLock<FxHashMap<K, V>>);

impl<K: std::hash::Hash + Eq, V: Clone> Memo<K, V> {
    pub(crate) fn clear(&mut self) {
        match self.0.get_mut() {
            Ok(m) => m.clear(),
            Err(poisoned) => poisoned.into_inner().clear(),
        }
    }

    /// Takes every entry out, leaving it empty.
    pub(crate) fn take(&mut self) -> FxHashMap<K, V> {
        match self.0.get_mut() {
            Ok(m) => std::mem::take(m),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        }
    }

    /// Puts back the entries of `entries` that `keep` keeps.
    pub(crate) fn restore(&mut self, entries: FxHashMap<K, V>, keep: impl Fn(&V) -> bool) {
        let map = match self.0.get_mut() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.extend(entries.into_iter().filter(|(_, v)| keep(v)));
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        map.get(key).cloned()
    }

    pub(crate) fn put(&self, key: K, value: V) {
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        map.insert(key, value);
    }
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo(RwLock::new(FxHashMap::default()))
    }
}

impl<K, V> Clone for Memo<K, V> {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl<K, V> PartialEq for Memo<K, V> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<K, V> std::fmt::Debug for Memo<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_translators::model::{Chain, RuleType};

    #[test]
    fn removing_a_record_at_once_equals_removing_it_resource_by_resource() {
        let (chain, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut record = vec![Resource::Chain(Chain::new(chain))];
        for n in 0..50u128 {
            let mut r = Rule::new(chain, Uuid::from_u128(100 + n), RuleType::Accept);
            if n % 7 == 0 {
                r.condition.traversed_device = Some(other);
            }
            record.push(Resource::Rule(r));
        }
        // Another chain's rule in the middle of the record ends one run and starts another.
        record.insert(
            20,
            Resource::Rule(Rule::new(other, Uuid::from_u128(9), RuleType::Drop)),
        );
        let full = Topology::new(record.clone(), RuleOrder::Listed, Vec::new());
        let mut at_once = full.clone();
        let mut one_by_one = full.clone();
        // Half the record goes: the chain, every other rule of it, the other chain's rule.
        let half: Vec<Resource> = record.iter().step_by(2).cloned().collect();
        at_once.remove_all(&half);
        for r in &half {
            one_by_one.remove(r);
        }
        assert!(at_once == one_by_one);
        assert_eq!(
            at_once.traversed_conditions,
            one_by_one.traversed_conditions
        );
        at_once.remove_all(&record);
        assert!(at_once == Topology::new(Vec::new(), RuleOrder::Listed, Vec::new()));
        assert_eq!(at_once.traversed_conditions, 0);
    }
}
