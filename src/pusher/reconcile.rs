//! One pusher reconcile: apply a Translation, or delete it and release the finalizer.

use std::sync::Arc;
use std::time::Instant;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use midonet_translators::meta::FINALIZER;

use super::plan::{self, Step};
use super::verify::Cause;
use super::{PusherContext, PusherError, FIELD_MANAGER};
use crate::crd::{Condition, PushedResource, Translation, TranslationStatus};

/// Reasons of the `Ready` condition.
pub mod reason {
    pub const PUSHED: &str = "Pushed";
    pub const WAITING_FOR_REFERENT: &str = "WaitingForReferent";
    pub const BACKEND_ERROR: &str = "BackendError";
    pub const INVALID: &str = "InvalidTranslation";
    pub const IMMUTABLE_CHANGED: &str = "ImmutableResourceChanged";
    pub const DELETION_FAILED: &str = "DeletionFailed";
    /// MidoNet refuses to bind a port on a host that is in no tunnel zone.
    pub const HOST_NOT_IN_TUNNEL_ZONE: &str = "HostNotInTunnelZone";
    /// MidoNet refused a port binding for another reason (port or interface bound already).
    pub const BINDING_REFUSED: &str = "BindingRefused";
}

/// Event reasons, as the original controller named them.
pub mod event {
    pub const UPDATE_PUSHED: &str = "TranslationUpdatePushed";
    pub const UPDATE_ERROR: &str = "TranslationUpdateError";
    pub const DELETION_PUSHED: &str = "TranslationDeletionPushed";
    pub const DELETION_ERROR: &str = "TranslationDeletionError";
    pub const DELETION_FINALIZER_ERROR: &str = "TranslationDeletionFinalizerError";
    pub const DRIFT_REPAIRED: &str = "BackendDriftRepaired";
    /// Resources MidoNet deleted along with another Translation's were re-created.
    pub const CASCADE_REPAIRED: &str = "BackendCascadeRepaired";
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// "Referent not there yet" is normal while the cluster converges: warn only when it lasts.
const REFERENT_WARNING_AFTER: u32 = 8;
/// Longest retry delay while waiting for another Translation's push.
const REFERENT_RETRY_CAP: std::time::Duration = std::time::Duration::from_secs(5);

pub(super) async fn reconcile(
    tr: Arc<Translation>,
    ctx: Arc<PusherContext>,
) -> Result<Action, PusherError> {
    let Some(uid) = tr.uid() else {
        return Ok(Action::await_change());
    };
    ctx.metrics.in_flight.inc();
    let start = Instant::now();
    let result = if tr.metadata.deletion_timestamp.is_some() {
        if tr.finalizers().iter().any(|f| f == FINALIZER) {
            delete(&tr, &uid, &ctx).await
        } else {
            Ok(Outcome::Ignored)
        }
    } else if !tr.finalizers().iter().any(|f| f == FINALIZER) {
        // A Translation written by hand without our finalizer: guard it before pushing,
        // or its deletion could not clean the backend. The patch triggers a new reconcile.
        add_finalizer(&tr, &ctx).await.map(|()| Outcome::Ignored)
    } else {
        apply(&tr, &uid, &ctx).await
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
    Retry(std::time::Duration),
    /// Waiting (at most this long) for a referent another Translation provides.
    Held(std::time::Duration),
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

fn api_for(tr: &Translation, ctx: &PusherContext) -> Api<Translation> {
    Api::namespaced(ctx.kube.clone(), &tr.namespace().unwrap_or_default())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn ready_condition(status: &TranslationStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// Sets the Ready condition, keeping its transition time when the status did not flip.
fn set_ready(
    status: &mut TranslationStatus,
    ready: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) {
    let value = if ready { "True" } else { "False" };
    let transition = match ready_condition(status) {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Some(now()),
    };
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.push(Condition {
        type_: "Ready".into(),
        status: value.into(),
        reason: reason.into(),
        message,
        last_transition_time: transition,
        observed_generation: generation,
    });
}

/// Writes the status subresource if it changed, and remembers it (read-your-own-writes).
///
/// The status is PUT with the resourceVersion the reconcile saw: for the apiserver that is
/// a third cheaper than a merge patch, which it must apply to the stored object serialized
/// again for the purpose (the status write is the most expensive request of a sync). When
/// the object changed meanwhile (409), the status is merge-patched instead: what was pushed
/// must be recorded whatever happened to the spec, or its resources could not be deleted.
async fn write_status(
    tr: &Translation,
    uid: &str,
    ctx: &PusherContext,
    before: &TranslationStatus,
    status: TranslationStatus,
) -> Result<(), PusherError> {
    if &status == before {
        return Ok(());
    }
    let api = api_for(tr, ctx);
    let mut object = tr.clone();
    object.status = Some(status.clone());
    // The cache trims managedFields; sent without them, the apiserver keeps the stored ones.
    object.metadata.managed_fields = None;
    match api
        .replace_status(
            &tr.name_any(),
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            },
            &object,
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let patch = serde_json::json!({ "status": status });
            api.patch_status(&tr.name_any(), &patch_params(), &Patch::Merge(&patch))
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    ctx.remember_status(uid, status);
    Ok(())
}

fn upsert(record: &mut Vec<PushedResource>, entry: PushedResource) {
    match record.iter_mut().find(|p| p.path == entry.path) {
        Some(existing) => *existing = entry,
        None => record.push(entry),
    }
}

async fn apply(
    tr: &Translation,
    uid: &str,
    ctx: &Arc<PusherContext>,
) -> Result<Outcome, PusherError> {
    let generation = tr.metadata.generation;
    let entries = tr.desired_resources();
    let hash = plan::resources_hash(entries);
    let before = ctx.recorded_status(tr);
    // Pushed resources found gone from the backend, to create again.
    let missing = ctx.missing(uid);

    if missing.is_empty()
        && before.pushed_hash.as_deref() == Some(hash.as_str())
        && before.observed_generation == generation
    {
        ctx.succeeded(uid);
        return Ok(Outcome::Unchanged);
    }

    let mut status = before.clone();
    status.resource_count = Some(entries.len() as i64);
    let oref = tr.object_ref(&());

    let desired = match plan::parse_all(entries) {
        Ok(desired) => desired,
        Err(err) => {
            let message = format!("not pushed: {err}");
            tracing::warn!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), error = %err, "invalid Translation");
            set_ready(
                &mut status,
                false,
                reason::INVALID,
                message.clone(),
                generation,
            );
            // Recorded as handled so it is not retried until the spec changes.
            status.pushed_hash = Some(hash);
            status.observed_generation = generation;
            write_status(tr, uid, ctx, &before, status).await?;
            if ctx.should_warn(uid, &message) {
                ctx.events
                    .warning(&oref, event::UPDATE_ERROR, message)
                    .await;
            }
            return Ok(Outcome::Invalid);
        }
    };

    // Resources found missing (drift verification, another Translation's cascade) are
    // created again.
    let pushed: Vec<PushedResource> = before
        .pushed
        .iter()
        .filter(|p| !missing.contains_key(&p.path))
        .cloned()
        .collect();
    // A marked path the spec no longer asks for has nothing left to re-create.
    for path in missing.keys() {
        if !desired.iter().any(|d| &d.path == path) {
            ctx.recreated(uid, path);
        }
    }
    let plan = plan::plan_apply(desired, &pushed);
    let changes = plan.backend_changes();

    // Referents another Translation provides but has not pushed yet: wait to be woken
    // rather than send requests the backend would refuse.
    let creating: Vec<&plan::Desired> = plan
        .steps
        .iter()
        .filter(|(_, step)| *step == Step::Create)
        .map(|(d, _)| d)
        .collect();
    let key = kube::runtime::reflector::ObjectRef::from_obj(tr);
    if let Some((blocker, left)) = ctx.deps.hold(&key, &creating, |t| ctx.recorded_status(t)) {
        tracing::debug!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), awaited = ?blocker.awaited, provider = ?blocker.provider.map(|p| p.to_string()), "waiting for a referent or a bound interface");
        return Ok(Outcome::Held(left));
    }
    // Referents this push has created so far, to wake who waits for them.
    let mut created: Vec<midonet_translators::model::Referent> = Vec::new();
    let mut record = before.pushed.clone();
    let mut immutable = Vec::new();

    for (desired, step) in &plan.steps {
        match step {
            Step::Unchanged => continue,
            Step::ImmutableChanged => {
                immutable.push(desired.path.clone());
                continue;
            }
            Step::Create | Step::Update => {}
        }
        tracing::debug!(translation = %tr.name_any(), backend_kind = desired.resource.kind().name(), backend_path = %desired.path, "pushing");
        if let Err(err) = ctx.backend.apply(&desired.resource).await {
            if err.is_referent_missing() || err.is_host_not_in_tunnel_zone() {
                ctx.deps.wait_for(&key, desired.resource.requires());
            }
            if let (
                crate::backend::BackendError::BindingRefused { .. },
                midonet_translators::model::Resource::HostInterfacePort(binding),
            ) = (&err, &desired.resource)
            {
                ctx.deps.wait_for_interface(&key, binding.parent);
            }
            let outcome =
                push_failed(tr, uid, ctx, &before, status, record, &desired.path, err).await;
            // What was created before the failure is recorded: its waiters can go on.
            ctx.pushed(created);
            return outcome;
        }
        created.extend(desired.resource.provides());
        ctx.recreated(uid, &desired.path);
        let repaired = match missing.get(&desired.path) {
            Some(Cause::Drift) => Some(&ctx.metrics.drift_repaired),
            Some(Cause::Cascade) => Some(&ctx.metrics.cascade_repaired),
            None => None,
        };
        if let Some(counter) = repaired {
            counter
                .with_label_values(&[desired.resource.kind().name()])
                .inc();
        }
        upsert(
            &mut record,
            PushedResource {
                kind: desired.resource.kind().name().to_string(),
                path: desired.path.clone(),
                body_hash: desired.body_hash.clone(),
            },
        );
    }
    for (done, removed) in plan.removals.iter().enumerate() {
        let kind = midonet_translators::model::Kind::from_name(&removed.kind);
        let result = match kind {
            Some(kind) => ctx.backend.delete_path(kind, &removed.path).await,
            // Unknown kind in our own record: nothing we can address; drop it.
            None => Ok(()),
        };
        if let Err(err) = result {
            note_removals(ctx, uid, &key, &plan, &plan.removals[..done], &record);
            let outcome =
                push_failed(tr, uid, ctx, &before, status, record, &removed.path, err).await;
            ctx.pushed(created);
            return outcome;
        }
        record.retain(|p| p.path != removed.path);
    }
    note_removals(ctx, uid, &key, &plan, &plan.removals, &record);

    // Creation order: desired order first (parents before children).
    let order: std::collections::HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, (d, _))| (d.path.as_str(), i))
        .collect();
    record.sort_by_key(|p| order.get(p.path.as_str()).copied().unwrap_or(usize::MAX));
    status.pushed = record;
    status.pushed_hash = Some(hash);
    status.observed_generation = generation;
    if changes > 0 {
        status.last_push_time = Some(now());
    }
    let outcome = if immutable.is_empty() {
        set_ready(
            &mut status,
            true,
            reason::PUSHED,
            format!("{} backend resources in sync", entries.len()),
            generation,
        );
        Outcome::Pushed
    } else {
        let message = format!(
            "backend left as is: MidoNet cannot update {}; a changed body needs a new resource (new ID)",
            immutable.join(", ")
        );
        set_ready(
            &mut status,
            false,
            reason::IMMUTABLE_CHANGED,
            message.clone(),
            generation,
        );
        if ctx.should_warn(uid, &message) {
            ctx.events
                .warning(&oref, event::UPDATE_ERROR, message)
                .await;
        }
        Outcome::Immutable
    };
    write_status(tr, uid, ctx, &before, status).await?;
    ctx.deps.release(&key);
    ctx.pushed(created);
    if immutable.is_empty() {
        ctx.succeeded(uid);
    }
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
        ctx.events
            .warning(
                &oref,
                event::DRIFT_REPAIRED,
                format!("re-created backend resources deleted out of band: {drifted:?}"),
            )
            .await;
    }
    let cascaded = repaired(Cause::Cascade);
    if !cascaded.is_empty() {
        ctx.events
            .normal(
                &oref,
                event::CASCADE_REPAIRED,
                format!(
                    "re-created backend resources MidoNet deleted with another Translation's: {cascaded:?}"
                ),
            )
            .await;
    }
    if changes > 0 {
        tracing::info!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), changes, "pushed");
        ctx.events
            .normal(
                &oref,
                event::UPDATE_PUSHED,
                format!("{changes} backend changes pushed"),
            )
            .await;
    }
    Ok(outcome)
}

