//! The Translation CRD on a real kube-apiserver: installation, short name, schema
//! validation, status subresource, finalizers and garbage collection through owners.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use midonet_kube_controllers::crd::{
    Condition, Translation, TranslationResource, TranslationSpec, TranslationStatus,
};
use midonet_kube_controllers::translate;
use midonet_translators::meta::{FINALIZER, OWNER_UID_LABEL, VERSION_LABEL};
use midonet_translators::DesiredTranslation;
use support::*;

const BRIDGE_ID: &str = "0a1b2c3d-0000-4000-8000-000000000001";

fn valid_translation(name: &str, ns: &str) -> Translation {
    let mut tr = Translation::new(
        name,
        ns,
        TranslationSpec {
            resources: vec![TranslationResource::new(
                "Bridge",
                "",
                format!(r#"{{"id":"{BRIDGE_ID}","name":"b"}}"#),
            )],
        },
    );
    tr.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    tr
}

#[tokio::test]
async fn crd_is_established_and_short_name_resolves() {
    let client = admin_client().await;
    // Idempotent re-apply through the same path the controllers use.
    apply_crd(&client).await;
    let ns = unique_namespace(&client, "crd-short").await;
    let api: Api<Translation> = Api::namespaced(client, &ns);
    api.create(&PostParams::default(), &valid_translation("t-short", &ns))
        .await
        .unwrap();
    let out = kubectl(&["get", "tr", "-n", &ns]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl get tr failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("t-short"), "{stdout}");
    for column in ["OWNER-KIND", "OWNER", "RESOURCES", "SYNCED", "AGE"] {
        assert!(stdout.contains(column), "column {column} missing: {stdout}");
    }
    // The `midonet` category lists Translations too.
    let out = kubectl(&["get", "midonet", "-n", &ns, "-o", "name"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("translation.midonet.org/t-short"));
}

#[tokio::test]
async fn schema_rejects_bad_entries_with_422() {
    let client = admin_client().await;
    let ns = unique_namespace(&client, "crd-bad").await;
    let api: Api<Translation> = Api::namespaced(client, &ns);
    let cases = [
        (
            "bad-parent",
            TranslationResource::new("Bridge", "NOT-A-UUID", "{}"),
        ),
        (
            "upper-parent",
            TranslationResource::new("Port", BRIDGE_ID.to_uppercase(), "{}"),
        ),
        ("bad-kind", TranslationResource::new("bridge", "", "{}")),
        ("kind-symbol", TranslationResource::new("Bri-dge", "", "{}")),
        (
            "body-array",
            TranslationResource::new("Bridge", "", "[1,2]"),
        ),
        (
            "body-string",
            TranslationResource::new("Bridge", "", "\"x\""),
        ),
    ];
    for (name, entry) in cases {
        let mut tr = valid_translation(name, &ns);
        tr.spec = Some(TranslationSpec {
            resources: vec![entry],
        });
        match api.create(&PostParams::default(), &tr).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}")
            }
            other => panic!("{name}: expected 422, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn status_subresource_and_finalizer_hold_deletion() {
    let client = admin_client().await;
    let ns = unique_namespace(&client, "crd-fin").await;
    let api: Api<Translation> = Api::namespaced(client, &ns);
    let created = api
        .create(&PostParams::default(), &valid_translation("t-fin", &ns))
        .await
        .unwrap();
    assert_eq!(created.finalizers(), &[FINALIZER.to_string()]);

    let status = TranslationStatus {
        observed_generation: created.metadata.generation,
        pushed_hash: Some("abc".into()),
        resource_count: Some(1),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Pushed".into(),
            message: "test".into(),
            ..Condition::default()
        }],
        ..TranslationStatus::default()
    };
    api.patch_status(
        "t-fin",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
    let got = api.get("t-fin").await.unwrap();
    assert_eq!(got.status, Some(status));
    // A status write does not change the spec's generation.
    assert_eq!(got.metadata.generation, created.metadata.generation);
    // The Synced printer column shows the Ready condition.
    let out = kubectl(&["get", "tr", "t-fin", "-n", &ns, "--no-headers"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("True"));

    // The finalizer holds it, marked for deletion by the DELETE itself.
    api.delete("t-fin", &DeleteParams::default()).await.unwrap();
    let terminating = api.get("t-fin").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    api.patch(
        "t-fin",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until("Translation gone", CEILING, || async {
        api.get_opt("t-fin").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn garbage_collection_marks_owned_translation() {
    let client = admin_client().await;
    let ns = unique_namespace(&client, "crd-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = owner_configmap(&client, &ns, "owner").await;

    let api: Api<Translation> = Api::namespaced(client, &ns);
    let mut tr = valid_translation("t-owned", &ns);
    tr.metadata.owner_references = Some(vec![owner]);
    api.create(&PostParams::default(), &tr).await.unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait_until(
        "garbage collector marks the Translation for deletion",
        CEILING,
        || async {
            let tr = api.get("t-owned").await.ok()?;
            tr.metadata.deletion_timestamp.is_some().then_some(())
        },
    )
    .await;
    // Still there: our finalizer holds it until the pusher has cleaned the backend.
    assert!(api.get_opt("t-owned").await.unwrap().is_some());
}

#[test]
fn committed_crd_file_equals_generated() {
    let committed = std::fs::read_to_string(repo_root().join("crds/translation.yaml")).unwrap();
    assert_eq!(
        committed,
        midonet_kube_controllers::crd::crd_yaml().unwrap(),
        "crds/translation.yaml is stale: run `cargo run -- crd > crds/translation.yaml`"
    );
}

/// The translators' update, a merge patch of what they own (`translate::update_patch`), on
/// the real apiserver: the spec and the owner reference are replaced (an Endpoints
/// generation re-owned by its Service keeps no reference to the Endpoints), a label of
/// theirs no longer desired goes, someone else's label and finalizer stay. Both on a
/// Translation the translators created and on one an earlier release wrote with a
/// server-side apply, whose fields that apply's manager owns.
#[tokio::test]
async fn translators_update_reowns_and_keeps_what_is_not_theirs() {
    let client = admin_client().await;
    let ns = unique_namespace(&client, "crd-update").await;
    let api: Api<Translation> = Api::namespaced(client.clone(), &ns);
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut owner_refs = Vec::new();
    for name in ["endpoints-era-owner", "service-owner"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        let cm = owners.create(&PostParams::default(), &cm).await.unwrap();
        owner_refs.push(translate::owner_reference(&cm).unwrap());
    }
    let desired = |name: &str, version: &str, extra_label: bool, bridge: &str| {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(VERSION_LABEL.to_string(), version.to_string());
        if extra_label {
            labels.insert("midonet.org/dropped".to_string(), "x".to_string());
        }
        DesiredTranslation {
            name: name.into(),
            namespace: ns.clone(),
            labels,
            resources: vec![TranslationResource::new(
                "Bridge",
                "",
                format!(r#"{{"id":"{bridge}","name":"b"}}"#),
            )],
        }
    };
    let manager = Some(translate::FIELD_MANAGER.to_string());
    for (name, by_apply) in [("t-created", false), ("t-applied", true)] {
        let old = translate::translation_object(
            &desired(name, "1", true, BRIDGE_ID),
            Some(&owner_refs[0]),
        );
        if by_apply {
            let params = PatchParams::apply(translate::FIELD_MANAGER).force();
            api.patch(name, &params, &Patch::Apply(&old)).await.unwrap();
        } else {
            let params = PostParams {
                field_manager: manager.clone(),
                ..PostParams::default()
            };
            api.create(&params, &old).await.unwrap();
        }
        let foreign = serde_json::json!({"metadata": {
            "labels": {"team": "blue"},
            "finalizers": [FINALIZER, "example.com/keep"],
        }});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&foreign))
            .await
            .unwrap();

        let cached = api.get(name).await.unwrap();
        let new_bridge = "0a1b2c3d-0000-4000-8000-000000000002";
        let want = translate::translation_object(
            &desired(name, "2", false, new_bridge),
            Some(&owner_refs[1]),
        );
        let params = PatchParams {
            field_manager: manager.clone(),
            ..PatchParams::default()
        };
        let patch = translate::update_patch(&cached, &want);
        api.patch(name, &params, &Patch::Merge(&patch))
            .await
            .unwrap();

        let got = api.get(name).await.unwrap();
        assert!(translate::up_to_date(&got, &want), "{name}: {got:?}");
        let owner_uids: Vec<&str> = got
            .owner_references()
            .iter()
            .map(|o| o.uid.as_str())
            .collect();
        assert_eq!(owner_uids, [owner_refs[1].uid.as_str()], "{name}");
        let labels: Vec<(&str, &str)> = got.labels_iter().collect();
        assert_eq!(
            labels,
            [
                (OWNER_UID_LABEL, owner_refs[1].uid.as_str()),
                (VERSION_LABEL, "2"),
                ("team", "blue"),
            ],
            "{name}"
        );
        assert_eq!(
            got.finalizers(),
            [FINALIZER.to_string(), "example.com/keep".to_string()],
            "{name}"
        );
        assert_eq!(got.spec, want.spec, "{name}");
        // The update cleared the field managers' record, and a status write, as the
        // pusher's, does not start it again.
        assert_eq!(got.metadata.managed_fields, None, "{name}");
        let mut with_status = got.clone();
        with_status.status = Some(TranslationStatus {
            pushed_hash: Some("0123456789abcdef".into()),
            ..TranslationStatus::default()
        });
        let params = PostParams {
            field_manager: Some(midonet_kube_controllers::pusher::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        api.replace_status(name, &params, &with_status)
            .await
            .unwrap();
        let got = api.get(name).await.unwrap();
        assert_eq!(got.status, with_status.status, "{name}");
        assert_eq!(got.metadata.managed_fields, None, "{name}");

        // Without finalizers, so that the namespace can go without a pusher.
        let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized))
            .await
            .unwrap();
    }
}

/// The pushed record on the real apiserver: an older version's (`status.pushed`, objects)
/// is kept by the schema and read; the current one (`status.created`, strings) is kept,
/// whether PUT or merge-patched, and a merge patch of it removes the older list.
#[tokio::test]
async fn the_pushed_record_is_stored_and_read_in_either_format() {
    let client = admin_client().await;
    let ns = unique_namespace(&client, "crd-record").await;
    let api: Api<Translation> = Api::namespaced(client, &ns);
    api.create(&PostParams::default(), &valid_translation("t-rec", &ns))
        .await
        .unwrap();
    let path = format!("/bridges/{BRIDGE_ID}");
    let stored = || {
        let out = kubectl(&["get", "tr", "t-rec", "-n", &ns, "-o", "json"]);
        let tr: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        tr["status"].clone()
    };

    // As an older version wrote it.
    let older = serde_json::json!({"status": {
        "pushedHash": "0123456789abcdef0123456789abcdef",
        "pushed": [{"kind": "Bridge", "path": path, "bodyHash": "0123456789abcdef"}],
    }});
    api.patch_status("t-rec", &PatchParams::default(), &Patch::Merge(older))
        .await
        .unwrap();
    assert!(stored()["pushed"].is_array(), "{}", stored());
    let read = api.get("t-rec").await.unwrap().status.unwrap();
    let entry = &read.pushed[0];
    assert_eq!(
        (entry.kind.as_str(), entry.path.as_str()),
        ("Bridge", path.as_str())
    );
    assert_eq!(entry.body_hash, "0123456789ab");
    assert_eq!(read.pushed_hash.as_deref(), Some("0123456789abcdef"));

    // Merge-patched in the current form (the pusher's write after a conflict).
    let patch = midonet_kube_controllers::crd::status_merge_patch(Some(&read)).unwrap();
    api.patch_status("t-rec", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let now = stored();
    assert!(now.get("pushed").is_none(), "the older list is gone: {now}");
    assert_eq!(
        now["created"],
        serde_json::json!([format!("Bridge {path} 0123456789ab")])
    );
    assert_eq!(api.get("t-rec").await.unwrap().status, Some(read.clone()));

    // PUT (the pusher's usual write) over an older version's record.
    let older = serde_json::json!({"status": {"created": null, "pushed": [
        {"kind": "Bridge", "path": path, "bodyHash": "0123456789abcdef"}
    ]}});
    api.patch_status("t-rec", &PatchParams::default(), &Patch::Merge(older))
        .await
        .unwrap();
    let mut tr = api.get("t-rec").await.unwrap();
    tr.status = Some(read.clone());
    api.replace_status("t-rec", &PostParams::default(), &tr)
        .await
        .unwrap();
    let now = stored();
    assert!(now.get("pushed").is_none(), "{now}");
    assert_eq!(api.get("t-rec").await.unwrap().status, Some(read));
}
