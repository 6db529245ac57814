//! What the pusher must do for one Translation, decided without I/O.
//!
//! The input is the Translation's desired resources and the record of what was pushed
//! (`TranslationStatus::pushed`); the output is the ordered list of backend steps. Keeping
//! this pure makes the pusher's most important property — no backend request for what is
//! already pushed — checkable by plain unit tests. The same in-sync rule ([`in_sync`])
//! decides both whether a reconcile changes anything and what a resync queues
//! ([`needs_reconcile`]).

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use midonet_translators::meta::FINALIZER;
use midonet_translators::model::{Kind, ModelError, Resource};
use midonet_translators::TranslationResource;
use sha2::{Digest, Sha256};

use super::tracked::Missing;
use crate::crd::{PushedResource, Translation, TranslationStatus, BODY_HASH_HEX, SPEC_HASH_HEX};

/// Content hash of a Translation's resource list (what `status.pushedHash` records).
pub fn resources_hash(resources: &[TranslationResource]) -> String {
    let mut h = Sha256::new();
    for r in resources {
        for part in [&r.kind, &r.parent, &r.body] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    hex::encode(&h.finalize()[..SPEC_HASH_HEX / 2])
}

/// Hash of one resource's content, to notice a changed body for the same backend path.
pub fn body_hash(entry: &TranslationResource) -> String {
    let mut h = Sha256::new();
    h.update(entry.parent.as_bytes());
    h.update([0]);
    h.update(entry.body.as_bytes());
    hex::encode(&h.finalize()[..BODY_HASH_HEX / 2])
}

/// One desired resource, parsed.
#[derive(Clone, Debug)]
pub struct Desired {
    pub resource: Resource,
    pub path: String,
    pub body_hash: String,
}

impl Desired {
    /// Its entry in a status's pushed record, once pushed.
    pub fn record(&self) -> PushedResource {
        PushedResource {
            kind: self.resource.kind().name().to_string(),
            path: self.path.clone(),
            body_hash: self.body_hash.clone(),
        }
    }
}

/// Why a Translation cannot be pushed at all.
#[derive(Debug, thiserror::Error)]
pub enum InvalidTranslation {
    #[error("resource #{index} ({kind}): {source}")]
    Entry {
        index: usize,
        kind: String,
        #[source]
        source: ModelError,
    },
    #[error("resources #{first} and #{second} are the same backend resource {path}")]
    Duplicate {
        first: usize,
        second: usize,
        path: String,
    },
}

/// Parses every entry; the first bad one makes the whole Translation invalid.
pub fn parse_all(entries: &[TranslationResource]) -> Result<Vec<Desired>, InvalidTranslation> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let resource = Resource::from_entry(entry).map_err(|source| InvalidTranslation::Entry {
            index,
            kind: entry.kind.clone(),
            source,
        })?;
        let path = resource.item_path();
        if let Some(first) = seen.insert(path.clone(), index) {
            return Err(InvalidTranslation::Duplicate {
                first,
                second: index,
                path,
            });
        }
        out.push(Desired {
            resource,
            path,
            body_hash: body_hash(entry),
        });
    }
    Ok(out)
}

/// The step for one desired resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Already pushed with this content: no backend request.
    Unchanged,
    /// Not pushed yet: create (POST, with the client's conflict handling).
    Create,
    /// Pushed with other content and the kind supports PUT.
    Update,
    /// Pushed with other content but MidoNet cannot update this kind.
    ImmutableChanged,
    /// Not pushed yet, and held back: a host interface binding that waits for a version
    /// bump's cutover (see [`super::rollout`]).
    Withheld,
    /// A host interface binding the version bump's cutover created outside the reconcile
    /// (see [`super::cutover`]): recorded as pushed, without a request.
    CutOver,
}

/// The whole plan for applying a Translation.
#[derive(Debug)]
pub struct ApplyPlan {
    /// Desired resources in push order with their step.
    pub steps: Vec<(Desired, Step)>,
    /// Previously pushed resources no longer desired, in deletion order (reverse of creation).
    pub removals: Vec<PushedResource>,
}

