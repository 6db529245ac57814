//! The initial sync: the controllers started on a cluster whose objects exist and whose
//! backend is empty, timed until converged (`converge.rs`), with what it cost the
//! apiserver, the controllers and the backend; then, with the controllers stopped, what
//! the converged state holds (the caches' content, the Translations' bytes in etcd), the
//! `check` of every promised flow, and what each kind of request costs the apiserver
//! (`costs.rs`). [`Initial`] turns it all into the table's rows and the JSON.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Service;
use midonet_dataplane::FlowKind;
use midonet_kube_controllers::config::Config;
use midonet_kube_controllers::netcheck::cli::Checked;
use midonet_translators::DesiredTranslation;
use serde_json::{json, Value};

use crate::apirequests::{self, Counts};
use crate::controllers::Controllers;
use crate::controlplane::{apiserver_and_bench_cpu, apiserver_cpu, cpu_time};
use crate::converge::{wait_converged, wait_converged_unwatched, UnwatchedSync};
use crate::costs::{self, RequestCosts};
use crate::edge::{load_balancers_addressed, Share};
use crate::etcd::{self, Stored};
use crate::floor::{Floors, Owned};
use crate::memory::{self, CacheContent};
use crate::objects::COST_NS;
use crate::profile::ApiserverProfile;
use crate::report::{merge, ms, row, secs, Row};
use crate::tracker::{ReadyTracker, Timeline, Want};
use crate::{Bench, Res, SETTLE};

/// Requests of each kind sent one at a time to measure what each costs the apiserver.
const COST_SAMPLES: usize = 1000;

/// What the controllers report once the sync converged.
pub struct ControllersAfter {
    pub cpu: Duration,
    pub peak_rss_kib: u64,
    pub rss_kib: u64,
    pub events_dropped: f64,
    /// The pusher's reconciles by result.
    pub pusher_reconciles: BTreeMap<String, f64>,
}

impl ControllersAfter {
    async fn read(ctl: &Controllers) -> Res<ControllersAfter> {
        Ok(ControllersAfter {
            cpu: cpu_time(ctl.pid()?)?,
            peak_rss_kib: ctl.peak_rss_kib()?,
            rss_kib: ctl.rss_kib()?,
            events_dropped: ctl
                .metric("midonet_kube_controllers_events_dropped_total", "")
                .await?,
            pusher_reconciles: ctl
                .metric_by_label("midonet_kube_controllers_pusher_reconciles_total", "result")
                .await?,
        })
    }
}

/// The initial sync, measured.
pub struct Sync {
    pub time: Duration,
    pub timeline: Timeline,
    /// With `--unwatched-sync`: how the sync was timed without the watch.
    pub unwatched: Option<UnwatchedSync>,
    /// The bench's Translation watch, kept for the later phases (none with
    /// `--unwatched-sync`).
    pub tracker: Option<ReadyTracker>,
    /// Backend resources the Translations ask for, and the backend requests of the sync
    /// (logins excluded), also by MidoNet kind and method.
    pub resources: usize,
    pub backend_requests: u64,
    pub backend_by_kind: BTreeMap<String, BTreeMap<String, u64>>,
    /// The LoadBalancer Services once converged, and how many of them hold an address.
    pub load_balancers: (usize, usize),
    /// The apiserver's and the bench's CPU time over the sync.
    pub apiserver_cpu: Duration,
    pub bench_cpu: Duration,
    /// The requests the apiserver served during the sync.
    pub apiserver_requests: Counts,
    pub controllers: ControllersAfter,
}

