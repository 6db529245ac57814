//! Two replicas of the controllers on a real node (`scripts/k8s-env.sh --node`), deployed
//! from an overlay of `deploy/` that takes them off the host network so that both fit on one
//! node, with the simulator on the host as the MidoNet API:
//! 1. failover: the leading pod is deleted while objects change; the other takes the Lease
//!    and converges, nothing leaked or duplicated (exact state, `check`);
//! 2. a rolling upgrade that changes the image tag and the Translation version together
//!    through the overlay, as an operator would, under the flow probe (no flow interrupted
//!    longer than 1 s), `kubectl rollout status` completing; then the rollback the same way.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use support::node::{self, Backend, Overlay, Workload};
use support::*;

const TAG_A: &str = "0.1.0-test";
const TAG_B: &str = "0.1.1-test";
const ROLLOUT: Duration = Duration::from_secs(300);
/// How often the flow probe samples the backend.
const PROBE_PERIOD: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_rolling_upgrade() {
    node::node();
    let client = admin_client().await;
    let backend = Backend::start().await;
    node::image(TAG_A);
    node::image(TAG_B);
    let mut ha = Overlay::new("ha", TAG_A, &backend);
    ha.replicas = Some(2);
    ha.pod_network = true;
    ha.apply().await;
    node::rollout_status(ROLLOUT).await;
    node::wait_ready_pods(&client, 2, Some(TAG_A), ROLLOUT).await;
    let w = Workload::create(&client, "shop").await;
    w.deploy("web", 3).await;
    w.deploy("api", 2).await;
    node::converged(&client, &backend, &w, 5, "installed").await;

    failover(&client, &backend, &w).await;
    let upgraded = ha
        .clone()
        .with_config("MIDONETKUBE_TRANSLATION_VERSION", "2");
    rolling_upgrade(
        &client,
        &backend,
        &w,
        Overlay {
            tag: TAG_B.into(),
            ..upgraded
        },
        "2",
    )
    .await;
    let rolled_back = ha.with_config("MIDONETKUBE_TRANSLATION_VERSION", "1");
    rolling_upgrade(&client, &backend, &w, rolled_back, "1").await;
}

async fn lease(client: &Client) -> (String, i32) {
    let l = Api::<Lease>::namespaced(client.clone(), node::NAMESPACE)
        .get(node::DEPLOYMENT)
        .await
        .expect("the Lease");
    let spec = l.spec.unwrap_or_default();
    (
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or(0),
    )
}

/// The leading pod deleted (gracefully, as a drain or an eviction does) while a Deployment is
/// scaled up and down and a Service comes and goes: the standby takes the Lease and the end
/// state is exact.
async fn failover(client: &Client, backend: &Backend, w: &Workload) {
    let leader = wait_until("a leader", ROLLOUT, || node::leader(client)).await;
    let leader_name = node::name(&leader);
    let (holder, transitions) = lease(client).await;
    assert_eq!(
        holder, leader_name,
        "the Lease names the pod whose gauge says it leads"
    );

    let churn = async {
        for i in 0..12 {
            w.deploy("web", 2 + (i % 4)).await;
            if i % 3 == 0 {
                w.deploy("batch", 1).await;
            } else if i % 3 == 2 {
                w.remove("batch").await;
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        w.deploy("web", 4).await;
        w.remove("batch").await;
    };
    let delete = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let out = node::kubectl(&[
            "-n",
            node::NAMESPACE,
            "delete",
            "pod",
            &leader_name,
            "--wait=false",
        ])
        .await;
        assert!(out.status.success(), "delete the leading pod: {out:?}");
    };
    tokio::join!(churn, delete);

    let new_leader = wait_until("another pod leads", ROLLOUT, || async {
        let l = node::leader(client).await?;
        (node::name(&l) != leader_name).then_some(l)
    })
    .await;
    let (holder, now) = lease(client).await;
    assert_eq!(holder, node::name(&new_leader));
    assert!(
        now > transitions,
        "the Lease changed hands: {transitions} → {now}"
    );
    node::wait_ready_pods(client, 2, None, ROLLOUT).await;
    node::converged(client, backend, w, 6, "after the failover").await;
}

/// Applies `overlay` (a new image tag and Translation version together), waits for `kubectl
/// rollout status` and for every Translation to be of `version`, under the flow probe.
async fn rolling_upgrade(
    client: &Client,
    backend: &Backend,
    w: &Workload,
    overlay: Overlay,
    version: &str,
) {
    let probe = support::probe::start_without(
        backend.sim(),
        support::probe::EVERY_FLOW,
        PROBE_PERIOD,
        Some(node::NAMESPACE),
    )
    .await;
    let started = std::time::Instant::now();
    overlay.apply().await;
    node::rollout_status(ROLLOUT).await;
    node::wait_ready_pods(client, 2, Some(&overlay.tag), ROLLOUT).await;
    support::rollout::wait_only_version(client, version).await;
    node::converged(client, backend, w, 6, &format!("at version {version}")).await;
    let report = probe.stop().await;
    eprintln!(
        "rolled out {} with version {version} in {:.0} s: {}",
        overlay.tag,
        started.elapsed().as_secs_f64(),
        report.summary()
    );
    support::probe::assert_interrupted_at_most(&report, Duration::from_secs(1));
}
