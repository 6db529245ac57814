//! A Translation version bump, blue/green.
//!
//! A bump names and IDs everything anew, so the new version's topology can be built beside
//! the old one while the old one carries the traffic. What cannot coexist is a host
//! interface's binding: MidoNet binds an interface to one port at a time. The bump
//! therefore goes through these phases, derived from the Translations alone (so a restart
//! in any phase picks up where it was):
//!
//! 1. [`Phase::Building`]: the translators write the new version's Translations; the pusher
//!    pushes them *except* a binding whose interface an older version's Translation binds
//!    (that Translation is `Ready=False`, reason `AwaitingCutover`). Nothing of the old
//!    version is deleted.
//! 2. [`Phase::CuttingOver`]: every new-version Translation is pushed (Ready, awaiting the
//!    cutover, or invalid). Each withheld binding now replaces the old one: delete the old
//!    binding, create the new one, a request apart; by default host by host over a link
//!    between the two versions ([`super::link`], [`super::cutover`]).
//! 3. [`Phase::Retiring`]: every new-version Translation is Ready. The link's Translation
//!    goes first (and until it is gone, nothing else), so that its deletion finds both
//!    of its ports; then the old version's Translations are deleted; their deletion sends
//!    only the DELETEs MidoNet's cascades do not already do (see
//!    [`super::steps::plan_delete`]).
//!
//! Once reached, the cutover is not undone by a Translation that appears later (a pod
//! created meanwhile): its binding conflicts with nobody's. Bumping back to the previous
//! version (a rollback) is the same procedure with the roles swapped.
//!
//! The original Go controller's Translations are an old version too
//! ([`crate::crd::ORIGINAL_VERSION`], see [`Translation::version`]): a migration from it is
//! a bump. It recorded no status; what they list the pusher takes as pushed (see
//! `PusherContext::recorded_status`), so they cost no request until they are retired.
//!
//! The phase is decided here by pure functions ([`assess`] over a [`Census`] the informer
//! keeps up to date). The driver, `rollout_loop`, is the I/O half, one background loop of
//! the pusher: each tick it assesses the phase, reports it (metrics; a log line and an
//! Event on entering it), runs the cutover's batch ([`super::cutover`]) and deletes the old
//! Translations, parents first, with [`crate::crd::delete_translation`] (a same-named
//! successor is never deleted).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use midonet_translators::meta::{GLOBAL_LABEL, OWNER_UID_LABEL};
use uuid::Uuid;

use super::status::{ready_condition, ReadyReason};
use super::{cutover, PusherContext, PusherWorkers};
use crate::crd::{Translation, TranslationKey};
use crate::events::reason;

/// Where a bump stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Only the configured version's Translations exist.
    #[default]
    Steady,
    /// The new version is being pushed beside the old one.
    Building,
    /// The bindings move from the old version's ports to the new one's.
    CuttingOver,
    /// The old version is being deleted.
    Retiring,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Steady,
        Phase::Building,
        Phase::CuttingOver,
        Phase::Retiring,
    ];

    /// As in metrics, events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Steady => "steady",
            Phase::Building => "building",
            Phase::CuttingOver => "cutting_over",
            Phase::Retiring => "retiring",
        }
    }

    /// True when a withheld binding may replace the old version's.
    pub fn cut_over(self) -> bool {
        self >= Phase::CuttingOver
    }
}

/// How far one Translation has got, as far as the bump is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settled {
    /// Ready for its current spec.
    Ready,
    /// Pushed but for a binding that waits for the cutover.
    AwaitingCutover,
    /// Its spec cannot be pushed at all: waiting for it would wait forever.
    Invalid,
    /// Not pushed yet, or failing for now.
    No,
}

/// What the bump needs to know of one Translation. The census holds one per Translation,
/// so it is kept small: the version shared by every member of that version, the owner's
/// UID as a number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// `None`: no version label (written by hand, or by the original controller).
    pub version: Option<Arc<str>>,
    /// The object it was translated from ([`owner_of`]), `None` for others.
    pub owner: Option<Owner>,
    pub deleting: bool,
    pub settled: Settled,
}

/// [`owner_of`] as the census keeps it: a UID (what the owner-uid label holds) as a number
/// rather than its text; anything else (`global`, a hand-written label) as it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Uid(Uuid),
    Other(Arc<str>),
}

impl From<&str> for Owner {
    fn from(owner: &str) -> Owner {
        // Only the hyphenated form, the one Kubernetes writes: each label maps to one Owner.
        match Uuid::try_parse(owner) {
            Ok(uid) if owner.len() == 36 => Owner::Uid(uid),
            _ => Owner::Other(owner.into()),
        }
    }
}

