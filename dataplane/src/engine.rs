//! The walk of one packet through the virtual topology, step by step as midolman's
//! simulation takes it (`midolman/.../simulation/`: `Port.scala`, `Bridge.scala`,
//! `Router.scala`, `Chain.scala`; `midolman/.../rules/`: `Condition.java`, `NatRule.java`,
//! `JumpRule.java`, `ReverseNatRule.java`).
//!
//! - A port's ingress runs the port's inbound filter, then its device; a port's egress runs
//!   its outbound filter, then either the linked peer's ingress (interior port) or the
//!   workload behind the bound interface (exterior port). A port or device whose admin
//!   state is down drops.
//! - A bridge runs its inbound filter, picks the egress port (static MAC table, the MACs
//!   of linked router ports, learned MACs, else a flood that only the owner of the MAC
//!   accepts), never sends a frame back out its ingress port, then runs its outbound
//!   filter.
//! - A router accepts only frames to its ingress port's MAC, runs its inbound filter,
//!   looks up the route (longest destination prefix whose source prefix also matches,
//!   then lowest weight, ties explored as ECMP), runs its outbound filter, resolves the
//!   next hop's MAC (the gateway of the route, else the destination) and emits.
//! - Chains: rules in order; `accept`, `drop`, `reject` end the evaluation; `return`
//!   leaves the chain; `jump` evaluates the target and goes on unless it decided;
//!   NAT rules translate and then act as their `flowAction`; reverse NAT rules act only
//!   when they found state to reverse. A chain that runs out continues (the filter lets
//!   the packet through).
//! - A condition in a *port* filter does not see the in/out port (midolman matches it
//!   against `null` there).
//!
//! ARP is not simulated as packets: a MAC is resolved the way the bridge would answer or
//! flood the request (ARP table, linked router ports, the workload that owns the IP).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use midonet_translators::model::{
    FlowAction, MacAddr, NatTarget, PortRange, PortType, Route, RouteType, Rule, RuleType,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::chainrules::{ChainRules, Guard};
use crate::packet::{Packet, SocketV4, BROADCAST, ETHERTYPE_IPV4};
use crate::state::{FlowState, NatKey, NatKeyType};
use crate::topology::{contains_len, Topology};

/// More devices than this in one walk is a loop (midolman `Simulator.MaxDevicesTraversed`).
const MAX_DEVICES: u32 = 32;
/// Jumps nested deeper than this are a loop between chains.
const MAX_JUMP_DEPTH: u32 = 16;
/// The most addresses one NAT target range contributes to the explored choices.
const MAX_RANGE_ADDRESSES: u32 = 64;

/// What happened at one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    PortIngress,
    PortEgress,
    Bridge,
    Router,
    /// A rule matched (or a chain was entered or left).
    Rule,
    Nat,
    Route,
    Arp,
    Flood,
    Delivered,
    Dropped,
}

/// One step of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub step: Step,
    /// The port, bridge or router the step happened at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Uuid>,
    /// The rule that matched (or rewrote the packet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Uuid>,
    /// The route a routing step took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Uuid>,
    pub detail: String,
    /// The packet after the step: `proto src -> dst`.
    pub packet: String,
}

/// How a walk ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// The workload behind `port` received `packet`.
    Delivered {
        port: Uuid,
        attachment: String,
        packet: Packet,
    },
    /// `packet` is the packet as it was when dropped (after every NAT on the way).
    Dropped { reason: String, packet: Packet },
}

/// The random choices of one walk (NAT targets, ECMP routes): a script to follow and the
/// number of options met at each choice, so the caller can explore every alternative.
#[derive(Clone, Debug, Default)]
pub(crate) struct Choices {
    script: Vec<usize>,
    pub(crate) met: Vec<(usize, usize)>,
}

impl Choices {
    pub(crate) fn new(script: Vec<usize>) -> Choices {
        Choices {
            script,
            met: Vec::new(),
        }
    }

