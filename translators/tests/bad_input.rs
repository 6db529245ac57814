//! Bad input never crashes: each case yields a warning with its reason, and the rest of the
//! object is still translated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use midonet_translators::{Translated, TranslatorConfig};
use serde_json::json;

const HOST: &str = "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a";

fn cfg() -> TranslatorConfig {
    TranslatorConfig::default()
}

fn node(
    annotations: serde_json::Value,
    spec: serde_json::Value,
    addresses: serde_json::Value,
) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "worker-1", "annotations": annotations},
        "spec": spec,
        "status": {"addresses": addresses},
    }))
    .unwrap()
}

fn good_node() -> Node {
    node(
        json!({"midonet.org/host-id": HOST}),
        json!({"podCIDR": "10.244.1.0/24"}),
        json!([{"type": "InternalIP", "address": "192.168.0.1"}]),
    )
}

fn service(spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": spec,
    }))
    .unwrap()
}

fn pod(annotations: serde_json::Value, status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop", "annotations": annotations},
        "spec": {"nodeName": "worker-1", "containers": []},
        "status": status,
    }))
    .unwrap()
}

fn reasons(out: &Translated) -> Vec<&str> {
    out.warnings.iter().map(|w| w.reason.as_str()).collect()
}

/// Kinds of all resources, to check that the unaffected parts are still produced.
fn kinds(out: &Translated) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in out.translations.iter().flat_map(|t| &t.resources) {
        *m.entry(r.kind.clone()).or_insert(0) += 1;
    }
    m
}

