//! A real node in the test world and the controllers deployed on it as users deploy them.
//!
//! - [`node`]: this test binary's control plane started with `scripts/k8s-env.sh start
//!   --node` (containerd, kubelet, kube-proxy in a network namespace of their own, and
//!   kube-scheduler; the watchdog removes all of it when the test process is gone). Call it
//!   before anything else starts the control plane.
//! - [`image`]: the controllers' image built by `scripts/image.sh` from the binary under
//!   test and imported into the node's containerd.
//! - [`Backend`]: the simulator on the host, listening on the host's end of the node's veth
//!   (what the pods reach), with credentials, restartable on the same address with its state.
//! - [`Overlay`]: a kustomize overlay of `deploy/` as docs/operations.md writes it (image,
//!   credentials through `secretGenerator`, the backend URL through `configMapGenerator`),
//!   plus what a test changes, applied with `kubectl apply -k`.
//! - The Deployment's pods as the kubelet reports them, their logs and metrics.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use midonet_sim::admin::AdminClient;
use midonet_sim::{SimAuth, SimConfig, SimHandle};
use uuid::Uuid;

use super::{control_plane, repo_root, wait_until};

/// `kubectl` off the async runtime's thread: the simulator serves the pods from this
/// process, and a blocked runtime would leave them unanswered.
pub async fn kubectl(args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::kubectl(&args)
    })
    .await
    .expect("kubectl task")
}

/// The namespace, name and label of `deploy/`'s Deployment.
pub const NAMESPACE: &str = "kube-system";
pub const DEPLOYMENT: &str = "midonet-kube-controllers";
pub const SELECTOR: &str = "k8s-app=midonet-kube-controllers";
/// The metrics port `deploy/` sets.
pub const METRICS_PORT: u16 = 9453;
/// The image `deploy/` names.
pub const IMAGE_NAME: &str = "midonet/midonet-kube-controllers";
/// The pod sandbox image the node has (scripts/k8s-node.sh), also the workloads' image.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.4.1-midonet-local";

/// The real node of this test binary's control plane.
pub struct NodeInfo {
    pub name: String,
    /// The node's address (its InternalIP; hostNetwork pods have it).
    pub addr: String,
    /// The host's end of the node's veth: what the node's pods reach the host at.
    pub host_addr: String,
    /// The node's containerd socket.
    pub containerd: PathBuf,
    /// The node's MidoNet host id (the simulator knows the node by name).
    pub host_id: Uuid,
}

/// Starts this test binary's control plane with a real node (first call) and answers it.
pub fn node() -> &'static NodeInfo {
    static NODE: OnceLock<NodeInfo> = OnceLock::new();
    NODE.get_or_init(|| {
        super::start_with(&["--node"]);
        let cp = control_plane();
        let env = super::read_env_file(&cp.dir.join("env"));
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} missing: the control plane has no node"))
        };
        NodeInfo {
            name: get("MIDONETKUBE_TEST_NODE_NAME"),
            addr: get("MIDONETKUBE_TEST_NODE_ADDR"),
            host_addr: get("MIDONETKUBE_TEST_HOST_ADDR"),
            containerd: PathBuf::from(get("MIDONETKUBE_TEST_CONTAINERD")),
            host_id: Uuid::new_v4(),
        }
    })
}