/// Starts the controllers on the converged objects and an empty backend; returns the
/// sync, measured, with the controllers stopped. Converged: at least `want.count`
/// Translations asking for at least `want.paths` backend resources, all Ready, the
/// backend exactly theirs.
pub async fn sync(bench: &Bench, want: &Want<'_>) -> Res<Sync> {
    eprintln!("bench: initial convergence");
    let client = &bench.client;
    let tracker = (!bench.args.unwatched_sync).then(|| ReadyTracker::start(client));
    if let Some(tracker) = &tracker {
        tracker.listed().await;
    }
    let requests0 = apirequests::read(client).await?;
    let (cpu0, bench_cpu0) = apiserver_and_bench_cpu()?;
    let profile = bench.profile("sync");
    let since = Instant::now();
    let ctl = bench.spawn_controllers(&[])?;
    let (time, timeline, unwatched) =
        timed_sync(bench, &ctl, tracker.as_ref(), want, since, profile).await?;
    let resources = bench.admin.state().await?.translation_paths().len();
    let (backend_requests, _, _) = bench.backend_counts().await?;
    let backend_by_kind = bench.admin.requests().await?.by_kind;
    let services = kube::Api::<Service>::all(client.clone());
    let listed = services.list(&Default::default()).await?;
    let load_balancers = load_balancers_addressed(&listed.items);
    let (cpu1, bench_cpu1) = match &unwatched {
        Some(u) => (u.apiserver_cpu, u.bench_cpu),
        None => apiserver_and_bench_cpu()?,
    };
    let apiserver_requests = apirequests::growth(&requests0, &apirequests::read(client).await?);
    let controllers = ControllersAfter::read(&ctl).await?;
    ctl.stop(&bench.client).await?;
    Ok(Sync {
        time,
        timeline,
        unwatched,
        tracker,
        resources,
        backend_requests,
        backend_by_kind,
        load_balancers,
        apiserver_cpu: cpu1 - cpu0,
        bench_cpu: bench_cpu1 - bench_cpu0,
        apiserver_requests,
        controllers,
    })
}

/// The sync's duration and timeline: by the watch if there is one, else unwatched.
async fn timed_sync(
    bench: &Bench,
    ctl: &Controllers,
    tracker: Option<&ReadyTracker>,
    want: &Want<'_>,
    since: Instant,
    profile: Option<ApiserverProfile>,
) -> Res<(Duration, Timeline, Option<UnwatchedSync>)> {
    let admin = &bench.admin;
    match tracker {
        Some(tracker) => {
            let time = wait_converged(tracker, admin, want, since, "initial sync").await?;
            if let Some(profile) = profile {
                profile.finish().await?;
            }
            Ok((time, tracker.timeline(since), None))
        }
        None => {
            let client = &bench.client;
            let u = wait_converged_unwatched(client, admin, ctl, want, since, profile).await?;
            Ok((u.done_by, Timeline::default(), Some(u)))
        }
    }
}

#[derive(Parser)]
struct CheckCli {
    #[command(flatten)]
    run: midonet_kube_controllers::config::RunArgs,
}

/// The settings `run` would take on the bench's cluster and simulator (with its edge),
/// with `extra` arguments: what `check` and `plan` read.
pub fn run_config(bench: &Bench, extra: &[&str]) -> Res<Config> {
    let kubeconfig = bench.kubeconfig.display().to_string();
    let mut args = vec![
        "check".to_string(),
        "--kubeconfig".into(),
        kubeconfig,
        "--midonet-api".into(),
        bench.api_url.clone(),
    ];
    args.extend(bench.edge.iter().flat_map(|e| e.check_args()));
    args.extend(extra.iter().map(|a| a.to_string()));
    Ok(CheckCli::try_parse_from(args)?.run.validate()?)
}

/// `check` over the cluster and the simulator, in-process: what the `check` subcommand
/// runs; with the edge's settings, the outside flows too.
pub async fn check(bench: &Bench) -> Res<Checked> {
    let cfg = run_config(bench, &[])?;
    Ok(midonet_kube_controllers::netcheck::cli::check_system(&cfg, &mut |_, _| {}).await?)
}

