//! A router (midolman `simulation/RouterBase.scala`, `Router.scala`, `Icmp.scala`).
//!
//! - Administratively down, it answers with an ICMP admin-prohibited error.
//! - A broadcast frame is an ARP (see [`super::arp`]) or dropped; any other frame must be
//!   addressed to the ingress port's MAC. ARP addressed to it is processed, not routed.
//! - The router's load balancer, if it names one, takes packets for its VIPs and skips
//!   the inbound filter for them (see [`super::l4lb`]).
//! - The inbound filter runs; a `reject` answers ICMP admin prohibited.
//! - The route: the longest destination prefix among the published routes whose source
//!   prefix holds the source (a port's routes are published while the port is linked, or
//!   bound with a workload behind it; each port has a `Local` route to its address), then
//!   the lowest weight; remaining ties are explored (ECMP). No route: ICMP net
//!   unreachable. `Local`: an ICMP echo request is answered, anything else dropped.
//!   `BlackHole`: dropped. `Reject`: ICMP admin prohibited.
//! - To a port without an address, or to the egress port's own address: dropped.
//! - The load balancer translates a member's reply back to its VIP and skips the
//!   outbound filter for it; otherwise the outbound filter runs (with the egress port as
//!   out-port).
//! - The next hop (the route's gateway, else the destination) is resolved: a linked
//!   router port's MAC; on a linked bridge what the bridge knows, else ARP; behind an
//!   exterior port ARP if the next hop is on the port's network, else ICMP (net
//!   unreachable with a gateway, host unreachable without). An ARP nobody answers drops
//!   the packet (midolman's ARP timeout).
//!
//! ICMP errors (`Icmp.IPv4Icmp.icmpAnswer`) go out the ingress port, from its address, to
//! the source of the packet as it entered the router (or, for a port's reject, as it is
//! then), quoting it; none is sent about an ICMP error, to a multicast or broadcast
//! destination, or from a port without an address.

use std::net::Ipv4Addr;

use midonet_translators::model::{Route, RouteType};
use uuid::Uuid;

use super::chain::Stop;
use super::l4lb::Lb;
use super::{Answer, End, Step, Walk};
use crate::packet::{icmp, FlowTuple, IcmpMessage, Packet, Protocol, Quoted, SocketV4};
use crate::topology::{contains_len, Topology};

/// How a router resolved a next hop.
pub(super) enum NextHop {
    Mac(midonet_translators::model::MacAddr),
    /// Not resolvable (`getNextHopMac` answers null): the router answers ICMP net
    /// unreachable for a route with a gateway, host unreachable without.
    Unreachable,
}

