//! Pod network-ready latency under churn: pods that back a Service are replaced one by
//! one at a steady rate (`--ready-rate` per second, `--ready-pods` of them), as a rolling
//! update does, and for each new pod the time from its `status.podIP` being sent to the
//! first flow the data-plane model delivers to it (`firstflow.rs`): from a pod on another
//! node to its address, and to the cluster IP of the Service it backs.
//!
//! A replacement deletes the old pod (grace period 0), creates the new one, sends its
//! status with `podIP` (the instant the latency is timed from: it includes the status
//! write itself), then writes the Endpoints of the old pod's Services with the new address
//! in place of the old one. Nothing in the bench's control plane maintains Endpoints, so
//! the bench writes them where the endpoints controller would, at once: the endpoints
//! controller's own delay in a real cluster is not in the figure. Endpoints writes are
//! serialized, so that two replacements in one Service never undo each other.
//!
//! The phase runs on the controllers of the restart and resync phases, after the churn
//! and before the NetworkPolicies (which would close most flows between namespaces). It
//! ends when every new pod received both flows, or [`DEADLINE`] after the last
//! replacement (the rest counted undelivered), then waits for the cluster to converge.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use midonet_dataplane::check::{CLIENT_PORT, POD_PORT};
use midonet_dataplane::{Attachment, Cluster, Probe, Protocol, SocketV4};
use midonet_kube_controllers::netcheck::cli::load_cluster;
use midonet_testkit::scenario::Scenario;
use serde_json::{json, Value};

use crate::converge::wait_converged;
use crate::firstflow::{Delivered, FirstFlows, ServedBefore, Target, Via, Watcher};
use crate::floor::translation_keys;
use crate::later::replaced;
use crate::objects::{set_pod_ip, Objects};
use crate::report::{row, secs, Row};
use crate::tracker::ReadyTracker;
use crate::{Bench, Res};

/// How long after the last replacement a new pod may still wait for its flows.
const DEADLINE: Duration = Duration::from_secs(60);
/// Pods a node's pod CIDR has addresses for (`Scenario::pod_ip`).
const PODS_PER_NODE: usize = 244;

/// One pod replaced by another.
#[derive(Clone, Debug, PartialEq)]
pub struct Replacement {
    pub old: usize,
    pub new: usize,
    /// The Services whose Endpoints list the old pod.
    pub services: Vec<usize>,
}

/// The replacements: the first `count` pods from `first` on (fewer if fewer back a
/// Service) whose address some Service's Endpoints list, each replaced by a pod numbered
/// from `next` on. `endpoints[s]` are Service `s`'s addresses.
pub fn replacements(
    scenario: &Scenario,
    endpoints: &[Vec<Ipv4Addr>],
    first: usize,
    count: usize,
    next: usize,
) -> Res<Vec<Replacement>> {
    let mut backs: BTreeMap<Ipv4Addr, Vec<usize>> = BTreeMap::new();
    for (s, ips) in endpoints.iter().enumerate() {
        for ip in ips {
            backs.entry(*ip).or_default().push(s);
        }
    }
    let candidates = (first..scenario.scale.pods)
        .filter_map(|old| Some((old, backs.get(&scenario.pod_ip(old))?.clone())))
        .take(count);
    let plan: Vec<Replacement> = candidates
        .zip(next..)
        .map(|((old, services), new)| Replacement { old, new, services })
        .collect();
    let nodes = scenario.scale.nodes.max(1);
    match plan.last() {
        Some(r) if r.new / nodes >= PODS_PER_NODE => Err(format!(
            "pod {} would reuse an address: a node's pod CIDR has {PODS_PER_NODE} (fewer \
             --ready-pods or --churn)",
            r.new
        )
        .into()),
        _ => Ok(plan),
    }
}

/// The addresses of Service `s`'s Endpoints as the scenario writes them.
fn endpoint_ips(scenario: &Scenario, s: usize) -> Vec<Ipv4Addr> {
    let subsets = scenario.endpoints(s).subsets.unwrap_or_default();
    let addresses = subsets
        .into_iter()
        .flat_map(|s| s.addresses.unwrap_or_default());
    addresses.filter_map(|a| a.ip.parse().ok()).collect()
}

