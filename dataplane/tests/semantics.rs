//! One hand-built topology per semantic of midolman's simulation that the model encodes.
//! Each test names the midolman behaviour (file in `midonet/midonet`) it checks.

use std::net::Ipv4Addr;

use midonet_dataplane::{
    trace, trace_reading, trace_sequence, Attachment, Changes, Hop, Path, Probe, Protocol,
    RuleOrder, Session, SocketV4, Step, Topology, Trace, Verdict,
};
use midonet_translators::model::{
    Bridge, Chain, FlowAction, HostInterfacePort, Ipv4MacPair, LbStatus, LoadBalancer, MacAddr,
    MacPort, NatTarget, Pool, PoolMember, Port, PortGroupPort, PortLink, PortRange, Resource,
    Route, RouteType, Router, Rule, RuleType, Vip,
};
use uuid::Uuid;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}
fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn mac(last: u8) -> MacAddr {
    MacAddr([0x0a, 0, 0, 0, 0, last])
}

const HOST: u128 = 0x900;
const R: u128 = 1;
const B1: u128 = 10;
const B2: u128 = 20;
const RP1: u128 = 11;
const RP2: u128 = 21;
const BP1: u128 = 12;
const BP2: u128 = 22;
const PA: u128 = 13;
const PC: u128 = 14;
const PB: u128 = 23;
const ROUTE1: u128 = 31;
const ROUTE2: u128 = 32;

/// Router R with two bridges: B1 (10.0.1.0/24: pods a .10 and c .11) and B2
/// (10.0.2.0/24: pod b .10), each linked to R through a router port at .1.
struct Net {
    res: Vec<Resource>,
    atts: Vec<Attachment>,
}

fn router_port(router: u128, port: u128, addr: &str, net: &str, m: u8) -> Resource {
    let mut p = Port::router_port(id(router), id(port));
    p.port_address = Some(ip(addr));
    p.network_address = Some(ip(net));
    p.network_length = Some(24);
    p.port_mac = Some(mac(m));
    p.into()
}

fn workload(
    name: &str,
    port: u128,
    m: u8,
    ips: &[&str],
    net: &str,
    gw: &str,
) -> (Resource, Attachment) {
    let iface = format!("if-{name}");
    (
        HostInterfacePort::new(id(HOST), id(port), iface.clone()).into(),
        Attachment {
            name: name.into(),
            host: id(HOST),
            interface: iface,
            mac: mac(m),
            ips: ips.iter().map(|s| ip(s)).collect(),
            subnet: Some(net.parse().unwrap()),
            gateway: Some(ip(gw)),
            networks: Vec::new(),
        },
    )
}

impl Net {
    fn new() -> Net {
        let mut res: Vec<Resource> = vec![
            Router::new(id(R)).into(),
            Bridge::new(id(B1)).into(),
            Bridge::new(id(B2)).into(),
            router_port(R, RP1, "10.0.1.1", "10.0.1.0", 0xf1),
            router_port(R, RP2, "10.0.2.1", "10.0.2.0", 0xf2),
            Port::bridge_port(id(B1), id(BP1)).into(),
            Port::bridge_port(id(B2), id(BP2)).into(),
            PortLink::new(id(BP1), id(RP1)).into(),
            PortLink::new(id(BP2), id(RP2)).into(),
            Route::normal(id(R), id(ROUTE1), "10.0.1.0/24".parse().unwrap(), id(RP1)).into(),
            Route::normal(id(R), id(ROUTE2), "10.0.2.0/24".parse().unwrap(), id(RP2)).into(),
            Port::bridge_port(id(B1), id(PA)).into(),
            Port::bridge_port(id(B1), id(PC)).into(),
            Port::bridge_port(id(B2), id(PB)).into(),
        ];
        let mut atts = Vec::new();
        for (name, port, m, ips, net, gw) in [
            ("a", PA, 0xa, vec!["10.0.1.10"], "10.0.1.0/24", "10.0.1.1"),
            ("c", PC, 0xc, vec!["10.0.1.11"], "10.0.1.0/24", "10.0.1.1"),
            (
                "b",
                PB,
                0xb,
                vec!["10.0.2.10", "192.168.9.9"],
                "10.0.2.0/24",
                "10.0.2.1",
            ),
        ] {
            let (r, a) = workload(name, port, m, &ips, net, gw);
            res.push(r);
            atts.push(a);
        }
        Net { res, atts }
    }

    fn port_mut(&mut self, port: u128) -> &mut Port {
        self.res
            .iter_mut()
            .find_map(|r| match r {
                Resource::Port(p) if p.id == id(port) => Some(p),
                _ => None,
            })
            .unwrap()
    }

    fn bridge_mut(&mut self, b: u128) -> &mut Bridge {
        self.res
            .iter_mut()
            .find_map(|r| match r {
                Resource::Bridge(x) if x.id == id(b) => Some(x),
                _ => None,
            })
            .unwrap()
    }

    /// A chain with `rules` (in evaluation order).
    fn chain(&mut self, chain: u128, rules: Vec<Rule>) {
        self.res.push(Chain::new(id(chain)).into());
        self.res.extend(rules.into_iter().map(Resource::from));
    }

    fn topo(&self) -> Topology {
        Topology::new(self.res.clone(), RuleOrder::Listed, self.atts.clone())
    }

