//! The LB IPAM: gives Services of type LoadBalancer an address of the configured pools
//! (`--lb-pool`), as Cilium's LB IPAM or MetalLB do. Which address is a pure decision
//! ([`decide`]); this module reads the Services and writes their status.
//!
//! **Guaranteed**:
//! - a managed Service ([`decide::role`]) gets `status.loadBalancer.ingress: [{ip}]`, written
//!   through the status subresource by a merge patch carrying the Service's
//!   resourceVersion (a Service changed meanwhile fails the patch and is reconciled again
//!   with its new state); a Normal event names the address;
//! - no address is given to two Services: decisions are made one at a time (one worker),
//!   after the Service cache holds its full initial list, against a ledger rebuilt from
//!   every Service's status, where a status written but not yet seen in the cache stands
//!   for the one it shows (until the cache shows it or the Service is gone). Nothing else
//!   is kept in memory: a restart, or another leader, recovers the allocation from the
//!   Services;
//! - an address is released with the Service (deleted) or when it stops being a managed
//!   LoadBalancer (its status loses the pool addresses, with a Normal event); the Services
//!   left waiting for an address (exhausted pool, requested address held) are reconciled
//!   again at once then, and otherwise retried on [`RETRY`];
//! - an exhausted pool or an unavailable `spec.loadBalancerIP` is a Warning event on the
//!   Service (reasons in [`crate::events::reason`]) and a log line.
//!
//! **Assumed**: it runs only while this instance holds the leader lease ([`crate::run`]
//! starts it among the controllers), so one writer at a time; no other controller writes
//! the status of the Services it manages (on a cloud, either switch it off — no pools — or
//! give the cloud's Services another `loadBalancerClass`). Runs on the controller scaffold.
//!
//! **Left to others**: traffic to the addresses (the edge, issue 41); the Service
//! translator reads `status.loadBalancer.ingress` like any other ingress address.

pub mod decide;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::authz::{Attempt, Authz};
use crate::events::{reason, EventPublisher, Events};
use crate::health::Health;
use crate::locks::lock;
use crate::retry::RetryPolicy;
use crate::scaffold::{Action, Reconciler, Retry, Scaffold};
use decide::{Claims, Decision, Ledger, Pools};

/// The controller's name, as in `--controllers`.
pub const CONTROLLER: &str = "lbipam";
pub const READY_CHECK: &str = "lbipam-cache";

/// Failed writes, and Services waiting for an address besides the wake-ups on releases: a
/// second, doubling to a minute.
pub const RETRY: RetryPolicy = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60));

