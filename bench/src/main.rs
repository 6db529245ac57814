//! Benchmark of the controllers against a real local control plane and the in-process
//! MidoNet API simulator (1 ms added latency). See `docs/benchmark.md`.
//!
//! `cargo build --profile dist --workspace --bins && cargo run --profile dist -p
//! midonet-kube-bench -- --nodes 50 --pods 2000 --services 300` (it runs the controllers
//! binary beside it, of the same profile: `dist` is what the image ships).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_kube_controllers::crd::Translation;
use midonet_kube_controllers::netcheck::cli::load_cluster;
use midonet_kube_controllers::translate;
use midonet_sim::admin::{AdminClient, Faults};
use midonet_sim::{self as sim, SimConfig};
use midonet_testkit::probe;
use midonet_testkit::scenario::{api_in_namespace_of, Scale, Scenario};
use midonet_translators::{DesiredTranslation, Resource, TranslatorConfig};
use profile::ApiserverProfile;
use serde_json::json;
use tokio::process::{Child, Command};
use tracker::{Key, ReadyTracker, Timeline, Want};

mod apirequests;
mod costs;
mod memory;
mod profile;
mod tracker;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const NAMESPACES: usize = 4;
const COST_NS: &str = "bench-costs";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(900);
/// Requests of each kind sent one at a time to measure what each costs the apiserver.
const COST_SAMPLES: usize = 1000;
/// Pause between measures.
const SETTLE: Duration = Duration::from_secs(3);
/// The flows the probe samples during the version bump: from one pod per node, this many
/// Service ports and pods on this many other nodes (`midonet_testkit::probe::select_flows`).
const PROBE_SAMPLE: probe::SampleSize = probe::SampleSize {
    services_per_source: 6,
    peers_per_source: 2,
};
/// The probe's sample period, and how long it samples before the bump starts. Below the
/// 100 ms target, so that the samples longer than the period (the probe starts the next one
/// at once) leave the mean period within it.
const PROBE_PERIOD: Duration = Duration::from_millis(80);
const PROBE_LEAD: Duration = Duration::from_secs(1);
/// Interrupted flows listed in the JSON, longest first.
const PROBE_LISTED: usize = 20;

#[derive(Parser, Clone, Debug)]
#[command(about = "Benchmark midonet-kube-controllers against the MidoNet API simulator")]
struct Args {
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    #[arg(long, default_value_t = 2000)]
    pods: usize,
    #[arg(long, default_value_t = 300)]
    services: usize,
    #[arg(long, default_value_t = 4)]
    endpoints_per_service: usize,
    /// Every N-th pod carries the `midonet.org/mac-address` annotation, which adds a
    /// MAC-table and an ARP Translation to its pod's; 0 for none, which with
    /// `--only-initial --nodes 100 --pods 8000 --services 900` is the 10,000-Translation
    /// memory variant the target is set on (`docs/benchmark.md`).
    #[arg(long, default_value_t = 2)]
    pods_with_mac_every: usize,
    /// Pods deleted and as many created in the churn phase (capped at --pods).
    #[arg(long, default_value_t = 500)]
    churn: usize,
    /// Also write the JSON result here.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Stop after the initial convergence (floor, convergence, requests, peak RSS): for the
    /// large-scale memory variant, e.g. `--nodes 100 --pods 8000 --services 900`.
    #[arg(long)]
    only_initial: bool,
    /// Also measure a third floor: with a status write, and a second Translation watch
    /// standing in for the controllers' informer (`docs/benchmark.md`: what the sync costs
    /// the apiserver beyond the floor's writes).
    #[arg(long)]
    watched_floor: bool,
    /// Time the initial sync without the bench's own Translation watch, so that it runs
    /// under as many Translation watchers as the floors (the controllers' informer and the
    /// garbage collector, where the floors have the bench's watch and the garbage
    /// collector): the controllers' count of pushes is polled, a LIST and the simulator
    /// confirm, and the sync is timed at the poll that read the final count (no
    /// timeline; see `wait_converged_unwatched`).
    #[arg(long)]
    unwatched_sync: bool,
    /// Write a CPU profile of the kube-apiserver over each floor and the initial sync to
    /// this directory (`floor.pb.gz`, `floor-status.pb.gz`, `sync.pb.gz`,
    /// `floor-status-after.pb.gz`, and with `--watched-floor` `floor-watched.pb.gz`,
    /// `floor-watched-after.pb.gz`; see
    /// `bench/src/profile.rs`). With `--only-initial`.
    #[arg(long, requires = "only_initial")]
    apiserver_profile: Option<PathBuf>,
    /// How long each apiserver profile samples: longer than the longest phase profiled.
    #[arg(long, default_value_t = 45)]
    apiserver_profile_seconds: u64,
}

fn main() -> Res<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn client_for(kubeconfig: &Path) -> Res<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn control_plane_dir() -> PathBuf {
    std::env::temp_dir().join(format!("midonet-kube-bench-{}", std::process::id()))
}

