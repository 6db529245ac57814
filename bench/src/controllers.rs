//! The controllers under test, as a child process: the binary of the bench's own build
//! profile beside the bench's (`target/<profile>/midonet-kube-controllers`), with the
//! arguments the caller gives (which controllers, the edge: `Bench::spawn_controllers`), no
//! leader election, and its metrics on a free loopback port. Its stderr is appended to `$TMPDIR/midonet-kube-bench-<pid>-controllers.log`.
//!
//! What the bench reads of it: `/readyz`, counters of `/metrics`, and its CPU time and RSS
//! from `/proc`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::Res;

pub struct Controllers {
    child: Child,
    metrics_port: u16,
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Controllers {
    /// Runs the controllers against `kubeconfig` and the simulator at `api_url`, with
    /// `extra` arguments.
    pub fn spawn(kubeconfig: &Path, api_url: &str, extra: &[String]) -> Res<Controllers> {
        let exe = std::env::current_exe()?.with_file_name("midonet-kube-controllers");
        let metrics_port = free_port()?;
        let log = std::env::temp_dir().join(format!(
            "midonet-kube-bench-{}-controllers.log",
            std::process::id()
        ));
        let child = Command::new(&exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--midonet-api", api_url, "--leader-elect", "false"])
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{metrics_port}"))
            // Quiet by default; MIDONETKUBE_LOG_LEVEL (e.g. `info`) for a diagnosis run.
            .args([
                "--log-level",
                &std::env::var("MIDONETKUBE_LOG_LEVEL").unwrap_or_else(|_| "warn".into()),
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(log)?,
            )
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        Ok(Controllers {
            child,
            metrics_port,
        })
    }

    pub fn pid(&self) -> Res<u32> {
        self.child.id().ok_or_else(|| "controllers exited".into())
    }

    /// Peak resident set size in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> Res<u64> {
        self.status_kib("VmHWM:")
    }

    /// Resident set size now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> Res<u64> {
        self.status_kib("VmRSS:")
    }

    /// A `kB` field of `/proc/PID/status`.
    fn status_kib(&self, field: &str) -> Res<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {field} in /proc/PID/status").into())
    }

    /// SIGTERM, and the exit within 30 s (else a kill and an error).
    pub async fn stop(mut self) -> Res<()> {
        let pid = self.pid()?;
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                Err("controllers did not stop within 30 s of SIGTERM".into())
            }
        }
    }

    /// How long until `/readyz` answered 200; an error after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Res<Duration> {
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(start.elapsed());
                }
            }
            if start.elapsed() > timeout {
                return Err(format!("/readyz not 200 within {timeout:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The controllers' `/metrics`, as text.
    async fn metrics_text(&self) -> Res<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        Ok(reqwest::get(&url).await?.text().await?)
    }

    /// A counter's samples by the value of its one label `label`.
    pub async fn metric_by_label(&self, name: &str, label: &str) -> Res<BTreeMap<String, f64>> {
        let text = self.metrics_text().await?;
        let prefix = format!("{name}{{{label}=\"");
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (value_of_label, sample) = rest.split_once("\"} ")?;
                Some((
                    value_of_label.to_string(),
                    sample.trim().parse::<f64>().ok()?,
                ))
            })
            .collect())
    }

    /// Sum of a metric's samples whose line contains `filter`.
    pub async fn metric(&self, name: &str, filter: &str) -> Res<f64> {
        let text = self.metrics_text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter(|l| l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' '))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum())
    }
}
