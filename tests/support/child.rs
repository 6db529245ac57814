//! The real controllers binary as a child process, as operators run it: started with
//! `run`, probed over its metrics port, stopped with SIGTERM or SIGKILL.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::stack::free_port;

/// The binary cargo built for this package.
pub const BIN: &str = env!("CARGO_BIN_EXE_midonet-kube-controllers");

/// One running `midonet-kube-controllers run`. Dropping it SIGKILLs the process.
pub struct ChildControllers {
    pub child: Child,
    pub metrics: u16,
    pub log: PathBuf,
}

impl ChildControllers {
    /// Starts `run` against `kubeconfig` and the MidoNet API at `api_url`, with the metrics
    /// endpoint on a free loopback port and `args` after those. Stderr (the logs) is appended
    /// to `log`.
    pub fn spawn(kubeconfig: &Path, api_url: &str, args: &[&str], log: &Path) -> ChildControllers {
        Self::spawn_with_env(kubeconfig, api_url, args, &[], log)
    }

    /// [`Self::spawn`] with these environment variables set for the process.
    pub fn spawn_with_env(
        kubeconfig: &Path,
        api_url: &str,
        args: &[&str],
        env: &[(&str, &str)],
        log: &Path,
    ) -> ChildControllers {
        let metrics = free_port();
        let stderr = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        let child = Command::new(BIN)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--midonet-api", api_url])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        ChildControllers {
            child,
            metrics,
            log: log.to_path_buf(),
        }
    }

    /// `run` as [`Self::spawn`] does, logging to a fresh file of its own (removed when the
    /// test passes, its last lines printed when it fails).
    pub fn start(kubeconfig: &Path, api_url: &str, args: &[&str]) -> ChildControllers {
        let log = Self::log_path(&format!("controllers-{}", free_port()));
        let _ = std::fs::remove_file(&log);
        Self::spawn(kubeconfig, api_url, args, &log)
    }

    /// [`Self::start`] with these environment variables set for the process.
    pub fn start_with_env(
        kubeconfig: &Path,
        api_url: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> ChildControllers {
        let log = Self::log_path(&format!("controllers-{}", free_port()));
        let _ = std::fs::remove_file(&log);
        Self::spawn_with_env(kubeconfig, api_url, args, env, &log)
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A log file in the temporary directory named after `what` and this test process.
    pub fn log_path(what: &str) -> PathBuf {
        std::env::temp_dir().join(format!("midonet-{what}-{}.log", std::process::id()))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET` on the metrics port: status and body, `None` if nothing answered.
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
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -TERM {}", self.child.id());
    }

    /// SIGKILL, and reap the process.
    pub fn sigkill(mut self) {
        self.kill_and_reap();
    }

    fn kill_and_reap(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How much of each log line a failed test prints.
const LINE_CHARS: usize = 300;

impl Drop for ChildControllers {
    fn drop(&mut self) {
        self.kill_and_reap();
        if std::thread::panicking() {
            // The test failed: its output shows what the process said. Kept short (the
            // latest warnings and errors, then the last lines, each cut), so that the
            // panic message above it stays in view of whoever reads the end of the output.
            let logs = self.logs();
            let cut = |l: &str| l.chars().take(LINE_CHARS).collect::<String>();
            let last = |lines: Vec<&str>, n: usize| {
                let mut tail: Vec<String> = lines.into_iter().rev().take(n).map(cut).collect();
                tail.reverse();
                tail.join("\n")
            };
            let complaints = logs
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .collect();
            eprintln!(
                "--- latest warnings and errors of {log} ---\n{}\n--- last lines of {log} ---\n{}",
                last(complaints, 12),
                last(logs.lines().collect(), 8),
                log = self.log.display(),
            );
        }
    }
}