/// What `removed` (done removals of `plan`) took out of the backend, MidoNet deleted (or
/// cleared) in what needs it: in other Translations, checked when a provider pushes it
/// again; in this one (a hand-edited spec), re-created by its next push. Without this, a
/// Translation edited and put back would leave other Translations' rules in its chains
/// deleted.
fn note_removals(
    ctx: &PusherContext,
    uid: &str,
    key: &kube::runtime::reflector::ObjectRef<Translation>,
    plan: &plan::ApplyPlan,
    removed: &[PushedResource],
    record: &[PushedResource],
) {
    let taken: std::collections::HashSet<midonet_translators::model::Referent> = removed
        .iter()
        .flat_map(|r| super::deps::recorded_referents(&r.kind, &r.path))
        .collect();
    if taken.is_empty() {
        return;
    }
    ctx.deps.note_cascade(&taken, key);
    let kept: Vec<plan::Desired> = plan.steps.iter().map(|(d, _)| d.clone()).collect();
    let hit: std::collections::HashSet<String> = super::deps::cascaded_paths(&kept, &taken)
        .into_iter()
        .filter(|path| record.iter().any(|p| &p.path == path))
        .collect();
    if !hit.is_empty() {
        ctx.mark_missing(uid, hit, Cause::Cascade);
    }
}

