//! NetworkPolicy truth tables on the translators' network: the cluster of the upstream e2e
//! suite and each case's policies are translated by the pure translators, pushed into the
//! data-plane model the way MidoNet stores them, and the whole reachability matrix is
//! compared with the table written from the specification (`common/netpol_cases.rs`): pod
//! to pod, pod to each pod's Service, and each node's host to its own pods; and the table
//! of each pod to each node's host.

#[path = "common/netpol_cases.rs"]
mod cases;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use midonet_dataplane::{Cluster, RuleOrder, Topology};
use midonet_translators::model::{Resource, RuleType};
use midonet_translators::policy::PolicyCluster;
use midonet_translators::policy::{filter_chain_id, Direction};
use midonet_translators::TranslatorConfig;

use cases::*;

fn translate(
    namespaces: &[Namespace],
    pods: &[Pod],
    policies: &[NetworkPolicy],
) -> (Vec<Resource>, Cluster) {
    let cfg = TranslatorConfig::default();
    let nodes = vec![node("n1"), node("n2")];
    let by_name: BTreeMap<String, &Node> = nodes
        .iter()
        .map(|n| (n.metadata.name.clone().unwrap(), n))
        .collect();
    let mut trs = midonet_translators::global(&cfg);
    for n in &nodes {
        trs.extend(midonet_translators::node(&cfg, n).translations);
    }
    for p in pods {
        let n = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        trs.extend(midonet_translators::pod(&cfg, p, by_name.get(&n).copied()).translations);
    }
    for p in servers() {
        let svc = service(p);
        trs.extend(midonet_translators::service(&cfg, &svc).translations);
        trs.extend(midonet_translators::endpoints(&cfg, &endpoints(p), Some(&svc)).translations);
    }
    let view = PolicyCluster::new(namespaces, pods);
    // The shared groups first: the policies' rules name them.
    trs.extend(midonet_translators::address_groups(&cfg, policies, &view));
    for np in policies {
        let out = midonet_translators::network_policy(&cfg, np, &view);
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        trs.extend(out.translations);
    }
    let resources = trs
        .iter()
        .flat_map(|t| t.resources.iter())
        .map(|e| Resource::from_entry(e).expect("valid entries"))
        .collect();
    let cluster = Cluster {
        nodes,
        pods: pods.to_vec(),
        services: servers().into_iter().map(service).collect(),
        endpoints: servers().into_iter().map(endpoints).collect(),
        ..Cluster::default()
    };
    (resources, cluster)
}

fn run(resources: Vec<Resource>, cluster: &Cluster) -> BTreeMap<Cell, bool> {
    let topo = Topology::new(resources, RuleOrder::Pushed, cluster.attachments());
    assert!(topo.problems().is_empty(), "{:?}", topo.problems());
    matrix(&topo)
}

fn assert_table(name: &str, want: Expect, got: &BTreeMap<Cell, bool>) {
    let diff = differences(&expected(want), got);
    assert!(diff.is_empty(), "{name}:\n{}", diff.join("\n"));
}

#[test]
fn without_policies_everything_connects() {
    let (resources, cluster) = translate(&namespaces(), &pods(), &[]);
    assert_table("no policy", |_, _, _, _| true, &run(resources, &cluster));
}

#[test]
fn every_case_matches_its_truth_table() {
    for case in static_cases() {
        let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
        assert_table(case.name, case.expect, &run(resources, &cluster));
    }
}

#[test]
fn a_pod_whose_labels_change_changes_the_table() {
    let policies = [from_any_b()];
    let (resources, cluster) = translate(&namespaces(), &pods(), &policies);
    assert_table("before", expect_any_b, &run(resources, &cluster));
    let relabelled: Vec<Pod> = servers()
        .into_iter()
        .map(|p| {
            if p.is("z", "c") {
                pod(p, &[("pod", "b")])
            } else {
                pod(p, &labels_of(p))
            }
        })
        .collect();
    let (resources, cluster) = translate(&namespaces(), &relabelled, &policies);
    assert_table("after", expect_any_b_relabelled, &run(resources, &cluster));
}

#[test]
fn a_namespace_whose_labels_change_changes_the_table() {
    let policies = [from_ns_y()];
    let (resources, cluster) = translate(&namespaces(), &pods(), &policies);
    assert_table("before", expect_ns_y, &run(resources, &cluster));
    let relabelled = vec![
        namespace("x", &[("ns", "x")]),
        namespace("y", &[("ns", "y")]),
        namespace("z", &[("ns", "y")]),
        namespace("kube-system", &[]),
    ];
    let (resources, cluster) = translate(&relabelled, &pods(), &policies);
    assert_table("after", expect_ns_y_and_z, &run(resources, &cluster));
}

