//! The NetworkPolicy translator controller.
//!
//! It writes two kinds of Translations:
//!
//! - per policy, `networkpolicy.<v>.<name>` in the policy's namespace, owned by the policy
//!   (chains and rules), as every kind's;
//! - per *group* (the pods a selector picks: see `midonet_translators::policy::GroupKey`),
//!   `networkpolicygroup.<v>.<hash>` with the IP address group or port group and its
//!   members, in the selector's namespace, or in `kube-system` for a `namespaceSelector`
//!   peer (it spans namespaces). Every policy with the same selector uses the same group,
//!   so a pod's arrival is one member added, not one per policy.
//!
//! A group Translation has **no owner**: owner references cannot cross namespaces (a
//! cluster-wide group serves policies of every namespace), and the runner files a
//! Translation under its first owner, whose re-translation would prune a group it did not
//! ask for. Instead the group Translations carry [`GROUP_LABEL`] (the owner index files
//! them under [`POLICY_GROUPS_OWNER`]), and one group pass makes them exactly those the
//! cached policies use, like the global Translations' controller: it writes what differs
//! and prunes the rest (old versions included). It runs after any change of a policy, pod or namespace
//! (coalesced), when a policy's or group's Translation is gone, and on every resync; a
//! controller that was offline while the last user of a group went prunes it on start.
//!
//! An unused group is pruned only once no NetworkPolicy Translation is still being pushed or
//! deleted (or after [`PRUNE_GRACE`]): until then a rule of an old generation may still
//! name it, and the rules go before the group they match on.
//!
//! A policy's own Translation reads the cluster only for named ports (a policy without one
//! is translated without reading the pods at all), so it is re-translated
//!
//! - when the policy changes (and on every resync);
//! - on a Pod change: the policies of the pod's namespace with a named port in an ingress
//!   rule, and every policy with a named port in an egress rule (those resolve on every pod).
//!
//! The written Translations are compared with the cache as for every other kind, so a
//! re-translation that changes nothing writes nothing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use midonet_translators::meta::VERSION_LABEL;
use midonet_translators::policy::{PolicyCluster, GROUP_LABEL};
use midonet_translators::DesiredTranslation;
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

use super::index::{cache_ref, POLICY_GROUPS_OWNER};
use super::pods::CachedPod;
use super::{owner_reference, RunnerConfig, RunnerError, SyncOutcome, TranslatorContext};
use crate::authz::Authz;
use crate::crd::{Translation, TranslationKey};
use crate::health::Health;
use crate::retry::RetryPolicy;
use crate::scaffold::{Action, NextPass, Reconciler, Retry, Scaffold};

/// Controller name as used in `--controllers`.
pub const NAME: &str = "networkpolicy";

/// Whether a policy names a port by name in an ingress rule (`ingress`) or an egress rule.
fn has_named_port(np: &NetworkPolicy, ingress: bool) -> bool {
    let Some(spec) = np.spec.as_ref() else {
        return false;
    };
    let ports: Vec<_> = if ingress {
        spec.ingress
            .iter()
            .flatten()
            .flat_map(|r| r.ports.iter().flatten())
            .collect()
    } else {
        spec.egress
            .iter()
            .flatten()
            .flat_map(|r| r.ports.iter().flatten())
            .collect()
    };
    ports
        .iter()
        .any(|p| matches!(p.port, Some(IntOrString::String(_))))
}

/// Whether the policy's own Translation reads the cluster: only to resolve a named port
/// (`midonet_translators::network_policy`); the groups are the group pass's.
fn reads_pods(np: &NetworkPolicy) -> bool {
    has_named_port(np, true) || has_named_port(np, false)
}

/// The policies whose own Translation a change of a pod in `namespace` can change: only
/// named ports read pods there (ingress ones on the selected pods of the policy's
/// namespace, egress ones on every pod). Group membership is the group pass's.
pub fn affected(policies: &[Arc<NetworkPolicy>], namespace: &str) -> Vec<ObjectRef<NetworkPolicy>> {
    policies
        .iter()
        .filter(|np| {
            (np.namespace().as_deref() == Some(namespace) && has_named_port(np, true))
                || has_named_port(np, false)
        })
        .map(|np| ObjectRef::from_obj(&**np))
        .collect()
}

