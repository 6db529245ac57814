//! The walk of one frame through the virtual topology, step by step as midolman's
//! simulation takes it (`midolman/.../simulation/`: `Port.scala`, `Bridge.scala`,
//! `Router.scala`, `RouterBase.scala`, `Chain.scala`, `Icmp.scala`, `Simulator.scala`;
//! `midolman/.../rules/`: `Condition.java`, `NatRule.java`, `JumpRule.java`,
//! `ReverseNatRule.java`, `StaticForwardNatRule.java`, `DynamicForwardNatRule.java`).
//!
//! - A port's ingress sets the packet's in-port (and, for an exterior port, the port
//!   groups the packet entered the network through), runs the port's inbound filter,
//!   then its device; its egress sets the out-port, runs its outbound filter, then either
//!   the linked peer's ingress (interior port) or the workload behind the bound interface
//!   (exterior port), where a forward flow's connection is tracked. A port that is
//!   administratively down drops (a router port sends an ICMP admin-prohibited error).
//!   A bridge port never sends a frame back out the port it came in through. More than
//!   12 port ingresses is a loop (`Simulator.MaxDevicesTraversed`), dropped without an
//!   answer. An interior router port linked to another router's port hands the frame to
//!   that router like any peer (`Port.emitCommon`).
//! - TTL is not modelled. midolman decrements it at each router hop and answers ICMP
//!   time exceeded at 1 (`RouterBase.applyTimeToLive`), but every packet a walk carries
//!   starts at 64 (a workload's default; `IPv4`'s for what a device sends), and a walk
//!   meets at most 12 routers before the loop limit: TTL never expires first, so a
//!   routing loop (two linked routers routing a prefix at each other) ends in the loop
//!   drop, as in midolman (`TopologyWithLoop`, `NatLeaserExpirationTest`). Hops do not
//!   show the TTL.
//! - A bridge: see [`bridge`]. A router: see [`router`]. Chains and NAT: see [`chain`];
//!   conditions: see [`condition`]; ARP: see [`arp`].
//!
//! Walks that end in a device answering (an ICMP error, an echo reply, an ARP reply) end
//! with [`End::Answered`]: the caller walks the answer from the port it is emitted from.

mod arp;
mod bridge;
mod chain;
mod condition;
mod l4lb;
mod router;

use std::collections::BTreeSet;

use midonet_translators::model::{MacAddr, PortType};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub(crate) use arp::{resolve_from_workload, ArpMemo};
pub(crate) use condition::rule_refusal;

use crate::packet::Packet;
use crate::reads::{Key, Reads};
use crate::state::FlowState;
use crate::topology::Topology;

/// More port ingresses than this in one walk is a loop (midolman
/// `Simulator.MaxDevicesTraversed`).
const MAX_DEVICES: u32 = 12;

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
    /// A router's load balancer: a VIP matched, a member chosen or a binding reused.
    LoadBalancer,
    Delivered,
    Dropped,
    /// A device answered: an ICMP error, an echo reply, an ARP reply.
    Answered,
    /// The model cannot simulate what comes next.
    Unsupported,
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
    /// The rule that matched (or rewrote the packet, or that the model refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Uuid>,
    /// The route a routing step took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Uuid>,
    /// The ports a flood sent copies to (every exterior port of the bridge but the
    /// ingress one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Uuid>,
    pub detail: String,
    /// The packet after the step: `proto src -> dst`.
    pub packet: String,
}

impl Hop {
    /// A hop naming only its step, device, detail and packet.
    fn new(step: Step, device: Option<Uuid>, detail: String, packet: String) -> Hop {
        Hop {
            step,
            device,
            chain: None,
            rule: None,
            route: None,
            ports: Vec::new(),
            detail,
            packet,
        }
    }
}

/// A packet a device sends in answer, and the port it leaves through.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answer {
    pub from_port: Uuid,
    pub packet: Packet,
}

