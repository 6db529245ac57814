//! The simulator answers as MidoNet does: status codes per kind, rule order, cascades,
//! reference clearing, authentication, collections, faults, counters and snapshots.

mod common;

use std::time::Duration;

use common::*;
use midonet_sim::admin::{Faults, HostSeed};
use midonet_sim::{self as sim, SimConfig};
use midonet_translators::model::Kind;
use serde_json::{json, Value};
use uuid::Uuid;

const JSON: &str = "application/json";

fn mt(kind: Kind) -> &'static str {
    kind.media_type()
}

/// A small topology exercising every kind.
struct Topo {
    tz: Uuid,
    chain: Uuid,
    target_chain: Uuid,
    jump_rule: Uuid,
    target_rule: Uuid,
    bridge: Uuid,
    router: Uuid,
    bridge_port: Uuid,
    vm_port: Uuid,
    router_port: Uuid,
    route: Uuid,
}

async fn build(raw: &Raw) -> Topo {
    let t = Topo {
        tz: new_id(),
        chain: new_id(),
        target_chain: new_id(),
        jump_rule: new_id(),
        target_rule: new_id(),
        bridge: new_id(),
        router: new_id(),
        bridge_port: new_id(),
        vm_port: new_id(),
        router_port: new_id(),
        route: new_id(),
    };
    let steps: Vec<(String, &str, Value)> = vec![
        (
            "/tunnel_zones".into(),
            mt(Kind::TunnelZone),
            json!({"id": t.tz, "name": "tz0", "type": "vxlan"}),
        ),
        (
            format!("/tunnel_zones/{}/hosts", t.tz),
            mt(Kind::TunnelZoneHost),
            json!({"hostId": host_id(), "ipAddress": "192.168.0.1"}),
        ),
        (
            "/chains".into(),
            mt(Kind::Chain),
            json!({"id": t.chain, "name": "in", "tenantId": "k8s"}),
        ),
        (
            "/chains".into(),
            mt(Kind::Chain),
            json!({"id": t.target_chain, "name": "target"}),
        ),
        (
            format!("/chains/{}/rules", t.target_chain),
            mt(Kind::Rule),
            json!({"id": t.target_rule, "type": "accept"}),
        ),
        (
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": t.jump_rule, "type": "jump", "jumpChainId": t.target_chain}),
        ),
        (
            "/bridges".into(),
            mt(Kind::Bridge),
            json!({"id": t.bridge, "name": "b", "tenantId": "k8s", "inboundFilterId": t.chain}),
        ),
        (
            "/routers".into(),
            mt(Kind::Router),
            json!({"id": t.router, "name": "r", "tenantId": "k8s"}),
        ),
        (
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": t.bridge_port, "type": "Bridge", "outboundFilterId": t.chain}),
        ),
        (
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": t.vm_port, "type": "Bridge"}),
        ),
        (
            format!("/routers/{}/ports", t.router),
            mt(Kind::Port),
            json!({"id": t.router_port, "type": "Router", "portSubnet": ["10.0.0.1/24"], "inboundFilterId": t.chain}),
        ),
        (
            format!("/ports/{}/link", t.bridge_port),
            mt(Kind::PortLink),
            json!({"peerId": t.router_port}),
        ),
        (
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": t.route, "type": "Normal", "srcNetworkAddr": "0.0.0.0", "srcNetworkLength": 0,
                   "dstNetworkAddr": "10.1.0.0", "dstNetworkLength": 16, "nextHopPort": t.router_port}),
        ),
        (
            format!("/hosts/{}/ports", host_id()),
            mt(Kind::HostInterfacePort),
            json!({"hostId": host_id(), "portId": t.vm_port, "interfaceName": "veth0"}),
        ),
        (
            format!("/bridges/{}/mac_table", t.bridge),
            mt(Kind::MacPort),
            json!({"macAddr": "0a:58:0a:01:00:05", "portId": t.vm_port}),
        ),
        (
            format!("/bridges/{}/arp_table", t.bridge),
            mt(Kind::Ipv4MacPair),
            json!({"ip": "10.1.0.5", "mac": "0a:58:0a:01:00:05"}),
        ),
    ];
    for (path, media, body) in steps {
        let a = raw.post(&path, media, body.clone()).await;
        assert_eq!(a.status, 201, "setup POST {path} {body}: {:?}", a.body);
    }
    t
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    media: Option<&'static str>,
    body: Option<Value>,
    want: u16,
}

fn case(
    name: &'static str,
    method: &'static str,
    path: String,
    media: Option<&'static str>,
    body: Option<Value>,
    want: u16,
) -> Case {
    Case {
        name,
        method,
        path,
        media,
        body,
        want,
    }
}