/// What a bump keeps the same from version to version: the object a Translation stands for
/// (its owner-uid label, or `global` for the global Translations), `None` for others.
pub fn owner_of(tr: &Translation) -> Option<String> {
    tr.label(OWNER_UID_LABEL)
        .map(str::to_string)
        .or_else(|| tr.has_label(GLOBAL_LABEL).then(|| "global".to_string()))
}

/// The object a Translation stands for, as the census counts owners: [`owner_of`], but a
/// Service's and its Endpoints' Translations stand for one object, the Service, by
/// namespace and name. The translators own a Service's endpoints Translations either by
/// the Endpoints (the Endpoints controller) or by the Service (EndpointSlices, the Service
/// controller); the original controller's are the Endpoints', so a migration to
/// EndpointSlices would otherwise count their owner as never translated.
fn census_owner(tr: &Translation) -> Option<Owner> {
    match tr.owner_references().first() {
        Some(o) if o.kind == "Service" || o.kind == "Endpoints" => {
            // A namespaced owner: a Translation without a namespace stands for nothing.
            let namespace = tr.metadata.namespace.as_deref()?;
            Some(Owner::Other(
                format!("Service {namespace}/{}", o.name).into(),
            ))
        }
        _ => owner_of(tr).as_deref().map(Owner::from),
    }
}

impl Member {
    pub fn of(tr: &Translation) -> Member {
        let settled = if tr.is_ready() {
            Settled::Ready
        } else {
            match tr
                .status
                .as_ref()
                .and_then(ready_condition)
                .filter(|c| {
                    c.observed_generation.is_none()
                        || c.observed_generation == tr.metadata.generation
                })
                .map(|c| c.reason.as_str())
            {
                Some(r) if r == ReadyReason::AwaitingCutover.as_str() => Settled::AwaitingCutover,
                Some(r) if r == ReadyReason::InvalidTranslation.as_str() => Settled::Invalid,
                _ => Settled::No,
            }
        };
        Member {
            version: tr.version().map(Arc::from),
            owner: census_owner(tr),
            deleting: tr.metadata.deletion_timestamp.is_some(),
            settled,
        }
    }
}

/// Counts of Translations by what the bump needs to know of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    counts: HashMap<(Option<Arc<str>>, bool, Settled), usize>,
    /// Live (not deleting) Translations by owner and version.
    owners: HashMap<(Owner, Arc<str>), usize>,
}

fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
    if let Some(n) = map.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

impl Census {
    pub fn add(&mut self, m: &Member) {
        *self
            .counts
            .entry((m.version.clone(), m.deleting, m.settled))
            .or_default() += 1;
        if let (Some(owner), Some(version), false) = (&m.owner, &m.version, m.deleting) {
            *self
                .owners
                .entry((owner.clone(), version.clone()))
                .or_default() += 1;
        }
    }

    pub fn remove(&mut self, m: &Member) {
        decrement(&mut self.counts, (m.version.clone(), m.deleting, m.settled));
        if let (Some(owner), Some(version), false) = (&m.owner, &m.version, m.deleting) {
            decrement(&mut self.owners, (owner.clone(), version.clone()));
        }
    }

    /// Owners with a live Translation of another version but none of `current`: the
    /// translators have not written their new Translations yet.
    fn owners_not_translated(&self, current: &str) -> usize {
        let translated: HashSet<&Owner> = self
            .owners
            .keys()
            .filter(|(_, v)| &**v == current)
            .map(|(o, _)| o)
            .collect();
        let waiting: HashSet<&Owner> = self
            .owners
            .keys()
            .filter(|(o, v)| &**v != current && !translated.contains(o))
            .map(|(o, _)| o)
            .collect();
        waiting.len()
    }
}

/// A bump's progress: the phase and the counts behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub phase: Phase,
    /// Versions other than the configured one that still have Translations.
    pub old_versions: BTreeSet<String>,
    /// The configured version's Translations, and how many are not pushed yet.
    pub new_total: usize,
    pub new_unsettled: usize,
    /// The configured version's Translations whose binding waits for the cutover.
    pub awaiting_cutover: usize,
    /// The old versions' Translations, and how many are being deleted.
    pub old_total: usize,
    pub old_deleting: usize,
    /// Objects with old Translations and no new one yet (see [`Census`]).
    pub owners_not_translated: usize,
}

