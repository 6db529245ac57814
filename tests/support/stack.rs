//! The whole system for end-to-end tests: the simulator in-process and the controllers
//! (`run_until`) in-process, against the real control plane, plus exact state comparison.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use kube::api::{Api, ListParams};
use kube::Client;
use midonet_kube_controllers::config::RunArgs;
use midonet_kube_controllers::crd::Translation;
use midonet_sim::admin::{AdminClient, StateDump};
use midonet_sim::{self as sim, SimConfig, SimHandle};
use midonet_translators::Resource;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Parser)]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

pub async fn start_sim(hosts: &[(&str, Uuid)]) -> (SimHandle, AdminClient) {
    start_sim_with(SimConfig {
        hosts: hosts.iter().map(|(n, id)| (n.to_string(), *id)).collect(),
        ..SimConfig::default()
    })
    .await
}

/// A simulator knowing `scenario`'s hosts, adding `latency_ms` to every request.
pub async fn start_sim_for(
    scenario: &midonet_testkit::scenario::Scenario,
    latency_ms: u64,
) -> (SimHandle, AdminClient) {
    start_sim_with(SimConfig {
        hosts: scenario.hosts.clone(),
        faults: midonet_sim::admin::Faults {
            latency_ms,
            ..Default::default()
        },
        ..SimConfig::default()
    })
    .await
}

pub async fn start_sim_with(config: SimConfig) -> (SimHandle, AdminClient) {
    let handle = sim::start(config).await.expect("start simulator");
    let admin = AdminClient::new(handle.admin_url()).expect("admin client");
    (handle, admin)
}

/// A loopback port, free when chosen, for a server the test starts next (the controllers'
/// metrics endpoint, Prometheus).
///
/// The server binds it later, so something else could take it in between. The port is
/// chosen where that is unlikely: below the kernel's ephemeral range, where no outgoing
/// connection and no `bind(0)` of another process takes a port, and at random there, so
/// that test processes choosing at once rarely choose alike.
pub fn free_port() -> u16 {
    use rand::Rng;
    let ephemeral_low = ephemeral_range_start();
    let bindable = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    if ephemeral_low >= FIRST_CHOSEN_PORT + 1_000 {
        let mut rng = rand::rng();
        for _ in 0..200 {
            let port = rng.random_range(FIRST_CHOSEN_PORT..ephemeral_low);
            if bindable(port) {
                return port;
            }
        }
    }
    // The range below the ephemeral one is too small or full: the kernel's choice.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The lowest port [`free_port`] chooses: above the well-known and common service ports.
const FIRST_CHOSEN_PORT: u16 = 20_000;

/// The first port of the kernel's ephemeral range; Linux's default (32768) where it cannot
/// be read, which is the range's start on every kernel that does not say otherwise.
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A backend client of the simulator `sim`, as the controllers' (its login is not checked).
pub fn backend_client(sim: &SimHandle) -> midonet_kube_controllers::backend::BackendClient {
    use midonet_kube_controllers::backend::{BackendClient, BackendConfig, Secret};
    BackendClient::new(
        BackendConfig {
            url: sim.api_url(),
            username: "admin".into(),
            password: Secret::new("unused"),
            project: "admin".into(),
            ca_file: None,
            timeout: Duration::from_secs(5),
            retry_max_elapsed: Duration::from_secs(5),
        },
        &prometheus::Registry::new(),
    )
    .expect("backend client")
}

/// Panics unless `state` holds every one of `resources`.
pub fn assert_present(state: &StateDump, resources: &[midonet_translators::model::Resource]) {
    for r in resources {
        let path = r.item_path();
        assert!(state.contains(&path), "{path} was deleted");
    }
}

/// Controllers running in this process.
pub struct Controllers {
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), midonet_kube_controllers::run::RunError>>,
    pub metrics_port: u16,
}

