//! The one Translation informer of a process.
//!
//! The translators (no-op detection, pruning by owner) and the pusher (its work queue) read
//! the same Translations, so they share one watch and one reflector store instead of each
//! keeping a copy: the Translations are the largest part of the process's memory.
//! Observers (the translators' owner index, the pusher's dependency index, readiness) see
//! every watch event after the store has applied it.
//!
//! The watch is built by [`crate::cache::reflected_trimmed`]: managedFields trimmed (but
//! whether there were any, for `pusher::compaction`), labels kept in a compact list
//! ([`Translation::trim_for_cache`]: read them with [`Translation::label`]), refused lists
//! reported as authorization errors.
//!
//! The pusher's queue does not get the echo of its own status write (the Translation as it
//! was reconciled, with the status that reconcile wrote): reconciling it again would find
//! nothing to do, a second reconcile for every push. Every other event
//! reaches it, and every observer sees every event.
//!
//! A re-list (after the watch expired, say during an apiserver outage) is stored only once
//! it is complete: the reflector buffers the listed objects and swaps them in at its end.
//! A listed object handed to the pusher's controller before that would find the store
//! without it (a Translation created during the outage) or with its old version, and the
//! controller drops such a request. So the pusher gets no object of a re-list one by one,
//! but a signal once the re-list is stored, to reconcile every Translation
//! ([`Started::relisted`]), as client-go's informers hand every object of a re-list to
//! their handlers after the store has it. The first list needs none of this: the
//! controller holds every request until the store is ready.

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::Client;
use tokio::sync::{mpsc, watch};

use crate::authz::Authz;
use crate::crd::Translation;
use crate::health::Health;

/// Name of the readiness check of the Translation informer.
pub const READY_CHECK: &str = "translations-cache";

/// Sees each watch event of the Translation informer.
pub type Observer = Box<dyn Fn(&watcher::Event<Translation>) + Send + Sync>;

/// Says whether a changed Translation is the pusher's own write, kept from its queue.
pub type OwnWrite = Box<dyn Fn(&Translation) -> bool + Send + Sync>;

/// The shared Translation store, and its not yet started event stream.
pub struct TranslationInformer {
    pub store: Store<Translation>,
    authz: Authz,
    health: Health,
    synced_tx: watch::Sender<bool>,
    observers: Vec<Observer>,
    own_write: Option<OwnWrite>,
    api: Api<Translation>,
    writer: reflector::store::Writer<Translation>,
}

impl TranslationInformer {
    /// Registers the readiness check [`READY_CHECK`]; refused lists are reported by `authz`.
    pub fn new(client: Client, authz: Authz, health: Health) -> Self {
        let (store, writer) = reflector::store();
        health.register(READY_CHECK);
        TranslationInformer {
            store,
            authz,
            health,
            synced_tx: watch::Sender::new(false),
            observers: Vec::new(),
            own_write: None,
            api: Api::all(client),
            writer,
        }
    }

    /// Adds an observer; all of them must be added before [`Self::start`].
    pub fn observe(&mut self, observer: Observer) {
        self.observers.push(observer);
    }

    /// Keeps the changes `own_write` recognizes from [`Started::applied`]; it is asked
    /// before the observers see the change. Set before [`Self::start`].
    pub fn skip_applied(&mut self, own_write: OwnWrite) {
        self.own_write = Some(own_write);
    }

    /// Resolves once the store holds the initial list and every observer has seen it.
    pub fn synced(&self) -> Synced {
        Synced(self.synced_tx.subscribe())
    }

    /// Starts the watch (it runs while [`Started::applied`] is polled; [`Self::run`] polls
    /// it for a process without a pusher).
    pub fn start(
        self,
    ) -> Started<impl Stream<Item = Result<Translation, watcher::Error>> + Send + 'static> {
        let observers = self.observers;
        let own_write = self.own_write;
        let synced = self.synced_tx;
        let health = self.health;
        let ready = move |ok| health.set(READY_CHECK, ok);
        let (relisted_tx, relisted_rx) = mpsc::unbounded_channel();
        // A list (the first) has been stored: any further one is a re-list.
        let mut listed = false;
        let applied = crate::cache::reflected_trimmed(
            self.writer,
            self.api,
            &self.authz,
            ready,
            Translation::trim_for_cache,
        )
        .map(move |event| {
            // Asked first: an observer may forget the write once it sees it.
            let own = match (&event, &own_write) {
                (Ok(watcher::Event::Apply(tr)), Some(own_write)) => own_write(tr),
                _ => false,
            };
            (event, own)
        })
        .inspect(move |(event, _)| match event {
            Ok(event) => {
                observers.iter().for_each(|observe| observe(event));
                // Synced once the observers have the initial list too: the owner index
                // swaps its re-listed entries in at InitDone, and a waiter woken before
                // that (the globals' one-time sync) saw no old Translation to prune.
                if matches!(event, watcher::Event::InitDone) {
                    synced.send_replace(true);
                }
            }
            // A denial is reported (rate-limited) by the stream itself.
            Err(err) if crate::authz::is_forbidden_watch(err) => {}
            Err(err) => tracing::warn!(error = %err, "Translation watch error; retrying"),
        })
        .filter_map(move |(event, own)| {
            let listed_before = listed;
            listed |= matches!(event, Ok(watcher::Event::InitDone));
            let item = match event {
                Ok(event) => match to_pusher(event, listed_before, own) {
                    ToPusher::Object(o) => Some(Ok(*o)),
                    ToPusher::Relisted => {
                        tracing::info!("Translations re-listed; reconciling every Translation");
                        // Nobody listening (no pusher) is fine.
                        let _ = relisted_tx.send(());
                        None
                    }
                    ToPusher::Nothing => None,
                },
                Err(err) => Some(Err(err)),
            };
            std::future::ready(item)
        });
        Started {
            applied,
            relisted: relisted_rx,
        }
    }

    /// Runs the watch with nobody consuming the applied objects (no pusher here).
    pub async fn run(self) {
        let stream = self.start().applied;
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    }
}

