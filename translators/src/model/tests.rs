use std::net::Ipv4Addr;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

const B: &str = "11111111-1111-4111-8111-111111111111";
const P: &str = "22222222-2222-4222-8222-222222222222";
const Q: &str = "33333333-3333-4333-8333-333333333333";

fn entry(kind: &str, parent: &str, body: Value) -> TranslationResource {
    TranslationResource::new(kind, parent, body.to_string())
}

fn parsed(kind: &str, parent: &str, body: Value) -> Resource {
    Resource::from_entry(&entry(kind, parent, body)).unwrap()
}

/// The entry's body and the re-serialised body are the same JSON value.
fn assert_round_trip(e: &TranslationResource) {
    let r = Resource::from_entry(e).unwrap();
    let back = r.to_entry();
    assert_eq!(back.kind, e.kind);
    assert_eq!(back.parent, e.parent);
    let a: Value = serde_json::from_str(&e.body).unwrap();
    let b: Value = serde_json::from_str(&back.body).unwrap();
    assert_eq!(a, b, "body changed in the round trip");
    assert_eq!(Resource::from_entry(&back).unwrap(), r);
}

#[test]
fn paths_and_media_types_of_every_kind() {
    let cases: Vec<(Resource, &str, String, String)> = vec![
        (
            parsed(
                "TunnelZone",
                "",
                json!({"id": B, "name": "default", "type": "vxlan"}),
            ),
            "application/vnd.org.midonet.TunnelZone-v1+json",
            "/tunnel_zones".into(),
            format!("/tunnel_zones/{B}"),
        ),
        (
            parsed(
                "TunnelZoneHost",
                B,
                json!({"hostId": P, "ipAddress": "10.0.0.1"}),
            ),
            "application/vnd.org.midonet.TunnelZoneHost-v1+json",
            format!("/tunnel_zones/{B}/hosts"),
            format!("/tunnel_zones/{B}/hosts/{P}"),
        ),
        (
            parsed(
                "Router",
                "",
                json!({"id": B, "tenantId": "k8s", "name": "r"}),
            ),
            "application/vnd.org.midonet.Router-v3+json",
            "/routers".into(),
            format!("/routers/{B}"),
        ),
        (
            parsed(
                "Bridge",
                "",
                json!({"id": B, "tenantId": "k8s", "name": "b"}),
            ),
            "application/vnd.org.midonet.Bridge-v4+json",
            "/bridges".into(),
            format!("/bridges/{B}"),
        ),
        (
            parsed("Port", B, json!({"id": P, "type": "Bridge"})),
            "application/vnd.org.midonet.Port-v3+json",
            format!("/bridges/{B}/ports"),
            format!("/ports/{P}"),
        ),
        (
            parsed(
                "Port",
                B,
                json!({"id": P, "type": "Router", "portSubnet": ["10.0.0.1/24"]}),
            ),
            "application/vnd.org.midonet.Port-v3+json",
            format!("/routers/{B}/ports"),
            format!("/ports/{P}"),
        ),
        (
            parsed("PortLink", P, json!({"portId": null, "peerId": Q})),
            "application/vnd.org.midonet.PortLink-v1+json",
            format!("/ports/{P}/link"),
            format!("/ports/{P}/link"),
        ),
        (
            parsed(
                "Route",
                B,
                json!({"id": P, "type": "Normal", "srcNetworkAddr": "0.0.0.0", "srcNetworkLength": 0,
                       "dstNetworkAddr": "10.1.0.0", "dstNetworkLength": 16, "nextHopPort": Q}),
            ),
            "application/vnd.org.midonet.Route-v1+json",
            format!("/routers/{B}/routes"),
            format!("/routes/{P}"),
        ),
        (
            parsed("Chain", "", json!({"id": B, "name": "c"})),
            "application/vnd.org.midonet.Chain-v1+json",
            "/chains".into(),
            format!("/chains/{B}"),
        ),
        (
            parsed(
                "Rule",
                B,
                json!({"id": P, "type": "jump", "jumpChainId": Q}),
            ),
            "application/vnd.org.midonet.Rule-v2+json",
            format!("/chains/{B}/rules"),
            format!("/rules/{P}"),
        ),
        (
            parsed("Host", "", json!({"id": B, "name": "node1"})),
            "application/vnd.org.midonet.Host-v3+json",
            "/hosts".into(),
            format!("/hosts/{B}"),
        ),
        (
            parsed(
                "HostInterfacePort",
                B,
                json!({"hostId": B, "portId": P, "interfaceName": "veth0"}),
            ),
            "application/vnd.org.midonet.HostInterfacePort-v1+json",
            format!("/hosts/{B}/ports"),
            format!("/hosts/{B}/ports/{P}"),
        ),
        (
            parsed(
                "MACPort",
                B,
                json!({"macAddr": "0a:58:0a:01:00:05", "portId": P}),
            ),
            "application/vnd.org.midonet.MACPort-v2+json",
            format!("/bridges/{B}/mac_table"),
            format!("/bridges/{B}/mac_table/0a-58-0a-01-00-05_{P}"),
        ),
        (
            parsed(
                "IPv4MACPair",
                B,
                json!({"ip": "10.1.0.5", "mac": "0a:58:0a:01:00:05"}),
            ),
            "application/vnd.org.midonet.IP4Mac-v1+json",
            format!("/bridges/{B}/arp_table"),
            format!("/bridges/{B}/arp_table/10.1.0.5_0a-58-0a-01-00-05"),
        ),
        (
            parsed("LoadBalancer", "", json!({"id": B, "adminStateUp": true})),
            "application/vnd.org.midonet.LoadBalancer-v1+json",
            "/load_balancers".into(),
            format!("/load_balancers/{B}"),
        ),
        (
            parsed(
                "Pool",
                B,
                json!({"id": P, "loadBalancerId": B, "protocol": "TCP", "lbMethod": "ROUND_ROBIN"}),
            ),
            "application/vnd.org.midonet.Pool-v1+json",
            format!("/load_balancers/{B}/pools"),
            format!("/pools/{P}"),
        ),
        (
            parsed(
                "PoolMember",
                P,
                json!({"id": Q, "poolId": P, "address": "10.1.0.5", "protocolPort": 8080,
                       "weight": 1, "adminStateUp": true, "status": "ACTIVE"}),
            ),
            "application/vnd.org.midonet.PoolMember-v1+json",
            format!("/pools/{P}/pool_members"),
            format!("/pool_members/{Q}"),
        ),
        (
            parsed(
                "Vip",
                P,
                json!({"id": Q, "poolId": P, "address": "192.0.2.7", "protocolPort": 80,
                       "sessionPersistence": "SOURCE_IP"}),
            ),
            "application/vnd.org.midonet.VIP-v1+json",
            format!("/pools/{P}/vips"),
            format!("/vips/{Q}"),
        ),
    ];
    for (r, media, post, item) in cases {
        assert_eq!(r.media_type(), media, "{:?}", r.kind());
        assert_eq!(r.post_path(), post, "{:?}", r.kind());
        assert_eq!(r.item_path(), item, "{:?}", r.kind());
        assert_round_trip(&r.to_entry());
    }
}

