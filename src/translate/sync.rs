//! Making one owner's Translations match the desired set: apply what differs, prune the rest.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::ResourceExt;
use midonet_translators::meta::{FINALIZER, OWNER_UID_LABEL};
use midonet_translators::DesiredTranslation;
use sha2::{Digest, Sha256};

use super::index::cache_ref;
use super::{RunnerError, Shared};
use crate::crd::{Translation, TranslationSpec};

/// Field manager of the translators' server-side apply.
pub const FIELD_MANAGER: &str = "midonet-kube-controllers";

pub mod event {
    pub const CREATED: &str = "TranslationCreated";
    pub const UPDATED: &str = "TranslationUpdated";
    pub const DELETED: &str = "TranslationDeleted";
}

#[derive(Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// Nothing to write.
    Unchanged,
    /// Some Translations were written or deleted.
    Written,
    /// A desired name is still held by a Translation being deleted; try again later.
    WaitingForDeletion,
}

impl SyncOutcome {
    pub fn result(&self) -> &'static str {
        match self {
            SyncOutcome::Unchanged => "unchanged",
            SyncOutcome::Written => "written",
            SyncOutcome::WaitingForDeletion => "waiting",
        }
    }
}

/// The Translation object the runner applies for a desired Translation.
pub fn build(desired: &DesiredTranslation, owner: Option<&OwnerReference>) -> Translation {
    let mut labels: BTreeMap<String, String> = desired.labels.clone();
    if let Some(owner) = owner {
        labels.insert(OWNER_UID_LABEL.into(), owner.uid.clone());
    }
    let mut tr = Translation::new(
        &desired.name,
        &desired.namespace,
        TranslationSpec {
            resources: desired.resources.clone(),
        },
    );
    tr.metadata = ObjectMeta {
        name: Some(desired.name.clone()),
        namespace: Some(desired.namespace.clone()),
        labels: Some(labels),
        owner_references: owner.map(|o| vec![o.clone()]),
        finalizers: Some(vec![FINALIZER.to_string()]),
        ..ObjectMeta::default()
    };
    tr
}

/// Fingerprint of what we apply (spec, labels, owner, finalizer).
fn fingerprint(tr: &Translation) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&tr.spec).unwrap_or_default());
    h.update(serde_json::to_vec(&tr.metadata.labels).unwrap_or_default());
    h.update(serde_json::to_vec(&tr.metadata.owner_references).unwrap_or_default());
    hex::encode(&h.finalize()[..16])
}

/// True when the cached Translation already carries everything we would apply.
fn up_to_date(cached: &Translation, want: &Translation) -> bool {
    let labels_ok = want
        .labels()
        .iter()
        .all(|(k, v)| cached.labels().get(k) == Some(v));
    let owners_ok = want
        .owner_references()
        .iter()
        .all(|o| cached.owner_references().iter().any(|c| c.uid == o.uid));
    let finalizer_ok = cached.finalizers().iter().any(|f| f == FINALIZER);
    cached.spec == want.spec && labels_ok && owners_ok && finalizer_ok
}

/// Makes the Translations of one owner (or of the globals) exactly `desired`.
pub async fn sync_translations(
    shared: &Shared,
    kind: &str,
    owner: Option<(OwnerReference, ObjectReference)>,
    owner_key: &str,
    desired: Vec<DesiredTranslation>,
) -> Result<SyncOutcome, RunnerError> {
    let mut outcome = SyncOutcome::Unchanged;
    let mut waiting = false;
    let wanted: HashSet<(String, String)> = desired
        .iter()
        .map(|d| (d.namespace.clone(), d.name.clone()))
        .collect();
    let (owner_ref, owner_obj) = match owner {
        Some((r, o)) => (Some(r), Some(o)),
        None => (None, None),
    };

    for d in &desired {
        let want = build(d, owner_ref.as_ref());
        let key = (d.namespace.clone(), d.name.clone());
        let cached = shared.translations.get(&cache_ref(&d.namespace, &d.name));
        if let Some(c) = &cached {
            if c.metadata.deletion_timestamp.is_some() {
                // A finalizer cannot be added to an object being deleted; the name frees up
                // once the pusher has cleaned the backend.
                waiting = true;
                continue;
            }
            if up_to_date(c, &want) {
                continue;
            }
        }
        let print = fingerprint(&want);
        let cached_rv = cached.as_ref().and_then(|c| c.resource_version());
        if shared
            .recent
            .still_pending(&key, cached_rv.as_deref(), Some(&print))
        {
            continue;
        }
        let api: Api<Translation> = Api::namespaced(shared.kube.clone(), &d.namespace);
        api.patch(
            &d.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(serde_json::to_value(&want)?),
        )
        .await?;
        shared.recent.wrote(key, print, cached_rv);
        let (op, reason) = if cached.is_some() {
            ("update", event::UPDATED)
        } else {
            ("create", event::CREATED)
        };
        shared.metrics.writes.with_label_values(&[kind, op]).inc();
        // The caller's span names the owner object and the controller.
        tracing::info!(translation = %d.name, namespace = %d.namespace, op, "Translation written");
        if let Some(o) = &owner_obj {
            shared
                .events
                .normal(o, reason, format!("Translation {}/{}", d.namespace, d.name))
                .await;
        }
        outcome = SyncOutcome::Written;
    }

    for (namespace, name) in shared.index.owned_by(owner_key) {
        let key = (namespace.clone(), name.clone());
        if wanted.contains(&key) {
            continue;
        }
        let Some(cached) = shared.translations.get(&cache_ref(&namespace, &name)) else {
            continue;
        };
        if cached.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let cached_rv = cached.resource_version();
        if shared
            .recent
            .still_pending(&key, cached_rv.as_deref(), None)
        {
            continue;
        }
        let api: Api<Translation> = Api::namespaced(shared.kube.clone(), &namespace);
        // The UID precondition makes sure we delete the object we looked at, not a
        // same-named successor.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: cached.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        shared.recent.deleted(key, cached_rv);
        shared
            .metrics
            .writes
            .with_label_values(&[kind, "delete"])
            .inc();
        tracing::info!(translation = %name, namespace = %namespace, "stale Translation deleted");
        if let Some(o) = &owner_obj {
            shared
                .events
                .normal(o, event::DELETED, format!("Translation {namespace}/{name}"))
                .await;
        }
        outcome = SyncOutcome::Written;
    }
    Ok(if waiting {
        SyncOutcome::WaitingForDeletion
    } else {
        outcome
    })
}
