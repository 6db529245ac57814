//! The one Pod cache of a process.
//!
//! The Pod translator and the NetworkPolicy translator both read every Pod, so they share
//! one watch and one store ([`crate::cache::SharedCache`]) instead of each keeping a copy.
//! The pods are most of the cached objects after the Translations, and a `k8s_openapi`
//! `Pod` is large in memory before any field is set (its `PodSpec` and each `Container`
//! hold every field of the API). So the watch deserializes each Pod straight into a
//! [`CachedPod`]: the fields either translator reads and nothing else. The translators,
//! which take a `Pod`, get one built from it ([`CachedPod::to_pod`]).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodIP, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::{Client, Resource};
use midonet_translators::meta::MAC_ADDRESS_ANNOTATION;
use serde::{Deserialize, Deserializer};

use crate::authz::Authz;
use crate::cache::SharedCache;

/// The process's Pod cache; watched once [`SharedCache::run`] runs.
pub fn cache(kube: Client, authz: &Authz) -> SharedCache<CachedPod> {
    SharedCache::new(Api::all(kube), authz, trim_pod)
}

/// Trims what the deserialization kept of the metadata to the identity, the labels (policy
/// selectors) and the MAC address annotation.
pub fn trim_pod(pod: &mut CachedPod) {
    crate::cache::trim_metadata(&mut pod.metadata, true, &[MAC_ADDRESS_ANNOTATION]);
}

/// A Pod as the process caches it: what `midonet_translators::pod` and `PolicyPod::from_pod`
/// read. Besides the metadata ([`trim_pod`]), `spec.nodeName`, `spec.hostNetwork`, the
/// named container ports, `status.phase` and `status.podIP(s)`. It is the Pod's API
/// resource (`v1` `pods`), read through a narrower type.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<CachedPodStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    pub node_name: Option<String>,
    pub host_network: Option<bool>,
    /// The named ports of all containers, in their order: `from_pod` reads them as one list.
    #[serde(default, rename = "containers", deserialize_with = "named_ports")]
    pub named_ports: Vec<ContainerPort>,
    /// The named ports of the sidecars (init containers with `restartPolicy: Always`), which
    /// serve for the pod's life as its containers do (`serving_containers`).
    #[serde(
        default,
        rename = "initContainers",
        deserialize_with = "sidecar_named_ports"
    )]
    pub sidecar_named_ports: Vec<ContainerPort>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    pub phase: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pub pod_ips: Option<Vec<PodIP>>,
}

/// A container as the cache reads it: its ports, and whether it restarts always (a sidecar,
/// when it is an init container).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ports {
    #[serde(default)]
    ports: Option<Vec<ContainerPort>>,
    #[serde(default)]
    restart_policy: Option<String>,
}

/// Reads `spec.containers` for their named ports only (name, number, protocol).
fn named_ports<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContainerPort>, D::Error> {
    let containers: Option<Vec<Ports>> = Option::deserialize(d)?;
    Ok(only_named(containers.into_iter().flatten()))
}

/// Reads `spec.initContainers` for the named ports of the sidecars only.
fn sidecar_named_ports<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContainerPort>, D::Error> {
    let containers: Option<Vec<Ports>> = Option::deserialize(d)?;
    let sidecars = containers
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    Ok(only_named(sidecars))
}

/// The named ports of `containers` (name, number, protocol), in their order.
fn only_named(containers: impl Iterator<Item = Ports>) -> Vec<ContainerPort> {
    containers
        .flat_map(|c| c.ports.unwrap_or_default())
        .filter(|p| p.name.is_some())
        .map(|p| ContainerPort {
            name: p.name,
            container_port: p.container_port,
            protocol: p.protocol,
            ..ContainerPort::default()
        })
        .collect()
}

impl CachedPod {
    /// `pod` as the Pod cache holds it: read through this type, as the watch reads it, and
    /// trimmed ([`trim_pod`]).
    pub fn cached(pod: &Pod) -> Result<CachedPod, serde_json::Error> {
        let mut cached: CachedPod = serde_json::from_value(serde_json::to_value(pod)?)?;
        trim_pod(&mut cached);
        Ok(cached)
    }

