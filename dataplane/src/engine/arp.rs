//! ARP, simulated as frames: requests and replies cross ports, bridges and their filters
//! like any frame, so a filter that drops them breaks address resolution as it does in
//! midolman.
//!
//! - A workload resolves its next hop from its ARP cache, else by broadcasting a request
//!   (`resolve_from_workload`); a workload that receives a request for one of its
//!   addresses notes the sender and answers it.
//! - A bridge answers a request for an address it knows (see [`super::bridge`]).
//! - A router (`Router.processArpRequest`, `processArpReply`) answers a request for its
//!   ingress port's address from a sender on the port's network, noting the sender in
//!   its ARP cache; it notes the sender of a reply addressed to its port, or of a
//!   gratuitous one. It resolves a next hop from its cache, else by sending a request out
//!   the egress port (`ArpRequestBroker`); an unanswered request drops the packet that
//!   needed it (the ARP timeout).
//!
//! An exchange depends on nothing of the connection's state (ARP is neither translated
//! nor connection-tracked, and the request teaches the bridges the requester's MAC
//! before the reply needs it), so it is walked once per topology on a state of its own
//! and replayed afterwards: its outcome, what it taught the bridges and ARP caches, the
//! chains and routers it consulted (with the chains whose guarded jumps it skipped), the
//! keys it read (`crate::reads`), its hops ([`ArpMemo`]).

use std::net::Ipv4Addr;
use std::sync::Arc;

use midonet_translators::model::MacAddr;
use uuid::Uuid;

use super::{Choices, Consulted, End, Hop, Shared, Step, Walk};
use crate::packet::{Packet, ZERO_MAC};
use crate::reads::Reads;
use crate::state::FlowState;
use crate::topology::{Attachment, Topology};

/// What one ARP exchange did, to replay.
#[derive(Debug)]
pub(crate) struct Exchanged {
    end: End,
    learned: FlowState,
    chains: Vec<Uuid>,
    /// The chains whose guarded jumps the walk skipped (`Consulted::guarded`).
    guarded: Vec<Uuid>,
    routers: Vec<Uuid>,
    /// What the exchange read (`crate::reads`).
    reads: Reads,
    hops: Vec<Hop>,
}

impl Exchanged {
    /// Whether `changes` touch what the exchange read.
    pub(crate) fn touched_by(&self, changes: &crate::reads::Changes) -> bool {
        changes.touches(&self.reads)
    }
}

/// An exchange: whether hops are recorded, injected (a workload) or emitted (a device),
/// the port, the request.
pub(crate) type ArpKey = (bool, bool, Uuid, Packet);

/// The ARP exchanges walked on one topology.
pub(crate) type ArpMemo = crate::topology::Memo<ArpKey, Arc<Exchanged>>;

/// How many frames one ARP exchange may take (request, an answer, a reply forwarded).
const MAX_EXCHANGE: usize = 4;

/// One frame of an exchange: injected by the workload behind a port, or emitted by a
/// device from a port.
enum Send {
    Inject(Uuid, Packet),
    Emit(Uuid, Packet),
}

/// Walks an ARP exchange from `first` until a reply reaches a workload or a router, or a
/// frame is lost; the last walk's end. Replies are noted in the ARP caches on the way.
fn exchange(sh: &mut Shared<'_, '_>, first: Send, hops: &mut Vec<Hop>) -> End {
    let mut next = first;
    let mut last = None;
    for _ in 0..MAX_EXCHANGE {
        let end = {
            let mut walk = match &next {
                Send::Inject(_, p) | Send::Emit(_, p) => Walk::new(sh, *p),
            };
            let end = match next {
                Send::Inject(port, _) => walk.inject(port),
                Send::Emit(port, _) => walk.emit_generated(port),
            };
            hops.append(&mut walk.hops);
            end
        };
        next = match &end {
            End::Answered { answer, .. } => Send::Emit(answer.from_port, answer.packet),
            End::Delivered { port, packet, .. } => match received(sh, *port, packet) {
                Some(reply) => Send::Inject(*port, reply),
                None => return end,
            },
            _ => return end,
        };
        last = Some(end);
    }
    last.unwrap_or(End::Dropped {
        reason: "the ARP exchange did not settle".into(),
        packet: Packet::arp_request(ZERO_MAC, Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED),
    })
}

