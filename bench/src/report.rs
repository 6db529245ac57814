//! What the bench prints: a table of rows (measure, value, target) for a person, then the
//! JSON for scripts (`scripts/bench-ratio.sh`), also written to `--json-out`. Each phase
//! contributes its rows and its JSON keys; the JSON's keys are the stable interface.

use std::time::Duration;

use crate::cli::Args;
use crate::Res;

/// One line of the table.
pub struct Row {
    pub name: &'static str,
    pub value: String,
    pub target: &'static str,
}

pub fn row(name: &'static str, value: impl Into<String>, target: &'static str) -> Row {
    Row {
        name,
        value: value.into(),
        target,
    }
}

/// Milliseconds, as a number for the JSON.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Seconds, for the table.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Adds every key of `more` (an object) to `result` (an object).
pub fn merge(result: &mut serde_json::Value, more: serde_json::Value) {
    if let (Some(all), serde_json::Value::Object(more)) = (result.as_object_mut(), more) {
        all.extend(more);
    }
}

/// Prints a phase's rows to stderr as soon as the phase is done, so that a run stopped
/// (or failing) in a later phase keeps the figures of the earlier ones.
pub fn progress(phase: &str, rows: &[Row]) {
    for r in rows {
        eprintln!(
            "bench: {phase}: {}: {} (target: {})",
            r.name, r.value, r.target
        );
    }
}

/// Prints the table and the JSON, and writes the JSON to `--json-out`.
pub fn print(args: &Args, rows: &[Row], result: &serde_json::Value) -> Res<()> {
    println!(
        "scale: {} nodes, {} pods ({}), {} services x {} endpoints; simulator latency 1 ms",
        args.nodes,
        args.pods,
        match args.pods_with_mac_every {
            0 => "none with a MAC annotation".to_string(),
            1 => "each with a MAC annotation".to_string(),
            n => format!("1 in {n} with a MAC annotation"),
        },
        args.services,
        args.endpoints_per_service
    );
    if args.no_edge {
        println!("no edge: every Service ClusterIP");
    } else {
        println!(
            "edge: {n} uplinks on {n} gateway hosts; of every {} Services one NodePort and one \
             LoadBalancer (lbipam), half of them externalTrafficPolicy Local",
            args.edge_services_every,
            n = crate::edge::UPLINKS.len()
        );
    }
    println!("{:<46} {:>22}  target", "measure", "value");
    for r in rows {
        println!("{:<46} {:>22}  {}", r.name, r.value, r.target);
    }
    let text = serde_json::to_string_pretty(result)?;
    println!("{text}");
    if let Some(path) = &args.json_out {
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}
