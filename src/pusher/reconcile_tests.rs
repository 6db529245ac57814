//! The pusher's reconcile against a mocked apiserver ([`crate::fixtures`]) and the MidoNet
//! API simulator: what it writes to Kubernetes, in which order, for what the backend did.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use kube::runtime::watcher;
use kube::Client;
use midonet_translators::meta::FINALIZER;
use midonet_translators::model::Resource;
use midonet_translators::TranslationResource;
use serde_json::json;

use super::{PusherConfig, PusherContext, PusherMetrics};
use crate::authz::Authz;
use crate::crd::{Translation, TranslationSpec};
use crate::events::{reason, EventLimits, EventPublisher};
use crate::fixtures::{answer_all, mock_apiserver, translations_path, ApiServer, Exchange};
use crate::health::Health;
use crate::informer::TranslationInformer;
use crate::scaffold::{Action, Reconciler};

const BRIDGE: &str = "11111111-1111-4111-8111-111111111111";

/// A pusher over a mocked apiserver, its events written through `events`, and a simulator
/// with `faults`; `tr` is in its cache.
async fn pusher(
    faults: midonet_sim::admin::Faults,
    events: Client,
    tr: &Translation,
) -> (Pusher, ApiServer, midonet_sim::SimHandle) {
    let registry = prometheus::Registry::new();
    let cfg = midonet_sim::SimConfig {
        faults,
        ..midonet_sim::SimConfig::default()
    };
    let (backend, sim) = crate::fixtures::simulator(cfg, &registry).await;
    let (kube, apiserver) = mock_apiserver();
    let authz = Authz::new(&registry).unwrap();
    let limits = EventLimits {
        qps: 100.0,
        burst: 100,
    };
    let events = EventPublisher::start(events, authz.clone(), limits, &registry).unwrap();
    let mut informer = TranslationInformer::new(kube.clone(), authz.clone(), Health::new());
    let ctx = PusherContext::new(
        kube,
        backend,
        PusherMetrics::new(&registry).unwrap(),
        PusherConfig::default(),
        authz,
        &events,
        &mut informer,
    );
    informer.replay(vec![watcher::Event::Apply(tr.clone())]);
    (Pusher { ctx, informer }, apiserver, sim)
}

/// The pusher, and the informer that feeds its cache.
struct Pusher {
    ctx: Arc<PusherContext>,
    informer: TranslationInformer,
}

impl Pusher {
    async fn reconcile(&self, tr: &Translation) -> Action {
        self.ctx
            .clone()
            .reconcile(Arc::new(tr.clone()))
            .await
            .unwrap()
    }

    /// `tr` being deleted, with the status the pusher recorded for it, as the watch
    /// brings it to the cache.
    fn delete(&mut self, tr: &Translation) -> Translation {
        let mut tr = tr.clone();
        tr.status = Some(self.ctx.recorded_status(&tr));
        tr.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        self.informer
            .replay(vec![watcher::Event::Apply(tr.clone())]);
        tr
    }
}

