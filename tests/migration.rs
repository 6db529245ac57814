//! Upgrading a live deployment of the original Go controller in place, on a real apiserver
//! with the simulator.
//!
//! The starting point is what the original leaves behind: its CRD (`apiextensions/v1beta1`,
//! no status subresource, no `spec`), its version-4 Translations (top-level `resources`,
//! owner references, the `midonet.org/owner-uid` or `midonet.org/global` label, the
//! `midonet.org/deleter` finalizer, no status), Nodes annotated by its nodeannotator, and
//! the backend resources it pushed. The translators compute the original's IDs for an equal
//! version, and its names for the Translations of one object (`pod.4.web-1`; see
//! `translators/MAPPING.md`), so the controllers run at version 4 produce that backend state
//! and those Translations, which are then rewritten into the original's form
//! (version-independent ones under the original's frozen `3` segment)
//! under the original's CRD. Then the upgrade as `docs/operations.md` describes it: apply
//! the new CRD in place, start the new controllers; every old Translation must be replaced
//! and deleted, and the backend must hold exactly what the new Translations ask for.
//!
//! This test replaces the Translation CRD: it runs alone in its binary, and it must not be
//! pointed at a shared control plane (`MIDONETKUBE_TEST_K8S_DIR`) while other tests run.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::api::{GroupVersionKind, PostParams};
use kube::ResourceExt;
use midonet_kube_controllers::crd::{Translation, CRD_NAME};
use midonet_translators::meta::{
    FINALIZER, GLOBAL_LABEL, HOST_ID_ANNOTATION, OWNER_UID_LABEL, VERSION_LABEL,
};
use serde_json::{json, Value};
use support::objects::{node_at, pod};
use support::stack::{exact_state, start_sim, wait_converged, wait_exact, Controllers};
use support::*;
use uuid::Uuid;

/// The original's CustomResourceDefinition, as its manifest declared it.
const ORIGINAL_CRD: &str = r#"
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
const ORIGINAL_VERSION: &str = "4";