/// [`exchange`], walked once per topology and replayed (see the module docs).
fn exchange_memo(sh: &mut Shared<'_, '_>, first: Send, hops: &mut Vec<Hop>) -> End {
    let key = match &first {
        Send::Inject(port, p) => (sh.record, true, *port, *p),
        Send::Emit(port, p) => (sh.record, false, *port, *p),
    };
    let memo = match sh.topo.arp_memo.get(&key) {
        Some(m) => m,
        None => {
            let mut learned = FlowState::default();
            let mut choices = Choices::default();
            // Noted whether or not this caller asks: a later one may.
            let mut consulted = Consulted {
                reads: Some(Reads::default()),
                ..Consulted::default()
            };
            let mut own = Shared {
                topo: sh.topo,
                state: &mut learned,
                choices: &mut choices,
                record: sh.record,
                consulted: &mut consulted,
            };
            let mut walked = Vec::new();
            let end = exchange(&mut own, first, &mut walked);
            let m = Arc::new(Exchanged {
                end,
                learned,
                chains: consulted.chains,
                guarded: consulted.guarded,
                routers: consulted.routers,
                reads: consulted.reads.unwrap_or_default(),
                hops: walked,
            });
            sh.topo.arp_memo.put(key, m.clone());
            m
        }
    };
    sh.state.merge_learning(&memo.learned);
    for c in &memo.chains {
        sh.consulted.chain(*c);
    }
    for c in &memo.guarded {
        sh.consulted.guarded(*c);
    }
    for r in &memo.routers {
        sh.consulted.router(*r);
    }
    sh.consulted.read_all(&memo.reads);
    hops.extend(memo.hops.iter().cloned());
    memo.end.clone()
}

/// A workload behind `port` received an ARP frame: it notes the sender; to a request
/// for one of its addresses it answers (the reply to send).
fn received(sh: &mut Shared<'_, '_>, port: Uuid, pkt: &Packet) -> Option<Packet> {
    let att = sh.topo.attachment_at(port)?;
    let arp = pkt.arp?;
    sh.state.host_arp_set(att.mac, pkt.tuple.src.ip, arp.sha);
    (arp.request && att.owns(pkt.tuple.dst.ip)).then(|| Packet::arp_reply(pkt, att.mac))
}

/// The MAC workload `from` (behind `port`) sends a packet for `ip` to: from its ARP
/// cache, else what an ARP exchange teaches it. `Err` says why it cannot tell.
pub(crate) fn resolve_from_workload(
    sh: &mut Shared<'_, '_>,
    from: &Attachment,
    port: Uuid,
    ip: Ipv4Addr,
    hops: &mut Vec<Hop>,
) -> Result<MacAddr, End> {
    if from.owns(ip) {
        return Ok(from.mac);
    }
    if let Some(mac) = sh.state.host_arp(from.mac, ip) {
        return Ok(mac);
    }
    let src = from.primary_ip().unwrap_or(Ipv4Addr::UNSPECIFIED);
    let request = Packet::arp_request(from.mac, src, ip);
    let end = exchange_memo(sh, Send::Inject(port, request), hops);
    match sh.state.host_arp(from.mac, ip) {
        Some(mac) => Ok(mac),
        None => Err(unanswered(end, format!("{}: ARP for {ip}", from.name))),
    }
}

