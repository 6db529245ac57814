//! What a Translation version bump changes: every name and every ID, so the new version can
//! be built beside the old one; only a membership in a tunnel zone named by annotation, the
//! same backend entry in every version, keeps its name (within a naming scheme). And what a
//! version keeps whatever release translates it: its names and IDs, so that a rollback finds
//! them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use midonet_translators::meta::VERSION_LABEL;
use midonet_translators::{DesiredTranslation, TranslatorConfig};
use serde_json::json;

fn cfg(version: &str) -> TranslatorConfig {
    TranslatorConfig {
        version: version.into(),
        ..TranslatorConfig::default()
    }
}

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "worker-1", "annotations": {
            "midonet.org/host-id": "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a",
            "midonet.org/tunnel-endpoint-ip": "192.168.0.1",
            "midonet.org/mac-address": "02:00:00:00:00:01",
        }},
        "spec": {"podCIDR": "10.244.1.0/24"},
    }))
    .unwrap()
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop",
                     "annotations": {"midonet.org/mac-address": "0a:58:0a:f4:01:05"}},
        "spec": {"nodeName": "worker-1", "containers": []},
        "status": {"podIP": "10.244.1.5"},
    }))
    .unwrap()
}

fn all(version: &str) -> Vec<DesiredTranslation> {
    let c = cfg(version);
    let mut out = midonet_translators::global(&c);
    out.extend(midonet_translators::node(&c, &node()).translations);
    out.extend(midonet_translators::pod(&c, &pod(), Some(&node())).translations);
    out
}

fn names(trs: &[DesiredTranslation]) -> BTreeSet<String> {
    trs.iter().map(|t| t.name.clone()).collect()
}

/// A version bump builds the new version beside the old one: the two may not share a
/// Translation, or the new one's push would take the old one's resources away.
#[test]
fn a_bump_renames_every_translation() {
    let (v1, v2) = (names(&all("1")), names(&all("2")));
    assert!(
        v1.is_disjoint(&v2),
        "shared names: {:?}",
        v1.intersection(&v2)
    );
    for prefix in ["node-mac.1.", "node-arp.1.", "pod-mac.1.", "pod-arp.1."] {
        assert!(v1.iter().any(|n| n.starts_with(prefix)), "{prefix}");
    }
}

/// A membership in a tunnel zone the operator named is the same backend entry in every
/// version: one Translation, relabelled by a bump, rather than two claiming one entry. The
/// bump from version 1 to 2 renames it once (version 2 names Translations readably): for
/// that bump the new Translation claims the entry, and the pusher leaves a claimed entry in
/// place when it deletes the old one.
#[test]
fn a_membership_in_a_named_zone_keeps_its_name() {
    let zone = "4b8c9f5e-1111-4222-8333-444455556666";
    let mut n = node();
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("midonet.org/tunnel-zone-id".into(), zone.into());
    let membership = |version: &str| {
        midonet_translators::node(&cfg(version), &n)
            .translations
            .into_iter()
            .find(|t| t.name.starts_with("node-tunnel-endpoint."))
            .unwrap()
    };
    let (m2, m3) = (membership("2"), membership("3"));
    assert_eq!(m2.name, m3.name);
    assert_eq!(m2.resources, m3.resources);
    assert_eq!(m3.labels.get(VERSION_LABEL).map(String::as_str), Some("3"));
    let m1 = membership("1");
    assert_ne!(m1.name, m2.name);
    assert_eq!(m1.resources, m2.resources, "the same backend entry");
}

/// Version 1 is translated as version 1 wrote it (a rollback to it finds its Translations
/// where they are): its names are the original integration's. The golden files, run at
/// version 1, hold the rest of its output byte for byte.
#[test]
fn version_1_keeps_its_names() {
    let names = names(&all("1"));
    let zone = midonet_translators::global::default_tunnel_zone_id(&cfg("1"));
    let host = "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a";
    // A `/` in the key is replaced, and the 40-hex SHA-1 of the whole name appended.
    let dotted = |name: &str, shown: &str| format!("{shown}-{}", sha1_hex(name));
    let want: BTreeSet<String> = [
        "midonet-global.1.tunnel-zone".to_string(),
        "midonet-global.1.cluster-router".to_string(),
        "midonet-global.1.chains".to_string(),
        "midonet-global.1.network-policy".to_string(),
        "node.1.worker-1".to_string(),
        dotted(
            &format!("node-tunnel-endpoint.worker-1/{zone}/{host}"),
            &format!("node-tunnel-endpoint.worker-1-{zone}-{host}"),
        ),
        dotted(
            "node-mac.1.worker-1/mac/020000000001",
            "node-mac.1.worker-1-mac-020000000001",
        ),
        dotted(
            "node-arp.1.worker-1/ip/10.244.1.2/020000000001",
            "node-arp.1.worker-1-ip-10.244.1.2-020000000001",
        ),
        "pod.1.web-0".to_string(),
        dotted(
            "pod-mac.1.web-0/mac/0a580af40105",
            "pod-mac.1.web-0-mac-0a580af40105",
        ),
        dotted(
            "pod-arp.1.web-0/ip/10.244.1.5/0a580af40105",
            "pod-arp.1.web-0-ip-10.244.1.5-0a580af40105",
        ),
    ]
    .into();
    assert_eq!(names, want);
}

fn sha1_hex(s: &str) -> String {
    use sha1::{Digest, Sha1};
    hex::encode(Sha1::digest(s.as_bytes()))
}

/// The current version names every Translation readably: the kind, the version, the
/// object, and what tells the object's Translations apart.
#[test]
fn the_current_version_names_readably() {
    let v = midonet_translators::TRANSLATION_VERSION;
    let names = names(&all(v));
    let zone = midonet_translators::global::default_tunnel_zone_id(&cfg(v));
    let host = "8c2b5b1e-3f0a-4a53-9d2c-1f2e3d4c5b6a";
    let membership = format!("{zone}/{host}");
    let digest = sha256_hex(&membership);
    let want: BTreeSet<String> = [
        format!("midonet-global.{v}.tunnel-zone"),
        format!("midonet-global.{v}.cluster-router"),
        format!("midonet-global.{v}.chains"),
        format!("midonet-global.{v}.network-policy"),
        format!("node.{v}.worker-1"),
        format!("node-tunnel-endpoint.worker-1.{}", &digest[..12]),
        format!("node-mac.{v}.worker-1.020000000001"),
        format!("node-arp.{v}.worker-1.10.244.1.2.020000000001"),
        format!("pod.{v}.web-0"),
        format!("pod-mac.{v}.web-0.0a580af40105"),
        format!("pod-arp.{v}.web-0.10.244.1.5.0a580af40105"),
    ]
    .into();
    assert_eq!(names, want);
}

fn sha256_hex(s: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(s.as_bytes()))
}

#[test]
fn every_translation_carries_its_version() {
    for tr in all("7") {
        assert_eq!(
            tr.labels.get(VERSION_LABEL).map(String::as_str),
            Some("7"),
            "{}",
            tr.name
        );
        if !tr.name.starts_with("node-tunnel-endpoint.") {
            let kind = tr.name.split('.').next().unwrap_or_default();
            assert!(tr.name.starts_with(&format!("{kind}.7.")), "{}", tr.name);
        }
    }
}