/// Every error answer, kind by kind. None of these changes the state.
#[tokio::test]
async fn status_codes_per_kind() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    let before = admin(&sim).state().await.unwrap();
    let h = host_id();
    let missing = new_id();
    let post = |name, path: String, media, body: Value, want| {
        case(name, "POST", path, Some(media), Some(body), want)
    };
    let cases = vec![
        // --- 406: media types, checked as MidoNet checks them
        post(
            "bridge as text/plain",
            "/bridges".into(),
            "text/plain",
            json!({"id": new_id()}),
            406,
        ),
        post(
            "bridge with the router media type",
            "/bridges".into(),
            mt(Kind::Router),
            json!({"id": new_id()}),
            406,
        ),
        case(
            "bridge without content type",
            "POST",
            "/bridges".into(),
            None,
            Some(json!({"id": new_id()})),
            406,
        ),
        post(
            "tunnel zone host as plain JSON",
            format!("/tunnel_zones/{}/hosts", t.tz),
            JSON,
            json!({"hostId": other_host_id(), "ipAddress": "192.168.0.2"}),
            406,
        ),
        post(
            "ARP entry as plain JSON",
            format!("/bridges/{}/arp_table", t.bridge),
            JSON,
            json!({"ip": "10.1.0.6", "mac": "0a:58:0a:01:00:06"}),
            406,
        ),
        case(
            "router PUT as text/plain",
            "PUT",
            format!("/routers/{}", t.router),
            Some("text/plain"),
            Some(json!({})),
            406,
        ),
        // --- 404: unknown paths
        case(
            "unknown collection",
            "GET",
            "/vteps".into(),
            None,
            None,
            404,
        ),
        case(
            "id that is not a UUID",
            "GET",
            "/bridges/bridge-1".into(),
            None,
            None,
            404,
        ),
        case(
            "unknown sub-resource",
            "GET",
            format!("/bridges/{}/dhcp", t.bridge),
            None,
            None,
            404,
        ),
        // --- 405: PUT on kinds MidoNet cannot update, and other wrong methods
        case(
            "PUT chain",
            "PUT",
            format!("/chains/{}", t.chain),
            Some(mt(Kind::Chain)),
            Some(json!({"name": "x"})),
            405,
        ),
        case(
            "PUT rule",
            "PUT",
            format!("/rules/{}", t.jump_rule),
            Some(mt(Kind::Rule)),
            Some(json!({"type": "accept"})),
            405,
        ),
        case(
            "PUT route",
            "PUT",
            format!("/routes/{}", t.route),
            Some(mt(Kind::Route)),
            Some(json!({})),
            405,
        ),
        case(
            "PUT tunnel zone host",
            "PUT",
            format!("/tunnel_zones/{}/hosts/{h}", t.tz),
            Some(mt(Kind::TunnelZoneHost)),
            Some(json!({})),
            405,
        ),
        case(
            "PUT host interface port",
            "PUT",
            format!("/hosts/{h}/ports/{}", t.vm_port),
            Some(mt(Kind::HostInterfacePort)),
            Some(json!({})),
            405,
        ),
        case(
            "PUT host",
            "PUT",
            format!("/hosts/{h}"),
            Some(mt(Kind::Host)),
            Some(json!({})),
            405,
        ),
        case(
            "POST host",
            "POST",
            "/hosts".into(),
            Some(mt(Kind::Host)),
            Some(json!({"id": new_id()})),
            405,
        ),
        case(
            "GET link",
            "GET",
            format!("/ports/{}/link", t.bridge_port),
            None,
            None,
            405,
        ),
        case(
            "DELETE collection",
            "DELETE",
            "/bridges".into(),
            None,
            None,
            405,
        ),
        // --- 409: existing ids and entries
        post(
            "tunnel zone id",
            "/tunnel_zones".into(),
            mt(Kind::TunnelZone),
            json!({"id": t.tz, "name": "other", "type": "vxlan"}),
            409,
        ),
        post(
            "tunnel zone name",
            "/tunnel_zones".into(),
            mt(Kind::TunnelZone),
            json!({"id": new_id(), "name": "tz0", "type": "vxlan"}),
            409,
        ),
        post(
            "tunnel zone member",
            format!("/tunnel_zones/{}/hosts", t.tz),
            mt(Kind::TunnelZoneHost),
            json!({"hostId": h, "ipAddress": "192.168.0.9"}),
            409,
        ),
        post(
            "router id",
            "/routers".into(),
            mt(Kind::Router),
            json!({"id": t.router}),
            409,
        ),
        post(
            "bridge id",
            "/bridges".into(),
            mt(Kind::Bridge),
            json!({"id": t.bridge}),
            409,
        ),
        post(
            "port id",
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": t.vm_port, "type": "Bridge"}),
            409,
        ),
        post(
            "route id",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": t.route, "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.2.0.0", "dstNetworkLength": 16, "nextHopPort": t.router_port}),
            409,
        ),
        post(
            "chain id",
            "/chains".into(),
            mt(Kind::Chain),
            json!({"id": t.chain}),
            409,
        ),
        post(
            "rule id",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": t.target_rule, "type": "drop"}),
            409,
        ),
        post(
            "port already linked",
            format!("/ports/{}/link", t.bridge_port),
            mt(Kind::PortLink),
            json!({"peerId": t.router_port}),
            409,
        ),
        post(
            "peer already linked",
            format!("/ports/{}/link", t.vm_port),
            mt(Kind::PortLink),
            json!({"peerId": t.router_port}),
            409,
        ),
        post(
            "port already bound",
            format!("/hosts/{h}/ports"),
            mt(Kind::HostInterfacePort),
            json!({"portId": t.vm_port, "interfaceName": "veth9"}),
            409,
        ),
        post(
            "interface already bound",
            format!("/hosts/{h}/ports"),
            mt(Kind::HostInterfacePort),
            json!({"portId": t.bridge_port, "interfaceName": "veth0"}),
            409,
        ),
        post(
            "host in no tunnel zone",
            format!("/hosts/{}/ports", other_host_id()),
            mt(Kind::HostInterfacePort),
            json!({"portId": t.bridge_port, "interfaceName": "veth1"}),
            409,
        ),
        post(
            "MAC entry",
            format!("/bridges/{}/mac_table", t.bridge),
            mt(Kind::MacPort),
            json!({"macAddr": "0a:58:0a:01:00:05", "portId": t.vm_port}),
            409,
        ),
        post(
            "ARP entry",
            format!("/bridges/{}/arp_table", t.bridge),
            mt(Kind::Ipv4MacPair),
            json!({"ip": "10.1.0.5", "mac": "0a:58:0a:01:00:05"}),
            409,
        ),
        case(
            "tunnel zone PUT keeping its name",
            "PUT",
            format!("/tunnel_zones/{}", t.tz),
            Some(mt(Kind::TunnelZone)),
            Some(json!({"name": "tz0", "type": "vxlan"})),
            409,
        ),
        // --- 404: missing parents
        post(
            "port of a missing bridge",
            format!("/bridges/{missing}/ports"),
            mt(Kind::Port),
            json!({"id": new_id(), "type": "Bridge"}),
            404,
        ),
        post(
            "port of a missing router",
            format!("/routers/{missing}/ports"),
            mt(Kind::Port),
            json!({"id": new_id(), "type": "Router"}),
            404,
        ),
        post(
            "blackhole route of a missing router",
            format!("/routers/{missing}/routes"),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "BlackHole", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.9.0.0", "dstNetworkLength": 16}),
            404,
        ),
        post(
            "rule of a missing chain",
            format!("/chains/{missing}/rules"),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "accept"}),
            404,
        ),
        post(
            "binding on a missing host",
            format!("/hosts/{missing}/ports"),
            mt(Kind::HostInterfacePort),
            json!({"portId": t.bridge_port, "interfaceName": "veth2"}),
            404,
        ),
        post(
            "link of a missing port",
            format!("/ports/{missing}/link"),
            mt(Kind::PortLink),
            json!({"peerId": t.vm_port}),
            404,
        ),
        post(
            "member of a missing tunnel zone",
            format!("/tunnel_zones/{missing}/hosts"),
            mt(Kind::TunnelZoneHost),
            json!({"hostId": h, "ipAddress": "192.168.0.3"}),
            404,
        ),
        post(
            "ARP entry of a missing bridge",
            format!("/bridges/{missing}/arp_table"),
            mt(Kind::Ipv4MacPair),
            json!({"ip": "10.1.0.7", "mac": "0a:58:0a:01:00:07"}),
            404,
        ),
        case(
            "ports of a missing bridge",
            "GET",
            format!("/bridges/{missing}/ports"),
            None,
            None,
            404,
        ),
        case(
            "rules of a missing chain",
            "GET",
            format!("/chains/{missing}/rules"),
            None,
            None,
            404,
        ),
        // --- 404: references to missing objects
        post(
            "bridge with a missing inbound filter",
            "/bridges".into(),
            mt(Kind::Bridge),
            json!({"id": new_id(), "inboundFilterId": missing}),
            404,
        ),
        post(
            "router with a missing outbound filter",
            "/routers".into(),
            mt(Kind::Router),
            json!({"id": new_id(), "outboundFilterId": missing}),
            404,
        ),
        post(
            "port with a missing filter",
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": new_id(), "type": "Bridge", "inboundFilterId": missing}),
            404,
        ),
        case(
            "bridge PUT with a missing filter",
            "PUT",
            format!("/bridges/{}", t.bridge),
            Some(mt(Kind::Bridge)),
            Some(json!({"outboundFilterId": missing})),
            404,
        ),
        post(
            "jump to a missing chain",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "jump", "jumpChainId": missing}),
            404,
        ),
        post(
            "link to a missing peer",
            format!("/ports/{}/link", t.vm_port),
            mt(Kind::PortLink),
            json!({"peerId": missing}),
            404,
        ),
        post(
            "member host missing",
            format!("/tunnel_zones/{}/hosts", t.tz),
            mt(Kind::TunnelZoneHost),
            json!({"hostId": missing, "ipAddress": "192.168.0.4"}),
            404,
        ),
        post(
            "binding of a missing port",
            format!("/hosts/{h}/ports"),
            mt(Kind::HostInterfacePort),
            json!({"portId": missing, "interfaceName": "veth3"}),
            404,
        ),
        post(
            "MAC entry of a missing port",
            format!("/bridges/{}/mac_table", t.bridge),
            mt(Kind::MacPort),
            json!({"macAddr": "0a:58:0a:01:00:08", "portId": missing}),
            404,
        ),
        case(
            "PUT of a missing bridge",
            "PUT",
            format!("/bridges/{missing}"),
            Some(mt(Kind::Bridge)),
            Some(json!({})),
            404,
        ),
        case(
            "DELETE of a missing route",
            "DELETE",
            format!("/routes/{missing}"),
            None,
            None,
            404,
        ),
        // --- 400: next hop ports (ROUTE_NEXT_HOP_PORT_NOT_NULL)
        post(
            "normal route to a missing port",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "dstNetworkLength": 16, "nextHopPort": missing}),
            400,
        ),
        post(
            "normal route via a bridge port",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "dstNetworkLength": 16, "nextHopPort": t.vm_port}),
            400,
        ),
        post(
            "normal route without next hop",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "dstNetworkLength": 16}),
            400,
        ),
        post(
            "normal route of a missing router",
            format!("/routers/{missing}/routes"),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "dstNetworkLength": 16, "nextHopPort": t.router_port}),
            400,
        ),
        post(
            "MAC entry for a port of another device",
            format!("/bridges/{}/mac_table", t.bridge),
            mt(Kind::MacPort),
            json!({"macAddr": "0a:58:0a:01:00:09", "portId": t.router_port}),
            400,
        ),
        // --- 400: invalid bodies
        post(
            "malformed JSON",
            "/bridges".into(),
            mt(Kind::Bridge),
            json!("{"),
            400,
        ),
        post(
            "body not an object",
            "/chains".into(),
            mt(Kind::Chain),
            json!([1, 2]),
            400,
        ),
        post(
            "bad UUID",
            "/bridges".into(),
            mt(Kind::Bridge),
            json!({"id": "1234"}),
            400,
        ),
        post(
            "bad filter UUID",
            "/routers".into(),
            mt(Kind::Router),
            json!({"id": new_id(), "inboundFilterId": "x"}),
            400,
        ),
        post(
            "bad IP",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.0.0.300", "dstNetworkLength": 16, "nextHopPort": t.router_port}),
            400,
        ),
        post(
            "prefix length 33",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "dstNetworkLength": 33, "nextHopPort": t.router_port}),
            400,
        ),
        post(
            "route without destination",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "type": "Normal", "srcNetworkAddr": "0.0.0.0", "nextHopPort": t.router_port}),
            400,
        ),
        post(
            "route without type",
            format!("/routers/{}/routes", t.router),
            mt(Kind::Route),
            json!({"id": new_id(), "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.3.0.0", "nextHopPort": t.router_port}),
            400,
        ),
        post(
            "unknown rule type",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "mirror"}),
            400,
        ),
        post(
            "jump without target",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "jump"}),
            400,
        ),
        post(
            "dnat without targets",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "dnat", "flowAction": "accept"}),
            400,
        ),
        post(
            "snat without flow action",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "snat", "natTargets": [{"addressFrom": "1.1.1.1", "addressTo": "1.1.1.1"}]}),
            400,
        ),
        post(
            "rev_dnat with a bad flow action",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "rev_dnat", "flowAction": "drop"}),
            400,
        ),
        post(
            "port range starting at 0",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "accept", "tpDst": {"start": 0, "end": 80}}),
            400,
        ),
        post(
            "rule position past the end",
            format!("/chains/{}/rules", t.chain),
            mt(Kind::Rule),
            json!({"id": new_id(), "type": "accept", "position": 3}),
            400,
        ),
        post(
            "tunnel zone without name",
            "/tunnel_zones".into(),
            mt(Kind::TunnelZone),
            json!({"id": new_id(), "type": "vxlan"}),
            400,
        ),
        post(
            "tunnel zone of unknown type",
            "/tunnel_zones".into(),
            mt(Kind::TunnelZone),
            json!({"id": new_id(), "name": "x", "type": "ipsec"}),
            400,
        ),
        post(
            "member without IP",
            format!("/tunnel_zones/{}/hosts", t.tz),
            mt(Kind::TunnelZoneHost),
            json!({"hostId": other_host_id()}),
            400,
        ),
        post(
            "router port as a bridge port",
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": new_id(), "type": "Router"}),
            400,
        ),
        post(
            "port without type",
            format!("/bridges/{}/ports", t.bridge),
            mt(Kind::Port),
            json!({"id": new_id()}),
            400,
        ),
        post(
            "link to itself",
            format!("/ports/{}/link", t.vm_port),
            mt(Kind::PortLink),
            json!({"peerId": t.vm_port}),
            400,
        ),
        post(
            "binding without interface",
            format!("/hosts/{h}/ports"),
            mt(Kind::HostInterfacePort),
            json!({"portId": t.bridge_port}),
            400,
        ),
        post(
            "MAC entry with a bad MAC",
            format!("/bridges/{}/mac_table", t.bridge),
            mt(Kind::MacPort),
            json!({"macAddr": "0a:58", "portId": t.vm_port}),
            400,
        ),
        post(
            "ARP entry with a bad IP",
            format!("/bridges/{}/arp_table", t.bridge),
            mt(Kind::Ipv4MacPair),
            json!({"ip": "10.1.0", "mac": "0a:58:0a:01:00:05"}),
            400,
        ),
        case(
            "bad MAC entry path",
            "GET",
            format!("/bridges/{}/mac_table/zz_{}", t.bridge, t.vm_port),
            None,
            None,
            400,
        ),
        case(
            "bridge name too long",
            "PUT",
            format!("/bridges/{}", t.bridge),
            Some(mt(Kind::Bridge)),
            Some(json!({"name": "x".repeat(256)})),
            400,
        ),
    ];
    let mut failures = Vec::new();
    for c in &cases {
        let a = raw.send(c.method, &c.path, c.media, c.body.as_ref()).await;
        if a.status != c.want {
            failures.push(format!(
                "{}: {} {} -> {} (want {}): {}",
                c.name, c.method, c.path, a.status, c.want, a.body
            ));
            continue;
        }
        if a.status >= 400 && a.status != 405 {
            // MidoNet-style error body.
            assert_eq!(a.body["code"], json!(c.want), "{}: {}", c.name, a.body);
            assert!(a.body["message"].is_string(), "{}: {}", c.name, a.body);
            assert_eq!(
                a.content_type, "application/vnd.org.midonet.Error-v1+json",
                "{}",
                c.name
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        admin(&sim).state().await.unwrap(),
        before,
        "error answers must not change the state"
    );
}

#[tokio::test]
async fn invalid_bodies_carry_violations() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let chain = new_id();
    raw.post("/chains", JSON, json!({"id": chain})).await;
    let a = raw
        .post(
            &format!("/chains/{chain}/rules"),
            JSON,
            json!({"id": new_id(), "type": "accept", "nwSrcLength": 40}),
        )
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(a.body["violations"][0]["property"], "nwSrcLength");
    assert!(a.body["violations"][0]["message"]
        .as_str()
        .unwrap()
        .contains("out of range"));
    // Every member of MidoNet's REST Condition is read: a bad MAC mask, an unknown
    // fragment policy, a fragment policy L4 fields exclude, each is a violation.
    let rules = format!("/chains/{chain}/rules");
    for (body, property) in [
        (
            json!({"type": "drop", "dlSrc": "02:00:00:00:00:01", "dlSrcMask": "ffff.ff00"}),
            "dlSrcMask",
        ),
        (
            json!({"type": "drop", "fragmentPolicy": "some"}),
            "fragmentPolicy",
        ),
        (
            json!({"type": "drop", "tpDst": {"start": 80, "end": 80}, "fragmentPolicy": "any"}),
            "fragmentPolicy",
        ),
        (
            json!({"type": "dnat", "flowAction": "accept", "fragmentPolicy": "header",
                   "natTargets": [{"addressFrom": "10.0.0.1", "addressTo": "10.0.0.2",
                                   "portFrom": 80, "portTo": 80}]}),
            "fragmentPolicy",
        ),
        (
            json!({"type": "drop", "icmpDataSrcIpAddress": "10.0.0.0", "icmpDataSrcIpLength": 33}),
            "icmpDataSrcIpLength",
        ),
    ] {
        let a = raw.post(&rules, JSON, body.clone()).await;
        assert_eq!(a.status, 400, "{body}: {a:?}");
        assert_eq!(a.body["violations"][0]["property"], property, "{body}");
    }
    // A floating IP may match any fragment; the fields are stored and read back.
    let id = new_id();
    let body = json!({"id": id, "type": "dnat", "flowAction": "accept", "fragmentPolicy": "any",
        "inPortGroup": new_id(), "traversedDevice": new_id(), "noVlan": true, "nwTos": 34,
        "dlDst": "02:00:00:00:00:02", "dlDstMask": "ffff.ffff.0000", "matchNwDstRewritten": true,
        "natTargets": [{"addressFrom": "10.0.0.1", "addressTo": "10.0.0.1", "portFrom": 0, "portTo": 0}]});
    assert_eq!(raw.post(&rules, JSON, body.clone()).await.status, 201);
    let got = raw.get(&format!("/rules/{id}")).await.body;
    for k in [
        "fragmentPolicy",
        "inPortGroup",
        "traversedDevice",
        "noVlan",
        "nwTos",
        "dlDst",
        "dlDstMask",
        "matchNwDstRewritten",
    ] {
        assert_eq!(got[k], body[k], "{k}");
    }
}

