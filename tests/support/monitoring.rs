//! Prometheus from Debian (`prometheus` 2.42) as users run it against the cluster: it
//! scrapes the pods that carry the `prometheus.io/scrape`, `…/port` and `…/path` annotations
//! `deploy/` sets, and evaluates `deploy/monitoring/alerts.yaml`. Debian builds Prometheus
//! without Kubernetes service discovery, so [`Prometheus::discover`] does what its `pod`
//! role with the usual relabelling does: it lists the pods through the apiserver and writes
//! their annotated addresses, with `namespace` and `pod` labels, to a `file_sd` file.
//! A child process of the test, killed when dropped; its data in the control plane's
//! directory.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{control_plane, repo_root, wait_until};

pub struct Prometheus {
    child: Child,
    pub port: u16,
    targets: std::path::PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping every second, evaluating the rules every second.
    pub fn start() -> Prometheus {
        let cp = control_plane();
        let dir = cp.dir.join("prometheus");
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let targets = dir.join("targets.json");
        std::fs::write(&targets, "[]").expect("targets");
        let config = format!(
            r#"global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: midonet-kube-controllers
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 1s
"#,
            rules = repo_root().join("deploy/monitoring/alerts.yaml").display(),
            targets = targets.display(),
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("config");
        let port = super::stack::free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run prometheus ({e}): scripts/test.sh installs Debian's")
            });
        Prometheus {
            child,
            port,
            targets,
        }
    }

    /// Lists the pods through the apiserver and gives Prometheus those annotated
    /// `prometheus.io/scrape: "true"`, at their address and annotated port and path.
    pub async fn discover(&self, client: &kube::Client) {
        use k8s_openapi::api::core::v1::Pod;
        let pods = kube::Api::<Pod>::all(client.clone())
            .list(&Default::default())
            .await
            .expect("list pods");
        let groups: Vec<serde_json::Value> = pods
            .items
            .iter()
            .filter_map(|p| {
                let a = p.metadata.annotations.as_ref()?;
                if a.get("prometheus.io/scrape").map(String::as_str) != Some("true") {
                    return None;
                }
                let ip = p.status.as_ref()?.pod_ip.as_ref()?;
                let port = a.get("prometheus.io/port")?;
                let path = a
                    .get("prometheus.io/path")
                    .cloned()
                    .unwrap_or("/metrics".into());
                Some(serde_json::json!({
                    "targets": [format!("{ip}:{port}")],
                    "labels": {
                        "__metrics_path__": path,
                        "namespace": p.metadata.namespace,
                        "pod": p.metadata.name,
                    }
                }))
            })
            .collect();
        let tmp = self.targets.with_extension("tmp");
        std::fs::write(&tmp, serde_json::Value::from(groups).to_string()).expect("targets");
        std::fs::rename(&tmp, &self.targets).expect("targets");
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Option<serde_json::Value> {
        let v: serde_json::Value = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}/api/v1/{path}", self.port))
            .query(query)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (v["status"] == "success").then(|| v["data"].clone())
    }

    /// An instant query's samples: (labels, value).
    pub async fn query(&self, promql: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        let data = self.api("query", &[("query", promql)]).await?;
        Some(
            data["result"]
                .as_array()?
                .iter()
                .filter_map(|r| Some((r["metric"].clone(), r["value"][1].as_str()?.parse().ok()?)))
                .collect(),
        )
    }

    /// Waits until `promql` answers one sample satisfying `ok`; answers its value.
    pub async fn wait_value(
        &self,
        promql: &str,
        ok: impl Fn(f64) -> bool,
        timeout: Duration,
    ) -> f64 {
        wait_until(&format!("Prometheus: {promql}"), timeout, || async {
            let samples = self.query(promql).await?;
            match samples.as_slice() {
                [(_, v)] if ok(*v) => Some(*v),
                _ => None,
            }
        })
        .await
    }

    /// The alerting rules Prometheus evaluates: (name, health, state).
    pub async fn alert_rules(&self) -> Vec<(String, String, String)> {
        let Some(data) = self.api("rules", &[("type", "alert")]).await else {
            return Vec::new();
        };
        data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("health"), s("state"))
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
