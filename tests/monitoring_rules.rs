//! The alerting rules shipped next to `deploy/` (`deploy/monitoring/`): valid for
//! Prometheus, each alert tested by `promtool test rules` on the series that call for it and
//! on healthy ones (alerts-test.yaml), and the prometheus-operator wrapper carrying exactly
//! the rule file's groups. promtool comes with Debian's `prometheus` package, which
//! scripts/test.sh installs.

use std::path::PathBuf;
use std::process::Command;

fn monitoring() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring")
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): install Debian's prometheus (scripts/test.sh does)")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

fn yaml(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(monitoring().join(file)).expect("read");
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn the_rules_are_valid_and_each_alert_is_tested() {
    let checked = promtool(&["check", "rules", "alerts.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts-test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a test that expects it to fire.
    let rules = yaml("alerts.yaml");
    let tests = std::fs::read_to_string(monitoring().join("alerts-test.yaml")).expect("read");
    let alerts: Vec<&str> = rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(alerts.len(), 7, "{alerts:?}");
    for alert in alerts {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "no test expects {alert} to fire"
        );
    }
}

#[test]
fn the_prometheus_rule_wrapper_carries_the_rule_file() {
    let rule = yaml("prometheusrule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["spec"]["groups"], yaml("alerts.yaml")["groups"]);
}

/// The metric names the binary registers, read from its source: full names written out
/// (`"midonet_kube_controllers_…"`), and `Opts::new("name", …)` (or a local `opts("name", …)`)
/// in a file with the namespace constant, under the file's subsystem constant if it has one.
fn registered_names() -> std::collections::BTreeSet<String> {
    fn rs_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                rs_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let literal_after = |text: &str, marker: &str| -> Vec<String> {
        text.match_indices(marker)
            .filter_map(|(i, _)| {
                let rest = text[i + marker.len()..].trim_start();
                let rest = rest.strip_prefix('"')?;
                Some(rest[..rest.find('"')?].to_string())
            })
            .collect()
    };
    let mut files = Vec::new();
    rs_files(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut names = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        for (i, _) in text.match_indices("\"midonet_kube_controllers_") {
            let rest = &text[i + 1..];
            names.insert(rest[..rest.find('"').unwrap_or(0)].to_string());
        }
        let namespace = literal_after(&text, "const NS: &str =")
            .into_iter()
            .chain(literal_after(&text, "const NAMESPACE: &str ="))
            .next();
        let Some(namespace) = namespace else { continue };
        let prefix = match literal_after(&text, "const SUBSYSTEM: &str =").first() {
            Some(sub) => format!("{namespace}_{sub}_"),
            None => format!("{namespace}_"),
        };
        // `opts(` is a file's own shorthand for `Opts::new(…).namespace(…)`.
        for marker in ["Opts::new(", "HistogramOpts::new(", "opts("] {
            for name in literal_after(&text, marker) {
                names.insert(format!("{prefix}{name}"));
            }
        }
    }
    names
}

#[test]
fn every_series_the_rules_read_is_one_the_binary_exports() {
    let registered = registered_names();
    assert!(
        registered.contains("midonet_kube_controllers_midonet_client_requests_total")
            && registered.contains("midonet_kube_controllers_translations"),
        "the source scan misses names: {registered:?}"
    );
    let rules = std::fs::read_to_string(monitoring().join("alerts.yaml")).expect("read");
    let used: std::collections::BTreeSet<&str> = rules
        .match_indices("midonet_kube_controllers_")
        .map(|(i, _)| {
            let rest = &rules[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    let unknown: Vec<&&str> = used.iter().filter(|n| !registered.contains(**n)).collect();
    assert!(
        unknown.is_empty(),
        "the rules read series nothing exports: {unknown:?}"
    );
}
