//! When each new pod first receives a flow: a loop (on the runtime's blocking pool) that
//! keeps the simulator's store as a live topology (`midonet_dataplane::LiveTopology`, fed
//! the records changed since the last reading, as the flow probe is) and, whenever the
//! store changed or a pod was registered, traces the flows of every pod still waiting with
//! the data-plane model.
//!
//! - **Registered** ([`Target`]): a pod's workload (its attachment name), the instant its
//!   `status.podIP` was sent, and up to one flow per [`Via`] from a client pod on another
//!   node: to the pod's own address, and to the cluster IP of a Service it backs.
//! - **Delivered** ([`delivered_to`]): some path of the traced connection (every path a
//!   random choice could take, the Service's load balancing included) reaches that pod's
//!   workload and its reply comes back to the client: the connection works, and it works
//!   with this pod at the other end.
//! - **When**: the first reading of the store after which the flow is delivered, timed at
//!   the end of that reading. The store reached that state at or before it, after the
//!   previous reading: a latency is exact to within one reading period, and never under.
//!
//! Reading the store costs the changes since the last reading, and a sample traces only
//! the waiting pods' flows whose last trace read something the changes touched
//! (`midonet_dataplane::reads`; a flow registered since is traced at once), so the period
//! stays a few milliseconds under churn. Every [`AUDIT_PERIOD`] a sample traces the other
//! pending flows too: one found delivered is a defect of the reads, counted
//! ([`FirstFlows::missed_by_reads`]) and logged, its latency up to that period late. What the
//! model cannot see (midolman's own propagation on a real host) is not in the figure.
//!
//! The workloads of pods not created yet are plugged in from the start (their interface
//! stands for the one the CNI plugin makes before the kubelet sets `podIP`): a workload
//! whose port is not bound receives nothing, so this does not advance a delivery.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use midonet_dataplane::{
    trace_reading, Attachment, Changes, LiveTopology, Probe, Reads, Step, Topology, Trace,
    TraceError,
};
use midonet_testkit::probe::ResourceSource;
use serde::Serialize;

/// How a flow reaches the new pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Via {
    /// To the pod's address, from a pod on another node.
    Pod,
    /// To the cluster IP of a Service the pod backs, from a pod on another node.
    Service,
}

/// A pod whose first delivered flows are wanted.
#[derive(Clone, Debug)]
pub struct Target {
    /// Its workload's attachment name (`pod/NS/NAME`).
    pub name: String,
    /// When its `status.podIP` was sent.
    pub since: Instant,
    pub flows: Vec<(Via, Probe)>,
}

/// What one trace of a flow found.
struct Traced {
    /// Some path delivers it to the workload wanted, on a path that works (see the module
    /// docs).
    delivered: bool,
    /// What the trace read (`midonet_dataplane::reads`): until a change touches that,
    /// tracing again would answer the same.
    reads: Reads,
}

/// Traces `probe` on `topo`, wanting it delivered to the workload `name`.
fn delivered_to(topo: &Topology, probe: &Probe, name: &str) -> Traced {
    let (traced, reads) = trace_reading(topo, probe);
    Traced {
        delivered: reaches(&traced, name),
        reads,
    }
}

/// Where a flow went in its last trace before it was delivered, if that came
/// [`DIAGNOSED_AFTER`] after its `since` or later ([`served`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ServedBefore {
    /// Delivered before it had waited [`DIAGNOSED_AFTER`]: not diagnosed.
    NotDiagnosed,
    /// The client sent nothing: the trace failed before its first packet (the client's
    /// interface bound to no port, or not in the topology).
    NotSent,
    /// No rule translated its destination (to a pod's address; through a Service, no
    /// endpoint generation matched).
    NoTranslation,
    /// Some path's destination was translated to the pod's address (a generation with the
    /// pod served), yet it did not arrive: the pod's port, a route or ARP was missing.
    ThePod,
    /// Its destination was translated to other addresses only: a generation without the
    /// pod served (an older one, standing in front).
    OtherAddresses,
}

