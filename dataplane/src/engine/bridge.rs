//! A bridge (midolman `simulation/Bridge.scala`).
//!
//! A frame from a multicast source is dropped, as is every frame while the bridge is
//! administratively down. The inbound filter runs; the source MAC is learned on the
//! ingress port whatever the filter decided (unless it is the MAC of a linked router
//! port). Then:
//! - a broadcast ARP request for an address the bridge knows (a linked router port's, or
//!   its ARP table's) is answered by the bridge itself, out the ingress port;
//! - a broadcast ARP for a linked router port's address goes to that router port;
//! - other multicast and broadcast frames, and unicast frames to an unknown MAC, are
//!   flooded: a copy to every exterior (bound) port but the ingress one;
//! - a unicast frame goes to the interior port linked to the router port with that MAC,
//!   else to the port the MAC table names (learned, else static), dropped if that is the
//!   ingress port.
//!
//! The outbound filter runs once before the frame leaves (it sees an out-port only for a
//! unicast), then each copy leaves through its port.

use midonet_translators::model::MacAddr;
use uuid::Uuid;

use super::chain::Stop;
use super::{Answer, End, Step, Walk};
use crate::packet::Packet;
use crate::reads::Key;

/// Where a bridge sends a frame.
enum Forward {
    Port(Uuid, &'static str),
    Flood,
}

impl Walk<'_, '_, '_> {
    pub(super) fn bridge(&mut self, id: Uuid) -> End {
        let topo = self.topo();
        let Some(bridge) = topo.bridges.get(&id) else {
            return self.drop(Some(id), "the bridge does not exist");
        };
        self.tag(id);
        self.hop(Step::Bridge, Some(id), || {
            topo.name_of(id).unwrap_or_else(|| format!("bridge {id}"))
        });
        if self.pkt.eth_src.is_multicast() {
            return self.drop(Some(id), "a frame from a multicast source MAC");
        }
        if bridge.admin_state_up == Some(false) {
            return self.drop(Some(id), "the bridge is administratively down");
        }
        self.out_port = None;
        let filtered = self.filter(bridge.inbound_filter_id, "bridge inbound filter");
        if !matches!(filtered, Err(Stop::End(_))) {
            self.learn_source(id);
        }
        match filtered {
            Ok(()) => {}
            Err(Stop::End(end)) => return end,
            // A bridge answers a rejected frame with nothing.
            Err(Stop::Dropped(why) | Stop::Rejected(why)) => return self.drop(Some(id), why),
        }
        let forward = match self.pkt.arp {
            Some(arp) if self.pkt.eth_dst.is_multicast() => {
                match self.bridge_arp(id, arp.request) {
                    Ok(f) => f,
                    Err(end) => return end,
                }
            }
            _ if self.pkt.eth_dst.is_multicast() => Forward::Flood,
            _ => match self.unicast(id) {
                Ok(f) => f,
                Err(end) => return end,
            },
        };
        if let Forward::Port(p, how) = forward {
            self.out_port = Some(p);
            let dst = self.pkt.eth_dst;
            self.hop(Step::Bridge, Some(id), || {
                format!("{dst} → port {p} ({how})")
            });
        }
        match self.filter(bridge.outbound_filter_id, "bridge outbound filter") {
            Ok(()) => {}
            Err(Stop::End(end)) => return end,
            Err(Stop::Dropped(why) | Stop::Rejected(why)) => return self.drop(Some(id), why),
        }
        match forward {
            Forward::Port(p, _) => self.port_egress(p),
            Forward::Flood => self.flood(id),
        }
    }

    /// `Bridge.updateFlowCount`: the source MAC is learned on the ingress port.
    fn learn_source(&mut self, bridge: Uuid) {
        let src = self.pkt.eth_src;
        if let Some(port) = self.in_port {
            if !self.is_router_mac(bridge, src) {
                self.sh.state.learn(bridge, src, port);
            }
        }
    }

    /// `Bridge.handleL2Unicast`.
    fn unicast(&mut self, bridge: Uuid) -> Result<Forward, End> {
        let topo = self.topo();
        let dst = self.pkt.eth_dst;
        if let Some(p) = topo.logical_port_of_mac(bridge, dst) {
            return Ok(Forward::Port(p, "MAC of a linked router port"));
        }
        let found = if dst == self.pkt.eth_src {
            self.in_port.map(|p| (p, "its own source"))
        } else if let Some(p) = self.sh.state.learned(bridge, dst) {
            Some((p, "learned MAC"))
        } else {
            let table = topo.mac_tables.get(&bridge).and_then(|t| t.get(&dst));
            table.map(|p| (*p, "MAC table"))
        };
        match found {
            None => Ok(Forward::Flood),
            Some((p, _)) if Some(p) == self.in_port => Err(self.drop(
                Some(bridge),
                format!("{dst} is on the ingress port: a bridge does not send it back"),
            )),
            Some((p, how)) => Ok(Forward::Port(p, how)),
        }
    }

