//! A Translation version bump under traffic, on the real apiserver with the simulator.
//!
//! What Kubernetes promises is that pods keep reaching each other and their Services; a
//! bump that rebuilds the backend must keep that promise but for the moment each pod's
//! binding moves to its new port. The flow probe (`tests/support/probe.rs`) samples every
//! pod → Service and pod → pod (across nodes) flow on the simulator's live data plane
//! while the bump runs; the cutover window is read off the controllers' own
//! `rollout_phase` metric. Afterwards the backend holds exactly what the new Translations
//! ask for (`exact_state`: nothing of the old version leaked, nothing twice) and `check`
//! passes.
//!
//! - `a_bump_interrupts_no_flow_longer_than_its_cutover`: 1 → 2; then a bump to 3 given
//!   up while it builds (the controllers stopped and started again at 2), which must cost
//!   no flow anything; then a rollback to 1, held to the same bound as the bump.
//!
//! `tests/bump_kill.rs` SIGKILLs the controllers in every phase of a bump (a test binary of
//! its own: the controllers of two tests would both act on one cluster).

mod support;

use std::time::Duration;

use kube::api::{Api, ListParams};
use midonet_dataplane::Report;
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::{AdminClient, Faults};
use midonet_sim::SimHandle;
use midonet_translators::meta::VERSION_LABEL;
use support::check::assert_check_passes;
use support::probe::{assert_interrupted_at_most, EVERY_FLOW};
use support::rollout::{
    assert_within_cutover, metric, phase_series, versions, wait_only_version, watch_cutover,
    CONTROLLERS, CONVERGE, SCALE,
};
use support::scenario::{Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact, Controllers};
use support::*;

/// How often the probe samples every flow.
const SAMPLE: Duration = Duration::from_millis(20);

/// Starts the controllers at `version` (the previous ones stopped) under the flow probe,
/// waits until only `version` is left and the backend is exact, and requires every flow to
/// be interrupted no longer than the cutover the controllers reported. Returns the running
/// controllers and the end state's `check` report.
async fn bump_under_probe(
    sim: &SimHandle,
    admin: &AdminClient,
    args: &[&str],
    version: &str,
) -> (Controllers, Report) {
    let client = admin_client().await;
    let kubeconfig = &control_plane().kubeconfig;
    let probe = support::probe::start(sim, EVERY_FLOW, SAMPLE).await;
    let controllers = Controllers::start(kubeconfig, sim, args).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(watch_cutover(controllers.metrics_port, stop_rx));
    wait_only_version(&client, version).await;
    let label = format!("version {version}");
    wait_exact(&client, admin, &label, CONVERGE).await;
    let _ = stop_tx.send(true);
    let cutover = watcher.await.unwrap();
    let report = probe.stop().await;
    let (first, last) = cutover.expect("the controllers reported a cutover phase");
    let window = last - first;
    eprintln!("{label}: cutover seen for {window:?}");
    assert_within_cutover(&report, window, SAMPLE);
    let checked = assert_check_passes(sim.api_url().as_str(), &label).await;
    (controllers, checked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bump_interrupts_no_flow_longer_than_its_cutover() {
    let client = admin_client().await;
    let scenario = Scenario::new("bump", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 1).await;
    scenario.create(&client).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let api = sim.api_url().to_string();
    let args = |v: &'static str| ["--controllers", CONTROLLERS, "--translation-version", v];

    let v1 = Controllers::start(&kubeconfig, &sim, &args("1")).await;
    wait_exact(&client, &admin, "version 1", CONVERGE).await;
    let before = assert_check_passes(&api, "version 1").await;
    v1.stop().await;

    // 1 → 2 under the probe.
    let (v2, after) = bump_under_probe(&sim, &admin, &args("2"), "2").await;
    assert_eq!(after.by_kind, before.by_kind, "the same flows, checked");
    assert!(
        metric(
            v2.metrics_port,
            "midonet_kube_controllers_rollout_bindings_cut_over_total "
        )
        .await
        .is_some_and(|n| n >= (SCALE.pods + SCALE.nodes) as f64),
        "every pod's and node's binding moved"
    );
    v2.stop().await;

    // A bump to 3 given up while it builds: back to 2, no flow affected, 3 gone.
    let probe = support::probe::start(&sim, EVERY_FLOW, SAMPLE).await;
    // Every other create refused: the build goes on, retrying, long enough to be caught.
    admin
        .set_faults(Faults {
            latency_ms: 40,
            error_rate: [("POST".to_string(), 0.5)].into(),
            ..Faults::default()
        })
        .await
        .unwrap();
    let v3 = Controllers::start(&kubeconfig, &sim, &args("3")).await;
    // The first Translation of version 3 pushed but for its binding (read off the
    // apiserver every 10 ms, while each backend request takes 40).
    let v3s: Api<Translation> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{VERSION_LABEL}=3"));
    tokio::time::timeout(CONVERGE, async {
        loop {
            let items = v3s.list(&lp).await.map(|l| l.items).unwrap_or_default();
            let awaiting = items.iter().any(|t| {
                t.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.reason == "AwaitingCutover")
                })
            });
            if awaiting {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a version-3 Translation awaits the cutover");
    // Part of it pushed: hold the rest back (every create refused) so that the bump
    // cannot reach its cutover, and give it up there.
    admin
        .set_faults(Faults {
            latency_ms: 40,
            error_rate: [("POST".to_string(), 1.0)].into(),
            ..Faults::default()
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let building = metric(v3.metrics_port, &phase_series("building")).await;
    v3.stop().await;
    assert_eq!(building, Some(1.0), "version 3 stopped while building");
    admin.clear_faults().await.unwrap();
    assert!(
        versions(&client).await.contains_key("3"),
        "version 3 was being built"
    );
    let back = Controllers::start(&kubeconfig, &sim, &args("2")).await;
    wait_only_version(&client, "2").await;
    wait_exact(&client, &admin, "back at version 2", CONVERGE).await;
    let report = probe.stop().await;
    assert_interrupted_at_most(&report, Duration::ZERO);
    assert_check_passes(&api, "back at version 2").await;
    back.stop().await;

    // A rollback of a completed bump, 2 → 1: version 1's names and IDs, deleted when 2
    // took over, are built again beside 2 and take the bindings back.
    let (v1_again, rolled_back) = bump_under_probe(&sim, &admin, &args("1"), "1").await;
    assert_eq!(
        rolled_back.by_kind, before.by_kind,
        "the same flows, checked"
    );
    v1_again.stop().await;
    sim.shutdown().await;
}
