//! Follows every Translation with a watch, so that a phase is timed at the moment its last
//! Translation turned Ready (or its last stale one went away), not at the moment a poll
//! noticed: listing thousands of Translations every few hundred milliseconds would both
//! lag behind the convergence and slow down what it measures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::meta::VERSION_LABEL;
use tokio::task::JoinHandle;

/// What a phase's convergence depends on, for one Translation.
#[derive(PartialEq, Eq)]
struct Tracked {
    ready: bool,
    version: Option<String>,
    /// Item paths of the backend resources its spec asks for.
    paths: BTreeSet<String>,
}

impl Tracked {
    fn of(t: &Translation) -> Tracked {
        Tracked {
            ready: t.is_ready(),
            version: t.label(VERSION_LABEL).map(str::to_string),
            paths: t.desired_paths().collect(),
        }
    }
}

#[derive(Default)]
struct State {
    translations: BTreeMap<Key, Tracked>,
    /// A re-list in progress: replaces `translations` at its end.
    relisting: Option<BTreeMap<Key, Tracked>>,
    /// When the last watch event changed a Translation's readiness, version or paths, or
    /// added or removed one.
    last_change: Option<Instant>,
    /// The watch's last error, for a phase that times out.
    last_error: Option<String>,
    /// The initial list is done.
    listed: bool,
    /// When each Translation first appeared in a watch event after the initial list.
    created: Vec<Instant>,
    /// When each Translation first turned Ready after the initial list.
    turned_ready: Vec<Instant>,
    /// The same, by Translation: when it first appeared, when it first turned Ready.
    seen_at: BTreeMap<Key, Instant>,
    ready_at: BTreeMap<Key, Instant>,
}

impl State {
    /// Records what a watch event changed in the timeline: a Translation seen for the first
    /// time, or turning Ready for the first time.
    fn note(&mut self, key: &Key, tracked: &Tracked, at: Instant) {
        if !self.listed {
            return;
        }
        let before = self.translations.get(key);
        if before.is_none() {
            self.created.push(at);
            self.seen_at.entry(key.clone()).or_insert(at);
        }
        if tracked.ready && !before.is_some_and(|b| b.ready) {
            self.turned_ready.push(at);
            self.ready_at.entry(key.clone()).or_insert(at);
        }
    }
}

/// A Translation's namespace and name.
pub type Key = (String, String);

/// What a phase waits for in the tracked Translations, beyond every one of them Ready.
#[derive(Default)]
pub struct Want<'a> {
    /// At least this many Translations: the controllers may write a few the bench does not
    /// compute (e.g. globals), so this is a lower bound.
    pub count: usize,
    /// At least this many backend item paths asked for: an initial sync is not over while a
    /// Translation still lacks what a later input adds to it (a LoadBalancer Service's
    /// address, which the IPAM writes during the sync).
    pub paths: usize,
    /// None of this version left: a version bump's old Translations gone.
    pub stale_version: Option<&'a str>,
    /// These present: the phase's new objects translated. Without them a phase that
    /// replaces objects (churn) would pass on the state before it.
    pub present: BTreeSet<Key>,
    /// These gone: the phase's deleted objects' Translations removed.
    pub absent: BTreeSet<Key>,
}

/// A snapshot of the tracked Translations.
pub struct Snapshot {
    pub count: usize,
    pub not_ready: usize,
    pub stale: usize,
    /// Of [`Want::present`], how many are not tracked.
    pub missing: usize,
    /// Of [`Want::absent`], how many are still tracked.
    pub left: usize,
    /// Item paths every tracked Translation asks for.
    pub expected_paths: BTreeSet<String>,
    pub last_change: Option<Instant>,
    pub last_error: Option<String>,
}

impl Snapshot {
    /// The snapshot of `tracked`: how many, how many not Ready, how many of
    /// `stale_version`, and the paths they ask for.
    fn of<'a>(
        tracked: impl Iterator<Item = &'a Tracked> + Clone,
        stale_version: Option<&str>,
    ) -> Snapshot {
        Snapshot {
            count: tracked.clone().count(),
            not_ready: tracked.clone().filter(|t| !t.ready).count(),
            stale: stale_version.map_or(0, |v| {
                tracked
                    .clone()
                    .filter(|t| t.version.as_deref() == Some(v))
                    .count()
            }),
            expected_paths: tracked.flat_map(|t| t.paths.iter().cloned()).collect(),
            missing: 0,
            left: 0,
            last_change: None,
            last_error: None,
        }
    }
}

/// One LIST of every Translation, read as the tracker reads its watch: for a phase timed
/// without the tracker's watch (`--unwatched-sync`), which confirms its convergence by
/// LISTs taken only once the controllers report every Translation pushed.
pub async fn list_snapshot(client: &Client) -> Result<Snapshot, kube::Error> {
    let api: Api<Translation> = Api::all(client.clone());
    let listed = api.list(&ListParams::default()).await?;
    let tracked: Vec<Tracked> = listed.items.iter().map(Tracked::of).collect();
    Ok(Snapshot::of(tracked.iter(), None))
}

