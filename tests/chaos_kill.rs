//! 20 SIGKILLs of the real controllers binary during scenario S (the benchmark's scale: 50
//! Nodes, 2,000 Pods, 300 ClusterIP Services with 4 endpoints each; simulator hosts for
//! the Nodes, 1 ms added latency per backend request).
//!
//! The binary (`node,pod,service,endpoints,pusher`, no leader election) runs as a child
//! process against the real control plane and the in-process simulator. While the objects
//! are created and converge, and then churn (500 Pods deleted and 500 new ones created, 30
//! Services deleted and created again with new cluster IPs and their Endpoints, 20
//! Services deleted for good), it is SIGKILLed 20 times at random moments, 0.5–4 s apart, and restarted at
//! once each time. The delays come from a seeded RNG; the seed is printed, and
//! `CHAOS_SEED=<seed>` replays the same sequence of delays.
//!
//! Then it must converge to exactly what the objects call for: the Translations are
//! exactly those the pure translators make of the objects, none is Terminating, all are
//! Ready=True, the simulator holds exactly their resources and none twice (see
//! `support::stack::exact_state`); the data-plane `check` of that state passes (every
//! promised connection works); and the binary must not have exited by itself. What a
//! push cut by a kill left that no spec names any more (a re-created Service's old jump
//! rule) is the last start's recovery sweep's to delete (`recovery`), within a minute.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use midonet_sim::admin::Faults;
use midonet_sim::SimConfig;
use rand::{Rng, SeedableRng};
use support::check::assert_check_passes;
use support::child::ChildControllers;
use support::scenario::{Scale, Scenario, ScenarioApi};
use support::stack::{start_sim_with, wait_exact};
use support::*;

const KILLS: usize = 20;
/// The churn starts after this many kills, so that kills hit both phases.
const CHURN_AFTER_KILL: usize = 8;
const CHURN_PODS: usize = 500;
/// Services deleted and created again with their Endpoints.
const RECREATED_SERVICES: std::ops::Range<usize> = 0..30;
/// Services deleted for good, with their Endpoints.
const DELETED_SERVICES: std::ops::Range<usize> = 30..50;

fn elapsed(t0: Instant) -> String {
    format!("{:.1}s", t0.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_exactly_after_20_sigkills_during_scenario_s() {
    let t0 = Instant::now();
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("chaos_kill: seed {seed} (replay with CHAOS_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let delays: Vec<Duration> = (0..KILLS)
        .map(|_| Duration::from_millis(rng.random_range(500..=4000)))
        .collect();

    let client = admin_client().await;
    let scale = Scale::S;
    let scenario = Scenario::new("s", scale);
    let (sim, admin) = start_sim_with(SimConfig {
        hosts: scenario.hosts.clone(),
        faults: Faults {
            latency_ms: 1,
            ..Faults::default()
        },
        ..SimConfig::default()
    })
    .await;
    eprintln!(
        "chaos_kill: control plane and simulator up at {}",
        elapsed(t0)
    );

    let kubeconfig = control_plane().kubeconfig.clone();
    let api_url = sim.api_url().to_string();
    let log = ChildControllers::log_path("chaos-kill");
    let _ = std::fs::remove_file(&log);
    let args = [
        "--controllers",
        "node,pod,service,endpoints,pusher",
        "--leader-elect",
        "false",
    ];
    let spawn = || ChildControllers::spawn(&kubeconfig, &api_url, &args, &log);
    let kills_done = AtomicUsize::new(0);

    let killer = async {
        let mut child = spawn();
        for (n, delay) in delays.iter().enumerate() {
            tokio::time::sleep(*delay).await;
            assert!(
                child.is_running(),
                "the controllers exited by themselves before kill {}; log: {}",
                n + 1,
                log.display()
            );
            child.sigkill();
            child = spawn();
            kills_done.store(n + 1, Ordering::SeqCst);
            eprintln!(
                "chaos_kill: SIGKILL {}/{KILLS} after {:?}, restarted ({})",
                n + 1,
                delay,
                elapsed(t0)
            );
        }
        child
    };
    let driver = async {
        scenario.create(&client).await;
        eprintln!("chaos_kill: scenario S created ({})", elapsed(t0));
        while kills_done.load(Ordering::SeqCst) < CHURN_AFTER_KILL {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pods = scale.pods;
        scenario.delete_pods(&client, 0..CHURN_PODS).await;
        scenario.create_pods(&client, pods..pods + CHURN_PODS).await;
        // The apiserver deletes a Service's Endpoints with it.
        scenario.delete_services(&client, RECREATED_SERVICES).await;
        scenario.delete_services(&client, DELETED_SERVICES).await;
        scenario.create_services(&client, RECREATED_SERVICES).await;
        scenario.create_endpoints(&client, RECREATED_SERVICES).await;
        eprintln!("chaos_kill: churn done ({})", elapsed(t0));
    };
    let (mut child, ()) = tokio::join!(killer, driver);
    let kills_end = Instant::now();
    eprintln!("chaos_kill: last kill at {}", elapsed(t0));

    wait_exact(
        &client,
        &admin,
        "after 20 SIGKILLs",
        Duration::from_secs(600),
    )
    .await;
    eprintln!(
        "chaos_kill: exactly converged {:.1}s after the last kill ({} in all); log: {}",
        kills_end.elapsed().as_secs_f64(),
        elapsed(t0),
        log.display()
    );
    assert_check_passes(&api_url, "after 20 SIGKILLs").await;
    // What the kills cost: creations repeated after a kill answer 409 and are settled.
    let requests = admin.requests().await.unwrap();
    eprintln!(
        "chaos_kill: backend requests {} (logins {}), by status {:?}",
        requests.total, requests.login, requests.by_status
    );
    assert!(
        child.is_running(),
        "the controllers exited by themselves; log: {}",
        log.display()
    );
    drop(child);
    sim.shutdown().await;
}
