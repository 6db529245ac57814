//! Where Services find their endpoints: EndpointSlices (`discovery.k8s.io`) when the
//! apiserver serves them, else Endpoints.
//!
//! The source is chosen once at startup by API discovery ([`discover`], [`choose`]):
//! `discovery.k8s.io/v1` (Kubernetes ≥ 1.21), else `v1beta1` (1.17–1.24), else the
//! Endpoints API. Endpoints are deprecated (1.33) and truncated at 1,000 addresses; slices
//! are not, and they carry the `serving`/`terminating` conditions kube-proxy uses.
//!
//! With slices, the Service controller also translates the endpoints
//! ([`ServiceSlicesKind`]): a Service has any number of slices (labelled
//! `kubernetes.io/service-name`), and their merged endpoints make one generation per service
//! port, owned by the Service. The Service is the natural owner: it lives as long as its
//! endpoint rules may, while slices come and go as they fill up or drain. Its Translations
//! are one set, pruned together, which is why the endpoints are not a controller of their
//! own (two controllers pruning one owner's Translations would delete each other's).
//!
//! # Upgrading from Endpoints
//!
//! The generations have the same names and IDs whichever source they come from
//! (`midonet_translators::endpoints`). Translations written from Endpoints are owned by the
//! Endpoints object of the same name; the Service controller takes them over
//! ([`TranslatorKind::inherited`]): a generation still wanted is re-owned by the Service in
//! place (its backend resources are untouched), one no longer wanted is pruned once its
//! replacement is pushed, as for any new generation.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use midonet_translators::endpoints::SERVICE_NAME_LABEL;
use midonet_translators::{SliceView, Translated, TranslatorConfig};
use serde::{Deserialize, Serialize};

use super::index::OwnerIndex;
use super::{Dependency, TranslatorKind};

/// The API group of EndpointSlices.
pub const GROUP: &str = "discovery.k8s.io";

/// Where endpoints are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointsSource {
    SlicesV1,
    SlicesV1Beta1,
    Endpoints,
}

impl std::fmt::Display for EndpointsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EndpointsSource::SlicesV1 => "discovery.k8s.io/v1 EndpointSlices",
            EndpointsSource::SlicesV1Beta1 => "discovery.k8s.io/v1beta1 EndpointSlices",
            EndpointsSource::Endpoints => "v1 Endpoints",
        })
    }
}

/// The source for what the apiserver serves: `served` lists, per version of
/// `discovery.k8s.io`, the resources it serves.
pub fn choose(served: &BTreeMap<String, Vec<String>>) -> EndpointsSource {
    let serves = |version: &str| {
        served
            .get(version)
            .is_some_and(|r| r.iter().any(|r| r == "endpointslices"))
    };
    if serves("v1") {
        EndpointsSource::SlicesV1
    } else if serves("v1beta1") {
        EndpointsSource::SlicesV1Beta1
    } else {
        EndpointsSource::Endpoints
    }
}

/// Asks the apiserver which versions of `discovery.k8s.io` it serves.
pub async fn discover(client: &Client) -> Result<EndpointsSource, kube::Error> {
    let groups = client.list_api_groups().await?;
    let mut served = BTreeMap::new();
    if let Some(group) = groups.groups.iter().find(|g| g.name == GROUP) {
        for v in &group.versions {
            let resources = client.list_api_group_resources(&v.group_version).await?;
            served.insert(
                v.version.clone(),
                resources.resources.into_iter().map(|r| r.name).collect(),
            );
        }
    }
    Ok(choose(&served))
}

/// A `discovery.k8s.io/v1beta1` EndpointSlice (Kubernetes 1.17–1.24), read as the v1
/// slice: its fields have the v1 shape but for an endpoint's node and zone, which v1beta1
/// carries in `topology` and which are moved to `nodeName`/`zone` as it is read
/// ([`EndpointV1Beta1`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", from = "RawSliceV1Beta1")]
pub struct EndpointSliceV1Beta1 {
    pub metadata: ObjectMeta,
    pub address_type: String,
    pub endpoints: Vec<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<EndpointPort>>,
}

