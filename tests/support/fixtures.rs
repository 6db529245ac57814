//! Hand-written Translations for the pusher's tests, with our finalizer as the translators
//! write them.

use midonet_kube_controllers::crd::{Translation, TranslationResource, TranslationSpec};
use midonet_translators::meta::FINALIZER;
use uuid::Uuid;

pub fn translation(name: &str, ns: &str, resources: Vec<TranslationResource>) -> Translation {
    let mut tr = Translation::new(name, ns, TranslationSpec { resources });
    tr.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    tr
}

/// Creates the Translation `name` with `resources` in the namespace of `api` (`ns`);
/// panics if the apiserver refuses it.
pub async fn create(
    api: &kube::Api<Translation>,
    ns: &str,
    name: &str,
    resources: Vec<TranslationResource>,
) -> Translation {
    api.create(
        &kube::api::PostParams::default(),
        &translation(name, ns, resources),
    )
    .await
    .unwrap_or_else(|e| panic!("create Translation {ns}/{name}: {e}"))
}

pub fn bridge(id: Uuid) -> TranslationResource {
    TranslationResource::new(
        "Bridge",
        "",
        format!(r#"{{"id":"{id}","name":"b-{id}","tenantId":"test"}}"#),
    )
}

pub fn port(bridge: Uuid, id: Uuid) -> TranslationResource {
    TranslationResource::new(
        "Port",
        bridge.to_string(),
        format!(r#"{{"id":"{id}","type":"Bridge"}}"#),
    )
}

pub fn chain(id: Uuid) -> TranslationResource {
    TranslationResource::new(
        "Chain",
        "",
        format!(r#"{{"id":"{id}","name":"c","tenantId":"test"}}"#),
    )
}

/// Whether the pusher reports `tr` Ready.
pub fn is_ready(tr: &Translation) -> bool {
    tr.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}
