//! Property tests: arbitrary objects never panic, and every output is well-formed and
//! deterministic.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Node, NodeAddress, NodeSpec,
    NodeStatus, Pod, PodIP, PodSpec, PodStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use midonet_translators::meta::{
    HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION,
    TUNNEL_ZONE_ID_ANNOTATION, VERSION_LABEL,
};
use midonet_translators::naming::is_dns1123_subdomain;
use midonet_translators::{Translated, TranslatorConfig};
use proptest::prelude::*;
use serde_json::Value;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------
// Generators: mostly plausible values, with a share of garbage in every field.

fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        any::<String>(),
        "[ -~]{0,40}",
        "[a-zA-Z0-9/_.:-]{250,300}",
    ]
}

fn k8s_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?",
        1 => "[a-z0-9]{60,253}",
        1 => garbage(),
    ]
}

fn ip() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<Ipv4Addr>().prop_map(|i| i.to_string()),
        1 => any::<Ipv6Addr>().prop_map(|i| i.to_string()),
        1 => garbage(),
    ]
}

fn cidr() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (any::<Ipv4Addr>(), 0u8..=34).prop_map(|(i, l)| format!("{i}/{l}")),
        1 => (any::<Ipv6Addr>(), 0u8..=130).prop_map(|(i, l)| format!("{i}/{l}")),
        1 => garbage(),
    ]
}

fn uuid_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<u128>().prop_map(|u| Uuid::from_u128(u).to_string()),
        1 => any::<u128>().prop_map(|u| Uuid::from_u128(u).simple().to_string().to_uppercase()),
        1 => garbage(),
    ]
}

fn mac() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<[u8; 6]>().prop_map(|b| b.iter().map(|x| format!("{x:02X}")).collect::<Vec<_>>().join(":")),
        1 => any::<[u8; 6]>().prop_map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join("-")),
        1 => garbage(),
    ]
}

fn one_of(values: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(values).prop_map(str::to_string),
        1 => garbage(),
    ]
}

/// Mostly `Some`: most interesting paths need the value.
fn mostly<T: Strategy>(s: T) -> impl Strategy<Value = Option<T::Value>>
where
    T::Value: Clone,
{
    proptest::option::weighted(0.8, s)
}

fn annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    (
        mostly(uuid_string()),
        proptest::option::of(prop_oneof![Just(String::new()), uuid_string()]),
        proptest::option::of(ip()),
        proptest::option::of(mac()),
        proptest::collection::btree_map(garbage(), garbage(), 0..2),
    )
        .prop_map(|(host, zone, tunnel_ip, mac, mut extra)| {
            for (k, v) in [
                (HOST_ID_ANNOTATION, host),
                (TUNNEL_ZONE_ID_ANNOTATION, zone),
                (TUNNEL_ENDPOINT_IP_ANNOTATION, tunnel_ip),
                (MAC_ADDRESS_ANNOTATION, mac),
            ] {
                if let Some(v) = v {
                    extra.insert(k.to_string(), v);
                }
            }
            Some(extra)
        })
}

fn config() -> impl Strategy<Value = TranslatorConfig> {
    prop_oneof![
        4 => Just(TranslatorConfig::default()),
        1 => (garbage(), garbage()).prop_map(|(tenant, version)| TranslatorConfig { tenant, version, edge: None }),
    ]
}