    /// `Bridge.handleArp`: a broadcast ARP frame.
    fn bridge_arp(&mut self, bridge: Uuid, request: bool) -> Result<Forward, End> {
        let topo = self.topo();
        let (spa, tpa) = (self.pkt.tuple.src.ip, self.pkt.tuple.dst.ip);
        if request && spa != tpa {
            if let Some(mac) = topo.bridge_knows(bridge, tpa) {
                return Err(self.answer_arp(bridge, mac));
            }
        }
        // `handleArpGeneric`: an ARP for a linked router port's address goes to it.
        let router_port = topo
            .bridge_knows(bridge, tpa)
            .filter(|_| !request || spa == tpa)
            .and_then(|mac| topo.logical_port_of_mac(bridge, mac));
        Ok(match router_port {
            Some(p) => Forward::Port(p, "ARP for a linked router port"),
            None => Forward::Flood,
        })
    }

    /// The bridge answers an ARP request itself, out the port it came in through.
    fn answer_arp(&mut self, bridge: Uuid, mac: MacAddr) -> End {
        let tpa = self.pkt.tuple.dst.ip;
        let reason = format!("the bridge answers ARP for {tpa}: {mac}");
        self.hop(Step::Answered, Some(bridge), reason.clone());
        let Some(port) = self.in_port else {
            return self.drop(Some(bridge), "an ARP request with no ingress port");
        };
        End::Answered {
            reason,
            packet: self.pkt,
            answer: Box::new(Answer {
                from_port: port,
                packet: Packet::arp_reply(&self.pkt, mac),
            }),
            rejected: false,
        }
    }

    /// `Bridge.multicastAction`: a copy to every exterior port but the ingress one. An
    /// IP frame's copies are each walked (a port's outbound filter may track the
    /// connection or translate); an ARP frame's copies change no state, so only those
    /// to the workloads it is for are walked. What it read (`crate::reads`): which ports
    /// are bound, or for an ARP request without hops recorded, which of them have the
    /// requested address behind them (the hop lists every port).
    fn flood(&mut self, bridge: Uuid) -> End {
        let topo = self.topo();
        self.sh.consulted.read_key(match self.pkt.arp {
            Some(a) if a.request && !self.sh.record => Key::Owner(bridge, self.pkt.tuple.dst.ip),
            _ => Key::Exterior(bridge),
        });
        let ports: Vec<Uuid> = topo
            .exterior_ports(bridge)
            .into_iter()
            .filter(|p| Some(*p) != self.in_port)
            .collect();
        let (dst, n) = (self.pkt.eth_dst, ports.len());
        let detail = move || format!("{dst} flooded to {n} exterior port(s)");
        self.hop_with(Step::Flood, Some(bridge), detail, |h| {
            h.ports = ports.clone()
        });
        let mut ends = Vec::new();
        for p in ports {
            if self.pkt.is_arp() && !self.arp_is_for(p) {
                continue;
            }
            ends.push(self.branch(|w| w.port_egress(p)));
        }
        let delivered = ends.iter().position(|e| matches!(e, End::Delivered { .. }));
        let unsupported = ends
            .iter()
            .position(|e| matches!(e, End::Unsupported { .. }));
        if let Some(i) = delivered.or(unsupported) {
            return ends.swap_remove(i);
        }
        let why: Vec<String> = ends
            .iter()
            .filter_map(|e| match e {
                End::Dropped { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect();
        let mut reason = format!("{} flooded: nobody took it", self.pkt.eth_dst);
        if !why.is_empty() {
            reason = format!("{reason} ({})", why.join("; "));
        }
        self.drop(Some(bridge), reason)
    }

    /// Whether a flooded ARP frame is for the workload behind `port`: a request for one
    /// of its addresses, a reply to its MAC.
    fn arp_is_for(&self, port: Uuid) -> bool {
        let Some(att) = self.topo().attachment_at(port) else {
            return false;
        };
        match self.pkt.arp {
            Some(a) if a.request => att.owns(self.pkt.tuple.dst.ip),
            Some(_) => self.pkt.eth_dst == att.mac,
            None => true,
        }
    }
}
