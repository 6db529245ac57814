//! Names: Translation object names, backend display names and interface names.
//!
//! A Translation's name is a function of the Translation version, like every backend ID:
//! a version's Translations keep their names whatever release translates them, so the
//! controllers run at an earlier version (a rollback) find that version's Translations
//! where they left them. How a version names them is its [`NameScheme`]; both schemes make
//! a valid DNS-1123 subdomain of at most 253 characters and keep distinct keys distinct.

use std::net::Ipv4Addr;

use sha1::{Digest, Sha1};
use sha2::Sha256;

/// Longest name Kubernetes accepts for a Translation (a DNS-1123 subdomain).
pub const MAX_TRANSLATION_NAME: usize = 253;

/// Longest `name` MidoNet accepts for a Bridge, Router or Chain.
pub const MAX_BACKEND_NAME: usize = 255;

/// How the Translations of a version are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameScheme {
    /// The original integration's, written by version 1: `<kind>.<version>.<key>`, the
    /// key's parts joined by `/` (after their markers: `<pod>/ip/<ip>/<mac>`) and made a
    /// DNS-1123 subdomain by [`dnsify`], which replaces each `/` and then appends the 40
    /// hex digits of the SHA-1 of the whole name. Frozen: a rollback to version 1 must
    /// find version 1's Translations under their names.
    Dotted,
    /// Every later version's: `<kind>.<version>.<part>.<part>…` (see [`NameKey`]), as it is
    /// when every part is what the apiserver allows, a short hash only where a key is not
    /// readable or the name too long.
    Readable,
}

impl NameScheme {
    /// The versions written with [`NameScheme::Dotted`]: the ones released before
    /// [`NameScheme::Readable`].
    pub const DOTTED_VERSIONS: &'static [&'static str] = &["1"];

    /// The scheme of `version`.
    pub fn of(version: &str) -> NameScheme {
        if NameScheme::DOTTED_VERSIONS.contains(&version) {
            NameScheme::Dotted
        } else {
            NameScheme::Readable
        }
    }
}

