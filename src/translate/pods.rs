//! The one Pod cache of a process.
//!
//! The Pod translator and the NetworkPolicy translator both read every Pod, so they share
//! one watch and one store ([`crate::cache::SharedCache`]) instead of each keeping a copy:
//! at scale a Pod in memory weighs a couple of kilobytes however much of it is trimmed, and
//! the pods are most of the objects after the Translations. The cached Pod keeps what
//! either reads ([`trim_pod`]).

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec, PodStatus};
use kube::api::Api;
use kube::runtime::watcher;
use kube::Client;
use midonet_translators::meta::MAC_ADDRESS_ANNOTATION;

use crate::authz::Authz;
use crate::cache::SharedCache;

/// The process's Pod cache; watched once [`SharedCache::run`] runs.
pub fn cache(kube: Client, authz: &Authz) -> SharedCache<Pod> {
    SharedCache::new(
        Api::all(kube),
        watcher::Config::default().any_semantic(),
        authz,
        trim_pod,
    )
}

/// Keeps what `midonet_translators::pod` and `PolicyPod::from_pod` read: the identity,
/// the labels and the MAC address annotation in metadata, `spec.nodeName`,
/// `spec.hostNetwork`, the named container ports, `status.phase`, `status.podIP(s)`. The
/// named ports of all containers are kept in one container (and a pod without any keeps
/// none): `from_pod` reads them as one list, and each `Container` weighs two kilobytes in
/// memory however little of it is set.
pub fn trim_pod(pod: &mut Pod) {
    crate::cache::trim_metadata(&mut pod.metadata, true, &[MAC_ADDRESS_ANNOTATION]);
    if let Some(spec) = pod.spec.take() {
        let ports: Vec<ContainerPort> = spec
            .containers
            .into_iter()
            .flat_map(|c| c.ports.unwrap_or_default())
            .filter(|p| p.name.is_some())
            .map(|p| ContainerPort {
                name: p.name,
                container_port: p.container_port,
                protocol: p.protocol,
                ..ContainerPort::default()
            })
            .collect();
        let containers = if ports.is_empty() {
            Vec::new()
        } else {
            vec![Container {
                ports: Some(ports),
                ..Container::default()
            }]
        };
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            host_network: spec.host_network,
            containers,
            ..PodSpec::default()
        });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            ..PodStatus::default()
        });
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
    fn a_pod_trimmed_for_both_readers_translates_and_selects_as_the_full_one() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                         "annotations": {"midonet.org/host-id": "7d3a4e2c-1b0f-4a53-9d0e-2f7a4a4b9c01"}},
            "spec": {"podCIDR": "10.1.2.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]}
        }))
        .unwrap();
        let full: Pod = serde_json::from_value(json!({
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
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "10.1.2.7", "podIPs": [{"ip": "10.1.2.7"}],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "x", "imageID": ""}]}
        }))
        .unwrap();
        let mut trimmed = full.clone();
        trim_pod(&mut trimmed);

        // Trimmed: one container with the two named ports, no other annotation, no owner.
        let spec = trimmed.spec.as_ref().unwrap();
        assert_eq!(spec.containers.len(), 1);
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

        // The network-policy view: labels, address and both named ports.
        let policy_pod = PolicyPod::from_pod(&trimmed);
        assert_eq!(policy_pod.as_ref().map(|p| p.ports.len()), Some(2));
        assert_eq!(
            policy_pod.as_ref().map(|p| p.labels.len()),
            Some(2),
            "labels are kept"
        );
        assert_eq!(policy_pod, PolicyPod::from_pod(&full));
    }
}