/// Says on stderr how many flows `check` found failing, and the first.
pub fn report_failures(checked: &Checked) {
    if let Some(f) = checked.report.failures.first() {
        eprintln!(
            "bench: check found {} failing flow(s), e.g. {:?}",
            checked.report.failures.len(),
            (&f.from, &f.to, &f.problem)
        );
    }
}

/// The `check` row's value: flows (failed), of them from and to the outside; evaluation
/// and read times.
pub fn check_value(checked: &Checked) -> String {
    let report = &checked.report;
    let outside: usize = [FlowKind::OutsideToService, FlowKind::PodToOutside]
        .iter()
        .filter_map(|k| report.by_kind.get(k))
        .map(|t| t.checked)
        .sum();
    format!(
        "{} ({}), outside {} / {} / {}",
        report.flows_checked,
        report.failures.len(),
        outside,
        secs(checked.evaluated),
        secs(checked.read)
    )
}

/// What the converged state holds and costs, read with the controllers stopped.
pub struct AfterSync {
    pub cached: CacheContent,
    pub stored: Stored,
    pub checked: Checked,
    pub costs: RequestCosts,
}

/// The caches' content, the Translations as etcd stores them, `check`, then the costs
/// (after a pause, so as not to change what the sync met in the apiserver).
pub async fn after_sync(bench: &Bench, wanted: &[Owned]) -> Res<AfterSync> {
    let cached = memory::read(&bench.client).await?;
    let stored = etcd::translations(&bench.etcd).await?;
    eprintln!("bench: check");
    let checked = check(bench).await?;
    report_failures(&checked);
    tokio::time::sleep(SETTLE).await;
    eprintln!("bench: measuring the apiserver's cost per request");
    let all: Vec<&DesiredTranslation> = wanted.iter().map(|o| &o.translation).collect();
    let costs = costs::measure(&bench.client, COST_NS, &all, COST_SAMPLES, apiserver_cpu).await?;
    Ok(AfterSync {
        cached,
        stored,
        checked,
        costs,
    })
}

/// Everything the initial phases measured.
pub struct Initial<'a> {
    pub translations: usize,
    /// With the edge: what it and its Services add to the Translations.
    pub share: Option<&'a Share>,
    pub create_time: Duration,
    pub floors: &'a Floors,
    pub sync: &'a Sync,
    pub after: &'a AfterSync,
}

