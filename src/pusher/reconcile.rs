//! One pusher reconcile: apply a Translation, or delete it and release the finalizer.
//!
//! This is the I/O shell: what to do is decided by [`steps`] (backend steps) and
//! [`status`] (what to record), both pure; this module performs the requests, in order,
//! and stops at the first failure with its progress recorded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use midonet_translators::meta::FINALIZER;
use midonet_translators::model::{Kind, Referent};

use super::status::{self, ReadyReason};
use super::steps::{self, ApplyDecision, ApplyPlan, Step};
use super::tracked::{Cause, Missing};
use super::{PusherContext, PusherError, FIELD_MANAGER};
use crate::backend::BackendError;
use crate::crd::{PushedResource, Translation, TranslationKey, TranslationStatus};
use crate::events::reason;
use crate::retry::RetryPolicy;
use crate::scaffold::Action;

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// "Referent not there yet" is normal while the cluster converges: warn only when it lasts.
const REFERENT_WARNING_AFTER: u32 = 8;
/// Longest retry delay while waiting for another Translation's push of a binding or a
/// tunnel-zone membership: a bump's cutover can wait on these, and there are few of them.
const REFERENT_RETRY_CAP: Duration = Duration::from_secs(5);
/// Longest retry delay while waiting for a referent another Translation provides.
const MISSING_REFERENT_RETRY_CAP: Duration = Duration::from_secs(30);
/// Retry delays while waiting for a referent another Translation provides. Its provider's
/// push wakes the waiter (`deps::wait_for`), so the retry is only the fallback: it starts
/// at a second, not at the delay after a backend failure: a provider may be written well
/// after its consumer (an Endpoints' Translation before its Service's, while the
/// translators' queues are long in an initial sync), and each early retry would cost a
/// refused request. It grows to half a minute because the waiters can be many: in a
/// version bump every pod's Translations wait on their node's, and thousands of waiters
/// retried every few seconds fill the pusher's workers with refused pushes, so the
/// providers they wait on get no worker.
const REFERENT_RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_secs(1), MISSING_REFERENT_RETRY_CAP);

/// How a push that stopped for `why` is retried; `backend` is the policy for a failing
/// backend.
fn retry_policy(why: ReadyReason, backend: RetryPolicy) -> RetryPolicy {
    match why {
        ReadyReason::WaitingForReferent => REFERENT_RETRY,
        // Woken too (by the tunnel zone's push, by the old binding's deletion), but a
        // bump's cutover can wait on these: the short first retries stay.
        why if why.is_waiting_for_another_push() => RetryPolicy {
            max: backend.max.min(REFERENT_RETRY_CAP),
            ..backend
        },
        _ => backend,
    }
}

pub(super) async fn reconcile(
    tr: Arc<Translation>,
    ctx: Arc<PusherContext>,
) -> Result<Action, PusherError> {
    let (Some(uid), Some(id)) = (tr.uid(), tr.key()) else {
        // Never from the apiserver: nothing to patch it by, nor to track it under.
        tracing::error!(translation = ?tr.metadata.name, namespace = ?tr.metadata.namespace, "a Translation without a UID, namespace or name; not pushed");
        return Ok(Action::await_change());
    };
    ctx.metrics.in_flight.inc();
    let start = Instant::now();
    let guarded = steps::guarded(&tr);
    let result = if tr.metadata.deletion_timestamp.is_some() {
        if guarded {
            ctx.tracker.begin_deletion(&uid);
            Reconciling::new(&tr, &uid, &id, &ctx).delete().await
        } else {
            Ok(Outcome::Ignored)
        }
    } else if !guarded {
        // A Translation written by hand without our finalizer: guard it before pushing,
        // or its deletion could not clean the backend. The patch triggers a new reconcile.
        add_finalizer(&tr, &api_for(&id, &ctx))
            .await
            .map(|()| Outcome::Ignored)
    } else {
        Reconciling::new(&tr, &uid, &id, &ctx).apply().await
    };
    ctx.metrics.in_flight.dec();
    let outcome = result?;
    ctx.metrics
        .reconcile_duration
        .with_label_values(&[outcome.operation()])
        .observe(start.elapsed().as_secs_f64());
    ctx.metrics
        .reconciles
        .with_label_values(&[outcome.result()])
        .inc();
    Ok(match outcome {
        Outcome::Retry(delay) | Outcome::Held(delay) => Action::requeue(delay),
        _ => Action::await_change(),
    })
}

