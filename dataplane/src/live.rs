//! A topology kept up to date record by record, for sampling a backend that changes
//! while it is read (the flow probe).
//!
//! The backend is read as *records*: a unit of its state that changes as a whole and
//! whose resources are rendered together, e.g. a bridge with its MAC and ARP tables, a
//! chain with its rules in listed order, a port with its link and binding. A reader
//! reports the records that changed since the last reading (with all their resources)
//! and the ones that are gone; [`LiveTopology::apply`] takes the old resources of each
//! out of the topology and puts the new ones in. The result is the topology a full
//! rebuild from every record would give: every index of [`Topology`] is kept in step by
//! [`Topology::add`] and [`Topology::remove`], a link or a binding stated by two records
//! survives the replacement of one of them, and a chain's rules are re-added in their
//! listed order whenever any of them changes (they are one record).
//!
//! It also answers what each batch touched ([`crate::reads::Changes`]): a trace that read
//! none of it has the same verdict as before, so a sampler re-traces only the others, and
//! the ARP exchanges the batch did not touch stay walked. Of a changed record, only the
//! resources that are not at the same place alike before and after are noted (a port
//! rendered with its binding changes its body where it names the binding, which the
//! model reads from the binding; a binding moving then touches the floods of its bridge,
//! not every walk through it). A record reported changed with
//! the very resources it had is left as it is and touches nothing: a reader may report a
//! record whose rendering did not change (the simulator reports a router whenever its
//! list of routes or ports changes, a bridge whenever its list of ports does, and neither
//! list is part of the record), and taking it out and in would touch everything that
//! reads it (every route lookup on a router).

use rustc_hash::FxHashMap;

use midonet_translators::model::Resource;

use crate::reads::Changes;
use crate::topology::{Attachment, RuleOrder, Topology};

/// One record's change: its key and its resources now, `None` when it is gone.
pub type RecordChange = (String, Option<Vec<Resource>>);

/// A [`Topology`] maintained from record changes (rules in listed order).
#[derive(Clone, Debug, Default)]
pub struct LiveTopology {
    topo: Topology,
    records: FxHashMap<String, Vec<Resource>>,
}

impl LiveTopology {
    /// An empty topology with `attachments` plugged in.
    pub fn new(attachments: impl IntoIterator<Item = Attachment>) -> LiveTopology {
        LiveTopology {
            topo: Topology::new(Vec::new(), RuleOrder::Listed, attachments),
            records: FxHashMap::default(),
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// How many records it holds.
    pub fn records(&self) -> usize {
        self.records.len()
    }

    /// Applies `changes`: every changed or gone record's old resources out first, then
    /// the new ones in, record by record in key order; a record whose resources did not
    /// change is skipped. Answers what they touched
    /// (`crate::reads`); the ARP exchanges walked before that they did not touch are
    /// kept.
    pub fn apply(&mut self, changes: Vec<RecordChange>) -> Changes {
        let mut touched = Changes::default();
        let walked = self.topo.arp_memo.take();
        let mut added = Vec::new();
        for (key, new) in changes {
            if new.is_some() && self.records.get(&key) == new.as_ref() {
                continue;
            }
            let old = self.records.remove(&key).unwrap_or_default();
            // Noted before any of the record goes: a binding is noted through its port.
            for r in changed_in(&old, new.as_deref()) {
                self.topo.note_change(r, &mut touched);
            }
            self.topo.remove_all(&old);
            if let Some(new) = new {
                added.push((key, old, new));
            }
        }
        added.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, old, new) in added {
            for r in &new {
                self.topo.add(r.clone(), RuleOrder::Listed);
            }
            for r in changed_in(&new, Some(&old)) {
                self.topo.note_change(r, &mut touched);
            }
            self.records.insert(key, new);
        }
        self.topo.settle(&mut touched);
        self.topo
            .arp_memo
            .restore(walked, |exchange| !exchange.touched_by(&touched));
        touched
    }
}

/// The resources of `record` that its counterpart (the same record before or after a
/// change, `None` when it is gone or new) does not have at the same place, the model
/// reading them alike: a resource that stays as it was changes no walk, and a record's
/// other resources are noted on their own. A port whose body changed only where it names
/// its binding (`hostId`, `interfaceName`, rendered with the binding in the port's
/// record) stays as it was: the model reads the binding from the binding.
fn changed_in<'a>(
    record: &'a [Resource],
    counterpart: Option<&'a [Resource]>,
) -> impl Iterator<Item = &'a Resource> + 'a {
    let counterpart = counterpart.unwrap_or_default();
    record.iter().enumerate().filter_map(move |(i, r)| {
        let same = counterpart.get(i).is_some_and(|c| read_alike(r, c));
        (!same).then_some(r)
    })
}

/// The body fields of a port that name its binding (the simulator and MidoNet render them;
/// the model reads the binding itself).
const BINDING_MIRRORS: [&str; 2] = ["hostId", "interfaceName"];

/// Whether the model reads `a` and `b` alike: equal, or ports equal but for the fields
/// that name their binding.
fn read_alike(a: &Resource, b: &Resource) -> bool {
    match (a, b) {
        (Resource::Port(x), Resource::Port(y)) if x != y => {
            let without = |p: &midonet_translators::model::Port| {
                let mut p = p.clone();
                for f in BINDING_MIRRORS {
                    p.extra.remove(f);
                }
                p
            };
            without(x) == without(y)
        }
        _ => a == b,
    }
}
