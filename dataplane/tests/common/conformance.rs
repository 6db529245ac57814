//! The conformance suite's data: cases ported from midolman's own simulation tests
//! (`midonet/midonet`, `midolman/src/test/`), each a topology of MidoNet REST resources,
//! a connection to trace and what midolman's test expects.
//!
//! The cases live in `dataplane/tests/conformance/*.json`, one file per midolman test
//! file (its `source`), each case naming the test it comes from (`test`). This module
//! reads them; `dataplane/tests/conformance.rs` runs them on the model built from the
//! resources in push order, `tests/sim_conformance.rs` through the simulator's REST API
//! and `POST /_sim/trace`, and both check the expectations here.
//!
//! In a case file, a string `@name` stands for the UUID of `name` (v5, so the same in
//! every run); rules without a `position` go after the rules of their chain listed
//! before them. A case adds resources to its topology (one with the item path of a
//! topology resource replaces it) and may remove some (`remove`: names of ids).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use midonet_dataplane::{Attachment, ProbeRequest, Step, Trace, Verdict};
use midonet_translators::model::{Kind, Resource};
use midonet_translators::TranslationResource;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

/// The namespace of the `@name` ids.
const NAMES: Uuid = Uuid::from_u128(0x6d69_646f_6c6d_616e_2d63_6f6e_666f_726d);

/// The UUID `@name` stands for.
pub fn named(name: &str) -> Uuid {
    Uuid::new_v5(&NAMES, name.as_bytes())
}

/// One file of cases: the midolman test file they come from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// The midolman test file, e.g. `midolman/src/test/scala/.../ChainTest.scala`.
    pub source: String,
    pub topologies: BTreeMap<String, TopologySpec>,
    pub cases: Vec<CaseSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    #[serde(default)]
    pub extends: Option<String>,
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    #[serde(default)]
    pub attachments: Vec<Value>,
}

/// A resource as a Translation entry holds it: kind, parent, body.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    pub kind: String,
    #[serde(default)]
    pub parent: String,
    pub body: Value,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// The midolman test (method or scenario) the case comes from.
    pub test: String,
    /// What the case shows, in a sentence.
    pub what: String,
    pub topology: String,
    #[serde(default)]
    pub add: Vec<ResourceSpec>,
    #[serde(default)]
    pub remove: Vec<String>,
    #[serde(default)]
    pub attachments: Vec<Value>,
    pub trace: ProbeRequest,
    pub expect: Expect,
}

/// What midolman's test expects, as the model's trace shows it. Every field set is
/// checked; a verdict is checked on every path.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// The forward leg's verdict on every path.
    pub verdict: Option<Verdict>,
    /// Every workload some path delivers to.
    pub delivered_to: Option<Vec<String>>,
    /// The packet as the first path's receiver got it (`proto src -> dst`).
    pub received: Option<String>,
    /// Text the first path's drop, reject or unsupported reason contains.
    pub reason: Option<String>,
    /// The ICMP message a router answered with on the first path.
    pub answer: Option<IcmpExpect>,
    /// The rule that decided or rewrote (a hop of the first path's forward leg names it).
    pub rule: Option<String>,
    /// The first path's reply leg verdict.
    pub reply: Option<Verdict>,
    /// Text the reply leg's drop reason contains.
    pub reply_reason: Option<String>,
    /// The source of what reaches the client back on the first path (`null`: nothing).
    #[serde(default, deserialize_with = "some")]
    pub client_sees: Option<Option<String>>,
    /// Every path works end to end (or not).
    pub works: Option<bool>,
    /// The ports the first flood of the forward leg reached.
    pub flood: Option<Vec<String>>,
    /// How many paths.
    pub paths: Option<usize>,
    /// The packet as the first path's reply leg delivered it.
    pub reply_received: Option<String>,
    /// Texts some hop or reason of the first path (either leg) contains.
    #[serde(default)]
    pub mentions: Vec<String>,
    /// Devices (`@name`) no hop of the first path's forward leg is at.
    #[serde(default)]
    pub not_via: Vec<String>,
}

/// `null` as `Some(None)`, absent as `None`.
fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcmpExpect {
    #[serde(rename = "type")]
    pub icmp_type: u8,
    pub code: u8,
    /// The address it comes from.
    pub from: Ipv4Addr,
}

/// A case ready to run: the resources in push order and the workloads.
pub struct Built {
    pub file: String,
    pub source: String,
    pub test: String,
    pub what: String,
    pub resources: Vec<Resource>,
    pub attachments: Vec<Attachment>,
    pub probe: ProbeRequest,
    pub expect: Expect,
}

impl Built {
    pub fn name(&self) -> String {
        format!("{} {} ({})", self.file, self.test, self.what)
    }

