//! The REST client against the simulator over real HTTP: every kind created, conflicts
//! settled, referents missing, cascades, 404 on delete, logins, transient and persistent
//! failures, lists, metrics, and credentials kept out of logs and errors.

mod common;

use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use midonet_kube_controllers::backend::{BackendClient, BackendConfig, BackendError, Secret};
use midonet_sim::admin::Faults;
use midonet_sim::SimHandle;
use midonet_translators::model::*;
use midonet_translators::TranslationResource;
use serde_json::json;
use uuid::Uuid;

fn config(sim: &SimHandle, retry: Duration) -> BackendConfig {
    BackendConfig {
        url: sim.api_url(),
        username: USER.into(),
        password: Secret::new(PASSWORD),
        project: PROJECT.into(),
        ca_file: None,
        timeout: Duration::from_secs(2),
        retry_max_elapsed: retry,
    }
}

fn client(sim: &SimHandle) -> BackendClient {
    BackendClient::new(
        config(sim, Duration::from_secs(2)),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

const MAC: &str = "0a:58:0a:01:00:05";

/// One resource of every pushable kind, in push order (referents first).
struct Topology {
    tz: Uuid,
    chain: Uuid,
    target_chain: Uuid,
    bridge: Uuid,
    router: Uuid,
    bridge_port: Uuid,
    vm_port: Uuid,
    router_port: Uuid,
    resources: Vec<Resource>,
}

fn topology() -> Topology {
    let (tz, chain, target_chain, bridge, router) =
        (new_id(), new_id(), new_id(), new_id(), new_id());
    let (bridge_port, vm_port, router_port) = (new_id(), new_id(), new_id());
    let mac: MacAddr = MAC.parse().unwrap();
    let mut b = Bridge::new(bridge);
    b.name = Some("cluster".into());
    b.tenant_id = Some("k8s".into());
    b.inbound_filter_id = Some(chain);
    let mut r = Router::new(router);
    r.tenant_id = Some("k8s".into());
    let mut rp = Port::router_port(router, router_port);
    rp.port_subnet = Some(vec!["10.0.0.1/24".parse().unwrap()]);
    rp.port_mac = Some("ac:ca:ba:00:00:01".parse().unwrap());
    let mut dnat = Rule::new(target_chain, new_id(), RuleType::Dnat);
    dnat.flow_action = Some(FlowAction::Accept);
    dnat.nat_targets = Some(vec![NatTarget::to(Ipv4Addr::new(10, 1, 0, 5), Some(8080))]);
    dnat.tp_dst = Some(PortRange::single(80));
    let mut chain_obj = Chain::new(chain);
    chain_obj.tenant_id = Some("k8s".into());
    let resources = vec![
        TunnelZone::new(tz, "default", TunnelZoneType::Vxlan).into(),
        TunnelZoneHost::new(tz, host_id(), Ipv4Addr::new(192, 168, 0, 1)).into(),
        chain_obj.into(),
        Chain::new(target_chain).into(),
        dnat.into(),
        Rule::jump(chain, new_id(), target_chain).into(),
        b.into(),
        r.into(),
        Port::bridge_port(bridge, bridge_port).into(),
        Port::bridge_port(bridge, vm_port).into(),
        rp.into(),
        PortLink::new(bridge_port, router_port).into(),
        Route::normal(
            router,
            new_id(),
            "10.1.0.0/16".parse().unwrap(),
            router_port,
        )
        .into(),
        HostInterfacePort::new(host_id(), vm_port, "veth0").into(),
        MacPort::new(bridge, mac, vm_port).into(),
        Ipv4MacPair::new(bridge, Ipv4Addr::new(10, 1, 0, 5), mac).into(),
    ];
    Topology {
        tz,
        chain,
        target_chain,
        bridge,
        router,
        bridge_port,
        vm_port,
        router_port,
        resources,
    }
}

async fn apply_all(c: &BackendClient, resources: &[Resource]) {
    for r in resources {
        c.apply(r)
            .await
            .unwrap_or_else(|e| panic!("apply {:?}: {e}", r.kind()));
    }
}

#[tokio::test]
async fn every_kind_is_created_settled_and_deleted() {
    let sim = start_sim().await;
    let adm = admin(&sim);
    let c = client(&sim);
    let t = topology();
    apply_all(&c, &t.resources).await;
    let state = adm.state().await.unwrap();
    for r in &t.resources {
        let entry = state
            .get(&r.item_path())
            .unwrap_or_else(|| panic!("{} {} not stored", r.kind(), r.item_path()));
        assert_eq!(entry.kind, r.kind().name());
        assert_eq!(entry.parent, r.to_entry().parent, "{}", r.kind());
    }
    // Pushing everything again settles every conflict: PUT for updatable kinds (a
    // TunnelZone PUT answers 409 for its own name, which counts as done), a GET otherwise.
    adm.reset_requests().await.unwrap();
    apply_all(&c, &t.resources).await;
    let counts = adm.requests().await.unwrap();
    assert_eq!(
        counts.of_status(409),
        17,
        "every POST conflicted, and the TunnelZone PUT: {counts:?}"
    );
    for (kind, puts) in [
        (Kind::TunnelZone, 1),
        (Kind::Router, 1),
        (Kind::Bridge, 1),
        (Kind::Port, 3),
    ] {
        assert_eq!(counts.get(kind, "PUT"), puts, "{kind}");
    }
    for (kind, gets) in [
        (Kind::TunnelZoneHost, 1),
        (Kind::Chain, 2),
        (Kind::Rule, 2),
        (Kind::Route, 1),
        (Kind::HostInterfacePort, 1),
        (Kind::MacPort, 1),
        (Kind::Ipv4MacPair, 1),
        (Kind::Port, 1), // the link, confirmed on its port
    ] {
        assert_eq!(counts.get(kind, "GET"), gets, "{kind}");
    }
    assert_eq!(counts.of_method("PUT"), 6);
    // An update reaches the backend through the conflict path.
    let mut renamed = Bridge::new(t.bridge);
    renamed.name = Some("renamed".into());
    c.apply(&renamed.into()).await.unwrap();
    let state = adm.state().await.unwrap();
    assert_eq!(
        state.get(&format!("/bridges/{}", t.bridge)).unwrap().body["name"],
        "renamed"
    );
    // Deleting in reverse order leaves only the hosts; deleting again is fine (404).
    for r in t.resources.iter().rev() {
        c.delete(r)
            .await
            .unwrap_or_else(|e| panic!("delete {:?}: {e}", r.kind()));
    }
    let state = adm.state().await.unwrap();
    assert_eq!(state.len(), state.count(Kind::Host), "{state:?}");
    adm.reset_requests().await.unwrap();
    for r in t.resources.iter().rev() {
        c.delete(r).await.unwrap();
    }
    let counts = adm.requests().await.unwrap();
    assert!(counts.of_status(404) >= 10, "{counts:?}");
}

#[tokio::test]
async fn missing_referents_are_retryable() {
    let sim = start_sim().await;
    let c = client(&sim);
    let t = topology();
    let by_kind = |k: Kind| t.resources.iter().find(|r| r.kind() == k).unwrap().clone();
    // A port before its bridge: 404.
    let port: Resource = Port::bridge_port(t.bridge, t.bridge_port).into();
    let err = c.apply(&port).await.unwrap_err();
    assert!(err.is_referent_missing() && err.is_retryable(), "{err}");
    assert_eq!(err.status(), Some(404));
    // A Normal route before its next-hop port: 400 (ROUTE_NEXT_HOP_PORT_NOT_NULL).
    c.apply(&Router::new(t.router).into()).await.unwrap();
    let route = by_kind(Kind::Route);
    let err = c.apply(&route).await.unwrap_err();
    assert!(err.is_referent_missing(), "{err}");
    assert_eq!(err.status(), Some(400));
    // A jump rule before its target chain.
    c.apply(&Chain::new(t.chain).into()).await.unwrap();
    let jump: Resource = Rule::jump(t.chain, new_id(), t.target_chain).into();
    assert!(c.apply(&jump).await.unwrap_err().is_referent_missing());
    // Once the referents exist, the same resources go through.
    c.apply(&Chain::new(t.target_chain).into()).await.unwrap();
    c.apply(&jump).await.unwrap();
    c.apply(&Bridge::new(t.bridge).into()).await.unwrap();
    c.apply(&port).await.unwrap();
    let mut rp = Port::router_port(t.router, t.router_port);
    rp.port_subnet = Some(vec!["10.0.0.1/24".parse().unwrap()]);
    c.apply(&rp.into()).await.unwrap();
    c.apply(&route).await.unwrap();
}

#[tokio::test]
async fn a_conflict_without_the_resource_is_retryable() {
    let sim = start_sim().await;
    let c = client(&sim);
    let bridge = new_id();
    let port = new_id();
    c.apply(&Bridge::new(bridge).into()).await.unwrap();
    c.apply(&Port::bridge_port(bridge, port).into())
        .await
        .unwrap();
    // MidoNet answers 409 to a binding on a host in no tunnel zone; the binding is not
    // there, so the conflict cannot be settled yet: a refusal of its own, with a message
    // saying why, after one POST and one GET (not retried by the client).
    let binding: Resource = HostInterfacePort::new(host_id(), port, "veth0").into();
    let adm = admin(&sim);
    adm.reset_requests().await.unwrap();
    let err = c.apply(&binding).await.unwrap_err();
    assert!(
        matches!(err, BackendError::BindingRefused { host, port: p, .. } if host == host_id() && p == port),
        "{err}"
    );
    assert!(err.is_host_not_in_tunnel_zone(), "{err}");
    assert!(err.to_string().contains("tunnel zone"), "{err}");
    assert_eq!(err.status(), Some(409));
    assert!(err.is_retryable() && !err.is_referent_missing());
    let counts = adm.requests().await.unwrap();
    assert_eq!(
        counts.total - counts.login,
        2,
        "POST and GET only: {counts:?}"
    );
    // After the host joins a tunnel zone, it works.
    let tz = new_id();
    c.apply(&TunnelZone::new(tz, "tz", TunnelZoneType::Vxlan).into())
        .await
        .unwrap();
    c.apply(&TunnelZoneHost::new(tz, host_id(), Ipv4Addr::new(192, 168, 0, 1)).into())
        .await
        .unwrap();
    c.apply(&binding).await.unwrap();
    // A link to another peer than the wanted one is a conflict.
    let (p1, p2, p3) = (new_id(), new_id(), new_id());
    for p in [p1, p2, p3] {
        c.apply(&Port::bridge_port(bridge, p).into()).await.unwrap();
    }
    c.apply(&PortLink::new(p1, p2).into()).await.unwrap();
    c.apply(&PortLink::new(p1, p2).into()).await.unwrap();
    let err = c.apply(&PortLink::new(p1, p3).into()).await.unwrap_err();
    assert!(
        matches!(err, BackendError::LinkConflict { actual, .. } if actual == p2),
        "{err}"
    );
}

#[tokio::test]
async fn deletes_tolerate_cascaded_resources() {
    let sim = start_sim().await;
    let adm = admin(&sim);
    let c = client(&sim);
    let t = topology();
    apply_all(&c, &t.resources).await;
    // Deleting the bridge and the chains takes their ports, tables and rules along.
    c.delete_path(Kind::Bridge, &format!("/bridges/{}", t.bridge))
        .await
        .unwrap();
    c.delete(&Chain::new(t.target_chain).into()).await.unwrap();
    let state = adm.state().await.unwrap();
    for kind in [
        Kind::MacPort,
        Kind::Ipv4MacPair,
        Kind::HostInterfacePort,
        Kind::PortLink,
        Kind::Rule,
    ] {
        assert_eq!(state.count(kind), 0, "{kind}");
    }
    // The resources cascaded away are "deleted" for the client too.
    adm.reset_requests().await.unwrap();
    for r in t.resources.iter().rev() {
        c.delete(r)
            .await
            .unwrap_or_else(|e| panic!("delete {:?}: {e}", r.kind()));
    }
    assert!(adm.requests().await.unwrap().of_status(404) > 0);
    let state = adm.state().await.unwrap();
    assert_eq!(state.len(), state.count(Kind::Host));
}

#[tokio::test]
async fn logs_in_and_again_after_expiry() {
    let sim = start_sim_with_auth().await;
    let adm = admin(&sim);
    let c = client(&sim);
    assert!(!c.is_logged_in());
    // The first call gets 401, logs in, and is repeated.
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    assert!(c.is_logged_in());
    assert_eq!(adm.requests().await.unwrap().login, 1);
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    assert_eq!(
        adm.requests().await.unwrap().login,
        1,
        "the token is reused"
    );
    // Tokens expire: the next call logs in again.
    adm.expire_tokens().await.unwrap();
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    let counts = adm.requests().await.unwrap();
    assert_eq!(counts.login, 2);
    assert_eq!(counts.of_status(401), 2);
    // Concurrent callers hitting 401 together log in once.
    adm.expire_tokens().await.unwrap();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.list_hosts().await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().len(), 2);
    }
    assert_eq!(adm.requests().await.unwrap().login, 3);
    // An explicit login works too.
    c.login().await.unwrap();
    assert_eq!(adm.requests().await.unwrap().login, 4);
}

