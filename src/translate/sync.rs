//! Making one owner's Translations match the desired set: write what differs, prune the rest.
//!
//! [`decide_sync`] decides, purely, from the cache and the runner's recent writes;
//! [`sync_translations`] performs the decision. **Guaranteed**:
//! - a Translation not in the cache is created (POST); one in the cache but different is
//!   updated with a JSON merge patch of what the translators own (spec, their labels, the
//!   owner reference, the finalizer; its managedFields cleared, see [`update_patch`]), and
//!   nothing else of it changes. Both are plain writes, which cost the apiserver less than
//!   a server-side apply, and an initial sync is one write per Translation. A merge patch replaces lists whole, so a re-owned
//!   Translation (an Endpoints generation taken over by its Service) loses its old owner
//!   reference, whoever created it;
//! - a create refused because the name exists after all (the cache had not seen it yet)
//!   falls back to a server-side apply, which adds what is ours and keeps what is not; an
//!   update that finds the name gone creates it again;
//! - an owned Translation no longer desired is deleted with its UID as precondition
//!   ([`crate::crd::delete_translation`]: a same-named successor is never deleted), unless
//!   it is another version's while the owner has Translations of this one (a version bump
//!   retires those, see `pusher::rollout`), or it is a replaced generation whose
//!   replacement is not pushed yet ([`keep_for_handover`], at most [`HANDOVER_MAX`]);
//! - a desired name held by a Translation being deleted is not written: the outcome says
//!   to look again ([`SyncOutcome::WaitingForDeletion`]).
//!
//! **Caveat**: the writes are made one after the other and the first failure ends the
//! sync with an error; what was written before stays (the retry finds it up to date).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use midonet_translators::meta::{FINALIZER, OWNER_UID_LABEL};
use midonet_translators::DesiredTranslation;
use sha2::{Digest, Sha256};

use super::index::cache_ref;
use super::{RunnerError, TranslatorContext};
use crate::crd::{Translation, TranslationKey, TranslationSpec};
use crate::events::reason;

/// Field manager of the translators' writes.
pub const FIELD_MANAGER: &str = "midonet-kube-controllers";

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

/// Digest of what the translators apply (spec, labels, owner), to recognise their own
/// write in the cache.
fn applied_digest(tr: &Translation) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&tr.spec).unwrap_or_default());
    h.update(serde_json::to_vec(&tr.labels_map()).unwrap_or_default());
    h.update(serde_json::to_vec(&tr.metadata.owner_references).unwrap_or_default());
    hex::encode(&h.finalize()[..16])
}

/// How long a replaced Translation is kept for its replacement to be pushed; past this, the
/// replacement is taken to be stuck (its status says why) and the old one goes anyway.
pub const HANDOVER_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// The version a Translation belongs to, the original controller's counting as one (see
/// [`Translation::version`]): an owner's Translations of another version are the bump's.
fn version_of(tr: &Translation) -> Option<&str> {
    tr.version()
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
    wanted: &[(Option<&str>, Option<std::sync::Arc<Translation>>)],
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
pub fn up_to_date(cached: &Translation, want: &Translation) -> bool {
    let labels_ok = want.labels_iter().all(|(k, v)| cached.label(k) == Some(v));
    let owners_ok = want
        .owner_references()
        .iter()
        .all(|o| cached.owner_references().iter().any(|c| c.uid == o.uid));
    let finalizer_ok = cached.finalizers().iter().any(|f| f == FINALIZER);
    cached.spec == want.spec && labels_ok && owners_ok && finalizer_ok
}

/// Prefix of the label keys the translators own: one of them on a cached Translation but
/// no longer desired is removed by the update.
const OWN_LABEL_PREFIX: &str = "midonet.org/";

/// The JSON merge patch that makes `cached` carry everything of `want` the translators
/// own: the spec (replaced whole), their labels (set, or removed when no longer desired),
/// the owner reference (the list replaced whole: re-owning drops the old one), and the
/// finalizer (added to the others, when missing). Anything else stays as it is, but for the
/// managedFields, which it clears: the apiserver records no field manager on a write other
/// than an apply to an object that has none (its "skip non-applied" field manager), so a
/// Translation once updated no longer stores the translators' and the pusher's entries, a
/// third of its bytes in etcd. Nothing reads them: the translators' one apply, after a
/// lost create race, forces.
pub fn update_patch(cached: &Translation, want: &Translation) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in want.labels_iter() {
        labels.insert(k.to_string(), v.into());
    }
    for (k, _) in cached.labels_iter() {
        if k.starts_with(OWN_LABEL_PREFIX) && !want.has_label(k) {
            labels.insert(k.to_string(), serde_json::Value::Null);
        }
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("labels".into(), labels.into());
    if let Some(owners) = &want.metadata.owner_references {
        metadata.insert("ownerReferences".into(), serde_json::json!(owners));
    }
    if !cached.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = cached.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        metadata.insert("finalizers".into(), serde_json::json!(finalizers));
    }
    metadata.insert("managedFields".into(), crate::crd::managed_fields_reset());
    serde_json::json!({ "metadata": metadata, "spec": want.spec })
}

