//! MidoNet's cascade: deleting a Translation's resources deletes what other Translations
//! built on them. Its own test binary: every pusher in a test process watches all
//! namespaces, so a pusher of another test would take part in the deletions this one checks.

mod support;

use midonet_kube_controllers::crd::TranslationResource;
use support::fixtures::{bridge, chain, create, port};
use support::stack::PusherAlone;
use support::*;
use uuid::Uuid;

/// A Translation's deletion makes MidoNet delete what other Translations built on its
/// resources (a bridge's ports, a chain's rules). The pusher checks those at once, not at
/// the next verification: they are re-created as soon as a new provider pushes.
#[tokio::test]
async fn what_a_deleted_providers_cascade_took_is_recreated() {
    // Periodic verification is far away: only the cascade check can repair in time.
    let alone = PusherAlone::start("cascade", &["--verify-period", "1h"]).await;
    let PusherAlone {
        client,
        admin,
        ns,
        api,
        ..
    } = &alone;
    let (b, p, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let create =
        |name: &'static str, resources: Vec<TranslationResource>| create(api, ns, name, resources);
    let port_path = format!("/ports/{p}");
    let port_present = |present: bool| {
        let (admin, path) = (admin, &port_path);
        move || async move {
            let state = admin.state().await.ok()?;
            (state.get(path).is_some() == present).then_some(())
        }
    };
    create("provider", vec![bridge(b)]).await;
    // The chain is not built on the bridge: left alone.
    create("consumer", vec![port(b, p), chain(other)]).await;
    wait_until("both pushed", CEILING, port_present(true)).await;
    wait_until("consumer Ready", CEILING, || async {
        api.get("consumer").await.ok()?.is_ready().then_some(())
    })
    .await;

    // The provider goes: its bridge is deleted, and the consumer's port with it.
    api.delete("provider", &Default::default()).await.unwrap();
    wait_until("provider gone", CEILING, || async {
        api.get_opt("provider").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_until("port cascaded", CEILING, port_present(false)).await;
    admin.reset_requests().await.unwrap();

    // A new provider of the same bridge: the consumer's port comes back within seconds.
    create("provider-2", vec![bridge(b)]).await;
    wait_until("port re-created", CEILING, port_present(true)).await;
    wait_until("consumer Ready again", CEILING, || async {
        api.get("consumer").await.ok()?.is_ready().then_some(())
    })
    .await;
    let state = admin.state().await.unwrap();
    assert!(state.get(&format!("/chains/{other}")).is_some());
    // The untouched chain was not asked for again.
    let counts = admin.requests().await.unwrap();
    assert!(!counts.by_kind.contains_key("Chain"), "{counts:?}");
    wait_event(client, ns, Some("consumer"), "BackendCascadeRepaired").await;
    alone.stop().await;
}