/// Records progress, sets the condition, warns (not on every attempt), schedules a retry.
#[allow(clippy::too_many_arguments)]
async fn push_failed(
    tr: &Translation,
    uid: &str,
    ctx: &PusherContext,
    before: &TranslationStatus,
    mut status: TranslationStatus,
    record: Vec<PushedResource>,
    path: &str,
    err: crate::backend::BackendError,
) -> Result<Outcome, PusherError> {
    let (attempts, mut delay) = ctx.failed(uid);
    // Waiting for a referent, or for the host to join a tunnel zone (another Translation
    // pushes that), is normal while the cluster converges: warn only when it lasts.
    let (why, message, warn_when_lasting) = if err.is_referent_missing() {
        (
            reason::WAITING_FOR_REFERENT,
            format!("{path}: waiting for a referenced resource: {err}"),
            true,
        )
    } else if err.is_host_not_in_tunnel_zone() {
        (
            reason::HOST_NOT_IN_TUNNEL_ZONE,
            format!("{path}: {err}"),
            true,
        )
    } else if matches!(err, crate::backend::BackendError::BindingRefused { .. }) {
        (reason::BINDING_REFUSED, format!("{path}: {err}"), true)
    } else {
        (reason::BACKEND_ERROR, format!("{path}: {err}"), false)
    };
    if warn_when_lasting {
        // The provider's push wakes this Translation (deps::wait_for); the retry is only
        // the fallback, so it need not back off as far as for a failing backend.
        delay = delay.min(REFERENT_RETRY_CAP);
    }
    tracing::info!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), backend_path = path, attempts, retry_in = ?delay, error = %err, "push failed");
    // Progress is recorded even on failure: what was created must be deletable.
    status.pushed = record;
    set_ready(
        &mut status,
        false,
        why,
        message.clone(),
        tr.metadata.generation,
    );
    write_status(tr, uid, ctx, before, status).await?;
    let warn = if warn_when_lasting {
        attempts == REFERENT_WARNING_AFTER
    } else {
        ctx.should_warn(uid, &message)
    };
    if warn {
        ctx.events
            .warning(&tr.object_ref(&()), event::UPDATE_ERROR, message)
            .await;
    }
    Ok(Outcome::Retry(delay))
}