    /// Picks one of `n` options (the scripted one, else the first).
    fn choose(&mut self, n: usize) -> usize {
        let pick = self
            .script
            .get(self.met.len())
            .copied()
            .unwrap_or(0)
            .min(n.saturating_sub(1));
        self.met.push((pick, n));
        pick
    }
}

/// What a chain evaluation decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Accept,
    Drop,
    Reject,
    Return,
    Continue,
}

/// What walks looked at that an address or a port can make a difference to: the chains
/// they ran (each once, in the order first run) and the routers whose routes they looked
/// up. `check` uses it to decide which sources one trace stands for. A walk runs hundreds
/// of chains (one per jump), so membership is a hash look-up, not a scan.
#[derive(Clone, Debug, Default)]
pub(crate) struct Consulted {
    pub(crate) chains: Vec<Uuid>,
    pub(crate) routers: Vec<Uuid>,
    seen_chains: rustc_hash::FxHashSet<Uuid>,
    seen_routers: rustc_hash::FxHashSet<Uuid>,
    /// Notes nothing: the caller does not ask what was consulted.
    pub(crate) off: bool,
}

impl Consulted {
    pub(crate) fn extend(&mut self, other: Consulted) {
        for c in other.chains {
            self.chain(c);
        }
        for r in other.routers {
            self.router(r);
        }
    }

    fn chain(&mut self, id: Uuid) {
        if !self.off && self.seen_chains.insert(id) {
            self.chains.push(id);
        }
    }

    fn router(&mut self, id: Uuid) {
        if !self.off && self.seen_routers.insert(id) {
            self.routers.push(id);
        }
    }
}

/// The text of a hop, made only when hops are recorded: a string, or what makes one.
trait Detail {
    fn text(self) -> String;
}

impl Detail for String {
    fn text(self) -> String {
        self
    }
}

impl Detail for &str {
    fn text(self) -> String {
        self.to_string()
    }
}

impl<F: FnOnce() -> String> Detail for F {
    fn text(self) -> String {
        self()
    }
}

pub(crate) struct Walk<'a, 't> {
    topo: &'t Topology,
    state: &'a mut FlowState,
    choices: &'a mut Choices,
    pub(crate) hops: Vec<Hop>,
    /// Whether to record `hops` (a check that passes never shows them).
    pub(crate) record: bool,
    pub(crate) consulted: Consulted,
    pkt: Packet,
    in_port: Option<Uuid>,
    out_port: Option<Uuid>,
    /// Port groups of the exterior port the packet entered through.
    port_groups: BTreeSet<Uuid>,
    ingress_device: Option<Uuid>,
    /// The packet's tuple as it entered the network: what connection tracking looks up.
    orig_tuple: crate::packet::FlowTuple,
    forward: Option<bool>,
    current_device: Uuid,
    devices: u32,
}

impl<'a, 't> Walk<'a, 't> {
    pub(crate) fn new(
        topo: &'t Topology,
        state: &'a mut FlowState,
        choices: &'a mut Choices,
        pkt: Packet,
    ) -> Walk<'a, 't> {
        Walk {
            topo,
            state,
            choices,
            hops: Vec::new(),
            record: true,
            consulted: Consulted::default(),
            pkt,
            in_port: None,
            out_port: None,
            port_groups: BTreeSet::new(),
            ingress_device: None,
            orig_tuple: pkt.tuple(),
            forward: None,
            current_device: Uuid::nil(),
            devices: 0,
        }
    }

    fn hop(&mut self, step: Step, device: Option<Uuid>, detail: impl Detail) {
        if !self.record {
            return;
        }
        self.hops.push(Hop {
            step,
            device,
            chain: None,
            rule: None,
            route: None,
            detail: detail.text(),
            packet: self.pkt.tuple().to_string(),
        });
    }

    fn rule_hop(&mut self, step: Step, chain: Uuid, rule: Option<Uuid>, detail: impl Detail) {
        if !self.record {
            return;
        }
        self.hops.push(Hop {
            step,
            device: Some(self.current_device),
            chain: Some(chain),
            rule,
            route: None,
            detail: detail.text(),
            packet: self.pkt.tuple().to_string(),
        });
    }

