//! What the controllers' informer caches hold after the sync, to set beside their peak RSS:
//! the serialized size of every cached object, trimmed as the controllers trim it (no
//! `managedFields`; Pods as the controllers' `CachedPod`). JSON is close to the size of
//! the strings the cached objects hold, so these are lower bounds of the caches' share
//! of the heap: maps, `Arc`s and the allocator's slack come on top.

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use midonet_kube_controllers::crd::Translation;
use midonet_kube_controllers::translate::pods::{trim_pod, CachedPod};
use serde::Serialize;
use serde_json::{json, Value};

use crate::Res;

/// Serialized bytes by what the caches hold.
#[derive(Debug, Default)]
pub struct CacheContent {
    pub translations: usize,
    pub translation_spec: usize,
    pub translation_status: usize,
    pub translation_metadata: usize,
    pub pods: usize,
    pub nodes: usize,
    pub services: usize,
    pub endpoints: usize,
}

fn size(v: &impl Serialize) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

async fn listed<K>(client: &Client) -> Res<Vec<K>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Sizes of the trimmed objects of every cached kind.
fn trimmed<K: Resource + Serialize>(mut items: Vec<K>, trim: impl Fn(&mut K)) -> usize {
    items
        .iter_mut()
        .map(|o| {
            o.meta_mut().managed_fields = None;
            trim(o);
            size(o)
        })
        .sum()
}

pub async fn read(client: &Client) -> Res<CacheContent> {
    let mut c = CacheContent::default();
    for mut t in listed::<Translation>(client).await? {
        c.translations += 1;
        t.metadata.managed_fields = None;
        c.translation_spec += size(&t.spec);
        c.translation_status += size(&t.status);
        c.translation_metadata += size(&t.metadata);
    }
    c.pods = listed::<CachedPod>(client)
        .await?
        .into_iter()
        .map(|mut p| {
            trim_pod(&mut p);
            size(&p.to_pod())
        })
        .sum();
    c.nodes = trimmed(listed::<Node>(client).await?, |_| {});
    c.services = trimmed(listed::<Service>(client).await?, |_| {});
    c.endpoints = trimmed(listed::<Endpoints>(client).await?, |_| {});
    Ok(c)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl CacheContent {
    pub fn total(&self) -> usize {
        self.translation_spec
            + self.translation_status
            + self.translation_metadata
            + self.pods
            + self.nodes
            + self.services
            + self.endpoints
    }

    /// The table's value: Translations (spec / status / metadata), then source objects.
    pub fn summary(&self) -> String {
        format!(
            "{:.1} MiB: Translations {:.1} / {:.1} / {:.1}; objects {:.1}",
            mib(self.total()),
            mib(self.translation_spec),
            mib(self.translation_status),
            mib(self.translation_metadata),
            mib(self.pods + self.nodes + self.services + self.endpoints),
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "translations": self.translations,
            "translationSpecBytes": self.translation_spec,
            "translationStatusBytes": self.translation_status,
            "translationMetadataBytes": self.translation_metadata,
            "podBytes": self.pods,
            "nodeBytes": self.nodes,
            "serviceBytes": self.services,
            "endpointsBytes": self.endpoints,
        })
    }
}
