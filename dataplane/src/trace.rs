//! Tracing a connection: the forward packet from a workload to an address, every path a
//! random choice (a NAT target, an equal-cost route) could send it on, and for each path
//! what comes back to the client: the reply of the workload that received it, or what a
//! device answered instead (an ICMP error, a router's echo reply), walked back through
//! the network. A client outside, at an address in the networks behind its attachment,
//! gets its reply through any attachment with that address behind it ([`Attachment`]'s
//! `networks`: the outside is one network behind every uplink).
//!
//! A trace starts from empty flow state. [`trace_sequence`] and [`Session`] run several
//! connections one after another on one state, as a client's later connections meet what
//! its earlier ones left (a sticky VIP's binding): the first explores every combination
//! of the choices they meet, the second goes one connection at a time, possibly on a
//! changed topology, keeping the state of each trace's first path.

use std::net::Ipv4Addr;

use midonet_translators::model::MacAddr;
use serde::{Deserialize, Serialize};

use crate::engine::{resolve_from_workload, Choices, Consulted, End, Hop, Shared, Walk};
use crate::packet::{icmp, FlowTuple, IcmpMessage, Packet, Protocol, Quoted, SocketV4};
use crate::reads::Reads;
use crate::state::FlowState;
use crate::topology::{Attachment, Topology};

/// At most this many paths are explored per trace; more are reported as truncated.
pub const MAX_PATHS: usize = 1024;

/// The connection to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The attachment (by name) the connection starts from.
    pub from: String,
    pub to: SocketV4,
    /// `Icmp`: a ping (echo request with identifier `src_port`; `to`'s port unused).
    pub protocol: Protocol,
    /// The client's source port.
    pub src_port: u16,
    /// The source address, if not the attachment's first: one of its addresses or an
    /// address in the networks behind it (a client outside, behind an uplink).
    pub src_ip: Option<Ipv4Addr>,
    /// The IP TOS byte of the packets sent.
    pub tos: u8,
    /// Sends the first frame to this MAC as given, without resolving the next hop.
    pub dst_mac: Option<MacAddr>,
    /// Sends the first frame from this MAC instead of the attachment's.
    pub src_mac: Option<MacAddr>,
    /// The receiving workload answers with an ICMP destination unreachable of this code
    /// instead of replying (e.g. 3, port unreachable: nothing listens there).
    pub answer_unreachable: Option<u8>,
    /// The client forwards the packet to its gateway whatever the destination, its own
    /// addresses included: a node's host handing what reached its interface for a node
    /// port to MidoNet by a policy route (`docs/operations.md`), not its own stack.
    pub host_forward: bool,
}

impl Probe {
    /// A connection from `from` to `to` with the attachment's own addresses and MAC.
    pub fn new(from: impl Into<String>, to: SocketV4, protocol: Protocol, src_port: u16) -> Probe {
        Probe {
            from: from.into(),
            to,
            protocol,
            src_port,
            src_ip: None,
            tos: 0,
            dst_mac: None,
            src_mac: None,
            answer_unreachable: None,
            host_forward: false,
        }
    }
}

/// A [`Probe`] as JSON (camelCase): what `POST /_sim/trace` takes besides the attachments,
/// and what the conformance cases say to trace. `to` is `IPv4:PORT`; `protocol` defaults to
/// TCP, `srcPort` to 40000. Unknown members are refused when it is read on its own (serde
/// cannot refuse them where it is flattened into a larger request).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeRequest {
    /// The attachment name the connection starts from, e.g. `pod/default/a`.
    pub from: String,
    /// `IP:PORT`, e.g. `10.96.0.10:80`.
    pub to: String,
    #[serde(default = "default_protocol")]
    pub protocol: Protocol,
    /// The client's source port (for ICMP: the echo identifier).
    #[serde(default = "default_src_port")]
    pub src_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_ip: Option<Ipv4Addr>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tos: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_mac: Option<MacAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_mac: Option<MacAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_unreachable: Option<u8>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_forward: bool,
}

