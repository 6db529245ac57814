//! Times `check` and one flow-probe sample on a scenario translated in-process: no
//! apiserver, no controllers, no simulator. Each stage is timed on its own.
//!
//! `cargo run --release -p midonet-testkit --example check_at_scale -- --nodes 50 --pods 2000
//! --services 300 [--policies N] [--endpoints 4] [--namespaces 4] [--samples 5]
//! [--services-per-source 6] [--peers-per-source 2] [--no-check]`
//!
//! The probe's sample size defaults to the benchmark's at scale S; the 30,000-Translation
//! variant samples `--services-per-source 1 --peers-per-source 1`.

use std::time::Instant;

use midonet_dataplane::{check, RuleOrder, Topology};
use midonet_testkit::probe::{self, SampleSize};
use midonet_testkit::scenario::{Scale, Scenario};

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
    let mut times = Vec::new();
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        // Rules in the order the backend evaluates them (the translators' positions), as
        // the simulator lists them to the probe.
        let topo = Topology::new(
            translated.resources.clone(),
            RuleOrder::Pushed,
            attachments.clone(),
        );
        let built = t.elapsed();
        let bad = flows
            .iter()
            .filter(|f| probe::judge(&topo, f).is_err())
            .count();
        let one_thread = t.elapsed();
        let bad_parallel = probe::judge_all(&topo, &flows)
            .iter()
            .filter(|v| v.is_err())
            .count();
        assert_eq!(bad, bad_parallel);
        times.push((built, one_thread - built, t.elapsed() - one_thread, bad));
    }
    for (built, judged, parallel, bad) in &times {
        println!(
            "probe sample: {} flows ({bad} not ok): build {:.1} ms, judge {:.1} ms on one \
             thread, {:.1} ms on every core",
            flows.len(),
            built.as_secs_f64() * 1000.0,
            judged.as_secs_f64() * 1000.0,
            parallel.as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