    fn trace(&self, from: &str, to: &str, port: u16, protocol: Protocol) -> Trace {
        trace(
            &self.topo(),
            &Probe::new(from, SocketV4::new(ip(to), port), protocol, 40000),
        )
        .unwrap()
    }

    fn tcp(&self, from: &str, to: &str, port: u16) -> Trace {
        self.trace(from, to, port, Protocol::Tcp)
    }
}

fn rule(chain: u128, n: u128, t: RuleType) -> Rule {
    Rule::new(id(chain), id(n), t)
}

fn reason(t: &Trace) -> String {
    t.paths[0].forward.drop_reason.clone().unwrap_or_default()
}

#[test]
fn bridge_forwards_on_link_and_learns_the_reply_mac() {
    // Bridge.scala: unknown unicast is flooded, the source MAC is learned on ingress.
    let t = Net::new().tcp("a", "10.0.1.11", 80);
    assert!(t.all_work(), "{t:#?}");
    assert_eq!(
        t.paths[0].client_sees,
        Some(SocketV4::new(ip("10.0.1.11"), 80))
    );
}

#[test]
fn router_routes_between_bridges_by_longest_prefix() {
    // Router.scala / RoutingTable: longest destination prefix; next hop MAC by ARP on the
    // peer bridge, answered by the workload that owns the address.
    let mut net = Net::new();
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(t.all_work(), "{t:#?}");
    // A more specific black-hole route wins over the /24.
    let mut bh = Route::normal(id(R), id(40), "10.0.2.10/32".parse().unwrap(), id(RP2));
    bh.route_type = Some(RouteType::BlackHole);
    net.res.push(bh.into());
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(!t.delivered());
    assert!(reason(&t).contains("black-hole"), "{}", reason(&t));
}

#[test]
fn a_routing_step_names_its_route_and_a_trace_reads_back_from_json() {
    let net = Net::new();
    let t = net.tcp("a", "10.0.2.10", 80);
    let forward = &t.paths[0].forward;
    let routed: Vec<&Hop> = forward
        .hops
        .iter()
        .filter(|h| h.step == Step::Route)
        .collect();
    assert_eq!(routed.len(), 1, "{forward:#?}");
    assert_eq!(routed[0].route, Some(id(ROUTE2)));
    assert_eq!(routed[0].rule, None);
    let json = serde_json::to_value(routed[0]).unwrap();
    assert_eq!(json["route"], id(ROUTE2).to_string());
    assert!(json.get("rule").is_none(), "{json}");
    // The reply is routed by the other route.
    let reply = t.paths[0].reply.as_ref().unwrap();
    assert!(reply
        .hops
        .iter()
        .any(|h| h.step == Step::Route && h.route == Some(id(ROUTE1))));
    let back: Trace = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
    assert_eq!(back, t);
}

#[test]
fn a_source_matched_route_applies_only_to_its_sources() {
    // RoutingTable: routes whose source prefix does not contain the source are skipped;
    // among equal prefixes the lowest weight wins.
    let mut net = Net::new();
    let mut reject = Route::normal(id(R), id(41), "10.0.2.0/24".parse().unwrap(), id(RP2));
    reject.route_type = Some(RouteType::Reject);
    reject.src_network_addr = Some(ip("10.0.1.11"));
    reject.src_network_length = Some(32);
    reject.weight = Some(10);
    net.res.push(reject.into());
    assert!(net.tcp("a", "10.0.2.10", 80).all_work());
    let t = net.tcp("c", "10.0.2.10", 80);
    assert!(reason(&t).contains("reject"), "{}", reason(&t));
}

#[test]
fn next_hop_gateway_and_the_bridge_arp_table() {
    // Router.getNextHopMac: the route's gateway is resolved, not the destination; the
    // bridge answers ARP from its ARP table (Bridge.scala, ip4_mac_table) before flooding.
    let mut net = Net::new();
    let mut via = Route::normal(id(R), id(42), "192.168.9.9/32".parse().unwrap(), id(RP2));
    via.next_hop_gateway = Some(ip("10.0.2.10"));
    net.res.push(via.into());
    assert!(net.tcp("a", "192.168.9.9", 80).all_work());
    // A stale ARP entry sends the frame to a MAC nobody on the bridge has.
    net.res.push(
        midonet_translators::model::Ipv4MacPair::new(id(B2), ip("10.0.2.10"), mac(0x77)).into(),
    );
    let t = net.tcp("a", "192.168.9.9", 80);
    assert!(!t.delivered());
    assert!(reason(&t).contains("nobody took it"), "{}", reason(&t));
}

const R2: u128 = 2;
const B3: u128 = 50;
const LINK_A: u128 = 51;
const LINK_B: u128 = 52;
const RP3: u128 = 53;
const BP3: u128 = 54;
const PD: u128 = 55;
const TO_R2: u128 = 56;
const TO_R: u128 = 57;
const R2_LAN: u128 = 58;