impl Walk<'_, '_, '_> {
    pub(super) fn router(&mut self, id: Uuid) -> End {
        let topo = self.topo();
        let Some(router) = topo.routers.get(&id) else {
            return self.drop(Some(id), "the router does not exist");
        };
        self.pre_routing = self.pkt;
        self.hop(Step::Router, Some(id), || {
            topo.name_of(id).unwrap_or_else(|| format!("router {id}"))
        });
        if router.admin_state_up == Some(false) {
            self.tag(id);
            let pre = self.pre_routing;
            return self.icmp_error(
                self.in_port,
                pre,
                icmp::UNREACH_FILTER_PROHIB,
                "the router is administratively down".into(),
            );
        }
        let in_mac = self
            .in_port
            .and_then(|p| topo.ports.get(&p))
            .and_then(|p| p.port_mac);
        if self.pkt.eth_dst == crate::packet::BROADCAST {
            return match self.pkt.arp {
                Some(_) => self.router_arp(id),
                None => self.drop(Some(id), "a broadcast frame that is not ARP"),
            };
        }
        self.tag(id);
        if Some(self.pkt.eth_dst) != in_mac {
            return self.drop(
                Some(id),
                "the frame is not addressed to the router port's MAC",
            );
        }
        if self.pkt.arp.is_some() {
            return self.router_arp(id);
        }
        self.out_port = None;
        match self.lb_inbound(id, router.load_balancer_id) {
            Lb::Continue => {}
            Lb::Accept => return self.route(id),
            Lb::Drop(why) => return self.drop(Some(id), why),
            Lb::Refused(end) => return end,
        }
        match self.filter(router.inbound_filter_id, "router inbound filter") {
            Ok(()) => {}
            Err(stop) => return self.router_stop(stop),
        }
        self.route(id)
    }

    /// A router's filter stopped the packet: a reject answers ICMP admin prohibited from
    /// the ingress port about the packet as it entered the router (`RouterBase.reject`).
    fn router_stop(&mut self, stop: Stop) -> End {
        match stop {
            Stop::End(end) => end,
            Stop::Dropped(why) => self.drop(Some(self.current_device), why),
            Stop::Rejected(why) => {
                let pre = self.pre_routing;
                self.icmp_error(self.in_port, pre, icmp::UNREACH_FILTER_PROHIB, why)
            }
        }
    }

    /// A router port's reject (its filter, or the port down): ICMP admin prohibited from
    /// the port the packet entered the router through, about the packet as it is now
    /// (`RouterPort.reject`).
    pub(super) fn reject_from_router_port(&mut self, _port: Option<Uuid>, why: &str) -> End {
        let now = self.pkt;
        self.icmp_error(
            self.in_port,
            now,
            icmp::UNREACH_FILTER_PROHIB,
            why.to_string(),
        )
    }

    /// Routing and post-routing (`RouterBase.continueIn`, `postRouting`, `continueOut`).
    fn route(&mut self, router: Uuid) -> End {
        let Some(route) = self.lookup_route(router) else {
            let pre = self.pre_routing;
            let why = format!("no route to {}", self.pkt.tuple.dst.ip);
            return self.icmp_error(self.in_port, pre, icmp::UNREACH_NET, why);
        };
        self.route_hop(router, &route);
        let what = describe_route(&route);
        match route.route_type.unwrap_or(RouteType::Normal) {
            RouteType::Local => return self.local(router, &route),
            RouteType::BlackHole => {
                return self.drop(Some(router), format!("black-hole route {what}"))
            }
            RouteType::Reject => {
                let pre = self.pre_routing;
                let why = format!("reject route {what}");
                return self.icmp_error(self.in_port, pre, icmp::UNREACH_FILTER_PROHIB, why);
            }
            RouteType::Fip64 => {
                return self.unsupported(Some(router), format!("FIP64 route {what}"))
            }
            RouteType::Normal => {}
        }
        let topo = self.topo();
        if let Some(p) = route.next_hop_port {
            self.sh.consulted.read(p);
        }
        let Some(out) = route.next_hop_port.and_then(|p| topo.ports.get(&p)) else {
            return self.drop(Some(router), format!("route {what} has no next-hop port"));
        };
        let Some((out_ip, _)) = Topology::port_ipv4(out) else {
            return self.drop(Some(out.id), "the egress port has no IPv4 address");
        };
        if self.pkt.tuple.dst.ip == out_ip {
            return self.drop(
                Some(out.id),
                "addressed to the egress port, which has no Local route",
            );
        }
        self.out_port = Some(out.id);
        let r = topo.routers.get(&router);
        // `RouterBase.postRouting`: whatever the load balancer decides but CONTINUE
        // skips the outbound filter.
        match self.lb_outbound(router, r.and_then(|r| r.load_balancer_id)) {
            Lb::Continue => {}
            Lb::Accept | Lb::Drop(_) => return self.forward_to(router, &route, out.id),
            Lb::Refused(end) => return end,
        }
        let filtered = match r {
            Some(r) => self.filter(r.outbound_filter_id, "router outbound filter"),
            None => Ok(()),
        };
        if let Err(stop) = filtered {
            return self.router_stop(stop);
        }
        self.forward_to(router, &route, out.id)
    }

    /// Resolves the next hop and sends the packet out `out`.
    fn forward_to(&mut self, router: Uuid, route: &Route, out: Uuid) -> End {
        let next = next_hop_ip(route, self.pkt.tuple.dst.ip);
        match self.next_hop_mac(router, out, next) {
            Err(end) => end,
            Ok(NextHop::Unreachable) => {
                let code = if has_gateway(route) {
                    icmp::UNREACH_NET
                } else {
                    icmp::UNREACH_HOST
                };
                let pre = self.pre_routing;
                let why = format!("the next hop {next} cannot be resolved from its port");
                self.icmp_error(self.in_port, pre, code, why)
            }
            Ok(NextHop::Mac(mac)) => {
                self.hop(Step::Arp, Some(out), || format!("{next} is at {mac}"));
                if let Some(m) = self.topo().ports.get(&out).and_then(|p| p.port_mac) {
                    self.pkt.eth_src = m;
                }
                self.pkt.eth_dst = mac;
                self.port_egress(out)
            }
        }
    }

    fn route_hop(&mut self, router: Uuid, route: &Route) {
        let detail = || format!("route {}", describe_route(route));
        self.hop_with(Step::Route, Some(router), detail, |h| {
            h.route = Some(route.id)
        });
    }

    /// A `Local` route: the router answers an ICMP echo request and drops anything else.
    fn local(&mut self, router: Uuid, route: &Route) -> End {
        let is_echo = self
            .pkt
            .tuple
            .icmp
            .is_some_and(|m| m.icmp_type == icmp::ECHO_REQUEST);
        if !is_echo {
            let why = format!(
                "addressed to the router ({}): only an ICMP echo request is answered",
                describe_route(route)
            );
            return self.drop(Some(router), why);
        }
        match self.echo_reply(router) {
            Some(answer) => {
                let reason = format!(
                    "the router answers the echo request to {}",
                    self.pkt.tuple.dst.ip
                );
                self.hop(Step::Answered, Some(router), reason.clone());
                End::Answered {
                    reason,
                    packet: self.pkt,
                    answer: Box::new(answer),
                    rejected: false,
                }
            }
            None => {
                let name = self
                    .topo()
                    .name_of(router)
                    .unwrap_or_else(|| format!("router {router}"));
                let reason = format!(
                    "{name} takes the echo request to {} but cannot send a reply back",
                    self.pkt.tuple.dst.ip
                );
                self.hop(Step::Answered, Some(router), reason.clone());
                End::Consumed {
                    reason,
                    packet: self.pkt,
                }
            }
        }
    }

    /// `Router.sendIcmpEchoReply` and `sendIpPacket`: the reply is routed, its next hop
    /// resolved, and the router's outbound filter run on it without flow state; only the
    /// source address that filter leaves is kept.
    fn echo_reply(&mut self, router: Uuid) -> Option<Answer> {
        let topo = self.topo();
        let t = self.pkt.tuple;
        let mut reply = Packet::ip(self.pkt.eth_dst, self.pkt.eth_src, t.reversed(), 0);
        let saved = std::mem::replace(&mut self.pkt, reply);
        let route = self.lookup_route(router);
        self.pkt = saved;
        let route =
            route.filter(|r| r.route_type.unwrap_or(RouteType::Normal) == RouteType::Normal)?;
        if let Some(p) = route.next_hop_port {
            self.sh.consulted.read(p);
        }
        let out = route.next_hop_port.and_then(|p| topo.ports.get(&p))?;
        let (out_ip, _) = Topology::port_ipv4(out)?;
        if reply.tuple.dst.ip == out_ip {
            return None;
        }
        let next = next_hop_ip(&route, reply.tuple.dst.ip);
        let mac = match self.next_hop_mac(router, out.id, next) {
            Ok(NextHop::Mac(m)) => m,
            _ => return None,
        };
        reply.eth_src = out.port_mac?;
        reply.eth_dst = mac;
        let filter = topo.routers.get(&router).and_then(|r| r.outbound_filter_id);
        let src = self.scratch_filter(reply, out.id, filter)?;
        reply.tuple.src.ip = src;
        Some(Answer {
            from_port: out.id,
            packet: reply,
        })
    }

    /// Runs `chain` on `pkt` as a generated packet leaving through `out`, without flow
    /// state (`sendIpPacket`'s own packet context); the source address it leaves, if it
    /// accepts.
    fn scratch_filter(&mut self, pkt: Packet, out: Uuid, chain: Option<Uuid>) -> Option<Ipv4Addr> {
        let state = std::mem::take(&mut *self.sh.state);
        let generated = self.generated;
        let forward = self.forward;
        let result = self.branch(|w| {
            w.pkt = pkt;
            w.in_port = None;
            w.out_port = Some(out);
            w.generated = true;
            w.forward = None;
            w.filter(chain, "router outbound filter (generated packet)")
                .ok()
                .map(|()| w.pkt.tuple.src.ip)
        });
        self.generated = generated;
        self.forward = forward;
        *self.sh.state = state;
        result
    }

    /// `Router.getNextHopMac`.
    pub(super) fn next_hop_mac(
        &mut self,
        router: Uuid,
        out: Uuid,
        ip: Ipv4Addr,
    ) -> Result<NextHop, End> {
        let topo = self.topo();
        self.sh.consulted.read(out);
        let Some(port) = topo.ports.get(&out) else {
            return Ok(NextHop::Unreachable);
        };
        if let Some(&peer_id) = topo.peers.get(&out) {
            // What the router peeks at: the peer port and the bridge behind it.
            self.sh.consulted.read(peer_id);
            if let Some(p) = topo.ports.get(&peer_id) {
                self.sh.consulted.read(p.parent);
            }
        }
        if let Some(peer) = topo.peers.get(&out).and_then(|p| topo.ports.get(p)) {
            let known = match peer.port_type {
                midonet_translators::model::PortType::Router => peer.port_mac,
                midonet_translators::model::PortType::Bridge => topo.bridge_knows(peer.parent, ip),
            };
            if let Some(mac) = known {
                return Ok(NextHop::Mac(mac));
            }
        } else if !Topology::port_subnet_contains(port, ip) {
            // An exterior port ARPs only on its own network.
            return Ok(NextHop::Unreachable);
        }
        self.router_resolve(router, out, ip).map(NextHop::Mac)
    }

    /// The route `lookup` picks for the packet (`RouteBalancer.lookup`).
    pub(super) fn lookup_route(&mut self, router: Uuid) -> Option<Route> {
        let topo = self.topo();
        let (src, dst) = (self.pkt.tuple.src.ip, self.pkt.tuple.dst.ip);
        self.sh.consulted.router(router);
        self.sh.consulted.read_lookup(router, dst);
        let implicit = topo.implicit_local_routes(router);
        let matching: Vec<&Route> = topo
            .routes
            .get(&router)
            .into_iter()
            .flatten()
            .chain(implicit.as_ref())
            .filter(|r| {
                contains_len(r.dst_network_addr, r.dst_network_length, dst)
                    && contains_len(r.src_network_addr, r.src_network_length, src)
                    && topo.route_published(router, r)
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
        best.sort_by_key(|r| (r.id, r.next_hop_port));
        let pick = if best.len() > 1 {
            self.sh.choices.choose(best.len())
        } else {
            0
        };
        best.get(pick).map(|r| (*r).clone())
    }

    /// `Icmp.IPv4Icmp.icmpAnswer`: an ICMP error of type unreachable and `code` about
    /// `about`, out `port` (the ingress router port); dropped without one when
    /// `canSend` refuses.
    pub(super) fn icmp_error(
        &mut self,
        port: Option<Uuid>,
        about: Packet,
        code: u8,
        why: String,
    ) -> End {
        let topo = self.topo();
        let device = Some(self.current_device);
        if let Some(p) = port {
            self.sh.consulted.read(p);
        }
        let from = port.and_then(|p| topo.ports.get(&p));
        let Some((port, (ip, len), mac)) =
            from.and_then(|p| Some((p.id, Topology::port_ipv4(p)?, p.port_mac?)))
        else {
            return self.drop(
                device,
                format!("{why} (no ICMP error: the port has no address)"),
            );
        };
        if let Some(no) = cannot_send(&about, ip, len) {
            return self.drop(device, format!("{why} (no ICMP error: {no})"));
        }
        let quoted = Quoted {
            protocol: about.tuple.protocol,
            src: about.tuple.src,
            dst: about.tuple.dst,
        };
        let msg = IcmpMessage {
            icmp_type: icmp::UNREACH,
            code,
            about: Some(quoted),
        };
        let error = FlowTuple {
            protocol: Protocol::Icmp,
            src: SocketV4::new(ip, 0),
            dst: SocketV4::new(about.tuple.src.ip, 0),
            icmp: Some(msg),
        };
        let reason = format!("{why}: the router answers ICMP {msg} from {ip}");
        self.hop(Step::Answered, device, reason.clone());
        End::Answered {
            reason,
            packet: self.pkt,
            answer: Box::new(Answer {
                from_port: port,
                packet: Packet::ip(mac, about.eth_src, error, 0),
            }),
            rejected: true,
        }
    }
}

/// Why no ICMP error may be sent about `about` (RFC 1812 4.3.2.7, `Icmp.canSend`), if
/// none may; `ip/len` is the answering port's address.
fn cannot_send(about: &Packet, ip: Ipv4Addr, len: u8) -> Option<&'static str> {
    let dst = about.tuple.dst.ip;
    let broadcast = u32::from(ip) | !crate::topology::prefix_mask(len);
    if about.is_arp() {
        Some("it is not IPv4")
    } else if about.tuple.icmp_error().is_some() {
        Some("it is about an ICMP error")
    } else if dst.is_multicast() {
        Some("the destination is multicast")
    } else if u32::from(dst) == broadcast && len < 32 {
        Some("the destination is the port network's broadcast address")
    } else if about.eth_dst.is_multicast() {
        Some("the frame was broadcast or multicast")
    } else if dst == Ipv4Addr::BROADCAST || about.tuple.src.ip == Ipv4Addr::BROADCAST {
        Some("the packet is an all-hosts broadcast")
    } else {
        None
    }
}

/// Whether a route names a gateway (neither 0.0.0.0 nor 255.255.255.255, which MidoNet
/// uses for "none").
fn has_gateway(route: &Route) -> bool {
    route
        .next_hop_gateway
        .is_some_and(|g| !g.is_unspecified() && g != Ipv4Addr::BROADCAST)
}

/// The address a route sends to: its gateway, else the destination itself.
fn next_hop_ip(route: &Route, dst: Ipv4Addr) -> Ipv4Addr {
    match route.next_hop_gateway {
        Some(g) if has_gateway(route) => g,
        _ => dst,
    }
}

pub(super) fn describe_route(r: &Route) -> String {
    let dst = match (r.dst_network_addr, r.dst_network_length) {
        (Some(a), Some(l)) => format!("{a}/{l}"),
        _ => "0.0.0.0/0".into(),
    };
    let kind = match r.route_type.unwrap_or(RouteType::Normal) {
        RouteType::Normal => String::new(),
        t => format!(" ({t})"),
    };
    match r.next_hop_gateway {
        Some(g) if !g.is_unspecified() => format!("{dst} via {g}{kind}"),
        _ => format!("{dst}{kind}"),
    }
}