/// The context of the policies' controller.
struct PolicyContext {
    shared: Arc<TranslatorContext>,
    pods: Store<CachedPod>,
    namespaces: Store<Namespace>,
    /// Whether `pods` and `namespaces` hold their initial lists.
    pods_listed: Arc<AtomicBool>,
    namespaces_listed: Arc<AtomicBool>,
}

impl Reconciler for PolicyContext {
    type Object = NetworkPolicy;
    type Error = RunnerError;
    const NAME: &'static str = NAME;

    fn reconcile(
        self: Arc<Self>,
        np: Arc<NetworkPolicy>,
    ) -> impl std::future::Future<Output = Result<Action, RunnerError>> + Send + 'static {
        reconcile(np, self)
    }

    fn failed<'a>(&'a self, np: &'a NetworkPolicy, err: &'a RunnerError) -> Retry<'a> {
        self.shared.translation_failed(NAME, np, err)
    }

    fn authz(&self) -> &Authz {
        &self.shared.authz
    }
}

async fn reconcile(np: Arc<NetworkPolicy>, ctx: Arc<PolicyContext>) -> Result<Action, RunnerError> {
    if np.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (Some(owner), Some(uid)) = (owner_reference(&*np), np.uid()) else {
        return Ok(Action::await_change());
    };
    // A policy translated against a partial cache would miss pods: wait for both lists.
    if !ctx.pods_listed.load(Ordering::Acquire) || !ctx.namespaces_listed.load(Ordering::Acquire) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let timer = ctx
        .shared
        .metrics
        .reconcile_duration
        .with_label_values(&[NAME])
        .start_timer();
    // Only named ports read the pods: reading every pod for each policy would make a
    // burst of policies quadratic in the cluster's size.
    let cluster = match reads_pods(&np) {
        true => PolicyCluster::new(
            ctx.namespaces.state().iter().map(|n| &**n),
            ctx.pods.state().iter().map(|p| p.to_pod()),
        ),
        false => PolicyCluster::default(),
    };
    let translated = midonet_translators::network_policy(&ctx.shared.config, &np, &cluster);
    let oref = np.object_ref(&());
    let action =
        super::apply_translated(&ctx.shared, NAME, (owner, oref), &uid, &[], translated).await?;
    timer.observe_duration();
    Ok(action)
}

/// How long an unused group is kept while NetworkPolicy Translations are still being pushed
/// or deleted (one of them may still name it); past this it goes anyway.
pub const PRUNE_GRACE: Duration = Duration::from_secs(30);

/// Name of the group pass in logs and metrics.
pub const GROUPS_NAME: &str = "networkpolicy-groups";

/// Whether NetworkPolicy Translations are still in flight: some is not pushed yet, or is
/// being deleted (its backend rules may still name a group no policy uses any more).
pub fn policy_translations_in_flight(translations: &[Arc<Translation>]) -> bool {
    translations.iter().any(|tr| {
        tr.owner_references()
            .first()
            .is_some_and(|o| o.kind == "NetworkPolicy")
            && !tr.is_ready()
    })
}

/// Which stale group Translations to keep for now: those unused for less than
/// [`PRUNE_GRACE`] while policy Translations are in flight. `unused_since` remembers when
/// each was first seen stale (entries of groups no longer stale are dropped).
pub fn keep_stale(
    stale: &[TranslationKey],
    in_flight: bool,
    unused_since: &mut HashMap<TranslationKey, Instant>,
    now: Instant,
) -> Vec<TranslationKey> {
    unused_since.retain(|k, _| stale.contains(k));
    stale
        .iter()
        .filter(|k| {
            let since = *unused_since.entry((*k).clone()).or_insert(now);
            in_flight && now.duration_since(since) < PRUNE_GRACE
        })
        .cloned()
        .collect()
}

/// A kept group Translation as it is cached: re-desired as it is, it is neither written nor
/// pruned.
fn as_cached(
    shared: &TranslatorContext,
    (namespace, name): &TranslationKey,
) -> Option<DesiredTranslation> {
    let tr = shared.translations.get(&cache_ref(namespace, name))?;
    Some(DesiredTranslation {
        name: name.clone(),
        namespace: namespace.clone(),
        labels: tr
            .labels_iter()
            .filter(|(k, _)| *k == VERSION_LABEL || *k == GROUP_LABEL)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        resources: tr
            .spec
            .as_ref()
            .map(|s| s.resources.clone())
            .unwrap_or_default(),
    })
}