/// How a Translation is written.
#[derive(Debug, PartialEq)]
pub enum WriteOp {
    /// Not in the cache: a create.
    Create,
    /// In the cache and different: a merge patch ([`update_patch`]).
    Update {
        /// The cached object's resourceVersion.
        cached_rv: Option<String>,
        patch: serde_json::Value,
    },
}

/// A Translation to write.
#[derive(Debug)]
pub struct Write {
    /// Where `want` is written.
    pub key: TranslationKey,
    pub want: Translation,
    /// [`applied_digest`] of `want`, to recognise our own write in the cache.
    pub digest: String,
    pub op: WriteOp,
}

impl Write {
    /// The cached object's resourceVersion (`None`: not cached, a create).
    pub fn cached_rv(&self) -> Option<&str> {
        match &self.op {
            WriteOp::Create => None,
            WriteOp::Update { cached_rv, .. } => cached_rv.as_deref(),
        }
    }
}

/// A stale Translation to delete.
#[derive(Debug, PartialEq, Eq)]
pub struct Delete {
    pub namespace: String,
    pub name: String,
    /// The cached object's UID: the precondition makes sure we delete the object we
    /// looked at, not a same-named successor.
    pub uid: String,
    pub cached_rv: Option<String>,
}

/// What to do to make one owner's Translations exactly the desired ones.
#[derive(Debug, Default)]
pub struct SyncDecision {
    pub writes: Vec<Write>,
    pub deletes: Vec<Delete>,
    /// A desired name is still held by a Translation being deleted.
    pub waiting_for_deletion: bool,
    /// A stale Translation is kept until its replacement is pushed.
    pub handing_over: bool,
}

impl SyncDecision {
    /// The outcome once the decision has been carried out.
    pub fn outcome(&self) -> SyncOutcome {
        if self.waiting_for_deletion {
            SyncOutcome::WaitingForDeletion
        } else if self.handing_over {
            SyncOutcome::WaitingForPush
        } else if self.writes.is_empty() && self.deletes.is_empty() {
            SyncOutcome::Unchanged
        } else {
            SyncOutcome::Written
        }
    }
}

