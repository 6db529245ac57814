//! What a Translation version bump changes: every name and every ID, so the new version can
//! be built beside the old one; only a membership in a tunnel zone named by annotation, the
//! same backend entry in every version, keeps its name.

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
/// version: one Translation, relabelled by a bump, rather than two claiming one entry.
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
    let (m1, m2) = (membership("1"), membership("2"));
    assert_eq!(m1.name, m2.name);
    assert_eq!(m1.resources, m2.resources);
    assert_eq!(m2.labels.get(VERSION_LABEL).map(String::as_str), Some("2"));
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
