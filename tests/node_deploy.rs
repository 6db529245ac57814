//! The controllers deployed as users deploy them, on a real node (`scripts/k8s-env.sh
//! --node`: kubelet, containerd, kube-proxy, the CNI plugins), with the simulator on the host
//! as the MidoNet API: the image of `scripts/image.sh`, `kubectl apply -k` of an overlay of
//! `deploy/` written as docs/operations.md writes it, the kubelet's probes.
//!
//! One node for the whole binary (starting one costs half a minute), so the phases run in
//! order in one test, each leaving the deployment installed and converged:
//! 1. install as documented: Ready through the probes, in-cluster ServiceAccount token and
//!    CA with exactly `deploy/`'s RBAC, no authorization error, workload pods with addresses
//!    from the node's podCIDR translated (exact state, `check`);
//! 2. monitoring: Prometheus (Debian's) scrapes the pod the apiserver lists with the
//!    annotations `deploy/` sets, and the test reads the key series; the alerting rules
//!    of `deploy/monitoring/` evaluate on them, healthy, none firing;
//! 3. liveness: a reconcile hung on the backend past the limit: the kubelet restarts the
//!    container, which then converges;
//! 4. readiness follows the backend (stopped: 0/1, started: 1/1) with no work lost;
//! 5. bad deployments (wrong password, missing RBAC rule, unreachable backend URL): a log
//!    line and the readiness say which, and the pod does not crash-loop.

mod support;

use std::time::Duration;

use kube::Client;
use support::node::{self, Backend, Overlay, Workload};
use support::stack::wait_exact;
use support::*;

/// The image tag of these tests (not `latest`: the kubelet never pulls it).
const TAG: &str = "0.1.0-test";
/// How long a rollout or a convergence on the node may take (a hang guard).
const ROLLOUT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployed_on_a_real_node() {
    node::node();
    let client = admin_client().await;
    let mut backend = Backend::start().await;
    node::image(TAG);
    let overlay = install_as_documented(&client, &backend).await;
    let workload = Workload::create(&client, "web").await;
    workload.deploy("web", 3).await;
    node::converged(&client, &backend, &workload, 3, "installed").await;
    monitoring(&client).await;

    liveness(&client, &backend, &overlay, &workload).await;
    readiness_follows_the_backend(&client, &mut backend, &overlay, &workload).await;
    bad_deployments(&client, &backend, &overlay).await;
    backend.stop().await;
}

/// docs/operations.md's overlay (image, credentials, backend URL) with one replica, as the
/// docs say for a single node, applied with `kubectl apply -k`.
async fn install_as_documented(client: &Client, backend: &Backend) -> Overlay {
    let mut overlay = Overlay::new("documented", TAG, backend);
    overlay.replicas = Some(1);
    overlay.apply().await;
    node::rollout_status(ROLLOUT).await;
    let pods = node::wait_ready_pods(client, 1, Some(TAG), ROLLOUT).await;
    let pod = &pods[0];
    // The in-cluster configuration: the ServiceAccount's token and CA, no kubeconfig.
    let spec = pod.spec.as_ref().expect("pod spec");
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("midonet-kube-controllers")
    );
    let container = &spec.containers[0];
    let env_names: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        !env_names
            .iter()
            .any(|n| n.contains("KUBECONFIG") || n.starts_with("KUBERNETES_")),
        "the pod is given another way to the apiserver: {env_names:?}"
    );
    let mounts: Vec<&str> = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(
        mounts,
        vec![
            "/etc/midonet-kube",
            "/var/run/secrets/kubernetes.io/serviceaccount"
        ],
        "the pod mounts only its credentials and its ServiceAccount token"
    );
    // Working through the in-cluster configuration: it leads (a Lease it wrote) and its
    // Translations are pushed.
    let ip = node::pod_ip(pod).expect("pod address");
    wait_until("the pod leads", ROLLOUT, || async {
        (node::metric(&ip, "midonet_kube_controllers_leader", "").await == Some(1.0)).then_some(())
    })
    .await;
    overlay
}

