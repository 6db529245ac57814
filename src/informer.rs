//! The one Translation informer of a process.
//!
//! The translators (no-op detection, pruning by owner) and the pusher (its work queue) read
//! the same Translations, so they share one watch and one reflector store instead of each
//! keeping a copy: at scale that copy is most of the process's memory. Observers (the
//! translators' owner index, the pusher's dependency index, readiness) see every watch event
//! after the store has applied it.
//!
//! The watch is built by [`crate::cache::reflected`]: managedFields trimmed, refused lists
//! reported as authorization errors.

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;

use crate::authz::Authz;
use crate::crd::Translation;
use crate::health::Health;

/// Name of the readiness check of the Translation informer.
pub const READY_CHECK: &str = "translations-cache";

/// Sees each watch event of the Translation informer.
pub type Observer = Box<dyn Fn(&watcher::Event<Translation>) + Send + Sync>;

/// The shared Translation store, and its not yet started event stream.
pub struct TranslationInformer {
    pub store: Store<Translation>,
    authz: Authz,
    health: Health,
    synced_tx: watch::Sender<bool>,
    observers: Vec<Observer>,
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
            api: Api::all(client),
            writer,
        }
    }

    /// Adds an observer; all of them must be added before [`Self::start`].
    pub fn observe(&mut self, observer: Observer) {
        self.observers.push(observer);
    }

    /// Resolves once the store holds the initial list and every observer has seen it.
    pub fn synced(&self) -> Synced {
        Synced(self.synced_tx.subscribe())
    }

    /// The stream of applied Translations (for the pusher's controller). The watch runs
    /// while the stream is polled; [`Self::run`] polls it for a process without a pusher.
    pub fn start(self) -> impl Stream<Item = Result<Translation, watcher::Error>> + Send + 'static {
        let observers = self.observers;
        let synced = self.synced_tx;
        let health = self.health;
        let ready = move |ok| health.set(READY_CHECK, ok);
        crate::cache::reflected(
            self.writer,
            self.api,
            watcher::Config::default(),
            &self.authz,
            ready,
        )
        .inspect(move |event| match event {
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
