//! The binary with one rule of `deploy/`'s ClusterRole missing (real apiserver + simulator):
//! it logs an authorization error naming what is missing, counts it, keeps running and
//! retrying (a denied list keeps it not ready), and recovers once the rule is back.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use midonet_kube_controllers::crd::Translation;
use serde_json::json;
use support::child::ChildControllers;
use support::rbac::{bind_deploy_role_to_restricted_user, bind_deploy_role_without, Grant};
use support::stack::start_sim;
use support::*;
use uuid::Uuid;

/// Held by each test: they change the one ClusterRole bound to the one restricted user.
static ROLE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const DEADLINE: Duration = Duration::from_secs(60);
/// Restoring a rule: the retry after a longer run of failures may take a while.
const RECOVERY: Duration = Duration::from_secs(90);

/// Starts the binary as the restricted user (the deploy/ rights, minus what the test took).
fn start_restricted(midonet_api: &str, controllers: &str) -> ChildControllers {
    ChildControllers::start(
        &control_plane().restricted_kubeconfig,
        midonet_api,
        &["--controllers", controllers, "--leader-elect", "false"],
    )
}

/// Waits for the ERROR line that starts with `not authorized: {what}`; returns it.
async fn authorization_error(proc: &ChildControllers, what: &str) -> String {
    let wanted = format!("not authorized: {what}");
    wait_until(&format!("an ERROR line `{wanted}`"), DEADLINE, || async {
        proc.logs()
            .lines()
            .find(|l| l.contains(" ERROR ") && l.contains(&wanted))
            .map(str::to_string)
    })
    .await
}

/// The authorization error counter for (verb, resource), 0 when absent.
async fn denials(proc: &ChildControllers, verb: &str, resource: &str) -> u64 {
    let Some((_, metrics)) = proc.get("/metrics").await else {
        return 0;
    };
    let labels = [
        format!("resource=\"{resource}\""),
        format!("verb=\"{verb}\""),
    ];
    metrics
        .lines()
        .filter(|l| l.starts_with("midonet_kube_controllers_authorization_errors_total{"))
        .find(|l| labels.iter().all(|x| l.contains(x.as_str())))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Still running, and alive as far as the liveness probe is concerned.
async fn assert_alive(proc: &mut ChildControllers) {
    assert!(proc.is_running(), "the process exited:\n{}", proc.logs());
    let (code, _) = proc.get("/healthz").await.expect("/healthz answers");
    assert_eq!(code, 200);
}

/// Bound again with the full role, and the authorizer grants `restored` again.
async fn restore_role(admin: &kube::Client, ns: &str, restored: &[Grant<'_>]) {
    bind_deploy_role_to_restricted_user(admin, ns).await;
    for (group, resource, verb) in restored {
        let (resource, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (*resource, None),
        };
        wait_until("the rule is enforced again", DEADLINE, || async {
            rbac::restricted_can(verb, group, resource, sub, None)
                .await
                .then_some(())
        })
        .await;
    }
}

fn ready(tr: &Translation) -> bool {
    support::fixtures::is_ready(tr)
}

#[tokio::test]
async fn missing_status_write_rule_is_named_and_heals_once_restored() {
    let _role = ROLE.lock().await;
    let admin = admin_client().await;
    let ns = unique_namespace(&admin, "authz-status").await;
    // The status is PUT (and merge-patched only after a conflict): take both away.
    let removed: &[Grant] = &[
        ("midonet.org", "translations/status", "update"),
        ("midonet.org", "translations/status", "patch"),
    ];
    bind_deploy_role_without(&admin, &ns, removed).await;
    let (sim, _sim_admin) = start_sim(&[]).await;
    let mut proc = start_restricted(sim.api_url().as_str(), "pusher");

    let tr = fixtures::translation("denied-status", &ns, vec![fixtures::bridge(Uuid::new_v4())]);
    let trs: Api<Translation> = Api::namespaced(admin.clone(), &ns);
    trs.create(&PostParams::default(), &tr).await.unwrap();

    // The first denied status write: ours, or a global Translation's another test left
    // (one line per verb and resource, whatever the namespace).
    let line = authorization_error(&proc, "cannot update translations/status in namespace ").await;
    for part in [
        "verb=update",
        "resource=translations/status",
        "api_group=midonet.org",
        " namespace=",
        "the ClusterRole midonet-kube-controllers in deploy/rbac.yaml must grant it",
        // The API server's own words follow.
        "cannot update resource \"translations/status\"",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    // The pusher retries (counted each time) but says it once a minute.
    wait_until("retries are counted", DEADLINE, || async {
        (denials(&proc, "update", "translations/status").await >= 2).then_some(())
    })
    .await;
    let said = proc
        .logs()
        .lines()
        .filter(|l| l.contains("not authorized: cannot update translations/status"))
        .count();
    assert_eq!(said, 1, "logged once per minute:\n{}", proc.logs());
    assert_alive(&mut proc).await;

    restore_role(&admin, &ns, removed).await;
    wait_until("the status is written", RECOVERY, || async {
        trs.get("denied-status").await.ok().filter(ready)
    })
    .await;
    assert_alive(&mut proc).await;
}

#[tokio::test]
async fn missing_list_rule_keeps_readiness_false_and_heals_once_restored() {
    let _role = ROLE.lock().await;
    let admin = admin_client().await;
    let ns = unique_namespace(&admin, "authz-list").await;
    let removed: &[Grant] = &[("", "endpoints", "list"), ("", "endpoints", "watch")];
    bind_deploy_role_without(&admin, &ns, removed).await;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let endpoints: Endpoints = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5"}],
                     "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
    }))
    .unwrap();
    let owner = Api::<Endpoints>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &endpoints)
        .await
        .unwrap()
        .uid()
        .unwrap();
    // The translators need no backend; the address is never used.
    let mut proc = start_restricted("http://127.0.0.1:9/midonet-api", "endpoints");

    let line = authorization_error(&proc, "cannot list endpoints cluster-wide").await;
    for part in ["verb=list", "resource=endpoints"] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    assert!(denials(&proc, "list", "endpoints").await >= 1);
    assert_alive(&mut proc).await;
    let (code, body) = proc.get("/readyz").await.expect("/readyz answers");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("[-] endpoints-cache"), "{body}");

    restore_role(&admin, &ns, removed).await;
    let (code, body) = wait_until("ready", RECOVERY, || async {
        proc.get("/readyz").await.filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(code, 200, "{body}");
    // And it does its job: the Endpoints get their Translation.
    wait_until("a Translation of the Endpoints", RECOVERY, || async {
        let trs = Api::<Translation>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        trs.items
            .iter()
            .any(|t| t.owner_references().iter().any(|o| o.uid == owner))
            .then_some(())
    })
    .await;
    assert_alive(&mut proc).await;
}