    fn drop(&mut self, device: Option<Uuid>, reason: impl Into<String>) -> End {
        let reason = reason.into();
        self.hop(Step::Dropped, device, reason.clone());
        End::Dropped {
            reason,
            packet: self.pkt,
        }
    }

    /// Sends the packet into the virtual network through `port`.
    pub(crate) fn inject(&mut self, port: Uuid) -> End {
        self.port_ingress(port)
    }

    fn port_ingress(&mut self, port_id: Uuid) -> End {
        self.devices += 1;
        if self.devices > MAX_DEVICES {
            return self.drop(Some(port_id), "traversed too many devices: a loop");
        }
        let topo = self.topo;
        let Some(port) = topo.ports.get(&port_id) else {
            return self.drop(Some(port_id), "the port does not exist");
        };
        self.current_device = port.parent;
        self.in_port = Some(port_id);
        self.out_port = None;
        if self.ingress_device.is_none() {
            self.ingress_device = Some(port.parent);
            self.port_groups = topo.port_groups.get(&port_id).cloned().unwrap_or_default();
        }
        self.hop(Step::PortIngress, Some(port_id), "enters port");
        if port.admin_state_up == Some(false) {
            return self.drop(Some(port_id), "the port is administratively down");
        }
        if let Err(end) = self.filter(port.inbound_filter_id, true, "port inbound filter") {
            return end;
        }
        match port.port_type {
            PortType::Bridge => self.bridge(port.parent, port_id),
            PortType::Router => self.router(port.parent, port_id),
        }
    }

    fn port_egress(&mut self, port_id: Uuid) -> End {
        let topo = self.topo;
        let Some(port) = topo.ports.get(&port_id) else {
            return self.drop(Some(port_id), "the egress port does not exist");
        };
        self.out_port = Some(port_id);
        self.hop(Step::PortEgress, Some(port_id), "leaves port");
        if port.admin_state_up == Some(false) {
            return self.drop(Some(port_id), "the port is administratively down");
        }
        if let Err(end) = self.filter(port.outbound_filter_id, true, "port outbound filter") {
            return end;
        }
        if let Some(peer) = topo.peers.get(&port_id) {
            return self.port_ingress(*peer);
        }
        let Some((host, iface)) = topo.bindings.get(&port_id) else {
            return self.drop(
                Some(port_id),
                "the port is neither linked nor bound (unplugged)",
            );
        };
        let Some(att) = topo.attachments.get(&(*host, iface.clone())) else {
            return self.drop(
                Some(port_id),
                format!("nothing is plugged in behind interface {iface} on host {host}"),
            );
        };
        if self.pkt.eth_dst != att.mac && self.pkt.eth_dst != BROADCAST {
            return self.drop(
                Some(port_id),
                format!("{} ignores a frame for MAC {}", att.name, self.pkt.eth_dst),
            );
        }
        if !att.owns(self.pkt.dst.ip) {
            return self.drop(
                Some(port_id),
                format!("{} does not own {}", att.name, self.pkt.dst.ip),
            );
        }
        // midolman tracks the connection where a forward flow leaves the virtual network.
        if self.is_forward() {
            self.state.track(self.pkt.tuple(), port.parent);
        }
        let name = att.name.clone();
        self.hop(Step::Delivered, Some(port_id), || {
            format!("delivered to {}", att.name)
        });
        End::Delivered {
            port: port_id,
            attachment: name,
            packet: self.pkt,
        }
    }