#[test]
fn tagged_mac_entries_live_under_their_vlan() {
    let r = parsed(
        "MACPort",
        B,
        json!({"macAddr": "0a:58:0a:01:00:05", "portId": P, "vlanId": 7}),
    );
    assert_eq!(
        r.item_path(),
        format!("/bridges/{B}/vlans/7/mac_table/0a-58-0a-01-00-05_{P}")
    );
    let untagged = parsed(
        "MACPort",
        B,
        json!({"macAddr": "0a:58:0a:01:00:05", "portId": P, "vlanId": 0}),
    );
    assert_eq!(
        untagged.item_path(),
        format!("/bridges/{B}/mac_table/0a-58-0a-01-00-05_{P}")
    );
}

#[test]
fn bodies_written_by_the_go_controller_round_trip() {
    // Shapes as the original controller serialised them (nulls, omitted zero values).
    let bodies = vec![
        ("PortLink", P, json!({"portId": null, "peerId": Q})),
        (
            "Route",
            B,
            json!({"id": P, "dstNetworkAddr": "10.1.0.0", "dstNetworkLength": 16,
                   "nextHopPort": null, "srcNetworkAddr": "0.0.0.0", "srcNetworkLength": 0,
                   "type": "BlackHole"}),
        ),
        (
            "Rule",
            B,
            json!({"id": P, "type": "dnat", "flowAction": "accept",
                   "natTargets": [{"addressFrom": "10.1.0.5", "addressTo": "10.1.0.5", "portFrom": 8080, "portTo": 8080}]}),
        ),
        (
            "Rule",
            B,
            json!({"id": P, "type": "jump", "dlType": 2048, "nwDstAddress": "10.96.0.10",
                   "nwDstLength": 32, "nwProto": 6, "tpDst": {"start": 53, "end": 53},
                   "jumpChainId": Q}),
        ),
        (
            "Rule",
            B,
            json!({"id": P, "type": "rev_snat", "flowAction": "continue"}),
        ),
        (
            "Port",
            B,
            json!({"id": P, "type": "Router", "portSubnet": ["172.16.0.1/30"], "portMac": "ac:ca:ba:00:00:01"}),
        ),
        (
            "Port",
            B,
            json!({"id": P, "type": "Bridge", "outboundFilterId": Q}),
        ),
        (
            "TunnelZone",
            "",
            json!({"id": B, "name": "DefaultTunnelZone", "type": "vxlan"}),
        ),
        (
            "HostInterfacePort",
            B,
            json!({"hostId": B, "portId": P, "interfaceName": "midoABCDEF"}),
        ),
    ];
    for (kind, parent, body) in bodies {
        assert_round_trip(&entry(kind, parent, body));
    }
}

