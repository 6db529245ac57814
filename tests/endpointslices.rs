//! EndpointSlices on the real apiserver (v1.20: `discovery.k8s.io/v1beta1`, with the
//! `EndpointSliceTerminatingCondition` feature) and the simulator. Services without a
//! selector get hand-written slices (label `kubernetes.io/service-name`), as an external
//! endpoint manager would write them; nothing mirrors Endpoints here.
//!
//! Expectations follow Kubernetes semantics: the slices of a Service are merged; ready
//! endpoints get traffic; terminating endpoints that are still serving get it only when no
//! endpoint of the port is ready (kube-proxy); a Service may have more than 1,000 endpoints
//! (the Endpoints API would truncate them). They are checked on the data plane: the
//! simulator's state traced with the data-plane model, or its DNAT rules, and `check` reads
//! the slices for its expectations (and notices a slice endpoint's missing DNAT rule).

mod support;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PatchParams, PostParams};
use kube::{Client, ResourceExt};
use midonet_dataplane::{check, FlowKind, Report};
use midonet_kube_controllers::config::{Config, RunArgs};
use midonet_kube_controllers::netcheck::cli::{load, trace_live};
use midonet_translators::meta::HOST_ID_ANNOTATION;
use midonet_translators::model::Kind;
use serde_json::{json, Value};
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn config(api: &str) -> Config {
    let kubeconfig = control_plane().kubeconfig.display().to_string();
    Cli::try_parse_from(["test", "--kubeconfig", &kubeconfig, "--midonet-api", api])
        .expect("args")
        .run
        .validate()
        .expect("config")
}

fn slice_api(client: &Client, ns: &str) -> (Api<DynamicObject>, ApiResource) {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "discovery.k8s.io",
        "v1beta1",
        "EndpointSlice",
    ));
    (Api::namespaced_with(client.clone(), ns, &ar), ar)
}

/// An endpoint: address and (ready, serving, terminating); `None` leaves the conditions out.
type Ep<'a> = (&'a str, Option<(bool, bool, bool)>);

/// Creates or replaces the slice `name` of Service `service`.
async fn put_slice(
    client: &Client,
    ns: &str,
    name: &str,
    service: &str,
    port: u16,
    eps: &[Ep<'_>],
) {
    let (api, _) = slice_api(client, ns);
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(ip, c)| match c {
            Some((ready, serving, terminating)) => json!({"addresses": [ip],
                "conditions": {"ready": ready, "serving": serving, "terminating": terminating}}),
            None => json!({"addresses": [ip]}),
        })
        .collect();
    let obj = json!({
        "apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    });
    api.patch(
        name,
        &PatchParams::apply("endpointslices-test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
    // The apiserver keeps `serving`/`terminating` (feature gate on).
    if let Some((_, serving, terminating)) = eps.iter().find_map(|(_, c)| *c) {
        let back = api.get(name).await.unwrap();
        let c = &back.data["endpoints"][0]["conditions"];
        assert_eq!(c["serving"], json!(serving), "{back:?}");
        assert_eq!(c["terminating"], json!(terminating), "{back:?}");
    }
}

fn service(name: &str, port: u16) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "targetPort": port, "protocol": "TCP"}]}
    }))
    .unwrap()
}

/// Workloads a connection from pod `from` to `ns/svc:80` is balanced onto, as the data-plane
/// model traces it on the simulator's state.
async fn candidates(api: &str, ns: &str, from: &str, svc: &str) -> BTreeSet<String> {
    let cfg = config(api);
    let kube = midonet_kube_controllers::clients::kube_client(&cfg)
        .await
        .unwrap();
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    let live = load(&kube, &backend, &cfg.tenant, None).await.unwrap();
    let (t, _) = trace_live(
        &live,
        &format!("pod/{ns}/{from}"),
        &format!("svc/{ns}/{svc}:80"),
        None,
        40000,
    )
    .unwrap();
    for (_, addr) in t.candidates() {
        assert_eq!(addr.port, 8080, "DNAT to the slice's port");
    }
    t.candidates().into_iter().map(|(w, _)| w).collect()
}