fn node() -> impl Strategy<Value = Node> {
    (
        proptest::option::of(k8s_name()),
        annotations(),
        proptest::option::of(cidr()),
        proptest::option::of(proptest::collection::vec(cidr(), 0..3)),
        proptest::collection::vec(
            (
                one_of(&["InternalIP", "ExternalIP", "Hostname", "InternalDNS"]),
                ip(),
            ),
            0..5,
        ),
    )
        .prop_map(|(name, annotations, pod_cidr, pod_cidrs, addresses)| Node {
            metadata: ObjectMeta {
                name,
                annotations,
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                pod_cidr,
                pod_cidrs,
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .into_iter()
                        .map(|(type_, address)| NodeAddress { address, type_ })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
        })
}

fn pod() -> impl Strategy<Value = Pod> {
    (
        proptest::option::of(k8s_name()),
        proptest::option::of(k8s_name()),
        annotations(),
        mostly(prop_oneof![3 => Just("worker-1".to_string()), 1 => k8s_name()]),
        proptest::option::weighted(0.2, any::<bool>()),
        mostly(one_of(&[
            "Running",
            "Pending",
            "Succeeded",
            "Failed",
            "Unknown",
        ])),
        mostly(ip()),
        proptest::option::of(proptest::collection::vec(ip(), 0..3)),
    )
        .prop_map(
            |(name, namespace, annotations, node_name, host_network, phase, pod_ip, pod_ips)| Pod {
                metadata: ObjectMeta {
                    name,
                    namespace,
                    annotations,
                    ..ObjectMeta::default()
                },
                spec: Some(PodSpec {
                    node_name,
                    host_network,
                    ..PodSpec::default()
                }),
                status: Some(PodStatus {
                    phase,
                    pod_ip,
                    pod_ips: pod_ips.map(|ips| ips.into_iter().map(|ip| PodIP { ip }).collect()),
                    ..PodStatus::default()
                }),
            },
        )
}

fn port_name() -> impl Strategy<Value = Option<String>> {
    mostly(prop_oneof![
        6 => proptest::sample::select(&["", "http", "dns"][..]).prop_map(str::to_string),
        1 => garbage(),
    ])
}

fn protocol() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(one_of(&["TCP", "UDP", "TCP", "SCTP"]))
}

fn port_number() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 1i32..=65535, 1 => any::<i32>()]
}

fn service() -> impl Strategy<Value = Service> {
    (
        proptest::option::weighted(
            0.5,
            one_of(&[
                "ClusterIP",
                "ClusterIP",
                "NodePort",
                "LoadBalancer",
                "ExternalName",
            ]),
        ),
        mostly(prop_oneof![
            6 => any::<Ipv4Addr>().prop_map(|i| i.to_string()),
            1 => ip(),
            1 => Just("None".to_string()),
        ]),
        proptest::option::of(proptest::collection::vec(ip(), 0..3)),
        proptest::collection::vec((port_name(), protocol(), port_number()), 0..5),
    )
        .prop_map(|(type_, cluster_ip, cluster_ips, ports)| Service {
            metadata: ObjectMeta {
                name: Some("frontend".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_,
                cluster_ip,
                cluster_ips,
                ports: Some(
                    ports
                        .into_iter()
                        .map(|(name, protocol, port)| ServicePort {
                            name,
                            protocol,
                            port,
                            ..ServicePort::default()
                        })
                        .collect(),
                ),
                ..ServiceSpec::default()
            }),
            status: None,
        })
}

fn endpoints() -> impl Strategy<Value = Endpoints> {
    let subset = (
        proptest::collection::vec(ip(), 1..6),
        proptest::collection::vec(ip(), 0..2),
        proptest::collection::vec((port_name(), protocol(), port_number()), 1..4),
    )
        .prop_map(|(ready, not_ready, ports)| EndpointSubset {
            addresses: Some(ready.into_iter().map(address).collect()),
            not_ready_addresses: Some(not_ready.into_iter().map(address).collect()),
            ports: Some(
                ports
                    .into_iter()
                    .map(|(name, protocol, port)| EndpointPort {
                        name,
                        protocol,
                        port,
                        ..EndpointPort::default()
                    })
                    .collect(),
            ),
        });
    (
        prop_oneof![4 => Just("frontend".to_string()), 1 => k8s_name()],
        proptest::collection::vec(subset, 1..3),
    )
        .prop_map(|(name, subsets)| Endpoints {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            subsets: Some(subsets),
        })
}

fn address(ip: String) -> EndpointAddress {
    EndpointAddress {
        ip,
        ..EndpointAddress::default()
    }
}