/// The group pass: makes the group Translations exactly those the cached policies use.
struct Groups {
    shared: Arc<TranslatorContext>,
    policies: Store<NetworkPolicy>,
    pods: Store<CachedPod>,
    namespaces: Store<Namespace>,
    /// Whether the policies, pods and namespaces hold their initial lists.
    listed: [Arc<AtomicBool>; 3],
    unused_since: HashMap<TranslationKey, Instant>,
}

impl Groups {
    async fn pass(&mut self) -> Result<Option<Duration>, RunnerError> {
        if !self.listed.iter().all(|f| f.load(Ordering::Acquire)) {
            return Ok(Some(Duration::from_millis(200)));
        }
        let shared = self.shared.clone();
        let timer = shared
            .metrics
            .reconcile_duration
            .with_label_values(&[GROUPS_NAME])
            .start_timer();
        let mut desired = self.used_groups();
        let kept = self.kept_stale_groups(&desired);
        desired.extend(kept.iter().filter_map(|key| as_cached(&shared, key)));
        let outcome = super::sync_translations(
            &shared,
            GROUPS_NAME,
            None,
            POLICY_GROUPS_OWNER,
            &[],
            desired,
        )
        .await?;
        timer.observe_duration();
        shared
            .metrics
            .reconciles
            .with_label_values(&[GROUPS_NAME, outcome.result()])
            .inc();
        Ok(match outcome {
            SyncOutcome::WaitingForDeletion => Some(Duration::from_secs(2)),
            SyncOutcome::WaitingForPush => Some(Duration::from_millis(500)),
            _ if !kept.is_empty() => Some(Duration::from_secs(1)),
            _ => None,
        })
    }

    /// The group Translations the cached policies use.
    fn used_groups(&self) -> Vec<DesiredTranslation> {
        let policies = self.policies.state();
        let pods = self.pods.state();
        let namespaces = self.namespaces.state();
        let cluster = PolicyCluster::new(
            namespaces.iter().map(|n| &**n),
            pods.iter().map(|p| p.to_pod()),
        );
        // A terminating namespace refuses new writes, and its policies go with it: writing
        // their groups there would fail the whole pass.
        let terminating: HashSet<String> = namespaces
            .iter()
            .filter(|ns| ns.meta().deletion_timestamp.is_some())
            .map(|ns| ns.name_any())
            .collect();
        let in_terminating = |np: &NetworkPolicy| {
            np.meta()
                .namespace
                .as_ref()
                .is_some_and(|ns| terminating.contains(ns))
        };
        midonet_translators::address_groups(
            &self.shared.config,
            policies
                .iter()
                .filter(|np| np.meta().deletion_timestamp.is_none() && !in_terminating(np))
                .map(|np| &**np),
            &cluster,
        )
    }

    /// The group Translations no policy uses any more that are kept for now (see
    /// [`keep_stale`]).
    fn kept_stale_groups(&mut self, used: &[DesiredTranslation]) -> Vec<TranslationKey> {
        let wanted: HashSet<TranslationKey> = used
            .iter()
            .map(|d| (d.namespace.clone(), d.name.clone()))
            .collect();
        let stale: Vec<TranslationKey> = self
            .shared
            .index
            .owned_by(POLICY_GROUPS_OWNER)
            .into_iter()
            .filter(|k| !wanted.contains(k))
            .collect();
        let in_flight =
            !stale.is_empty() && policy_translations_in_flight(&self.shared.translations.state());
        keep_stale(&stale, in_flight, &mut self.unused_since, Instant::now())
    }