/// Decides the phase from the census. `reached` is the phase reached before in this bump:
/// the cutover, once begun, is not taken back.
pub fn assess(current: &str, census: &Census, reached: Phase) -> Progress {
    let mut p = Progress {
        phase: Phase::Steady,
        old_versions: BTreeSet::new(),
        new_total: 0,
        new_unsettled: 0,
        awaiting_cutover: 0,
        old_total: 0,
        old_deleting: 0,
        owners_not_translated: census.owners_not_translated(current),
    };
    for ((version, deleting, settled), n) in &census.counts {
        let n = *n;
        match version.as_deref() {
            // Unlabelled Translations belong to no version's topology.
            None => {}
            Some(v) if v == current => {
                if *deleting {
                    continue;
                }
                p.new_total += n;
                match settled {
                    Settled::No => p.new_unsettled += n,
                    Settled::AwaitingCutover => p.awaiting_cutover += n,
                    Settled::Ready | Settled::Invalid => {}
                }
            }
            Some(v) => {
                p.old_versions.insert(v.to_string());
                p.old_total += n;
                if *deleting {
                    p.old_deleting += n;
                }
            }
        }
    }
    // Complete: every object with old Translations has new ones (the translators got to
    // it: right after a restart they may not have yet), and those are pushed.
    let built = p.new_unsettled == 0 && p.owners_not_translated == 0;
    p.phase = if p.old_total == 0 {
        Phase::Steady
    } else if p.awaiting_cutover == 0 && built {
        Phase::Retiring
    } else if built || reached.cut_over() {
        Phase::CuttingOver
    } else {
        Phase::Building
    };
    if p.old_total > 0 && reached == Phase::Retiring {
        // Deleting has begun: a Translation written meanwhile does not stop it.
        p.phase = Phase::Retiring;
    }
    p
}

/// The bump's state over the process's Translation informer.
pub struct Rollout {
    current: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    members: HashMap<MemberKey, Member>,
    census: Census,
    relisted: Vec<(MemberKey, Member)>,
    reached: Phase,
    /// Every version label seen, one allocation each, shared by the members.
    versions: HashSet<Arc<str>>,
}

/// A member's key: its Translation's UID, as a number (a Translation deleted and written
/// again under the same name is another object, and another member); its namespace and
/// name when it has no UID (never from the apiserver).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum MemberKey {
    Uid(Uuid),
    Name(TranslationKey),
}

/// `tr`'s key; `None` for the link between two versions, which the census leaves out, and
/// (logged) for a Translation with neither a UID nor a namespace and name, which no
/// apiserver sends: the census cannot tell it from another.
fn member_key(tr: &Translation) -> Option<MemberKey> {
    // The link between two versions is the bump's own: it never holds a phase back (its
    // old end may be gone, with a wiped backend) and goes when the bump retires.
    if tr.has_label(super::link::LINK_LABEL) {
        return None;
    }
    let key = match tr.metadata.uid.as_deref().map(Uuid::try_parse) {
        Some(Ok(uid)) => Some(MemberKey::Uid(uid)),
        _ => tr.key().map(MemberKey::Name),
    };
    if key.is_none() {
        tracing::error!(translation = ?tr.metadata.name, namespace = ?tr.metadata.namespace, "a Translation without a UID, namespace or name; left out of the version bump's census");
    }
    key
}

impl Rollout {
    pub fn new(current: impl Into<String>) -> Rollout {
        Rollout {
            current: current.into(),
            state: Mutex::default(),
        }
    }

    /// The configured Translation version.
    pub fn current(&self) -> &str {
        &self.current
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    /// Follows the shared Translation informer.
    pub fn observe(&self, event: &watcher::Event<Translation>) {
        let mut state = self.lock();
        match event {
            watcher::Event::Apply(tr) => {
                if let Some(key) = member_key(tr) {
                    let member = state.shared(Member::of(tr));
                    state.set(key, member)
                }
            }
            watcher::Event::Delete(tr) => {
                if let Some(key) = member_key(tr) {
                    state.unset(&key)
                }
            }
            watcher::Event::Init => state.relisted.clear(),
            watcher::Event::InitApply(tr) => {
                if let Some(key) = member_key(tr) {
                    let member = state.shared(Member::of(tr));
                    state.relisted.push((key, member))
                }
            }
            watcher::Event::InitDone => {
                let relisted = std::mem::take(&mut state.relisted);
                state.members.clear();
                state.census = Census::default();
                for (key, member) in relisted {
                    state.set(key, member);
                }
            }
        }
    }

    /// Assesses the progress now and remembers the phase reached. The rollout loop calls
    /// it on every tick; the reconciles read the phase it reached (see [`Self::phase`]).
    pub fn assess(&self) -> Progress {
        let mut state = self.lock();
        let p = assess(&self.current, &state.census, state.reached);
        state.reached = p.phase;
        p
    }

    /// The phase the last [`Self::assess`] reached: a reconcile asks once per binding, and
    /// a census over every owner is the loop's work, not each reconcile's. Before the first
    /// assessment it is [`Phase::Steady`], which withholds nothing and cuts nothing over.
    pub fn phase(&self) -> Phase {
        self.lock().reached
    }

    /// Whether `tr` belongs to a version other than the configured one (the original
    /// controller's Translations included, see [`Translation::version`]).
    pub fn is_old(&self, tr: &Translation) -> bool {
        tr.version().is_some_and(|v| v != self.current)
    }
}

impl State {
    /// `member` with its version the one already kept, if any.
    fn shared(&mut self, mut member: Member) -> Member {
        if let Some(v) = &mut member.version {
            match self.versions.get(v) {
                Some(kept) => *v = kept.clone(),
                None => {
                    self.versions.insert(v.clone());
                }
            }
        }
        member
    }