    fn bridge(&mut self, id: Uuid, in_port: Uuid) -> End {
        let topo = self.topo;
        let Some(bridge) = topo.bridges.get(&id) else {
            return self.drop(Some(id), "the bridge does not exist");
        };
        self.hop(Step::Bridge, Some(id), || {
            topo.name_of(id).unwrap_or_else(|| format!("bridge {id}"))
        });
        if bridge.admin_state_up == Some(false) {
            return self.drop(Some(id), "the bridge is administratively down");
        }
        if !self.is_router_mac(id, self.pkt.eth_src) {
            self.state.learn(id, self.pkt.eth_src, in_port);
        }
        if let Err(end) = self.filter(bridge.inbound_filter_id, false, "bridge inbound filter") {
            return end;
        }
        let dst = self.pkt.eth_dst;
        let out = if let Some(p) = topo.mac_tables.get(&id).and_then(|t| t.get(&dst)) {
            Some((*p, "MAC table"))
        } else if let Some(p) = self.router_mac_port(id, dst) {
            Some((p, "MAC of a linked router port"))
        } else {
            self.state.learned(id, dst).map(|p| (p, "learned MAC"))
        };
        let out = match out {
            Some((p, how)) => {
                self.hop(Step::Bridge, Some(id), || {
                    format!("{dst} → port {p} ({how})")
                });
                p
            }
            None => {
                // An unknown unicast is flooded; only the owner of the MAC takes it.
                let owner = topo.bridge_port_of_mac(id, dst, in_port);
                match owner {
                    Some(p) => {
                        self.hop(
                            Step::Flood,
                            Some(id),
                            format!("{dst} unknown: flooded, taken at port {p}"),
                        );
                        p
                    }
                    None => {
                        return self
                            .drop(Some(id), format!("{dst} unknown: flooded, nobody took it"))
                    }
                }
            }
        };
        if out == in_port {
            return self.drop(
                Some(id),
                "a bridge does not send a frame back out its ingress port",
            );
        }
        self.out_port = Some(out);
        if let Err(end) = self.filter(bridge.outbound_filter_id, false, "bridge outbound filter") {
            return end;
        }
        self.port_egress(out)
    }

    /// The bridge's interior port linked to a router port with MAC `mac`.
    fn router_mac_port(&self, bridge: Uuid, mac: MacAddr) -> Option<Uuid> {
        self.topo
            .bridge_ports(bridge)
            .find(|p| {
                self.topo
                    .peers
                    .get(&p.id)
                    .and_then(|peer| self.topo.ports.get(peer))
                    .is_some_and(|rp| rp.port_type == PortType::Router && rp.port_mac == Some(mac))
            })
            .map(|p| p.id)
    }

    fn is_router_mac(&self, bridge: Uuid, mac: MacAddr) -> bool {
        self.router_mac_port(bridge, mac).is_some()
    }

    fn router(&mut self, id: Uuid, in_port: Uuid) -> End {
        let topo = self.topo;
        let Some(router) = topo.routers.get(&id) else {
            return self.drop(Some(id), "the router does not exist");
        };
        self.hop(Step::Router, Some(id), || {
            topo.name_of(id).unwrap_or_else(|| format!("router {id}"))
        });
        if router.admin_state_up == Some(false) {
            return self.drop(Some(id), "the router is administratively down");
        }
        let in_mac = topo.ports.get(&in_port).and_then(|p| p.port_mac);
        if Some(self.pkt.eth_dst) != in_mac && self.pkt.eth_dst != BROADCAST {
            return self.drop(
                Some(id),
                "the frame is not addressed to the router port's MAC",
            );
        }
        if let Err(end) = self.filter(router.inbound_filter_id, false, "router inbound filter") {
            return end;
        }
        if topo
            .router_ports(id)
            .any(|p| p.port_address == Some(self.pkt.dst.ip))
        {
            return self.drop(Some(id), "addressed to the router itself");
        }
        let Some(route) = self.lookup_route(id) else {
            return self.drop(Some(id), format!("no route to {}", self.pkt.dst.ip));
        };
        let what = || describe_route(&route);
        match route.route_type.unwrap_or(RouteType::Normal) {
            RouteType::BlackHole => {
                return self.drop(Some(id), format!("black-hole route {}", what()))
            }
            RouteType::Reject => return self.drop(Some(id), format!("reject route {}", what())),
            RouteType::Local => {
                return self.drop(Some(id), format!("local route {}: to the router", what()))
            }
            RouteType::Normal | RouteType::Fip64 => {}
        }
        let Some(out) = route
            .next_hop_port
            .filter(|p| topo.ports.get(p).is_some_and(|p| p.parent == id))
        else {
            return self.drop(
                Some(id),
                format!("route {} has no next-hop port of this router", what()),
            );
        };
        if self.record {
            self.hops.push(Hop {
                step: Step::Route,
                device: Some(id),
                chain: None,
                rule: None,
                route: Some(route.id),
                detail: format!("route {}", what()),
                packet: self.pkt.tuple().to_string(),
            });
        }
        self.out_port = Some(out);
        if let Err(end) = self.filter(router.outbound_filter_id, false, "router outbound filter") {
            return end;
        }
        let next_hop = route
            .next_hop_gateway
            .filter(|g| !g.is_unspecified() && *g != Ipv4Addr::BROADCAST)
            .unwrap_or(self.pkt.dst.ip);
        let Some(mac) = self.next_hop_mac(out, next_hop) else {
            return self.drop(Some(out), format!("ARP for {next_hop} is not answered"));
        };
        self.hop(Step::Arp, Some(out), || format!("{next_hop} is at {mac}"));
        let out_mac = topo.ports.get(&out).and_then(|p| p.port_mac);
        if let Some(m) = out_mac {
            self.pkt.eth_src = m;
        }
        self.pkt.eth_dst = mac;
        self.port_egress(out)
    }

