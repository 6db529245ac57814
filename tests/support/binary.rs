//! The `midonet-kube-controllers` binary run as operators run it: a child process with its
//! stderr kept in a file, and its operations endpoints.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::stack::free_port;

pub const BIN: &str = env!("CARGO_BIN_EXE_midonet-kube-controllers");

/// A running `midonet-kube-controllers run`; killed when dropped.
pub struct ControllerProcess {
    pub child: Child,
    /// Port of /metrics, /healthz, /readyz on 127.0.0.1.
    pub metrics: u16,
    /// Where its stderr (the logs) goes.
    pub log: PathBuf,
}

impl ControllerProcess {
    /// `run` with this kubeconfig against the MidoNet API at `midonet_api`, on a free
    /// metrics port, plus `args`.
    pub fn start(kubeconfig: &Path, midonet_api: &str, args: &[&str]) -> ControllerProcess {
        let metrics = free_port();
        let log = std::env::temp_dir().join(format!(
            "midonet-kube-controllers-{}-{metrics}.log",
            std::process::id()
        ));
        let stderr = std::fs::File::create(&log).expect("create the log file");
        let child = Command::new(BIN)
            .arg("run")
            .args(["--kubeconfig", &kubeconfig.display().to_string()])
            .args(["--midonet-api", midonet_api])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start midonet-kube-controllers");
        ControllerProcess {
            child,
            metrics,
            log,
        }
    }

    /// GET of an operations endpoint: (status code, body), `None` if it does not answer.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let resp = reqwest::get(format!("http://127.0.0.1:{}{path}", self.metrics))
            .await
            .ok()?;
        let code = resp.status().as_u16();
        Some((code, resp.text().await.ok()?))
    }

    pub async fn is_leader(&self) -> bool {
        self.get("/metrics")
            .await
            .is_some_and(|(_, m)| m.lines().any(|l| l == "midonet_kube_controllers_leader 1"))
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok);
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // The test failed: its output shows what the process said.
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!(
                "--- last lines of {} ---\n{}",
                self.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