/// `Net` plus a second router R2 linked port to port with R over 169.254.0.0/30 (R's
/// link port LINK_A at .1, R2's LINK_B at .2), with bridge B3 (10.0.3.0/24, pod d .10) behind
/// R2. Each router routes the other's LAN via the peer link address.
fn linked_routers() -> Net {
    let mut net = Net::new();
    let mut r2_link = Route::normal(id(R2), id(TO_R), "10.0.1.0/24".parse().unwrap(), id(LINK_B));
    r2_link.next_hop_gateway = Some(ip("169.254.0.1"));
    let mut r_link = Route::normal(id(R), id(TO_R2), "10.0.3.0/24".parse().unwrap(), id(LINK_A));
    r_link.next_hop_gateway = Some(ip("169.254.0.2"));
    net.res.extend([
        Router::new(id(R2)).into(),
        Bridge::new(id(B3)).into(),
        router_port(R, LINK_A, "169.254.0.1", "169.254.0.0", 0xa1),
        router_port(R2, LINK_B, "169.254.0.2", "169.254.0.0", 0xa2),
        router_port(R2, RP3, "10.0.3.1", "10.0.3.0", 0xf3),
        Port::bridge_port(id(B3), id(BP3)).into(),
        Port::bridge_port(id(B3), id(PD)).into(),
        PortLink::new(id(LINK_A), id(LINK_B)).into(),
        PortLink::new(id(BP3), id(RP3)).into(),
        Route::normal(id(R2), id(R2_LAN), "10.0.3.0/24".parse().unwrap(), id(RP3)).into(),
        r_link.into(),
        r2_link.into(),
    ]);
    net.port_mut(LINK_A).network_length = Some(30);
    net.port_mut(LINK_B).network_length = Some(30);
    let (r, a) = workload("d", PD, 0xd, &["10.0.3.10"], "10.0.3.0/24", "10.0.3.1");
    net.res.push(r);
    net.atts.push(a);
    net
}

fn has_hop(hops: &[Hop], step: Step, device: u128, detail: &str) -> bool {
    hops.iter()
        .any(|h| h.step == step && h.device == Some(id(device)) && h.detail.contains(detail))
}

#[test]
fn two_routers_linked_port_to_port_forward_both_ways() {
    // Router.getNextHopMac: behind an interior port linked to a router port, the next hop
    // is the peer port's MAC (no ARP); Port.emitCommon: the frame leaving the interior
    // port enters its peer, and the peer's router routes it (RouterBase.process).
    // midolman: PingRouterWithNat, IcmpErrorNatTest, NatLeaserExpirationTest.
    let net = linked_routers();
    let t = net.tcp("a", "10.0.3.10", 80);
    assert!(t.all_work(), "{t:#?}");
    let p = &t.paths[0];
    assert_eq!(p.forward.delivered_to.as_deref(), Some("d"));
    let fwd = &p.forward.hops;
    assert!(has_hop(
        fwd,
        Step::Arp,
        LINK_A,
        "169.254.0.2 is at 0a:00:00:00:00:a2"
    ));
    assert!(has_hop(fwd, Step::PortIngress, LINK_B, "enters port"));
    assert!(fwd
        .iter()
        .any(|h| h.step == Step::Route && h.route == Some(id(R2_LAN))));
    let back = &p.reply.as_ref().unwrap().hops;
    assert!(has_hop(
        back,
        Step::Arp,
        LINK_B,
        "169.254.0.1 is at 0a:00:00:00:00:a1"
    ));
    assert!(has_hop(back, Step::PortIngress, LINK_A, "enters port"));
    // And from d's side.
    let t = net.trace("d", "10.0.1.10", 0, Protocol::Icmp);
    assert!(t.all_work(), "{t:#?}");
    assert_eq!(t.paths[0].forward.delivered_to.as_deref(), Some("a"));
}

#[test]
fn a_broken_link_between_two_routers_fails_the_oracle() {
    // Without the port link, LINK_A and LINK_B are neither linked nor bound: their routes are not
    // published (RouterMapper), so R has no route to d: ICMP net unreachable.
    let mut net = linked_routers();
    net.res
        .retain(|r| !matches!(r, Resource::PortLink(l) if l.parent == id(LINK_A)));
    let t = net.tcp("a", "10.0.3.10", 80);
    assert!(!t.delivered(), "{t:#?}");
    assert_eq!(t.paths[0].forward.verdict, Verdict::Rejected);
    let icmp = t.paths[0].forward.answered_with.unwrap();
    assert_eq!(icmp.src.ip, ip("10.0.1.1"), "{t:#?}");
    assert!(
        reason(&t).contains("no route to 10.0.3.10"),
        "{}",
        reason(&t)
    );
    // Without R2's route back, d receives the packet but its reply has no route home.
    let mut net = linked_routers();
    net.res
        .retain(|r| !matches!(r, Resource::Route(x) if x.id == id(TO_R)));
    let t = net.tcp("a", "10.0.3.10", 80);
    assert!(t.delivered(), "{t:#?}");
    assert!(!t.all_work(), "{t:#?}");
    // A route that sends d's LAN back over the link makes a loop: dropped after 12 port
    // ingresses (Simulator.MaxDevicesTraversed), not an endless walk.
    let mut net = linked_routers();
    for r in &mut net.res {
        if let Resource::Route(x) = r {
            if x.id == id(R2_LAN) {
                x.next_hop_port = Some(id(LINK_B));
                x.next_hop_gateway = Some(ip("169.254.0.1"));
            }
        }
    }
    let t = net.tcp("a", "10.0.3.10", 80);
    assert_eq!(t.paths[0].forward.verdict, Verdict::Dropped, "{t:#?}");
    assert!(reason(&t).contains("too many devices"), "{}", reason(&t));
}

