//! `midonet-kube-controllers run`: wires configuration, clients, leader election, the
//! operations endpoints and the enabled controllers together, and stops them.
//!
//! **Guaranteed**: the operations endpoints serve from the start (a standby is ready: it
//! can take over); controllers run only while this instance leads (or without election),
//! on one Translation informer and one event publisher, the global Translations written
//! before any other translator starts. Two ways to stop, deliberately different:
//! - **SIGTERM** (or the embedder's `stop` token) drains: every controller stops taking
//!   work and finishes its reconciles in flight, for at most `SHUTDOWN_GRACE`; then the
//!   lease is released, so a standby takes over at once;
//! - **a lost lease** aborts every controller task at once, in flight or not, also while
//!   they are still starting, and `run` returns an error: another replica may lead
//!   already, and a write finished now would race it. Tasks a controller starts are owned
//!   by it ([`crate::scaffold::OwnedTask`]) and go with it.
//!
//! **Caveat**: an abort stops a reconcile between two requests, not a request in flight:
//! one apiserver or MidoNet request may still land after the lease is lost, which the
//! pusher's recorded status and the next leader's resync make good.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use prometheus::{IntGauge, Registry};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::authz::{Attempt, Authz};
use crate::backend::BackendClient;
use crate::clients::{backend_client, kube_client, ClientError};
use crate::config::{Config, Controller};
use crate::events::EventPublisher;
use crate::health::Health;
use crate::informer::TranslationInformer;
use crate::leader::{LeaderConfig, LeaderElector, LeaderError, LeaderGuard};
use crate::pusher::{PusherConfig, PusherContext, PusherMetrics};
use crate::recovery::{CrashRecovery, RunMarker};
use crate::retry::RetryPolicy;
use crate::scaffold::OwnedTask;
use crate::sweep::SweepMetrics;
use crate::translate::dispatch::{for_each_translator, Translators};
use crate::translate::run as translate;
use crate::translate::slices::EndpointsSource;
use crate::translate::{RunnerConfig, TranslatorContext, TranslatorKind, TranslatorMetrics};

/// How long in-flight work may take after SIGTERM before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// API discovery at start-up (which endpoints source the Service controller reads).
const DISCOVERY_RETRY: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(500), Duration::from_secs(10));

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot serve the metrics address: {0}")]
    Listen(std::io::Error),
    #[error("leader election: {0}")]
    Leader(String),
    #[error("lost the leader lease; stopped all work")]
    LostLease,
}

/// Sets up logging (text or JSON) per the configuration. Fields of the spans a line is
/// logged in (see [`crate::logfields`]) are printed before the message in text, and under
/// `span`/`spans` in JSON, where the event's own fields are at the top level.
pub fn init_logging(level: &str, json: bool) {
    use std::io::IsTerminal;
    let mut filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // kube-runtime's watcher warns about a 403 on every retry, with a debug dump of the
    // error; crate::authz reports those as named authorization errors, once a minute.
    // Whoever asks for kube_runtime, debug or trace gets them all the same.
    let verbose = ["kube_runtime", "debug", "trace"]
        .iter()
        .any(|w| level.contains(w));
    if !verbose {
        if let Ok(quiet) = "kube_runtime::watcher=error".parse() {
            filter = filter.add_directive(quiet);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal, not in `kubectl logs` or files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}

async fn sigterm() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs until SIGTERM/SIGINT (Ok) or a fatal error (Err, e.g. the lease was lost).
pub async fn run(cfg: Config) -> Result<(), RunError> {
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            sigterm().await;
            tracing::info!("termination signal: finishing in-flight work");
            stop.cancel();
        });
    }
    run_until(cfg, stop).await
}