/// `IMAGE_NAME:tag` built from the binary under test by `scripts/image.sh` and imported into
/// the node's containerd (once per tag). Two tags are two images of the same binary: what
/// an operator's tag change looks like to the kubelet.
pub fn image(tag: &str) -> String {
    static BUILT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(tag) {
        let node = node();
        let out = control_plane().dir.join(format!("image-{tag}.tar"));
        let run = Command::new("bash")
            .arg(repo_root().join("scripts/image.sh"))
            .args(["--binary", super::child::BIN, "--tag", tag])
            .arg("--out")
            .arg(&out)
            .arg("--import")
            .arg(&node.containerd)
            .output()
            .expect("run scripts/image.sh");
        assert!(
            run.status.success(),
            "scripts/image.sh failed:\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&run.stderr).trim());
        let _ = std::fs::remove_file(&out);
        built.insert(tag.to_string());
    }
    format!("{IMAGE_NAME}:{tag}")
}

/// The MidoNet API credentials the backend accepts.
pub const USERNAME: &str = "midonet-admin";
pub const PASSWORD: &str = "s3cret-backend-password";
pub const PROJECT: &str = "admin";

/// The simulator on the host as the node's pods reach it; stopped and started again on the
/// same address with its state (a snapshot file), as a MidoNet API restart.
pub struct Backend {
    sim: Option<SimHandle>,
    pub admin: AdminClient,
    addr: SocketAddr,
    snapshot: PathBuf,
}

impl Backend {
    pub async fn start() -> Backend {
        let node = node();
        let snapshot = control_plane().dir.join("backend-state.json");
        let listen: SocketAddr = format!("{}:0", node.host_addr)
            .parse()
            .expect("host address");
        let sim = Self::start_at(listen, &snapshot).await;
        let addr = sim.local_addr();
        let admin = AdminClient::new(sim.admin_url()).expect("admin client");
        Backend {
            sim: Some(sim),
            admin,
            addr,
            snapshot,
        }
    }

    async fn start_at(listen: SocketAddr, snapshot: &Path) -> SimHandle {
        let node = node();
        midonet_sim::start(SimConfig {
            listen,
            auth: Some(SimAuth {
                username: USERNAME.into(),
                password: PASSWORD.into(),
                project: PROJECT.into(),
                token_ttl: Duration::from_secs(3600),
            }),
            hosts: vec![(node.name.clone(), node.host_id)],
            snapshot: Some(snapshot.to_path_buf()),
            ..SimConfig::default()
        })
        .await
        .expect("start the simulator")
    }

    /// The MidoNet API URL the pods are given.
    pub fn api_url(&self) -> String {
        format!("http://{}/midonet-api", self.addr)
    }

    pub fn sim(&self) -> &SimHandle {
        self.sim.as_ref().expect("the backend is running")
    }

    /// Stops serving; the state is kept in the snapshot.
    pub async fn stop(&mut self) {
        if let Some(sim) = self.sim.take() {
            sim.shutdown().await;
        }
    }

    /// Serves again on the same address, from the state it had.
    pub async fn start_again(&mut self) {
        assert!(self.sim.is_none(), "the backend is running");
        self.sim = Some(Self::start_at(self.addr, &self.snapshot).await);
    }
}

/// A kustomize overlay of `deploy/`, written as docs/operations.md shows, in a directory of
/// its own beside the control plane's state (kubectl 1.20's kustomize wants a relative path
/// to the base).
#[derive(Clone, Debug)]
pub struct Overlay {
    pub name: String,
    pub tag: String,
    pub api_url: String,
    pub username: String,
    pub password: String,
    /// More `configMapGenerator` literals (`MIDONETKUBE_…=…`).
    pub config: Vec<(String, String)>,
    /// `replicas` (`None`: the base's).
    pub replicas: Option<u32>,
    /// Off the host network (so two replicas fit on one node).
    pub pod_network: bool,
    /// Probe timings tightened so that the kubelet acts within seconds: (liveness period,
    /// liveness failures, readiness period, readiness failures).
    pub fast_probes: bool,
    /// JSON 6902 operations on the ClusterRole (e.g. a rule removed).
    pub cluster_role_ops: Option<serde_json::Value>,
}

impl Overlay {
    /// The overlay of the docs with this image tag, backend and the backend's credentials.
    pub fn new(name: &str, tag: &str, backend: &Backend) -> Overlay {
        Overlay {
            name: name.into(),
            tag: tag.into(),
            api_url: backend.api_url(),
            username: USERNAME.into(),
            password: PASSWORD.into(),
            config: Vec::new(),
            replicas: None,
            pod_network: false,
            fast_probes: false,
            cluster_role_ops: None,
        }
    }

    pub fn with_config(mut self, key: &str, value: &str) -> Overlay {
        self.config.retain(|(k, _)| k != key);
        self.config.push((key.into(), value.into()));
        self
    }

    fn dir(&self) -> PathBuf {
        control_plane().dir.join("overlays").join(&self.name)
    }

    /// Writes the overlay; answers its directory.
    pub fn write(&self) -> PathBuf {
        let dir = self.dir();
        std::fs::create_dir_all(&dir).expect("overlay directory");
        let base = relative(&dir, &repo_root().join("deploy"));
        let mut k = format!(
            "namespace: kube-system\nbases:\n  - {base}\nimages:\n  - name: {IMAGE_NAME}\n    newTag: \"{}\"\n\
             secretGenerator:\n  - name: midonet-kube-credentials\n    behavior: replace\n    files:\n      - password\n    literals:\n      - MIDONETKUBE_USERNAME={}\n      - MIDONETKUBE_PROJECT={PROJECT}\n\
             configMapGenerator:\n  - name: midonet-kube-config\n    behavior: merge\n    literals:\n      - MIDONETKUBE_MIDONET_API={}\n",
            self.tag, self.username, self.api_url
        );
        for (key, value) in &self.config {
            k.push_str(&format!("      - {key}={value}\n"));
        }
        std::fs::write(dir.join("password"), &self.password).expect("password file");
        let mut patches = Vec::new();
        if let Some(deployment) = self.deployment_patch() {
            std::fs::write(dir.join("deployment-patch.yaml"), deployment.to_string())
                .expect("patch");
            patches.push("deployment-patch.yaml");
        }
        if !patches.is_empty() {
            k.push_str("patchesStrategicMerge:\n");
            for p in patches {
                k.push_str(&format!("  - {p}\n"));
            }
        }
        if let Some(ops) = &self.cluster_role_ops {
            std::fs::write(dir.join("clusterrole-ops.json"), ops.to_string()).expect("ops");
            k.push_str(
                "patchesJson6902:\n  - target:\n      group: rbac.authorization.k8s.io\n      version: v1\n      kind: ClusterRole\n      name: midonet-kube-controllers\n    path: clusterrole-ops.json\n",
            );
        }
        std::fs::write(dir.join("kustomization.yaml"), k).expect("kustomization");
        dir
    }

    /// The strategic merge patch of the Deployment this overlay needs, if any.
    fn deployment_patch(&self) -> Option<serde_json::Value> {
        use serde_json::json;
        if self.replicas.is_none() && !self.pod_network && !self.fast_probes {
            return None;
        }
        let mut spec = json!({});
        if let Some(r) = self.replicas {
            spec["replicas"] = json!(r);
        }
        let mut pod = json!({});
        if self.pod_network {
            pod["hostNetwork"] = json!(false);
        }
        if self.fast_probes {
            pod["containers"] = json!([{
                "name": DEPLOYMENT,
                "livenessProbe": {"initialDelaySeconds": 5, "periodSeconds": 2, "failureThreshold": 3, "timeoutSeconds": 1},
                "readinessProbe": {"periodSeconds": 1, "failureThreshold": 2, "timeoutSeconds": 1}
            }]);
        }
        if pod != json!({}) {
            spec["template"] = json!({"spec": pod});
        }
        Some(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
            "spec": spec
        }))
    }

    /// `kubectl apply -k` of the overlay; panics with kubectl's output if it fails.
    pub async fn apply(&self) {
        let dir = self.write();
        let out = kubectl(&["apply", "-k", &dir.display().to_string()]).await;
        assert!(
            out.status.success(),
            "kubectl apply -k {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Applies the overlay, then restarts the pods (`kubectl rollout restart`), as
    /// docs/operations.md says after a change of settings or credentials alone: the pods
    /// read them at start, and the base's ConfigMap and Secret keep their names.
    pub async fn apply_and_restart(&self) {
        self.apply().await;
        let out = kubectl(&[
            "-n",
            NAMESPACE,
            "rollout",
            "restart",
            &format!("deployment/{DEPLOYMENT}"),
        ])
        .await;
        assert!(
            out.status.success(),
            "kubectl rollout restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `to` relative to the directory `from` (both absolute).
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// `kubectl rollout status` of the Deployment; panics if it does not complete in `timeout`.
pub async fn rollout_status(timeout: Duration) {
    let out = kubectl(&[
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        &format!("deployment/{DEPLOYMENT}"),
        &format!("--timeout={}s", timeout.as_secs()),
    ])
    .await;
    assert!(
        out.status.success(),
        "kubectl rollout status did not complete: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        diagnosis().await
    );
}

/// What the cluster says about the controllers' pods: for a failure message.
pub async fn diagnosis() -> String {
    let mut out = String::new();
    for args in [
        &["get", "pods", "-A", "-o", "wide"][..],
        &["-n", NAMESPACE, "describe", "pods", "-l", SELECTOR],
        &["-n", NAMESPACE, "logs", "-l", SELECTOR, "--tail=20"],
    ] {
        let o = kubectl(args).await;
        out.push_str(&format!(
            "$ kubectl {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    out
}

/// The Deployment's pods, not being deleted.
pub async fn pods(client: &kube::Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Whether the kubelet reports the pod Ready.
pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The controllers container's restart count.
pub fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

/// The pod's address (the node's on the host network).
pub fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref()?.pod_ip.clone()
}

/// Waits until `want` pods of the Deployment (of `tag`'s image, if given) are Ready and no
/// other pod of it is left; answers them.
pub async fn wait_ready_pods(
    client: &kube::Client,
    want: usize,
    tag: Option<&str>,
    timeout: Duration,
) -> Vec<Pod> {
    wait_until(
        &format!("{want} Ready controllers pod(s) (image tag {tag:?})"),
        timeout,
        || async {
            let pods = pods(client).await;
            let of_tag = |p: &Pod| {
                tag.is_none_or(|t| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.as_deref())
                        .is_some_and(|i| i.ends_with(&format!(":{t}")))
                })
            };
            (pods.len() == want && pods.iter().all(|p| is_ready(p) && of_tag(p))).then_some(pods)
        },
    )
    .await
}

/// The pod's log (`kubectl logs`; `previous`: the container the kubelet restarted).
pub async fn logs(pod: &str, previous: bool) -> String {
    let mut args = vec!["-n", NAMESPACE, "logs", pod];
    if previous {
        args.push("--previous");
    }
    let out = kubectl(&args).await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `GET http://ADDR:9453{path}` of a pod: status and body, `None` if nothing answered.
pub async fn get(pod_ip: &str, path: &str) -> Option<(u16, String)> {
    let resp = reqwest::Client::new()
        .get(format!("http://{pod_ip}:{METRICS_PORT}{path}"))
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .ok()?;
    let code = resp.status().as_u16();
    Some((code, resp.text().await.ok()?))
}

/// The sum of the samples of metric `name` whose labels contain `filter` on a pod's
/// `/metrics`; `None` while it does not answer.
pub async fn metric(pod_ip: &str, name: &str, filter: &str) -> Option<f64> {
    let (_, text) = get(pod_ip, "/metrics").await?;
    Some(
        text.lines()
            .filter(|l| {
                (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
                    && l.contains(filter)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// The pod that holds the Lease, by the pods' `leader` gauge.
pub async fn leader(client: &kube::Client) -> Option<Pod> {
    for p in pods(client).await {
        let Some(ip) = pod_ip(&p) else { continue };
        if metric(&ip, "midonet_kube_controllers_leader", "").await == Some(1.0) {
            return Some(p);
        }
    }
    None
}

/// Workloads on the node: Deployments of the pause image (it has no port open: `check`
/// checks flows in the data-plane model of the backend, not packets) behind a Service, in a
/// namespace of their own. Their pods get addresses from the node's podCIDR (the CNI
/// plugin's IPAM); the endpoints controller makes the Service's Endpoints of the Ready ones.
pub struct Workload {
    pub namespace: String,
    client: kube::Client,
}

impl Workload {
    pub async fn create(client: &kube::Client, prefix: &str) -> Workload {
        let namespace = super::unique_namespace(client, prefix).await;
        Workload {
            namespace,
            client: client.clone(),
        }
    }

    /// Creates or scales the Deployment `name` (label `app: name`) to `replicas`, and its
    /// Service `name` (80 → 8080/TCP).
    pub async fn deploy(&self, name: &str, replicas: i32) {
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::Service;
        use kube::api::{Patch, PatchParams};
        use serde_json::json;
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": PAUSE_IMAGE,
                            "ports": [{"containerPort": 8080}]}]
                    }
                }
            }
        });
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        });
        let pp = PatchParams::apply("midonet-kube-tests").force();
        Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .patch(name, &pp, &Patch::Apply(&deployment))
            .await
            .unwrap_or_else(|e| panic!("apply Deployment {name}: {e}"));
        Api::<Service>::namespaced(self.client.clone(), &self.namespace)
            .patch(name, &pp, &Patch::Apply(&service))
            .await
            .unwrap_or_else(|e| panic!("apply Service {name}: {e}"));
    }

    /// Deletes the Deployment and the Service `name`, and returns once both are gone, so
    /// that a `deploy` of the same name creates new objects: an apply that meets an object
    /// still being deleted races its removal and is refused (409, its UID precondition).
    pub async fn remove(&self, name: &str) {
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::core::v1::Service;
        use kube::api::DeleteParams;
        let dp = DeleteParams::foreground();
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), &self.namespace);
        let services = Api::<Service>::namespaced(self.client.clone(), &self.namespace);
        let _ = deployments.delete(name, &dp).await;
        let _ = services.delete(name, &dp).await;
        let what = format!("Deployment and Service {name} gone from {}", self.namespace);
        wait_until(&what, super::CEILING, || async {
            let left = [
                (
                    "Deployment",
                    deployments.get_opt(name).await.map(|o| o.is_some()),
                ),
                ("Service", services.get_opt(name).await.map(|o| o.is_some())),
            ];
            let still: Vec<String> = left
                .iter()
                .filter_map(|(kind, present)| match present {
                    Ok(false) => None,
                    Ok(true) => Some(format!("{kind} still present")),
                    Err(e) => Some(format!("{kind} not read: {e}")),
                })
                .collect();
            if still.is_empty() {
                Ok(())
            } else {
                Err(still.join("; "))
            }
        })
        .await
    }

    /// Waits until the namespace's pods are exactly `want` Running pods with addresses, and
    /// no pod is being deleted; answers their addresses.
    pub async fn wait_running(&self, want: usize, timeout: Duration) -> Vec<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        wait_until(
            &format!("{want} Running pods with addresses in {}", self.namespace),
            timeout,
            || async {
                let pods = match api.list(&ListParams::default()).await {
                    Ok(list) => list.items,
                    Err(e) => return Err(format!("pods not listed: {e}")),
                };
                let ips: Vec<String> = pods
                    .iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                            && is_ready(p)
                    })
                    .filter_map(pod_ip)
                    .collect();
                if pods.len() == want && ips.len() == want {
                    return Ok(ips);
                }
                Err(pods_not_running(&pods, want))
            },
        )
        .await
    }
}

