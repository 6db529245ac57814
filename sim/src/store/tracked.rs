//! The store's maps, each logging which records its changes touch.
//!
//! A [`Tracked`] map hands out its values read-only (it dereferences to the map) and
//! changes them only through [`Tracked::insert`], [`Tracked::remove`],
//! [`Tracked::get_mut`] and [`Tracked::update_each`], each of which marks the record the
//! value belongs to ([`InRecord`]: a rule belongs to its chain's record) in the map's
//! [`ChangeLog`]. Every mutation of the store, cascades included, is a call of these on
//! some map, so the logs together name every record changed since any revision; the
//! compiler sees to it that nothing changes a value behind them. A mark may name a record
//! that did not really change (a `get_mut` that only looked): the reader renders it again
//! and finds it the same, which costs time, not exactness.

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use super::records::RecordKind;

/// A record of the store: its kind and id.
pub(crate) type RecordKey = (RecordKind, Uuid);

/// Every log gets an epoch of its own, so that a reader's position in one log means
/// nothing in another (a wiped, reloaded or cloned store).
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// A position in one [`ChangeLog`]: its epoch and the revision read up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    epoch: u64,
    revision: u64,
}

/// The records a map's changes touched, each at the revision of its latest change.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    epoch: u64,
    revision: u64,
    /// Marks up to this revision were dropped: a reader behind it must read everything.
    floor: u64,
    latest: HashMap<RecordKey, u64>,
    by_revision: BTreeMap<u64, RecordKey>,
    /// [`SLACK`], but for tests.
    slack: usize,
}

/// Marks of records beyond those a map holds that the log keeps (records deleted since)
/// before it drops every mark.
const SLACK: usize = 1 << 16;

impl Default for ChangeLog {
    fn default() -> Self {
        ChangeLog {
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
            revision: 0,
            floor: 0,
            latest: HashMap::new(),
            by_revision: BTreeMap::new(),
            slack: SLACK,
        }
    }
}

impl Clone for ChangeLog {
    /// A copy is another store: a fresh log, which its readers read whole first.
    fn clone(&self) -> Self {
        ChangeLog::default()
    }
}

impl ChangeLog {
    fn mark(&mut self, key: RecordKey, held: usize) {
        self.revision += 1;
        if let Some(old) = self.latest.insert(key, self.revision) {
            self.by_revision.remove(&old);
        }
        self.by_revision.insert(self.revision, key);
        // The marks of deleted records would pile up for ever: past a bound, drop them
        // all, which sends every reader behind this revision to a full reading.
        if self.by_revision.len() > 2 * held + self.slack {
            self.latest.clear();
            self.by_revision.clear();
            self.floor = self.revision;
        }
    }

    /// Where the log is now.
    pub(crate) fn now(&self) -> Mark {
        Mark {
            epoch: self.epoch,
            revision: self.revision,
        }
    }

    /// The records changed after `at`, oldest change first; `None` when the log cannot
    /// tell (another log's mark, or marks dropped since).
    pub(crate) fn since(&self, at: Mark) -> Option<impl Iterator<Item = &RecordKey>> {
        if at.epoch != self.epoch || at.revision < self.floor {
            return None;
        }
        Some(
            self.by_revision
                .range(at.revision.saturating_add(1)..)
                .map(|(_, key)| key),
        )
    }
}

/// Which record a stored value is part of.
pub(crate) trait InRecord {
    fn record(&self, id: Uuid) -> RecordKey;
}

/// A map of the store with its [`ChangeLog`]. Serialised as the bare map.
#[derive(Clone, Debug)]
pub(crate) struct Tracked<V> {
    map: BTreeMap<Uuid, V>,
    log: ChangeLog,
}

impl<V> Default for Tracked<V> {
    fn default() -> Self {
        Tracked {
            map: BTreeMap::new(),
            log: ChangeLog::default(),
        }
    }
}

impl<V> Deref for Tracked<V> {
    type Target = BTreeMap<Uuid, V>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<'a, V> IntoIterator for &'a Tracked<V> {
    type Item = (&'a Uuid, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, Uuid, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl<V: InRecord> Tracked<V> {
    pub(crate) fn log(&self) -> &ChangeLog {
        &self.log
    }

    fn mark(&mut self, key: RecordKey) {
        self.log.mark(key, self.map.len());
    }

    /// Keeps at most `slack` marks of deleted records.
    #[cfg(test)]
    pub(crate) fn set_slack(&mut self, slack: usize) {
        self.log.slack = slack;
    }

    pub(crate) fn insert(&mut self, id: Uuid, value: V) -> Option<V> {
        let new = value.record(id);
        let old = self.map.insert(id, value);
        if let Some(old) = &old {
            let old = old.record(id);
            if old != new {
                self.mark(old);
            }
        }
        self.mark(new);
        old
    }

    pub(crate) fn remove(&mut self, id: &Uuid) -> Option<V> {
        let old = self.map.remove(id)?;
        self.mark(old.record(*id));
        Some(old)
    }

    /// The value to change; its record is marked changed. Whatever the caller changes
    /// must leave the value in the same record.
    pub(crate) fn get_mut(&mut self, id: &Uuid) -> Option<&mut V> {
        let key = self.map.get(id)?.record(*id);
        self.log.mark(key, self.map.len());
        self.map.get_mut(id)
    }

    /// Lets `change` change every value; those it answers `true` for (changed) are
    /// marked.
    pub(crate) fn update_each(&mut self, mut change: impl FnMut(&Uuid, &mut V) -> bool) {
        let mut changed = Vec::new();
        for (id, value) in self.map.iter_mut() {
            if change(id, value) {
                changed.push(value.record(*id));
            }
        }
        for key in changed {
            self.mark(key);
        }
    }
}

impl<V: Serialize> Serialize for Tracked<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Tracked<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Tracked {
            map: BTreeMap::deserialize(d)?,
            log: ChangeLog::default(),
        })
    }
}