fn default_protocol() -> Protocol {
    Protocol::Tcp
}

fn default_src_port() -> u16 {
    40000
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl ProbeRequest {
    /// A TCP connection from `from` to `to` (`IP:PORT`) with the defaults.
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> ProbeRequest {
        ProbeRequest {
            from: from.into(),
            to: to.into(),
            protocol: default_protocol(),
            src_port: default_src_port(),
            src_ip: None,
            tos: 0,
            dst_mac: None,
            src_mac: None,
            answer_unreachable: None,
            host_forward: false,
        }
    }

    /// The probe it asks for; `Err` when `to` is not `IPv4:PORT`.
    pub fn probe(&self) -> Result<Probe, String> {
        let addr: std::net::SocketAddrV4 = self
            .to
            .parse()
            .map_err(|e| format!("to {:?} is not IPv4:PORT: {e}", self.to))?;
        let to = SocketV4::new(*addr.ip(), addr.port());
        let mut p = Probe::new(self.from.clone(), to, self.protocol, self.src_port);
        p.src_ip = self.src_ip;
        p.tos = self.tos;
        p.dst_mac = self.dst_mac;
        p.src_mac = self.src_mac;
        p.host_forward = self.host_forward;
        p.answer_unreachable = self.answer_unreachable;
        Ok(p)
    }
}

/// Why a trace could not be run at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("no workload named {0:?} is plugged into the topology")]
    UnknownSource(String),
    #[error("{0} has no address to send from")]
    NoAddress(String),
    #[error("{0} is not bound to any port (no HostInterfacePort names its interface)")]
    Unbound(String),
    #[error("{0} cannot send from {1}: it is neither its address nor in a network behind it")]
    NotItsAddress(String, Ipv4Addr),
}

/// The verdict of one leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Delivered,
    Dropped,
    /// Dropped, and a router answered with an ICMP error (`answered_with`).
    Rejected,
    /// The model met something it does not simulate (`unsupported` says what): it
    /// cannot tell what happens.
    Unsupported,
}

/// One direction of one path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leg {
    pub verdict: Verdict,
    /// The workload that received it (or the router a ping to it answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_to: Option<String>,
    /// The packet as received (after every NAT on the way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<FlowTuple>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_reason: Option<String>,
    /// The packet as it was when dropped (after every NAT on the way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_packet: Option<FlowTuple>,
    /// What a device sent back instead: an ICMP error, a router's echo reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_with: Option<FlowTuple>,
    /// What the model does not simulate, naming the rule or device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    pub hops: Vec<Hop>,
}

/// One path a connection can take: the forward leg and what came back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub forward: Leg,
    /// The reply of the receiving workload, or the walk of what a device answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Leg>,
    /// True when the forward packet was delivered and its reply reached the client from
    /// the address the client sent to: the connection works.
    pub works: bool,
    /// The source address of what reached the client back (a reply or an ICMP error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_sees: Option<SocketV4>,
}

/// Every path of a connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub from: String,
    pub sent: FlowTuple,
    pub paths: Vec<Path>,
    /// More paths existed than [`MAX_PATHS`].
    pub truncated: bool,
}

impl Trace {
    /// Delivered on at least one path.
    pub fn delivered(&self) -> bool {
        self.paths
            .iter()
            .any(|p| p.forward.verdict == Verdict::Delivered)
    }

