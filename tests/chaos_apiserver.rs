//! kube-apiserver restarted mid-run (`scripts/k8s-env.sh restart-apiserver`: same address,
//! same etcd). Its own test binary, since the restart would disturb any other test sharing
//! the control plane.
//!
//! The real controllers binary runs as a child process (no leader election: with it, an
//! outage longer than the renew deadline makes the process give up its work and exit by
//! design, which `tests/chaos_kill.rs` covers from the restart side). Objects are being
//! created, and converging, when the apiserver is stopped; after it is back more are
//! created and some deleted. The watches must resume: the new objects get their
//! Translations and are pushed, the deleted ones are cleaned up, and the end state is
//! exactly what the objects call for (`support::stack::exact_state`). The process must
//! survive the outage.

mod support;

use std::time::{Duration, Instant};

use kube::api::Api;
use midonet_kube_controllers::crd::Translation;
use midonet_translators::naming::{translation_name, NameKey};
use midonet_translators::{Resource, TRANSLATION_VERSION};
use support::check::assert_check_passes;
use support::child::ChildControllers;
use support::scenario::{Scale, Scenario, ScenarioApi};
use support::stack::{start_sim_with, wait_exact};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_after_an_apiserver_restart() {
    let t0 = Instant::now();
    let client = admin_client().await;
    let scale = Scale {
        nodes: 10,
        pods: 300,
        services: 40,
        endpoints_per_service: 4,
        namespaces: 2,
    };
    let scenario = Scenario::new("a", scale);
    let (sim, admin) = start_sim_with(midonet_sim::SimConfig {
        hosts: scenario.hosts.clone(),
        ..Default::default()
    })
    .await;
    let log = ChildControllers::log_path("chaos-apiserver");
    let _ = std::fs::remove_file(&log);
    let mut child = ChildControllers::spawn(
        &control_plane().kubeconfig,
        sim.api_url().as_str(),
        &[
            "--controllers",
            "node,pod,service,endpoints,pusher",
            "--leader-elect",
            "false",
        ],
        &log,
    );

    // Before: the first objects are being created and converging when the apiserver goes
    // away (the creations retry until it is back).
    scenario.create_namespaces(&client).await;
    scenario.create_nodes(&client).await;
    let creating = async {
        scenario.create_pods(&client, 0..200).await;
        scenario.create_services(&client, 0..30).await;
        scenario.create_endpoints(&client, 0..30).await;
    };
    let restart = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let start = Instant::now();
        restart_apiserver().await;
        start.elapsed()
    };
    let ((), outage) = tokio::join!(creating, restart);
    eprintln!(
        "chaos_apiserver: kube-apiserver restarted, ready again after {:.1}s ({:.1}s in)",
        outage.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );

    // After: new objects must be seen through the resumed watches, deleted ones too.
    scenario.create_pods(&client, 200..300).await;
    scenario.delete_pods(&client, 0..50).await;
    scenario.create_services(&client, 30..40).await;
    scenario.create_endpoints(&client, 30..40).await;
    scenario.delete_services(&client, 0..5).await;

    wait_exact(
        &client,
        &admin,
        "after the apiserver restart",
        Duration::from_secs(180),
    )
    .await;
    // Spelled out: an object created after the restart is translated and pushed.
    let trs: Api<Translation> = Api::namespaced(client.clone(), &scenario.namespace(299));
    let late = trs
        .get(&translation_name(
            "Pod",
            TRANSLATION_VERSION,
            &NameKey::object(&Scenario::pod_name(299)),
        ))
        .await
        .expect("the Translation of a Pod created after the restart");
    let state = admin.state().await.unwrap();
    for e in late.desired_resources() {
        let path = Resource::from_entry(e).unwrap().item_path();
        assert!(state.contains(&path), "{path} pushed");
    }
    assert!(
        child.is_running(),
        "the controllers exited during the outage; log: {}",
        log.display()
    );
    assert_check_passes(sim.api_url().as_str(), "after the apiserver restart").await;
    eprintln!(
        "chaos_apiserver: exactly converged ({:.1}s in all); log: {}",
        t0.elapsed().as_secs_f64(),
        log.display()
    );
    drop(child);
    sim.shutdown().await;
}
