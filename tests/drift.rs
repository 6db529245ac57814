//! Drift repair: resources deleted from the backend out of band are re-created within one
//! verification period and reported; a backend that lost all its state is rebuilt.

mod support;

use std::time::Duration;

use kube::api::{Api, PostParams};
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::Kind;
use support::fixtures::{self, bridge, port};
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

#[tokio::test]
async fn out_of_band_deletions_are_repaired() {
    let client = admin_client().await;
    let (sim, admin) = stack::start_sim(&[]).await;
    let ns = unique_namespace(&client, "drift").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let pusher = Controllers::start(
        &control_plane().kubeconfig,
        &sim,
        &[
            "--controllers",
            "pusher",
            "--verify-period",
            "1s",
            "--verify-rate",
            "200",
        ],
    )
    .await;

    let mut bridges = Vec::new();
    for i in 0..3 {
        let (b, p) = (Uuid::new_v4(), Uuid::new_v4());
        bridges.push((b, p));
        let tr = fixtures::translation(&format!("d{i}"), &ns, vec![bridge(b), port(b, p)]);
        api.create(&PostParams::default(), &tr).await.unwrap();
    }
    let all_present = || async {
        let state = admin.state().await.ok()?;
        bridges
            .iter()
            .all(|(b, p)| {
                state.get(&format!("/bridges/{b}")).is_some()
                    && state.get(&format!("/ports/{p}")).is_some()
            })
            .then_some(())
    };
    wait_until("pushed", Duration::from_secs(30), all_present).await;

    // Delete one bridge directly in the backend (its port goes with it, by cascade).
    let backend = BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            ..Default::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap();
    backend
        .delete_path(Kind::Bridge, &format!("/bridges/{}", bridges[0].0))
        .await
        .unwrap();
    wait_until("repaired", Duration::from_secs(30), all_present).await;
    wait_event(&client, &ns, None, "BackendDriftRepaired").await;

    // A backend that lost everything (restart without state): the whole topology returns.
    admin.wipe().await.unwrap();
    wait_until("rebuilt after a wipe", Duration::from_secs(30), all_present).await;

    pusher.stop().await;
    sim.shutdown().await;
}