    /// Every workload (with the address it received on) some path delivers to.
    pub fn candidates(&self) -> Vec<(String, SocketV4)> {
        let mut v: Vec<(String, SocketV4)> = self
            .paths
            .iter()
            .filter_map(|p| Some((p.forward.delivered_to.clone()?, p.forward.received?.dst)))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// True when every path works.
    pub fn all_work(&self) -> bool {
        !self.paths.is_empty() && self.paths.iter().all(|p| p.works)
    }

    /// The first thing the model could not simulate on any leg, if any.
    pub fn unsupported(&self) -> Option<&str> {
        self.paths
            .iter()
            .flat_map(|p| std::iter::once(&p.forward).chain(p.reply.as_ref()))
            .find_map(|l| l.unsupported.as_deref())
    }
}

/// Traces `probe` on `topo`, exploring every random choice.
pub fn trace(topo: &Topology, probe: &Probe) -> Result<Trace, TraceError> {
    trace_consulting(topo, probe, true, false).map(|(t, _)| t)
}

/// [`trace`] without the hops of each leg (every leg's `hops` is empty): the verdicts,
/// deliveries, drop reasons and replies are the same, at a fraction of the cost.
pub fn trace_without_hops(topo: &Topology, probe: &Probe) -> Result<Trace, TraceError> {
    trace_consulting(topo, probe, false, false).map(|(t, _)| t)
}

/// [`trace`] (with hops if `record`), and what its walks consulted on every path (if
/// `consult`; nothing otherwise).
pub(crate) fn trace_consulting(
    topo: &Topology,
    probe: &Probe,
    record: bool,
    consult: bool,
) -> Result<(Trace, Consulted), TraceError> {
    let mut consulted = Consulted::default();
    consulted.off = !consult;
    let t = trace_noting(topo, probe, record, &mut consulted)?;
    Ok((t, consulted))
}

/// [`trace_without_hops`], and every key it read (`crate::reads`): a batch of changes
/// that touches none of them leaves its verdict as it is.
pub fn trace_reading(topo: &Topology, probe: &Probe) -> (Result<Trace, TraceError>, Reads) {
    let mut consulted = Consulted::default();
    consulted.off = true;
    consulted.reads = Some(Reads::default());
    if let Some(client) = topo.attachment_named(&probe.from) {
        consulted.read_binding(client.host, &client.interface);
    }
    let traced = trace_noting(topo, probe, false, &mut consulted);
    (traced, consulted.reads.unwrap_or_default())
}

/// Traces `probe`, noting in `consulted` what its walks consulted and read.
fn trace_noting(
    topo: &Topology,
    probe: &Probe,
    record: bool,
    consulted: &mut Consulted,
) -> Result<Trace, TraceError> {
    let (client, sent) = client_of(topo, probe)?;
    let start = FlowState::default();
    let (runs, truncated) = explore(topo, &start, record, consulted, |sh| {
        run_path(sh, probe, client, sent)
    });
    Ok(Trace {
        from: client.name.clone(),
        sent,
        paths: runs.into_iter().map(|(path, _)| path).collect(),
        truncated,
    })
}

/// The attachment a probe starts from and the packet it sends.
fn client_of<'t>(
    topo: &'t Topology,
    probe: &Probe,
) -> Result<(&'t Attachment, FlowTuple), TraceError> {
    let client = topo
        .attachment_named(&probe.from)
        .ok_or_else(|| TraceError::UnknownSource(probe.from.clone()))?;
    let src_ip = match probe.src_ip {
        Some(ip) if client.accepts(ip) => ip,
        Some(ip) => return Err(TraceError::NotItsAddress(client.name.clone(), ip)),
        None => client
            .primary_ip()
            .ok_or_else(|| TraceError::NoAddress(client.name.clone()))?,
    };
    if topo.port_of(client).is_none() {
        return Err(TraceError::Unbound(client.name.clone()));
    }
    let sent = FlowTuple::new(
        probe.protocol,
        SocketV4::new(src_ip, probe.src_port),
        probe.to,
    );
    Ok((client, sent))
}