#[test]
fn admin_state_down_drops() {
    // Port.scala / Bridge.scala: a port or device that is administratively down drops.
    let mut net = Net::new();
    net.port_mut(PB).admin_state_up = Some(false);
    // A down port answers no ARP; with b in the ARP table the frame reaches the port.
    assert!(reason(&net.tcp("a", "10.0.2.10", 80)).contains("ARP for 10.0.2.10"));
    net.res.push(
        midonet_translators::model::Ipv4MacPair::new(id(B2), ip("10.0.2.10"), mac(0xb)).into(),
    );
    assert!(reason(&net.tcp("a", "10.0.2.10", 80)).contains("administratively down"));
    let mut net = Net::new();
    net.bridge_mut(B1).admin_state_up = Some(false);
    assert!(!net.tcp("a", "10.0.1.11", 80).delivered());
}

#[test]
fn port_inbound_filter_matches_protocol() {
    // Port.scala ingress: the port's inbound filter runs first; Condition.nwProto.
    let mut net = Net::new();
    let mut drop_udp = rule(100, 101, RuleType::Drop);
    drop_udp.nw_proto = Some(17);
    net.chain(100, vec![drop_udp]);
    net.port_mut(PA).inbound_filter_id = Some(id(100));
    assert!(net.tcp("a", "10.0.2.10", 53).all_work());
    assert!(!net.trace("a", "10.0.2.10", 53, Protocol::Udp).delivered());
}

