//! The flow probe (`midonet_testkit::probe`) on the real parts: it must report a flow interrupted
//! for as long as its pod's port is unbound behind the controllers' back, every other flow
//! uninterrupted, and nothing at all while nothing changes. And (ignored, run by hand) the
//! sample period it reaches on a backend of scale S.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use midonet_dataplane::Cluster;
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_testkit::probe::{judge, select_flows, topology, FlowProbe, SampleSize};
use midonet_testkit::scenario::{Scale, Scenario};
use midonet_translators::Resource;

/// Scale S's objects as the controllers see them once the apiserver and the kubelets have
/// done their part (cluster IPs, pod addresses), and every backend resource the pure
/// translators make of them, Translation by Translation ([`Scenario::translated`]).
fn scale_s(policies: usize) -> (Scenario, Cluster, Vec<Resource>) {
    let sc = Scenario::new("bench", Scale::S);
    let t = sc.translated(policies).unwrap();
    (sc, t.cluster, t.resources)
}

/// Applies every resource; pass after pass, what was refused for a referent not there yet
/// (a host not yet in the tunnel zone, a chain of a later Translation) is tried again.
async fn push_all<'a>(backend: &BackendClient, resources: impl Iterator<Item = &'a Resource>) {
    let mut pending: Vec<&Resource> = resources.collect();
    while !pending.is_empty() {
        let mut refused = Vec::new();
        for r in &pending {
            if backend.apply(r).await.is_err() {
                refused.push(*r);
            }
        }
        assert!(
            refused.len() < pending.len(),
            "no progress: {:?}",
            refused.first()
        );
        pending = refused;
    }
}

/// A client of the simulator's API.
fn backend_of(sim: &midonet_sim::SimHandle) -> BackendClient {
    BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            ..BackendConfig::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap()
}

/// How long one probe sample takes at scale S (200 NetworkPolicies, the benchmark's sample
/// of flows) while the store changes under it: a version bump pushed into the in-process
/// simulator as fast as it takes requests (version 2 created, each pod's interface bound
/// to its new port, version 1 deleted). A measurement, printed with its breakdown; it
/// fails only if the probe took no sample during the bump or the last one does not find
/// every flow ok. Run with `--release --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn sample_time_at_scale_s_during_a_bump() {
    use midonet_translators::TranslatorConfig;

    let sc = Scenario::new("bench", Scale::S);
    let v1 = sc.translated(200).unwrap();
    let v2 = sc
        .translated_with(
            &TranslatorConfig {
                version: "2".into(),
                ..TranslatorConfig::default()
            },
            200,
        )
        .unwrap();
    let hosts: Vec<(&str, uuid::Uuid)> = sc.hosts.iter().map(|(n, id)| (n.as_str(), *id)).collect();
    let (sim, _admin) = support::stack::start_sim(&hosts).await;
    let backend = backend_of(&sim);
    push_all(&backend, v1.resources.iter()).await;

    let reader = sim.reader();
    let flows = select_flows(
        &v1.cluster,
        SampleSize {
            services_per_source: 6,
            peers_per_source: 2,
        },
    );
    let probe = FlowProbe::start(
        flows.clone(),
        v1.cluster.attachments(),
        {
            let reader = reader.clone();
            let mut cursor = midonet_sim::ReadCursor::default();
            Box::new(move || reader.changes(&mut cursor))
        },
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let is_binding = |r: &&Resource| matches!(r, Resource::HostInterfacePort(_));
    push_all(&backend, v2.resources.iter().filter(|r| !is_binding(r))).await;
    let created = started.elapsed();
    for r in v2.resources.iter().filter(is_binding) {
        let Resource::HostInterfacePort(new) = r else {
            continue;
        };
        let old = v1.resources.iter().find(|o| {
            matches!(o, Resource::HostInterfacePort(b)
                if b.parent == new.parent && b.interface_name == new.interface_name)
        });
        if let Some(old) = old {
            backend.delete(old).await.unwrap();
        }
        backend.apply(r).await.unwrap();
    }
    let rebound = started.elapsed();
    let kept: std::collections::HashSet<String> =
        v2.resources.iter().map(Resource::item_path).collect();
    for r in v1.resources.iter().rev() {
        if !kept.contains(&r.item_path()) {
            backend.delete(r).await.unwrap();
        }
    }
    let deleted = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = probe.stop().await.unwrap();
    eprintln!(
        "bump of {} -> {} resources: created in {:.1} s, rebound by {:.1} s, deleted by {:.1} s",
        v1.resources.len(),
        v2.resources.len(),
        created.as_secs_f64(),
        rebound.as_secs_f64(),
        deleted.as_secs_f64()
    );
    eprintln!("probe: {}", report.summary());
    let ms = |t: &midonet_testkit::probe::Timing| {
        format!(
            "median {:.1} ms, max {:.1} ms",
            t.median_seconds * 1e3,
            t.max_seconds * 1e3
        )
    };
    eprintln!(
        "sample: {}; read {}; apply {}; judge {}",
        ms(&report.sample_time),
        ms(&report.read_time),
        ms(&report.apply_time),
        ms(&report.judge_time)
    );
    assert!(report.samples > 10, "{}", report.summary());
    let topo = topology(reader.resources().unwrap(), &v2.cluster.attachments());
    for f in &flows {
        assert_eq!(judge(&topo, f), Ok(()), "{}", f.name());
    }
}

