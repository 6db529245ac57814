//! Liveness and readiness of the binary as operators run it, on a real apiserver with the
//! simulator: `/healthz` fails when the pusher is wedged (a reconcile that does not return;
//! work queued that no reconcile takes), and stays ok through a MidoNet outage, during which
//! `/readyz` is not ready, and ready again after it. Also the original controller's variable
//! names for the credentials and the controllers, as an upgraded Deployment still sets them.

mod support;

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::{AdminClient, Faults};
use midonet_sim::{SimAuth, SimConfig};
use serde_json::json;
use support::child::ChildControllers;
use support::stack::{start_sim, start_sim_with};
use support::*;
use uuid::Uuid;

/// Held by each test: every pusher works on all Translations of the cluster, and one test's
/// pusher must not push (or hang on) another test's Translations.
static PUSHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A MidoNet API that accepts requests and does not answer them for an hour.
fn never_answers() -> Faults {
    Faults {
        latency_ms: 3_600_000,
        ..Faults::default()
    }
}

fn start_pusher(api: &str, extra: &[&str]) -> ChildControllers {
    let args = [
        &["--controllers", "pusher", "--leader-elect", "false"],
        extra,
    ]
    .concat();
    ChildControllers::start(&control_plane().kubeconfig, api, &args)
}

async fn wait_status(proc: &ChildControllers, path: &str, code: u16, what: &str) -> String {
    wait_until(what, CEILING, || async {
        let (c, body) = proc.get(path).await?;
        (c == code).then_some(body)
    })
    .await
}

fn bridge_translation(name: &str, ns: &str) -> Translation {
    fixtures::translation(name, ns, vec![fixtures::bridge(Uuid::new_v4())])
}

