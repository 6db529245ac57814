//! The RBAC rules of `deploy/`, granted to the restricted test user, so that a test can run
//! code with exactly the rights the Deployment's ServiceAccount has.
//!
//! Rules are taken from `kubectl kustomize deploy/`, not copied: a test using this helper
//! breaks when `deploy/` stops granting something the code needs.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::Client;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::support::{control_plane, repo_root, restricted_client, wait_until};

/// The ClusterRole and Role names in `deploy/rbac.yaml`.
pub const DEPLOY_CLUSTER_ROLE: &str = "midonet-kube-controllers";
pub const DEPLOY_LEASE_ROLE: &str = "midonet-kube-controllers-leader-election";
/// The bindings this helper creates for the restricted user.
pub const RESTRICTED_CLUSTER_ROLE_BINDING: &str = "midonet-kube-controllers-test-restricted";
pub const RESTRICTED_LEASE_ROLE_BINDING: &str = "midonet-kube-controllers-test-restricted";

const FIELD_MANAGER: &str = "midonet-kube-tests";

/// `kubectl kustomize deploy/`: every rendered object, as JSON.
pub async fn render_deploy() -> Vec<Value> {
    let out = tokio::process::Command::new(&control_plane().kubectl)
        .arg("kustomize")
        .arg(repo_root().join("deploy"))
        .output()
        .await
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_yaml_stream(&String::from_utf8_lossy(&out.stdout))
}

/// Parses a multi-document YAML stream, skipping empty documents.
pub fn parse_yaml_stream(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("valid YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The rendered object of this kind and name.
pub fn find_object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("deploy/ renders no {kind} {name}"))
}

fn rbac_api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "rbac.authorization.k8s.io",
        "v1",
        kind,
    ));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn apply(api: &Api<DynamicObject>, name: &str, obj: Value) {
    let obj: DynamicObject = serde_json::from_value(obj).expect("RBAC object");
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

/// Whether the restricted user may do `verb` on `resource` (group, optional subresource,
/// optional namespace), as the API server's authorizer says.
pub async fn restricted_can(
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> bool {
    let client = restricted_client().await;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(str::to_string),
                namespace: namespace.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// One grant of a rule: (apiGroup, resource[/subresource], verb), e.g.
/// `("midonet.org", "translations/status", "patch")`.
pub type Grant<'a> = (&'a str, &'a str, &'a str);

/// Binds the ClusterRole of `deploy/` to the restricted test user, and grants it the
/// Lease Role of `deploy/` in `lease_namespace` (where the Deployment's own namespace
/// would be). Idempotent; returns once the API server enforces both.
pub async fn bind_deploy_role_to_restricted_user(client: &Client, lease_namespace: &str) {
    bind_deploy_role_without(client, lease_namespace, &[]).await
}

/// As [`bind_deploy_role_to_restricted_user`], but the ClusterRole lacks the `removed`
/// grants; returns once the API server enforces the role and refuses each removed grant.
/// The ClusterRole is cluster-wide: a test binary using this must not run tests that need
/// the full role at the same time.
pub async fn bind_deploy_role_without(
    client: &Client,
    lease_namespace: &str,
    removed: &[Grant<'_>],
) {
    let objects = render_deploy().await;
    let user = &control_plane().restricted_user;
    let subject = json!([{
        "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user
    }]);

    // The ClusterRole exactly as rendered (it is cluster-scoped: same object `kubectl
    // apply -k deploy/` would create).
    let mut cluster_role = find_object(&objects, "ClusterRole", DEPLOY_CLUSTER_ROLE).clone();
    strip_server_fields(&mut cluster_role);
    if !removed.is_empty() {
        cluster_role["rules"] = rules_without(&cluster_role["rules"], removed);
    }
    apply(
        &rbac_api(client, "ClusterRole", None),
        DEPLOY_CLUSTER_ROLE,
        cluster_role,
    )
    .await;
    apply(
        &rbac_api(client, "ClusterRoleBinding", None),
        RESTRICTED_CLUSTER_ROLE_BINDING,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": RESTRICTED_CLUSTER_ROLE_BINDING},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": DEPLOY_CLUSTER_ROLE},
            "subjects": subject,
        }),
    )
    .await;

    // The Lease Role's rules, moved to the test's namespace.
    let lease_role = find_object(&objects, "Role", DEPLOY_LEASE_ROLE);
    apply(
        &rbac_api(client, "Role", Some(lease_namespace)),
        DEPLOY_LEASE_ROLE,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": DEPLOY_LEASE_ROLE, "namespace": lease_namespace},
            "rules": lease_role["rules"].clone(),
        }),
    )
    .await;
    apply(
        &rbac_api(client, "RoleBinding", Some(lease_namespace)),
        RESTRICTED_LEASE_ROLE_BINDING,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": RESTRICTED_LEASE_ROLE_BINDING, "namespace": lease_namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": DEPLOY_LEASE_ROLE},
            "subjects": subject,
        }),
    )
    .await;

    // The RBAC authorizer reads bindings from an informer: wait until it has them.
    wait_until(
        "the deploy/ RBAC rules are enforced for the restricted user",
        crate::support::CEILING,
        || async {
            let cluster = restricted_can("watch", "midonet.org", "translations", None, None).await;
            let lease = restricted_can(
                "update",
                "coordination.k8s.io",
                "leases",
                None,
                Some(lease_namespace),
            )
            .await;
            let mut removed_denied = true;
            for (group, resource, verb) in removed {
                let (resource, sub) = match resource.split_once('/') {
                    Some((r, s)) => (r, Some(s)),
                    None => (*resource, None),
                };
                removed_denied &= !restricted_can(verb, group, resource, sub, None).await;
            }
            (cluster && lease && removed_denied).then_some(())
        },
    )
    .await;
}

/// The strings of a policy rule's list `key` (`apiGroups`, `resources`, `verbs`).
pub fn strings(rule: &Value, key: &str) -> Vec<String> {
    rule[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing in {rule}"))
        .iter()
        .map(|v| v.as_str().expect("string").to_string())
        .collect()
}

/// `rules` with one rule per remaining (apiGroup, resource, verb): the same grants as
/// `rules` minus `removed`, each of which `rules` must grant.
fn rules_without(rules: &Value, removed: &[Grant<'_>]) -> Value {
    let mut grants = Vec::new();
    for rule in rules.as_array().expect("rules") {
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                for verb in strings(rule, "verbs") {
                    grants.push((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    let same = |(g, r, v): &(String, String, String), removed: &Grant<'_>| {
        (g.as_str(), r.as_str(), v.as_str()) == *removed
    };
    for r in removed {
        assert!(
            grants.iter().any(|g| same(g, r)),
            "deploy/ does not grant {r:?}: nothing to remove"
        );
    }
    grants
        .iter()
        .filter(|g| !removed.iter().any(|r| same(g, r)))
        .map(|(g, r, v)| json!({"apiGroups": [g], "resources": [r], "verbs": [v]}))
        .collect()
}

fn strip_server_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("namespace");
        meta.remove("resourceVersion");
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
}