/// A v1beta1 EndpointSlice as the apiserver sends it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSliceV1Beta1 {
    metadata: ObjectMeta,
    #[serde(default)]
    address_type: String,
    #[serde(default)]
    endpoints: Vec<EndpointV1Beta1>,
    #[serde(default)]
    ports: Option<Vec<EndpointPort>>,
}

impl From<RawSliceV1Beta1> for EndpointSliceV1Beta1 {
    fn from(raw: RawSliceV1Beta1) -> Self {
        EndpointSliceV1Beta1 {
            metadata: raw.metadata,
            address_type: raw.address_type,
            endpoints: raw
                .endpoints
                .into_iter()
                .map(EndpointV1Beta1::into_v1)
                .collect(),
            ports: raw.ports,
        }
    }
}

/// The topology key v1beta1 EndpointSlices carry an endpoint's node name under: the
/// EndpointSlice controller writes the pod's `spec.nodeName` there; `nodeName` itself is
/// filled on v1beta1 only behind a feature gate (alpha in 1.20).
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";
/// The topology key of an endpoint's zone on v1beta1 (`zone` in v1).
pub const ZONE_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";

/// One endpoint of a v1beta1 EndpointSlice: the v1 fields, plus `topology`.
#[derive(Deserialize)]
struct EndpointV1Beta1 {
    #[serde(flatten)]
    endpoint: Endpoint,
    #[serde(default)]
    topology: BTreeMap<String, String>,
}

impl EndpointV1Beta1 {
    /// The v1 endpoint: `nodeName` and `zone` taken from `topology` where unset.
    fn into_v1(mut self) -> Endpoint {
        if self.endpoint.node_name.is_none() {
            self.endpoint.node_name = self.topology.remove(HOSTNAME_TOPOLOGY_KEY);
        }
        if self.endpoint.zone.is_none() {
            self.endpoint.zone = self.topology.remove(ZONE_TOPOLOGY_KEY);
        }
        self.endpoint
    }
}

impl k8s_openapi::Resource for EndpointSliceV1Beta1 {
    const API_VERSION: &'static str = "discovery.k8s.io/v1beta1";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "EndpointSlice";
    const VERSION: &'static str = "v1beta1";
    const URL_PATH_SEGMENT: &'static str = "endpointslices";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for EndpointSliceV1Beta1 {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<EndpointSliceV1Beta1> for EndpointSlice {
    /// The v1 slice with the fields read here (see [`EndpointSliceV1Beta1`]).
    fn from(s: EndpointSliceV1Beta1) -> EndpointSlice {
        EndpointSlice {
            metadata: s.metadata,
            address_type: s.address_type,
            endpoints: s.endpoints,
            ports: s.ports,
        }
    }
}

/// An EndpointSlice of either version.
pub trait Slice: Dependency {
    fn view(&self) -> SliceView<'_>;
}

impl Dependency for EndpointSlice {}
impl Dependency for EndpointSliceV1Beta1 {}

impl Slice for EndpointSlice {
    fn view(&self) -> SliceView<'_> {
        SliceView::from(self)
    }
}

impl Slice for EndpointSliceV1Beta1 {
    fn view(&self) -> SliceView<'_> {
        SliceView {
            namespace: self.metadata.namespace.as_deref(),
            labels: self.metadata.labels.as_ref(),
            address_type: &self.address_type,
            endpoints: &self.endpoints,
            ports: self.ports.as_deref().unwrap_or_default(),
        }
    }
}

/// The Service of a slice: the `kubernetes.io/service-name` label, same namespace.
fn service_of<S: Slice>(slice: &S) -> Option<ObjectRef<Service>> {
    // An EndpointSlice, not a Translation: its labels are in its metadata.
    #[allow(clippy::disallowed_methods)]
    let name = slice.labels().get(SERVICE_NAME_LABEL)?;
    Some(ObjectRef::new(name).within(&slice.namespace()?))
}

/// The Service controller when endpoints come from EndpointSlices of type `S`: the
/// Service's own Translation plus the generations of its merged slices.
pub struct ServiceSlicesKind<S>(PhantomData<fn() -> S>);

impl<S: Slice> TranslatorKind for ServiceSlicesKind<S> {
    type Object = Service;
    type Dependency = S;
    const NAME: &'static str = "service";
    const NAMESPACED: bool = true;

