//! The global Translations (tunnel zone, cluster router, chains) heal themselves: deleted
//! or edited by hand, they are restored within seconds, and what MidoNet's cascade took from
//! other Translations with their backend resources (the Services' jumps in KUBE-SERVICES,
//! the node bridges' inbound filter) is re-created. Its own test binary: every pusher in a
//! test process watches all namespaces.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::AdminClient;
use midonet_translators::{Kind, Resource, TranslatorConfig};
use serde_json::json;
use support::objects::{metric, node_at, pod, wait_host_ids};
use support::stack::{wait_exact, Controllers};
use support::*;
use uuid::Uuid;

const NODES: [(&str, &str, &str); 2] = [
    ("globals-node-a", "10.245.1.0/24", "192.168.7.11"),
    ("globals-node-b", "10.245.2.0/24", "192.168.7.12"),
];

/// Backend references that MidoNet clears rather than deletes with their referent (a
/// device's or port's filter chains), compared with what the Translations ask for. The exact
/// state comparison looks at paths only: a bridge without its inbound filter has its path.
async fn filter_mismatches(client: &Client, admin: &AdminClient) -> Vec<String> {
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list Translations");
    let state = admin.state().await.expect("simulator state");
    let mut out = Vec::new();
    for tr in trs
        .items
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
    {
        for entry in tr.desired_resources() {
            let Ok(resource) = Resource::from_entry(entry) else {
                continue;
            };
            if !matches!(resource.kind(), Kind::Bridge | Kind::Router | Kind::Port) {
                continue;
            }
            let path = resource.item_path();
            let want = resource.body();
            let have = state.get(&path).map(|e| &e.body);
            for field in ["inboundFilterId", "outboundFilterId"] {
                let wanted = want.get(field);
                let actual = have.and_then(|b| b.get(field));
                if wanted.is_some() && wanted != actual {
                    out.push(format!("{path} {field}: want {wanted:?}, have {actual:?}"));
                }
            }
        }
    }
    out
}

/// The exact state, and the filter references the exact state does not compare.
async fn wait_healed(client: &Client, admin: &AdminClient, what: &str) {
    wait_exact(client, admin, what, CEILING).await;
    let start = Instant::now();
    loop {
        let wrong = filter_mismatches(client, admin).await;
        if wrong.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < CEILING,
            "{what}: filters not restored: {wrong:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The jump rules in KUBE-SERVICES, in the simulator.
async fn service_jumps(admin: &AdminClient) -> usize {
    let chain = midonet_translators::global::services_chain_id(&TranslatorConfig::default());
    admin.state().await.expect("state").rules_of(chain).len()
}

async fn create_cluster(client: &Client, hosts: &[Uuid]) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, cidr, ip) in NODES {
        nodes
            .create(&PostParams::default(), &node_at(name, cidr, ip))
            .await
            .unwrap();
    }
    let named: Vec<(&str, Uuid)> = NODES
        .iter()
        .zip(hosts)
        .map(|((name, _, _), host)| (*name, *host))
        .collect();
    wait_host_ids(&nodes, &named).await;
    let ns = unique_namespace(client, "globals").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (i, (node, _, _)) in NODES.iter().enumerate() {
        pods.create(
            &PostParams::default(),
            &pod(&format!("web-{i}"), node, None),
        )
        .await
        .unwrap();
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    for name in ["web", "api"] {
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": "ClusterIP", "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}
            ]}
        }))
        .unwrap();
        services.create(&PostParams::default(), &svc).await.unwrap();
        let ep: Endpoints = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": name},
            "subsets": [{
                "addresses": [{"ip": "10.245.1.5"}, {"ip": "10.245.2.5"}],
                "ports": [
                    {"name": "http", "port": 8080, "protocol": "TCP"},
                    {"name": "dns", "port": 5353, "protocol": "UDP"}
                ]
            }]
        }))
        .unwrap();
        endpoints.create(&PostParams::default(), &ep).await.unwrap();
    }
    ns
}

