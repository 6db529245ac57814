//! Types shared by all translators: their configuration, their output and their warnings.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

pub use crate::config::{TranslatorConfig, DEFAULT_TENANT};
use crate::entry::TranslationResource;
use crate::meta::VERSION_LABEL;
use crate::model::Resource;
use crate::naming::{translation_name, unversioned_translation_name, NameKey};

/// Namespace of the Translations of cluster-scoped Nodes.
pub const NODE_TRANSLATION_NAMESPACE: &str = "default";
/// Namespace of the global Translations.
pub const GLOBAL_TRANSLATION_NAMESPACE: &str = "kube-system";

/// One Translation the translator wants to exist. The runner adds the owner reference, the
/// owner-uid label and the finalizer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DesiredTranslation {
    /// A valid DNS-1123 subdomain of at most 253 characters.
    pub name: String,
    /// The owner's namespace; `default` for Nodes, `kube-system` for globals.
    pub namespace: String,
    /// [`VERSION_LABEL`] on every Translation (the version whose topology it belongs to;
    /// a version bump keeps the old version's Translations until the new one has taken
    /// over), [`GLOBAL_LABEL`] on globals.
    pub labels: BTreeMap<String, String>,
    /// Backend resources in push order: every resource comes after the ones it refers to
    /// within this Translation.
    pub resources: Vec<TranslationResource>,
}

/// A part of an object that could not be translated. The runner turns it into a Warning
/// event on the object; the rest of the object is still translated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TranslationWarning {
    /// CamelCase reason, e.g. `InvalidPodCIDR`.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// Output of translating one object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Translated {
    pub translations: Vec<DesiredTranslation>,
    pub warnings: Vec<TranslationWarning>,
}

/// Warning reasons, in one place so that events stay consistent across translators.
pub mod reason {
    pub const INVALID_HOST_ID: &str = "InvalidHostID";
    pub const MISSING_POD_CIDR: &str = "MissingPodCIDR";
    pub const INVALID_POD_CIDR: &str = "InvalidPodCIDR";
    pub const INVALID_NODE_ADDRESS: &str = "InvalidNodeAddress";
    pub const INVALID_TUNNEL_ZONE_ID: &str = "InvalidTunnelZoneID";
    pub const INVALID_TUNNEL_ENDPOINT_IP: &str = "InvalidTunnelEndpointIP";
    pub const INVALID_MAC_ADDRESS: &str = "InvalidMACAddress";
    pub const INVALID_POD_IP: &str = "InvalidPodIP";
    pub const INVALID_CLUSTER_IP: &str = "InvalidClusterIP";
    pub const UNSUPPORTED_PROTOCOL: &str = "UnsupportedProtocol";
    pub const INVALID_PORT: &str = "InvalidPort";
    pub const INVALID_ENDPOINT_ADDRESS: &str = "InvalidEndpointAddress";
    /// IPv6 where MidoNet's REST API only takes IPv4.
    pub const UNSUPPORTED_IP_FAMILY: &str = "UnsupportedIPFamily";
    /// An external IP or load-balancer ingress IP that is not an IP address.
    pub const INVALID_SERVICE_IP: &str = "InvalidServiceIP";
    /// An object without a name: nothing can be named after it.
    pub const MISSING_NAME: &str = "MissingName";
    /// A namespaced object without a namespace: its Translations would have nowhere to live.
    pub const MISSING_NAMESPACE: &str = "MissingNamespace";
    /// `sessionAffinity: ClientIP`, which is not served: connections are balanced one by one.
    pub const UNSUPPORTED_SESSION_AFFINITY: &str = "UnsupportedSessionAffinity";
}

/// The name of an object (non-empty), or the warning that nothing is made without one.
/// The apiserver never serves an object without a name; this is the answer for one that
/// did not come from there.
pub fn object_name<'a>(kind: &str, meta: &'a ObjectMeta) -> Result<&'a str, TranslationWarning> {
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => Ok(name),
        _ => Err(TranslationWarning::new(
            reason::MISSING_NAME,
            format!("the {kind} has no name: nothing is translated for it"),
        )),
    }
}

/// The namespace and name of a namespaced object, both non-empty: a Translation lives in
/// its object's namespace and is named after it. There is no default namespace: an object
/// without one (which the apiserver never serves) is not translated, and
/// [`NamespacedName::of`] says so as a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespacedName<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> NamespacedName<'a> {
    pub fn of(kind: &str, meta: &'a ObjectMeta) -> Result<Self, TranslationWarning> {
        let name = object_name(kind, meta)?;
        match meta.namespace.as_deref() {
            Some(namespace) if !namespace.is_empty() => Ok(NamespacedName { namespace, name }),
            _ => Err(TranslationWarning::new(
                reason::MISSING_NAMESPACE,
                format!(
                    "the {kind} {name:?} has no namespace: nothing is translated for it \
                     (its Translations would live in its namespace)"
                ),
            )),
        }
    }

    /// `namespace/name`, the key of the object's IDs.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl TranslationWarning {
    pub fn new(reason: &str, message: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

impl Translated {
    pub(crate) fn warn(&mut self, reason: &str, message: impl Into<String>) {
        self.warnings.push(TranslationWarning::new(reason, message));
    }

    /// Nothing translated, for the reason `warning` gives.
    pub(crate) fn refused(warning: TranslationWarning) -> Translated {
        Translated {
            translations: Vec::new(),
            warnings: vec![warning],
        }
    }
}

impl DesiredTranslation {
    /// A versioned Translation of `kind` named after `key` ([`translation_name`]).
    pub(crate) fn versioned(
        cfg: &TranslatorConfig,
        kind: &str,
        key: &NameKey,
        namespace: &str,
        resources: Vec<Resource>,
    ) -> Self {
        Self {
            name: translation_name(kind, &cfg.version, key),
            namespace: namespace.to_string(),
            labels: BTreeMap::from([(VERSION_LABEL.to_string(), cfg.version.clone())]),
            resources: entries(resources),
        }
    }

    /// A Translation named by its backend entry alone, without the version (see
    /// [`unversioned_translation_name`]), labelled with the version like every other.
    pub(crate) fn named_by_entry(
        cfg: &TranslatorConfig,
        kind: &str,
        key: &NameKey,
        namespace: &str,
        resources: Vec<Resource>,
    ) -> Self {
        Self {
            name: unversioned_translation_name(kind, &cfg.version, key),
            namespace: namespace.to_string(),
            labels: BTreeMap::from([(VERSION_LABEL.to_string(), cfg.version.clone())]),
            resources: entries(resources),
        }
    }
}

/// The Translation entries of typed resources, in the same order: the model's writer is the
/// one serialiser of every body a translator emits.
fn entries(resources: Vec<Resource>) -> Vec<TranslationResource> {
    resources.iter().map(Resource::to_entry).collect()
}
