//! What a live deployment of the original Go controller leaves behind, made in this test
//! binary's cluster: its CRD (`apiextensions/v1beta1`, no status subresource, no `spec`),
//! its version-4 Translations (top-level `resources`, owner references, the
//! `midonet.org/owner-uid` or `midonet.org/global` label, the `midonet.org/deleter`
//! finalizer, no status), and the backend resources it pushed.
//!
//! The translators compute the original's IDs and names for an equal version (see
//! `translators/MAPPING.md`), so controllers run at version 4 make that backend state and
//! those Translations; [`rewrite_as_original`] then rewrites them into the original's form
//! (version-independent ones under the original's frozen `3` segment) under the original's
//! CRD, and [`upgrade_crd`] applies this project's CRD over it, as the upgrade does.
//!
//! Replacing the CRD deletes every Translation of the cluster: a test using this runs alone
//! in its binary, and must not be pointed at a shared control plane
//! (`MIDONETKUBE_TEST_K8S_DIR`) while other tests run.

use std::collections::BTreeSet;
use std::io::Write;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::api::{GroupVersionKind, PostParams};
use kube::{Client, ResourceExt};
use midonet_kube_controllers::crd::{Translation, CRD_NAME};
use midonet_translators::meta::{FINALIZER, GLOBAL_LABEL, OWNER_UID_LABEL};
use serde_json::{json, Value};
use uuid::Uuid;

/// The original's CustomResourceDefinition, as its manifest declared it.
pub const ORIGINAL_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1beta1
kind: CustomResourceDefinition
metadata:
  name: translations.midonet.org
spec:
  scope: Namespaced
  group: midonet.org
  version: v1
  names:
    kind: Translation
    plural: translations
    singular: translation
    shortNames:
    - tr
  validation:
    openAPIV3Schema:
      properties:
        resources:
          type: array
          items:
            type: object
            properties:
              body:
                type: string
                pattern: '^{.*}$'
              kind:
                type: string
                pattern: '^[A-Z][A-Za-z0-4]*$'
              parent:
                type: string
                pattern: '^(|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$'
"#;

/// The version of the Translations the original leaves behind.
pub const ORIGINAL_VERSION: &str = "4";

/// `kubectl apply` of `yaml`; panics if it fails.
pub fn kubectl_apply(yaml: &str) {
    let path = std::env::temp_dir().join(format!(
        "midonet-original-{}-{}.yaml",
        std::process::id(),
        Uuid::new_v4()
    ));
    let mut file = std::fs::File::create(&path).expect("temp file");
    file.write_all(yaml.as_bytes()).expect("write temp file");
    let out = super::kubectl(&["apply", "-f", path.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn translations_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("midonet.org", "v1", "Translation"),
        "translations",
    )
}

/// The kinds the original named by content, under a frozen `3` version segment.
const CONTENT_NAMED: [&str; 5] = [
    "node-mac",
    "node-arp",
    "node-tunnel-endpoint",
    "pod-mac",
    "pod-arp",
];

/// The original's name of a Translation: versioned names are the same for an equal
/// version; the content-named kinds had a frozen `3` segment (ours are versioned, but for a
/// membership in a named tunnel zone).
pub fn original_name(tr: &Translation) -> String {
    let name = tr.name_any();
    let Some((kind, rest)) = name.split_once('.') else {
        return name;
    };
    if !CONTENT_NAMED.contains(&kind) {
        return name;
    }
    let rest = rest
        .strip_prefix(&format!("{ORIGINAL_VERSION}."))
        .unwrap_or(rest);
    format!("{kind}.3.{rest}")
}

/// The Translation as the original wrote it.
pub fn original_form(tr: &Translation) -> Value {
    let mut labels = serde_json::Map::new();
    if let Some(uid) = tr.label(OWNER_UID_LABEL) {
        labels.insert(OWNER_UID_LABEL.into(), json!(uid));
    }
    if tr.has_label(GLOBAL_LABEL) {
        labels.insert(GLOBAL_LABEL.into(), json!(""));
    }
    let owners: Vec<Value> = tr
        .owner_references()
        .iter()
        .map(|o| json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid}))
        .collect();
    let mut metadata = json!({
        "name": original_name(tr),
        "namespace": tr.namespace(),
        "labels": labels,
        "finalizers": [FINALIZER],
    });
    if !owners.is_empty() {
        metadata["ownerReferences"] = json!(owners);
    }
    json!({
        "apiVersion": "midonet.org/v1",
        "kind": "Translation",
        "metadata": metadata,
        "resources": tr.desired_resources(),
    })
}

