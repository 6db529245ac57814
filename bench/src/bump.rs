//! The Translation version bump under the flow probe: the controllers restarted with
//! `--translation-version 2` on the converged cluster (NetworkPolicies included), timed
//! until no version-1 Translation is left and the backend is exactly version 2's. Meanwhile
//! the flow probe (`midonet_testkit::probe`) judges a fixed sample of flows on the
//! simulator's live store, from [`PROBE_LEAD`] before the controllers start, at a raised
//! priority by default (`crate::priority`: it stands for midolman on hosts of their own),
//! and reports each flow's interruptions. The backend requests are set against the bump's floor
//! ([`bump_floor`]). With the edge, the new version builds a second edge beside the first
//! and the uplinks' bindings are handed over as the pods' are; `check` after the bump
//! (outside flows included) shows the new version serves what the old one did. `plan`,
//! computed just before the bump with the same settings, is set against what it did.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use midonet_kube_controllers::netcheck::cli::{load_cluster, Checked};
use midonet_kube_controllers::plancmd::Plan;
use midonet_sim::admin::{RequestCounts, StateDump};
use midonet_testkit::probe::{self, ProbeReport, SampleSize};
use midonet_translators::Resource;
use serde_json::{json, Value};

use crate::converge::wait_converged;
use crate::initial;
use crate::report::{row, secs, Row};
use crate::tracker::{ReadyTracker, Want};
use crate::{Bench, Res};

/// The version the bump goes to from the current one (`TRANSLATION_VERSION`, which it must
/// differ from).
const BUMP_VERSION: &str = "3";
/// The probe's sample period. Below the 100 ms target, so that the samples longer than the
/// period (the probe starts the next one at once) leave the mean period within it.
const PROBE_PERIOD: Duration = Duration::from_millis(80);
/// How long the probe samples before the bump starts: flows already down then are told
/// apart (`downAtStart`).
const PROBE_LEAD: Duration = Duration::from_secs(1);
/// Interrupted flows listed in the JSON, longest first.
const PROBE_LISTED: usize = 20;

/// The fewest backend requests a version bump can make: every resource of the new version
/// created once (as many as the old version has), and of the old version one DELETE for
/// each resource MidoNet's cascades do not take with another (`Resource::deleted_with`).
pub fn bump_floor(old: &StateDump) -> Res<usize> {
    let paths = old.translation_paths();
    let resources: Vec<Resource> = old
        .typed_resources()?
        .into_iter()
        .filter(|r| paths.contains(&r.item_path()))
        .collect();
    let ids: HashSet<uuid::Uuid> = resources.iter().filter_map(Resource::own_id).collect();
    let roots = resources
        .iter()
        .filter(|r| {
            !r.deleted_with()
                .iter()
                .any(|id| ids.contains(id) && r.own_id() != Some(*id))
        })
        .count();
    Ok(resources.len() + roots)
}

/// The bump, measured.
pub struct Bump {
    pub time: Duration,
    pub backend_requests: u64,
    pub floor_requests: usize,
    pub breakdown: RequestCounts,
    pub probe: ProbeReport,
    /// How long the probe sampled before the controllers started.
    pub probe_lead: Duration,
    /// The probe thread's priority (`crate::priority`).
    pub priority: crate::priority::Priority,
    pub sample: SampleSize,
    /// `check` on the converged new version (with the edge, its outside flows too).
    pub checked: Checked,
    /// What `plan` said the bump would do, read just before it.
    pub plan: Plan,
}

/// `plan` for the bump, in-process (what the `plan` subcommand computes), with the
/// settings the bump runs with.
async fn plan(bench: &Bench) -> Res<Plan> {
    let cfg = initial::run_config(bench, &["--translation-version", BUMP_VERSION])?;
    Ok(midonet_kube_controllers::plancmd::cli::compute(&cfg, 100.0).await?)
}

/// The probe's sample size from the command line.
fn sample_size(bench: &Bench) -> SampleSize {
    SampleSize {
        services_per_source: bench.args.probe_services_per_source,
        peers_per_source: bench.args.probe_peers_per_source,
    }
}

/// Runs the bump on the converged cluster of `translations` Translations (no controllers
/// running).
pub async fn run(bench: &Bench, tracker: &ReadyTracker, translations: usize) -> Res<Bump> {
    eprintln!("bench: translation version bump");
    let admin = &bench.admin;
    let floor_requests = bump_floor(&admin.state().await?)?;
    let plan = plan(bench).await?;
    let cluster = load_cluster(&bench.client).await?;
    let sample = sample_size(bench);
    let flows = probe::select_flows(&cluster, sample);
    let reader = bench.sim.reader();
    let probe_started = Instant::now();
    let priority = std::sync::Arc::new(std::sync::Mutex::new(None));
    let source: probe::ResourceSource = {
        let mut cursor = midonet_sim::ReadCursor::default();
        Box::new(move || reader.changes(&mut cursor))
    };
    let flow_probe = probe::FlowProbe::start(
        flows,
        cluster.attachments(),
        crate::priority::at_probe_priority(source, bench.args.probe_nice, priority.clone()),
        PROBE_PERIOD,
    );
    tokio::time::sleep(PROBE_LEAD).await;
    admin.reset_requests().await?;
    let since = Instant::now();
    let probe_lead = since - probe_started;
    // Drift verification's GETs are periodic, whatever the bump does: left out here.
    let args = [
        "--translation-version",
        BUMP_VERSION,
        "--verify-period",
        "0",
    ];
    let ctl = bench.spawn_controllers(&args)?;
    let want = Want {
        count: translations,
        stale_version: Some(midonet_translators::TRANSLATION_VERSION),
        ..Want::default()
    };
    let time = wait_converged(tracker, admin, &want, since, "version bump").await?;
    let probe = flow_probe.stop().await?;
    let priority = priority
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .unwrap_or_default();
    eprintln!(
        "bench: version bump probe (nice {}{}): {}",
        priority.nice,
        priority
            .refused
            .as_deref()
            .map(|w| format!(", raising refused: {w}"))
            .unwrap_or_default(),
        probe.summary()
    );
    let (backend_requests, _, _) = bench.backend_counts().await?;
    let breakdown = admin.requests().await?;
    ctl.stop(&bench.client).await?;
    eprintln!("bench: check after the bump");
    let checked = initial::check(bench).await?;
    initial::report_failures(&checked);
    Ok(Bump {
        checked,
        plan,
        time,
        backend_requests,
        floor_requests,
        breakdown,
        probe,
        probe_lead,
        priority,
        sample,
    })
}

