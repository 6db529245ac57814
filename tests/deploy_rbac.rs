//! The `deploy/` kustomize base on a real kube-apiserver: it renders, every object is
//! accepted (server dry run and real apply), its RBAC is exactly the expected least
//! privilege, and those rules let a user do the controllers' job and nothing more.

mod support;

use support::rbac;

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event as CoreEvent, Node, ObjectReference, Pod, Secret, Service,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use midonet_kube_controllers::crd::{Translation, TranslationResource, TranslationSpec};
use rbac::*;
use serde_json::{json, Value};
use support::*;

/// Every environment variable the binary reads; deploy/ may set no other `MIDONETKUBE_*`.
const KNOWN_ENV: &[&str] = &[
    "MIDONETKUBE_LOG_LEVEL",
    "MIDONETKUBE_LOG_FORMAT",
    "MIDONETKUBE_CONTROLLERS",
    "MIDONETKUBE_KUBECONFIG",
    "MIDONETKUBE_MIDONET_API",
    "MIDONETKUBE_USERNAME",
    "MIDONETKUBE_PASSWORD",
    "MIDONETKUBE_PASSWORD_FILE",
    "MIDONETKUBE_PROJECT",
    "MIDONETKUBE_CA_FILE",
    "MIDONETKUBE_TENANT",
    "MIDONETKUBE_METRICS_ADDRESS",
    "MIDONETKUBE_LEADER_ELECT",
    "MIDONETKUBE_LEADER_ELECTION_NAME",
    "MIDONETKUBE_LEADER_ELECTION_NAMESPACE",
];

type Rule = (String, String, String); // (apiGroup, resource[/subresource], verb)

/// (verb, apiGroup, resource, subresource, namespace) of an access review.
type Access<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

fn rules(items: &[(&str, &[&str], &[&str])]) -> BTreeSet<Rule> {
    let mut set = BTreeSet::new();
    for (group, resources, verbs) in items {
        for resource in *resources {
            for verb in *verbs {
                set.insert((group.to_string(), resource.to_string(), verb.to_string()));
            }
        }
    }
    set
}