#[tokio::test]
async fn wrong_credentials_are_a_permanent_error() {
    let sim = start_sim_with_auth().await;
    let mut cfg = config(&sim, Duration::from_secs(2));
    cfg.password = Secret::new("not-the-password");
    let c = BackendClient::new(cfg, &prometheus::Registry::new()).unwrap();
    let err = c.apply(&Chain::new(new_id()).into()).await.unwrap_err();
    assert!(
        matches!(err, BackendError::LoginFailed { status: 401, .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert!(!err.to_string().contains("not-the-password"));
    assert!(!c.is_logged_in());
}

#[tokio::test]
async fn transient_failures_are_retried() {
    let sim = start_sim().await;
    let adm = admin(&sim);
    let c = client(&sim);
    adm.set_faults(Faults {
        fail_next: 3,
        ..Faults::default()
    })
    .await
    .unwrap();
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    assert_eq!(adm.requests().await.unwrap().of_status(503), 3);
    adm.set_faults(Faults {
        fail_next: 2,
        error_status: 500,
        ..Faults::default()
    })
    .await
    .unwrap();
    assert!(c
        .exists(Kind::Chain, &format!("/chains/{}", new_id()))
        .await
        .is_ok());
    adm.set_faults(Faults {
        drop_next: 2,
        ..Faults::default()
    })
    .await
    .unwrap();
    c.apply(&Bridge::new(new_id()).into()).await.unwrap();
    assert_eq!(adm.requests().await.unwrap().faults_injected, 7);
}

#[tokio::test]
async fn persistent_failures_surface_as_errors() {
    let sim = start_sim().await;
    let adm = admin(&sim);
    let c = BackendClient::new(
        config(&sim, Duration::from_millis(500)),
        &prometheus::Registry::new(),
    )
    .unwrap();
    adm.set_faults(Faults {
        down: true,
        ..Faults::default()
    })
    .await
    .unwrap();
    let started = Instant::now();
    let err = c.apply(&Chain::new(new_id()).into()).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Unavailable { status: 503, .. }),
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(
        adm.requests().await.unwrap().of_status(503) > 1,
        "it was retried"
    );
    // Nobody listening: a transport error, after retries.
    let url = sim.api_url();
    sim.shutdown().await;
    let mut cfg = config(&start_sim().await, Duration::from_millis(300));
    cfg.url = url;
    let c = BackendClient::new(cfg, &prometheus::Registry::new()).unwrap();
    let err = c.delete(&Chain::new(new_id()).into()).await.unwrap_err();
    assert!(matches!(err, BackendError::Transport { .. }), "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn lists_gets_and_existence() {
    let sim = start_sim().await;
    let c = client(&sim);
    let t = topology();
    apply_all(&c, &t.resources).await;
    let hosts = c.list_hosts().await.unwrap();
    assert_eq!(
        hosts
            .iter()
            .map(|h| h.name.as_deref().unwrap())
            .collect::<Vec<_>>(),
        ["node1", "node2"]
    );
    assert_eq!(c.list_tunnel_zones().await.unwrap()[0].id, t.tz);
    c.apply(&Bridge::new(new_id()).into()).await.unwrap();
    assert_eq!(c.list_bridges(None).await.unwrap().len(), 2);
    let k8s = c.list_bridges(Some("k8s")).await.unwrap();
    assert_eq!(k8s.len(), 1);
    assert_eq!(k8s[0].inbound_filter_id, Some(t.chain));
    assert_eq!(c.list_routers(Some("k8s")).await.unwrap().len(), 1);
    assert_eq!(
        c.list_routers(Some("a b&c")).await.unwrap().len(),
        0,
        "query encoded"
    );
    assert_eq!(c.list_chains(Some("k8s")).await.unwrap().len(), 1);
    assert_eq!(c.list_chains(None).await.unwrap().len(), 2);
    let rules = c.list_rules(t.target_chain).await.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].rule_type, RuleType::Dnat);
    assert_eq!(rules[0].position, Some(1));
    assert_eq!(rules[0].parent, t.target_chain);
    let ports = c.list_bridge_ports(t.bridge).await.unwrap();
    assert_eq!(
        ports.iter().map(|p| p.id).collect::<Vec<_>>(),
        [t.bridge_port, t.vm_port]
    );
    assert_eq!(ports[1].extra["interfaceName"], "veth0");
    let rports = c.list_router_ports(t.router).await.unwrap();
    assert_eq!(rports[0].port_address, Some(Ipv4Addr::new(10, 0, 0, 1)));
    let routes = c.list_routes(t.router).await.unwrap();
    let types: Vec<RouteType> = routes.iter().filter_map(|r| r.route_type).collect();
    assert_eq!(types, [RouteType::Local, RouteType::Normal]);
    let err = c.list_routes(new_id()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    // exists/get, drift repair's view of single resources.
    for r in &t.resources {
        assert!(
            c.exists(r.kind(), &r.item_path()).await.unwrap(),
            "{} {}",
            r.kind(),
            r.item_path()
        );
    }
    assert!(!c
        .exists(Kind::Bridge, &format!("/bridges/{}", new_id()))
        .await
        .unwrap());
    assert!(
        !c.exists(Kind::PortLink, &format!("/ports/{}/link", t.vm_port))
            .await
            .unwrap(),
        "not linked"
    );
    let port = c
        .get(Kind::Port, &format!("/ports/{}", t.bridge_port))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(port["peerId"], json!(t.router_port));
    assert_eq!(
        c.get(Kind::Chain, &format!("/chains/{}", new_id()))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn entries_from_translations_push_as_is() {
    // Bodies as the original Go controller wrote them into Translations.
    let sim = start_sim().await;
    let c = client(&sim);
    let (bridge, bp, router, rp) = (new_id(), new_id(), new_id(), new_id());
    let entries = [
        TranslationResource::new("Bridge", "", json!({"id": bridge, "name": "b"}).to_string()),
        TranslationResource::new("Router", "", json!({"id": router}).to_string()),
        TranslationResource::new("Port", bridge.to_string(), json!({"id": bp, "type": "Bridge"}).to_string()),
        TranslationResource::new("Port", router.to_string(), json!({"id": rp, "type": "Router", "portSubnet": ["172.16.0.1/30"], "portMac": "ac:ca:ba:00:00:02"}).to_string()),
        TranslationResource::new("PortLink", bp.to_string(), json!({"portId": null, "peerId": rp}).to_string()),
        TranslationResource::new("Route", router.to_string(), json!({"id": new_id(), "dstNetworkAddr": "10.1.0.0", "dstNetworkLength": 16, "nextHopPort": rp, "srcNetworkAddr": "0.0.0.0", "srcNetworkLength": 0, "type": "Normal"}).to_string()),
    ];
    for e in &entries {
        let r = Resource::from_entry(e).unwrap();
        c.apply(&r).await.unwrap();
        c.apply(&r).await.unwrap();
    }
}

#[tokio::test]
async fn metrics_use_the_original_names() {
    let sim = start_sim().await;
    let registry = prometheus::Registry::new();
    let c = BackendClient::new(config(&sim, Duration::from_millis(200)), &registry).unwrap();
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    c.list_hosts().await.unwrap();
    let url = sim.api_url();
    sim.shutdown().await;
    let mut cfg = config(&start_sim().await, Duration::from_millis(100));
    cfg.url = url;
    let registry2 = prometheus::Registry::new();
    let dead = BackendClient::new(cfg, &registry2).unwrap();
    assert!(dead.list_hosts().await.is_err());
    let families = registry.gather();
    let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
    for name in [
        "midonet_kube_controllers_midonet_client_request_duration_seconds",
        "midonet_kube_controllers_midonet_client_requests_total",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let requests = families
        .iter()
        .find(|f| f.name() == "midonet_kube_controllers_midonet_client_requests_total")
        .unwrap();
    let labels: Vec<Vec<(String, String)>> = requests
        .get_metric()
        .iter()
        .map(|m| {
            m.get_label()
                .iter()
                .map(|l| (l.name().to_string(), l.value().to_string()))
                .collect()
        })
        .collect();
    assert!(
        labels.contains(&vec![
            ("code".into(), "201".into()),
            ("method".into(), "post".into()),
            ("resource".into(), Kind::Chain.media_type().into()),
        ]),
        "{labels:?}"
    );
    let errors = registry2
        .gather()
        .into_iter()
        .find(|f| f.name() == "midonet_kube_controllers_midonet_client_errors_total")
        .expect("errors_total after connection failures");
    assert!(errors.get_metric()[0].get_counter().get_value() >= 1.0);
    // Metrics live in the registry given, so a second client needs its own.
    let dup = BackendClient::new(config(&start_sim().await, Duration::ZERO), &registry);
    assert!(matches!(dup, Err(BackendError::Metrics(_))));
}

#[tokio::test]
async fn bad_configurations_are_errors() {
    let sim = start_sim().await;
    let bad = |f: &dyn Fn(&mut BackendConfig)| {
        let mut cfg = config(&sim, Duration::ZERO);
        f(&mut cfg);
        BackendClient::new(cfg, &prometheus::Registry::new()).unwrap_err()
    };
    let err =
        bad(&|c| c.url = url::Url::parse(&format!("http://u:{PASSWORD}@localhost/api")).unwrap());
    assert!(matches!(err, BackendError::Config(_)));
    assert!(!err.to_string().contains(PASSWORD));
    assert!(matches!(
        bad(&|c| c.url = url::Url::parse("ftp://x/").unwrap()),
        BackendError::Config(_)
    ));
    assert!(matches!(
        bad(&|c| c.ca_file = Some("/nonexistent/ca.pem".into())),
        BackendError::Config(_)
    ));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    assert!(matches!(
        bad(&|c| c.ca_file = Some(junk.clone())),
        BackendError::Config(_)
    ));
}

/// Collects everything a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Every log line (at TRACE) and every error of a session with logins, re-logins, wrong
/// credentials and failures: neither the password nor any session token shows.
#[tokio::test(flavor = "current_thread")]
async fn credentials_never_appear_in_logs_or_errors() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let sim = start_sim_with_auth().await;
    let adm = admin(&sim);
    let c = client(&sim);
    let mut texts = Vec::new();
    let mut tokens = Vec::new();
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    tokens.extend(adm.tokens().await.unwrap());
    adm.expire_tokens().await.unwrap();
    c.apply(&Chain::new(new_id()).into()).await.unwrap();
    tokens.extend(adm.tokens().await.unwrap());
    assert!(tokens.len() >= 2, "two sessions: {}", tokens.len());
    // Failures of every sort.
    adm.set_faults(Faults {
        fail_next: 100,
        ..Faults::default()
    })
    .await
    .unwrap();
    let short = BackendClient::new(
        config(&sim, Duration::from_millis(100)),
        &prometheus::Registry::new(),
    )
    .unwrap();
    texts.push(
        short
            .apply(&Chain::new(new_id()).into())
            .await
            .unwrap_err()
            .to_string(),
    );
    adm.clear_faults().await.unwrap();
    texts.push(
        c.apply(&Port::bridge_port(new_id(), new_id()).into())
            .await
            .unwrap_err()
            .to_string(),
    );
    let mut wrong = config(&sim, Duration::from_secs(1));
    wrong.password = Secret::new(format!("{PASSWORD}-but-wrong"));
    let wrong = BackendClient::new(wrong, &prometheus::Registry::new()).unwrap();
    let err = wrong.list_hosts().await.unwrap_err();
    texts.push(err.to_string());
    texts.push(format!("{err:?}"));
    texts.push(format!("{:?}", config(&sim, Duration::ZERO)));
    texts.push(format!("{c:?}"));
    texts.push(format!("{}", Secret::new(PASSWORD)));
    sim.shutdown().await;

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("logged in to the MidoNet API"),
        "the log capture works: {logs}"
    );
    texts.push(logs);
    for text in &texts {
        assert!(!text.contains(PASSWORD), "password leaked in: {text}");
        for token in &tokens {
            assert!(!text.contains(token.as_str()), "token leaked in: {text}");
        }
    }
}
