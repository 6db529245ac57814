//! Objects deleted while the controllers' watches were down, found by the re-list that
//! follows: their Translations are deleted at once (`src/cache.rs`, `with_tombstones`).
//!
//! The controllers reach the apiserver through a relay the test cuts. While it is cut, the
//! test deletes Pods, an Endpoints and a Service, then restarts the apiserver: a new one's
//! watch cache begins at the current revision, so the watches' last resourceVersions are
//! too old for it and they re-list, as after any outage longer than the watch cache's
//! window. kube-controller-manager is stopped (no garbage collection) and the resync is an
//! hour away, so whatever deletes those Translations can only be the re-list's deletions.
//! Its own test binary: it stops kube-controller-manager and restarts the apiserver.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use support::check::assert_check_passes;
use support::child::ChildControllers;
use support::scenario::{self, ScenarioApi};
use support::stack::{start_sim_with, wait_exact};
use support::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP relay to the apiserver (TLS passes through: its certificate names 127.0.0.1,
/// whatever the port). While cut, it closes every relayed connection and each new one.
struct Relay {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address");
        let cut = watch::Sender::new(false);
        let is_cut = cut.subscribe();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if *is_cut.borrow() {
                    continue;
                }
                let mut until_cut = is_cut.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = until_cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Relay { addr, cut }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }

    fn restore(&self) {
        self.cut.send_replace(false);
    }
}

/// A copy of `kubeconfig` whose cluster is reached through a relay, with that relay.
async fn relayed(kubeconfig: &Path) -> (PathBuf, Relay) {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let server = kc.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("the kubeconfig names a server");
    let hostport = server.trim_start_matches("https://").trim_end_matches('/');
    let upstream: SocketAddr = hostport.parse().expect("server is an IP address and port");
    let relay = Relay::start(upstream).await;
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let path =
        std::env::temp_dir().join(format!("midonet-relist-kubeconfig-{}", std::process::id()));
    std::fs::write(&path, text.replace(hostport, &relay.addr.to_string()))
        .expect("write the relayed kubeconfig");
    (path, relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_deletes_the_translations_of_objects_deleted_while_the_watches_were_down() {
    let client = admin_client().await;
    stop_controller_manager().await;
    let scenario = scenario::small("relist");
    let (sim, admin) = start_sim_with(midonet_sim::SimConfig {
        hosts: scenario.hosts.clone(),
        ..Default::default()
    })
    .await;
    let (kubeconfig, relay) = relayed(&control_plane().kubeconfig).await;
    let log = ChildControllers::log_path("relist");
    let _ = std::fs::remove_file(&log);
    let mut child = ChildControllers::spawn(
        &kubeconfig,
        sim.api_url().as_str(),
        &[
            "--controllers",
            "node,pod,service,endpoints,pusher",
            "--leader-elect",
            "false",
            "--resync-period",
            "1h",
            "--log-level",
            "info",
        ],
        &log,
    );
    scenario.create(&client).await;
    wait_exact(&client, &admin, "created", CEILING).await;

    let gone_uids = scenario::owner_uids(&scenario, &client, 0..5, 0..1).await;

    relay.cut();
    scenario.delete_pods(&client, 0..5).await;
    scenario.delete_endpoints(&client, 0..1).await;
    scenario.delete_services(&client, 0..1).await;
    restart_apiserver().await;
    relay.restore();

    scenario::wait_owned_translations_gone(
        &client,
        &gone_uids,
        "the Translations of the objects deleted while the watches were down are gone",
    )
    .await;
    wait_exact(&client, &admin, "after the re-list", CEILING).await;
    // The remaining Pods and Services still reach each other through the data plane.
    assert_check_passes(sim.api_url().as_str(), "after the re-list").await;
    let logs = child.logs();
    assert!(
        logs.contains("re-listed: objects deleted while the watch was down"),
        "no re-list found deleted objects; log: {}",
        log.display()
    );
    assert!(
        child.is_running(),
        "the controllers exited; log: {}",
        log.display()
    );
    child.sigkill();
    let _ = std::fs::remove_file(&kubeconfig);
    sim.shutdown().await;
}
