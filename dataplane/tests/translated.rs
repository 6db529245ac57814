//! The translators' network, executed: a small cluster translated by the pure
//! translators, pushed into the data-plane model the way MidoNet would store it, and
//! checked against what Kubernetes promises. Then the same network broken on purpose, one
//! way at a time: the check must report exactly the flows the break affects.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, LoadBalancerIngress,
    LoadBalancerStatus, Node, NodeAddress, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Service,
    ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use midonet_dataplane::cluster::ServiceAddressKind;
use midonet_dataplane::{check, Cluster, FlowKind, Report, RuleOrder, Topology};
use midonet_translators::meta::{HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION};
use midonet_translators::model::{Resource, RuleType};
use midonet_translators::{DesiredTranslation, SliceView, TranslatorConfig};
use uuid::Uuid;

fn meta(ns: Option<&str>, name: &str, annotations: &[(&str, String)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(str::to_string),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

fn node(name: &str, n: u8, mac: bool) -> Node {
    let mut ann = vec![(
        HOST_ID_ANNOTATION,
        Uuid::from_u128(0x100 + u128::from(n)).to_string(),
    )];
    if mac {
        ann.push((MAC_ADDRESS_ANNOTATION, format!("52:54:00:00:00:{n:02x}")));
    }
    Node {
        metadata: meta(None, name, &ann),
        spec: Some(NodeSpec {
            pod_cidr: Some(format!("10.1.{n}.0/24")),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: format!("192.168.0.{n}"),
            }]),
            ..NodeStatus::default()
        }),
    }
}

fn pod(ns: &str, name: &str, node: &str, ip: &str, mac: Option<&str>) -> Pod {
    let ann: Vec<(&str, String)> = mac
        .map(|m| (MAC_ADDRESS_ANNOTATION, m.to_string()))
        .into_iter()
        .collect();
    Pod {
        metadata: meta(Some(ns), name, &ann),
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(ip.into()),
            ..PodStatus::default()
        }),
    }
}

fn service(ns: &str, name: &str, ip: &str, type_: &str, ports: &[(&str, i32, &str)]) -> Service {
    Service {
        metadata: meta(Some(ns), name, &[]),
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            cluster_ip: Some(ip.into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p, proto)| ServicePort {
                        name: Some(n.to_string()),
                        port: *p,
                        protocol: Some(proto.to_string()),
                        target_port: Some(IntOrString::Int(*p)),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn endpoints(ns: &str, name: &str, ips: &[&str], ports: &[(&str, i32, &str)]) -> Endpoints {
    Endpoints {
        metadata: meta(Some(ns), name, &[]),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(
                ips.iter()
                    .map(|ip| EndpointAddress {
                        ip: ip.to_string(),
                        ..EndpointAddress::default()
                    })
                    .collect(),
            ),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p, proto)| EndpointPort {
                        name: Some(n.to_string()),
                        port: *p,
                        protocol: Some(proto.to_string()),
                        ..EndpointPort::default()
                    })
                    .collect(),
            ),
            not_ready_addresses: None,
        }]),
    }
}

/// Two nodes, four pods (one without a MAC annotation), a load-balanced Service on two
/// nodes, the apiserver's Service on a node address, a Service without endpoints, a
/// NodePort Service, a LoadBalancer Service with ingress IPs (one in `Proxy` mode, which
/// the load balancer serves itself) and a Service with external IPs: pods use the cluster
/// IPs, the external IPs and the VIP-mode ingress IP.
fn cluster() -> Cluster {
    Cluster {
        namespaces: Vec::new(),
        network_policies: Vec::new(),
        nodes: vec![node("n1", 1, true), node("n2", 2, false)],
        pods: vec![
            pod("app", "a1", "n1", "10.1.1.10", Some("0a:00:00:00:01:0a")),
            pod("app", "a2", "n1", "10.1.1.11", Some("0a:00:00:00:01:0b")),
            pod("app", "b1", "n2", "10.1.2.10", Some("0a:00:00:00:02:0a")),
            pod("app", "b2", "n2", "10.1.2.11", None),
        ],
        services: vec![
            service(
                "app",
                "web",
                "10.96.0.10",
                "ClusterIP",
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ),
            service(
                "app",
                "empty",
                "10.96.0.11",
                "ClusterIP",
                &[("http", 80, "TCP")],
            ),
            service(
                "default",
                "kubernetes",
                "10.96.0.1",
                "ClusterIP",
                &[("https", 443, "TCP")],
            ),
            service(
                "app",
                "nodeport",
                "10.96.0.12",
                "NodePort",
                &[("http", 80, "TCP")],
            ),
            with_ingress(
                service(
                    "app",
                    "lb",
                    "10.96.0.13",
                    "LoadBalancer",
                    &[("http", 80, "TCP")],
                ),
                &[("192.0.2.50", None), ("192.0.2.51", Some("Proxy"))],
            ),
            with_external_ips(
                service(
                    "app",
                    "ext",
                    "10.96.0.14",
                    "ClusterIP",
                    &[("http", 80, "TCP"), ("dns", 53, "UDP")],
                ),
                &["203.0.113.10", "198.51.100.7"],
            ),
        ],
        endpoints: vec![
            endpoints(
                "app",
                "web",
                &["10.1.1.10", "10.1.2.10"],
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ),
            endpoints("app", "empty", &[], &[("http", 80, "TCP")]),
            endpoints(
                "default",
                "kubernetes",
                &["192.168.0.1"],
                &[("https", 443, "TCP")],
            ),
            endpoints("app", "nodeport", &["10.1.2.11"], &[("http", 80, "TCP")]),
            endpoints(
                "app",
                "lb",
                &["10.1.1.11", "10.1.2.11"],
                &[("http", 80, "TCP")],
            ),
            endpoints(
                "app",
                "ext",
                &["10.1.1.10", "10.1.2.11"],
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ),
        ],
        endpoint_slices: None,
        edge: None,
    }
}

