//! A version bump's tests: their cluster, its progress off the controllers' metrics
//! endpoint, and the versions the Translations carry.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ListParams};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::meta::VERSION_LABEL;

use super::child::ChildControllers;
use super::scenario::Scale;

/// A cluster small enough to bump in seconds, with pods on every node and Services
/// across namespaces.
pub const SCALE: Scale = Scale {
    nodes: 3,
    pods: 12,
    services: 4,
    endpoints_per_service: 2,
    namespaces: 2,
};

/// The controllers a bump involves.
pub const CONTROLLERS: &str = "node,pod,service,endpoints,pusher";

/// How long a bump (or the first convergence) may take.
pub const CONVERGE: Duration = Duration::from_secs(180);

/// The versions the cluster's Translations carry, with how many of each (`""` for none).
pub async fn versions(client: &kube::Client) -> BTreeMap<String, usize> {
    let all: Api<Translation> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for t in all.list(&ListParams::default()).await.unwrap().items {
        let v = t.label(VERSION_LABEL).unwrap_or_default().to_string();
        *out.entry(v).or_default() += 1;
    }
    out
}

/// Waits until every Translation is of `version`.
pub async fn wait_only_version(client: &kube::Client, version: &str) {
    super::wait_until(
        &format!("only version-{version} Translations"),
        CONVERGE,
        || async {
            let v = versions(client).await;
            (v.len() == 1 && v.contains_key(version)).then_some(())
        },
    )
    .await;
}

/// A series' value on the metrics endpoint at `port` (`series` is the name with its labels
/// and the space before the value), `None` while not exposed or unreachable.
pub async fn metric(port: u16, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The `rollout_phase` series of `phase` (1 while the bump is in it).
pub fn phase_series(phase: &str) -> String {
    format!("midonet_kube_controllers_rollout_phase{{phase=\"{phase}\"}} ")
}

/// Watches the controllers' phase metric at `port` until `stop`; answers when the cutover
/// was first and last seen.
pub async fn watch_cutover(
    port: u16,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Option<(std::time::Instant, std::time::Instant)> {
    let series = phase_series("cutting_over");
    let mut seen: Option<(std::time::Instant, std::time::Instant)> = None;
    while !*stop.borrow() {
        if metric(port, &series).await == Some(1.0) {
            let now = std::time::Instant::now();
            seen = Some(seen.map_or((now, now), |(first, _)| (first, now)));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen
}

/// Panics, listing the flows, unless no flow of `report` was interrupted longer than the
/// cutover (`window`, as the phase metric showed it: read every few ms, while the probe
/// samples every `sample`, so a flow may be seen down for up to a sample on either side),
/// nor longer than a second.
pub fn assert_within_cutover(
    report: &midonet_testkit::probe::ProbeReport,
    window: Duration,
    sample: Duration,
) {
    super::probe::assert_interrupted_at_most(
        report,
        window + 2 * sample + Duration::from_millis(100),
    );
    super::probe::assert_interrupted_at_most(report, Duration::from_secs(1));
}

/// Waits until the controllers' metrics at `port` show the bump in one of `phases`;
/// answers which, or `None` after `timeout`.
pub async fn wait_phase(port: u16, phases: &[&str], timeout: Duration) -> Option<String> {
    let series: Vec<(String, String)> = phases
        .iter()
        .map(|p| (p.to_string(), phase_series(p)))
        .collect();
    tokio::time::timeout(timeout, async {
        loop {
            for (phase, s) in &series {
                if metric(port, s).await == Some(1.0) {
                    return phase.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .ok()
}

/// The controllers binary as a child process at Translation `version`, logging to `log`,
/// without leader election: an apiserver outage past the renew deadline would make it give
/// up by design (`tests/chaos_kill.rs` covers that side).
pub fn spawn_at(api_url: &str, log: &std::path::Path, version: &str) -> ChildControllers {
    ChildControllers::spawn(
        &super::control_plane().kubeconfig,
        api_url,
        &[
            "--controllers",
            CONTROLLERS,
            "--leader-elect",
            "false",
            "--translation-version",
            version,
        ],
        log,
    )
}

/// A bump test's start: the scenario `name` at [`SCALE`] on a simulator with 40 ms per
/// request (slow requests stretch every phase over many polls of the phase metric),
/// converged at version 1 by a child controllers process, `check` passing, that process
/// killed. The next process is the test's: [`Self::spawn`].
pub struct AtVersion1 {
    pub client: kube::Client,
    pub sim: midonet_sim::SimHandle,
    pub admin: midonet_sim::admin::AdminClient,
    pub api_url: String,
    pub log: std::path::PathBuf,
}

impl AtVersion1 {
    pub async fn start(name: &str) -> AtVersion1 {
        use super::scenario::ScenarioApi;
        let client = super::admin_client().await;
        let scenario = super::scenario::Scenario::new(name, SCALE);
        let (sim, admin) = super::stack::start_sim_for(&scenario, 40).await;
        scenario.create(&client).await;
        let api_url = sim.api_url().to_string();
        let log = ChildControllers::log_path(&format!("bump-{name}"));
        let _ = std::fs::remove_file(&log);
        let v1 = spawn_at(&api_url, &log, "1");
        super::stack::wait_exact(&client, &admin, "version 1", CONVERGE).await;
        super::check::assert_check_passes(&api_url, "version 1").await;
        v1.sigkill();
        AtVersion1 {
            client,
            sim,
            admin,
            api_url,
            log,
        }
    }

    /// The controllers at `version`, logging where version 1's did.
    pub fn spawn(&self, version: &str) -> ChildControllers {
        spawn_at(&self.api_url, &self.log, version)
    }
}
