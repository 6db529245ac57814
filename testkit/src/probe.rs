//! The flow probe: while something changes the backend (a Translation version bump, a
//! restart), evaluate a fixed sample of flows on the live topology many times a second with
//! the data-plane model, and report how long each flow was interrupted.
//!
//! - **Which flows** ([`select_flows`]) is decided once, from the Kubernetes objects at the
//!   start: one source pod per node (the first by name); from each, the cluster IP of a
//!   bounded number of Service ports (the Service ports sorted by name, each source starting
//!   at its own offset so that the sources together cover as many as possible) and one pod
//!   on each of a bounded number of other nodes (the next nodes in name order). With
//!   NetworkPolicies, a Service flow counts only the endpoints the policies admit from its
//!   source, a pod flow goes to the first pod of the peer node they admit, and a flow they
//!   admit nowhere is not sampled.
//! - **What identifies a flow** survives a version bump, in which every backend id changes:
//!   the source is the workload behind a host interface (the host and the interface name its
//!   pod's port is bound to, `Cluster::attachments`), the destination an address and port.
//!   Each sample injects at whichever port is bound to that interface then.
//! - **What "ok" means** ([`judge`]) is `check`'s reading of a flow, on every path a random
//!   choice could send the connection on: the forward packet reaches one of the workloads
//!   Kubernetes sends it to (the pod; a ready endpoint of the Service the policies admit),
//!   and the reply comes back to the client from the address it sent to. A path dropped on
//!   its way to an endpoint the policies refuse (or that no workload owns) is what Kubernetes
//!   promises there, not an interruption. An unbound interface, any other dropped path, a
//!   delivery elsewhere or a reply that does not come back is an interruption.
//! - **How long** ([`Interruptions`]): an outage of a flow starts at the first sample that
//!   finds it not ok and ends at the next sample that finds it ok; one still open at the end
//!   lasts until the last sample. The real outage is within one sample period of that, and
//!   lasted at most from the last sample that found the flow ok before it to the first that
//!   found it ok again: the report gives that bound too (`max_bound_seconds`), which holds
//!   however far apart the samples were.
//!
//! - **What a sample judges** ([`Verdicts`]): the first sample judges every flow; after
//!   that, a sample whose reading changed the topology judges again only the flows whose
//!   last trace read something the changes touched (`midonet_dataplane::reads`); the
//!   others keep their verdicts, which a full judgement would give again
//!   (`tests/probe_changes.rs`). The report counts the flows judged.
//!
//! The pure parts (selection, judgement, accounting) are unit-tested here; [`FlowProbe`]
//! runs them on a thread over any source of the backend's changed records (the simulator's
//! in-process `midonet_sim::StoreReader::changes` in the benchmark and the tests), keeping a
//! `midonet_dataplane::LiveTopology` up to date instead of rebuilding it at each sample.
//!
//! It lives with the test and benchmark tooling, not with the simulator nor in the
//! controllers' library: it reads the backend through a [`ResourceSource`] closure, so it
//! does not depend on the simulator (the callers plug the simulator's store in), and no
//! subcommand of the product runs it; only the benchmark and the tests measure
//! interruptions with it. Its reading of a flow is `check`'s, built from the same data-plane
//! model (`midonet-dataplane`), which is all it shares with `netcheck`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use midonet_dataplane::check::{CLIENT_PORT, POD_PORT};
use midonet_dataplane::cluster::ServiceAddressKind;
use midonet_dataplane::policy::{Party, Policies};
use midonet_dataplane::{
    trace_reading, trace_without_hops, Attachment, Changes, Cluster, FlowKind, LiveTopology, Probe,
    Protocol, Reads, RecordChange, RuleOrder, SocketV4, Topology, Trace, TraceError, Verdict,
};
use midonet_translators::model::Resource;
use serde::Serialize;

// ---------------------------------------------------------------- flows

/// How many flows to sample per source pod (one source per node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SampleSize {
    /// Service ports (at their cluster IP) each source calls; capped at the number of
    /// Service ports with an endpoint.
    pub services_per_source: usize,
    /// Other nodes whose pods each source calls; capped at the number of other nodes.
    pub peers_per_source: usize,
}

/// One sampled flow.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeFlow {
    pub kind: FlowKind,
    /// The source pod, behind its host interface.
    pub from: Attachment,
    pub to: SocketV4,
    /// `pod/NS/NAME` or `svc/NS/NAME:PORT (name)`.
    pub to_name: String,
    pub protocol: Protocol,
    /// Who may receive it: (workload name, address it receives on).
    pub receivers: BTreeSet<(String, SocketV4)>,
    /// Endpoint addresses a path may be dropped on its way to: the policies refuse them,
    /// or no workload owns them.
    pub refused: BTreeSet<Ipv4Addr>,
}

impl ProbeFlow {
    /// `pod/a/x -> svc/a/web:80 (http) 10.96.0.5:80 tcp`.
    pub fn name(&self) -> String {
        format!(
            "{} -> {} {} {}",
            self.from.name, self.to_name, self.to, self.protocol
        )
    }
}

/// The pod an attachment name (`pod/NS/NAME`) stands for.
fn pod_of<'a>(cluster: &'a Cluster, attachment: &str) -> Option<&'a Pod> {
    let (ns, name) = attachment.strip_prefix("pod/")?.split_once('/')?;
    cluster.pods.iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name)
    })
}

