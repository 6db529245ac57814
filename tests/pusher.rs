//! The pusher alone (`--controllers pusher`) on the real apiserver with the simulator over
//! HTTP: ordered creation, incremental changes, zero-request restarts, exact deletion with
//! the finalizer, backend outages, bad input and legacy Translations.
//!
//! Steps share one simulator and run in sequence inside one test, each with its own IDs.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use midonet_kube_controllers::crd::{Translation, TranslationResource};
use midonet_sim::admin::{AdminClient, Faults};
use midonet_translators::meta::FINALIZER;
use serde_json::json;
use support::fixtures::{bridge, port, translation};
use support::stack::Controllers;
use support::*;
use uuid::Uuid;

/// The record an older version wrote for `tr` pushed completely: `status.pushed` objects
/// with 16-digit body hashes, a 32-digit list hash (its formulas: SHA-256 of parent, NUL,
/// body; of each part's length and bytes), as a merge patch of its status.
fn older_versions_record(tr: &Translation) -> serde_json::Value {
    use sha2::{Digest, Sha256};
    let entries = tr.desired_resources();
    let mut list = Sha256::new();
    let mut pushed = Vec::new();
    for e in entries {
        for part in [&e.kind, &e.parent, &e.body] {
            list.update((part.len() as u64).to_le_bytes());
            list.update(part.as_bytes());
        }
        let body = Sha256::new()
            .chain_update(e.parent.as_bytes())
            .chain_update([0])
            .chain_update(e.body.as_bytes());
        let resource = midonet_translators::Resource::from_entry(e).unwrap();
        pushed.push(json!({
            "kind": e.kind,
            "path": resource.item_path(),
            "bodyHash": hex::encode(&body.finalize()[..8]),
        }));
    }
    json!({"status": {
        "created": null,
        "pushed": pushed,
        "pushedHash": hex::encode(&list.finalize()[..16]),
    }})
}

fn ready(tr: &Translation) -> Option<(String, String)> {
    let c = tr
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone()))
}

async fn wait_reason(api: &Api<Translation>, name: &str, status: &str, reason: &str) {
    wait_until(
        &format!("{name} Ready={status} ({reason})"),
        CEILING,
        || async {
            let tr = api.get(name).await.ok()?;
            (ready(&tr) == Some((status.into(), reason.into()))
                && tr.status.as_ref()?.observed_generation == tr.metadata.generation)
                .then_some(())
        },
    )
    .await;
}

/// The pusher's reconciles so far with this result (`""`: any).
async fn reconciles(pusher: &Controllers, result: &str) -> f64 {
    objects::metric(
        pusher.metrics_port,
        "midonet_kube_controllers_pusher_reconciles_total",
        if result.is_empty() {
            String::new()
        } else {
            format!("result=\"{result}\"")
        },
    )
    .await
}

async fn has(admin: &AdminClient, path: &str) -> bool {
    admin.state().await.unwrap().get(path).is_some()
}