/// The end of an exchange that taught nothing, as a drop saying why.
fn unanswered(end: End, what: String) -> End {
    match end {
        End::Unsupported { reason, packet } => End::Unsupported {
            reason: format!("{what}: {reason}"),
            packet,
        },
        End::Dropped { reason, packet } => End::Dropped {
            reason: format!(
                "{what} is not answered: the request or its reply was dropped: {reason}"
            ),
            packet,
        },
        End::Delivered {
            packet, attachment, ..
        } => End::Dropped {
            reason: format!("{what} is not answered ({attachment} does not own it)"),
            packet,
        },
        End::Answered { reason, packet, .. } | End::Consumed { reason, packet } => End::Dropped {
            reason: format!("{what} is not answered ({reason})"),
            packet,
        },
    }
}

impl Walk<'_, '_, '_> {
    /// An ARP frame reaching router `router` through its ingress port.
    pub(super) fn router_arp(&mut self, router: Uuid) -> End {
        let topo = self.topo();
        let Some(port) = self.in_port.and_then(|p| topo.ports.get(&p)) else {
            return self.drop(Some(router), "an ARP frame with no ingress port");
        };
        let (Some((ip, _)), Some(mac)) = (Topology::port_ipv4(port), port.port_mac) else {
            return self.drop(Some(router), "ARP on a router port without an address");
        };
        let Some(arp) = self.pkt.arp else {
            return self.drop(Some(router), "not an ARP frame");
        };
        let (spa, tpa) = (self.pkt.tuple.src.ip, self.pkt.tuple.dst.ip);
        if !Topology::port_subnet_contains(port, spa) {
            return self.drop(
                Some(router),
                format!("the router ignores ARP from {spa}, outside the port's network"),
            );
        }
        let gratuitous = spa == tpa && (arp.tha == ZERO_MAC || arp.tha == arp.sha);
        if gratuitous || (!arp.request && tpa == ip && arp.tha == mac) {
            self.sh.state.router_arp_set(router, spa, arp.sha);
            let reason = format!("the router notes {spa} is at {}", arp.sha);
            self.hop(Step::Arp, Some(router), reason.clone());
            return End::Consumed {
                reason,
                packet: self.pkt,
            };
        }
        if !arp.request || tpa != ip {
            return self.drop(Some(router), format!("the router ignores ARP for {tpa}"));
        }
        self.sh.state.router_arp_set(router, spa, arp.sha);
        let reason = format!("the router answers ARP for {tpa}: {mac}");
        self.hop(Step::Answered, Some(router), reason.clone());
        End::Answered {
            reason,
            packet: self.pkt,
            answer: Box::new(super::Answer {
                from_port: port.id,
                packet: Packet::arp_reply(&self.pkt, mac),
            }),
            rejected: false,
        }
    }

    /// `ArpRequestBroker.get`: the router's cache, else an ARP request out `out`.
    pub(super) fn router_resolve(
        &mut self,
        router: Uuid,
        out: Uuid,
        ip: Ipv4Addr,
    ) -> Result<MacAddr, End> {
        if let Some(mac) = self.sh.state.router_arp(router, ip) {
            return Ok(mac);
        }
        let topo = self.topo();
        let port = topo.ports.get(&out);
        let (Some((src, _)), Some(mac)) = (
            port.and_then(Topology::port_ipv4),
            port.and_then(|p| p.port_mac),
        ) else {
            return Err(self.drop(Some(out), "the egress port has no address to ARP from"));
        };
        let mut hops = Vec::new();
        let end = exchange_memo(
            self.sh,
            Send::Emit(out, Packet::arp_request(mac, src, ip)),
            &mut hops,
        );
        let steps = hops.len();
        self.hop(Step::Arp, Some(out), || {
            format!("the router ARPs for {ip} ({steps} steps)")
        });
        match self.sh.state.router_arp(router, ip) {
            Some(mac) => Ok(mac),
            None => {
                let what = format!("ARP for {ip} (midolman drops the packet at the ARP timeout)");
                Err(match unanswered(end, what) {
                    End::Dropped { reason, .. } => self.drop(Some(out), reason),
                    End::Unsupported { reason, .. } => self.unsupported(Some(out), reason),
                    other => other,
                })
            }
        }
    }
}