/// Waits until the Translation CRD is Established.
pub async fn crd_established(crds: &Api<CustomResourceDefinition>) {
    super::wait_until("CRD Established", super::CEILING, || async {
        let crd = crds.get(CRD_NAME).await.map_err(|e| e.to_string())?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            Ok(())
        } else {
            Err("not Established".to_string())
        }
    })
    .await;
}

/// The cluster's Translations (made by controllers at [`ORIGINAL_VERSION`], now stopped,
/// the backend holding what they pushed) rewritten into the original's form under the
/// original's CRD. Without a pusher the finalizers are dropped by hand for the CRD's
/// deletion; the backend keeps everything. Answers the old Translations'
/// `(namespace, name)`.
pub async fn rewrite_as_original(client: &Client) -> BTreeSet<(String, String)> {
    let all: Api<Translation> = Api::all(client.clone());
    let pushed = all.list(&ListParams::default()).await.expect("list").items;
    assert!(
        pushed.iter().any(|t| original_name(t) != t.name_any()),
        "some Translations were named by content"
    );
    assert!(
        pushed.iter().any(|t| t.has_label(GLOBAL_LABEL))
            && pushed.iter().any(|t| !t.owner_references().is_empty()),
        "global and owned Translations"
    );
    let legacy: Vec<Value> = pushed.iter().map(original_form).collect();
    for tr in &pushed {
        let api: Api<Translation> =
            Api::namespaced(client.clone(), &tr.namespace().unwrap_or_default());
        api.patch(
            &tr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("drop the finalizer");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(CRD_NAME, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    super::wait_until("the CRD is gone", super::CEILING, || async {
        crds.get_opt(CRD_NAME).await.ok()?.is_none().then_some(())
    })
    .await;
    kubectl_apply(ORIGINAL_CRD);
    crd_established(&crds).await;
    let ar = translations_resource();
    for v in &legacy {
        let ns = v["metadata"]["namespace"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let obj: DynamicObject = serde_json::from_value(v.clone()).expect("legacy object");
        // The new CRD may still be cached by the apiserver for a moment.
        super::wait_until("old Translation created", super::CEILING, || async {
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
    }
    let before = crds.get(CRD_NAME).await.expect("the CRD");
    assert!(
        before
            .spec
            .versions
            .iter()
            .all(|v| v.subresources.is_none()),
        "the original's CRD has no status subresource"
    );
    let stored = all.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(stored.len(), legacy.len());
    assert!(stored.iter().all(Translation::is_legacy), "{stored:?}");
    legacy
        .iter()
        .map(|v| {
            (
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Applies this project's CRD over the original's, in place, as the upgrade does; the old
/// Translations stay (`old` of them).
pub async fn upgrade_crd(client: &Client, old: usize) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let new_crd = std::fs::read_to_string(super::repo_root().join("crds/translation.yaml"))
        .expect("crds/translation.yaml");
    kubectl_apply(&new_crd);
    crd_established(&crds).await;
    let after = crds.get(CRD_NAME).await.expect("the CRD");
    assert!(
        after
            .spec
            .versions
            .iter()
            .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some())),
        "the upgraded CRD has the status subresource"
    );
    let all: Api<Translation> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        old,
        "upgrading the CRD keeps the old Translations"
    );
}

/// The original's deployment at version 4 for `scenario` (created in the cluster): the
/// controllers run at [`ORIGINAL_VERSION`] until the backend is exact, are stopped, and
/// their Translations are rewritten as the original's under its CRD, which is then
/// upgraded. Answers the old Translations' `(namespace, name)`.
pub async fn deployed_for(
    client: &Client,
    sim: &midonet_sim::SimHandle,
    admin: &midonet_sim::admin::AdminClient,
) -> BTreeSet<(String, String)> {
    let original = super::stack::Controllers::start(
        &super::control_plane().kubeconfig,
        sim,
        &[
            "--controllers",
            "node,pod,service,endpoints,pusher",
            "--translation-version",
            ORIGINAL_VERSION,
        ],
    )
    .await;
    super::stack::wait_exact(client, admin, "the original's state", super::CEILING).await;
    original.stop().await;
    let paths = admin.state().await.expect("state").translation_paths();
    let old = rewrite_as_original(client).await;
    assert_eq!(
        admin.state().await.expect("state").translation_paths(),
        paths,
        "the backend keeps the original's resources"
    );
    upgrade_crd(client, old.len()).await;
    old
}