/// How a walk ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum End {
    /// The workload behind `port` received `packet`.
    Delivered {
        port: Uuid,
        attachment: String,
        packet: Packet,
    },
    /// `packet` is the packet as it was when dropped (after every NAT on the way).
    Dropped { reason: String, packet: Packet },
    /// A device took the packet and answered it (an ICMP error, an echo reply, an ARP
    /// reply); `rejected` when the answer is an ICMP error.
    Answered {
        reason: String,
        packet: Packet,
        answer: Box<Answer>,
        rejected: bool,
    },
    /// A device took the packet and answered nothing more (an ARP reply to a router).
    Consumed { reason: String, packet: Packet },
    /// The model cannot say what happens: it met something it does not simulate.
    Unsupported { reason: String, packet: Packet },
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

/// What walks looked at that an address or a port can make a difference to: the chains
/// they ran (each once, in the order first run), the chains whose jumps to guards were
/// skipped by the index (`chainrules`: the guards of every jump indexed there decided for
/// this packet without being run) and the routers whose routes they looked up. `check`
/// uses it to decide which sources one trace stands for. A walk runs hundreds of chains
/// (one per jump), so membership is a hash look-up, not a scan.
#[derive(Clone, Debug, Default)]
pub(crate) struct Consulted {
    pub(crate) chains: Vec<Uuid>,
    pub(crate) guarded: Vec<Uuid>,
    pub(crate) routers: Vec<Uuid>,
    seen_chains: FxHashSet<Uuid>,
    seen_guarded: FxHashSet<Uuid>,
    seen_routers: FxHashSet<Uuid>,
    /// Notes nothing of the above: the caller does not ask what was consulted.
    pub(crate) off: bool,
    /// Every key the walks read (`crate::reads`), if the caller asks (whatever `off`
    /// says).
    pub(crate) reads: Option<Reads>,
}

impl Consulted {
    fn chain(&mut self, id: Uuid) {
        self.read(id);
        if !self.off && self.seen_chains.insert(id) {
            self.chains.push(id);
        }
    }

    fn guarded(&mut self, id: Uuid) {
        self.read(id);
        if !self.off && self.seen_guarded.insert(id) {
            self.guarded.push(id);
        }
    }

    fn router(&mut self, id: Uuid) {
        self.read(id);
        if !self.off && self.seen_routers.insert(id) {
            self.routers.push(id);
        }
    }

    /// Notes that a walk read `id` (a port, a device, a chain, a load balancer).
    pub(crate) fn read(&mut self, id: Uuid) {
        if let Some(r) = &mut self.reads {
            r.id(id);
        }
    }

    /// Notes that a walk read which port the interface `(host, name)` is bound to.
    pub(crate) fn read_binding(&mut self, host: Uuid, name: &str) {
        self.read_key(Key::Binding(host, name.to_string()));
    }

    /// Notes that a walk read `key` (`crate::reads`): which ports of a bridge are bound
    /// ([`Key::Exterior`], [`Key::Owner`]), an interface's binding.
    pub(crate) fn read_key(&mut self, key: Key) {
        if let Some(r) = &mut self.reads {
            r.key(&key);
        }
    }

    /// Notes a route lookup on `router` for `dst`.
    pub(crate) fn read_lookup(&mut self, router: Uuid, dst: std::net::Ipv4Addr) {
        if let Some(r) = &mut self.reads {
            r.lookup(router, dst);
        }
    }

    /// Notes that a walk read everything `reads` says (an exchange replayed).
    pub(crate) fn read_all(&mut self, reads: &Reads) {
        if let Some(r) = &mut self.reads {
            r.extend(reads);
        }
    }
}