enum Outcome {
    Ignored,
    Unchanged,
    Pushed,
    Invalid,
    Immutable,
    Retry(Duration),
    /// Waiting (at most this long) for a referent another Translation provides.
    Held(Duration),
    Deleted,
}

impl Outcome {
    fn operation(&self) -> &'static str {
        match self {
            Outcome::Unchanged | Outcome::Ignored => "unchanged",
            Outcome::Deleted => "delete",
            _ => "apply",
        }
    }
    fn result(&self) -> &'static str {
        match self {
            Outcome::Ignored => "ignored",
            Outcome::Unchanged => "unchanged",
            Outcome::Pushed => "pushed",
            Outcome::Invalid => "invalid",
            Outcome::Immutable => "immutable_changed",
            Outcome::Retry(_) => "retry",
            Outcome::Held(_) => "held",
            Outcome::Deleted => "deleted",
        }
    }
}

/// The API of `id`'s namespace (the Translation itself is named per request).
fn api_for(id: &TranslationKey, ctx: &PusherContext) -> Api<Translation> {
    Api::namespaced(ctx.kube.clone(), &id.0)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What a push got through before it stopped.
struct PushProgress {
    /// The record of pushed resources, updated per request.
    record: Vec<PushedResource>,
    /// Referents created so far, to wake who waits for them.
    created: Vec<Referent>,
    /// Those among them that had gone missing from the backend: what other Translations
    /// had under them went with them.
    recreated: std::collections::HashSet<Referent>,
    /// Paths MidoNet cannot update in place.
    immutable: Vec<String>,
}

/// The request that stopped a push.
struct Stopped {
    path: String,
    error: BackendError,
}

/// One reconcile of one Translation: the object, its UID, and the status last recorded.
struct Reconciling<'a> {
    tr: &'a Translation,
    uid: &'a str,
    /// Its namespace and name.
    id: &'a TranslationKey,
    ctx: &'a Arc<PusherContext>,
    key: ObjectRef<Translation>,
    oref: ObjectReference,
    before: TranslationStatus,
}

impl<'a> Reconciling<'a> {
    fn new(
        tr: &'a Translation,
        uid: &'a str,
        id: &'a TranslationKey,
        ctx: &'a Arc<PusherContext>,
    ) -> Self {
        Reconciling {
            tr,
            uid,
            id,
            ctx,
            key: ObjectRef::from_obj(tr),
            oref: tr.object_ref(&()),
            before: ctx.recorded_status(tr),
        }
    }

    fn name(&self) -> &str {
        &self.id.1
    }

    fn namespace(&self) -> &str {
        &self.id.0
    }

    /// Warns with an event unless the same warning was the last one for this Translation.
    async fn warn_once(&self, reason: &str, message: String) {
        if self.ctx.tracker.should_warn(self.uid, &message) {
            self.ctx.events.warning(&self.oref, reason, message).await;
        }
    }

