//! Names: Translation object names, backend display names and interface names.

use sha1::{Digest, Sha1};
use sha2::Sha256;

/// Longest name Kubernetes accepts for a Translation (a DNS-1123 subdomain).
pub const MAX_TRANSLATION_NAME: usize = 253;

/// Longest `name` MidoNet accepts for a Bridge, Router or Chain.
pub const MAX_BACKEND_NAME: usize = 255;

/// Name of a versioned Translation: `<kind lowercased>.<version>.<key>`, made a valid
/// DNS-1123 subdomain by [`dnsify`].
pub fn translation_name(kind: &str, version: &str, key: &str) -> String {
    dnsify(&format!("{}.{version}.{key}", kind.to_lowercase()))
}

/// Name of a Translation named by its backend entry alone: `<kind lowercased>.<key>`, made a
/// valid DNS-1123 subdomain by [`dnsify`].
///
/// For an entry that has no ID and whose path may be the same in every version (a host's
/// membership in a tunnel zone named by annotation): were its name versioned, a version bump
/// would make a "new" Translation for the very same backend entry while the "old" one still
/// claims it. The kinds using this never collide with versioned names because their kind
/// segments differ.
pub fn unversioned_translation_name(kind: &str, key: &str) -> String {
    dnsify(&format!("{}.{key}", kind.to_lowercase()))
}

/// Makes `name` a valid DNS-1123 subdomain of at most 253 characters, keeping distinct inputs
/// distinct.
///
/// - Uppercase letters are lowercased; any other character outside `[a-z0-9.-]` (notably
///   `/`) becomes `-`; dot-separated labels lose leading and trailing `-` and empty labels are
///   dropped.
/// - If that changed anything, `-<SHA-1 hex of the original>` is appended, so e.g. `a/b` and
///   `a-b` do not end up with the same name.
/// - If the result is longer than 253 characters, it is cut and the hash is appended (always,
///   even if nothing else changed), so long keys stay unique too.
pub fn dnsify(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let cleaned = mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".");
    let hash = || hex::encode(Sha1::digest(name.as_bytes()));
    if cleaned == name && !cleaned.is_empty() && cleaned.len() <= MAX_TRANSLATION_NAME {
        return cleaned;
    }
    // 40 hex digits plus the joining '-'.
    let room = MAX_TRANSLATION_NAME - 41;
    let mut head = cleaned;
    if head.len() > room {
        // Only ASCII is left, so any byte index is a character boundary.
        head.truncate(room);
    }
    let head = head.trim_end_matches(['-', '.']);
    if head.is_empty() {
        hash()
    } else {
        format!("{head}-{}", hash())
    }
}

/// True for a valid DNS-1123 subdomain (what Kubernetes requires of most object names).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TRANSLATION_NAME
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    first.is_ascii_alphanumeric()
                        && last.is_ascii_alphanumeric()
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        })
}

/// Caps a backend display name at MidoNet's 255 characters. Names are cosmetic (resources are
/// found by ID), but an over-long one makes MidoNet reject the whole resource: e.g.
/// `KUBE-NODE-` plus a 253-character node name.
pub fn backend_name(name: String) -> String {
    if name.len() <= MAX_BACKEND_NAME {
        return name;
    }
    let hash = hex::encode(&Sha256::digest(name.as_bytes())[..8]);
    let mut cut = MAX_BACKEND_NAME - hash.len() - 1;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash}", &name[..cut])
}

/// Name of the host interface that connects a Node to its bridge. The node agent creates it
/// under this name, so it is part of the contract with the agent.
pub const NODE_INTERFACE_NAME: &str = "midokube-mido";