/// Runs until `stop` is cancelled (Ok) or a fatal error (Err). Embeddable (tests, demo).
///
/// `stop` (SIGTERM) drains: the controllers take no new work and finish what is in flight,
/// for at most [`SHUTDOWN_GRACE`], and the lease is released. A lost lease aborts every
/// controller task at once, in flight or not, and returns [`RunError::LostLease`]: another
/// replica may lead already, and whatever this one still wrote would race it.
pub async fn run_until(cfg: Config, stop: CancellationToken) -> Result<(), RunError> {
    tracing::info!(config = ?cfg, "starting midonet-kube-controllers");
    for d in &cfg.deprecated {
        d.log();
    }
    let registry = Registry::new();
    let health = Health::with_limits(cfg.liveness);
    let leader_gauge = leader_gauge(&registry)?;
    let authz = Authz::new(&registry)?;

    let (addr, serve) = crate::http::bind(cfg.metrics_address, registry.clone(), health.clone())
        .await
        .map_err(RunError::Listen)?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    let http = OwnedTask::spawn(async move {
        if let Err(error) = serve.await {
            tracing::error!(%error, "the operations endpoints stopped");
        }
    });

    let kube = kube_client(&cfg).await?;
    crate::compat::log_apiserver_version(&kube).await;
    let (backend, _follow_backend) = backend_followed(&cfg, &registry, &health)?;
    let guard = match lease(&cfg, &kube, &health, &authz, &stop).await? {
        Lease::Held(guard) => guard,
        Lease::Stopped => return Ok(()),
    };
    leader_gauge.set(1);
    tracing::info!("leading: starting controllers {:?}", cfg.controllers);
    let result = {
        let lost = async {
            match &guard {
                Some(g) => g.lost().await,
                None => std::future::pending().await,
            }
        };
        let mut lost = std::pin::pin!(lost);
        tokio::select! {
            started = start_controllers(&cfg, kube, backend, &registry, &authz, &health, &stop) => {
                match started {
                    Ok(tasks) => run_controllers(tasks, &health, &stop, lost).await,
                    Err(err) => Err(err),
                }
            }
            // What was started is dropped, and so aborted, with the future.
            _ = &mut lost => Err(lost_lease()),
        }
    };
    leader_gauge.set(0);
    if let (Some(g), Ok(())) = (guard, &result) {
        g.release().await;
        tracing::info!("leader lease released");
    }
    drop(http);
    result
}

fn leader_gauge(registry: &Registry) -> Result<IntGauge, RunError> {
    let gauge = IntGauge::new(
        "midonet_kube_controllers_leader",
        "Whether this instance holds the leader lease and runs controllers (1) or stands by (0).",
    )?;
    registry.register(Box::new(gauge.clone()))?;
    Ok(gauge)
}

/// The MidoNet API client when an enabled controller needs it, and the task that keeps
/// the readiness check of the API true exactly while it answers.
fn backend_followed(
    cfg: &Config,
    registry: &Registry,
    health: &Health,
) -> Result<(Option<BackendClient>, Option<OwnedTask>), RunError> {
    if !cfg.needs_backend() {
        return Ok((None, None));
    }
    let backend = backend_client(cfg, registry)?;
    // Must not outlive the run (an embedded run returns while its runtime goes on).
    let follow = OwnedTask::spawn(crate::health::follow_backend(
        backend.clone(),
        health.clone(),
        cfg.backend_probe_period,
    ));
    Ok((Some(backend), Some(follow)))
}

/// Where the leader election left this instance.
enum Lease {
    /// Leading: with the lease's guard, or without election (`None`).
    Held(Option<LeaderGuard>),
    /// Stopped while standing by.
    Stopped,
}

/// Waits for the leader lease when elections are on. Standby: ready (it can take over),
/// but running nothing until it holds the lease.
async fn lease(
    cfg: &Config,
    kube: &Client,
    health: &Health,
    authz: &Authz,
    stop: &CancellationToken,
) -> Result<Lease, RunError> {
    const LEADER_CHECK: &str = "leader-election";
    health.register(LEADER_CHECK);
    health.set(LEADER_CHECK, true);
    if !cfg.leader_elect {
        return Ok(Lease::Held(None));
    }
    let identity = identity();
    let elector = LeaderElector::new(
        kube.clone(),
        LeaderConfig {
            lease_name: cfg.leader_election_name.clone(),
            lease_namespace: cfg.leader_election_namespace.clone(),
            identity: identity.clone(),
            lease_duration: cfg.lease_duration,
            renew_deadline: cfg.lease_duration.mul_f64(2.0 / 3.0),
            retry_period: (cfg.lease_duration / 7).max(Duration::from_millis(200)),
        },
    );
    tracing::info!(%identity, lease = %cfg.leader_election_name, "waiting for the leader lease");
    tokio::select! {
        res = elector.acquire() => {
            let guard = res.map_err(|e| {
                if let LeaderError::Denied { namespace, source, .. } = &e {
                    authz.report(Attempt::new("get", "leases", Some(namespace)), source);
                }
                RunError::Leader(e.to_string())
            })?;
            Ok(Lease::Held(Some(guard)))
        }
        _ = stop.cancelled() => Ok(Lease::Stopped),
    }
}