fn with_external_ips(mut s: Service, ips: &[&str]) -> Service {
    if let Some(spec) = s.spec.as_mut() {
        spec.external_ips = Some(ips.iter().map(|ip| ip.to_string()).collect());
    }
    s
}

/// `status.loadBalancer.ingress`: (ip, ipMode).
fn with_ingress(mut s: Service, ingress: &[(&str, Option<&str>)]) -> Service {
    s.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(
                ingress
                    .iter()
                    .map(|(ip, mode)| LoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ip_mode: mode.map(str::to_string),
                        ..LoadBalancerIngress::default()
                    })
                    .collect(),
            ),
        }),
        ..ServiceStatus::default()
    });
    s
}

/// The Translations of the cluster, in the order the controllers push them.
fn translate(c: &Cluster) -> Vec<DesiredTranslation> {
    let cfg = TranslatorConfig {
        edge: c.edge.clone(),
        ..TranslatorConfig::default()
    };
    let mut out = midonet_translators::global(&cfg);
    let nodes: BTreeMap<String, &Node> = c
        .nodes
        .iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
        .collect();
    for n in &c.nodes {
        out.extend(midonet_translators::node(&cfg, n).translations);
    }
    for p in &c.pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| nodes.get(n));
        out.extend(midonet_translators::pod(&cfg, p, node.copied()).translations);
    }
    for s in &c.services {
        out.extend(midonet_translators::service(&cfg, s).translations);
    }
    match &c.endpoint_slices {
        // With slices the Service controller translates the endpoints.
        Some(slices) => {
            for s in &c.services {
                let views = slices.iter().map(SliceView::from);
                out.extend(midonet_translators::endpoint_slices(&cfg, s, views).translations);
            }
        }
        None => {
            for e in &c.endpoints {
                let svc = c.services.iter().find(|s| {
                    s.metadata.name == e.metadata.name
                        && s.metadata.namespace == e.metadata.namespace
                });
                out.extend(midonet_translators::endpoints(&cfg, e, svc).translations);
            }
        }
    }
    out
}

fn resources(trs: &[DesiredTranslation]) -> Vec<Resource> {
    trs.iter()
        .flat_map(|t| t.resources.iter())
        .map(|e| Resource::from_entry(e).expect("translators emit valid entries"))
        .collect()
}

fn run(c: &Cluster, resources: Vec<Resource>) -> Report {
    let topo = Topology::new(resources, RuleOrder::Pushed, c.attachments());
    assert!(topo.problems().is_empty(), "{:?}", topo.problems());
    check(&topo, c, &mut |_, _| {})
}

fn failures(r: &Report) -> BTreeSet<(FlowKind, String, String)> {
    r.failures
        .iter()
        .map(|f| (f.kind, f.from.clone(), f.to.clone()))
        .collect()
}

#[test]
fn the_translated_network_keeps_kubernetes_promises() {
    let c = cluster();
    let report = run(&c, resources(&translate(&c)));
    for f in &report.failures {
        eprintln!(
            "{:?} {} → {}: {}\n{}",
            f.kind,
            f.from,
            f.to,
            f.problem,
            serde_json::to_string_pretty(&f.trace).unwrap_or_default()
        );
    }
    assert!(report.passed(), "{} failures", report.failures.len());
    assert!(report.unplugged.is_empty(), "{:?}", report.unplugged);
    // No edge here: the outside flows are tests/edge.rs's.
    let inside = FlowKind::ALL.into_iter().filter(|k| k.in_every_cluster());
    for kind in inside {
        assert!(
            report.by_kind.get(&kind).is_some_and(|t| t.checked > 0),
            "no {kind:?} flow checked"
        );
    }
}

fn kube_pre_rules(res: &[Resource]) -> (usize, usize) {
    let find = |t: RuleType| {
        res.iter()
            .position(|r| matches!(r, Resource::Rule(x) if x.rule_type == t))
            .expect("KUBE-PRE rule")
    };
    (find(RuleType::RevSnat), find(RuleType::RevDnat))
}

fn every(kind: FlowKind, r: &Report) -> usize {
    r.by_kind.get(&kind).map(|t| t.checked).unwrap_or(0)
}

