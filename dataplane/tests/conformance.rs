//! The conformance suite on the model: every case ported from midolman's simulation tests
//! (`dataplane/tests/conformance/*.json`, see `common/conformance.rs`) built from its
//! resources in push order, traced, and held to what midolman's test expects.
//! `tests/sim_conformance.rs` runs the same cases through the simulator's REST API.

#[path = "common/conformance.rs"]
mod conformance;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use conformance::{check, load, Built};
use midonet_dataplane::{trace, RuleOrder, Topology, Trace};

fn cases() -> Vec<Built> {
    load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance"))
}

fn run(b: &Built) -> Result<Trace, String> {
    let topo = Topology::new(
        b.resources.clone(),
        RuleOrder::Pushed,
        b.attachments.clone(),
    );
    if !topo.problems().is_empty() {
        return Err(format!("topology problems: {:?}", topo.problems()));
    }
    trace(&topo, &b.probe.probe().expect("a probe")).map_err(|e| e.to_string())
}

#[test]
fn every_ported_case_behaves_as_midolman_expects() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut per_source: BTreeMap<String, usize> = BTreeMap::new();
    // CONFORMANCE_SHOW=text prints the traces of the cases whose name holds it.
    let show = std::env::var("CONFORMANCE_SHOW").ok();
    for b in &cases {
        *per_source.entry(b.source.clone()).or_default() += 1;
        if show.as_deref().is_some_and(|s| b.name().contains(s)) {
            println!("{}:\n{:#?}", b.name(), run(b));
        }
        match run(b).and_then(|t| check(b, &t).map_err(|e| format!("{e}\n{t:#?}"))) {
            Ok(()) => {}
            Err(e) => failures.push(format!("{}: {e}", b.name())),
        }
    }
    for (source, n) in &per_source {
        println!("{n:>4}  {source}");
    }
    println!("{:>4}  cases", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from midolman:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    assert!(cases.len() >= 80, "only {} cases", cases.len());
}

/// Every member of MidoNet's REST `Condition` (`rest_api/models/Condition.java`) is set
/// by some ported case's rule: none is left unexercised.
#[test]
fn the_cases_exercise_every_condition_field() {
    const CONDITION: &[&str] = &[
        "condInvert",
        "matchForwardFlow",
        "matchReturnFlow",
        "inPorts",
        "invInPorts",
        "outPorts",
        "invOutPorts",
        "portGroup",
        "invPortGroup",
        "inPortGroup",
        "invInPortGroup",
        "outPortGroup",
        "invOutPortGroup",
        "ipAddrGroupSrc",
        "invIpAddrGroupSrc",
        "ipAddrGroupDst",
        "invIpAddrGroupDst",
        "traversedDevice",
        "invTraversedDevice",
        "noVlan",
        "vlan",
        "dlType",
        "invDlType",
        "dlSrc",
        "dlSrcMask",
        "invDlSrc",
        "dlDst",
        "dlDstMask",
        "invDlDst",
        "nwTos",
        "invNwTos",
        "nwProto",
        "invNwProto",
        "nwSrcAddress",
        "nwSrcLength",
        "invNwSrc",
        "nwDstAddress",
        "nwDstLength",
        "invNwDst",
        "matchNwDstRewritten",
        "fragmentPolicy",
        "tpSrc",
        "tpDst",
        "invTpSrc",
        "invTpDst",
        "icmpDataSrcIpAddress",
        "icmpDataSrcIpLength",
        "invIcmpDataSrcIp",
        "icmpDataDstIpAddress",
        "icmpDataDstIpLength",
        "invIcmpDataDstIp",
    ];
    let mut used = BTreeSet::new();
    for b in cases() {
        for r in &b.resources {
            if let midonet_translators::model::Resource::Rule(_) = r {
                if let serde_json::Value::Object(m) = r.body() {
                    used.extend(m.keys().cloned());
                }
            }
        }
    }
    let missing: Vec<&&str> = CONDITION.iter().filter(|f| !used.contains(**f)).collect();
    assert!(missing.is_empty(), "no case sets {missing:?}");
}

/// The suite can fail: every case's check refuses a trace of the same case with its
/// verdict changed, and a case whose receiver is unplugged no longer passes.
#[test]
fn the_suite_notices_a_broken_network() {
    use midonet_dataplane::Verdict;
    let mut noticed = 0;
    for b in cases() {
        let Ok(mut t) = run(&b) else { continue };
        let was = t.paths[0].forward.verdict;
        t.paths[0].forward.verdict = if was == Verdict::Delivered {
            Verdict::Dropped
        } else {
            Verdict::Delivered
        };
        let verdict_checked = b.expect.verdict.is_some();
        if verdict_checked {
            assert!(
                check(&b, &t).is_err(),
                "{}: a changed verdict passes",
                b.name()
            );
        }
        // Unplug whatever the case delivers to: its expectations no longer hold.
        let Some(names) = &b.expect.delivered_to else {
            continue;
        };
        let mut broken = b.attachments.clone();
        broken.retain(|a| !names.contains(&a.name));
        if broken.len() == b.attachments.len() {
            // It delivers to a router, not to a workload.
            continue;
        }
        let topo = Topology::new(b.resources.clone(), RuleOrder::Pushed, broken);
        if let Ok(t) = trace(&topo, &b.probe.probe().expect("a probe")) {
            assert!(
                check(&b, &t).is_err(),
                "{}: unplugged, it still passes",
                b.name()
            );
            noticed += 1;
        }
    }
    assert!(noticed > 20, "only {noticed} cases were broken on purpose");
}
