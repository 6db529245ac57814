//! Crash recovery (`midonet_kube_controllers::recovery`) on the real apiserver with the
//! simulator over HTTP: a pusher that finds the run marker held by a killed predecessor
//! deletes what that predecessor's cut pushes left behind, and nothing claimed; a clean
//! stop releases the marker.
//!
//! Its own test binary: a pusher watches every namespace, and would take the Translations
//! of another file's concurrent tests for its own.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, DeleteParams, PostParams};
use midonet_kube_controllers::crd::Translation;
use midonet_translators::model::{Chain, Resource, Rule, RuleType};
use support::fixtures::{is_ready, translation};
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

const TENANT: &str = "midonetkube";

fn chain(id: Uuid) -> Resource {
    let mut c = Chain::new(id);
    c.tenant_id = Some(TENANT.into());
    c.into()
}

fn rule(chain: Uuid) -> Resource {
    Rule::new(chain, Uuid::new_v4(), RuleType::Accept).into()
}

/// A rule a cut push left behind: created in a claimed chain, then its spec changed before
/// the push was recorded (see `midonet_kube_controllers::recovery`). A pusher that finds
/// the run marker still held by its killed predecessor deletes it, once two passes found
/// it, and nothing that is claimed; a clean stop releases the marker.
#[tokio::test]
async fn a_start_after_a_crash_deletes_what_cut_pushes_left() {
    let client = admin_client().await;
    let (sim, admin) = support::stack::start_sim(&[]).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let ns = unique_namespace(&client, "recovery").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease_name = format!("{ns}-leader");
    let marker = format!("{lease_name}-pusher");

    // The killed predecessor's marker, still held.
    let mut held = Lease::default();
    held.metadata.name = Some(marker.clone());
    held.spec = Some(LeaseSpec {
        holder_identity: Some("a-killed-pusher".into()),
        ..LeaseSpec::default()
    });
    leases.create(&PostParams::default(), &held).await.unwrap();
    // What its pushes left: a claimed chain and rule, and a rule in that chain nothing claims.
    let c = Uuid::new_v4();
    let kept = vec![chain(c), rule(c)];
    let left = rule(c);
    let backend = support::stack::backend_client(&sim);
    let entries = kept.iter().map(Resource::to_entry).collect();
    api.create(&PostParams::default(), &translation("kept", &ns, entries))
        .await
        .unwrap();

    let args = [
        "--controllers",
        "pusher",
        "--crash-recovery",
        "true",
        "--leader-election-name",
        &lease_name,
        "--leader-election-namespace",
        &ns,
    ];
    let pusher = Controllers::start(&kubeconfig, &sim, &args).await;
    wait_until("kept Ready", CEILING, || async {
        is_ready(&api.get("kept").await.ok()?).then_some(())
    })
    .await;
    backend.apply(&left).await.unwrap();
    wait_until("the marker names the new pusher", CEILING, || async {
        let lease = leases.get(&marker).await.ok()?;
        let holder = lease.spec?.holder_identity?;
        (holder != "a-killed-pusher").then_some(())
    })
    .await;
    // Two passes, 30 s apart, the first 30 s after the start.
    wait_until(
        "the cut push's rule deleted",
        Duration::from_secs(300),
        || async { (!admin.state().await.ok()?.contains(&left.item_path())).then_some(()) },
    )
    .await;
    let state = admin.state().await.unwrap();
    support::stack::assert_present(&state, &kept);
    let metrics = pusher.metrics().await;
    assert!(
        metrics.contains("midonet_kube_controllers_orphans_deleted_total{kind=\"Rule\"} 1"),
        "{metrics}"
    );

    api.delete("kept", &DeleteParams::default()).await.unwrap();
    wait_until("kept gone", CEILING, || async {
        api.get_opt("kept").await.ok()?.is_none().then_some(())
    })
    .await;

    // A clean stop releases the marker: the next start has nothing to recover.
    pusher.stop().await;
    let lease = leases.get(&marker).await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the marker is released at a clean stop"
    );
    sim.shutdown().await;
}