/// Swaps the positions of two rules in push order (the rule at `a` takes `b`'s position
/// and its place in the list, and the other way round).
fn swap_rules(res: &mut [Resource], a: usize, b: usize) {
    let (Resource::Rule(ra), Resource::Rule(rb)) = (res[a].clone(), res[b].clone()) else {
        panic!("not two rules")
    };
    let (mut ra2, mut rb2) = (ra.clone(), rb.clone());
    ra2.position = rb.position;
    rb2.position = ra.position;
    res[a] = Resource::Rule(rb2);
    res[b] = Resource::Rule(ra2);
}

#[test]
fn swapping_kube_pre_changes_nothing_because_the_hairpin_reply_crosses_the_bridge_twice() {
    // MAPPING.md argued that rev_snat must come before rev_dnat. Executed, the order does
    // not matter here: with rev_dnat first, the hairpin reply is reverse-SNATed on its
    // way to the router and reverse-DNATed when it comes back into the same bridge (the
    // NAT state is the bridge's). The check must say so rather than invent failures.
    let c = cluster();
    let mut res = resources(&translate(&c));
    let (snat, dnat) = kube_pre_rules(&res);
    swap_rules(&mut res, snat, dnat);
    let report = run(&c, res);
    assert!(report.passed(), "{:#?}", failures(&report));
    assert!(every(FlowKind::Hairpin, &report) > 0);
}

#[test]
fn snat_before_dnat_breaks_exactly_the_hairpin_flows_of_that_service_port() {
    let c = cluster();
    let trs = translate(&c);
    let mut res = resources(&trs);
    // The generation chain of web:80: its DNAT (position 1) and first SNAT (position 2).
    let generation = trs
        .iter()
        .find(|t| t.name.starts_with("endpoints-port.") && t.name.contains(".web.http."))
        .expect("generation of web/http");
    let ids: Vec<Uuid> = generation
        .resources
        .iter()
        .filter_map(|e| match Resource::from_entry(e).ok()? {
            Resource::Rule(r) if matches!(r.rule_type, RuleType::Dnat | RuleType::Snat) => {
                Some(r.id)
            }
            _ => None,
        })
        .collect();
    let at = |id: Uuid| {
        res.iter()
            .position(|r| matches!(r, Resource::Rule(x) if x.id == id))
            .expect("rule")
    };
    let (dnat, first_snat) = (at(ids[0]), at(ids[1]));
    swap_rules(&mut res, dnat, first_snat);
    let report = run(&c, res);
    let failed = failures(&report);
    assert!(!failed.is_empty());
    // The first SNAT rule is a1's (targets are sorted): only a1 calling web:80 and being
    // balanced onto itself loses its connection, whichever kind of flow the check had
    // filed it under (a1 is also its node's representative client). Every other flow,
    // web:80 from other pods included, still works.
    assert!(failed.iter().any(|(k, _, _)| *k == FlowKind::Hairpin));
    for (kind, from, to) in &failed {
        assert_eq!(from, "pod/app/a1", "{kind:?} {from} → {to}");
        assert!(to.starts_with("svc/app/web:80"), "{to}");
    }
    for f in &report.failures {
        assert!(
            f.problem.contains("not 10.96.0.10:80")
                || f.problem.contains("reply does not come back"),
            "{}",
            f.problem
        );
    }
}

#[test]
fn dropping_a_pod_cidr_route_breaks_exactly_the_traffic_into_that_node() {
    let c = cluster();
    let res: Vec<Resource> = resources(&translate(&c))
        .into_iter()
        .filter(|r| !matches!(r, Resource::Route(rt) if rt.dst_network_addr == Some("10.1.2.0".parse().unwrap()) && rt.dst_network_length == Some(24)))
        .collect();
    let report = run(&c, res);
    let failed = failures(&report);
    assert!(!failed.is_empty());
    for f in &report.failures {
        // Either the packet or its reply has to be routed into n2's pod CIDR from n1.
        let n2_dst = f.to.contains("10.1.2.");
        let n2_src = f.from.starts_with("pod/app/b") || f.from == "node/n2";
        let via_service = matches!(f.kind, FlowKind::PodToService | FlowKind::Hairpin);
        assert!(
            n2_dst || n2_src || via_service,
            "unexpected failure {} → {}: {}",
            f.from,
            f.to,
            f.problem
        );
    }
    // Every flow from n1 to a pod on n2 fails; every flow inside n1 still works.
    assert!(failed.iter().any(|(k, from, to)| *k == FlowKind::PodToPod
        && from.starts_with("pod/app/a")
        && to.contains("10.1.2.")));
    assert!(
        !failed
            .iter()
            .any(|(_, from, to)| from.starts_with("pod/app/a") && to.contains("10.1.1.")),
        "{failed:#?}"
    );
}