/// The rules of a rendered Role or ClusterRole, flattened; panics on anything that a
/// flat (group, resource, verb) set cannot express, so such a widening fails the test too.
fn flatten_rules(role: &Value) -> BTreeSet<Rule> {
    assert!(role.get("aggregationRule").is_none(), "aggregated role");
    let mut set = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for forbidden in ["nonResourceURLs", "resourceNames"] {
            assert!(
                rule.get(forbidden).is_none(),
                "unexpected {forbidden}: {rule}"
            );
        }
        for group in rbac::strings(rule, "apiGroups") {
            for resource in rbac::strings(rule, "resources") {
                for verb in rbac::strings(rule, "verbs") {
                    assert!(
                        group != "*" && resource != "*" && verb != "*",
                        "wildcard in {rule}"
                    );
                    set.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    set
}

fn expected_cluster_rules() -> BTreeSet<Rule> {
    rules(&[
        (
            "",
            &["pods", "services", "endpoints", "nodes", "namespaces"],
            &["get", "list", "watch"],
        ),
        (
            "networking.k8s.io",
            &["networkpolicies"],
            &["get", "list", "watch"],
        ),
        ("", &["nodes"], &["patch"]),
        ("", &["services/status"], &["patch"]),
        (
            "discovery.k8s.io",
            &["endpointslices"],
            &["get", "list", "watch"],
        ),
        (
            "midonet.org",
            &["translations"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        (
            "midonet.org",
            &["translations/status"],
            &["get", "update", "patch"],
        ),
        ("midonet.org", &["translations/finalizers"], &["update"]),
        ("", &["events"], &["create", "patch"]),
        ("events.k8s.io", &["events"], &["create", "patch"]),
    ])
}

fn expected_lease_rules() -> BTreeSet<Rule> {
    rules(&[(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "update"],
    )])
}

fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn deploy_dir() -> String {
    repo_root().join("deploy").to_string_lossy().into_owned()
}

#[test]
fn deploy_crd_is_an_exact_copy_of_the_generated_one() {
    let deploy = std::fs::read_to_string(repo_root().join("deploy/crd.yaml")).unwrap();
    let committed = std::fs::read_to_string(repo_root().join("crds/translation.yaml")).unwrap();
    let generated = midonet_kube_controllers::crd::crd_yaml().unwrap();
    assert_eq!(
        deploy, committed,
        "deploy/crd.yaml differs from crds/translation.yaml: cp crds/translation.yaml deploy/crd.yaml"
    );
    assert_eq!(deploy, generated, "deploy/crd.yaml is stale");
}

#[tokio::test]
async fn kustomize_renders_the_expected_objects() {
    let objects = render_deploy().await;
    let found: BTreeSet<(String, String, String)> = objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, String)> = [
        ("CustomResourceDefinition", "translations.midonet.org", ""),
        ("ServiceAccount", "midonet-kube-controllers", "kube-system"),
        ("ClusterRole", "midonet-kube-controllers", ""),
        ("ClusterRoleBinding", "midonet-kube-controllers", ""),
        (
            "Role",
            "midonet-kube-controllers-leader-election",
            "kube-system",
        ),
        (
            "RoleBinding",
            "midonet-kube-controllers-leader-election",
            "kube-system",
        ),
        ("ConfigMap", "midonet-kube-config", "kube-system"),
        ("Secret", "midonet-kube-credentials", "kube-system"),
        ("Deployment", "midonet-kube-controllers", "kube-system"),
    ]
    .iter()
    .map(|(k, n, ns)| (k.to_string(), n.to_string(), ns.to_string()))
    .collect();
    assert_eq!(found, expected);

    let dep = find_object(&objects, "Deployment", "midonet-kube-controllers");
    let spec = &dep["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    let annotations = &spec["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9453");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert_eq!(pod["serviceAccountName"], "midonet-kube-controllers");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let tolerations = pod["tolerations"].as_array().unwrap();
    assert!(tolerations.contains(&json!({"key": "CriticalAddonsOnly", "operator": "Exists"})));
    assert!(tolerations.contains(&json!({"operator": "Exists", "effect": "NoSchedule"})));

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], "midonet/midonet-kube-controllers:latest");
    assert_eq!(c["args"], json!(["run"]));
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 9453, "protocol": "TCP"}])
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["resources"]["requests"]["cpu"], "50m");
    assert_eq!(c["resources"]["requests"]["memory"], "64Mi");
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        c["envFrom"],
        json!([{"configMapRef": {"name": "midonet-kube-config"}}])
    );

    let env = c["env"].as_array().unwrap();
    let var = |name: &str| -> &Value {
        env.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("env {name} missing"))
    };
    let field = |name: &str| var(name)["valueFrom"]["fieldRef"]["fieldPath"].clone();
    assert_eq!(field("POD_NAME"), "metadata.name");
    assert_eq!(field("POD_NAMESPACE"), "metadata.namespace");
    assert_eq!(
        field("MIDONETKUBE_LEADER_ELECTION_NAMESPACE"),
        "metadata.namespace"
    );
    assert_eq!(var("MIDONETKUBE_LEADER_ELECT")["value"], "true");
    assert_eq!(
        var("MIDONETKUBE_PASSWORD_FILE")["value"],
        "/etc/midonet-kube/password"
    );
    for key in ["MIDONETKUBE_USERNAME", "MIDONETKUBE_PROJECT"] {
        assert_eq!(
            var(key)["valueFrom"]["secretKeyRef"],
            json!({"name": "midonet-kube-credentials", "key": key})
        );
    }
    // The password file: the Secret's `password` key mounted at /etc/midonet-kube.
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "credentials", "mountPath": "/etc/midonet-kube", "readOnly": true}])
    );
    let volume = &pod["volumes"][0];
    assert_eq!(volume["name"], "credentials");
    assert_eq!(volume["secret"]["secretName"], "midonet-kube-credentials");
    assert_eq!(
        volume["secret"]["items"],
        json!([{"key": "password", "path": "password"}])
    );

    let secret = find_object(&objects, "Secret", "midonet-kube-credentials");
    let secret_keys: BTreeSet<&str> = secret["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        secret_keys,
        BTreeSet::from(["MIDONETKUBE_USERNAME", "MIDONETKUBE_PROJECT", "password"])
    );
    let config = find_object(&objects, "ConfigMap", "midonet-kube-config");
    let config_keys: BTreeSet<&str> = config["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        config_keys,
        BTreeSet::from([
            "MIDONETKUBE_MIDONET_API",
            "MIDONETKUBE_TENANT",
            "MIDONETKUBE_LOG_LEVEL"
        ])
    );

    // No misspelt or invented setting anywhere.
    let mut names: Vec<String> = env
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    names.extend(config_keys.iter().map(|k| k.to_string()));
    names.extend(secret_keys.iter().map(|k| k.to_string()));
    for name in names.iter().filter(|n| n.starts_with("MIDONETKUBE_")) {
        assert!(KNOWN_ENV.contains(&name.as_str()), "unknown setting {name}");
    }
}

