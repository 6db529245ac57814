//! The runner's Kubernetes I/O against a mocked apiserver (see [`crate::fixtures`]): what
//! it writes, prunes and deletes, with which preconditions, and how it takes conflicts.

use std::sync::Arc;

use http::Method;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::watcher;
use midonet_translators::meta::VERSION_LABEL;
use midonet_translators::{DesiredTranslation, TranslationResource, TranslatorConfig};
use prometheus::Registry;
use serde_json::json;

use super::*;
use crate::crd::TranslationSpec;
use crate::events::EventLimits;
use crate::fixtures::{answer_all, mock_apiserver, translations_path, ApiServer, Exchange};
use crate::informer::TranslationInformer;

const OWNER_UID: &str = "owner-uid";

/// The translators' context over a mocked apiserver, its informer showing `cached`.
fn context(cached: Vec<Translation>) -> (Arc<TranslatorContext>, ApiServer) {
    let (kube, apiserver) = mock_apiserver();
    let registry = Registry::new();
    let authz = Authz::new(&registry).unwrap();
    let mut informer = TranslationInformer::new(kube.clone(), authz.clone(), Health::new());
    let limits = EventLimits {
        qps: 100.0,
        burst: 100,
    };
    let events = EventPublisher::start(answer_all(), authz.clone(), limits, &registry).unwrap();
    let metrics = TranslatorMetrics::new(&registry).unwrap();
    let config = TranslatorConfig::default();
    let ctx = TranslatorContext::new(kube, config, metrics, authz, &events, &mut informer);
    informer.replay(cached.into_iter().map(watcher::Event::Apply).collect());
    (ctx, apiserver)
}

fn owner() -> (OwnerReference, ObjectReference) {
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "web".into(),
        uid: OWNER_UID.into(),
        ..OwnerReference::default()
    };
    let oref = ObjectReference {
        kind: Some("Pod".into()),
        namespace: Some("ns".into()),
        name: Some("web".into()),
        uid: Some(OWNER_UID.into()),
        ..ObjectReference::default()
    };
    (owner, oref)
}

/// The desired Translation `name` with one Chain whose body is `body`.
fn desired(name: &str, body: &str) -> DesiredTranslation {
    DesiredTranslation {
        name: name.into(),
        namespace: "ns".into(),
        labels: [(VERSION_LABEL.to_string(), "1".to_string())].into(),
        resources: vec![TranslationResource::new("Chain", "", body)],
    }
}

/// `desired` as the apiserver stores it, owned by the owner: UID `uid`, resourceVersion 7.
fn stored(desired: &DesiredTranslation, uid: &str) -> Translation {
    let mut tr = sync::build(desired, Some(&owner().0));
    tr.metadata.uid = Some(uid.into());
    tr.metadata.resource_version = Some("7".into());
    tr
}

async fn sync(
    ctx: &TranslatorContext,
    want: Vec<DesiredTranslation>,
) -> Result<SyncOutcome, RunnerError> {
    sync_translations(ctx, "pod", Some(owner()), OWNER_UID, &[], want).await
}

#[tokio::test]
async fn a_new_translation_is_created_and_a_changed_one_patched() {
    let changed = desired("pod.1.changed", "{\"a\":1}");
    let (ctx, apiserver) = context(vec![stored(&changed, "u-changed")]);
    let played = apiserver.play(vec![
        Exchange::new(
            Method::PATCH,
            &translations_path("ns", Some("pod.1.changed")),
        )
        .with("/spec/resources/0/body", json!("{\"a\":2}"))
        .with("/metadata/ownerReferences/0/uid", json!(OWNER_UID)),
        Exchange::new(Method::POST, &translations_path("ns", None))
            .with("/metadata/name", json!("pod.1.new"))
            .with("/metadata/finalizers/0", json!("midonet.org/deleter"))
            .answer(201, json!({})),
    ]);
    let want = vec![
        desired("pod.1.changed", "{\"a\":2}"),
        desired("pod.1.new", "{}"),
    ];
    assert_eq!(sync(&ctx, want).await.unwrap(), SyncOutcome::Written);
    played.done().await;
}

#[tokio::test]
async fn an_unchanged_translation_is_not_written() {
    let current = desired("pod.1.same", "{}");
    let (ctx, apiserver) = context(vec![stored(&current, "u-same")]);
    let played = apiserver.play(vec![]);
    assert_eq!(
        sync(&ctx, vec![current]).await.unwrap(),
        SyncOutcome::Unchanged
    );
    played.done().await;
}