    fn lookup_route(&mut self, router: Uuid) -> Option<Route> {
        let (src, dst) = (self.pkt.src.ip, self.pkt.dst.ip);
        self.consulted.router(router);
        let routes = self.topo.routes.get(&router)?;
        let matching: Vec<&Route> = routes
            .iter()
            .filter(|r| {
                contains_len(r.dst_network_addr, r.dst_network_length, dst)
                    && contains_len(r.src_network_addr, r.src_network_length, src)
            })
            .collect();
        let best_len = matching
            .iter()
            .map(|r| r.dst_network_length.unwrap_or(0))
            .max()?;
        let longest: Vec<&Route> = matching
            .into_iter()
            .filter(|r| r.dst_network_length.unwrap_or(0) == best_len)
            .collect();
        let best_weight = longest.iter().map(|r| r.weight.unwrap_or(100)).min()?;
        let mut best: Vec<&Route> = longest
            .into_iter()
            .filter(|r| r.weight.unwrap_or(100) == best_weight)
            .collect();
        best.sort_by_key(|r| r.id);
        let pick = if best.len() > 1 {
            self.choices.choose(best.len())
        } else {
            0
        };
        best.get(pick).map(|r| (*r).clone())
    }

    /// The MAC a router port sends to for `ip`: the peer router port's MAC, else what
    /// ARP on the peer bridge (or behind the bound interface) answers.
    fn next_hop_mac(&self, out: Uuid, ip: Ipv4Addr) -> Option<MacAddr> {
        let topo = self.topo;
        if let Some(peer) = topo.peers.get(&out).and_then(|p| topo.ports.get(p)) {
            return match peer.port_type {
                PortType::Router => peer.port_mac,
                PortType::Bridge => topo.arp_on_bridge(peer.parent, ip),
            };
        }
        topo.attachment_at(out)
            .filter(|a| a.owns(ip))
            .map(|a| a.mac)
    }

    /// Runs a filter chain; `Err` carries the drop.
    fn filter(&mut self, chain: Option<Uuid>, port_filter: bool, what: &str) -> Result<(), End> {
        let Some(chain) = chain else { return Ok(()) };
        if !self.topo.chains.contains_key(&chain) {
            self.rule_hop(
                Step::Rule,
                chain,
                None,
                format!("{what}: chain {chain} does not exist; nothing filtered"),
            );
            return Ok(());
        }
        let topo = self.topo;
        let name = || {
            topo.name_of(chain)
                .unwrap_or_else(|| format!("chain {chain}"))
        };
        self.rule_hop(Step::Rule, chain, None, || format!("{what}: {}", name()));
        let verb = match self.run_chain(chain, port_filter, 0) {
            Decision::Accept | Decision::Return | Decision::Continue => return Ok(()),
            Decision::Drop => "dropped",
            Decision::Reject => "rejected",
        };
        let device = Some(self.current_device);
        Err(self.drop(device, format!("{verb} by {what} ({})", name())))
    }