/// The text of a hop, made only when hops are recorded: a string, or what makes one.
pub(crate) trait Detail {
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

/// What a walk shares with the walks it starts (ARP exchanges, answers): the topology,
/// the connection's state and choices, and what is recorded.
pub(crate) struct Shared<'a, 't> {
    pub topo: &'t Topology,
    pub state: &'a mut FlowState,
    pub choices: &'a mut Choices,
    pub record: bool,
    pub consulted: &'a mut Consulted,
}

/// Where a walk is: what a branch restores.
struct Position {
    pkt: Packet,
    in_port: Option<Uuid>,
    out_port: Option<Uuid>,
    current_device: Uuid,
    nw_dst_rewritten: bool,
    devices: u32,
}

pub(crate) struct Walk<'s, 'a, 't> {
    sh: &'s mut Shared<'a, 't>,
    pub(crate) hops: Vec<Hop>,
    pkt: Packet,
    in_port: Option<Uuid>,
    out_port: Option<Uuid>,
    /// Port groups of the exterior port the packet entered through (`portGroups`).
    port_groups: Option<&'t BTreeSet<Uuid>>,
    /// The device of the port the packet was injected at: what connection tracking keys
    /// a return packet by (`fetchIngressDevice`).
    ingress_device: Option<Uuid>,
    /// The packet as it entered the network (`origMatch`).
    orig: Packet,
    /// `isForwardFlow`, once asked; whether the connection is tracked.
    forward: Option<bool>,
    /// Sent by a device (an ICMP error, an echo reply): a return flow, never tracked.
    generated: bool,
    /// A rule on the current device rewrote the destination address.
    nw_dst_rewritten: bool,
    /// Every port, bridge, router and chain traversed so far (the flow's device tags).
    traversed: FxHashSet<Uuid>,
    /// The chains one filter's evaluation has traversed (kept to reuse its allocation).
    chains_traversed: FxHashSet<Uuid>,
    current_device: Uuid,
    devices: u32,
    /// The packet as it entered the current router (`preRoutingMatch`).
    pre_routing: Packet,
}

impl<'s, 'a, 't> Walk<'s, 'a, 't> {
    pub(crate) fn new(sh: &'s mut Shared<'a, 't>, pkt: Packet) -> Walk<'s, 'a, 't> {
        Walk {
            sh,
            hops: Vec::new(),
            pkt,
            in_port: None,
            out_port: None,
            port_groups: None,
            ingress_device: None,
            orig: pkt,
            forward: None,
            generated: false,
            nw_dst_rewritten: false,
            traversed: FxHashSet::default(),
            chains_traversed: FxHashSet::default(),
            current_device: Uuid::nil(),
            devices: 0,
            pre_routing: pkt,
        }
    }

    fn topo(&self) -> &'t Topology {
        self.sh.topo
    }

    /// Notes a device (port, bridge, router, chain) the packet traversed, which only a
    /// `traversedDevice` condition reads: not kept when no rule has one.
    fn tag(&mut self, device: Uuid) {
        if self.sh.topo.traversed_conditions > 0 {
            self.traversed.insert(device);
        }
    }

    fn hop(&mut self, step: Step, device: Option<Uuid>, detail: impl Detail) {
        self.hop_with(step, device, detail, |_| {});
    }

    /// Records a hop (if hops are recorded), `fill` setting what else it names.
    fn hop_with(
        &mut self,
        step: Step,
        device: Option<Uuid>,
        detail: impl Detail,
        fill: impl FnOnce(&mut Hop),
    ) {
        if !self.sh.record {
            return;
        }
        let mut h = Hop::new(step, device, detail.text(), self.pkt.describe());
        fill(&mut h);
        self.hops.push(h);
    }

    fn rule_hop(&mut self, step: Step, chain: Uuid, rule: Option<Uuid>, detail: impl Detail) {
        let device = Some(self.current_device);
        self.hop_with(step, device, detail, |h| {
            h.chain = Some(chain);
            h.rule = rule;
        });
    }

    fn drop(&mut self, device: Option<Uuid>, reason: impl Into<String>) -> End {
        let (reason, packet) = self.ending(Step::Dropped, device, reason.into());
        End::Dropped { reason, packet }
    }

    fn unsupported(&mut self, device: Option<Uuid>, reason: impl Into<String>) -> End {
        let (reason, packet) = self.ending(Step::Unsupported, device, reason.into());
        End::Unsupported { reason, packet }
    }

    /// Records the last hop of a walk: the reason it ends, and the packet as it is.
    fn ending(&mut self, step: Step, device: Option<Uuid>, reason: String) -> (String, Packet) {
        self.hop(step, device, reason.clone());
        (reason, self.pkt)
    }