/// This process's name in the Leases it holds: the Pod's, else the host's and the PID.
fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "midonet-kube-controllers".into()),
            std::process::id()
        )
    })
}

fn lost_lease() -> RunError {
    // No split brain: stop everything at once, without finishing anything.
    tracing::error!("leader lease lost: stopping all controllers now");
    RunError::LostLease
}

/// Runs the started controllers until `stop` (drained, see [`run_until`]) or `lost`
/// (aborted).
async fn run_controllers(
    mut tasks: JoinSet<()>,
    health: &Health,
    stop: &CancellationToken,
    lost: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    tokio::select! {
        _ = stop.cancelled() => {
            health.liveness().stopping();
            // Controllers stop taking work and finish in-flight reconciles (bounded).
            let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
            if drained.is_err() {
                tracing::warn!("in-flight work did not finish within {SHUTDOWN_GRACE:?}; exiting anyway");
            }
            Ok(())
        }
        _ = lost => {
            tasks.abort_all();
            Err(lost_lease())
        }
    }
}

/// The future every controller stops at: `stop` cancelled.
fn shutdown_on(stop: &CancellationToken) -> impl std::future::Future<Output = ()> + Send + Sync {
    let stop = stop.clone();
    async move { stop.cancelled().await }
}

/// Starts the enabled controllers on one Translation informer and one event publisher;
/// each runs until `stop` is cancelled.
async fn start_controllers(
    cfg: &Config,
    kube: Client,
    backend: Option<BackendClient>,
    registry: &Registry,
    authz: &Authz,
    health: &Health,
    stop: &CancellationToken,
) -> Result<JoinSet<()>, RunError> {
    let mut tasks = JoinSet::new();
    // One Translation informer for the translators and the pusher (see crate::informer).
    let mut informer = TranslationInformer::new(kube.clone(), authz.clone(), health.clone());
    let events = EventPublisher::start(kube.clone(), authz.clone(), cfg.event_limits, registry)?;
    let pusher = match (cfg.enabled(Controller::Pusher), backend.clone()) {
        (true, Some(backend)) => Some(pusher_context(
            cfg,
            kube.clone(),
            backend,
            registry,
            authz,
            &events,
            &mut informer,
        )?),
        _ => None,
    };
    let translators = translator_context(cfg, &kube, registry, authz, &events, &mut informer)?;
    let store = informer.store.clone();
    let sweep_metrics = match backend {
        Some(_) => Some(SweepMetrics::new(registry)?),
        None => None,
    };
    match pusher {
        Some(ctx) => {
            let probe = health.liveness().register(crate::pusher::CONTROLLER);
            let translations = informer.start();
            let shutdown = shutdown_on(stop);
            let recovery = crash_recovery(cfg, &ctx, sweep_metrics.clone());
            tasks.spawn(crate::pusher::run(
                ctx,
                translations,
                store,
                probe,
                recovery,
                shutdown,
            ));
        }
        None if translators.is_some() => {
            tasks.spawn(informer.run());
        }
        None => {}
    }
    if let (true, Some(backend)) = (cfg.enabled(Controller::NodeAnnotator), backend.clone()) {
        let ctx = Arc::new(crate::nodeannotator::AnnotatorContext::new(
            kube.clone(),
            backend,
            authz.clone(),
            &events,
        ));
        let (workers, shutdown) = (cfg.translator_workers, shutdown_on(stop));
        tasks.spawn(crate::nodeannotator::run(
            ctx,
            health.clone(),
            workers,
            shutdown,
        ));
    }
    if cfg.enabled(Controller::LbIpam) {
        start_lbipam(&mut tasks, cfg, &kube, authz, &events, health, stop);
    }
    if let Some(sweep) = orphan_sweep(cfg, &kube, backend, sweep_metrics, stop) {
        tasks.spawn(sweep);
    }
    if let Some(shared) = translators {
        start_translators(&mut tasks, cfg, &kube, shared, health, stop).await;
    }
    Ok(tasks)
}