#[test]
fn inversion_of_a_field_and_of_the_whole_condition() {
    // Condition.matches: `invNwDst` negates one field, `condInvert` the conjunction.
    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.dl_type = Some(0x0800);
    r.nw_dst_address = Some(ip("10.0.2.0"));
    r.nw_dst_length = Some(24);
    r.condition.inv_nw_dst = Some(true);
    net.chain(100, vec![r]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(t.delivered(), "{t:#?}");
    // The filter is stateless: the reply, to a 10.0.1.x address, is dropped on its way
    // back into B1.
    assert!(!t.all_work());
    assert!(!net.tcp("a", "10.0.1.11", 80).delivered());

    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.tp_dst = Some(PortRange::single(80));
    r.condition.cond_invert = Some(true);
    net.chain(100, vec![r]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    // The inverted condition holds for ARP too (no port 80 there): a cannot even
    // resolve its gateway.
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(reason(&t).contains("ARP for 10.0.1.1"), "{}", reason(&t));
}

#[test]
fn arp_crosses_filters_like_any_frame() {
    // Bridge.scala: ARP requests pass the bridge's inbound filter before the bridge
    // answers them; a rule without `dlType` sees them (nwDst = the target address).
    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.nw_dst_address = Some(ip("10.0.1.1"));
    r.nw_dst_length = Some(32);
    net.chain(100, vec![r]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(!t.delivered());
    assert!(reason(&t).contains("ARP for 10.0.1.1"), "{}", reason(&t));
    // Restricted to IPv4, the rule leaves ARP alone.
    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.dl_type = Some(0x0800);
    r.nw_dst_address = Some(ip("10.0.1.1"));
    r.nw_dst_length = Some(32);
    net.chain(100, vec![r]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    assert!(net.tcp("a", "10.0.2.10", 80).all_work());
}

#[test]
fn port_filters_see_their_own_port() {
    // Port.scala: a port sets the packet's in-port before its inbound filter (and its
    // out-port before its outbound filter).
    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.condition.in_ports = Some(vec![id(PA)]);
    net.chain(100, vec![r]);
    net.port_mut(PA).inbound_filter_id = Some(id(100));
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(!t.delivered());
    assert!(reason(&t).contains("port inbound filter"), "{}", reason(&t));
    // The same rule on the bridge sees the ingress port too.
    net.port_mut(PA).inbound_filter_id = None;
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    assert!(!net.tcp("a", "10.0.2.10", 80).delivered());
    assert!(net.tcp("c", "10.0.2.10", 80).all_work());
    // An outbound filter sees its port as the out-port.
    let mut net = Net::new();
    let mut r = rule(100, 101, RuleType::Drop);
    r.dl_type = Some(0x0800);
    r.condition.out_ports = Some(vec![id(PB)]);
    net.chain(100, vec![r]);
    net.port_mut(PB).outbound_filter_id = Some(id(100));
    assert!(!net.tcp("a", "10.0.2.10", 80).delivered());
}

#[test]
fn jump_and_return() {
    // JumpRule: the target chain's accept/drop/reject decide; return and running out
    // continue after the jump.
    let mut net = Net::new();
    let mut ret = rule(200, 201, RuleType::Return);
    ret.tp_dst = Some(PortRange::single(80));
    let mut drop_ip = rule(200, 202, RuleType::Drop);
    drop_ip.dl_type = Some(0x0800);
    net.chain(200, vec![ret, drop_ip]);
    net.chain(
        100,
        vec![
            Rule::jump(id(100), id(101), id(200)),
            rule(100, 102, RuleType::Accept),
        ],
    );
    net.bridge_mut(B1).inbound_filter_id = Some(id(100));
    assert!(net.tcp("a", "10.0.2.10", 80).delivered());
    let t = net.tcp("a", "10.0.2.10", 81);
    assert!(
        reason(&t).contains("dropped by bridge inbound filter"),
        "{}",
        reason(&t)
    );
}

/// B1's inbound filter: `[rev_dnat (accept), dnat 10.9.9.9:80 → targets (accept)]`.
fn load_balancer(net: &mut Net, targets: &[&str]) {
    let mut rev = rule(300, 301, RuleType::RevDnat);
    rev.flow_action = Some(FlowAction::Accept);
    let mut dnat = rule(300, 302, RuleType::Dnat);
    dnat.flow_action = Some(FlowAction::Accept);
    dnat.nw_dst_address = Some(ip("10.9.9.9"));
    dnat.nw_dst_length = Some(32);
    dnat.tp_dst = Some(PortRange::single(80));
    dnat.nat_targets = Some(
        targets
            .iter()
            .map(|t| NatTarget::to(ip(t), Some(8080)))
            .collect(),
    );
    net.chain(300, vec![rev, dnat]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(300));
}

#[test]
fn dnat_explores_every_target_and_rev_dnat_restores_the_source() {
    // NatState.applyDnat picks a target at random (chooseRandomNatTarget): every target
    // is a path. ReverseNatRule: the reply's source becomes the original destination.
    let mut net = Net::new();
    load_balancer(&mut net, &["10.0.2.10", "10.0.1.11"]);
    let t = net.tcp("a", "10.9.9.9", 80);
    let reached: Vec<String> = t
        .candidates()
        .into_iter()
        .map(|(n, s)| format!("{n} {s}"))
        .collect();
    assert_eq!(reached, vec!["b 10.0.2.10:8080", "c 10.0.1.11:8080"]);
    assert!(t.all_work(), "{t:#?}");
    for p in &t.paths {
        assert_eq!(p.client_sees, Some(SocketV4::new(ip("10.9.9.9"), 80)));
    }
}

#[test]
fn rules_after_a_continuing_dnat_see_the_rewritten_destination() {
    // NatRule with flowAction continue: the chain goes on with the translated packet, so
    // a later rule on the new destination (and only on it) matches.
    let mut net = Net::new();
    let mut dnat = rule(300, 301, RuleType::Dnat);
    dnat.flow_action = Some(FlowAction::Continue);
    dnat.nw_dst_address = Some(ip("10.9.9.9"));
    dnat.nw_dst_length = Some(32);
    dnat.nat_targets = Some(vec![NatTarget::to(ip("10.0.2.10"), Some(8080))]);
    let mut drop_old = rule(300, 302, RuleType::Drop);
    drop_old.nw_dst_address = Some(ip("10.9.9.9"));
    drop_old.nw_dst_length = Some(32);
    let mut drop_new = rule(300, 303, RuleType::Drop);
    drop_new.nw_dst_address = Some(ip("10.0.2.10"));
    drop_new.nw_dst_length = Some(32);
    drop_new.tp_dst = Some(PortRange::single(8080));
    net.chain(300, vec![dnat, drop_old, drop_new]);
    net.bridge_mut(B1).inbound_filter_id = Some(id(300));
    let t = net.tcp("a", "10.9.9.9", 80);
    assert!(!t.delivered(), "{t:#?}");
    let dropped_by: Vec<Uuid> = t.paths[0]
        .forward
        .hops
        .iter()
        .filter(|h| h.step == Step::Rule)
        .filter_map(|h| h.rule)
        .collect();
    assert_eq!(dropped_by.last(), Some(&id(303)), "{t:#?}");
    // Straight to the pod on another port: neither drop matches it.
    assert!(net.tcp("a", "10.0.2.10", 80).all_work());
}

#[test]
fn reverse_nat_state_belongs_to_the_device_that_translated() {
    // NatKey carries the device id: a rev_dnat on another device finds nothing, and a
    // reverse rule whose lookup fails does not act (ReverseNatRule.apply).
    let mut net = Net::new();
    load_balancer(&mut net, &["10.0.2.10"]);
    // Move the reverse rule to B2 only: the reply enters B2 first but its state is B1's.
    net.res
        .retain(|r| !matches!(r, Resource::Rule(x) if x.id == id(301)));
    let mut rev = rule(310, 311, RuleType::RevDnat);
    rev.flow_action = Some(FlowAction::Accept);
    net.chain(310, vec![rev]);
    net.bridge_mut(B2).inbound_filter_id = Some(id(310));
    let t = net.tcp("a", "10.9.9.9", 80);
    assert!(t.delivered());
    assert!(!t.all_work());
    assert_eq!(
        t.paths[0].client_sees,
        Some(SocketV4::new(ip("10.0.2.10"), 8080))
    );
}

#[test]
fn match_return_flow_lets_replies_of_tracked_connections_through() {
    // ConnTrackState: a connection is tracked only once a condition asked for its
    // direction (`isForwardFlow`); its return key is recorded where the forward flow
    // leaves the network; Condition.matchReturnFlow matches the reply only.
    let mut net = Net::new();
    let mut replies = rule(400, 401, RuleType::Accept);
    replies.condition.match_return_flow = Some(true);
    // Restricted to IPv4: ARP is not a tracked connection and would be dropped.
    let mut others = rule(400, 402, RuleType::Drop);
    others.dl_type = Some(0x0800);
    net.chain(400, vec![replies, others]);
    net.port_mut(PB).inbound_filter_id = Some(id(400));
    // Nothing on a's way to b asks whether it is a forward flow: not tracked, so b's
    // reply is not a return flow and is dropped.
    let t = net.tcp("a", "10.0.2.10", 80);
    assert!(t.delivered() && !t.all_work(), "{t:#?}");
    // A forward-flow condition on the way out (b's port outbound filter) starts
    // tracking: the reply comes back.
    let mut fwd = rule(410, 411, RuleType::Accept);
    fwd.condition.match_forward_flow = Some(true);
    net.chain(410, vec![fwd]);
    net.port_mut(PB).outbound_filter_id = Some(id(410));
    assert!(net.tcp("a", "10.0.2.10", 80).all_work(), "b answers a");
    assert!(
        !net.tcp("b", "10.0.1.10", 80).delivered(),
        "b cannot start a connection"
    );
}

#[test]
fn port_groups_and_ip_address_groups() {
    // Condition.matchPortGroup: the groups of the port the packet entered the network
    // through; matchIpToGroup: an IP address group's addresses.
    let mut net = Net::new();
    let mut r = rule(500, 501, RuleType::Drop);
    r.condition.port_group = Some(id(0x600));
    net.chain(500, vec![r]);
    net.bridge_mut(B2).inbound_filter_id = Some(id(500));
    let mut topo = net.topo();
    topo.add_port_group_member(id(0x600), id(PA));
    let probe = |from: &str| {
        Probe::new(
            from,
            SocketV4::new(ip("10.0.2.10"), 80),
            Protocol::Tcp,
            40000,
        )
    };
    assert!(!trace(&topo, &probe("a")).unwrap().delivered());
    assert!(trace(&topo, &probe("c")).unwrap().all_work());

    let mut net = Net::new();
    let mut r = rule(500, 501, RuleType::Drop);
    r.condition.ip_addr_group_src = Some(id(0x700));
    net.chain(500, vec![r]);
    net.bridge_mut(B2).inbound_filter_id = Some(id(500));
    let mut topo = net.topo();
    topo.add_ip_addr_group_member(id(0x700), ip("10.0.1.11"));
    assert!(trace(&topo, &probe("a")).unwrap().all_work());
    assert!(!trace(&topo, &probe("c")).unwrap().delivered());
}

#[test]
fn a_drop_on_the_out_ports_group_is_read_through_the_out_port() {
    // Condition.outPortGroup: the groups of the port the device sends the frame out of.
    // B2's outbound filter drops frames out of a member of 0x600, before they reach it:
    // the walk still reads the out-port, so the port leaving the group touches it. B2
    // answers ARP for b and knows b's MAC from its tables, so nothing else of the walk
    // reaches b's port.
    let mut net = Net::new();
    let mut r = rule(500, 501, RuleType::Drop);
    r.condition.out_port_group = Some(id(0x600));
    net.chain(500, vec![r]);
    net.bridge_mut(B2).outbound_filter_id = Some(id(500));
    net.res.extend([
        Ipv4MacPair::new(id(B2), ip("10.0.2.10"), mac(0xb)).into(),
        MacPort::new(id(B2), mac(0xb), id(PB)).into(),
    ]);
    let mut topo = net.topo();
    topo.add(
        Resource::PortGroupPort(PortGroupPort::new(id(0x600), id(PB))),
        RuleOrder::Listed,
    );
    let probe = Probe::new(
        "a",
        SocketV4::new(ip("10.0.2.10"), 80),
        Protocol::Tcp,
        40000,
    );
    let (traced, reads) = trace_reading(&topo, &probe);
    assert!(!traced.unwrap().delivered());
    let member = Resource::PortGroupPort(PortGroupPort::new(id(0x600), id(PB)));
    let mut left = Changes::default();
    topo.note_change(&member, &mut left);
    topo.remove(&member);
    topo.settle(&mut left);
    assert!(
        left.touches(&reads),
        "leaving the group changes nothing the drop read"
    );
    assert!(trace(&topo, &probe).unwrap().all_work());
}

#[test]
fn a_reply_is_recognised_by_its_original_tuple_after_a_reverse_nat() {
    // ConnTrackState.isForwardFlow looks up ConnTrackKey(origMatch, ingress device): the
    // packet as it entered the network, not as a reverse NAT on the way has rewritten it.
    // a reaches b through the DNAT on B1; B1's outbound filter then lets only return flows
    // to a through. b's reply is reverse-DNATed on B1 (source 10.0.2.10:8080 becomes
    // 10.9.9.9:80) *before* that filter asks whether it is a return flow: it still is.
    let mut net = Net::new();
    load_balancer(&mut net, &["10.0.2.10"]);
    let mut replies = rule(420, 421, RuleType::Accept);
    replies.condition.match_return_flow = Some(true);
    let mut to_a = rule(420, 422, RuleType::Drop);
    to_a.dl_type = Some(0x0800);
    to_a.nw_dst_address = Some(ip("10.0.1.10"));
    to_a.nw_dst_length = Some(32);
    net.chain(420, vec![replies, to_a]);
    net.bridge_mut(B1).outbound_filter_id = Some(id(420));
    let t = net.tcp("a", "10.9.9.9", 80);
    assert!(t.all_work(), "{t:#?}");
    assert_eq!(
        t.paths[0].client_sees,
        Some(SocketV4::new(ip("10.9.9.9"), 80))
    );
    // Nothing but a reply gets to a: c's new connection is dropped there.
    assert!(!net.tcp("c", "10.0.1.10", 80).delivered());
}

// --- The router's L4 load balancer (`engine/l4lb.rs`) ------------------------------------

const LB: u128 = 0x4ff;
const POOL: u128 = 0x500;
const M_A: u128 = 0x501;
const M_C: u128 = 0x502;
const VIP: u128 = 0x503;
const VIP_IP: &str = "10.0.9.9";

/// Net with a load balancer on router R: VIP 10.0.9.9:80 over members a and c
/// (10.0.1.10/11:8080, behind B1); the client is b (behind B2). The router drops
/// everything else to the VIP's address in its inbound filter, which the load balancer
/// skips for what it takes.
fn balanced(sticky: bool) -> Net {
    let mut net = Net::new();
    let mut vip = Vip::new(id(POOL), id(VIP), ip(VIP_IP), 80);
    if sticky {
        vip = vip.sticky();
    }
    net.res.extend([
        Resource::from(LoadBalancer::new(id(LB))),
        Pool::new(id(LB), id(POOL)).into(),
        PoolMember::new(id(POOL), id(M_A), ip("10.0.1.10"), 8080).into(),
        PoolMember::new(id(POOL), id(M_C), ip("10.0.1.11"), 8080).into(),
        vip.into(),
    ]);
    net.router_mut().load_balancer_id = Some(id(LB));
    net.chain(
        400,
        vec![rule(400, 401, RuleType::Drop).to_host(ip(VIP_IP))],
    );
    net.router_mut().inbound_filter_id = Some(id(400));
    net
}

impl Net {
    fn router_mut(&mut self) -> &mut Router {
        self.res
            .iter_mut()
            .find_map(|r| match r {
                Resource::Router(x) if x.id == id(R) => Some(x),
                _ => None,
            })
            .unwrap()
    }

    fn member_mut(&mut self, m: u128) -> &mut PoolMember {
        self.res
            .iter_mut()
            .find_map(|r| match r {
                Resource::PoolMember(x) if x.id == id(m) => Some(x),
                _ => None,
            })
            .unwrap()
    }

    fn without(mut self, gone: u128) -> Net {
        self.res.retain(|r| r.own_id() != Some(id(gone)));
        self
    }
}

/// Connections of client b to the VIP from successive source ports.
fn connections(n: u16, dst_port: u16) -> Vec<Probe> {
    (0..n)
        .map(|i| {
            let to = SocketV4::new(ip(VIP_IP), dst_port);
            Probe::new("b", to, Protocol::Tcp, 40000 + i)
        })
        .collect()
}

/// The member a path reached, if it was delivered.
fn member(p: &Path) -> Option<String> {
    p.forward.delivered_to.clone()
}

/// The oracle of `sessionAffinity: ClientIP`: in every history, every connection works
/// (the reply comes from the VIP) and all of them land on one member.
fn one_member_per_client(histories: &[Vec<Path>]) -> Result<(), String> {
    for h in histories {
        let members: Vec<Option<String>> = h.iter().map(member).collect();
        if h.iter().any(|p| !p.works) {
            return Err(format!("a connection does not work: {members:?}"));
        }
        if members.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("connections of one client spread: {members:?}"));
        }
    }
    Ok(())
}

#[test]
fn a_sticky_vip_keeps_every_connection_of_a_client_on_one_member() {
    // PoolTest "Sticky source IP attribute in VIP affects how subsequent connections are
    // balanced" / "With sticky source IP"; NATState: FWD_STICKY_DNAT leaves the client's
    // port out of the key.
    let net = balanced(true);
    let (histories, truncated) = trace_sequence(&net.topo(), &connections(4, 80)).unwrap();
    assert!(!truncated);
    one_member_per_client(&histories).unwrap();
    // The first connection chose between the two active members; the others met no
    // choice: two histories, one per member.
    let firsts: Vec<Option<String>> = histories.iter().map(|h| member(&h[0])).collect();
    assert_eq!(histories.len(), 2, "{firsts:?}");
    assert!(firsts.contains(&Some("a".into())) && firsts.contains(&Some("c".into())));
    // The reply is translated back to the VIP; the trace names the load-balancer steps.
    let later = &histories[0][1];
    assert_eq!(later.client_sees, Some(SocketV4::new(ip(VIP_IP), 80)));
    let steps: Vec<&str> = later
        .forward
        .hops
        .iter()
        .filter(|h| matches!(h.step, Step::LoadBalancer | Step::Nat))
        .map(|h| h.detail.as_str())
        .collect();
    assert!(
        steps[0].contains("matches sticky (SOURCE_IP) VIP"),
        "{steps:?}"
    );
    assert!(steps[1].contains("reuses the sticky binding"), "{steps:?}");
    let first = &histories[0][0].forward.hops;
    assert!(
        first.iter().any(|h| h.detail.contains("chose member")),
        "{first:#?}"
    );
}

#[test]
fn a_non_sticky_vip_balances_every_connection_anew_and_the_oracle_notices() {
    // PoolTest "Without sticky source IP": each new connection (source port) is a new
    // FWD_DNAT key, balanced again.
    let net = balanced(false);
    let (histories, _) = trace_sequence(&net.topo(), &connections(2, 80)).unwrap();
    assert_eq!(histories.len(), 4);
    assert!(histories.iter().all(|h| h.iter().all(|p| p.works)));
    let err = one_member_per_client(&histories).unwrap_err();
    assert!(err.contains("spread"), "{err}");
    // The same connection (same source port) keeps its binding.
    let same = vec![connections(1, 80)[0].clone(), connections(1, 80)[0].clone()];
    let (histories, _) = trace_sequence(&net.topo(), &same).unwrap();
    one_member_per_client(&histories).unwrap();
}

#[test]
fn a_client_whose_member_leaves_moves_to_another_and_stays_there() {
    // PoolTest "Backend is disabled, sticky vs non-sticky behavior differs" / "With sticky
    // source IP, multiple backends": a sticky binding to a member that is no longer active
    // is dropped and another member chosen.
    let net = balanced(true);
    let probes = connections(3, 80);
    let mut session = Session::new();
    let first = session.trace(&net.topo(), &probes[0]).unwrap();
    // The session keeps the first path's state: every choice's first option, member a
    // (the lower id).
    assert_eq!(member(&first.paths[0]).as_deref(), Some("a"));
    for leave in [
        (|m: &mut PoolMember| m.status = Some(LbStatus::Inactive)) as fn(&mut PoolMember),
        |m: &mut PoolMember| m.admin_state_up = Some(false),
        |m: &mut PoolMember| m.weight = Some(0),
    ] {
        let mut moved = balanced(true);
        leave(moved.member_mut(M_A));
        let mut s = session.clone();
        let t = s.trace(&moved.topo(), &probes[1]).unwrap();
        assert_eq!(t.candidates().len(), 1, "{t:#?}");
        assert_eq!(member(&t.paths[0]).as_deref(), Some("c"));
        assert!(t.all_work());
        // Once moved, the client stays on c when a comes back.
        let t = s.trace(&net.topo(), &probes[2]).unwrap();
        assert_eq!(t.candidates().len(), 1);
        assert_eq!(member(&t.paths[0]).as_deref(), Some("c"));
    }
    // Without a member left the sticky VIP drops (PoolTest "When all pool members are in
    // admin state down").
    let mut none = balanced(true);
    none.member_mut(M_A).admin_state_up = Some(false);
    none.member_mut(M_C).admin_state_up = Some(false);
    let t = session.trace(&none.topo(), &probes[1]).unwrap();
    assert!(!t.delivered());
    assert!(reason(&t).contains("no active member"), "{}", reason(&t));
}

#[test]
fn a_non_sticky_connection_outlives_its_member_being_disabled() {
    // Pool.isValidBackend: without persistence, a member administratively down still
    // serves the connections bound to it; a new connection goes elsewhere.
    let net = balanced(false);
    let probes = connections(2, 80);
    let mut session = Session::new();
    let first = session.trace(&net.topo(), &probes[0]).unwrap();
    assert_eq!(member(&first.paths[0]).as_deref(), Some("a"));
    let mut disabled = balanced(false);
    disabled.member_mut(M_A).admin_state_up = Some(false);
    let same = session.clone().trace(&disabled.topo(), &probes[0]).unwrap();
    assert_eq!(member(&same.paths[0]).as_deref(), Some("a"));
    let other = session.trace(&disabled.topo(), &probes[1]).unwrap();
    assert_eq!(member(&other.paths[0]).as_deref(), Some("c"));
}

#[test]
fn what_the_load_balancer_does_not_take_meets_the_router_filter() {
    // VipTest "Matching VIPs": TCP only, address and port; PoolTest "When loadbalancer is
    // admin state down, behaves as if no loadbalancer present", "UDP traffic should not be
    // accepted".
    let net = balanced(true);
    let other_port = net.tcp("b", VIP_IP, 81);
    let udp = net.trace("b", VIP_IP, 80, Protocol::Udp);
    let mut down = balanced(true);
    down.res.iter_mut().for_each(|r| {
        if let Resource::LoadBalancer(lb) = r {
            lb.admin_state_up = Some(false);
        }
    });
    let lb_down = down.tcp("b", VIP_IP, 80);
    for t in [other_port, udp, lb_down] {
        assert!(!t.delivered(), "{t:#?}");
        assert!(reason(&t).contains("drop"), "{}", reason(&t));
    }
}

#[test]
fn a_broken_load_balancer_fails_the_oracle() {
    // The VIP gone: nothing answers for its address (the router filter drops it).
    let no_vip = balanced(true).without(VIP);
    let (h, _) = trace_sequence(&no_vip.topo(), &connections(2, 80)).unwrap();
    assert!(one_member_per_client(&h).is_err());
    // No member at all: the VIP's pool is not up, the connection is dropped.
    let no_members = balanced(true).without(M_A).without(M_C);
    let (h, _) = trace_sequence(&no_members.topo(), &connections(2, 80)).unwrap();
    assert!(one_member_per_client(&h).is_err());
    assert!(h[0][0]
        .forward
        .drop_reason
        .as_deref()
        .unwrap_or("")
        .contains("no active member"));
    // The router naming a load balancer that does not exist: refused.
    let t = balanced(true).without(LB).tcp("b", VIP_IP, 80);
    assert_eq!(t.paths[0].forward.verdict, Verdict::Unsupported);
}

#[test]
fn a_pool_with_a_health_monitor_is_refused() {
    let mut net = balanced(true);
    net.res.iter_mut().for_each(|r| {
        if let Resource::Pool(p) = r {
            p.health_monitor_id = Some(id(0x600));
        }
    });
    let t = net.tcp("b", VIP_IP, 80);
    let why = t.unsupported().unwrap_or_default().to_string();
    assert!(why.contains("health monitor"), "{t:#?}");
}