/// Where `probe` goes on `topo` ([`ServedBefore`]), the pod it waits for having the
/// address `pod`. A trace with hops, several times the cost of [`delivered_to`]'s: only
/// for the flows waiting longer than [`DIAGNOSED_AFTER`].
fn served(topo: &Topology, probe: &Probe, pod: Option<Ipv4Addr>) -> ServedBefore {
    let Ok(trace) = midonet_dataplane::trace(topo, probe) else {
        return ServedBefore::NotSent;
    };
    let translated: Vec<Option<Ipv4Addr>> = trace
        .paths
        .iter()
        .filter(|p| p.forward.hops.iter().any(|h| h.step == Step::Nat))
        .map(|p| {
            let end = p.forward.received.or(p.forward.dropped_packet);
            end.map(|t| t.dst.ip)
        })
        .collect();
    if translated.is_empty() {
        ServedBefore::NoTranslation
    } else if pod.is_some() && translated.contains(&pod) {
        ServedBefore::ThePod
    } else {
        ServedBefore::OtherAddresses
    }
}

/// How long a flow waits before its traces also say where it went ([`served`]).
pub const DIAGNOSED_AFTER: Duration = Duration::from_secs(1);

fn reaches(traced: &Result<Trace, TraceError>, name: &str) -> bool {
    traced.as_ref().is_ok_and(|t| {
        t.paths
            .iter()
            .any(|p| p.works && p.forward.delivered_to.as_deref() == Some(name))
    })
}

/// The latencies of one [`Via`]: from `podIP` sent to the first delivered flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latencies {
    pub delivered: usize,
    /// Pods registered for this way whose flow was never delivered before the stop.
    pub undelivered: usize,
    pub p50_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
}

impl Latencies {
    /// Of `times` (nearest rank), with `undelivered` more that never came.
    pub fn of(mut times: Vec<Duration>, undelivered: usize) -> Latencies {
        times.sort();
        let rank = |q: usize| match times.len() {
            0 => 0.0,
            n => times[(n * q).div_ceil(100).max(1) - 1].as_secs_f64(),
        };
        Latencies {
            delivered: times.len(),
            undelivered,
            p50_seconds: rank(50),
            p99_seconds: rank(99),
            max_seconds: rank(100),
        }
    }
}

/// What the watcher saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FirstFlows {
    pub to_pod: Latencies,
    pub through_service: Latencies,
    pub samples: usize,
    /// The mean and the longest time between two readings of the store.
    pub mean_period: Duration,
    pub max_period: Duration,
    /// Flows an audit found delivered though no change had touched what their last trace
    /// read: each a defect of `midonet_dataplane::reads`, whose latency is then up to one
    /// [`AUDIT_PERIOD`] late. Zero is the only correct figure.
    pub missed_by_reads: usize,
    /// Each pod delivered by every way, by way.
    pub each: BTreeMap<Via, Vec<Delivered>>,
}

/// One pod's first flow one way.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered {
    /// The pod's workload name.
    pub name: String,
    /// When its `podIP` was sent.
    pub since: Instant,
    pub latency: Duration,
    /// Where it went in its last trace before it was delivered.
    pub served_before: ServedBefore,
}

/// A registered pod's flows: the latency of each delivered, what the last trace of each
/// other read and, once diagnosed, where it went.
#[derive(Default)]
struct Seen {
    found: BTreeMap<Via, Duration>,
    read: BTreeMap<Via, Reads>,
    served: BTreeMap<Via, ServedBefore>,
}

/// The pods registered and not yet delivered by every way, with the latencies so far.
#[derive(Default)]
struct Waiting {
    pending: Vec<(Target, Seen)>,
    done: BTreeMap<Via, Vec<Duration>>,
    /// Of the pods whose every flow was delivered, by way.
    each: BTreeMap<Via, Vec<Delivered>>,
    /// Pods whose every flow was delivered.
    complete: usize,
    /// See [`FirstFlows::missed_by_reads`].
    missed_by_reads: usize,
}