    /// The hosts the workloads sit on.
    pub fn hosts(&self) -> BTreeSet<Uuid> {
        self.attachments.iter().map(|a| a.host).collect()
    }
}

/// Replaces every `@name` string with its UUID.
fn resolve(v: &Value) -> Value {
    match v {
        Value::String(s) => match s.strip_prefix('@') {
            Some(name) => Value::String(named(name).to_string()),
            None => v.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(resolve).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), resolve(v))).collect()),
        other => other.clone(),
    }
}

fn typed(r: &ResourceSpec) -> Resource {
    let parent = resolve(&Value::String(r.parent.clone()));
    let parent = parent.as_str().unwrap_or_default().to_string();
    let entry = TranslationResource::new(r.kind.clone(), parent, resolve(&r.body).to_string());
    Resource::from_entry(&entry).unwrap_or_else(|e| panic!("{r:?}: {e}"))
}

/// The order a client creates kinds in, so that everything a resource names exists.
fn rank(kind: Kind) -> usize {
    [
        Kind::Chain,
        Kind::PortGroup,
        Kind::IpAddrGroup,
        Kind::Bridge,
        Kind::Router,
        Kind::Port,
        Kind::PortLink,
        Kind::Route,
        Kind::Rule,
        Kind::HostInterfacePort,
        Kind::MacPort,
        Kind::Ipv4MacPair,
        Kind::PortGroupPort,
        Kind::IpAddrGroupAddr,
    ]
    .iter()
    .position(|k| *k == kind)
    .unwrap_or(usize::MAX)
}

fn topology_of(file: &CaseFile, name: &str) -> (Vec<ResourceSpec>, Vec<Value>) {
    let t = file
        .topologies
        .get(name)
        .unwrap_or_else(|| panic!("no topology {name:?}"));
    let (mut res, mut atts) = match &t.extends {
        Some(base) => topology_of(file, base),
        None => (Vec::new(), Vec::new()),
    };
    res.extend(t.resources.iter().cloned());
    atts.extend(t.attachments.iter().cloned());
    (res, atts)
}

/// The case's resources: the topology's, replaced or added to by the case's, minus the
/// removed ones, in the order a client creates them, rules placed in listed order.
fn resources_of(file: &CaseFile, case: &CaseSpec) -> Vec<Resource> {
    let (base, _) = topology_of(file, &case.topology);
    let mut list: Vec<Resource> = Vec::new();
    for r in base.iter().chain(&case.add).map(typed) {
        match list.iter().position(|x| x.item_path() == r.item_path()) {
            Some(i) => list[i] = r,
            None => list.push(r),
        }
    }
    let removed: Vec<String> = case.remove.iter().map(|n| named(n).to_string()).collect();
    list.retain(|r| !removed.iter().any(|id| r.item_path().contains(id.as_str())));
    list.sort_by_key(|r| rank(r.kind()));
    let mut per_chain: BTreeMap<Uuid, u32> = BTreeMap::new();
    for r in &mut list {
        if let Resource::Rule(rule) = r {
            let n = per_chain.entry(rule.parent).or_default();
            *n += 1;
            if rule.position.is_none() {
                rule.position = Some(*n);
            }
        }
    }
    list
}

/// Every case of every file under `dir`, built.
pub fn load(dir: &Path) -> Vec<Built> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the case directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("a case file");
        let file: CaseFile =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let fname = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for case in &file.cases {
            let (_, base_atts) = topology_of(&file, &case.topology);
            let attachments = base_atts
                .iter()
                .chain(&case.attachments)
                .map(|a| serde_json::from_value(resolve(a)).expect("an attachment"))
                .collect();
            out.push(Built {
                file: fname.clone(),
                source: file.source.clone(),
                test: case.test.clone(),
                what: case.what.clone(),
                resources: resources_of(&file, case),
                attachments,
                probe: case.probe_resolved(),
                expect: case.expect.clone(),
            });
        }
    }
    out
}

impl CaseSpec {
    fn probe_resolved(&self) -> ProbeRequest {
        self.trace.clone()
    }
}