    async fn apply(&self) -> Result<Outcome, PusherError> {
        let entries = self.tr.desired_resources();
        let hash = steps::resources_hash(entries);
        let missing = self.ctx.tracker.missing(self.uid);
        let generation = self.tr.metadata.generation;
        let (mut plan, settled) =
            match steps::decide_apply(entries, &hash, &self.before, &missing, generation) {
                ApplyDecision::Unchanged => {
                    self.ctx.tracker.succeeded(self.uid);
                    return Ok(Outcome::Unchanged);
                }
                ApplyDecision::Invalid(err) => return self.invalid(&err, hash).await,
                ApplyDecision::Push { plan, settled } => (plan, settled),
            };
        if let Err(stopped) = self.bindings_in_bump(&mut plan).await {
            return self
                .push_failed(self.before.pushed.clone(), entries.len(), stopped)
                .await;
        }
        for path in &settled {
            self.ctx.tracker.recreated(self.uid, path);
        }
        // Referents another Translation provides but has not pushed yet (or lost, and has
        // not pushed again): wait to be woken rather than send requests the backend would
        // refuse.
        let creating = plan.creates();
        if let Some((blocker, left)) = self
            .ctx
            .deps
            .hold(&self.key, &creating, |t| self.ctx.standing_status(t))
        {
            tracing::debug!(translation = %self.name(), namespace = %self.namespace(), awaited = ?blocker.awaited, provider = ?blocker.provider.map(|p| p.to_string()), "waiting for a referent or a bound interface");
            return Ok(Outcome::Held(left));
        }
        let (pushed, stopped) = self.execute(&plan, &missing).await;
        match stopped {
            Some(stopped) => self.stopped(&plan, pushed, stopped).await,
            None => self.completed(&plan, pushed, hash, &missing).await,
        }
    }

    /// The outcome of a spec that cannot be pushed at all: recorded, warned about.
    async fn invalid(
        &self,
        err: &steps::InvalidTranslation,
        hash: String,
    ) -> Result<Outcome, PusherError> {
        tracing::warn!(translation = %self.name(), namespace = %self.namespace(), error = %err, "invalid Translation");
        let count = self.tr.desired_resources().len();
        let generation = self.tr.metadata.generation;
        let (status, message) = status::invalid(&self.before, err, hash, count, generation, &now());
        self.write_status(status).await?;
        self.warn_once(reason::TRANSLATION_UPDATE_ERROR, message)
            .await;
        Ok(Outcome::Invalid)
    }

    /// The outcome of a push `stopped` by a failed request, what it got through recorded.
    async fn stopped(
        &self,
        plan: &ApplyPlan,
        pushed: PushProgress,
        stopped: Stopped,
    ) -> Result<Outcome, PusherError> {
        let refused = stopped
            .error
            .is_referent_missing()
            .then(|| plan.steps.iter().find(|(d, _)| d.path == stopped.path))
            .flatten()
            .map(|(d, _)| d.resource.clone());
        let count = self.tr.desired_resources().len();
        let outcome = self.push_failed(pushed.record, count, stopped).await;
        // What was created before the failure is recorded: its waiters can go on.
        self.pushed(pushed.created, &pushed.recreated);
        // A referent recorded as pushed (by another Translation, or by this one) may be
        // lost: verified once the failure is recorded.
        if let (Ok(_), Some(refused)) = (&outcome, refused) {
            super::verify::recheck_providers(self.ctx, &self.key, &refused);
        }
        outcome
    }

    /// The outcome of a push that went through: recorded, its waiters woken, reported.
    async fn completed(
        &self,
        plan: &ApplyPlan,
        pushed: PushProgress,
        hash: String,
        missing: &Missing,
    ) -> Result<Outcome, PusherError> {
        let PushProgress {
            record,
            created,
            recreated,
            immutable,
        } = pushed;
        let generation = self.tr.metadata.generation;
        let (status, not_ready) = status::pushed(
            &self.before,
            record,
            plan,
            hash,
            generation,
            &immutable,
            &now(),
        );
        self.write_status(status).await?;
        let cut_over = plan.steps.iter().filter(|(_, s)| *s == Step::CutOver);
        self.ctx
            .tracker
            .recorded(self.uid, cut_over.map(|(d, _)| d.path.clone()));
        self.ctx.deps.release(&self.key);
        self.pushed(created, &recreated);
        let outcome = match not_ready {
            None => {
                self.ctx.tracker.succeeded(self.uid);
                Outcome::Pushed
            }
            Some(message) => {
                self.warn_once(reason::TRANSLATION_UPDATE_ERROR, message)
                    .await;
                Outcome::Immutable
            }
        };
        self.report_repairs(missing).await;
        let changes = plan.backend_changes();
        if changes > 0 {
            tracing::info!(translation = %self.name(), namespace = %self.namespace(), changes, "pushed");
            let note = format!("{changes} backend changes pushed");
            self.ctx
                .events
                .normal(&self.oref, reason::TRANSLATION_UPDATE_PUSHED, note)
                .await;
        }
        Ok(outcome)
    }