impl Waiting {
    /// Traces on `topo` every pending flow not traced yet, and those whose last trace
    /// read something `touched` (what changed since) touches: the others would not be
    /// delivered either. An `audit` traces those too, and counts each it finds delivered
    /// as a miss of the reads. A flow delivered counts `read_at - since`. A pod whose
    /// every flow is delivered leaves the pending list.
    fn sample(&mut self, topo: &Topology, read_at: Instant, touched: &Changes, audit: bool) {
        for (target, seen) in &mut self.pending {
            for (via, probe) in &target.flows {
                let unchanged = seen.read.get(via).is_some_and(|r| !touched.touches(r));
                if seen.found.contains_key(via) || (unchanged && !audit) {
                    continue;
                }
                let traced = delivered_to(topo, probe, &target.name);
                if traced.delivered {
                    let latency = read_at.saturating_duration_since(target.since);
                    seen.found.insert(*via, latency);
                    if unchanged {
                        self.missed_by_reads += 1;
                        eprintln!(
                            "bench: first flow: {via:?} to {} delivered though nothing its last trace read changed (a defect of midonet_dataplane::reads)",
                            target.name
                        );
                    }
                } else if read_at.saturating_duration_since(target.since) >= DIAGNOSED_AFTER {
                    let pod = topo.attachment_named(&target.name);
                    let pod = pod.and_then(Attachment::primary_ip);
                    seen.served.insert(*via, served(topo, probe, pod));
                }
                seen.read.insert(*via, traced.reads);
            }
        }
        let (done, count) = (&mut self.done, &mut self.complete);
        let each = &mut self.each;
        self.pending.retain_mut(|(target, seen)| {
            let complete = target
                .flows
                .iter()
                .all(|(via, _)| seen.found.contains_key(via));
            if complete {
                *count += 1;
                for (via, latency) in &seen.found {
                    done.entry(*via).or_default().push(*latency);
                    each.entry(*via).or_default().push(Delivered {
                        name: target.name.clone(),
                        since: target.since,
                        latency: *latency,
                        served_before: seen
                            .served
                            .remove(via)
                            .unwrap_or(ServedBefore::NotDiagnosed),
                    });
                }
            }
            !complete
        });
    }

    /// The latencies of `via`, the pods still pending counting as undelivered.
    fn latencies(&self, via: Via) -> Latencies {
        let mut times = self.done.get(&via).cloned().unwrap_or_default();
        let mut undelivered = 0;
        for (target, Seen { found, .. }) in &self.pending {
            if target.flows.iter().any(|(v, _)| *v == via) {
                match found.get(&via) {
                    Some(t) => times.push(*t),
                    None => undelivered += 1,
                }
            }
        }
        Latencies::of(times, undelivered)
    }
}

/// The watcher's loop, until [`Watcher::stop`].
pub struct Watcher {
    targets: Sender<Target>,
    stop: Arc<AtomicBool>,
    /// Pods whose every flow was delivered, as of the last sample.
    complete: Arc<AtomicUsize>,
    /// The loop, on the runtime's blocking pool.
    task: Option<tokio::task::JoinHandle<FirstFlows>>,
}

/// How long the watcher sleeps between readings when nothing changed.
const PERIOD: Duration = Duration::from_millis(10);
/// How often the watcher also traces the pending flows no change touched, to hold
/// `midonet_dataplane::reads` to a trace afresh ([`FirstFlows::missed_by_reads`]).
pub const AUDIT_PERIOD: Duration = Duration::from_secs(1);

impl Watcher {
    /// Starts reading `source` with `attachments` plugged in; returns once the whole
    /// store has been read, so that the first pods registered wait for their flows, not
    /// for the first reading of every record.
    pub async fn start(attachments: Vec<Attachment>, source: ResourceSource) -> Watcher {
        let (targets, incoming) = std::sync::mpsc::channel();
        let (primed, read) = tokio::sync::oneshot::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let complete = Arc::new(AtomicUsize::new(0));
        let shared = Shared {
            incoming,
            stop: stop.clone(),
            complete: complete.clone(),
        };
        let task = tokio::task::spawn_blocking(move || watch(attachments, source, primed, &shared));
        // A loop that ended early is reported by `stop`.
        let _ = read.await;
        Watcher {
            targets,
            stop,
            complete,
            task: Some(task),
        }
    }

    /// Registers a pod; an error once the watcher has stopped.
    pub fn register(&self, target: Target) -> Result<(), String> {
        self.targets
            .send(target)
            .map_err(|_| "the first-flow watcher has stopped".to_string())
    }

    /// Pods whose every flow was delivered so far.
    pub fn complete(&self) -> usize {
        self.complete.load(Ordering::SeqCst)
    }