#[test]
fn deleting_one_service_jump_breaks_exactly_that_service_port() {
    let c = cluster();
    let mut res = resources(&translate(&c));
    let services_jump = |r: &Resource| matches!(r, Resource::Rule(x) if x.rule_type == RuleType::Jump && x.nw_dst_address == Some("10.96.0.10".parse().unwrap()) && x.tp_dst.as_ref().and_then(|p| p.start) == Some(53));
    let before = res.len();
    res.retain(|r| !services_jump(r));
    assert_eq!(res.len(), before - 1);
    let report = run(&c, res);
    let failed = failures(&report);
    assert!(!failed.is_empty());
    for (kind, _, to) in &failed {
        assert!(
            matches!(kind, FlowKind::PodToService | FlowKind::Hairpin),
            "{kind:?} {to}"
        );
        assert!(to.starts_with("svc/app/web:53"), "{to}");
    }
    assert_eq!(
        failed.len(),
        report
            .failures
            .iter()
            .filter(|f| f.to.starts_with("svc/app/web:53"))
            .count()
    );
    let expected = report.by_kind.values().map(|t| t.checked).sum::<usize>();
    assert!(expected > failed.len());
}

/// Removes the KUBE-SERVICES jump for `ip:port`; exactly one must exist.
fn without_jump_to(mut res: Vec<Resource>, ip: &str, port: u16) -> Vec<Resource> {
    let ip: std::net::Ipv4Addr = ip.parse().unwrap();
    let hit = |r: &Resource| matches!(r, Resource::Rule(x) if x.rule_type == RuleType::Jump && x.nw_dst_address == Some(ip) && x.tp_dst.as_ref().and_then(|p| p.start) == Some(port));
    let before = res.len();
    res.retain(|r| !hit(r));
    assert_eq!(res.len(), before - 1, "one jump to {ip}:{port}");
    res
}

#[test]
fn a_service_is_expected_at_its_external_and_vip_ingress_ips_like_at_its_cluster_ip() {
    let c = cluster();
    let got: BTreeSet<(String, String, Vec<String>)> = c
        .service_ports()
        .iter()
        .filter(|sp| sp.name == "lb" || sp.name == "ext")
        .map(|sp| {
            (
                sp.display(),
                sp.address.to_string(),
                sp.endpoints.iter().map(|e| e.to_string()).collect(),
            )
        })
        .collect();
    let lb = || vec!["10.1.1.11:80".to_string(), "10.1.2.11:80".to_string()];
    let ext = |p: u16| vec![format!("10.1.1.10:{p}"), format!("10.1.2.11:{p}")];
    let row = |d: &str, a: &str, e: Vec<String>| (d.to_string(), a.to_string(), e);
    // The Proxy-mode ingress IP 192.0.2.51 is the load balancer's, not a service address.
    let want = BTreeSet::from([
        row("svc/app/lb:80 (http)", "10.96.0.13:80", lb()),
        row(
            "svc/app/lb:80 (http) via load-balancer ingress",
            "192.0.2.50:80",
            lb(),
        ),
        row("svc/app/ext:80 (http)", "10.96.0.14:80", ext(80)),
        row(
            "svc/app/ext:80 (http) via external IP",
            "203.0.113.10:80",
            ext(80),
        ),
        row(
            "svc/app/ext:80 (http) via external IP",
            "198.51.100.7:80",
            ext(80),
        ),
        row("svc/app/ext:53 (dns)", "10.96.0.14:53", ext(53)),
        row(
            "svc/app/ext:53 (dns) via external IP",
            "203.0.113.10:53",
            ext(53),
        ),
        row(
            "svc/app/ext:53 (dns) via external IP",
            "198.51.100.7:53",
            ext(53),
        ),
    ]);
    assert_eq!(got, want);
}

#[test]
fn dropping_the_jump_of_one_external_or_ingress_ip_breaks_exactly_that_address() {
    let c = cluster();
    for (ip, port, name) in [
        ("203.0.113.10", 80, "svc/app/ext:80 (http) via external IP"),
        ("198.51.100.7", 53, "svc/app/ext:53 (dns) via external IP"),
        (
            "192.0.2.50",
            80,
            "svc/app/lb:80 (http) via load-balancer ingress",
        ),
    ] {
        let res = without_jump_to(resources(&translate(&c)), ip, port);
        let report = run(&c, res);
        let failed = failures(&report);
        let to = format!("{name} ({ip}:{port})");
        // Every client, the endpoints themselves (hairpin) included, loses that address.
        assert!(
            failed
                .iter()
                .any(|(k, _, t)| *k == FlowKind::PodToService && *t == to),
            "{ip}: {failed:#?}"
        );
        assert!(
            failed
                .iter()
                .any(|(k, _, t)| *k == FlowKind::Hairpin && *t == to),
            "{ip}: {failed:#?}"
        );
        for (kind, from, t) in &failed {
            assert_eq!(t, &to, "{kind:?} {from}");
        }
    }
}

/// An EndpointSlice of Service `service` in `app`: endpoints (address, ready, serving,
/// terminating) on port `http` 80/TCP.
fn slice(name: &str, service: &str, eps: &[(&str, bool, bool, bool)]) -> EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "app",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": eps.iter().map(|(ip, r, s, t)| serde_json::json!({
            "addresses": [ip], "conditions": {"ready": r, "serving": s, "terminating": t}})).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .unwrap()
}