impl Controllers {
    pub async fn start(kubeconfig: &Path, sim: &SimHandle, extra: &[&str]) -> Controllers {
        // The controllers' logs on the test's output, for a diagnosis run:
        // MIDONETKUBE_TEST_LOG=midonet_kube_controllers=info cargo test --test … -- --nocapture
        if let Ok(filter) = std::env::var("MIDONETKUBE_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let metrics_port = free_port();
        let mut args = vec![
            "test".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--midonet-api".into(),
            sim.api_url().to_string(),
            "--metrics-address".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--leader-elect".into(),
            "false".into(),
            "--resync-period".into(),
            "30s".into(),
        ];
        // Stacks of concurrent tests share the apiserver, and with it the run marker's
        // Lease: a test that wants the crash recovery turns it on with a marker of its own.
        if !extra.contains(&"--crash-recovery") {
            args.extend(["--crash-recovery".into(), "false".into()]);
        }
        // Every pusher watches every namespace: one that reset the managedFields of another
        // test's Translations would change their resourceVersions under it.
        if !extra.contains(&"--compact-managed-fields-after") {
            args.extend(["--compact-managed-fields-after".into(), "0".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let cfg = Cli::try_parse_from(args)
            .expect("args")
            .run
            .validate()
            .expect("config");
        let stop = CancellationToken::new();
        let task = tokio::spawn(midonet_kube_controllers::run::run_until(cfg, stop.clone()));
        Controllers {
            stop,
            task,
            metrics_port,
        }
    }

    /// The text of its `/metrics`.
    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let response = reqwest::get(url).await.expect("GET /metrics");
        response.text().await.expect("the body of /metrics")
    }

    /// Stops taking work, waits for in-flight work; panics if the run failed.
    pub async fn stop(self) {
        self.stop.cancel();
        let res = tokio::time::timeout(super::CEILING, self.task)
            .await
            .expect("controllers stop in time")
            .expect("controllers task");
        res.expect("controllers ran without a fatal error");
    }
}

/// A test of the pusher alone (`--controllers pusher`) on a simulator without hosts, with
/// a namespace of its own for its Translations.
pub struct PusherAlone {
    pub client: Client,
    pub sim: SimHandle,
    pub admin: AdminClient,
    pub ns: String,
    /// Translations in `ns`.
    pub api: Api<Translation>,
    pub pusher: Controllers,
}

impl PusherAlone {
    /// Starts it all; `prefix` names the namespace, `extra` are more pusher settings.
    pub async fn start(prefix: &str, extra: &[&str]) -> PusherAlone {
        let client = super::admin_client().await;
        let (sim, admin) = start_sim(&[]).await;
        let ns = super::unique_namespace(&client, prefix).await;
        let api = Api::namespaced(client.clone(), &ns);
        let args: Vec<&str> = ["--controllers", "pusher"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let pusher = Controllers::start(&super::control_plane().kubeconfig, &sim, &args).await;
        PusherAlone {
            client,
            sim,
            admin,
            ns,
            api,
            pusher,
        }
    }

    /// Stops the pusher and the simulator.
    pub async fn stop(self) {
        self.pusher.stop().await;
        self.sim.shutdown().await;
    }
}

/// Item paths every live Translation in the cluster asks for.
pub async fn expected_paths(client: &Client) -> BTreeSet<String> {
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list Translations");
    trs.items
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .flat_map(Translation::desired_paths)
        .collect()
}

/// True when every Translation is Ready and the backend holds exactly what they ask for.
pub async fn converged(client: &Client, admin: &AdminClient) -> Option<()> {
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    let all_ready = trs.items.iter().all(Translation::is_ready);
    if !all_ready {
        return None;
    }
    let expected = expected_paths(client).await;
    let actual = admin.state().await.ok()?.translation_paths();
    (expected == actual).then_some(())
}

/// Waits for convergence; on timeout reports the difference.
pub async fn wait_converged(client: &Client, admin: &AdminClient, what: &str) {
    wait_converged_within(client, admin, what, super::CEILING).await
}

/// [`wait_converged`] with a given hang guard.
pub async fn wait_converged_within(
    client: &Client,
    admin: &AdminClient,
    what: &str,
    deadline: Duration,
) {
    let start = std::time::Instant::now();
    while start.elapsed() < deadline {
        if converged(client, admin).await.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let expected = expected_paths(client).await;
    let actual = admin.state().await.expect("state").translation_paths();
    let missing: Vec<_> = expected.difference(&actual).collect();
    let extra: Vec<_> = actual.difference(&expected).collect();
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list");
    let not_ready: Vec<_> = trs
        .items
        .iter()
        .filter(|t| !t.is_ready())
        .map(|t| {
            format!(
                "{}/{} {:?}",
                t.metadata.namespace.clone().unwrap_or_default(),
                t.metadata.name.clone().unwrap_or_default(),
                t.status.as_ref().map(|s| &s.conditions)
            )
        })
        .collect();
    panic!("not converged ({what}): missing {missing:?}, extra {extra:?}, not ready {not_ready:?}");
}

/// What the objects in the cluster call for, computed with the pure translators (as the
/// controllers do, with the default tenant and version, and endpoints from EndpointSlices
/// when the apiserver serves them; NetworkPolicies' when there are any, as the
/// `networkpolicy` controller translates them): the Translations (`ns/name`) and the
/// backend item paths of their resources.
#[derive(Debug, Default)]
pub struct Expected {
    /// `ns/name` → the item paths of its resources.
    pub translations: std::collections::BTreeMap<String, BTreeSet<String>>,
    /// Every Translation's item paths.
    pub paths: BTreeSet<String>,
}

/// [`Expected`] of the cluster as it is now; `Err` names the read that failed (an apiserver
/// still coming back, for the callers that poll).
pub async fn expected_from_cluster(client: &Client) -> Result<Expected, String> {
    use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use midonet_kube_controllers::translate::slices::{
        discover, translate_with_slices, EndpointSliceV1Beta1, EndpointsSource,
    };
    use midonet_translators::{DesiredTranslation, SliceView, TranslatorConfig};
    use std::collections::BTreeMap;

    let lp = ListParams::default();
    let live = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.deletion_timestamp.is_none()
    };
    let nodes = Api::<Node>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list Nodes: {e}"))?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list Pods: {e}"))?
        .items;
    let services = Api::<Service>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list Services: {e}"))?
        .items;
    let endpoints = Api::<Endpoints>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list Endpoints: {e}"))?
        .items;
    let policies = Api::<NetworkPolicy>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list NetworkPolicies: {e}"))?
        .items;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&lp)
        .await
        .map_err(|e| format!("list Namespaces: {e}"))?
        .items;
    // Where the controllers read endpoints from, decided as they decide it.
    let slices: Option<Vec<EndpointSlice>> = match discover(client)
        .await
        .map_err(|e| format!("discovery: {e}"))?
    {
        EndpointsSource::SlicesV1 => Some(
            Api::<EndpointSlice>::all(client.clone())
                .list(&lp)
                .await
                .map_err(|e| format!("list EndpointSlices: {e}"))?
                .items,
        ),
        EndpointsSource::SlicesV1Beta1 => Some(
            Api::<EndpointSliceV1Beta1>::all(client.clone())
                .list(&lp)
                .await
                .map_err(|e| format!("list EndpointSlices: {e}"))?
                .items
                .into_iter()
                .map(EndpointSlice::from)
                .collect(),
        ),
        EndpointsSource::Endpoints => None,
    };
    // The version the controllers run at: the one the Translations carry (exactness
    // needs a single one; a bump in progress is not exact whichever is taken).
    let versions: BTreeSet<String> = Api::<Translation>::all(client.clone())
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter_map(|t| {
            t.label(midonet_translators::meta::VERSION_LABEL)
                .map(str::to_string)
        })
        .collect();
    let mut cfg = TranslatorConfig::default();
    if let (1, Some(v)) = (versions.len(), versions.first()) {
        cfg.version = v.clone();
    }
    let node_by_name: BTreeMap<String, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, n)))
        .collect();
    let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    };
    let svc_by_key: BTreeMap<(String, String), &Service> =
        services.iter().map(|s| (key(&s.metadata), s)).collect();

    let mut all: Vec<DesiredTranslation> = midonet_translators::global(&cfg);
    for n in nodes.iter().filter(|n| live(&n.metadata)) {
        all.extend(midonet_translators::node(&cfg, n).translations);
    }
    for p in pods.iter().filter(|p| live(&p.metadata)) {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| node_by_name.get(n).copied());
        all.extend(midonet_translators::pod(&cfg, p, node).translations);
    }
    match &slices {
        // The Service controller translates a Service with its merged slices.
        Some(slices) => {
            for s in services.iter().filter(|s| live(&s.metadata)) {
                let views = slices
                    .iter()
                    .filter(|e| live(&e.metadata))
                    .map(SliceView::from);
                all.extend(translate_with_slices(&cfg, s, views).translations);
            }
        }
        None => {
            for s in services.iter().filter(|s| live(&s.metadata)) {
                all.extend(midonet_translators::service(&cfg, s).translations);
            }
            for e in endpoints.iter().filter(|e| live(&e.metadata)) {
                let svc = svc_by_key.get(&key(&e.metadata)).copied();
                all.extend(midonet_translators::endpoints(&cfg, e, svc).translations);
            }
        }
    }
    // The NetworkPolicy controller's: each live policy's Translations and the address
    // groups of the selectors they use (none without a policy).
    let live_policies: Vec<&NetworkPolicy> =
        policies.iter().filter(|np| live(&np.metadata)).collect();
    if !live_policies.is_empty() {
        let cluster = midonet_translators::PolicyCluster::new(
            namespaces.iter().filter(|ns| live(&ns.metadata)),
            pods.iter().filter(|p| live(&p.metadata)),
        );
        for np in &live_policies {
            all.extend(midonet_translators::network_policy(&cfg, np, &cluster).translations);
        }
        all.extend(midonet_translators::address_groups(
            &cfg,
            live_policies.iter().copied(),
            &cluster,
        ));
    }
    let mut out = Expected::default();
    for d in &all {
        let paths: BTreeSet<String> = d
            .resources
            .iter()
            .map(|e| {
                Resource::from_entry(e)
                    .expect("translators make valid resources")
                    .item_path()
            })
            .collect();
        out.paths.extend(paths.iter().cloned());
        out.translations
            .insert(format!("{}/{}", d.namespace, d.name), paths);
    }
    Ok(out)
}