    /// Stops after one more sample; what it saw.
    pub async fn stop(mut self) -> Result<FirstFlows, String> {
        self.stop.store(true, Ordering::SeqCst);
        let task = self.task.take().ok_or("the watcher was already stopped")?;
        task.await
            .map_err(|e| format!("the first-flow watcher failed: {e}"))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// What the watcher's loop shares with the [`Watcher`].
struct Shared {
    incoming: Receiver<Target>,
    stop: Arc<AtomicBool>,
    complete: Arc<AtomicUsize>,
}

/// The watcher's loop (see the module docs); `primed` once every record is read.
fn watch(
    attachments: Vec<Attachment>,
    mut source: ResourceSource,
    primed: tokio::sync::oneshot::Sender<()>,
    shared: &Shared,
) -> FirstFlows {
    let mut live = LiveTopology::new(attachments);
    if let Ok(changes) = source() {
        live.apply(changes);
    }
    let _ = primed.send(());
    let mut waiting = Waiting::default();
    let (mut samples, mut last, mut max_period) = (0usize, None::<Instant>, Duration::ZERO);
    let started = Instant::now();
    let mut audited = started;
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let registered: Vec<Target> = shared.incoming.try_iter().collect();
        let changes = source();
        let read_at = Instant::now();
        if let Some(last) = last {
            max_period = max_period.max(read_at - last);
        }
        last = Some(read_at);
        samples += 1;
        let touched = match changes {
            Ok(changes) if changes.is_empty() => Changes::default(),
            Ok(changes) => live.apply(changes),
            // The source starts over with every record at its next reading.
            Err(_) => {
                live = LiveTopology::new(live.topology().attachments().into_iter().cloned());
                Changes::everything()
            }
        };
        let fresh = !registered.is_empty();
        waiting
            .pending
            .extend(registered.into_iter().map(|t| (t, Seen::default())));
        let audit = read_at.saturating_duration_since(audited) >= AUDIT_PERIOD;
        if audit {
            audited = read_at;
        }
        if !touched.is_empty() || fresh || audit {
            waiting.sample(live.topology(), read_at, &touched, audit);
        }
        shared.complete.store(waiting.complete, Ordering::SeqCst);
        if stopping {
            break;
        }
        std::thread::sleep(PERIOD);
    }
    let span = last.map_or(Duration::ZERO, |l| l.saturating_duration_since(started));
    FirstFlows {
        to_pod: waiting.latencies(Via::Pod),
        through_service: waiting.latencies(Via::Service),
        samples,
        mean_period: span / samples.max(1) as u32,
        max_period,
        missed_by_reads: waiting.missed_by_reads,
        each: std::mem::take(&mut waiting.each),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_dataplane::check::{CLIENT_PORT, POD_PORT};
    use midonet_dataplane::{Protocol, RuleOrder, SocketV4};
    use midonet_testkit::scenario::{Scale, Scenario};
    use midonet_translators::model::Resource;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn latencies_are_nearest_rank_and_count_what_never_came() {
        let times: Vec<Duration> = (1..=200).map(ms).collect();
        let l = Latencies::of(times, 3);
        assert_eq!((l.delivered, l.undelivered), (200, 3));
        assert_eq!(l.p50_seconds, 0.100);
        assert_eq!(l.p99_seconds, 0.198);
        assert_eq!(l.max_seconds, 0.200);
        assert_eq!(Latencies::of(Vec::new(), 1).max_seconds, 0.0);
    }

    /// [`Scale::SMALL`]: Service 0's endpoints are pods 0 and 1, Service 1's pods 2 and 3.
    fn small() -> (Scenario, midonet_testkit::scenario::Translated) {
        let s = Scenario::new("r", Scale::SMALL);
        let t = s.translated(0).unwrap();
        (s, t)
    }

    fn probe(from: &str, to: SocketV4) -> Probe {
        Probe::new(from, to, Protocol::Tcp, CLIENT_PORT)
    }

    #[test]
    fn a_flow_counts_only_once_it_reaches_the_pod_itself() {
        let (s, t) = small();
        let topo = |resources: Vec<Resource>| {
            Topology::new(resources, RuleOrder::Pushed, t.cluster.attachments())
        };
        let full = topo(t.resources.clone());
        // pod-0 (r-0, node 0) from pod-1 (r-1, node 1): directly and through svc-0.
        let client = "pod/r-1/pod-1";
        let to_pod = probe(client, SocketV4::new(s.pod_ip(0), POD_PORT));
        let to_svc = probe(client, SocketV4::new(Scenario::cluster_ip(0), 80));
        assert!(delivered_to(&full, &to_pod, "pod/r-0/pod-0").delivered);
        assert!(delivered_to(&full, &to_svc, "pod/r-0/pod-0").delivered);
        // svc-0's other endpoint is pod-1; pod-2 backs svc-1 only.
        assert!(delivered_to(&full, &to_svc, "pod/r-1/pod-1").delivered);
        assert!(!delivered_to(&full, &to_svc, "pod/r-2/pod-2").delivered);
        // Through the Service, translated to svc-0's endpoints, pod-0 among them.
        let ip = |i| Some(s.pod_ip(i));
        assert_eq!(served(&full, &to_svc, ip(0)), ServedBefore::ThePod);
        assert_eq!(served(&full, &to_svc, ip(2)), ServedBefore::OtherAddresses);
        assert_eq!(served(&full, &to_pod, ip(0)), ServedBefore::NoTranslation);
        // pod-0's port unbound: neither flow reaches it, the Service still reaches pod-1.
        let interface = midonet_translators::naming::pod_interface_name("r-0/pod-0");
        let unbound: Vec<Resource> = t
            .resources
            .iter()
            .filter(|r| {
                !matches!(r, Resource::HostInterfacePort(b)
                    if b.interface_name.as_deref() == Some(interface.as_str()))
            })
            .cloned()
            .collect();
        assert_eq!(unbound.len() + 1, t.resources.len());
        let unbound = topo(unbound);
        assert!(!delivered_to(&unbound, &to_pod, "pod/r-0/pod-0").delivered);
        assert!(!delivered_to(&unbound, &to_svc, "pod/r-0/pod-0").delivered);
        assert!(delivered_to(&unbound, &to_svc, "pod/r-1/pod-1").delivered);
        // From pod-0, unbound: the client sends nothing, whatever its destination.
        let from_unbound = probe("pod/r-0/pod-0", SocketV4::new(Scenario::cluster_ip(1), 80));
        assert_eq!(
            served(&unbound, &from_unbound, ip(2)),
            ServedBefore::NotSent
        );
    }

    #[test]
    fn a_pod_waits_until_each_of_its_flows_is_delivered() {
        let (s, t) = small();
        let empty = Topology::new(Vec::new(), RuleOrder::Pushed, t.cluster.attachments());
        let full = Topology::new(t.resources, RuleOrder::Pushed, t.cluster.attachments());
        let client = "pod/r-1/pod-1";
        let since = Instant::now();
        let mut w = Waiting::default();
        let target = Target {
            name: "pod/r-0/pod-0".into(),
            since,
            flows: vec![
                (
                    Via::Pod,
                    probe(client, SocketV4::new(s.pod_ip(0), POD_PORT)),
                ),
                (
                    Via::Service,
                    probe(client, SocketV4::new(Scenario::cluster_ip(0), 80)),
                ),
            ],
        };
        w.pending.push((target, Seen::default()));
        // Traced at once: not traced yet.
        w.sample(&empty, since + ms(10), &Changes::default(), false);
        assert_eq!((w.pending.len(), w.complete), (1, 0));
        assert_eq!(w.latencies(Via::Pod).undelivered, 1);
        // A sample told nothing its traces read changed traces nothing again.
        w.sample(&full, since + ms(20), &Changes::default(), false);
        assert_eq!((w.pending.len(), w.complete), (1, 0));
        let mut audited = Waiting {
            pending: w
                .pending
                .iter()
                .map(|(t, _)| (t.clone(), Seen::default()))
                .collect(),
            ..Waiting::default()
        };
        w.sample(&full, since + ms(30), &Changes::everything(), false);
        assert_eq!((w.pending.len(), w.complete), (0, 1));
        assert_eq!(w.missed_by_reads, 0);
        let l = w.latencies(Via::Service);
        assert_eq!((l.delivered, l.undelivered, l.max_seconds), (1, 0, 0.030));
        // An audit traces what no change touched, and counts what it finds delivered.
        audited.sample(&empty, since + ms(10), &Changes::default(), false);
        audited.sample(&full, since + ms(20), &Changes::default(), true);
        assert_eq!((audited.complete, audited.missed_by_reads), (1, 2));
    }
}