#[tokio::test]
async fn pusher_behaviour() {
    let client = admin_client().await;
    let (sim, admin) = stack::start_sim(&[]).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let ns = unique_namespace(&client, "pusher").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let pusher_only = ["--controllers", "pusher"];
    let pusher = Controllers::start(&kubeconfig, &sim, &pusher_only).await;

    // Create: every resource exists, created in order (the port needs its bridge), Ready.
    let (b1, p1, p2) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    api.create(
        &PostParams::default(),
        &translation("t1", &ns, vec![bridge(b1), port(b1, p1)]),
    )
    .await
    .unwrap();
    wait_reason(&api, "t1", "True", "Pushed").await;
    assert!(has(&admin, &format!("/bridges/{b1}")).await);
    assert!(has(&admin, &format!("/ports/{p1}")).await);
    wait_event(&client, &ns, Some("t1"), "TranslationUpdatePushed").await;
    let tr = api.get("t1").await.unwrap();
    // The status write names its manager (`kubectl get tr -o yaml --show-managed-fields`).
    let managers: Vec<String> = tr
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers
            .iter()
            .any(|m| m == "midonet-kube-controllers-pusher"),
        "{managers:?}"
    );
    let status = tr.status.unwrap();
    assert_eq!(status.pushed.len(), 2);
    assert_eq!(status.resource_count, Some(2));

    own_status_writes_are_not_reconciled_again(&api, &ns, &pusher).await;
    status_recorded_when_the_object_changed_meanwhile(&api, &ns, &admin, &pusher).await;

    // Add a resource: only that one is requested from the backend.
    admin.reset_requests().await.unwrap();
    api.patch(
        "t1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": [bridge(b1), port(b1, p1), port(b1, p2)]}})),
    )
    .await
    .unwrap();
    wait_reason(&api, "t1", "True", "Pushed").await;
    wait_until("p2 pushed", CEILING, || async {
        has(&admin, &format!("/ports/{p2}")).await.then_some(())
    })
    .await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.total, 1,
        "only the new port is requested: {counts:?}"
    );

    // Remove a resource: it is deleted from the backend.
    api.patch(
        "t1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": [bridge(b1), port(b1, p2)]}})),
    )
    .await
    .unwrap();
    wait_until("p1 deleted from the backend", CEILING, || async {
        (!has(&admin, &format!("/ports/{p1}")).await).then_some(())
    })
    .await;
    wait_reason(&api, "t1", "True", "Pushed").await;

    // Immutable kind changed (a rule body): refused, backend left as is.
    let (chain, rule) = (Uuid::new_v4(), Uuid::new_v4());
    let chain_entry = fixtures::chain(chain);
    let rule_entry = |proto: u8| {
        TranslationResource::new(
            "Rule",
            chain.to_string(),
            format!(r#"{{"id":"{rule}","type":"accept","nwProto":{proto}}}"#),
        )
    };
    api.create(
        &PostParams::default(),
        &translation("t-rule", &ns, vec![chain_entry.clone(), rule_entry(6)]),
    )
    .await
    .unwrap();
    wait_reason(&api, "t-rule", "True", "Pushed").await;
    api.patch(
        "t-rule",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": [chain_entry, rule_entry(17)]}})),
    )
    .await
    .unwrap();
    wait_reason(&api, "t-rule", "False", "ImmutableResourceChanged").await;
    let state = admin.state().await.unwrap();
    let stored = state.get(&format!("/rules/{rule}")).expect("rule kept");
    assert_eq!(stored.body.get("nwProto").and_then(|v| v.as_u64()), Some(6));
    wait_event(&client, &ns, Some("t-rule"), "TranslationUpdateError").await;

    // Malformed Translations: condition + Warning event, nothing pushed, others still served.
    let bad_cases = [
        (
            "bad-json",
            TranslationResource::new("Bridge", "", "{not json}"),
        ),
        ("bad-kind", TranslationResource::new("Bridgeish", "", "{}")),
        (
            "no-id",
            TranslationResource::new("Bridge", "", r#"{"name":"x"}"#),
        ),
    ];
    for (name, entry) in bad_cases.clone() {
        api.create(&PostParams::default(), &translation(name, &ns, vec![entry]))
            .await
            .unwrap();
    }
    let b_ok = Uuid::new_v4();
    api.create(
        &PostParams::default(),
        &translation("t-ok", &ns, vec![bridge(b_ok)]),
    )
    .await
    .unwrap();
    for (name, _) in bad_cases {
        wait_reason(&api, name, "False", "InvalidTranslation").await;
        wait_event(&client, &ns, Some(name), "TranslationUpdateError").await;
    }
    wait_reason(&api, "t-ok", "True", "Pushed").await;

    // Restart with many in-sync Translations: zero backend requests.
    for i in 0..100 {
        api.create(
            &PostParams::default(),
            &translation(&format!("many-{i}"), &ns, vec![bridge(Uuid::new_v4())]),
        )
        .await
        .unwrap();
    }
    wait_until("100 Translations pushed", CEILING, || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .filter(|t| t.name_any().starts_with("many-"))
            .all(|t| ready(t).is_some_and(|(s, _)| s == "True"))
            .then_some(())
    })
    .await;
    pusher.stop().await;
    // Half of them as an older version recorded them: read as they are, no request. Ten
    // recorded for another spec (another list hash): each body is compared with the old
    // record, and found pushed.
    const OLDER: usize = 50;
    const OTHER_SPEC: usize = 10;
    for i in 0..OLDER {
        let name = format!("many-{i}");
        let tr = api.get(&name).await.unwrap();
        let mut older = older_versions_record(&tr);
        if i < OTHER_SPEC {
            older["status"]["pushedHash"] = json!("0".repeat(32));
        }
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(older))
            .await
            .unwrap();
    }
    admin.reset_requests().await.unwrap();
    let pusher = Controllers::start(&kubeconfig, &sim, &pusher_only).await;
    // Once the restarted pusher has reconciled every Translation there is.
    let all: Api<Translation> = Api::all(client.clone());
    let in_sync = all.list(&ListParams::default()).await.unwrap().items.len() as f64;
    wait_until(
        "every Translation reconciled after the restart",
        CEILING,
        || async {
            let done = reconciles(&pusher, "").await;
            if done >= in_sync {
                Ok(())
            } else {
                Err(format!("{done} of {in_sync} reconciled"))
            }
        },
    )
    .await;
    let counts = admin.requests().await.unwrap();
    // The only request is the login that readiness waits for: no resource is touched.
    assert_eq!(
        counts.total - counts.login,
        0,
        "a restart with everything in sync costs nothing: {counts:?}"
    );
    // An older record stays as it is unless its list hash changed, then it is written in
    // the current form.
    for i in 0..OLDER {
        let out = kubectl(&["get", "tr", &format!("many-{i}"), "-n", &ns, "-o", "json"]);
        let tr: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let current = tr["status"]["created"].is_array() && tr["status"]["pushed"].is_null();
        assert_eq!(current, i < OTHER_SPEC, "{}", tr["status"]);
    }
    pusher.stop().await;
    let pusher = settled_translations_are_compacted(&api, &admin, &kubeconfig, &sim).await;

    // Delete: reverse order, finalizer removed, another finalizer preserved.
    api.patch(
        "t1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER, "example.com/keep"]}})),
    )
    .await
    .unwrap();
    api.delete("t1", &DeleteParams::default()).await.unwrap();
    wait_until(
        "t1's backend resources gone, our finalizer removed",
        CEILING,
        || async {
            let tr = api.get("t1").await.ok()?;
            (!has(&admin, &format!("/bridges/{b1}")).await
                && !has(&admin, &format!("/ports/{p2}")).await
                && tr.finalizers() == ["example.com/keep".to_string()])
            .then_some(())
        },
    )
    .await;
    wait_event(&client, &ns, Some("t1"), "TranslationDeletionPushed").await;
    api.patch(
        "t1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();

    // Backend down during a delete: stays Terminating with a Warning, then recovers alone.
    admin
        .set_faults(Faults {
            down: true,
            ..Faults::default()
        })
        .await
        .unwrap();
    api.delete("t-ok", &DeleteParams::default()).await.unwrap();
    // (A deletion bumps the generation; the condition is what tells the story here.)
    wait_until("t-ok Ready=False (DeletionFailed)", CEILING, || async {
        let tr = api.get("t-ok").await.ok()?;
        (ready(&tr) == Some(("False".into(), "DeletionFailed".into()))).then_some(())
    })
    .await;
    wait_event(&client, &ns, Some("t-ok"), "TranslationDeletionError").await;
    let tr = api.get("t-ok").await.unwrap();
    assert!(tr.metadata.deletion_timestamp.is_some());
    assert!(has(&admin, &format!("/bridges/{b_ok}")).await);
    admin.clear_faults().await.unwrap();
    wait_until(
        "t-ok cleaned and gone after the backend returns",
        CEILING,
        || async {
            (api.get_opt("t-ok").await.ok()?.is_none()
                && !has(&admin, &format!("/bridges/{b_ok}")).await)
                .then_some(())
        },
    )
    .await;

    // Deleting a malformed Translation removes its finalizer (it pushed nothing).
    api.delete("bad-json", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("bad-json gone", CEILING, || async {
        api.get_opt("bad-json").await.ok()?.is_none().then_some(())
    })
    .await;

    // Owner deleted while the pusher is stopped: GC marks it, the pusher cleans it later.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = owner_configmap(&client, &ns, "owner").await;
    let b_owned = Uuid::new_v4();
    let mut owned = translation("t-owned", &ns, vec![bridge(b_owned)]);
    owned.metadata.owner_references = Some(vec![owner]);
    api.create(&PostParams::default(), &owned).await.unwrap();
    wait_reason(&api, "t-owned", "True", "Pushed").await;
    pusher.stop().await;
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait_until("GC marks t-owned", CEILING, || async {
        api.get("t-owned")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    assert!(has(&admin, &format!("/bridges/{b_owned}")).await);
    let pusher = Controllers::start(&kubeconfig, &sim, &pusher_only).await;
    wait_until(
        "t-owned cleaned after the pusher starts",
        CEILING,
        || async {
            (api.get_opt("t-owned").await.ok()?.is_none()
                && !has(&admin, &format!("/bridges/{b_owned}")).await)
                .then_some(())
        },
    )
    .await;

    // Legacy Translation from the original controller: top-level `resources`, no spec, its
    // backend resources already present. Deleted cleanly.
    let b_legacy = Uuid::new_v4();
    let p_legacy = Uuid::new_v4();
    let backend = midonet_kube_controllers::backend::BackendClient::new(
        midonet_kube_controllers::backend::BackendConfig {
            url: sim.api_url(),
            ..Default::default()
        },
        &prometheus::Registry::new(),
    )
    .unwrap();
    for e in [bridge(b_legacy), port(b_legacy, p_legacy)] {
        backend
            .apply(&midonet_translators::Resource::from_entry(&e).unwrap())
            .await
            .unwrap();
    }
    pusher.stop().await; // the legacy object must be created as the old controller left it
    let legacy: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::discovery::ApiResource::erase::<Translation>(&()),
    );
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "midonet.org/v1", "kind": "Translation",
        "metadata": {"name": "legacy", "finalizers": [FINALIZER]},
        "resources": [bridge(b_legacy), port(b_legacy, p_legacy)]
    }))
    .unwrap();
    legacy.create(&PostParams::default(), &obj).await.unwrap();
    let stored = api.get("legacy").await.unwrap();
    assert!(
        stored.is_legacy(),
        "the CRD keeps the legacy field: {stored:?}"
    );
    api.delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    let pusher = Controllers::start(&kubeconfig, &sim, &pusher_only).await;
    wait_until("legacy Translation cleaned", CEILING, || async {
        (api.get_opt("legacy").await.ok()?.is_none()
            && !has(&admin, &format!("/bridges/{b_legacy}")).await
            && !has(&admin, &format!("/ports/{p_legacy}")).await)
            .then_some(())
    })
    .await;

    pusher.stop().await;
    sim.shutdown().await;
}

