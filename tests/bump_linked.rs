//! A linked cutover (`--bump-cutover linked`) under traffic, on the real apiserver with the
//! simulator: pods on the two versions reach each other over the link between the
//! versions' cluster routers, so no flow is interrupted longer than one host's batch.
//!
//! Every backend request is slowed down (100 ms), so that each host's batch takes at least
//! two request rounds and the cutover spans many probe samples: a sample between two
//! hosts' batches sees the mixed state, some pods on the new topology and some on the old.
//! What Kubernetes promises is judged on it by the flow probe (every pod → Service and pod
//! → pod across nodes), not anything derived from the Translations.
//!
//! - 1 → 2 linked: no flow is down longer than the longest batch the controllers report
//!   (plus the probe's resolution); afterwards the link is gone with its Translation and the
//!   backend is exactly what version 2's Translations ask for, and `check` passes.
//! - 2 → 1 host by host without the link, under the same slowness: the same bound must
//!   fail. Without the link, a pod of the first host cut over is apart from one of the last
//!   for every batch in between: this is what the probe notices when the link is missing.

mod support;

use std::time::Duration;

use midonet_sim::admin::{AdminClient, Faults};
use midonet_sim::SimHandle;
use midonet_testkit::probe::ProbeReport;
use support::check::assert_check_passes;
use support::probe::EVERY_FLOW;
use support::rollout::{metric, wait_only_version, watch_cutover, CONTROLLERS, CONVERGE, SCALE};
use support::scenario::{Scenario, ScenarioApi};
use support::stack::{start_sim_for, wait_exact, Controllers};
use support::*;

/// How often the probe samples every flow.
const SAMPLE: Duration = Duration::from_millis(20);
/// The simulator's added latency per request.
const LATENCY_MS: u64 = 100;

const LONGEST_BATCH: &str = "midonet_kube_controllers_rollout_cutover_longest_batch_seconds ";

/// What one bump under the probe showed.
struct Bumped {
    report: ProbeReport,
    longest_batch: Duration,
    cutover: Duration,
}

impl Bumped {
    /// `Err` (saying which flow) if a flow was down longer than the longest batch, with a
    /// sample's slack on either side and 100 ms for the metric's and the probe's clocks.
    fn within_one_batch(&self) -> Result<(), String> {
        let bound = self.longest_batch + 2 * SAMPLE + Duration::from_millis(100);
        if self.report.max() <= bound {
            return Ok(());
        }
        let worst = self
            .report
            .interrupted_flows
            .iter()
            .max_by(|a, b| a.longest_seconds.total_cmp(&b.longest_seconds));
        Err(format!(
            "a flow was down {:.3} s, longer than one batch ({:?}, bound {bound:?}); \
             cutover {:?}; worst: {:?}",
            self.report.max().as_secs_f64(),
            self.longest_batch,
            self.cutover,
            worst.map(|f| (&f.flow, &f.reason))
        ))
    }
}

/// Starts the controllers at `version` with `order` under the flow probe, waits until only
/// `version` is left and the backend is exact; answers what the probe and the controllers
/// saw, and the running controllers.
async fn bump(sim: &SimHandle, admin: &AdminClient, version: &str, order: &str) -> Bumped {
    let client = admin_client().await;
    let kubeconfig = &control_plane().kubeconfig;
    let probe = support::probe::start(sim, EVERY_FLOW, SAMPLE).await;
    let args = [
        "--controllers",
        CONTROLLERS,
        "--translation-version",
        version,
        "--bump-cutover",
        order,
    ];
    let controllers = Controllers::start(kubeconfig, sim, &args).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(watch_cutover(controllers.metrics_port, stop_rx));
    wait_only_version(&client, version).await;
    let label = format!("version {version} ({order})");
    wait_exact(&client, admin, &label, CONVERGE).await;
    let _ = stop_tx.send(true);
    let (first, last) = watcher
        .await
        .expect("the cutover watcher")
        .expect("the controllers reported a cutover phase");
    let longest_batch = metric(controllers.metrics_port, LONGEST_BATCH)
        .await
        .expect("the controllers report their longest cutover batch");
    let report = probe.stop().await;
    controllers.stop().await;
    assert_check_passes(sim.api_url().as_str(), &label).await;
    let bumped = Bumped {
        report,
        longest_batch: Duration::from_secs_f64(longest_batch),
        cutover: last - first,
    };
    eprintln!(
        "{label}: cutover {:?}, longest batch {:?}, longest interruption {:.3} s ({})",
        bumped.cutover,
        bumped.longest_batch,
        bumped.report.max().as_secs_f64(),
        bumped.report.summary()
    );
    bumped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_cutover_interrupts_no_flow_longer_than_one_hosts_batch() {
    let client = admin_client().await;
    let scenario = Scenario::new("linked", SCALE);
    let (sim, admin) = start_sim_for(&scenario, 1).await;
    scenario.create(&client).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let v1 = Controllers::start(
        &kubeconfig,
        &sim,
        &["--controllers", CONTROLLERS, "--translation-version", "1"],
    )
    .await;
    wait_exact(&client, &admin, "version 1", CONVERGE).await;
    v1.stop().await;
    admin
        .set_faults(Faults {
            latency_ms: LATENCY_MS,
            ..Faults::default()
        })
        .await
        .expect("the simulator takes the latency");

    let linked = bump(&sim, &admin, "2", "linked").await;
    linked.within_one_batch().expect("a linked cutover");
    assert!(
        linked.longest_batch >= Duration::from_millis(2 * LATENCY_MS),
        "a batch is at least two request rounds: {:?}",
        linked.longest_batch
    );

    let unlinked = bump(&sim, &admin, "1", "host-by-host").await;
    let err = unlinked
        .within_one_batch()
        .expect_err("without the link, pods on two hosts are apart for several batches");
    eprintln!("without the link, as it must: {err}");
    admin.clear_faults().await.expect("faults cleared");
}