/// `cluster()` whose controllers read EndpointSlices: `web:80` has two slices, merged, one
/// with a draining endpoint that gets nothing while others are ready; `lb:80` has only
/// a draining endpoint (serving, terminating), which kube-proxy falls back to, and a
/// not-serving one. The Endpoints objects stay (and disagree about `lb`): they are not read.
fn sliced_cluster() -> Cluster {
    let mut c = cluster();
    c.endpoint_slices = Some(vec![
        slice("web-a", "web", &[("10.1.1.10", true, true, false)]),
        slice(
            "web-b",
            "web",
            &[
                ("10.1.2.10", true, true, false),
                ("10.1.1.11", false, true, true),
            ],
        ),
        slice(
            "lb-a",
            "lb",
            &[
                ("10.1.2.11", false, true, true),
                ("10.1.1.11", false, false, true),
            ],
        ),
    ]);
    c
}

#[test]
fn a_cluster_on_endpoint_slices_is_checked_against_its_merged_slices() {
    let c = sliced_cluster();
    let by_port: BTreeMap<String, Vec<String>> = c
        .service_ports()
        .iter()
        .filter(|sp| sp.via == ServiceAddressKind::ClusterIp)
        .map(|sp| {
            (
                sp.display(),
                sp.endpoints.iter().map(|e| e.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        by_port["svc/app/web:80 (http)"],
        ["10.1.1.10:80", "10.1.2.10:80"]
    );
    assert_eq!(by_port["svc/app/lb:80 (http)"], ["10.1.2.11:80"]);
    // No slice of web's dns port nor of ext: nothing to send them to.
    assert!(by_port["svc/app/web:53 (dns)"].is_empty());
    assert!(by_port["svc/app/ext:80 (http)"].is_empty());

    let trs = translate(&c);
    let report = run(&c, resources(&trs));
    assert!(report.passed(), "{:#?}", failures(&report));
    assert!(every(FlowKind::Hairpin, &report) > 0);

    // The same network judged by the Endpoints objects fails where they disagree with the
    // slices (lb's Endpoints list two ready endpoints, the slices one draining one; the
    // Services without slices have Endpoints), and only on Service flows.
    let mut by_endpoints = c.clone();
    by_endpoints.endpoint_slices = None;
    let failed = failures(&run(&by_endpoints, resources(&trs)));
    assert!(
        failed.iter().all(|(_, _, to)| to.starts_with("svc/")),
        "{failed:#?}"
    );
    assert!(failed
        .iter()
        .any(|(_, _, to)| to.starts_with("svc/app/lb:80")));

    // Dropping the DNAT rule of lb's generation (the slice's endpoint) breaks lb:80, at the
    // cluster IP and the ingress IP, and nothing else.
    let generation = trs
        .iter()
        .find(|t| t.name.starts_with("endpoints-port.") && t.name.contains(".lb.http."))
        .expect("generation of lb/http");
    let dnat = generation
        .resources
        .iter()
        .find_map(|e| match Resource::from_entry(e).ok()? {
            Resource::Rule(r) if r.rule_type == RuleType::Dnat => Some(r.id),
            _ => None,
        })
        .expect("DNAT rule");
    let mut res = resources(&trs);
    let chain = res
        .iter()
        .find_map(|r| match r {
            Resource::Rule(x) if x.id == dnat => Some(x.parent),
            _ => None,
        })
        .expect("DNAT rule pushed");
    res.retain(|r| !matches!(r, Resource::Rule(x) if x.id == dnat));
    // As if it had been deleted once pushed: the rules after it move up one place.
    for r in &mut res {
        if let Resource::Rule(x) = r {
            if x.parent == chain {
                x.position = x.position.map(|p| p - 1);
            }
        }
    }
    let failed = failures(&run(&c, res));
    assert!(failed
        .iter()
        .any(|(_, _, to)| to.contains("via load-balancer ingress")));
    assert!(failed
        .iter()
        .any(|(_, _, to)| to == "svc/app/lb:80 (http) (10.96.0.13:80)"));
    for (kind, from, to) in &failed {
        assert!(to.starts_with("svc/app/lb:80"), "{kind:?} {from} → {to}");
    }
}

/// Endpoints Kubernetes lists at addresses no pod or node has (an external backend
/// behind a selector-less Service, a pod gone from the node): nothing there can receive,
/// so the paths to them are skipped and the addresses listed; the flows to the
/// addresses workloads own are still checked.
fn cluster_with_foreign_endpoints() -> Cluster {
    let mut c = cluster();
    c.services.push(service(
        "app",
        "mixed",
        "10.96.0.20",
        "ClusterIP",
        &[("http", 80, "TCP")],
    ));
    c.services.push(service(
        "app",
        "external",
        "10.96.0.21",
        "ClusterIP",
        &[("http", 80, "TCP")],
    ));
    // One pod, one address outside the cluster, one unused address in a pod CIDR.
    c.endpoints.push(endpoints(
        "app",
        "mixed",
        &["10.1.1.10", "172.16.0.5", "10.1.2.99"],
        &[("http", 80, "TCP")],
    ));
    c.endpoints.push(endpoints(
        "app",
        "external",
        &["172.16.0.6"],
        &[("http", 80, "TCP")],
    ));
    c
}

#[test]
fn endpoints_no_workload_owns_are_listed_and_skipped() {
    let c = cluster_with_foreign_endpoints();
    let report = run(&c, resources(&translate(&c)));
    let failed = failures(&report);
    assert!(report.passed(), "{failed:#?}");
    assert_eq!(
        report.unverifiable_endpoints,
        vec![
            "svc/app/mixed:80 (http) → 10.1.2.99:80".to_string(),
            "svc/app/mixed:80 (http) → 172.16.0.5:80".to_string(),
            "svc/app/external:80 (http) → 172.16.0.6:80".to_string(),
        ]
    );
    // Breaking either Service is still noticed: the packet then drops before any NAT,
    // on its way to the cluster IP, which is not a foreign endpoint.
    for ip in ["10.96.0.20", "10.96.0.21"] {
        let mut res = resources(&translate(&c));
        let jump = |r: &Resource| matches!(r, Resource::Rule(x) if x.rule_type == RuleType::Jump && x.nw_dst_address == Some(ip.parse().unwrap()));
        let before = res.len();
        res.retain(|r| !jump(r));
        assert_eq!(res.len(), before - 1);
        let report = run(&c, res);
        let failed = failures(&report);
        assert!(!failed.is_empty(), "{ip}: the deleted jump went unnoticed");
        let svc = if ip.ends_with(".20") {
            "mixed"
        } else {
            "external"
        };
        for (kind, _, to) in &failed {
            assert!(
                to.starts_with(&format!("svc/app/{svc}:80")),
                "{kind:?} {to}"
            );
        }
        // The pod endpoint of `mixed` is still checked, calling its own Service too.
        if svc == "mixed" {
            assert!(
                failed
                    .iter()
                    .any(|(k, from, _)| *k == FlowKind::Hairpin && from == "pod/app/a1"),
                "{failed:#?}"
            );
        }
    }
}

mod random_clusters {
    use super::*;
    use proptest::prelude::*;

    /// A random small cluster: 1–3 nodes, up to 3 pods each, up to 3 Services of up to
    /// 2 ports, some with an external IP, whose endpoints are a random subset of the pods.
    fn arb_cluster() -> impl Strategy<Value = Cluster> {
        (
            proptest::collection::vec(
                (
                    any::<bool>(),
                    proptest::collection::vec(any::<bool>(), 0..=3),
                ),
                1..=3,
            ),
            proptest::collection::vec(
                (any::<bool>(), 1usize..=2, any::<u16>(), any::<bool>()),
                0..=3,
            ),
        )
            .prop_map(|(nodes, services)| {
                let mut c = Cluster::default();
                let mut pod_ips = Vec::new();
                for (n, (node_mac, pods)) in nodes.iter().enumerate() {
                    let n8 = n as u8 + 1;
                    let name = format!("n{n8}");
                    c.nodes.push(node(&name, n8, *node_mac));
                    for (i, pod_mac) in pods.iter().enumerate() {
                        let ip = format!("10.1.{n8}.{}", 10 + i);
                        let mac = format!("0a:00:00:00:{n8:02x}:{:02x}", 10 + i);
                        c.pods.push(pod(
                            "app",
                            &format!("p{n8}-{i}"),
                            &name,
                            &ip,
                            pod_mac.then_some(mac.as_str()),
                        ));
                        pod_ips.push(ip);
                    }
                }
                for (s, (udp, nports, pick, external)) in services.iter().enumerate() {
                    let name = format!("s{s}");
                    let ports: Vec<(String, i32, &str)> = (0..*nports)
                        .map(|p| {
                            (
                                format!("p{p}"),
                                80 + p as i32,
                                if *udp && p == 1 { "UDP" } else { "TCP" },
                            )
                        })
                        .collect();
                    let refs: Vec<(&str, i32, &str)> = ports
                        .iter()
                        .map(|(n, p, pr)| (n.as_str(), *p, *pr))
                        .collect();
                    let svc = service(
                        "app",
                        &name,
                        &format!("10.96.1.{}", 10 + s),
                        "ClusterIP",
                        &refs,
                    );
                    c.services.push(if *external {
                        with_external_ips(svc, &[&format!("203.0.113.{}", 10 + s)])
                    } else {
                        svc
                    });
                    let chosen: Vec<&str> = pod_ips
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| pick & (1 << (i % 16)) != 0)
                        .map(|(_, ip)| ip.as_str())
                        .collect();
                    c.endpoints.push(endpoints("app", &name, &chosen, &refs));
                }
                c
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_random_cluster_keeps_kubernetes_promises(c in arb_cluster()) {
            let report = run(&c, resources(&translate(&c)));
            let failed: Vec<String> = report.failures.iter().map(|f| format!("{:?} {} → {}: {}", f.kind, f.from, f.to, f.problem)).collect();
            prop_assert!(report.passed(), "{failed:#?}");
        }
    }
}

/// `internalTrafficPolicy: Local`: three nodes, an endpoint on n1 and on n2, clients on n1
/// and n3 (none on n3), a Service reached at its cluster IP and an external IP.
fn local_cluster() -> Cluster {
    let mut svc = with_external_ips(
        service(
            "app",
            "local",
            "10.96.0.20",
            "ClusterIP",
            &[("http", 80, "TCP")],
        ),
        &["203.0.113.20"],
    );
    if let Some(spec) = svc.spec.as_mut() {
        spec.internal_traffic_policy = Some("Local".into());
    }
    let mut eps = endpoints(
        "app",
        "local",
        &["10.1.1.10", "10.1.2.10"],
        &[("http", 80, "TCP")],
    );
    for (a, node) in eps
        .subsets
        .iter_mut()
        .flatten()
        .flat_map(|s| s.addresses.iter_mut().flatten())
        .zip(["n1", "n2"])
    {
        a.node_name = Some(node.into());
    }
    Cluster {
        nodes: vec![
            node("n1", 1, true),
            node("n2", 2, true),
            node("n3", 3, true),
        ],
        pods: vec![
            pod("app", "e1", "n1", "10.1.1.10", Some("0a:00:00:00:01:0a")),
            pod("app", "c1", "n1", "10.1.1.20", Some("0a:00:00:00:01:14")),
            pod("app", "e2", "n2", "10.1.2.10", Some("0a:00:00:00:02:0a")),
            pod("app", "c3", "n3", "10.1.3.20", Some("0a:00:00:00:03:14")),
        ],
        services: vec![svc],
        endpoints: vec![eps],
        ..Cluster::default()
    }
}

#[test]
fn internal_traffic_policy_local_truth_table() {
    // Written from the Kubernetes Service specification, not from the code: the cluster IP
    // reaches the client node's own endpoints, none on a node without one (dropped); the
    // external IP follows the (default) Cluster external policy.
    let c = local_cluster();
    let table: [(&str, Option<&str>, &[&str]); 6] = [
        ("10.96.0.20:80", Some("n1"), &["10.1.1.10:80"]),
        ("10.96.0.20:80", Some("n2"), &["10.1.2.10:80"]),
        ("10.96.0.20:80", Some("n3"), &[]),
        ("10.96.0.20:80", None, &[]),
        (
            "203.0.113.20:80",
            Some("n3"),
            &["10.1.1.10:80", "10.1.2.10:80"],
        ),
        (
            "203.0.113.20:80",
            Some("n1"),
            &["10.1.1.10:80", "10.1.2.10:80"],
        ),
    ];
    let ports = c.service_ports();
    for (address, node, want) in table {
        let sp = ports
            .iter()
            .find(|sp| sp.address.to_string() == address)
            .unwrap();
        let got: Vec<String> = sp
            .endpoints_from(node)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(got, want, "{address} from {node:?}");
    }
    // The translated network keeps exactly these promises.
    let report = run(&c, resources(&translate(&c)));
    for f in &report.failures {
        eprintln!(
            "{:?} {} → {}: {} (reached {:?})",
            f.kind, f.from, f.to, f.problem, f.reached
        );
    }
    assert!(report.passed(), "{} failures", report.failures.len());
    let dropped = report
        .by_kind
        .get(&FlowKind::NoEndpoints)
        .map_or(0, |t| t.checked);
    assert!(dropped > 0, "the client on n3 is checked to reach nothing");
}

#[test]
fn the_local_policy_oracle_fails_a_network_that_ignores_the_node() {
    let c = local_cluster();
    // The Service translated as if the policy were Cluster: every client reaches both
    // endpoints through the cluster IP.
    let mut cluster_policy = c.clone();
    cluster_policy.services[0]
        .spec
        .as_mut()
        .unwrap()
        .internal_traffic_policy = None;
    let report = run(&c, resources(&translate(&cluster_policy)));
    let failed = failures(&report);
    let cluster_ip = "svc/app/local:80 (http) (10.96.0.20:80)".to_string();
    // The client on n3, whose traffic to the cluster IP must be dropped.
    let c3_dropped = (
        FlowKind::NoEndpoints,
        "pod/app/c3".into(),
        cluster_ip.clone(),
    );
    assert!(failed.contains(&c3_dropped), "{failed:#?}");
    assert!(
        failed
            .iter()
            .any(|(k, from, to)| *k == FlowKind::PodToService
                && from == "pod/app/c1"
                && *to == cluster_ip),
        "{failed:#?}"
    );
    assert!(
        failed.iter().all(|(_, _, to)| *to == cluster_ip),
        "the external IP is not affected: {failed:#?}"
    );

    // n1's DNAT without its node condition: clients on every node are sent to n1's endpoint.
    let mut res = resources(&translate(&c));
    let n1_dnat = res.iter_mut().find_map(|r| match r {
        Resource::Rule(rule)
            if rule.rule_type == RuleType::Dnat && rule.condition.traversed_device.is_some() =>
        {
            let targets = rule.nat_targets.as_deref().unwrap_or_default();
            (targets.len() == 1 && targets[0].address_from == Some("10.1.1.10".parse().unwrap()))
                .then_some(rule)
        }
        _ => None,
    });
    n1_dnat.expect("n1's DNAT").condition.traversed_device = None;
    let failed = failures(&run(&c, res));
    assert!(failed.contains(&c3_dropped), "{failed:#?}");
    assert!(
        failed
            .iter()
            .any(|(k, from, _)| *k == FlowKind::Hairpin && from == "pod/app/e2"),
        "{failed:#?}"
    );
}

/// The cluster with an edge of two uplinks (172.31.1.2 and 172.31.2.2 on one gateway host)
/// and a Service `sticky` with `sessionAffinity: ClientIP`, external IP 203.0.113.40,
/// ingress IP 203.0.113.41, TCP port 80 and UDP port 53 onto a1 and b1.
fn sticky_cluster() -> Cluster {
    use midonet_translators::edge_spec::{EdgeSpec, UplinkSpec};
    let uplink = |name: &str, address: &str, hop: &str| UplinkSpec {
        name: name.into(),
        host: Uuid::from_u128(0x900).to_string(),
        interface: format!("uplink-{name}"),
        address: address.into(),
        next_hops: vec![hop.into()],
        tunnel_ip: Some("10.0.0.100".into()),
    };
    let edge = EdgeSpec {
        uplinks: vec![
            uplink("a", "172.31.1.2/24", "172.31.1.1"),
            uplink("b", "172.31.2.2/24", "172.31.2.1"),
        ],
        cluster_cidrs: vec!["10.1.0.0/16".into()],
        service_cidrs: vec!["10.96.0.0/12".into()],
        external_cidrs: vec!["203.0.113.0/24".into()],
        link_cidr: None,
    }
    .validate()
    .expect("a valid edge");
    let mut c = cluster();
    c.edge = Some(std::sync::Arc::new(edge));
    let mut sticky = with_ingress(
        with_external_ips(
            service(
                "app",
                "sticky",
                "10.96.0.20",
                "ClusterIP",
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ),
            &["203.0.113.40"],
        ),
        &[("203.0.113.41", None)],
    );
    if let Some(spec) = sticky.spec.as_mut() {
        spec.session_affinity = Some("ClientIP".into());
    }
    c.services.push(sticky);
    c.endpoints.push(endpoints(
        "app",
        "sticky",
        &["10.1.1.10", "10.1.2.10"],
        &[("http", 80, "TCP"), ("dns", 53, "UDP")],
    ));
    c
}

/// The sticky flows of a report that failed, as (to, problem).
fn sticky_failures(r: &Report) -> Vec<(String, String)> {
    r.failures
        .iter()
        .filter(|f| f.kind == FlowKind::OutsideSticky)
        .map(|f| (f.to.clone(), f.problem.clone()))
        .collect()
}

#[test]
fn an_outside_clients_connections_to_a_sticky_address_keep_their_endpoint() {
    let c = sticky_cluster();
    let res = resources(&translate(&c));
    let report = run(&c, res.clone());
    for f in &report.failures {
        eprintln!("{:?} {} → {}: {}", f.kind, f.from, f.to, f.problem);
    }
    assert!(report.passed(), "{} failures", report.failures.len());
    // From the specification: the TCP port at the external and the ingress IP, the first
    // connection through each uplink, the second through each: 2 × 2 × 2. Not the UDP
    // port, not the cluster IP, not the node ports (the Service has none).
    assert_eq!(every(FlowKind::OutsideSticky, &report), 8);
    assert_eq!(
        report
            .not_served
            .iter()
            .filter(|n| n.starts_with("app/sticky:"))
            .count(),
        1,
        "{:?}",
        report.not_served
    );

    // The oracle fails a network that balances per connection: without the accepts of
    // KUBE-EDGE-STICKY the uplink's DNAT takes the sticky addresses, and a second
    // connection may land on the other endpoint. Every sticky flow fails, nothing else.
    let accepts = |r: &Resource| {
        matches!(r, Resource::Rule(rule) if rule.rule_type == RuleType::Accept
            && rule.nw_dst_address.is_some_and(|a| a.octets()[..3] == [203, 0, 113]))
    };
    let loose: Vec<Resource> = res.iter().filter(|r| !accepts(r)).cloned().collect();
    assert_eq!(loose.len(), res.len() - 2, "two sticky accepts");
    let broken = run(&c, loose);
    assert_eq!(sticky_failures(&broken).len(), 8, "{:?}", broken.failures);
    assert!(
        broken
            .failures
            .iter()
            .all(|f| f.kind == FlowKind::OutsideSticky),
        "{:?}",
        failures(&broken)
    );
    assert!(sticky_failures(&broken)
        .iter()
        .all(|(_, p)| p.contains("the second (another source port)")));

    // Without the VIPs the accepted traffic meets no load balancer: the sticky
    // addresses' outside flows and sticky flows fail, nothing else.
    let no_vips: Vec<Resource> = res
        .iter()
        .filter(|r| !matches!(r, Resource::Vip(_)))
        .cloned()
        .collect();
    let broken = run(&c, no_vips);
    assert_eq!(sticky_failures(&broken).len(), 8);
    for f in &broken.failures {
        assert!(
            matches!(f.kind, FlowKind::OutsideSticky | FlowKind::OutsideToService)
                && (f.to.contains("203.0.113.40:80") || f.to.contains("203.0.113.41:80")),
            "{:?} {}: {}",
            f.kind,
            f.to,
            f.problem
        );
    }
}