    /// A version bump's bindings (see [`super::rollout`]): a binding of an interface an
    /// older version's Translation binds is withheld until the cutover; from then on, the
    /// old binding is deleted right before the new one is created. What the cutover
    /// created (bindings, the link between the versions) is recorded without a request.
    async fn bindings_in_bump(&self, plan: &mut ApplyPlan) -> Result<(), Stopped> {
        let ctx = self.ctx;
        if ctx.rollout.is_old(self.tr) {
            return Ok(());
        }
        let mut withheld = std::collections::HashSet::new();
        let mut cut_over = std::collections::HashSet::new();
        let mut phase = None;
        for (desired, step) in &plan.steps {
            if *step != Step::Create {
                continue;
            }
            if ctx.tracker.is_cut_over(self.uid, &desired.path) {
                cut_over.insert(desired.path.clone());
                continue;
            }
            let Some(interface) = super::deps::interface_of(&desired.resource) else {
                continue;
            };
            let old = ctx.old_binders(&self.key, &interface);
            if old.is_empty() {
                continue;
            }
            let phase = *phase.get_or_insert_with(|| ctx.rollout.phase());
            if !phase.cut_over() {
                withheld.insert(desired.path.clone());
                continue;
            }
            for (from, path) in old {
                if let Err(error) = ctx
                    .backend
                    .delete_path(Kind::HostInterfacePort, &path)
                    .await
                {
                    return Err(Stopped { path, error });
                }
                ctx.deps.taken_over(&interface, &from);
                ctx.metrics.bindings_cut_over.inc();
                tracing::info!(translation = %self.name(), namespace = %self.namespace(), host = %interface.0, interface = %interface.1, from = %from, "binding cut over to the new Translation version");
            }
        }
        plan.withhold(&withheld);
        plan.cut_over(&cut_over);
        Ok(())
    }

    /// Performs `plan`'s requests in order: creates and updates, then removals. Stops at
    /// the first failure and says which.
    async fn execute(
        &self,
        plan: &ApplyPlan,
        missing: &Missing,
    ) -> (PushProgress, Option<Stopped>) {
        let ctx = self.ctx;
        let mut progress = PushProgress {
            record: self.before.pushed.clone(),
            created: Vec::new(),
            recreated: std::collections::HashSet::new(),
            immutable: Vec::new(),
        };
        for (desired, step) in &plan.steps {
            match step {
                Step::Unchanged | Step::Withheld => continue,
                Step::ImmutableChanged => {
                    progress.immutable.push(desired.path.clone());
                    continue;
                }
                Step::Create | Step::Update | Step::CutOver => {}
            }
            let kind = desired.resource.kind();
            if *step != Step::CutOver {
                tracing::debug!(translation = %self.name(), backend_kind = kind.name(), backend_path = %desired.path, "pushing");
                if let Err(error) = ctx.backend.apply(&desired.resource).await {
                    self.await_what_failed(&desired.resource, &error);
                    let path = desired.path.clone();
                    return (progress, Some(Stopped { path, error }));
                }
            }
            progress.created.extend(desired.resource.provides());
            ctx.tracker.recreated(self.uid, &desired.path);
            let repaired = match missing.get(&desired.path) {
                Some(Cause::Drift) => Some(&ctx.metrics.drift_repaired),
                Some(Cause::Cascade) => Some(&ctx.metrics.cascade_repaired),
                None => None,
            };
            if let Some(counter) = repaired {
                counter.with_label_values(&[kind.name()]).inc();
                progress.recreated.extend(desired.resource.provides());
            }
            status::upsert(&mut progress.record, desired.record());
        }
        for (done, removed) in plan.removals.iter().enumerate() {
            let result = match Kind::from_name(&removed.kind) {
                Some(kind) => ctx.backend.delete_path(kind, &removed.path).await,
                // Unknown kind in our own record: nothing we can address; drop it.
                None => Ok(()),
            };
            if let Err(error) = result {
                self.note_removals(plan, &plan.removals[..done], &progress.record);
                let path = removed.path.clone();
                return (progress, Some(Stopped { path, error }));
            }
            progress.record.retain(|p| p.path != removed.path);
        }
        self.note_removals(plan, &plan.removals, &progress.record);
        (progress, None)
    }

