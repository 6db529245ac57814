//! A MidoNet REST API simulator, for tests, the benchmark and demos.
//!
//! It serves the subset of the API this project uses under `/midonet-api`, with MidoNet's
//! paths, media types, status codes, cascades and reference checks, from an in-memory
//! store (optionally snapshotted to a file), and an admin API under `/_sim/` to inspect
//! the state, count requests and inject faults. See `docs/simulator.md`.
//!
//! Embed it with [`start`]; the `backend-sim` subcommand runs it with [`run_cli`].
//!
//! It is a crate of its own, depending on the typed model (`midonet-translators`) and the
//! data-plane model (`midonet-dataplane`) only, so that the controllers' library carries no
//! test double: the main package uses it for `backend-sim`, the benchmark and the tests.

pub mod admin;
mod admin_api;
mod api;
mod auth;
mod cli;
mod conn;
mod counters;
mod faults;
mod snapshot;
mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

use admin::Faults;
use auth::Authenticator;
use conn::{ConnInfo, SimListener};
use counters::RequestCounter;
use faults::FaultInjector;
use midonet_translators::Secret;
use store::Store;

pub use cli::{run_cli, SimArgs};

/// Credentials the simulated API requires when authentication is on.
#[derive(Clone, Debug)]
pub struct SimAuth {
    pub username: String,
    pub password: Secret,
    /// Required `X-Auth-Project` at login; empty accepts any project.
    pub project: String,
    /// Lifetime of a session token.
    pub token_ttl: Duration,
}

/// How to run the simulator.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `None`: no authentication (any login succeeds, tokens are not checked).
    pub auth: Option<SimAuth>,
    /// Hosts (name, id) that `GET /hosts` lists.
    pub hosts: Vec<(String, Uuid)>,
    /// JSON file the state is kept in across restarts.
    pub snapshot: Option<PathBuf>,
    /// Faults in force from the start.
    pub faults: Faults,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            auth: None,
            hosts: Vec::new(),
            snapshot: None,
            faults: Faults::default(),
        }
    }
}

/// Why the simulator cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("snapshot: {0}")]
    Snapshot(String),
    #[error("hosts: {0}")]
    Hosts(String),
    #[error("invalid arguments: {0}")]
    Args(String),
    #[error("server failed: {0}")]
    Serve(String),
}

/// Locks the store, using it as it is if a handler panicked while holding it: every update
/// leaves the maps consistent enough for a test double, and one bug must not stop the
/// simulator from serving the rest of a test.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// State shared by the request handlers.
pub(crate) struct SimState {
    store: Mutex<Store>,
    auth: Authenticator,
    faults: FaultInjector,
    counter: RequestCounter,
    /// Bumped after every change when a snapshot file is configured.
    changes: Option<watch::Sender<u64>>,
}