fn kubectl_apply(yaml: &str) {
    let mut file = tempfile_in_tmp("crd");
    file.1.write_all(yaml.as_bytes()).unwrap();
    let out = kubectl(&["apply", "-f", file.0.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&file.0);
}

fn tempfile_in_tmp(what: &str) -> (std::path::PathBuf, std::fs::File) {
    let path = std::env::temp_dir().join(format!(
        "midonet-migration-{what}-{}-{}.yaml",
        std::process::id(),
        Uuid::new_v4()
    ));
    let file = std::fs::File::create(&path).unwrap();
    (path, file)
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
fn original_name(tr: &Translation) -> String {
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
fn original_form(tr: &Translation) -> Value {
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

async fn crd_established(crds: &Api<CustomResourceDefinition>) {
    wait_until("CRD Established", Duration::from_secs(60), || async {
        let crd = crds.get(CRD_NAME).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn upgrading_a_live_deployment_of_the_original_controller() {
    let client = admin_client().await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let host_a = Uuid::new_v4();
    let host_b = Uuid::new_v4();
    let (sim, admin) = start_sim(&[("mig-node-a", host_a), ("mig-node-b", host_b)]).await;

    // 1. The original's cluster and backend: Nodes, Pods, a Service with its Endpoints,
    //    translated and pushed at version 4.
    let original = Controllers::start(
        &kubeconfig,
        &sim,
        &["--translation-version", ORIGINAL_VERSION],
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, cidr, ip) in [
        ("mig-node-a", "10.244.1.0/24", "192.168.0.11"),
        ("mig-node-b", "10.244.2.0/24", "192.168.0.12"),
    ] {
        nodes
            .create(&PostParams::default(), &node_at(name, cidr, ip))
            .await
            .unwrap();
    }
    wait_until("Nodes annotated", Duration::from_secs(60), || async {
        let n = nodes.get("mig-node-b").await.ok()?;
        (n.annotations().get(HOST_ID_ANNOTATION) == Some(&host_b.to_string())).then_some(())
    })
    .await;
    let ns = unique_namespace(&client, "migration").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, node) in [("p1", "mig-node-a"), ("p2", "mig-node-b")] {
        pods.create(&PostParams::default(), &pod(name, node, None))
            .await
            .unwrap();
    }
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let eps: Endpoints = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "web"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5"}, {"ip": "10.244.2.7"}],
                     "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
    }))
    .unwrap();
    Api::<Endpoints>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &eps)
        .await
        .unwrap();
    wait_converged(&client, &admin, "the original's state").await;
    original.stop().await;

    let all: Api<Translation> = Api::all(client.clone());
    let pushed = all.list(&ListParams::default()).await.unwrap().items;
    assert!(
        pushed.iter().any(|t| original_name(t) != t.name_any()),
        "some Translations were named by content"
    );
    assert!(
        pushed.iter().any(|t| t.has_label(GLOBAL_LABEL))
            && pushed.iter().any(|t| !t.owner_references().is_empty()),
        "global and owned Translations"
    );
    let original_state = admin.state().await.unwrap();
    let original_paths = original_state.translation_paths();
    let legacy: Vec<Value> = pushed.iter().map(original_form).collect();
    let legacy_names: BTreeSet<(String, String)> = legacy
        .iter()
        .map(|v| {
            (
                v["metadata"]["namespace"].as_str().unwrap().to_string(),
                v["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    // 2. The same under the original's CRD and in its form. Without a pusher the
    //    finalizers are dropped by hand; the backend keeps everything.
    for tr in &pushed {
        let api: Api<Translation> = Api::namespaced(client.clone(), &tr.namespace().unwrap());
        api.patch(
            &tr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(CRD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the CRD is gone", Duration::from_secs(60), || async {
        crds.get_opt(CRD_NAME).await.ok()?.is_none().then_some(())
    })
    .await;
    kubectl_apply(ORIGINAL_CRD);
    crd_established(&crds).await;
    let ar = translations_resource();
    for v in &legacy {
        let ns = v["metadata"]["namespace"].as_str().unwrap();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let obj: DynamicObject = serde_json::from_value(v.clone()).unwrap();
        // The new CRD may still be cached by the apiserver for a moment.
        wait_until(
            "old Translation created",
            Duration::from_secs(30),
            || async { api.create(&PostParams::default(), &obj).await.ok() },
        )
        .await;
    }
    let before = crds.get(CRD_NAME).await.unwrap();
    assert!(
        before
            .spec
            .versions
            .iter()
            .all(|v| v.subresources.is_none()),
        "the original's CRD has no status subresource"
    );
    let stored: Vec<Translation> = all.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(stored.len(), legacy.len());
    assert!(stored.iter().all(Translation::is_legacy), "{stored:?}");
    assert_eq!(
        admin.state().await.unwrap().translation_paths(),
        original_paths
    );

    // 3. The upgrade: the new CRD applied in place, over the original's.
    let new_crd = std::fs::read_to_string(repo_root().join("crds/translation.yaml")).unwrap();
    kubectl_apply(&new_crd);
    crd_established(&crds).await;
    let after = crds.get(CRD_NAME).await.unwrap();
    assert!(
        after
            .spec
            .versions
            .iter()
            .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some())),
        "the upgraded CRD has the status subresource"
    );
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        legacy.len(),
        "upgrading the CRD keeps the old Translations"
    );

    // 4. The new controllers.
    let controllers = Controllers::start(&kubeconfig, &sim, &[]).await;
    wait_exact(
        &client,
        &admin,
        "after the upgrade",
        Duration::from_secs(240),
    )
    .await;
    let now: Vec<Translation> = all.list(&ListParams::default()).await.unwrap().items;
    let left: Vec<_> = now
        .iter()
        .filter(|t| legacy_names.contains(&(t.namespace().unwrap_or_default(), t.name_any())))
        .map(|t| t.name_any())
        .collect();
    assert!(left.is_empty(), "old Translations left: {left:?}");
    assert!(now.iter().all(|t| !t.is_legacy()));
    let state = admin.state().await.unwrap();
    // Versioned resources got new IDs: only version-independent ones (content-addressed)
    // may be the original's.
    let version_independent: BTreeSet<String> = now
        .iter()
        .filter(|t| !t.has_label(VERSION_LABEL))
        .flat_map(Translation::desired_paths)
        .collect();
    for p in state.translation_paths().intersection(&original_paths) {
        assert!(
            version_independent.contains(p),
            "an old versioned resource is left in the backend: {p}"
        );
    }
    exact_state(&client, &admin).await.unwrap();

    controllers.stop().await;
    sim.shutdown().await;
}