fn tr_key(t: &Translation) -> String {
    format!(
        "{}/{}",
        t.metadata.namespace.clone().unwrap_or_default(),
        t.metadata.name.clone().unwrap_or_default()
    )
}

/// Resources of the simulator that claim the same identity as another one: the same path
/// twice, Bridges, Routers or Chains with the same tenant and name, and Routes or Rules
/// identical but for their id (and a rule's position) on the same router or chain.
pub fn duplicates(state: &StateDump) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut seen: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for e in &state.resources {
        seen.entry(format!("path {}", e.path))
            .or_default()
            .push(&e.path);
        let identity = match e.kind.as_str() {
            "Bridge" | "Router" | "Chain" => Some(format!(
                "{} tenant {} name {}",
                e.kind,
                e.body.get("tenantId").unwrap_or(&serde_json::Value::Null),
                e.body.get("name").unwrap_or(&serde_json::Value::Null)
            )),
            "Route" | "Rule" => {
                let mut body = e.body.clone();
                if let Some(o) = body.as_object_mut() {
                    o.remove("id");
                    o.remove("position");
                }
                Some(format!("{} parent {} body {body}", e.kind, e.parent))
            }
            _ => None,
        };
        if let Some(identity) = identity {
            seen.entry(identity).or_default().push(&e.path);
        }
    }
    seen.into_iter()
        .filter(|(_, paths)| paths.len() > 1)
        .map(|(identity, paths)| format!("{identity}: {paths:?}"))
        .collect()
}