pub struct LbIpamContext {
    kube: Client,
    pools: Pools,
    store: Store<Service>,
    events: Events,
    authz: Authz,
    /// Addresses written, until the cache shows them.
    claims: Mutex<Claims>,
    /// Services refused an address: woken when one is released.
    waiting: Mutex<HashSet<ObjectRef<Service>>>,
    wake: mpsc::UnboundedSender<ObjectRef<Service>>,
    failures: Mutex<HashMap<ObjectRef<Service>, u32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum LbIpamError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl LbIpamContext {
    /// The context over the Service cache `store`, and the Services it wakes.
    fn new(
        kube: Client,
        pools: Pools,
        store: Store<Service>,
        events: &EventPublisher,
        authz: &Authz,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ObjectRef<Service>>) {
        let (wake, woken) = mpsc::unbounded_channel();
        let ctx = LbIpamContext {
            kube,
            pools,
            store,
            events: events.for_controller("midonet-kube-controllers-lbipam"),
            authz: authz.clone(),
            claims: Mutex::default(),
            waiting: Mutex::default(),
            wake,
            failures: Mutex::default(),
        };
        (Arc::new(ctx), woken)
    }

    /// Counts a failure (or a wait) for `key`; the delay before its retry.
    fn next_retry(&self, key: &ObjectRef<Service>) -> Duration {
        let mut f = lock(&self.failures);
        let n = f.entry(key.clone()).or_default();
        *n = n.saturating_add(1);
        RETRY.delay(*n)
    }

    fn settled(&self, key: &ObjectRef<Service>) {
        lock(&self.failures).remove(key);
        lock(&self.waiting).remove(key);
    }

    /// An address came free: every waiting Service is reconciled again.
    fn released(&self) {
        let waiting = std::mem::take(&mut *lock(&self.waiting));
        for key in waiting {
            let _ = self.wake.send(key);
        }
    }

    /// The decision for `svc` against the cache and the claims; records an assignment as
    /// a claim before it is written.
    fn decide(&self, svc: &Service) -> Decision {
        let services = self.store.state();
        let mut claims = lock(&self.claims);
        // A claim ends once the cache shows it, or with its Service.
        claims.retain(|key, claim| {
            self.store
                .get(key)
                .is_some_and(|s| !decide::shows(&s, *claim))
        });
        let ledger = Ledger::of(services.iter().map(|s| &**s), &self.pools, &claims);
        let decision = decide::decide(svc, &self.pools, &ledger);
        let key = ObjectRef::from_obj(svc);
        match decision {
            Decision::Assign(ip) => {
                claims.insert(key, Some(ip));
            }
            Decision::Clear | Decision::Refuse { clear: true, .. } => {
                claims.insert(key, None);
            }
            Decision::Refuse { clear: false, .. } | Decision::Keep => {}
        }
        decision
    }
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<LbIpamContext>) -> Result<Action, LbIpamError> {
    // A ledger without the Services not listed yet could hand out their addresses.
    if ctx.store.wait_until_ready().await.is_err() {
        return Ok(Action::requeue(RETRY.delay(1)));
    }
    let key = ObjectRef::from_obj(&*svc);
    let oref = svc.object_ref(&());
    match ctx.decide(&svc) {
        Decision::Keep => {}
        Decision::Assign(ip) => {
            write_ingress(&svc, &ctx, Some(ip)).await?;
            tracing::info!(%ip, "LoadBalancer address assigned");
            let msg = format!("assigned {ip} from the LB pools");
            ctx.events.normal(&oref, reason::LB_IP_ASSIGNED, msg).await;
        }
        Decision::Clear => {
            write_ingress(&svc, &ctx, None).await?;
            tracing::info!("LoadBalancer address released: no more a managed LoadBalancer");
            let msg = "released its LB pool address: no more a LoadBalancer of ours".into();
            ctx.events.normal(&oref, reason::LB_IP_RELEASED, msg).await;
            ctx.released();
        }
        Decision::Refuse {
            reason,
            message,
            clear,
        } => {
            if clear {
                write_ingress(&svc, &ctx, None).await?;
                ctx.released();
            }
            let delay = ctx.next_retry(&key);
            tracing::warn!(
                reason,
                "no LoadBalancer address: {message}; retrying in {delay:?}"
            );
            ctx.events.warning(&oref, reason, message).await;
            lock(&ctx.waiting).insert(key);
            return Ok(Action::requeue(delay));
        }
    }
    ctx.settled(&key);
    Ok(Action::await_change())
}

/// Sets the Service's ingress to exactly `ip`, or removes it.
async fn write_ingress(
    svc: &Service,
    ctx: &LbIpamContext,
    ip: Option<Ipv4Addr>,
) -> Result<(), LbIpamError> {
    let ingress = ip.map(|ip| serde_json::json!([{ "ip": ip.to_string() }]));
    // The resourceVersion precondition: decided on this state, written on this state.
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": svc.resource_version()},
        "status": {"loadBalancer": {"ingress": ingress}},
    });
    // Services are namespaced: one without a namespace is not from the apiserver.
    let Some(ns) = svc.namespace() else {
        tracing::warn!("a Service without a namespace: not written");
        return Ok(());
    };
    let api = Api::<Service>::namespaced(ctx.kube.clone(), &ns);
    let written = api
        .patch_status(
            &svc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    if let Err(err) = written {
        // Not written: the address is not claimed.
        lock(&ctx.claims).remove(&ObjectRef::from_obj(svc));
        return Err(err.into());
    }
    Ok(())
}

