//! The virtual topology the model simulates: MidoNet resources indexed the way the agent
//! looks them up, plus what sits behind each bound host interface.
//!
//! Built from the one typed model ([`midonet_translators::model::Resource`]), whether the
//! resources come from the simulator's store, from GETs against a real MidoNet, or straight
//! from Translations. Only rule order needs care: MidoNet keeps a chain's rules in a list
//! and a POST inserts at `position`, so a listing gives the order and a push sequence
//! produces it ([`RuleOrder`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;

use midonet_translators::model::{
    Bridge, Chain, Ipv4Cidr, MacAddr, Port, PortType, Resource, Route, Router, Rule,
};
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
}

impl Attachment {
    /// The address it sends from.
    pub fn primary_ip(&self) -> Option<Ipv4Addr> {
        self.ips.first().copied()
    }

    pub fn owns(&self, ip: Ipv4Addr) -> bool {
        self.ips.contains(&ip)
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
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub(crate) bridges: HashMap<Uuid, Bridge>,
    pub(crate) routers: HashMap<Uuid, Router>,
    pub(crate) ports: HashMap<Uuid, Port>,
    /// Interior links, both directions.
    pub(crate) peers: HashMap<Uuid, Uuid>,
    pub(crate) routes: HashMap<Uuid, Vec<Route>>,
    pub(crate) chains: HashMap<Uuid, Chain>,
    /// Each chain's rules in evaluation order.
    pub(crate) rules: HashMap<Uuid, Vec<Rule>>,
    /// Port → (host, interface) of its binding.
    pub(crate) bindings: HashMap<Uuid, (Uuid, String)>,
    pub(crate) attachments: HashMap<(Uuid, String), Attachment>,
    /// Bridge → static MAC table.
    pub(crate) mac_tables: HashMap<Uuid, HashMap<MacAddr, Uuid>>,
    /// Bridge → ARP table.
    pub(crate) arp_tables: HashMap<Uuid, HashMap<Ipv4Addr, MacAddr>>,
    /// Port → the port groups it is a member of.
    pub(crate) port_groups: HashMap<Uuid, BTreeSet<Uuid>>,
    /// IP address group → its addresses.
    pub(crate) ip_addr_groups: HashMap<Uuid, BTreeSet<Ipv4Addr>>,
    pub(crate) problems: Vec<BuildProblem>,
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
        match resource {
            Resource::Bridge(b) => {
                self.bridges.insert(b.id, b);
            }
            Resource::Router(r) => {
                self.routers.insert(r.id, r);
            }
            Resource::Port(p) => {
                if let Some(peer) = p.extra.get("peerId").and_then(|v| v.as_str()) {
                    if let Ok(peer) = Uuid::parse_str(peer) {
                        self.link(p.id, peer);
                    }
                }
                self.ports.insert(p.id, p);
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
                    self.bindings.insert(b.port_id, (b.parent, iface));
                }
            }
            Resource::MacPort(m) => {
                self.mac_tables
                    .entry(m.parent)
                    .or_default()
                    .insert(m.mac_addr, m.port_id);
            }
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
        }
    }

    fn add_rule(&mut self, rule: Rule, order: RuleOrder) {
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
        self.peers.insert(a, b);
        self.peers.insert(b, a);
    }

    /// Plugs a workload in behind the interface `(host, interface)`.
    pub fn attach(&mut self, a: Attachment) {
        self.attachments.insert((a.host, a.interface.clone()), a);
    }

    /// Makes `port` a member of `group` (MidoNet's port groups).
    pub fn add_port_group_member(&mut self, group: Uuid, port: Uuid) {
        self.port_groups.entry(port).or_default().insert(group);
    }

    /// Adds `ip` to the IP address group `group`.
    pub fn add_ip_addr_group_member(&mut self, group: Uuid, ip: Ipv4Addr) {
        self.ip_addr_groups.entry(group).or_default().insert(ip);
    }

    /// Resources that could not be placed as given.
    pub fn problems(&self) -> &[BuildProblem] {
        &self.problems
    }

    /// The port bound to the interface an attachment sits behind.
    pub fn port_of(&self, attachment: &Attachment) -> Option<Uuid> {
        self.bindings
            .iter()
            .filter(|(_, (h, i))| *h == attachment.host && *i == attachment.interface)
            .map(|(p, _)| *p)
            .min()
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
        self.rules.get(&chain).map(Vec::as_slice).unwrap_or(&[])
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
        self.ports
            .values()
            .filter(move |p| p.parent == router && p.port_type == PortType::Router)
    }

    /// Ports of a bridge, sorted by id for a stable flood order.
    pub(crate) fn bridge_ports(&self, bridge: Uuid) -> Vec<&Port> {
        let mut v: Vec<&Port> = self
            .ports
            .values()
            .filter(|p| p.parent == bridge && p.port_type == PortType::Bridge)
            .collect();
        v.sort_by_key(|p| p.id);
        v
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
    /// What ARP on `bridge` answers for `ip`: the bridge's ARP table, a linked router
    /// port's address, or (the request flooded) the workload on the bridge that owns it.
    pub(crate) fn arp_on_bridge(&self, bridge: Uuid, ip: Ipv4Addr) -> Option<MacAddr> {
        if let Some(mac) = self.arp_tables.get(&bridge).and_then(|t| t.get(&ip)) {
            return Some(*mac);
        }
        for p in self.bridge_ports(bridge) {
            if let Some(rp) = self.peers.get(&p.id).and_then(|peer| self.ports.get(peer)) {
                if rp.port_type == PortType::Router && rp.port_address == Some(ip) {
                    return rp.port_mac;
                }
            }
        }
        self.bridge_ports(bridge)
            .into_iter()
            .filter(|p| p.admin_state_up != Some(false))
            .filter_map(|p| self.attachment_at(p.id))
            .find(|a| a.owns(ip))
            .map(|a| a.mac)
    }
}
