//! Informer caches: a reflector store plus the stream of applied objects that feeds a
//! controller. The store is created here (not by `Controller::new`) so that readiness
//! checks can wait for its initial list. Cached objects are trimmed of
//! `metadata.managedFields`: nothing reads them, and they are a large part of every object.
//!
//! Every watch of the process is built here, so that a list or watch the API server
//! refuses is reported as a named authorization error (see [`crate::authz`]) and not only
//! retried with backoff.

use std::fmt::Debug;
use std::hash::Hash;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::authz::Authz;
use crate::retry::RetryPolicy;

/// A cache of `K` and the stream of its applied objects (for `Controller::for_stream`).
/// `synced(true)` runs each time the initial (or a re-)list has been stored, `synced(false)`
/// when a list was refused for lack of rights (the cache is going stale until it is fixed).
pub fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflected(writer, api, config, authz, synced).applied_objects();
    (reader, stream)
}

/// The watcher events of `K`, stored into `writer`, with [`WatchBackoff`] on errors.
/// `synced` as for [`cached`].
pub fn reflected<K>(
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    reflected_trimmed(writer, api, config, authz, synced, |_| {})
}

/// [`reflected`], with `trim` dropping from each object what nobody reads before it is
/// cached (as client-go's transform functions do).
pub fn reflected_trimmed<K>(
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
    authz: &Authz,
    synced: impl Fn(bool) + Send + 'static,
    trim: fn(&mut K),
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let resource = K::plural(&K::DynamicType::default()).into_owned();
    let authz = authz.clone();
    let events = watcher(api, config).modify(move |o| {
        o.managed_fields_mut().clear();
        trim(o);
    });
    reflector::reflector(writer, events)
        .inspect(move |event| match event {
            Ok(watcher::Event::InitDone) => synced(true),
            Err(err) => {
                let denied = authz.report_watch(&resource, err);
                if denied && matches!(err, watcher::Error::InitialListFailed(_)) {
                    synced(false);
                }
            }
            Ok(_) => {}
        })
        .backoff(WATCH_RETRY.backoff())
}

/// Retry delays of a failed list/watch: 0.5 s doubling to at most 5 s (±20 % jitter), reset
/// by a successful event. kube-runtime's default grows to 30 s, which after an apiserver
/// restart of a few seconds left the watches down for up to half a minute more; a list or
/// watch costs the apiserver little, so retrying every 5 s at worst is cheap.
pub const WATCH_RETRY: RetryPolicy = RetryPolicy::new(
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(5),
);

/// Trims a cached object's metadata to its identity (name, namespace, uid, resourceVersion,
/// generation, timestamps), its labels when `labels`, and the annotations named in
/// `annotations`: for a controller that reads nothing else of it. Owner references,
/// finalizers and the other annotations of a Pod are a large part of its metadata at scale
/// (a `BTreeMap` node alone is half a kilobyte).
pub fn trim_metadata(meta: &mut ObjectMeta, labels: bool, annotations: &[&str]) {
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.self_link = None;
    if !labels {
        meta.labels = None;
    }
    meta.annotations = meta.annotations.take().and_then(|mut all| {
        all.retain(|k, _| annotations.contains(&k.as_str()));
        (!all.is_empty()).then_some(all)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            generate_name: Some("p-".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            annotations: Some(BTreeMap::from([
                ("keep".into(), "1".into()),
                ("drop".into(), "2".into()),
            ])),
            owner_references: Some(vec![OwnerReference {
                kind: "ReplicaSet".into(),
                name: "rs".into(),
                ..OwnerReference::default()
            }]),
            finalizers: Some(vec!["f".into()]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn trimmed_metadata_keeps_the_identity_and_what_is_asked_for() {
        let mut m = meta();
        trim_metadata(&mut m, true, &["keep"]);
        let want = ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            annotations: Some(BTreeMap::from([("keep".into(), "1".into())])),
            ..ObjectMeta::default()
        };
        assert_eq!(m, want);
    }

    #[test]
    fn without_labels_or_kept_annotations_both_maps_go() {
        let mut m = meta();
        trim_metadata(&mut m, false, &["other"]);
        assert_eq!((m.labels, m.annotations), (None, None));
        assert_eq!(m.name.as_deref(), Some("p"));
    }
}
