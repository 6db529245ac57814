//! What the pusher remembers per Translation between reconciles, in one place.
//!
//! The informer's object is the source of truth for the spec and, eventually, the status;
//! this is what it cannot tell yet or at all:
//! - the status this process last wrote (the cache may not show our own write yet, and
//!   acting on the stale status would repeat backend calls), and what it was decided for:
//!   the watch event showing that Translation with that status is the write's echo,
//!   which the pusher's queue need not see (see [`Tracker::is_own_write`]);
//! - consecutive failures, for backoff and for not repeating the same Warning event;
//! - pushed paths found gone from the backend (drift, another Translation's cascade), to
//!   create again;
//! - bindings a version bump's cutover created for it (see [`super::cutover`]), to record
//!   without creating them again, and the old version's bridges the cutover deleted, not to
//!   delete them again when the Translation goes.
//!
//! One lock guards it all, so each rule about a Translation's bookkeeping reads one entry.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use kube::ResourceExt;

use crate::crd::{Translation, TranslationStatus};
use crate::locks::lock;

/// What a pusher reconcile decides from on the Translation besides its status, as one
/// number: its UID, generation (the apiserver bumps it with every change of the spec),
/// deletion, finalizers, labels, annotations and owners. Two versions with the same
/// hash and status reconcile alike.
pub fn reconcile_input_hash(tr: &Translation) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let meta = &tr.metadata;
    meta.uid.hash(&mut h);
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.finalizers.hash(&mut h);
    for (k, v) in tr.labels_iter() {
        (k, v).hash(&mut h);
    }
    tr.annotations().hash(&mut h);
    for owner in tr.owner_references() {
        owner.uid.hash(&mut h);
    }
    h.finish()
}

/// A status this process writes or wrote, and the [`reconcile_input_hash`] of the Translation it
/// was decided for.
#[derive(Debug)]
struct StatusWrite {
    status: TranslationStatus,
    from: u64,
    /// The informer showed it already: its watch event can come before the write's
    /// response.
    shown: bool,
}

/// How a pushed resource went missing from the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Deleted out of band: found by the periodic verification.
    Drift,
    /// Deleted by MidoNet along with another Translation's resources.
    Cascade,
}

/// Pushed paths found missing, with how they went missing.
pub type Missing = HashMap<String, Cause>;

#[derive(Debug, Default)]
struct Tracked {
    /// The last status written, until the informer shows it.
    written: Option<StatusWrite>,
    /// A status write under way.
    writing: Option<StatusWrite>,
    failures: u32,
    last_warning: Option<String>,
    /// The failures are of deleting (not of applying) the Translation.
    deleting: bool,
    missing: Missing,
    cut_over: HashSet<String>,
    deleted_by_cutover: HashSet<String>,
}

impl Tracked {
    fn is_empty(&self) -> bool {
        self.written.is_none()
            && self.writing.is_none()
            && self.failures == 0
            && self.last_warning.is_none()
            && !self.deleting
            && self.missing.is_empty()
            && self.cut_over.is_empty()
            && self.deleted_by_cutover.is_empty()
    }
}

/// Per Translation UID.
#[derive(Debug, Default)]
pub struct Tracker {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_uid: HashMap<String, Tracked>,
    /// UIDs with at least one failure (the retry queue gauge).
    retrying: usize,
}

impl State {
    fn entry(&mut self, uid: &str) -> &mut Tracked {
        self.by_uid.entry(uid.to_string()).or_default()
    }

    /// Drops the entry once it holds nothing.
    fn tidy(&mut self, uid: &str) {
        if self.by_uid.get(uid).is_some_and(Tracked::is_empty) {
            self.by_uid.remove(uid);
        }
    }

    fn set_failures(&mut self, uid: &str, failures: u32) {
        let entry = self.entry(uid);
        let was = entry.failures;
        entry.failures = failures;
        match (was, failures) {
            (0, n) if n > 0 => self.retrying += 1,
            (w, 0) if w > 0 => self.retrying -= 1,
            _ => {}
        }
    }
}

impl Tracker {
    /// The status this process last wrote, if any.
    pub fn written(&self, uid: &str) -> Option<TranslationStatus> {
        lock(&self.state)
            .by_uid
            .get(uid)
            .and_then(|t| t.written.as_ref())
            .map(|w| w.status.clone())
    }

