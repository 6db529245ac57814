//! Test support: a real local Kubernetes control plane (etcd + kube-apiserver +
//! kube-controller-manager) shared by the tests of one test binary.
//!
//! The first test that asks for it starts one with `scripts/k8s-env.sh` on free loopback
//! ports, with a watchdog that stops it once this test process is gone — passed, failed,
//! panicked or killed. Set `MIDONETKUBE_TEST_K8S_DIR` to a directory already started by
//! `scripts/k8s-env.sh start DIR` to reuse that one instead (it is then left running).
//!
//! Every test module uses a subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub restricted_kubeconfig: PathBuf,
    pub restricted_user: String,
    pub kubectl: PathBuf,
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_env_file(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn start_control_plane() -> ControlPlane {
    let dir = match std::env::var("MIDONETKUBE_TEST_K8S_DIR") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            let base = std::env::temp_dir().join("midonet-kube-tests");
            std::fs::create_dir_all(&base).expect("create temp dir");
            let dir = base.join(format!(
                "{}-{}",
                std::env::args()
                    .next()
                    .and_then(|a| Path::new(&a)
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "test".into()),
                std::process::id()
            ));
            let out = Command::new("bash")
                .arg(repo_root().join("scripts/k8s-env.sh"))
                .arg("start")
                .arg(&dir)
                .arg("--watch-pid")
                .arg(std::process::id().to_string())
                .args(START_ARGS.get().into_iter().flatten())
                .output()
                .expect("run scripts/k8s-env.sh");
            assert!(
                out.status.success(),
                "starting the control plane failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            dir
        }
    };
    let env = read_env_file(&dir.join("env"));
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} missing from {}/env", dir.display()))
    };
    let cp = ControlPlane {
        kubeconfig: PathBuf::from(get("MIDONETKUBE_TEST_KUBECONFIG")),
        restricted_kubeconfig: PathBuf::from(get("MIDONETKUBE_TEST_RESTRICTED_KUBECONFIG")),
        restricted_user: get("MIDONETKUBE_TEST_RESTRICTED_USER"),
        kubectl: PathBuf::from(get("MIDONETKUBE_TEST_KUBECTL")),
        dir,
    };
    install_crd(&cp);
    cp
}

/// Extra `k8s-env.sh start` options of this test binary's control plane.
static START_ARGS: OnceLock<Vec<String>> = OnceLock::new();

/// Makes this test binary's control plane serve EndpointSlices (`k8s-env.sh start
/// --endpointslices`). Call it before anything starts the control plane; every test of the
/// binary calls it, so whichever runs first decides.
pub fn serve_endpointslices() {
    start_with(&["--endpointslices"]);
}

/// Starts this test binary's control plane with these `k8s-env.sh start` options (the first
/// call decides; a later one with other options panics).
fn start_with(args: &[&str]) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let _ = START_ARGS.set(args.clone());
    assert_eq!(
        START_ARGS.get(),
        Some(&args),
        "the control plane was configured otherwise"
    );
}

/// The control plane of this test binary (started on first use) with the CRD installed.
pub fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(start_control_plane)
}

fn install_crd(cp: &ControlPlane) {
    // Tests call this from inside their own tokio runtime: block on a fresh runtime in a
    // separate thread.
    let kubeconfig = cp.kubeconfig.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = client_for(&kubeconfig).await;
            apply_crd(&client).await;
        });
    })
    .join()
    .expect("installing the CRD failed");
}

