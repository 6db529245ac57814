//! `plan` on the real apiserver with the simulator: the plan against what then happens.
//!
//! A small cluster converges at version 1. `plan` (the library function, and once the
//! binary) then says "nothing to do" and exits 0. Planned for version 2 it must count what
//! Kubernetes semantics say a bump does to this cluster (every object's Translations
//! replaced, every pod's and node's interface rebound), and its backend requests must be
//! the ones the simulator counts when the controllers do the bump: POSTs = creates, PUTs =
//! updates, DELETEs = the cutover's deletions of the old node bridges (which free the
//! interfaces) plus the old version's deletions that MidoNet's cascades do not do. A plan
//! that ignored the cascades is shown to miss. Then a bump to version 3 is stopped half
//! built, and the plan of the rest must again be what the controllers do.

mod support;

use std::time::Duration;

use clap::Parser;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use midonet_kube_controllers::config::RunArgs;
use midonet_kube_controllers::crd::Translation;
use midonet_kube_controllers::plancmd::{cli::compute, Reason};
use midonet_kube_controllers::pusher::steps::parse_lenient;
use midonet_translators::meta::VERSION_LABEL;
use support::scenario::{Scale, Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact, Controllers};
use support::*;

const SCALE: Scale = Scale {
    nodes: 2,
    pods: 4,
    services: 2,
    endpoints_per_service: 2,
    namespaces: 1,
};
const CONTROLLERS: &str = "node,pod,service,endpoints,pusher";
/// The hang guard of each convergence.
const CONVERGE: Duration = CEILING;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// The settings `run` would take, as `plan` takes them.
fn settings(kubeconfig: &str, api: &str, version: &str) -> Vec<String> {
    [
        "--kubeconfig",
        kubeconfig,
        "--midonet-api",
        api,
        "--controllers",
        CONTROLLERS,
        "--translation-version",
        version,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn config(args: &[String]) -> midonet_kube_controllers::config::Config {
    let argv = std::iter::once("plan".to_string()).chain(args.iter().cloned());
    Cli::try_parse_from(argv).unwrap().run.validate().unwrap()
}

/// Runs the binary's `plan`: (exit code, stdout).
fn plan_binary(args: &[String], extra: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_midonet-kube-controllers"))
        .arg("plan")
        .args(args)
        .args(extra)
        .output()
        .expect("run plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.trim().is_empty(), "plan wrote to stderr: {stderr}");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

async fn only_version(client: &kube::Client, version: &str) -> Option<()> {
    let all: Api<Translation> = Api::all(client.clone());
    let items = all.list(&ListParams::default()).await.ok()?.items;
    items
        .iter()
        .all(|t| t.label(VERSION_LABEL) == Some(version))
        .then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_of_a_bump_is_what_the_bump_does() {
    let client = admin_client().await;
    let scenario = Scenario::new("plan", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 0).await;
    scenario.create(&client).await;
    let kubeconfig = control_plane().kubeconfig.display().to_string();
    let api = sim.api_url().to_string();
    let v1 = settings(&kubeconfig, &api, "1");
    let v2 = settings(&kubeconfig, &api, "2");

    let ctl = Controllers::start(
        control_plane().kubeconfig.as_path(),
        &sim,
        &["--controllers", CONTROLLERS, "--translation-version", "1"],
    )
    .await;
    wait_exact(&client, &admin, "version 1", CONVERGE).await;
    ctl.stop().await;

    // Converged: nothing to do, and `plan` sends no backend request.
    admin.reset_requests().await.unwrap();
    let steady = compute(&config(&v1), 100.0).await.unwrap();
    assert!(steady.nothing_to_do(), "{}", steady.render_text());
    let (code, out) = plan_binary(&v1, &[]);
    assert_eq!((code, out.as_str()), (0, "nothing to do\n"));

    // Version 2: counted from the cluster's objects.
    let p = compute(&config(&v2), 100.0).await.unwrap();
    eprintln!("{}", p.render_text());
    assert_eq!(
        admin.requests().await.unwrap().total,
        0,
        "plan is read-only"
    );
    let (pods, nodes) = (SCALE.pods, SCALE.nodes);
    // The scenario's Services and the apiserver's own `default/kubernetes`.
    let services = Api::<k8s_openapi::api::core::v1::Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(services, SCALE.services + 1);
    let create = &p.translations.create;
    let only_bump = |kind: &str| {
        create
            .get(kind)
            .map(|m| m.keys().copied().collect::<Vec<_>>())
    };
    for kind in ["pod", "node", "service", "midonet-global"] {
        assert_eq!(only_bump(kind), Some(vec![Reason::VersionBump]), "{kind}");
    }
    assert_eq!(
        create["pod"][&Reason::VersionBump],
        pods,
        "a Translation per pod"
    );
    assert_eq!(
        create["node"][&Reason::VersionBump],
        nodes,
        "a Translation per node"
    );
    assert_eq!(
        create["service"][&Reason::VersionBump],
        services,
        "a Translation per Service"
    );
    let existing: usize = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    let (created, updated, deleted) = p.translation_totals();
    assert_eq!(p.translations.unchanged, 0, "a bump replaces everything");
    assert_eq!(created + updated, existing, "every Translation replaced");
    assert_eq!(deleted, existing - updated, "every old one deleted");
    assert_eq!(
        p.rebinds.by_kind.get("pod"),
        Some(&pods),
        "every pod rebound"
    );
    assert_eq!(
        p.rebinds.by_kind.get("node"),
        Some(&nodes),
        "every node rebound"
    );
    // Every pod's and node's old port is on its node's old bridge: the cutover frees the
    // interfaces with one DELETE per node (MidoNet takes the ports and bindings along).
    // It also deletes the new router's mirror routes of the link between the versions, at
    // least one per node, before the node's batch.
    let link = p.link.clone().expect("a linked cutover");
    assert!(link.mirrors_deleted >= nodes, "{link:?}");
    assert_eq!(p.backend.deletes_cutover, nodes + link.mirrors_deleted);
    let old_resources: usize = admin.state().await.unwrap().translation_paths().len();
    assert!(
        p.backend.deletes_retired < old_resources,
        "cascades counted"
    );

    let (code, out) = plan_binary(&v2, &["-o", "json"]);
    assert_eq!(code, 1, "something to do");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["backend"], serde_json::to_value(&p.backend).unwrap());

    // The bump itself, counted by the simulator.
    let done = run_counted(&client, &sim, &admin, "2").await;
    assert_eq!(planned(&p), done, "plan (POST, PUT, DELETE) vs the bump");
    // The oracle tells a plan without MidoNet's cascades from the right one: deleting every
    // old resource explicitly would have planned this many DELETEs.
    let naive = (p.backend.deletes_cutover + old_resources) as u64;
    assert_ne!(naive, done.2, "a plan ignoring cascades would match too");

    // In the middle of a bump: 2 → 3 stopped while version 3 builds (MidoNet slowed down so
    // that the build is caught half done, then taken away so that nothing moves while the
    // controllers stop). The plan is then the rest of the bump: what version 3 pushed
    // already is not planned again, and the rest is what the controllers do when started.
    let mut faults = admin.faults().await.unwrap();
    faults.latency_ms = 40;
    admin.set_faults(faults.clone()).await.unwrap();
    let ctl = Controllers::start(
        control_plane().kubeconfig.as_path(),
        &sim,
        &["--controllers", CONTROLLERS, "--translation-version", "3"],
    )
    .await;
    let (ready, total) = wait_until("version 3 half built", CONVERGE, || {
        half_built(&client, "3", existing)
    })
    .await;
    // Every request refused as if a referent were missing: a push stops at once and
    // records what it did (a 5xx would be retried for half a minute first).
    faults.error_rate = [("*".to_string(), 1.0)].into();
    faults.error_status = 400;
    admin.set_faults(faults).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ctl.stop().await;
    admin.clear_faults().await.unwrap();
    eprintln!("stopped with {ready} of {total} version-3 Translations Ready");
    let unrecorded = unrecorded_updatable(&client, &admin, "3").await;
    let partly: Vec<String> = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|t| {
            let pushed = t.status.as_ref().map_or(0, |s| s.pushed.len());
            pushed > 0 && pushed < t.desired_resources().len()
        })
        .map(|t| t.name_any())
        .collect();
    eprintln!("partly pushed: {partly:?}; unrecorded updatable resources: {unrecorded}");

    let v3 = settings(&kubeconfig, &api, "3");
    let mid = compute(&config(&v3), 100.0).await.unwrap();
    eprintln!("{}", mid.render_text());
    assert_eq!(
        mid.existing_versions.keys().collect::<Vec<_>>(),
        ["2", "3"],
        "both versions exist"
    );
    assert!(mid.translations.unchanged >= ready, "what is pushed stays");
    assert!(
        mid.backend.creates > 0 && mid.backend.creates < p.backend.creates,
        "part of version 3 is pushed: {} creates left of {}",
        mid.backend.creates,
        p.backend.creates
    );
    let done = run_counted(&client, &sim, &admin, "3").await;
    // A push the stop interrupted created resources its Translation's status does not
    // record: the plan (which reads only Kubernetes) counts them as creates, and the
    // controllers POST them again (409) and PUT the updatable ones: those PUTs on top.
    let (posts, puts, deletes) = planned(&mid);
    let planned = (posts, puts + unrecorded, deletes);
    assert_eq!(
        planned, done,
        "plan mid-bump (POST, PUT + {unrecorded} unrecorded, DELETE) vs the rest of the bump"
    );
    sim.shutdown().await;
}

/// Runs the controllers at `version` until only its Translations exist and the backend is
/// exactly what they say; answers the backend requests they sent: (POST, PUT, DELETE).
async fn run_counted(
    client: &kube::Client,
    sim: &midonet_sim::SimHandle,
    admin: &midonet_sim::admin::AdminClient,
    version: &str,
) -> (u64, u64, u64) {
    admin.reset_requests().await.unwrap();
    let ctl = Controllers::start(
        control_plane().kubeconfig.as_path(),
        sim,
        &[
            "--controllers",
            CONTROLLERS,
            "--translation-version",
            version,
        ],
    )
    .await;
    wait_until(
        &format!("only version-{version} Translations"),
        CONVERGE,
        || only_version(client, version),
    )
    .await;
    wait_exact(client, admin, &format!("version {version}"), CONVERGE).await;
    ctl.stop().await;
    let counted = admin.requests().await.unwrap();
    eprintln!("simulator: {counted:?}");
    (
        counted.of_method("POST"),
        counted.of_method("PUT"),
        counted.of_method("DELETE"),
    )
}

/// A plan's backend requests as the simulator counts them: (POST, PUT, DELETE).
fn planned(p: &midonet_kube_controllers::plancmd::Plan) -> (u64, u64, u64) {
    (
        p.backend.creates as u64,
        p.backend.updates as u64,
        p.backend.deletes as u64,
    )
}

/// The resources of `version`'s Translations that the backend holds but their status does
/// not record as pushed (a push interrupted before its status write), of updatable kinds.
async fn unrecorded_updatable(
    client: &kube::Client,
    admin: &midonet_sim::admin::AdminClient,
    version: &str,
) -> u64 {
    let stored = admin.state().await.unwrap().translation_paths();
    let all: Api<Translation> = Api::all(client.clone());
    let mut n = 0;
    for t in all.list(&ListParams::default()).await.unwrap().items {
        if t.label(VERSION_LABEL) != Some(version) {
            continue;
        }
        let recorded: Vec<&str> = t
            .status
            .as_ref()
            .map(|s| s.pushed.iter().map(|p| p.path.as_str()).collect())
            .unwrap_or_default();
        for d in parse_lenient(t.desired_resources()) {
            if d.resource.kind().updatable()
                && stored.contains(&d.path)
                && !recorded.contains(&d.path.as_str())
            {
                n += 1;
            }
        }
    }
    n
}

/// Some of `version`'s Translations are Ready and some not (of the `expected` it will have),
/// and no old one is being deleted yet: (Ready, existing) of that version.
async fn half_built(
    client: &kube::Client,
    version: &str,
    expected: usize,
) -> Option<(usize, usize)> {
    let all: Api<Translation> = Api::all(client.clone());
    let items = all.list(&ListParams::default()).await.ok()?.items;
    if items
        .iter()
        .any(|t| t.metadata.deletion_timestamp.is_some())
    {
        return None;
    }
    let of_version: Vec<&Translation> = items
        .iter()
        .filter(|t| t.label(VERSION_LABEL) == Some(version))
        .collect();
    let ready = of_version.iter().filter(|t| t.is_ready()).count();
    (ready * 4 >= expected && ready < expected).then_some((ready, of_version.len()))
}
