//! Push order across Translations: one written before the Translation that provides its
//! referent is held until the provider has pushed, and a new binding of a host interface
//! until the old binding is deleted, instead of being refused by the backend and retried.
//! Its own test binary: every pusher in a test process watches all namespaces, so a pusher
//! of another test would send requests this one counts.

mod support;

use kube::api::{Api, DeleteParams, PostParams};
use midonet_kube_controllers::crd::{Translation, TranslationResource};
use midonet_translators::model::{
    HostInterfacePort, Resource, TunnelZone, TunnelZoneHost, TunnelZoneType,
};
use support::fixtures::{bridge, port, translation};
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

/// The pusher's reconciles so far that held a Translation back for a referent or an
/// interface.
async fn held(pusher: &Controllers) -> f64 {
    support::objects::metric(
        pusher.metrics_port,
        "midonet_kube_controllers_pusher_reconciles_total",
        "result=\"held\"",
    )
    .await
}

/// The Ready condition's reason.
fn reason(tr: &Translation) -> Option<String> {
    let status = tr.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(ready.reason.clone())
}

fn entry(resource: impl Into<Resource>) -> TranslationResource {
    resource.into().to_entry()
}

#[tokio::test]
async fn translations_wait_for_their_referents_and_interfaces_instead_of_being_refused() {
    let client = admin_client().await;
    let host = Uuid::new_v4();
    let (sim, admin) = stack::start_sim(&[("ordering-host", host)]).await;
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
    // Once the pusher reports `n` more reconciles that held a Translation back.
    let held_since = |before: f64, n: f64, what: &'static str| {
        let pusher = &pusher;
        async move {
            wait_until(what, CEILING, || async {
                let held = held(pusher).await - before;
                if held >= n {
                    Ok(())
                } else {
                    Err(format!("{held} held"))
                }
            })
            .await
        }
    };
    admin.reset_requests().await.unwrap();

    // The consumer first, its provider a moment later (as the Translation of an Endpoints
    // often comes before its Service's): the provider is written while the consumer is
    // held (3 s at most for a referent nobody provides yet; from then on, 30 s for the
    // provider's push).
    let (b, p) = (Uuid::new_v4(), Uuid::new_v4());
    let before = held(&pusher).await;
    create("consumer", vec![port(b, p)]).await;
    held_since(before, 1.0, "the consumer held").await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.total - counts.login,
        0,
        "the port was sent before any Translation provided its bridge: {counts:?}"
    );
    create("provider", vec![bridge(b)]).await;
    wait_until("provider Ready", CEILING, ready("provider")).await;
    wait_until("consumer Ready", CEILING, ready("consumer")).await;
    // One POST each, none refused.
    let counts = admin.requests().await.unwrap();
    assert_eq!(counts.total - counts.login, 2, "{counts:?}");
    assert_eq!(counts.of_status(404), 0, "{counts:?}");

    // A referent nobody provides: the hold is bounded, then the backend decides and the
    // condition says what is missing.
    let orphan_bridge = Uuid::new_v4();
    create("orphan", vec![port(orphan_bridge, Uuid::new_v4())]).await;
    wait_until("orphan refused", CEILING, || async {
        let tr = api.get("orphan").await.ok()?;
        (reason(&tr)? == "WaitingForReferent").then_some(())
    })
    .await;
    assert!(admin.requests().await.unwrap().of_status(404) >= 1);

    // A pod re-created under the same name binds the same host interface to a new port:
    // the new binding waits until the old Translation's deletion has unbound it.
    let zone = Uuid::new_v4();
    let addr = std::net::Ipv4Addr::new(10, 0, 0, 1);
    create(
        "tunnel-endpoint",
        vec![
            entry(TunnelZone::new(zone, "ordering", TunnelZoneType::Vxlan)),
            entry(TunnelZoneHost::new(zone, host, addr)),
        ],
    )
    .await;
    let pod = |port_id: Uuid| {
        vec![
            port(b, port_id),
            entry(HostInterfacePort::new(host, port_id, "pod-web-0")),
        ]
    };
    create("web-0", pod(Uuid::new_v4())).await;
    wait_until("web-0 Ready", CEILING, ready("web-0")).await;
    admin.reset_requests().await.unwrap();
    // The old Translation is still there (its deletion not even asked for) when the new
    // one comes.
    let before = held(&pusher).await;
    create("web-0-again", pod(Uuid::new_v4())).await;
    held_since(before, 1.0, "web-0-again held").await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.get(midonet_translators::model::Kind::HostInterfacePort, "POST"),
        0,
        "the interface was bound again before the old binding was deleted: {counts:?}"
    );
    api.delete("web-0", &DeleteParams::default()).await.unwrap();
    wait_until("web-0-again Ready", CEILING, ready("web-0-again")).await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.of_status(409),
        0,
        "a binding was refused: {counts:?}"
    );
    assert_eq!(
        counts.get(midonet_translators::model::Kind::HostInterfacePort, "POST"),
        1,
        "{counts:?}"
    );

    pusher.stop().await;
    sim.shutdown().await;
}