/// The fixed sample of flows (see the module docs), in a stable order: by source node
/// name, then Service flows, then pod flows.
pub fn select_flows(cluster: &Cluster, size: SampleSize) -> Vec<ProbeFlow> {
    let attachments = cluster.attachments();
    let policies = Policies {
        policies: &cluster.network_policies,
        namespaces: &cluster.namespaces,
    };
    let party = |a: &Attachment, ip: Ipv4Addr| match pod_of(cluster, &a.name) {
        Some(p) => Party::Pod(p, ip),
        None => Party::Address(ip),
    };
    // Pods by node (name order), nodes by name.
    let node_of_host: BTreeMap<_, &str> = attachments
        .iter()
        .filter(|a| a.name.starts_with("node/"))
        .map(|a| (a.host, a.name.as_str()))
        .collect();
    let mut pods_by_node: BTreeMap<&str, Vec<&Attachment>> = BTreeMap::new();
    for a in attachments.iter().filter(|a| a.name.starts_with("pod/")) {
        if let Some(node) = node_of_host.get(&a.host) {
            pods_by_node.entry(node).or_default().push(a);
        }
    }
    for pods in pods_by_node.values_mut() {
        pods.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let nodes: Vec<&Vec<&Attachment>> = pods_by_node.values().collect();
    let by_ip: BTreeMap<Ipv4Addr, &Attachment> = attachments
        .iter()
        .flat_map(|a| a.ips.iter().map(move |ip| (*ip, a)))
        .collect();
    let mut services: Vec<_> = cluster
        .service_ports()
        .into_iter()
        .filter(|sp| sp.via == ServiceAddressKind::ClusterIp && !sp.endpoints.is_empty())
        .collect();
    services.sort_by_key(|sp| sp.display());

    let mut flows = Vec::new();
    let per_source = size.services_per_source.min(services.len());
    for (k, pods) in nodes.iter().enumerate() {
        let Some(src) = pods.first().copied() else {
            continue;
        };
        let Some(src_ip) = src.primary_ip() else {
            continue;
        };
        let client = party(src, src_ip);
        // Service ports from this source's offset on, skipping those the policies close
        // entirely, until enough are taken.
        let offset = (k * per_source) % services.len().max(1);
        let mut taken = 0;
        for sp in services.iter().cycle().skip(offset).take(services.len()) {
            if taken == per_source {
                break;
            }
            let mut receivers = BTreeSet::new();
            let mut refused = BTreeSet::new();
            for ep in &sp.endpoints {
                match by_ip.get(&ep.ip) {
                    Some(a) if policies.allows(client, party(a, ep.ip), ep.port, sp.protocol) => {
                        receivers.insert((a.name.clone(), *ep));
                    }
                    _ => {
                        refused.insert(ep.ip);
                    }
                }
            }
            if receivers.is_empty() {
                continue;
            }
            taken += 1;
            flows.push(ProbeFlow {
                kind: FlowKind::PodToService,
                from: src.clone(),
                to: sp.address,
                to_name: sp.display(),
                protocol: sp.protocol,
                receivers,
                refused,
            });
        }
        // Pods on the next nodes in name order.
        let peers = size.peers_per_source.min(nodes.len().saturating_sub(1));
        for step in 1..=peers {
            let peer = nodes[(k + step) % nodes.len()];
            let dst = peer.iter().find_map(|a| {
                let ip = a.primary_ip()?;
                policies
                    .allows(client, party(a, ip), POD_PORT, Protocol::Tcp)
                    .then_some((a, ip))
            });
            let Some((dst, ip)) = dst else { continue };
            let to = SocketV4::new(ip, POD_PORT);
            flows.push(ProbeFlow {
                kind: FlowKind::PodToPod,
                from: src.clone(),
                to,
                to_name: dst.name.clone(),
                protocol: Protocol::Tcp,
                receivers: BTreeSet::from([(dst.name.clone(), to)]),
                refused: BTreeSet::new(),
            });
        }
    }
    flows
}

/// Whether `flow` works on `topo` (see the module docs); `Err` says why not.
pub fn judge(topo: &Topology, flow: &ProbeFlow) -> Result<(), String> {
    let probe = Probe::new(flow.from.name.clone(), flow.to, flow.protocol, CLIENT_PORT);
    verdict_on(flow, trace_without_hops(topo, &probe))
}

/// [`judge`], and what its trace read of `topo` (`midonet_dataplane::reads`): changes
/// that touch none of it leave the verdict as it is.
pub fn judge_reading(topo: &Topology, flow: &ProbeFlow) -> (Result<(), String>, Reads) {
    let probe = Probe::new(flow.from.name.clone(), flow.to, flow.protocol, CLIENT_PORT);
    let (traced, reads) = trace_reading(topo, &probe);
    (verdict_on(flow, traced), reads)
}

/// Whether `traced` shows `flow` working (see the module docs); `Err` says why not.
fn verdict_on(flow: &ProbeFlow, traced: Result<Trace, TraceError>) -> Result<(), String> {
    let t = traced.map_err(|e| e.to_string())?;
    let mut delivered = false;
    for p in &t.paths {
        match (&p.forward.delivered_to, p.forward.received) {
            (Some(w), Some(received)) => {
                if !flow.receivers.contains(&(w.clone(), received.dst)) {
                    return Err(format!(
                        "delivered to {w} {}, which Kubernetes does not send it to",
                        received.dst
                    ));
                }
                if !p.works {
                    return Err(match p.client_sees {
                        Some(seen) => format!("the client sees the reply from {seen}"),
                        None => format!(
                            "the reply does not come back: {}",
                            p.reply
                                .as_ref()
                                .and_then(|r| r.drop_reason.clone())
                                .unwrap_or_else(|| "delivered elsewhere".into())
                        ),
                    });
                }
                delivered = true;
            }
            _ if p.forward.verdict == Verdict::Unsupported => {
                return Err(format!(
                    "the model cannot tell: {}",
                    p.forward
                        .unsupported
                        .as_deref()
                        .unwrap_or("no reason given")
                ));
            }
            _ => {
                let to_refused = p
                    .forward
                    .dropped_packet
                    .is_some_and(|d| flow.refused.contains(&d.dst.ip));
                if !to_refused {
                    return Err(format!(
                        "dropped: {}",
                        p.forward
                            .drop_reason
                            .as_deref()
                            .unwrap_or("no reason given")
                    ));
                }
            }
        }
    }
    if delivered {
        Ok(())
    } else {
        Err("delivered nowhere".into())
    }
}

/// [`judge`] of every flow, in order. Flows are independent: they are judged in as many
/// parts as there are cores, each on its own thread.
pub fn judge_all(topo: &Topology, flows: &[ProbeFlow]) -> Vec<Result<(), String>> {
    on_every_core(flows, |f| judge(topo, f))
}

/// `f` of every item, in order, in as many parts as there are cores, each on its own
/// thread.
fn on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16);
    if threads == 1 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let per_thread = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let parts: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// The verdict on each flow of a sample, with what its trace read: after a batch of
