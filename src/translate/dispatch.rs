//! Which translator serves which controller: the one mapping shared by the runner (which
//! runs the translators) and `plan` (which computes what they would write), so that the two
//! cannot disagree about a kind.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::Store;
use midonet_translators::{Translated, TranslatorConfig};

use super::kinds::{EndpointsKind, NodeKind, PodKind, ServiceKind};
use super::slices::{EndpointSliceV1Beta1, EndpointsSource, ServiceSlicesKind};
use super::TranslatorKind;
use crate::config::Controller;

/// What is done with each translator [`for_each_translator`] visits.
pub trait Translators {
    /// A kind the generic runner translates.
    fn kind<K: TranslatorKind>(&mut self);
    /// The NetworkPolicy translator: policies and the address groups they share (see
    /// [`super::netpol`]).
    fn network_policy(&mut self);
}

/// Visits the translators of `controllers`, in their order, when endpoints come from
/// `source`. With EndpointSlices the Service translator translates the endpoints too (see
/// [`super::slices`]), and the endpoints controller has no translator of its own.
pub fn for_each_translator(
    controllers: &[Controller],
    source: EndpointsSource,
    translators: &mut impl Translators,
) {
    for controller in controllers {
        match (controller, source) {
            (Controller::Node, _) => translators.kind::<NodeKind>(),
            (Controller::Pod, _) => translators.kind::<PodKind>(),
            (Controller::Service, EndpointsSource::SlicesV1) => {
                translators.kind::<ServiceSlicesKind<EndpointSlice>>()
            }
            (Controller::Service, EndpointsSource::SlicesV1Beta1) => {
                translators.kind::<ServiceSlicesKind<EndpointSliceV1Beta1>>()
            }
            (Controller::Service, EndpointsSource::Endpoints) => translators.kind::<ServiceKind>(),
            (Controller::Endpoints, EndpointsSource::Endpoints) => {
                translators.kind::<EndpointsKind>()
            }
            (Controller::Endpoints, EndpointsSource::SlicesV1 | EndpointsSource::SlicesV1Beta1) => {
            }
            (Controller::NetworkPolicy, _) => translators.network_policy(),
            (Controller::Pusher | Controller::NodeAnnotator | Controller::LbIpam, _) => {}
        }
    }
}

/// What a reconcile of kind `K` translates `obj` into, reading its dependencies from
/// `dependencies` (`None` when the kind reads none).
pub fn translate_object<K: TranslatorKind>(
    cfg: &TranslatorConfig,
    obj: &K::Object,
    dependencies: Option<&Store<K::Dependency>>,
) -> Translated {
    let deps = match dependencies {
        Some(store) => K::dependencies(obj, store),
        None => Vec::new(),
    };
    K::translate_all(cfg, obj, &deps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::Dependency;

    /// The names of the kinds visited.
    #[derive(Default)]
    struct Names(Vec<String>);

    impl Translators for Names {
        fn kind<K: TranslatorKind>(&mut self) {
            let dep = if K::Dependency::WATCHED {
                format!("+{}", <K::Dependency as kube::Resource>::plural(&()))
            } else {
                String::new()
            };
            self.0.push(format!("{}{dep}", K::NAME));
        }
        fn network_policy(&mut self) {
            self.0.push("networkpolicy".into());
        }
    }

    fn names(controllers: &[Controller], source: EndpointsSource) -> Vec<String> {
        let mut names = Names::default();
        for_each_translator(controllers, source, &mut names);
        names.0
    }

    #[test]
    fn endpoints_are_translated_by_the_service_translator_when_they_come_from_slices() {
        assert_eq!(
            names(&Controller::ALL, EndpointsSource::Endpoints),
            [
                "node",
                "pod+nodes",
                "service",
                "endpoints+services",
                "networkpolicy"
            ]
        );
        assert_eq!(
            names(&Controller::ALL, EndpointsSource::SlicesV1),
            [
                "node",
                "pod+nodes",
                "service+endpointslices",
                "networkpolicy"
            ]
        );
        assert_eq!(
            names(
                &[Controller::Endpoints, Controller::Service],
                EndpointsSource::SlicesV1Beta1
            ),
            ["service+endpointslices"]
        );
        assert!(names(&[Controller::Pusher], EndpointsSource::Endpoints).is_empty());
    }
}