/// What the sync decision reads about existing Translations.
pub trait View {
    /// The cached Translation, if any.
    fn cached(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Translation>>;
    /// True when the cache has not caught up with our own write of a Translation whose
    /// [`applied_digest`] is `digest` (`None`: our deletion) over the object whose cached
    /// resourceVersion is `cached_rv`.
    fn still_pending(
        &self,
        key: &TranslationKey,
        cached_rv: Option<&str>,
        digest: Option<&str>,
    ) -> bool;
}

/// Decides how to make the Translations of one owner exactly `desired` (built with
/// [`build`]), given the ones it owns now (`owned`, inherited ones included), without I/O.
/// Another Translation version's are left alone while the owner has Translations of this
/// one (the original controller's count as one: a migration from it is a bump): a version
/// bump keeps them until the new version has taken over, and then the pusher deletes them
/// (see `pusher::rollout`). An owner with none in this version (a pod
/// that has finished, say) has nothing to hand over to: its old ones go at once.
pub fn decide_sync(
    view: &impl View,
    version: &str,
    desired: Vec<Translation>,
    owned: std::collections::BTreeSet<TranslationKey>,
    now: k8s_openapi::jiff::Timestamp,
) -> SyncDecision {
    // `build` names every desired Translation.
    let desired: Vec<(TranslationKey, Translation)> = desired
        .into_iter()
        .filter_map(|want| Some((want.key()?, want)))
        .collect();
    let wanted: HashSet<TranslationKey> = desired.iter().map(|(key, _)| key.clone()).collect();
    // The wanted Translations' versions, and the objects as cached (None: not yet), for
    // the handover of a replaced generation.
    let replacements: Vec<(Option<String>, Option<std::sync::Arc<Translation>>)> = desired
        .iter()
        .map(|(key, want)| {
            let version = version_of(want).map(str::to_string);
            (version, view.cached(&key.0, &key.1))
        })
        .collect();
    let hand_over = !desired.is_empty();
    let (writes, waiting_for_deletion) = writes_to_make(view, desired);
    let replacements: Vec<(Option<&str>, Option<std::sync::Arc<Translation>>)> = replacements
        .iter()
        .map(|(version, cached)| (version.as_deref(), cached.clone()))
        .collect();
    let mut decision = SyncDecision {
        writes,
        waiting_for_deletion,
        ..SyncDecision::default()
    };
    for key in owned.into_iter().filter(|key| !wanted.contains(key)) {
        let Some(cached) = view.cached(&key.0, &key.1) else {
            continue;
        };
        if cached.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if hand_over && version_of(&cached).is_some_and(|v| v != version) {
            continue;
        }
        if keep_for_handover(&cached, &replacements, now) {
            decision.handing_over = true;
            continue;
        }
        decision.deletes.extend(delete_to_make(view, key, &cached));
    }
    decision
}

/// The writes that make the cache show `desired`, and whether a desired name is still held
/// by a Translation being deleted.
fn writes_to_make(
    view: &impl View,
    desired: Vec<(TranslationKey, Translation)>,
) -> (Vec<Write>, bool) {
    let mut writes = Vec::new();
    let mut waiting_for_deletion = false;
    for (key, want) in desired {
        let cached = view.cached(&key.0, &key.1);
        if let Some(c) = &cached {
            if c.metadata.deletion_timestamp.is_some() {
                // A finalizer cannot be added to an object being deleted; the name frees up
                // once the pusher has cleaned the backend.
                waiting_for_deletion = true;
                continue;
            }
            if up_to_date(c, &want) {
                continue;
            }
        }
        let digest = applied_digest(&want);
        let cached_rv = cached.as_ref().and_then(|c| c.resource_version());
        if view.still_pending(&key, cached_rv.as_deref(), Some(&digest)) {
            continue;
        }
        let op = match &cached {
            None => WriteOp::Create,
            Some(c) => WriteOp::Update {
                cached_rv,
                patch: update_patch(c, &want),
            },
        };
        writes.push(Write {
            key,
            want,
            digest,
            op,
        });
    }
    (writes, waiting_for_deletion)
}

/// The deletion of the stale `cached` Translation `key`, unless ours is pending already.
fn delete_to_make(view: &impl View, key: TranslationKey, cached: &Translation) -> Option<Delete> {
    let cached_rv = cached.resource_version();
    if view.still_pending(&key, cached_rv.as_deref(), None) {
        return None;
    }
    // Every stored object has a UID; one without is not the apiserver's to delete.
    let uid = cached.uid()?;
    Some(Delete {
        namespace: key.0,
        name: key.1,
        uid,
        cached_rv,
    })
}

/// Creates `want`; when the name exists after all (not in the cache yet), applies it
/// instead (see the module doc).
async fn create(api: &Api<Translation>, want: &Translation) -> Result<(), RunnerError> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, want).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
            api.patch(
                &want.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(serde_json::to_value(want)?),
            )
            .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The runner's view: the shared informer's cache and its own recent writes.
struct CacheView<'a>(&'a TranslatorContext);