    /// `created` (referents this push created) exist now: wakes who waits for them. Those
    /// `recreated` had been lost from the backend, and MidoNet had taken with them what
    /// other Translations built on them: those are verified, as after a cascade.
    fn pushed(&self, created: Vec<Referent>, recreated: &std::collections::HashSet<Referent>) {
        if !recreated.is_empty() {
            self.ctx.deps.note_cascade(recreated, &self.key);
        }
        self.ctx.pushed(created);
    }

    /// A request refused for want of something another Translation provides (a referent,
    /// the host's tunnel zone membership, a free interface): that provider's push wakes
    /// this Translation.
    fn await_what_failed(
        &self,
        resource: &midonet_translators::model::Resource,
        err: &BackendError,
    ) {
        if err.is_referent_missing() || err.is_host_not_in_tunnel_zone() {
            self.ctx.deps.wait_for(&self.key, resource.requires());
        }
        if let (
            BackendError::BindingRefused { .. },
            midonet_translators::model::Resource::HostInterfacePort(binding),
        ) = (err, resource)
        {
            self.ctx.deps.wait_for_interface(&self.key, binding.parent);
        }
    }

    /// What `removed` (done removals of `plan`) took out of the backend, MidoNet deleted
    /// (or cleared) in what needs it: in other Translations, checked when a provider pushes
    /// it again; in this one (a hand-edited spec), re-created by its next push. Without
    /// this, a Translation edited and put back would leave other Translations' rules in its
    /// chains deleted.
    fn note_removals(
        &self,
        plan: &ApplyPlan,
        removed: &[PushedResource],
        record: &[PushedResource],
    ) {
        let taken: std::collections::HashSet<Referent> = removed
            .iter()
            .flat_map(|r| super::deps::recorded_referents(&r.kind, &r.path))
            .collect();
        if taken.is_empty() {
            return;
        }
        self.ctx.deps.note_cascade(&taken, &self.key);
        let kept: Vec<steps::Desired> = plan.steps.iter().map(|(d, _)| d.clone()).collect();
        let hit: std::collections::HashSet<String> = super::deps::cascaded_paths(&kept, &taken)
            .into_iter()
            .filter(|path| record.iter().any(|p| &p.path == path))
            .collect();
        if !hit.is_empty() {
            self.ctx.tracker.mark_missing(self.uid, hit, Cause::Cascade);
        }
    }

    /// Events for resources found missing and pushed again.
    async fn report_repairs(&self, missing: &Missing) {
        let repaired = |cause: Cause| {
            let mut paths: Vec<&String> = missing
                .iter()
                .filter(|(_, c)| **c == cause)
                .map(|(p, _)| p)
                .collect();
            paths.sort();
            paths
        };
        let drifted = repaired(Cause::Drift);
        if !drifted.is_empty() {
            self.ctx
                .events
                .warning(
                    &self.oref,
                    reason::BACKEND_DRIFT_REPAIRED,
                    format!("re-created backend resources deleted out of band: {drifted:?}"),
                )
                .await;
        }
        let cascaded = repaired(Cause::Cascade);
        if !cascaded.is_empty() {
            self.ctx
                .events
                .normal(
                    &self.oref,
                    reason::BACKEND_CASCADE_REPAIRED,
                    format!(
                        "re-created backend resources MidoNet deleted with another Translation's: {cascaded:?}"
                    ),
                )
                .await;
        }
    }