impl ApplyPlan {
    /// The resources this plan creates, in push order.
    pub fn creates(&self) -> Vec<&Desired> {
        self.steps
            .iter()
            .filter(|(_, step)| *step == Step::Create)
            .map(|(d, _)| d)
            .collect()
    }

    /// Holds back the creation of these paths (see [`Step::Withheld`]).
    pub fn withhold(&mut self, paths: &HashSet<String>) {
        for (d, step) in &mut self.steps {
            if *step == Step::Create && paths.contains(&d.path) {
                *step = Step::Withheld;
            }
        }
    }

    /// Records these paths as created by the cutover (see [`Step::CutOver`]).
    pub fn cut_over(&mut self, paths: &HashSet<String>) {
        for (d, step) in &mut self.steps {
            if *step == Step::Create && paths.contains(&d.path) {
                *step = Step::CutOver;
            }
        }
    }

    /// Paths held back.
    pub fn withheld(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter(|(_, s)| *s == Step::Withheld)
            .map(|(d, _)| d.path.as_str())
            .collect()
    }

    pub fn backend_changes(&self) -> usize {
        self.steps
            .iter()
            .filter(|(_, s)| matches!(s, Step::Create | Step::Update | Step::CutOver))
            .count()
            + self.removals.len()
    }
}

pub fn plan_apply(desired: Vec<Desired>, pushed: &[PushedResource]) -> ApplyPlan {
    let by_path: HashMap<&str, &PushedResource> =
        pushed.iter().map(|p| (p.path.as_str(), p)).collect();
    let wanted: HashSet<String> = desired.iter().map(|d| d.path.clone()).collect();
    let steps = desired
        .into_iter()
        .map(|d| {
            let step = match by_path.get(d.path.as_str()) {
                None => Step::Create,
                Some(p) if p.body_hash == d.body_hash => Step::Unchanged,
                Some(_) if d.resource.kind().updatable() => Step::Update,
                Some(_) => Step::ImmutableChanged,
            };
            (d, step)
        })
        .collect();
    let removals = pushed
        .iter()
        .rev()
        .filter(|p| !wanted.contains(&p.path))
        .cloned()
        .collect();
    ApplyPlan { steps, removals }
}

/// What a reconcile of a live (not deleted) Translation does.
#[derive(Debug)]
pub enum ApplyDecision {
    /// The recorded push is of this spec and nothing went missing: no request at all.
    Unchanged,
    /// The spec cannot be pushed.
    Invalid(InvalidTranslation),
    /// Push `plan`. `settled` are paths marked missing that the spec no longer asks for:
    /// nothing is left to re-create for them.
    Push {
        plan: ApplyPlan,
        settled: Vec<String>,
    },
}

/// Whether the pusher's finalizer guards `tr` (its deletion waits for the backend's).
pub fn guarded(tr: &Translation) -> bool {
    tr.finalizers().iter().any(|f| f == FINALIZER)
}

/// Whether `tr` holds a rule in a chain it does not define itself: the jump of an
/// endpoint generation into its Service port's chain, a policy's rules in the shared
/// ALLOW and ISOLATE chains, a Service's jumps. Such a rule judges traffic other
/// Translations' rules are there for, and one at the head of its chain shadows what was
/// pushed there before it (an older endpoint generation whose jump was pushed after a
/// newer one's serves until it is deleted). Read from the spec, leniently: an entry that
/// does not parse holds nothing.
pub fn holds_rules_in_others_chains(tr: &Translation) -> bool {
    let desired = parse_lenient(tr.desired_resources());
    let own: HashSet<uuid::Uuid> = desired
        .iter()
        .filter_map(|d| match &d.resource {
            Resource::Chain(c) => Some(c.id),
            _ => None,
        })
        .collect();
    desired
        .iter()
        .any(|d| matches!(&d.resource, Resource::Rule(r) if !own.contains(&r.parent)))
}