    fn set(&mut self, key: MemberKey, member: Member) {
        self.unset(&key);
        self.census.add(&member);
        self.members.insert(key, member);
    }

    fn unset(&mut self, key: &MemberKey) {
        if let Some(old) = self.members.remove(key) {
            self.census.remove(&old);
        }
    }
}

/// The old versions' Translations by version, for logs.
pub fn describe(p: &Progress) -> String {
    let old: Vec<&str> = p.old_versions.iter().map(String::as_str).collect();
    format!(
        "phase {}: new version {} of {} pushed, {} awaiting the cutover, {} objects not translated yet; old version(s) {:?}: {} Translations, {} being deleted",
        p.phase.as_str(),
        p.new_total - p.new_unsettled - p.awaiting_cutover,
        p.new_total,
        p.awaiting_cutover,
        p.owners_not_translated,
        old,
        p.old_total,
        p.old_deleting
    )
}

/// Progress counts for the metric, by what they count.
pub fn counts(p: &Progress) -> BTreeMap<&'static str, usize> {
    BTreeMap::from([
        ("new_total", p.new_total),
        ("new_unsettled", p.new_unsettled),
        ("awaiting_cutover", p.awaiting_cutover),
        ("old_total", p.old_total),
        ("old_deleting", p.old_deleting),
        ("owners_not_translated", p.owners_not_translated),
    ])
}

// The driver: the I/O half of a bump, run by the pusher as one background loop.

/// How often the bump's phase is assessed.
const ROLLOUT_TICK: Duration = Duration::from_millis(500);

/// Drives a version bump: reports each phase (log line, Event on the configured version's
/// global Translations, metrics), moves the bindings awaiting the cutover once it begins,
/// and deletes the old versions' Translations once it is over.
/// `workers` are the pusher's reconciles', which the cutover pauses (see [`cutover`]).
pub(super) async fn rollout_loop(
    store: Store<Translation>,
    ctx: Arc<PusherContext>,
    workers: Option<Arc<PusherWorkers>>,
) {
    let mut last = Phase::Steady;
    // The UIDs of old Translations already asked to be deleted in this phase.
    let mut retired: HashSet<String> = HashSet::new();
    // What a linked cutover did in this phase.
    let mut linked = cutover::LinkState::default();
    let mut ticks = 0u64;
    loop {
        tokio::time::sleep(ROLLOUT_TICK).await;
        ticks += 1;
        let progress = ctx.rollout.assess();
        let phase = progress.phase;
        let entered = phase != last;
        report(&store, &ctx, &progress, entered).await;
        if entered {
            last = phase;
            retired.clear();
            linked = cutover::LinkState::default();
        }
        match phase {
            // A wake lost to a restart of the queue costs a few ticks, not the bump.
            Phase::CuttingOver => {
                let wake_all = entered || ticks % 10 == 0;
                cut_over(&store, &ctx, workers.as_ref(), wake_all, &mut linked).await
            }
            Phase::Retiring if cut_back(&store, &ctx) == 0 => {
                unlink_then_retire(&store, &ctx, &mut retired).await
            }
            // A link left by a pusher that stopped while retiring.
            Phase::Steady if entered || ticks % 20 == 0 => {
                unlink(&store, &ctx, &mut retired).await;
            }
            _ => {}
        }
    }
}

/// The event reason of entering `phase`.
fn phase_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Building => reason::VERSION_BUMP_BUILDING,
        Phase::CuttingOver => reason::VERSION_BUMP_CUTTING_OVER,
        Phase::Retiring => reason::VERSION_BUMP_RETIRING,
        Phase::Steady => reason::VERSION_BUMP_COMPLETE,
    }
}