#[tokio::test]
async fn rbac_is_exactly_the_expected_least_privilege() {
    let objects = render_deploy().await;
    let cluster_role = find_object(&objects, "ClusterRole", DEPLOY_CLUSTER_ROLE);
    assert_eq!(flatten_rules(cluster_role), expected_cluster_rules());
    let lease_role = find_object(&objects, "Role", DEPLOY_LEASE_ROLE);
    assert_eq!(lease_role["metadata"]["namespace"], "kube-system");
    assert_eq!(flatten_rules(lease_role), expected_lease_rules());

    let sa = json!([{
        "kind": "ServiceAccount", "name": "midonet-kube-controllers", "namespace": "kube-system"
    }]);
    let crb = find_object(&objects, "ClusterRoleBinding", "midonet-kube-controllers");
    assert_eq!(crb["subjects"], sa);
    assert_eq!(
        crb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DEPLOY_CLUSTER_ROLE})
    );
    let rb = find_object(&objects, "RoleBinding", DEPLOY_LEASE_ROLE);
    assert_eq!(rb["subjects"], sa);
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DEPLOY_LEASE_ROLE})
    );
    // Only these objects grant anything.
    let granting = objects
        .iter()
        .filter(|o| {
            o["apiVersion"]
                .as_str()
                .unwrap()
                .starts_with("rbac.authorization.k8s.io/")
        })
        .count();
    assert_eq!(granting, 4);
}

#[tokio::test]
async fn apply_k_is_accepted_by_the_apiserver() {
    let deploy = deploy_dir();
    let out = kubectl_ok(&["apply", "-k", &deploy, "--dry-run=server"]);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/translations.midonet.org",
        "serviceaccount/midonet-kube-controllers",
        "role.rbac.authorization.k8s.io/midonet-kube-controllers-leader-election",
        "clusterrole.rbac.authorization.k8s.io/midonet-kube-controllers",
        "rolebinding.rbac.authorization.k8s.io/midonet-kube-controllers-leader-election",
        "clusterrolebinding.rbac.authorization.k8s.io/midonet-kube-controllers",
        "configmap/midonet-kube-config",
        "secret/midonet-kube-credentials",
        "deployment.apps/midonet-kube-controllers",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(object) && l.ends_with("(server dry run)")),
            "{object} not accepted:\n{out}"
        );
    }

    // For real, twice: the second apply must change nothing.
    kubectl_ok(&["apply", "-k", &deploy]);
    let again = kubectl_ok(&["apply", "-k", &deploy]);
    for line in again.lines() {
        assert!(line.ends_with(" unchanged"), "re-apply changed: {line}");
    }

    // The apiserver stored what was rendered, with its defaults.
    let client = admin_client().await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "kube-system");
    let dep = deployments.get("midonet-kube-controllers").await.unwrap();
    let spec = dep.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("midonet/midonet-kube-controllers:latest")
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let secret = secrets.get("midonet-kube-credentials").await.unwrap();
    assert!(secret.data.unwrap().contains_key("password"));
    let config: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    assert!(config.get("midonet-kube-config").await.is_ok());
}

/// The overlay documented in docs/operations.md: real credentials, another image, a
/// changed setting — and everything still in kube-system.
#[tokio::test]
async fn documented_overlay_replaces_credentials_image_and_config() {
    // kubectl 1.20's kustomize wants bases as relative paths: put the overlay under target/.
    let parent = repo_root().join("target");
    std::fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("overlay-")
        .tempdir_in(&parent)
        .unwrap();
    std::fs::write(dir.path().join("password"), "s3cret").unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        r#"namespace: kube-system
bases:
  - ../../deploy
images:
  - name: midonet/midonet-kube-controllers
    newName: registry.example.com/midonet-kube-controllers
    newTag: v1.2.3
secretGenerator:
  - name: midonet-kube-credentials
    behavior: replace
    files:
      - password
    literals:
      - MIDONETKUBE_USERNAME=alice
      - MIDONETKUBE_PROJECT=project-a
configMapGenerator:
  - name: midonet-kube-config
    behavior: merge
    literals:
      - MIDONETKUBE_MIDONET_API=https://midonet.example.com/midonet-api
"#,
    )
    .unwrap();
    let overlay = dir.path().to_string_lossy().into_owned();
    let objects = parse_yaml_stream(&kubectl_ok(&["kustomize", &overlay]));

    let secret = find_object(&objects, "Secret", "midonet-kube-credentials");
    assert_eq!(secret["metadata"]["namespace"], "kube-system");
    let secret: Secret = serde_json::from_value(secret.clone()).unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data["password"].0, b"s3cret");
    assert_eq!(data["MIDONETKUBE_USERNAME"].0, b"alice");
    assert_eq!(data["MIDONETKUBE_PROJECT"].0, b"project-a");
    assert_eq!(data.len(), 3, "placeholder keys left over: {data:?}");

    let config = find_object(&objects, "ConfigMap", "midonet-kube-config");
    assert_eq!(config["metadata"]["namespace"], "kube-system");
    assert_eq!(
        config["data"]["MIDONETKUBE_MIDONET_API"],
        "https://midonet.example.com/midonet-api"
    );
    assert_eq!(config["data"]["MIDONETKUBE_TENANT"], "midonetkube");

    let dep = find_object(&objects, "Deployment", "midonet-kube-controllers");
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/midonet-kube-controllers:v1.2.3"
    );
    kubectl_ok(&["apply", "-k", &overlay, "--dry-run=server"]);
}