#[test]
fn node_without_pod_cidr_keeps_bridge_and_port() {
    let n = node(
        json!({"midonet.org/host-id": HOST}),
        json!({}),
        json!([{"type": "InternalIP", "address": "192.168.0.1"}]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(reasons(&out), ["MissingPodCIDR"]);
    let k = kinds(&out);
    assert_eq!(k.get("Bridge"), Some(&1));
    assert_eq!(k.get("HostInterfacePort"), Some(&1));
    assert_eq!(k.get("Route"), None, "routes need the pod CIDR");
    assert_eq!(
        k.get("PortLink"),
        None,
        "the router port needs the pod CIDR"
    );
}

#[test]
fn node_with_unparseable_pod_cidr() {
    for bad in [
        "10.244.1.0",
        "10.244.1.0/33",
        "banana",
        "10.244.1.0/30/1",
        "10.244.1.0/31",
    ] {
        let n = node(
            json!({"midonet.org/host-id": HOST}),
            json!({"podCIDR": bad}),
            json!([]),
        );
        let out = midonet_translators::node(&cfg(), &n);
        assert_eq!(reasons(&out), ["InvalidPodCIDR"], "{bad}");
        assert_eq!(kinds(&out).get("Bridge"), Some(&1));
    }
}

#[test]
fn node_address_that_is_not_an_ip() {
    let n = node(
        json!({"midonet.org/host-id": HOST}),
        json!({"podCIDR": "10.244.1.0/24"}),
        json!([
            {"type": "InternalIP", "address": "node.example.com"},
            {"type": "ExternalIP", "address": "203.0.113.9"},
        ]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(reasons(&out), ["InvalidNodeAddress"]);
    // Subnet route plus the route to the one good address.
    assert_eq!(kinds(&out).get("Route"), Some(&2));
}

#[test]
fn ipv6_only_node() {
    let n = node(
        json!({"midonet.org/host-id": HOST, "midonet.org/tunnel-endpoint-ip": "fd00::1"}),
        json!({"podCIDR": "fd00:10:244:1::/64", "podCIDRs": ["fd00:10:244:1::/64"]}),
        json!([{"type": "InternalIP", "address": "fd00::1"}]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(
        reasons(&out),
        [
            "UnsupportedIPFamily",
            "UnsupportedIPFamily",
            "UnsupportedIPFamily"
        ]
    );
    assert_eq!(kinds(&out).get("Bridge"), Some(&1));
    assert_eq!(kinds(&out).get("TunnelZoneHost"), None);
}

#[test]
fn dual_stack_node_uses_its_ipv4_cidr_quietly() {
    let n = node(
        json!({"midonet.org/host-id": HOST}),
        json!({"podCIDR": "fd00:10:244:1::/64", "podCIDRs": ["fd00:10:244:1::/64", "10.244.1.0/24"]}),
        json!([{"type": "InternalIP", "address": "fd00::1"}, {"type": "InternalIP", "address": "192.168.0.1"}]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_eq!(kinds(&out).get("Route"), Some(&2));
}

#[test]
fn node_bad_annotations() {
    let n = node(
        json!({
            "midonet.org/host-id": HOST,
            "midonet.org/tunnel-zone-id": "zone-a",
            "midonet.org/tunnel-endpoint-ip": "192.168.0.1",
            "midonet.org/mac-address": "00:11:22:33:44",
        }),
        json!({"podCIDR": "10.244.1.0/24"}),
        json!([]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(reasons(&out), ["InvalidTunnelZoneID", "InvalidMACAddress"]);
    assert_eq!(kinds(&out).get("MACPort"), None);
    assert_eq!(kinds(&out).get("Bridge"), Some(&1));

    let n = node(
        json!({"midonet.org/host-id": HOST, "midonet.org/tunnel-endpoint-ip": "192.168.0.256"}),
        json!({"podCIDR": "10.244.1.0/24"}),
        json!([]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(reasons(&out), ["InvalidTunnelEndpointIP"]);
}

#[test]
fn node_with_bad_host_id_produces_nothing_but_says_why() {
    let n = node(
        json!({"midonet.org/host-id": "host-1"}),
        json!({"podCIDR": "10.244.1.0/24"}),
        json!([]),
    );
    let out = midonet_translators::node(&cfg(), &n);
    assert_eq!(reasons(&out), ["InvalidHostID"]);
    assert!(out.translations.is_empty());
    // Without the annotation it just waits, silently.
    let n = node(json!({}), json!({"podCIDR": "10.244.1.0/24"}), json!([]));
    assert_eq!(midonet_translators::node(&cfg(), &n), Translated::default());
}

#[test]
fn pod_with_malformed_mac() {
    let p = pod(
        json!({"midonet.org/mac-address": "xx:11:22:33:44:55"}),
        json!({"podIP": "10.244.1.5"}),
    );
    let out = midonet_translators::pod(&cfg(), &p, Some(&good_node()));
    assert_eq!(reasons(&out), ["InvalidMACAddress"]);
    assert_eq!(kinds(&out).get("HostInterfacePort"), Some(&1));
    assert_eq!(kinds(&out).get("MACPort"), None);
}

#[test]
fn pod_ip_problems() {
    let mac = json!({"midonet.org/mac-address": "0a:58:0a:f4:01:05"});
    let out = midonet_translators::pod(
        &cfg(),
        &pod(mac.clone(), json!({"podIP": "fd00::5"})),
        Some(&good_node()),
    );
    assert_eq!(reasons(&out), ["UnsupportedIPFamily"]);
    assert_eq!(kinds(&out).get("MACPort"), Some(&1));
    assert_eq!(kinds(&out).get("IPv4MACPair"), None);
    let out = midonet_translators::pod(
        &cfg(),
        &pod(mac, json!({"podIP": "10.244.1.500"})),
        Some(&good_node()),
    );
    assert_eq!(reasons(&out), ["InvalidPodIP"]);
}

#[test]
fn service_ports_with_unsupported_protocols() {
    let s = service(json!({
        "clusterIP": "10.96.0.10",
        "ports": [
            {"name": "sctp", "protocol": "SCTP", "port": 9000},
            {"name": "what", "protocol": "QUIC", "port": 443},
            {"name": "http", "protocol": "TCP", "port": 80},
        ],
    }));
    let out = midonet_translators::service(&cfg(), &s);
    assert_eq!(
        reasons(&out),
        ["UnsupportedProtocol", "UnsupportedProtocol"]
    );
    assert_eq!(kinds(&out).get("Chain"), Some(&1));
    assert_eq!(kinds(&out).get("Rule"), Some(&1));
}

#[test]
fn service_ports_out_of_range() {
    let s = service(json!({
        "clusterIP": "10.96.0.10",
        "ports": [{"name": "a", "port": 0}, {"name": "b", "port": 65536}, {"name": "c", "port": -1}],
    }));
    let out = midonet_translators::service(&cfg(), &s);
    assert_eq!(reasons(&out), ["InvalidPort", "InvalidPort", "InvalidPort"]);
    assert!(out.translations.is_empty());
}

#[test]
fn service_cluster_ip_problems() {
    let ipv6 = service(json!({"clusterIP": "fd00::10", "ports": [{"port": 80}]}));
    assert_eq!(
        reasons(&midonet_translators::service(&cfg(), &ipv6)),
        ["UnsupportedIPFamily"]
    );
    let bad = service(json!({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}));
    assert_eq!(
        reasons(&midonet_translators::service(&cfg(), &bad)),
        ["InvalidClusterIP"]
    );
    // Headless is not a problem.
    let headless = service(json!({"clusterIP": "None", "ports": [{"port": 80}]}));
    assert_eq!(
        midonet_translators::service(&cfg(), &headless),
        Translated::default()
    );
}

#[test]
fn endpoints_address_problems() {
    let s = service(json!({"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}));
    let e: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "subsets": [{
            "addresses": [{"ip": "fd00::5"}, {"ip": "pod-5"}, {"ip": "10.244.1.5"}],
            "ports": [{"name": "http", "port": 8080}, {"name": "http", "port": 0}],
        }],
    }))
    .unwrap();
    let out = midonet_translators::endpoints(&cfg(), &e, Some(&s));
    assert_eq!(
        reasons(&out),
        [
            "InvalidEndpointAddress",
            "InvalidPort",
            "UnsupportedIPFamily"
        ]
    );
    // The one good address still gets its DNAT, hairpin SNAT, accept and jump rules.
    assert_eq!(kinds(&out).get("Rule"), Some(&4));
}

#[test]
fn endpoints_without_their_service_wait_quietly() {
    let e: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5"}], "ports": [{"port": 8080}]}],
    }))
    .unwrap();
    assert_eq!(
        midonet_translators::endpoints(&cfg(), &e, None),
        Translated::default()
    );
    // A Service of another name is not this Endpoints' Service.
    let other: Service = serde_json::from_value(json!({
        "metadata": {"name": "other", "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]},
    }))
    .unwrap();
    assert_eq!(
        midonet_translators::endpoints(&cfg(), &e, Some(&other)),
        Translated::default()
    );
}

/// An object without a name, or a namespaced one without a namespace (which the apiserver
/// never serves), is not translated, and the warning says why: there is no default
/// namespace to put its Translations in.
#[test]
fn objects_without_a_name_or_namespace_are_not_translated() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use midonet_translators::policy::PolicyCluster;
    let cfg = cfg();
    let mut p = pod(json!({}), json!({"podIP": "10.244.1.5"}));
    let mut s = service(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}));
    let mut e: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5"}], "ports": [{"port": 80}]}],
    }))
    .unwrap();
    let mut np: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "deny", "namespace": "shop"}, "spec": {"podSelector": {}},
    }))
    .unwrap();
    let node = good_node();
    let cluster = PolicyCluster::default();
    // With both, each is translated.
    assert!(!midonet_translators::pod(&cfg, &p, Some(&node))
        .translations
        .is_empty());
    assert!(!midonet_translators::service(&cfg, &s)
        .translations
        .is_empty());
    assert!(!midonet_translators::endpoints(&cfg, &e, Some(&s))
        .translations
        .is_empty());
    assert!(!midonet_translators::network_policy(&cfg, &np, &cluster)
        .translations
        .is_empty());
    p.metadata.namespace = None;
    e.metadata.namespace = Some(String::new());
    np.metadata.namespace = None;
    let nothing = |out: Translated, reason: &str| {
        assert!(out.translations.is_empty(), "{:?}", out.translations);
        assert_eq!(reasons(&out), [reason]);
    };
    nothing(
        midonet_translators::pod(&cfg, &p, Some(&node)),
        "MissingNamespace",
    );
    nothing(
        midonet_translators::endpoints(&cfg, &e, Some(&s)),
        "MissingNamespace",
    );
    nothing(
        midonet_translators::network_policy(&cfg, &np, &cluster),
        "MissingNamespace",
    );
    assert!(midonet_translators::address_groups(&cfg, [&np], &cluster).is_empty());
    s.metadata.namespace = None;
    nothing(midonet_translators::service(&cfg, &s), "MissingNamespace");
    s.metadata.name = None;
    nothing(midonet_translators::service(&cfg, &s), "MissingName");
    let mut n = good_node();
    n.metadata.name = Some(String::new());
    nothing(midonet_translators::node(&cfg, &n), "MissingName");
}