impl SimState {
    fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        // A panic while holding the lock cannot leave the maps inconsistent in a way
        // that matters to a test double; keep serving.
        let mut store = crate::lock(&self.store);
        f(&mut store)
    }

    fn mark_dirty(&self) {
        if let Some(tx) = &self.changes {
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// A running simulator. Dropping it also stops the server and the snapshot writer, in the
/// background; [`SimHandle::shutdown`] waits for both.
pub struct SimHandle {
    addr: SocketAddr,
    stop_server: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
    stop_writer: Option<oneshot::Sender<()>>,
    writer: Option<JoinHandle<()>>,
    state: Arc<SimState>,
}

/// Reads the simulator's store in-process: what `GET /_sim/state` answers, without the
/// HTTP round trip and the JSON of the whole dump. Cheap to clone; for the flow probe
/// (`midonet_testkit::probe`), which samples the live topology many times a second.
#[derive(Clone)]
pub struct StoreReader(Arc<SimState>);

impl StoreReader {
    /// The whole store, as the admin API dumps it. The store is locked only while the
    /// dump is made.
    pub fn dump(&self) -> admin::StateDump {
        self.0.with_store(|s| s.dump())
    }

    /// Every stored resource in the typed model, rules chain by chain in evaluation order
    /// (build with `RuleOrder::Listed`).
    pub fn resources(&self) -> Result<Vec<midonet_translators::model::Resource>, String> {
        self.dump().typed_resources()
    }

    /// The records (`store::records`: a bridge with its tables, a port with its link and
    /// binding, a chain with its rules in order, …) that changed since `cursor` last read
    /// them, with their resources now, and those gone: what
    /// `midonet_dataplane::LiveTopology::apply` takes. The first reading with a new cursor
    /// reports every record. The store's maps log the records their changes touch, so a
    /// reading costs the changes since the cursor, not the store; the store is locked
    /// while the changed records are rendered, parsing happens after.
    pub fn changes(
        &self,
        cursor: &mut ReadCursor,
    ) -> Result<Vec<midonet_dataplane::RecordChange>, String> {
        let changes = self.0.with_store(|s| s.changes_since(&mut cursor.0));
        let mut out = Vec::with_capacity(changes.changed.len() + changes.gone.len());
        for (key, entries) in changes.changed {
            match admin::typed_entries(&entries) {
                Ok(resources) => out.push((key, Some(resources))),
                Err(e) => {
                    // The reader drops what it had: the next reading is a full one.
                    *cursor = ReadCursor::default();
                    return Err(e);
                }
            }
        }
        out.extend(changes.gone.into_iter().map(|key| (key, None)));
        Ok(out)
    }
}

/// Where a reader of [`StoreReader::changes`] is: how far it has read each change log of
/// the store, and which records it has.
#[derive(Clone, Debug, Default)]
pub struct ReadCursor(store::Cursor);

impl SimHandle {
    /// An in-process reader of the store.
    pub fn reader(&self) -> StoreReader {
        StoreReader(self.state.clone())
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API base, e.g. `http://127.0.0.1:8181/midonet-api`.
    pub fn api_url(&self) -> url::Url {
        self.url(api::API_PREFIX)
    }

    /// The admin API base, e.g. `http://127.0.0.1:8181/_sim/`.
    pub fn admin_url(&self) -> url::Url {
        self.url(&format!("{}/", admin_api::ADMIN_PREFIX))
    }

    fn url(&self, path: &str) -> url::Url {
        // A socket address always forms a valid http URL (IPv6 is bracketed).
        url::Url::parse(&format!("http://{}{path}", self.addr))
            .expect("a socket address forms a valid URL")
    }

    /// Stops serving (in-flight requests finish), then writes the final snapshot.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop_server.take() {
            let _ = tx.send(());
        }
        let server = &mut self.server;
        if tokio::time::timeout(Duration::from_secs(5), &mut *server)
            .await
            .is_err()
        {
            tracing::warn!("simulator connections did not close in time; aborting them");
            server.abort();
        }
        if let Some(tx) = self.stop_writer.take() {
            let _ = tx.send(());
        }
        if let Some(writer) = self.writer.take() {
            let _ = writer.await;
        }
    }
}

/// Starts the simulator on `cfg.listen` and serves in a background task.
pub async fn start(cfg: SimConfig) -> Result<SimHandle, SimError> {
    let mut store = match &cfg.snapshot {
        Some(path) => snapshot::load(path)?.unwrap_or_default(),
        None => Store::default(),
    };
    store.add_hosts(&cfg.hosts);
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| SimError::Bind {
            addr: cfg.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SimError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let (changes_tx, changes_rx) = watch::channel(0u64);
    let state = Arc::new(SimState {
        store: Mutex::new(store),
        auth: Authenticator::new(cfg.auth.clone()),
        faults: FaultInjector::new(cfg.faults.clone()),
        counter: RequestCounter::default(),
        changes: cfg.snapshot.as_ref().map(|_| changes_tx),
    });
    let app = admin_api::routes()
        .fallback(api::handle)
        .with_state(state.clone());
    let (stop_server, stop_server_rx) = oneshot::channel::<()>();
    let serve = axum::serve(
        SimListener::new(listener),
        app.into_make_service_with_connect_info::<ConnInfo>(),
    )
    .with_graceful_shutdown(async move {
        let _ = stop_server_rx.await;
    });
    let server = tokio::spawn(async move { serve.await });
    let (stop_writer, writer) = match cfg.snapshot.clone() {
        Some(path) => {
            let (tx, rx) = oneshot::channel();
            let task = tokio::spawn(snapshot::writer(state.clone(), path, changes_rx, rx));
            (Some(tx), Some(task))
        }
        None => (None, None),
    };
    tracing::info!(%addr, auth = cfg.auth.is_some(), "MidoNet API simulator listening");
    Ok(SimHandle {
        addr,
        stop_server: Some(stop_server),
        server,
        stop_writer,
        writer,
        state,
    })
}