/// The oracle can fail: without a peer's accept rule exactly that peer's cells flip, and
/// without the rules that let replies back in, exactly the connections whose replies an
/// isolated pod sends are lost.
#[test]
fn a_missing_rule_changes_exactly_its_cells() {
    let case = static_cases()
        .into_iter()
        .find(|c| c.name == "allow from a pod in a namespace")
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
    // The accept of the peer (y/b) in the policy's peers chain.
    let peer_accepts: Vec<usize> = resources
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(r, Resource::Rule(rule) if rule.rule_type == RuleType::Accept
                && rule.condition.ip_addr_group_src.is_some())
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(peer_accepts.len(), 1);
    let mut broken = resources.clone();
    broken.remove(peer_accepts[0]);
    let got = run(broken, &cluster);
    let diff = differences(&expected(case.expect), &got);
    // Directly and through x/a's Service.
    let want: Vec<String> = PROBES
        .iter()
        .flat_map(|(port, proto)| {
            ["x/a", "svc/x/a"]
                .map(|to| format!("y/b -> {to} {port}/{proto:?}: expected allowed, got denied"))
        })
        .collect();
    let mut diff_sorted = diff.clone();
    diff_sorted.sort();
    let mut want_sorted = want;
    want_sorted.sort();
    assert_eq!(diff_sorted, want_sorted);

    // Under deny-all-egress in x, the pods of x may still answer: their replies are
    // return flows. Without the return-flow rules every connection to x breaks, nothing else.
    let deny = static_cases()
        .into_iter()
        .find(|c| c.name == "deny all egress")
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &deny.policies);
    // Disabled in place (a protocol no probe uses) so that the positions after it hold.
    let without_replies: Vec<Resource> = resources
        .into_iter()
        .map(|r| match r {
            Resource::Rule(mut rule) if rule.condition.match_return_flow == Some(true) => {
                rule.nw_proto = Some(255);
                Resource::Rule(rule)
            }
            other => other,
        })
        .collect();
    let got = run(without_replies, &cluster);
    let diff = differences(&expected(deny.expect), &got);
    // Pods of x cannot send, so the replies of every connection *to* x are dropped too.
    // Six pods outside x, three servers in x, four ports, directly and through the
    // Service: 144 cells. Each node's host still reaches the pods of x on it: what they
    // send to their own node is always allowed, replies or not.
    assert_eq!(diff.len(), 6 * 3 * PROBES.len() * 2, "{diff:#?}");
    assert!(diff
        .iter()
        .all(|d| (d.contains(" -> x/") || d.contains(" -> svc/x/"))
            && d.ends_with("expected allowed, got denied")));
}

/// `check`'s policy evaluator (`midonet_dataplane::policy`) is written from the spec too:
/// it must agree with every hand-written table.
#[test]
fn the_policy_evaluator_agrees_with_every_table() {
    use midonet_dataplane::policy::{Party, Policies};
    let namespaces = namespaces();
    let pods = pods();
    for case in static_cases() {
        let p = Policies {
            policies: &case.policies,
            namespaces: &namespaces,
        };
        let mut got = BTreeMap::new();
        for c in all_pods() {
            for s in servers() {
                if c == s {
                    continue;
                }
                let find = |x: P| {
                    pods.iter()
                        .find(|p| {
                            p.metadata.namespace.as_deref() == Some(x.ns)
                                && p.metadata.name.as_deref() == Some(x.pod)
                        })
                        .unwrap()
                };
                for (port, proto) in s.probes() {
                    let allowed = p.allows(
                        Party::Pod(find(c), c.ip()),
                        Party::Pod(find(s), s.ip()),
                        port,
                        proto,
                    );
                    got.insert((c.name(), s.name(), port, proto), allowed);
                }
            }
        }
        // The evaluator judges endpoints; the Service and node cells are the model's.
        let want: BTreeMap<Cell, bool> = expected(case.expect)
            .into_iter()
            .filter(|((c, s, _, _), _)| !c.starts_with("node/") && !s.starts_with("svc/"))
            .collect();
        let diff = differences(&want, &got);
        assert!(diff.is_empty(), "{}:\n{}", case.name, diff.join("\n"));
    }
}