// ---------------------------------------------------------------------------------------
// The invariants.

fn is_lower_uuid(s: &str) -> bool {
    Uuid::parse_str(s).is_ok_and(|u| u.hyphenated().to_string() == s)
}

fn check(cfg: &TranslatorConfig, out: &Translated) -> Result<(), TestCaseError> {
    let mut names = BTreeSet::new();
    for tr in &out.translations {
        prop_assert!(is_dns1123_subdomain(&tr.name), "bad name {:?}", tr.name);
        prop_assert!(
            names.insert((&tr.namespace, &tr.name)),
            "duplicate {}",
            tr.name
        );
        prop_assert!(!tr.namespace.is_empty());
        prop_assert!(!tr.resources.is_empty(), "empty Translation {}", tr.name);
        match tr.labels.get(VERSION_LABEL) {
            Some(v) => prop_assert_eq!(v, &cfg.version),
            None => prop_assert!(tr.labels.is_empty()),
        }
        let mut ids = BTreeSet::new();
        for r in &tr.resources {
            let body: Value = serde_json::from_str(&r.body)
                .map_err(|e| TestCaseError::fail(format!("{} body: {e}", r.kind)))?;
            prop_assert!(body.is_object(), "{} body is not an object", r.kind);
            prop_assert!(
                r.parent.is_empty() || is_lower_uuid(&r.parent),
                "parent {:?}",
                r.parent
            );
            if let Some(id) = body.get("id") {
                let id = id.as_str().unwrap_or_default();
                prop_assert!(is_lower_uuid(id), "id {:?}", id);
                prop_assert!(
                    ids.insert(id.to_string()),
                    "duplicate id {} in {}",
                    id,
                    tr.name
                );
            }
        }
    }
    for w in &out.warnings {
        prop_assert!(w
            .reason
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase()));
        prop_assert!(w.reason.chars().all(|c| c.is_ascii_alphanumeric()));
        prop_assert!(!w.message.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn node_translation_is_total(cfg in config(), n in node()) {
        let out = midonet_translators::node(&cfg, &n);
        check(&cfg, &out)?;
        prop_assert_eq!(out, midonet_translators::node(&cfg, &n));
    }

    #[test]
    fn pod_translation_is_total(cfg in config(), p in pod(), n in proptest::option::of(node())) {
        let mut n = n;
        // Make the Node match the pod's nodeName often enough to reach the interesting paths.
        if let (Some(node), Some(name)) = (n.as_mut(), p.spec.as_ref().and_then(|s| s.node_name.clone())) {
            node.metadata.name = Some(name);
        }
        let out = midonet_translators::pod(&cfg, &p, n.as_ref());
        check(&cfg, &out)?;
        prop_assert_eq!(out, midonet_translators::pod(&cfg, &p, n.as_ref()));
    }

    #[test]
    fn service_translation_is_total(cfg in config(), s in service()) {
        let out = midonet_translators::service(&cfg, &s);
        check(&cfg, &out)?;
        prop_assert_eq!(out, midonet_translators::service(&cfg, &s));
    }

    #[test]
    fn endpoints_translation_is_total(cfg in config(), e in endpoints(), s in proptest::option::of(service())) {
        let out = midonet_translators::endpoints(&cfg, &e, s.as_ref());
        check(&cfg, &out)?;
        prop_assert_eq!(&out, &midonet_translators::endpoints(&cfg, &e, s.as_ref()));
    }

    #[test]
    fn endpoints_order_does_not_matter(e in endpoints(), s in service()) {
        // Reversing subsets and addresses describes the same endpoints: same output.
        let cfg = TranslatorConfig::default();
        let mut reversed = e.clone();
        if let Some(subsets) = reversed.subsets.as_mut() {
            subsets.reverse();
            for s in subsets.iter_mut() {
                if let Some(a) = s.addresses.as_mut() {
                    a.reverse();
                }
            }
        }
        let a = midonet_translators::endpoints(&cfg, &e, Some(&s));
        let b = midonet_translators::endpoints(&cfg, &reversed, Some(&s));
        prop_assert_eq!(a.translations, b.translations);
    }

    #[test]
    fn global_translation_is_well_formed(cfg in config()) {
        let out = Translated { translations: midonet_translators::global(&cfg), warnings: vec![] };
        check(&cfg, &out)?;
    }

    #[test]
    fn version_changes_every_id(n in node(), p in pod(), s in service(), e in endpoints()) {
        let v1 = TranslatorConfig { version: "1".into(), ..TranslatorConfig::default() };
        let v2 = TranslatorConfig { version: "2".into(), ..TranslatorConfig::default() };
        let mut node = n;
        if let Some(name) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            node.metadata.name = Some(name);
        }
        let ids = |cfg: &TranslatorConfig| {
            let mut all = vec![Translated { translations: midonet_translators::global(cfg), warnings: vec![] }];
            all.push(midonet_translators::node(cfg, &node));
            all.push(midonet_translators::pod(cfg, &p, Some(&node)));
            all.push(midonet_translators::service(cfg, &s));
            all.push(midonet_translators::endpoints(cfg, &e, Some(&s)));
            all.iter()
                .flat_map(|t| t.translations.iter())
                .flat_map(|tr| tr.resources.iter())
                .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok()?.get("id")?.as_str().map(str::to_string))
                .collect::<BTreeSet<_>>()
        };
        let (a, b) = (ids(&v1), ids(&v2));
        prop_assert!(a.is_disjoint(&b));
    }
}