/// `Ok` when the cluster and the backend are exactly what the objects call for: the
/// Translations are exactly those the translators make of the objects, none is
/// Terminating, every one is Ready=True, and the simulator holds exactly the resources
/// they ask for (item paths; hosts and `Local` routes aside), none twice.
pub async fn exact_state(client: &Client, admin: &AdminClient) -> Result<(), String> {
    exact_state_except(client, admin, &BTreeSet::new()).await
}

/// [`exact_state`], except that the Translations in `excluded` (`ns/name`, expected to
/// exist) need not be Ready, and their resources may or may not be in the backend.
pub async fn exact_state_except(
    client: &Client,
    admin: &AdminClient,
    excluded: &BTreeSet<String>,
) -> Result<(), String> {
    let mut expected = expected_from_cluster(client).await?;
    let excluded_paths: BTreeSet<String> = excluded
        .iter()
        .filter_map(|k| expected.translations.get(k))
        .flatten()
        .cloned()
        .collect();
    expected.paths.retain(|p| !excluded_paths.contains(p));
    let trs = Api::<Translation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list Translations: {e}"))?
        .items;
    let names: BTreeSet<String> = trs.iter().map(tr_key).collect();
    let expected_names: BTreeSet<String> = expected.translations.keys().cloned().collect();
    let mut problems = Vec::new();
    let sample = |v: Vec<&String>| {
        let n = v.len();
        let shown: Vec<&String> = v.into_iter().take(10).collect();
        format!("{n} {shown:?}")
    };
    let missing_trs: Vec<&String> = expected_names.difference(&names).collect();
    let extra_trs: Vec<&String> = names.difference(&expected_names).collect();
    if !missing_trs.is_empty() {
        problems.push(format!("Translations missing: {}", sample(missing_trs)));
    }
    if !extra_trs.is_empty() {
        problems.push(format!("Translations extra: {}", sample(extra_trs)));
    }
    let terminating: Vec<String> = trs
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_some())
        .map(tr_key)
        .collect();
    if !terminating.is_empty() {
        problems.push(format!(
            "Translations Terminating: {}",
            sample(terminating.iter().collect())
        ));
    }
    let not_ready: Vec<String> = trs
        .iter()
        .filter(|t| !t.is_ready() && !excluded.contains(&tr_key(t)))
        .map(|t| {
            let c = t
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            format!(
                "{} ({})",
                tr_key(t),
                c.map(|c| format!("{}: {}", c.reason, c.message))
                    .unwrap_or_else(|| "no Ready condition".into())
            )
        })
        .collect();
    if !not_ready.is_empty() {
        problems.push(format!(
            "Translations not Ready: {}",
            sample(not_ready.iter().collect())
        ));
    }
    let asked: BTreeSet<String> = trs
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .flat_map(|t| t.desired_resources().to_vec())
        .filter_map(|e| Resource::from_entry(&e).ok())
        .map(|r| r.item_path())
        .filter(|p| !excluded_paths.contains(p))
        .collect();
    if asked != expected.paths {
        problems.push(format!(
            "Translations ask for other resources than the translators make: missing {}, extra {}",
            sample(expected.paths.difference(&asked).collect()),
            sample(asked.difference(&expected.paths).collect())
        ));
    }
    let state = admin
        .state()
        .await
        .map_err(|e| format!("simulator state: {e}"))?;
    let mut actual = state.translation_paths();
    actual.retain(|p| !excluded_paths.contains(p));
    if actual != expected.paths {
        problems.push(format!(
            "backend: missing {}, extra {}",
            sample(expected.paths.difference(&actual).collect()),
            sample(actual.difference(&expected.paths).collect())
        ));
    }
    let dups = duplicates(&state);
    if !dups.is_empty() {
        problems.push(format!("backend duplicates: {dups:?}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Waits until [`exact_state`] holds; after `deadline` (a hang guard) panics with what
/// differs.
pub async fn wait_exact(client: &Client, admin: &AdminClient, what: &str, deadline: Duration) {
    wait_exact_except(client, admin, &BTreeSet::new(), what, deadline).await
}

/// Waits until [`exact_state_except`] holds; panics after `deadline` (a hang guard).
pub async fn wait_exact_except(
    client: &Client,
    admin: &AdminClient,
    excluded: &BTreeSet<String>,
    what: &str,
    deadline: Duration,
) {
    let start = std::time::Instant::now();
    let mut last_report = std::time::Instant::now();
    loop {
        let why = match exact_state_except(client, admin, excluded).await {
            Ok(()) => return,
            Err(why) => why,
        };
        if start.elapsed() > deadline {
            panic!("not exactly converged ({what}) after {deadline:?}:\n{why}");
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "[{:.0}s] {what}: not converged yet:\n{why}",
                start.elapsed().as_secs_f64()
            );
            last_report = std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

/// The `addressFrom` of every natTarget of the simulator's DNAT rules whose targets use
/// `port`, sorted (a target in several rules is listed once per rule).
pub async fn dnat_targets(admin: &AdminClient, port: u64) -> Vec<String> {
    let state = admin.state().await.unwrap();
    let mut out: Vec<String> = state
        .entries_of(midonet_translators::Kind::Rule)
        .iter()
        .filter(|r| r.body.get("type").and_then(|t| t.as_str()) == Some("dnat"))
        .flat_map(|r| {
            r.body
                .get("natTargets")
                .and_then(|t| t.as_array())
                .cloned()
                .unwrap_or_default()
        })
        .filter(|t| t.get("portFrom").and_then(|p| p.as_u64()) == Some(port))
        .filter_map(|t| Some(t.get("addressFrom")?.as_str()?.to_string()))
        .collect();
    out.sort();
    out
}
