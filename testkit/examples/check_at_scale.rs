//! Times `check` and one flow-probe sample on a scenario translated in-process: no
//! apiserver, no controllers, no simulator. Each stage is timed on its own.
//!
//! `cargo run --release -p midonet-testkit --example check_at_scale -- --nodes 50 --pods 2000
//! --services 300 [--policies N] [--endpoints 4] [--namespaces 4] [--samples 5]
//! [--services-per-source 6] [--peers-per-source 2] [--no-check]`
//!
//! Then the probe's samples during a bump's cutover: a few hosts' bindings off and back,
//! and a mirror of a route to one node's network added and gone (read by the flows routed
//! into that network), each a batch after which only the flows whose traces read what changed are judged
//! again, beside what judging every flow afresh costs.
//!
//! The probe's sample size defaults to the benchmark's at scale S; the 30,000-Translation
//! variant samples `--services-per-source 1 --peers-per-source 1`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use midonet_dataplane::{check, Attachment, LiveTopology, RecordChange, RuleOrder, Topology};
use midonet_testkit::probe::{self, ProbeFlow, SampleSize, Verdicts};
use midonet_testkit::scenario::{Scale, Scenario, Translated};
use midonet_translators::model::Resource;
use uuid::Uuid;

fn main() {
    if let Err(e) = run() {
        eprintln!("check_at_scale: {e}");
        std::process::exit(2);
    }
}

fn arg(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a number")),
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let s = Scale::S;
    let scale = Scale {
        nodes: arg(&args, "--nodes", s.nodes)?,
        pods: arg(&args, "--pods", s.pods)?,
        services: arg(&args, "--services", s.services)?,
        endpoints_per_service: arg(&args, "--endpoints", s.endpoints_per_service)?,
        namespaces: arg(&args, "--namespaces", s.namespaces)?,
    };
    let policies = arg(&args, "--policies", 0)?;
    let samples = arg(&args, "--samples", 5)?;

    let t = Instant::now();
    let scenario = Scenario::new("bench", scale);
    let translated = scenario.translated(policies)?;
    let attachments = translated.cluster.attachments();
    println!(
        "scenario: {scale:?}, {policies} policies: {} resources, {} attachments, translated in {:.2} s",
        translated.resources.len(),
        attachments.len(),
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let topo = Topology::new(
        translated.resources.clone(),
        RuleOrder::Pushed,
        attachments.clone(),
    );
    println!("topology build: {:.3} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let report = if args.iter().any(|a| a == "--no-check") {
        midonet_dataplane::Report::default()
    } else {
        check(&topo, &translated.cluster, &mut |_, _| {})
    };
    let failed = report.failures.len();
    println!(
        "check: {} flows, {failed} failed, evaluated in {:.3} s",
        report.flows_checked,
        t.elapsed().as_secs_f64()
    );
    for (kind, tally) in &report.by_kind {
        println!(
            "  {:<16} {:>7} {:>5}",
            kind.name(),
            tally.checked,
            tally.failed
        );
    }
    for f in report.failures.iter().take(5) {
        println!("  FAILED {} -> {}: {}", f.from, f.to, f.problem);
    }

    // One probe sample as the benchmark takes it: the flows it samples, judged on the
    // topology built from every resource.
    let flows = probe::select_flows(
        &translated.cluster,
        SampleSize {
            services_per_source: arg(&args, "--services-per-source", 6)?,
            peers_per_source: arg(&args, "--peers-per-source", 2)?,
        },
    );
    let times = sample_times(&translated, &attachments, &flows, samples);
    print_sample_times(&times, flows.len());
    cutover_samples(&translated, attachments, &flows);
    Ok(())
}

/// `samples` probe samples, each on a topology built anew: how long the build took, the
/// judgement on one thread (every ARP exchange walked anew) and on every core after it,
/// and how many flows were not ok.
fn sample_times(
    translated: &Translated,
    attachments: &[Attachment],
    flows: &[ProbeFlow],
    samples: usize,
) -> Vec<(Duration, Duration, Duration, usize)> {
    let mut times = Vec::new();
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        // Rules in the order the backend evaluates them (the translators' positions), as
        // the simulator lists them to the probe.
        let topo = Topology::new(
            translated.resources.clone(),
            RuleOrder::Pushed,
            attachments.to_vec(),
        );
        let built = t.elapsed();
        let bad = flows
            .iter()
            .filter(|f| probe::judge(&topo, f).is_err())
            .count();
        let one_thread = t.elapsed();
        let bad_parallel = probe::judge_all(&topo, flows)
            .iter()
            .filter(|v| v.is_err())
            .count();
        assert_eq!(bad, bad_parallel);
        times.push((built, one_thread - built, t.elapsed() - one_thread, bad));
    }
    times
}