    /// Runs a pass whenever `wake` is notified, on every resync and when a pass asks to
    /// look again; forever (the caller drops it on shutdown).
    async fn run(mut self, wake: Arc<Notify>, resync: Duration) {
        self.shared.translations_synced.wait().await;
        let mut schedule = NextPass::new(GROUPS_RETRY, resync);
        loop {
            let next = match self
                .pass()
                .instrument(tracing::info_span!("groups", controller = GROUPS_NAME))
                .await
            {
                Ok(asked) => schedule.after_success(asked),
                Err(err) => {
                    tracing::warn!(controller = GROUPS_NAME, error = %err, "group pass failed; retrying");
                    self.shared
                        .metrics
                        .reconciles
                        .with_label_values(&[GROUPS_NAME, "error"])
                        .inc();
                    schedule.after_failure()
                }
            };
            tokio::select! {
                _ = wake.notified() => {
                    // Coalesce a burst of events (a pod's creation touches it several times).
                    tokio::time::sleep(COALESCE).await;
                }
                _ = tokio::time::sleep(next) => {}
            }
        }
    }
}

/// How long the group pass waits after a first event for the ones that follow it.
const COALESCE: Duration = Duration::from_millis(100);
/// Retries of a failed group pass (capped by the resync period).
const GROUPS_RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(400), Duration::from_secs(30));

/// Runs the NetworkPolicy controller, and its group pass, until `shutdown` resolves.
pub async fn run(
    shared: Arc<TranslatorContext>,
    config: RunnerConfig,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scaffold = Scaffold::<PolicyContext>::register(&health).resync_every(config.resync);
    // Whatever may change the groups wakes the group pass.
    let wake = Arc::new(Notify::new());
    let gone = policies_of_gone_translations(&shared, &wake);
    let (synced, policies_listed) = health.cache_check("networkpolicy-cache");
    let (policies, policy_events) = crate::cache::cached(
        Api::<NetworkPolicy>::all(shared.kube.clone()),
        &shared.authz,
        synced,
    );
    let policy_events = policy_events.inspect(waker(&wake));
    // Pods come from the process's one Pod cache (see super::pods).
    let (synced, pods_listed) = health.cache_check("networkpolicy-pods-cache");
    let pods = shared.pods.store();
    let pod_events = shared
        .pods
        .subscribe(synced)
        .map(crate::cache::Cached::object)
        .inspect(waker(&wake));
    let (synced, namespaces_listed) = health.cache_check("networkpolicy-namespaces-cache");
    let (namespaces, ns_writer) = reflector::store();
    let ns_events = crate::cache::reflected(
        ns_writer,
        Api::<Namespace>::all(shared.kube.clone()),
        &shared.authz,
        synced,
    )
    .touched_objects()
    .inspect(waker(&wake));

    let groups = Groups {
        shared: shared.clone(),
        policies: policies.clone(),
        pods: pods.clone(),
        namespaces: namespaces.clone(),
        listed: [
            policies_listed,
            pods_listed.clone(),
            namespaces_listed.clone(),
        ],
        unused_since: HashMap::new(),
    };
    let by_pod = policies.clone();
    let controller = scaffold
        .controller(policy_events, policies, config.workers, shutdown)
        .reconcile_on(gone)
        .watches_shared_stream(pod_events, move |pod: Arc<CachedPod>| {
            // Every stored Pod has a namespace.
            pod.namespace()
                .map(|ns| affected(&by_pod.state(), &ns))
                .unwrap_or_default()
        })
        // Namespaces only matter to the groups; the stream still has to be polled.
        .watches_stream(ns_events, |_: Namespace| {
            Vec::<ObjectRef<NetworkPolicy>>::new()
        });

    shared.translations_synced.wait().await;
    let ctx = Arc::new(PolicyContext {
        shared,
        pods,
        namespaces,
        pods_listed,
        namespaces_listed,
    });
    // The group pass ends with the policies' controller (its shutdown).
    tokio::select! {
        _ = scaffold.run(controller, ctx) => {}
        _ = groups.run(wake, config.resync) => {}
    }
}

/// A callback that wakes the group pass, whatever it is handed.
fn waker<T>(wake: &Arc<Notify>) -> impl FnMut(&T) + Send + Sync + 'static {
    let wake = wake.clone();
    move |_| wake.notify_one()
}