/// Objects of one namespace never share a Translation name, whatever their names, MACs and
/// addresses (in the current version's readable names, the parts of a key stay apart: an
/// object name with dots, then parts of a fixed shape). Every combination of a few values
/// chosen so that a key read two ways would show: names whose labels look like the address
/// or the MAC after them.
#[test]
fn objects_never_share_a_name() {
    let cfg = TranslatorConfig::default();
    let labels = ["a", "1", "0a0000000001"];
    let mut names: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    for _ in 0..3 {
        let longer: Vec<String> = names
            .iter()
            .flat_map(|n| labels.iter().map(move |l| format!("{n}.{l}")))
            .collect();
        names.extend(longer);
    }
    names.sort();
    names.dedup();
    let macs = ["0a:00:00:00:00:01", "0a:00:00:00:00:02"];
    let ips = ["1.1.1.1", "1.1.1.10", "0.0.0.1"];
    let worker: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-1", "annotations": {
            HOST_ID_ANNOTATION: "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a"}},
        "spec": {"podCIDR": "10.244.1.0/24"},
    }))
    .unwrap();
    let mut owner_of: BTreeMap<(String, String), String> = BTreeMap::new();
    for name in &names {
        for mac in macs {
            for ip in ips {
                let node: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "annotations": {
                        HOST_ID_ANNOTATION: "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a",
                        TUNNEL_ENDPOINT_IP_ANNOTATION: ip,
                        MAC_ADDRESS_ANNOTATION: mac}},
                    "spec": {"podCIDR": format!("{ip}/30")},
                }))
                .unwrap();
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": "shop",
                                 "annotations": {MAC_ADDRESS_ANNOTATION: mac}},
                    "spec": {"nodeName": "worker-1", "containers": []},
                    "status": {"podIP": ip},
                }))
                .unwrap();
                let trs = midonet_translators::node(&cfg, &node)
                    .translations
                    .into_iter()
                    .chain(midonet_translators::pod(&cfg, &pod, Some(&worker)).translations);
                for tr in trs {
                    let owner = owner_of
                        .entry((tr.namespace.clone(), tr.name.clone()))
                        .or_insert_with(|| name.clone());
                    assert_eq!(owner, name, "{} is two objects'", tr.name);
                }
            }
        }
    }
    assert!(owner_of.len() > 1000, "{}", owner_of.len());
}
