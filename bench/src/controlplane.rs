//! The bench's own control plane (`scripts/k8s-env.sh` in a temporary directory named by
//! the bench's pid, stopped by its watchdog when the bench exits): starting it, a client of
//! it, the Translation CRD, where its etcd listens, and the CPU time its processes used.
//!
//! CPU time is read from `/proc/PID/stat` in clock ticks (10 ms on Linux): schedstat, finer,
//! is not enabled on every kernel. Callers read it around blocks of work, not single
//! requests.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Res;

/// The control plane's directory: its state, logs, pid files and ports.
fn dir() -> PathBuf {
    std::env::temp_dir().join(format!("midonet-kube-bench-{}", std::process::id()))
}

/// Starts a control plane in a temporary directory; returns the admin kubeconfig.
pub fn start() -> Res<PathBuf> {
    let dir = dir();
    // The bench is a member of the workspace whose root holds `scripts/`.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/k8s-env.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("start")
        .arg(&dir)
        .arg("--watch-pid")
        .arg(std::process::id().to_string())
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err("scripts/k8s-env.sh start failed".into());
    }
    let env = std::fs::read_to_string(dir.join("env"))?;
    env.lines()
        .filter_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(PathBuf::from)
        .next()
        .ok_or_else(|| "KUBECONFIG missing from the env file".into())
}

pub async fn client_for(kubeconfig: &Path) -> Res<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Applies the Translation CRD and waits until the apiserver serves it.
pub async fn apply_crd(client: &Client) -> Res<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = midonet_kube_controllers::crd::CRD_NAME;
    let pp = PatchParams::apply("midonet-kube-bench").force();
    let crd = midonet_kube_controllers::crd::crd();
    crds.patch(name, &pp, &Patch::Apply(&crd)).await?;
    let start = Instant::now();
    loop {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err("CRD not Established in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The client URL of the control plane's etcd (plain HTTP on loopback), from the ports
/// `k8s-env.sh` chose.
pub fn etcd_url() -> Res<String> {
    let ports = std::fs::read_to_string(dir().join("ports"))?;
    let port = ports
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_PORT="))
        .ok_or("ETCD_PORT missing from the control plane's ports file")?;
    Ok(format!("http://127.0.0.1:{}", port.trim()))
}

/// CPU time a process has used so far: user + system time in `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> Res<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("unreadable /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Res<u64> {
        Ok(fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or("unreadable /proc/PID/stat")?)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// CPU time the kube-apiserver of the bench's control plane has used so far.
pub fn apiserver_cpu() -> Res<Duration> {
    let pid = std::fs::read_to_string(dir().join("kube-apiserver.pid"))?;
    cpu_time(pid.trim().parse()?)
}

/// The CPU time the apiserver and the bench itself have used so far.
pub fn apiserver_and_bench_cpu() -> Res<(Duration, Duration)> {
    Ok((apiserver_cpu()?, cpu_time(std::process::id())?))
}