#[test]
fn unknown_members_and_explicit_nulls_survive() {
    let e = entry(
        "Bridge",
        "",
        json!({"id": B, "name": null, "vxLanPortIds": [1, 2], "qosPolicyId": null,
               "nested": {"a": [null, {"b": null}]}}),
    );
    assert_round_trip(&e);
    let Resource::Bridge(b) = Resource::from_entry(&e).unwrap() else {
        panic!("not a bridge")
    };
    assert_eq!(b.name, None);
    assert!(b.extra.contains_key("vxLanPortIds"));
    // Setting a field that was an explicit null makes the typed value win.
    let mut b2 = b.clone();
    b2.name = Some("named".into());
    assert_eq!(Resource::Bridge(b2).body()["name"], json!("named"));
}

#[test]
fn nested_nulls_survive() {
    assert_round_trip(&entry(
        "Rule",
        B,
        json!({"id": P, "type": "snat", "flowAction": "accept",
               "natTargets": [{"addressFrom": "1.2.3.4", "addressTo": "1.2.3.4", "portFrom": null, "x": 1}],
               "tpSrc": {"start": null, "end": 80}}),
    ));
}

#[test]
fn typed_construction_matches_the_wire_names() {
    let chain = uuid::Uuid::parse_str(B).unwrap();
    let id = uuid::Uuid::parse_str(P).unwrap();
    let mut rule = Rule::new(chain, id, RuleType::Dnat);
    rule.flow_action = Some(FlowAction::Accept);
    rule.nat_targets = Some(vec![NatTarget::to(Ipv4Addr::new(10, 0, 0, 1), Some(80))]);
    rule.tp_dst = Some(PortRange::single(8080));
    rule.nw_dst_address = Some(Ipv4Addr::new(10, 96, 0, 1));
    rule.nw_dst_length = Some(32);
    rule.dl_type = Some(0x0800);
    let r = Resource::from(rule);
    assert_eq!(
        r.body(),
        json!({"id": P, "type": "dnat", "flowAction": "accept",
               "natTargets": [{"addressFrom": "10.0.0.1", "addressTo": "10.0.0.1", "portFrom": 80, "portTo": 80}],
               "tpDst": {"start": 8080, "end": 8080}, "nwDstAddress": "10.96.0.1", "nwDstLength": 32,
               "dlType": 2048})
    );
    assert_eq!(r.to_entry().parent, B);
    assert_round_trip(&r.to_entry());

    let link = Resource::from(PortLink::new(id, chain));
    assert_eq!(link.body(), json!({"peerId": B}));
    assert_eq!(link.to_entry().parent, P);
}