/// Whether a live Translation whose spec hashes to `hash` (at `generation`) is pushed as
/// `before` records, nothing of it found missing: a reconcile of it changes nothing.
pub fn in_sync(
    hash: &str,
    before: &TranslationStatus,
    missing: &Missing,
    generation: Option<i64>,
) -> bool {
    missing.is_empty()
        && before.pushed_hash.as_deref() == Some(hash)
        && before.observed_generation == generation
}

/// Whether a reconcile of `tr` would do anything, given the status last recorded for it
/// and its pushed paths found missing: a deletion the finalizer guards, a Translation
/// without the finalizer (it gets it), or a live one not [`in_sync`] unless it only
/// [`awaits_cutover`]. What a full resync queues; the others would be reconciled to no
/// effect.
pub fn needs_reconcile(tr: &Translation, before: &TranslationStatus, missing: &Missing) -> bool {
    let guarded = guarded(tr);
    if tr.metadata.deletion_timestamp.is_some() {
        return guarded;
    }
    let generation = tr.metadata.generation;
    let hash = resources_hash(tr.desired_resources());
    !guarded
        || !(in_sync(&hash, before, missing, generation)
            || awaits_cutover(before, missing, generation))
}

/// Whether a Translation whose last recorded status is `before` has pushed all of its
/// spec's `generation` but the bindings a version bump's cutover moves, and lost none of
/// it since: until the cutover, a reconcile would withhold them again and change
/// nothing. The cutover wakes every such Translation itself (`super::rollout`), and one
/// whose binding's old holder goes is woken by the dependency index.
pub fn awaits_cutover(
    before: &TranslationStatus,
    missing: &Missing,
    generation: Option<i64>,
) -> bool {
    missing.is_empty()
        && generation.is_some()
        && super::status::ready_condition(before).is_some_and(|c| {
            c.reason == super::status::ReadyReason::AwaitingCutover.as_str()
                && c.observed_generation == generation
        })
}

/// Decides a reconcile of a live Translation from its spec (`entries`, whose hash is
/// `hash`), the status last recorded and the pushed paths found gone from the backend.
pub fn decide_apply(
    entries: &[TranslationResource],
    hash: &str,
    before: &TranslationStatus,
    missing: &Missing,
    generation: Option<i64>,
) -> ApplyDecision {
    if in_sync(hash, before, missing, generation) {
        return ApplyDecision::Unchanged;
    }
    let desired = match parse_all(entries) {
        Ok(desired) => desired,
        Err(err) => return ApplyDecision::Invalid(err),
    };
    // Resources found missing (drift verification, another Translation's cascade) are
    // created again.
    let pushed: Vec<PushedResource> = before
        .pushed
        .iter()
        .filter(|p| !missing.contains_key(&p.path))
        .cloned()
        .collect();
    let settled = missing
        .keys()
        .filter(|path| !desired.iter().any(|d| &d.path == *path))
        .cloned()
        .collect();
    ApplyDecision::Push {
        plan: plan_apply(desired, &pushed),
        settled,
    }
}

/// What deleting a Translation sends, and what it leaves to others.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeletePlan {
    /// DELETEs to send, in order (reverse creation order, load balancers first).
    pub requests: Vec<(Kind, String)>,
    /// Paths MidoNet's cascades delete along with one of `requests` or with another
    /// Translation's deletion: no request of their own.
    pub cascaded: Vec<String>,
    /// Paths another live Translation claims (the same backend resource under a new
    /// name): left in place, or the deletion would take what that one stands for.
    pub claimed: Vec<String>,
}