/// The `many-*` Translations of `pusher_behaviour`, in name order.
async fn many(api: &Api<Translation>) -> Vec<Translation> {
    let mut all = api.list(&ListParams::default()).await.unwrap().items;
    all.retain(|t| t.name_any().starts_with("many-"));
    all.sort_by_key(|t| t.name_any());
    all
}

/// A pusher with `--compact-managed-fields-after` resets the managedFields of the settled
/// Translations (here the 100 `many-*`, Ready and older than a second), and nothing else:
/// no backend request, spec, status, labels, owners and finalizers as they were.
///
/// A step of `pusher_behaviour`, with no pusher running; returns the one it started.
async fn settled_translations_are_compacted(
    api: &Api<Translation>,
    admin: &AdminClient,
    kubeconfig: &std::path::Path,
    sim: &midonet_sim::SimHandle,
) -> Controllers {
    let before = many(api).await;
    assert_eq!(before.len(), 100);
    let carrying = |t: &Translation| {
        t.metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty())
    };
    assert!(
        before.iter().all(carrying),
        "fresh Translations record their writers"
    );
    admin.reset_requests().await.unwrap();
    let args = [
        "--controllers",
        "pusher",
        "--compact-managed-fields-after",
        "1s",
    ];
    let pusher = Controllers::start(kubeconfig, sim, &args).await;
    wait_until("the settled Translations compacted", CEILING, || async {
        let left = many(api).await.iter().filter(|t| carrying(t)).count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} of 100 still carry managedFields"))
        }
    })
    .await;
    for (was, is) in before.iter().zip(many(api).await) {
        let name = was.name_any();
        assert_eq!(is.metadata.managed_fields, None, "{name}");
        assert_eq!((&is.spec, &is.status), (&was.spec, &was.status), "{name}");
        assert_eq!(is.labels_map(), was.labels_map(), "{name}");
        assert_eq!(is.owner_references(), was.owner_references(), "{name}");
        assert_eq!(is.finalizers(), was.finalizers(), "{name}");
    }
    let compacted = objects::metric(
        pusher.metrics_port,
        "midonet_kube_controllers_managed_fields_compactions_total",
        "result=\"compacted\"".to_string(),
    )
    .await;
    assert!(compacted >= 100.0, "{compacted} compactions counted");
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.total - counts.login,
        0,
        "a compaction touches no backend resource: {counts:?}"
    );
    pusher
}

