//! What `check` and the flow probe's judgement cost on a translated scenario, in-process
//! (no apiserver, no simulator): the scenario's objects translated by the pure
//! translators, the topology built from the Translations' resources, then `check` over
//! every flow it plans, or the probe's sample judged a number of times.
//!
//! ```text
//! cargo run --release -p midonet-testkit --example check_cost -- NODES PODS SERVICES POLICIES [JUDGE_ROUNDS]
//! ```
//!
//! With `JUDGE_ROUNDS`, the probe's sample (one Service port and one peer pod per source,
//! as the 30,000-Translation benchmark samples) is judged that many times instead of
//! running `check`. The scenario is the benchmark's (four namespaces, four endpoints per
//! Service, policy `i` isolating namespace `i` and admitting the next one), without the
//! edge. `docs/benchmark.md` gives the figures it measured.

use std::process::ExitCode;
use std::time::Instant;

use midonet_dataplane::{RuleOrder, Topology};
use midonet_testkit::probe::{judge_all, select_flows, SampleSize};
use midonet_testkit::scenario::{Scale, Scenario};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("check_cost: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|e| format!("{a:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let [nodes, pods, services, policies, rest @ ..] = args.as_slice() else {
        return Err("usage: check_cost NODES PODS SERVICES POLICIES [JUDGE_ROUNDS]".into());
    };
    let scale = Scale {
        nodes: *nodes,
        pods: *pods,
        services: *services,
        endpoints_per_service: 4,
        namespaces: 4,
    };
    let built = Instant::now();
    let t = Scenario::new("bench", scale).translated(*policies)?;
    let topo = Topology::new(t.resources, RuleOrder::Pushed, t.cluster.attachments());
    eprintln!(
        "translated and built in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    match rest.first() {
        Some(&rounds) => judge(&topo, &t.cluster, rounds),
        None => {
            let started = Instant::now();
            let r = midonet_dataplane::check(&topo, &t.cluster, &mut |_, _| {});
            println!(
                "check: {} flows, {} failed, in {:.2} s",
                r.flows_checked,
                r.failures.len(),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
    }
}

fn judge(
    topo: &Topology,
    cluster: &midonet_dataplane::Cluster,
    rounds: usize,
) -> Result<(), String> {
    let size = SampleSize {
        services_per_source: 1,
        peers_per_source: 1,
    };
    let flows = select_flows(cluster, size);
    let started = Instant::now();
    for _ in 0..rounds {
        let bad = judge_all(topo, &flows)
            .into_iter()
            .filter(Result::is_err)
            .count();
        if bad > 0 {
            return Err(format!("{bad} of the probe's flows are not ok"));
        }
    }
    let per = started.elapsed().as_secs_f64() / rounds.max(1) as f64;
    println!(
        "probe: {} flows judged in {:.1} ms per round ({rounds} rounds)",
        flows.len(),
        per * 1000.0
    );
    Ok(())
}