    /// Records progress, sets the condition, warns (not on every attempt), schedules a retry.
    async fn push_failed(
        &self,
        record: Vec<PushedResource>,
        resource_count: usize,
        stopped: Stopped,
    ) -> Result<Outcome, PusherError> {
        let Stopped { path, error: err } = stopped;
        let attempts = self.ctx.tracker.failed(self.uid);
        let (why, message) = if err.is_referent_missing() {
            (
                ReadyReason::WaitingForReferent,
                format!("{path}: waiting for a referenced resource: {err}"),
            )
        } else if err.is_host_not_in_tunnel_zone() {
            (ReadyReason::HostNotInTunnelZone, format!("{path}: {err}"))
        } else if matches!(err, BackendError::BindingRefused { .. }) {
            (ReadyReason::BindingRefused, format!("{path}: {err}"))
        } else {
            (ReadyReason::BackendError, format!("{path}: {err}"))
        };
        let delay = retry_policy(why, self.ctx.retry_policy()).delay(attempts);
        tracing::info!(translation = %self.name(), namespace = %self.namespace(), backend_path = path, attempts, retry_in = ?delay, error = %err, "push failed");
        let status = status::failed(
            &self.before,
            record,
            resource_count,
            why,
            message.clone(),
            self.tr.metadata.generation,
            &now(),
        );
        self.write_status(status).await?;
        // Waiting for another Translation's push is normal while the cluster converges:
        // warn only when it lasts.
        if why.is_waiting_for_another_push() {
            if attempts == REFERENT_WARNING_AFTER {
                self.ctx
                    .events
                    .warning(&self.oref, reason::TRANSLATION_UPDATE_ERROR, message)
                    .await;
            }
        } else {
            self.warn_once(reason::TRANSLATION_UPDATE_ERROR, message)
                .await;
        }
        Ok(Outcome::Retry(delay))
    }

    async fn delete(&self) -> Result<Outcome, PusherError> {
        let ctx = self.ctx;
        let (desired, deletion) = self.deletion();
        // Who else binds this Translation's interfaces records a binding MidoNet holds for
        // one port at a time: it must push its own again once this one's is gone.
        let rebind = self.other_current_binders();
        let targets = &deletion.requests;
        for (kind, path) in targets {
            if let Err(err) = ctx.backend.delete_path(*kind, path).await {
                return self.deletion_failed(*kind, path, &err).await;
            }
        }
        // The interfaces this Translation bound are free: new bindings of them can go.
        ctx.wake(ctx.deps.bindings_deleted(&self.key));
        for (other, path) in rebind {
            ctx.repush_binding(other, path);
        }
        if let Err(err) = remove_finalizer(self.tr, &api_for(self.id, ctx)).await {
            if is_not_found(&err) {
                return Ok(self.deleted_meanwhile());
            }
            let delay = ctx.retry_delay(ctx.tracker.failed(self.uid));
            let message = format!("cannot remove the finalizer: {err}");
            if !ctx.report_denied(self.tr, &err) {
                tracing::warn!(translation = %self.name(), error = %err, "finalizer removal failed");
            }
            self.warn_once(reason::TRANSLATION_DELETION_FINALIZER_ERROR, message)
                .await;
            return Ok(Outcome::Retry(delay));
        }
        tracing::info!(translation = %self.name(), namespace = %self.namespace(), deleted = targets.len(), cascaded = deletion.cascaded.len(), claimed = deletion.claimed.len(), "deletion pushed; finalizer removed");
        let note = format!("{} backend resources deleted", targets.len());
        ctx.events
            .normal(&self.oref, reason::TRANSLATION_DELETION_PUSHED, note)
            .await;
        // What this deletion took out of the backend, to check who had built on it.
        let deleted: std::collections::HashSet<&str> = targets
            .iter()
            .map(|(_, path)| path.as_str())
            .chain(deletion.cascaded.iter().map(String::as_str))
            .collect();
        let taken = desired
            .iter()
            .filter(|d| deleted.contains(d.path.as_str()))
            .flat_map(|d| d.resource.provides())
            .collect();
        ctx.deps.note_cascade(&taken, &self.key);
        ctx.forget(self.tr, self.uid);
        Ok(Outcome::Deleted)
    }

