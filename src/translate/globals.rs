//! The global Translations (tunnel zone, cluster router, the KUBE-MAIN/PRE/SERVICES chains)
//! as a level-triggered output, like every owner's Translations.
//!
//! They have no owner object to watch, so their controller is triggered by the Translation
//! informer itself: any event about a global Translation (changed, deleted, re-listed) and a
//! periodic resync make it compare the cache with [`midonet_translators::global`] and write
//! what differs. Without this, a deleted global Translation would stay deleted: the pusher
//! deletes its backend resources, MidoNet's cascade takes every jump into the chains with
//! them, and Service traffic is dead cluster-wide until the controllers restart.
//!
//! A global Translation being deleted keeps its name until the pusher has deleted its
//! backend resources and removed the finalizer; the controller waits for that (the informer's
//! Delete event wakes it) and then creates the Translation again. What MidoNet's cascade took
//! from other Translations (Service jump rules in KUBE-SERVICES, the node bridges' inbound
//! filter) the pusher re-creates once the restored Translation is pushed (its cascade
//! repair, see [`crate::pusher::verify`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use midonet_translators::meta::GLOBAL_LABEL;
use midonet_translators::translate::GLOBAL_TRANSLATION_NAMESPACE;
use midonet_translators::{DesiredTranslation, TranslatorConfig};
use tracing::Instrument;

use super::index::{cache_ref, GLOBAL_OWNER};
use super::sync::{build, up_to_date};
use super::{sync_translations, RunnerError, SyncOutcome, TranslatorContext};
use crate::authz::Attempt;
use crate::crd::{Translation, TranslationKey};
use crate::retry::RetryPolicy;
use crate::scaffold::NextPass;

/// The controller's name in logs and metrics.
pub const NAME: &str = "global";

/// How soon to look again while a global Translation's old incarnation is being deleted
/// (its Delete event usually wakes the controller first).
const TERMINATING_RECHECK: Duration = Duration::from_secs(2);
/// Retries of a failed pass (capped by the resync period).
const RETRY: RetryPolicy = RetryPolicy::new(Duration::from_millis(400), Duration::from_secs(30));
/// Retries of the first write at start-up, which the other translators wait for: failed,
/// or waiting for an old incarnation's deletion or a replaced Translation's push.
const ENSURE_RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(30));

/// The (namespace, name) of the desired global Translations.
pub fn names(cfg: &TranslatorConfig) -> HashSet<TranslationKey> {
    midonet_translators::global(cfg)
        .into_iter()
        .map(|d| (d.namespace, d.name))
        .collect()
}

/// Whether an informer event may change what the globals' controller would write: an
/// applied or deleted global Translation (by label, or by one of the desired names in case
/// the label was edited away), or the end of a re-list (a deletion the watch missed).
pub fn concerns(event: &watcher::Event<Translation>, names: &HashSet<TranslationKey>) -> bool {
    match event {
        watcher::Event::Apply(tr) | watcher::Event::Delete(tr) => {
            tr.has_label(GLOBAL_LABEL) || tr.key().is_some_and(|key| names.contains(&key))
        }
        watcher::Event::InitDone => true,
        watcher::Event::Init | watcher::Event::InitApply(_) => false,
    }
}

/// What happened to a global Translation this controller had seen as desired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Deleted (Terminating, or gone already).
    Deleted,
    /// Its spec, labels or finalizer differ from what the controller applies.
    Edited,
}

impl Damage {
    fn as_str(self) -> &'static str {
        match self {
            Damage::Deleted => "deleted",
            Damage::Edited => "edited",
        }
    }
}

/// How the cache shows one desired global Translation.
enum Cached {
    Intact(Arc<Translation>),
    Damaged(Damage),
}

fn cached_state(shared: &TranslatorContext, desired: &DesiredTranslation) -> Cached {
    match shared
        .translations
        .get(&cache_ref(&desired.namespace, &desired.name))
    {
        None => Cached::Damaged(Damage::Deleted),
        Some(c) if c.metadata.deletion_timestamp.is_some() => Cached::Damaged(Damage::Deleted),
        Some(c) if !up_to_date(&c, &build(desired, None)) => Cached::Damaged(Damage::Edited),
        Some(c) => Cached::Intact(c),
    }
}

/// Which global Translations were seen intact, and which are being restored since, so a
/// restoration is reported once, when the cache shows the restored Translation.
#[derive(Default)]
struct Restorations {
    intact: HashSet<TranslationKey>,
    restoring: HashMap<TranslationKey, Damage>,
}

/// The controller of the global Translations. One per process running translators.
pub struct Globals {
    shared: Arc<TranslatorContext>,
    restorations: Restorations,
}

impl Globals {
    pub fn new(shared: Arc<TranslatorContext>) -> Self {
        Globals {
            shared,
            restorations: Restorations::default(),
        }
    }

    /// Makes the global Translations exist as desired; retries until written. The other
    /// translators start after this: every other Translation refers to the globals.
    pub async fn ensure(&mut self) {
        self.shared.translations_synced.wait().await;
        let mut attempts: u32 = 0;
        loop {
            match self.pass().await {
                Ok(SyncOutcome::WaitingForDeletion | SyncOutcome::WaitingForPush) => {}
                Ok(_) => return,
                Err(err) => self.report(&err),
            }
            attempts = attempts.saturating_add(1);
            tokio::time::sleep(ENSURE_RETRY.delay(attempts)).await;
        }
    }