/// Server-side applies the Translation CRD and waits until it is Established.
pub async fn apply_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = midonet_kube_controllers::crd::crd();
    crds.patch(
        midonet_kube_controllers::crd::CRD_NAME,
        &PatchParams::apply("midonet-kube-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    wait_until("CRD Established", CEILING, || async {
        let crd = crds
            .get(midonet_kube_controllers::crd::CRD_NAME)
            .await
            .ok()?;
        let established = crd
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// A client with cluster-admin rights.
pub async fn admin_client() -> Client {
    client_for(&control_plane().kubeconfig).await
}

/// A client for a user that has no RBAC rights until a test binds some.
pub async fn restricted_client() -> Client {
    client_for(&control_plane().restricted_kubeconfig).await
}

/// Runs the control plane's kubectl (admin) and returns its output.
pub fn kubectl(args: &[&str]) -> Output {
    let cp = control_plane();
    Command::new(&cp.kubectl)
        .env("KUBECONFIG", &cp.kubeconfig)
        // Its discovery cache with the control plane (removed with it): another control
        // plane may have had the same address.
        .arg("--cache-dir")
        .arg(cp.dir.join("kubectl-cache"))
        .args(args)
        .output()
        .expect("run kubectl")
}

/// Creates a namespace with a unique name for one test.
pub async fn unique_namespace(client: &Client, prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let name = format!("{prefix}-{}-{n}", std::process::id() % 100_000);
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// The hang guard of a wait on something the system reports: generous, because it is no
/// timing assertion (a loaded machine may be several times slower than an idle one; how
/// fast things are is the benchmark's business). A wait that reaches it fails saying what
/// was still missing.
pub const CEILING: Duration = Duration::from_secs(180);

/// What a wait's probe answers: the value once the condition holds, else what is still
/// missing. `Option` probes say nothing more than "not yet"; `Result<T, String>` probes
/// name what they wait for, and the failure of the wait repeats it.
pub trait Condition<T> {
    fn holds(self) -> Result<T, String>;
}

impl<T> Condition<T> for Option<T> {
    fn holds(self) -> Result<T, String> {
        self.ok_or_else(|| "the condition was not met (the probe says no more)".to_string())
    }
}

impl<T> Condition<T> for Result<T, String> {
    fn holds(self) -> Result<T, String> {
        self
    }
}

/// Polls `probe` until its condition holds (see [`Condition`]); after `ceiling` (a hang
/// guard, see [`CEILING`]) panics with `what` and the probe's last word on what is missing.
pub async fn wait_until<T, C, F, Fut>(what: &str, ceiling: Duration, mut probe: F) -> T
where
    C: Condition<T>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = C>,
{
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        polls += 1;
        let missing = match probe().await.holds() {
            Ok(v) => return v,
            Err(missing) => missing,
        };
        if start.elapsed() > ceiling {
            panic!(
                "waited {:.1?} ({polls} polls) for: {what}; still missing: {missing}",
                start.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
pub mod check;
pub mod child;
pub mod fixtures;
pub mod monitoring;
pub mod node;
pub mod objects;
pub mod original;
pub mod probe;
pub mod rbac;
pub mod rollout;
pub mod scenario;
pub mod stack;

/// Creates a ConfigMap `name` in `ns` to own test objects; returns the reference to it.
pub async fn owner_configmap(
    client: &Client,
    ns: &str,
    name: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
    }))
    .expect("configmap");
    let created = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create owner ConfigMap");
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: name.into(),
        uid: created.metadata.uid.expect("uid"),
        ..Default::default()
    }
}

/// Runs `scripts/k8s-env.sh SUBCOMMAND DIR` on this test binary's control plane; panics
/// if it fails.
async fn k8s_env(subcommand: &'static str) {
    let dir = control_plane().dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(repo_root().join("scripts/k8s-env.sh"))
            .arg(subcommand)
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run scripts/k8s-env.sh {subcommand}: {e}"))
    })
    .await
    .expect("k8s-env task");
    assert!(
        out.status.success(),
        "scripts/k8s-env.sh {subcommand} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops and starts this test binary's kube-apiserver (`scripts/k8s-env.sh
/// restart-apiserver`): same address, same etcd, so clients keep their configuration.
/// Returns once the new one answers `/readyz`; panics if it does not come back.
pub async fn restart_apiserver() {
    k8s_env("restart-apiserver").await
}

/// Stops this test binary's kube-controller-manager: no garbage collection from then on, so
/// whatever deletes a Translation is the controllers. Only for a test binary of its own.
pub async fn stop_controller_manager() {
    k8s_env("stop-controller-manager").await
}

/// Waits (up to [`CEILING`]) for an event with `reason` in `namespace`, about `object` if
/// given; fails listing the reasons of the events there are.
pub async fn wait_event(client: &Client, namespace: &str, object: Option<&str>, reason: &str) {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("event {reason} on {}", object.unwrap_or("any object")),
        CEILING,
        || async {
            let list = events
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| format!("list events: {e}"))?;
            let about =
                |e: &&Event| object.is_none_or(|o| e.involved_object.name.as_deref() == Some(o));
            if list
                .items
                .iter()
                .filter(about)
                .any(|e| e.reason.as_deref() == Some(reason))
            {
                return Ok(());
            }
            let seen: std::collections::BTreeSet<&str> = list
                .items
                .iter()
                .filter(about)
                .filter_map(|e| e.reason.as_deref())
                .collect();
            Err(format!("events seen: {seen:?}"))
        },
    )
    .await;
}

/// `kubectl create -f` of one object given as JSON; returns kubectl's output.
pub fn kubectl_create(object: &serde_json::Value) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).expect("write object");
    kubectl(&["create", "-f", &file.display().to_string()])
}

/// Warning events in the cluster: (involved kind, involved name, reason, message).
pub async fn warning_events(client: &Client) -> Vec<(String, String, String, String)> {
    use k8s_openapi::api::core::v1::Event;
    Api::<Event>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .map(|e| {
                    (
                        e.involved_object.kind.unwrap_or_default(),
                        e.involved_object.name.unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.message.unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