#[cfg(test)]
impl TranslationInformer {
    /// Hands `events` to the store and the observers as the watch would (labels compacted),
    /// then counts as synced: unit tests seed the Translations this way, without a watch.
    pub(crate) fn replay(&mut self, events: Vec<watcher::Event<Translation>>) {
        for event in events {
            let event = match event {
                watcher::Event::Apply(mut tr) => {
                    tr.compact_labels();
                    watcher::Event::Apply(tr)
                }
                watcher::Event::InitApply(mut tr) => {
                    tr.compact_labels();
                    watcher::Event::InitApply(tr)
                }
                watcher::Event::Delete(mut tr) => {
                    tr.compact_labels();
                    watcher::Event::Delete(tr)
                }
                other => other,
            };
            self.writer.apply_watcher_event(&event);
            self.observers.iter().for_each(|observe| observe(&event));
        }
        self.synced_tx.send_replace(true);
    }
}

/// A started informer: what the pusher's controller reads.
pub struct Started<S> {
    /// Translations created or changed, and those of the first list.
    pub applied: S,
    /// One message each time a re-list has been stored (see the module doc).
    pub relisted: mpsc::UnboundedReceiver<()>,
}

/// What the pusher's controller gets of one watch event.
#[derive(Debug, PartialEq)]
enum ToPusher {
    Object(Box<Translation>),
    /// A re-list is stored: every Translation is to be reconciled.
    Relisted,
    Nothing,
}

/// `listed_before`: a list was complete before this event (this is a re-list); `own`: the
/// event is the pusher's own write (see the module doc).
fn to_pusher(event: watcher::Event<Translation>, listed_before: bool, own: bool) -> ToPusher {
    match event {
        watcher::Event::Apply(_) if own => ToPusher::Nothing,
        watcher::Event::Apply(o) => ToPusher::Object(Box::new(o)),
        // Held by the controller until the store is ready.
        watcher::Event::InitApply(o) if !listed_before => ToPusher::Object(Box::new(o)),
        watcher::Event::InitDone if listed_before => ToPusher::Relisted,
        _ => ToPusher::Nothing,
    }
}

/// Waits for the informer's initial list. (`Store::wait_until_ready` wakes only the last of
/// several concurrent waiters in kube-runtime 5, and the pusher's controller is one.)
#[derive(Clone)]
pub struct Synced(watch::Receiver<bool>);

impl Synced {
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the informer is gone: nothing to wait for any more.
        let _ = rx.wait_for(|synced| *synced).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(name: &str) -> Translation {
        Translation::new(name, "ns", crate::crd::TranslationSpec::default())
    }

    #[test]
    fn the_first_list_goes_object_by_object_a_relist_as_one_signal() {
        use watcher::Event::*;
        // The first list: each object (the controller holds them until the store is ready).
        assert_eq!(to_pusher(Init, false, false), ToPusher::Nothing);
        assert_eq!(
            to_pusher(InitApply(tr("a")), false, false),
            ToPusher::Object(Box::new(tr("a")))
        );
        assert_eq!(to_pusher(InitDone, false, false), ToPusher::Nothing);
        assert_eq!(
            to_pusher(Apply(tr("b")), true, false),
            ToPusher::Object(Box::new(tr("b")))
        );
        // A re-list: nothing until it is stored, then one signal.
        assert_eq!(to_pusher(Init, true, false), ToPusher::Nothing);
        assert_eq!(
            to_pusher(InitApply(tr("c")), true, false),
            ToPusher::Nothing
        );
        assert_eq!(to_pusher(InitDone, true, false), ToPusher::Relisted);
        // Deletions: the finalizer keeps a Translation until the pusher is done with it.
        assert_eq!(to_pusher(Delete(tr("a")), true, false), ToPusher::Nothing);
    }

    #[test]
    fn the_pushers_own_write_does_not_reach_its_queue() {
        use watcher::Event::*;
        assert_eq!(to_pusher(Apply(tr("a")), true, true), ToPusher::Nothing);
        assert_eq!(
            to_pusher(Apply(tr("a")), true, false),
            ToPusher::Object(Box::new(tr("a")))
        );
    }
}