impl View for CacheView<'_> {
    fn cached(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Translation>> {
        self.0.translations.get(&cache_ref(namespace, name))
    }
    fn still_pending(
        &self,
        key: &TranslationKey,
        cached_rv: Option<&str>,
        digest: Option<&str>,
    ) -> bool {
        self.0.recent.still_pending(key, cached_rv, digest)
    }
}

/// Makes the Translations of one owner (or of the globals) exactly `desired`. `inherited`
/// Translations, owned by another object, are treated as the owner's own: re-owned when
/// desired (the apply replaces the owner reference), pruned otherwise.
pub async fn sync_translations(
    shared: &TranslatorContext,
    kind: &str,
    owner: Option<(OwnerReference, ObjectReference)>,
    owner_key: &str,
    inherited: &[TranslationKey],
    desired: Vec<DesiredTranslation>,
) -> Result<SyncOutcome, RunnerError> {
    let (owner_ref, owner_obj) = match owner {
        Some((r, o)) => (Some(r), Some(o)),
        None => (None, None),
    };
    let desired = desired
        .iter()
        .map(|d| build(d, owner_ref.as_ref()))
        .collect();
    let mut owned: std::collections::BTreeSet<TranslationKey> =
        shared.index.owned_by(owner_key).into_iter().collect();
    owned.extend(inherited.iter().cloned());
    let decision = decide_sync(
        &CacheView(shared),
        &shared.config.version,
        desired,
        owned,
        k8s_openapi::jiff::Timestamp::now(),
    );
    let outcome = decision.outcome();
    for write in decision.writes {
        let cached_rv = write.cached_rv().map(str::to_string);
        let Write {
            key,
            want,
            digest,
            op,
        } = write;
        let done = written(shared, &key, &want, op).await?;
        let (namespace, name) = &key;
        shared.recent.wrote(key.clone(), digest, cached_rv);
        shared
            .metrics
            .writes
            .with_label_values(&[kind, done.op])
            .inc();
        // The caller's span names the owner object and the controller.
        tracing::info!(translation = %name, namespace = %namespace, op = done.op, "Translation written");
        if let Some(o) = &owner_obj {
            let note = format!("Translation {namespace}/{name}");
            shared.events.normal(o, done.reason, note).await;
        }
    }
    for delete in decision.deletes {
        let Delete {
            namespace,
            name,
            uid,
            cached_rv,
        } = delete;
        crate::crd::delete_translation(&shared.kube, &namespace, &name, &uid, None).await?;
        shared
            .recent
            .deleted((namespace.clone(), name.clone()), cached_rv);
        let writes = &shared.metrics.writes;
        writes.with_label_values(&[kind, "delete"]).inc();
        tracing::info!(translation = %name, namespace = %namespace, "stale Translation deleted");
        if let Some(o) = &owner_obj {
            let note = format!("Translation {namespace}/{name}");
            shared
                .events
                .normal(o, reason::TRANSLATION_DELETED, note)
                .await;
        }
    }
    Ok(outcome)
}

/// A write done: the operation (for the metrics) and the event's reason.
struct Written {
    op: &'static str,
    reason: &'static str,
}

