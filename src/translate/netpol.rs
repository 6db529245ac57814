//! The NetworkPolicy translator controller.
//!
//! A policy's translation reads the whole cluster (the pods it selects, the pods and
//! namespaces its peers select, the named ports of pods), which the generic runner's "one
//! dependency" does not express. This controller keeps three caches: NetworkPolicies,
//! Pods (trimmed to what policies read: labels, node, host network, phase, addresses,
//! named container ports) and Namespaces (labels), and re-translates
//!
//! - a policy when it changes (and on every resync);
//! - on a Pod change: the policies of the pod's namespace and every policy with a
//!   `namespaceSelector` peer (those are the only ones whose output can change);
//! - on a Namespace change: every policy with a `namespaceSelector` peer.
//!
//! The written Translation is compared with the cache as for every other kind, so a
//! re-translation that changes nothing writes nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, ContainerPort, Namespace, Pod, PodSpec, PodStatus};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use midonet_translators::policy::PolicyCluster;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{owner_reference, RunnerConfig, RunnerError, Shared};
use crate::health::Health;

/// Controller name as used in `--controllers`.
pub const NAME: &str = "networkpolicy";

/// Keeps what `PolicyPod::from_pod` reads.
pub fn trim_pod(pod: &mut Pod) {
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            host_network: spec.host_network,
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    ports: c.ports.map(|ports| {
                        ports
                            .into_iter()
                            .filter(|p| p.name.is_some())
                            .map(|p| ContainerPort {
                                name: p.name,
                                container_port: p.container_port,
                                protocol: p.protocol,
                                ..ContainerPort::default()
                            })
                            .collect()
                    }),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            ..PodStatus::default()
        });
    }
    pod.metadata.annotations = None;
}

/// Whether any peer of the policy selects namespaces by label.
pub fn has_namespace_selector(np: &NetworkPolicy) -> bool {
    let Some(spec) = np.spec.as_ref() else {
        return false;
    };
    let ingress = spec
        .ingress
        .iter()
        .flatten()
        .flat_map(|r| r.from.iter().flatten());
    let egress = spec
        .egress
        .iter()
        .flatten()
        .flat_map(|r| r.to.iter().flatten());
    ingress
        .chain(egress)
        .any(|peer| peer.namespace_selector.is_some())
}

/// The policies whose translation a change of a pod in `namespace` (or of that namespace,
/// with `namespace = None`) can change.
pub fn affected(
    policies: &[Arc<NetworkPolicy>],
    namespace: Option<&str>,
) -> Vec<ObjectRef<NetworkPolicy>> {
    policies
        .iter()
        .filter(|np| {
            (namespace.is_some() && np.namespace().as_deref() == namespace)
                || has_namespace_selector(np)
        })
        .map(|np| ObjectRef::from_obj(&**np))
        .collect()
}

struct Ctx {
    shared: Arc<Shared>,
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
    synced: Arc<AtomicBool>,
    namespaces_synced: Arc<AtomicBool>,
}

async fn reconcile(np: Arc<NetworkPolicy>, ctx: Arc<Ctx>) -> Result<Action, RunnerError> {
    if np.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (Some(owner), Some(uid)) = (owner_reference(&*np), np.uid()) else {
        return Ok(Action::await_change());
    };
    // A policy translated against a partial cache would miss pods: wait for both lists.
    if !ctx.synced.load(Ordering::Acquire) || !ctx.namespaces_synced.load(Ordering::Acquire) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let timer = ctx
        .shared
        .metrics
        .reconcile_duration
        .with_label_values(&[NAME])
        .start_timer();
    let pods = ctx.pods.state();
    let namespaces = ctx.namespaces.state();
    let cluster = PolicyCluster::new(namespaces.iter().map(|n| &**n), pods.iter().map(|p| &**p));
    let translated = midonet_translators::network_policy(&ctx.shared.config, &np, &cluster);
    let oref = np.object_ref(&());
    let action =
        super::apply_translated(&ctx.shared, NAME, (owner, oref), &uid, &[], translated).await?;
    timer.observe_duration();
    Ok(action)
}

fn error_policy(np: Arc<NetworkPolicy>, err: &RunnerError, ctx: Arc<Ctx>) -> Action {
    super::translation_failed(&ctx.shared, NAME, &*np, err)
}

