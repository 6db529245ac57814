//! What the Translations cost etcd: every Translation's key and value as etcd stores them,
//! read from the control plane's etcd (its JSON gateway, `/v3/kv/range`, in pages at one
//! revision), and etcd's own database size beside it.
//!
//! Why the stored bytes and not the database's growth: the apiserver keeps a custom
//! resource in etcd as the JSON of the whole object (metadata with its managedFields, spec,
//! status), one key per object, so the sum of keys and values is exactly what the live
//! Translations take, independent of what else the run wrote. The database file (what
//! etcd's quota is checked against) holds that plus the revisions not yet compacted (the
//! apiserver compacts every 5 minutes), bbolt's page overhead and free pages; it is
//! reported as read, not attributed to the Translations. The parts (spec, status, its
//! pushed list, metadata, its managedFields) are re-serialized compactly, so they add up
//! to the stored value within a few bytes per Translation.
//!
//! A Translation the pusher has *settled* (Ready for `--compact-managed-fields-after`, see
//! `pusher::compaction`) has its managedFields reset: what it then takes is the same
//! value without them (they are the last field of the metadata, so without
//! `,"managedFields":[…]`), reported beside what a fresh one takes.
//!
//! [`Stored::projected`] scales the measured bytes to a larger cluster on paper, each
//! Translation by what owns it: a Node's with the nodes, the globals not at all, every
//! other with the pods (Pods, and Services with their Endpoints, which the scenario has in
//! proportion to its pods).

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

use crate::objects::COST_NS;
use crate::report::{row, Row};
use crate::Res;

/// Where the apiserver keeps the Translations.
const PREFIX: &str = "/registry/midonet.org/translations/";
/// Keys per range request.
const PAGE: usize = 500;
/// etcd's default space quota, and the largest it suggests.
pub const QUOTA: u64 = 2 << 30;
pub const SUGGESTED_MAX: u64 = 8 << 30;

/// The largest cluster Kubernetes supports (its scalability thresholds).
pub const LARGEST_NODES: usize = 5000;
pub const LARGEST_PODS: usize = 150_000;

/// Bytes of one part of the stored Translations.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Parts {
    pub key: usize,
    pub value: usize,
    pub spec: usize,
    pub status: usize,
    pub pushed: usize,
    pub metadata: usize,
    pub managed_fields: usize,
    /// Key and value once the managedFields are reset (see the module docs).
    pub settled: usize,
}

impl Parts {
    fn add(&mut self, o: &Parts) {
        self.key += o.key;
        self.value += o.value;
        self.spec += o.spec;
        self.status += o.status;
        self.pushed += o.pushed;
        self.metadata += o.metadata;
        self.managed_fields += o.managed_fields;
        self.settled += o.settled;
    }

    /// Key and value: what one stored revision takes.
    pub fn total(&self) -> usize {
        self.key + self.value
    }
}

/// Translations of one kind (of owner, or of Translation).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Owned {
    pub count: usize,
    pub bytes: usize,
    /// Their bytes once settled.
    pub settled_bytes: usize,
}

/// The stored Translations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    pub count: usize,
    pub parts: Parts,
    /// By the kind of their owner (`-` for none: the globals).
    pub by_owner: BTreeMap<String, Owned>,
    /// By their own kind: the first segment of their name (`pod`, `pod-mac`, …).
    pub by_kind: BTreeMap<String, Owned>,
    /// etcd's database size and the part of it in use, as etcd reports them.
    pub db_size: Option<u64>,
    pub db_size_in_use: Option<u64>,
}

/// What one stored Translation is.
#[derive(Debug, PartialEq)]
pub struct StoredTranslation {
    pub parts: Parts,
    /// Its owner's kind (`-` for none), and its own kind (its name's first segment).
    pub owner: String,
    pub kind: String,
}