/// Whether `t` is what the case expects; `Err` says how not.
pub fn check(b: &Built, t: &Trace) -> Result<(), String> {
    let mut problems = Vec::new();
    forward(&b.expect, t, &mut problems)?;
    back(&b.expect, t, &mut problems);
    hops(&b.expect, t, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn want(problems: &mut Vec<String>, ok: bool, what: String) {
    if !ok {
        problems.push(what);
    }
}

/// The forward legs: verdicts, receivers, reasons, the ICMP answer, the deciding rule.
fn forward(e: &Expect, t: &Trace, problems: &mut Vec<String>) -> Result<(), String> {
    let first = t.paths.first().ok_or("no path")?;
    if let Some(v) = e.verdict {
        for p in &t.paths {
            let got = p.forward.verdict;
            want(problems, got == v, format!("verdict {got:?}, not {v:?}"));
        }
    }
    if let Some(names) = &e.delivered_to {
        let got: BTreeSet<String> = t.candidates().into_iter().map(|(n, _)| n).collect();
        let names: BTreeSet<String> = names.iter().cloned().collect();
        want(
            problems,
            got == names,
            format!("delivered to {got:?}, not {names:?}"),
        );
    }
    if let Some(r) = &e.received {
        let got = first
            .forward
            .received
            .map(|r| r.to_string())
            .unwrap_or_default();
        want(problems, &got == r, format!("received {got:?}, not {r:?}"));
    }
    if let Some(r) = &e.reason {
        let l = &first.forward;
        let got = l
            .drop_reason
            .clone()
            .or(l.unsupported.clone())
            .unwrap_or_default();
        want(
            problems,
            got.contains(r.as_str()),
            format!("reason {got:?} lacks {r:?}"),
        );
    }
    if let Some(a) = &e.answer {
        let got = first.forward.answered_with;
        let ok = got.is_some_and(|g| {
            g.icmp
                .is_some_and(|m| m.icmp_type == a.icmp_type && m.code == a.code)
                && g.src.ip == a.from
        });
        want(problems, ok, format!("answered with {got:?}, not {a:?}"));
    }
    if let Some(r) = &e.rule {
        let id = named(r.trim_start_matches('@'));
        let hit = first.forward.hops.iter().any(|h| h.rule == Some(id));
        want(problems, hit, format!("no hop names rule {r}"));
    }
    if let Some(n) = e.paths {
        let got = t.paths.len();
        want(problems, got == n, format!("{got} paths, not {n}"));
    }
    Ok(())
}

/// What comes back: the reply leg, what the client sees, whether it works.
fn back(e: &Expect, t: &Trace, problems: &mut Vec<String>) {
    let Some(first) = t.paths.first() else { return };
    let reply = first.reply.as_ref();
    if let Some(v) = e.reply {
        let got = reply.map(|l| l.verdict);
        want(
            problems,
            got == Some(v),
            format!("reply {got:?}, not {v:?}"),
        );
    }
    if let Some(r) = &e.reply_reason {
        let got = reply
            .and_then(|l| l.drop_reason.clone().or(l.unsupported.clone()))
            .unwrap_or_default();
        let ok = got.contains(r.as_str());
        want(problems, ok, format!("reply reason {got:?} lacks {r:?}"));
    }
    if let Some(r) = &e.reply_received {
        let got = reply.and_then(|l| l.received).map(|t| t.to_string());
        let got = got.unwrap_or_default();
        want(
            problems,
            &got == r,
            format!("reply received {got:?}, not {r:?}"),
        );
    }
    if let Some(c) = &e.client_sees {
        let got = first.client_sees.map(|s| s.to_string());
        want(
            problems,
            &got == c,
            format!("client sees {got:?}, not {c:?}"),
        );
    }
    if let Some(w) = e.works {
        let all = t.all_work();
        want(
            problems,
            all == w,
            format!("all paths work: {all}, not {w}"),
        );
    }
}

/// The hops: a flood's ports, texts mentioned, devices avoided.
fn hops(e: &Expect, t: &Trace, problems: &mut Vec<String>) {
    let Some(first) = t.paths.first() else { return };
    if let Some(ports) = &e.flood {
        let flood = first.forward.hops.iter().find(|h| h.step == Step::Flood);
        let got: BTreeSet<Uuid> = flood
            .map(|h| h.ports.iter().copied().collect())
            .unwrap_or_default();
        let ports: BTreeSet<Uuid> = ports
            .iter()
            .map(|p| named(p.trim_start_matches('@')))
            .collect();
        want(
            problems,
            got == ports,
            format!("flooded to {got:?}, not {ports:?}"),
        );
    }
    let texts: Vec<String> = std::iter::once(&first.forward)
        .chain(first.reply.as_ref())
        .flat_map(|l| {
            l.hops
                .iter()
                .map(|h| h.detail.clone())
                .chain(l.drop_reason.clone())
                .chain(l.unsupported.clone())
        })
        .collect();
    for m in &e.mentions {
        let found = texts.iter().any(|t| t.contains(m.as_str()));
        want(problems, found, format!("nothing mentions {m:?}"));
    }
    for d in &e.not_via {
        let id = named(d.trim_start_matches('@'));
        let via = first.forward.hops.iter().any(|h| h.device == Some(id));
        want(problems, !via, format!("the forward leg goes through {d}"));
    }
}