    /// A deletion whose finalizer was removed by another reconcile of the same deletion
    /// (one queued before the first one's removal reached the cache). Only the pusher
    /// removes the finalizer, and only once the backend confirmed the same deletions this
    /// reconcile repeated, so the Translation is finished: no warning, no second event.
    fn deleted_meanwhile(&self) -> Outcome {
        tracing::debug!(translation = %self.name(), namespace = %self.namespace(), "finalizer already removed: the deletion was finished by an earlier reconcile");
        self.ctx.forget(self.tr, self.uid);
        Outcome::Deleted
    }

    /// The resources this Translation still has in the backend, and the deletion's plan
    /// for them ([`steps::plan_delete`]).
    fn deletion(&self) -> (Vec<steps::Desired>, steps::DeletePlan) {
        let ctx = self.ctx;
        let mut desired = steps::parse_lenient(self.tr.desired_resources());
        let mut taken = ctx.deps.taken_elsewhere(&self.key, &desired);
        // What a bump's cutover deleted already (an old node bridge) is gone, and what
        // MidoNet's cascade took with it.
        let gone = ctx.tracker.paths_deleted_by_cutover(self.uid);
        taken.extend(
            desired
                .iter()
                .filter(|d| gone.contains(&d.path))
                .filter_map(|d| d.resource.own_id()),
        );
        desired.retain(|d| !gone.contains(&d.path));
        let mut pushed = self.before.pushed.clone();
        pushed.retain(|p| !gone.contains(&p.path));
        tracing::debug!(translation = %self.name(), taken = ?taken, "deleting; taken by other deletions");
        let deletion = steps::plan_delete(&pushed, &desired, &taken, |path| ctx.deps.claimed(path));
        (desired, deletion)
    }

    /// The current version's other Translations binding an interface this one binds, with
    /// the path of each one's binding.
    fn other_current_binders(&self) -> Vec<(ObjectRef<Translation>, String)> {
        let ctx = self.ctx;
        ctx.deps
            .interfaces_of(&self.key)
            .iter()
            .flat_map(|i| ctx.deps.other_binders(&self.key, i))
            .filter(|(k, _)| {
                ctx.deps
                    .store()
                    .get(k)
                    .is_some_and(|t| !ctx.rollout.is_old(&t))
            })
            .collect()
    }

    /// The outcome of a backend deletion of `path` that failed with `err`: the finalizer
    /// stays, the condition and a Warning say why, and the deletion is retried.
    async fn deletion_failed(
        &self,
        kind: Kind,
        path: &str,
        err: &BackendError,
    ) -> Result<Outcome, PusherError> {
        let attempts = self.ctx.tracker.failed(self.uid);
        let delay = self.ctx.retry_delay(attempts);
        let message = format!("cannot delete {path}: {err}");
        tracing::warn!(translation = %self.name(), namespace = %self.namespace(), attempts, retry_in = ?delay, error = %err, backend_kind = kind.name(), backend_path = %path, "deletion failed; the finalizer stays");
        let mut status = self.before.clone();
        status::set_ready(
            &mut status,
            false,
            ReadyReason::DeletionFailed,
            message.clone(),
            self.tr.metadata.generation,
            &now(),
        );
        self.write_status(status).await?;
        self.warn_once(reason::TRANSLATION_DELETION_ERROR, message)
            .await;
        Ok(Outcome::Retry(delay))
    }