/// `check` with policies: the translated network passes it for every case, and fails it
/// once a policy's peer accept rule is disabled.
#[test]
fn check_follows_the_policies() {
    for case in static_cases() {
        let (resources, mut cluster) = translate(&namespaces(), &pods(), &case.policies);
        cluster.namespaces = namespaces();
        cluster.network_policies = case.policies.clone();
        let topo = Topology::new(resources, RuleOrder::Pushed, cluster.attachments());
        let report = midonet_dataplane::check(&topo, &cluster, &mut |_, _| {});
        // A pod reaching itself through its own Service arrives SNATed to the cluster IP
        // (hairpin), which ingress rules naming the pod do not admit; the evaluator judges
        // it by the pod's address. Not part of this comparison (see the report).
        let failures: Vec<_> = report
            .failures
            .iter()
            .filter(|f| {
                f.kind != midonet_dataplane::FlowKind::Hairpin
                    && !f
                        .expected
                        .iter()
                        .any(|e| e.starts_with(&format!("{} ", f.from)))
            })
            .collect();
        assert!(
            failures.is_empty(),
            "{}: {:?}",
            case.name,
            failures
                .iter()
                .map(|f| format!("{} -> {}: {}", f.from, f.to, f.problem))
                .collect::<Vec<_>>()
        );
    }
    let case = static_cases()
        .into_iter()
        .find(|c| c.name == "allow from a namespace")
        .unwrap();
    let (resources, mut cluster) = translate(&namespaces(), &pods(), &case.policies);
    cluster.namespaces = namespaces();
    cluster.network_policies = case.policies.clone();
    let broken: Vec<Resource> = resources
        .into_iter()
        .map(|r| match r {
            Resource::Rule(mut rule) if rule.condition.ip_addr_group_src.is_some() => {
                rule.nw_proto = Some(255);
                Resource::Rule(rule)
            }
            other => other,
        })
        .collect();
    let topo = Topology::new(broken, RuleOrder::Pushed, cluster.attachments());
    let report = midonet_dataplane::check(&topo, &cluster, &mut |_, _| {});
    assert!(!report.passed());
    // Exactly the flows from y's pods to x/a, directly or through its Service, fail.
    assert!(report
        .failures
        .iter()
        .any(|f| f.to.starts_with("svc/x/svc-a")));
    for f in &report.failures {
        assert!(
            f.from.starts_with("pod/y/")
                && (f.to.starts_with("pod/x/a") || f.to.starts_with("svc/x/svc-a:")),
            "{} -> {}",
            f.from,
            f.to
        );
    }
}

/// The oracle can fail where the egress rules sit: with the egress chain back on the pod
/// ports' inbound filters, before KUBE-MAIN's Service DNAT (and off the node bridges), a
/// pod allowed to reach some pods no longer reaches them through their Services, and
/// nothing else changes.
#[test]
fn egress_before_load_balancing_breaks_exactly_the_service_cells() {
    let cfg = TranslatorConfig::default();
    let egress = filter_chain_id(&cfg, Direction::Egress);
    let ingress = filter_chain_id(&cfg, Direction::Ingress);
    let case = static_cases()
        .into_iter()
        .find(|c| c.name == "ingress and egress in one policy")
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
    let mut moved = 0;
    let before_dnat: Vec<Resource> = resources
        .into_iter()
        .map(|r| match r {
            Resource::Bridge(mut b) if b.outbound_filter_id == Some(egress) => {
                b.outbound_filter_id = None;
                Resource::Bridge(b)
            }
            Resource::Port(mut p) if p.outbound_filter_id == Some(ingress) => {
                p.inbound_filter_id = Some(egress);
                moved += 1;
                Resource::Port(p)
            }
            other => other,
        })
        .collect();
    assert_eq!(moved, servers().len());
    let got = run(before_dnat, &cluster);
    let mut diff = differences(&expected(case.expect), &got);
    diff.sort();
    // x/b may send to the pods of y: through their Services too, but only after the DNAT
    // does the destination show it.
    let mut want: Vec<String> = PODS
        .iter()
        .flat_map(|pod| {
            PROBES.iter().map(move |(port, proto)| {
                format!("x/b -> svc/y/{pod} {port}/{proto:?}: expected allowed, got denied")
            })
        })
        .collect();
    want.sort();
    assert_eq!(diff, want);

    // DNS through the kube-dns Service likewise.
    let case = static_cases()
        .into_iter()
        .find(|c| c.name == "allow egress only to DNS")
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
    let before_dnat: Vec<Resource> = resources
        .into_iter()
        .map(|r| match r {
            Resource::Bridge(mut b) if b.outbound_filter_id == Some(egress) => {
                b.outbound_filter_id = None;
                Resource::Bridge(b)
            }
            Resource::Port(mut p) if p.outbound_filter_id == Some(ingress) => {
                p.inbound_filter_id = Some(egress);
                Resource::Port(p)
            }
            other => other,
        })
        .collect();
    let mut diff = differences(&expected(case.expect), &run(before_dnat, &cluster));
    diff.sort();
    assert_eq!(
        diff,
        [
            "x/a -> svc/kube-system/dns 53/Tcp: expected allowed, got denied",
            "x/a -> svc/kube-system/dns 53/Udp: expected allowed, got denied",
        ]
    );
}