/// What to delete when a Translation goes away: everything recorded as pushed, plus any
/// desired resource not recorded (it may have been created just before a crash, before its
/// record was written), minus what another live Translation claims (`claimed`), minus what
/// MidoNet's cascades delete anyway: a resource goes with its parent or whatever else it is
/// deleted with ([`Resource::deleted_with`]) when that is deleted here too, or by another
/// Translation's deletion (`taken_elsewhere`, the IDs such deletions remove). A DELETE of
/// an absent resource is harmless, so the cascades are an economy, never a correctness
/// rule: anything the model cannot place (a record whose spec entry is gone, a cycle) is
/// deleted explicitly.
pub fn plan_delete(
    pushed: &[PushedResource],
    desired: &[Desired],
    taken_elsewhere: &HashSet<uuid::Uuid>,
    claimed: impl Fn(&str) -> bool,
) -> DeletePlan {
    let order = deletion_order(pushed, desired);
    let mut plan = DeletePlan::default();
    let (kept, removed): (Vec<_>, Vec<_>) = order.into_iter().partition(|(_, p)| claimed(p));
    plan.claimed = kept.into_iter().map(|(_, p)| p).collect();

    let by_path: HashMap<&str, &Resource> = desired
        .iter()
        .map(|d| (d.path.as_str(), &d.resource))
        .collect();
    let removed_ids: HashSet<uuid::Uuid> = removed
        .iter()
        .filter_map(|(_, p)| by_path.get(p.as_str())?.own_id())
        .collect();
    let goes_with = |path: &str, gone: &HashSet<uuid::Uuid>| {
        by_path.get(path).is_some_and(|r| {
            r.deleted_with()
                .iter()
                .any(|id| gone.contains(id) && r.own_id() != Some(*id))
        })
    };
    // A first guess: everything that goes with something removed. Then only what is
    // reachable from what is deleted explicitly (a cycle of resources each going with
    // the other would otherwise be deleted by nobody).
    let mut all_gone: HashSet<uuid::Uuid> = taken_elsewhere.clone();
    all_gone.extend(removed_ids.iter().copied());
    let guess: HashSet<&str> = removed
        .iter()
        .map(|(_, p)| p.as_str())
        .filter(|p| goes_with(p, &all_gone))
        .collect();
    let mut gone: HashSet<uuid::Uuid> = taken_elsewhere.clone();
    gone.extend(
        removed
            .iter()
            .filter(|(_, p)| !guess.contains(p.as_str()))
            .filter_map(|(_, p)| by_path.get(p.as_str())?.own_id()),
    );
    let mut cascaded: HashSet<&str> = HashSet::new();
    loop {
        let more: Vec<&str> = guess
            .iter()
            .copied()
            .filter(|p| !cascaded.contains(p) && goes_with(p, &gone))
            .collect();
        if more.is_empty() {
            break;
        }
        for p in more {
            cascaded.insert(p);
            gone.extend(by_path.get(p).and_then(|r| r.own_id()));
        }
    }
    for (kind, path) in &removed {
        if cascaded.contains(path.as_str()) {
            plan.cascaded.push(path.clone());
        } else {
            plan.requests.push((*kind, path.clone()));
        }
    }
    plan
}

/// Every resource of a Translation, recorded as pushed or desired, once each, in the
/// reverse of creation order, but its load balancers first.
fn deletion_order(pushed: &[PushedResource], desired: &[Desired]) -> Vec<(Kind, String)> {
    let mut order: Vec<(Kind, String)> = Vec::new();
    let mut seen = HashSet::new();
    for p in pushed {
        if let Some(kind) = Kind::from_name(&p.kind) {
            if seen.insert(p.path.clone()) {
                order.push((kind, p.path.clone()));
            }
        }
    }
    for d in desired {
        if seen.insert(d.path.clone()) {
            order.push((d.resource.kind(), d.path.clone()));
        }
    }
    order.reverse();
    // MidoNet refuses to delete a router that names a load balancer (the storage binding
    // `Router.load_balancer_id` is ERROR on the router's side) and clears that name when
    // the load balancer goes. The router names it, so it is pushed after it, and the
    // reverse order would try the router first: load balancers go first.
    order.sort_by_key(|(kind, _)| *kind != Kind::LoadBalancer);
    order
}

