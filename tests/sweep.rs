//! The orphan sweep on the real apiserver with the simulator over HTTP: Translations pushed
//! by the pusher, strays made directly in the backend, a Translation whose finalizer was
//! force-removed; `find_orphans` reports exactly the strays and the abandoned resources,
//! the `sweep` subcommand prints them, `delete_orphans` removes them and nothing else, and
//! the periodic sweep of `run` deletes confirmed orphans.

mod support;

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use midonet_kube_controllers::crd::{Translation, TranslationSpec};
use midonet_kube_controllers::sweep::{delete_orphans, find_orphans, Orphan};
use midonet_translators::meta::FINALIZER;
use midonet_translators::model::{
    Bridge, Chain, IpAddrGroup, IpAddrGroupAddr, Kind, Port, PortGroup, PortGroupPort, Resource,
    Route, Router, Rule, RuleType,
};
use midonet_translators::policy::NODE_PORT_GROUP_NAME;
use serde_json::json;
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

const TENANT: &str = "midonetkube";

fn id() -> Uuid {
    Uuid::new_v4()
}

fn bridge(id: Uuid, tenant: &str) -> Resource {
    let mut b = Bridge::new(id);
    b.tenant_id = Some(tenant.into());
    b.into()
}

fn router(id: Uuid) -> Resource {
    let mut r = Router::new(id);
    r.tenant_id = Some(TENANT.into());
    r.into()
}

fn chain(id: Uuid, tenant: Option<&str>) -> Resource {
    let mut c = Chain::new(id);
    c.tenant_id = tenant.map(str::to_string);
    c.into()
}

fn rule(chain: Uuid, id: Uuid) -> Resource {
    Rule::new(chain, id, RuleType::Accept).into()
}

fn translation(name: &str, ns: &str, resources: &[Resource]) -> Translation {
    let mut tr = Translation::new(
        name,
        ns,
        TranslationSpec {
            resources: resources.iter().map(Resource::to_entry).collect(),
        },
    );
    tr.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    tr
}

fn ready(tr: &Translation) -> bool {
    tr.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }) && tr.status.as_ref().and_then(|s| s.observed_generation) == tr.metadata.generation
}

fn kind_paths(orphans: &[Orphan]) -> BTreeSet<(Kind, String)> {
    orphans.iter().map(|o| (o.kind, o.path.clone())).collect()
}

fn path(r: &Resource) -> (Kind, String) {
    (r.kind(), r.item_path())
}

