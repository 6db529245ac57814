//! The status the pusher records on a Translation, decided without I/O.
//!
//! The pushed record ([`TranslationStatus::pushed`], stored as `status.created`, see
//! [`crate::crd`]) is what exists in the backend because of the Translation (deletion
//! deletes exactly that); `pushedHash` and `observedGeneration` say which spec was pushed
//! completely; the `Ready` condition says why not when it was not, and nothing more when it
//! was (`Pushed`, no message: the count is `resourceCount`). A Translation of
//! the original Go controller records nothing: what it lists is taken as pushed
//! ([`adopted`]), never written as such.

use crate::crd::{Condition, PushedResource, TranslationStatus};

use super::steps::{ApplyPlan, InvalidTranslation};

/// Reasons of the `Ready` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyReason {
    Pushed,
    WaitingForReferent,
    BackendError,
    InvalidTranslation,
    ImmutableResourceChanged,
    DeletionFailed,
    /// MidoNet refuses to bind a port on a host that is in no tunnel zone.
    HostNotInTunnelZone,
    /// MidoNet refused a port binding for another reason (port or interface bound already).
    BindingRefused,
    /// Everything is pushed but a host interface binding, which waits for a version bump's
    /// cutover: the interface is bound by the previous version (see `pusher::rollout`).
    AwaitingCutover,
}

impl ReadyReason {
    /// A push stopped for want of what another Translation's push provides (a referent,
    /// the host's tunnel zone membership, a free interface): normal while the cluster
    /// converges, and that push wakes the waiter.
    pub fn is_waiting_for_another_push(self) -> bool {
        matches!(
            self,
            ReadyReason::WaitingForReferent
                | ReadyReason::HostNotInTunnelZone
                | ReadyReason::BindingRefused
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReadyReason::Pushed => "Pushed",
            ReadyReason::WaitingForReferent => "WaitingForReferent",
            ReadyReason::BackendError => "BackendError",
            ReadyReason::InvalidTranslation => "InvalidTranslation",
            ReadyReason::ImmutableResourceChanged => "ImmutableResourceChanged",
            ReadyReason::DeletionFailed => "DeletionFailed",
            ReadyReason::HostNotInTunnelZone => "HostNotInTunnelZone",
            ReadyReason::BindingRefused => "BindingRefused",
            ReadyReason::AwaitingCutover => "AwaitingCutover",
        }
    }
}