fn translation(name: &str, ns: &str) -> Translation {
    Translation::new(
        name,
        ns,
        TranslationSpec {
            resources: vec![TranslationResource::new(
                "Bridge",
                "",
                r#"{"id":"0a1b2c3d-0000-4000-8000-000000000002","name":"b"}"#,
            )],
        },
    )
}

fn is_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    match result {
        Err(kube::Error::Api(status)) => status.code == 403,
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test]
async fn deploy_rbac_allows_the_controllers_job_and_nothing_more() {
    let admin = admin_client().await;
    let ns = unique_namespace(&admin, "deploy-rbac").await;
    let other_ns = unique_namespace(&admin, "deploy-rbac-other").await;
    bind_deploy_role_to_restricted_user(&admin, &ns).await;
    let user = restricted_client().await;

    // Allowed, as the authorizer reports it.
    let allowed: &[Access] = &[
        ("list", "", "pods", None, None),
        ("watch", "", "pods", None, None),
        ("list", "", "nodes", None, None),
        ("watch", "", "nodes", None, None),
        ("list", "", "services", None, None),
        ("watch", "", "services", None, None),
        ("list", "", "endpoints", None, None),
        ("watch", "", "endpoints", None, None),
        ("list", "", "namespaces", None, None),
        ("watch", "", "namespaces", None, None),
        ("list", "networking.k8s.io", "networkpolicies", None, None),
        ("watch", "networking.k8s.io", "networkpolicies", None, None),
        ("list", "discovery.k8s.io", "endpointslices", None, None),
        ("watch", "discovery.k8s.io", "endpointslices", None, None),
        ("patch", "", "nodes", None, None),
        ("patch", "", "services", Some("status"), Some(&ns)),
        ("create", "midonet.org", "translations", None, Some(&ns)),
        ("watch", "midonet.org", "translations", None, None),
        (
            "patch",
            "midonet.org",
            "translations",
            Some("status"),
            Some(&ns),
        ),
        (
            "update",
            "midonet.org",
            "translations",
            Some("finalizers"),
            Some(&ns),
        ),
        ("create", "events.k8s.io", "events", None, Some(&ns)),
        ("patch", "events.k8s.io", "events", None, Some(&ns)),
        ("create", "", "events", None, Some(&ns)),
        ("create", "coordination.k8s.io", "leases", None, Some(&ns)),
        ("update", "coordination.k8s.io", "leases", None, Some(&ns)),
    ];
    for (verb, group, resource, sub, namespace) in allowed {
        assert!(
            restricted_can(verb, group, resource, *sub, *namespace).await,
            "should be allowed: {verb} {group}/{resource} {sub:?} in {namespace:?}"
        );
    }
    // Denied.
    let denied: &[Access] = &[
        ("delete", "", "pods", None, Some(&ns)),
        ("create", "", "pods", None, Some(&ns)),
        ("update", "", "nodes", None, None),
        ("delete", "", "nodes", None, None),
        ("patch", "", "pods", None, Some(&ns)),
        ("patch", "", "services", None, Some(&ns)),
        ("update", "", "services", Some("status"), Some(&ns)),
        (
            "create",
            "discovery.k8s.io",
            "endpointslices",
            None,
            Some(&ns),
        ),
        ("list", "", "secrets", None, None),
        ("get", "", "secrets", None, Some(&ns)),
        ("get", "", "configmaps", None, Some(&ns)),
        ("list", "", "events", None, None),
        ("delete", "events.k8s.io", "events", None, Some(&ns)),
        (
            "deletecollection",
            "midonet.org",
            "translations",
            None,
            Some(&ns),
        ),
        (
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some(&other_ns),
        ),
        (
            "create",
            "coordination.k8s.io",
            "leases",
            None,
            Some("kube-system"),
        ),
        ("delete", "coordination.k8s.io", "leases", None, Some(&ns)),
        ("list", "coordination.k8s.io", "leases", None, Some(&ns)),
        ("list", "apps", "deployments", None, None),
        (
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
            None,
        ),
        (
            "update",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            None,
        ),
    ];
    for (verb, group, resource, sub, namespace) in denied {
        assert!(
            !restricted_can(verb, group, resource, *sub, *namespace).await,
            "should be denied: {verb} {group}/{resource} {sub:?} in {namespace:?}"
        );
    }

    // The same through real calls with the restricted client.
    let lp = ListParams::default().limit(1);
    Api::<Pod>::all(user.clone()).list(&lp).await.unwrap();
    Api::<Node>::all(user.clone()).list(&lp).await.unwrap();
    Api::<Service>::all(user.clone()).list(&lp).await.unwrap();
    Api::<Endpoints>::all(user.clone()).list(&lp).await.unwrap();

    // Node annotations (the node annotator).
    let node_name = format!("deploy-rbac-node-{}", std::process::id());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}
    }))
    .unwrap();
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let user_nodes = Api::<Node>::all(user.clone());
    let patched = user_nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"midonet.org/test": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.annotations.unwrap()["midonet.org/test"],
        "yes"
    );
    assert!(is_forbidden(
        user_nodes
            .delete(&node_name, &DeleteParams::default())
            .await
    ));
    Api::<Node>::all(admin.clone())
        .delete(&node_name, &DeleteParams::default())
        .await
        .unwrap();

    // Translations: the translators' and the pusher's calls.
    let trs: Api<Translation> = Api::namespaced(user.clone(), &ns);
    trs.create(&PostParams::default(), &translation("t-rbac", &ns))
        .await
        .unwrap();
    trs.patch(
        "t-rbac",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["midonet.org/deleter"]}})),
    )
    .await
    .unwrap();
    trs.patch_status(
        "t-rbac",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"resourceCount": 1}})),
    )
    .await
    .unwrap();
    let got = Api::<Translation>::all(user.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(got
        .items
        .iter()
        .any(|t| t.metadata.name.as_deref() == Some("t-rbac")));
    trs.patch(
        "t-rbac",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    trs.delete("t-rbac", &DeleteParams::default())
        .await
        .unwrap();

    // Events the way the controllers publish them: kube-rs's recorder (events.k8s.io/v1,
    // create then patch on a repeat), and a core/v1 Event.
    let recorder = Recorder::new(
        user.clone(),
        Reporter {
            controller: "midonet-kube-controllers".into(),
            instance: Some("test".into()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("midonet.org/v1".into()),
        kind: Some("Translation".into()),
        name: Some("t-rbac".into()),
        namespace: Some(ns.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Pushed".into(),
        note: Some("test".into()),
        action: "Push".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let stored = Api::<EventsV1Event>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(stored.items.len(), 1);
    assert_eq!(stored.items[0].series.as_ref().map(|s| s.count), Some(2));
    let core_event: CoreEvent = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "t-rbac.core", "namespace": ns},
        "involvedObject": {"apiVersion": "midonet.org/v1", "kind": "Translation",
                           "name": "t-rbac", "namespace": ns},
        "reason": "Pushed", "message": "test", "type": "Normal",
        "source": {"component": "midonet-kube-controllers"}
    }))
    .unwrap();
    Api::<CoreEvent>::namespaced(user.clone(), &ns)
        .create(&PostParams::default(), &core_event)
        .await
        .unwrap();

    // Leases: in the granted namespace only.
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rbac-lease"},
        "spec": {"holderIdentity": "test", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    Api::<Lease>::namespaced(user.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    assert!(is_forbidden(
        Api::<Lease>::namespaced(user.clone(), &other_ns)
            .create(&PostParams::default(), &lease)
            .await
    ));

    // Nothing else.
    assert!(is_forbidden(
        Api::<Pod>::namespaced(user.clone(), &ns)
            .delete("any-pod", &DeleteParams::default())
            .await
    ));
    assert!(is_forbidden(
        Api::<Secret>::all(user.clone()).list(&lp).await
    ));
    assert!(is_forbidden(
        Api::<ConfigMap>::namespaced(user.clone(), &ns)
            .list(&lp)
            .await
    ));
}

#[tokio::test]
async fn binding_helper_is_idempotent() {
    let admin = admin_client().await;
    let ns = unique_namespace(&admin, "deploy-rbac-twice").await;
    bind_deploy_role_to_restricted_user(&admin, &ns).await;
    bind_deploy_role_to_restricted_user(&admin, &ns).await;
    assert!(restricted_can("get", "coordination.k8s.io", "leases", None, Some(&ns)).await);
}