/// A Translation of one bridge, guarded by the pusher's finalizer.
fn guarded() -> Translation {
    let bridge = TranslationResource::new("Bridge", "", format!(r#"{{"id":"{BRIDGE}"}}"#));
    let mut tr = Translation::new(
        "t",
        "ns",
        TranslationSpec {
            resources: vec![bridge],
        },
    );
    tr.metadata.uid = Some("u1".into());
    tr.metadata.generation = Some(1);
    tr.metadata.resource_version = Some("7".into());
    tr.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    tr
}

fn status_path() -> String {
    translations_path("ns", Some("t/status"))
}

/// The status write of a push of `tr` that went through.
fn pushed_status() -> Exchange {
    Exchange::new(Method::PUT, &status_path())
        .with("/metadata/finalizers", json!([FINALIZER]))
        .with("/metadata/resourceVersion", json!("7"))
        .with("/status/observedGeneration", json!(1))
        .with("/status/conditions/0/status", json!("True"))
}

/// The bridges the simulator holds.
fn bridges(sim: &midonet_sim::StoreReader) -> usize {
    let resources = sim.resources().unwrap();
    resources
        .iter()
        .filter(|r| matches!(r, Resource::Bridge(_)))
        .count()
}

/// Errors of `method` requests: every one answered 500.
fn failing(method: &str) -> midonet_sim::admin::Faults {
    midonet_sim::admin::Faults {
        error_rate: BTreeMap::from([(method.to_string(), 1.0)]),
        error_status: 500,
        ..midonet_sim::admin::Faults::default()
    }
}

#[tokio::test]
async fn a_push_records_its_status_on_the_guarded_translation() {
    let tr = guarded();
    let (pusher, apiserver, sim) = pusher(Default::default(), answer_all(), &tr).await;
    let played = apiserver.play(vec![pushed_status()]);
    let action = pusher.reconcile(&tr).await;
    played.done().await;
    assert_eq!(action, Action::await_change());
    assert_eq!(bridges(&sim.reader()), 1);
}

#[tokio::test]
async fn the_finalizer_goes_only_once_the_backend_deleted_the_resources() {
    let tr = guarded();
    let (mut pusher, apiserver, sim) = pusher(Default::default(), answer_all(), &tr).await;
    let reader = sim.reader();
    let played = apiserver.play(vec![
        pushed_status(),
        Exchange::new(Method::PATCH, &translations_path("ns", Some("t")))
            .when(move || assert_eq!(bridges(&reader), 0, "finalizer removed first"))
            .with("/0/op", json!("test"))
            .with("/0/value", json!([FINALIZER]))
            .with("/1/value", json!([])),
    ]);
    pusher.reconcile(&tr).await;
    assert_eq!(bridges(&sim.reader()), 1);
    let deleting = pusher.delete(&tr);
    let action = pusher.reconcile(&deleting).await;
    played.done().await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_finalizer_removed_meanwhile_finishes_the_deletion_without_a_warning() {
    let tr = guarded();
    let (events, events_server) = mock_apiserver();
    let (mut pusher, apiserver, sim) = pusher(Default::default(), events, &tr).await;
    // The push's own event only: neither a warning nor a second deletion event.
    let warned = events_server.play(vec![Exchange::new(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events",
    )
    .with("/reason", json!(reason::TRANSLATION_UPDATE_PUSHED))]);
    let played = apiserver.play(vec![
        pushed_status(),
        Exchange::new(Method::PATCH, &translations_path("ns", Some("t"))).fail(404, "NotFound"),
    ]);
    pusher.reconcile(&tr).await;
    let deleting = pusher.delete(&tr);
    let action = pusher.reconcile(&deleting).await;
    played.done().await;
    warned.done().await;
    assert_eq!(action, Action::await_change());
    assert_eq!(bridges(&sim.reader()), 0);
}

#[tokio::test]
async fn a_failing_backend_is_a_warning_and_a_condition() {
    let tr = guarded();
    let (events, events_server) = mock_apiserver();
    let (pusher, apiserver, _sim) = pusher(failing("POST"), events, &tr).await;
    let warned = events_server.play(vec![Exchange::new(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events",
    )
    .with("/type", json!("Warning"))
    .with("/reason", json!(reason::TRANSLATION_UPDATE_ERROR))]);
    let played = apiserver.play(vec![Exchange::new(Method::PUT, &status_path())
        .with("/metadata/finalizers", json!([FINALIZER]))
        .with("/status/conditions/0/status", json!("False"))
        .with("/status/conditions/0/reason", json!("BackendError"))]);
    let action = pusher.reconcile(&tr).await;
    played.done().await;
    warned.done().await;
    assert_ne!(action, Action::await_change(), "retried");
}

#[tokio::test]
async fn a_failed_backend_deletion_keeps_the_finalizer() {
    let tr = guarded();
    let (events, events_server) = mock_apiserver();
    let (mut pusher, apiserver, sim) = pusher(failing("DELETE"), events, &tr).await;
    // The push's own event, then the deletion's warning; no finalizer patch.
    let warned = events_server.play(vec![
        Exchange::new(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events")
            .with("/reason", json!(reason::TRANSLATION_UPDATE_PUSHED)),
        Exchange::new(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events")
            .with("/type", json!("Warning"))
            .with("/reason", json!(reason::TRANSLATION_DELETION_ERROR)),
    ]);
    let played = apiserver.play(vec![
        pushed_status(),
        Exchange::new(Method::PUT, &status_path())
            .with("/metadata/finalizers", json!([FINALIZER]))
            .with("/status/conditions/0/status", json!("False"))
            .with("/status/conditions/0/reason", json!("DeletionFailed")),
    ]);
    pusher.reconcile(&tr).await;
    let deleting = pusher.delete(&tr);
    let action = pusher.reconcile(&deleting).await;
    played.done().await;
    warned.done().await;
    assert_ne!(action, Action::await_change(), "retried");
    assert_eq!(bridges(&sim.reader()), 1);
}

#[tokio::test]
async fn a_deletion_taking_rules_from_anothers_chain_waits_in_the_urgent_lane() {
    use crate::workers::Lane;
    let bridge_only = guarded();
    let (events, _events_server) = mock_apiserver();
    let (mut pusher, _apiserver, _sim) =
        pusher(midonet_sim::admin::Faults::default(), events, &bridge_only).await;
    // Live, nothing waits in the deferrable lane; a deletion nobody waits for does.
    assert_eq!(pusher.ctx.lane(&bridge_only), Lane::Now);
    let deleting = pusher.delete(&bridge_only);
    assert_eq!(pusher.ctx.lane(&deleting), Lane::Deferrable);
    // A rule in a chain it does not define (an endpoint generation's jump into its Service
    // port's chain): until it goes, it judges the traffic of the rules pushed before it.
    let chain = "33333333-3333-4333-8333-333333333333";
    let target = "55555555-5555-4555-8555-555555555555";
    let jump = TranslationResource::new(
        "Rule",
        chain,
        format!(
            r#"{{"id":"44444444-4444-4444-8444-444444444444","type":"jump","jumpChainId":"{target}","position":1}}"#
        ),
    );
    let own_chain = TranslationResource::new(
        "Chain",
        "",
        format!(r#"{{"id":"{target}","name":"KUBE-SEP","tenantId":"t"}}"#),
    );
    let spec = TranslationSpec {
        resources: vec![own_chain, jump],
    };
    let mut generation = Translation::new("g", "ns", spec);
    generation.metadata = guarded().metadata;
    let deleting = pusher.delete(&generation);
    assert_eq!(pusher.ctx.lane(&deleting), Lane::Now);
}