/// Name of the host-side interface of a Pod, derived from the pod's `namespace/name` key:
/// `mido` plus the first 11 hex digits of SHA-1 of the key (15 characters, the Linux limit).
/// The CNI plugin derives the same name, so it is part of the contract with the plugin.
pub fn pod_interface_name(pod_key: &str) -> String {
    let hex = hex::encode(Sha1::digest(pod_key.as_bytes()));
    format!("mido{}", &hex[..11])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(translation_name("Node", "1", "node-1"), "node.1.node-1");
        assert_eq!(
            translation_name("midonet-global", "1", "cluster-router"),
            "midonet-global.1.cluster-router"
        );
    }

    #[test]
    fn changed_names_get_the_hash_of_the_original() {
        let original = "pod.1.ns/Web";
        let name = dnsify(original);
        let hash = hex::encode(Sha1::digest(original.as_bytes()));
        assert_eq!(name, format!("pod.1.ns-web-{hash}"));
        assert!(is_dns1123_subdomain(&name));
    }

    #[test]
    fn sanitising_keeps_names_unique() {
        let inputs = [
            "svc.1.a/b",
            "svc.1.a-b",
            "svc.1.A-b",
            "svc.1.a//b",
            "svc.1.a_b",
            "svc.1.a/b/",
        ];
        let names: std::collections::BTreeSet<_> = inputs.iter().map(|n| dnsify(n)).collect();
        assert_eq!(names.len(), inputs.len());
        for n in &names {
            assert!(is_dns1123_subdomain(n), "{n}");
        }
    }

    #[test]
    fn odd_names_become_valid() {
        for input in [
            "",
            "/",
            ".",
            "..",
            "-",
            "a..b",
            "-a.b-",
            "x.-y",
            "ÄÖ/ü",
            "endpoints-port.1.svc//abc",
            "a.1.",
        ] {
            let name = dnsify(input);
            assert!(is_dns1123_subdomain(&name), "{input:?} -> {name:?}");
        }
    }

    #[test]
    fn long_keys_are_shortened_and_stay_unique() {
        let long_a = format!("pod.1.{}", "a".repeat(400));
        let long_b = format!("pod.1.{}b", "a".repeat(399));
        let (a, b) = (dnsify(&long_a), dnsify(&long_b));
        assert!(a.len() <= MAX_TRANSLATION_NAME && b.len() <= MAX_TRANSLATION_NAME);
        assert!(is_dns1123_subdomain(&a) && is_dns1123_subdomain(&b));
        assert_ne!(a, b);
        // Exactly 253 valid characters are kept as they are.
        let exact = format!("p.{}", "a".repeat(251));
        assert_eq!(dnsify(&exact), exact);
        let over = format!("p.{}", "a".repeat(252));
        assert_ne!(dnsify(&over), over);
        assert!(dnsify(&over).len() <= MAX_TRANSLATION_NAME);
    }

    #[test]
    fn unversioned_names_do_not_depend_on_the_version() {
        let name = unversioned_translation_name("Pod-MAC", "web/mac/accaba000001");
        assert!(name.starts_with("pod-mac.web-mac-accaba000001-"), "{name}");
        assert!(is_dns1123_subdomain(&name));
        assert_ne!(
            translation_name("pod-mac", "1", "web"),
            translation_name("pod-mac", "2", "web")
        );
    }

    #[test]
    fn validity_check_rejects_bad_names() {
        for bad in ["", "A", "a_b", "-a", "a-", "a..b", ".a", "a.", "a/b"] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        for good in ["a", "a-b.c", "0.1.2", "node.1.worker-1"] {
            assert!(is_dns1123_subdomain(good), "{good:?}");
        }
    }

    #[test]
    fn backend_names_are_capped() {
        let short = "KUBE-NODE-n1".to_string();
        assert_eq!(backend_name(short.clone()), short);
        let long = format!("KUBE-NODE-{}", "n".repeat(253));
        let capped = backend_name(long.clone());
        assert_eq!(capped.len(), MAX_BACKEND_NAME);
        assert_ne!(capped, backend_name(format!("{long}x")));
        // Multi-byte characters are never split.
        let wide = "é".repeat(200);
        assert!(backend_name(wide).len() <= MAX_BACKEND_NAME);
    }

    #[test]
    fn pod_interface_names_fit_linux() {
        let name = pod_interface_name("default/web-0");
        assert_eq!(name.len(), 15);
        assert!(name.starts_with("mido"));
        assert_eq!(name, pod_interface_name("default/web-0"));
        assert_ne!(name, pod_interface_name("default/web-1"));
    }
}
