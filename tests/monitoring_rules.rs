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