/// What keeps `pods` from being `want` Running, Ready pods with addresses: each pod's phase,
/// readiness, address, and why its containers wait or its conditions are false.
fn pods_not_running(pods: &[Pod], want: usize) -> String {
    let each: Vec<String> = pods.iter().map(pod_state).collect();
    format!("{} of {want} pods: {}", pods.len(), each.join("; "))
}

/// One pod's state in a line, with the reasons the kubelet gave.
fn pod_state(p: &Pod) -> String {
    let status = p.status.clone().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            format!(
                "waiting {} {}",
                w.reason.as_deref().unwrap_or("?"),
                w.message.as_deref().unwrap_or("")
            )
        });
    let unmet = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status != "True")
        .map(|c| {
            format!(
                "{}={} {} {}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        });
    let reasons: Vec<String> = waiting.chain(unmet).collect();
    format!(
        "{} {}{} ip={} [{}]",
        p.metadata.name.as_deref().unwrap_or("?"),
        status.phase.as_deref().unwrap_or("no phase"),
        if p.metadata.deletion_timestamp.is_some() {
            " deleting"
        } else {
            ""
        },
        status.pod_ip.as_deref().unwrap_or("none"),
        reasons.join(", ")
    )
}

/// The node's `spec.podCIDR` as the controller-manager allocated it.
pub async fn pod_cidr(client: &kube::Client) -> String {
    use k8s_openapi::api::core::v1::Node;
    let n = Api::<Node>::all(client.clone())
        .get(&node().name)
        .await
        .expect("get the node");
    n.spec
        .and_then(|s| s.pod_cidr)
        .expect("the node has a podCIDR")
}

/// Whether `ip` is in the IPv4 `cidr`.
pub fn in_cidr(ip: &str, cidr: &str) -> bool {
    let parse = |s: &str| s.parse::<std::net::Ipv4Addr>().map(u32::from).ok();
    let Some((net, len)) = cidr.split_once('/') else {
        return false;
    };
    let (Some(ip), Some(net), Ok(len)) = (parse(ip), parse(net), len.parse::<u32>()) else {
        return false;
    };
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    ip & mask == net & mask
}

/// The `check` settings of the backend ([`USERNAME`], [`PASSWORD`], [`PROJECT`]).
pub fn check_args() -> [&'static str; 6] {
    [
        "--username",
        USERNAME,
        "--password",
        PASSWORD,
        "--project",
        PROJECT,
    ]
}

/// How long the node takes to converge after a change (a hang guard).
pub const CONVERGE: Duration = Duration::from_secs(240);

/// Waits until the workload's `pods` run with addresses from the node's podCIDR and the
/// cluster and the backend are exactly what the objects call for; then `check`.
pub async fn converged(
    client: &kube::Client,
    backend: &Backend,
    w: &Workload,
    pods: usize,
    what: &str,
) {
    let cidr = pod_cidr(client).await;
    let ips = w.wait_running(pods, CONVERGE).await;
    assert!(
        ips.iter().all(|ip| in_cidr(ip, &cidr)),
        "pod addresses {ips:?} are not from the node's podCIDR {cidr}"
    );
    super::stack::wait_exact(client, &backend.admin, what, CONVERGE).await;
    let report =
        super::check::assert_check_passes_with(&backend.api_url(), &check_args(), what).await;
    // Every endpoint is a pod's address but the apiserver's (on the host).
    let unverifiable: Vec<&String> = report
        .unverifiable_endpoints
        .iter()
        .filter(|e| !e.starts_with("svc/default/kubernetes:"))
        .collect();
    assert!(
        unverifiable.is_empty(),
        "{what}: endpoints without a pod address: {unverifiable:?}"
    );
}