#[tokio::test]
async fn successful_answers_and_media_types() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    // Created answers carry the item's location.
    let chain = new_id();
    let resp = reqwest::Client::new()
        .post(format!("{}/chains", sim.api_url()))
        .header(
            "Content-Type",
            "application/vnd.org.midonet.chain-v1+json; charset=UTF-8",
        )
        .body(json!({"id": chain}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "media types compare case-insensitively");
    assert!(resp.headers()["location"]
        .to_str()
        .unwrap()
        .ends_with(&format!("/midonet-api/chains/{chain}")));
    // The original controller's MACPort spelling and MidoNet's MacPort both work.
    let mac = |m: &str| json!({"macAddr": m, "portId": t.vm_port});
    assert_eq!(
        raw.post(
            &format!("/bridges/{}/mac_table", t.bridge),
            "application/vnd.org.midonet.MacPort-v2+json",
            mac("0a:58:0a:01:00:10")
        )
        .await
        .status,
        201
    );
    assert_eq!(
        raw.post(
            &format!("/bridges/{}/mac_table", t.bridge),
            JSON,
            mac("0a:58:0a:01:00:11")
        )
        .await
        .status,
        201
    );
    // Updates: 204, and the body is replaced.
    let a = raw
        .put(
            &format!("/bridges/{}", t.bridge),
            mt(Kind::Bridge),
            json!({"name": "renamed"}),
        )
        .await;
    assert_eq!(a.status, 204);
    let a = raw.get(&format!("/bridges/{}", t.bridge)).await;
    assert_eq!(a.body["name"], "renamed");
    assert_eq!(
        a.body["id"],
        json!(t.bridge),
        "PUT keeps the id of the path"
    );
    assert_eq!(a.content_type, mt(Kind::Bridge));
    // Ports report their device, link and binding.
    let a = raw.get(&format!("/ports/{}", t.bridge_port)).await;
    assert_eq!(a.body["deviceId"], json!(t.bridge));
    assert_eq!(a.body["peerId"], json!(t.router_port));
    let a = raw.get(&format!("/ports/{}", t.router_port)).await;
    assert_eq!(
        a.body["peerId"],
        json!(t.bridge_port),
        "links are symmetric"
    );
    assert_eq!(a.body["portAddress"], "10.0.0.1");
    assert_eq!(a.body["networkAddress"], "10.0.0.0");
    assert_eq!(a.body["networkLength"], 24);
    assert!(a.body["portMac"].is_string(), "a router port gets a MAC");
    let a = raw.get(&format!("/ports/{}", t.vm_port)).await;
    assert_eq!(a.body["hostId"], json!(host_id()));
    assert_eq!(a.body["interfaceName"], "veth0");
    // Item GETs of every non-top-level kind.
    for path in [
        format!("/tunnel_zones/{}/hosts/{}", t.tz, host_id()),
        format!("/hosts/{}/ports/{}", host_id(), t.vm_port),
        format!(
            "/bridges/{}/mac_table/0a-58-0a-01-00-05_{}",
            t.bridge, t.vm_port
        ),
        format!("/bridges/{}/arp_table/10.1.0.5_0a-58-0a-01-00-05", t.bridge),
        format!("/routes/{}", t.route),
        format!("/rules/{}", t.jump_rule),
        format!("/hosts/{}", host_id()),
    ] {
        assert_eq!(raw.get(&path).await.status, 200, "GET {path}");
    }
    // An Accept that names another kind is refused.
    let resp = reqwest::Client::new()
        .get(format!("{}/bridges/{}", sim.api_url(), t.bridge))
        .header("Accept", mt(Kind::Router))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 406);
    // A router PUT with plain JSON is fine.
    assert_eq!(
        raw.put(
            &format!("/routers/{}", t.router),
            JSON,
            json!({"name": "r2"})
        )
        .await
        .status,
        204
    );
    // A tunnel zone may be renamed to a free name.
    assert_eq!(
        raw.put(
            &format!("/tunnel_zones/{}", t.tz),
            mt(Kind::TunnelZone),
            json!({"name": "tz1", "type": "vxlan"})
        )
        .await
        .status,
        204
    );
    // Ids are generated when a create omits them.
    let a = raw
        .post("/chains", JSON, json!({"name": "anonymous"}))
        .await;
    assert_eq!(a.status, 201);
    // The API root answers.
    assert_eq!(raw.get("").await.status, 200);
}