/// Runs the NetworkPolicy controller until `shutdown` resolves.
pub async fn run(
    shared: Arc<Shared>,
    config: RunnerConfig,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let liveness = health.liveness().register(NAME);
    let ticks = crate::streams::every(config.resync);
    let (gone_tx, gone_rx) = mpsc::unbounded_channel::<ObjectRef<NetworkPolicy>>();
    shared.index.on_owned_deleted(
        &NetworkPolicy::kind(&()),
        Box::new(move |name, namespace| {
            let _ = gone_tx.send(ObjectRef::new(name).within(namespace));
        }),
    );
    let gone = crate::streams::unbounded(gone_rx);

    let mut checks: HashMap<&str, String> = HashMap::new();
    for (what, check) in [
        ("policies", "networkpolicy-cache"),
        ("pods", "networkpolicy-pods-cache"),
        ("namespaces", "networkpolicy-namespaces-cache"),
    ] {
        health.register(check);
        checks.insert(what, check.to_string());
    }
    let flag = |what: &str, listed: Option<Arc<AtomicBool>>| {
        let health = health.clone();
        let check = checks.get(what).cloned().unwrap_or_default();
        move |ok: bool| {
            if let (true, Some(l)) = (ok, &listed) {
                l.store(true, Ordering::Release);
            }
            health.set(&check, ok)
        }
    };

    let (policies, policy_stream) = crate::cache::cached(
        Api::<NetworkPolicy>::all(shared.kube.clone()),
        watcher::Config::default().any_semantic(),
        &shared.authz,
        flag("policies", None),
    );
    let pods_synced = Arc::new(AtomicBool::new(false));
    let (pods, pod_writer) = reflector::store();
    let pod_events = crate::cache::reflected_trimmed(
        pod_writer,
        Api::<Pod>::all(shared.kube.clone()),
        watcher::Config::default().any_semantic(),
        &shared.authz,
        flag("pods", Some(pods_synced.clone())),
        trim_pod,
    )
    .touched_objects();
    let namespaces_synced = Arc::new(AtomicBool::new(false));
    let (namespaces, ns_writer) = reflector::store();
    let ns_events = crate::cache::reflected(
        ns_writer,
        Api::<Namespace>::all(shared.kube.clone()),
        watcher::Config::default().any_semantic(),
        &shared.authz,
        flag("namespaces", Some(namespaces_synced.clone())),
    )
    .touched_objects();

    let stream = liveness.queue_of(policy_stream);
    let by_pod = policies.clone();
    let by_ns = policies.clone();
    let controller = Controller::for_stream(stream, policies.clone())
        .with_config(controller::Config::default().concurrency(config.workers))
        .reconcile_all_on(ticks)
        .reconcile_on(gone)
        .watches_stream(pod_events, move |pod: Pod| {
            affected(&by_pod.state(), pod.namespace().as_deref())
        })
        .watches_stream(ns_events, move |_: Namespace| {
            affected(&by_ns.state(), None)
        })
        .graceful_shutdown_on(shutdown);

    shared.translations_synced.wait().await;
    let ctx = Arc::new(Ctx {
        shared,
        pods,
        namespaces,
        synced: pods_synced,
        namespaces_synced,
    });
    let probe = liveness.clone();
    controller
        .run(
            move |np, ctx| {
                let span = crate::logfields::object_span(NAME, &*np);
                probe.reconcile(reconcile(np, ctx).instrument(span))
            },
            error_policy,
            ctx,
        )
        .for_each(|res| {
            liveness.progressed();
            async move {
                if let Err(err) = res {
                    tracing::debug!(controller = NAME, error = %err, "translator queue");
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn np(ns: &str, spec: serde_json::Value) -> Arc<NetworkPolicy> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": ns}, "spec": spec}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn a_pod_change_touches_its_namespace_and_namespace_selecting_policies() {
        let local = np("x", json!({"podSelector": {}}));
        let ns_sel = np(
            "y",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}),
        );
        let other = np(
            "z",
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
        );
        let all = vec![local, ns_sel, other];
        let hit: Vec<String> = affected(&all, Some("x"))
            .into_iter()
            .map(|r| r.namespace.unwrap_or_default())
            .collect();
        assert_eq!(hit, vec!["x", "y"]);
        let hit: Vec<String> = affected(&all, None)
            .into_iter()
            .map(|r| r.namespace.unwrap_or_default())
            .collect();
        assert_eq!(hit, vec!["y"]);
    }

    #[test]
    fn a_trimmed_pod_translates_as_the_full_one() {
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "x", "labels": {"pod": "a"},
                         "annotations": {"a": "b"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 81}]}]},
            "status": {"phase": "Running", "podIP": "10.1.1.5",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let mut trimmed = full.clone();
        trim_pod(&mut trimmed);
        assert!(trimmed.status.as_ref().unwrap().conditions.is_none());
        assert_eq!(
            midonet_translators::policy::PolicyPod::from_pod(&trimmed),
            midonet_translators::policy::PolicyPod::from_pod(&full)
        );
    }
}