/// Prometheus scrapes the controllers' pod as users configure it and reads what the
/// cluster says: it leads, every Translation is Ready, the backend answers; the shipped
/// alerting rules evaluate without error and none fires.
async fn monitoring(client: &Client) {
    use midonet_kube_controllers::crd::Translation;
    let prom = support::monitoring::Prometheus::start();
    prom.discover(client).await;
    let pod = node::name(&node::pods(client).await[0]);
    let t = Duration::from_secs(120);
    prom.wait_value(
        &format!(r#"up{{job="midonet-kube-controllers",pod="{pod}"}}"#),
        |v| v == 1.0,
        t,
    )
    .await;
    prom.wait_value("midonet_kube_controllers_leader", |v| v == 1.0, t)
        .await;
    let translations = kube::Api::<Translation>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list Translations")
        .items
        .len() as f64;
    prom.wait_value(
        r#"midonet_kube_controllers_translations{state="ready"}"#,
        |v| v == translations,
        t,
    )
    .await;
    prom.wait_value(
        r#"sum(midonet_kube_controllers_translations{state!="ready"})"#,
        |v| v == 0.0,
        t,
    )
    .await;
    prom.wait_value(
        r#"sum(midonet_kube_controllers_midonet_client_requests_total{code=~"2.."})"#,
        |v| v > 0.0,
        t,
    )
    .await;
    // Evaluated on the scraped series (before the first scrape, "no leader" is pending).
    let settled = wait_until(
        "the alerting rules evaluated, none pending or firing",
        t,
        || async {
            let rules = prom.alert_rules().await;
            let settled = rules.len() == 7
                && rules
                    .iter()
                    .all(|(_, health, state)| health == "ok" && state == "inactive");
            settled.then_some(())
        },
    );
    if tokio::time::timeout(Duration::from_secs(60), settled)
        .await
        .is_err()
    {
        panic!(
            "alerting rules on a healthy deployment: {:?}",
            prom.alert_rules().await
        );
    }
    eprintln!("monitoring: Prometheus scraped {pod}: {translations} Translations ready, 7 rules healthy, none firing");
}

/// Nothing refused: the pod's log has no authorization error and the metric counts none.
async fn assert_no_authorization_error(client: &Client) {
    for pod in node::pods(client).await {
        let logs = node::logs(&node::name(&pod), false).await;
        let refused: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("not authorized") || l.contains("forbidden"))
            .collect();
        assert!(
            refused.is_empty(),
            "authorization errors logged: {refused:#?}"
        );
        let ip = node::pod_ip(&pod).expect("pod address");
        assert_eq!(
            node::metric(
                &ip,
                "midonet_kube_controllers_authorization_errors_total",
                ""
            )
            .await,
            Some(0.0)
        );
    }
}

/// A reconcile hung on the backend (every answer delayed by an hour, the request timeout an
/// hour, the reconcile limit 5 s): `/healthz` fails, the kubelet restarts the container; the
/// backend answering again, the new container converges.
async fn liveness(client: &Client, backend: &Backend, overlay: &Overlay, w: &Workload) {
    assert_no_authorization_error(client).await;
    let mut wedgeable = overlay
        .clone()
        .with_config("MIDONETKUBE_LIVENESS_RECONCILE_LIMIT", "5s")
        .with_config("MIDONETKUBE_BACKEND_TIMEOUT", "1h");
    wedgeable.fast_probes = true;
    let pod = redeploy(client, &wedgeable).await;
    node::converged(client, backend, w, 3, "before the wedge").await;
    let restarts = node::restarts(&pod);

    backend
        .admin
        .set_faults(midonet_sim::admin::Faults {
            latency_ms: 3_600_000,
            ..Default::default()
        })
        .await
        .expect("set faults");
    w.deploy("web", 4).await;
    let name = node::name(&pod);
    wait_until(
        "the kubelet restarts the wedged container",
        ROLLOUT,
        || async {
            let p = node::pods(client)
                .await
                .into_iter()
                .find(|p| node::name(p) == name)?;
            (node::restarts(&p) > restarts).then_some(())
        },
    )
    .await;
    let previous = node::logs(&name, true).await;
    assert!(
        previous.contains("not live") && previous.contains("a reconcile has been running"),
        "the restarted container's log does not say why: {}",
        tail(&previous)
    );
    backend.admin.clear_faults().await.expect("clear faults");
    node::wait_ready_pods(client, 1, None, ROLLOUT).await;
    node::converged(client, backend, w, 4, "after the restart").await;
}