/// Every member of MidoNet's REST `Condition` (`rest_api/models/Condition.java`) is a typed
/// field: none is left in `extra`, where the data-plane model would refuse it.
#[test]
fn every_rest_condition_member_is_typed() {
    let text = r#"{"id": "P", "type": "drop",
        "condInvert": true, "matchForwardFlow": true, "matchReturnFlow": false,
        "inPorts": ["Q"], "invInPorts": true, "outPorts": ["Q"], "invOutPorts": false,
        "portGroup": "Q", "invPortGroup": true, "inPortGroup": "Q", "invInPortGroup": false,
        "outPortGroup": "Q", "invOutPortGroup": true,
        "ipAddrGroupSrc": "Q", "invIpAddrGroupSrc": false, "ipAddrGroupDst": "Q",
        "invIpAddrGroupDst": true, "traversedDevice": "Q", "invTraversedDevice": true,
        "noVlan": true, "vlan": 10, "dlType": 2048, "invDlType": false,
        "dlSrc": "02:11:33:00:11:01", "dlSrcMask": "ffff.ff00.0000", "invDlSrc": true,
        "dlDst": "02:11:aa:ee:22:05", "dlDstMask": "ffff.ffff.ffff", "invDlDst": false,
        "nwTos": 34, "invNwTos": true, "nwProto": 6, "invNwProto": false,
        "nwSrcAddress": "10.0.20.0", "nwSrcLength": 24, "invNwSrc": true,
        "nwDstAddress": "10.0.11.34", "nwDstLength": 32, "invNwDst": false,
        "matchNwDstRewritten": true, "fragmentPolicy": "header",
        "tpSrc": {"start": 1, "end": 100}, "tpDst": {"start": 80, "end": 80},
        "invTpSrc": true, "invTpDst": false,
        "icmpDataSrcIpAddress": "10.0.11.0", "icmpDataSrcIpLength": 22,
        "invIcmpDataSrcIp": true, "icmpDataDstIpAddress": "192.160.0.0",
        "icmpDataDstIpLength": 12, "invIcmpDataDstIp": false}"#
        .replace("\"P\"", &format!("{P:?}"))
        .replace("\"Q\"", &format!("{Q:?}"));
    let body: Value = serde_json::from_str(&text).unwrap();
    let Resource::Rule(rule) = parsed("Rule", B, body.clone()) else {
        panic!("not a rule")
    };
    assert!(rule.extra.is_empty(), "untyped members: {:?}", rule.extra);
    let c = &rule.condition;
    assert_eq!(c.dl_src_mask, Some(MacMask(0xffff_ff00_0000)));
    assert_eq!(c.fragment_policy, Some(FragmentPolicy::Header));
    assert_eq!(c.icmp_data_src_ip_length, Some(22));
    assert_eq!(c.vlan, Some(10));
    assert_round_trip(&entry("Rule", B, body));
}