/// Deletes the test's Translations without a pusher (the wedged one is gone): drops the
/// finalizer first.
async fn remove_translations(client: &Client, ns: &str, names: &[&str]) {
    let api: Api<Translation> = Api::namespaced(client.clone(), ns);
    for name in names {
        let _ = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

async fn bridge_posts(admin: &AdminClient) -> u64 {
    admin
        .requests()
        .await
        .map(|c| c.get(midonet_translators::Kind::Bridge, "POST"))
        .unwrap_or(0)
}

#[tokio::test]
async fn healthz_fails_while_a_reconcile_does_not_return() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    let (sim, admin) = start_sim(&[]).await;
    // Each MidoNet request may take an hour here, so nothing but the liveness limit on a
    // reconcile can notice that the push never returns.
    let proc = start_pusher(
        sim.api_url().as_str(),
        &[
            "--backend-timeout",
            "1h",
            "--liveness-reconcile-limit",
            "3s",
            "--liveness-stall-limit",
            "1h",
        ],
    );
    wait_status(&proc, "/readyz", 200, "ready").await;
    let body = wait_status(&proc, "/healthz", 200, "live").await;
    assert!(body.contains("[+] pusher"), "{body}");

    admin.set_faults(never_answers()).await.unwrap();
    let ns = unique_namespace(&client, "wedge-reconcile").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &bridge_translation("stuck", &ns))
        .await
        .unwrap();
    wait_until("the push reaches MidoNet", CEILING, || async {
        (bridge_posts(&admin).await > 0).then_some(())
    })
    .await;
    let body = wait_status(&proc, "/healthz", 503, "healthz fails").await;
    assert!(
        body.contains("[-] pusher: a reconcile has been running for"),
        "{body}"
    );
    assert!(body.contains("not ok"), "{body}");
    assert!(
        proc.logs()
            .contains("not live: pusher: a reconcile has been running"),
        "the reason is logged"
    );

    proc.sigkill();
    admin.clear_faults().await.unwrap();
    remove_translations(&client, &ns, &["stuck"]).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn healthz_fails_while_queued_work_is_not_taken() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    let (sim, admin) = start_sim(&[]).await;
    // One worker, held by a push that does not return: the next Translation waits for it.
    // The reconcile limit is out of reach, so only the stall can make /healthz fail.
    let proc = start_pusher(
        sim.api_url().as_str(),
        &[
            "--backend-timeout",
            "1h",
            "--pusher-workers",
            "1",
            "--liveness-reconcile-limit",
            "1h",
            "--liveness-stall-limit",
            "3s",
        ],
    );
    wait_status(&proc, "/readyz", 200, "ready").await;
    wait_status(&proc, "/healthz", 200, "live").await;

    admin.set_faults(never_answers()).await.unwrap();
    let ns = unique_namespace(&client, "wedge-stall").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &bridge_translation("first", &ns))
        .await
        .unwrap();
    wait_until("the push reaches MidoNet", CEILING, || async {
        (bridge_posts(&admin).await > 0).then_some(())
    })
    .await;
    // The single worker is busy for as long as the push hangs: still live.
    let (code, body) = proc.get("/healthz").await.unwrap();
    assert_eq!(code, 200, "one long reconcile alone is no stall: {body}");

    api.create(&PostParams::default(), &bridge_translation("second", &ns))
        .await
        .unwrap();
    let body = wait_status(&proc, "/healthz", 503, "healthz fails").await;
    assert!(
        body.contains("[-] pusher: work queued for"),
        "stalled, not a reconcile over its limit: {body}"
    );
    assert!(!body.contains("a reconcile has been running"), "{body}");

    proc.sigkill();
    admin.clear_faults().await.unwrap();
    remove_translations(&client, &ns, &["first", "second"]).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn readyz_follows_a_midonet_outage_and_healthz_stays_ok() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    let (sim, admin) = start_sim(&[]).await;
    let proc = start_pusher(sim.api_url().as_str(), &["--backend-probe-period", "1s"]);
    let body = wait_status(&proc, "/readyz", 200, "ready").await;
    assert!(body.contains("[+] backend"), "{body}");

    // Outage while idle: the probe notices it.
    admin
        .set_faults(Faults {
            down: true,
            ..Faults::default()
        })
        .await
        .unwrap();
    let body = wait_status(&proc, "/readyz", 503, "not ready during the outage").await;
    assert!(body.contains("[-] backend"), "{body}");
    assert!(
        proc.logs()
            .contains("the MidoNet API is unreachable: not ready"),
        "the transition is logged"
    );

    // Work during the outage fails and is retried: the pusher is not wedged.
    let ns = unique_namespace(&client, "outage").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &bridge_translation("t", &ns))
        .await
        .unwrap();
    wait_event(&client, &ns, Some("t"), "TranslationUpdateError").await;
    let (code, body) = proc.get("/healthz").await.unwrap();
    assert_eq!(code, 200, "an outage is no wedge: {body}");
    let (code, _) = proc.get("/readyz").await.unwrap();
    assert_eq!(code, 503, "still not ready while MidoNet is down");

    admin.clear_faults().await.unwrap();
    let body = wait_status(&proc, "/readyz", 200, "ready after the outage").await;
    assert!(body.contains("[+] backend"), "{body}");
    wait_until("pushed after the outage", CEILING, || async {
        api.get("t").await.ok()?.is_ready().then_some(())
    })
    .await;
    let (code, body) = proc.get("/healthz").await.unwrap();
    assert_eq!(code, 200, "{body}");

    // Cleaned up by the pusher itself.
    api.delete("t", &DeleteParams::default()).await.unwrap();
    wait_until("deleted", CEILING, || async {
        api.get_opt("t").await.ok()?.is_none().then_some(())
    })
    .await;
    drop(proc);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_original_variable_names_still_configure_the_controllers() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    // A MidoNet that accepts only these credentials.
    let (sim, admin) = start_sim_with(SimConfig {
        auth: Some(SimAuth {
            username: "alice".into(),
            password: "s3cret-original".into(),
            project: "project-a".into(),
            token_ttl: Duration::from_secs(3600),
        }),
        ..SimConfig::default()
    })
    .await;
    // As the original's manifests set them, and no current name: `--controllers` is not
    // given, so MIDONETKUBE_ENABLED_CONTROLLERS selects the pusher alone.
    let proc = ChildControllers::start_with_env(
        &control_plane().kubeconfig,
        sim.api_url().as_str(),
        &["--leader-elect", "false"],
        &[
            ("MIDONETKUBE_MIDONET_USERNAME", "alice"),
            ("MIDONETKUBE_MIDONET_PASSWORD", "s3cret-original"),
            ("MIDONETKUBE_MIDONET_PROJECT", "project-a"),
            ("MIDONETKUBE_ENABLED_CONTROLLERS", "pusher"),
        ],
    );
    let body = wait_status(
        &proc,
        "/readyz",
        200,
        "logged in with the original's credentials",
    )
    .await;
    assert!(body.contains("[+] backend"), "{body}");
    assert!(!body.contains("node-cache"), "only the pusher runs: {body}");
    let ns = unique_namespace(&client, "legacy-env").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &bridge_translation("t", &ns))
        .await
        .unwrap();
    wait_until("pushed", CEILING, || async {
        api.get("t").await.ok()?.is_ready().then_some(())
    })
    .await;
    // The simulator issues tokens only for these credentials.
    assert!(!admin.tokens().await.unwrap().is_empty());
    let logs = proc.logs();
    for old in [
        "MIDONETKUBE_MIDONET_USERNAME",
        "MIDONETKUBE_MIDONET_PASSWORD",
        "MIDONETKUBE_MIDONET_PROJECT",
        "MIDONETKUBE_ENABLED_CONTROLLERS",
    ] {
        assert!(
            logs.lines()
                .any(|l| l.contains("WARN") && l.contains(old) && l.contains("deprecated")),
            "a deprecation warning names {old}"
        );
    }
    assert!(
        !logs.contains("s3cret-original"),
        "the password is never logged"
    );

    api.delete("t", &DeleteParams::default()).await.unwrap();
    wait_until("deleted", CEILING, || async {
        api.get_opt("t").await.ok()?.is_none().then_some(())
    })
    .await;
    drop(proc);
    sim.shutdown().await;
}