#[tokio::test]
async fn rules_are_kept_in_chain_order() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let chain = new_id();
    raw.post("/chains", mt(Kind::Chain), json!({"id": chain}))
        .await;
    let path = format!("/chains/{chain}/rules");
    let (a, b, c, d) = (new_id(), new_id(), new_id(), new_id());
    // No position: the head of the chain, as MidoNet defaults to 1.
    assert_eq!(
        raw.post(&path, mt(Kind::Rule), json!({"id": a, "type": "accept"}))
            .await
            .status,
        201
    );
    assert_eq!(
        raw.post(&path, mt(Kind::Rule), json!({"id": b, "type": "drop"}))
            .await
            .status,
        201
    );
    // Position 3 = the end of a 2-rule chain; position 2 = between.
    assert_eq!(
        raw.post(
            &path,
            mt(Kind::Rule),
            json!({"id": c, "type": "return", "position": 3})
        )
        .await
        .status,
        201
    );
    assert_eq!(
        raw.post(
            &path,
            mt(Kind::Rule),
            json!({"id": d, "type": "reject", "position": 2})
        )
        .await
        .status,
        201
    );
    let state = admin(&sim).state().await.unwrap();
    assert_eq!(state.rules_of(chain), vec![b, d, a, c]);
    assert_eq!(
        state.paths_of(Kind::Rule),
        [b, d, a, c]
            .iter()
            .map(|r| format!("/rules/{r}"))
            .collect::<Vec<_>>()
    );
    let listed = raw.get(&path).await;
    assert_eq!(
        listed.content_type,
        "application/vnd.org.midonet.collection.Rule-v2+json"
    );
    let ids: Vec<Value> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(b), json!(d), json!(a), json!(c)]);
    let positions: Vec<Value> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["position"].clone())
        .collect();
    assert_eq!(positions, vec![json!(1), json!(2), json!(3), json!(4)]);
    assert_eq!(raw.get(&format!("/rules/{a}")).await.body["position"], 3);
    // Deleting a rule closes the gap.
    assert_eq!(raw.delete(&format!("/rules/{d}")).await.status, 204);
    assert_eq!(
        admin(&sim).state().await.unwrap().rules_of(chain),
        vec![b, a, c]
    );
}

