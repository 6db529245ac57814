//! The whole system on the real control plane with the simulator backend, run as the
//! least-privilege user of `deploy/`: Node → Pod → Service → Endpoints lifecycles, the
//! nodeannotator, deletion while the controllers are stopped, and a Translation version bump.
//! Every step ends with an exact comparison of the simulator's state against what the
//! Translations in the cluster ask for, and the main ones with `check`: every connection
//! Kubernetes promises works in the data-plane model of the simulator's state.

mod support;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use midonet_dataplane::FlowKind;
use midonet_kube_controllers::crd::Translation;
use midonet_translators::meta::VERSION_LABEL;
use midonet_translators::Kind;
use serde_json::json;
use support::check::assert_check_passes;
use support::objects::{endpoints, node_at, pod, service, set_pod_ip, wait_host_ids};
use support::stack::{dnat_targets, wait_converged, Controllers};
use support::*;
use uuid::Uuid;

#[tokio::test]
async fn whole_system_lifecycles_as_least_privilege_user() {
    let client = admin_client().await;
    rbac::bind_deploy_role_to_restricted_user(&client, "kube-system").await;
    let host_a = Uuid::new_v4();
    let host_b = Uuid::new_v4();
    let (sim, admin) = stack::start_sim(&[("e2e-node-a", host_a), ("e2e-node-b", host_b)]).await;
    let restricted = &control_plane().restricted_kubeconfig;
    let controllers = Controllers::start(
        restricted,
        &sim,
        &["--leader-elect", "true", "--lease-duration", "4s"],
    )
    .await;

    // Nodes: the nodeannotator resolves their hosts, then they are translated.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &node_at("e2e-node-a", "10.244.1.0/24", "192.168.0.11"),
        )
        .await
        .unwrap();
    nodes
        .create(
            &PostParams::default(),
            &node_at("e2e-node-b", "10.244.2.0/24", "192.168.0.12"),
        )
        .await
        .unwrap();
    wait_host_ids(&nodes, &[("e2e-node-a", host_a), ("e2e-node-b", host_b)]).await;

    let ns = unique_namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The endpoints below are these pods' addresses.
    for (name, node, ip, mac) in [
        ("p1", "e2e-node-a", "10.244.1.5", Some("0a:00:00:00:01:05")),
        ("p2", "e2e-node-b", "10.244.2.5", None),
        ("p3", "e2e-node-a", "10.244.1.6", None),
    ] {
        pods.create(&PostParams::default(), &pod(name, node, mac))
            .await
            .unwrap();
        set_pod_ip(&pods, name, ip).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &service("web"))
        .await
        .unwrap();
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    eps.create(&PostParams::default(), &endpoints("web", &["10.244.1.5"]))
        .await
        .unwrap();
    wait_converged(&client, &admin, "initial").await;
    let api = sim.api_url().to_string();
    let report = assert_check_passes(&api, "initial").await;
    for kind in [
        FlowKind::PodToPod,
        FlowKind::PodToService,
        FlowKind::Hairpin,
        FlowKind::NodeToPod,
        FlowKind::PodToNode,
    ] {
        assert!(
            report.by_kind.get(&kind).is_some_and(|t| t.checked > 0),
            "no {kind:?} flow checked: {:?}",
            report.by_kind
        );
    }

    // A Node whose host the backend does not know: a Warning event on the (cluster-scoped)
    // Node, and nothing translated for it.
    nodes
        .create(
            &PostParams::default(),
            &node_at("e2e-node-unknown", "10.244.9.0/24", "192.168.0.19"),
        )
        .await
        .unwrap();
    // Core events about cluster-scoped objects land in `default`.
    wait_event(
        &client,
        "default",
        Some("e2e-node-unknown"),
        "MidoNetHostNotFound",
    )
    .await;

    // Every kind produced something in the backend.
    let state = admin.state().await.unwrap();
    for kind in [
        Kind::TunnelZone,
        Kind::Router,
        Kind::Bridge,
        Kind::Port,
        Kind::Chain,
        Kind::Rule,
        Kind::HostInterfacePort,
    ] {
        assert!(state.count(kind) > 0, "no {kind:?} in the backend");
    }
    assert_eq!(dnat_targets(&admin, 8080).await, vec!["10.244.1.5"]);

    // Endpoints scale 1 → 3 → 0: the load-balanced DNAT rule's targets follow. A changed
    // endpoint set is a new generation (a new Translation); the old one is deleted only once
    // the new one is pushed, so the service port is never left without rules. The watch
    // sees the Translations' changes in the order the apiserver made them.
    let trs_here: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let old_generations: Vec<String> = trs_here
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|t| t.name_any())
        .filter(|n| n.starts_with("endpoints-port."))
        .collect();
    assert_eq!(old_generations.len(), 1, "{old_generations:?}");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, bool, bool)>::new()));
    let watching = tokio::spawn({
        let (api, seen) = (trs_here.clone(), seen.clone());
        async move {
            use futures::StreamExt;
            let mut events = std::pin::pin!(kube::runtime::watcher(
                api,
                kube::runtime::watcher::Config::default()
            ));
            while let Some(Ok(event)) = events.next().await {
                if let kube::runtime::watcher::Event::Apply(t)
                | kube::runtime::watcher::Event::InitApply(t) = event
                {
                    let deleting = t.metadata.deletion_timestamp.is_some();
                    seen.lock()
                        .unwrap()
                        .push((t.name_any(), t.is_ready(), deleting));
                }
            }
        }
    });
    // The watch's initial list shows the old generation before anything changes.
    wait_until("watch started", CEILING, || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    eps.replace("web", &PostParams::default(), &{
        let mut e = endpoints("web", &["10.244.1.5", "10.244.2.5", "10.244.1.6"]);
        e.metadata.resource_version = eps.get("web").await.unwrap().resource_version();
        e
    })
    .await
    .unwrap();
    wait_until("3 DNAT targets", CEILING, || async {
        (dnat_targets(&admin, 8080).await == vec!["10.244.1.5", "10.244.1.6", "10.244.2.5"])
            .then_some(())
    })
    .await;
    wait_converged(&client, &admin, "scaled to 3").await;
    assert_check_passes(&api, "scaled to 3").await;
    wait_until("old generation gone", CEILING, || async {
        trs_here
            .get_opt(&old_generations[0])
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    watching.abort();
    let seen = seen.lock().unwrap().clone();
    let old_deleted_at = seen
        .iter()
        .position(|(name, _, deleting)| *deleting && *name == old_generations[0])
        .expect("the old generation's deletion was watched");
    let new_ready_at = seen
        .iter()
        .position(|(name, ready, _)| {
            *ready && name.starts_with("endpoints-port.") && !old_generations.contains(name)
        })
        .expect("the new generation became Ready");
    assert!(
        new_ready_at < old_deleted_at,
        "the old generation was deleted before the new one was pushed: {seen:?}"
    );
    eps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"subsets": null})),
    )
    .await
    .unwrap();
    wait_until("no DNAT targets", CEILING, || async {
        dnat_targets(&admin, 8080).await.is_empty().then_some(())
    })
    .await;
    wait_converged(&client, &admin, "scaled to 0").await;
    let report = assert_check_passes(&api, "scaled to 0").await;
    assert!(
        report
            .by_kind
            .get(&FlowKind::NoEndpoints)
            .is_some_and(|t| t.checked > 0),
        "{:?}",
        report.by_kind
    );

    // Pod deleted: garbage collection removes its Translation, the pusher its port.
    let p2_port_count = admin.state().await.unwrap().count(Kind::Port);
    pods.delete("p2", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_until("p2's port deleted", CEILING, || async {
        (admin.state().await.ok()?.count(Kind::Port) < p2_port_count).then_some(())
    })
    .await;
    wait_converged(&client, &admin, "pod deleted").await;

    // Deleted while the controllers are stopped: cleaned after they start.
    controllers.stop().await;
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("p3", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let trs: Api<Translation> = Api::all(client.clone());
    wait_until("GC marks the Translations", CEILING, || async {
        let list = trs.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|t| t.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    let controllers = Controllers::start(restricted, &sim, &[]).await;
    wait_converged(&client, &admin, "after offline deletion").await;
    assert_check_passes(&api, "after offline deletion").await;
    // Something across nodes for the bump to rebuild: a pod on node b and a Service
    // balanced over both nodes.
    pods.create(&PostParams::default(), &pod("p4", "e2e-node-b", None))
        .await
        .unwrap();
    set_pod_ip(&pods, "p4", "10.244.2.6").await;
    services
        .create(&PostParams::default(), &service("web2"))
        .await
        .unwrap();
    eps.create(
        &PostParams::default(),
        &endpoints("web2", &["10.244.1.5", "10.244.2.6"]),
    )
    .await
    .unwrap();
    wait_converged(&client, &admin, "before the version bump").await;
    let before = assert_check_passes(&api, "before the version bump").await;
    let before_bump = admin.state().await.unwrap().translation_paths();
    controllers.stop().await;

    // Translation version bump: everything rebuilt under new IDs, nothing left behind.
    let controllers = Controllers::start(restricted, &sim, &["--translation-version", "3"]).await;
    wait_until("only version-3 Translations", CEILING, || async {
        let list = trs.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|t| t.label(VERSION_LABEL).is_none_or(|v| v == "3"))
            .then_some(())
    })
    .await;
    wait_converged(&client, &admin, "after the version bump").await;
    let after = assert_check_passes(&api, "after the version bump").await;
    assert_eq!(after.by_kind, before.by_kind);
    assert!(
        after
            .by_kind
            .get(&FlowKind::Hairpin)
            .is_some_and(|t| t.checked == 2),
        "{:?}",
        after.by_kind
    );
    let after_bump = admin.state().await.unwrap().translation_paths();
    let kept: Vec<_> = before_bump.intersection(&after_bump).collect();
    assert!(
        kept.iter().all(|p| p.contains("/mac_table/")
            || p.contains("/arp_table/")
            || p.contains("/tunnel_zones/")),
        "IDs survived the bump: {kept:?}"
    );
    controllers.stop().await;
    sim.shutdown().await;
}
