//! NetworkPolicy truth tables on the real parts: the control plane, the controllers and the
//! simulator. The cluster of the upstream e2e suite (namespaces x, y, z; pods a, b, c;
//! ports 80 and 81 over TCP and UDP) is created in the apiserver; each case applies its
//! policies, waits for the backend to converge, reads the simulator's whole state into the
//! data-plane model and compares the full reachability matrix with the table written by hand
//! from the specification (`dataplane/tests/common/netpol_cases.rs`). Label changes of a pod
//! and of a namespace are followed the same way, and the time each change takes to show in
//! the backend is reported. Policies with the same selectors share their address groups: one
//! group Translation each, kept while either policy exists and pruned with the last one.

mod support;

#[path = "../dataplane/tests/common/netpol_cases.rs"]
mod cases;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use midonet_dataplane::{Cluster, RuleOrder, Topology};
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::AdminClient;
use midonet_translators::meta::HOST_ID_ANNOTATION;
use midonet_translators::model::Kind;
use midonet_translators::policy::GROUP_LABEL;
use serde_json::json;
use support::stack::{wait_converged, Controllers};
use support::*;
use uuid::Uuid;

use cases::*;

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    run: midonet_kube_controllers::config::RunArgs,
}

/// Deletes, behind the controllers' back, the one rule accepting a peer group's sources.
async fn delete_peer_accept(admin: &AdminClient, api: &str) {
    use clap::Parser;
    let kubeconfig = control_plane().kubeconfig.display().to_string();
    let cfg = Cli::try_parse_from(["test", "--kubeconfig", &kubeconfig, "--midonet-api", api])
        .expect("args")
        .run
        .validate()
        .expect("config");
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .unwrap();
    let state = admin.state().await.unwrap();
    let accepts: Vec<String> = state
        .entries_of(Kind::Rule)
        .into_iter()
        .filter(|e| {
            e.body.get("type").and_then(|t| t.as_str()) == Some("accept")
                && e.body.get("ipAddrGroupSrc").is_some()
        })
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(accepts.len(), 1, "{accepts:?}");
    backend.delete_path(Kind::Rule, &accepts[0]).await.unwrap();
}

/// The matrix the backend implements now.
async fn backend_matrix(client: &Client, admin: &AdminClient) -> BTreeMap<Cell, bool> {
    let state = admin.state().await.expect("state");
    let resources = state.typed_resources().expect("typed state");
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut pods = Vec::new();
    for ns in NAMESPACES.into_iter().chain(["kube-system"]) {
        pods.extend(
            Api::<Pod>::namespaced(client.clone(), ns)
                .list(&Default::default())
                .await
                .unwrap()
                .items,
        );
    }
    let cluster = Cluster {
        nodes,
        pods,
        ..Cluster::default()
    };
    assert!(cluster.network_policies.is_empty());
    let topo = Topology::new(resources, RuleOrder::Listed, cluster.attachments());
    assert!(topo.problems().is_empty(), "{:?}", topo.problems());
    matrix(&topo)
}