/// Where a phase's time went: when its Translations appeared and turned Ready. A pipeline
/// that lags shows as a gap between the two; a slow start as a late first creation.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Timeline {
    /// Seconds since the phase's start at which each fraction of the Translations appeared.
    pub created: Vec<f64>,
    /// Seconds since the phase's start at which each fraction of them turned Ready.
    pub ready: Vec<f64>,
}

impl Timeline {
    /// The fractions reported: the first, a tenth, half, nine tenths, all.
    pub const FRACTIONS: [f64; 5] = [0.0, 0.1, 0.5, 0.9, 1.0];

    fn quantiles(times: &[Instant], since: Instant) -> Vec<f64> {
        let mut secs: Vec<f64> = times
            .iter()
            .map(|t| t.saturating_duration_since(since).as_secs_f64())
            .collect();
        secs.sort_by(f64::total_cmp);
        if secs.is_empty() {
            return Vec::new();
        }
        let last = secs.len() - 1;
        Self::FRACTIONS
            .iter()
            .map(|f| secs[(f * last as f64).round() as usize])
            .collect()
    }

    /// One line: the times at each fraction, created then Ready.
    pub fn describe(&self) -> String {
        if self.created.is_empty() && self.ready.is_empty() {
            return "not recorded".to_string();
        }
        let list = |v: &[f64]| {
            v.iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        format!(
            "created {} s; Ready {} s",
            list(&self.created),
            list(&self.ready)
        )
    }
}

pub struct ReadyTracker {
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl ReadyTracker {
    /// Starts watching every Translation of the cluster.
    pub fn start(client: &Client) -> ReadyTracker {
        let api: Api<Translation> = Api::all(client.clone());
        let state = Arc::new(Mutex::new(State::default()));
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(event) = events.next().await {
                    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
                    match event {
                        Ok(watcher::Event::Apply(t)) => {
                            let tracked = Tracked::of(&t);
                            let key = key_of(&t);
                            if s.translations.get(&key) != Some(&tracked) {
                                let now = Instant::now();
                                s.note(&key, &tracked, now);
                                s.translations.insert(key, tracked);
                                s.last_change = Some(now);
                            }
                        }
                        Ok(watcher::Event::Delete(t)) => {
                            if s.translations.remove(&key_of(&t)).is_some() {
                                s.last_change = Some(Instant::now());
                            }
                        }
                        Ok(watcher::Event::Init) => s.relisting = Some(BTreeMap::new()),
                        Ok(watcher::Event::InitApply(t)) => {
                            let tracked = Tracked::of(&t);
                            s.relisting
                                .get_or_insert_with(BTreeMap::new)
                                .insert(key_of(&t), tracked);
                        }
                        Ok(watcher::Event::InitDone) => {
                            let listed = s.relisting.take().unwrap_or_default();
                            if listed != s.translations {
                                s.translations = listed;
                                s.last_change = Some(Instant::now());
                            }
                            s.listed = true;
                        }
                        Err(e) => s.last_error = Some(e.to_string()),
                    }
                }
            }
        });
        ReadyTracker { state, task }
    }

    /// Waits until the initial list is done, so that a phase starts with the watch open.
    pub async fn listed(&self) {
        while !self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .listed
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// When Translation `key` first appeared, and first turned Ready, after the initial list.
    pub fn first_seen_and_ready(&self, key: &Key) -> (Option<Instant>, Option<Instant>) {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (s.seen_at.get(key).copied(), s.ready_at.get(key).copied())
    }

    /// When the Translations appeared and turned Ready, as times since `since`, at the
    /// fractions in [`Timeline::FRACTIONS`] of those seen so far.
    pub fn timeline(&self, since: Instant) -> Timeline {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Timeline {
            created: Timeline::quantiles(&s.created, since),
            ready: Timeline::quantiles(&s.turned_ready, since),
        }
    }

    /// The tracked state, measured against what a phase wants.
    pub fn snapshot(&self, want: &Want) -> Snapshot {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Snapshot {
            missing: want
                .present
                .iter()
                .filter(|k| !s.translations.contains_key(*k))
                .count(),
            left: want
                .absent
                .iter()
                .filter(|k| s.translations.contains_key(*k))
                .count(),
            last_change: s.last_change,
            last_error: s.last_error.clone(),
            ..Snapshot::of(s.translations.values(), want.stale_version)
        }
    }
}

fn key_of(t: &Translation) -> Key {
    (t.namespace().unwrap_or_default(), t.name_any())
}

impl Drop for ReadyTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