/// Runs `run` once per combination of the random choices it meets (at most
/// [`MAX_PATHS`]; `true` when more existed), each run on a copy of `start`: what each run
/// returned, with the state it left.
fn explore<T>(
    topo: &Topology,
    start: &FlowState,
    record: bool,
    consulted: &mut Consulted,
    mut run: impl FnMut(&mut Shared<'_, '_>) -> T,
) -> (Vec<(T, FlowState)>, bool) {
    let mut out = Vec::new();
    let mut pending: Vec<Vec<usize>> = vec![Vec::new()];
    let mut truncated = false;
    while let Some(script) = pending.pop() {
        if out.len() >= MAX_PATHS {
            truncated = true;
            break;
        }
        let mut state = start.clone();
        let mut choices = Choices::new(script.clone());
        let mut sh = Shared {
            topo,
            state: &mut state,
            choices: &mut choices,
            record,
            consulted,
        };
        let value = run(&mut sh);
        // Every choice met past the script was taken as its first option; queue the
        // others, each with the choices before it fixed.
        let picks: Vec<usize> = choices.met.iter().map(|(p, _)| *p).collect();
        for (k, (_, n)) in choices.met.iter().enumerate().skip(script.len()) {
            for alt in 1..*n {
                let mut next = picks[..k].to_vec();
                next.push(alt);
                pending.push(next);
            }
        }
        out.push((value, state));
    }
    (out, truncated)
}