#[tokio::test]
async fn orphan_sweep() {
    let client = admin_client().await;
    let (sim, admin) = stack::start_sim(&[]).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let ns = unique_namespace(&client, "sweep").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let backend = support::stack::backend_client(&sim);

    // Claimed: a chain with a rule, a bridge with two ports, a router with an addressed
    // port (MidoNet adds a Local route for it) and a route, and NetworkPolicy groups as the
    // translator names them: the node port group with a member port, an address group with
    // an address.
    let (c1, b1, r1, rp, bp1, bp2) = (id(), id(), id(), id(), id(), id());
    let (pg1, ag1) = (id(), id());
    let mut router_port = Port::router_port(r1, rp);
    router_port.port_subnet = Some(vec!["10.9.0.1/24".parse().unwrap()]);
    let kept = vec![
        chain(c1, Some(TENANT)),
        rule(c1, id()),
        bridge(b1, TENANT),
        Port::bridge_port(b1, bp1).into(),
        Port::bridge_port(b1, bp2).into(),
        router(r1),
        router_port.into(),
        Route::normal(r1, id(), "10.20.0.0/16".parse().unwrap(), rp).into(),
        PortGroup::new(pg1, NODE_PORT_GROUP_NAME).into(),
        PortGroupPort::new(pg1, bp1).into(),
        IpAddrGroup::new(ag1, "KUBE-NP-ADDRS-ns=shop;pods=app in (web)").into(),
        IpAddrGroupAddr::new(ag1, "10.1.0.1".parse().unwrap()).into(),
    ];
    // To be abandoned: its finalizer is force-removed and it is deleted.
    let (c2, b2, ag2) = (id(), id(), id());
    let abandoned = vec![
        chain(c2, Some(TENANT)),
        rule(c2, id()),
        bridge(b2, TENANT),
        Port::bridge_port(b2, id()).into(),
        IpAddrGroup::new(ag2, "KUBE-NP-ADDRS-ns=shop;pods={}").into(),
        IpAddrGroupAddr::new(ag2, "10.1.0.2".parse().unwrap()).into(),
    ];
    // Terminating (held by a second finalizer): still claimed.
    let b3 = id();
    let terminating = vec![bridge(b3, TENANT), Port::bridge_port(b3, id()).into()];

    let pusher = Controllers::start(&kubeconfig, &sim, &["--controllers", "pusher"]).await;
    for (name, resources) in [
        ("kept", &kept),
        ("abandoned", &abandoned),
        ("terminating", &terminating),
    ] {
        api.create(&PostParams::default(), &translation(name, &ns, resources))
            .await
            .unwrap();
    }
    for name in ["kept", "abandoned", "terminating"] {
        wait_until(&format!("{name} Ready"), CEILING, || async {
            ready(&api.get(name).await.ok()?).then_some(())
        })
        .await;
    }
    // Stop the pusher so that it neither re-adds the removed finalizer nor deletes the
    // Terminating Translation's resources.
    pusher.stop().await;

    let state = admin.state().await.unwrap();
    for r in kept.iter().chain(&abandoned).chain(&terminating) {
        assert!(
            state.contains(&r.item_path()),
            "{} not pushed",
            r.item_path()
        );
    }
    assert!(
        state
            .entries_of(Kind::Route)
            .iter()
            .any(|e| e.body.get("type").and_then(|t| t.as_str()) == Some("Local")),
        "the simulator made no Local route"
    );

    // Nothing is orphaned yet.
    let none = find_orphans(&client, &backend, TENANT).await.unwrap();
    assert!(none.is_empty(), "unexpected orphans: {none:?}");

    // Strays made directly in the backend.
    let stray_bridge = bridge(id(), TENANT);
    let stray_bridge_id = Uuid::parse_str(&stray_bridge.item_path()["/bridges/".len()..]).unwrap();
    let stray_bridge_port: Resource = Port::bridge_port(stray_bridge_id, id()).into();
    let stray_rule = rule(c1, id());
    let stray_port: Resource = Port::bridge_port(b1, id()).into();
    let stray_route: Resource = Route::normal(r1, id(), "10.30.0.0/16".parse().unwrap(), rp).into();
    let stray_chain = chain(id(), Some(TENANT));
    // A policy group left over, and members no Translation has in live groups.
    let stray_group: Resource = PortGroup::new(id(), "KUBE-NP-PORTS-ns=shop;pods={}").into();
    let stray_member: Resource = PortGroupPort::new(pg1, bp2).into();
    let stray_addr: Resource = IpAddrGroupAddr::new(ag1, "10.1.0.9".parse().unwrap()).into();
    // Not ours: other tenants, no tenant.
    let other_bridge = bridge(id(), "someone-else");
    let other_chain = chain(id(), None);
    let other_port: Resource = Port::bridge_port(
        Uuid::parse_str(&other_bridge.item_path()["/bridges/".len()..]).unwrap(),
        id(),
    )
    .into();
    // Not the policies': an operator's group, another tenant's.
    let other_group: Resource = PortGroup::new(id(), "admins").into();
    let mut other_tenant_group = PortGroup::new(id(), NODE_PORT_GROUP_NAME);
    other_tenant_group.tenant_id = Some("someone-else".into());
    let other_tenant_group: Resource = other_tenant_group.into();
    for r in [
        &stray_bridge,
        &stray_bridge_port,
        &stray_rule,
        &stray_port,
        &stray_route,
        &stray_chain,
        &other_bridge,
        &other_port,
        &other_chain,
        &stray_group,
        &stray_member,
        &stray_addr,
        &other_group,
        &other_tenant_group,
    ] {
        backend.apply(r).await.unwrap();
    }

    // Abandon one Translation: drop its finalizer, delete it.
    api.patch(
        "abandoned",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete("abandoned", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("abandoned gone", CEILING, || async {
        api.get_opt("abandoned").await.ok()?.is_none().then_some(())
    })
    .await;
    // Terminating but still held: its resources stay claimed.
    api.patch(
        "terminating",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER, "example.com/keep"]}})),
    )
    .await
    .unwrap();
    api.delete("terminating", &DeleteParams::default())
        .await
        .unwrap();
    assert!(api
        .get("terminating")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());

    // Exactly the strays and the abandoned parents (their children go with them).
    let expected: BTreeSet<(Kind, String)> = [
        &stray_bridge,
        &stray_rule,
        &stray_port,
        &stray_route,
        &stray_chain,
        &stray_group,
        &stray_member,
        &stray_addr,
        &abandoned[0],
        &abandoned[2],
        &abandoned[4],
    ]
    .into_iter()
    .map(path)
    .collect();
    let orphans = find_orphans(&client, &backend, TENANT).await.unwrap();
    assert_eq!(kind_paths(&orphans), expected, "{orphans:#?}");
    assert!(orphans.iter().all(|o| !o.description.is_empty()));

    // The subcommand prints the same, dry run: nothing is deleted.
    // Async: the simulator runs on this test's runtime.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_midonet-kube-controllers"))
        .args([
            "sweep",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--midonet-api",
            sim.api_url().as_str(),
        ])
        .output()
        .await
        .expect("run sweep");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: BTreeSet<String> = stdout
        .lines()
        .filter(|l| l.starts_with('/') || l.split(' ').nth(1).is_some_and(|p| p.starts_with('/')))
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = expected.iter().map(|(k, p)| format!("{k} {p}")).collect();
    assert_eq!(printed, want, "{stdout}");
    assert!(stdout.contains("11 orphan(s)"), "{stdout}");
    assert_eq!(
        find_orphans(&client, &backend, TENANT).await.unwrap().len(),
        11,
        "the dry run deleted something"
    );

    // Delete: the orphans and their children are gone; everything claimed and everything
    // of other tenants stays.
    let deleted = delete_orphans(&backend, &orphans).await.unwrap();
    assert_eq!(deleted, 11);
    let state = admin.state().await.unwrap();
    for r in expected.iter().map(|(_, p)| p).chain([
        &stray_bridge_port.item_path(),
        &abandoned[1].item_path(),
        &abandoned[3].item_path(),
        &abandoned[5].item_path(),
    ]) {
        assert!(!state.contains(r), "{r} still exists");
    }
    for r in kept.iter().chain(&terminating).chain([
        &other_bridge,
        &other_port,
        &other_chain,
        &other_group,
        &other_tenant_group,
    ]) {
        assert!(
            state.contains(&r.item_path()),
            "{} was deleted",
            r.item_path()
        );
    }
    assert!(find_orphans(&client, &backend, TENANT)
        .await
        .unwrap()
        .is_empty());
    // Deleting again is harmless (404 counts as deleted).
    assert_eq!(delete_orphans(&backend, &orphans).await.unwrap(), 11);

    // Let the Terminating Translation go (the pusher deletes its resources).
    api.patch(
        "terminating",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}})),
    )
    .await
    .unwrap();

    // The periodic sweep of `run`: a new stray is deleted once two sweeps found it, and
    // counted.
    let late_stray = bridge(id(), TENANT);
    backend.apply(&late_stray).await.unwrap();
    let sweeper = Controllers::start(
        &kubeconfig,
        &sim,
        &[
            "--controllers",
            "pusher",
            "--orphan-sweep-period",
            "1s",
            "--orphan-sweep-delete",
        ],
    )
    .await;
    wait_until("late stray swept", CEILING, || async {
        (!admin.state().await.ok()?.contains(&late_stray.item_path())).then_some(())
    })
    .await;
    let metrics = sweeper.metrics().await;
    let deleted_bridges: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("midonet_kube_controllers_orphans_deleted_total{kind=\"Bridge\"} ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no deleted_total for Bridge in\n{metrics}"));
    assert!(deleted_bridges >= 1, "{metrics}");
    assert!(
        metrics.contains("midonet_kube_controllers_orphans_found{kind=\"Rule\"} 0"),
        "{metrics}"
    );
    wait_until("terminating gone", CEILING, || async {
        api.get_opt("terminating")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    sweeper.stop().await;
    let state = admin.state().await.unwrap();
    support::stack::assert_present(&state, &kept);
    for r in &terminating {
        assert!(
            !state.contains(&r.item_path()),
            "{} still exists",
            r.item_path()
        );
    }
}
