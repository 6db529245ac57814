//! The canonical texts a policy generation's ID and a group's ID are derived from.
//!
//! A generation is named by a hash of everything its chains match ([`generation_text`]), and
//! a group's ID by its key ([`group_key_text`]). Both texts are written here, field by field,
//! never through `Debug` or a derived `Serialize`: renaming a Rust type, field or variant
//! changes no ID. The texts are the ones version 1 of the translators wrote (then through
//! `Debug` and `serde_json`), so every policy chain and group keeps its ID, under every
//! Translation version: changing this code changes the ID of every policy generation or
//! group, which the pusher applies as a rebuild of every policy (new chains and rules, then
//! the old ones deleted). Such a change must come with a Translation version bump; the
//! fixed texts and IDs in the tests below fail first.
//!
//! Generation text (one line, `, ` between list items):
//!
//! ```text
//! [(<Ingress|Egress>, [<rule>, …]), …]|<selected IP group ID>|<selected port group ID>
//! rule:  RulePlan { ports: <None | Some([<port>, …])>, peers: [<peer>, …] }
//! port:  PortMatch { proto: <None | Some(<IP protocol number>)>,
//!                    range: <None | Some((<first>, <last>))>,
//!                    pod_ip: <None | Some(<a.b.c.d>)> }
//! peer:  Any | Group(<IP group ID>) | Block { cidr: <cidr>, except: [<cidr>, …] }
//! cidr:  Ipv4Cidr { addr: <a.b.c.d>, prefix_len: <n> }
//! ```
//!
//! Group key text (JSON without spaces, strings escaped as JSON strings):
//!
//! ```text
//! {"members":"<Addresses|Ports>","scope":<scope>,"pods":<selector>}
//! scope:    {"Namespace":"<namespace>"} | {"Namespaces":<selector>}
//! selector: [{"key":"<key>","operator":"<operator>","values":["<value>",…]},…]
//! ```

use std::fmt::Display;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{
    CanonicalSelector, Direction, GroupKey, GroupMembers, GroupScope, PeerMatch, PortMatch,
    RulePlan,
};
use crate::model::Ipv4Cidr;

/// 16 hex digits of SHA-256 of `text`: the generation's or group's hash.
pub(super) fn short_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

/// The canonical text of a generation: its rule plans per direction and the IDs of the
/// groups of the pods it selects.
pub(super) fn generation_text(
    plans: &[(Direction, Vec<RulePlan>)],
    selected_addresses: Uuid,
    selected_ports: Uuid,
) -> String {
    let directions = list(plans.iter().map(|(dir, rules)| {
        let dir = match dir {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        };
        format!("({dir}, {})", list(rules.iter().map(rule_text)))
    }));
    format!("{directions}|{selected_addresses}|{selected_ports}")
}

fn rule_text(rule: &RulePlan) -> String {
    let ports = rule
        .ports
        .as_ref()
        .map(|ports| list(ports.iter().map(port_text)));
    format!(
        "RulePlan {{ ports: {}, peers: {} }}",
        option(ports),
        list(rule.peers.iter().map(peer_text))
    )
}

fn port_text(port: &PortMatch) -> String {
    let range = port.range.map(|(first, last)| format!("({first}, {last})"));
    format!(
        "PortMatch {{ proto: {}, range: {}, pod_ip: {} }}",
        option(port.proto),
        option(range),
        option(port.pod_ip)
    )
}

fn peer_text(peer: &PeerMatch) -> String {
    match peer {
        PeerMatch::Any => "Any".to_string(),
        PeerMatch::Group(id) => format!("Group({id})"),
        PeerMatch::Block { cidr, except } => format!(
            "Block {{ cidr: {}, except: {} }}",
            cidr_text(cidr),
            list(except.iter().map(cidr_text))
        ),
    }
}

fn cidr_text(cidr: &Ipv4Cidr) -> String {
    format!(
        "Ipv4Cidr {{ addr: {}, prefix_len: {} }}",
        cidr.addr, cidr.prefix_len
    )
}

fn option<T: Display>(value: Option<T>) -> String {
    match value {
        Some(v) => format!("Some({v})"),
        None => "None".to_string(),
    }
}

/// `[a, b, …]`.
fn list(items: impl Iterator<Item = String>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(", "))
}

/// The canonical text of a group key.
pub(super) fn group_key_text(key: &GroupKey) -> String {
    let members = match key.members {
        GroupMembers::Addresses => "Addresses",
        GroupMembers::Ports => "Ports",
    };
    let scope = match &key.scope {
        GroupScope::Namespace(ns) => format!("{{\"Namespace\":{}}}", json_string(ns)),
        GroupScope::Namespaces(sel) => format!("{{\"Namespaces\":{}}}", selector_text(sel)),
    };
    format!(
        "{{\"members\":{},\"scope\":{scope},\"pods\":{}}}",
        json_string(members),
        selector_text(&key.pods)
    )
}