/// The phase's measures.
pub struct Readiness {
    pub pods: usize,
    /// Replacements started per second, as reached.
    pub rate: f64,
    pub flows: FirstFlows,
    /// From the first replacement until every Translation converged.
    pub converged: Duration,
    /// Translations once converged.
    pub translations: usize,
    /// The slowest 1 % to their own address, where their time went.
    pub tail: Vec<Stages>,
    /// The slowest 1 % through their Service, where their time went.
    pub service_tail: Vec<Stages>,
}

/// Where one pod's time to network-ready went, in seconds after its `podIP` was sent:
/// through its Service, when the bench's write of the Service's Endpoints returned
/// (`written`; absent for the flow to the pod); when the first of the Translations the flow
/// needs appeared (translated: the pod's own, or the endpoint generations of that write),
/// when the last of them turned Ready (pushed; both as the bench's watch saw them, `None`
/// if it did not: a generation replaced by the next write before it was pushed is never
/// Ready), and its first flow.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stages {
    pub pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<f64>,
    pub translated: Option<f64>,
    pub pushed: Option<f64>,
    pub delivered: f64,
    /// Where the flow went in its last trace before it was delivered.
    pub served_before: ServedBefore,
}

/// What a flow to a pod needs: when the write it waits on returned (if any), and the
/// Translations it needs.
#[derive(Clone, Debug, Default)]
struct Needs {
    written: Option<Instant>,
    keys: BTreeSet<crate::tracker::Key>,
}

/// The slowest 1 % (at least one) of `each`, with when the tracker saw the Translations
/// each needs (`needs_of` its workload name).
fn tail_stages(
    each: &[Delivered],
    tracker: &ReadyTracker,
    needs_of: impl Fn(&str) -> Needs,
) -> Vec<Stages> {
    let mut slowest: Vec<&Delivered> = each.iter().collect();
    slowest.sort_by_key(|s| std::cmp::Reverse(s.latency));
    slowest.truncate(each.len().div_ceil(100).max(1));
    slowest
        .into_iter()
        .map(|d| {
            let needs = needs_of(&d.name);
            let times: Vec<_> = needs
                .keys
                .iter()
                .map(|k| tracker.first_seen_and_ready(k))
                .collect();
            let after = |t: Instant| t.saturating_duration_since(d.since).as_secs_f64();
            let seen = times.iter().filter_map(|(s, _)| *s).min();
            let ready: Option<Vec<Instant>> = times.iter().map(|(_, r)| *r).collect();
            Stages {
                pod: d.name.clone(),
                written: needs.written.map(after),
                translated: seen.map(after),
                pushed: ready.and_then(|r| r.into_iter().max()).map(after),
                delivered: d.latency.as_secs_f64(),
                served_before: d.served_before,
            }
        })
        .collect()
}

/// What the replacements need, shared by all of them.
struct Churner<'a> {
    bench: &'a Bench,
    watcher: &'a Watcher,
    /// The current addresses of every Service's Endpoints; held while one is written.
    endpoints: tokio::sync::Mutex<Vec<Vec<Ipv4Addr>>>,
    /// Workload names by address: the clients' and the new pods'.
    names: BTreeMap<Ipv4Addr, String>,
    /// The client pod's address on each node (by node index).
    clients: Vec<Ipv4Addr>,
    /// Each of the scenario's Services as the apiserver made them (to translate the
    /// Endpoints written), with its cluster IP.
    services: Vec<(Service, Ipv4Addr)>,
    /// What each new pod's flow through its Service needs, by workload name.
    through_service: std::sync::Mutex<BTreeMap<String, Needs>>,
}

