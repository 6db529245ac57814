//! `trace` and `check` on the real parts: the control plane, the simulator and the
//! controllers converge on a small cluster; the data-plane model, fed by GETs against the
//! simulator, must find every promised connection working, trace a Service to exactly its
//! endpoints, and, once a Service's jump rule is deleted behind the controllers' back,
//! report exactly that Service port's flows as failed. Its own test binary: the check
//! covers every object in the cluster.

mod support;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, PostParams};
use midonet_dataplane::{FlowKind, SocketV4};
use midonet_kube_controllers::netcheck::cli::{trace_live, trace_live_via};
use midonet_kube_controllers::netcheck::Via;
use midonet_sim::admin::TraceRequest;
use midonet_translators::model::Kind;
use serde_json::{json, Value};
use support::check::{assert_check_passes, describe};
use support::objects::{endpoints, node, node_at, pod, service, set_pod_ip, wait_host_ids};
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

/// Runs the built binary; answers its exit code, stdout and stderr. Asynchronously: the
/// simulator answering it runs on this test's runtime.
async fn run_binary(cfg_api: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_midonet-kube-controllers"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&control_plane().kubeconfig)
        .arg("--midonet-api")
        .arg(cfg_api)
        .env_remove("MIDONETKUBE_LOG_LEVEL")
        .output()
        .await
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn trace_and_check_on_the_converged_cluster_and_on_a_broken_one() {
    let client = admin_client().await;
    let (host_a, host_b) = (Uuid::new_v4(), Uuid::new_v4());
    let (sim, admin) = stack::start_sim(&[("nc-node-a", host_a), ("nc-node-b", host_b)]).await;
    // Drift repair must not undo the break before the check sees it.
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--verify-period", "1h"],
    )
    .await;
    let api = sim.api_url().to_string();

    // The apiserver's own Service (default/kubernetes) points at 127.0.0.1: make it a
    // node address, so that its endpoint is a workload the check can verify.
    let nodes: Api<Node> = Api::all(client.clone());
    for n in [
        node(
            "nc-node-a",
            "10.244.1.0/24",
            &[("InternalIP", "192.168.0.11"), ("ExternalIP", "127.0.0.1")],
        ),
        node_at("nc-node-b", "10.244.2.0/24", "192.168.0.12"),
    ] {
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    wait_host_ids(&nodes, &[("nc-node-a", host_a), ("nc-node-b", host_b)]).await;

    let ns = unique_namespace(&client, "netcheck").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node, ip, mac) in [
        ("p1", "nc-node-a", "10.244.1.10", Some("0a:00:00:00:01:0a")),
        ("p2", "nc-node-a", "10.244.1.11", None),
        ("p3", "nc-node-b", "10.244.2.10", Some("0a:00:00:00:02:0a")),
        ("p4", "nc-node-b", "10.244.2.11", None),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, mac))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    // web also has an external IP: `trace --via external-ip` goes there.
    let external_ip: std::net::Ipv4Addr = "198.51.100.20".parse().unwrap();
    let mut web = service("web");
    if let Some(spec) = web.spec.as_mut() {
        spec.external_ips = Some(vec![external_ip.to_string()]);
    }
    services.create(&PostParams::default(), &web).await.unwrap();
    services
        .create(&PostParams::default(), &service("empty"))
        .await
        .unwrap();
    eps.create(
        &PostParams::default(),
        &endpoints("web", &["10.244.1.10", "10.244.2.10"]),
    )
    .await
    .unwrap();
    eps.create(&PostParams::default(), &endpoints("empty", &[]))
        .await
        .unwrap();
    wait_converged(&client, &admin, "netcheck cluster").await;
    let cluster_ip: std::net::Ipv4Addr = services
        .get("web")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .and_then(|ip| ip.parse().ok())
        .expect("web has a cluster IP");

    // The library paths: read everything, check, trace.
    let report = assert_check_passes(&api, "the converged cluster").await;
    assert!(report.unplugged.is_empty(), "{:?}", report.unplugged);
    // Without an edge there is no outside to check (tests/edge.rs).
    let inside = FlowKind::ALL.into_iter().filter(|k| k.in_every_cluster());
    for kind in inside {
        assert!(
            report.by_kind.get(&kind).is_some_and(|t| t.checked > 0),
            "no {kind:?} flow checked: {:?}",
            report.by_kind
        );
    }

    let live = support::check::live(&api).await;
    let from = format!("pod/{ns}/p2");
    let (t, dest) = trace_live(&live, &from, &format!("svc/{ns}/web:http"), None, 40000).unwrap();
    assert_eq!(dest.address, SocketV4::new(cluster_ip, 80));
    let want = vec![
        (
            format!("pod/{ns}/p1"),
            SocketV4::new("10.244.1.10".parse().unwrap(), 8080),
        ),
        (
            format!("pod/{ns}/p3"),
            SocketV4::new("10.244.2.10".parse().unwrap(), 8080),
        ),
    ];
    assert_eq!(t.candidates(), want);
    assert!(
        t.all_work(),
        "{}",
        serde_json::to_string_pretty(&t).unwrap()
    );
    for p in &t.paths {
        assert_eq!(p.client_sees, Some(SocketV4::new(cluster_ip, 80)));
    }
    // The same Service at its external IP: the same endpoints, answered from that address.
    let (t, dest) = trace_live_via(
        &live,
        &from,
        &format!("svc/{ns}/web:http"),
        Via::ExternalIp,
        None,
        40000,
    )
    .unwrap();
    assert_eq!(dest.address, SocketV4::new(external_ip, 80));
    assert_eq!(t.candidates(), want);
    assert!(
        t.all_work(),
        "{}",
        serde_json::to_string_pretty(&t).unwrap()
    );
    for p in &t.paths {
        assert_eq!(p.client_sees, Some(SocketV4::new(external_ip, 80)));
    }
    // No load-balancer ingress: a usage error, not a trace to somewhere else.
    assert!(trace_live_via(
        &live,
        &from,
        &format!("svc/{ns}/web:http"),
        Via::LoadBalancer,
        None,
        40000
    )
    .is_err());
    let (t, _) = trace_live(&live, &from, &format!("svc/{ns}/empty:80"), None, 40000).unwrap();
    assert!(!t.delivered());

    // The simulator's own trace agrees.
    let answer = admin
        .trace(&TraceRequest::new(
            live.cluster.attachments(),
            from.clone(),
            format!("{cluster_ip}:80"),
        ))
        .await
        .unwrap();
    assert_eq!(answer.candidates(), want);

    // The binary: exit codes and the JSON shape.
    let (code, out, err) = run_binary(
        &api,
        &[
            "trace",
            "--from",
            &from,
            "--to",
            &format!("svc/{ns}/web:80"),
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("trace JSON");
    assert_eq!(v["verdict"], "delivered");
    assert_eq!(v["to"]["ip"], cluster_ip.to_string());
    assert_eq!(v["to"]["port"], 80);
    let candidates: Vec<&str> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["workload"].as_str())
        .collect();
    assert_eq!(
        candidates,
        vec![format!("pod/{ns}/p1"), format!("pod/{ns}/p3")]
    );
    assert!(v["forward"]["hops"]
        .as_array()
        .is_some_and(|h| !h.is_empty()));
    assert_eq!(
        v["reply"]["clientSees"],
        json!({"ip": cluster_ip.to_string(), "port": 80})
    );
    // Some hop of the forward leg names the Translation that owns its rule.
    assert!(v["forward"]["hops"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["rule"].is_string() && h["translation"].is_string()));
    // And some hop is a routing step that names its route (and no rule).
    assert!(v["forward"]["hops"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["step"] == "route" && h["route"].is_string() && h.get("rule").is_none()));
    let (code, out, err) = run_binary(
        &api,
        &[
            "trace",
            "--from",
            &from,
            "--to",
            &format!("svc/{ns}/web:http"),
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    eprintln!("{out}");
    assert!(out.contains("verdict: DELIVERED"), "{out}");
    assert!(
        out.contains(&format!("client sees the reply from {cluster_ip}:80")),
        "{out}"
    );
    assert!(out.contains("[Translation "), "{out}");
    // --via: the binary goes to the external IP and says so.
    let (code, out, err) = run_binary(
        &api,
        &[
            "trace",
            "--from",
            &from,
            "--to",
            &format!("svc/{ns}/web:http"),
            "--via",
            "external-ip",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("trace JSON");
    assert_eq!(v["verdict"], "delivered");
    assert_eq!(v["to"]["ip"], external_ip.to_string());
    assert_eq!(v["to"]["via"], "external-ip");
    let (code, _, err) = run_binary(
        &api,
        &[
            "trace",
            "--from",
            &from,
            "--to",
            "10.244.1.10:8080",
            "--via",
            "lb",
        ],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--via applies to svc/"), "{err}");
    let (code, out, err) = run_binary(
        &api,
        &[
            "trace",
            "--from",
            &from,
            "--to",
            &format!("svc/{ns}/empty:80"),
        ],
    )
    .await;
    assert_eq!(code, 1, "{out}\n{err}");
    // Nothing routes the cluster IP of a Service without endpoints: the cluster router
    // answers ICMP net unreachable, as midolman does.
    assert!(out.contains("verdict: REJECTED"), "{out}");
    assert!(out.contains("net unreachable (3/0)"), "{out}");
    let (code, out, err) =
        run_binary(&api, &["trace", "--from", &from, "--to", "svc/nope/x:80"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    let (code, out, err) = run_binary(&api, &["check"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("0 failed"), "{out}");

    // Break it: delete web:80's jump from KUBE-SERVICES behind the controllers' back.
    let state = admin.state().await.unwrap();
    let jumps: Vec<String> = state
        .entries_of(Kind::Rule)
        .into_iter()
        .filter(|e| {
            let b = &e.body;
            b.get("type").and_then(Value::as_str) == Some("jump")
                && b.get("nwDstAddress").and_then(Value::as_str)
                    == Some(cluster_ip.to_string().as_str())
                && b.pointer("/tpDst/start").and_then(Value::as_u64) == Some(80)
        })
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(jumps.len(), 1, "{jumps:?}");
    let cfg = support::check::config(&api);
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    backend.delete_path(Kind::Rule, &jumps[0]).await.unwrap();
    assert!(!admin.state().await.unwrap().contains(&jumps[0]));

    let broken = support::check::check(&api).await;
    assert!(!broken.passed());
    let web = format!("svc/{ns}/web:80");
    for f in &broken.failures {
        assert!(
            matches!(f.kind, FlowKind::PodToService | FlowKind::Hairpin) && f.to.starts_with(&web),
            "unexpected failure: {}",
            describe(&broken)
        );
    }
    // Every flow to web:80 fails: one per source class (the pod-to-service flows are one
    // per class and Service port with endpoints), and the hairpin of its two endpoints.
    let count = |k: FlowKind| broken.failures.iter().filter(|f| f.kind == k).count();
    let ports_with_endpoints = live
        .cluster
        .service_ports()
        .iter()
        .filter(|sp| !sp.endpoints.is_empty())
        .count();
    assert_eq!(
        count(FlowKind::PodToService),
        broken.by_kind[&FlowKind::PodToService].checked / ports_with_endpoints,
        "{}",
        describe(&broken)
    );
    assert_eq!(count(FlowKind::Hairpin), 2, "{}", describe(&broken));
    let (code, out, err) = run_binary(&api, &["check", "-o", "json"]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("check JSON");
    assert_eq!(
        v["failures"].as_array().map(Vec::len),
        Some(broken.failures.len())
    );

    controllers.stop().await;
    sim.shutdown().await;
}
