//! The binary as operators run it: configuration errors, /healthz, /readyz, /metrics,
//! SIGTERM, and two instances under leader election (real apiserver + simulator).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use midonet_kube_controllers::crd::Translation;
use serde_json::{json, Value};
use support::child::{ChildControllers, BIN};
use support::stack::start_sim;
use support::*;
use uuid::Uuid;

fn bad_config(args: &[&str], setting: &str) {
    let out = Command::new(BIN)
        .arg("run")
        .args(args)
        .env_remove("MIDONETKUBE_PASSWORD")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains(setting), "names {setting}: {stderr}");
}

#[test]
fn bad_configuration_fails_fast_naming_the_setting() {
    bad_config(&["--controllers", "pod,routers"], "--controllers");
    bad_config(&["--midonet-api", "::not a url"], "--midonet-api");
    bad_config(
        &["--password-file", "/nonexistent/secret"],
        "--password-file",
    );
    bad_config(&["--metrics-address", "nowhere"], "--metrics-address");
}

/// Held by tests whose pusher pushes: every pusher works on all Translations of the cluster,
/// and one that records another test's Translations as pushed (to its own simulator) would
/// keep that test's pusher from pushing them.
static PUSHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The binary as the admin user, running the pusher plus `extra` settings.
fn start_pusher(midonet_api: &str, extra: &[&str]) -> ChildControllers {
    let args = [&["--controllers", "pusher"], extra].concat();
    ChildControllers::start(&control_plane().kubeconfig, midonet_api, &args)
}

#[tokio::test]
async fn health_readiness_metrics_and_sigterm() {
    let _pushing = PUSHING.lock().await;
    let (sim, _admin) = start_sim(&[]).await;
    let mut proc = start_pusher(sim.api_url().as_str(), &["--leader-elect", "false"]);
    // Alive quickly; ready only once caches are synced and the backend login worked.
    wait_until("healthz", CEILING, || async {
        (proc.get("/healthz").await?.0 == 200).then_some(())
    })
    .await;
    let (code, body) = wait_until("readyz ready", CEILING, || async {
        let r = proc.get("/readyz").await?;
        (r.0 == 200).then_some(r)
    })
    .await;
    assert_eq!(code, 200);
    assert!(
        body.contains("[+] translations-cache") && body.contains("[+] backend"),
        "{body}"
    );
    let (_, metrics) = proc.get("/metrics").await.unwrap();
    for name in [
        "midonet_kube_controllers_leader",
        "midonet_kube_controllers_translations",
        "midonet_kube_controllers_pusher_retry_queue_depth",
        "midonet_kube_controllers_midonet_client_requests_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
    let start = Instant::now();
    proc.sigterm();
    let status = loop {
        if let Some(s) = proc.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no exit within the grace period"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
}

#[tokio::test]
async fn readyz_is_not_ready_before_the_backend_answers() {
    // A backend that is not there: alive, but never ready.
    let dead = dead_backend();
    let proc = start_pusher(&dead, &["--leader-elect", "false"]);
    wait_until("healthz", CEILING, || async {
        (proc.get("/healthz").await?.0 == 200).then_some(())
    })
    .await;
    // Once a request to the backend has been tried (and failed): never ready.
    let (code, body) = wait_until("the backend tried", CEILING, || async {
        let (code, body) = proc
            .get("/readyz")
            .await
            .ok_or_else(|| "no /readyz answer".to_string())?;
        if body.contains("no request made yet") {
            Err(format!("{code}: {body}"))
        } else {
            Ok((code, body))
        }
    })
    .await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("[-] backend"), "{body}");
}

/// The URL of a backend that answers nothing: a listener of this test's own, which closes
/// every connection at once. A port merely found free could be taken meanwhile by another
/// process's server, which would then answer.
fn dead_backend() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    format!("http://127.0.0.1:{port}/midonet-api")
}

/// A Translation of one new bridge.
fn bridge_translation(name: &str, ns: &str) -> Translation {
    fixtures::translation(name, ns, vec![fixtures::bridge(Uuid::new_v4())])
}

