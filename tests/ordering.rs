//! Push order across Translations: one written before the Translation that provides its
//! referent is held until the provider has pushed, instead of being refused by the backend
//! and retried. Its own test binary: every pusher in a test process watches all namespaces,
//! so a pusher of another test would send requests this one counts.

mod support;

use std::time::Duration;

use kube::api::{Api, PostParams};
use midonet_kube_controllers::crd::{Translation, TranslationResource};
use support::fixtures::{bridge, port, translation};
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

/// The Ready condition's reason.
fn reason(tr: &Translation) -> Option<String> {
    let status = tr.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(ready.reason.clone())
}

#[tokio::test]
async fn a_consumer_written_before_its_provider_waits_instead_of_being_refused() {
    let client = admin_client().await;
    let (sim, admin) = stack::start_sim(&[]).await;
    let ns = unique_namespace(&client, "ordering").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let pusher = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &["--controllers", "pusher"],
    )
    .await;
    let create = |name: &str, resources: Vec<TranslationResource>| {
        let tr = translation(name, &ns, resources);
        let api = api.clone();
        async move { api.create(&PostParams::default(), &tr).await.unwrap() }
    };
    let ready = |name: &'static str| {
        let api = api.clone();
        move || {
            let api = api.clone();
            async move { api.get(name).await.ok()?.is_ready().then_some(()) }
        }
    };
    admin.reset_requests().await.unwrap();

    // The consumer first, its provider a moment later (as the Translation of an Endpoints
    // often comes before its Service's).
    let (b, p) = (Uuid::new_v4(), Uuid::new_v4());
    create("consumer", vec![port(b, p)]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.total - counts.login,
        0,
        "the port was sent before any Translation provided its bridge: {counts:?}"
    );
    create("provider", vec![bridge(b)]).await;
    wait_until("provider Ready", Duration::from_secs(30), ready("provider")).await;
    wait_until("consumer Ready", Duration::from_secs(30), ready("consumer")).await;
    // One POST each, none refused.
    let counts = admin.requests().await.unwrap();
    assert_eq!(counts.total - counts.login, 2, "{counts:?}");
    assert_eq!(counts.of_status(404), 0, "{counts:?}");

    // A referent nobody provides: the hold is bounded, then the backend decides and the
    // condition says what is missing.
    let orphan_bridge = Uuid::new_v4();
    create("orphan", vec![port(orphan_bridge, Uuid::new_v4())]).await;
    wait_until("orphan refused", Duration::from_secs(30), || async {
        let tr = api.get("orphan").await.ok()?;
        (reason(&tr)? == "WaitingForReferent").then_some(())
    })
    .await;
    assert!(admin.requests().await.unwrap().of_status(404) >= 1);

    pusher.stop().await;
    sim.shutdown().await;
}