#[test]
fn rejections_have_clear_messages() {
    let cases: Vec<(TranslationResource, &str)> = vec![
        (
            entry("Switch", "", json!({})),
            "unknown backend kind \"Switch\"",
        ),
        (
            entry("bridge", "", json!({"id": B})),
            "unknown backend kind \"bridge\"",
        ),
        (
            entry("Port", "", json!({"id": P, "type": "Bridge"})),
            "Port: a parent UUID is required",
        ),
        (
            entry("Bridge", B, json!({"id": P})),
            "Bridge: has no parent",
        ),
        (
            entry("Port", "not-a-uuid", json!({"id": P, "type": "Bridge"})),
            "parent \"not-a-uuid\" is not a lowercase",
        ),
        (
            entry(
                "Port",
                "AAAAAAAA-aaaa-4aaa-8aaa-aaaaaaaaaaaa",
                json!({"id": P, "type": "Bridge"}),
            ),
            "is not a lowercase hyphenated UUID",
        ),
        (
            TranslationResource::new("Bridge", "", "{not json"),
            "Bridge: body is not valid JSON",
        ),
        (
            entry("Bridge", "", json!([1])),
            "Bridge: body must be a JSON object",
        ),
        (
            entry("Bridge", "", json!({"name": "x"})),
            "Bridge.id: required field is missing",
        ),
        (
            entry("Bridge", "", json!({"id": null})),
            "Bridge.id: required field is missing",
        ),
        (
            entry("Bridge", "", json!({"id": "1234"})),
            "Bridge.id: \"1234\" is not a lowercase hyphenated UUID",
        ),
        (
            entry("Bridge", "", json!({"id": B, "inboundFilterId": 5})),
            "Bridge.inboundFilterId: expected a string",
        ),
        (
            entry("Port", B, json!({"id": P, "type": "Vxlan"})),
            "Port.type: unknown value \"Vxlan\"",
        ),
        (
            entry("Port", B, json!({"id": P})),
            "Port.type: required field is missing",
        ),
        (
            entry(
                "Port",
                B,
                json!({"id": P, "type": "Router", "portSubnet": ["10.0.0.1/40"]}),
            ),
            "Port.portSubnet: item 0",
        ),
        (
            entry("Rule", B, json!({"id": P, "type": "mirror"})),
            "Rule.type: unknown value \"mirror\"",
        ),
        (
            entry(
                "Rule",
                B,
                json!({"id": P, "type": "accept", "nwSrcLength": 33}),
            ),
            "Rule.nwSrcLength: 33 is out of range",
        ),
        (
            entry(
                "Rule",
                B,
                json!({"id": P, "type": "accept", "nwSrcAddress": "10.0.0.256"}),
            ),
            "is not an IPv4 address",
        ),
        (
            entry(
                "Rule",
                B,
                json!({"id": P, "type": "accept", "tpDst": {"start": 70000}}),
            ),
            "Rule.tpDst: PortRange.start",
        ),
        (
            entry(
                "Rule",
                B,
                json!({"id": P, "type": "snat", "flowAction": "drop"}),
            ),
            "Rule.flowAction: unknown value \"drop\"",
        ),
        (
            entry("Route", B, json!({"id": P, "dstNetworkLength": -1})),
            "Route.dstNetworkLength: expected an unsigned integer",
        ),
        (
            entry(
                "MACPort",
                B,
                json!({"macAddr": "0A:58:0A:01:00:05", "portId": P}),
            ),
            "MACPort.macAddr",
        ),
        (
            entry("IPv4MACPair", B, json!({"ip": "10.0.0.1"})),
            "IPv4MACPair.mac: required field is missing",
        ),
        (
            entry("TunnelZone", "", json!({"id": B, "type": "ipsec"})),
            "TunnelZone.type: unknown value",
        ),
    ];
    for (e, want) in cases {
        let err = Resource::from_entry(&e).expect_err(&format!("{e:?} must be rejected"));
        assert!(
            err.to_string().contains(want),
            "{err} does not contain {want}"
        );
    }
}

#[test]
fn top_level_objects_deserialize_with_serde() {
    let hosts: Vec<Host> =
        serde_json::from_value(json!([{"id": B, "name": "n1", "alive": true}])).unwrap();
    assert_eq!(hosts[0].name.as_deref(), Some("n1"));
    assert_eq!(hosts[0].extra["alive"], json!(true));
    assert!(serde_json::from_value::<Host>(json!({"name": "x"})).is_err());
}

// --- Property tests ---------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (0u64..70000).prop_map(|n| json!(n)),
        "[a-z0-9:./_-]{0,12}".prop_map(Value::String),
        Just(json!(B)),
        Just(json!("10.0.0.1")),
        Just(json!("0a:58:0a:01:00:05")),
        Just(json!("10.0.0.1/24")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn field_names() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "id",
        "type",
        "name",
        "tenantId",
        "parent",
        "hostId",
        "portId",
        "peerId",
        "ipAddress",
        "inboundFilterId",
        "outboundFilterId",
        "portSubnet",
        "portMac",
        "portAddress",
        "networkLength",
        "dstNetworkAddr",
        "dstNetworkLength",
        "nextHopPort",
        "weight",
        "position",
        "flowAction",
        "natTargets",
        "jumpChainId",
        "nwSrcLength",
        "tpDst",
        "macAddr",
        "ip",
        "mac",
        "vlanId",
        "interfaceName",
        "extraField",
    ])
    .prop_map(str::to_string)
}