async fn delete(
    tr: &Translation,
    uid: &str,
    ctx: &Arc<PusherContext>,
) -> Result<Outcome, PusherError> {
    ctx.begin_deletion(uid);
    let before = ctx.recorded_status(tr);
    let desired = plan::parse_lenient(tr.desired_resources());
    let oref = tr.object_ref(&());
    let targets = plan::plan_delete(&before.pushed, &desired);
    for (kind, path) in &targets {
        if let Err(err) = ctx.backend.delete_path(*kind, path).await {
            let (attempts, delay) = ctx.failed(uid);
            let message = format!("cannot delete {path}: {err}");
            tracing::warn!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), attempts, retry_in = ?delay, error = %err, backend_kind = kind.name(), backend_path = %path, "deletion failed; the finalizer stays");
            let mut status = before.clone();
            set_ready(
                &mut status,
                false,
                reason::DELETION_FAILED,
                message.clone(),
                tr.metadata.generation,
            );
            write_status(tr, uid, ctx, &before, status).await?;
            if ctx.should_warn(uid, &message) {
                ctx.events
                    .warning(&oref, event::DELETION_ERROR, message)
                    .await;
            }
            return Ok(Outcome::Retry(delay));
        }
    }
    // The interfaces this Translation bound are free: new bindings of them can go.
    let key = kube::runtime::reflector::ObjectRef::from_obj(tr);
    ctx.wake(ctx.deps.bindings_deleted(&key));
    if let Err(err) = remove_finalizer(tr, ctx).await {
        let (_, delay) = ctx.failed(uid);
        let message = format!("cannot remove the finalizer: {err}");
        if !ctx.report_denied(tr, &err) {
            tracing::warn!(translation = %tr.name_any(), error = %err, "finalizer removal failed");
        }
        if ctx.should_warn(uid, &message) {
            ctx.events
                .warning(&oref, event::DELETION_FINALIZER_ERROR, message)
                .await;
        }
        return Ok(Outcome::Retry(delay));
    }
    tracing::info!(translation = %tr.name_any(), namespace = tr.namespace().as_deref().unwrap_or(""), deleted = targets.len(), "deletion pushed; finalizer removed");
    ctx.events
        .normal(
            &oref,
            event::DELETION_PUSHED,
            format!("{} backend resources deleted", targets.len()),
        )
        .await;
    // What this deletion took out of the backend, to check who had built on it.
    let deleted: std::collections::HashSet<&str> =
        targets.iter().map(|(_, path)| path.as_str()).collect();
    let taken = desired
        .iter()
        .filter(|d| deleted.contains(d.path.as_str()))
        .flat_map(|d| d.resource.provides())
        .collect();
    ctx.deps.note_cascade(&taken, &key);
    ctx.forget(tr, uid);
    Ok(Outcome::Deleted)
}

/// Removes only our finalizer, with a JSON-patch `test` of the current list so a concurrent
/// change to the finalizers makes the patch fail (and the reconcile retry) instead of being
/// overwritten.
async fn remove_finalizer(tr: &Translation, ctx: &PusherContext) -> Result<(), PusherError> {
    let current = tr.finalizers().to_vec();
    let remaining: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
    ]))?;
    api_for(tr, ctx)
        .patch(&tr.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await?;
    Ok(())
}

async fn add_finalizer(tr: &Translation, ctx: &PusherContext) -> Result<(), PusherError> {
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
    api_for(tr, ctx)
        .patch(&tr.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await?;
    Ok(())
}