/// Sets the bump's metrics; on a phase just `entered`, logs it and publishes its event.
async fn report(
    store: &Store<Translation>,
    ctx: &PusherContext,
    progress: &Progress,
    entered: bool,
) {
    let phase = progress.phase;
    for p in Phase::ALL {
        ctx.metrics
            .rollout_phase
            .with_label_values(&[p.as_str()])
            .set(i64::from(p == phase));
    }
    for (what, n) in counts(progress) {
        ctx.metrics
            .rollout_translations
            .with_label_values(&[what])
            .set(n as i64);
    }
    if !entered {
        return;
    }
    let message = describe(progress);
    tracing::info!(phase = phase.as_str(), progress = %message, "Translation version bump");
    let global = store
        .state()
        .into_iter()
        .find(|t| t.has_label(GLOBAL_LABEL) && !ctx.rollout.is_old(t));
    if let Some(global) = global {
        use kube::Resource;
        ctx.events
            .normal(&global.object_ref(&()), phase_reason(phase), message)
            .await;
    }
}

/// Moves the bindings of the current Translations awaiting the cutover in one batch;
/// their Translations record it afterwards. With `wake_all`, also wakes every one awaiting
/// it (a binding whose old holder is gone is simply created by its push).
async fn cut_over(
    store: &Store<Translation>,
    ctx: &Arc<PusherContext>,
    workers: Option<&Arc<PusherWorkers>>,
    wake_all: bool,
    linked: &mut cutover::LinkState,
) {
    let awaiting: Vec<Arc<Translation>> = store
        .state()
        .into_iter()
        .filter(|t| !ctx.rollout.is_old(t) && Member::of(t).settled == Settled::AwaitingCutover)
        .collect();
    let moved = cutover::cut_over_all(&awaiting, ctx, workers, linked).await;
    ctx.wake(moved);
    if wake_all {
        ctx.wake(awaiting.iter().map(|t| ObjectRef::from_obj(&**t)));
    }
}

/// Before the old versions go: an interface an old Translation still holds (it took the
/// binding in a bump to its version that was then given up, a rollback) while a current
/// Translation binds it too is taken back by the current one first, or deleting the old
/// port would leave the pod unplugged until the current binding is pushed again. Marks
/// those current bindings missing (their push deletes the old binding and creates theirs)
/// and answers how many interfaces are still held.
fn cut_back(store: &Store<Translation>, ctx: &Arc<PusherContext>) -> usize {
    let mut held = 0;
    for old in store.state() {
        if !ctx.rollout.is_old(&old) || old.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = ObjectRef::from_obj(&*old);
        let pushed = ctx.recorded_status(&old).pushed;
        for interface in ctx.deps.interfaces_of(&key) {
            let binders = ctx.deps.binders(&interface);
            let holds = binders
                .iter()
                .any(|(k, path)| *k == key && pushed.iter().any(|p| &p.path == path));
            if !holds {
                continue;
            }
            let current: Vec<(ObjectRef<Translation>, String)> = binders
                .into_iter()
                .filter(|(k, _)| store.get(k).is_some_and(|t| !ctx.rollout.is_old(&t)))
                .collect();
            if current.is_empty() {
                continue;
            }
            held += 1;
            for (k, path) in current {
                ctx.repush_binding(k, path);
            }
        }
    }
    held
}

/// Deletes the link between the versions first, so that its deletion finds both its ends,
/// then the old versions' Translations.
async fn unlink_then_retire(
    store: &Store<Translation>,
    ctx: &PusherContext,
    asked: &mut HashSet<String>,
) {
    if !unlink(store, ctx, asked).await {
        retire(store, ctx, asked).await
    }
}

/// Once every binding has moved: deletes the link between the versions' cluster routers,
/// if a linked cutover made one ([`super::link`]); answers whether one is left. `asked`
/// holds the UIDs already asked to be deleted.
async fn unlink(
    store: &Store<Translation>,
    ctx: &PusherContext,
    asked: &mut HashSet<String>,
) -> bool {
    let links: Vec<Arc<Translation>> = store
        .state()
        .into_iter()
        .filter(|t| t.has_label(super::link::LINK_LABEL))
        .collect();
    let left = !links.is_empty();
    let undeleted: Vec<Arc<Translation>> = links
        .into_iter()
        .filter(|t| {
            t.metadata.deletion_timestamp.is_none() && t.uid().is_some_and(|u| !asked.contains(&u))
        })
        .collect();
    delete_all(undeleted, ctx, asked).await;
    left
}