/// The watch event of the pusher's own status write is kept from its queue: reconciling it
/// would find nothing to do (an "unchanged" reconcile per push). It is recognized even when
/// it comes in before the write's response, as it often does with pushes side by side.
///
/// A step of `pusher_behaviour` (its counts assume no other Translation changes meanwhile).
async fn own_status_writes_are_not_reconciled_again(
    api: &Api<Translation>,
    ns: &str,
    pusher: &Controllers,
) {
    const N: usize = 20;
    let unchanged_before = reconciles(pusher, "unchanged").await;
    let pushed_before = reconciles(pusher, "pushed").await;
    for i in 0..N {
        api.create(
            &PostParams::default(),
            &translation(&format!("echo-{i}"), ns, vec![bridge(Uuid::new_v4())]),
        )
        .await
        .unwrap();
    }
    for i in 0..N {
        wait_reason(api, &format!("echo-{i}"), "True", "Pushed").await;
    }
    // Every write's echo comes in before a Translation created afterwards: once that one
    // is pushed and nothing is in flight, an echo let through would have been reconciled.
    api.create(
        &PostParams::default(),
        &translation("echo-sentinel", ns, vec![bridge(Uuid::new_v4())]),
    )
    .await
    .unwrap();
    wait_until(
        "the sentinel pushed, nothing in flight",
        CEILING,
        || async {
            let pushed = reconciles(pusher, "pushed").await - pushed_before;
            let in_flight = support::rollout::metric(
                pusher.metrics_port,
                "midonet_kube_controllers_pusher_reconciles_in_flight ",
            )
            .await;
            if pushed >= (N + 1) as f64 && in_flight == Some(0.0) {
                Ok(())
            } else {
                Err(format!("{pushed} pushed, {in_flight:?} in flight"))
            }
        },
    )
    .await;
    let pushed = reconciles(pusher, "pushed").await - pushed_before - 1.0;
    let unchanged = reconciles(pusher, "unchanged").await - unchanged_before;
    assert_eq!(pushed, N as f64);
    // Without the filter every push is followed by an unchanged reconcile (N).
    assert_eq!(
        unchanged, 0.0,
        "{unchanged} of {N} status writes were reconciled again"
    );
}