/// The backend stopped: the pod goes 0/1 (the kubelet's readiness probe), is not restarted;
/// objects changed meanwhile are translated once it is back, the pod 1/1 again.
async fn readiness_follows_the_backend(
    client: &Client,
    backend: &mut Backend,
    overlay: &Overlay,
    w: &Workload,
) {
    let mut probing = overlay
        .clone()
        .with_config("MIDONETKUBE_BACKEND_PROBE_PERIOD", "2s");
    probing.fast_probes = true;
    let pod = redeploy(client, &probing).await;
    let (name, restarts) = (node::name(&pod), node::restarts(&pod));
    node::converged(client, backend, w, 4, "before the outage").await;

    backend.stop().await;
    wait_until("the pod is not Ready (0/1)", ROLLOUT, || async {
        let p = node::pods(client).await.into_iter().next()?;
        (!node::is_ready(&p)).then_some(())
    })
    .await;
    w.deploy("web", 2).await;
    w.deploy("api", 1).await;
    w.wait_running(3, ROLLOUT).await;
    let ip = node::pod_ip(&pod).expect("pod address");
    let (code, body) = node::get(&ip, "/readyz").await.expect("/readyz answers");
    assert!(
        code == 503 && body.contains("[-] backend"),
        "/readyz during the outage: {code} {body}"
    );

    backend.start_again().await;
    let pods = node::wait_ready_pods(client, 1, None, ROLLOUT).await;
    assert_eq!(
        (node::name(&pods[0]), node::restarts(&pods[0])),
        (name, restarts),
        "the pod was restarted for an outage"
    );
    node::converged(client, backend, w, 3, "after the outage").await;
}

/// One bad setting at a time: the new pod stays 0/1 without restarts, its log names the
/// problem; the good overlay applied again, it is 1/1.
async fn bad_deployments(client: &Client, backend: &Backend, good: &Overlay) {
    let mut wrong_password = good.clone();
    wrong_password.password = "not-the-password".into();
    let mut unreachable = good.clone();
    unreachable.api_url = format!("http://{}:1/midonet-api", node::node().host_addr);
    let mut missing_rule = good.clone();
    // The first rule of deploy/rbac.yaml without `endpoints`.
    missing_rule.cluster_role_ops = Some(serde_json::json!([
        {"op": "test", "path": "/rules/0/resources/2", "value": "endpoints"},
        {"op": "remove", "path": "/rules/0/resources/2"}
    ]));
    // (what, overlay, the log says, /readyz says)
    let cases: [(&str, &Overlay, &[&str], &str); 3] = [
        (
            "wrong password",
            &wrong_password,
            &[
                "not logged in to the MidoNet API: not ready",
                "cannot log in",
            ],
            "[-] backend",
        ),
        (
            "unreachable backend URL",
            &unreachable,
            &["the MidoNet API is unreachable: not ready"],
            "[-] backend",
        ),
        (
            "missing RBAC rule",
            &missing_rule,
            &[
                "not authorized: cannot list endpoints cluster-wide",
                "the ClusterRole midonet-kube-controllers in deploy/rbac.yaml must grant it",
            ],
            "[-] endpoints-cache",
        ),
    ];
    for (what, overlay, log_says, readyz_says) in cases {
        overlay.apply_and_restart().await;
        let pod = wait_until(&format!("{what}: the new pod runs"), ROLLOUT, || async {
            let pods = node::pods(client).await;
            let p = pods.into_iter().find(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })?;
            node::logs(&node::name(&p), false)
                .await
                .contains(log_says[0])
                .then_some(p)
        })
        .await;
        let name = node::name(&pod);
        let ip = node::pod_ip(&pod).expect("pod address");
        // Watched for a while: never Ready, never restarted, and it says why.
        for _ in 0..10 {
            let now = node::pods(client)
                .await
                .into_iter()
                .find(|p| node::name(p) == name)
                .expect("the pod stays");
            assert!(!node::is_ready(&now), "{what}: the pod is Ready");
            assert_eq!(node::restarts(&now), 0, "{what}: the pod was restarted");
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let logs = node::logs(&name, false).await;
        for says in log_says {
            assert!(
                logs.contains(says),
                "{what}: the log does not say `{says}`:\n{}",
                tail(&logs)
            );
        }
        let (code, body) = node::get(&ip, "/readyz").await.expect("/readyz answers");
        assert!(
            code == 503 && body.contains(readyz_says),
            "{what}: /readyz {code} {body}"
        );
        eprintln!("{what}: 0/1, no restart; the log says {log_says:?}; /readyz {readyz_says}");
        redeploy(client, good).await;
    }
    wait_exact(client, &backend.admin, "after the bad deployments", ROLLOUT).await;
    assert_no_authorization_error(client).await;
}

/// `overlay` applied, the pod restarted with it (a settings change), Ready: the pod.
async fn redeploy(client: &Client, overlay: &Overlay) -> k8s_openapi::api::core::v1::Pod {
    overlay.apply_and_restart().await;
    node::rollout_status(ROLLOUT).await;
    node::wait_ready_pods(client, 1, None, ROLLOUT)
        .await
        .remove(0)
}

/// The last lines of a log, for a failure message.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
