//! The controllers under test, as a child process: the binary of the bench's own build
//! profile beside the bench's (`target/<profile>/midonet-kube-controllers`), with the
//! arguments the caller gives (which controllers, the edge: `Bench::spawn_controllers`), no
//! leader election, and its metrics on a free loopback port. Its stderr is appended to `$TMPDIR/midonet-kube-bench-<pid>-controllers.log`.
//!
//! What the bench reads of it: `/readyz`, counters of `/metrics`, and its CPU time and RSS
//! from `/proc`.
//!
//! Stopping it ([`Controllers::stop`]) waits for the process's exit, then for the pusher's
//! *run marker* (`midonet_kube_controllers::recovery`: a Lease its pusher holds while it
//! runs and clears at a clean stop) to read cleared: the process the bench started may be a
//! wrapper (heaptrack's script, say) that exits or is signalled while the real controllers
//! keep running, and what the bench does next (the cost probe's status writes, a new
//! controllers process) relies on no pusher writing any more.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, ResourceExt};
use midonet_kube_controllers::config::{Controller, RunArgs};
use midonet_kube_controllers::recovery::{marker_name, predecessor, Predecessor};
use tokio::process::{Child, Command};

use crate::Res;

/// How long after the controllers' exit their pusher's run marker may take to read cleared
/// (their pusher clears it before the process exits: this is slack, not a wait for it).
const MARKER_WAIT: Duration = Duration::from_secs(10);
const MARKER_POLL: Duration = Duration::from_millis(200);

pub struct Controllers {
    child: Child,
    metrics_port: u16,
    /// Where their stderr goes.
    log: PathBuf,
    /// What says whether their pusher still runs once the process exited.
    pusher: PusherMarker,
}

/// The run marker of the controllers' pusher, as their settings name it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PusherMarker {
    /// No pusher among the controllers.
    NoPusher,
    /// A pusher with crash recovery off: it keeps no marker.
    Unmarked,
    /// The Lease `namespace/name`.
    Lease { namespace: String, name: String },
}

/// The controllers' `run` settings, parsed as the controllers parse them.
#[derive(Parser)]
struct RunCli {
    #[command(flatten)]
    run: RunArgs,
}

