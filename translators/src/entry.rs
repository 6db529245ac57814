//! The wire form of one backend resource inside a Translation: `{kind, parent, body}`.
//!
//! This is what the Translation custom resource stores in `spec.resources` (and, for
//! Translations written by the original Go controller, in the legacy top-level `resources`).
//! It is deliberately stringly typed: the apiserver validates its shape, and the typed
//! backend model (`crate::model`) parses it into a concrete resource.

use serde::{Deserialize, Serialize};

/// One backend resource of a Translation, in push order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TranslationResource {
    /// Backend kind name, e.g. `Bridge`, `Port`, `HostInterfacePort`.
    #[serde(default)]
    pub kind: String,
    /// UUID of the parent resource (lowercase), or the empty string for top-level kinds.
    #[serde(default)]
    pub parent: String,
    /// The resource's JSON body, serialised as a string.
    #[serde(default)]
    pub body: String,
}

impl TranslationResource {
    pub fn new(
        kind: impl Into<String>,
        parent: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            parent: parent.into(),
            body: body.into(),
        }
    }
}