/// The status is written with the resourceVersion the push started from; when the object
/// changed during the push (here a label, while the backend is slow), the status is still
/// recorded (merge patch), so nothing is pushed twice.
///
/// A step of `pusher_behaviour`: every pusher in this test binary watches all namespaces,
/// so request counts are only exact while one test runs.
async fn status_recorded_when_the_object_changed_meanwhile(
    api: &Api<Translation>,
    ns: &str,
    admin: &AdminClient,
    pusher: &Controllers,
) {
    admin
        .set_faults(Faults {
            latency_ms: 2000,
            ..Faults::default()
        })
        .await
        .unwrap();
    admin.reset_requests().await.unwrap();
    let reconciled_before = reconciles(pusher, "").await;
    let b = Uuid::new_v4();
    api.create(
        &PostParams::default(),
        &translation("slow", ns, vec![bridge(b)]),
    )
    .await
    .unwrap();
    // The POST is in flight (the simulator counts it as it arrives, then takes 2 s to
    // answer): change the object under it.
    wait_until("the POST in flight", CEILING, || async {
        let counts = admin.requests().await.map_err(|e| e.to_string())?;
        let answered: u64 = counts.by_status.values().sum();
        if counts.of_method("POST") >= 1 && answered < counts.total {
            Ok(())
        } else {
            Err(format!("requests: {counts:?}"))
        }
    })
    .await;
    api.patch(
        "slow",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    wait_reason(api, "slow", "True", "Pushed").await;
    let tr = api.get("slow").await.unwrap();
    assert_eq!(tr.status.unwrap().pushed.len(), 1);
    // One POST: had the status been lost, the reconcile of the change would have pushed
    // again. It comes after the push's (two at least), and is done once none is in flight.
    wait_until("the change reconciled", CEILING, || async {
        let done = reconciles(pusher, "").await - reconciled_before;
        let in_flight = support::rollout::metric(
            pusher.metrics_port,
            "midonet_kube_controllers_pusher_reconciles_in_flight ",
        )
        .await;
        if done >= 2.0 && in_flight == Some(0.0) {
            Ok(())
        } else {
            Err(format!("{done} reconciles, {in_flight:?} in flight"))
        }
    })
    .await;
    let counts = admin.requests().await.unwrap();
    assert_eq!(
        counts.total - counts.login,
        1,
        "only the bridge's POST: {counts:?}"
    );
    admin.clear_faults().await.unwrap();
}