/// Waits until the backend has converged and implements `expect`; panics with the cells
/// that differ after `deadline`. Answers how long it took.
async fn wait_table(
    client: &Client,
    admin: &AdminClient,
    name: &str,
    expect: Expect,
    deadline: Duration,
) -> Duration {
    let start = Instant::now();
    let want = expected(expect);
    loop {
        wait_converged(client, admin, name).await;
        let got = backend_matrix(client, admin).await;
        let diff = differences(&want, &got);
        if diff.is_empty() {
            return start.elapsed();
        }
        if start.elapsed() > deadline {
            panic!(
                "{name}: the matrix differs from the table:\n{}",
                diff.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn apply(client: &Client, np: &NetworkPolicy) {
    let ns = np.namespace().unwrap();
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), np)
        .await
        .unwrap();
}

async fn remove(client: &Client, np: &NetworkPolicy) {
    let ns = np.namespace().unwrap();
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .delete(&np.name_any(), &DeleteParams::default())
        .await
        .unwrap();
}

async fn label_pod(client: &Client, p: P, label: &str) {
    Api::<Pod>::namespaced(client.clone(), p.ns)
        .patch(
            p.pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pod": label}}})),
        )
        .await
        .unwrap();
}

async fn label_namespace(client: &Client, ns: &str, label: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"ns": label}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn network_policies_keep_their_truth_tables() {
    let client = admin_client().await;
    let hosts = [
        ("n1", Uuid::parse_str(&host_id("n1")).unwrap()),
        ("n2", Uuid::parse_str(&host_id("n2")).unwrap()),
    ];
    let (sim, admin) = stack::start_sim(&hosts).await;
    // Drift repair must not undo the break below before the matrix shows it.
    let controllers = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--verify-period", "1h"],
    )
    .await;

    let nodes: Api<Node> = Api::all(client.clone());
    for (name, host) in hosts {
        let mut n = node(name);
        // The node annotator sets the host id from the simulator's host list.
        n.metadata.annotations = n.metadata.annotations.map(|mut a| {
            a.remove(HOST_ID_ANNOTATION);
            a
        });
        n.status = n.status.clone();
        nodes.create(&PostParams::default(), &n).await.unwrap();
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": n.status})),
            )
            .await
            .unwrap();
        wait_until("nodeannotator sets the host id", CEILING, || async {
            let n = nodes.get(name).await.ok()?;
            (n.annotations().get(HOST_ID_ANNOTATION) == Some(&host.to_string())).then_some(())
        })
        .await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in cases::namespaces()
        .into_iter()
        .filter(|n| n.metadata.name.as_deref() != Some("kube-system"))
    {
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    for p in servers() {
        let full = pod(p, &labels_of(p));
        let api: Api<Pod> = Api::namespaced(client.clone(), p.ns);
        let mut created = full.clone();
        created.status = None;
        api.create(&PostParams::default(), &created).await.unwrap();
        // As a kubelet would.
        api.patch_status(
            p.pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": full.status})),
        )
        .await
        .unwrap();
    }
    // Each server's Service and its Endpoints, as the endpoints controller would write them.
    for p in servers() {
        Api::<Service>::namespaced(client.clone(), p.ns)
            .create(&PostParams::default(), &service(p))
            .await
            .unwrap();
        Api::<Endpoints>::namespaced(client.clone(), p.ns)
            .create(&PostParams::default(), &endpoints(p))
            .await
            .unwrap();
    }
    let deadline = CEILING;
    wait_table(&client, &admin, "no policy", |_, _, _, _| true, deadline).await;

    for case in static_cases() {
        for np in &case.policies {
            apply(&client, np).await;
        }
        let took = wait_table(&client, &admin, case.name, case.expect, deadline).await;
        eprintln!("{}: table holds after {took:?}", case.name);
        if case.name == "allow from a pod in a namespace" {
            // The oracle can fail: without the peer's accept rule exactly y/b -> x/a flips,
            // directly and through x/a's Service.
            delete_peer_accept(&admin, sim.api_url().as_str()).await;
            let got = backend_matrix(&client, &admin).await;
            let mut diff = differences(&expected(case.expect), &got);
            diff.sort();
            let mut want: Vec<String> = PROBES
                .iter()
                .flat_map(|(port, proto)| {
                    ["x/a", "svc/x/a"].map(|to| {
                        format!("y/b -> {to} {port}/{proto:?}: expected allowed, got denied")
                    })
                })
                .collect();
            want.sort();
            assert_eq!(diff, want);
        }
        for np in &case.policies {
            remove(&client, np).await;
        }
        wait_table(
            &client,
            &admin,
            &format!("{} removed", case.name),
            |_, _, _, _| true,
            deadline,
        )
        .await;
    }

    // A pod's labels change under a policy.
    let np = from_any_b();
    apply(&client, &np).await;
    wait_table(&client, &admin, "from any b", expect_any_b, deadline).await;
    label_pod(&client, P { ns: "z", pod: "c" }, "b").await;
    let took = wait_table(
        &client,
        &admin,
        "z/c relabelled",
        expect_any_b_relabelled,
        deadline,
    )
    .await;
    eprintln!("a pod's label change shows after {took:?}");
    label_pod(&client, P { ns: "z", pod: "c" }, "c").await;
    wait_table(&client, &admin, "z/c back", expect_any_b, deadline).await;
    remove(&client, &np).await;

    // A namespace's labels change under a policy.
    let np = from_ns_y();
    apply(&client, &np).await;
    wait_table(&client, &admin, "from ns y", expect_ns_y, deadline).await;
    label_namespace(&client, "z", "y").await;
    let took = wait_table(
        &client,
        &admin,
        "z labelled ns=y",
        expect_ns_y_and_z,
        deadline,
    )
    .await;
    eprintln!("a namespace's label change shows after {took:?}");
    label_namespace(&client, "z", "z").await;
    wait_table(&client, &admin, "z back", expect_ns_y, deadline).await;
    remove(&client, &np).await;
    wait_table(&client, &admin, "all removed", |_, _, _, _| true, deadline).await;
    wait_groups(&client, &admin, "all removed", &BTreeSet::new()).await;

    shared_groups(
        &client,
        &admin,
        sim.api_url().as_str(),
        controllers.metrics_port,
        deadline,
    )
    .await;

    controllers.stop().await;
}

/// The `networkpolicy` controller's group passes so far, off its metrics.
async fn group_passes(port: u16) -> f64 {
    support::objects::metric(
        port,
        "midonet_kube_controllers_translator_reconciles_total",
        "kind=\"networkpolicy-groups\"",
    )
    .await
}

/// The group Translations, by (namespace, name).
async fn group_translations(client: &Client) -> BTreeSet<(String, String)> {
    Api::<Translation>::all(client.clone())
        .list(&ListParams::default().labels(GROUP_LABEL))
        .await
        .unwrap()
        .items
        .iter()
        .map(|t| (t.namespace().unwrap_or_default(), t.name_any()))
        .collect()
}

/// Names of the backend's address and port groups that NetworkPolicies select (not the
/// global group of the nodes' ports).
async fn backend_groups(admin: &AdminClient) -> BTreeSet<String> {
    let state = admin.state().await.unwrap();
    [Kind::IpAddrGroup, Kind::PortGroup]
        .into_iter()
        .flat_map(|k| state.entries_of(k))
        .filter_map(|e| e.body.get("name").and_then(|n| n.as_str()))
        .filter(|n| *n != midonet_translators::policy::NODE_PORT_GROUP_NAME)
        .map(str::to_string)
        .collect()
}

/// Waits until the group Translations are `want` (and converged), the backend holding one
/// group per Translation; panics with what is there after a minute.
async fn wait_groups(
    client: &Client,
    admin: &AdminClient,
    what: &str,
    want: &BTreeSet<(String, String)>,
) {
    let start = Instant::now();
    loop {
        wait_converged(client, admin, what).await;
        let have = group_translations(client).await;
        let backend = backend_groups(admin).await;
        if have == *want && backend.len() == want.len() {
            return;
        }
        if start.elapsed() > CEILING {
            panic!(
                "{what}: group Translations {have:?} (want {want:?}); backend groups {backend:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Two policies with the same selectors (written differently) share their groups; the
/// groups outlive the first policy's deletion and go with the last one.
async fn shared_groups(
    client: &Client,
    admin: &AdminClient,
    api: &str,
    metrics: u16,
    deadline: Duration,
) {
    let one = from_any_b();
    // The same selection: `In` expressions for matchLabels, `{}` for every namespace.
    let two = policy(
        "x",
        "from-any-b-again",
        json!({"podSelector": {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["a"]}]},
               "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                                          {"key": "pod", "operator": "In", "values": ["b"]}]},
                                      "namespaceSelector": {}}]}]}),
    );
    apply(client, &one).await;
    wait_table(client, admin, "one policy", expect_any_b, deadline).await;
    let groups = group_translations(client).await;
    // The pods it selects (in x) and its peers (from every namespace: kube-system).
    let namespaces: Vec<&str> = groups.iter().map(|(ns, _)| ns.as_str()).collect();
    assert_eq!(namespaces, ["kube-system", "x"], "{groups:?}");
    wait_groups(client, admin, "one policy", &groups).await;

    apply(client, &two).await;
    wait_table(client, admin, "two policies", expect_any_b, deadline).await;
    wait_groups(client, admin, "two policies share the groups", &groups).await;

    remove(client, &one).await;
    let still = wait_table(
        client,
        admin,
        "first policy deleted",
        expect_any_b,
        deadline,
    )
    .await;
    eprintln!("the remaining policy filters {still:?} after the first one's deletion");
    // Pruning, were it wrong, would have its chance: the deleted policy's Translation is gone.
    wait_until(
        "the deleted policy's Translation is gone",
        CEILING,
        || async {
            let trs = Api::<Translation>::namespaced(client.clone(), "x")
                .list(&ListParams::default())
                .await
                .ok()?;
            let prefix = "networkpolicy.";
            let left: Vec<String> = trs
                .items
                .iter()
                .map(|t| t.name_any())
                .filter(|n| n.starts_with(prefix))
                .collect();
            (left.len() == 1).then_some(())
        },
    )
    .await;
    // ... and a group pass has run since (one runs every resync at the latest): what it
    // keeps, it keeps on purpose.
    let passes_before = group_passes(metrics).await;
    wait_until("a group pass after the deletion", CEILING, || async {
        let now = group_passes(metrics).await;
        if now > passes_before {
            Ok(())
        } else {
            Err(format!("group passes still {now}"))
        }
    })
    .await;
    wait_groups(client, admin, "first policy deleted", &groups).await;
    wait_table(
        client,
        admin,
        "first policy deleted",
        expect_any_b,
        deadline,
    )
    .await;
    support::check::assert_check_passes(api, "first policy deleted").await;

    remove(client, &two).await;
    wait_table(client, admin, "both deleted", |_, _, _, _| true, deadline).await;
    wait_groups(client, admin, "both deleted", &BTreeSet::new()).await;
    support::check::assert_check_passes(api, "both deleted").await;
}