/// Waits until the trace shows exactly `want` (pod names).
async fn wait_candidates(api: &str, ns: &str, svc: &str, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|p| format!("pod/{ns}/{p}")).collect();
    let start = std::time::Instant::now();
    loop {
        let got = candidates(api, ns, "client", svc).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < CEILING,
            "{svc}: balanced onto {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

const WEB_EXTERNAL_IP: &str = "203.0.113.10";
const WEB_INGRESS_IP: &str = "192.0.2.50";

/// `check` on the live cluster, after asserting that it reads EndpointSlices and expects
/// `ns/web:80` at `want` at each of its addresses.
async fn check_live(api: &str, ns: &str, want: &[&str]) -> Report {
    let cfg = config(api);
    let kube = midonet_kube_controllers::clients::kube_client(&cfg)
        .await
        .unwrap();
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    let live = load(&kube, &backend, &cfg.tenant, None).await.unwrap();
    assert!(live.cluster.endpoint_slices.is_some(), "check reads slices");
    assert!(live.cluster.endpoints.is_empty());
    let web: Vec<(String, Vec<String>)> = live
        .cluster
        .service_ports()
        .iter()
        .filter(|sp| sp.namespace == ns && sp.name == "web")
        .map(|sp| {
            (
                sp.address.ip.to_string(),
                sp.endpoints.iter().map(|e| e.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(web.len(), 3, "{web:?}");
    assert_eq!(web[1].0, WEB_EXTERNAL_IP);
    assert_eq!(web[2].0, WEB_INGRESS_IP);
    for (_, eps) in &web {
        assert_eq!(eps, want);
    }
    check(&live.topology, &live.cluster, &mut |_, _| {})
}

fn describe(r: &Report) -> String {
    r.failures
        .iter()
        .map(|f| format!("{:?} {} → {}: {}", f.kind, f.from, f.to, f.problem))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn slices_are_merged_terminating_endpoints_are_a_fallback_and_big_services_are_whole() {
    serve_endpointslices();
    let client = admin_client().await;
    let host = Uuid::new_v4();
    let (sim, admin) = stack::start_sim(&[("es-node", host)]).await;
    // Drift repair must not undo the break below before `check` sees it.
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--verify-period", "1h"],
    )
    .await;
    let api = sim.api_url().to_string();

    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "es-node"},
        "spec": {"podCIDR": "10.244.1.0/24"},
        // The apiserver's own endpoint (default/kubernetes) is 127.0.0.1: a node address
        // makes it a workload `check` can verify.
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.11"},
                                 {"type": "ExternalIP", "address": "127.0.0.1"}]}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_until("the node's host id", CEILING, || async {
        let n = nodes.get("es-node").await.ok()?;
        (n.annotations().get(HOST_ID_ANNOTATION) == Some(&host.to_string())).then_some(())
    })
    .await;

    let ns = unique_namespace(&client, "slices").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, ip, mac) in [
        ("client", "10.244.1.9", "0a:00:00:00:01:09"),
        ("p1", "10.244.1.11", "0a:00:00:00:01:0b"),
        ("p2", "10.244.1.12", "0a:00:00:00:01:0c"),
        ("p3", "10.244.1.13", "0a:00:00:00:01:0d"),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"midonet.org/mac-address": mac}},
            "spec": {"nodeName": "es-node", "containers": [{"name": "c", "image": "x"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}),
            ),
        )
        .await
        .unwrap();
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    // web is a LoadBalancer Service with an external IP and an ingress IP, as a cloud
    // controller would report it: pods reach it at all three addresses.
    let mut web = service("web", 8080);
    if let Some(spec) = web.spec.as_mut() {
        spec.type_ = Some("LoadBalancer".into());
        spec.external_ips = Some(vec![WEB_EXTERNAL_IP.into()]);
    }
    services.create(&PostParams::default(), &web).await.unwrap();
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": WEB_INGRESS_IP}]}}}),
            ),
        )
        .await
        .unwrap();

    // Two slices, merged; a terminating endpoint is not used while others are ready, a
    // not-ready one never; absent conditions mean ready.
    const RST: Option<(bool, bool, bool)> = Some((true, true, false));
    const DRAINING: Option<(bool, bool, bool)> = Some((false, true, true));
    const GONE: Option<(bool, bool, bool)> = Some((false, false, true));
    put_slice(&client, &ns, "web-a", "web", 8080, &[("10.244.1.11", None)]).await;
    put_slice(
        &client,
        &ns,
        "web-b",
        "web",
        8080,
        &[("10.244.1.12", RST), ("10.244.1.13", DRAINING)],
    )
    .await;
    wait_converged(&client, &admin, "two slices").await;
    wait_candidates(&api, &ns, "web", &["p1", "p2"]).await;
    // The exact state follows the slices (there are no Endpoints objects to follow), and
    // so does `check`: web:80 is expected at the merged slices' ready endpoints.
    stack::wait_exact(&client, &admin, "two slices", CEILING).await;
    let report = check_live(&api, &ns, &["10.244.1.11:8080", "10.244.1.12:8080"]).await;
    assert!(report.passed(), "{}", describe(&report));

    // No endpoint ready any more: the serving terminating ones take the traffic.
    put_slice(
        &client,
        &ns,
        "web-a",
        "web",
        8080,
        &[("10.244.1.11", DRAINING)],
    )
    .await;
    put_slice(
        &client,
        &ns,
        "web-b",
        "web",
        8080,
        &[("10.244.1.12", GONE), ("10.244.1.13", DRAINING)],
    )
    .await;
    wait_converged(&client, &admin, "only terminating endpoints").await;
    wait_candidates(&api, &ns, "web", &["p1", "p3"]).await;
    stack::wait_exact(&client, &admin, "only terminating", CEILING).await;
    let report = check_live(&api, &ns, &["10.244.1.11:8080", "10.244.1.13:8080"]).await;
    assert!(report.passed(), "{}", describe(&report));

    // Break it: delete the DNAT rule of web's generation behind the controllers' back.
    // `check` must notice, on web:80 and nothing else.
    let state = admin.state().await.unwrap();
    let dnat: Vec<String> = state
        .entries_of(Kind::Rule)
        .into_iter()
        .filter(|r| r.body.get("type").and_then(|t| t.as_str()) == Some("dnat"))
        .filter(|r| {
            r.body["natTargets"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["addressFrom"] == "10.244.1.13"))
        })
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(dnat.len(), 1, "{dnat:?}");
    let cfg = config(&api);
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    backend.delete_path(Kind::Rule, &dnat[0]).await.unwrap();
    let broken = check_live(&api, &ns, &["10.244.1.11:8080", "10.244.1.13:8080"]).await;
    assert!(!broken.passed());
    let web = format!("svc/{ns}/web:80");
    for f in &broken.failures {
        assert!(
            match f.kind {
                FlowKind::PodToService | FlowKind::Hairpin => f.to.starts_with(&web),
                // web:80's node port, at each node's address.
                FlowKind::NodeToNodePort => f.to.starts_with(&format!("svc/{ns}/web:")),
                _ => false,
            },
            "unexpected failure: {}",
            describe(&broken)
        );
    }
    // Every client of web:80 (the endpoints' own calls included) loses it, at each address,
    // the node port on the node's host path included.
    assert!(broken.failures.iter().any(|f| f.kind == FlowKind::Hairpin));
    assert!(broken
        .failures
        .iter()
        .any(|f| f.kind == FlowKind::NodeToNodePort));
    for via in [
        " (http) (",
        " via external IP (",
        " via load-balancer ingress (",
    ] {
        assert!(
            broken
                .failures
                .iter()
                .any(|f| f.kind == FlowKind::PodToService && f.to.contains(via)),
            "{via}: {}",
            describe(&broken)
        );
    }

    // A deleted slice takes its endpoints along; a ready endpoint again wins.
    let (slices, _) = slice_api(&client, &ns);
    slices
        .delete("web-a", &DeleteParams::default())
        .await
        .unwrap();
    put_slice(
        &client,
        &ns,
        "web-b",
        "web",
        8080,
        &[("10.244.1.12", RST), ("10.244.1.13", DRAINING)],
    )
    .await;
    wait_converged(&client, &admin, "one slice left").await;
    wait_candidates(&api, &ns, "web", &["p2"]).await;

    // Nothing serving: no generation, and the traffic is not delivered.
    put_slice(&client, &ns, "web-b", "web", 8080, &[("10.244.1.12", GONE)]).await;
    wait_converged(&client, &admin, "nothing serving").await;
    wait_candidates(&api, &ns, "web", &[]).await;

    // 1,030 endpoints in three slices (an apiserver caps a slice at 1,000; the Endpoints
    // API would truncate the set at 1,000): every one is a DNAT target.
    services
        .create(&PostParams::default(), &service("big", 9090))
        .await
        .unwrap();
    let all: Vec<String> = (0..1030u32)
        .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 250, 0, 1)) + i).to_string())
        .collect();
    for (k, chunk) in all.chunks(500).enumerate() {
        let eps: Vec<Ep> = chunk.iter().map(|ip| (ip.as_str(), None)).collect();
        put_slice(&client, &ns, &format!("big-{k}"), "big", 9090, &eps).await;
    }
    let want: BTreeSet<String> = all.iter().cloned().collect();
    wait_until("1,030 DNAT targets", CEILING, || async {
        (stack::dnat_targets(&admin, 9090)
            .await
            .into_iter()
            .collect::<BTreeSet<_>>()
            == want)
            .then_some(())
    })
    .await;
    wait_converged(&client, &admin, "big service").await;

    controllers.stop().await;
}