/// changes only the flows whose trace read something the batch touched are judged again
/// (`midonet_dataplane::reads`); the others keep their verdict, which a full judgement
/// would give again.
#[derive(Clone, Debug)]
pub struct Verdicts {
    judged: Vec<(Result<(), String>, Reads)>,
}

impl Verdicts {
    /// Every flow of `flows` judged on `topo` ([`judge_reading`]).
    pub fn of(topo: &Topology, flows: &[ProbeFlow]) -> Verdicts {
        Verdicts {
            judged: on_every_core(flows, |f| judge_reading(topo, f)),
        }
    }

    /// After a batch of changes that touched `touched` made `topo` (with the same
    /// `flows` as before): judges again the flows it touches; how many.
    pub fn update(&mut self, topo: &Topology, flows: &[ProbeFlow], touched: &Changes) -> usize {
        let stale: Vec<usize> = (0..flows.len())
            .filter(|i| self.judged.get(*i).is_none_or(|(_, r)| touched.touches(r)))
            .collect();
        self.judged
            .resize_with(flows.len(), || (Err("not judged".into()), Reads::default()));
        let again = on_every_core(&stale, |i| judge_reading(topo, &flows[*i]));
        for (i, v) in stale.iter().zip(again) {
            self.judged[*i] = v;
        }
        stale.len()
    }

    /// The verdicts, in the flows' order.
    pub fn ok(&self) -> Vec<Result<(), String>> {
        self.judged.iter().map(|(v, _)| v.clone()).collect()
    }
}

/// The live topology of `resources` (rules in evaluation order, as a listing gives them)
/// with `attachments` plugged in.
pub fn topology(resources: Vec<Resource>, attachments: &[Attachment]) -> Topology {
    Topology::new(resources, RuleOrder::Listed, attachments.iter().cloned())
}

// ---------------------------------------------------------------- accounting

/// One flow's outages so far.
#[derive(Clone, Debug, Default, PartialEq)]
struct FlowOutages {
    /// When the current outage started (the first sample that found the flow not ok).
    open_since: Option<Duration>,
    /// The last sample that found the flow ok (during an outage, the one before it).
    last_ok: Option<Duration>,
    longest: Duration,
    /// The longest span from the last sample that found the flow ok before an outage to
    /// the first that found it ok again: what the outage lasted at most.
    longest_bound: Duration,
    /// When the longest outage started.
    longest_since: Duration,
    total: Duration,
    outages: usize,
    /// Why the first sample of the latest outage found it not ok.
    reason: Option<String>,
}

impl FlowOutages {
    fn close(&mut self, at: Duration) {
        if let Some(start) = self.open_since.take() {
            // Down from the first sample: nothing earlier bounds it.
            let up = self.last_ok.unwrap_or(start);
            self.longest_bound = self.longest_bound.max(at.saturating_sub(up));
            let d = at.saturating_sub(start);
            if d > self.longest || self.outages == 1 {
                self.longest_since = start;
            }
            self.longest = self.longest.max(d);
            self.total += d;
        }
    }
}

/// Per-flow outage accounting over a series of samples, each a timestamp (time since the
/// probe started) and, per flow, ok or why not.
#[derive(Clone, Debug, Default)]
pub struct Interruptions {
    flows: Vec<FlowOutages>,
    first: Option<Duration>,
    last: Option<Duration>,
    samples: usize,
    longest_gap: Duration,
    /// Flows the first sample found not ok.
    down_at_start: usize,
    /// How long each sample took, in parts.
    times: Vec<SampleTime>,
    initial_read: Duration,
}

/// How long one sample took: reading the changes, applying them to the topology, judging
/// the flows; when it started (since the probe started), how many records changed and how
/// many flows it judged (the others kept their verdicts).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SampleTime {
    pub at: Duration,
    pub read: Duration,
    pub apply: Duration,
    pub judge: Duration,
    pub changes: usize,
    pub judged: usize,
}

/// The longest sample: when it started (seconds since the probe started), its parts'
/// times in seconds, the records it read changed and the flows it judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LongestSample {
    pub started_seconds: f64,
    pub read_seconds: f64,
    pub apply_seconds: f64,
    pub judge_seconds: f64,
    pub changes: usize,
    pub judged: usize,
}

impl From<&SampleTime> for LongestSample {
    fn from(t: &SampleTime) -> LongestSample {
        LongestSample {
            started_seconds: t.at.as_secs_f64(),
            read_seconds: t.read.as_secs_f64(),
            apply_seconds: t.apply.as_secs_f64(),
            judge_seconds: t.judge.as_secs_f64(),
            changes: t.changes,
            judged: t.judged,
        }
    }
}

impl SampleTime {
    pub fn total(&self) -> Duration {
        self.read + self.apply + self.judge
    }
}

/// The median and the maximum of a series of durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    pub median_seconds: f64,
    pub max_seconds: f64,
}

impl Timing {
    /// Of `times`; the median of an even count is the upper middle one.
    fn of(mut times: Vec<Duration>) -> Timing {
        times.sort();
        Timing {
            median_seconds: times
                .get(times.len() / 2)
                .copied()
                .unwrap_or_default()
                .as_secs_f64(),
            max_seconds: times.last().copied().unwrap_or_default().as_secs_f64(),
        }
    }
}

/// One interrupted flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupted {
    pub flow: String,
    /// The longest outage and the sum of all, in seconds.
    pub longest_seconds: f64,
    /// The longest span from the last sample that found it ok before an outage to the
    /// first that found it ok again: what any of its outages lasted at most.
    pub longest_bound_seconds: f64,
    /// When the longest outage started, in seconds since the probe started (its first
    /// sample is about a second before the work it watches).
    pub longest_started_seconds: f64,
    pub total_seconds: f64,
    pub outages: usize,
    /// Why the first sample of its latest outage found it not ok.
    pub reason: String,
}