/// Parses what can be parsed, for deletion of a Translation whose spec may be broken.
pub fn parse_lenient(entries: &[TranslationResource]) -> Vec<Desired> {
    entries
        .iter()
        .filter_map(|e| {
            let resource = Resource::from_entry(e).ok()?;
            Some(Desired {
                path: resource.item_path(),
                body_hash: body_hash(e),
                resource,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resync_queues_only_what_a_reconcile_would_change() {
        use crate::crd::TranslationSpec;
        let spec = TranslationSpec {
            resources: vec![bridge("b")],
        };
        let mut tr = Translation::new("t", "ns", spec);
        tr.metadata.generation = Some(2);
        tr.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
        let pushed = TranslationStatus {
            pushed_hash: Some(resources_hash(tr.desired_resources())),
            observed_generation: Some(2),
            ..TranslationStatus::default()
        };
        let none = Missing::default();
        assert!(!needs_reconcile(&tr, &pushed, &none));
        // A generation not pushed yet, a spec pushed differently, a path gone missing.
        let older = TranslationStatus {
            observed_generation: Some(1),
            ..pushed.clone()
        };
        assert!(needs_reconcile(&tr, &older, &none));
        let other = TranslationStatus {
            pushed_hash: Some("0".into()),
            ..pushed.clone()
        };
        assert!(needs_reconcile(&tr, &other, &none));
        let mut missing = Missing::default();
        missing.insert("/bridges/x".into(), super::super::tracked::Cause::Drift);
        assert!(needs_reconcile(&tr, &pushed, &missing));
        // Without the finalizer: it gets it. Being deleted: only if the finalizer guards it.
        let mut bare = tr.clone();
        bare.metadata.finalizers = None;
        assert!(needs_reconcile(&bare, &pushed, &none));
        let stamp = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let mut deleting = tr.clone();
        deleting.metadata.deletion_timestamp = Some(stamp.clone());
        assert!(needs_reconcile(&deleting, &pushed, &none));
        bare.metadata.deletion_timestamp = Some(stamp);
        assert!(!needs_reconcile(&bare, &pushed, &none));

        // Pushed but for the bindings a bump's cutover moves: nothing to do until it
        // wakes it, unless its spec changed or a pushed path went missing since.
        let mut awaiting = TranslationStatus {
            pushed_hash: None,
            observed_generation: Some(2),
            ..pushed.clone()
        };
        super::super::status::set_ready(
            &mut awaiting,
            false,
            super::super::status::ReadyReason::AwaitingCutover,
            String::new(),
            Some(2),
            "2026-11-28T00:00:00Z",
        );
        assert!(!needs_reconcile(&tr, &awaiting, &none));
        assert!(needs_reconcile(&tr, &awaiting, &missing));
        let mut changed = tr.clone();
        changed.metadata.generation = Some(3);
        assert!(needs_reconcile(&changed, &awaiting, &none));
    }

    const BRIDGE: &str = "11111111-1111-4111-8111-111111111111";
    const PORT: &str = "22222222-2222-4222-8222-222222222222";
    const CHAIN: &str = "33333333-3333-4333-8333-333333333333";
    const RULE: &str = "44444444-4444-4444-8444-444444444444";

    fn bridge(name: &str) -> TranslationResource {
        TranslationResource::new(
            "Bridge",
            "",
            format!(r#"{{"id":"{BRIDGE}","name":"{name}","tenantId":"t"}}"#),
        )
    }
    fn port() -> TranslationResource {
        TranslationResource::new(
            "Port",
            BRIDGE,
            format!(r#"{{"id":"{PORT}","type":"Bridge"}}"#),
        )
    }
    fn chain() -> TranslationResource {
        TranslationResource::new(
            "Chain",
            "",
            format!(r#"{{"id":"{CHAIN}","name":"c","tenantId":"t"}}"#),
        )
    }
    fn rule(proto: u8) -> TranslationResource {
        TranslationResource::new(
            "Rule",
            CHAIN,
            format!(r#"{{"id":"{RULE}","type":"accept","nwProto":{proto}}}"#),
        )
    }
    fn pushed_of(entries: &[TranslationResource]) -> Vec<PushedResource> {
        parse_all(entries)
            .unwrap()
            .iter()
            .map(Desired::record)
            .collect()
    }

    #[test]
    fn a_rule_in_a_chain_of_its_own_is_not_held_in_anothers() {
        use crate::crd::TranslationSpec;
        let with = |resources| Translation::new("t", "ns", TranslationSpec { resources });
        assert!(!holds_rules_in_others_chains(&with(vec![chain(), rule(6)])));
        assert!(holds_rules_in_others_chains(&with(vec![rule(6)])));
        assert!(!holds_rules_in_others_chains(&with(vec![
            bridge("b"),
            port()
        ])));
        // What does not parse holds nothing.
        let broken = TranslationResource::new("Rule", CHAIN, "{".to_string());
        assert!(!holds_rules_in_others_chains(&with(vec![broken])));
    }

    #[test]
    fn endpoint_generations_hold_rules_in_others_chains_and_pods_do_not() {
        use crate::crd::TranslationSpec;
        use midonet_testkit::scenario::{Scale, Scenario};
        let s = Scenario::new("h", Scale::SMALL);
        let cfg = midonet_translators::TranslatorConfig::default();
        let built = |t: midonet_translators::DesiredTranslation| {
            let spec = TranslationSpec {
                resources: t.resources,
            };
            Translation::new(&t.name, &t.namespace, spec)
        };
        let mut service = s.service(0);
        if let Some(spec) = service.spec.as_mut() {
            spec.cluster_ip = Some(Scenario::cluster_ip(0).to_string());
        }
        let generations = midonet_translators::endpoints(&cfg, &s.endpoints(0), Some(&service));
        assert!(!generations.translations.is_empty());
        for t in generations.translations {
            assert!(holds_rules_in_others_chains(&built(t)));
        }
        let pod = midonet_translators::pod(&cfg, &s.pod(0), Some(&s.node(0)));
        assert!(!pod.translations.is_empty());
        for t in pod.translations {
            assert!(!holds_rules_in_others_chains(&built(t)));
        }
    }

    #[test]
    fn everything_new_is_created_in_order() {
        let plan = plan_apply(parse_all(&[bridge("a"), port()]).unwrap(), &[]);
        let steps: Vec<_> = plan
            .steps
            .iter()
            .map(|(d, s)| (d.path.clone(), s.clone()))
            .collect();
        assert_eq!(
            steps,
            vec![
                (format!("/bridges/{BRIDGE}"), Step::Create),
                (format!("/ports/{PORT}"), Step::Create)
            ]
        );
        assert!(plan.removals.is_empty());
    }

    #[test]
    fn pushed_resources_cost_nothing() {
        let entries = [bridge("a"), port()];
        let plan = plan_apply(parse_all(&entries).unwrap(), &pushed_of(&entries));
        assert_eq!(plan.backend_changes(), 0);
    }

    #[test]
    fn added_resource_is_the_only_change() {
        let plan = plan_apply(
            parse_all(&[bridge("a"), port()]).unwrap(),
            &pushed_of(&[bridge("a")]),
        );
        assert_eq!(plan.backend_changes(), 1);
        assert_eq!(plan.steps[1].1, Step::Create);
    }

    #[test]
    fn removed_resources_are_deleted_children_first() {
        let plan = plan_apply(
            parse_all(&[bridge("a")]).unwrap(),
            &pushed_of(&[bridge("a"), port(), chain()]),
        );
        let removed: Vec<_> = plan.removals.iter().map(|p| p.path.clone()).collect();
        assert_eq!(
            removed,
            vec![format!("/chains/{CHAIN}"), format!("/ports/{PORT}")]
        );
    }

    #[test]
    fn changed_bodies_update_or_are_refused() {
        let before = pushed_of(&[bridge("a"), chain(), rule(6)]);
        let plan = plan_apply(
            parse_all(&[bridge("b"), chain(), rule(17)]).unwrap(),
            &before,
        );
        let steps: Vec<_> = plan.steps.iter().map(|(_, s)| s.clone()).collect();
        assert_eq!(
            steps,
            vec![Step::Update, Step::Unchanged, Step::ImmutableChanged]
        );
    }

    #[test]
    fn invalid_entries_are_rejected_with_their_index() {
        let bad = TranslationResource::new("Bridge", "", "{not json");
        let err = parse_all(&[bridge("a"), bad]).unwrap_err();
        assert!(err.to_string().contains("#1"), "{err}");
        let dup = parse_all(&[bridge("a"), bridge("b")]).unwrap_err();
        assert!(matches!(dup, InvalidTranslation::Duplicate { .. }));
        assert!(parse_all(&[TranslationResource::new("Router2", "", "{}")]).is_err());
    }

    fn requests(plan: &DeletePlan) -> Vec<&str> {
        plan.requests.iter().map(|(_, p)| p.as_str()).collect()
    }

    #[test]
    fn deletion_covers_recorded_and_unrecorded_and_leaves_cascades_to_midonet() {
        // The port was created but not recorded yet; MidoNet deletes it with its bridge.
        let pushed = pushed_of(&[bridge("a")]);
        let desired =
            parse_lenient(&[bridge("a"), port(), TranslationResource::new("X", "", "{}")]);
        let plan = plan_delete(&pushed, &desired, &HashSet::new(), |_| false);
        let bridge_path = format!("/bridges/{BRIDGE}");
        assert_eq!(requests(&plan), vec![bridge_path.as_str()]);
        assert_eq!(plan.cascaded, vec![format!("/ports/{PORT}")]);
    }

    #[test]
    fn a_chain_takes_its_rules() {
        let entries = [chain(), rule(6)];
        let plan = plan_delete(
            &pushed_of(&entries),
            &parse_all(&entries).unwrap(),
            &HashSet::new(),
            |_| false,
        );
        assert_eq!(requests(&plan), vec![format!("/chains/{CHAIN}").as_str()]);
        assert_eq!(plan.cascaded, vec![format!("/rules/{RULE}")]);
    }

    #[test]
    fn what_another_deletion_takes_needs_no_request() {
        let entries = [port()];
        let gone = HashSet::from([BRIDGE.parse().unwrap()]);
        let plan = plan_delete(
            &pushed_of(&entries),
            &parse_all(&entries).unwrap(),
            &gone,
            |_| false,
        );
        assert!(plan.requests.is_empty(), "{plan:?}");
        // Without it, the port is deleted like any other resource.
        let plan = plan_delete(
            &pushed_of(&entries),
            &parse_all(&entries).unwrap(),
            &HashSet::new(),
            |_| false,
        );
        assert_eq!(requests(&plan), vec![format!("/ports/{PORT}").as_str()]);
    }

    #[test]
    fn a_load_balancer_goes_before_the_router_that_names_it() {
        const LB: &str = "55555555-5555-4555-8555-555555555555";
        const ROUTER: &str = "66666666-6666-4666-8666-666666666666";
        let entries = [
            TranslationResource::new("LoadBalancer", "", format!(r#"{{"id":"{LB}"}}"#)),
            TranslationResource::new(
                "Router",
                "",
                format!(r#"{{"id":"{ROUTER}","name":"r","loadBalancerId":"{LB}"}}"#),
            ),
            chain(),
        ];
        let plan = plan_delete(
            &pushed_of(&entries),
            &parse_all(&entries).unwrap(),
            &HashSet::new(),
            |_| false,
        );
        let (lb, router, chain) = (
            format!("/load_balancers/{LB}"),
            format!("/routers/{ROUTER}"),
            format!("/chains/{CHAIN}"),
        );
        assert_eq!(
            requests(&plan),
            vec![lb.as_str(), chain.as_str(), router.as_str()]
        );
    }

    #[test]
    fn a_claimed_resource_stays_and_its_children_are_deleted() {
        let entries = [bridge("a"), port()];
        let bridge_path = format!("/bridges/{BRIDGE}");
        let plan = plan_delete(
            &pushed_of(&entries),
            &parse_all(&entries).unwrap(),
            &HashSet::new(),
            |p| p == bridge_path,
        );
        assert_eq!(plan.claimed, vec![bridge_path.clone()]);
        assert_eq!(requests(&plan), vec![format!("/ports/{PORT}").as_str()]);
    }

    #[test]
    fn a_record_without_its_entry_is_deleted_explicitly() {
        // The spec lost the port; only the record says it exists.
        let pushed = pushed_of(&[bridge("a"), port()]);
        let desired = parse_all(&[bridge("a")]).unwrap();
        let plan = plan_delete(&pushed, &desired, &HashSet::new(), |_| false);
        let (port_path, bridge_path) = (format!("/ports/{PORT}"), format!("/bridges/{BRIDGE}"));
        assert_eq!(
            requests(&plan),
            vec![port_path.as_str(), bridge_path.as_str()]
        );
    }

    fn status_of(entries: &[TranslationResource], generation: i64) -> TranslationStatus {
        TranslationStatus {
            pushed: pushed_of(entries),
            pushed_hash: Some(resources_hash(entries)),
            observed_generation: Some(generation),
            ..TranslationStatus::default()
        }
    }

    #[test]
    fn a_recorded_push_of_this_spec_is_unchanged() {
        let entries = [bridge("a"), port()];
        let hash = resources_hash(&entries);
        let before = status_of(&entries, 2);
        let decision = decide_apply(&entries, &hash, &before, &Missing::new(), Some(2));
        assert!(matches!(decision, ApplyDecision::Unchanged));
        // A new generation with the same resources is pushed (at no backend cost), so the
        // status says which generation it is for.
        let decision = decide_apply(&entries, &hash, &before, &Missing::new(), Some(3));
        let ApplyDecision::Push { plan, .. } = decision else {
            panic!("expected a push");
        };
        assert_eq!(plan.backend_changes(), 0);
    }

    #[test]
    fn missing_resources_are_created_again_and_stale_marks_settled() {
        use crate::pusher::tracked::Cause;
        let entries = [bridge("a"), port()];
        let hash = resources_hash(&entries);
        let before = status_of(&entries, 1);
        let missing = Missing::from([
            (format!("/ports/{PORT}"), Cause::Drift),
            (format!("/chains/{CHAIN}"), Cause::Cascade),
        ]);
        let ApplyDecision::Push { plan, settled } =
            decide_apply(&entries, &hash, &before, &missing, Some(1))
        else {
            panic!("expected a push");
        };
        let creates: Vec<&str> = plan.creates().iter().map(|d| d.path.as_str()).collect();
        assert_eq!(creates, [format!("/ports/{PORT}")]);
        assert_eq!(settled, [format!("/chains/{CHAIN}")]);
    }

    #[test]
    fn an_unparsable_spec_is_invalid() {
        let entries = [TranslationResource::new("Bridge", "", "{")];
        let decision = decide_apply(
            &entries,
            &resources_hash(&entries),
            &TranslationStatus::default(),
            &Missing::new(),
            Some(1),
        );
        assert!(matches!(decision, ApplyDecision::Invalid(_)));
    }

    #[test]
    fn hashes_are_stable_and_content_sensitive() {
        assert_eq!(
            resources_hash(&[bridge("a")]),
            resources_hash(&[bridge("a")])
        );
        assert_ne!(
            resources_hash(&[bridge("a")]),
            resources_hash(&[bridge("b")])
        );
        assert_ne!(
            resources_hash(&[bridge("a"), port()]),
            resources_hash(&[port(), bridge("a")])
        );
    }
}