/// How fast the probe samples a backend of scale S (50 nodes, 2,000 pods, 300 Services,
/// 200 NetworkPolicies) held by the in-process simulator, with the benchmark's sample, and
/// what reading it over the admin API would cost instead. A measurement, printed; it
/// fails only if a flow is found interrupted on the unchanging backend. Run with
/// `--release --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn sample_period_at_scale_s() {
    let (sc, cluster, resources) = scale_s(200);
    let hosts: Vec<(&str, uuid::Uuid)> = sc.hosts.iter().map(|(n, id)| (n.as_str(), *id)).collect();
    let (sim, admin) = support::stack::start_sim(&hosts).await;
    let backend = backend_of(&sim);
    let started = Instant::now();
    push_all(&backend, resources.iter()).await;
    eprintln!(
        "pushed {} resources in {:.1} s",
        resources.len(),
        started.elapsed().as_secs_f64()
    );

    let reader = sim.reader();
    let attachments = cluster.attachments();
    let size = SampleSize {
        services_per_source: 10,
        peers_per_source: 4,
    };
    let flows = select_flows(&cluster, size);
    // Each part of one sample, five times.
    for _ in 0..5 {
        let t = Instant::now();
        let dump = reader.dump();
        let t_dump = t.elapsed();
        let resources = dump.typed_resources().unwrap();
        let t_typed = t.elapsed();
        let count = resources.len();
        let topo = topology(resources, &attachments);
        let t_topo = t.elapsed();
        let bad = flows.iter().filter(|f| judge(&topo, f).is_err()).count();
        let t_judge = t.elapsed();
        eprintln!(
            "{count} resources: dump {:.1} ms, typed {:.1} ms, topology {:.1} ms, {} flows judged \
             ({bad} not ok) {:.1} ms; total {:.1} ms",
            t_dump.as_secs_f64() * 1e3,
            (t_typed - t_dump).as_secs_f64() * 1e3,
            (t_topo - t_typed).as_secs_f64() * 1e3,
            flows.len(),
            (t_judge - t_topo).as_secs_f64() * 1e3,
            t_judge.as_secs_f64() * 1e3,
        );
        assert_eq!(bad, 0);
    }
    // What the probe does: read only the records that changed, apply them, judge. The
    // first reading has every record; the next ones (nothing changes) none.
    let mut cursor = midonet_sim::ReadCursor::default();
    let mut live = midonet_dataplane::LiveTopology::new(attachments.iter().cloned());
    for i in 0..5 {
        let t = Instant::now();
        let changes = reader.changes(&mut cursor).unwrap();
        let count = changes.len();
        let t_read = t.elapsed();
        live.apply(changes);
        let t_apply = t.elapsed();
        let bad = flows
            .iter()
            .filter(|f| judge(live.topology(), f).is_err())
            .count();
        let t_judge = t.elapsed();
        eprintln!(
            "incremental sample {i}: {count} records changed: read {:.1} ms, apply {:.1} ms, \
             {} flows judged ({bad} not ok) {:.1} ms; total {:.1} ms",
            t_read.as_secs_f64() * 1e3,
            (t_apply - t_read).as_secs_f64() * 1e3,
            flows.len(),
            (t_judge - t_apply).as_secs_f64() * 1e3,
            t_judge.as_secs_f64() * 1e3,
        );
        assert_eq!(bad, 0);
    }
    let t = Instant::now();
    let over_http = admin.state().await.unwrap();
    let typed = over_http.typed_resources().unwrap();
    eprintln!(
        "the same over the admin API: {} resources in {:.1} ms",
        typed.len(),
        t.elapsed().as_secs_f64() * 1e3
    );

    let probe = FlowProbe::start(
        flows,
        attachments,
        {
            let mut cursor = midonet_sim::ReadCursor::default();
            Box::new(move || reader.changes(&mut cursor))
        },
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let report = probe.stop().await.unwrap();
    eprintln!("probe at scale S: {}", report.summary());
    // Nothing changed: nothing may be interrupted. The period is what this measures.
    assert_eq!(report.interrupted, 0, "{:?}", report.interrupted_flows);
    assert!(report.samples >= 2, "{}", report.summary());
}