    /// Writes the status subresource if it changed, and remembers it (read-your-own-writes).
    ///
    /// The status is PUT with the resourceVersion the reconcile saw: for the apiserver that
    /// is cheaper than a merge patch, which it must apply to the stored object serialized
    /// again for the purpose, and the status write is the request a sync makes most. When
    /// the object changed meanwhile (409), the status is merge-patched instead:
    /// what was pushed must be recorded whatever happened to the spec, or its resources
    /// could not be deleted.
    async fn write_status(&self, status: TranslationStatus) -> Result<(), PusherError> {
        if status == self.before {
            return Ok(());
        }
        let api = api_for(self.id, self.ctx);
        let mut object = self.tr.clone();
        object.status = Some(status.clone());
        // The cache trims managedFields; sent without them, the apiserver keeps the stored ones.
        object.metadata.managed_fields = None;
        // The cache keeps the labels aside (`Translation::compact_labels`); a write that
        // left them out would read to the apiserver's field manager as their removal.
        object.metadata.labels = self.tr.labels_map();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        // Announced before the request: the watch event of the write can come before its
        // response.
        let tracker = &self.ctx.tracker;
        let from = super::tracked::reconcile_input_hash(self.tr);
        tracker.writing_status(self.uid, status, from);
        let written = match api.replace_status(self.name(), &params, &object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let patch = crate::crd::status_merge_patch(object.status.as_ref())?;
                api.patch_status(self.name(), &patch_params(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => tracker.status_written(self.uid),
            Err(_) => tracker.status_not_written(self.uid),
        }
        Ok(written?)
    }
}

/// Removes only our finalizer, with a JSON-patch `test` of the current list so a concurrent
/// change to the finalizers makes the patch fail (and the reconcile retry) instead of being
/// overwritten.
/// Whether the apiserver answered that the Translation is gone.
fn is_not_found(err: &PusherError) -> bool {
    matches!(err, PusherError::Kube(kube::Error::Api(status)) if status.code == 404)
}

async fn remove_finalizer(tr: &Translation, api: &Api<Translation>) -> Result<(), PusherError> {
    let current = tr.finalizers().to_vec();
    let remaining: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
    ]))?;
    api.patch(&tr.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await?;
    Ok(())
}

async fn add_finalizer(tr: &Translation, api: &Api<Translation>) -> Result<(), PusherError> {
    let patch = match &tr.metadata.finalizers {
        Some(current) => {
            let mut next = current.clone();
            next.push(FINALIZER.to_string());
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "replace", "path": "/metadata/finalizers", "value": next},
            ])
        }
        None => serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": tr.resource_version()},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
    };
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    api.patch(&tr.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pusher's default retries after a backend failure.
    const BACKEND: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(60));

    fn base_delays(why: ReadyReason) -> Vec<Duration> {
        let policy = retry_policy(why, BACKEND);
        (1..=6).map(|n| policy.base_delay(n)).collect()
    }

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn a_missing_referent_is_retried_from_a_second_up_to_half_a_minute() {
        assert_eq!(
            base_delays(ReadyReason::WaitingForReferent),
            ms(&[1000, 2000, 4000, 8000, 16000, 30000])
        );
    }

    #[test]
    fn what_a_cutover_waits_on_keeps_the_short_first_retries() {
        for why in [
            ReadyReason::BindingRefused,
            ReadyReason::HostNotInTunnelZone,
        ] {
            assert_eq!(base_delays(why), ms(&[200, 400, 800, 1600, 3200, 5000]));
        }
    }

    #[test]
    fn a_failing_backend_backs_off_to_the_configured_cap() {
        assert_eq!(
            base_delays(ReadyReason::BackendError),
            ms(&[200, 400, 800, 1600, 3200, 6400])
        );
        assert_eq!(
            retry_policy(ReadyReason::BackendError, BACKEND).base_delay(20),
            Duration::from_secs(60)
        );
    }
}