    fn run_chain(&mut self, chain: Uuid, port_filter: bool, depth: u32) -> Decision {
        if depth > MAX_JUMP_DEPTH {
            self.rule_hop(Step::Rule, chain, None, "jumps nested too deep: a loop");
            return Decision::Drop;
        }
        let topo = self.topo;
        self.consulted.chain(chain);
        let Some(rules) = topo.chain_rules(chain) else {
            return Decision::Continue;
        };
        // Only the rules that can match the packet's destination (as it is at each step:
        // a NAT rule that continues may rewrite it), in order (`chainrules`).
        let mut from = 0;
        while let Some(at) = rules.next_candidate(from, self.pkt.dst.ip) {
            from = at + 1;
            let rule = &rules.rules()[at];
            if !self.matches(rule, port_filter) {
                continue;
            }
            let decision = match rule.rule_type {
                RuleType::Accept => Decision::Accept,
                RuleType::Drop => Decision::Drop,
                RuleType::Reject => Decision::Reject,
                RuleType::Return => Decision::Return,
                RuleType::Jump => {
                    let Some(target) = rule.jump_chain_id else {
                        continue;
                    };
                    if !topo.chains.contains_key(&target) {
                        self.rule_hop(
                            Step::Rule,
                            chain,
                            Some(rule.id),
                            format!("jump to missing chain {target}: skipped"),
                        );
                        continue;
                    }
                    // Nobody sees the hops nor the chains consulted: a jump known to come
                    // straight back changes nothing (`chainrules::Guard`).
                    if !self.record
                        && self.consulted.off
                        && depth < MAX_JUMP_DEPTH
                        && self.returns_at_once(target)
                    {
                        continue;
                    }
                    let name = || {
                        topo.name_of(target)
                            .unwrap_or_else(|| format!("chain {target}"))
                    };
                    self.rule_hop(Step::Rule, chain, Some(rule.id), || {
                        format!("jump to {}", name())
                    });
                    match self.run_chain(target, port_filter, depth + 1) {
                        Decision::Return | Decision::Continue => {
                            self.rule_hop(Step::Rule, target, None, || {
                                format!("back from {}", name())
                            });
                            continue;
                        }
                        d => d,
                    }
                }
                RuleType::Dnat | RuleType::Snat => {
                    if !self.forward_nat(rule, chain) {
                        continue;
                    }
                    flow_decision(rule.flow_action)
                }
                RuleType::RevDnat | RuleType::RevSnat => {
                    if !self.reverse_nat(rule, chain) {
                        continue;
                    }
                    flow_decision(rule.flow_action)
                }
            };
            match decision {
                Decision::Continue => continue,
                d => {
                    if !matches!(rule.rule_type, RuleType::Jump) {
                        self.rule_hop(Step::Rule, chain, Some(rule.id), || {
                            format!("{} → {}", rule.rule_type, decision_name(d))
                        });
                    }
                    return d;
                }
            }
        }
        Decision::Continue
    }

    /// Whether `chain` starts with a guard that returns this packet.
    fn returns_at_once(&self, chain: Uuid) -> bool {
        match self.topo.chain_rules(chain).and_then(ChainRules::guard) {
            Some(Guard::DstInAddrGroup(g)) => !self
                .topo
                .ip_addr_groups
                .get(&g)
                .is_some_and(|s| s.contains(&self.pkt.dst.ip)),
            Some(Guard::EnteredThroughPortGroup(g)) => !self.port_groups.contains(&g),
            None => false,
        }
    }