#[tokio::test]
async fn a_translation_no_longer_desired_is_deleted_with_its_uid() {
    let old = desired("pod.1.old", "{}");
    let (ctx, apiserver) = context(vec![stored(&old, "u-old")]);
    let played = apiserver.play(vec![Exchange::new(
        Method::DELETE,
        &translations_path("ns", Some("pod.1.old")),
    )
    .with("/preconditions/uid", json!("u-old"))]);
    assert_eq!(sync(&ctx, vec![]).await.unwrap(), SyncOutcome::Written);
    played.done().await;
}

#[tokio::test]
async fn conflicts_are_taken_as_the_sync_module_says() {
    // Created meanwhile (not cached yet): applied instead. Deleted meanwhile: created
    // again. Changed or gone before its deletion: left alone.
    let patched = desired("pod.1.patched", "{\"a\":1}");
    // Unversioned (written by hand): no replacement waits to be pushed before it goes.
    let mut gone = stored(&desired("pod.1.gone", "{}"), "u-g");
    gone.metadata.labels = None;
    let (ctx, apiserver) = context(vec![stored(&patched, "u-p"), gone]);
    let played = apiserver.play(vec![
        Exchange::new(
            Method::PATCH,
            &translations_path("ns", Some("pod.1.patched")),
        )
        .fail(404, "NotFound"),
        Exchange::new(Method::POST, &translations_path("ns", None))
            .with("/metadata/name", json!("pod.1.patched"))
            .answer(201, json!({})),
        Exchange::new(Method::POST, &translations_path("ns", None))
            .with("/metadata/name", json!("pod.1.exists"))
            .fail(409, "AlreadyExists"),
        Exchange::new(
            Method::PATCH,
            &translations_path("ns", Some("pod.1.exists")),
        )
        .with("/metadata/name", json!("pod.1.exists")),
        Exchange::new(Method::DELETE, &translations_path("ns", Some("pod.1.gone")))
            .with("/preconditions/uid", json!("u-g"))
            .fail(409, "Conflict"),
    ]);
    let want = vec![
        desired("pod.1.patched", "{\"a\":2}"),
        desired("pod.1.exists", "{}"),
    ];
    assert_eq!(sync(&ctx, want).await.unwrap(), SyncOutcome::Written);
    played.done().await;
}

#[tokio::test]
async fn a_refused_write_fails_the_reconcile_and_is_retried() {
    let (ctx, apiserver) = context(vec![]);
    let played = apiserver.play(vec![Exchange::new(
        Method::POST,
        &translations_path("ns", None),
    )
    .fail(403, "Forbidden")]);
    let err = sync(&ctx, vec![desired("pod.1.new", "{}")])
        .await
        .unwrap_err();
    played.done().await;
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"}})).unwrap();
    let retry = ctx.translation_failed("pod", &pod, &err);
    let (attempt, _) = retry.refused.expect("the refused request is reported");
    assert_eq!(
        (attempt.verb, attempt.resource, attempt.namespace),
        ("patch", "translations", Some("ns"))
    );
    assert!(retry.after > Duration::ZERO);
}

#[tokio::test]
async fn a_deleted_objects_translations_go_at_once_if_unchanged_since() {
    let owned = desired("pod.1.a", "{}");
    let mut going = stored(&desired("pod.1.going", "{}"), "u-going");
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let (ctx, apiserver) = context(vec![stored(&owned, "u-a"), going]);
    let played = apiserver.play(vec![Exchange::new(
        Method::DELETE,
        &translations_path("ns", Some("pod.1.a")),
    )
    .with("/preconditions/uid", json!("u-a"))
    .with("/preconditions/resourceVersion", json!("7"))]);
    let (deleted_tx, deleted_rx) = tokio::sync::mpsc::unbounded_channel();
    deleted_tx.send(OWNER_UID.to_string()).unwrap();
    drop(deleted_tx);
    delete_orphans::<kinds::PodKind>(ctx.clone(), deleted_rx, 2).await;
    played.done().await;
}

#[test]
fn a_translation_without_a_namespace_has_no_key() {
    // What the apiserver stores always has one: the runner skips anything else.
    let mut tr = Translation::new("t", "ns", TranslationSpec::default());
    assert_eq!(tr.key(), Some(("ns".to_string(), "t".to_string())));
    tr.metadata.namespace = None;
    assert_eq!(tr.key(), None);
}
