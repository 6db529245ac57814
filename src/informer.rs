//! The one Translation informer of a process.
//!
//! The translators (no-op detection, pruning by owner) and the pusher (its work queue) read
//! the same Translations, so they share one watch and one reflector store instead of each
//! keeping a copy: at scale that copy is most of the process's memory. Observers (the
//! translators' owner index, the pusher's dependency index, readiness) see every watch event
//! after the store has applied it.
//!
//! Cached objects are trimmed of `metadata.managedFields`: nothing here reads them, and
//! server-side apply makes them a large part of every Translation.

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::crd::Translation;

/// Sees each watch event of the Translation informer.
pub type Observer = Box<dyn Fn(&watcher::Event<Translation>) + Send + Sync>;

/// The shared Translation store, and its not yet started event stream.
pub struct TranslationInformer {
    pub store: Store<Translation>,
    synced_tx: watch::Sender<bool>,
    observers: Vec<Observer>,
    api: Api<Translation>,
    writer: reflector::store::Writer<Translation>,
}

impl TranslationInformer {
    pub fn new(client: Client) -> Self {
        let (store, writer) = reflector::store();
        TranslationInformer {
            store,
            synced_tx: watch::Sender::new(false),
            observers: Vec::new(),
            api: Api::all(client),
            writer,
        }
    }

    /// Adds an observer; all of them must be added before [`Self::start`].
    pub fn observe(&mut self, observer: Observer) {
        self.observers.push(observer);
    }

    /// Resolves once the store holds the initial list.
    pub fn synced(&self) -> Synced {
        Synced(self.synced_tx.subscribe())
    }

    /// The stream of applied Translations (for the pusher's controller). The watch runs
    /// while the stream is polled; [`Self::run`] polls it for a process without a pusher.
    pub fn start(self) -> impl Stream<Item = Result<Translation, watcher::Error>> + Send + 'static {
        let observers = self.observers;
        let synced = self.synced_tx;
        let events = watcher(self.api, watcher::Config::default())
            .modify(|tr| tr.managed_fields_mut().clear());
        reflector::reflector(self.writer, events)
            .inspect(move |event| match event {
                Ok(event) => {
                    observers.iter().for_each(|observe| observe(event));
                    if let watcher::Event::InitDone = event {
                        synced.send_replace(true);
                    }
                }
                Err(err) => tracing::warn!(error = %err, "Translation watch error; retrying"),
            })
            .default_backoff()
            .applied_objects()
    }

    /// Runs the watch with nobody consuming the applied objects (no pusher here).
    pub async fn run(self) {
        let stream = self.start();
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
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