/// The parts of one stored Translation, and what it is.
pub fn parts_of(key: &[u8], value: &[u8]) -> Res<StoredTranslation> {
    let v: Value = serde_json::from_slice(value)?;
    let size = |v: &Value| match v {
        Value::Null => 0,
        v => serde_json::to_vec(v).map_or(0, |b| b.len()),
    };
    let owner = v["metadata"]["ownerReferences"][0]["kind"]
        .as_str()
        .unwrap_or("-")
        .to_string();
    let name = v["metadata"]["name"].as_str().unwrap_or("-");
    let kind = name.split('.').next().unwrap_or(name).to_string();
    let managed_fields = size(&v["metadata"]["managedFields"]);
    let without_managed_fields = match managed_fields {
        0 => value.len(),
        n => value.len().saturating_sub(n + r#","managedFields":"#.len()),
    };
    let parts = Parts {
        key: key.len(),
        value: value.len(),
        spec: size(&v["spec"]),
        status: size(&v["status"]),
        // The record of what was pushed: `created`, or an older version's `pushed`.
        pushed: match &v["status"]["created"] {
            Value::Null => size(&v["status"]["pushed"]),
            created => size(created),
        },
        metadata: size(&v["metadata"]),
        managed_fields,
        settled: key.len() + without_managed_fields,
    };
    Ok(StoredTranslation { parts, owner, kind })
}

impl Stored {
    fn add(&mut self, t: StoredTranslation) {
        self.count += 1;
        self.parts.add(&t.parts);
        for (by, what) in [(&mut self.by_owner, t.owner), (&mut self.by_kind, t.kind)] {
            let o = by.entry(what).or_default();
            o.count += 1;
            o.bytes += t.parts.total();
            o.settled_bytes += t.parts.settled;
        }
    }

    /// Mean bytes per Translation of a part.
    fn mean(&self, part: usize) -> f64 {
        part as f64 / self.count.max(1) as f64
    }

    /// The stored bytes scaled from a cluster of `nodes` and `pods` to one of
    /// `to_nodes` and `to_pods` (see the module docs).
    pub fn projected(&self, nodes: usize, pods: usize, to_nodes: usize, to_pods: usize) -> f64 {
        self.projected_of(|o| o.bytes, (nodes, pods), (to_nodes, to_pods))
    }

    /// [`Self::projected`] of the bytes the Translations take once settled.
    pub fn projected_settled(
        &self,
        nodes: usize,
        pods: usize,
        to_nodes: usize,
        to_pods: usize,
    ) -> f64 {
        self.projected_of(|o| o.settled_bytes, (nodes, pods), (to_nodes, to_pods))
    }

    fn projected_of(
        &self,
        bytes: impl Fn(&Owned) -> usize,
        (nodes, pods): (usize, usize),
        (to_nodes, to_pods): (usize, usize),
    ) -> f64 {
        let ratio = |to: usize, from: usize| to as f64 / from.max(1) as f64;
        self.by_owner
            .iter()
            .map(|(owner, o)| {
                let scale = match owner.as_str() {
                    "Node" => ratio(to_nodes, nodes),
                    "-" => 1.0,
                    _ => ratio(to_pods, pods),
                };
                bytes(o) as f64 * scale
            })
            .sum()
    }

    pub fn rows(&self, nodes: usize, pods: usize) -> Vec<Row> {
        let p = &self.parts;
        let largest = self.projected(nodes, pods, LARGEST_NODES, LARGEST_PODS);
        let settled = self.projected_settled(nodes, pods, LARGEST_NODES, LARGEST_PODS);
        let gib = |b: f64| b / (1u64 << 30) as f64;
        vec![
            row(
                "etcd: bytes per Translation as stored",
                format!("{:.0}", self.mean(p.total())),
                "-",
            ),
            row(
                "etcd: spec / status (pushed) / metadata (mF)",
                format!(
                    "{:.0} / {:.0} ({:.0}) / {:.0} ({:.0})",
                    self.mean(p.spec),
                    self.mean(p.status),
                    self.mean(p.pushed),
                    self.mean(p.metadata),
                    self.mean(p.managed_fields)
                ),
                "-",
            ),
            row(
                "etcd: projected to 5,000 nodes, 150,000 pods",
                format!(
                    "{:.2} GiB ({:.2} in a bump)",
                    gib(largest),
                    gib(2.0 * largest)
                ),
                "quota 2 GiB",
            ),
            row(
                "etcd: once settled (managedFields reset): bytes, projected",
                format!(
                    "{:.0} B; {:.2} GiB ({:.2} in a bump)",
                    self.mean(p.settled),
                    gib(settled),
                    gib(2.0 * settled)
                ),
                "quota 2 GiB",
            ),
        ]
    }

    pub fn json(&self, nodes: usize, pods: usize) -> Value {
        let largest = self.projected(nodes, pods, LARGEST_NODES, LARGEST_PODS);
        json!({"etcd": {
            "translations": self.count,
            "bytes": self.parts,
            "bytesPerTranslation": self.mean(self.parts.total()),
            "byOwnerKind": self.by_owner,
            "byTranslationKind": self.by_kind,
            "dbSizeBytes": self.db_size,
            "dbSizeInUseBytes": self.db_size_in_use,
            "projectedLargestBytes": largest,
            "bytesPerTranslationSettled": self.mean(self.parts.settled),
            "projectedLargestSettledBytes":
                self.projected_settled(nodes, pods, LARGEST_NODES, LARGEST_PODS),
            "projectedLargest": {"nodes": LARGEST_NODES, "pods": LARGEST_PODS},
            "quotaBytes": QUOTA,
            "suggestedMaxBytes": SUGGESTED_MAX,
        }})
    }
}

/// An int64 of etcd's JSON gateway, which writes them as strings.
fn int64(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

/// The key after `key` in etcd's order.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// Every stored Translation (the costs' scratch namespace aside), and etcd's database
/// size, from the etcd at `url`.
pub async fn translations(url: &str) -> Res<Stored> {
    let http = reqwest::Client::new();
    let mut end = PREFIX.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let skipped = format!("{PREFIX}{COST_NS}/");
    let mut stored = Stored::default();
    let mut from = PREFIX.as_bytes().to_vec();
    let mut revision = None;
    loop {
        let mut request = json!({"key": B64.encode(&from), "range_end": B64.encode(&end),
                                 "limit": PAGE});
        if let Some(r) = revision {
            request["revision"] = json!(r);
        }
        let page: Value = http
            .post(format!("{url}/v3/kv/range"))
            .json(&request)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        revision = revision.or_else(|| int64(&page["header"]["revision"]));
        let kvs = page["kvs"].as_array().cloned().unwrap_or_default();
        for kv in &kvs {
            let key = B64.decode(kv["key"].as_str().ok_or("etcd: a kv without a key")?)?;
            let value = B64.decode(kv["value"].as_str().unwrap_or(""))?;
            if !key.starts_with(skipped.as_bytes()) {
                stored.add(parts_of(&key, &value)?);
            }
            from = after(&key);
        }
        if kvs.is_empty() || !page["more"].as_bool().unwrap_or(false) {
            break;
        }
    }
    let status: Value = http
        .post(format!("{url}/v3/maintenance/status"))
        .json(&json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    stored.db_size = int64(&status["dbSize"]);
    stored.db_size_in_use = int64(&status["dbSizeInUse"]);
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORED: &str = r#"{"apiVersion":"midonet.org/v1","kind":"Translation","metadata":{"name":"pod.1.a","namespace":"n","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"a","uid":"u"}],"managedFields":[{"manager":"m"}]},"spec":{"resources":[]},"status":{"pushed":[{"kind":"Port"}]}}
"#;

    #[test]
    fn a_stored_translation_is_split_into_its_parts() {
        let key = b"/registry/midonet.org/translations/n/pod.1.a";
        let t = parts_of(key, STORED.as_bytes()).unwrap();
        assert_eq!((t.owner.as_str(), t.kind.as_str()), ("Pod", "pod"));
        let p = t.parts;
        assert_eq!(p.key, key.len());
        assert_eq!(p.value, STORED.len());
        assert_eq!(p.spec, r#"{"resources":[]}"#.len());
        assert_eq!(p.pushed, r#"[{"kind":"Port"}]"#.len());
        assert_eq!(p.status, r#"{"pushed":[{"kind":"Port"}]}"#.len());
        assert_eq!(p.managed_fields, r#"[{"manager":"m"}]"#.len());
        // Settled: the same object without its managedFields.
        let settled = STORED.replace(r#","managedFields":[{"manager":"m"}]"#, "");
        assert_eq!(p.settled, key.len() + settled.len());
        // The parts and the punctuation between them make the value.
        let outer =
            r#"{"apiVersion":"midonet.org/v1","kind":"Translation","metadata":,"spec":,"status":}"#;
        assert_eq!(p.value, outer.len() + p.metadata + p.spec + p.status + 1);
        // The record as written now.
        let now = br#"{"metadata":{"name":"n"},"status":{"created":["Port /ports/x 0a"]}}"#;
        let t = parts_of(b"k", now).unwrap();
        assert_eq!(t.parts.pushed, r#"["Port /ports/x 0a"]"#.len());
        // Without an owner (a global) and without a status.
        let global = br#"{"metadata":{"name":"g"},"spec":{}}"#;
        let t = parts_of(b"k", global).unwrap();
        assert_eq!(
            (t.owner.as_str(), t.parts.status, t.parts.pushed),
            ("-", 0, 0)
        );
        assert_eq!(t.parts.settled, t.parts.total(), "nothing to reset");
        assert!(parts_of(b"k", b"not json").is_err());
    }

    #[test]
    fn the_projection_scales_each_owner_kind_by_what_it_grows_with() {
        let mut s = Stored::default();
        let (node, pod, global) = (
            Parts {
                value: 1000,
                ..Parts::default()
            },
            Parts {
                value: 100,
                settled: 60,
                ..Parts::default()
            },
            Parts {
                value: 7,
                ..Parts::default()
            },
        );
        let sized = |parts: Parts, owner: &str| StoredTranslation {
            parts,
            owner: owner.into(),
            kind: owner.to_lowercase(),
        };
        for _ in 0..2 {
            s.add(sized(node, "Node"));
        }
        for _ in 0..10 {
            s.add(sized(pod, "Pod"));
            s.add(sized(pod, "Endpoints"));
        }
        s.add(sized(global, "-"));
        assert_eq!(s.count, 23);
        assert_eq!(
            s.by_owner["Pod"],
            Owned {
                count: 10,
                bytes: 1000,
                settled_bytes: 600,
            }
        );
        // 2 nodes to 20 (x10), 10 pods to 50 (x5), the global as is.
        let projected = s.projected(2, 10, 20, 50);
        assert_eq!(projected, 2000.0 * 10.0 + 2000.0 * 5.0 + 7.0);
        // Settled, the pods' and the Endpoints' 60 bytes each instead of 100.
        let settled = s.projected_settled(2, 10, 20, 50);
        assert_eq!(settled, 1200.0 * 5.0);
    }
}