/// One part of the key a Translation is named after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    /// A Kubernetes object's name, a DNS-1123 subdomain (it may hold dots): at most one
    /// per key, and then with no [`Part::Label`] that may be empty, so that the labels of a
    /// readable name still tell the parts apart.
    Object(&'a str),
    /// A DNS-1123 label (no dot): a Service's or port's name, a MAC in hex, a hash. An
    /// empty one (an unnamed port) is left out of a readable name.
    Label(&'a str),
    /// An IPv4 address, written dotted (four labels).
    Ipv4(Ipv4Addr),
    /// What only needs to be told apart, not read (a tunnel zone and host ID pair): whole
    /// under [`NameScheme::Dotted`], its 12-hex-digit SHA-256 in a readable name.
    Hashed(&'a str),
}

/// The key a Translation is named after: its parts, each after the marker version 1 wrote
/// before it, if any (`mac`, `ip`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameKey<'a> {
    parts: Vec<(Option<&'static str>, Part<'a>)>,
}

impl<'a> NameKey<'a> {
    /// A key of one part.
    pub fn new(part: Part<'a>) -> NameKey<'a> {
        NameKey {
            parts: vec![(None, part)],
        }
    }

    /// The key of an object's one Translation: the object's name.
    pub fn object(name: &'a str) -> NameKey<'a> {
        NameKey::new(Part::Object(name))
    }

    /// The key with `part` added.
    pub fn then(mut self, part: Part<'a>) -> NameKey<'a> {
        self.parts.push((None, part));
        self
    }

    /// The key with `part` added, written `<marker>/<part>` under [`NameScheme::Dotted`]
    /// (and `<part>` in a readable name).
    pub fn marked(mut self, marker: &'static str, part: Part<'a>) -> NameKey<'a> {
        self.parts.push((Some(marker), part));
        self
    }

    /// The key as [`NameScheme::Dotted`] writes it: the parts joined by `/`.
    pub fn dotted(&self) -> String {
        self.parts
            .iter()
            .map(|(marker, part)| {
                let text = match part {
                    Part::Object(s) | Part::Label(s) | Part::Hashed(s) => s.to_string(),
                    Part::Ipv4(ip) => ip.to_string(),
                };
                match marker {
                    Some(m) => format!("{m}/{text}"),
                    None => text,
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Name of a versioned Translation of `kind` under `version`'s [`NameScheme`].
pub fn translation_name(kind: &str, version: &str, key: &NameKey) -> String {
    let kind = kind.to_lowercase();
    match NameScheme::of(version) {
        NameScheme::Dotted => dnsify(&format!("{kind}.{version}.{}", key.dotted())),
        NameScheme::Readable => readable_name(&[&kind, version], key),
    }
}

/// Name of a Translation named by its backend entry alone, without the version (the scheme
/// is still `version`'s).
///
/// For an entry that has no ID and whose path may be the same in every version (a host's
/// membership in a tunnel zone named by annotation): were its name versioned, a version bump
/// would make a "new" Translation for the very same backend entry while the "old" one still
/// claims it. The kinds using this never collide with versioned names because their kind
/// segments differ.
pub fn unversioned_translation_name(kind: &str, version: &str, key: &NameKey) -> String {
    let kind = kind.to_lowercase();
    match NameScheme::of(version) {
        NameScheme::Dotted => dnsify(&format!("{kind}.{}", key.dotted())),
        NameScheme::Readable => readable_name(&[&kind], key),
    }
}

/// Hex digits of the hash a readable name ends with when its key is not readable as it is.
const READABLE_HASH_LEN: usize = 12;

/// `<prefix>.<part>.<part>…` when every prefix label is a DNS-1123 label, every part what
/// [`Part`] says it is, and the whole fits in 253 characters. Otherwise the text made a
/// valid name as [`dnsify`] does, cut to leave room, with `-` and 12 hex digits of the
/// SHA-256 of the prefix and the parts appended (an encoding that tells every key apart),
/// so that the name stays valid and distinct keys stay distinct.
fn readable_name(prefix: &[&str], key: &NameKey) -> String {
    let mut labels: Vec<String> = prefix.iter().map(|l| l.to_string()).collect();
    let mut readable = prefix.iter().all(|l| is_dns1123_label(l));
    let mut encoded: Vec<String> = labels.clone();
    for (_, part) in &key.parts {
        let (text, ok, tag) = match part {
            Part::Object(s) => (s.to_string(), is_dns1123_subdomain(s), "object"),
            Part::Label(s) => (s.to_string(), s.is_empty() || is_dns1123_label(s), "label"),
            Part::Ipv4(ip) => (ip.to_string(), true, "ipv4"),
            Part::Hashed(s) => (short_hex(s, READABLE_HASH_LEN), true, "hashed"),
        };
        encoded.push(format!("{tag}:{text}"));
        readable &= ok;
        if !text.is_empty() {
            labels.push(text);
        }
    }
    let text = labels.join(".");
    if readable && text.len() <= MAX_TRANSLATION_NAME {
        return text;
    }
    let hash = short_hex(
        &serde_json::Value::from(encoded).to_string(),
        READABLE_HASH_LEN,
    );
    with_hash(sanitized(&text), &hash)
}

/// The first `len` hex digits of the SHA-256 of `text`.
fn short_hex(text: &str, len: usize) -> String {
    let mut hex = hex::encode(Sha256::digest(text.as_bytes()));
    hex.truncate(len);
    hex
}

/// `name` with every character outside `[a-z0-9.-]` mapped (uppercase lowercased, others
/// to `-`), and its dot-separated labels without leading or trailing `-`, empty ones
/// dropped.
fn sanitized(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// `<head>-<hash>`, `head` (sanitized) cut so that the whole fits in 253 characters; the
/// hash alone when nothing of `head` is left.
fn with_hash(mut head: String, hash: &str) -> String {
    let room = MAX_TRANSLATION_NAME - hash.len() - 1;
    if head.len() > room {
        // Only ASCII is left, so any byte index is a character boundary.
        head.truncate(room);
    }
    let head = head.trim_end_matches(['-', '.']);
    if head.is_empty() {
        hash.to_string()
    } else {
        format!("{head}-{hash}")
    }
}

/// Makes `name` a valid DNS-1123 subdomain of at most 253 characters, keeping distinct inputs
/// distinct ([`NameScheme::Dotted`]).
///
/// - Uppercase letters are lowercased; any other character outside `[a-z0-9.-]` (notably
///   `/`) becomes `-`; dot-separated labels lose leading and trailing `-` and empty labels are
///   dropped.
/// - If that changed anything, `-<SHA-1 hex of the original>` is appended, so e.g. `a/b` and
///   `a-b` do not end up with the same name.
/// - If the result is longer than 253 characters, it is cut and the hash is appended (always,
///   even if nothing else changed), so long keys stay unique too.
pub fn dnsify(name: &str) -> String {
    let cleaned = sanitized(name);
    if cleaned == name && !cleaned.is_empty() && cleaned.len() <= MAX_TRANSLATION_NAME {
        return cleaned;
    }
    with_hash(cleaned, &hex::encode(Sha1::digest(name.as_bytes())))
}

/// True for a DNS-1123 subdomain without a dot.
fn is_dns1123_label(name: &str) -> bool {
    !name.contains('.') && is_dns1123_subdomain(name)
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
        for v in ["1", "2"] {
            let node = translation_name("Node", v, &NameKey::object("node-1"));
            assert_eq!(node, format!("node.{v}.node-1"));
            let global =
                translation_name("midonet-global", v, &NameKey::new(Part::Label("chains")));
            assert_eq!(global, format!("midonet-global.{v}.chains"));
        }
    }

    /// The keys the translators name their Translations after, by kind.
    fn keys<'a>(hex: &'a str, zone_host: &'a str) -> Vec<(&'static str, NameKey<'a>)> {
        let ip = Ipv4Addr::new(10, 244, 1, 5);
        vec![
            ("Pod", NameKey::object("web-0")),
            (
                "Pod-MAC",
                NameKey::object("web-0").marked("mac", Part::Label(hex)),
            ),
            (
                "Pod-ARP",
                NameKey::object("web-0")
                    .marked("ip", Part::Ipv4(ip))
                    .then(Part::Label(hex)),
            ),
            (
                "Endpoints-Port",
                NameKey::new(Part::Label("web"))
                    .then(Part::Label("http"))
                    .then(Part::Label("16cfaaab0a1b2c3d")),
            ),
            (
                "Endpoints-Port",
                NameKey::new(Part::Label("web"))
                    .then(Part::Label(""))
                    .then(Part::Label("16cfaaab0a1b2c3d")),
            ),
            (
                "Node-Tunnel-Endpoint",
                NameKey::object("worker-1").then(Part::Hashed(zone_host)),
            ),
        ]
    }

    /// Version 1's names, as version 1 wrote them (a rollback finds them there).
    #[test]
    fn version_1_names_are_dotted() {
        let zone_host = "4b8c9f5e-1111-4222-8333-444455556666/8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a";
        let sha1 = |s: &str| hex::encode(Sha1::digest(s.as_bytes()));
        let names: Vec<String> = keys("0a580af40105", zone_host)
            .iter()
            .map(|(kind, key)| match *kind {
                "Node-Tunnel-Endpoint" => unversioned_translation_name(kind, "1", key),
                _ => translation_name(kind, "1", key),
            })
            .collect();
        let arp = "pod-arp.1.web-0/ip/10.244.1.5/0a580af40105";
        let tunnel = format!("node-tunnel-endpoint.worker-1/{zone_host}");
        assert_eq!(
            names,
            [
                "pod.1.web-0".to_string(),
                format!(
                    "pod-mac.1.web-0-mac-0a580af40105-{}",
                    sha1("pod-mac.1.web-0/mac/0a580af40105")
                ),
                format!("pod-arp.1.web-0-ip-10.244.1.5-0a580af40105-{}", sha1(arp)),
                format!(
                    "endpoints-port.1.web-http-16cfaaab0a1b2c3d-{}",
                    sha1("endpoints-port.1.web/http/16cfaaab0a1b2c3d")
                ),
                format!(
                    "endpoints-port.1.web--16cfaaab0a1b2c3d-{}",
                    sha1("endpoints-port.1.web//16cfaaab0a1b2c3d")
                ),
                format!(
                    "node-tunnel-endpoint.worker-1-4b8c9f5e-1111-4222-8333-444455556666-\
                     8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a-{}",
                    sha1(&tunnel)
                ),
            ]
        );
    }

    /// Later versions' names: the kind, the version, the object and what tells its
    /// Translations apart, a hash only for the tunnel-zone membership.
    #[test]
    fn later_names_are_readable() {
        let zone_host = "4b8c9f5e-1111-4222-8333-444455556666/8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a";
        let names: Vec<String> = keys("0a580af40105", zone_host)
            .iter()
            .map(|(kind, key)| match *kind {
                "Node-Tunnel-Endpoint" => unversioned_translation_name(kind, "2", key),
                _ => translation_name(kind, "2", key),
            })
            .collect();
        let zone_host_hash = &hex::encode(Sha256::digest(zone_host.as_bytes()))[..12];
        assert_eq!(
            names,
            [
                "pod.2.web-0".to_string(),
                "pod-mac.2.web-0.0a580af40105".to_string(),
                "pod-arp.2.web-0.10.244.1.5.0a580af40105".to_string(),
                "endpoints-port.2.web.http.16cfaaab0a1b2c3d".to_string(),
                "endpoints-port.2.web.16cfaaab0a1b2c3d".to_string(),
                format!("node-tunnel-endpoint.worker-1.{zone_host_hash}"),
            ]
        );
        assert_eq!(NameScheme::of("2"), NameScheme::Readable);
        assert_eq!(NameScheme::of("rebuild-7"), NameScheme::Readable);
        assert_eq!(NameScheme::of("1"), NameScheme::Dotted);
    }

    /// A part that is not what it says, or a name over 253 characters, still makes a valid
    /// name, distinct for distinct keys: the readable text, cut, plus a short hash.
    #[test]
    fn unreadable_keys_get_a_hash() {
        let name = |kind: &str, version: &str, key: &NameKey| {
            let n = translation_name(kind, version, key);
            assert!(is_dns1123_subdomain(&n), "{n:?}");
            n
        };
        let hashed = |n: &str| {
            let (_, hash) = n.rsplit_once('-').unwrap();
            hash.len() == READABLE_HASH_LEN && hash.bytes().all(|b| b.is_ascii_hexdigit())
        };
        let odd = [
            name("Pod", "2", &NameKey::object("Web_0")),
            name("Pod", "2", &NameKey::object("web_0")),
            name("Pod", "V/2", &NameKey::object("web-0")),
            name("Pod", "2", &NameKey::object("")),
            name(
                "Endpoints-Port",
                "2",
                &NameKey::new(Part::Label("a.b")).then(Part::Label("h")),
            ),
            name(
                "Endpoints-Port",
                "2",
                &NameKey::new(Part::Label("a")).then(Part::Label("b.h")),
            ),
            name("Pod", "2", &NameKey::object(&"a".repeat(250))),
            name(
                "Pod",
                "2",
                &NameKey::object(&format!("{}b", "a".repeat(249))),
            ),
        ];
        for n in &odd {
            assert!(hashed(n), "{n}");
            assert!(n.len() <= MAX_TRANSLATION_NAME);
        }
        let distinct: std::collections::BTreeSet<_> = odd.iter().collect();
        assert_eq!(distinct.len(), odd.len());
        // A name of exactly 253 characters is kept.
        let object = "a".repeat(MAX_TRANSLATION_NAME - "pod.2.".len());
        assert_eq!(
            name("Pod", "2", &NameKey::object(&object)),
            format!("pod.2.{object}")
        );
    }

    /// The labels of a readable name tell the parts apart: an object with dots before fixed
    /// parts, and parts of fixed shape after it.
    #[test]
    fn readable_names_keep_keys_apart() {
        let ip = |d| Ipv4Addr::new(10, 0, 0, d);
        let arp = |pod, ip, hex| {
            translation_name(
                "Pod-ARP",
                "2",
                &NameKey::object(pod)
                    .marked("ip", Part::Ipv4(ip))
                    .then(Part::Label(hex)),
            )
        };
        let names = [
            arp("a.b", ip(1), "0a0000000001"),
            arp("a", ip(1), "0a0000000001"),
            arp("a.b", ip(2), "0a0000000001"),
            arp("a.b", ip(1), "0a0000000002"),
        ];
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
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
        let key = NameKey::object("web").marked("mac", Part::Label("accaba000001"));
        let v1 = unversioned_translation_name("Pod-MAC", "1", &key);
        assert!(v1.starts_with("pod-mac.web-mac-accaba000001-"), "{v1}");
        assert!(is_dns1123_subdomain(&v1));
        // Within one scheme, the same in every version.
        let v2 = unversioned_translation_name("Pod-MAC", "2", &key);
        assert_eq!(v2, "pod-mac.web.accaba000001");
        assert_eq!(v2, unversioned_translation_name("Pod-MAC", "3", &key));
        let web = NameKey::object("web");
        assert_ne!(
            translation_name("pod-mac", "2", &web),
            translation_name("pod-mac", "3", &web)
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