#[tokio::test]
async fn deleting_a_chain_deletes_its_rules_and_clears_references() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    // Deleting the jump target deletes the rules jumping to it, in other chains too.
    assert_eq!(
        raw.delete(&format!("/chains/{}", t.target_chain))
            .await
            .status,
        204
    );
    let state = admin(&sim).state().await.unwrap();
    assert!(
        !state.contains(&format!("/rules/{}", t.target_rule)),
        "own rules go"
    );
    assert!(
        !state.contains(&format!("/rules/{}", t.jump_rule)),
        "jump rules to it go"
    );
    assert!(state.rules_of(t.chain).is_empty());
    // Deleting a chain clears the filter references of bridges, routers' ports and ports.
    assert_eq!(
        raw.delete(&format!("/chains/{}", t.chain)).await.status,
        204
    );
    let state = admin(&sim).state().await.unwrap();
    let bridge = &state.get(&format!("/bridges/{}", t.bridge)).unwrap().body;
    assert!(bridge.get("inboundFilterId").is_none(), "{bridge}");
    let port = &state
        .get(&format!("/ports/{}", t.bridge_port))
        .unwrap()
        .body;
    assert!(port.get("outboundFilterId").is_none(), "{port}");
    let rport = &state
        .get(&format!("/ports/{}", t.router_port))
        .unwrap()
        .body;
    assert!(rport.get("inboundFilterId").is_none(), "{rport}");
    assert_eq!(state.count(Kind::Chain), 0);
    assert_eq!(state.count(Kind::Rule), 0);
}