/// A minimal valid body of each kind.
fn base_body(kind: Kind) -> Value {
    match kind {
        Kind::TunnelZone
        | Kind::Router
        | Kind::Bridge
        | Kind::Chain
        | Kind::Host
        | Kind::PortGroup
        | Kind::IpAddrGroup => {
            json!({"id": P})
        }
        Kind::PortGroupPort => json!({"portId": P}),
        Kind::IpAddrGroupAddr => json!({"addr": "10.0.0.1"}),
        Kind::TunnelZoneHost => json!({"hostId": P}),
        Kind::Port => json!({"id": P, "type": "Router"}),
        Kind::PortLink => json!({"peerId": Q}),
        Kind::Route => json!({"id": P, "type": "Normal"}),
        Kind::Rule => json!({"id": P, "type": "dnat"}),
        Kind::HostInterfacePort => json!({"portId": P}),
        Kind::MacPort => json!({"macAddr": "0a:58:0a:01:00:05", "portId": P}),
        Kind::Ipv4MacPair => json!({"ip": "10.0.0.1", "mac": "0a:58:0a:01:00:05"}),
        Kind::LoadBalancer => json!({"id": P}),
        Kind::Pool => json!({"id": P, "lbMethod": "ROUND_ROBIN"}),
        Kind::PoolMember => json!({"id": P, "address": "10.0.0.1", "protocolPort": 80}),
        Kind::Vip => json!({"id": P, "address": "10.0.0.1", "protocolPort": 80}),
    }
}

/// `Kind::has_parent` and the objects' `parent` rows agree: a kind with a parent keeps the
/// entry's parent and refuses an entry without one; a kind without refuses one.
#[test]
fn has_parent_agrees_with_the_objects() {
    for kind in Kind::ALL {
        let with = Resource::from_entry(&entry(kind.name(), B, base_body(kind)));
        let without = Resource::from_entry(&entry(kind.name(), "", base_body(kind)));
        if kind.has_parent() {
            assert_eq!(
                with.unwrap().parent().map(|p| p.to_string()),
                Some(B.to_string())
            );
            assert!(
                matches!(without, Err(ModelError::MissingParent { .. })),
                "{kind}: {without:?}"
            );
        } else {
            assert!(
                matches!(with, Err(ModelError::UnexpectedParent { .. })),
                "{kind}: {with:?}"
            );
            assert_eq!(without.unwrap().parent(), None);
        }
    }
}

/// A body that is often valid: a valid base for the kind, plus random members.
fn arb_body(kind: Kind) -> impl Strategy<Value = Value> {
    let base = base_body(kind);
    prop::collection::vec((field_names(), arb_json()), 0..5).prop_map(move |members| {
        let mut body = base.clone();
        if let Value::Object(map) = &mut body {
            for (k, v) in members {
                map.insert(k, v);
            }
        }
        body
    })
}

