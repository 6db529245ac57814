//! Informer caches: a reflector store plus the stream of applied objects that feeds a
//! controller. The store is created here (not by `Controller::new`) so that readiness
//! checks can wait for its initial list. Cached objects are trimmed of
//! `metadata.managedFields`.

use std::fmt::Debug;
use std::hash::Hash;

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// A cache of `K` and the stream of its applied objects (for `Controller::for_stream`).
/// `on_synced` runs each time the initial (or a re-)list has been stored.
pub fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    on_synced: impl Fn() + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    // Nothing reads managedFields, and they are a large part of every object.
    let events = watcher(api, config).modify(|o| o.managed_fields_mut().clear());
    let stream = reflector::reflector(writer, events)
        .inspect(move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                on_synced();
            }
        })
        .default_backoff()
        .applied_objects();
    (reader, stream)
}
