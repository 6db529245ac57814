//! The flow probe (`midonet_testkit::probe`) against a running stack: the flows are chosen from
//! this test binary's cluster as it is when the probe starts, and sampled on the
//! simulator's store in-process. For tests that change the backend under traffic (a
//! Translation version bump, a restart) and assert how long any flow was interrupted.
//!
//! ```ignore
//! let probe = support::probe::start(&sim, support::probe::EVERY_FLOW, PERIOD).await;
//! /* ... bump ... */
//! let report = probe.stop().await;
//! support::probe::assert_interrupted_at_most(&report, Duration::from_secs(1));
//! ```

use std::time::Duration;

use midonet_kube_controllers::netcheck::cli::load_cluster;
use midonet_sim::SimHandle;
use midonet_testkit::probe::{select_flows, FlowProbe, ProbeFlow, ProbeReport, SampleSize};

/// Every Service port from every source and a pod on every other node: for the small
/// clusters of the tests.
pub const EVERY_FLOW: SampleSize = SampleSize {
    services_per_source: usize::MAX,
    peers_per_source: usize::MAX,
};

/// A probe running against the stack.
pub struct RunningProbe {
    probe: FlowProbe,
    /// The sampled flows.
    pub flows: Vec<ProbeFlow>,
}

impl RunningProbe {
    /// The sampled flows' names ([`ProbeFlow::name`]), in order.
    pub fn names(&self) -> Vec<String> {
        self.flows.iter().map(ProbeFlow::name).collect()
    }

    /// Takes a last sample and answers what the probe saw.
    pub async fn stop(self) -> ProbeReport {
        let report = self.probe.stop().await.expect("the probe ran");
        eprintln!("probe: {}", report.summary());
        report
    }
}

/// Lists the cluster, picks the flows (`size` per source, at least one flow) and starts
/// sampling `sim`'s store every `period`.
pub async fn start(sim: &SimHandle, size: SampleSize, period: Duration) -> RunningProbe {
    start_without(sim, size, period, None).await
}

/// [`start`], the pods of namespace `skip` taken for no source (the controllers' own pods
/// off the host network, which a rolling update replaces).
pub async fn start_without(
    sim: &SimHandle,
    size: SampleSize,
    period: Duration,
    skip: Option<&str>,
) -> RunningProbe {
    let kube = super::admin_client().await;
    let mut cluster = load_cluster(&kube).await.expect("list the cluster");
    if let Some(skip) = skip {
        cluster
            .pods
            .retain(|p| p.metadata.namespace.as_deref() != Some(skip));
    }
    let flows = select_flows(&cluster, size);
    assert!(!flows.is_empty(), "the cluster offers no flow to probe");
    let reader = sim.reader();
    let probe = FlowProbe::start(
        flows.clone(),
        cluster.attachments(),
        {
            let mut cursor = midonet_sim::ReadCursor::default();
            Box::new(move || reader.changes(&mut cursor))
        },
        period,
    );
    RunningProbe { probe, flows }
}

/// Panics, listing the interrupted flows, if any flow was interrupted longer than `max`.
pub fn assert_interrupted_at_most(report: &ProbeReport, max: Duration) {
    assert!(
        report.max() <= max,
        "a flow was interrupted longer than {max:?}: {}\n{}",
        report.summary(),
        report
            .interrupted_flows
            .iter()
            .map(|f| format!(
                "  {}: {:.2} s ({} outages): {}",
                f.flow, f.longest_seconds, f.outages, f.reason
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