    /// Sends the packet into the virtual network through `port`.
    pub(crate) fn inject(&mut self, port: Uuid) -> End {
        self.port_ingress(port)
    }

    /// Emits a packet a device generated from `port`: a return flow, never tracked, that
    /// starts at the port's egress (`PacketWorkflow`, generated packets).
    pub(crate) fn emit_generated(&mut self, port: Uuid) -> End {
        self.generated = true;
        self.port_egress(port)
    }

    fn port_ingress(&mut self, port_id: Uuid) -> End {
        if self.devices >= MAX_DEVICES {
            return self.drop(Some(port_id), "traversed too many devices: a loop");
        }
        self.devices += 1;
        let topo = self.topo();
        self.sh.consulted.read(port_id);
        let Some(port) = topo.ports.get(&port_id) else {
            return self.drop(Some(port_id), "the port does not exist");
        };
        self.sh.consulted.read(port.parent);
        if port.vlan_id.unwrap_or(0) != 0 {
            return self.unsupported(Some(port_id), "a VLAN-tagged port is not modelled");
        }
        self.tag(port_id);
        self.in_port = Some(port_id);
        self.current_device = port.parent;
        self.nw_dst_rewritten = false;
        if self.ingress_device.is_none() && !self.generated {
            self.ingress_device = Some(port.parent);
        }
        self.hop(Step::PortIngress, Some(port_id), "enters port");
        if port.admin_state_up == Some(false) {
            return self.port_down(port_id, port.port_type);
        }
        // preIn: an exterior port marks the groups the packet entered through.
        if topo.bindings.contains_key(&port_id) {
            self.port_groups = topo.port_groups.get(&port_id);
        }
        self.out_port = None;
        let filtered = self.filter(port.inbound_filter_id, "port inbound filter");
        if let Err(stop) = filtered {
            return self.port_stop(port_id, port.port_type, stop);
        }
        match port.port_type {
            PortType::Bridge => self.bridge(port.parent),
            PortType::Router => self.router(port.parent),
        }
    }

    /// A port's filter stopped the packet: a router port answers a reject with an ICMP
    /// admin-prohibited error (`RouterPort.reject`); a bridge port only drops.
    fn port_stop(&mut self, port: Uuid, ty: PortType, stop: chain::Stop) -> End {
        match (stop, ty) {
            (chain::Stop::End(end), _) => end,
            (chain::Stop::Rejected(why), PortType::Router) => {
                self.reject_from_router_port(Some(port), &why)
            }
            (chain::Stop::Dropped(why) | chain::Stop::Rejected(why), _) => {
                self.drop(Some(port), why)
            }
        }
    }

    /// A port administratively down: a router port answers with an ICMP admin-prohibited
    /// error from the port the packet entered its router through (`RouterPort.reject`).
    fn port_down(&mut self, port: Uuid, ty: PortType) -> End {
        let why = "the port is administratively down";
        match ty {
            PortType::Router => self.reject_from_router_port(Some(port), why),
            PortType::Bridge => self.drop(Some(port), why),
        }
    }

    fn port_egress(&mut self, port_id: Uuid) -> End {
        if self.devices >= MAX_DEVICES {
            return self.drop(Some(port_id), "traversed too many devices: a loop");
        }
        let topo = self.topo();
        self.sh.consulted.read(port_id);
        let Some(port) = topo.ports.get(&port_id) else {
            return self.drop(Some(port_id), "the egress port does not exist");
        };
        self.sh.consulted.read(port.parent);
        if port.vlan_id.unwrap_or(0) != 0 {
            return self.unsupported(Some(port_id), "a VLAN-tagged port is not modelled");
        }
        match port.port_type {
            PortType::Bridge if Some(port_id) == self.in_port => {
                return self.drop(
                    Some(port_id),
                    "a bridge does not send a frame back out its ingress port",
                );
            }
            // A frame a router port addresses to itself comes back into the port.
            PortType::Router if self.pkt.eth_src == self.pkt.eth_dst => {
                return self.port_ingress(port_id);
            }
            _ => {}
        }
        self.tag(port_id);
        self.out_port = Some(port_id);
        if self.current_device.is_nil() {
            // A packet a device generated starts here, on this port's device.
            self.current_device = port.parent;
        }
        self.hop(Step::PortEgress, Some(port_id), "leaves port");
        if port.admin_state_up == Some(false) {
            return self.port_down(port_id, port.port_type);
        }
        let filtered = self.filter(port.outbound_filter_id, "port outbound filter");
        if let Err(stop) = filtered {
            return self.port_stop(port_id, port.port_type, stop);
        }
        if let Some(peer) = topo.peers.get(&port_id) {
            return self.port_ingress(*peer);
        }
        self.emit(port_id, port.parent)
    }

