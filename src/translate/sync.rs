//! Making one owner's Translations match the desired set: apply what differs, prune the rest.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::ResourceExt;
use midonet_translators::meta::{FINALIZER, OWNER_UID_LABEL, VERSION_LABEL};
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
    /// A Translation this one replaces is kept until the replacement is pushed.
    WaitingForPush,
}

impl SyncOutcome {
    pub fn result(&self) -> &'static str {
        match self {
            SyncOutcome::Unchanged => "unchanged",
            SyncOutcome::Written => "written",
            SyncOutcome::WaitingForDeletion => "waiting",
            SyncOutcome::WaitingForPush => "waiting_for_push",
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

/// How long a replaced Translation is kept for its replacement to be pushed; past this, the
/// replacement is taken to be stuck (its status says why) and the old one goes anyway.
pub const HANDOVER_MAX: std::time::Duration = std::time::Duration::from_secs(30);

fn version_of(tr: &Translation) -> Option<&String> {
    tr.labels().get(VERSION_LABEL)
}

/// Whether the stale Translation `old` must wait for a replacement among `wanted` (the
/// owner's wanted Translations: their version label, and the object as cached, `None` when
/// not cached yet) to be pushed before it is deleted. A replacement is a wanted Translation
/// of the same Translation version: a new generation of an Endpoints port (rules cannot be
/// updated, so a changed endpoint set is a new Translation). Deleting the old generation
/// first would leave the service port without rules until the new one is pushed. Across
/// versions nothing waits: a version bump rebuilds everything, and old and new resources
/// may not coexist (a host interface takes one binding).
pub fn keep_for_handover(
    old: &Translation,
    wanted: &[(Option<&String>, Option<std::sync::Arc<Translation>>)],
    now: k8s_openapi::jiff::Timestamp,
) -> bool {
    let Some(version) = version_of(old) else {
        return false;
    };
    wanted.iter().any(|(wanted_version, cached)| {
        if *wanted_version != Some(version) {
            return false;
        }
        match cached {
            // Written a moment ago: not pushed yet.
            None => true,
            Some(w) => {
                let young = w
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .is_none_or(|t| now.duration_since(t.0).unsigned_abs() < HANDOVER_MAX);
                !w.is_ready() && young
            }
        }
    })
}

/// True when the cached Translation already carries everything we would apply.
pub(super) fn up_to_date(cached: &Translation, want: &Translation) -> bool {
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

/// Makes the Translations of one owner (or of the globals) exactly `desired`. `inherited`
/// Translations, owned by another object, are treated as the owner's own: re-owned when
/// desired (the apply replaces the owner reference), pruned otherwise.
pub async fn sync_translations(
    shared: &Shared,
    kind: &str,
    owner: Option<(OwnerReference, ObjectReference)>,
    owner_key: &str,
    inherited: &[(String, String)],
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

    // The wanted Translations' versions, and the objects as cached (None: just written).
    let replacements: Vec<(Option<&String>, Option<std::sync::Arc<Translation>>)> = desired
        .iter()
        .map(|d| {
            let cached = shared.translations.get(&cache_ref(&d.namespace, &d.name));
            (d.labels.get(VERSION_LABEL), cached)
        })
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut handing_over = false;
    let mut owned: std::collections::BTreeSet<(String, String)> =
        shared.index.owned_by(owner_key).into_iter().collect();
    owned.extend(inherited.iter().cloned());
    for (namespace, name) in owned {
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
        if keep_for_handover(&cached, &replacements, now) {
            handing_over = true;
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
    } else if handing_over {
        SyncOutcome::WaitingForPush
    } else {
        outcome
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, TranslationStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use std::sync::Arc;

    fn tr(name: &str, version: &str, created: Timestamp, ready: bool) -> Arc<Translation> {
        let mut t = Translation::new(name, "ns", TranslationSpec { resources: vec![] });
        t.metadata.labels = Some([(VERSION_LABEL.to_string(), version.to_string())].into());
        t.metadata.creation_timestamp = Some(Time(created));
        t.metadata.generation = Some(1);
        if ready {
            t.status = Some(TranslationStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: "Pushed".into(),
                    observed_generation: Some(1),
                    ..Condition::default()
                }],
                ..TranslationStatus::default()
            });
        }
        Arc::new(t)
    }

    #[test]
    fn an_old_generation_waits_for_its_replacement_to_be_pushed() {
        let now = Timestamp::now();
        let v1 = "1".to_string();
        let old = tr("gen-a", "1", now, true);
        // Not cached yet, or cached and not pushed: the old generation stays.
        assert!(keep_for_handover(&old, &[(Some(&v1), None)], now));
        let pending = tr("gen-b", "1", now, false);
        assert!(keep_for_handover(&old, &[(Some(&v1), Some(pending))], now));
        // Pushed: the old one goes.
        let pushed = tr("gen-b", "1", now, true);
        assert!(!keep_for_handover(&old, &[(Some(&v1), Some(pushed))], now));
        // No replacement at all (no ready endpoints any more): it goes.
        assert!(!keep_for_handover(&old, &[], now));
    }

    #[test]
    fn no_handover_across_versions_nor_past_the_limit() {
        let now = Timestamp::now();
        let (v1, v2) = ("1".to_string(), "2".to_string());
        let old_version = tr("gen-a", "1", now, true);
        let new_version = tr("gen-a", "2", now, false);
        assert!(!keep_for_handover(&old_version, &[(Some(&v2), None)], now));
        assert!(!keep_for_handover(
            &old_version,
            &[(Some(&v2), Some(new_version))],
            now
        ));
        let old = tr("gen-a", "1", now, true);
        let created = now - SignedDuration::try_from(HANDOVER_MAX).unwrap();
        let stuck = tr("gen-b", "1", created, false);
        assert!(!keep_for_handover(&old, &[(Some(&v1), Some(stuck))], now));
    }
}