impl Bump {
    pub fn rows(&self) -> Vec<Row> {
        let (p, floor) = (&self.probe, self.floor_requests);
        vec![
            row("version bump: convergence", secs(self.time), "-"),
            row(
                "version bump: backend requests / floor",
                format!(
                    "{} / {floor} = {:.2}",
                    self.backend_requests,
                    self.backend_requests as f64 / floor.max(1) as f64
                ),
                "<= 1.05",
            ),
            row(
                "version bump: flows probed / sample period",
                format!(
                    "{} / {:.0} ms (max {:.0} ms)",
                    p.flows,
                    p.mean_period_seconds * 1000.0,
                    p.max_period_seconds * 1000.0
                ),
                "<= 100 ms",
            ),
            row(
                "version bump: probe sample time (median / max)",
                format!(
                    "{:.0} ms / {:.0} ms",
                    p.sample_time.median_seconds * 1000.0,
                    p.sample_time.max_seconds * 1000.0
                ),
                "<= 100 ms",
            ),
            row(
                "version bump: probe flows judged per sample that judged",
                format!(
                    "{:.1} of {} ({} samples)",
                    p.judged_flows as f64 / p.judging_samples.max(1) as f64,
                    p.flows,
                    p.judging_samples
                ),
                "-",
            ),
            row(
                "version bump: flows interrupted (max / p99)",
                format!(
                    "{} ({:.2} s / {:.2} s)",
                    p.interrupted, p.max_seconds, p.p99_seconds
                ),
                "max <= 1 s",
            ),
            row(
                "version bump: longest outage at most (last seen ok to ok again)",
                format!("{:.2} s", p.max_bound_seconds),
                "<= 1 s",
            ),
            row(
                "version bump: longest outages began (first / last)",
                self.outages_began(),
                "-",
            ),
            row(
                "version bump: POST/PUT/DELETE planned, done",
                self.planned_and_done(),
                "equal",
            ),
            row(
                "version bump: interfaces rebound (planned)",
                self.rebinds(),
                "-",
            ),
            row(
                "check after the bump (as the check above)",
                initial::check_value(&self.checked),
                "0 failed",
            ),
        ]
    }

    /// When the interrupted flows' longest outages began, first and last, after the
    /// controllers started (the probe's lead taken off; negative: before they started).
    fn outages_began(&self) -> String {
        let p = &self.probe;
        if p.interrupted == 0 {
            return "no flow interrupted".into();
        }
        let lead = self.probe_lead.as_secs_f64();
        format!(
            "{:.2} s / {:.2} s after the controllers started",
            p.longest_started_first_seconds - lead,
            p.longest_started_last_seconds - lead
        )
    }

    /// `plan`'s requests and the bump's, by method.
    fn planned_and_done(&self) -> String {
        let (p, b) = (&self.plan.backend, &self.breakdown);
        format!(
            "{}/{}/{}, {}/{}/{}",
            p.creates,
            p.updates,
            p.deletes,
            b.of_method("POST"),
            b.of_method("PUT"),
            b.of_method("DELETE")
        )
    }

    /// The interfaces `plan` says the bump binds to new ports, by the kind of Translation
    /// (the edge's uplinks are `midonet-global`'s).
    fn rebinds(&self) -> String {
        let r = &self.plan.rebinds;
        let by_kind: Vec<String> = r.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!("{} ({})", r.total, by_kind.join(", "))
    }

    pub fn json(&self) -> Res<Value> {
        let mut probe = serde_json::to_value(&self.probe)?;
        probe["sample"] = serde_json::to_value(self.sample)?;
        probe["priority"] = serde_json::to_value(&self.priority)?;
        if let Some(flows) = probe
            .get_mut("interruptedFlows")
            .and_then(|v| v.as_array_mut())
        {
            flows.truncate(PROBE_LISTED);
        }
        let b = &self.breakdown;
        Ok(json!({"versionBump": {
            "seconds": self.time.as_secs_f64(), "requests": self.backend_requests,
            "floorRequests": self.floor_requests,
            "probeLeadSeconds": self.probe_lead.as_secs_f64(),
            "byMethod": b.by_method, "byStatus": b.by_status, "byKind": b.by_kind,
            "probe": probe,
            "plan": {"backend": self.plan.backend, "rebinds": self.plan.rebinds},
            "check": {"flows": self.checked.report.flows_checked,
                      "failed": self.checked.report.failures.len(),
                      "byKind": self.checked.report.by_kind},
        }}))
    }
}