    /// Emits from an exterior port to the workload behind it.
    fn emit(&mut self, port_id: Uuid, device: Uuid) -> End {
        let topo = self.topo();
        let Some((host, iface)) = topo.bindings.get(&port_id) else {
            return self.drop(
                Some(port_id),
                "the port is neither linked nor bound (unplugged)",
            );
        };
        // midolman tracks the connection where a forward flow leaves the network.
        if self.forward == Some(true) && self.pkt.trackable() {
            self.sh.state.track(self.pkt.tuple.key(), device);
        }
        let Some(att) = topo.attachments.get(&(*host, iface.clone())) else {
            return self.drop(
                Some(port_id),
                format!("nothing is plugged in behind interface {iface} on host {host}"),
            );
        };
        let dst = self.pkt.eth_dst;
        // A NIC takes frames for its MAC, broadcasts and multicasts.
        if dst != att.mac && !dst.is_multicast() {
            return self.drop(
                Some(port_id),
                format!("{} ignores a frame for MAC {dst}", att.name),
            );
        }
        let ip = self.pkt.tuple.dst.ip;
        let takes = if self.pkt.is_arp() {
            true
        } else {
            att.accepts(ip)
        };
        if !takes {
            return self.drop(
                Some(port_id),
                format!("{} does not take packets for {ip}", att.name),
            );
        }
        self.hop(Step::Delivered, Some(port_id), || {
            format!("delivered to {}", att.name)
        });
        End::Delivered {
            port: port_id,
            attachment: att.name.clone(),
            packet: self.pkt,
        }
    }

    /// midolman `ConnTrackState.isForwardFlow`: decided once per packet, on first use, by
    /// the packet as it entered the network (`origMatch`) on its ingress device; a packet
    /// a device generated is a return flow; a packet connection tracking does not apply
    /// to (ARP) is a forward flow and is not tracked.
    fn is_forward(&mut self) -> bool {
        if let Some(f) = self.forward {
            return f;
        }
        if !self.pkt.trackable() {
            return true;
        }
        if self.generated {
            return false;
        }
        let device = self.ingress_device.unwrap_or(self.current_device);
        let f = !self
            .sh
            .state
            .is_tracked_return(self.orig.tuple.key(), device);
        self.forward = Some(f);
        f
    }

    /// Whether `mac` is the MAC of a router port linked to `bridge`.
    fn is_router_mac(&self, bridge: Uuid, mac: MacAddr) -> bool {
        self.topo().logical_port_of_mac(bridge, mac).is_some()
    }

    /// Runs `f` on a copy of the walk's position (packet, ports, device), restoring it
    /// after: one branch of a flood (`SimDevice.branch`).
    fn branch<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = Position {
            pkt: self.pkt,
            in_port: self.in_port,
            out_port: self.out_port,
            current_device: self.current_device,
            nw_dst_rewritten: self.nw_dst_rewritten,
            devices: self.devices,
        };
        let out = f(self);
        let Position {
            pkt,
            in_port,
            out_port,
            current_device,
            nw_dst_rewritten,
            devices,
        } = saved;
        (self.pkt, self.in_port, self.out_port) = (pkt, in_port, out_port);
        (self.current_device, self.nw_dst_rewritten, self.devices) =
            (current_device, nw_dst_rewritten, devices);
        out
    }
}