/// The LB IPAM, when it has pools.
fn start_lbipam(
    tasks: &mut JoinSet<()>,
    cfg: &Config,
    kube: &Client,
    authz: &Authz,
    events: &EventPublisher,
    health: &Health,
    stop: &CancellationToken,
) {
    if cfg.lb_pools.is_empty() {
        tracing::info!("LB IPAM off: no --lb-pool given");
        return;
    }
    tracing::info!(pools = ?cfg.lb_pools, "starting the LB IPAM");
    tasks.spawn(crate::lbipam::run(
        kube.clone(),
        cfg.lb_pools.clone(),
        authz.clone(),
        events.clone(),
        health.clone(),
        shutdown_on(stop),
    ));
}

/// The pusher's crash recovery, unless turned off.
fn crash_recovery(
    cfg: &Config,
    ctx: &PusherContext,
    metrics: Option<SweepMetrics>,
) -> Option<CrashRecovery> {
    if !cfg.crash_recovery {
        tracing::info!("crash recovery off");
        return None;
    }
    let name = crate::recovery::marker_name(&cfg.leader_election_name);
    let namespace = &cfg.leader_election_namespace;
    Some(CrashRecovery {
        marker: RunMarker::new(ctx.kube.clone(), namespace, name, identity()),
        kube: ctx.kube.clone(),
        backend: ctx.backend.clone(),
        tenant: cfg.tenant.clone(),
        metrics: metrics?,
    })
}

/// The periodic orphan sweep, when configured.
fn orphan_sweep(
    cfg: &Config,
    kube: &Client,
    backend: Option<BackendClient>,
    metrics: Option<SweepMetrics>,
    stop: &CancellationToken,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
    let (period, backend, metrics) = (cfg.orphan_sweep_period?, backend?, metrics?);
    let delete = cfg.orphan_sweep_delete;
    tracing::info!(?period, delete, "starting the orphan sweep");
    Some(crate::sweep::sweep_loop(
        kube.clone(),
        backend,
        cfg.tenant.clone(),
        period,
        delete,
        metrics,
        shutdown_on(stop),
    ))
}

/// The pusher's context over `informer`.
fn pusher_context(
    cfg: &Config,
    kube: Client,
    backend: BackendClient,
    registry: &Registry,
    authz: &Authz,
    events: &EventPublisher,
    informer: &mut TranslationInformer,
) -> Result<Arc<PusherContext>, RunError> {
    let config = PusherConfig {
        workers: cfg.pusher_workers,
        resync: cfg.resync_period,
        verify_period: cfg.verify_period,
        verify_rate: cfg.verify_rate,
        version: cfg.translation_version.clone(),
        cutover: cfg.bump_cutover,
        compact_after: cfg.compact_managed_fields_after,
        ..PusherConfig::default()
    };
    let metrics = PusherMetrics::new(registry)?;
    let authz = authz.clone();
    Ok(PusherContext::new(
        kube, backend, metrics, config, authz, events, informer,
    ))
}

/// The translators' context over `informer`, when a translator is enabled.
fn translator_context(
    cfg: &Config,
    kube: &Client,
    registry: &Registry,
    authz: &Authz,
    events: &EventPublisher,
    informer: &mut TranslationInformer,
) -> Result<Option<Arc<TranslatorContext>>, RunError> {
    if !cfg.controllers.iter().any(|c| c.is_translator()) {
        return Ok(None);
    }
    let config = midonet_translators::TranslatorConfig {
        tenant: cfg.tenant.clone(),
        version: cfg.translation_version.clone(),
        edge: cfg.edge.clone(),
    };
    let metrics = TranslatorMetrics::new(registry)?;
    let shared = TranslatorContext::new(
        kube.clone(),
        config,
        metrics,
        authz.clone(),
        events,
        informer,
    );
    Ok(Some(shared))
}