/// Waits until `name` is a new incarnation (not `old_uid`) that is Ready; returns how long
/// that took from `since`.
async fn wait_restored(
    api: &Api<Translation>,
    name: &str,
    old_uid: &str,
    since: Instant,
) -> Duration {
    wait_until(&format!("{name} restored and pushed"), CEILING, || async {
        let tr = api.get_opt(name).await.ok()??;
        (tr.uid().as_deref() != Some(old_uid) && tr.is_ready()).then_some(())
    })
    .await;
    since.elapsed()
}

#[tokio::test]
async fn deleted_or_edited_global_translations_are_restored_with_what_hung_off_them() {
    let client = admin_client().await;
    rbac::bind_deploy_role_to_restricted_user(&client, "kube-system").await;
    let hosts = [Uuid::new_v4(), Uuid::new_v4()];
    let (sim, admin) = stack::start_sim(&[(NODES[0].0, hosts[0]), (NODES[1].0, hosts[1])]).await;
    // Periodic drift verification is far away: only the globals' controller and the
    // pusher's cascade repair can heal in time.
    let controllers = Controllers::start(
        &control_plane().restricted_kubeconfig,
        &sim,
        &["--verify-period", "1h", "--resync-period", "10m"],
    )
    .await;
    create_cluster(&client, &hosts).await;
    wait_healed(&client, &admin, "initial").await;
    // Two Services with two ports each, plus the default `kubernetes` Service if any.
    let jumps = service_jumps(&admin).await;
    assert!(jumps >= 4, "{jumps} jumps in KUBE-SERVICES");

    let globals = midonet_translators::global(&TranslatorConfig::default());
    let api: Api<Translation> = Api::namespaced(client.clone(), "kube-system");
    // What MidoNet's cascade takes from the other Translations with each global one, as the
    // pusher's cascade repair counts it: (kind, at least).
    let nodes = NODES.len() as f64;
    let expected_repairs = |name: &str| -> Vec<(&'static str, f64)> {
        if name.ends_with(".tunnel-zone") {
            vec![("TunnelZoneHost", nodes)]
        } else if name.ends_with(".network-policy") {
            // Every pod port's filters (one pod per node) name the NetworkPolicy chains.
            vec![("Port", nodes)]
        } else if name.ends_with(".cluster-router") {
            // The node's router port, its link and its route.
            vec![("Port", nodes), ("PortLink", nodes), ("Route", nodes)]
        } else {
            // The Services' jumps, and the node bridges' cleared inbound filter.
            vec![("Rule", jumps as f64), ("Bridge", nodes)]
        }
    };
    let repaired = |kind: &'static str| {
        metric(
            controllers.metrics_port,
            "midonet_kube_controllers_cascade_repaired_resources_total",
            format!("kind=\"{kind}\""),
        )
    };
    for global in &globals {
        let name = global.name.as_str();
        let mut before = Vec::new();
        for (kind, _) in expected_repairs(name) {
            before.push(repaired(kind).await);
        }
        let old = api.get(name).await.unwrap();
        let old_uid = old.uid().unwrap();
        let since = Instant::now();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        let took = wait_restored(&api, name, &old_uid, since).await;
        eprintln!("{name}: deleted, restored and pushed in {took:?}");
        wait_healed(&client, &admin, &format!("after deleting {name}")).await;
        assert_eq!(service_jumps(&admin).await, jumps, "after deleting {name}");
        for ((kind, at_least), before) in expected_repairs(name).into_iter().zip(before) {
            let n = repaired(kind).await - before;
            assert!(n >= at_least, "after deleting {name}: {n} {kind} repaired");
        }
        assert!(
            took < Duration::from_secs(20),
            "{name} took {took:?} to come back"
        );
    }
    wait_event(
        &client,
        "kube-system",
        Some(&globals[0].name),
        "GlobalTranslationRestored",
    )
    .await;

    // Edited: its spec is put back at once. The chains lose KUBE-SERVICES meanwhile if the
    // pusher saw the edit, and with it every Service's jump.
    let chains = globals
        .iter()
        .find(|g| g.name.ends_with(".chains"))
        .expect("a chains Translation");
    // KUBE-SERVICES and KUBE-MAIN's jump to it.
    let services_chain =
        midonet_translators::global::services_chain_id(&TranslatorConfig::default());
    let without_services: Vec<_> = chains
        .resources
        .iter()
        .filter(|r| !r.body.contains(&services_chain.to_string()))
        .cloned()
        .collect();
    assert_eq!(without_services.len(), chains.resources.len() - 2);
    let edit = || async {
        let before = api.get(&chains.name).await.unwrap();
        api.patch(
            &chains.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": without_services}})),
        )
        .await
        .unwrap();
        before.metadata.generation
    };
    let put_back = |after: Option<i64>| {
        let api = api.clone();
        async move {
            wait_until("the chains' spec put back", CEILING, || async {
                let tr = api.get(&chains.name).await.ok()?;
                let restored = tr.desired_resources() == chains.resources.as_slice()
                    && tr.metadata.generation > after;
                restored.then_some(())
            })
            .await
        }
    };
    let generation = edit().await;
    put_back(generation).await;
    wait_healed(&client, &admin, "after editing the chains").await;
    assert_eq!(service_jumps(&admin).await, jumps, "after the edit");

    // Restorations are counted by cause.
    let restored = |cause: &'static str| {
        metric(
            controllers.metrics_port,
            "midonet_kube_controllers_global_translations_restored_total",
            format!("cause=\"{cause}\""),
        )
    };
    assert_eq!(restored("deleted").await, globals.len() as f64);
    assert_eq!(restored("edited").await, 1.0);
    controllers.stop().await;

    // An edit the pusher pushes before it is put back (the translators run apart and are
    // down): KUBE-SERVICES is deleted, and MidoNet's cascade takes every Service's jump.
    // Once the translators put the spec back, the jumps are re-created too.
    let restricted = &control_plane().restricted_kubeconfig;
    let pusher = Controllers::start(
        restricted,
        &sim,
        &["--controllers", "pusher", "--verify-period", "1h"],
    )
    .await;
    wait_healed(&client, &admin, "pusher alone").await;
    let generation = edit().await;
    wait_until("KUBE-SERVICES deleted by the pusher", CEILING, || async {
        let state = admin.state().await.ok()?;
        (!state.contains(&format!("/chains/{services_chain}"))).then_some(())
    })
    .await;
    let translators = Controllers::start(
        restricted,
        &sim,
        &["--controllers", "node,pod,service,endpoints"],
    )
    .await;
    put_back(generation).await;
    wait_healed(&client, &admin, "after an edit the pusher pushed").await;
    assert_eq!(service_jumps(&admin).await, jumps, "after the pushed edit");

    translators.stop().await;
    pusher.stop().await;

    // A filter cleared while no pusher saw why (out of band here, or by a cascade while
    // the controllers restarted): drift verification puts it back.
    let controllers = Controllers::start(restricted, &sim, &["--verify-period", "2s"]).await;
    let node_trs = Api::<Translation>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut bridge = node_trs
        .items
        .iter()
        .filter(|t| t.name_any().starts_with("node."))
        .flat_map(|t| t.desired_resources().to_vec())
        .find_map(|e| match Resource::from_entry(&e) {
            Ok(Resource::Bridge(b)) if b.inbound_filter_id.is_some() => Some(b),
            _ => None,
        })
        .expect("a node bridge with an inbound filter");
    bridge.inbound_filter_id = None;
    let backend = BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            ..Default::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap();
    backend.apply(&Resource::Bridge(bridge)).await.unwrap();
    assert_eq!(filter_mismatches(&client, &admin).await.len(), 1);
    wait_healed(&client, &admin, "after a filter cleared out of band").await;

    // The careless `kubectl delete tr --all`: every Translation is deleted and restored by
    // its owner's controller or the globals' one.
    let out = kubectl(&["delete", "tr", "--all", "--all-namespaces", "--wait=false"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_healed(&client, &admin, "after kubectl delete tr --all").await;
    assert_eq!(
        service_jumps(&admin).await,
        jumps,
        "after deleting everything"
    );

    controllers.stop().await;
    sim.shutdown().await;
}
