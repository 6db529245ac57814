//! Pure translation of Kubernetes objects into MidoNet backend resources.
//!
//! Nothing in this crate performs I/O or is async: Kubernetes object in, Translations out.
//! The controllers in the `midonet-kube-controllers` crate are the I/O shell around it.

pub mod entry;
pub mod meta;
pub mod model;
pub mod version;

pub use entry::TranslationResource;
pub use model::{BackendObject, Kind, ModelError, Resource};
pub use version::TRANSLATION_VERSION;