/// What the probe saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub flows: usize,
    pub samples: usize,
    /// From the first sample to the last.
    pub duration_seconds: f64,
    /// Mean time between samples, and the longest.
    pub mean_period_seconds: f64,
    pub max_period_seconds: f64,
    /// How long reading, parsing and indexing every record took, before the first sample.
    pub initial_read_seconds: f64,
    /// How long a sample took (reading the changes, applying them and judging), and each
    /// part of it; a sample longer than the period stretches the period.
    pub sample_time: Timing,
    pub read_time: Timing,
    pub apply_time: Timing,
    pub judge_time: Timing,
    /// Flows judged over every sample; each sample keeps the verdicts of the flows whose
    /// traces read nothing that changed.
    pub judged_flows: usize,
    /// Samples that judged at least one flow.
    pub judging_samples: usize,
    pub longest_sample: LongestSample,
    /// Flows found not ok at least once.
    pub interrupted: usize,
    /// Of those, the flows the first sample already found not ok: broken before whatever
    /// the probe watched began.
    pub down_at_start: usize,
    /// Of the per-flow longest outage, over all flows (uninterrupted ones count 0): the
    /// maximum and the 99th percentile (nearest rank).
    pub max_seconds: f64,
    pub p99_seconds: f64,
    /// The longest outage any flow can have had: of each flow's outages, the span from
    /// the last sample that found it ok to the first that found it ok again (the real
    /// outage lies within it, whatever the samples' spacing).
    pub max_bound_seconds: f64,
    /// When the interrupted flows' longest outages started, the earliest and the latest, in
    /// seconds since the probe started (both 0 when no flow was interrupted).
    pub longest_started_first_seconds: f64,
    pub longest_started_last_seconds: f64,
    /// Every interrupted flow, longest outage first.
    pub interrupted_flows: Vec<Interrupted>,
}

impl ProbeReport {
    /// The longest outage of any flow.
    pub fn max(&self) -> Duration {
        Duration::from_secs_f64(self.max_seconds)
    }

    /// The entry of the flow named `name` ([`ProbeFlow::name`]), if it was interrupted.
    pub fn flow(&self, name: &str) -> Option<&Interrupted> {
        self.interrupted_flows.iter().find(|f| f.flow == name)
    }

    /// One line for a log or a table.
    pub fn summary(&self) -> String {
        format!(
            "{} flows, {} samples every {:.0} ms (max {:.0} ms) taking {:.0} ms (max {:.0} ms) \
             over {:.1} s: {} interrupted ({} from the start), max {:.2} s (at most {:.2} s), \
             p99 {:.2} s; the longest sample at {:.1} s: {} records read in {:.0} ms, applied in \
             {:.0} ms, {} flows judged in {:.0} ms",
            self.flows,
            self.samples,
            self.mean_period_seconds * 1000.0,
            self.max_period_seconds * 1000.0,
            self.sample_time.median_seconds * 1000.0,
            self.sample_time.max_seconds * 1000.0,
            self.duration_seconds,
            self.interrupted,
            self.down_at_start,
            self.max_seconds,
            self.max_bound_seconds,
            self.p99_seconds,
            self.longest_sample.started_seconds,
            self.longest_sample.changes,
            self.longest_sample.read_seconds * 1000.0,
            self.longest_sample.apply_seconds * 1000.0,
            self.longest_sample.judged,
            self.longest_sample.judge_seconds * 1000.0,
        )
    }
}

impl Interruptions {
    pub fn new(flows: usize) -> Interruptions {
        Interruptions {
            flows: vec![FlowOutages::default(); flows],
            ..Interruptions::default()
        }
    }

    /// Records one sample taken at `at` (later than every earlier one): `ok[i]` for flow
    /// `i`, `Err(why)` when it is not ok. Flows beyond `ok` are taken as not ok.
    pub fn record(&mut self, at: Duration, ok: &[Result<(), String>]) {
        if let Some(last) = self.last {
            self.longest_gap = self.longest_gap.max(at.saturating_sub(last));
        }
        if self.first.is_none() {
            self.first = Some(at);
            self.down_at_start = (0..self.flows.len())
                .filter(|i| !matches!(ok.get(*i), Some(Ok(()))))
                .count();
        }
        self.last = Some(at);
        self.samples += 1;
        for (i, f) in self.flows.iter_mut().enumerate() {
            match ok.get(i) {
                Some(Ok(())) => {
                    f.close(at);
                    f.last_ok = Some(at);
                }
                bad => {
                    if f.open_since.is_none() {
                        f.open_since = Some(at);
                        f.outages += 1;
                        f.reason = Some(match bad {
                            Some(Err(why)) => why.clone(),
                            _ => "not evaluated".into(),
                        });
                    }
                }
            }
        }
    }

    /// Records how long a sample took.
    pub fn timed(&mut self, time: SampleTime) {
        self.times.push(time);
    }

    /// Records how long reading the whole backend took before the first sample.
    pub fn initial_read(&mut self, time: Duration) {
        self.initial_read = time;
    }

