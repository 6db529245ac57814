//! The translated kinds: each ties a Kubernetes kind (and what its translation reads) to its
//! pure translator.

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use midonet_translators::{Translated, TranslatorConfig};

use super::pods::CachedPod;
use super::{NoDependency, TranslatorContext, TranslatorKind};
use crate::cache::SharedCache;

pub struct NodeKind;

impl TranslatorKind for NodeKind {
    type Object = Node;
    type Dependency = NoDependency;
    const NAME: &'static str = "node";
    const NAMESPACED: bool = false;

    fn translate(cfg: &TranslatorConfig, node: &Node, _: Option<&NoDependency>) -> Translated {
        midonet_translators::node(cfg, node)
    }
}

/// Pods read their Node (host id, bridge): a Node change re-translates its Pods.
pub struct PodKind;

impl TranslatorKind for PodKind {
    type Object = CachedPod;
    type Dependency = Node;
    const NAME: &'static str = "pod";
    const NAMESPACED: bool = true;

    /// The Pod cache is the process's one (see [`super::pods`]), shared with the
    /// NetworkPolicy translator; it keeps what `midonet_translators::pod` reads.
    fn shared_cache(shared: &TranslatorContext) -> Option<SharedCache<CachedPod>> {
        Some(shared.pods.clone())
    }

    fn dependency_of(pod: &CachedPod) -> Option<ObjectRef<Node>> {
        Some(ObjectRef::new(pod.node_name()?))
    }
    fn dependents_of(node: &Node, pods: &Store<CachedPod>) -> Vec<ObjectRef<CachedPod>> {
        let name = node.name_any();
        pods.state()
            .iter()
            .filter(|p| p.node_name() == Some(name.as_str()))
            .map(|p| ObjectRef::from_obj(&**p))
            .collect()
    }
    fn translate(cfg: &TranslatorConfig, pod: &CachedPod, node: Option<&Node>) -> Translated {
        midonet_translators::pod(cfg, &pod.to_pod(), node)
    }
}

pub struct ServiceKind;

impl TranslatorKind for ServiceKind {
    type Object = Service;
    type Dependency = NoDependency;
    const NAME: &'static str = "service";
    const NAMESPACED: bool = true;

    fn translate(cfg: &TranslatorConfig, svc: &Service, _: Option<&NoDependency>) -> Translated {
        midonet_translators::service(cfg, svc)
    }
}

/// Endpoints read their Service (same namespace/name): cluster IP and ports.
pub struct EndpointsKind;

impl TranslatorKind for EndpointsKind {
    type Object = Endpoints;
    type Dependency = Service;
    const NAME: &'static str = "endpoints";
    const NAMESPACED: bool = true;

    fn dependency_of(ep: &Endpoints) -> Option<ObjectRef<Service>> {
        Some(ObjectRef::new(&ep.name_any()).within(&ep.namespace()?))
    }
    fn dependents_of(svc: &Service, _: &Store<Endpoints>) -> Vec<ObjectRef<Endpoints>> {
        match svc.namespace() {
            Some(ns) => vec![ObjectRef::new(&svc.name_any()).within(&ns)],
            None => Vec::new(),
        }
    }
    fn translate(cfg: &TranslatorConfig, ep: &Endpoints, svc: Option<&Service>) -> Translated {
        midonet_translators::endpoints(cfg, ep, svc)
    }
}
