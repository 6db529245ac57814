//! Deterministic backend identities: UUIDs and MAC addresses.
//!
//! Every backend ID is a name-based (version 5, SHA-1) UUID, so re-translating the same object
//! always yields the same IDs and a restarted controller finds what it pushed before without
//! storing any mapping. The derivation chain is
//!
//! ```text
//! tenant namespace = uuid5(BASE_NAMESPACE,   "<version>/<tenant>")
//! object ID        = uuid5(tenant namespace, "<version>/<kind>/<key>")
//! sub-resource ID  = uuid5(object ID,        "<purpose>")
//! ```
//!
//! The Translation version enters the first two steps, and every sub-resource ID descends from
//! an object ID, so bumping the version changes every ID: the rebuilt resources never collide
//! with the ones still being deleted under the old version.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::config::TranslatorConfig;
use crate::model::MacAddr;

/// Fixed root of every derivation. It is the same root the original Go integration used, so
/// for an equal version, tenant, kind and key both produce the same IDs.
pub const BASE_NAMESPACE: Uuid = Uuid::from_u128(0x3978567e_91c4_465c_a0d1_67575f6b4c7f);

/// The namespace UUID of one tenant under one Translation version.
pub fn tenant_namespace(tenant: &str, version: &str) -> Uuid {
    Uuid::new_v5(&BASE_NAMESPACE, format!("{version}/{tenant}").as_bytes())
}

/// The ID of the object identified by `kind` and `key` (a `namespace/name` key for namespaced
/// objects, the bare name otherwise; pseudo kinds use whatever key identifies them).
pub fn id_for_key(cfg: &TranslatorConfig, kind: &str, key: &str) -> Uuid {
    let space = tenant_namespace(&cfg.tenant, &cfg.version);
    Uuid::new_v5(&space, format!("{}/{kind}/{key}", cfg.version).as_bytes())
}

/// A further ID belonging to the object whose ID is `base`, told apart by `purpose`.
///
/// `base` already depends on the version, so the result does too.
pub fn sub_id(base: Uuid, purpose: &str) -> Uuid {
    Uuid::new_v5(&base, purpose.as_bytes())
}

/// The Midokura OUI every generated MAC address starts with.
pub const MAC_PREFIX: [u8; 3] = [0xac, 0xca, 0xba];

/// A deterministic MAC address for `key`: the Midokura OUI plus the first three bytes of
/// SHA-256 of the key (written `ac:ca:ba:xx:xx:xx`, the form MidoNet's `MAC.regex` accepts).
///
/// Only 24 bits come from the key, so distinct keys may collide; it is used where a stable
/// value matters more than uniqueness (router-port MACs, which MidoNet would otherwise
/// randomise on every re-creation).
pub fn mac_for_key(key: &str) -> MacAddr {
    let hash = Sha256::digest(key.as_bytes());
    MacAddr([
        MAC_PREFIX[0],
        MAC_PREFIX[1],
        MAC_PREFIX[2],
        hash[0],
        hash[1],
        hash[2],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(version: &str) -> TranslatorConfig {
        TranslatorConfig {
            tenant: "midonetkube".into(),
            version: version.into(),
            edge: None,
        }
    }

    #[test]
    fn ids_are_deterministic() {
        let a = id_for_key(&cfg("1"), "Pod", "default/web");
        let b = id_for_key(&cfg("1"), "Pod", "default/web");
        assert_eq!(a, b);
        assert_eq!(sub_id(a, "x"), sub_id(b, "x"));
        assert_eq!(a.get_version_num(), 5);
    }

    #[test]
    fn version_changes_every_id() {
        let (v1, v2) = (cfg("1"), cfg("2"));
        assert_ne!(tenant_namespace("t", "1"), tenant_namespace("t", "2"));
        let a = id_for_key(&v1, "Node", "n1");
        let b = id_for_key(&v2, "Node", "n1");
        assert_ne!(a, b);
        assert_ne!(sub_id(a, "Router Port"), sub_id(b, "Router Port"));
    }

    #[test]
    fn inputs_are_separated() {
        let c = cfg("1");
        let base = id_for_key(&c, "Node", "n1");
        assert_ne!(base, id_for_key(&c, "Pod", "n1"));
        assert_ne!(base, id_for_key(&c, "Node", "n2"));
        let other_tenant = TranslatorConfig {
            tenant: "other".into(),
            version: "1".into(),
            edge: None,
        };
        assert_ne!(base, id_for_key(&other_tenant, "Node", "n1"));
        assert_ne!(sub_id(base, "a"), sub_id(base, "b"));
    }

    #[test]
    fn matches_the_documented_derivation() {
        // Recomputed by hand from the formula in the module documentation.
        let space = Uuid::new_v5(&BASE_NAMESPACE, b"4/midonetkube");
        let id = Uuid::new_v5(&space, b"4/Node/n1");
        assert_eq!(id_for_key(&cfg("4"), "Node", "n1"), id);
        assert_eq!(
            BASE_NAMESPACE.to_string(),
            "3978567e-91c4-465c-a0d1-67575f6b4c7f"
        );
    }

    #[test]
    fn mac_has_the_midokura_prefix() {
        let mac = mac_for_key("n1").to_string();
        assert!(mac.starts_with("ac:ca:ba:"), "{mac}");
        assert_eq!(mac.len(), 17);
        assert_eq!(mac, mac_for_key("n1").to_string());
        assert_ne!(mac_for_key("n1"), mac_for_key("n2"));
        // sha256("n1") starts with the bytes below.
        let h = Sha256::digest(b"n1");
        assert_eq!(
            mac,
            format!("ac:ca:ba:{:02x}:{:02x}:{:02x}", h[0], h[1], h[2])
        );
    }
}
