//! The phases after the initial sync, on the converged cluster, each timed by the bench's
//! Translation watch: a restart in sync, a full resync with nothing changed, a churn of
//! pods, and NetworkPolicies added. Each returns its measures; their rows and JSON follow
//! the phase order.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::ResourceExt;
use midonet_testkit::scenario::{api_in_namespace_of, Scenario};
use serde_json::{json, Value};

use crate::controllers::Controllers;
use crate::converge::wait_converged;
use crate::floor::translation_keys;
use crate::objects::{create_all, each_concurrent, set_pod_ips, Objects};
use crate::report::{row, secs, Row};
use crate::tracker::{Key, ReadyTracker, Want};
use crate::{Bench, Res};
use midonet_sim::admin::RequestCounts;

const WRITES: &str = "midonet_kube_controllers_translator_translation_writes_total";
const PUSHED: &str = "midonet_kube_controllers_pusher_reconciles_total";

/// How long the restarted controllers may take to answer `/readyz` before the phase is
/// measured anyway (and the timeout reported): their start lists every Translation.
fn ready_timeout(translations: usize) -> Duration {
    Duration::from_secs(60).max(Duration::from_millis(10) * translations as u32)
}

/// A restart of the controllers with everything in sync.
pub struct Restart {
    /// How long `/readyz` took, or why it did not answer.
    pub ready: String,
    pub writes: u64,
    /// GETs of resources.
    pub reads: u64,
    /// GETs of the API root: the readiness check's probe when no request was made for
    /// `--backend-probe-period` (30 s), which a start longer than that makes once.
    pub root_probes: u64,
}

/// Starts the controllers again (`--resync-period 20s`, which the resync phase uses) on a
/// converged cluster and backend; returns them with the backend requests of their start.
pub async fn restart(bench: &Bench, translations: usize) -> Res<(Controllers, Restart)> {
    eprintln!("bench: restart in sync");
    bench.admin.reset_requests().await?;
    let ctl = bench.spawn_controllers(&["--resync-period", "20s"])?;
    // A /readyz that never turns 200 is reported, and the phase measured after the timeout.
    let ready = match ctl.wait_ready(ready_timeout(translations)).await {
        Ok(d) => format!("{:.2} s", d.as_secs_f64()),
        Err(e) => e.to_string(),
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    // One reading of the counters, so that the root probes are among its GETs.
    let counts = bench.admin.requests().await?;
    let (_, writes, gets) = crate::split_counts(&counts);
    let root_probes = root_probes(&counts);
    Ok((
        ctl,
        Restart {
            ready,
            writes,
            reads: gets.saturating_sub(root_probes),
            root_probes,
        },
    ))
}

/// The GETs of the API root among `counts`: the readiness check's probe of a backend
/// that saw no request for `--backend-probe-period` (30 s).
fn root_probes(counts: &RequestCounts) -> u64 {
    counts
        .by_kind
        .get("Application")
        .and_then(|m| m.get("GET"))
        .copied()
        .unwrap_or(0)
}

/// One full resync period with nothing changed.
pub struct Resync {
    pub translation_writes: f64,
    pub pushes: f64,
    /// Requests of resources (the root probes apart).
    pub backend_requests: u64,
    /// GETs of the API root: a restart and a wait longer than the readiness check's
    /// probe period together (at 10,000 Translations and more) make one in the window.
    pub root_probes: u64,
}

/// Waits one resync period (and a second) of `ctl`; returns what the controllers wrote.
pub async fn resync(bench: &Bench, ctl: &Controllers) -> Res<Resync> {
    eprintln!("bench: full resync (waiting 21 s)");
    let w0 = ctl.metric(WRITES, "").await?;
    let p0 = ctl.metric(PUSHED, "result=\"pushed\"").await?;
    bench.admin.reset_requests().await?;
    tokio::time::sleep(Duration::from_secs(21)).await;
    let counts = bench.admin.requests().await?;
    let root_probes = root_probes(&counts);
    Ok(Resync {
        translation_writes: ctl.metric(WRITES, "").await? - w0,
        pushes: ctl.metric(PUSHED, "result=\"pushed\"").await? - p0,
        backend_requests: crate::split_counts(&counts).0.saturating_sub(root_probes),
        root_probes,
    })
}

/// Pods deleted and as many created.
pub struct Churn {
    pub time: Duration,
    pub backend_requests: u64,
    /// Backend item paths that changed.
    pub changed: usize,
    /// Translations once converged.
    pub translations: usize,
}

/// Deletes the first `--churn` pods (grace period 0) and creates as many new ones; timed
/// until the new pods' Translations are present and Ready, the deleted pods' gone, and
/// the backend matches.
pub async fn churn(
    bench: &Bench,
    tracker: &ReadyTracker,
    objects: &Objects,
    translations: usize,
) -> Res<Churn> {
    let (client, scenario, admin) = (&bench.client, &bench.scenario, &bench.admin);
    let (pods, churn) = (bench.args.pods, bench.args.churn.min(bench.args.pods));
    eprintln!("bench: churn of {churn} pods");
    let before = admin.state().await?.translation_paths();
    admin.reset_requests().await?;
    let since = Instant::now();
    delete_pods(bench, 0..churn).await?;
    let new_pods = (pods..pods + churn).map(|i| scenario.pod(i)).collect();
    create_all(api_in_namespace_of(client), new_pods).await?;
    let new_pods = set_pod_ips(client, scenario, pods..pods + churn).await?;
    let deleted: BTreeSet<Key> = (0..churn)
        .map(|i| (scenario.namespace(i), Scenario::pod_name(i)))
        .collect();
    let deleted_pods: Vec<Pod> = objects
        .pods
        .iter()
        .filter(|p| deleted.contains(&(p.namespace().unwrap_or_default(), p.name_any())))
        .cloned()
        .collect();
    let want = replaced(
        translations,
        translation_keys(&objects.nodes, &new_pods),
        translation_keys(&objects.nodes, &deleted_pods),
    );
    let time = wait_converged(tracker, admin, &want, since, "churn").await?;
    let after = admin.state().await?.translation_paths();
    Ok(Churn {
        time,
        backend_requests: bench.backend_counts().await?.0,
        changed: before.symmetric_difference(&after).count(),
        translations: want.count,
    })
}

/// What a phase that replaces Translations waits for: `present` there, `absent` gone, and
/// the count of `translations` changed by as many.
pub fn replaced<'a>(
    translations: usize,
    present: BTreeSet<Key>,
    absent: BTreeSet<Key>,
) -> Want<'a> {
    Want {
        count: (translations + present.len()).saturating_sub(absent.len()),
        present,
        absent,
        ..Want::default()
    }
}