    /// The Pod the translators take: these fields, the named ports of the containers and
    /// sidecars in one container (none for a pod without any).
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: self.metadata.clone(),
            spec: self.spec.as_ref().map(|s| PodSpec {
                node_name: s.node_name.clone(),
                host_network: s.host_network,
                containers: if s.named_ports.is_empty() && s.sidecar_named_ports.is_empty() {
                    Vec::new()
                } else {
                    let ports = s.named_ports.iter().chain(&s.sidecar_named_ports);
                    vec![Container {
                        ports: Some(ports.cloned().collect()),
                        ..Container::default()
                    }]
                },
                ..PodSpec::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                pod_ip: s.pod_ip.clone(),
                pod_ips: s.pod_ips.clone(),
                ..PodStatus::default()
            }),
        }
    }

    pub fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use midonet_translators::policy::PolicyPod;
    use midonet_translators::TranslatorConfig;
    use serde_json::json;

    /// A pod with everything both readers use, and much that neither does.
    #[test]
    fn a_cached_pod_translates_and_selects_as_the_full_one() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                         "annotations": {"midonet.org/host-id": "7d3a4e2c-1b0f-4a53-9d0e-2f7a4a4b9c01"}},
            "spec": {"podCIDR": "10.1.2.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]}
        }))
        .unwrap();
        let full_json = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "0f0e0d0c-0000-4000-8000-000000000002",
                         "generateName": "p-",
                         "annotations": {"midonet.org/mac-address": "02:00:00:00:00:01", "other": "x"},
                         "labels": {"app": "web", "tier": "front"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "0f0e0d0c-0000-4000-8000-000000000003"}],
                         "finalizers": ["f"]},
            "spec": {"nodeName": "n1",
                     "containers": [
                         {"name": "c", "image": "x", "env": [{"name": "A", "value": "1"}],
                          "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 81}]},
                         {"name": "d", "image": "x"},
                         {"name": "e", "image": "x", "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}]}],
                     "initContainers": [
                         {"name": "setup", "image": "x", "ports": [{"name": "setup", "containerPort": 99}]},
                         {"name": "proxy", "image": "x", "restartPolicy": "Always",
                          "ports": [{"name": "tls", "containerPort": 8443}]}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "10.1.2.7", "podIPs": [{"ip": "10.1.2.7"}],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "x", "imageID": ""}]}
        });
        let full: Pod = serde_json::from_value(full_json.clone()).unwrap();
        let mut cached: CachedPod = serde_json::from_value(full_json).unwrap();
        trim_pod(&mut cached);
        let trimmed = cached.to_pod();

        // Cached: the two named ports, no other container field, no other annotation, no
        // owner.
        let spec = trimmed.spec.as_ref().unwrap();
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(
            spec.containers[0].ports.as_ref().map(|p| p
                .iter()
                .map(|p| (p.name.as_deref(), p.container_port))
                .collect::<Vec<_>>()),
            Some(vec![
                (Some("http"), 80),
                (Some("dns"), 53),
                (Some("tls"), 8443)
            ]),
            "the containers' named ports and the sidecar's, not the plain init container's"
        );
        assert_eq!(spec.containers[0].env, None);
        assert_eq!(spec.volumes, None);
        assert_eq!(trimmed.status.as_ref().unwrap().conditions, None);
        assert_eq!(trimmed.metadata.owner_references, None);
        assert_eq!(trimmed.metadata.finalizers, None);
        assert_eq!(
            trimmed
                .metadata
                .annotations
                .as_ref()
                .map(|a| a.keys().cloned().collect::<Vec<_>>()),
            Some(vec![MAC_ADDRESS_ANNOTATION.to_string()])
        );

        // The Pod translator's output, MAC address included.
        let cfg = TranslatorConfig::default();
        let want = midonet_translators::pod(&cfg, &full, Some(&node));
        assert!(!want.translations.is_empty());
        assert!(serde_json::to_string(&want.translations)
            .unwrap()
            .contains("02:00:00:00:00:01"));
        assert_eq!(midonet_translators::pod(&cfg, &trimmed, Some(&node)), want);

        // The network-policy view: labels, address and the three named ports.
        let policy_pod = PolicyPod::from_pod(&trimmed);
        assert_eq!(policy_pod.as_ref().map(|p| p.ports.len()), Some(3));
        assert_eq!(
            policy_pod.as_ref().map(|p| p.labels.len()),
            Some(2),
            "labels are kept"
        );
        assert_eq!(policy_pod, PolicyPod::from_pod(&full));
    }

    #[test]
    fn a_pod_without_named_ports_keeps_no_container() {
        let json = json!({
            "metadata": {"name": "p", "namespace": "x", "labels": {"pod": "a"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 81}]}]},
            "status": {"phase": "Running", "podIP": "10.1.1.5"}
        });
        let full: Pod = serde_json::from_value(json.clone()).unwrap();
        let cached: CachedPod = serde_json::from_value(json).unwrap();
        let trimmed = cached.to_pod();
        assert!(trimmed.spec.as_ref().unwrap().containers.is_empty());
        let policy_pod = PolicyPod::from_pod(&trimmed);
        assert!(policy_pod.is_some());
        assert_eq!(policy_pod, PolicyPod::from_pod(&full));
    }
}