/// Two nodes, two pods on each; Service `web` on p2 (node a) and p4 (node b), Service `api`
/// on p4. The probe's sources are the first pod by name on each node, p1 and p3; each calls
/// both Services and the first pod of the other node. Nothing changes for two seconds:
/// nothing is interrupted. Then p3's port is unbound for two seconds behind the
/// controllers' back and bound again: every flow from or to p3, and only those, is
/// interrupted once, for about two seconds.
#[tokio::test]
async fn the_probe_sees_exactly_the_flows_an_unbound_port_interrupts_and_for_how_long() {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use kube::api::{Api, PostParams};
    use support::objects::{endpoints, node_at, pod, service, set_pod_ip, wait_host_ids};
    use support::stack::{start_sim, wait_converged, Controllers};
    use support::*;

    let client = admin_client().await;
    let (host_a, host_b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let (sim, admin) = start_sim(&[("pr-node-a", host_a), ("pr-node-b", host_b)]).await;
    // Drift repair must not bind the port again before the test does.
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--verify-period", "1h"],
    )
    .await;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for n in [
        node_at("pr-node-a", "10.244.1.0/24", "192.168.0.11"),
        node_at("pr-node-b", "10.244.2.0/24", "192.168.0.12"),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    wait_host_ids(&nodes, &[("pr-node-a", host_a), ("pr-node-b", host_b)]).await;
    let ns = unique_namespace(&client, "probe").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node, ip, mac) in [
        ("p1", "pr-node-a", "10.244.1.10", Some("0a:00:00:00:01:0a")),
        ("p2", "pr-node-a", "10.244.1.11", None),
        ("p3", "pr-node-b", "10.244.2.10", Some("0a:00:00:00:02:0a")),
        ("p4", "pr-node-b", "10.244.2.11", None),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, mac))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    for (name, ips) in [
        ("web", &["10.244.1.11", "10.244.2.11"][..]),
        ("api", &["10.244.2.11"][..]),
    ] {
        services
            .create(&PostParams::default(), &service(name))
            .await
            .unwrap();
        eps.create(&PostParams::default(), &endpoints(name, ips))
            .await
            .unwrap();
    }
    wait_converged(&client, &admin, "probe cluster").await;
    let ip_of = |name: &str| {
        let services = services.clone();
        let name = name.to_string();
        async move {
            services
                .get(&name)
                .await
                .unwrap()
                .spec
                .and_then(|s| s.cluster_ip)
                .unwrap()
        }
    };
    let (web, api) = (ip_of("web").await, ip_of("api").await);

    // Written by hand from the objects above. The apiserver's own Service has no
    // endpoint a workload owns: not sampled.
    let from = |p: &str| format!("pod/{ns}/{p}");
    let to_svc = |s: &str, ip: &str| format!("svc/{ns}/{s}:80 (http) {ip}:80 tcp");
    let (p1_web, p1_api, p1_p3) = (
        format!("{} -> {}", from("p1"), to_svc("web", &web)),
        format!("{} -> {}", from("p1"), to_svc("api", &api)),
        format!("{} -> {} 10.244.2.10:8080 tcp", from("p1"), from("p3")),
    );
    let (p3_web, p3_api, p3_p1) = (
        format!("{} -> {}", from("p3"), to_svc("web", &web)),
        format!("{} -> {}", from("p3"), to_svc("api", &api)),
        format!("{} -> {} 10.244.1.10:8080 tcp", from("p3"), from("p1")),
    );
    let mut want = vec![
        p1_web.clone(),
        p1_api.clone(),
        p1_p3.clone(),
        p3_web.clone(),
        p3_api.clone(),
        p3_p1.clone(),
    ];
    want.sort();

    // Nothing changes: nothing is interrupted.
    let period = Duration::from_millis(50);
    let probe = support::probe::start(&sim, support::probe::EVERY_FLOW, period).await;
    let mut got = probe.names();
    got.sort();
    assert_eq!(got, want);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet = probe.stop().await;
    assert_eq!(quiet.flows, 6);
    assert!(quiet.samples >= 10, "{}", quiet.summary());
    assert_eq!(quiet.interrupted, 0, "{:?}", quiet.interrupted_flows);
    assert_eq!(quiet.max_seconds, 0.0);

    // p3's port unbound for two seconds.
    let iface = midonet_translators::naming::pod_interface_name(&format!("{ns}/p3"));
    let binding = sim
        .reader()
        .resources()
        .unwrap()
        .into_iter()
        .find(|r| {
            matches!(r, Resource::HostInterfacePort(b) if b.interface_name.as_deref() == Some(iface.as_str()))
        })
        .expect("p3's port is bound");
    let backend = BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            ..BackendConfig::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap();
    let hold = Duration::from_secs(2);
    let probe = support::probe::start(&sim, support::probe::EVERY_FLOW, period).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    backend.delete(&binding).await.unwrap();
    tokio::time::sleep(hold).await;
    backend.apply(&binding).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let broken = probe.stop().await;
    assert_eq!(broken.flows, 6);
    let mut interrupted: Vec<&str> = broken
        .interrupted_flows
        .iter()
        .map(|f| f.flow.as_str())
        .collect();
    interrupted.sort();
    let mut want_interrupted = vec![
        p1_p3.as_str(),
        p3_web.as_str(),
        p3_api.as_str(),
        p3_p1.as_str(),
    ];
    want_interrupted.sort();
    assert_eq!(interrupted, want_interrupted, "{}", broken.summary());
    for f in &broken.interrupted_flows {
        assert_eq!(f.outages, 1, "{f:?}");
        // The outage as sampled is within a sample period (and the scheduling of this
        // test) of the time the port was unbound.
        let off = (f.longest_seconds - hold.as_secs_f64()).abs();
        assert!(
            off < 0.3,
            "{f:?}: {off:.2} s off the {hold:?} the port was unbound"
        );
    }
    assert!((broken.max_seconds - hold.as_secs_f64()).abs() < 0.3);
    let source_gone = broken.flow(&p3_web).unwrap();
    assert!(source_gone.reason.contains("not bound"), "{source_gone:?}");
    // p1's calls to the Services reach p2 and p4, which stayed bound.
    assert!(broken.flow(&p1_web).is_none() && broken.flow(&p1_api).is_none());
    support::probe::assert_interrupted_at_most(&broken, hold + Duration::from_millis(300));

    controllers.stop().await;
}
