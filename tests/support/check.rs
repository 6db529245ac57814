//! `check` against the simulator, as the `check` subcommand runs it: Kubernetes LISTs
//! with the admin kubeconfig, GETs against the simulator's MidoNet API, the data-plane
//! model over both. Every end-to-end test ends with [`assert_check_passes`].

use clap::Parser;
use midonet_dataplane::Report;
use midonet_kube_controllers::config::{Config, RunArgs};
use midonet_kube_controllers::netcheck::cli::{check_system, load, Live};

use super::control_plane;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// The settings `trace` and `check` take for the simulator at `api` (its MidoNet API
/// URL) and this test binary's control plane, as cluster admin.
pub fn config(api: &str) -> Config {
    config_with(api, &[])
}

/// [`config`] with more settings (`--username`, `--password` of a backend that checks them).
pub fn config_with(api: &str, extra: &[&str]) -> Config {
    let kubeconfig = control_plane().kubeconfig.display().to_string();
    let args = ["test", "--kubeconfig", &kubeconfig, "--midonet-api", api];
    Cli::try_parse_from(args.iter().chain(extra))
        .expect("args")
        .run
        .validate()
        .expect("config")
}

/// What `trace` and `check` run on: the cluster and the simulator's topology.
pub async fn live(api: &str) -> Live {
    live_with(api, &[]).await
}

/// [`live`] with more settings (`--edge-config`), as [`config_with`].
pub async fn live_with(api: &str, extra: &[&str]) -> Live {
    let cfg = config_with(api, extra);
    let kube = midonet_kube_controllers::clients::kube_client(&cfg)
        .await
        .expect("kube client");
    let backend =
        midonet_kube_controllers::clients::backend_client(&cfg, &prometheus::Registry::new())
            .expect("backend client");
    load(&kube, &backend, &cfg.tenant, cfg.edge.clone())
        .await
        .expect("read the cluster and the simulator")
}

/// Runs `check` over the cluster and the simulator at `api`.
pub async fn check(api: &str) -> Report {
    check_with(api, &[]).await
}

/// [`check`] with more settings, as [`config_with`].
pub async fn check_with(api: &str, extra: &[&str]) -> Report {
    check_system(&config_with(api, extra), &mut |_, _| {})
        .await
        .expect("check")
        .report
}

/// The failures of a report, one a line, with the trace of each.
pub fn describe(r: &Report) -> String {
    r.failures
        .iter()
        .map(|f| {
            format!(
                "{} {} -> {} {}: {}\n  expected {:?}, reached {:?}\n{}",
                f.kind.name(),
                f.from,
                f.to,
                f.protocol,
                f.problem,
                f.expected,
                f.reached,
                serde_json::to_string(&f.trace).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `check` and panics, printing every failure, unless every promised connection
/// works and the topology reads without problems. `what` names the moment in the test.
/// Answers the report, for assertions on what was checked.
pub async fn assert_check_passes(api: &str, what: &str) -> Report {
    assert_check_passes_with(api, &[], what).await
}

/// [`assert_check_passes`] with more settings, as [`config_with`].
pub async fn assert_check_passes_with(api: &str, extra: &[&str], what: &str) -> Report {
    let r = check_with(api, extra).await;
    assert!(
        r.topology_problems.is_empty(),
        "{what}: topology problems: {:?}",
        r.topology_problems
    );
    assert!(
        r.passed(),
        "{what}: check found {} failing flow(s) of {}:\n{}",
        r.failures.len(),
        r.flows_checked,
        describe(&r)
    );
    assert!(r.flows_checked > 0, "{what}: check found no flow to check");
    eprintln!(
        "{what}: check passed: {} flow(s) {:?}; unplugged {:?}; unverifiable endpoints {:?}",
        r.flows_checked, r.by_kind, r.unplugged, r.unverifiable_endpoints
    );
    r
}
