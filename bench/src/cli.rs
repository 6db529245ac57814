//! The benchmark's command line: the scale of the scenario, its edge, which phases run, and
//! where the JSON and the apiserver's profiles go. Every default is the scale S run of
//! `docs/benchmark.md`.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Clone, Debug)]
#[command(about = "Benchmark midonet-kube-controllers against the MidoNet API simulator")]
pub struct Args {
    #[arg(long, default_value_t = 50)]
    pub nodes: usize,
    #[arg(long, default_value_t = 2000)]
    pub pods: usize,
    #[arg(long, default_value_t = 300)]
    pub services: usize,
    #[arg(long, default_value_t = 4)]
    pub endpoints_per_service: usize,
    /// Every N-th pod carries the `midonet.org/mac-address` annotation, which adds a
    /// MAC-table and an ARP Translation to its pod's; 0 for none, which with
    /// `--only-initial --nodes 100 --pods 8000 --services 900` is the 10,000-Translation
    /// memory variant the target is set on (`docs/benchmark.md`).
    #[arg(long, default_value_t = 2)]
    pub pods_with_mac_every: usize,
    /// Run without the edge: no `--edge-config`, no LoadBalancer pool nor `lbipam`, every
    /// Service ClusterIP (the scenario of the figures measured before the edge).
    #[arg(long)]
    pub no_edge: bool,
    /// Of every N Services, one is NodePort and one LoadBalancer, half of each with
    /// `externalTrafficPolicy: Local` (`Scenario::service_type`; at least 2). Without the
    /// edge every Service is ClusterIP.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    pub edge_services_every: u64,
    /// Pods deleted and as many created in the churn phase (capped at --pods).
    #[arg(long, default_value_t = 500)]
    pub churn: usize,
    /// Pods replaced one by one in the network-readiness phase (each backing a Service,
    /// capped at the pods that do): the sample the latency percentiles are taken over.
    #[arg(long, default_value_t = 600)]
    pub ready_pods: usize,
    /// Pods replaced per second in the network-readiness phase: the churn the latency is
    /// measured under.
    #[arg(long, default_value_t = 20.0)]
    pub ready_rate: f64,
    /// Service ports each source pod of the version bump's flow probe calls
    /// (`midonet_testkit::probe::SampleSize`).
    #[arg(long, default_value_t = 6)]
    pub probe_services_per_source: usize,
    /// Pods on other nodes each source pod of the version bump's flow probe calls.
    #[arg(long, default_value_t = 2)]
    pub probe_peers_per_source: usize,
    /// The nice value of the version bump's flow probe thread (`bench/src/priority.rs`);
    /// 0 leaves it as any other thread.
    #[arg(long, default_value_t = crate::priority::PROBE_NICE, allow_negative_numbers = true)]
    pub probe_nice: i32,
    /// Also write the JSON result here.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// Stop after the initial convergence (floor, convergence, requests, peak RSS, etcd
    /// bytes): for the large-scale memory variant, e.g. `--nodes 100 --pods 8000
    /// --services 900`.
    #[arg(long)]
    pub only_initial: bool,
    /// Stop before the version bump: for the phases before it (the network readiness, say)
    /// in a shorter run.
    #[arg(long, conflicts_with = "only_initial")]
    pub no_bump: bool,
    /// Also measure a third floor: with a status write, and a second Translation watch
    /// standing in for the controllers' informer (`docs/benchmark.md`: what the sync costs
    /// the apiserver beyond the floor's writes).
    #[arg(long)]
    pub watched_floor: bool,
    /// Time the initial sync without the bench's own Translation watch, so that it runs
    /// under as many Translation watchers as the floors (the controllers' informer and the
    /// garbage collector, where the floors have the bench's watch and the garbage
    /// collector): the controllers' count of pushes is polled, a LIST and the simulator
    /// confirm, and the sync is timed at the poll that read the final count (no
    /// timeline; see `converge::unwatched`).
    #[arg(long)]
    pub unwatched_sync: bool,
    /// Write a CPU profile of the kube-apiserver over each floor and the initial sync to
    /// this directory (`floor.pb.gz`, `floor-status.pb.gz`, `sync.pb.gz`,
    /// `floor-status-after.pb.gz`, and with `--watched-floor` `floor-watched.pb.gz`,
    /// `floor-watched-after.pb.gz`; see
    /// `bench/src/profile.rs`). With `--only-initial`.
    #[arg(long, requires = "only_initial")]
    pub apiserver_profile: Option<PathBuf>,
    /// How long each apiserver profile samples: longer than the longest phase profiled.
    #[arg(long, default_value_t = 45)]
    pub apiserver_profile_seconds: u64,
}