    /// Applies a `dnat`/`snat` rule; false if it could not (no target).
    fn forward_nat(&mut self, rule: &Rule, chain: Uuid) -> bool {
        let dnat = rule.rule_type == RuleType::Dnat;
        let key = NatKey {
            ty: if dnat {
                NatKeyType::FwdDnat
            } else {
                NatKeyType::FwdSnat
            },
            tuple: self.pkt.tuple(),
            device: self.current_device,
        };
        let binding = match self.state.nat_get(&key) {
            Some(b) => b,
            None => {
                let original = if dnat { self.pkt.dst } else { self.pkt.src };
                let candidates =
                    nat_candidates(rule.nat_targets.as_deref().unwrap_or(&[]), original.port);
                if candidates.is_empty() {
                    self.rule_hop(
                        Step::Rule,
                        chain,
                        Some(rule.id),
                        format!("{} without a target: skipped", rule.rule_type),
                    );
                    return false;
                }
                let pick = if candidates.len() > 1 {
                    self.choices.choose(candidates.len())
                } else {
                    0
                };
                let b = candidates[pick];
                self.state.nat_put(key, b);
                b
            }
        };
        self.rewrite(rule, chain, dnat, binding);
        true
    }

    /// Applies a `rev_dnat`/`rev_snat` rule; false if this device holds no state for it.
    fn reverse_nat(&mut self, rule: &Rule, chain: Uuid) -> bool {
        let dnat = rule.rule_type == RuleType::RevDnat;
        let key = NatKey {
            ty: if dnat {
                NatKeyType::RevDnat
            } else {
                NatKeyType::RevSnat
            },
            tuple: self.pkt.tuple(),
            device: self.current_device,
        };
        let Some(original) = self.state.nat_get(&key) else {
            return false;
        };
        // A reverse DNAT restores the reply's source, a reverse SNAT its destination.
        self.rewrite(rule, chain, !dnat, original);
        true
    }

    /// Rewrites the packet's destination (`dst`) or source to `to` and records the hop.
    fn rewrite(&mut self, rule: &Rule, chain: Uuid, dst: bool, to: SocketV4) {
        let side = if dst {
            &mut self.pkt.dst
        } else {
            &mut self.pkt.src
        };
        let from = std::mem::replace(side, to);
        self.rule_hop(Step::Nat, chain, Some(rule.id), || {
            format!("{} {from} → {to}", rule.rule_type)
        });
    }

    /// midolman `ConnTrackState.isForwardFlow`: decided once per packet, on first use, by
    /// the packet's *original* tuple (`origMatch`) on its ingress device: a reply that a
    /// reverse NAT rewrote before the first look-up is still recognised.
    fn is_forward(&mut self) -> bool {
        if let Some(f) = self.forward {
            return f;
        }
        let device = self.ingress_device.unwrap_or(self.current_device);
        let f = !self.state.is_tracked_return(self.orig_tuple, device);
        self.forward = Some(f);
        f
    }

    /// midolman `Condition.matches`: a conjunction of the set fields, each possibly
    /// inverted, the whole possibly inverted by `condInvert`.
    fn matches(&mut self, rule: &Rule, port_filter: bool) -> bool {
        let c = &rule.condition;
        let invert = c.cond_invert.unwrap_or(false);
        let all = self.conjunction(rule, port_filter);
        all != invert
    }

