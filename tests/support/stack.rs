//! The whole system for end-to-end tests: the simulator in-process and the controllers
//! (`run_until`) in-process, against the real control plane, plus exact state comparison.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use kube::api::{Api, ListParams};
use kube::Client;
use midonet_kube_controllers::config::RunArgs;
use midonet_kube_controllers::crd::Translation;
use midonet_kube_controllers::sim::admin::{AdminClient, StateDump};
use midonet_kube_controllers::sim::{self, SimConfig, SimHandle};
use midonet_translators::Resource;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Parser)]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

pub async fn start_sim(hosts: &[(&str, Uuid)]) -> (SimHandle, AdminClient) {
    let handle = sim::start(SimConfig {
        hosts: hosts.iter().map(|(n, id)| (n.to_string(), *id)).collect(),
        ..SimConfig::default()
    })
    .await
    .expect("start simulator");
    let admin = AdminClient::new(handle.admin_url()).expect("admin client");
    (handle, admin)
}

/// A free loopback port for the metrics endpoint.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Controllers running in this process.
pub struct Controllers {
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), midonet_kube_controllers::run::RunError>>,
    pub metrics_port: u16,
}

impl Controllers {
    pub async fn start(kubeconfig: &Path, sim: &SimHandle, extra: &[&str]) -> Controllers {
        let metrics_port = free_port();
        let mut args = vec![
            "test".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--midonet-api".into(),
            sim.api_url().to_string(),
            "--metrics-address".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--leader-elect".into(),
            "false".into(),
            "--resync-period".into(),
            "30s".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let cfg = Cli::try_parse_from(args)
            .expect("args")
            .run
            .validate()
            .expect("config");
        let stop = CancellationToken::new();
        let task = tokio::spawn(midonet_kube_controllers::run::run_until(cfg, stop.clone()));
        Controllers {
            stop,
            task,
            metrics_port,
        }
    }

    /// Stops taking work, waits for in-flight work; panics if the run failed.
    pub async fn stop(self) {
        self.stop.cancel();
        let res = tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("controllers stop in time")
            .expect("controllers task");
        res.expect("controllers ran without a fatal error");
    }
}

/// Item paths every live Translation in the cluster asks for.
pub async fn expected_paths(client: &Client) -> BTreeSet<String> {
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list Translations");
    trs.items
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .flat_map(|t| t.desired_resources().to_vec())
        .filter_map(|e| Resource::from_entry(&e).ok())
        .map(|r| r.item_path())
        .collect()
}

/// Item paths in the simulator that a Translation can own (hosts are seeded, and router
/// ports' `Local` routes are made by the backend itself).
pub fn actual_paths(state: &StateDump) -> BTreeSet<String> {
    state
        .resources
        .iter()
        .filter(|e| e.kind != "Host")
        .filter(|e| {
            !(e.kind == "Route" && e.body.get("type").and_then(|t| t.as_str()) == Some("Local"))
        })
        .map(|e| e.path.clone())
        .collect()
}

/// True when every Translation is Ready and the backend holds exactly what they ask for.
pub async fn converged(client: &Client, admin: &AdminClient) -> Option<()> {
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    let all_ready = trs.items.iter().all(|t| {
        t.metadata.deletion_timestamp.is_none()
            && t.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
    });
    if !all_ready {
        return None;
    }
    let expected = expected_paths(client).await;
    let actual = actual_paths(&admin.state().await.ok()?);
    (expected == actual).then_some(())
}

/// Waits for convergence; on timeout reports the difference.
pub async fn wait_converged(client: &Client, admin: &AdminClient, what: &str) {
    let deadline = Duration::from_secs(90);
    let start = std::time::Instant::now();
    while start.elapsed() < deadline {
        if converged(client, admin).await.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let expected = expected_paths(client).await;
    let actual = actual_paths(&admin.state().await.expect("state"));
    let missing: Vec<_> = expected.difference(&actual).collect();
    let extra: Vec<_> = actual.difference(&expected).collect();
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list");
    let not_ready: Vec<_> = trs
        .items
        .iter()
        .filter(|t| {
            !t.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .map(|t| {
            format!(
                "{}/{} {:?}",
                t.metadata.namespace.clone().unwrap_or_default(),
                t.metadata.name.clone().unwrap_or_default(),
                t.status.as_ref().map(|s| &s.conditions)
            )
        })
        .collect();
    panic!("not converged ({what}): missing {missing:?}, extra {extra:?}, not ready {not_ready:?}");
}