/// Deletes the old versions' Translations, parents first: a Translation once none of the
/// old Translations it builds on is left undeleted (global, then Node, then Pod, then its
/// MAC and ARP entries), so that each deletion finds its parents going and leaves their
/// children to MidoNet's cascades (a cycle, which nothing produces, is deleted at once).
/// `asked` holds the UIDs already asked to be deleted in this phase.
async fn retire(store: &Store<Translation>, ctx: &PusherContext, asked: &mut HashSet<String>) {
    let batch = retiring_batch(store, ctx, asked);
    delete_all(batch, ctx, asked).await;
}

/// Deletes `batch`, the Translations of a bump that is over; adds the UIDs asked to be
/// deleted to `asked`.
async fn delete_all(
    batch: Vec<Arc<Translation>>,
    ctx: &PusherContext,
    asked: &mut HashSet<String>,
) {
    let deletes = batch.into_iter().map(|t| async move {
        let (Some((namespace, name)), Some(uid)) = (t.key(), t.uid()) else {
            tracing::error!(translation = ?t.metadata.name, namespace = ?t.metadata.namespace, "a bump's Translation without a namespace, name or UID cannot be deleted");
            return None;
        };
        // Deleted or replaced meanwhile (404, 409): done all the same.
        match crate::crd::delete_translation(&ctx.kube, &namespace, &name, &uid, None).await {
            Ok(_) => Some(uid),
            Err(err) => {
                tracing::warn!(translation = %name, namespace = %namespace, error = %err, "cannot delete a finished bump's Translation; retrying");
                None
            }
        }
    });
    let done: Vec<Option<String>> = futures::stream::iter(deletes)
        .buffer_unordered(16)
        .collect()
        .await;
    asked.extend(done.into_iter().flatten());
}