    /// The report; outages still open count up to the last sample. `names[i]` names flow `i`.
    pub fn report(&self, names: &[String]) -> ProbeReport {
        let last = self.last.unwrap_or_default();
        let closed: Vec<FlowOutages> = self
            .flows
            .iter()
            .map(|f| {
                let mut f = f.clone();
                f.close(last);
                f
            })
            .collect();
        let mut longest: Vec<Duration> = closed.iter().map(|f| f.longest).collect();
        longest.sort();
        let p99 = match longest.len() {
            0 => Duration::ZERO,
            n => longest[(n * 99).div_ceil(100).max(1) - 1],
        };
        let mut interrupted: Vec<Interrupted> = closed
            .iter()
            .enumerate()
            .filter(|(_, f)| f.outages > 0)
            .map(|(i, f)| Interrupted {
                flow: names.get(i).cloned().unwrap_or_else(|| format!("flow {i}")),
                longest_seconds: f.longest.as_secs_f64(),
                longest_bound_seconds: f.longest_bound.as_secs_f64(),
                longest_started_seconds: f.longest_since.as_secs_f64(),
                total_seconds: f.total.as_secs_f64(),
                outages: f.outages,
                reason: f.reason.clone().unwrap_or_default(),
            })
            .collect();
        interrupted.sort_by(|a, b| {
            b.longest_seconds
                .total_cmp(&a.longest_seconds)
                .then_with(|| a.flow.cmp(&b.flow))
        });
        let duration = last.saturating_sub(self.first.unwrap_or_default());
        let started = interrupted.iter().map(|f| f.longest_started_seconds);
        let first_started = started.clone().reduce(f64::min).unwrap_or_default();
        let last_started = started.reduce(f64::max).unwrap_or_default();
        ProbeReport {
            flows: self.flows.len(),
            samples: self.samples,
            duration_seconds: duration.as_secs_f64(),
            mean_period_seconds: if self.samples > 1 {
                duration.as_secs_f64() / (self.samples - 1) as f64
            } else {
                0.0
            },
            max_period_seconds: self.longest_gap.as_secs_f64(),
            initial_read_seconds: self.initial_read.as_secs_f64(),
            sample_time: Timing::of(self.times.iter().map(SampleTime::total).collect()),
            read_time: Timing::of(self.times.iter().map(|t| t.read).collect()),
            apply_time: Timing::of(self.times.iter().map(|t| t.apply).collect()),
            judge_time: Timing::of(self.times.iter().map(|t| t.judge).collect()),
            judged_flows: self.times.iter().map(|t| t.judged).sum(),
            judging_samples: self.times.iter().filter(|t| t.judged > 0).count(),
            longest_sample: self
                .times
                .iter()
                .max_by_key(|t| t.total())
                .map(LongestSample::from)
                .unwrap_or_default(),
            interrupted: interrupted.len(),
            down_at_start: self.down_at_start,
            max_seconds: longest.last().copied().unwrap_or_default().as_secs_f64(),
            p99_seconds: p99.as_secs_f64(),
            max_bound_seconds: closed
                .iter()
                .map(|f| f.longest_bound)
                .max()
                .unwrap_or_default()
                .as_secs_f64(),
            longest_started_first_seconds: first_started,
            longest_started_last_seconds: last_started,
            interrupted_flows: interrupted,
        }
    }
}

// ---------------------------------------------------------------- the running probe

/// Where the probe reads the backend from, at each sample: the records that changed since
/// the previous call, with their resources now (rules in evaluation order), and the ones
/// gone (`midonet_dataplane::RecordChange`); the first call reports every record, and so
/// does the call after an error. The simulator's `StoreReader::changes` is one. An error
/// makes that sample count every flow as not ok.
pub type ResourceSource = Box<dyn FnMut() -> Result<Vec<RecordChange>, String> + Send>;

/// A probe sampling on its own thread until [`FlowProbe::stop`].
pub struct FlowProbe {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<ProbeReport>>,
}

impl FlowProbe {
    /// Starts sampling `flows` every `period` (or as fast as a sample takes, if longer):
    /// each sample applies what `source` reports changed to the topology it keeps (with
    /// `attachments`, the cluster's workloads from `Cluster::attachments`, plugged in) and
    /// judges on it the flows the changes touched ([`Verdicts`]). Only the changed
    /// records are parsed and re-indexed, so a sample costs the changes and the flows
    /// they touch, not a rebuild; the report has how long samples took.
    pub fn start(
        flows: Vec<ProbeFlow>,
        attachments: Vec<Attachment>,
        mut source: ResourceSource,
        period: Duration,
    ) -> FlowProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let names: Vec<String> = flows.iter().map(ProbeFlow::name).collect();
            let mut acc = Interruptions::new(flows.len());
            // Every record is read, parsed and indexed before the first sample, so that
            // the samples, the first included, read only changes.
            let t = Instant::now();
            let mut live = LiveTopology::new(attachments.iter().cloned());
            if let Ok(changes) = source() {
                live.apply(changes);
            }
            acc.initial_read(t.elapsed());
            let started = Instant::now();
            // The verdicts on the topology as it is, once a sample judged it.
            let mut verdicts: Option<Verdicts> = None;
            loop {
                let at = started.elapsed();
                let read = source();
                let read_at = started.elapsed();
                let (ok, applied_at, judged, changed) = match read {
                    Ok(changes) => {
                        let changed = changes.len();
                        let touched = (!changes.is_empty()).then(|| live.apply(changes));
                        let applied_at = started.elapsed();
                        // Only the flows whose traces read what changed are judged again.
                        let judged = match (&mut verdicts, touched) {
                            (Some(v), Some(touched)) => v.update(live.topology(), &flows, &touched),
                            (Some(_), None) => 0,
                            (None, _) => flows.len(),
                        };
                        let v =
                            verdicts.get_or_insert_with(|| Verdicts::of(live.topology(), &flows));
                        (v.ok(), applied_at, judged, changed)
                    }
                    Err(e) => {
                        // The source starts over with every record.
                        live = LiveTopology::new(attachments.iter().cloned());
                        verdicts = None;
                        let why = format!("cannot read the backend: {e}");
                        (vec![Err(why); flows.len()], read_at, 0, 0)
                    }
                };
                let done = started.elapsed();
                acc.record(at, &ok);
                acc.timed(SampleTime {
                    at,
                    read: read_at - at,
                    apply: applied_at - read_at,
                    judge: done - applied_at,
                    changes: changed,
                    judged,
                });
                // The last sample is taken after the stop was asked for, so that the
                // report ends with the state at the stop.
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let next = at + period;
                while started.elapsed() < next && !stopped.load(Ordering::SeqCst) {
                    std::thread::sleep(
                        next.saturating_sub(started.elapsed())
                            .min(Duration::from_millis(10)),
                    );
                }
            }
            acc.report(&names)
        });
        FlowProbe {
            stop,
            thread: Some(thread),
        }
    }

    /// Takes one last sample and answers the report.
    pub async fn stop(mut self) -> Result<ProbeReport, String> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().ok_or("the probe was already stopped")?;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(|e| format!("cannot wait for the probe: {e}"))?
            .map_err(|_| "the probe thread panicked".to_string())
    }
}