/// Writes `want` (named `key`) as `op` says.
async fn written(
    shared: &TranslatorContext,
    (namespace, name): &TranslationKey,
    want: &Translation,
    op: WriteOp,
) -> Result<Written, RunnerError> {
    const CREATED: Written = Written {
        op: "create",
        reason: reason::TRANSLATION_CREATED,
    };
    let api: Api<Translation> = Api::namespaced(shared.kube.clone(), namespace);
    let WriteOp::Update { patch, .. } = op else {
        create(&api, want).await?;
        return Ok(CREATED);
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Written {
            op: "update",
            reason: reason::TRANSLATION_UPDATED,
        }),
        // Gone since the cache saw it (deleted by hand, say): created again.
        Err(kube::Error::Api(e)) if e.code == 404 => {
            create(&api, want).await?;
            Ok(CREATED)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, TranslationStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use midonet_translators::meta::VERSION_LABEL;
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

    /// A view over a fixed cache, with our pending writes by key.
    #[derive(Default)]
    struct FakeView {
        cache: std::collections::HashMap<(String, String), Arc<Translation>>,
        pending: HashSet<(String, String)>,
    }

    impl View for FakeView {
        fn cached(&self, namespace: &str, name: &str) -> Option<Arc<Translation>> {
            self.cache.get(&(namespace.into(), name.into())).cloned()
        }
        fn still_pending(&self, key: &(String, String), _: Option<&str>, _: Option<&str>) -> bool {
            self.pending.contains(key)
        }
    }

    fn desired(name: &str, version: &str) -> Translation {
        let mut d = DesiredTranslation {
            name: name.into(),
            namespace: "ns".into(),
            labels: BTreeMap::new(),
            resources: vec![],
        };
        d.labels.insert(VERSION_LABEL.into(), version.into());
        build(&d, None)
    }

    /// `want` as the informer caches it once written (its labels kept aside).
    fn cached_as(want: &Translation, uid: &str) -> Arc<Translation> {
        let mut c = want.clone();
        c.compact_labels();
        c.metadata.uid = Some(uid.into());
        c.metadata.resource_version = Some("7".into());
        c.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        Arc::new(c)
    }

    fn key(name: &str) -> (String, String) {
        ("ns".into(), name.into())
    }

    #[test]
    fn new_and_changed_translations_are_written_and_current_ones_not() {
        let mut view = FakeView::default();
        let current = desired("current", "1");
        view.cache.insert(key("current"), cached_as(&current, "u1"));
        let mut changed = desired("changed", "1");
        view.cache.insert(key("changed"), cached_as(&changed, "u2"));
        changed.spec = Some(TranslationSpec {
            resources: vec![midonet_translators::TranslationResource::new(
                "Chain", "", "{}",
            )],
        });
        let decision = decide_sync(
            &view,
            "1",
            vec![current, changed, desired("new", "1")],
            Default::default(),
            Timestamp::now(),
        );
        let written: Vec<(String, Option<&str>)> = decision
            .writes
            .iter()
            .map(|w| (w.want.name_any(), w.cached_rv()))
            .collect();
        assert_eq!(
            written,
            [("changed".into(), Some("7")), ("new".into(), None)]
        );
        assert_eq!(decision.writes[1].op, WriteOp::Create);
        assert!(decision.deletes.is_empty());
        assert_eq!(decision.outcome(), SyncOutcome::Written);
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "svc".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn an_update_replaces_spec_and_owner_and_keeps_what_is_not_ours() {
        let mut d = DesiredTranslation {
            name: "t".into(),
            namespace: "ns".into(),
            labels: [(VERSION_LABEL.to_string(), "2".to_string())].into(),
            resources: vec![midonet_translators::TranslationResource::new(
                "Chain", "", "{}",
            )],
        };
        let want = build(&d, Some(&owner("new-owner")));
        d.labels.insert(VERSION_LABEL.into(), "1".into());
        d.labels.insert("midonet.org/dropped".into(), "x".into());
        d.labels.insert("team".into(), "blue".into());
        let mut cached = build(&d, Some(&owner("old-owner")));
        cached.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        let patch = update_patch(&cached, &want);
        // The same from a Translation as the informer caches it (labels kept aside).
        let mut compacted = cached.clone();
        compacted.compact_labels();
        assert_eq!(update_patch(&compacted, &want), patch);
        assert_eq!(
            patch,
            serde_json::json!({
                "metadata": {
                    "labels": {
                        VERSION_LABEL: "2",
                        OWNER_UID_LABEL: "new-owner",
                        "midonet.org/dropped": null,
                    },
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Service", "name": "svc",
                        "uid": "new-owner", "controller": true, "blockOwnerDeletion": true,
                    }],
                    "finalizers": ["example.com/keep", FINALIZER],
                    "managedFields": [{}],
                },
                "spec": {"resources": [{"kind": "Chain", "parent": "", "body": "{}"}]},
            })
        );
        // With our finalizer already there, the finalizers are left alone.
        let cached = build(&d, Some(&owner("old-owner")));
        let patch = update_patch(&cached, &want);
        assert!(patch["metadata"].get("finalizers").is_none(), "{patch}");
    }

    #[test]
    fn stale_translations_are_deleted_with_their_uid_unless_going_already() {
        let mut view = FakeView::default();
        let stale = desired("stale", "1");
        view.cache
            .insert(key("stale"), cached_as(&stale, "u-stale"));
        let mut going = (*cached_as(&desired("going", "1"), "u-going")).clone();
        going.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        view.cache.insert(key("going"), Arc::new(going));
        let owned = [key("stale"), key("going"), key("uncached")].into();
        let decision = decide_sync(&view, "1", vec![], owned, Timestamp::now());
        assert_eq!(
            decision.deletes,
            [Delete {
                namespace: "ns".into(),
                name: "stale".into(),
                uid: "u-stale".into(),
                cached_rv: Some("7".into()),
            }]
        );
    }

    #[test]
    fn a_name_held_by_a_terminating_translation_waits() {
        let mut view = FakeView::default();
        let want = desired("a", "1");
        let mut going = (*cached_as(&want, "old")).clone();
        going.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        view.cache.insert(key("a"), Arc::new(going));
        let decision = decide_sync(&view, "1", vec![want], Default::default(), Timestamp::now());
        assert!(decision.writes.is_empty());
        assert_eq!(decision.outcome(), SyncOutcome::WaitingForDeletion);
    }

    #[test]
    fn our_own_writes_the_cache_has_not_seen_are_not_repeated() {
        let view = FakeView {
            pending: [key("a"), key("stale")].into(),
            ..FakeView::default()
        };
        let decision = decide_sync(
            &view,
            "1",
            vec![desired("a", "1")],
            Default::default(),
            Timestamp::now(),
        );
        assert!(decision.writes.is_empty());
        assert_eq!(decision.outcome(), SyncOutcome::Unchanged);
    }

    #[test]
    fn a_replaced_generation_is_kept_until_the_new_one_is_pushed() {
        let mut view = FakeView::default();
        let old = desired("gen-a", "1");
        view.cache.insert(key("gen-a"), cached_as(&old, "u-old"));
        let decision = decide_sync(
            &view,
            "1",
            vec![desired("gen-b", "1")],
            [key("gen-a")].into(),
            Timestamp::now(),
        );
        assert_eq!(decision.writes.len(), 1);
        assert!(decision.deletes.is_empty());
        assert_eq!(decision.outcome(), SyncOutcome::WaitingForPush);
    }

    #[test]
    fn another_versions_translations_are_left_to_the_bump() {
        // The owner's sync decision at version 2, wanting `wanted` (its version-2 Translation or
        // nothing), with `pod.1.a` cached as `cached`.
        let decision_with = |cached: Translation, wanted: bool| {
            let mut view = FakeView::default();
            view.cache.insert(key("pod.1.a"), Arc::new(cached));
            let desired = if wanted {
                vec![desired("pod.2.a", "2")]
            } else {
                vec![]
            };
            decide_sync(
                &view,
                "2",
                desired,
                [key("pod.1.a")].into(),
                Timestamp::now(),
            )
        };
        let old = (*cached_as(&desired("pod.1.a", "1"), "u-old")).clone();
        let decision = decision_with(old.clone(), true);
        assert_eq!(decision.writes.len(), 1);
        assert!(decision.deletes.is_empty(), "{:?}", decision.deletes);
        // An owner with nothing in the new version hands nothing over.
        assert_eq!(decision_with(old.clone(), false).deletes.len(), 1);
        // Unlabelled ones written by hand are pruned.
        let mut unlabelled = old;
        unlabelled.metadata.labels = None;
        unlabelled.cached_labels = Default::default();
        assert_eq!(decision_with(unlabelled.clone(), true).deletes.len(), 1);
        // The original controller's (no spec, no version label) are an old version's: the
        // migration from it is a bump.
        let mut original = unlabelled;
        original.resources = original.spec.take().map(|s| s.resources);
        assert!(original.is_legacy());
        let decision = decision_with(original, true);
        assert!(decision.deletes.is_empty(), "{:?}", decision.deletes);
    }
}