fn arb_entry() -> impl Strategy<Value = TranslationResource> {
    let kind = prop::sample::select(Kind::ALL.to_vec());
    (kind, any::<bool>(), prop::option::of(".{0,8}")).prop_flat_map(
        |(kind, with_parent, junk_kind)| {
            let parent = if with_parent { B } else { "" };
            let name = junk_kind.unwrap_or_else(|| kind.name().to_string());
            prop_oneof![
                arb_body(kind).prop_map(|b| b.to_string()),
                arb_json().prop_map(|b| b.to_string()),
                ".{0,16}",
            ]
            .prop_map(move |body| TranslationResource::new(name.clone(), parent, body))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any entry is either rejected with an error or round-trips exactly; nothing panics.
    #[test]
    fn arbitrary_entries_never_panic_and_round_trip(e in arb_entry()) {
        if let Ok(r) = Resource::from_entry(&e) {
            let back = r.to_entry();
            prop_assert_eq!(&back.kind, &e.kind);
            prop_assert_eq!(&back.parent, &e.parent);
            let a: Value = serde_json::from_str(&e.body).unwrap();
            let b: Value = serde_json::from_str(&back.body).unwrap();
            prop_assert_eq!(a, b);
            prop_assert_eq!(Resource::from_entry(&back).unwrap(), r.clone());
            // The stored text and the request body are the same JSON.
            let text: Value = serde_json::from_str(&r.body_text()).unwrap();
            prop_assert_eq!(text, r.body());
            // Paths never panic either and always start at the API root.
            prop_assert!(r.post_path().starts_with('/'));
            prop_assert!(r.item_path().starts_with('/'));
        }
    }

    /// Typed resources built from random field values survive to_entry/from_entry.
    #[test]
    fn typed_rules_round_trip(
        position in prop::option::of(1u32..100),
        nw in prop::option::of((any::<u32>(), 0u8..=32)),
        tp in prop::option::of((any::<u16>(), any::<u16>())),
        targets in prop::collection::vec((any::<u32>(), prop::option::of(any::<u16>())), 0..3),
        rule_type in prop::sample::select(RuleType::ALL.to_vec()),
    ) {
        let mut rule = Rule::new(parse_uuid(B).unwrap(), parse_uuid(P).unwrap(), rule_type);
        rule.position = position;
        if let Some((addr, len)) = nw {
            rule.nw_src_address = Some(Ipv4Addr::from(addr));
            rule.nw_src_length = Some(len);
        }
        rule.tp_dst = tp.map(|(s, e)| PortRange { start: Some(s), end: Some(e), extra: Extra::new() });
        if !targets.is_empty() {
            rule.nat_targets = Some(targets.into_iter().map(|(a, p)| NatTarget::to(Ipv4Addr::from(a), p)).collect());
        }
        let r = Resource::from(rule);
        prop_assert_eq!(Resource::from_entry(&r.to_entry()).unwrap(), r);
    }
}

/// The text a Translation stores lists the members in the order of the object's field table
/// (the contract the golden files and `body_hash` rely on), nested objects included, and
/// leaves unset fields out.
#[test]
fn body_text_follows_the_field_tables() {
    let b = uuid::Uuid::parse_str(B).unwrap();
    let p = uuid::Uuid::parse_str(P).unwrap();
    let q = uuid::Uuid::parse_str(Q).unwrap();
    let mut port = Port::router_port(b, p)
        .with_address(Ipv4Addr::new(10, 0, 0, 1), "10.0.0.0/24".parse().unwrap());
    port.port_mac = Some("ac:ca:ba:00:00:01".parse().unwrap());
    assert_eq!(
        Resource::from(port).body_text(),
        format!(
            r#"{{"id":"{P}","type":"Router","portAddress":"10.0.0.1","networkAddress":"10.0.0.0","networkLength":24,"portMac":"ac:ca:ba:00:00:01"}}"#
        )
    );
    let rule = Rule::new(b, p, RuleType::Dnat)
        .at(2)
        .with_flow_action(FlowAction::Accept)
        .with_nat_targets(vec![NatTarget::to(Ipv4Addr::new(10, 0, 0, 5), Some(80))])
        .to_service(Ipv4Addr::new(10, 96, 0, 1), 6, 8080);
    assert_eq!(
        Resource::from(rule).body_text(),
        format!(
            r#"{{"id":"{P}","type":"dnat","position":2,"flowAction":"accept","dlType":2048,"nwDstAddress":"10.96.0.1","nwDstLength":32,"nwProto":6,"tpDst":{{"start":8080,"end":8080}},"natTargets":[{{"addressFrom":"10.0.0.5","addressTo":"10.0.0.5","portFrom":80,"portTo":80}}]}}"#
        )
    );
    let mut route = Route::normal(b, p, "10.1.0.0/16".parse().unwrap(), q);
    route.weight = Some(100);
    assert_eq!(
        Resource::from(route).body_text(),
        format!(
            r#"{{"id":"{P}","srcNetworkAddr":"0.0.0.0","srcNetworkLength":0,"dstNetworkAddr":"10.1.0.0","dstNetworkLength":16,"nextHopPort":"{Q}","weight":100,"type":"Normal"}}"#
        )
    );
    assert_eq!(
        Resource::from(Chain::named(b, "k8s", "c")).body_text(),
        format!(r#"{{"id":"{B}","name":"c","tenantId":"k8s"}}"#)
    );
    // Unknown members follow the typed ones; a typed value wins over an extra of its name.
    let mut bridge = Bridge::new(b);
    bridge.extra.insert("a".into(), json!(1));
    bridge.extra.insert("name".into(), Value::Null);
    bridge.name = Some("n".into());
    assert_eq!(
        Resource::from(bridge).body_text(),
        format!(r#"{{"id":"{B}","name":"n","a":1}}"#)
    );
}

/// The load-balancer kinds write their members in MidoNet's REST order, leave unset ones
/// out, and a router without a load balancer is written exactly as before the member
/// existed.
#[test]
fn load_balancer_bodies_and_the_router_binding() {
    let b = uuid::Uuid::parse_str(B).unwrap();
    let p = uuid::Uuid::parse_str(P).unwrap();
    let q = uuid::Uuid::parse_str(Q).unwrap();
    assert_eq!(
        Resource::from(Router::named(b, "k8s", "r")).body_text(),
        format!(r#"{{"id":"{B}","name":"r","tenantId":"k8s"}}"#)
    );
    let mut router = Router::new(b);
    router.load_balancer_id = Some(p);
    let router = Resource::from(router);
    assert_eq!(
        router.body_text(),
        format!(r#"{{"id":"{B}","loadBalancerId":"{P}"}}"#)
    );
    // The router's binding needs the load balancer first.
    assert_eq!(router.requires(), vec![Referent::Object(p)]);
    assert_eq!(
        Resource::from(LoadBalancer::new(b)).body_text(),
        format!(r#"{{"id":"{B}","adminStateUp":true}}"#)
    );
    let pool = Resource::from(Pool::new(b, p));
    assert_eq!(
        pool.body_text(),
        format!(
            r#"{{"id":"{P}","loadBalancerId":"{B}","adminStateUp":true,"protocol":"TCP","lbMethod":"ROUND_ROBIN"}}"#
        )
    );
    assert_eq!(pool.requires(), vec![Referent::Object(b)]);
    let member = Resource::from(PoolMember::new(p, q, Ipv4Addr::new(10, 1, 0, 5), 8080));
    assert_eq!(
        member.body_text(),
        format!(
            r#"{{"id":"{Q}","poolId":"{P}","address":"10.1.0.5","protocolPort":8080,"weight":1}}"#
        )
    );
    assert_eq!(member.requires(), vec![Referent::Object(p)]);
    assert_eq!(member.deleted_with(), vec![p]);
    let vip = Resource::from(Vip::new(p, q, Ipv4Addr::new(192, 0, 2, 7), 80).sticky());
    assert_eq!(
        vip.body_text(),
        format!(
            r#"{{"id":"{Q}","poolId":"{P}","address":"192.0.2.7","protocolPort":80,"sessionPersistence":"SOURCE_IP","adminStateUp":true}}"#
        )
    );
    assert_eq!(vip.requires(), vec![Referent::Object(p)]);
    // MidoNet knows one method, one protocol and one persistence: others are refused.
    for (kind, body) in [
        ("Pool", json!({"id": P, "lbMethod": "LEAST_CONNECTIONS"})),
        (
            "Pool",
            json!({"id": P, "lbMethod": "ROUND_ROBIN", "protocol": "UDP"}),
        ),
        (
            "Vip",
            json!({"id": P, "address": "10.0.0.1", "protocolPort": 80,
                       "sessionPersistence": "HTTP_COOKIE"}),
        ),
        ("Pool", json!({"id": P})),
        ("PoolMember", json!({"id": P, "address": "10.0.0.1"})),
    ] {
        assert!(
            matches!(
                Resource::from_entry(&entry(kind, B, body.clone())),
                Err(ModelError::BadField { .. } | ModelError::MissingField { .. })
            ),
            "{kind} {body}"
        );
    }
    // MidoNet prints a VIP without persistence with an explicit null: it survives.
    assert_round_trip(&entry(
        "Vip",
        P,
        json!({"id": Q, "address": "10.0.0.1", "protocolPort": 80, "sessionPersistence": null}),
    ));
}