impl Reconciler for LbIpamContext {
    type Object = Service;
    type Error = LbIpamError;
    const NAME: &'static str = CONTROLLER;

    fn reconcile(
        self: Arc<Self>,
        svc: Arc<Service>,
    ) -> impl std::future::Future<Output = Result<Action, LbIpamError>> + Send + 'static {
        reconcile(svc, self)
    }

    fn failed<'a>(&'a self, svc: &'a Service, err: &'a LbIpamError) -> Retry<'a> {
        let LbIpamError::Kube(e) = err;
        Retry {
            after: self.next_retry(&ObjectRef::from_obj(svc)),
            refused: Some((
                Attempt::new(
                    "patch",
                    "services/status",
                    svc.metadata.namespace.as_deref(),
                ),
                e,
            )),
            failures: None,
        }
    }

    fn authz(&self) -> &Authz {
        &self.authz
    }
}

/// Runs the LB IPAM over `pools` (not empty) until `shutdown` resolves.
pub async fn run(
    kube: Client,
    pools: Pools,
    authz: Authz,
    events: EventPublisher,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scaffold = Scaffold::<LbIpamContext>::register(&health);
    health.register(READY_CHECK);
    let synced = health.clone();
    let (reader, writer) = kube::runtime::reflector::store();
    let (ctx, woken) = LbIpamContext::new(kube.clone(), pools, reader.clone(), &events, &authz);
    let deleted = ctx.clone();
    let services = crate::cache::reflected(writer, Api::all(kube), &authz, move |ok| {
        synced.set(READY_CHECK, ok)
    })
    .inspect(move |event| {
        // A deleted Service's address is free: the waiting ones may take it.
        if let Ok(watcher::Event::Delete(_)) = event {
            deleted.released();
        }
    })
    .applied_objects();
    // One at a time: see the module doc.
    let controller = scaffold
        .controller(services, reader, 1, shutdown)
        .reconcile_on(crate::streams::unbounded(woken));
    scaffold.run(controller, ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{answer_all, mock_apiserver, Exchange};
    use http::Method;
    use kube::runtime::watcher::Event;
    use midonet_translators::addr::{parse_cidr, CidrRules};
    use serde_json::json;

    /// The IPAM over `services` (its cache, fully listed) with the pool 192.0.2.0/29.
    fn context(
        kube: Client,
        services: &[Service],
    ) -> (
        Arc<LbIpamContext>,
        mpsc::UnboundedReceiver<ObjectRef<Service>>,
    ) {
        let (reader, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for s in services {
            writer.apply_watcher_event(&Event::InitApply(s.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let registry = prometheus::Registry::new();
        let authz = Authz::new(&registry).unwrap();
        let limits = crate::events::EventLimits {
            qps: 100.0,
            burst: 100,
        };
        let events = EventPublisher::start(answer_all(), authz.clone(), limits, &registry).unwrap();
        let pools = Pools::new(vec![parse_cidr("192.0.2.0/29", CidrRules::LB_POOL).unwrap()]);
        LbIpamContext::new(kube, pools, reader, &events, &authz)
    }

    fn svc(name: &str, spec: serde_json::Value, ingress: &[&str]) -> Service {
        let ingress: Vec<_> = ingress.iter().map(|ip| json!({"ip": ip})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": ingress}},
        }))
        .unwrap()
    }

    fn status_path(name: &str) -> String {
        format!("/api/v1/namespaces/ns/services/{name}/status")
    }

    #[tokio::test]
    async fn services_in_place_and_other_classes_cost_no_request() {
        let held = svc("held", json!({"type": "LoadBalancer"}), &["192.0.2.1"]);
        let foreign = svc(
            "foreign",
            json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}),
            &[],
        );
        let (kube, apiserver) = mock_apiserver();
        let (ctx, _) = context(kube, &[held.clone(), foreign.clone()]);
        let played = apiserver.play(vec![]);
        for s in [held, foreign] {
            let action = reconcile(Arc::new(s), ctx.clone()).await.unwrap();
            assert_eq!(action, Action::await_change());
        }
        played.done().await;
    }

    #[tokio::test]
    async fn an_address_written_is_claimed_until_the_cache_shows_it() {
        let [a, b] = ["a", "b"].map(|n| svc(n, json!({"type": "LoadBalancer"}), &[]));
        let (kube, apiserver) = mock_apiserver();
        let (ctx, _) = context(kube, &[a.clone(), b.clone()]);
        let played = apiserver.play(vec![
            Exchange::new(Method::PATCH, &status_path("a"))
                .with("/status/loadBalancer/ingress/0/ip", json!("192.0.2.1"))
                // Decided on this state, written on this state.
                .with("/metadata/resourceVersion", json!("7")),
            // The cache does not show a's address yet: b gets the next one.
            Exchange::new(Method::PATCH, &status_path("b"))
                .with("/status/loadBalancer/ingress/0/ip", json!("192.0.2.2")),
        ]);
        reconcile(Arc::new(a), ctx.clone()).await.unwrap();
        reconcile(Arc::new(b), ctx.clone()).await.unwrap();
        played.done().await;
    }

    #[tokio::test]
    async fn a_refused_write_releases_its_claim_and_is_retried() {
        let [a, b] = ["a", "b"].map(|n| svc(n, json!({"type": "LoadBalancer"}), &[]));
        let (kube, apiserver) = mock_apiserver();
        let (ctx, _) = context(kube, &[a.clone(), b.clone()]);
        let played = apiserver.play(vec![
            Exchange::new(Method::PATCH, &status_path("a")).fail(409, "Conflict"),
            Exchange::new(Method::PATCH, &status_path("b"))
                .with("/status/loadBalancer/ingress/0/ip", json!("192.0.2.1")),
        ]);
        let a = Arc::new(a);
        let err = reconcile(a.clone(), ctx.clone()).await.unwrap_err();
        let retry = Reconciler::failed(&*ctx, &a, &err);
        let (attempt, _) = retry.refused.expect("an apiserver answer");
        assert_eq!(
            (attempt.verb, attempt.resource),
            ("patch", "services/status")
        );
        reconcile(Arc::new(b), ctx.clone()).await.unwrap();
        played.done().await;
    }

    #[tokio::test]
    async fn a_release_wakes_the_services_waiting_for_an_address() {
        let full: Vec<Service> = (1..=6)
            .map(|n| {
                svc(
                    &format!("s{n}"),
                    json!({"type": "LoadBalancer"}),
                    &[&format!("192.0.2.{n}")],
                )
            })
            .collect();
        let waiting = svc("waiting", json!({"type": "LoadBalancer"}), &[]);
        let was = svc("s1", json!({"type": "ClusterIP"}), &["192.0.2.1"]);
        let (kube, apiserver) = mock_apiserver();
        let (ctx, mut woken) = context(kube, &[full, vec![waiting.clone()]].concat());
        let played = apiserver.play(vec![Exchange::new(Method::PATCH, &status_path("s1"))
            .with("/status/loadBalancer/ingress", json!(null))]);
        // Exhausted: a retry is scheduled, and it waits for a release.
        let action = reconcile(Arc::new(waiting.clone()), ctx.clone())
            .await
            .unwrap();
        assert_ne!(action, Action::await_change());
        assert!(woken.try_recv().is_err());
        // s1 stops being a LoadBalancer: its address is released, the waiting one woken.
        reconcile(Arc::new(was), ctx.clone()).await.unwrap();
        assert_eq!(woken.try_recv().ok(), Some(ObjectRef::from_obj(&waiting)));
        played.done().await;
    }
}
