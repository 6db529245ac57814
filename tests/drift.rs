//! Drift repair: resources deleted from the backend out of band are re-created within one
//! verification period and reported; a backend that lost all its state is rebuilt. A push
//! the backend refuses for a referent recorded as pushed (a backend that restarted empty)
//! has that referent's provider verified at once, itself included.
//!
//! One pusher at a time in this binary (a pusher pushes every namespace's Translations):
//! the tests take [`ONE_PUSHER`].

mod support;

use kube::api::{Api, Patch, PatchParams, PostParams};
use midonet_kube_controllers::backend::{BackendClient, BackendConfig};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::Kind;
use support::fixtures::{self, bridge, port};
use support::stack::{Controllers, PusherAlone};
use support::*;
use uuid::Uuid;

/// Held by each test while its pusher runs.
static ONE_PUSHER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `Ok` when the simulator holds every one of `paths`, else the ones it lacks.
async fn present(admin: &midonet_sim::admin::AdminClient, paths: &[String]) -> Result<(), String> {
    let state = admin
        .state()
        .await
        .map_err(|e| format!("simulator state: {e}"))?;
    let lacking: Vec<&String> = paths.iter().filter(|p| !state.contains(p)).collect();
    if lacking.is_empty() {
        Ok(())
    } else {
        Err(format!("backend lacks {lacking:?}"))
    }
}

/// `Ok` when every one of `names` is Ready, else each other one's Ready condition.
async fn all_ready(api: &Api<Translation>, names: &[&str]) -> Result<(), String> {
    let mut not_ready = Vec::new();
    for name in names {
        let tr = api
            .get(name)
            .await
            .map_err(|e| format!("get {name}: {e}"))?;
        if !tr.is_ready() {
            let cond = tr
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .map(|c| format!("{} {}: {}", c.status, c.reason, c.message));
            not_ready.push(format!("{name} ({cond:?})"));
        }
    }
    if not_ready.is_empty() {
        Ok(())
    } else {
        Err(format!("not Ready: {not_ready:?}"))
    }
}

#[tokio::test]
async fn out_of_band_deletions_are_repaired() {
    let _one = ONE_PUSHER.lock().await;
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
    let paths: Vec<String> = bridges
        .iter()
        .flat_map(|(b, p)| [format!("/bridges/{b}"), format!("/ports/{p}")])
        .collect();
    let all_present = || present(&admin, &paths);
    wait_until("pushed", CEILING, all_present).await;

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
    wait_until("repaired", CEILING, all_present).await;
    wait_event(&client, &ns, None, "BackendDriftRepaired").await;

    // A backend that lost everything (restart without state): the whole topology returns.
    admin.wipe().await.unwrap();
    wait_until("rebuilt after a wipe", CEILING, all_present).await;

    pusher.stop().await;
    sim.shutdown().await;
}

/// After a backend lost its state, a push refused for a referent a Translation records as
/// pushed — its own (a spec grown by a resource under its lost bridge) or another's (a new
/// port on a lost bridge) — has that Translation verified and rebuilt at once, and what
/// other Translations had under the rebuilt bridge follows. Periodic verification is an
/// hour away: only the refusals can repair in time.
#[tokio::test]
async fn a_push_refused_for_a_lost_referent_rebuilds_its_provider() {
    let _one = ONE_PUSHER.lock().await;
    let alone = PusherAlone::start("refused", &["--verify-period", "1h"]).await;
    let PusherAlone {
        client,
        admin,
        ns,
        api,
        ..
    } = &alone;
    let [a, b, p, p2, q, r] = [(); 6].map(|()| Uuid::new_v4());
    fixtures::create(api, ns, "provider", vec![bridge(a)]).await;
    fixtures::create(api, ns, "own", vec![bridge(b), port(b, p)]).await;
    fixtures::create(api, ns, "consumer", vec![port(a, q)]).await;
    let before: Vec<String> = vec![
        format!("/bridges/{a}"),
        format!("/bridges/{b}"),
        format!("/ports/{p}"),
        format!("/ports/{q}"),
    ];
    wait_until("pushed", CEILING, || present(admin, &before)).await;
    wait_until("Ready", CEILING, || {
        all_ready(api, &["provider", "own", "consumer"])
    })
    .await;

    // The backend restarts empty (its hosts kept); nobody is told.
    admin.wipe().await.unwrap();
    let lost = std::time::Instant::now();
    // A resource added under its own lost bridge: refused, for a bridge it records.
    let grown = fixtures::translation("own", ns, vec![bridge(b), port(b, p), port(b, p2)]);
    api.patch(
        "own",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": grown.spec})),
    )
    .await
    .unwrap();
    // A new Translation on another's lost bridge: refused, for a bridge "provider" records.
    fixtures::create(api, ns, "newcomer", vec![port(a, r)]).await;

    let after: Vec<String> = before
        .iter()
        .cloned()
        .chain([format!("/ports/{p2}"), format!("/ports/{r}")])
        .collect();
    wait_until("rebuilt after the refusals", CEILING, || async {
        present(admin, &after).await?;
        all_ready(api, &["provider", "own", "consumer", "newcomer"]).await
    })
    .await;
    eprintln!("rebuilt {:.1?} after the wipe", lost.elapsed());
    wait_event(client, ns, Some("own"), "BackendDriftRepaired").await;
    wait_event(client, ns, Some("provider"), "BackendDriftRepaired").await;
    // The consumer's port went with the provider's bridge: verified when it came back.
    wait_event(client, ns, Some("consumer"), "BackendCascadeRepaired").await;
    alone.stop().await;
}
