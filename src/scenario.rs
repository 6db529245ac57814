//! Sample cluster objects at scale, for the benchmark (`src/bin/bench/`) and the load and
//! chaos tests: Nodes with their host-id and tunnel-endpoint annotations preset (so no
//! nodeannotator is needed), Pods spread over the Nodes, ClusterIP Services with their
//! Endpoints, in a few namespaces. Only the objects: creating them is the caller's business
//! ([`api_in_namespace_of`] helps).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace, Node,
    NodeAddress, NodeSpec, NodeStatus, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Api, Client};
use midonet_translators::meta::{HOST_ID_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION};
use uuid::Uuid;

/// For namespaced objects: an `Api` in each object's own namespace (`default` if unset).
pub fn api_in_namespace_of<K>(client: &Client) -> impl Fn(&K) -> Api<K> + '_
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    move |o: &K| {
        Api::namespaced(
            client.clone(),
            o.meta().namespace.as_deref().unwrap_or("default"),
        )
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub nodes: usize,
    pub pods: usize,
    pub services: usize,
    pub endpoints_per_service: usize,
    pub namespaces: usize,
}

impl Scale {
    /// Scenario S of the benchmark: 50 Nodes, 2,000 Pods, 300 Services × 4 endpoints.
    pub const S: Scale = Scale {
        nodes: 50,
        pods: 2000,
        services: 300,
        endpoints_per_service: 4,
        namespaces: 4,
    };
}

/// Objects of one scenario; `prefix` keeps several scenarios in one cluster apart.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub prefix: String,
    pub scale: Scale,
    /// Simulator hosts, one per Node: (node name, host id).
    pub hosts: Vec<(String, Uuid)>,
}

fn meta(name: String, namespace: Option<String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        ..ObjectMeta::default()
    }
}

impl Scenario {
    pub fn new(prefix: &str, scale: Scale) -> Scenario {
        let hosts = (0..scale.nodes)
            .map(|i| (format!("{prefix}-node-{i}"), Uuid::new_v4()))
            .collect();
        Scenario {
            prefix: prefix.to_string(),
            scale,
            hosts,
        }
    }

    /// The namespace of Pod, Service and Endpoints `i` (and the `i`-th namespace).
    pub fn namespace(&self, i: usize) -> String {
        format!("{}-{}", self.prefix, i % self.scale.namespaces.max(1))
    }

    pub fn namespace_object(&self, i: usize) -> Namespace {
        let mut metadata = meta(self.namespace(i), None);
        // What NetworkPolicies select it by (the apiserver sets no such label before 1.21).
        metadata.labels = Some(BTreeMap::from([(
            "bench/namespace".to_string(),
            self.namespace(i),
        )]));
        Namespace {
            metadata,
            ..Namespace::default()
        }
    }

    pub fn node(&self, i: usize) -> Node {
        let ip = format!("192.168.{}.{}", i / 250, 1 + i % 250);
        let (name, host) = self
            .hosts
            .get(i)
            .cloned()
            .unwrap_or_else(|| (format!("{}-node-{i}", self.prefix), Uuid::nil()));
        let mut metadata = meta(name, None);
        metadata.annotations = Some(BTreeMap::from([
            (HOST_ID_ANNOTATION.to_string(), host.to_string()),
            (TUNNEL_ENDPOINT_IP_ANNOTATION.to_string(), ip.clone()),
        ]));
        Node {
            metadata,
            spec: Some(NodeSpec {
                pod_cidr: Some(format!("10.{}.{}.0/24", 100 + i / 256, i % 256)),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip,
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    pub fn pod_name(i: usize) -> String {
        format!("pod-{i}")
    }

    /// Pod `i` on node `i mod nodes`.
    pub fn pod(&self, i: usize) -> Pod {
        let node = match self.hosts.get(i % self.hosts.len().max(1)) {
            Some((name, _)) => name.clone(),
            None => format!("{}-node-0", self.prefix),
        };
        Pod {
            metadata: meta(Self::pod_name(i), Some(self.namespace(i))),
            spec: Some(PodSpec {
                node_name: Some(node),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("x".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    pub fn network_policy_name(i: usize) -> String {
        format!("np-{i}")
    }

    /// NetworkPolicy `i` (one per ten pods in the benchmark): in namespace `i`, it isolates
    /// the pods of its namespace for ingress and admits TCP 8080 from the pods of namespace
    /// `i + 1`, selected by namespace label.
    pub fn network_policy(&self, i: usize) -> k8s_openapi::api::networking::v1::NetworkPolicy {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": Self::network_policy_name(i), "namespace": self.namespace(i)},
            "spec": {
                "podSelector": {},
                "ingress": [{
                    "from": [{"namespaceSelector": {"matchLabels": {
                        "bench/namespace": self.namespace(i + 1)}}}],
                    "ports": [{"port": 8080, "protocol": "TCP"}]
                }]
            }
        }))
        .unwrap_or_default()
    }

    pub fn service_name(i: usize) -> String {
        format!("svc-{i}")
    }

    pub fn service(&self, i: usize) -> Service {
        Service {
            metadata: meta(Self::service_name(i), Some(self.namespace(i))),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    /// The Endpoints of Service `i`: `endpoints_per_service` addresses, port 8080.
    pub fn endpoints(&self, i: usize) -> Endpoints {
        let addresses = (0..self.scale.endpoints_per_service)
            .map(|k| EndpointAddress {
                ip: format!("10.{}.{}.{}", 200 + i / 250, i % 250, 10 + k % 240),
                ..EndpointAddress::default()
            })
            .collect();
        Endpoints {
            metadata: meta(Self::service_name(i), Some(self.namespace(i))),
            subsets: Some(vec![EndpointSubset {
                addresses: Some(addresses),
                ports: Some(vec![EndpointPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: Some("TCP".into()),
                    ..EndpointPort::default()
                }]),
                ..EndpointSubset::default()
            }]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_spread_and_named_consistently() {
        let s = Scenario::new(
            "t",
            Scale {
                nodes: 3,
                pods: 10,
                services: 2,
                endpoints_per_service: 4,
                namespaces: 2,
            },
        );
        let pod = s.pod(4);
        assert_eq!(pod.metadata.namespace.as_deref(), Some("t-0"));
        let node_name = pod.spec.and_then(|p| p.node_name);
        assert_eq!(node_name, s.node(1).metadata.name);
        let node = s.node(1);
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(HOST_ID_ANNOTATION),
            Some(&s.hosts[1].1.to_string())
        );
        assert_eq!(s.endpoints(1).metadata.name, s.service(1).metadata.name);
        let subsets = s.endpoints(1).subsets.unwrap_or_default();
        assert_eq!(subsets[0].addresses.as_ref().map(Vec::len), Some(4));
    }
}
