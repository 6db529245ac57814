//! What a Translation version bump changes: every versioned name and every ID, but not the
//! names of the content-identified Translations (MAC, ARP, tunnel-zone membership).

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

fn split(trs: &[DesiredTranslation]) -> (BTreeSet<String>, BTreeSet<String>) {
    let versioned = trs
        .iter()
        .filter(|t| t.labels.contains_key(VERSION_LABEL))
        .map(|t| t.name.clone())
        .collect();
    let unversioned = trs
        .iter()
        .filter(|t| !t.labels.contains_key(VERSION_LABEL))
        .map(|t| t.name.clone())
        .collect();
    (versioned, unversioned)
}

#[test]
fn bump_renames_versioned_translations_only() {
    let (v1, u1) = split(&all("1"));
    let (v2, u2) = split(&all("2"));
    assert!(v1.is_disjoint(&v2), "versioned names must all change");
    assert_eq!(u1, u2, "content-identified names must not change");
    // node MAC, node ARP, node tunnel-zone membership, pod MAC, pod ARP
    assert_eq!(u1.len(), 5);
    for prefix in [
        "node-mac.",
        "node-arp.",
        "node-tunnel-endpoint.",
        "pod-mac.",
        "pod-arp.",
    ] {
        assert!(u1.iter().any(|n| n.starts_with(prefix)), "{prefix}");
    }
}

#[test]
fn unversioned_translations_carry_no_labels_and_versioned_carry_theirs() {
    for tr in all("7") {
        let kind = tr.name.split('.').next().unwrap_or_default().to_string();
        if [
            "node-mac",
            "node-arp",
            "node-tunnel-endpoint",
            "pod-mac",
            "pod-arp",
        ]
        .contains(&kind.as_str())
        {
            assert!(tr.labels.is_empty(), "{}", tr.name);
        } else {
            assert_eq!(
                tr.labels.get(VERSION_LABEL).map(String::as_str),
                Some("7"),
                "{}",
                tr.name
            );
            assert!(tr.name.starts_with(&format!("{kind}.7.")), "{}", tr.name);
        }
    }
}