/// The oracle can fail for the node's host: without node n1's accept, the isolated pods
/// of x on n1 refuse their own node, and nothing else changes; the other node never
/// reaches them.
#[test]
fn a_node_reaches_its_own_isolated_pods_only() {
    let case = static_cases()
        .into_iter()
        .find(|c| c.name == "deny all ingress")
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
    let topo = Topology::new(resources.clone(), RuleOrder::Pushed, cluster.attachments());
    // From the other node: refused, like any address no policy admits.
    for s in all_pods().into_iter().filter(|p| p.ns == "x") {
        let other = if s.node() == "n1" { "n2" } else { "n1" };
        let probe = midonet_dataplane::Probe::new(
            format!("node/{other}"),
            midonet_dataplane::SocketV4::new(s.ip(), 80),
            midonet_dataplane::Protocol::Tcp,
            40000,
        );
        let t = midonet_dataplane::trace(&topo, &probe).unwrap();
        assert!(!t.all_work(), "node/{other} -> {}", s.name());
    }
    let n1_ip = std::net::Ipv4Addr::new(10, 1, 1, 2);
    let without: Vec<Resource> = resources
        .into_iter()
        .filter(|r| {
            !matches!(r, Resource::Rule(rule) if rule.rule_type == RuleType::Accept
                && rule.nw_src_address == Some(n1_ip)
                && rule.condition.port_group.is_some())
        })
        .collect();
    let mut diff = differences(&expected(case.expect), &run(without, &cluster));
    diff.sort();
    let mut want: Vec<String> = ["a", "c"]
        .iter()
        .flat_map(|pod| {
            PROBES.iter().map(move |(port, proto)| {
                format!("node/n1 -> x/{pod} {port}/{proto:?}: expected allowed, got denied")
            })
        })
        .collect();
    want.sort();
    assert_eq!(diff, want);
}

/// A pod always reaches its own node's host, whatever its egress policies; another node's
/// host is subject to them.
#[test]
fn pods_reach_their_own_node_host() {
    for case in host_cases() {
        let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
        let topo = Topology::new(resources, RuleOrder::Pushed, cluster.attachments());
        assert!(topo.problems().is_empty(), "{:?}", topo.problems());
        let diff = differences(&host_expected(case.expect), &host_matrix(&topo));
        assert!(diff.is_empty(), "{}:\n{}", case.name, diff.join("\n"));
    }
}

/// The oracle can fail: without node n1's egress accepts, exactly the cells of the isolated
/// pods of x on n1 to n1's host flip to denied.
#[test]
fn without_the_node_egress_accept_pods_lose_their_own_node() {
    let case = host_cases()
        .into_iter()
        .find(|c| c.name.starts_with("deny all egress"))
        .unwrap();
    let (resources, cluster) = translate(&namespaces(), &pods(), &case.policies);
    let n1_cidr = std::net::Ipv4Addr::new(10, 1, 1, 0);
    let without: Vec<Resource> = resources
        .into_iter()
        .filter(|r| {
            !matches!(r, Resource::Rule(rule) if rule.rule_type == RuleType::Accept
                && rule.nw_src_address == Some(n1_cidr)
                && rule.nw_src_length == Some(24)
                && rule.condition.port_group.is_none())
        })
        .collect();
    let topo = Topology::new(without, RuleOrder::Pushed, cluster.attachments());
    let mut diff = differences(&host_expected(case.expect), &host_matrix(&topo));
    diff.sort();
    let mut want: Vec<String> = ["a", "c"]
        .iter()
        .flat_map(|pod| {
            node_ips("n1").into_iter().flat_map(move |ip| {
                ["Tcp", "Udp"].map(move |proto| {
                    format!(
                        "x/{pod} -> node/n1@{ip} {HOST_PORT}/{proto}: expected allowed, got denied"
                    )
                })
            })
        })
        .collect();
    want.sort();
    assert_eq!(diff, want);
}