impl Initial<'_> {
    /// Apiserver CPU per Translation, in ms.
    pub fn per_translation(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1000.0 / self.translations.max(1) as f64
    }

    /// Convergence over a floor's time.
    pub fn over(&self, floor: Duration) -> f64 {
        self.sync.time.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    }

    fn per_resource(&self) -> f64 {
        self.sync.backend_requests as f64 / self.sync.resources.max(1) as f64
    }

    /// Events the controllers wrote during the sync.
    fn events_written(&self) -> f64 {
        let requests = &self.sync.apiserver_requests;
        let events = requests
            .iter()
            .filter(|(k, _)| k.starts_with("POST events "));
        events.map(|(_, v)| v).sum()
    }

    /// Requests the apiserver served during the sync, watches excluded.
    fn requests_served(&self) -> f64 {
        let requests = &self.sync.apiserver_requests;
        let served = requests.iter().filter(|(k, _)| !k.starts_with("WATCH"));
        served.map(|(_, v)| v).sum()
    }

    /// The table's rows, in order.
    pub fn rows(&self, bench: &Bench) -> Vec<Row> {
        let mut rows = self.convergence_rows();
        rows.extend(self.edge_rows());
        rows.extend(self.apiserver_rows());
        rows.extend(self.controllers_rows());
        let args = &bench.args;
        rows.extend(self.after.stored.rows(args.nodes, args.pods));
        rows
    }

    fn convergence_rows(&self) -> Vec<Row> {
        let (floors, sync) = (self.floors, self.sync);
        let (n, resources) = (self.translations, sync.resources);
        vec![
            row("objects created (time)", secs(self.create_time), "-"),
            row(
                "translations / backend resources",
                format!("{n} / {resources}"),
                "-",
            ),
            row(
                "floor (plain clients, conc. 8)",
                secs(floors.plain.time),
                "-",
            ),
            row("initial convergence", secs(sync.time), "-"),
            row(
                "convergence / floor",
                format!("{:.2}", self.over(floors.plain.time)),
                "-",
            ),
            row(
                "floor with a status write (plain clients)",
                secs(floors.status.time),
                "-",
            ),
            row(
                "convergence / floor with a status write",
                format!("{:.2}", self.over(floors.status.time)),
                "median of 5 <= 1.05",
            ),
            row(
                "floor with a status write: timeline",
                floors.status.timeline.describe(),
                "-",
            ),
            row(
                "initial convergence: timeline",
                sync.timeline.describe(),
                "-",
            ),
        ]
    }

    /// With the edge: what it adds, and the LoadBalancer Services' addresses.
    fn edge_rows(&self) -> Vec<Row> {
        let Some(share) = self.share else {
            return Vec::new();
        };
        let (lbs, addressed) = self.sync.load_balancers;
        vec![
            row(
                "edge share: Translations / resources added",
                share.describe(),
                "-",
            ),
            row(
                "LoadBalancer Services given an address (sync)",
                format!("{addressed} of {lbs}"),
                "all",
            ),
        ]
    }

    fn apiserver_rows(&self) -> Vec<Row> {
        let (floors, sync, costs) = (self.floors, self.sync, &self.after.costs);
        let n = self.translations.max(1) as f64;
        let ctl_cpu = sync.controllers.cpu;
        vec![
            row(
                "apiserver CPU per Translation (floors / sync)",
                format!(
                    "{:.2} / {:.2} / {:.2} ms",
                    self.per_translation(floors.plain.cpu),
                    self.per_translation(floors.status.cpu),
                    self.per_translation(sync.apiserver_cpu)
                ),
                "-",
            ),
            row(
                "apiserver requests per Translation (sync)",
                format!("{:.2}", self.requests_served() / n),
                "-",
            ),
            row(
                "apiserver CPU per create / apply / status write",
                format!(
                    "{:.2} / {:.2} / {:.2} ms",
                    ms(costs.create),
                    ms(costs.apply),
                    ms(costs.status)
                ),
                "-",
            ),
            row(
                "apiserver CPU per event / cluster read",
                format!("{:.2} / {:.0} ms", ms(costs.event), ms(costs.cluster_read)),
                "-",
            ),
            row(
                "apiserver CPU, sync - status floor: / reads+events",
                format!(
                    "{:.2} s / {:.2} + {:.2} s",
                    sync.apiserver_cpu.as_secs_f64() - floors.status.cpu.as_secs_f64(),
                    costs.cluster_read.as_secs_f64(),
                    costs.event.as_secs_f64() * self.events_written()
                ),
                "-",
            ),
            row("controllers CPU (sync)", secs(ctl_cpu), "-"),
            row(
                "clients' CPU: floor w/ status / sync",
                format!(
                    "{} / {}",
                    secs(floors.status.client_cpu),
                    secs(ctl_cpu + sync.bench_cpu)
                ),
                "-",
            ),
        ]
    }

    fn controllers_rows(&self) -> Vec<Row> {
        let ctl = &self.sync.controllers;
        let reconciles = ctl.pusher_reconciles.iter().filter(|(_, n)| **n > 0.0);
        let reconciles: Vec<String> = reconciles.map(|(r, n)| format!("{r} {n}")).collect();
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        vec![
            row(
                "pusher reconciles per Translation (sync)",
                format!(
                    "{:.2} ({})",
                    ctl.pusher_reconciles.values().sum::<f64>() / self.translations.max(1) as f64,
                    reconciles.join(", ")
                ),
                "-",
            ),
            row(
                "events dropped (queue full)",
                format!("{}", ctl.events_dropped),
                "-",
            ),
            row(
                "backend requests per resource (initial)",
                format!("{:.2}", self.per_resource()),
                "<= 1.05",
            ),
            row(
                "peak RSS of the controllers",
                mib(ctl.peak_rss_kib),
                "<= 100 MiB (scale S)",
            ),
            row("RSS once converged", mib(ctl.rss_kib), "-"),
            row(
                "cached objects, serialized (lower bound)",
                self.after.cached.summary(),
                "-",
            ),
            row(
                "check: flows (failed), outside / eval / read",
                check_value(&self.after.checked),
                "0 failed",
            ),
        ]
    }

    /// The JSON of the initial phases.
    pub fn json(&self, bench: &Bench) -> Value {
        let (args, floors, sync) = (&bench.args, self.floors, self.sync);
        let (costs, checked) = (&self.after.costs, &self.after.checked);
        let ctl = &sync.controllers;
        let mut result = self.after.stored.json(args.nodes, args.pods);
        merge(
            &mut result,
            json!({
                "scale": {"nodes": args.nodes, "pods": args.pods, "services": args.services,
                          "endpointsPerService": args.endpoints_per_service,
                          "podsWithMacEvery": args.pods_with_mac_every,
                          "edge": bench.edge.is_some(),
                          "edgeServicesEvery": bench.scenario.edge_services_every},
                "translations": self.translations,
                "backendResources": sync.resources,
                "floorSeconds": floors.plain.time.as_secs_f64(),
                "initialConvergenceSeconds": sync.time.as_secs_f64(),
                "convergenceOverFloor": self.over(floors.plain.time),
                "floorWithStatusSeconds": floors.status.time.as_secs_f64(),
                "convergenceOverFloorWithStatus": self.over(floors.status.time),
                "timelineFractions": Timeline::FRACTIONS,
                "floorWithStatusTimeline": floors.status.timeline,
                "initialTimeline": sync.timeline,
                "initialRequests": sync.backend_requests,
                "initialRequestsByKind": sync.backend_by_kind,
                "edge": self.share.map(|s| json!({
                    "share": s, "added": s.added(),
                    "loadBalancers": sync.load_balancers.0,
                    "loadBalancersAddressed": sync.load_balancers.1})),
                "requestsPerResource": self.per_resource(),
                "peakRssKiB": ctl.peak_rss_kib,
                "rssAfterSyncKiB": ctl.rss_kib,
                "cacheContent": self.after.cached.json(),
                "apiserverCpuSecondsFloor": floors.plain.cpu.as_secs_f64(),
                "apiserverCpuSecondsFloorWithStatus": floors.status.cpu.as_secs_f64(),
                "apiserverCpuSecondsSync": sync.apiserver_cpu.as_secs_f64(),
                "controllersCpuSecondsSync": ctl.cpu.as_secs_f64(),
                "benchCpuSecondsSync": sync.bench_cpu.as_secs_f64(),
                "benchCpuSecondsFloorWithStatus": floors.status.client_cpu.as_secs_f64(),
                "apiserverCpuMsPerRequest": {"create": ms(costs.create), "apply": ms(costs.apply),
                                             "statusWrite": ms(costs.status), "event": ms(costs.event)},
                "apiserverCpuSecondsClusterRead": costs.cluster_read.as_secs_f64(),
                "eventsWrittenSync": self.events_written(),
                "eventsDropped": ctl.events_dropped,
                "pusherReconcilesSync": ctl.pusher_reconciles,
                "apiserverRequestsSync": sync.apiserver_requests,
                "check": {"flows": checked.report.flows_checked,
                          "failed": checked.report.failures.len(),
                          "byKind": checked.report.by_kind,
                          "unverifiableEndpoints": checked.report.unverifiable_endpoints.len(),
                          "unplugged": checked.report.unplugged.len(),
                          "evaluateSeconds": checked.evaluated.as_secs_f64(),
                          "readSeconds": checked.read.as_secs_f64()},
            }),
        );
        result
    }
}