/// Runs the phase on the converged cluster of `translations` Translations, the churn
/// done; the controllers are running.
pub async fn run(
    bench: &Bench,
    tracker: &ReadyTracker,
    objects: &Objects,
    translations: usize,
) -> Res<Readiness> {
    let args = &bench.args;
    let (scenario, churned) = (&bench.scenario, args.churn.min(args.pods));
    let endpoints: Vec<Vec<Ipv4Addr>> = (0..args.services)
        .map(|s| endpoint_ips(scenario, s))
        .collect();
    let plan = replacements(
        scenario,
        &endpoints,
        churned,
        args.ready_pods,
        args.pods + churned,
    )?;
    eprintln!(
        "bench: network readiness: {} pods replaced, {}/s",
        plan.len(),
        args.ready_rate
    );
    if args.nodes < 2 && !plan.is_empty() {
        return Err(
            "network readiness needs a client on another node: --nodes 2 or more \
                    (or --ready-pods 0)"
                .into(),
        );
    }
    let cluster = load_cluster(&bench.client).await?;
    let attachments = attachments_with(&cluster, scenario, &plan);
    let old: BTreeSet<usize> = plan.iter().map(|r| r.old).collect();
    let watcher = Watcher::start(attachments.clone(), source(bench)).await;
    let churner = Churner {
        bench,
        watcher: &watcher,
        endpoints: tokio::sync::Mutex::new(endpoints),
        names: names_by_ip(&attachments),
        clients: clients(scenario, churned..args.pods + churned, &old),
        services: scenario_services(&cluster, scenario)?,
        through_service: std::sync::Mutex::default(),
    };
    let since = Instant::now();
    let rate = churner.replace_all(&plan).await?;
    churner.wait_delivered(plan.len()).await;
    let through_service = churner
        .through_service
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let flows = watcher.stop().await?;
    let pods = |i: fn(&Replacement) -> usize| -> Vec<Pod> {
        plan.iter()
            .map(|r| pod_with_status(scenario, i(r)))
            .collect()
    };
    let new_pods = pods(|r| r.new);
    let each = |via| flows.each.get(&via).map_or(&[][..], Vec::as_slice);
    let tail = tail_stages(each(Via::Pod), tracker, |name| Needs {
        keys: keys_of_new(objects, &new_pods, name),
        ..Needs::default()
    });
    let service_tail = tail_stages(each(Via::Service), tracker, |name| {
        through_service.get(name).cloned().unwrap_or_default()
    });
    let present = translation_keys(&objects.nodes, &new_pods);
    let absent = translation_keys(&objects.nodes, &pods(|r| r.old));
    let want = replaced(translations, present, absent);
    let what = "network readiness";
    let converged = wait_converged(tracker, &bench.admin, &want, since, what).await?;
    Ok(Readiness {
        pods: plan.len(),
        rate,
        flows,
        converged,
        translations: want.count,
        tail,
        service_tail,
    })
}

/// The simulator's store, read change by change.
fn source(bench: &Bench) -> midonet_testkit::probe::ResourceSource {
    let reader = bench.sim.reader();
    let mut cursor = midonet_sim::ReadCursor::default();
    Box::new(move || reader.changes(&mut cursor))
}

/// Pod `i` with the status the bench gives it.
fn pod_with_status(scenario: &Scenario, i: usize) -> Pod {
    let mut pod = scenario.pod(i);
    pod.status = serde_json::from_value(scenario.pod_status(i)["status"].clone()).ok();
    pod
}

/// The cluster's workloads and those of the pods the plan creates.
fn attachments_with(
    cluster: &Cluster,
    scenario: &Scenario,
    plan: &[Replacement],
) -> Vec<Attachment> {
    let future = Cluster {
        nodes: cluster.nodes.clone(),
        pods: plan
            .iter()
            .map(|r| pod_with_status(scenario, r.new))
            .collect(),
        ..Cluster::default()
    };
    let mut all = cluster.attachments();
    let new_pods = future.attachments().into_iter();
    all.extend(new_pods.filter(|a| a.name.starts_with("pod/")));
    all
}

/// Pod workloads' names by their address.
fn names_by_ip(attachments: &[Attachment]) -> BTreeMap<Ipv4Addr, String> {
    let pods = attachments.iter().filter(|a| a.name.starts_with("pod/"));
    pods.filter_map(|a| Some((a.primary_ip()?, a.name.clone())))
        .collect()
}

/// The node index of pod `i`.
fn node_of(scenario: &Scenario, i: usize) -> Option<usize> {
    let pod = scenario.pod(i);
    let node = pod.spec.as_ref()?.node_name.as_deref()?;
    scenario.hosts.iter().position(|(name, _)| name == node)
}

/// For each node, the address of the first pod of `alive` on it that is not `replaced`:
/// the client of the flows to the new pods of the node before it.
fn clients(
    scenario: &Scenario,
    alive: std::ops::Range<usize>,
    replaced: &BTreeSet<usize>,
) -> Vec<Ipv4Addr> {
    let mut clients = vec![None; scenario.hosts.len()];
    for i in alive.filter(|i| !replaced.contains(i)) {
        if let Some(slot) = node_of(scenario, i).and_then(|n| clients.get_mut(n)) {
            slot.get_or_insert(scenario.pod_ip(i));
        }
    }
    clients
        .into_iter()
        .map(|c| c.unwrap_or(Ipv4Addr::UNSPECIFIED))
        .collect()
}