/// Starts the global Translations' controller once the global Translations are written
/// (every other Translation refers to them), then the enabled translators. Starts nothing
/// more once `stop` is cancelled.
async fn start_translators(
    tasks: &mut JoinSet<()>,
    cfg: &Config,
    kube: &Client,
    shared: Arc<TranslatorContext>,
    health: &Health,
    stop: &CancellationToken,
) {
    let translators: Vec<Controller> = cfg
        .controllers
        .iter()
        .copied()
        .filter(|c| c.is_translator())
        .collect();
    let runner = RunnerConfig {
        workers: cfg.translator_workers,
        resync: cfg.resync_period,
    };
    let mut globals = crate::translate::globals::Globals::new(shared.clone());
    tokio::select! {
        _ = globals.ensure() => {}
        _ = stop.cancelled() => return,
    }
    tasks.spawn(globals.run(runner.resync, shutdown_on(stop)));
    // Without the endpoints controller the Service controller translates Services only.
    let source = if translators.contains(&Controller::Endpoints) {
        match endpoints_source(kube, stop).await {
            Some(source) => source,
            None => return,
        }
    } else {
        EndpointsSource::Endpoints
    };
    if source != EndpointsSource::Endpoints
        && translators.contains(&Controller::Endpoints)
        && !cfg.enabled(Controller::Service)
    {
        tracing::warn!(
            "endpoints come from EndpointSlices, which the service controller translates; it is not enabled, so no endpoints are translated"
        );
    }
    let shutdown = || shutdown_on(stop);
    let mut spawn = SpawnTranslators {
        tasks,
        shared,
        runner,
        health: health.clone(),
        shutdown: &shutdown,
    };
    for_each_translator(&translators, source, &mut spawn);
}

/// Starts each translator it is given, until `shutdown` resolves.
struct SpawnTranslators<'a, F> {
    tasks: &'a mut JoinSet<()>,
    shared: Arc<TranslatorContext>,
    runner: RunnerConfig,
    health: Health,
    shutdown: &'a F,
}

impl<F, Fut> SpawnTranslators<'_, F>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    /// Runs the watch of a cache shared by several translators, for the first of them
    /// (the watch of a cache runs once: later runs return at once).
    fn watch<K>(&mut self, cache: crate::cache::SharedCache<K>)
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let stop = (self.shutdown)();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = cache.run() => {}
                _ = stop => {}
            }
        });
    }
}

impl<F, Fut> Translators for SpawnTranslators<'_, F>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    fn kind<K: TranslatorKind>(&mut self) {
        if let Some(cache) = K::shared_cache(&self.shared) {
            self.watch(cache);
        }
        self.tasks.spawn(translate::<K>(
            self.shared.clone(),
            self.runner.clone(),
            self.health.clone(),
            (self.shutdown)(),
        ));
    }

    fn network_policy(&mut self) {
        self.watch(self.shared.pods.clone());
        self.tasks.spawn(crate::translate::netpol::run(
            self.shared.clone(),
            self.runner.clone(),
            self.health.clone(),
            (self.shutdown)(),
        ));
    }
}

/// Where endpoints are read from, by API discovery; retried until it answers. `None` once
/// stopped.
async fn endpoints_source(kube: &Client, stop: &CancellationToken) -> Option<EndpointsSource> {
    let mut failures: u32 = 0;
    loop {
        match crate::translate::slices::discover(kube).await {
            Ok(source) => {
                tracing::info!(%source, "endpoints are read from {source}");
                return Some(source);
            }
            Err(error) => {
                tracing::warn!(%error, "API discovery failed; retrying");
            }
        }
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(DISCOVERY_RETRY.delay(failures)) => {}
            _ = stop.cancelled() => return None,
        }
    }
}