impl PusherMarker {
    /// The marker of controllers run with `args` (those after `run`) and the bench's
    /// environment, which they inherit: the leader-election Lease's namespace and name
    /// (`--leader-election-namespace`, `--leader-election-name` or their variables) give
    /// it, `midonet_kube_controllers::recovery::marker_name`.
    fn of_run_args(args: &[String]) -> Res<PusherMarker> {
        let argv =
            std::iter::once("midonet-kube-controllers").chain(args.iter().map(String::as_str));
        let cfg = RunCli::try_parse_from(argv)?.run.validate()?;
        Ok(if !cfg.controllers.contains(&Controller::Pusher) {
            PusherMarker::NoPusher
        } else if !cfg.crash_recovery {
            PusherMarker::Unmarked
        } else {
            PusherMarker::Lease {
                namespace: cfg.leader_election_namespace,
                name: marker_name(&cfg.leader_election_name),
            }
        })
    }
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
        let mut args: Vec<String> = vec![
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--midonet-api".into(),
            api_url.into(),
            "--leader-elect".into(),
            "false".into(),
            "--metrics-address".into(),
            format!("127.0.0.1:{metrics_port}"),
            // Quiet by default; MIDONETKUBE_LOG_LEVEL (e.g. `info`) for a diagnosis run.
            "--log-level".into(),
            std::env::var("MIDONETKUBE_LOG_LEVEL").unwrap_or_else(|_| "warn".into()),
        ];
        args.extend(extra.iter().cloned());
        let pusher = PusherMarker::of_run_args(&args)
            .map_err(|e| format!("the controllers' arguments {args:?}: {e}"))?;
        let child = Command::new(&exe)
            .arg("run")
            .args(&args)
            .stdin(Stdio::null())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(&log)?,
            )
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        Ok(Controllers {
            child,
            metrics_port,
            log,
            pusher,
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

    /// A clean stop, which whatever the bench does next relies on: SIGTERM, the exit within
    /// 30 s (else a kill and an error), then no pusher left running
    /// ([`Self::confirm_pusher_stopped`]; an error if one is).
    pub async fn stop(mut self, client: &Client) -> Res<()> {
        self.terminate().await?;
        self.confirm_pusher_stopped(client).await
    }

    /// SIGTERM, and the exit within 30 s (else a kill and an error).
    async fn terminate(&mut self) -> Res<()> {
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

    /// Once the process exited: waits up to [`MARKER_WAIT`] for the pusher's run marker to
    /// read cleared, as the pusher leaves it at a clean stop; an error naming its holder if
    /// it stays held or is written again (a pusher still running: a wrapper, say, whose
    /// exit left the real controllers running). No marker read at all is no pusher ever
    /// marked running.
    async fn confirm_pusher_stopped(&self, client: &Client) -> Res<()> {
        let (namespace, name) = match &self.pusher {
            PusherMarker::NoPusher => return Ok(()),
            PusherMarker::Unmarked => {
                eprintln!(
                    "bench: crash recovery is off, so the pusher keeps no run marker: \
                     cannot confirm it stopped with the controllers' process"
                );
                return Ok(());
            }
            PusherMarker::Lease { namespace, name } => (namespace, name),
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let start = Instant::now();
        let mut first_version = None;
        loop {
            let lease = leases.get_opt(name).await.map_err(|e| {
                format!("cannot read the pusher's run marker {namespace}/{name}: {e}")
            })?;
            let Predecessor::Unclean(holder) = predecessor(lease.as_ref()) else {
                return Ok(());
            };
            let version = lease.as_ref().and_then(|l| l.resource_version());
            let rewritten = *first_version.get_or_insert_with(|| version.clone()) != version;
            if rewritten || start.elapsed() >= MARKER_WAIT {
                let diagnosis = still_held(
                    namespace,
                    name,
                    &holder,
                    rewritten,
                    &self.log,
                    holder_process,
                );
                return Err(diagnosis.into());
            }
            tokio::time::sleep(MARKER_POLL).await;
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

/// The diagnosis of a run marker `namespace/name` still held by `holder` after the
/// controllers' process exited (`rewritten`: written again meanwhile). `process` says
/// which live process of this host the holder is, if any.
fn still_held(
    namespace: &str,
    name: &str,
    holder: &str,
    rewritten: bool,
    log: &Path,
    process: impl Fn(&str) -> Option<(u32, String)>,
) -> String {
    let how = if rewritten {
        "and written again after".to_string()
    } else {
        format!("{} s after", MARKER_WAIT.as_secs())
    };
    let what = match process(holder) {
        Some((pid, cmdline)) => format!(
            "its process {pid} still runs ({cmdline}); its writes would compete with the \
             bench's (stop it by hand)"
        ),
        None => format!(
            "no process of this host is that holder: if no pusher runs elsewhere, it did not \
             stop cleanly (its log: {})",
            log.display()
        ),
    };
    format!(
        "the pusher's run marker {namespace}/{name} is still held by {holder} {how} the \
         controllers' process exited: is a wrapper leaving them running? {what}"
    )
}

/// The live controllers process of this host that the run-marker holder `holder` names, if
/// any: the controllers' identity without `POD_NAME` is `<HOSTNAME>-<pid>`. Its pid and
/// command line.
fn holder_process(holder: &str) -> Option<(u32, String)> {
    let pid: u32 = holder.rsplit_once('-')?.1.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let cmdline = cmdline.trim().to_string();
    cmdline
        .contains("midonet-kube-controllers")
        .then_some((pid, cmdline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_marker_is_the_one_the_controllers_settings_name() {
        let base = [
            "--midonet-api",
            "http://127.0.0.1:1",
            "--leader-elect",
            "false",
        ];
        let marker = |extra: &[&str]| {
            let mut args = strings(&base);
            args.extend(strings(extra));
            PusherMarker::of_run_args(&args).unwrap()
        };
        assert_eq!(
            marker(&["--controllers", "pod,pusher"]),
            PusherMarker::Lease {
                namespace: "kube-system".into(),
                name: "midonet-kube-controllers-pusher".into(),
            }
        );
        assert_eq!(
            marker(&[
                "--controllers",
                "pusher",
                "--leader-election-name",
                "x",
                "--leader-election-namespace",
                "ns"
            ]),
            PusherMarker::Lease {
                namespace: "ns".into(),
                name: "x-pusher".into(),
            }
        );
        assert_eq!(marker(&["--controllers", "pod"]), PusherMarker::NoPusher);
        assert_eq!(
            marker(&["--controllers", "pusher", "--crash-recovery", "false"]),
            PusherMarker::Unmarked
        );
    }

    #[test]
    fn a_held_marker_is_diagnosed_with_its_holder_and_process() {
        let log = Path::new("/tmp/c.log");
        let live = |_: &str| Some((42, "midonet-kube-controllers run".to_string()));
        let message = still_held("kube-system", "m-pusher", "h-42", false, log, live);
        assert!(message.starts_with(
            "the pusher's run marker kube-system/m-pusher is still held by h-42 10 s after the \
             controllers' process exited: is a wrapper leaving them running?"
        ));
        assert!(message.contains("process 42 still runs"));
        let gone = still_held("kube-system", "m-pusher", "h-42", true, log, |_| None);
        assert!(gone.contains("by h-42 and written again after the controllers'"));
        assert!(gone.contains("did not stop cleanly (its log: /tmp/c.log)"));
    }

    #[test]
    fn a_holder_names_a_process_only_if_it_is_the_controllers() {
        assert_eq!(holder_process("pod-name"), None);
        // The bench itself: a live process, not the controllers.
        let me = format!("host-{}", std::process::id());
        let found = holder_process(&me);
        assert!(found.is_none_or(|(_, c)| c.contains("midonet-kube-controllers")));
    }
}
