//! Tracing a connection: the forward packet from a workload to an address, every path a
//! random choice (a NAT target, an equal-cost route) could send it on, and for each
//! delivered path the reply followed back to the client.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::engine::{Choices, Consulted, End, Hop, Walk};
use crate::packet::{FlowTuple, Packet, Protocol, SocketV4};
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
    pub protocol: Protocol,
    /// The client's source port.
    pub src_port: u16,
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
}

/// The verdict of one leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Delivered,
    Dropped,
}

/// One direction of one path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leg {
    pub verdict: Verdict,
    /// The workload that received it.
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
    pub hops: Vec<Hop>,
}

/// One path a connection can take: the forward leg and, if it was delivered, the reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub forward: Leg,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Leg>,
    /// True when the forward packet was delivered and its reply reached the client from
    /// the address the client sent to: the connection works.
    pub works: bool,
    /// The source address the client sees on the reply.
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
    let client = topo
        .attachment_named(&probe.from)
        .ok_or_else(|| TraceError::UnknownSource(probe.from.clone()))?;
    let src_ip = client
        .primary_ip()
        .ok_or_else(|| TraceError::NoAddress(client.name.clone()))?;
    if topo.port_of(client).is_none() {
        return Err(TraceError::Unbound(client.name.clone()));
    }
    let sent = FlowTuple {
        protocol: probe.protocol,
        src: SocketV4::new(src_ip, probe.src_port),
        dst: probe.to,
    };
    let mut paths = Vec::new();
    let mut pending: Vec<Vec<usize>> = vec![Vec::new()];
    let mut truncated = false;
    while let Some(script) = pending.pop() {
        if paths.len() >= MAX_PATHS {
            truncated = true;
            break;
        }
        let mut state = FlowState::default();
        let mut choices = Choices::new(script.clone());
        let mut walked = Walked {
            state: &mut state,
            choices: &mut choices,
            consulted: &mut consulted,
            record,
        };
        let path = run_path(topo, &mut walked, client, sent);
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
        paths.push(path);
    }
    let t = Trace {
        from: client.name.clone(),
        sent,
        paths,
        truncated,
    };
    Ok((t, consulted))
}

/// What the legs of one path share: the flow state, the choices, what they consulted,
/// whether they record hops.
struct Walked<'w> {
    state: &'w mut FlowState,
    choices: &'w mut Choices,
    consulted: &'w mut Consulted,
    record: bool,
}

fn run_path(topo: &Topology, w: &mut Walked<'_>, client: &Attachment, sent: FlowTuple) -> Path {
    let forward = send(topo, w, client, sent);
    let Some((server, received)) = forward.1.clone() else {
        return Path {
            forward: forward.0,
            reply: None,
            works: false,
            client_sees: None,
        };
    };
    let reply_tuple = received.reversed();
    let reply = send(topo, w, &server, reply_tuple);
    let back = reply.1.as_ref().filter(|(a, _)| a.name == client.name);
    let client_sees = back.map(|(_, t)| t.src);
    let works = back.is_some_and(|(_, t)| t.dst == sent.src && t.src == sent.dst);
    Path {
        forward: forward.0,
        reply: Some(reply.0),
        works,
        client_sees,
    }
}

/// Sends `tuple` from `from` as its host stack would (to the destination if on-link,
/// else to its gateway) and walks it. Returns the leg and, when delivered, the receiving
/// attachment with the tuple it received.
fn send(
    topo: &Topology,
    w: &mut Walked<'_>,
    from: &Attachment,
    tuple: FlowTuple,
) -> (Leg, Option<(Attachment, FlowTuple)>) {
    let dropped = |reason: String| {
        (
            Leg {
                verdict: Verdict::Dropped,
                delivered_to: None,
                received: None,
                drop_reason: Some(reason),
                dropped_packet: Some(tuple),
                hops: Vec::new(),
            },
            None,
        )
    };
    let Some(port) = topo.port_of(from) else {
        return dropped(format!("{} is not bound to a port", from.name));
    };
    let Some(next_hop) = from.next_hop(tuple.dst.ip) else {
        return dropped(format!("{} has no route to {}", from.name, tuple.dst.ip));
    };
    let Some(bridge) = topo.ports.get(&port).map(|p| p.parent) else {
        return dropped(format!("the port of {} does not exist", from.name));
    };
    let Some(mac) = resolve_from(topo, bridge, from, next_hop) else {
        return dropped(format!(
            "{}: ARP for {next_hop} is not answered on its bridge",
            from.name
        ));
    };
    let pkt = Packet {
        eth_src: from.mac,
        eth_dst: mac,
        protocol: tuple.protocol,
        src: tuple.src,
        dst: tuple.dst,
    };
    let mut walk = Walk::new(topo, w.state, w.choices, pkt);
    walk.record = w.record;
    walk.consulted.off = w.consulted.off;
    let end = walk.inject(port);
    let hops = std::mem::take(&mut walk.hops);
    let consulted = std::mem::take(&mut walk.consulted);
    drop(walk);
    w.consulted.extend(consulted);
    match end {
        End::Delivered {
            attachment, packet, ..
        } => {
            let server = topo.attachment_named(&attachment).cloned();
            (
                Leg {
                    verdict: Verdict::Delivered,
                    delivered_to: Some(attachment),
                    received: Some(packet.tuple()),
                    drop_reason: None,
                    dropped_packet: None,
                    hops,
                },
                server.map(|s| (s, packet.tuple())),
            )
        }
        End::Dropped { reason, packet } => (
            Leg {
                verdict: Verdict::Dropped,
                delivered_to: None,
                received: None,
                drop_reason: Some(reason),
                dropped_packet: Some(packet.tuple()),
                hops,
            },
            None,
        ),
    }
}

/// ARP from a workload on its own bridge; it never resolves its own address.
fn resolve_from(
    topo: &Topology,
    bridge: uuid::Uuid,
    from: &Attachment,
    ip: Ipv4Addr,
) -> Option<midonet_translators::model::MacAddr> {
    if from.owns(ip) {
        return Some(from.mac);
    }
    topo.arp_on_bridge(bridge, ip)
}