    fn dependency_of(_: &Service) -> Option<ObjectRef<S>> {
        None
    }
    fn dependents_of(slice: &S, _: &Store<Service>) -> Vec<ObjectRef<Service>> {
        service_of(slice).into_iter().collect()
    }
    fn dependencies(svc: &Service, slices: &Store<S>) -> Vec<Arc<S>> {
        let want = ObjectRef::from_obj(svc);
        // A scan of the cache: slices are few per Service, and this runs once per
        // reconcile, not per event.
        let mut mine: Vec<Arc<S>> = slices
            .state()
            .into_iter()
            .filter(|s| service_of(&**s).as_ref() == Some(&want))
            .collect();
        // Order does not change the result; sorted for reproducible logs.
        mine.sort_by_key(|s| s.name_any());
        mine
    }
    fn translate(cfg: &TranslatorConfig, svc: &Service, slice: Option<&S>) -> Translated {
        translate_with_slices(cfg, svc, slice.into_iter().map(Slice::view))
    }
    fn translate_all(cfg: &TranslatorConfig, svc: &Service, slices: &[Arc<S>]) -> Translated {
        translate_with_slices(cfg, svc, slices.iter().map(|s| s.view()))
    }
    fn inherited(svc: &Service, index: &OwnerIndex) -> Vec<crate::crd::TranslationKey> {
        match svc.namespace() {
            Some(ns) => index.owned_by_ref("Endpoints", &ns, &svc.name_any()),
            None => Vec::new(),
        }
    }
}

/// The Service's Translation and its endpoints' generations.
pub fn translate_with_slices<'a>(
    cfg: &TranslatorConfig,
    svc: &Service,
    slices: impl IntoIterator<Item = SliceView<'a>>,
) -> Translated {
    let mut out = midonet_translators::service(cfg, svc);
    let endpoints = midonet_translators::endpoint_slices(cfg, svc, slices);
    out.translations.extend(endpoints.translations);
    out.warnings.extend(endpoints.warnings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        entries
            .iter()
            .map(|(v, r)| (v.to_string(), r.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn v1_is_preferred_then_v1beta1_then_endpoints() {
        let both = served(&[
            ("v1", &["endpointslices"]),
            ("v1beta1", &["endpointslices"]),
        ]);
        assert_eq!(choose(&both), EndpointsSource::SlicesV1);
        let beta = served(&[("v1beta1", &["endpointslices"])]);
        assert_eq!(choose(&beta), EndpointsSource::SlicesV1Beta1);
        assert_eq!(choose(&served(&[])), EndpointsSource::Endpoints);
        // A version of the group without the resource does not count.
        let other = served(&[("v1", &["somethingelse"])]);
        assert_eq!(choose(&other), EndpointsSource::Endpoints);
    }

    #[test]
    fn a_v1beta1_slice_reads_as_the_v1_one() {
        let json = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "ns",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.1"], "topology": {"kubernetes.io/hostname": "n1"},
                           "conditions": {"ready": false, "serving": true, "terminating": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        });
        let beta: EndpointSliceV1Beta1 = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(beta.endpoints[0].addresses, ["10.1.0.1"]);
        // v1beta1 names the endpoint's node in its topology only.
        assert_eq!(beta.endpoints[0].node_name.as_deref(), Some("n1"));
        let mut v1_json = json;
        v1_json["apiVersion"] = "discovery.k8s.io/v1".into();
        v1_json["endpoints"][0]["nodeName"] = "n1".into();
        let v1: EndpointSlice = serde_json::from_value(v1_json).unwrap();
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}
        }))
        .unwrap();
        let cfg = TranslatorConfig::default();
        let a = translate_with_slices(&cfg, &svc, [beta.view()]);
        let b = translate_with_slices(&cfg, &svc, [v1.view()]);
        // Service + one generation (the terminating, serving endpoint is the only one).
        assert_eq!(a.translations.len(), 2);
        assert_eq!(a, b);
        assert_eq!(service_of(&beta), Some(ObjectRef::new("web").within("ns")));
        let converted = EndpointSlice::from(beta);
        let c = translate_with_slices(&cfg, &svc, [SliceView::from(&converted)]);
        assert_eq!(a, c);
    }
}