#[tokio::test]
async fn leader_election_one_works_then_the_standby_takes_over() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    let (sim, admin) = start_sim(&[]).await;
    let lease_ns = format!("lease-{}", std::process::id());
    let ns_obj: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": lease_ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns_obj)
        .await
        .unwrap();
    let args = [
        "--leader-election-namespace",
        lease_ns.as_str(),
        "--lease-duration",
        "3s",
    ];
    let a = start_pusher(sim.api_url().as_str(), &args);
    let b = start_pusher(sim.api_url().as_str(), &args);
    wait_until("one leader", CEILING, || async {
        (a.is_leader().await || b.is_leader().await).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (la, lb) = (a.is_leader().await, b.is_leader().await);
    let leader_lines = |m: Option<(u16, String)>| {
        m.map(|(_, m)| {
            m.lines()
                .filter(|l| l.contains("_leader"))
                .map(String::from)
                .collect::<Vec<_>>()
        })
    };
    assert!(
        la != lb,
        "exactly one leader: {la} {lb} {:?} {:?}",
        leader_lines(a.get("/metrics").await),
        leader_lines(b.get("/metrics").await)
    );
    let (leader, standby) = if a.is_leader().await { (a, b) } else { (b, a) };

    // Work done by the leader only: each resource POSTed once.
    let ns = unique_namespace(&client, "le").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    admin.reset_requests().await.unwrap();
    let bridges = |n: usize| {
        let admin = &admin;
        move || async move {
            let count = admin
                .state()
                .await
                .ok()?
                .count(midonet_translators::Kind::Bridge);
            (count == n).then_some(())
        }
    };
    for i in 0..5 {
        api.create(
            &PostParams::default(),
            &bridge_translation(&format!("t{i}"), &ns),
        )
        .await
        .unwrap();
    }
    wait_until("5 bridges", CEILING, bridges(5)).await;
    // Each push recorded too: a leader killed between a POST and its status write leaves
    // the survivor to POST again (and adopt the resource on 409), which is right but is
    // not what this test counts.
    wait_until("5 Translations Ready", CEILING, || async {
        let list = api.list(&Default::default()).await.ok()?;
        (list.items.iter().filter(|t| t.is_ready()).count() == 5).then_some(())
    })
    .await;
    drop(leader); // SIGKILL: no lease release, the standby waits out the lease
    wait_until("the standby takes over", CEILING, || async {
        standby.is_leader().await.then_some(())
    })
    .await;
    // The survivor converges new work.
    api.create(&PostParams::default(), &bridge_translation("after", &ns))
        .await
        .unwrap();
    wait_until("the survivor pushes", CEILING, bridges(6)).await;
    let counts = admin.requests().await.unwrap();
    let posts = counts.get(midonet_translators::Kind::Bridge, "POST");
    assert_eq!(posts, 6, "no duplicate backend requests: {counts:?}");
}

/// The value of a log line's field: the event's own, else its innermost span's that has it
/// (tracing-subscriber's JSON puts the current span under `span`, all under `spans`).
fn log_field<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    let spans = line["spans"].as_array().into_iter().flatten().rev();
    std::iter::once(line)
        .chain(std::iter::once(&line["span"]))
        .chain(spans)
        .find_map(|scope| scope.get(name))
}

/// The complete lines logged so far, each parsed as JSON (panics on one that is not).
fn json_lines(proc: &ChildControllers) -> Vec<Value> {
    let logs = proc.logs();
    // The last line may still be being written.
    let complete = logs.rsplit_once('\n').map_or("", |(done, _)| done);
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn json_logs_carry_the_translation_and_object_fields() {
    let _pushing = PUSHING.lock().await;
    let client = admin_client().await;
    let (sim, _admin) = start_sim(&[]).await;
    let proc = start_pusher(
        sim.api_url().as_str(),
        &["--leader-elect", "false", "--log-format", "json"],
    );
    let ns = unique_namespace(&client, "json-logs").await;
    Api::<Translation>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &bridge_translation("logged", &ns))
        .await
        .unwrap();
    let pushed = wait_until("the push is logged", CEILING, || async {
        json_lines(&proc).into_iter().find(|l| {
            l["message"] == "pushed" && log_field(l, "translation") == Some(&json!("logged"))
        })
    })
    .await;
    assert_eq!(pushed["level"], "INFO", "{pushed}");
    assert_eq!(
        log_field(&pushed, "namespace"),
        Some(&json!(ns)),
        "{pushed}"
    );
    // From the reconcile's span: the Kubernetes object the line is about.
    assert_eq!(
        log_field(&pushed, "kind"),
        Some(&json!("Translation")),
        "{pushed}"
    );
    assert_eq!(
        log_field(&pushed, "object"),
        Some(&json!("logged")),
        "{pushed}"
    );
    assert_eq!(
        log_field(&pushed, "controller"),
        Some(&json!("pusher")),
        "{pushed}"
    );
    assert_eq!(log_field(&pushed, "changes"), Some(&json!(1)), "{pushed}");
}
