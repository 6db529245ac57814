//! What every translation depends on besides the object itself.
//!
//! It sits below everything else in the crate: identities (`ids`), the translators' shared
//! types (`translate`) and the translators all depend on it, and it depends on nothing of
//! theirs.

use crate::version::TRANSLATION_VERSION;

/// Tenant the original integration used, and our default.
pub const DEFAULT_TENANT: &str = "midonetkube";

/// What every translation depends on besides the object itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranslatorConfig {
    /// MidoNet tenant: seeds every ID and is the `tenantId` of Bridges, Routers and Chains.
    pub tenant: String,
    /// Translation version: seeds every versioned name and every ID.
    pub version: String,
}

impl Default for TranslatorConfig {
    fn default() -> Self {
        Self {
            tenant: DEFAULT_TENANT.to_string(),
            version: TRANSLATION_VERSION.to_string(),
        }
    }
}