/// The old Translations [`retire`] deletes now: those none of whose old providers is left
/// undeleted, or all of them if that is none (a cycle).
fn retiring_batch(
    store: &Store<Translation>,
    ctx: &PusherContext,
    asked: &HashSet<String>,
) -> Vec<Arc<Translation>> {
    let undeleted = |t: &Translation| {
        ctx.rollout.is_old(t)
            && t.metadata.deletion_timestamp.is_none()
            && t.uid().is_some_and(|u| !asked.contains(&u))
    };
    let old: Vec<Arc<Translation>> = store.state().into_iter().filter(|t| undeleted(t)).collect();
    let batch: Vec<Arc<Translation>> = old
        .iter()
        .filter(|t| {
            ctx.deps
                .providers_of(&ObjectRef::from_obj(&***t))
                .iter()
                .all(|p| store.get(p).is_none_or(|p| !undeleted(&p)))
        })
        .cloned()
        .collect();
    if batch.is_empty() {
        old
    } else {
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ORIGINAL_VERSION;
    use midonet_translators::meta::VERSION_LABEL;

    fn census(members: &[(Option<&str>, bool, Settled, usize)]) -> Census {
        let mut c = Census::default();
        for (version, deleting, settled, n) in members {
            for _ in 0..*n {
                c.add(&Member {
                    version: version.map(Arc::from),
                    owner: None,
                    deleting: *deleting,
                    settled: *settled,
                });
            }
        }
        c
    }

    #[test]
    fn only_the_configured_version_is_steady() {
        let c = census(&[
            (Some("2"), false, Settled::Ready, 3),
            (None, false, Settled::No, 1),
        ]);
        assert_eq!(assess("2", &c, Phase::Steady).phase, Phase::Steady);
    }

    #[test]
    fn a_bump_builds_until_every_new_translation_is_pushed() {
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("2"), false, Settled::AwaitingCutover, 2),
            (Some("2"), false, Settled::No, 1),
        ]);
        let p = assess("2", &c, Phase::Steady);
        assert_eq!(p.phase, Phase::Building);
        assert_eq!(
            (p.new_total, p.new_unsettled, p.awaiting_cutover),
            (3, 1, 2)
        );
        assert_eq!(p.old_versions, BTreeSet::from(["1".to_string()]));
    }

    #[test]
    fn an_invalid_translation_does_not_hold_the_bump_back() {
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("2"), false, Settled::AwaitingCutover, 2),
            (Some("2"), false, Settled::Invalid, 1),
        ]);
        assert_eq!(assess("2", &c, Phase::Building).phase, Phase::CuttingOver);
    }

    #[test]
    fn the_cutover_is_not_taken_back_by_a_new_translation() {
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("2"), false, Settled::AwaitingCutover, 2),
            (Some("2"), false, Settled::No, 1),
        ]);
        assert_eq!(
            assess("2", &c, Phase::CuttingOver).phase,
            Phase::CuttingOver
        );
    }

    #[test]
    fn the_old_version_retires_once_every_binding_moved() {
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("1"), true, Settled::Ready, 2),
            (Some("2"), false, Settled::Ready, 7),
        ]);
        let p = assess("2", &c, Phase::CuttingOver);
        assert_eq!(p.phase, Phase::Retiring);
        assert_eq!((p.old_total, p.old_deleting), (7, 2));
        // A pod created while retiring does not stop the deletion.
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("2"), false, Settled::No, 1),
        ]);
        assert_eq!(assess("2", &c, Phase::Retiring).phase, Phase::Retiring);
        // Once the old version is gone, steady again.
        let c = census(&[(Some("2"), false, Settled::Ready, 7)]);
        assert_eq!(assess("2", &c, Phase::Retiring).phase, Phase::Steady);
    }

    #[test]
    fn a_rollback_is_a_bump_the_other_way() {
        // Bumped to 2, then back to 1 before 2 finished: 1 is current again.
        let c = census(&[
            (Some("1"), false, Settled::Ready, 5),
            (Some("2"), false, Settled::AwaitingCutover, 3),
        ]);
        let p = assess("1", &c, Phase::Steady);
        assert_eq!(p.phase, Phase::Retiring);
        assert_eq!(p.old_versions, BTreeSet::from(["2".to_string()]));
    }

    #[test]
    fn nothing_retires_before_every_object_has_its_new_translations() {
        let member = |owner: &str, version: &str| Member {
            version: Some(version.into()),
            owner: Some(owner.into()),
            deleting: false,
            settled: Settled::Ready,
        };
        // Right after a restart at version 2: only version 1 is there.
        let mut c = Census::default();
        c.add(&member("pod-a", "1"));
        c.add(&member("pod-b", "1"));
        let p = assess("2", &c, Phase::Steady);
        assert_eq!((p.phase, p.owners_not_translated), (Phase::Building, 2));
        // One object translated and pushed: the other still holds the bump back.
        c.add(&member("pod-a", "2"));
        let p = assess("2", &c, Phase::Building);
        assert_eq!((p.phase, p.owners_not_translated), (Phase::Building, 1));
        c.add(&member("pod-b", "2"));
        assert_eq!(assess("2", &c, Phase::Building).phase, Phase::Retiring);
    }

    fn labelled(name: &str, uid: &str, version: &str, owner: &str) -> Translation {
        let mut tr = Translation::new(name, "ns", crate::crd::TranslationSpec::default());
        tr.metadata.uid = Some(uid.into());
        tr.metadata.labels = Some(BTreeMap::from([
            (VERSION_LABEL.to_string(), version.to_string()),
            (OWNER_UID_LABEL.to_string(), owner.to_string()),
        ]));
        tr
    }

    const POD_UID: &str = "6f1c2a4e-8d3b-4c5a-9e7f-0a1b2c3d4e5f";

    #[test]
    fn owners_are_kept_as_uids_when_they_are_uids() {
        assert_eq!(
            Owner::from(POD_UID),
            Owner::Uid(Uuid::parse_str(POD_UID).unwrap())
        );
        assert_eq!(Owner::from("global"), Owner::Other("global".into()));
        // Another spelling of the same UUID stays another owner.
        let simple = POD_UID.replace('-', "");
        assert_eq!(Owner::from(simple.as_str()), Owner::Other(simple.into()));
    }

    #[test]
    fn members_are_translations_not_names() {
        let rollout = Rollout::new("2");
        let old = labelled(
            "pod.1.a",
            "00000000-0000-0000-0000-000000000001",
            "1",
            POD_UID,
        );
        // Deleted and written again under the same name: another Translation.
        let again = labelled(
            "pod.1.a",
            "00000000-0000-0000-0000-000000000002",
            "1",
            POD_UID,
        );
        let new = labelled(
            "pod.2.a",
            "00000000-0000-0000-0000-000000000003",
            "2",
            POD_UID,
        );
        rollout.observe(&watcher::Event::Apply(old.clone()));
        rollout.observe(&watcher::Event::Apply(again));
        rollout.observe(&watcher::Event::Apply(new));
        rollout.observe(&watcher::Event::Delete(old));
        let p = rollout.assess();
        assert_eq!((p.old_total, p.new_total), (1, 1));
        assert_eq!(p.owners_not_translated, 0);
        let state = rollout.lock();
        assert_eq!(state.members.len(), 2);
        // One allocation per version, whatever the number of members.
        let versions: Vec<&Arc<str>> = state
            .members
            .values()
            .filter_map(|m| m.version.as_ref())
            .collect();
        assert!(versions.iter().all(|v| state
            .versions
            .get(&***v)
            .is_some_and(|kept| Arc::ptr_eq(kept, v))));
    }

    /// A Translation as the original controller wrote it: no spec, no version label.
    fn original(name: &str, uid: &str, owner: &str) -> Translation {
        let mut tr = labelled(name, uid, "4", owner);
        tr.metadata.labels = Some(BTreeMap::from([(
            OWNER_UID_LABEL.to_string(),
            owner.to_string(),
        )]));
        tr.resources = tr.spec.take().map(|s| s.resources);
        tr
    }

    #[test]
    fn the_original_controllers_translations_are_an_old_version() {
        let rollout = Rollout::new("1");
        let old = original("pod.4.a", "00000000-0000-0000-0000-000000000001", POD_UID);
        assert!(rollout.is_old(&old));
        rollout.observe(&watcher::Event::Apply(old.clone()));
        let p = rollout.assess();
        assert_eq!(
            p.old_versions,
            BTreeSet::from([ORIGINAL_VERSION.to_string()])
        );
        // Not translated yet: the bump builds.
        assert_eq!((p.phase, p.owners_not_translated), (Phase::Building, 1));
        let mut new = labelled(
            "pod.1.a",
            "00000000-0000-0000-0000-000000000002",
            "1",
            POD_UID,
        );
        new.status = Some(crate::crd::TranslationStatus {
            observed_generation: Some(1),
            conditions: vec![crate::crd::Condition {
                type_: "Ready".into(),
                status: "True".into(),
                observed_generation: Some(1),
                ..Default::default()
            }],
            ..Default::default()
        });
        new.metadata.generation = Some(1);
        rollout.observe(&watcher::Event::Apply(new));
        assert_eq!(rollout.assess().phase, Phase::Retiring);
        // A Translation of this version without a label is version-independent, not old.
        let mut independent = labelled("x", "u", "1", POD_UID);
        independent.metadata.labels = None;
        assert!(!rollout.is_old(&independent));
    }

    #[test]
    fn the_link_between_versions_never_holds_the_bump_back() {
        let rollout = Rollout::new("2");
        let ready = |mut tr: Translation| {
            tr.status = Some(crate::crd::TranslationStatus {
                conditions: vec![crate::crd::Condition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }],
                ..Default::default()
            });
            tr
        };
        rollout.observe(&watcher::Event::Apply(ready(labelled(
            "pod.2.a",
            "00000000-0000-0000-0000-000000000002",
            "2",
            POD_UID,
        ))));
        assert_eq!(rollout.assess().phase, Phase::Steady);
        // Not pushed (its old end gone with a wiped backend), and of either version.
        for (uid, version) in [
            ("00000000-0000-0000-0000-00000000000a", "2"),
            ("00000000-0000-0000-0000-00000000000b", "1"),
        ] {
            let mut link = labelled(&format!("version-link.{version}"), uid, version, POD_UID);
            link.metadata.labels = Some(BTreeMap::from([
                (VERSION_LABEL.to_string(), version.to_string()),
                (
                    super::super::link::LINK_LABEL.to_string(),
                    "true".to_string(),
                ),
            ]));
            rollout.observe(&watcher::Event::Apply(link));
            assert_eq!(rollout.assess().phase, Phase::Steady, "version {version}");
        }
    }

    #[test]
    fn a_services_and_its_endpoints_translations_stand_for_one_object() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owned_by = |kind: &str, uid: &str| {
            let mut tr = labelled("t", "u", "1", uid);
            tr.metadata.owner_references = Some(vec![OwnerReference {
                kind: kind.into(),
                name: "web".into(),
                uid: uid.into(),
                ..Default::default()
            }]);
            tr
        };
        let service = owned_by("Service", "6f1c2a4e-8d3b-4c5a-9e7f-000000000001");
        let endpoints = owned_by("Endpoints", "6f1c2a4e-8d3b-4c5a-9e7f-000000000002");
        assert_eq!(census_owner(&service), census_owner(&endpoints));
        // Other objects by their UID.
        let pod = owned_by("Pod", POD_UID);
        assert_eq!(census_owner(&pod), Some(Owner::from(POD_UID)));
    }

    #[test]
    fn the_census_forgets_what_it_removes() {
        let m = Member {
            version: Some("1".into()),
            owner: Some("pod-uid".into()),
            deleting: false,
            settled: Settled::No,
        };
        let mut c = Census::default();
        c.add(&m);
        c.remove(&m);
        assert_eq!(c, Census::default());
    }
}
