//! Pure translation of Kubernetes objects into MidoNet backend resources.
//!
//! Nothing in this crate performs I/O or is async: Kubernetes object in, Translations out.
//! The controllers in the `midonet-kube-controllers` crate are the I/O shell around it.

pub mod entry;
pub mod meta;
pub mod model;
pub mod secret;
pub mod version;

pub use entry::TranslationResource;
pub use model::{BackendObject, Kind, ModelError, Resource};
pub use secret::Secret;
pub use version::TRANSLATION_VERSION;

// Translators: identities, names and the per-kind translation functions (see MAPPING.md).
pub mod addr;
pub mod config;
pub mod endpoints;
pub mod global;
pub mod ids;
pub mod naming;
pub mod node;
pub mod pod;
pub mod policy;
pub mod service;
pub mod translate;

pub use endpoints::{endpoint_slices, endpoints, service_endpoints, ServiceEndpoints, SliceView};
pub use global::global;
pub use ids::{id_for_key, mac_for_key, sub_id, tenant_namespace};
pub use naming::{translation_name, unversioned_translation_name};
pub use node::node;
pub use pod::pod;
pub use policy::{address_groups, network_policy, PolicyCluster};
pub use service::service;
pub use translate::{DesiredTranslation, Translated, TranslationWarning, TranslatorConfig};