fn selector_text(selector: &CanonicalSelector) -> String {
    let requirements: Vec<String> = selector
        .0
        .iter()
        .map(|r| {
            let values: Vec<String> = r.values.iter().map(|v| json_string(v)).collect();
            format!(
                "{{\"key\":{},\"operator\":{},\"values\":[{}]}}",
                json_string(&r.key),
                json_string(&r.operator),
                values.join(",")
            )
        })
        .collect();
    format!("[{}]", requirements.join(","))
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::{generation_text, group_key_text, short_hash};
    use serde_json::json;

    pub(crate) fn fixture_cluster() -> PolicyCluster {
        let namespaces: Vec<Namespace> = serde_json::from_value(json!([
            {"metadata": {"name": "shop", "labels": {"team": "a"}}},
            {"metadata": {"name": "ops", "labels": {"team": "b"}}}
        ]))
        .unwrap();
        let pod = |name: &str, app: &str, ip: &str, port: Option<(&str, i32)>| -> Pod {
            let ports = match port {
                Some((n, p)) => json!([{"name": n, "containerPort": p}]),
                None => json!([]),
            };
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": ports}]},
                "status": {"phase": "Running", "podIP": ip}
            }))
            .unwrap()
        };
        let pods = vec![
            pod("web-1", "web", "10.1.0.1", Some(("http", 8080))),
            pod("web-2", "web", "10.1.0.2", Some(("http", 8081))),
            pod("api", "api", "10.1.0.3", None),
            pod("db", "db", "10.1.0.4", None),
        ];
        PolicyCluster::new(&namespaces, &pods)
    }

    pub(crate) fn fixture_policies() -> Vec<NetworkPolicy> {
        let policy = |name: &str, spec: serde_json::Value| -> NetworkPolicy {
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec}),
            )
            .unwrap()
        };
        vec![
            policy(
                "deny-all",
                json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
            ),
            policy(
                "web-from-api",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                       "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "api"}}}],
                                    "ports": [{"protocol": "TCP", "port": 80}]}]}),
            ),
            policy(
                "db-egress",
                json!({"podSelector": {"matchLabels": {"app": "db"}},
                       "policyTypes": ["Egress"],
                       "egress": [
                           {"to": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                                "except": ["10.1.0.0/16", "10.2.3.4/32"]}}],
                            "ports": [{"protocol": "UDP", "port": 5000, "endPort": 5010}]},
                           {"to": [{"ipBlock": {"cidr": "192.168.0.7/24"}}]},
                           {"ports": [{"protocol": "TCP"}]}]}),
            ),
            policy(
                "web-named",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                       "policyTypes": ["Ingress", "Egress"],
                       "ingress": [
                           {"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}],
                            "ports": [{"port": "http"}]},
                           {}],
                       "egress": [{"to": [{"podSelector": {}}]}]}),
            ),
        ]
    }

    pub(crate) fn fixture_keys() -> Vec<GroupKey> {
        let sel = |v: serde_json::Value| {
            CanonicalSelector::new(Some(&serde_json::from_value::<LabelSelector>(v).unwrap()))
        };
        vec![
            GroupKey {
                members: GroupMembers::Ports,
                scope: GroupScope::Namespaces(sel(json!({"matchExpressions": [
                    {"key": "tier", "operator": "NotIn", "values": ["b", "a"]},
                    {"key": "canary", "operator": "Exists"}]}))),
                pods: sel(json!({"matchLabels": {"app": "x"},
                                 "matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]})),
            },
            GroupKey {
                members: GroupMembers::Addresses,
                scope: GroupScope::Namespace("q\"uote\\é".into()),
                pods: sel(json!({"matchLabels": {"a\u{1}": "ü"}})),
            },
        ]
    }

    /// The generation of each fixture policy under version 1: its text, hash and ID.
    fn generations() -> Vec<(String, String, String, Uuid)> {
        let cfg = TranslatorConfig {
            version: "1".into(),
            ..TranslatorConfig::default()
        };
        let cluster = fixture_cluster();
        fixture_policies()
            .iter()
            .map(|np| {
                let out = network_policy(&cfg, np, &cluster);
                assert!(out.warnings.is_empty(), "{:?}", out.warnings);
                let spec = np.spec.as_ref().unwrap();
                let selected = selected_group("shop", spec, GroupMembers::Addresses);
                let pods = selected.select(&cluster);
                let ports = selected_group("shop", spec, GroupMembers::Ports).id(&cfg);
                let mut ignored = Translated::default();
                let plans = rule_plans(&cfg, "shop", spec, &pods, &cluster, &mut ignored);
                let text = generation_text(&plans, selected.id(&cfg), ports);
                let hash = short_hash(&text);
                let name = np.metadata.name.clone().unwrap();
                let base = id_for_key(&cfg, NETWORK_POLICY_KIND, &format!("shop/{name}"));
                let generation = sub_id(base, &format!("Generation/{hash}"));
                // The Translation is made of that generation.
                let chain = sub_id(generation, "IN/Chain");
                let chain_out = sub_id(generation, "OUT/Chain");
                let tr = &out.translations[0];
                assert!(
                    tr.resources
                        .iter()
                        .any(|r| r.body.contains(&chain.to_string())
                            || r.body.contains(&chain_out.to_string())),
                    "{name}: the generation's chain is not in its Translation"
                );
                (name, text, hash, generation)
            })
            .collect()
    }

    /// The texts and IDs version 1 wrote: a change here changes IDs in every cluster.
    #[test]
    fn generation_texts_and_ids_are_frozen() {
        let want = [
            (
                "deny-all",
                "[(Ingress, [])]|120b4ef5-4d38-577c-9970-c9e3fede8f0b|2ad1ba7b-818b-5ef8-87a4-f90b38a9451d",
                "107fbfc4cc1de447",
                "33d6c7dc-683c-54e8-9981-d5c6015da9bd",
            ),
            (
                "web-from-api",
                "[(Ingress, [RulePlan { ports: Some([PortMatch { proto: Some(6), range: Some((80, 80)), pod_ip: None }]), peers: [Group(ca4008f1-7474-5624-b7f1-e23f8c3942a0)] }])]|f17c7b20-9826-59fc-8cea-64baaa5d80d5|c93207b9-e786-52b4-96db-cc981ca63fa4",
                "28379521a9ce340d",
                "17257181-ae94-58d9-99e8-0697b45073ae",
            ),
            (
                "db-egress",
                "[(Egress, [RulePlan { ports: Some([PortMatch { proto: Some(17), range: Some((5000, 5010)), pod_ip: None }]), peers: [Block { cidr: Ipv4Cidr { addr: 10.0.0.0, prefix_len: 8 }, except: [Ipv4Cidr { addr: 10.1.0.0, prefix_len: 16 }, Ipv4Cidr { addr: 10.2.3.4, prefix_len: 32 }] }] }, RulePlan { ports: None, peers: [Block { cidr: Ipv4Cidr { addr: 192.168.0.0, prefix_len: 24 }, except: [] }] }, RulePlan { ports: Some([PortMatch { proto: Some(6), range: None, pod_ip: None }]), peers: [Any] }])]|f02a4581-9769-5575-9f40-d6f320ca9b12|66c7b292-06e5-578a-ba9f-d6b6a3e91224",
                "fe0f2f306de75045",
                "fdcc4bf8-0c25-5399-8e92-d3dffaef1919",
            ),
            (
                "web-named",
                "[(Ingress, [RulePlan { ports: Some([PortMatch { proto: Some(6), range: Some((8080, 8080)), pod_ip: Some(10.1.0.1) }, PortMatch { proto: Some(6), range: Some((8081, 8081)), pod_ip: Some(10.1.0.2) }]), peers: [Group(cce98973-71b2-5afe-80c1-6945635cf274)] }, RulePlan { ports: None, peers: [Any] }]), (Egress, [RulePlan { ports: None, peers: [Group(120b4ef5-4d38-577c-9970-c9e3fede8f0b)] }])]|f17c7b20-9826-59fc-8cea-64baaa5d80d5|c93207b9-e786-52b4-96db-cc981ca63fa4",
                "f18dbd09422e8760",
                "d46aa9f1-cc05-5d61-a715-f72180211dae",
            ),
        ];
        let got = generations();
        assert_eq!(got.len(), want.len());
        for ((name, text, hash, id), (w_name, w_text, w_hash, w_id)) in got.iter().zip(want) {
            assert_eq!(name, w_name);
            assert_eq!(text, w_text, "{name}: the generation text changed");
            assert_eq!(hash, w_hash, "{name}");
            assert_eq!(id.to_string(), w_id, "{name}: the generation ID changed");
        }
    }

    /// The group keys' texts and IDs version 1 wrote.
    #[test]
    fn group_key_texts_and_ids_are_frozen() {
        let cfg = TranslatorConfig {
            version: "1".into(),
            ..TranslatorConfig::default()
        };
        let policies = fixture_policies();
        let mut keys = policy_groups(&policies[3]);
        keys.extend(policy_groups(&policies[1]));
        keys.extend(fixture_keys());
        let want = [
            (
                r#"{"members":"Addresses","scope":{"Namespace":"shop"},"pods":[]}"#,
                "ef6aff106026081b",
                "120b4ef5-4d38-577c-9970-c9e3fede8f0b",
            ),
            (
                r#"{"members":"Addresses","scope":{"Namespace":"shop"},"pods":[{"key":"app","operator":"In","values":["web"]}]}"#,
                "bf2b14d23925c863",
                "f17c7b20-9826-59fc-8cea-64baaa5d80d5",
            ),
            (
                r#"{"members":"Addresses","scope":{"Namespaces":[{"key":"team","operator":"In","values":["b"]}]},"pods":[]}"#,
                "70d2eac62128d801",
                "cce98973-71b2-5afe-80c1-6945635cf274",
            ),
            (
                r#"{"members":"Ports","scope":{"Namespace":"shop"},"pods":[{"key":"app","operator":"In","values":["web"]}]}"#,
                "06d85b0ee6780682",
                "c93207b9-e786-52b4-96db-cc981ca63fa4",
            ),
            (
                r#"{"members":"Addresses","scope":{"Namespace":"shop"},"pods":[{"key":"app","operator":"In","values":["api"]}]}"#,
                "f2c8ee104848d4d9",
                "ca4008f1-7474-5624-b7f1-e23f8c3942a0",
            ),
            (
                r#"{"members":"Addresses","scope":{"Namespace":"shop"},"pods":[{"key":"app","operator":"In","values":["web"]}]}"#,
                "bf2b14d23925c863",
                "f17c7b20-9826-59fc-8cea-64baaa5d80d5",
            ),
            (
                r#"{"members":"Ports","scope":{"Namespaces":[{"key":"canary","operator":"Exists","values":[]},{"key":"tier","operator":"NotIn","values":["a","b"]}]},"pods":[{"key":"app","operator":"In","values":["x"]},{"key":"gone","operator":"DoesNotExist","values":[]}]}"#,
                "c6958e030d9438de",
                "fb8f5a12-4ae9-59ce-9405-44c9bbf160c8",
            ),
            (
                "{\"members\":\"Addresses\",\"scope\":{\"Namespace\":\"q\\\"uote\\\\é\"},\"pods\":[{\"key\":\"a\\u0001\",\"operator\":\"In\",\"values\":[\"ü\"]}]}",
                "f001294dca3e7490",
                "239981f8-9077-5aa0-a14d-d14566832d11",
            ),
        ];
        assert_eq!(keys.len(), want.len());
        for (key, (text, hash, id)) in keys.iter().zip(want) {
            assert_eq!(group_key_text(key), text);
            assert_eq!(short_hash(&group_key_text(key)), hash, "{text}");
            assert_eq!(key.id(&cfg).to_string(), id, "{text}");
        }
    }

    /// Every part of a plan is in the text: a generation that matches something else is
    /// another generation.
    #[test]
    fn every_part_of_a_plan_changes_the_text() {
        let id = Uuid::from_u128(1);
        let cidr = |s: &str| s.parse::<Ipv4Cidr>().unwrap();
        let port = PortMatch {
            proto: Some(6),
            range: Some((80, 80)),
            pod_ip: None,
        };
        let plan = |dir, ports: Option<Vec<PortMatch>>, peer: PeerMatch| {
            vec![(
                dir,
                vec![RulePlan {
                    ports,
                    peers: vec![peer],
                }],
            )]
        };
        let ingress = |ports, peer| plan(Direction::Ingress, ports, peer);
        let with = |p: PortMatch| Some(vec![p]);
        let group = PeerMatch::Group(id);
        let base = ingress(with(port.clone()), group.clone());
        let variants = [
            plan(Direction::Egress, with(port.clone()), group.clone()),
            ingress(None, group.clone()),
            ingress(
                with(PortMatch {
                    proto: Some(17),
                    ..port.clone()
                }),
                group.clone(),
            ),
            ingress(
                with(PortMatch {
                    range: Some((80, 81)),
                    ..port.clone()
                }),
                group.clone(),
            ),
            ingress(
                with(PortMatch {
                    pod_ip: Some([10, 0, 0, 1].into()),
                    ..port.clone()
                }),
                group.clone(),
            ),
            ingress(with(port.clone()), PeerMatch::Any),
            ingress(
                with(port.clone()),
                PeerMatch::Block {
                    cidr: cidr("10.0.0.0/8"),
                    except: vec![],
                },
            ),
            ingress(
                with(port.clone()),
                PeerMatch::Block {
                    cidr: cidr("10.0.0.0/8"),
                    except: vec![cidr("10.1.0.0/16")],
                },
            ),
        ];
        let base_text = generation_text(&base, id, id);
        let mut texts = std::collections::BTreeSet::from([base_text.clone()]);
        for v in &variants {
            assert!(texts.insert(generation_text(v, id, id)), "{v:?}");
        }
        assert_ne!(base_text, generation_text(&base, Uuid::from_u128(2), id));
        assert_ne!(base_text, generation_text(&base, id, Uuid::from_u128(2)));
    }
}