/// Deletes the scenario's pods `range`, 16 at a time, without a grace period.
pub async fn delete_pods(bench: &Bench, range: std::ops::Range<usize>) -> Res<()> {
    let (client, scenario) = (&bench.client, &bench.scenario);
    each_concurrent(range, 16, |i| {
        let api: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(i));
        async move {
            let params = DeleteParams::default().grace_period(0);
            api.delete(&Scenario::pod_name(i), &params).await?;
            Ok(())
        }
    })
    .await
}

/// NetworkPolicies added to the converged cluster.
pub struct Policies {
    pub count: usize,
    pub time: Duration,
    pub backend_requests: u64,
}

/// Creates one NetworkPolicy per ten pods at once; timed until converged.
pub async fn policies(bench: &Bench, tracker: &ReadyTracker, translations: usize) -> Res<Policies> {
    let count = bench.args.pods / 10;
    eprintln!("bench: {count} NetworkPolicies");
    bench.admin.reset_requests().await?;
    let since = Instant::now();
    let objs = (0..count)
        .map(|i| bench.scenario.network_policy(i))
        .collect();
    create_all(api_in_namespace_of(&bench.client), objs).await?;
    let want = Want {
        count: translations + count,
        ..Want::default()
    };
    let what = "network policies";
    let time = wait_converged(tracker, &bench.admin, &want, since, what).await?;
    Ok(Policies {
        count,
        time,
        backend_requests: bench.backend_counts().await?.0,
    })
}

impl Restart {
    pub fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "restart in sync: /readyz 200 after",
                self.ready.clone(),
                "-",
            ),
            row(
                "restart in sync: backend writes",
                self.writes.to_string(),
                "0",
            ),
            row(
                "restart in sync: backend reads (and API root probes)",
                format!("{} ({})", self.reads, self.root_probes),
                "0",
            ),
        ]
    }
}

impl Resync {
    pub fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "full resync: Translation writes",
                format!("{}", self.translation_writes),
                "0",
            ),
            row("full resync: pushes", format!("{}", self.pushes), "0"),
            row(
                "full resync: backend requests (and API root probes)",
                format!("{} ({})", self.backend_requests, self.root_probes),
                "0",
            ),
        ]
    }
}

impl Churn {
    pub fn rows(&self) -> Vec<Row> {
        let (changed, requests) = (self.changed, self.backend_requests);
        vec![
            row("churn: convergence", secs(self.time), "-"),
            row(
                "churn: backend requests per changed resource",
                format!(
                    "{:.2} ({requests}/{changed})",
                    requests as f64 / changed.max(1) as f64
                ),
                "-",
            ),
        ]
    }
}

impl Policies {
    pub fn rows(&self) -> Vec<Row> {
        vec![
            row(
                "network policies (1 per 10 pods): convergence",
                secs(self.time),
                "-",
            ),
            row(
                "network policies: backend requests",
                format!(
                    "{} ({:.1} per policy)",
                    self.backend_requests,
                    self.backend_requests as f64 / self.count.max(1) as f64
                ),
                "-",
            ),
        ]
    }
}

/// The JSON keys of the restart, the resync, the churn and the policies.
pub fn json(restart: &Restart, resync: &Resync, churn: &Churn, policies: &Policies) -> Value {
    json!({
        "restartInSync": {"ready": restart.ready, "writes": restart.writes,
                          "reads": restart.reads,
                          "rootProbes": restart.root_probes},
        "fullResync": {"translationWrites": resync.translation_writes,
                       "pushes": resync.pushes, "backendRequests": resync.backend_requests,
                       "rootProbes": resync.root_probes},
        "churn": {"seconds": churn.time.as_secs_f64(), "requests": churn.backend_requests,
                  "changedResources": churn.changed},
        "networkPolicies": {"count": policies.count, "seconds": policies.time.as_secs_f64(),
                            "requests": policies.backend_requests},
    })
}