/// Each of the scenario's Services as the apiserver made it, with the cluster IP it allocated.
fn scenario_services(cluster: &Cluster, scenario: &Scenario) -> Res<Vec<(Service, Ipv4Addr)>> {
    (0..scenario.scale.services)
        .map(|s| {
            let (ns, name) = (scenario.namespace(s), Scenario::service_name(s));
            cluster
                .services
                .iter()
                .find(|svc| {
                    svc.metadata.namespace.as_deref() == Some(ns.as_str())
                        && svc.metadata.name.as_deref() == Some(name.as_str())
                })
                .and_then(|svc| {
                    let ip = svc.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()?;
                    Some((svc.clone(), ip))
                })
                .ok_or_else(|| format!("Service {ns}/{name} has no cluster IP").into())
        })
        .collect()
}

impl Churner<'_> {
    /// Every replacement of `plan`, the `m`-th started `m / rate` seconds after the first;
    /// returns the rate reached.
    async fn replace_all(&self, plan: &[Replacement]) -> Res<f64> {
        let start = tokio::time::Instant::now();
        let period = Duration::from_secs_f64(1.0 / self.bench.args.ready_rate.max(1e-3));
        let started = futures::future::try_join_all(
            plan.iter()
                .enumerate()
                .map(|(m, r)| self.replace(r, start + period * m as u32)),
        )
        .await?;
        let span = match (started.iter().min(), started.iter().max()) {
            (Some(first), Some(last)) => last.saturating_duration_since(*first),
            _ => Duration::ZERO,
        };
        Ok(started.len().saturating_sub(1) as f64 / span.as_secs_f64().max(1e-9))
    }

    /// One replacement (see the module docs), at `at`; returns when it started.
    async fn replace(&self, r: &Replacement, at: tokio::time::Instant) -> Res<Instant> {
        tokio::time::sleep_until(at).await;
        let started = Instant::now();
        let (client, scenario) = (&self.bench.client, &self.bench.scenario);
        let old: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(r.old));
        let params = DeleteParams::default().grace_period(0);
        old.delete(&Scenario::pod_name(r.old), &params).await?;
        let new: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(r.new));
        new.create(&PostParams::default(), &scenario.pod(r.new))
            .await?;
        let target = self.target(r, Instant::now())?;
        let name = target.name.clone();
        self.watcher.register(target)?;
        set_pod_ip(client, scenario, r.new).await?;
        let (old_ip, new_ip) = (scenario.pod_ip(r.old), scenario.pod_ip(r.new));
        for (i, s) in r.services.iter().enumerate() {
            let written = self.swap_endpoint(*s, old_ip, new_ip).await?;
            if i == 0 {
                let needs = self.needs_of_write(*s, &written);
                let mut all = self
                    .through_service
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                all.insert(name.clone(), needs);
            }
        }
        Ok(started)
    }

    /// What a flow through Service `s` waits for once its Endpoints `written` returned:
    /// the Translations of their endpoint generations.
    fn needs_of_write(&self, s: usize, written: &Endpoints) -> Needs {
        let service = self.services.get(s).map(|(svc, _)| svc);
        let cfg = midonet_translators::TranslatorConfig::default();
        let translated = midonet_translators::endpoints(&cfg, written, service);
        Needs {
            written: Some(Instant::now()),
            keys: translated
                .translations
                .into_iter()
                .map(|t| (t.namespace, t.name))
                .collect(),
        }
    }

    /// The flows to pod `r.new` from the client on the next node, timed from `since`.
    fn target(&self, r: &Replacement, since: Instant) -> Res<Target> {
        let scenario = &self.bench.scenario;
        let ip = scenario.pod_ip(r.new);
        let name = self.names.get(&ip).ok_or("a new pod without a workload")?;
        let node = node_of(scenario, r.new).ok_or("a new pod without a node")?;
        let client_ip = self.clients[(node + 1) % self.clients.len()];
        let from = self
            .names
            .get(&client_ip)
            .ok_or_else(|| format!("no client pod on the node after node {node}"))?;
        let probe = |to: SocketV4| Probe::new(from.clone(), to, Protocol::Tcp, CLIENT_PORT);
        let mut flows = vec![(Via::Pod, probe(SocketV4::new(ip, POD_PORT)))];
        if let Some(s) = r.services.first() {
            let cluster_ip = self.services[*s].1;
            flows.push((Via::Service, probe(SocketV4::new(cluster_ip, 80))));
        }
        Ok(Target {
            name: name.clone(),
            since,
            flows,
        })
    }

    /// Writes Service `s`'s Endpoints with `new_ip` in place of `old_ip`; answers them as
    /// written.
    async fn swap_endpoint(&self, s: usize, old_ip: Ipv4Addr, new_ip: Ipv4Addr) -> Res<Endpoints> {
        let mut all = self.endpoints.lock().await;
        let ips = all.get_mut(s).ok_or("no such Service")?;
        for ip in ips.iter_mut().filter(|ip| **ip == old_ip) {
            *ip = new_ip;
        }
        let scenario = &self.bench.scenario;
        let mut object: Endpoints = scenario.endpoints(s);
        for subset in object.subsets.iter_mut().flatten() {
            subset.addresses = Some(
                ips.iter()
                    .map(|ip| scenario.endpoint_address(*ip))
                    .collect(),
            );
        }
        let api: Api<Endpoints> =
            Api::namespaced(self.bench.client.clone(), &scenario.namespace(s));
        let name = Scenario::service_name(s);
        Ok(api.replace(&name, &PostParams::default(), &object).await?)
    }

    /// Until the watcher has seen `registered` pods receive every flow, or [`DEADLINE`].
    async fn wait_delivered(&self, registered: usize) {
        let start = Instant::now();
        while self.watcher.complete() < registered && start.elapsed() < DEADLINE {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Readiness {
    pub fn rows(&self) -> Vec<Row> {
        let f = &self.flows;
        let latencies = |l: &crate::firstflow::Latencies| {
            format!(
                "{:.2} / {:.2} / {:.2} s",
                l.p50_seconds, l.p99_seconds, l.max_seconds
            )
        };
        vec![
            row(
                "pod network-ready: to the pod (p50/p99/max)",
                latencies(&f.to_pod),
                "p99 <= 1 s (scale S)",
            ),
            row(
                "pod network-ready: via its Service (p50/p99/max)",
                latencies(&f.through_service),
                "p99 <= 1 s (scale S)",
            ),
            row(
                "pod network-ready: pods / rate / undelivered",
                format!(
                    "{} / {:.1}/s / {}",
                    self.pods,
                    self.rate,
                    f.to_pod.undelivered + f.through_service.undelivered
                ),
                "0 undelivered",
            ),
            row(
                "pod network-ready: store read every (mean/max)",
                format!(
                    "{:.0} ms / {:.0} ms",
                    f.mean_period.as_secs_f64() * 1000.0,
                    f.max_period.as_secs_f64() * 1000.0
                ),
                "-",
            ),
            row(
                "pod network-ready: flows the reads missed (found by the audit)",
                f.missed_by_reads.to_string(),
                "0",
            ),
            row(
                "pod network-ready: phase converged",
                secs(self.converged),
                "-",
            ),
            row(
                "pod network-ready: slowest 1 %: translated / pushed / to pod",
                describe_tail(&self.tail),
                "-",
            ),
            row(
                "pod network-ready: slowest 1 % via Service: Endpoints written / translated / pushed / delivered",
                describe_tail(&self.service_tail),
                "-",
            ),
        ]
    }

    pub fn json(&self) -> Value {
        let f = &self.flows;
        json!({"networkReady": {
            "pods": self.pods,
            "ratePerSecond": self.rate,
            "toPod": f.to_pod,
            "throughService": f.through_service,
            "samples": f.samples,
            "meanPeriodSeconds": f.mean_period.as_secs_f64(),
            "maxPeriodSeconds": f.max_period.as_secs_f64(),
            "missedByReads": f.missed_by_reads,
            "convergedSeconds": self.converged.as_secs_f64(),
            "slowestToPod": self.tail,
            "slowestThroughService": self.service_tail,
        }})
    }
}

/// The Translation keys of the pod of `new_pods` whose workload name is `name`.
fn keys_of_new(objects: &Objects, new_pods: &[Pod], name: &str) -> BTreeSet<crate::tracker::Key> {
    let pod: Vec<Pod> = new_pods
        .iter()
        .filter(|p| {
            let m = &p.metadata;
            m.namespace
                .as_deref()
                .zip(m.name.as_deref())
                .is_some_and(|(ns, n)| name == format!("pod/{ns}/{n}"))
        })
        .cloned()
        .collect();
    translation_keys(&objects.nodes, &pod)
}

/// The slowest pods' stages: the medians of each, in seconds after `podIP` was sent (the
/// Endpoints' write first where there is one), then the slowest pod's.
fn describe_tail(tail: &[Stages]) -> String {
    let median = |mut v: Vec<f64>| -> Option<f64> {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let stages = |written: Option<f64>, translated, pushed, delivered| {
        let show = |v: Option<f64>| v.map_or("?".to_string(), |v| format!("{v:.2}"));
        let written = written.map(|w| format!("{w:.2} / ")).unwrap_or_default();
        format!(
            "{written}{} / {} / {}",
            show(translated),
            show(pushed),
            show(delivered)
        )
    };
    let medians = stages(
        median(tail.iter().filter_map(|s| s.written).collect()),
        median(tail.iter().filter_map(|s| s.translated).collect()),
        median(tail.iter().filter_map(|s| s.pushed).collect()),
        median(tail.iter().map(|s| s.delivered).collect()),
    );
    let slowest = tail.first().map_or(String::new(), |s| {
        let each = stages(s.written, s.translated, s.pushed, Some(s.delivered));
        format!("; the slowest: {each} s")
    });
    let count = |what| tail.iter().filter(|s| s.served_before == what).count();
    let shadowed = format!(
        "; before: {} to other addresses, {} to the pod, {} untranslated, {} not sent",
        count(ServedBefore::OtherAddresses),
        count(ServedBefore::ThePod),
        count(ServedBefore::NoTranslation),
        count(ServedBefore::NotSent)
    );
    format!(
        "{} pods: {medians} s (medians){slowest}{shadowed}",
        tail.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_testkit::scenario::Scale;

    fn scenario(nodes: usize, pods: usize, services: usize) -> Scenario {
        let scale = Scale {
            nodes,
            pods,
            services,
            endpoints_per_service: 4,
            namespaces: 4,
        };
        Scenario::new("t", scale)
    }

    #[test]
    fn a_new_pods_translations_are_named_before_the_apiserver_gives_it_a_uid() {
        let s = scenario(2, 4, 1);
        let nodes: Vec<k8s_openapi::api::core::v1::Node> = (0..2).map(|i| s.node(i)).collect();
        let pod = pod_with_status(&s, 1);
        assert!(pod.metadata.uid.is_none());
        let keys = translation_keys(&nodes, &[pod]);
        let name = Scenario::pod_name(1);
        assert!(
            keys.iter()
                .any(|(_, n)| n.starts_with("pod.") && n.ends_with(&name)),
            "{keys:?}"
        );
    }

    #[test]
    fn the_plan_replaces_pods_that_back_a_service_with_new_ones() {
        // 20 pods, 3 Services of 4: pods 0-11 back Services 0, 1, 2 in fours.
        let s = scenario(5, 20, 3);
        let endpoints: Vec<Vec<Ipv4Addr>> = (0..3).map(|i| endpoint_ips(&s, i)).collect();
        let plan = replacements(&s, &endpoints, 6, 100, 30).unwrap();
        let got: Vec<(usize, usize, Vec<usize>)> = plan
            .iter()
            .map(|r| (r.old, r.new, r.services.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (6, 30, vec![1]),
                (7, 31, vec![1]),
                (8, 32, vec![2]),
                (9, 33, vec![2]),
                (10, 34, vec![2]),
                (11, 35, vec![2]),
            ]
        );
        assert_eq!(replacements(&s, &endpoints, 0, 2, 20).unwrap().len(), 2);
        // New pods past a node's 244 addresses would reuse one: refused.
        assert!(replacements(&s, &endpoints, 0, 2, 5 * 244 - 1).is_err());
    }

    #[test]
    fn clients_are_the_first_pods_left_on_each_node() {
        let s = scenario(3, 12, 0);
        let replaced = BTreeSet::from([3, 4]);
        // Pods 2..12 alive, 3 and 4 being replaced: node 0 has 6, node 1 has 7, node 2
        // has 2.
        let c = clients(&s, 2..12, &replaced);
        assert_eq!(c, vec![s.pod_ip(6), s.pod_ip(7), s.pod_ip(2)]);
    }
}
