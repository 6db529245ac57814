//! `deploy/` against the Pod Security Standards (kubernetes.io/docs/concepts/security/
//! pod-security-standards, the `restricted` profile as the PodSecurity admission plugin of
//! Kubernetes 1.25+ enforces it; the v1.20 apiserver of the test world has no such plugin,
//! so the controls are checked here on the manifests `kubectl kustomize` renders):
//! - the base passes every control but one, *host namespaces*: it runs on the host network
//!   (the controllers build the pod network, so they cannot depend on it), which `baseline`
//!   and `restricted` forbid: its namespace needs `privileged` (docs/operations.md);
//! - `deploy-pod-network/` (the same off the host network) passes every `restricted` control,
//!   and its namespace carries the labels that enforce `restricted`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The `restricted` profile's violations of a pod template `spec` (the controls of the
/// `baseline` profile, which `restricted` includes, then its own).
fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for ns in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[ns] == true {
            v.push(format!("host namespaces: {ns}"));
        }
    }
    let pod_sc = &spec["securityContext"];
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .collect();
    let safe_sysctls = [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
    ];
    for s in pod_sc["sysctls"].as_array().into_iter().flatten() {
        if !safe_sysctls.contains(&s["name"].as_str().unwrap_or_default()) {
            v.push(format!("sysctls: {}", s["name"]));
        }
    }
    let allowed_volumes = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    for vol in spec["volumes"].as_array().into_iter().flatten() {
        for key in vol.as_object().into_iter().flatten().map(|(k, _)| k) {
            if key != "name" && !allowed_volumes.contains(&key.as_str()) {
                v.push(format!("volume types: {} is {key}", vol["name"]));
            }
        }
    }
    let seccomp_ok = |sc: &Value| {
        matches!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    // Set to RuntimeDefault or Localhost on the pod, or on every container.
    let pod_seccomp = seccomp_ok(pod_sc);
    let selinux_ok = |sc: &Value| {
        let o = &sc["seLinuxOptions"];
        o["user"].is_null()
            && o["role"].is_null()
            && matches!(
                o["type"].as_str(),
                None | Some("container_t" | "container_init_t" | "container_kvm_t")
            )
    };
    if !selinux_ok(pod_sc) {
        v.push("SELinux: pod".into());
    }
    if pod_sc["runAsUser"] == 0 {
        v.push("running as non-root user: pod runAsUser 0".into());
    }
    for c in containers {
        let name = c["name"].as_str().unwrap_or_default();
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            v.push(format!("privileged: {name}"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            v.push(format!("privilege escalation: {name}"));
        }
        let adds: Vec<&Value> = sc["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        if adds.iter().any(|a| *a != "NET_BIND_SERVICE") {
            v.push(format!("capabilities: {name} adds {adds:?}"));
        }
        if !sc["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"))
        {
            v.push(format!("capabilities: {name} does not drop ALL"));
        }
        for p in c["ports"].as_array().into_iter().flatten() {
            if p["hostPort"].as_i64().is_some_and(|h| h != 0) {
                v.push(format!("host ports: {name} {}", p["hostPort"]));
            }
        }
        if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
            v.push(format!("/proc mount: {name}"));
        }
        if !selinux_ok(sc) {
            v.push(format!("SELinux: {name}"));
        }
        let non_root = sc["runAsNonRoot"] == true
            || (sc["runAsNonRoot"].is_null() && pod_sc["runAsNonRoot"] == true);
        if !non_root {
            v.push(format!("running as non-root: {name}"));
        }
        if sc["runAsUser"] == 0 {
            v.push(format!("running as non-root user: {name} runAsUser 0"));
        }
        if !(seccomp_ok(sc) || (sc["seccompProfile"].is_null() && pod_seccomp)) {
            v.push(format!("seccomp: {name}"));
        }
    }
    v
}

/// `kubectl kustomize DIR` (client side; the kubectl that scripts/provision-k8s.sh builds).
fn render(dir: &str) -> Vec<Value> {
    let bin = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/provision-k8s.sh"))
        .output()
        .expect("scripts/provision-k8s.sh");
    let bin_dir = String::from_utf8_lossy(&bin.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let out = Command::new(PathBuf::from(bin_dir).join("kubectl"))
        .arg("kustomize")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir))
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .collect()
}

fn pod_spec(objects: &[Value]) -> &Value {
    &objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment")["spec"]["template"]["spec"]
}

#[test]
fn the_base_passes_every_restricted_control_but_the_host_network() {
    let objects = render("deploy");
    assert_eq!(
        restricted_violations(pod_spec(&objects)),
        vec!["host namespaces: hostNetwork".to_string()]
    );
}

#[test]
fn the_pod_network_variant_passes_restricted_and_its_namespace_enforces_it() {
    let objects = render("deploy-pod-network");
    let spec = pod_spec(&objects);
    assert_eq!(restricted_violations(spec), Vec::<String>::new());
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let ns = deployment["metadata"]["namespace"]
        .as_str()
        .expect("namespace");
    let namespace = objects
        .iter()
        .find(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == ns)
        .unwrap_or_else(|| panic!("the overlay does not carry the Namespace {ns}"));
    let labels = &namespace["metadata"]["labels"];
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels[format!("pod-security.kubernetes.io/{mode}")],
            "restricted",
            "{mode} label"
        );
    }
}

/// Each control notices what it is about: the oracle can fail.
#[test]
fn each_control_notices_a_violation() {
    let objects = render("deploy-pod-network");
    let good = pod_spec(&objects).clone();
    let c = "/containers/0/securityContext";
    let cases: [(&str, Value, &str); 10] = [
        ("/hostPID", Value::Bool(true), "host namespaces: hostPID"),
        (&format!("{c}/privileged"), Value::Bool(true), "privileged"),
        (
            &format!("{c}/allowPrivilegeEscalation"),
            Value::Bool(true),
            "privilege escalation",
        ),
        (
            &format!("{c}/capabilities/add"),
            serde_json::json!(["NET_ADMIN"]),
            "capabilities",
        ),
        (
            &format!("{c}/capabilities/drop"),
            serde_json::json!([]),
            "capabilities",
        ),
        (
            &format!("{c}/runAsUser"),
            Value::from(0),
            "running as non-root user",
        ),
        (
            &format!("{c}/runAsNonRoot"),
            Value::Bool(false),
            "running as non-root",
        ),
        (
            &format!("{c}/seccompProfile"),
            serde_json::json!({"type": "Unconfined"}),
            "seccomp",
        ),
        (
            "/volumes/0",
            serde_json::json!({"name": "h", "hostPath": {"path": "/"}}),
            "volume types",
        ),
        (
            "/containers/0/ports/0/hostPort",
            Value::from(9453),
            "host ports",
        ),
    ];
    for (pointer, value, control) in cases {
        let mut bad = good.clone();
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let target = if parent.is_empty() {
            &mut bad
        } else {
            bad.pointer_mut(parent).expect(pointer)
        };
        match key.parse::<usize>() {
            Ok(i) => target[i] = value,
            Err(_) => target[key] = value,
        }
        let found = restricted_violations(&bad);
        assert!(
            found.iter().any(|f| f.starts_with(control)),
            "{pointer} = {:?}: {control} not noticed ({found:?})",
            bad.pointer(pointer)
        );
    }
}
