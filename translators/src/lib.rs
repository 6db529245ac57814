//! Pure translation of Kubernetes objects into MidoNet backend resources.
//!
//! Nothing in this crate performs I/O or is async: Kubernetes object in, Translations out.
//! The controllers in the `midonet-kube-controllers` crate are the I/O shell around it.
//!
//! # Layers
//!
//! Every module uses only modules of lower layers, so there is no import cycle, and the
//! per-kind translators (the last layer) never use one another: what one translator's
//! resources are known by in another's (the cluster router, a Node's bridge, a service
//! port's chain, the policy filter chains) is in `topology` and `filters`, below all of
//! them. `tests/layering.rs` reads this list and fails on a module that uses one of its
//! own layer or above, or that is in no layer.
//!
//! - layer 0: `version`, `meta`, `entry`, `secret`
//! - layer 1: `model`, `naming`
//! - layer 2: `config`
//! - layer 3: `addr`, `ids`, `translate`
//! - layer 4: `topology`, `service_spec`, `annotations`, `edge_spec`
//! - layer 5: `filters`, `edge`, `affinity`
//! - layer 6: `global`, `node`, `pod`, `service`, `endpoints`, `policy`

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
pub mod affinity;
pub mod annotations;
pub mod config;
pub mod edge;
pub mod edge_spec;
pub mod endpoints;
pub mod filters;
pub mod global;
pub mod ids;
pub mod naming;
pub mod node;
pub mod pod;
pub mod policy;
pub mod service;
pub mod service_spec;
pub mod topology;
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