/// The policies whose Translation disappears, re-triggered (level-triggered repair); a
/// policy's or group's Translation gone also wakes the group pass (it may be what held back
/// the pruning of a group).
fn policies_of_gone_translations(
    shared: &TranslatorContext,
    wake: &Arc<Notify>,
) -> impl futures::Stream<Item = ObjectRef<NetworkPolicy>> + Send + 'static {
    let (gone_tx, gone_rx) = mpsc::unbounded_channel::<ObjectRef<NetworkPolicy>>();
    let woken = wake.clone();
    shared.index.on_owned_deleted(
        &NetworkPolicy::kind(&()),
        Box::new(move |name, namespace| {
            woken.notify_one();
            let _ = gone_tx.send(ObjectRef::new(name).within(namespace));
        }),
    );
    let woken = wake.clone();
    shared.index.on_owned_deleted(
        POLICY_GROUPS_OWNER,
        Box::new(move |_, _| woken.notify_one()),
    );
    crate::streams::unbounded(gone_rx)
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
    fn a_pod_change_touches_only_policies_with_named_ports_it_may_resolve() {
        let plain = np(
            "x",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}],
                                                   "ports": [{"port": 80}]}]}),
        );
        let ingress_named = np(
            "x",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}),
        );
        let ingress_named_elsewhere = np(
            "y",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}),
        );
        let egress_named = np(
            "z",
            json!({"podSelector": {}, "policyTypes": ["Egress"],
                   "egress": [{"ports": [{"port": "dns", "protocol": "UDP"}]}]}),
        );
        let all = vec![plain, ingress_named, ingress_named_elsewhere, egress_named];
        // Only those read the pods at all.
        let read: Vec<bool> = all.iter().map(|p| reads_pods(p)).collect();
        assert_eq!(read, [false, true, true, true]);
        let hit: Vec<String> = affected(&all, "x")
            .into_iter()
            .map(|r| r.namespace.unwrap_or_default())
            .collect();
        assert_eq!(hit, vec!["x", "z"]);
        let hit: Vec<String> = affected(&all, "w")
            .into_iter()
            .map(|r| r.namespace.unwrap_or_default())
            .collect();
        assert_eq!(hit, vec!["z"]);
    }

    fn key(name: &str) -> TranslationKey {
        ("ns".to_string(), name.to_string())
    }

    #[test]
    fn an_unused_group_waits_for_policy_translations_in_flight_at_most_the_grace() {
        let mut since = HashMap::new();
        let t0 = Instant::now();
        let stale = vec![key("g1")];
        // Nothing in flight: pruned at once.
        assert!(keep_stale(&stale, false, &mut since, t0).is_empty());
        // In flight: kept, until the grace has passed since it was first seen unused.
        assert_eq!(keep_stale(&stale, true, &mut since, t0), stale);
        let later = t0 + PRUNE_GRACE - Duration::from_millis(1);
        assert_eq!(keep_stale(&stale, true, &mut since, later), stale);
        assert!(keep_stale(&stale, true, &mut since, t0 + PRUNE_GRACE).is_empty());
        // Used again, then unused again: the grace starts over.
        assert!(keep_stale(&[], true, &mut since, t0 + PRUNE_GRACE).is_empty());
        assert!(since.is_empty());
        let again = t0 + PRUNE_GRACE * 2;
        assert_eq!(keep_stale(&stale, true, &mut since, again), stale);
    }

    #[test]
    fn only_unpushed_or_terminating_policy_translations_are_in_flight() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
        let owned = |kind: &str, ready: bool, deleting: bool| {
            let mut tr =
                Translation::new("t", "ns", crate::crd::TranslationSpec { resources: vec![] });
            tr.metadata.owner_references = Some(vec![OwnerReference {
                kind: kind.into(),
                ..OwnerReference::default()
            }]);
            if ready {
                tr.status = Some(crate::crd::TranslationStatus {
                    conditions: vec![crate::crd::Condition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..crate::crd::Condition::default()
                    }],
                    ..crate::crd::TranslationStatus::default()
                });
            }
            if deleting {
                tr.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            }
            Arc::new(tr)
        };
        assert!(!policy_translations_in_flight(&[
            owned("NetworkPolicy", true, false),
            owned("Pod", false, false),
        ]));
        assert!(policy_translations_in_flight(&[owned(
            "NetworkPolicy",
            false,
            false
        )]));
        assert!(policy_translations_in_flight(&[owned(
            "NetworkPolicy",
            true,
            true
        )]));
    }
}