impl Drop for FlowProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn ok() -> Result<(), String> {
        Ok(())
    }

    fn bad() -> Result<(), String> {
        Err("down".into())
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("f{i}")).collect()
    }

    #[test]
    fn outages_run_from_the_first_bad_sample_to_the_next_good_one() {
        let mut acc = Interruptions::new(3);
        // f0 always ok; f1 down from 100 to 400 and from 600 to 700; f2 down from 300 on.
        let f1 = [ok(), bad(), bad(), bad(), ok(), ok(), bad(), ok(), ok()];
        let f2 = [ok(), ok(), ok(), bad(), bad(), bad(), bad(), bad(), bad()];
        for (i, (a, b)) in f1.iter().zip(f2.iter()).enumerate() {
            acc.record(ms(100 * i as u64), &[ok(), a.clone(), b.clone()]);
        }
        let r = acc.report(&names(3));
        assert_eq!(r.flows, 3);
        assert_eq!(r.samples, 9);
        assert_eq!(r.interrupted, 2);
        assert_eq!(r.down_at_start, 0);
        let f1 = r.flow("f1").unwrap();
        assert_eq!(f1.outages, 2);
        assert!((f1.longest_seconds - 0.3).abs() < 1e-9, "{f1:?}");
        assert!((f1.total_seconds - 0.4).abs() < 1e-9, "{f1:?}");
        // Its longest outage is the first one; a later, shorter one does not move it.
        assert!((f1.longest_started_seconds - 0.1).abs() < 1e-9, "{f1:?}");
        // Still open at the end: counts up to the last sample (800 ms).
        let f2 = r.flow("f2").unwrap();
        assert_eq!(f2.outages, 1);
        assert!((f2.longest_seconds - 0.5).abs() < 1e-9, "{f2:?}");
        assert_eq!(f2.reason, "down");
        assert!((f2.longest_started_seconds - 0.3).abs() < 1e-9, "{f2:?}");
        assert!((r.longest_started_first_seconds - 0.1).abs() < 1e-9);
        assert!((r.longest_started_last_seconds - 0.3).abs() < 1e-9);
        assert!(r.flow("f0").is_none());
        assert!((r.max_seconds - 0.5).abs() < 1e-9);
        // Longest first.
        assert_eq!(r.interrupted_flows[0].flow, "f2");
        assert!((r.duration_seconds - 0.8).abs() < 1e-9);
        assert!((r.mean_period_seconds - 0.1).abs() < 1e-9);
        assert!((r.max_period_seconds - 0.1).abs() < 1e-9);
    }

    #[test]
    fn an_outage_lasted_at_most_from_the_last_good_sample_to_the_next_good_one() {
        let mut acc = Interruptions::new(2);
        // f0: ok at 0 and 100, down at 400 (a long sample before it), ok again at 450.
        // f1: down from the first sample (0) to 100: nothing earlier bounds it.
        for (at, f0, f1) in [
            (0, ok(), bad()),
            (100, ok(), ok()),
            (400, bad(), ok()),
            (450, ok(), ok()),
        ] {
            acc.record(ms(at), &[f0, f1]);
        }
        let r = acc.report(&names(2));
        let f0 = r.flow("f0").unwrap();
        assert!((f0.longest_seconds - 0.05).abs() < 1e-9, "{f0:?}");
        assert!((f0.longest_bound_seconds - 0.35).abs() < 1e-9, "{f0:?}");
        let f1 = r.flow("f1").unwrap();
        assert!((f1.longest_bound_seconds - 0.1).abs() < 1e-9, "{f1:?}");
        assert!((r.max_seconds - 0.1).abs() < 1e-9);
        assert!((r.max_bound_seconds - 0.35).abs() < 1e-9);
    }

    #[test]
    fn p99_is_the_nearest_rank_over_every_flow() {
        // 200 flows: 197 never interrupted, three down for 1, 2 and 3 samples.
        let mut acc = Interruptions::new(200);
        for t in 0..5u64 {
            let mut s = vec![ok(); 200];
            if t == 1 {
                s[0] = bad();
            }
            if (1..=2).contains(&t) {
                s[1] = bad();
            }
            if (1..=3).contains(&t) {
                s[2] = bad();
            }
            acc.record(ms(t * 100), &s);
        }
        let r = acc.report(&names(200));
        assert_eq!(r.interrupted, 3);
        assert!((r.max_seconds - 0.3).abs() < 1e-9);
        // Rank ceil(0.99 * 200) = 198 of the sorted longest outages: the 0.1 s one.
        assert!((r.p99_seconds - 0.1).abs() < 1e-9, "{}", r.p99_seconds);
        // With 100 flows the p99 rank is the 99th: the second longest.
        let mut acc = Interruptions::new(100);
        acc.record(ms(0), &vec![bad(); 100]);
        let mut s = vec![ok(); 100];
        s[0] = bad();
        acc.record(ms(250), &s);
        acc.record(ms(500), &vec![ok(); 100]);
        let r = acc.report(&names(100));
        assert_eq!(r.interrupted, 100);
        assert_eq!(r.down_at_start, 100);
        assert!((r.max_seconds - 0.5).abs() < 1e-9);
        assert!((r.p99_seconds - 0.25).abs() < 1e-9);
    }

    #[test]
    fn nothing_down_reports_zero_and_uneven_periods_are_measured() {
        let mut acc = Interruptions::new(2);
        for t in [0, 90, 250, 300] {
            acc.record(ms(t), &[ok(), ok()]);
        }
        let r = acc.report(&names(2));
        assert_eq!(r.interrupted, 0);
        assert_eq!(r.max_seconds, 0.0);
        assert_eq!(r.p99_seconds, 0.0);
        assert!(r.interrupted_flows.is_empty());
        assert_eq!(r.longest_started_first_seconds, 0.0);
        assert_eq!(r.longest_started_last_seconds, 0.0);
        assert!((r.mean_period_seconds - 0.1).abs() < 1e-9);
        assert!((r.max_period_seconds - 0.16).abs() < 1e-9);
    }

    #[test]
    fn sample_times_are_reported_as_median_and_maximum() {
        let mut acc = Interruptions::new(1);
        acc.initial_read(ms(500));
        // Totals 30, 12 and 100 ms: median 30, max 100.
        // Flows judged: 3, none (nothing changed), 1.
        for (read, apply, judge, judged) in [(10, 5, 15, 3), (2, 1, 9, 0), (80, 0, 20, 1)] {
            acc.record(ms(0), &[ok()]);
            acc.timed(SampleTime {
                read: ms(read),
                apply: ms(apply),
                judge: ms(judge),
                judged,
                ..SampleTime::default()
            });
        }
        let r = acc.report(&names(1));
        assert_eq!(r.initial_read_seconds, 0.5);
        let t = |median: f64, max: f64| Timing {
            median_seconds: median,
            max_seconds: max,
        };
        assert_eq!(r.sample_time, t(0.030, 0.100));
        assert_eq!(r.read_time, t(0.010, 0.080));
        assert_eq!(r.apply_time, t(0.001, 0.005));
        assert_eq!(r.judge_time, t(0.015, 0.020));
        assert_eq!((r.judged_flows, r.judging_samples), (4, 2));
        // The longest sample is the last, in its parts.
        let l = r.longest_sample;
        assert_eq!(
            (l.read_seconds, l.judge_seconds, l.judged),
            (0.080, 0.020, 1)
        );
        assert!(
            r.summary().contains("taking 30 ms (max 100 ms)"),
            "{}",
            r.summary()
        );
        // No sample timed: zero.
        assert_eq!(
            Interruptions::new(1).report(&names(1)).sample_time,
            t(0.0, 0.0)
        );
    }

    #[test]
    fn a_flow_missing_from_a_sample_counts_as_down() {
        let mut acc = Interruptions::new(2);
        acc.record(ms(0), &[ok(), ok()]);
        acc.record(ms(100), &[ok()]);
        acc.record(ms(300), &[ok(), ok()]);
        let r = acc.report(&names(2));
        let f1 = r.flow("f1").unwrap();
        assert!((f1.longest_seconds - 0.2).abs() < 1e-9);
        assert_eq!(f1.reason, "not evaluated");
    }

    // ------------------------------------------------------------ selection and judgement

    use crate::scenario::{Scale, Scenario};
    use midonet_translators::TranslatorConfig;

    /// Three nodes, six pods (pod `i` on node `i mod 3`, in namespace `i mod 4`), two
    /// Services with two endpoints each (Service `i`: pods `2i`, `2i + 1`), translated by
    /// the pure translators; `policies` of the scenario's NetworkPolicies.
    fn small(policies: usize) -> (Cluster, Vec<Resource>) {
        let scale = Scale {
            nodes: 3,
            pods: 6,
            services: 2,
            endpoints_per_service: 2,
            namespaces: 4,
        };
        let t = Scenario::new("p", scale).translated(policies).unwrap();
        (t.cluster, t.resources)
    }

    fn pushed(cluster: &Cluster, resources: Vec<Resource>) -> Topology {
        let topo = Topology::new(resources, RuleOrder::Pushed, cluster.attachments());
        assert!(topo.problems().is_empty(), "{:?}", topo.problems());
        topo
    }

    const SIZE: SampleSize = SampleSize {
        services_per_source: 1,
        peers_per_source: 2,
    };

    #[test]
    fn one_source_per_node_calls_services_and_the_pods_of_other_nodes() {
        let (cluster, _) = small(0);
        let got: Vec<String> = select_flows(&cluster, SIZE)
            .iter()
            .map(ProbeFlow::name)
            .collect();
        // Sources: the first pod by name on each node. node-0: pod-0 (p-0) and pod-3
        // (p-3); node-1: pod-1 (p-1) and pod-4 (p-0); node-2: pod-2 (p-2) and pod-5 (p-1).
        // Pod addresses: node n's CIDR 10.200.n.0/24 from .10 on. Service ports sorted
        // by name: p-0/svc-0, p-1/svc-1; each source starts one further.
        let want = [
            "pod/p-0/pod-0 -> svc/p-0/svc-0:80 (http) 10.96.0.10:80 tcp",
            "pod/p-0/pod-0 -> pod/p-0/pod-4 10.200.1.11:8080 tcp",
            "pod/p-0/pod-0 -> pod/p-1/pod-5 10.200.2.11:8080 tcp",
            "pod/p-0/pod-4 -> svc/p-1/svc-1:80 (http) 10.96.0.11:80 tcp",
            "pod/p-0/pod-4 -> pod/p-1/pod-5 10.200.2.11:8080 tcp",
            "pod/p-0/pod-4 -> pod/p-0/pod-0 10.200.0.10:8080 tcp",
            "pod/p-1/pod-5 -> svc/p-0/svc-0:80 (http) 10.96.0.10:80 tcp",
            "pod/p-1/pod-5 -> pod/p-0/pod-0 10.200.0.10:8080 tcp",
            "pod/p-1/pod-5 -> pod/p-0/pod-4 10.200.1.11:8080 tcp",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn every_selected_flow_works_on_the_translated_network() {
        let (cluster, resources) = small(0);
        let topo = pushed(&cluster, resources);
        for f in select_flows(
            &cluster,
            SampleSize {
                services_per_source: 10,
                peers_per_source: 10,
            },
        ) {
            assert_eq!(judge(&topo, &f), Ok(()), "{}", f.name());
        }
    }

    #[test]
    fn an_unbound_source_or_a_missing_service_jump_fails_exactly_its_flows() {
        let (cluster, resources) = small(0);
        let flows = select_flows(&cluster, SIZE);
        // The port of pod-4 unbound: its flows fail, and so do the flows to it (nothing
        // behind its port any more).
        let unbound: Vec<Resource> = resources
            .iter()
            .filter(|r| {
                !matches!(r, Resource::HostInterfacePort(b)
                    if b.interface_name.as_deref()
                        == Some(midonet_translators::naming::pod_interface_name("p-0/pod-4").as_str()))
            })
            .cloned()
            .collect();
        assert_eq!(unbound.len() + 1, resources.len());
        let topo = pushed(&cluster, unbound);
        let failed: Vec<String> = flows
            .iter()
            .filter(|f| judge(&topo, f).is_err())
            .map(ProbeFlow::name)
            .collect();
        assert_eq!(
            failed,
            [
                "pod/p-0/pod-0 -> pod/p-0/pod-4 10.200.1.11:8080 tcp",
                "pod/p-0/pod-4 -> svc/p-1/svc-1:80 (http) 10.96.0.11:80 tcp",
                "pod/p-0/pod-4 -> pod/p-1/pod-5 10.200.2.11:8080 tcp",
                "pod/p-0/pod-4 -> pod/p-0/pod-0 10.200.0.10:8080 tcp",
                "pod/p-1/pod-5 -> pod/p-0/pod-4 10.200.1.11:8080 tcp",
            ]
        );
        let why = judge(&topo, &flows[3]).unwrap_err();
        assert!(why.contains("not bound"), "{why}");
        // Judged in parts on several threads, the verdicts come back in flow order.
        let one_by_one: Vec<_> = flows.iter().map(|f| judge(&topo, f)).collect();
        assert_eq!(judge_all(&topo, &flows), one_by_one);

        // svc-0's jump from KUBE-SERVICES gone: exactly the flows to svc-0 fail.
        let cfg = TranslatorConfig::default();
        let chain = midonet_translators::service::service_port_chain_id(
            &cfg,
            &midonet_translators::service::service_port_key("p-0", "svc-0", "http"),
        );
        let unjumped: Vec<Resource> = resources
            .iter()
            .filter(|r| !matches!(r, Resource::Rule(rule) if rule.jump_chain_id == Some(chain)))
            .cloned()
            .collect();
        assert_eq!(unjumped.len() + 1, resources.len());
        let topo = pushed(&cluster, unjumped);
        let failed: Vec<String> = flows
            .iter()
            .filter(|f| judge(&topo, f).is_err())
            .map(ProbeFlow::name)
            .collect();
        assert_eq!(
            failed,
            [
                "pod/p-0/pod-0 -> svc/p-0/svc-0:80 (http) 10.96.0.10:80 tcp",
                "pod/p-1/pod-5 -> svc/p-0/svc-0:80 (http) 10.96.0.10:80 tcp",
            ]
        );
    }

    #[test]
    fn with_policies_only_what_they_admit_is_sampled_and_refused_paths_do_not_count() {
        // Policies 0 and 1: the pods of namespace p-0 admit TCP 8080 from namespace p-1
        // only, those of p-1 from p-2 only. p-2 and p-3 are not isolated.
        let (cluster, resources) = small(2);
        let flows = select_flows(&cluster, SIZE);
        let got: Vec<String> = flows.iter().map(ProbeFlow::name).collect();
        // pod-0 (p-0): svc-0's endpoints are pod-0 (p-0, refused) and pod-1 (p-1, refused):
        // svc-1 (pod-2 in p-2 admitted, pod-3 in p-3 admitted) instead. On node-1, pod-4
        // (p-0) and pod-1 (p-1) are refused (no flow to node-1); on node-2, pod-2 (p-2) is
        // the first admitted. pod-4 (p-0): svc-1 as its own turn; node-2's pod-2; node-0's
        // pod-3 (p-3), pod-0 being refused.
        // pod-5 (p-1): svc-0's pod-0 (p-0 admits p-1): sampled, pod-1 refused; node-0's
        // pod-0; node-1's pod-4 (p-0).
        let want = [
            "pod/p-0/pod-0 -> svc/p-1/svc-1:80 (http) 10.96.0.11:80 tcp",
            "pod/p-0/pod-0 -> pod/p-2/pod-2 10.200.2.10:8080 tcp",
            "pod/p-0/pod-4 -> svc/p-1/svc-1:80 (http) 10.96.0.11:80 tcp",
            "pod/p-0/pod-4 -> pod/p-2/pod-2 10.200.2.10:8080 tcp",
            "pod/p-0/pod-4 -> pod/p-3/pod-3 10.200.0.11:8080 tcp",
            "pod/p-1/pod-5 -> svc/p-0/svc-0:80 (http) 10.96.0.10:80 tcp",
            "pod/p-1/pod-5 -> pod/p-0/pod-0 10.200.0.10:8080 tcp",
            "pod/p-1/pod-5 -> pod/p-0/pod-4 10.200.1.11:8080 tcp",
        ];
        assert_eq!(got, want);
        let svc0 = &flows[5];
        assert_eq!(
            svc0.refused,
            BTreeSet::from(["10.200.1.10".parse::<Ipv4Addr>().unwrap()])
        );
        let topo = pushed(&cluster, resources);
        for f in &flows {
            assert_eq!(judge(&topo, f), Ok(()), "{}", f.name());
        }
    }

    /// The walk that skips the jumps to guards a packet does not pass (without hops, as
    /// the probe judges) finds what the walk that runs every rule (with hops) finds, on
    /// a translated network with policies, for every pod to every pod and Service.
    #[test]
    fn skipping_the_guards_a_packet_does_not_pass_changes_no_trace() {
        let scale = Scale {
            nodes: 3,
            pods: 12,
            services: 3,
            endpoints_per_service: 2,
            namespaces: 4,
        };
        let sc = Scenario::new("p", scale);
        let t = sc.translated(6).unwrap();
        let topo = pushed(&t.cluster, t.resources);
        let sources: Vec<Attachment> = t
            .cluster
            .attachments()
            .into_iter()
            .filter(|a| a.name.starts_with("pod/"))
            .collect();
        let to_pods = (0..scale.pods).map(|i| SocketV4::new(sc.pod_ip(i), POD_PORT));
        let to_services = (0..scale.services).map(|i| SocketV4::new(Scenario::cluster_ip(i), 80));
        let destinations: Vec<SocketV4> = to_pods.chain(to_services).collect();
        let (mut delivered, mut dropped) = (0, 0);
        for from in &sources {
            for to in &destinations {
                let probe = Probe::new(from.name.clone(), *to, Protocol::Tcp, CLIENT_PORT);
                let mut full = midonet_dataplane::trace(&topo, &probe).unwrap();
                for p in &mut full.paths {
                    p.forward.hops.clear();
                    if let Some(r) = p.reply.as_mut() {
                        r.hops.clear();
                    }
                }
                let skipping = trace_without_hops(&topo, &probe).unwrap();
                assert_eq!(skipping, full, "{} -> {to}", from.name);
                match full.delivered() {
                    true => delivered += 1,
                    false => dropped += 1,
                }
            }
        }
        // Both outcomes are among the flows compared: the policies admit some, not all.
        assert!(
            delivered > 0 && dropped > 0,
            "{delivered} delivered, {dropped} dropped"
        );
    }
}