/// Connections traced one after another on one flow state, as one client's successive
/// connections meet the state its earlier ones left in the agents (NAT bindings, a
/// sticky VIP's binding, connection tracking, learned MACs and ARP entries). midolman
/// forgets an unused NAT binding after 60 s; a session forgets nothing, and has no
/// clock: it stands for connections made within that time.
#[derive(Clone, Debug, Default)]
pub struct Session {
    state: FlowState,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Traces `probe` on `topo` (which may differ from the topology of earlier
    /// connections: a member left its pool), every path starting from the state the
    /// session holds. The session then keeps the state of the trace's first path, the
    /// one where every random choice took its first option.
    pub fn trace(&mut self, topo: &Topology, probe: &Probe) -> Result<Trace, TraceError> {
        let (client, sent) = client_of(topo, probe)?;
        let mut consulted = Consulted::default();
        consulted.off = true;
        let (runs, truncated) = explore(topo, &self.state, true, &mut consulted, |sh| {
            run_path(sh, probe, client, sent)
        });
        let mut paths = Vec::with_capacity(runs.len());
        for (i, (path, state)) in runs.into_iter().enumerate() {
            if i == 0 {
                self.state = state;
            }
            paths.push(path);
        }
        Ok(Trace {
            from: client.name.clone(),
            sent,
            paths,
            truncated,
        })
    }
}

/// Every history of `probes` made one after another on one flow state: each history is
/// one combination of the random choices all the connections met, with the path each
/// connection took (in `probes` order). `true` when more than [`MAX_PATHS`] histories
/// existed.
pub fn trace_sequence(
    topo: &Topology,
    probes: &[Probe],
) -> Result<(Vec<Vec<Path>>, bool), TraceError> {
    let clients = probes
        .iter()
        .map(|p| client_of(topo, p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut consulted = Consulted::default();
    consulted.off = true;
    let start = FlowState::default();
    let (runs, truncated) = explore(topo, &start, true, &mut consulted, |sh| {
        probes
            .iter()
            .zip(&clients)
            .map(|(probe, (client, sent))| run_path(sh, probe, client, *sent))
            .collect::<Vec<Path>>()
    });
    Ok((runs.into_iter().map(|(h, _)| h).collect(), truncated))
}

/// What a leg led to, besides the leg itself.
enum Next {
    /// A workload received the packet.
    Received(Attachment, FlowTuple),
    /// A device answered it: this packet leaves from this port.
    Answered(Box<crate::engine::Answer>),
    Nothing,
}

fn run_path(sh: &mut Shared<'_, '_>, probe: &Probe, client: &Attachment, sent: FlowTuple) -> Path {
    let first = Frame {
        tos: probe.tos,
        dst_mac: probe.dst_mac,
        src_mac: probe.src_mac,
        host_forward: probe.host_forward,
    };
    let (forward, next) = send(sh, client, sent, first);
    let reply = match next {
        Next::Received(server, received) => {
            let answer = reply_to(probe, received);
            send(sh, &server, answer, Frame::plain(probe.tos)).0
        }
        Next::Answered(answer) => {
            let mut walk = Walk::new(sh, answer.packet);
            let end = walk.emit_generated(answer.from_port);
            let hops = std::mem::take(&mut walk.hops);
            leg(end, hops, None).0
        }
        Next::Nothing => {
            return Path {
                forward,
                reply: None,
                works: false,
                client_sees: None,
            }
        }
    };
    let back = reply
        .received
        .filter(|_| reaches_client(sh.topo, client, sent.src.ip, reply.delivered_to.as_deref()))
        .filter(|t| t.dst.ip == sent.src.ip);
    let client_sees = back.map(|t| t.src);
    let works = forward.verdict == Verdict::Delivered
        && back.is_some_and(|t| {
            t.icmp_error().is_none() && t.src.ip == sent.dst.ip && same_port(&t, &sent)
        });
    Path {
        forward,
        reply: Some(reply),
        works,
        client_sees,
    }
}

/// Whether a reply delivered to `to` reached the client: the client itself or, for a
/// client at an address in a network behind its attachment (the outside behind an uplink),
/// any attachment with that address behind it too: the outside is one network, reached
/// through any of the routers in front of it (a reply may leave by another uplink than
/// the request came in by, as equal-cost routes choose per flow).
fn reaches_client(topo: &Topology, client: &Attachment, ip: Ipv4Addr, to: Option<&str>) -> bool {
    let Some(to) = to else { return false };
    if to == client.name {
        return true;
    }
    !client.owns(ip)
        && topo
            .attachment_named(to)
            .is_some_and(|a| !a.owns(ip) && a.accepts(ip))
}

/// A reply comes from the port the client sent to (an ICMP reply has no ports).
fn same_port(reply: &FlowTuple, sent: &FlowTuple) -> bool {
    sent.protocol == Protocol::Icmp || reply.src.port == sent.dst.port
}

/// What the receiving workload sends back: the reply, or an ICMP unreachable quoting what
/// it received.
fn reply_to(probe: &Probe, received: FlowTuple) -> FlowTuple {
    match probe.answer_unreachable {
        None => received.reversed(),
        Some(code) => FlowTuple {
            protocol: Protocol::Icmp,
            src: SocketV4::new(received.dst.ip, 0),
            dst: SocketV4::new(received.src.ip, 0),
            icmp: Some(IcmpMessage {
                icmp_type: icmp::UNREACH,
                code,
                about: Some(Quoted {
                    protocol: received.protocol,
                    src: received.src,
                    dst: received.dst,
                }),
            }),
        },
    }
}

/// How the first frame of a leg is built.
#[derive(Clone, Copy)]
struct Frame {
    tos: u8,
    dst_mac: Option<MacAddr>,
    src_mac: Option<MacAddr>,
    /// To the gateway whatever the destination (`Probe::host_forward`).
    host_forward: bool,
}

impl Frame {
    fn plain(tos: u8) -> Frame {
        Frame {
            tos,
            dst_mac: None,
            src_mac: None,
            host_forward: false,
        }
    }
}

/// Sends `tuple` from `from` as its host stack would (to the destination if on-link,
/// else to its gateway, resolving its MAC by ARP) and walks it.
fn send(sh: &mut Shared<'_, '_>, from: &Attachment, tuple: FlowTuple, frame: Frame) -> (Leg, Next) {
    let mut hops = Vec::new();
    let no_packet = |reason: String| {
        (
            Leg {
                verdict: Verdict::Dropped,
                delivered_to: None,
                received: None,
                drop_reason: Some(reason),
                dropped_packet: Some(tuple),
                answered_with: None,
                unsupported: None,
                hops: Vec::new(),
            },
            Next::Nothing,
        )
    };
    let topo = sh.topo;
    sh.consulted.read_binding(from.host, &from.interface);
    // A host stack delivers a packet to one of its own addresses itself.
    if from.owns(tuple.dst.ip) && frame.dst_mac.is_none() && !frame.host_forward {
        let leg = Leg {
            verdict: Verdict::Delivered,
            delivered_to: Some(from.name.clone()),
            received: Some(tuple),
            drop_reason: None,
            dropped_packet: None,
            answered_with: None,
            unsupported: None,
            hops: Vec::new(),
        };
        return (leg, Next::Received(from.clone(), tuple));
    }
    let Some(port) = topo.port_of(from) else {
        return no_packet(format!("{} is not bound to a port", from.name));
    };
    let mac = match frame.dst_mac {
        Some(mac) => mac,
        None => {
            let next_hop = match frame.host_forward {
                true => from.gateway,
                false => from.next_hop(tuple.dst.ip),
            };
            let Some(next_hop) = next_hop else {
                return no_packet(format!("{} has no route to {}", from.name, tuple.dst.ip));
            };
            match resolve_from_workload(sh, from, port, next_hop, &mut hops) {
                Ok(mac) => mac,
                Err(end) => {
                    let (mut l, _) = leg(end, Vec::new(), Some(tuple));
                    if sh.record {
                        l.hops = hops;
                    }
                    return (l, Next::Nothing);
                }
            }
        }
    };
    if !sh.record {
        hops.clear();
    }
    let src_mac = frame.src_mac.unwrap_or(from.mac);
    let mut walk = Walk::new(sh, Packet::ip(src_mac, mac, tuple, frame.tos));
    let end = walk.inject(port);
    hops.append(&mut walk.hops);
    let (l, next) = leg(end, hops, None);
    what_next(topo, l, next)
}

/// What a delivered leg leads to: the reply of the workload that received it; and the
/// name of the router that answered a ping.
fn what_next(topo: &Topology, mut l: Leg, next: Next) -> (Leg, Next) {
    let next = match next {
        Next::Nothing if l.verdict == Verdict::Delivered => {
            let server = l
                .delivered_to
                .as_deref()
                .and_then(|n| topo.attachment_named(n));
            match (server, l.received) {
                (Some(a), Some(t)) => Next::Received(a.clone(), t),
                _ => Next::Nothing,
            }
        }
        Next::Answered(a) => {
            // A router answered the ping itself: name it.
            if l.verdict == Verdict::Delivered {
                let router = topo.ports.get(&a.from_port).map(|p| p.parent);
                let name = router.and_then(|r| topo.name_of(r));
                if let (Some(name), Some(t)) = (name, l.received) {
                    l.delivered_to = Some(format!("{name} ({})", t.dst.ip));
                }
            }
            Next::Answered(a)
        }
        n => n,
    };
    (l, next)
}

/// The leg a walk's end makes, and what it leads to. `sent` replaces the dropped packet
/// when the walk never started (an ARP that failed).
fn leg(end: End, hops: Vec<Hop>, sent: Option<FlowTuple>) -> (Leg, Next) {
    let mut l = Leg {
        verdict: Verdict::Dropped,
        delivered_to: None,
        received: None,
        drop_reason: None,
        dropped_packet: None,
        answered_with: None,
        unsupported: None,
        hops,
    };
    let next = match end {
        End::Delivered {
            attachment, packet, ..
        } => {
            l.verdict = Verdict::Delivered;
            l.delivered_to = Some(attachment);
            l.received = Some(packet.tuple());
            Next::Nothing
        }
        End::Dropped { reason, packet } | End::Consumed { reason, packet } => {
            l.drop_reason = Some(reason);
            l.dropped_packet = Some(sent.unwrap_or(packet.tuple()));
            Next::Nothing
        }
        End::Unsupported { reason, packet } => {
            l.verdict = Verdict::Unsupported;
            l.unsupported = Some(reason);
            l.dropped_packet = Some(sent.unwrap_or(packet.tuple()));
            Next::Nothing
        }
        End::Answered {
            reason,
            packet,
            answer,
            rejected,
        } => {
            l.answered_with = Some(answer.packet.tuple());
            if rejected {
                l.verdict = Verdict::Rejected;
                l.drop_reason = Some(reason);
                l.dropped_packet = Some(packet.tuple());
            } else {
                l.verdict = Verdict::Delivered;
                l.delivered_to = Some(format!("router ({})", packet.tuple().dst.ip));
                l.received = Some(packet.tuple());
            }
            Next::Answered(answer)
        }
    };
    (l, next)
}