    fn conjunction(&mut self, rule: &Rule, port_filter: bool) -> bool {
        let c = &rule.condition;
        if c.match_forward_flow == Some(true) && !self.is_forward() {
            return false;
        }
        if c.match_return_flow == Some(true) && self.is_forward() {
            return false;
        }
        let (in_port, out_port) = if port_filter {
            (None, None)
        } else {
            (self.in_port, self.out_port)
        };
        let pkt = &self.pkt;
        let topo = self.topo;
        let port_set = |set: &Option<Vec<Uuid>>, port: Option<Uuid>, inv: Option<bool>| match set {
            Some(s) if !s.is_empty() => inv.unwrap_or(false) ^ port.is_some_and(|p| s.contains(&p)),
            _ => true,
        };
        let field = |want: Option<bool>, inv: Option<bool>| match want {
            None => true,
            Some(m) => inv.unwrap_or(false) ^ m,
        };
        let group = |g: Option<Uuid>, inv: Option<bool>, ip: Ipv4Addr| match g {
            None => true,
            Some(g) => {
                inv.unwrap_or(false) ^ topo.ip_addr_groups.get(&g).is_some_and(|s| s.contains(&ip))
            }
        };
        port_set(&c.in_ports, in_port, c.inv_in_ports)
            && port_set(&c.out_ports, out_port, c.inv_out_ports)
            && match c.port_group {
                None => true,
                Some(g) => c.inv_port_group.unwrap_or(false) ^ self.port_groups.contains(&g),
            }
            && field(rule.dl_type.map(|t| t == ETHERTYPE_IPV4), c.inv_dl_type)
            && field(
                rule.nw_proto.map(|p| p == pkt.protocol.number()),
                c.inv_nw_proto,
            )
            && field(
                rule.nw_src_address.map(|a| {
                    contains_len(Some(a), Some(rule.nw_src_length.unwrap_or(0)), pkt.src.ip)
                }),
                c.inv_nw_src,
            )
            && field(
                rule.nw_dst_address.map(|a| {
                    contains_len(Some(a), Some(rule.nw_dst_length.unwrap_or(0)), pkt.dst.ip)
                }),
                c.inv_nw_dst,
            )
            && field(
                rule.tp_src.as_ref().map(|r| in_range(r, pkt.src.port)),
                c.inv_tp_src,
            )
            && field(
                rule.tp_dst.as_ref().map(|r| in_range(r, pkt.dst.port)),
                c.inv_tp_dst,
            )
            && group(c.ip_addr_group_src, c.inv_ip_addr_group_src, pkt.src.ip)
            && group(c.ip_addr_group_dst, c.inv_ip_addr_group_dst, pkt.dst.ip)
    }
}

fn in_range(r: &PortRange, port: u16) -> bool {
    let start = r.start.unwrap_or(0);
    let end = r.end.unwrap_or(u16::MAX);
    (start..=end).contains(&port)
}

fn flow_decision(action: Option<FlowAction>) -> Decision {
    match action.unwrap_or(FlowAction::Accept) {
        FlowAction::Accept => Decision::Accept,
        FlowAction::Continue => Decision::Continue,
        FlowAction::Return => Decision::Return,
    }
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Accept => "accept",
        Decision::Drop => "drop",
        Decision::Reject => "reject",
        Decision::Return => "return",
        Decision::Continue => "continue",
    }
}

fn describe_route(r: &Route) -> String {
    let dst = match (r.dst_network_addr, r.dst_network_length) {
        (Some(a), Some(l)) => format!("{a}/{l}"),
        _ => "0.0.0.0/0".into(),
    };
    match r.next_hop_gateway {
        Some(g) if !g.is_unspecified() => format!("{dst} via {g}"),
        _ => dst,
    }
}

/// Every endpoint a NAT rule's targets can pick for a flow whose translated side was
/// `original` (midolman `NatState.chooseRandomNatTarget` picks one at random: the model
/// explores each). A target without ports keeps the original port; a port range yields
/// its first port, which is what the reply path depends on.
fn nat_candidates(targets: &[NatTarget], original_port: u16) -> Vec<SocketV4> {
    let mut out = Vec::new();
    for t in targets {
        let Some(from) = t.address_from.or(t.address_to) else {
            continue;
        };
        let to = t.address_to.unwrap_or(from);
        let (from_u, to_u) = (u32::from(from), u32::from(to));
        if to_u < from_u {
            continue;
        }
        let port = match t.port_from {
            Some(p) if p != 0 => p,
            _ => original_port,
        };
        for a in from_u..=to_u.min(from_u.saturating_add(MAX_RANGE_ADDRESSES - 1)) {
            let s = SocketV4::new(Ipv4Addr::from(a), port);
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}