    /// Keeps the global Translations as desired until `shutdown` resolves: on every
    /// informer event about them, and every `resync`.
    pub async fn run(mut self, resync: Duration, shutdown: impl Future<Output = ()> + Send) {
        let mut shutdown = std::pin::pin!(shutdown);
        tokio::select! {
            _ = self.shared.translations_synced.wait() => {}
            _ = &mut shutdown => return,
        }
        let mut schedule = NextPass::new(RETRY, resync);
        loop {
            let next = match self.pass().await {
                Ok(outcome) => schedule.after_success(match outcome {
                    SyncOutcome::WaitingForDeletion => Some(TERMINATING_RECHECK),
                    SyncOutcome::WaitingForPush => Some(Duration::from_millis(500)),
                    SyncOutcome::Unchanged | SyncOutcome::Written => None,
                }),
                Err(err) => {
                    self.report(&err);
                    schedule.after_failure()
                }
            };
            tokio::select! {
                _ = self.shared.globals_changed.notified() => {}
                _ = tokio::time::sleep(next) => {}
                _ = &mut shutdown => return,
            }
        }
    }

    /// One reconcile of the global Translations.
    async fn pass(&mut self) -> Result<SyncOutcome, RunnerError> {
        let shared = self.shared.clone();
        let desired = midonet_translators::global(&shared.config);
        self.track(&desired).await;
        let timer = shared
            .metrics
            .reconcile_duration
            .with_label_values(&[NAME])
            .start_timer();
        let outcome = sync_translations(&shared, NAME, None, GLOBAL_OWNER, &[], desired)
            .instrument(tracing::error_span!("globals", controller = NAME))
            .await?;
        timer.observe_duration();
        shared
            .metrics
            .reconciles
            .with_label_values(&[NAME, outcome.result()])
            .inc();
        Ok(outcome)
    }

    /// Notes global Translations found damaged after they were seen intact, and reports
    /// those the cache shows restored.
    async fn track(&mut self, desired: &[DesiredTranslation]) {
        for d in desired {
            let key = (d.namespace.clone(), d.name.clone());
            match cached_state(&self.shared, d) {
                Cached::Damaged(damage) => {
                    if self.restorations.intact.remove(&key) {
                        tracing::warn!(translation = %d.name, namespace = %d.namespace, damage = damage.as_str(), "global Translation {}: restoring it", damage.as_str());
                        self.restorations.restoring.insert(key, damage);
                    }
                }
                Cached::Intact(tr) => {
                    if let Some(damage) = self.restorations.restoring.remove(&key) {
                        self.restored(&tr, damage).await;
                    }
                    self.restorations.intact.insert(key);
                }
            }
        }
    }

    async fn restored(&self, tr: &Translation, damage: Damage) {
        let name = tr.name_any();
        tracing::info!(translation = %name, namespace = tr.namespace().as_deref().unwrap_or(""), damage = damage.as_str(), "global Translation restored");
        self.shared
            .metrics
            .globals_restored
            .with_label_values(&[damage.as_str()])
            .inc();
        let note = match damage {
            Damage::Deleted => "re-created after it was deleted; the pusher re-creates its backend resources and what MidoNet deleted with them",
            Damage::Edited => "spec, labels or finalizer restored after an edit",
        };
        self.shared
            .events
            .warning(
                &tr.object_ref(&()),
                crate::events::reason::GLOBAL_TRANSLATION_RESTORED,
                note.to_string(),
            )
            .await;
    }

    fn report(&self, err: &RunnerError) {
        let denied = match err {
            RunnerError::Kube(e) => self.shared.authz.report(
                Attempt::new("patch", "translations", Some(GLOBAL_TRANSLATION_NAMESPACE)),
                e,
            ),
            RunnerError::Encode(_) => false,
        };
        if denied {
            tracing::debug!(controller = NAME, error = %err, "cannot write global Translations; retrying");
        } else {
            tracing::warn!(controller = NAME, error = %err, "cannot write global Translations; retrying");
        }
        self.shared
            .metrics
            .reconciles
            .with_label_values(&[NAME, "error"])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TranslationSpec;

    fn tr(namespace: &str, name: &str, global_label: bool) -> Translation {
        let mut t = Translation::new(name, namespace, TranslationSpec::default());
        if global_label {
            t.metadata.labels = Some([(GLOBAL_LABEL.to_string(), "true".to_string())].into());
        }
        t
    }

    #[test]
    fn events_about_global_translations_concern_the_controller() {
        let cfg = TranslatorConfig::default();
        let names = names(&cfg);
        assert_eq!(names.len(), 4);
        let (ns, name) = names.iter().next().cloned().unwrap();
        // Deleted, or edited (even with its label removed).
        assert!(concerns(
            &watcher::Event::Delete(tr(&ns, &name, true)),
            &names
        ));
        assert!(concerns(
            &watcher::Event::Apply(tr(&ns, &name, false)),
            &names
        ));
        // Another version's global Translation: to be pruned.
        assert!(concerns(
            &watcher::Event::Apply(tr(&ns, "midonet-global.0.chains", true)),
            &names
        ));
        assert!(concerns(&watcher::Event::InitDone, &names));
        // Everybody else's Translations do not.
        assert!(!concerns(
            &watcher::Event::Apply(tr("default", "node.1.n1", false)),
            &names
        ));
        assert!(!concerns(
            &watcher::Event::InitApply(tr(&ns, &name, true)),
            &names
        ));
    }
}