#[tokio::test]
async fn deleting_a_bridge_cascades() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    assert_eq!(
        raw.delete(&format!("/bridges/{}", t.bridge)).await.status,
        204
    );
    let state = admin(&sim).state().await.unwrap();
    assert_eq!(state.count(Kind::Bridge), 0);
    assert!(!state.contains(&format!("/ports/{}", t.bridge_port)));
    assert!(!state.contains(&format!("/ports/{}", t.vm_port)));
    assert_eq!(state.count(Kind::MacPort), 0);
    assert_eq!(state.count(Kind::Ipv4MacPair), 0);
    assert_eq!(
        state.count(Kind::HostInterfacePort),
        0,
        "the binding went with the port"
    );
    assert_eq!(state.count(Kind::PortLink), 0);
    // The router port's link was cleared.
    let rport = raw.get(&format!("/ports/{}", t.router_port)).await;
    assert!(rport.body.get("peerId").is_none(), "{}", rport.body);
    // Everything of the router survives.
    assert!(state.contains(&format!("/routes/{}", t.route)));
    assert_eq!(
        raw.get(&format!("/bridges/{}/ports", t.bridge))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn deleting_a_router_cascades() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    let blackhole = new_id();
    let a = raw
        .post(&format!("/routers/{}/routes", t.router), mt(Kind::Route), json!({"id": blackhole, "type": "BlackHole", "srcNetworkAddr": "0.0.0.0", "dstNetworkAddr": "10.9.0.0", "dstNetworkLength": 16}))
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(
        raw.delete(&format!("/routers/{}", t.router)).await.status,
        204
    );
    let state = admin(&sim).state().await.unwrap();
    assert!(!state.contains(&format!("/ports/{}", t.router_port)));
    assert_eq!(
        state.count(Kind::Route),
        0,
        "next-hop routes, local routes and router routes go"
    );
    let bport = raw.get(&format!("/ports/{}", t.bridge_port)).await;
    assert!(
        bport.body.get("peerId").is_none(),
        "the bridge side is unlinked"
    );
}

#[tokio::test]
async fn deleting_a_port_cascades() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    // The router port has its Local route (created by MidoNet) and the Normal route.
    let routes = raw.get(&format!("/routers/{}/routes", t.router)).await;
    assert_eq!(
        routes.content_type,
        "application/vnd.org.midonet.collection.Route-v1+json"
    );
    let types: Vec<&str> = routes
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Local", "Normal"]);
    assert_eq!(
        raw.delete(&format!("/ports/{}", t.router_port))
            .await
            .status,
        204
    );
    let state = admin(&sim).state().await.unwrap();
    assert_eq!(
        state.count(Kind::Route),
        0,
        "routes whose next hop it was are gone"
    );
    assert_eq!(state.count(Kind::PortLink), 0);
    let bport = raw.get(&format!("/ports/{}", t.bridge_port)).await;
    assert!(bport.body.get("peerId").is_none(), "the peer is unlinked");
    // A bound port takes its binding with it.
    assert_eq!(
        raw.delete(&format!("/ports/{}", t.vm_port)).await.status,
        204
    );
    assert_eq!(
        raw.get(&format!("/hosts/{}/ports/{}", host_id(), t.vm_port))
            .await
            .status,
        404
    );
    assert_eq!(
        admin(&sim)
            .state()
            .await
            .unwrap()
            .count(Kind::HostInterfacePort),
        0
    );
}