pub fn ready_condition(status: &TranslationStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// Sets the Ready condition, keeping its transition time when the status did not flip.
pub fn set_ready(
    status: &mut TranslationStatus,
    ready: bool,
    reason: ReadyReason,
    message: String,
    generation: Option<i64>,
    now: &str,
) {
    let value = if ready { "True" } else { "False" };
    let transition = match ready_condition(status) {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Some(now.to_string()),
    };
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.push(Condition {
        type_: "Ready".into(),
        status: value.into(),
        reason: reason.as_str().into(),
        message,
        last_transition_time: transition,
        observed_generation: generation,
    });
}

/// An invalid spec is recorded as handled (its hash and generation), so it is not retried
/// until it changes.
pub fn invalid(
    before: &TranslationStatus,
    error: &InvalidTranslation,
    hash: String,
    resource_count: usize,
    generation: Option<i64>,
    now: &str,
) -> (TranslationStatus, String) {
    let mut status = before.clone();
    status.resource_count = Some(resource_count as i64);
    let message = format!("not pushed: {error}");
    set_ready(
        &mut status,
        false,
        ReadyReason::InvalidTranslation,
        message.clone(),
        generation,
        now,
    );
    status.pushed_hash = Some(hash);
    status.observed_generation = generation;
    (status, message)
}

/// The status of a Translation the original Go controller wrote, which recorded none:
/// everything it lists taken as pushed (the original pushed it), as of its current spec
/// (`entries`, `generation`). A reconcile then finds nothing to do, a deletion deletes
/// what it lists, and verification finds what is missing. `before` is what the status
/// holds (conditions without a record are kept).
pub fn adopted(
    before: TranslationStatus,
    entries: &[midonet_translators::TranslationResource],
    generation: Option<i64>,
) -> TranslationStatus {
    let pushed = super::steps::parse_lenient(entries)
        .iter()
        .map(super::steps::Desired::record)
        .collect();
    TranslationStatus {
        pushed,
        pushed_hash: Some(super::steps::resources_hash(entries)),
        observed_generation: generation,
        resource_count: Some(entries.len() as i64),
        ..before
    }
}

/// Adds or replaces the record of one pushed resource.
pub fn upsert(record: &mut Vec<PushedResource>, entry: PushedResource) {
    match record.iter_mut().find(|p| p.path == entry.path) {
        Some(existing) => *existing = entry,
        None => record.push(entry),
    }
}

/// Progress of a push that stopped at a failure: what was pushed is recorded (it must stay
/// deletable), the spec is not marked as pushed.
pub fn failed(
    before: &TranslationStatus,
    record: Vec<PushedResource>,
    resource_count: usize,
    reason: ReadyReason,
    message: String,
    generation: Option<i64>,
    now: &str,
) -> TranslationStatus {
    let mut status = before.clone();
    status.resource_count = Some(resource_count as i64);
    status.pushed = record;
    set_ready(&mut status, false, reason, message, generation, now);
    status
}

/// The status after every step of `plan` went through. `immutable` are the paths MidoNet
/// could not update in place; the Translation is Ready only without them. Returns the
/// status and, when not Ready, the message of the condition.
pub fn pushed(
    before: &TranslationStatus,
    mut record: Vec<PushedResource>,
    plan: &ApplyPlan,
    hash: String,
    generation: Option<i64>,
    immutable: &[String],
    now: &str,
) -> (TranslationStatus, Option<String>) {
    let mut status = before.clone();
    status.resource_count = Some(plan.steps.len() as i64);
    // Creation order: desired order first (parents before children).
    let order: std::collections::HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, (d, _))| (d.path.as_str(), i))
        .collect();
    record.sort_by_key(|p| order.get(p.path.as_str()).copied().unwrap_or(usize::MAX));
    status.pushed = record;
    status.observed_generation = generation;
    if plan.backend_changes() > 0 {
        status.last_push_time = Some(now.to_string());
    }
    let withheld = plan.withheld();
    // Not the whole spec: the next reconcile must push the rest.
    status.pushed_hash = withheld.is_empty().then_some(hash);
    if !withheld.is_empty() {
        let message = format!(
            "pushed but for {}: the interface is bound by the previous Translation version until the version bump cuts over",
            withheld.join(", ")
        );
        set_ready(
            &mut status,
            false,
            ReadyReason::AwaitingCutover,
            message,
            generation,
            now,
        );
        (status, None)
    } else if immutable.is_empty() {
        set_ready(
            &mut status,
            true,
            ReadyReason::Pushed,
            // `Pushed` says it all; the count is `status.resourceCount`.
            String::new(),
            generation,
            now,
        );
        (status, None)
    } else {
        let message = format!(
            "backend left as is: MidoNet cannot update {}; a changed body needs a new resource (new ID)",
            immutable.join(", ")
        );
        set_ready(
            &mut status,
            false,
            ReadyReason::ImmutableResourceChanged,
            message.clone(),
            generation,
            now,
        );
        (status, Some(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pusher::steps::{parse_all, plan_apply};
    use midonet_translators::TranslationResource;

    const BRIDGE: &str = "11111111-1111-4111-8111-111111111111";
    const PORT: &str = "22222222-2222-4222-8222-222222222222";

    fn entries() -> Vec<TranslationResource> {
        vec![
            TranslationResource::new(
                "Bridge",
                "",
                format!(r#"{{"id":"{BRIDGE}","name":"b","tenantId":"t"}}"#),
            ),
            TranslationResource::new(
                "Port",
                BRIDGE,
                format!(r#"{{"id":"{PORT}","type":"Bridge"}}"#),
            ),
        ]
    }

    fn record_of(plan: &ApplyPlan) -> Vec<PushedResource> {
        plan.steps.iter().map(|(d, _)| d.record()).collect()
    }

    #[test]
    fn the_original_controllers_list_is_taken_as_pushed_and_needs_no_request() {
        use crate::pusher::steps::{decide_apply, resources_hash, ApplyDecision};
        let entries = entries();
        let adopted = adopted(TranslationStatus::default(), &entries, Some(1));
        let plan = plan_apply(parse_all(&entries).unwrap(), &[]);
        assert_eq!(adopted.pushed, record_of(&plan));
        assert_eq!(adopted.resource_count, Some(2));
        // Nothing left to push for that spec...
        let hash = resources_hash(&entries);
        assert!(matches!(
            decide_apply(&entries, &hash, &adopted, &Default::default(), Some(1)),
            ApplyDecision::Unchanged
        ));
        // ... but what verification finds missing is created again.
        let missing = [(
            format!("/ports/{PORT}"),
            crate::pusher::tracked::Cause::Drift,
        )]
        .into();
        let ApplyDecision::Push { plan, .. } =
            decide_apply(&entries, &hash, &adopted, &missing, Some(1))
        else {
            panic!("a missing resource is pushed");
        };
        assert_eq!(plan.creates().len(), 1);
    }

    /// The status an older version recorded for [`entries`] pushed completely: objects with
    /// 16-digit body hashes and a 32-digit list hash (computed apart from this crate, with
    /// its formulas: SHA-256 of parent, NUL, body; of each part's length and bytes).
    fn older_versions_status() -> serde_json::Value {
        serde_json::json!({
            "observedGeneration": 1,
            "pushedHash": "a7a2bc4870b8a80ab407079dbc7696c0",
            "resourceCount": 2,
            "pushed": [
                {"kind": "Bridge", "path": format!("/bridges/{BRIDGE}"), "bodyHash": "dbd24d7cb9e4e198"},
                {"kind": "Port", "path": format!("/ports/{PORT}"), "bodyHash": "8bb0fed7326c3f0e"},
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Pushed",
                            "message": "2 backend resources in sync", "observedGeneration": 1}],
        })
    }

    #[test]
    fn an_older_versions_record_needs_no_request_and_is_kept_as_is() {
        use crate::pusher::steps::{decide_apply, resources_hash, ApplyDecision, Step};
        let entries = entries();
        let before: TranslationStatus = serde_json::from_value(older_versions_status()).unwrap();
        let hash = resources_hash(&entries);
        // The spec it recorded: nothing to do, nothing to write.
        assert!(matches!(
            decide_apply(&entries, &hash, &before, &Default::default(), Some(1)),
            ApplyDecision::Unchanged
        ));
        // A new generation with the same resources (the list hash aside): every body is
        // known as pushed, so no backend request.
        let ApplyDecision::Push { plan, .. } =
            decide_apply(&entries, &hash, &before, &Default::default(), Some(2))
        else {
            panic!("a new generation is planned");
        };
        assert!(plan.steps.iter().all(|(_, s)| *s == Step::Unchanged));
        assert!(plan.removals.is_empty());
        // A changed body is still noticed.
        let mut changed = entries.clone();
        changed[1].body = format!(r#"{{"id":"{PORT}","type":"Bridge","adminStateUp":false}}"#);
        let ApplyDecision::Push { plan, .. } = decide_apply(
            &changed,
            &resources_hash(&changed),
            &before,
            &Default::default(),
            Some(2),
        ) else {
            panic!("a changed spec is planned");
        };
        let steps: Vec<&Step> = plan.steps.iter().map(|(_, s)| s).collect();
        assert_eq!(steps, [&Step::Unchanged, &Step::Update]);
    }

    #[test]
    fn a_complete_push_is_ready_with_the_record_in_creation_order() {
        let plan = plan_apply(parse_all(&entries()).unwrap(), &[]);
        let mut record = record_of(&plan);
        record.reverse();
        let (status, message) = pushed(
            &TranslationStatus::default(),
            record,
            &plan,
            "h".into(),
            Some(3),
            &[],
            "t1",
        );
        assert_eq!(message, None);
        let paths: Vec<&str> = status.pushed.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [format!("/bridges/{BRIDGE}"), format!("/ports/{PORT}")]
        );
        assert_eq!(status.pushed_hash.as_deref(), Some("h"));
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.last_push_time.as_deref(), Some("t1"));
        let ready = ready_condition(&status).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Pushed")
        );
    }

    #[test]
    fn an_immutable_change_is_not_ready_and_says_which_path() {
        let plan = plan_apply(parse_all(&entries()).unwrap(), &[]);
        let record = record_of(&plan);
        let (status, message) = pushed(
            &TranslationStatus::default(),
            record,
            &plan,
            "h".into(),
            Some(1),
            &["/rules/x".into()],
            "t1",
        );
        assert!(message.unwrap().contains("/rules/x"));
        let ready = ready_condition(&status).unwrap();
        assert_eq!(ready.reason, "ImmutableResourceChanged");
    }

    #[test]
    fn an_unchanged_push_keeps_the_last_push_time_and_the_transition_time() {
        let plan = plan_apply(parse_all(&entries()).unwrap(), &[]);
        let (first, _) = pushed(
            &TranslationStatus::default(),
            record_of(&plan),
            &plan,
            "h".into(),
            Some(1),
            &[],
            "t1",
        );
        let again = plan_apply(parse_all(&entries()).unwrap(), &first.pushed);
        let (second, _) = pushed(
            &first,
            first.pushed.clone(),
            &again,
            "h".into(),
            Some(2),
            &[],
            "t2",
        );
        assert_eq!(second.last_push_time.as_deref(), Some("t1"));
        assert_eq!(
            ready_condition(&second)
                .unwrap()
                .last_transition_time
                .as_deref(),
            Some("t1")
        );
        assert_eq!(
            ready_condition(&second).unwrap().observed_generation,
            Some(2)
        );
    }

    #[test]
    fn a_failure_records_progress_but_not_the_spec() {
        let before = TranslationStatus {
            pushed_hash: Some("old".into()),
            ..TranslationStatus::default()
        };
        let plan = plan_apply(parse_all(&entries()).unwrap(), &[]);
        let status = failed(
            &before,
            record_of(&plan)[..1].to_vec(),
            2,
            ReadyReason::BackendError,
            "boom".into(),
            Some(1),
            "t1",
        );
        assert_eq!(status.pushed.len(), 1);
        assert_eq!(status.pushed_hash.as_deref(), Some("old"));
        assert_eq!(ready_condition(&status).unwrap().reason, "BackendError");
    }
}