    /// This process is about to write `status`, decided for the Translation of
    /// reconcile input hash `from`; [`Self::status_written`] or [`Self::status_not_written`] follows.
    pub fn writing_status(&self, uid: &str, status: TranslationStatus, from: u64) {
        lock(&self.state).entry(uid).writing = Some(StatusWrite {
            status,
            from,
            shown: false,
        });
    }

    /// The status write under way succeeded: it is the last status written, kept until the
    /// informer shows it (unless it did already).
    pub fn status_written(&self, uid: &str) {
        let mut state = lock(&self.state);
        let Some(entry) = state.by_uid.get_mut(uid) else {
            return;
        };
        entry.written = entry.writing.take().filter(|w| !w.shown);
        state.tidy(uid);
    }

    /// The status write under way failed.
    pub fn status_not_written(&self, uid: &str) {
        let mut state = lock(&self.state);
        if let Some(entry) = state.by_uid.get_mut(uid) {
            entry.writing = None;
        }
        state.tidy(uid);
    }

    /// Whether this version of the Translation (its `status`, and its [`reconcile_input_hash`],
    /// computed only when a write of this status is there to compare) is what this
    /// process's status write made of the Translation it was decided for: a reconcile
    /// would find nothing to do. It is the write's echo, or if not, as good as it. (A
    /// change made meanwhile changes that hash, or the status.)
    pub fn is_own_write(
        &self,
        uid: &str,
        status: Option<&TranslationStatus>,
        input_hash: impl Fn() -> u64,
    ) -> bool {
        let from = std::cell::OnceCell::new();
        lock(&self.state).by_uid.get(uid).is_some_and(|t| {
            t.written
                .iter()
                .chain(&t.writing)
                .any(|w| Some(&w.status) == status && w.from == *from.get_or_init(&input_hash))
        })
    }

    /// The informer shows `status` on the Translation: once that is what this process
    /// wrote, the cache says it, and the copy (a second status per Translation in memory)
    /// goes. Watch events come in resourceVersion order, so no older status follows.
    pub fn observed(&self, uid: &str, status: Option<&TranslationStatus>) {
        let mut state = lock(&self.state);
        let Some(entry) = state.by_uid.get_mut(uid) else {
            return;
        };
        if entry
            .written
            .as_ref()
            .is_some_and(|w| Some(&w.status) == status)
        {
            entry.written = None;
        }
        if let Some(w) = entry.writing.as_mut().filter(|w| Some(&w.status) == status) {
            w.shown = true;
        }
        state.tidy(uid);
    }

    /// The Translation is gone: nothing about it is kept.
    pub fn forget(&self, uid: &str) {
        let mut state = lock(&self.state);
        state.set_failures(uid, 0);
        state.by_uid.remove(uid);
    }

    /// Records a failure; returns the consecutive count.
    pub fn failed(&self, uid: &str) -> u32 {
        let mut state = lock(&self.state);
        let count = state.entry(uid).failures.saturating_add(1);
        state.set_failures(uid, count);
        count
    }

    /// A deletion starts afresh: the backoff that failed pushes built up must not delay
    /// it (a Translation that could never be pushed is often deleted for that reason).
    pub fn begin_deletion(&self, uid: &str) {
        let mut state = lock(&self.state);
        if !state.entry(uid).deleting {
            state.set_failures(uid, 0);
            let entry = state.entry(uid);
            entry.last_warning = None;
            entry.deleting = true;
        }
    }

    pub fn succeeded(&self, uid: &str) {
        let mut state = lock(&self.state);
        state.set_failures(uid, 0);
        let entry = state.entry(uid);
        entry.last_warning = None;
        entry.deleting = false;
        state.tidy(uid);
    }

    /// Translations waiting for a retry after a failure.
    pub fn retrying(&self) -> usize {
        lock(&self.state).retrying
    }

    /// True when this warning differs from the last one emitted for the Translation, so the
    /// same failure repeated on every retry yields one event, not one per attempt.
    pub fn should_warn(&self, uid: &str, message: &str) -> bool {
        let mut state = lock(&self.state);
        let entry = state.entry(uid);
        if entry.last_warning.as_deref() == Some(message) {
            return false;
        }
        entry.last_warning = Some(message.to_string());
        true
    }