fn print_sample_times(times: &[(Duration, Duration, Duration, usize)], flows: usize) {
    for (built, judged, parallel, bad) in times {
        println!(
            "probe sample: {flows} flows ({bad} not ok): build {:.1} ms, judge {:.1} ms on one \
             thread, {:.1} ms on every core",
            built.as_secs_f64() * 1000.0,
            judged.as_secs_f64() * 1000.0,
            parallel.as_secs_f64() * 1000.0
        );
    }
}

/// A record of a mirror of the first route to a node's network (as a cutover's link
/// adds): the same destination and next hop, one weight higher, so it never wins. What
/// it touches is the flows routed into that network.
fn a_mirror_route(records: &BTreeMap<String, Vec<Resource>>) -> RecordChange {
    let first = records.values().find_map(|r| match r.as_slice() {
        [Resource::Route(x)] if x.dst_network_length == Some(24) => Some(x.clone()),
        _ => None,
    });
    let Some(mut mirror) = first else {
        return ("route/mirror".into(), Some(Vec::new()));
    };
    mirror.id = Uuid::from_u128(0xfeed);
    mirror.weight = Some(mirror.weight.unwrap_or(100) + 1);
    ("route/mirror".into(), Some(vec![Resource::Route(mirror)]))
}

/// The batches `cutover_samples` applies: three hosts' bindings off and back, a route
/// added and gone; each named.
fn cutover_batches(records: &BTreeMap<String, Vec<Resource>>) -> Vec<(String, Vec<RecordChange>)> {
    let mut hosts = BTreeMap::<Uuid, Vec<&String>>::new();
    for (k, v) in records {
        if let [Resource::HostInterfacePort(b)] = v.as_slice() {
            hosts.entry(b.parent).or_default().push(k);
        }
    }
    let route = a_mirror_route(records);
    let mut batches: Vec<(String, Vec<RecordChange>)> = Vec::new();
    for keys in hosts.values().take(3) {
        for on in [false, true] {
            let batch = keys
                .iter()
                .map(|k| ((*k).clone(), on.then(|| records[*k].clone())))
                .collect();
            let what = format!(
                "a host's {} bindings {}",
                keys.len(),
                if on { "back" } else { "off" }
            );
            batches.push((what, batch));
        }
    }
    batches.push((
        "a mirror of a node network's route added".into(),
        vec![route.clone()],
    ));
    batches.push(("that route gone".into(), vec![(route.0, None)]));
    batches
}

/// The probe's samples during a bump's cutover, as it takes them: the live topology of
/// every record judged once, then the bindings of a few hosts off and back on, each a
/// batch of changes after which only the flows whose traces read what changed are judged
/// again.
fn cutover_samples(translated: &Translated, attachments: Vec<Attachment>, flows: &[ProbeFlow]) {
    let records = translated.records("t");
    let t = Instant::now();
    let mut live = LiveTopology::new(attachments);
    live.apply(
        records
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect(),
    );
    let mut verdicts = Verdicts::of(live.topology(), flows);
    println!(
        "live topology of {} records, every flow judged: {:.1} ms",
        live.records(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    for (what, batch) in cutover_batches(&records) {
        let t = Instant::now();
        let touched = live.apply(batch);
        let applied = t.elapsed();
        let judged = verdicts.update(live.topology(), flows, &touched);
        let judging = t.elapsed() - applied;
        let down = verdicts.ok().iter().filter(|v| v.is_err()).count();
        // What judging every flow afresh costs (a copy starts with no ARP exchange
        // walked), and that it agrees.
        let fresh = live.topology().clone();
        let t = Instant::now();
        let all = probe::judge_all(&fresh, flows);
        let every = t.elapsed();
        assert_eq!(
            all,
            verdicts.ok(),
            "the kept verdicts differ from a full judgement"
        );
        println!(
            "cutover sample: {what}: apply {:.1} ms, {judged} flows \
             judged ({down} not ok) in {:.1} ms; every flow afresh {:.1} ms",
            applied.as_secs_f64() * 1000.0,
            judging.as_secs_f64() * 1000.0,
            every.as_secs_f64() * 1000.0
        );
    }
}