#[tokio::test]
async fn deletes_of_relations() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    let h = host_id();
    for path in [
        format!("/ports/{}/link", t.bridge_port),
        format!("/hosts/{h}/ports/{}", t.vm_port),
        format!(
            "/bridges/{}/mac_table/0a-58-0a-01-00-05_{}",
            t.bridge, t.vm_port
        ),
        format!("/bridges/{}/arp_table/10.1.0.5_0a-58-0a-01-00-05", t.bridge),
        format!("/tunnel_zones/{}/hosts/{h}", t.tz),
    ] {
        assert_eq!(raw.delete(&path).await.status, 204, "DELETE {path}");
    }
    let state = admin(&sim).state().await.unwrap();
    for kind in [
        Kind::PortLink,
        Kind::HostInterfacePort,
        Kind::MacPort,
        Kind::Ipv4MacPair,
        Kind::TunnelZoneHost,
    ] {
        assert_eq!(state.count(kind), 0, "{kind}");
    }
    // Missing relations: 404 where MidoNet answers 404.
    assert_eq!(
        raw.delete(&format!("/tunnel_zones/{}/hosts/{h}", t.tz))
            .await
            .status,
        404
    );
    assert_eq!(
        raw.delete(&format!("/hosts/{h}/ports/{}", new_id()))
            .await
            .status,
        404
    );
    assert_eq!(
        raw.delete(&format!("/ports/{}/link", new_id()))
            .await
            .status,
        404
    );
    assert_eq!(
        raw.delete(&format!(
            "/bridges/{}/arp_table/10.1.0.5_0a-58-0a-01-00-05",
            new_id()
        ))
        .await
        .status,
        404
    );
    // Deleting the tunnel zone forgets its members.
    assert_eq!(
        raw.delete(&format!("/tunnel_zones/{}", t.tz)).await.status,
        204
    );
    assert_eq!(
        raw.get(&format!("/tunnel_zones/{}/hosts", t.tz))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn collections_and_tenant_filter() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    raw.post(
        "/bridges",
        JSON,
        json!({"id": new_id(), "tenantId": "other"}),
    )
    .await;
    let all = raw.get("/bridges").await;
    assert_eq!(all.body.as_array().unwrap().len(), 2);
    assert_eq!(
        all.content_type,
        "application/vnd.org.midonet.collection.Bridge-v4+json"
    );
    let k8s = raw.get("/bridges?tenant_id=k8s").await;
    assert_eq!(k8s.body.as_array().unwrap().len(), 1);
    assert_eq!(k8s.body[0]["id"], json!(t.bridge));
    assert_eq!(
        raw.get("/routers?tenant_id=k8s")
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        raw.get("/routers?tenant_id=none")
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        raw.get("/chains?tenant_id=k8s")
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(raw.get("/chains").await.body.as_array().unwrap().len(), 2);
    let ports = raw.get(&format!("/bridges/{}/ports", t.bridge)).await;
    let ids: Vec<Value> = ports
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![json!(t.bridge_port), json!(t.vm_port)],
        "in creation order"
    );
    assert_eq!(
        raw.get(&format!("/routers/{}/ports", t.router))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(raw.get("/ports").await.body.as_array().unwrap().len(), 3);
    assert_eq!(
        raw.get(&format!("/tunnel_zones/{}/hosts", t.tz))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        raw.get(&format!("/hosts/{}/ports", host_id()))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        raw.get(&format!("/bridges/{}/mac_table", t.bridge))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        raw.get(&format!("/bridges/{}/arp_table", t.bridge))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let hosts = raw.get("/hosts").await;
    assert_eq!(
        hosts.content_type,
        "application/vnd.org.midonet.collection.Host-v3+json"
    );
    let names: Vec<&str> = hosts
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node1", "node2"]);
}

#[tokio::test]
async fn authentication_like_midonet() {
    // Long enough for a request right after the login on a loaded machine.
    const TOKEN_TTL: Duration = Duration::from_secs(2);
    let sim = sim::start(SimConfig {
        auth: Some(midonet_sim::SimAuth {
            token_ttl: TOKEN_TTL,
            ..auth()
        }),
        ..sim_config()
    })
    .await
    .unwrap();
    let mut raw = Raw::new(&sim);
    let http = reqwest::Client::new();
    let login = |user: &str, pass: &str, project: Option<&str>| {
        let mut req = http
            .post(format!("{}/login", sim.api_url()))
            .basic_auth(user, Some(pass));
        if let Some(p) = project {
            req = req.header("X-Auth-Project", p);
        }
        req.send()
    };
    assert_eq!(raw.get("/bridges").await.status, 401, "no token");
    raw.token = Some("not-a-token".into());
    assert_eq!(raw.get("/bridges").await.status, 401, "unknown token");
    assert_eq!(
        login(USER, "wrong", Some(PROJECT)).await.unwrap().status(),
        401
    );
    assert_eq!(
        login("root", PASSWORD, Some(PROJECT))
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        login(USER, PASSWORD, Some("other")).await.unwrap().status(),
        401
    );
    assert_eq!(
        http.post(format!("{}/login", sim.api_url()))
            .send()
            .await
            .unwrap()
            .status(),
        401,
        "no credentials"
    );
    let logged_in = std::time::Instant::now();
    let resp = login(USER, PASSWORD, Some(PROJECT)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .starts_with("sessionId="));
    let token: Value = resp.json().await.unwrap();
    assert!(token["expires"].as_str().unwrap().ends_with("UTC"));
    raw.token = Some(token["key"].as_str().unwrap().to_string());
    assert_eq!(raw.get("/bridges").await.status, 200);
    // The token expires, not before its time.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while raw.get("/bridges").await.status != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "the token never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        logged_in.elapsed() >= TOKEN_TTL,
        "expired after {:?}, before its {TOKEN_TTL:?}",
        logged_in.elapsed()
    );
    // The admin API needs no token.
    assert_eq!(admin(&sim).state().await.unwrap().count(Kind::Host), 2);
}

#[tokio::test]
async fn fault_injection() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let adm = admin(&sim);
    adm.set_faults(Faults {
        down: true,
        ..Faults::default()
    })
    .await
    .unwrap();
    assert_eq!(raw.get("/bridges").await.status, 503);
    assert_eq!(
        admin(&sim).state().await.unwrap().count(Kind::Host),
        2,
        "admin API unaffected"
    );
    adm.set_faults(Faults {
        fail_next: 2,
        error_status: 500,
        ..Faults::default()
    })
    .await
    .unwrap();
    assert_eq!(raw.get("/bridges").await.status, 500);
    assert_eq!(raw.get("/bridges").await.status, 500);
    assert_eq!(raw.get("/bridges").await.status, 200);
    let mut rates = std::collections::BTreeMap::new();
    rates.insert("POST".to_string(), 1.0);
    adm.set_faults(Faults {
        error_rate: rates,
        ..Faults::default()
    })
    .await
    .unwrap();
    assert_eq!(
        raw.post("/chains", JSON, json!({"id": new_id()}))
            .await
            .status,
        503
    );
    assert_eq!(raw.get("/chains").await.status, 200);
    adm.set_faults(Faults {
        drop_next: 1,
        ..Faults::default()
    })
    .await
    .unwrap();
    let dropped = reqwest::Client::new()
        .get(format!("{}/bridges", sim.api_url()))
        .send()
        .await;
    assert!(
        dropped.is_err(),
        "the connection is closed without an answer: {dropped:?}"
    );
    assert_eq!(raw.get("/bridges").await.status, 200);
    adm.set_faults(Faults {
        latency_ms: 150,
        ..Faults::default()
    })
    .await
    .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(raw.get("/bridges").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
    adm.clear_faults().await.unwrap();
    assert_eq!(adm.faults().await.unwrap(), Faults::default());
    let counts = adm.requests().await.unwrap();
    assert_eq!(
        counts.faults_injected, 5,
        "down, 2 x failNext, POST rate, drop"
    );
    assert_eq!(counts.of_status(503), 2);
}

#[tokio::test]
async fn request_counters() {
    let sim = start_sim_with_auth().await;
    let adm = admin(&sim);
    let mut raw = Raw::new(&sim);
    let resp = reqwest::Client::new()
        .post(format!("{}/login", sim.api_url()))
        .basic_auth(USER, Some(PASSWORD))
        .header("X-Auth-Project", PROJECT)
        .send()
        .await
        .unwrap();
    let token: Value = resp.json().await.unwrap();
    raw.token = Some(token["key"].as_str().unwrap().into());
    let bridge = new_id();
    raw.post("/bridges", JSON, json!({"id": bridge})).await;
    raw.post("/bridges", JSON, json!({"id": bridge})).await;
    raw.get(&format!("/bridges/{bridge}")).await;
    raw.post(
        &format!("/bridges/{bridge}/ports"),
        JSON,
        json!({"id": new_id(), "type": "Bridge"}),
    )
    .await;
    raw.get("/nowhere").await;
    let counts = adm.requests().await.unwrap();
    assert_eq!(counts.total, 6);
    assert_eq!(counts.login, 1);
    assert_eq!(counts.get(Kind::Bridge, "POST"), 2);
    assert_eq!(counts.get(Kind::Bridge, "get"), 1);
    assert_eq!(counts.of_kind(Kind::Port), 1);
    assert_eq!(
        counts.of_method("POST"),
        3,
        "logins are not in the per-method counts"
    );
    assert_eq!(counts.by_kind["unknown"]["GET"], 1);
    assert_eq!(counts.of_status(409), 1);
    adm.reset_requests().await.unwrap();
    assert_eq!(adm.requests().await.unwrap().total, 0);
}

#[tokio::test]
async fn admin_hosts_and_wipe() {
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let adm = admin(&sim);
    let n3 = new_id();
    let hosts = adm.add_hosts(&[HostSeed::new("node3", n3)]).await.unwrap();
    assert_eq!(hosts.len(), 3);
    assert!(raw
        .get("/hosts")
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["name"] == "node3"));
    build(&raw).await;
    adm.wipe().await.unwrap();
    let state = adm.state().await.unwrap();
    assert_eq!(state.len(), 3, "only the hosts are left: {state:?}");
    adm.wipe_all().await.unwrap();
    assert!(adm.state().await.unwrap().is_empty());
}