    /// The paths to create again; each stays marked until [`Self::recreated`] says it was,
    /// so a push that fails or is held before getting to it does not forget it.
    pub fn missing(&self, uid: &str) -> Missing {
        lock(&self.state)
            .by_uid
            .get(uid)
            .map(|t| t.missing.clone())
            .unwrap_or_default()
    }

    pub fn recreated(&self, uid: &str, path: &str) {
        let mut state = lock(&self.state);
        if let Some(entry) = state.by_uid.get_mut(uid) {
            entry.missing.remove(path);
        }
        state.tidy(uid);
    }

    /// The cutover created this resource of the Translation's (a binding, or part of the
    /// link between two versions): its next push records it.
    pub fn cut_over(&self, uid: &str, path: &str) {
        lock(&self.state)
            .entry(uid)
            .cut_over
            .insert(path.to_string());
    }

    /// Whether the cutover created this path and no status records it yet.
    pub fn is_cut_over(&self, uid: &str, path: &str) -> bool {
        lock(&self.state)
            .by_uid
            .get(uid)
            .is_some_and(|t| t.cut_over.contains(path))
    }

    /// A written status records these paths: the cutover's creations among them are done.
    pub fn recorded(&self, uid: &str, paths: impl IntoIterator<Item = String>) {
        let mut state = lock(&self.state);
        if let Some(entry) = state.by_uid.get_mut(uid) {
            for p in paths {
                entry.cut_over.remove(&p);
            }
        }
        state.tidy(uid);
    }

    /// The cutover deleted this pushed path of an old version's Translation (a bridge, with
    /// the ports under it): its deletion does not send the DELETE again.
    pub fn deleted_by_cutover(&self, uid: &str, path: &str) {
        lock(&self.state)
            .entry(uid)
            .deleted_by_cutover
            .insert(path.to_string());
    }

    /// The paths of the Translation the cutover deleted.
    pub fn paths_deleted_by_cutover(&self, uid: &str) -> HashSet<String> {
        lock(&self.state)
            .by_uid
            .get(uid)
            .map(|t| t.deleted_by_cutover.clone())
            .unwrap_or_default()
    }

