//! Benchmark of the controllers against a real local control plane and the in-process
//! MidoNet API simulator (1 ms added latency). See `docs/benchmark.md` for the method
//! and what each figure means.
//!
//! `cargo build --profile dist --workspace --bins && cargo run --profile dist -p
//! midonet-kube-bench -- --nodes 50 --pods 2000 --services 300` (it runs the controllers
//! binary beside it, of the same profile: `dist` is what the image ships).
//!
//! The phases, in order (each a module): the objects (`objects`), the floors (`floor`),
//! the initial sync and what it leaves (`initial`), the floors again (`floors_after`);
//! then, unless `--only-initial`, a restart, a resync, a churn (`later`), the
//! network-readiness latency under churn (`readiness`), NetworkPolicies (`later`) and
//! the version bump under the flow probe (`bump`). The table and the JSON: `report`. The
//! scenario has an edge, NodePort and LoadBalancer Services unless `--no-edge` (`edge`).

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use kube::Client;
use midonet_sim::admin::{AdminClient, Faults, RequestCounts};
use midonet_sim::{self as sim, SimConfig, SimHandle};
use midonet_testkit::scenario::{Scale, Scenario};
use profile::ApiserverProfile;
use serde_json::json;

use cli::Args;
use report::{merge, Row};

mod apirequests;
mod bump;
mod cli;
mod controllers;
mod controlplane;
mod converge;
mod costs;
mod edge;
mod etcd;
mod firstflow;
mod floor;
mod floors_after;
mod initial;
mod later;
mod memory;
mod objects;
mod priority;
mod profile;
mod readiness;
mod report;
mod tracker;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Pause between measures, so that the apiserver and kube-controller-manager finish with
/// one before the next starts.
const SETTLE: Duration = Duration::from_secs(3);

fn main() -> Res<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

/// What every phase works on: the control plane, the scenario and the simulator.
pub struct Bench {
    pub args: Args,
    pub kubeconfig: PathBuf,
    pub client: Client,
    pub scenario: Scenario,
    pub sim: SimHandle,
    pub admin: AdminClient,
    pub api_url: String,
    /// The client URL of the control plane's etcd.
    pub etcd: String,
    /// The edge the controllers run with (none with `--no-edge`).
    pub edge: Option<edge::BenchEdge>,
}

impl Bench {
    /// Starts the control plane (with the Translation CRD) and the simulator with a host
    /// per node of the scenario and, with the edge, per gateway; writes the edge's
    /// settings.
    async fn start(args: Args) -> Res<Bench> {
        eprintln!("bench: starting the control plane");
        let kubeconfig = controlplane::start()?;
        let client = controlplane::client_for(&kubeconfig).await?;
        controlplane::apply_crd(&client).await?;
        let mut scenario = Scenario::new(
            "bench",
            Scale {
                nodes: args.nodes,
                pods: args.pods,
                services: args.services,
                endpoints_per_service: args.endpoints_per_service,
                namespaces: objects::NAMESPACES,
            },
        );
        scenario.pod_mac_every = args.pods_with_mac_every;
        let edge = (!args.no_edge).then(edge::BenchEdge::write).transpose()?;
        if edge.is_some() {
            scenario.edge_services_every = usize::try_from(args.edge_services_every)?;
        }
        let mut hosts = scenario.hosts.clone();
        hosts.extend(edge.iter().flat_map(|e| e.gateways.iter().cloned()));
        let sim = sim::start(SimConfig {
            hosts,
            faults: Faults {
                latency_ms: 1,
                ..Faults::default()
            },
            ..SimConfig::default()
        })
        .await?;
        let admin = AdminClient::new(sim.admin_url())?;
        let api_url = sim.api_url().to_string();
        Ok(Bench {
            etcd: controlplane::etcd_url()?,
            args,
            kubeconfig,
            client,
            scenario,
            sim,
            admin,
            api_url,
            edge,
        })
    }

    /// Runs the controllers the scenario needs (with its edge, if any), with `extra`
    /// arguments.
    fn spawn_controllers(&self, extra: &[&str]) -> Res<controllers::Controllers> {
        let mut args = edge::controller_args(self.edge.as_ref());
        args.extend(extra.iter().map(|a| a.to_string()));
        controllers::Controllers::spawn(&self.kubeconfig, &self.api_url, &args)
    }