#[tokio::test]
async fn snapshot_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sim.json");
    let cfg = SimConfig {
        snapshot: Some(file.clone()),
        ..sim_config()
    };
    let sim = sim::start(cfg.clone()).await.unwrap();
    let raw = Raw::new(&sim);
    let t = build(&raw).await;
    let before = admin(&sim).state().await.unwrap();
    sim.shutdown().await;
    assert!(file.exists());
    let sim = sim::start(cfg).await.unwrap();
    let after = admin(&sim).state().await.unwrap();
    assert_eq!(after, before);
    // And it keeps working on the restored state.
    let raw = Raw::new(&sim);
    assert_eq!(
        raw.delete(&format!("/bridges/{}", t.bridge)).await.status,
        204
    );
    // A corrupt snapshot is an error, not a panic or an empty start.
    std::fs::write(&file, "{not json").unwrap();
    let err = sim::start(SimConfig {
        snapshot: Some(file),
        ..sim_config()
    })
    .await
    .err()
    .unwrap();
    assert!(err.to_string().contains("snapshot"), "{err}");
}

#[path = "../dataplane/tests/common/conformance.rs"]
mod conformance;

/// The data-plane conformance suite (cases ported from midolman's simulation tests, see
/// `dataplane/tests/common/conformance.rs`) through the simulator as a client builds it:
/// every resource POSTed to its MidoNet path with its media type, rules at their
/// positions, then `POST /_sim/trace`. The simulator must accept and store every field,
/// and its trace must equal the model's on the resources in push order and meet the
/// case's expectations.
#[tokio::test]
async fn dataplane_conformance_cases_through_the_rest_api() {
    use midonet_dataplane::{RuleOrder, Topology};
    use midonet_sim::admin::TraceRequest;

    let cases = conformance::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dataplane/tests/conformance"),
    );
    assert!(cases.len() >= 80, "only {} cases", cases.len());
    let sim = start_sim().await;
    let raw = Raw::new(&sim);
    let admin = admin(&sim);
    let mut failures = Vec::new();
    for b in &cases {
        admin.wipe().await.unwrap();
        let hosts: Vec<HostSeed> = b
            .hosts()
            .into_iter()
            .map(|h| HostSeed::new(format!("host-{h}"), h))
            .collect();
        admin.add_hosts(&hosts).await.unwrap();
        let tz = new_id();
        let a = raw
            .post(
                "/tunnel_zones",
                mt(Kind::TunnelZone),
                json!({"id": tz, "name": "tz", "type": "vxlan"}),
            )
            .await;
        assert_eq!(a.status, 201, "{a:?}");
        for (i, h) in hosts.iter().enumerate() {
            let a = raw
                .post(
                    &format!("/tunnel_zones/{tz}/hosts"),
                    mt(Kind::TunnelZoneHost),
                    json!({"hostId": h.id, "ipAddress": format!("192.168.100.{}", i + 1)}),
                )
                .await;
            assert_eq!(a.status, 201, "{a:?}");
        }
        let mut refused = None;
        for r in &b.resources {
            let a = raw.post(&r.post_path(), mt(r.kind()), r.body()).await;
            if a.status != 201 {
                refused = Some(format!(
                    "{} {} -> {}: {}",
                    r.post_path(),
                    r.body(),
                    a.status,
                    a.body
                ));
                break;
            }
        }
        if let Some(why) = refused {
            failures.push(format!("{}: the simulator refused {why}", b.name()));
            continue;
        }
        let request = TraceRequest {
            attachments: b.attachments.clone(),
            probe: b.probe.clone(),
        };
        let rest = match admin.trace(&request).await {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: trace: {e}", b.name()));
                continue;
            }
        };
        let topo = Topology::new(
            b.resources.clone(),
            RuleOrder::Pushed,
            b.attachments.clone(),
        );
        let pure = midonet_dataplane::trace(&topo, &b.probe.probe().unwrap()).unwrap();
        if rest != pure {
            failures.push(format!(
                "{}: the simulator's trace differs from the model's\nREST: {rest:#?}\nmodel: {pure:#?}",
                b.name()
            ));
            continue;
        }
        if let Err(e) = conformance::check(b, &rest) {
            failures.push(format!("{}: {e}", b.name()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases fail through the REST API:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