    pub fn mark_missing(&self, uid: &str, paths: HashSet<String>, cause: Cause) {
        lock(&self.state)
            .entry(uid)
            .missing
            .extend(paths.into_iter().map(|p| (p, cause)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status that records a push of this hash.
    fn status(pushed_hash: &str) -> TranslationStatus {
        TranslationStatus {
            pushed_hash: Some(pushed_hash.into()),
            ..TranslationStatus::default()
        }
    }

    #[test]
    fn failures_count_up_and_the_retry_gauge_follows() {
        let t = Tracker::default();
        assert_eq!(t.failed("a"), 1);
        assert_eq!(t.failed("a"), 2);
        assert_eq!(t.failed("b"), 1);
        assert_eq!(t.retrying(), 2);
        t.succeeded("a");
        assert_eq!(t.retrying(), 1);
        assert_eq!(t.failed("a"), 1);
        t.forget("a");
        t.forget("b");
        assert_eq!(t.retrying(), 0);
        assert!(lock(&t.state).by_uid.is_empty());
    }

    #[test]
    fn a_deletion_resets_the_backoff_once() {
        let t = Tracker::default();
        t.failed("a");
        t.failed("a");
        t.begin_deletion("a");
        assert_eq!(t.failed("a"), 1);
        // A retried deletion keeps counting.
        t.begin_deletion("a");
        assert_eq!(t.failed("a"), 2);
    }

    #[test]
    fn the_same_warning_is_emitted_once_until_success() {
        let t = Tracker::default();
        assert!(t.should_warn("a", "boom"));
        assert!(!t.should_warn("a", "boom"));
        assert!(t.should_warn("a", "other"));
        t.succeeded("a");
        assert!(t.should_warn("a", "other"));
    }

    #[test]
    fn missing_paths_stay_until_recreated() {
        let t = Tracker::default();
        t.mark_missing("a", HashSet::from(["/x".into(), "/y".into()]), Cause::Drift);
        t.recreated("a", "/x");
        assert_eq!(t.missing("a"), Missing::from([("/y".into(), Cause::Drift)]));
        t.recreated("a", "/y");
        assert!(t.missing("a").is_empty());
        assert!(lock(&t.state).by_uid.is_empty());
    }

    #[test]
    fn the_written_status_is_kept_until_the_informer_shows_it() {
        let t = Tracker::default();
        let ours = status("h2");
        let older = status("h1");
        t.writing_status("a", ours.clone(), 1);
        // Not before the write succeeded.
        assert_eq!(t.written("a"), None);
        t.status_written("a");
        t.observed("a", Some(&older));
        assert_eq!(t.written("a"), Some(ours.clone()));
        t.observed("a", None);
        assert_eq!(t.written("a"), Some(ours.clone()));
        t.observed("a", Some(&ours));
        assert_eq!(t.written("a"), None);
        assert!(lock(&t.state).by_uid.is_empty());
    }

    #[test]
    fn a_status_shown_before_the_writes_response_is_not_kept() {
        let t = Tracker::default();
        let ours = status("h");
        t.writing_status("a", ours.clone(), 1);
        t.observed("a", Some(&ours));
        t.status_written("a");
        assert_eq!(t.written("a"), None);
        assert!(lock(&t.state).by_uid.is_empty());
    }

    #[test]
    fn a_failed_status_write_leaves_the_last_one() {
        let t = Tracker::default();
        let first = status("h1");
        t.writing_status("a", first.clone(), 1);
        t.status_written("a");
        t.writing_status("a", TranslationStatus::default(), 2);
        t.status_not_written("a");
        assert_eq!(t.written("a"), Some(first.clone()));
        assert!(!t.is_own_write("a", Some(&TranslationStatus::default()), || 2));
    }

    #[test]
    fn the_translation_a_status_write_made_is_its_own_write() {
        let t = Tracker::default();
        let ours = status("h2");
        let older = TranslationStatus::default();
        // While the write is under way: its echo can come before its response.
        t.writing_status("a", ours.clone(), 7);
        assert!(t.is_own_write("a", Some(&ours), || 7));
        t.status_written("a");
        assert!(t.is_own_write("a", Some(&ours), || 7));
        // The same status on a Translation changed meanwhile, or another status.
        assert!(!t.is_own_write("a", Some(&ours), || 8));
        assert!(!t.is_own_write("a", Some(&older), || 7));
        assert!(!t.is_own_write("a", None, || 7));
        assert!(!t.is_own_write("b", Some(&ours), || 7));
        // The input hash is not computed without a write of that status to compare.
        assert!(!t.is_own_write("a", Some(&older), || unreachable!()));
    }

    #[test]
    fn the_input_hash_follows_what_a_reconcile_reads_besides_the_status() {
        use crate::crd::TranslationSpec;
        let mut tr = Translation::new("t", "ns", TranslationSpec::default());
        tr.metadata.uid = Some("u".into());
        tr.metadata.generation = Some(1);
        let base = reconcile_input_hash(&tr);
        let mut with_status = tr.clone();
        with_status.status = Some(TranslationStatus::default());
        with_status.metadata.resource_version = Some("9".into());
        assert_eq!(reconcile_input_hash(&with_status), base);
        type Change = Box<dyn Fn(&mut Translation)>;
        let changes: Vec<Change> = vec![
            Box::new(|t| t.metadata.generation = Some(2)),
            Box::new(|t| t.metadata.uid = Some("v".into())),
            Box::new(|t| t.metadata.finalizers = Some(vec!["f".into()])),
            Box::new(|t| {
                use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
                t.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()))
            }),
            Box::new(|t| {
                t.metadata.labels = Some([("k".to_string(), "v".to_string())].into());
                t.compact_labels();
            }),
            Box::new(|t| {
                t.metadata.annotations = Some([("k".to_string(), "v".to_string())].into())
            }),
        ];
        for change in changes {
            let mut changed = tr.clone();
            change(&mut changed);
            assert_ne!(reconcile_input_hash(&changed), base, "{changed:?}");
        }
    }

    #[test]
    fn a_cut_over_binding_is_remembered_until_a_status_records_it() {
        let t = Tracker::default();
        t.cut_over("a", "/b");
        assert!(t.is_cut_over("a", "/b"));
        assert!(!t.is_cut_over("a", "/c"));
        t.recorded("a", ["/c".to_string()]);
        assert!(t.is_cut_over("a", "/b"));
        t.recorded("a", ["/b".to_string()]);
        assert!(!t.is_cut_over("a", "/b"));
        assert!(lock(&t.state).by_uid.is_empty());
    }
}