    /// An apiserver profile of the phase `name`, if `--apiserver-profile` asks for them.
    fn profile(&self, name: &str) -> Option<ApiserverProfile> {
        let args = &self.args;
        let dir = args.apiserver_profile.as_ref();
        ApiserverProfile::start(&self.client, dir, args.apiserver_profile_seconds, name)
    }

    /// The simulator's requests since its counts were last reset (logins excluded), of
    /// them the writes, and the reads.
    async fn backend_counts(&self) -> Res<(u64, u64, u64)> {
        Ok(split_counts(&self.admin.requests().await?))
    }
}

/// Of the simulator's `counts`: the requests (logins excluded), the writes, the reads.
fn split_counts(r: &RequestCounts) -> (u64, u64, u64) {
    let writes = r.of_method("POST") + r.of_method("PUT") + r.of_method("DELETE");
    (r.total - r.login, writes, r.of_method("GET"))
}

async fn run(args: Args) -> Res<()> {
    let t0 = Instant::now();
    let bench = Bench::start(args).await?;
    eprintln!("bench: creating objects");
    let objects = objects::create(&bench).await?;
    let (wanted, share) = floor::wanted(&bench, &objects).await?;
    let floors = floor::before_sync(&bench, &wanted).await?;
    let want = tracker::Want {
        count: wanted.len(),
        paths: edge::count_by_kind(&wanted)
            .get("all")
            .map_or(0, |c| c.resources),
        ..tracker::Want::default()
    };
    let sync = initial::sync(&bench, &want).await?;
    let after = initial::after_sync(&bench, &wanted).await?;
    let initial = initial::Initial {
        translations: wanted.len(),
        share: share.as_ref(),
        create_time: objects.create_time,
        floors: &floors,
        sync: &sync,
        after: &after,
    };
    let mut rows = initial.rows(&bench);
    report::progress("initial", &rows);
    let mut result = initial.json(&bench);
    let (more_rows, more) = floors_after::rows_and_json(&bench, &wanted, &initial).await?;
    rows.extend(more_rows);
    merge(&mut result, more);
    if !bench.args.only_initial {
        let tracker = match sync.tracker {
            Some(tracker) => tracker,
            None => {
                let tracker = tracker::ReadyTracker::start(&bench.client);
                tracker.listed().await;
                tracker
            }
        };
        let (later_rows, more) = later_phases(&bench, &tracker, &objects, wanted.len()).await?;
        rows.extend(later_rows);
        merge(&mut result, more);
        merge(
            &mut result,
            json!({"createSeconds": objects.create_time.as_secs_f64(),
                   "totalSeconds": t0.elapsed().as_secs_f64()}),
        );
        result["scale"]["churn"] = json!(bench.args.churn.min(bench.args.pods));
    }
    report::print(&bench.args, &rows, &result)?;
    if let Some(e) = &bench.edge {
        std::fs::remove_file(&e.file)?;
    }
    bench.sim.shutdown().await;
    Ok(())
}

/// The phases after the initial sync, in order; their rows and JSON.
async fn later_phases(
    bench: &Bench,
    tracker: &tracker::ReadyTracker,
    objects: &objects::Objects,
    translations: usize,
) -> Res<(Vec<Row>, serde_json::Value)> {
    let (ctl, restart) = later::restart(bench, translations).await?;
    report::progress("restart", &restart.rows());
    let resync = later::resync(bench, &ctl).await?;
    report::progress("resync", &resync.rows());
    let churn = later::churn(bench, tracker, objects, translations).await?;
    report::progress("churn", &churn.rows());
    let ready = readiness::run(bench, tracker, objects, churn.translations).await?;
    report::progress("network readiness", &ready.rows());
    let policies = later::policies(bench, tracker, ready.translations).await?;
    report::progress("NetworkPolicies", &policies.rows());
    ctl.stop(&bench.client).await?;
    let mut rows = restart.rows();
    rows.extend(resync.rows());
    rows.extend(churn.rows());
    rows.extend(ready.rows());
    rows.extend(policies.rows());
    let mut result = later::json(&restart, &resync, &churn, &policies);
    merge(&mut result, ready.json());
    if !bench.args.no_bump {
        let bump = bump::run(bench, tracker, ready.translations).await?;
        rows.extend(bump.rows());
        merge(&mut result, bump.json()?);
    }
    Ok((rows, result))
}
