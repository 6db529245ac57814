//! Dropping the field managers' record (`metadata.managedFields`) of settled Translations.
//!
//! On every write but an apply, the apiserver records which fields each writer set: for a
//! fresh Translation, the translators' create (labels, owner, finalizer, spec) and the
//! pusher's status writes, about a third of what it takes in etcd. Nothing reads them: the
//! informer drops them, and the translators' one apply (after a lost create race) forces.
//! A write that resets them (`[{}]`) leaves an object with none, and the apiserver records
//! nothing on such an object until an apply (its "skip non-applied" field manager, in
//! v1.20 as in the current release), so they stay gone. The translators' spec updates
//! reset them already (`translate::update_patch`); a Translation never updated keeps them,
//! unless this loop writes its metadata.
//!
//! **Guaranteed**: every `after` (`--compact-managed-fields-after`), each Translation the
//! informer holds that [`due`] says is settled (it carried managedFields, is Ready, is not
//! being deleted, and was created at least `after` ago) is merge-patched with
//! `managedFields: [{}]` and the resourceVersion the store holds as precondition. The patch
//! changes nothing else; it is refused when the Translation changed since (the next pass
//! looks again). One patch at a time: the loop never has more than one request in flight,
//! and takes no worker from the pushes. A Translation is written this way at most once
//! (unless an apply records managers again).
//!
//! **Costs**: one write per Translation that lives longer than `after`. The short-lived
//! ones (the pods of a rolling update) are never written; a Translation written right
//! after its creation would cost a third write to every one of an initial sync.
//!
//! **Left to others**: the pusher reconciles the patch's watch event (nothing to do, no
//! backend request); the translators find the Translation up to date. Failures are logged
//! and counted (`managed_fields_compactions_total{result="failed"}`), never retried before
//! the next pass: nothing depends on a compaction.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;

use super::{PusherContext, FIELD_MANAGER};
use crate::crd::Translation;

/// Whether `tr` is settled enough at `now` for its managedFields to be reset, with `after`
/// the least age: see the module docs.
pub fn due(tr: &Translation, after: Duration, now: Timestamp) -> bool {
    let old_enough = tr.metadata.creation_timestamp.as_ref().is_some_and(|t| {
        let age = now.duration_since(t.0);
        !age.is_negative() && age.unsigned_abs() >= after
    });
    tr.carries_managed_fields && tr.is_ready() && old_enough
}

/// How one compaction went, as `managed_fields_compactions_total` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compaction {
    Compacted,
    /// Changed or deleted since the store saw it: left for the next pass.
    Changed,
    Failed,
}

impl Compaction {
    fn as_str(self) -> &'static str {
        match self {
            Compaction::Compacted => "compacted",
            Compaction::Changed => "changed",
            Compaction::Failed => "failed",
        }
    }
}

/// Every `after`, resets the managedFields of the Translations [`due`] then.
pub(super) async fn compaction_loop(
    store: Store<Translation>,
    ctx: Arc<PusherContext>,
    after: Duration,
) {
    let ticks = crate::streams::every(after);
    futures::pin_mut!(ticks);
    while ticks.next().await.is_some() {
        let now = Timestamp::now();
        let settled: Vec<Arc<Translation>> = store
            .state()
            .into_iter()
            .filter(|tr| due(tr, after, now))
            .collect();
        let mut compacted = 0usize;
        for tr in &settled {
            let result = compact(&ctx.kube, tr).await;
            compacted += usize::from(result == Compaction::Compacted);
            ctx.metrics
                .managed_fields_compactions
                .with_label_values(&[result.as_str()])
                .inc();
        }
        tracing::debug!(
            due = settled.len(),
            compacted,
            "managedFields compaction pass"
        );
    }
}

/// Resets `tr`'s managedFields, if it is still as the store holds it.
async fn compact(kube: &kube::Client, tr: &Translation) -> Compaction {
    let (Some(namespace), Some(name), Some(version)) = (
        tr.metadata.namespace.as_deref(),
        tr.metadata.name.as_deref(),
        tr.metadata.resource_version.as_deref(),
    ) else {
        // Every object the apiserver lists has all three.
        return Compaction::Failed;
    };
    let api: Api<Translation> = Api::namespaced(kube.clone(), namespace);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": version,
        "managedFields": crate::crd::managed_fields_reset(),
    }});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => Compaction::Compacted,
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Compaction::Changed,
        Err(error) => {
            tracing::warn!(translation = %name, %namespace, %error, "could not reset the managedFields of a settled Translation; the next pass tries again");
            Compaction::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, TranslationSpec, TranslationStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const AFTER: Duration = Duration::from_secs(600);

    fn settled(created: Timestamp) -> Translation {
        let mut tr = Translation::new("t", "ns", TranslationSpec::default());
        tr.metadata.creation_timestamp = Some(Time(created));
        tr.metadata.generation = Some(1);
        tr.carries_managed_fields = true;
        tr.status = Some(TranslationStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                observed_generation: Some(1),
                ..Condition::default()
            }],
            ..TranslationStatus::default()
        });
        tr
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_ready_translation_is_due_once_it_is_old_enough() {
        let tr = settled(at(0));
        assert!(!due(&tr, AFTER, at(599)));
        assert!(due(&tr, AFTER, at(600)));
        assert!(due(&tr, AFTER, at(100_000)));
    }

    #[test]
    fn nothing_to_reset_unsettled_or_from_the_future_is_not_due() {
        let now = at(10_000);
        let mut bare = settled(at(0));
        bare.carries_managed_fields = false;
        let mut changed = settled(at(0));
        changed.metadata.generation = Some(2);
        let mut deleting = settled(at(0));
        deleting.metadata.deletion_timestamp = Some(Time(at(1)));
        let mut never_pushed = settled(at(0));
        never_pushed.status = None;
        let mut unstamped = settled(at(0));
        unstamped.metadata.creation_timestamp = None;
        // A clock behind the apiserver's sees it created in the future.
        let ahead = settled(at(20_000));
        for (what, tr) in [
            ("no managedFields", bare),
            ("spec changed since the push", changed),
            ("being deleted", deleting),
            ("never pushed", never_pushed),
            ("no creation time", unstamped),
            ("created in the future", ahead),
        ] {
            assert!(!due(&tr, AFTER, now), "{what}");
        }
    }
}