/// CPU time a process has used so far: user + system time in `/proc/PID/stat`, in clock
/// ticks (100 per second on Linux; schedstat, finer, is not enabled on every kernel).
fn cpu_time(pid: u32) -> Res<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Res<u64> {
        Ok(fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or("unreadable /proc/PID/stat")?)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// CPU time the kube-apiserver of the bench's control plane has used so far.
fn apiserver_cpu() -> Res<Duration> {
    let pid = std::fs::read_to_string(control_plane_dir().join("kube-apiserver.pid"))?;
    cpu_time(pid.trim().parse()?)
}

/// The CPU time the apiserver and the bench itself have used so far.
fn apiserver_and_bench_cpu() -> Res<(Duration, Duration)> {
    Ok((apiserver_cpu()?, cpu_time(std::process::id())?))
}

/// Starts a control plane in a temporary directory; returns the admin kubeconfig.
fn start_control_plane() -> Res<PathBuf> {
    let dir = control_plane_dir();
    // The bench is a member of the workspace whose root holds `scripts/`.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/k8s-env.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("start")
        .arg(&dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err("scripts/k8s-env.sh start failed".into());
    }
    let env = std::fs::read_to_string(dir.join("env"))?;
    env.lines()
        .filter_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(PathBuf::from)
        .next()
        .ok_or_else(|| "KUBECONFIG missing from the env file".into())
}

async fn apply_crd(client: &Client) -> Res<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = midonet_kube_controllers::crd::CRD_NAME;
    let pp = PatchParams::apply("midonet-kube-bench").force();
    let crd = midonet_kube_controllers::crd::crd();
    crds.patch(name, &pp, &Patch::Apply(&crd)).await?;
    let start = Instant::now();
    loop {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err("CRD not Established in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `f` on `items`, `limit` at a time; the first error ends it.
async fn each_concurrent<T, F, Fut>(
    items: impl IntoIterator<Item = T>,
    limit: usize,
    f: F,
) -> Res<()>
where
    F: FnMut(T) -> Fut,
    Fut: std::future::Future<Output = Res<()>>,
{
    stream::iter(items)
        .map(Ok)
        .try_for_each_concurrent(limit, f)
        .await
}

/// Creates objects at concurrency 16; returns them as the apiserver stored them.
async fn create_all<K>(api: impl Fn(&K) -> Api<K>, objs: Vec<K>) -> Res<Vec<K>>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<Result<K, kube::Error>> = stream::iter(objs)
        .map(|o| {
            let api = api(&o);
            async move { api.create(&PostParams::default(), &o).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    Ok(results
        .into_iter()
        .collect::<Result<Vec<K>, kube::Error>>()?)
}

/// Gives pods `range` their addresses through the status subresource, as a kubelet does
/// once the CNI plugin has set them up (a create drops the status); returns them as
/// stored.
async fn set_pod_ips(
    client: &Client,
    scenario: &Scenario,
    range: std::ops::Range<usize>,
) -> Res<Vec<Pod>> {
    let results: Vec<Result<Pod, kube::Error>> = stream::iter(range)
        .map(|i| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(i));
            let status = Patch::Merge(scenario.pod_status(i));
            async move {
                api.patch_status(&Scenario::pod_name(i), &PatchParams::default(), &status)
                    .await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    Ok(results
        .into_iter()
        .collect::<Result<Vec<Pod>, kube::Error>>()?)
}

#[derive(Parser)]
struct CheckCli {
    #[command(flatten)]
    run: midonet_kube_controllers::config::RunArgs,
}

/// `check` over the cluster and the simulator, in-process: what the `check` subcommand
/// runs.
async fn check(
    kubeconfig: &Path,
    api_url: &str,
) -> Res<midonet_kube_controllers::netcheck::cli::Checked> {
    let kubeconfig = kubeconfig.display().to_string();
    let cfg = CheckCli::try_parse_from([
        "check",
        "--kubeconfig",
        &kubeconfig,
        "--midonet-api",
        api_url,
    ])?
    .run
    .validate()?;
    Ok(midonet_kube_controllers::netcheck::cli::check_system(&cfg, &mut |_, _| {}).await?)
}

// ---------------------------------------------------------------- convergence checks

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Waits until every Translation is Ready, the tracked ones are what `want` asks for, and
/// the simulator holds exactly the item paths they ask for; returns the time from `since`
/// to the watch event that completed it (the pusher marks a Translation Ready only once the
/// backend confirmed, and removes a finalizer only after the backend deletes).
async fn wait_converged(
    tracker: &ReadyTracker,
    admin: &AdminClient,
    want: &Want<'_>,
    since: Instant,
    what: &str,
) -> Res<Duration> {
    let mut last_report = Instant::now();
    loop {
        let now = tracker.snapshot(want);
        let why = if now.count < want.count {
            format!("{} Translations, want at least {}", now.count, want.count)
        } else if now.missing > 0 {
            format!("{} of the phase's new Translations missing", now.missing)
        } else if now.left > 0 {
            format!("{} of the phase's deleted Translations left", now.left)
        } else if now.not_ready > 0 {
            format!("{} Translations not Ready", now.not_ready)
        } else if now.stale > 0 {
            format!(
                "{} Translations of version {:?} left",
                now.stale, want.stale_version
            )
        } else {
            let actual = admin.state().await?.translation_paths();
            if actual == now.expected_paths {
                let done = now.last_change.unwrap_or(since);
                return Ok(done.saturating_duration_since(since));
            }
            format!(
                "{} backend paths missing, {} extra",
                now.expected_paths.difference(&actual).count(),
                actual.difference(&now.expected_paths).count()
            )
        };
        let watch = now
            .last_error
            .map(|e| format!(" (watch: {e})"))
            .unwrap_or_default();
        still_waiting(what, since, &format!("{why}{watch}"), &mut last_report)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Fails once `since` is [`CONVERGE_TIMEOUT`] ago; every 10 s, says why `what` has not
/// converged yet.
fn still_waiting(what: &str, since: Instant, why: &str, last_report: &mut Instant) -> Res<()> {
    if since.elapsed() > CONVERGE_TIMEOUT {
        return Err(format!("{what}: not converged in {CONVERGE_TIMEOUT:?}: {why}").into());
    }
    if last_report.elapsed() > Duration::from_secs(10) {
        eprintln!("bench: {what}: not converged yet: {why}");
        *last_report = Instant::now();
    }
    Ok(())
}

/// When a sync timed without a watch converged, seen from `since`: `done_by` is the time
/// reported, `not_before` the start of the last poll or LIST that found it unfinished.
struct UnwatchedSync {
    done_by: Duration,
    not_before: Duration,
    /// What `done_by` is: the poll that read the final count of pushes, when the LIST
    /// proves that count complete; else the end of the confirming LIST.
    timed_at: UnwatchedEnd,
    /// The apiserver's and the bench's CPU time at `done_by`: the confirming LIST after
    /// it costs both a few seconds at scale S.
    apiserver_cpu: Duration,
    bench_cpu: Duration,
    confirming_list: Duration,
    lists: usize,
}

#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
enum UnwatchedEnd {
    PushCount,
    List,
}

/// Waits, without a watch, until every Translation is Ready and the simulator holds
/// exactly the item paths they ask for.
///
/// Polls the controllers' count of pushes every 100 ms. The pusher counts a push once
/// its Ready status is written, and in an initial sync every Translation is new, so each
/// needs at least one push. Once the count reaches `count`, a LIST of the Translations and
/// the simulator's state decide. If they confirm, and the count is still what that poll
/// read and equals the Translations listed, every Translation was pushed exactly once and
/// by that poll: the sync is timed there, to within the poll period. Otherwise (a
/// Translation pushed twice) it is timed at the end of the LIST. A LIST of thousands of
/// Translations costs the apiserver seconds of CPU on one core, so there is none before
/// the count is reached; nor before `profile`, the apiserver's over the sync, has ended.
async fn wait_converged_unwatched(
    client: &Client,
    admin: &AdminClient,
    ctl: &Controllers,
    count: usize,
    since: Instant,
    mut profile: Option<ApiserverProfile>,
) -> Res<UnwatchedSync> {
    let pushes = || async {
        ctl.metric_by_label("midonet_kube_controllers_pusher_reconciles_total", "result")
            .await
            .map(|by_result| by_result.get("pushed").copied().unwrap_or(0.0))
    };
    let mut not_before = since;
    let mut lists = 0;
    let mut last_report = Instant::now();
    loop {
        let polled = Instant::now();
        // The metrics endpoint is not up at once; an error is reported as not converged.
        let pushed = pushes().await;
        let read = Instant::now();
        let why = match pushed {
            Err(e) => format!("controllers' metrics: {e}"),
            Ok(pushed) if pushed < count as f64 => {
                format!("{pushed} pushes, want at least {count}")
            }
            Ok(pushed) => {
                let cpu_at_read = apiserver_and_bench_cpu()?;
                if let Some(profile) = profile.take() {
                    profile.finish().await?;
                }
                let listing = Instant::now();
                let now = tracker::list_snapshot(client).await?;
                let listed = Instant::now();
                lists += 1;
                let why = if now.count < count {
                    format!("{} Translations, want at least {count}", now.count)
                } else if now.not_ready > 0 {
                    format!("{} Translations not Ready", now.not_ready)
                } else {
                    let actual = admin.state().await?.translation_paths();
                    if actual == now.expected_paths {
                        let exact = pushes().await? == pushed && pushed == now.count as f64;
                        let (timed_at, done, (apiserver_cpu, bench_cpu)) = if exact {
                            (UnwatchedEnd::PushCount, read, cpu_at_read)
                        } else {
                            (UnwatchedEnd::List, listed, apiserver_and_bench_cpu()?)
                        };
                        return Ok(UnwatchedSync {
                            done_by: done.saturating_duration_since(since),
                            not_before: not_before.saturating_duration_since(since),
                            timed_at,
                            apiserver_cpu,
                            bench_cpu,
                            confirming_list: listed.saturating_duration_since(listing),
                            lists,
                        });
                    }
                    format!(
                        "{} backend paths missing, {} extra",
                        now.expected_paths.difference(&actual).count(),
                        actual.difference(&now.expected_paths).count()
                    )
                };
                // The LIST's snapshot, taken after it started, was not converged.
                not_before = listing;
                tokio::time::sleep(Duration::from_millis(150)).await;
                why
            }
        };
        not_before = not_before.max(polled);
        still_waiting("initial sync", since, &why, &mut last_report)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------- the controllers child

struct Controllers {
    child: Child,
    metrics_port: u16,
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Controllers {
    fn spawn(kubeconfig: &Path, api_url: &str, extra: &[&str]) -> Res<Controllers> {
        let exe = std::env::current_exe()?.with_file_name("midonet-kube-controllers");
        let metrics_port = free_port()?;
        let log = std::env::temp_dir().join(format!(
            "midonet-kube-bench-{}-controllers.log",
            std::process::id()
        ));
        let child = Command::new(&exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--midonet-api", api_url, "--leader-elect", "false"])
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{metrics_port}"))
            // Quiet by default; MIDONETKUBE_LOG_LEVEL (e.g. `info`) for a diagnosis run.
            .args([
                "--log-level",
                &std::env::var("MIDONETKUBE_LOG_LEVEL").unwrap_or_else(|_| "warn".into()),
            ])
            .args([
                "--controllers",
                "node,pod,service,endpoints,networkpolicy,pusher",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(log)?,
            )
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        Ok(Controllers {
            child,
            metrics_port,
        })
    }

    fn pid(&self) -> Res<u32> {
        self.child.id().ok_or_else(|| "controllers exited".into())
    }

    /// Peak resident set size in KiB (`VmHWM`).
    fn peak_rss_kib(&self) -> Res<u64> {
        self.status_kib("VmHWM:")
    }

    /// Resident set size now, in KiB (`VmRSS`).
    fn rss_kib(&self) -> Res<u64> {
        self.status_kib("VmRSS:")
    }

    /// A `kB` field of `/proc/PID/status`.
    fn status_kib(&self, field: &str) -> Res<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {field} in /proc/PID/status").into())
    }

    async fn stop(mut self) -> Res<()> {
        let pid = self.pid()?;
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                Err("controllers did not stop within 30 s of SIGTERM".into())
            }
        }
    }

    async fn wait_ready(&self) -> Res<Duration> {
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(start.elapsed());
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(format!("/readyz not 200 within {READY_TIMEOUT:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The controllers' `/metrics`, as text.
    async fn metrics_text(&self) -> Res<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        Ok(reqwest::get(&url).await?.text().await?)
    }

    /// A counter's samples by the value of its one label `label`.
    async fn metric_by_label(&self, name: &str, label: &str) -> Res<BTreeMap<String, f64>> {
        let text = self.metrics_text().await?;
        let prefix = format!("{name}{{{label}=\"");
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (value_of_label, sample) = rest.split_once("\"} ")?;
                Some((
                    value_of_label.to_string(),
                    sample.trim().parse::<f64>().ok()?,
                ))
            })
            .collect())
    }

    /// Sum of a metric's samples whose line contains `filter`.
    async fn metric(&self, name: &str, filter: &str) -> Res<f64> {
        let text = self.metrics_text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter(|l| l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' '))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum())
    }
}

// ---------------------------------------------------------------- floor

/// A desired Translation and the owner reference the translators put on it (none for the
/// globals).
struct Owned {
    owner: Option<OwnerReference>,
    translation: DesiredTranslation,
}

/// Every Translation the controllers are to write for these objects, with its owner.
fn translate_all(
    nodes: &[Node],
    pods: &[Pod],
    services: &[Service],
    endpoints: &[Endpoints],
) -> Vec<Owned> {
    let cfg = TranslatorConfig::default();
    let by_name: BTreeMap<String, &Node> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone().map(|k| (k, n)))
        .collect();
    let svc_by_key: BTreeMap<(String, String), &Service> = services
        .iter()
        .map(|s| {
            (
                (
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default(),
                ),
                s,
            )
        })
        .collect();
    fn owned_by<O: kube::Resource<DynamicType = ()>>(
        obj: &O,
        translations: Vec<DesiredTranslation>,
    ) -> impl Iterator<Item = Owned> {
        let owner = translate::owner_reference(obj);
        translations.into_iter().map(move |translation| Owned {
            owner: owner.clone(),
            translation,
        })
    }
    let mut out: Vec<Owned> = midonet_translators::global(&cfg)
        .into_iter()
        .map(|translation| Owned {
            owner: None,
            translation,
        })
        .collect();
    for n in nodes {
        out.extend(owned_by(n, midonet_translators::node(&cfg, n).translations));
    }
    for p in pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| by_name.get(n).copied());
        out.extend(owned_by(
            p,
            midonet_translators::pod(&cfg, p, node).translations,
        ));
    }
    for s in services {
        out.extend(owned_by(
            s,
            midonet_translators::service(&cfg, s).translations,
        ));
    }
    for e in endpoints {
        let key = (
            e.metadata.namespace.clone().unwrap_or_default(),
            e.metadata.name.clone().unwrap_or_default(),
        );
        let service = svc_by_key.get(&key).copied();
        out.extend(owned_by(
            e,
            midonet_translators::endpoints(&cfg, e, service).translations,
        ));
    }
    out
}

/// The namespaces and names of the Translations the controllers are to write for these
/// pods.
fn translation_keys(nodes: &[Node], pods: &[Pod]) -> BTreeSet<Key> {
    translate_all(nodes, pods, &[], &[])
        .into_iter()
        .filter(|o| o.owner.as_ref().is_some_and(|r| r.kind == "Pod"))
        .map(|o| (o.translation.namespace, o.translation.name))
        .collect()
}

/// The fewest backend requests a version bump can make: every resource of the new version
/// created once (as many as the old version has), and of the old version one DELETE for
/// each resource MidoNet's cascades do not take with another (`Resource::deleted_with`).
fn bump_floor(old: &midonet_sim::admin::StateDump) -> Res<BumpFloor> {
    let paths = old.translation_paths();
    let resources: Vec<Resource> = old
        .typed_resources()?
        .into_iter()
        .filter(|r| paths.contains(&r.item_path()))
        .collect();
    let ids: std::collections::HashSet<uuid::Uuid> =
        resources.iter().filter_map(Resource::own_id).collect();
    let roots = resources
        .iter()
        .filter(|r| {
            !r.deleted_with()
                .iter()
                .any(|id| ids.contains(id) && r.own_id() != Some(*id))
        })
        .count();
    Ok(BumpFloor {
        requests: resources.len() + roots,
    })
}

/// A version bump's least backend requests: the new version's creates (as many as the old
/// version's resources) and the old version's deletions MidoNet's cascades do not do.
struct BumpFloor {
    requests: usize,
}

/// The Translations' backend resources (parsed, in push order) in levels: each one's
/// resources need only what its own earlier resources and the Translations of lower levels
/// provide (`Resource::requires`), so that a plain client pushing level by level is never
/// refused for a missing referent.
fn dependency_levels(all: &[Owned]) -> Res<Vec<Vec<Vec<Resource>>>> {
    let mut resources = Vec::with_capacity(all.len());
    let mut provider = HashMap::new();
    for (i, o) in all.iter().enumerate() {
        let rs = o
            .translation
            .resources
            .iter()
            .map(Resource::from_entry)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        for r in &rs {
            for p in r.provides() {
                provider.insert(p, i);
            }
        }
        resources.push(rs);
    }
    let needs: Vec<Vec<usize>> = resources
        .iter()
        .enumerate()
        .map(|(i, rs)| {
            rs.iter()
                .flat_map(Resource::requires)
                .filter_map(|r| provider.get(&r).copied())
                .filter(|p| *p != i)
                .collect()
        })
        .collect();
    // Longest path from a Translation that needs nothing, by relaxation: the levels are few.
    let mut level = vec![0usize; all.len()];
    for _ in 0..=all.len() {
        let mut changed = false;
        for (i, ns) in needs.iter().enumerate() {
            let l = ns.iter().map(|p| level[*p] + 1).max().unwrap_or(0);
            if l > level[i] {
                level[i] = l;
                changed = true;
            }
        }
        if !changed {
            let mut levels = vec![Vec::new(); level.iter().max().map_or(0, |m| m + 1)];
            for (rs, l) in resources.into_iter().zip(&level) {
                levels[*l].push(rs);
            }
            return Ok(levels);
        }
    }
    Err("the scenario's Translations need each other in a cycle".into())
}

/// What the plain client of [`floor`] writes per Translation.
#[derive(Clone, Copy, PartialEq)]
enum FloorWrites {
    /// One create: the floor of the ratio.
    Create,
    /// A create, then a status write shaped like the pusher's: the least any controller
    /// that records a Ready condition per Translation can write.
    CreateAndStatus,
}

/// Lower bound: writes the same Translations as the translators do (same namespace, name,
/// labels, owner, finalizer, field managers: each manager is an entry in the object's
/// managedFields, which the apiserver reads and writes with the object) and the same
/// backend resources, with plain clients at
/// concurrency 8, the backend's level by level ([`dependency_levels`]) so that referents
/// exist first.
async fn floor(
    client: &Client,
    api_url: &str,
    all: &[Owned],
    writes: FloorWrites,
    controllers_watch: bool,
) -> Res<(Duration, Timeline)> {
    let backend = BackendClient::new(
        BackendConfig {
            url: url::Url::parse(api_url)?,
            ..BackendConfig::default()
        },
        &prometheus::Registry::new(),
    )?;
    let levels = dependency_levels(all)?;
    // Watched as during the sync; only its timeline is used.
    let watch = ReadyTracker::start(client);
    watch.listed().await;
    // The controllers' informer: one more watch the apiserver sends every write to.
    let informer = controllers_watch.then(|| ReadyTracker::start(client));
    if let Some(w) = &informer {
        w.listed().await;
    }
    let start = Instant::now();
    let kube_side = each_concurrent(all, 8, |o| {
        let d = &o.translation;
        let t = translate::translation_object(d, o.owner.as_ref());
        let trs: Api<Translation> = Api::namespaced(client.clone(), &d.namespace);
        async move {
            let created = trs.create(&costs::translators_params(), &t).await?;
            if writes == FloorWrites::CreateAndStatus {
                costs::write_pushed_status(&trs, created, &costs::pusher_params()).await?;
            }
            Ok(())
        }
    });
    let backend_side = async {
        for level in &levels {
            each_concurrent(level, 8, |resources| {
                let backend = &backend;
                async move {
                    for r in resources {
                        backend.apply(r).await?;
                    }
                    Ok(())
                }
            })
            .await?;
        }
        Res::Ok(())
    };
    let (a, b) = tokio::join!(kube_side, backend_side);
    a?;
    b?;
    Ok((start.elapsed(), watch.timeline(start)))
}

/// One measured floor.
struct FloorRun {
    time: Duration,
    /// The apiserver's CPU time over it.
    cpu: Duration,
    /// The bench's own CPU time over it: the floor's clients, the simulator, the watches.
    client_cpu: Duration,
    timeline: Timeline,
}

/// [`floor`], its duration, timeline and the apiserver's CPU over it; then [`clear_floor`],
/// once `profile` (started just before) has ended.
async fn measured_floor(
    client: &Client,
    api_url: &str,
    admin: &AdminClient,
    all: &[Owned],
    writes: FloorWrites,
    controllers_watch: bool,
    profile: Option<ApiserverProfile>,
) -> Res<FloorRun> {
    let (cpu0, client_cpu0) = apiserver_and_bench_cpu()?;
    let (time, timeline) = floor(client, api_url, all, writes, controllers_watch).await?;
    let (cpu1, client_cpu1) = apiserver_and_bench_cpu()?;
    let (cpu, client_cpu) = (cpu1 - cpu0, client_cpu1 - client_cpu0);
    if let Some(profile) = profile {
        profile.finish().await?;
    }
    clear_floor(client, admin, all).await?;
    Ok(FloorRun {
        time,
        cpu,
        client_cpu,
        timeline,
    })
}

/// Removes what [`floor`] wrote: its Translations (finalizer first), and the backend
/// (hosts kept).
async fn clear_floor(client: &Client, admin: &AdminClient, written: &[Owned]) -> Res<()> {
    each_concurrent(written, 16, |o| {
        let d = &o.translation;
        let trs: Api<Translation> = Api::namespaced(client.clone(), &d.namespace);
        async move {
            costs::remove_finalizers(&trs, &d.name).await?;
            trs.delete(&d.name, &DeleteParams::default()).await?;
            Ok(())
        }
    })
    .await?;
    admin.wipe().await?;
    admin.reset_requests().await?;
    // Let the apiserver and kube-controller-manager finish with the deletions.
    tokio::time::sleep(SETTLE).await;
    Ok(())
}

// ---------------------------------------------------------------- the scenario

struct Row {
    name: &'static str,
    value: String,
    target: &'static str,
}

async fn backend_counts(admin: &AdminClient) -> Res<(u64, u64, u64)> {
    let r = admin.requests().await?;
    let writes = r.of_method("POST") + r.of_method("PUT") + r.of_method("DELETE");
    Ok((r.total - r.login, writes, r.of_method("GET")))
}

/// Prints the table and the JSON, and writes the JSON to `--json-out`.
fn report(args: &Args, rows: &[Row], result: &serde_json::Value) -> Res<()> {
    println!(
        "scale: {} nodes, {} pods ({}), {} services x {} endpoints; simulator latency 1 ms",
        args.nodes,
        args.pods,
        match args.pods_with_mac_every {
            0 => "none with a MAC annotation".to_string(),
            1 => "each with a MAC annotation".to_string(),
            n => format!("1 in {n} with a MAC annotation"),
        },
        args.services,
        args.endpoints_per_service
    );
    println!("{:<46} {:>22}  target", "measure", "value");
    for r in rows {
        println!("{:<46} {:>22}  {}", r.name, r.value, r.target);
    }
    let text = serde_json::to_string_pretty(result)?;
    println!("{text}");
    if let Some(path) = &args.json_out {
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}

async fn run(args: Args) -> Res<()> {
    let t0 = Instant::now();
    eprintln!("bench: starting the control plane");
    let kubeconfig = start_control_plane()?;
    let client = client_for(&kubeconfig).await?;
    apply_crd(&client).await?;

    let mut scenario = Scenario::new(
        "bench",
        Scale {
            nodes: args.nodes,
            pods: args.pods,
            services: args.services,
            endpoints_per_service: args.endpoints_per_service,
            namespaces: NAMESPACES,
        },
    );
    scenario.pod_mac_every = args.pods_with_mac_every;
    let hosts = scenario.hosts.clone();
    let sim = sim::start(SimConfig {
        hosts: hosts.clone(),
        faults: Faults {
            latency_ms: 1,
            ..Faults::default()
        },
        ..SimConfig::default()
    })
    .await?;
    let admin = AdminClient::new(sim.admin_url())?;
    let api_url = sim.api_url().to_string();

    // 1. Objects.
    eprintln!("bench: creating objects");
    let ns_api_all: Api<Namespace> = Api::all(client.clone());
    let mut cost_ns = Namespace::default();
    cost_ns.metadata.name = Some(COST_NS.to_string());
    for ns in (0..NAMESPACES)
        .map(|i| scenario.namespace_object(i))
        .chain([cost_ns])
    {
        ns_api_all.create(&PostParams::default(), &ns).await?;
    }
    let t_create = Instant::now();
    let node_objs = (0..args.nodes).map(|i| scenario.node(i)).collect();
    let nodes = create_all(|_: &Node| Api::all(client.clone()), node_objs).await?;
    let pod_objs = (0..args.pods).map(|i| scenario.pod(i)).collect();
    create_all(api_in_namespace_of(&client), pod_objs).await?;
    let pods = set_pod_ips(&client, &scenario, 0..args.pods).await?;
    let svc_objs = (0..args.services).map(|i| scenario.service(i)).collect();
    let services = create_all(api_in_namespace_of(&client), svc_objs).await?;
    let ep_objs = (0..args.services).map(|i| scenario.endpoints(i)).collect();
    let endpoints = create_all(api_in_namespace_of(&client), ep_objs).await?;
    let create_time = t_create.elapsed();

    // 9. Floor, before the controllers run; then clean up.
    eprintln!("bench: measuring the floor");
    // The controllers also translate the apiserver's own `default/kubernetes` Service.
    // (Its Endpoints exist only if the apiserver's endpoint reconciler made them.)
    let mut all_services = services.clone();
    all_services.extend(
        Api::<Service>::namespaced(client.clone(), "default")
            .get_opt("kubernetes")
            .await?,
    );
    let mut all_endpoints = endpoints.clone();
    all_endpoints.extend(
        Api::<Endpoints>::namespaced(client.clone(), "default")
            .get_opt("kubernetes")
            .await?,
    );
    let wanted = translate_all(&nodes, &pods, &all_services, &all_endpoints);
    let n_translations = wanted.len();
    let profile = |name: &str| {
        ApiserverProfile::start(
            &client,
            args.apiserver_profile.as_ref(),
            args.apiserver_profile_seconds,
            name,
        )
    };
    let FloorRun {
        time: floor_time,
        cpu: floor_cpu,
        ..
    } = measured_floor(
        &client,
        &api_url,
        &admin,
        &wanted,
        FloorWrites::Create,
        false,
        profile("floor"),
    )
    .await?;
    eprintln!("bench: measuring the floor with a status write per Translation");
    let status = FloorWrites::CreateAndStatus;
    let FloorRun {
        time: status_floor_time,
        cpu: status_floor_cpu,
        client_cpu: status_floor_client_cpu,
        timeline: status_floor_timeline,
    } = measured_floor(
        &client,
        &api_url,
        &admin,
        &wanted,
        status,
        false,
        profile("floor-status"),
    )
    .await?;
    let watched_floor = if args.watched_floor {
        eprintln!("bench: measuring the floor with a status write and a second watch");
        let profile = profile("floor-watched");
        Some(measured_floor(&client, &api_url, &admin, &wanted, status, true, profile).await?)
    } else {
        None
    };

    // 2-4. Initial convergence.
    eprintln!("bench: initial convergence");
    let tracker = (!args.unwatched_sync).then(|| ReadyTracker::start(&client));
    if let Some(tracker) = &tracker {
        tracker.listed().await;
    }
    let requests0 = apirequests::read(&client).await?;
    let (initial_cpu0, bench_cpu0) = apiserver_and_bench_cpu()?;
    let sync_profile = profile("sync");
    let t_initial = Instant::now();
    let ctl = Controllers::spawn(&kubeconfig, &api_url, &[])?;
    let (initial, initial_timeline, unwatched) = match &tracker {
        Some(tracker) => {
            let want = Want {
                count: n_translations,
                ..Want::default()
            };
            let initial = wait_converged(tracker, &admin, &want, t_initial, "initial sync").await?;
            if let Some(profile) = sync_profile {
                profile.finish().await?;
            }
            (initial, tracker.timeline(t_initial), None)
        }
        None => {
            let u = wait_converged_unwatched(
                &client,
                &admin,
                &ctl,
                n_translations,
                t_initial,
                sync_profile,
            )
            .await?;
            (u.done_by, Timeline::default(), Some(u))
        }
    };
    let resources = admin.state().await?.translation_paths().len();
    let (initial_requests, _, _) = backend_counts(&admin).await?;
    let per_resource = initial_requests as f64 / resources.max(1) as f64;
    let (initial_cpu, bench_cpu) = match &unwatched {
        Some(u) => (u.apiserver_cpu, u.bench_cpu),
        None => apiserver_and_bench_cpu()?,
    };
    let initial_cpu = initial_cpu - initial_cpu0;
    let bench_cpu = bench_cpu - bench_cpu0;
    let sync_requests = apirequests::growth(&requests0, &apirequests::read(&client).await?);
    let events_written: f64 = sync_requests
        .iter()
        .filter(|(k, _)| k.starts_with("POST events "))
        .map(|(_, v)| v)
        .sum();
    let sync_requests_total: f64 = sync_requests
        .iter()
        .filter(|(k, _)| !k.starts_with("WATCH"))
        .map(|(_, v)| v)
        .sum();
    let controllers_cpu = cpu_time(ctl.pid()?)?;
    let peak_rss = ctl.peak_rss_kib()?;
    let rss_after = ctl.rss_kib()?;
    let events_dropped = ctl
        .metric("midonet_kube_controllers_events_dropped_total", "")
        .await?;
    let pusher_reconciles = ctl
        .metric_by_label("midonet_kube_controllers_pusher_reconciles_total", "result")
        .await?;
    ctl.stop().await?;
    let cached = memory::read(&client).await?;
    // After the sync and its counts: `check` reads the cluster and the backend.
    eprintln!("bench: check");
    let checked = check(&kubeconfig, &api_url).await?;
    let check_failures = checked.report.failures.len();
    if check_failures > 0 {
        eprintln!(
            "bench: check found {check_failures} failing flow(s), e.g. {:?}",
            checked
                .report
                .failures
                .first()
                .map(|f| (&f.from, &f.to, &f.problem))
        );
    }
    // After the sync, so as not to change what it meets in the apiserver.
    tokio::time::sleep(SETTLE).await;
    eprintln!("bench: measuring the apiserver's cost per request");
    let all: Vec<&DesiredTranslation> = wanted.iter().map(|o| &o.translation).collect();
    let costs = costs::measure(&client, COST_NS, &all, COST_SAMPLES, apiserver_cpu).await?;
    let per_translation = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / n_translations.max(1) as f64;
    let ratio = initial.as_secs_f64() / floor_time.as_secs_f64().max(1e-9);
    let status_ratio = initial.as_secs_f64() / status_floor_time.as_secs_f64().max(1e-9);
    let mut initial_rows = vec![
        Row {
            name: "objects created (time)",
            value: secs(create_time),
            target: "-",
        },
        Row {
            name: "translations / backend resources",
            value: format!("{n_translations} / {resources}"),
            target: "-",
        },
        Row {
            name: "floor (plain clients, conc. 8)",
            value: secs(floor_time),
            target: "-",
        },
        Row {
            name: "initial convergence",
            value: secs(initial),
            target: "-",
        },
        Row {
            name: "convergence / floor",
            value: format!("{ratio:.2}"),
            target: "-",
        },
        Row {
            name: "floor with a status write (plain clients)",
            value: secs(status_floor_time),
            target: "-",
        },
        Row {
            name: "convergence / floor with a status write",
            value: format!("{status_ratio:.2}"),
            target: "median of 5 <= 1.05",
        },
        Row {
            name: "floor with a status write: timeline",
            value: status_floor_timeline.describe(),
            target: "-",
        },
        Row {
            name: "initial convergence: timeline",
            value: initial_timeline.describe(),
            target: "-",
        },
        Row {
            name: "apiserver CPU per Translation (floors / sync)",
            value: format!(
                "{:.2} / {:.2} / {:.2} ms",
                per_translation(floor_cpu),
                per_translation(status_floor_cpu),
                per_translation(initial_cpu)
            ),
            target: "-",
        },
        Row {
            name: "apiserver requests per Translation (sync)",
            value: format!("{:.2}", sync_requests_total / n_translations.max(1) as f64),
            target: "-",
        },
        Row {
            name: "apiserver CPU per create / apply / status write",
            value: format!(
                "{:.2} / {:.2} / {:.2} ms",
                ms(costs.create),
                ms(costs.apply),
                ms(costs.status)
            ),
            target: "-",
        },
        Row {
            name: "apiserver CPU per event / cluster read",
            value: format!("{:.2} / {:.0} ms", ms(costs.event), ms(costs.cluster_read)),
            target: "-",
        },
        Row {
            name: "apiserver CPU, sync - status floor: / reads+events",
            value: format!(
                "{:.2} s / {:.2} + {:.2} s",
                initial_cpu.as_secs_f64() - status_floor_cpu.as_secs_f64(),
                costs.cluster_read.as_secs_f64(),
                costs.event.as_secs_f64() * events_written
            ),
            target: "-",
        },
        Row {
            name: "controllers CPU (sync)",
            value: secs(controllers_cpu),
            target: "-",
        },
        Row {
            name: "clients' CPU: floor w/ status / sync",
            value: format!(
                "{} / {}",
                secs(status_floor_client_cpu),
                secs(controllers_cpu + bench_cpu)
            ),
            target: "-",
        },
        Row {
            name: "pusher reconciles per Translation (sync)",
            value: format!(
                "{:.2} ({})",
                pusher_reconciles.values().sum::<f64>() / n_translations.max(1) as f64,
                pusher_reconciles
                    .iter()
                    .filter(|(_, n)| **n > 0.0)
                    .map(|(result, n)| format!("{result} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            target: "-",
        },
        Row {
            name: "events dropped (queue full)",
            value: format!("{events_dropped}"),
            target: "-",
        },
        Row {
            name: "backend requests per resource (initial)",
            value: format!("{per_resource:.2}"),
            target: "<= 1.05",
        },
        Row {
            name: "peak RSS of the controllers",
            value: format!("{:.1} MiB", peak_rss as f64 / 1024.0),
            target: "<= 100 MiB (scale S)",
        },
        Row {
            name: "RSS once converged",
            value: format!("{:.1} MiB", rss_after as f64 / 1024.0),
            target: "-",
        },
        Row {
            name: "cached objects, serialized (lower bound)",
            value: cached.summary(),
            target: "-",
        },
        Row {
            name: "check: flows (failed) / evaluation / read",
            value: format!(
                "{} ({check_failures}) / {} / {}",
                checked.report.flows_checked,
                secs(checked.evaluated),
                secs(checked.read)
            ),
            target: "0 failed",
        },
    ];
    let mut result = json!({
        "scale": {"nodes": args.nodes, "pods": args.pods, "services": args.services,
                  "endpointsPerService": args.endpoints_per_service,
                  "podsWithMacEvery": args.pods_with_mac_every},
        "translations": n_translations,
        "backendResources": resources,
        "floorSeconds": floor_time.as_secs_f64(),
        "initialConvergenceSeconds": initial.as_secs_f64(),
        "convergenceOverFloor": ratio,
        "floorWithStatusSeconds": status_floor_time.as_secs_f64(),
        "convergenceOverFloorWithStatus": status_ratio,
        "timelineFractions": Timeline::FRACTIONS,
        "floorWithStatusTimeline": status_floor_timeline,
        "initialTimeline": initial_timeline,
        "initialRequests": initial_requests,
        "requestsPerResource": per_resource,
        "peakRssKiB": peak_rss,
        "rssAfterSyncKiB": rss_after,
        "cacheContent": cached.json(),
        "apiserverCpuSecondsFloor": floor_cpu.as_secs_f64(),
        "apiserverCpuSecondsFloorWithStatus": status_floor_cpu.as_secs_f64(),
        "apiserverCpuSecondsSync": initial_cpu.as_secs_f64(),
        "controllersCpuSecondsSync": controllers_cpu.as_secs_f64(),
        "benchCpuSecondsSync": bench_cpu.as_secs_f64(),
        "benchCpuSecondsFloorWithStatus": status_floor_client_cpu.as_secs_f64(),
        "apiserverCpuMsPerRequest": {"create": ms(costs.create), "apply": ms(costs.apply),
                                     "statusWrite": ms(costs.status), "event": ms(costs.event)},
        "apiserverCpuSecondsClusterRead": costs.cluster_read.as_secs_f64(),
        "eventsWrittenSync": events_written,
        "eventsDropped": events_dropped,
        "pusherReconcilesSync": pusher_reconciles,
        "apiserverRequestsSync": sync_requests,
        "check": {"flows": checked.report.flows_checked, "failed": check_failures,
                  "byKind": checked.report.by_kind,
                  "unverifiableEndpoints": checked.report.unverifiable_endpoints.len(),
                  "unplugged": checked.report.unplugged.len(),
                  "evaluateSeconds": checked.evaluated.as_secs_f64(),
                  "readSeconds": checked.read.as_secs_f64()},
    });
    if args.only_initial {
        // The floors measured again below start from a clear cluster, and each leaves it so.
        clear_floor(&client, &admin, &wanted).await?;
    }
    if let Some(before) = watched_floor {
        // The sync follows the floors, on an etcd that holds their history: with
        // --only-initial the same floor is measured again after it, and the sync is
        // compared with the mean of the two.
        let after = if args.only_initial {
            eprintln!("bench: measuring the floor with a status write and a second watch again");
            let profile = profile("floor-watched-after");
            Some(measured_floor(&client, &api_url, &admin, &wanted, status, true, profile).await?)
        } else {
            None
        };
        let runs: Vec<&FloorRun> = std::iter::once(&before).chain(after.as_ref()).collect();
        let time = runs.iter().map(|r| r.time).sum::<Duration>() / runs.len() as u32;
        let cpu = runs.iter().map(|r| r.cpu).sum::<Duration>() / runs.len() as u32;
        let watched_ratio = initial.as_secs_f64() / time.as_secs_f64().max(1e-9);
        initial_rows.push(Row {
            name: "floor with a status write and a second watch",
            value: runs
                .iter()
                .map(|r| secs(r.time))
                .collect::<Vec<_>>()
                .join(", then "),
            target: "-",
        });
        initial_rows.push(Row {
            name: "convergence / that floor (its apiserver CPU per Tr.)",
            value: format!("{watched_ratio:.2} ({:.2} ms)", per_translation(cpu)),
            target: "<= 1.05",
        });
        result["floorWatchedSeconds"] = json!(time.as_secs_f64());
        result["floorWatchedRuns"] = json!(runs
            .iter()
            .map(|r| json!({"seconds": r.time.as_secs_f64(),
                            "apiserverCpuSeconds": r.cpu.as_secs_f64(),
                            "benchCpuSeconds": r.client_cpu.as_secs_f64(),
                            "timeline": r.timeline}))
            .collect::<Vec<_>>());
        result["convergenceOverFloorWatched"] = json!(watched_ratio);
        result["apiserverCpuSecondsFloorWatched"] = json!(cpu.as_secs_f64());
    }
    if args.only_initial {
        // The floor before the sync met a younger etcd and apiserver than the sync did:
        // measured again after it (and after the costs and any watched floor), the mean of
        // the two stands where the sync ran.
        eprintln!("bench: measuring the floor with a status write again");
        let profile = profile("floor-status-after");
        let after =
            measured_floor(&client, &api_url, &admin, &wanted, status, false, profile).await?;
        let time = (status_floor_time + after.time) / 2;
        let cpu = (status_floor_cpu + after.cpu) / 2;
        let mean_ratio = initial.as_secs_f64() / time.as_secs_f64().max(1e-9);
        initial_rows.push(Row {
            name: "floor with a status write, again after the sync",
            value: format!(
                "{} ({:.2} ms apiserver CPU per Tr.)",
                secs(after.time),
                per_translation(after.cpu)
            ),
            target: "-",
        });
        initial_rows.push(Row {
            name: "convergence / mean of the two floors with a status write",
            value: format!("{mean_ratio:.2}"),
            target: "<= 1.05",
        });
        result["floorWithStatusAfterSeconds"] = json!(after.time.as_secs_f64());
        result["apiserverCpuSecondsFloorWithStatusAfter"] = json!(after.cpu.as_secs_f64());
        result["floorWithStatusMeanSeconds"] = json!(time.as_secs_f64());
        result["apiserverCpuSecondsFloorWithStatusMean"] = json!(cpu.as_secs_f64());
        result["convergenceOverFloorWithStatusMean"] = json!(mean_ratio);
    }
    if let Some(u) = &unwatched {
        initial_rows.push(Row {
            name: "unwatched sync: converged after / timed at",
            value: format!(
                "{} / {:?} ({} LISTs, the last {})",
                secs(u.not_before),
                u.timed_at,
                u.lists,
                secs(u.confirming_list)
            ),
            target: "-",
        });
        result["unwatchedSync"] = json!({
            "notBeforeSeconds": u.not_before.as_secs_f64(),
            "doneBySeconds": u.done_by.as_secs_f64(),
            "timedAt": u.timed_at,
            "confirmingListSeconds": u.confirming_list.as_secs_f64(),
            "lists": u.lists,
        });
    }
    if args.only_initial {
        report(&args, &initial_rows, &result)?;
        sim.shutdown().await;
        return Ok(());
    }
    // The later phases are timed by the watch.
    let tracker = match tracker {
        Some(tracker) => tracker,
        None => {
            let tracker = ReadyTracker::start(&client);
            tracker.listed().await;
            tracker
        }
    };

    // 5. Restart in sync.
    eprintln!("bench: restart in sync");
    admin.reset_requests().await?;
    let ctl = Controllers::spawn(&kubeconfig, &api_url, &["--resync-period", "20s"])?;
    // A /readyz that never turns 200 is reported, and the phase measured after the timeout.
    let ready = match ctl.wait_ready().await {
        Ok(d) => format!("{:.2} s", d.as_secs_f64()),
        Err(e) => e.to_string(),
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, restart_writes, restart_reads) = backend_counts(&admin).await?;

    // 6. One full resync with nothing changed.
    eprintln!("bench: full resync (waiting 21 s)");
    const WRITES: &str = "midonet_kube_controllers_translator_translation_writes_total";
    const PUSHED: &str = "midonet_kube_controllers_pusher_reconciles_total";
    let w0 = ctl.metric(WRITES, "").await?;
    let p0 = ctl.metric(PUSHED, "result=\"pushed\"").await?;
    admin.reset_requests().await?;
    tokio::time::sleep(Duration::from_secs(21)).await;
    let resync_writes = ctl.metric(WRITES, "").await? - w0;
    let resync_pushed = ctl.metric(PUSHED, "result=\"pushed\"").await? - p0;
    let (resync_requests, _, _) = backend_counts(&admin).await?;

    // 7. Churn.
    let churn = args.churn.min(args.pods);
    eprintln!("bench: churn of {churn} pods");
    let before = admin.state().await?.translation_paths();
    admin.reset_requests().await?;
    let t_churn = Instant::now();
    each_concurrent(0..churn, 16, |i| {
        let api: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(i));
        async move {
            let params = DeleteParams::default().grace_period(0);
            api.delete(&Scenario::pod_name(i), &params).await?;
            Ok(())
        }
    })
    .await?;
    let new_pods = (args.pods..args.pods + churn)
        .map(|i| scenario.pod(i))
        .collect();
    create_all(api_in_namespace_of(&client), new_pods).await?;
    let new_pods = set_pod_ips(&client, &scenario, args.pods..args.pods + churn).await?;
    let deleted: BTreeSet<Key> = (0..churn)
        .map(|i| (scenario.namespace(i), Scenario::pod_name(i)))
        .collect();
    let deleted_pods: Vec<Pod> = pods
        .iter()
        .filter(|p| deleted.contains(&(p.namespace().unwrap_or_default(), p.name_any())))
        .cloned()
        .collect();
    let want = Want {
        count: n_translations,
        present: translation_keys(&nodes, &new_pods),
        absent: translation_keys(&nodes, &deleted_pods),
        ..Want::default()
    };
    let churn_time = wait_converged(&tracker, &admin, &want, t_churn, "churn").await?;
    let after = admin.state().await?.translation_paths();
    let changed = before.symmetric_difference(&after).count();
    let (churn_requests, _, _) = backend_counts(&admin).await?;

    // 7b. NetworkPolicies: one per ten pods, added to the converged cluster.
    let n_policies = args.pods / 10;
    eprintln!("bench: {n_policies} NetworkPolicies");
    admin.reset_requests().await?;
    let t_np = Instant::now();
    let np_objs = (0..n_policies)
        .map(|i| scenario.network_policy(i))
        .collect();
    create_all(api_in_namespace_of(&client), np_objs).await?;
    let want = Want {
        count: n_translations + n_policies,
        ..Want::default()
    };
    let np_time = wait_converged(&tracker, &admin, &want, t_np, "network policies").await?;
    let (np_requests, _, _) = backend_counts(&admin).await?;
    ctl.stop().await?;

    // 8. Translation version bump, under the flow probe.
    eprintln!("bench: translation version bump");
    let bump_floor = bump_floor(&admin.state().await?)?;
    let probe_cluster = load_cluster(&client).await?;
    let probe_flows = probe::select_flows(&probe_cluster, PROBE_SAMPLE);
    let reader = sim.reader();
    let flow_probe = probe::FlowProbe::start(
        probe_flows,
        probe_cluster.attachments(),
        {
            let mut cursor = midonet_sim::ReadCursor::default();
            Box::new(move || reader.changes(&mut cursor))
        },
        PROBE_PERIOD,
    );
    tokio::time::sleep(PROBE_LEAD).await;
    admin.reset_requests().await?;
    let t_bump = Instant::now();
    // Drift verification's GETs are periodic, whatever the bump does: left out here.
    let ctl = Controllers::spawn(
        &kubeconfig,
        &api_url,
        &["--translation-version", "2", "--verify-period", "0"],
    )?;
    let want = Want {
        count: n_translations,
        stale_version: Some("1"),
        ..Want::default()
    };
    let bump_time = wait_converged(&tracker, &admin, &want, t_bump, "version bump").await?;
    let bump_probe = flow_probe.stop().await?;
    eprintln!("bench: version bump probe: {}", bump_probe.summary());
    let (bump_requests, _, _) = backend_counts(&admin).await?;
    let bump_breakdown = admin.requests().await?;
    ctl.stop().await?;

    let rest = vec![
        Row {
            name: "restart in sync: /readyz 200 after",
            value: ready.clone(),
            target: "-",
        },
        Row {
            name: "restart in sync: backend writes",
            value: restart_writes.to_string(),
            target: "0",
        },
        Row {
            name: "restart in sync: backend reads",
            value: restart_reads.to_string(),
            target: "0",
        },
        Row {
            name: "full resync: Translation writes",
            value: format!("{resync_writes}"),
            target: "0",
        },
        Row {
            name: "full resync: pushes",
            value: format!("{resync_pushed}"),
            target: "0",
        },
        Row {
            name: "full resync: backend requests",
            value: resync_requests.to_string(),
            target: "0",
        },
        Row {
            name: "churn: convergence",
            value: secs(churn_time),
            target: "-",
        },
        Row {
            name: "churn: backend requests per changed resource",
            value: format!(
                "{:.2} ({churn_requests}/{changed})",
                churn_requests as f64 / changed.max(1) as f64
            ),
            target: "-",
        },
        Row {
            name: "network policies (1 per 10 pods): convergence",
            value: secs(np_time),
            target: "-",
        },
        Row {
            name: "network policies: backend requests",
            value: format!(
                "{np_requests} ({:.1} per policy)",
                np_requests as f64 / n_policies.max(1) as f64
            ),
            target: "-",
        },
        Row {
            name: "version bump: convergence",
            value: secs(bump_time),
            target: "-",
        },
        Row {
            name: "version bump: backend requests / floor",
            value: format!(
                "{bump_requests} / {} = {:.2}",
                bump_floor.requests,
                bump_requests as f64 / bump_floor.requests.max(1) as f64
            ),
            target: "<= 1.05",
        },
        Row {
            name: "version bump: flows probed / sample period",
            value: format!(
                "{} / {:.0} ms (max {:.0} ms)",
                bump_probe.flows,
                bump_probe.mean_period_seconds * 1000.0,
                bump_probe.max_period_seconds * 1000.0
            ),
            target: "<= 100 ms",
        },
        Row {
            name: "version bump: probe sample time (median / max)",
            value: format!(
                "{:.0} ms / {:.0} ms",
                bump_probe.sample_time.median_seconds * 1000.0,
                bump_probe.sample_time.max_seconds * 1000.0
            ),
            target: "<= 100 ms",
        },
        Row {
            name: "version bump: flows interrupted (max / p99)",
            value: format!(
                "{} ({:.2} s / {:.2} s)",
                bump_probe.interrupted, bump_probe.max_seconds, bump_probe.p99_seconds
            ),
            target: "max <= 1 s",
        },
    ];
    let mut bump_probe_json = serde_json::to_value(&bump_probe)?;
    bump_probe_json["sample"] = serde_json::to_value(PROBE_SAMPLE)?;
    if let Some(flows) = bump_probe_json
        .get_mut("interruptedFlows")
        .and_then(|v| v.as_array_mut())
    {
        flows.truncate(PROBE_LISTED);
    }
    let more = json!({
        "createSeconds": create_time.as_secs_f64(),
        "restartInSync": {"ready": ready, "writes": restart_writes, "reads": restart_reads},
        "fullResync": {"translationWrites": resync_writes, "pushes": resync_pushed,
                       "backendRequests": resync_requests},
        "churn": {"seconds": churn_time.as_secs_f64(), "requests": churn_requests,
                  "changedResources": changed},
        "networkPolicies": {"count": n_policies, "seconds": np_time.as_secs_f64(),
                            "requests": np_requests},
        "versionBump": {"seconds": bump_time.as_secs_f64(), "requests": bump_requests,
                        "floorRequests": bump_floor.requests,
                        "byMethod": bump_breakdown.by_method, "byStatus": bump_breakdown.by_status,
                        "byKind": bump_breakdown.by_kind, "probe": bump_probe_json},
        "totalSeconds": t0.elapsed().as_secs_f64(),
    });
    if let (Some(all), Some(more)) = (result.as_object_mut(), more.as_object()) {
        all.extend(more.clone());
    }
    result["scale"]["churn"] = json!(churn);
    let rows: Vec<Row> = initial_rows.into_iter().chain(rest).collect();
    report(&args, &rows, &result)?;
    sim.shutdown().await;
    Ok(())
}
