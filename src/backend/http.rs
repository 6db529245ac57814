//! One logical API call: send, retry transient failures, log in again on 401.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::error::BackendError;
use super::metrics::ClientMetrics;
use super::{BackendConfig, Secret};
use crate::retry::RetryPolicy;

const AUTH_TOKEN_HEADER: &str = "X-Auth-Token";
const AUTH_PROJECT_HEADER: &str = "X-Auth-Project";
/// Longest response body kept in an error.
const MAX_ERROR_BODY: usize = 1024;

/// A request to make, relative to the API base.
pub(crate) struct Call<'a> {
    pub method: Method,
    /// Path below the API base, with its query if any (`/bridges?tenant_id=x`).
    pub path: &'a str,
    /// The `resource` metrics label (a media type).
    pub resource: &'a str,
    pub content_type: Option<&'a str>,
    pub accept: Option<&'a str>,
    pub body: Option<Vec<u8>>,
    /// Whether a 500 is retried. MidoNet answers 500 to some duplicate creations
    /// (MNA-1315), which the caller handles as a conflict instead.
    pub retry_internal_error: bool,
}

/// An HTTP answer.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub body: String,
}

/// The session token of the last login.
#[derive(Default)]
struct Session {
    token: Option<Secret>,
}

/// Why one attempt failed, for the retry loop.
enum Attempt {
    NoAnswer { message: String, timeout: bool },
    Answer(Reply),
}

pub(crate) struct Transport {
    http: reqwest::Client,
    base: String,
    username: String,
    password: Secret,
    project: String,
    retry_max_elapsed: Duration,
    session: RwLock<Session>,
    /// Changes at every login, so that concurrent callers hitting 401 log in only once.
    generation: AtomicU64,
    login_lock: tokio::sync::Mutex<()>,
    metrics: ClientMetrics,
    /// What the last attempt of any request showed about the API's reachability.
    reachability: std::sync::Mutex<Reachability>,
}

/// Whether the MidoNet API answers, as the last request to it showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Reachability {
    /// No request has been made yet.
    #[default]
    Unknown,
    /// The API answered (with anything but 502, 503 or 504).
    Reachable { at: Instant },
    /// The request got no answer, or a 502, 503 or 504.
    Unreachable { at: Instant, error: String },
}

impl Reachability {
    pub fn is_reachable(&self) -> bool {
        matches!(self, Reachability::Reachable { .. })
    }

    /// How long ago the last request was made; `None` before the first.
    pub fn age(&self) -> Option<Duration> {
        match self {
            Reachability::Unknown => None,
            Reachability::Reachable { at } | Reachability::Unreachable { at, .. } => {
                Some(at.elapsed())
            }
        }
    }
}

impl std::fmt::Display for Reachability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reachability::Unknown => f.write_str("no request made yet"),
            Reachability::Reachable { .. } => f.write_str("the API answers"),
            Reachability::Unreachable { error, .. } => f.write_str(error),
        }
    }
}

impl Transport {
    pub(crate) fn new(
        cfg: BackendConfig,
        metrics: ClientMetrics,
    ) -> Result<Transport, BackendError> {
        let url = &cfg.url;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BackendError::Config(format!(
                "the API URL must be http or https, not {:?}",
                url.scheme()
            )));
        }
        if url.cannot_be_a_base() || url.host_str().is_none() {
            return Err(BackendError::Config("the API URL has no host".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Refused rather than used: a URL is printed in logs and errors.
            return Err(BackendError::Config(
                "the API URL must not contain credentials; set the username and password instead"
                    .into(),
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(BackendError::Config(
                "the API URL must not have a query or fragment".into(),
            ));
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(16);
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                BackendError::Config(format!("cannot read CA file {}: {e}", path.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                BackendError::Config(format!("bad CA file {}: {e}", path.display()))
            })?;
            if certs.is_empty() {
                return Err(BackendError::Config(format!(
                    "CA file {} holds no certificate",
                    path.display()
                )));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| BackendError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Transport {
            http,
            base: url.as_str().trim_end_matches('/').to_string(),
            username: cfg.username,
            password: cfg.password,
            project: cfg.project,
            retry_max_elapsed: cfg.retry_max_elapsed,
            session: RwLock::new(Session::default()),
            generation: AtomicU64::new(0),
            login_lock: tokio::sync::Mutex::new(()),
            metrics,
            reachability: std::sync::Mutex::default(),
        })
    }

    pub(crate) fn is_logged_in(&self) -> bool {
        self.session
            .read()
            .map(|s| s.token.is_some())
            .unwrap_or(false)
    }

    pub(crate) fn reachability(&self) -> Reachability {
        self.reachability
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    fn record(&self, reachability: Reachability) {
        if let Ok(mut r) = self.reachability.lock() {
            *r = reachability;
        }
    }

    /// One `GET` of the API root, without retries and without credentials: whether the API
    /// answers now (any answer but 502, 503 or 504).
    pub(crate) async fn probe(&self) -> Result<(), BackendError> {
        let call = Call {
            method: Method::GET,
            path: "",
            resource: "application",
            content_type: None,
            accept: None,
            body: None,
            retry_internal_error: false,
        };
        match self.send_once(&call, false).await {
            Attempt::Answer(reply) if !unavailable(reply.status) => Ok(()),
            Attempt::Answer(reply) => Err(BackendError::Unavailable {
                method: "GET".into(),
                path: "/".into(),
                status: reply.status.as_u16(),
                body: self.scrub(&reply.body),
            }),
            Attempt::NoAnswer { message, timeout } => Err(BackendError::Transport {
                method: "GET".into(),
                path: "/".into(),
                message,
                timeout,
            }),
        }
    }

    fn token(&self) -> Option<Secret> {
        self.session.read().ok().and_then(|s| s.token.clone())
    }

    /// Makes the call; on 401 logs in again (once) and repeats it.
    pub(crate) async fn call(&self, call: &Call<'_>) -> Result<Reply, BackendError> {
        let generation = self.generation.load(Ordering::SeqCst);
        let reply = self.send_with_retry(call, false).await?;
        if reply.status != StatusCode::UNAUTHORIZED {
            return Ok(reply);
        }
        tracing::info!(method = %call.method, path = call.path, "MidoNet API asks to log in");
        self.relogin(generation).await?;
        let reply = self.send_with_retry(call, false).await?;
        if reply.status == StatusCode::UNAUTHORIZED {
            return Err(BackendError::Unauthorized {
                method: call.method.to_string(),
                path: call.path.to_string(),
            });
        }
        Ok(reply)
    }

    /// Logs in unless another caller already did since `seen_generation`.
    async fn relogin(&self, seen_generation: u64) -> Result<(), BackendError> {
        let _guard = self.login_lock.lock().await;
        if self.generation.load(Ordering::SeqCst) != seen_generation {
            return Ok(());
        }
        self.login_locked().await
    }

    pub(crate) async fn login(&self) -> Result<(), BackendError> {
        let _guard = self.login_lock.lock().await;
        self.login_locked().await
    }

    /// `POST /login` with basic auth; stores the returned token.
    async fn login_locked(&self) -> Result<(), BackendError> {
        #[derive(Deserialize)]
        struct Token {
            key: String,
            #[serde(default)]
            expires: Option<String>,
        }
        let call = Call {
            method: Method::POST,
            path: "/login",
            resource: "login",
            content_type: None,
            accept: None,
            body: None,
            retry_internal_error: true,
        };
        let reply = self.send_with_retry(&call, true).await?;
        if !reply.status.is_success() {
            let body = self.scrub(&reply.body);
            return Err(match reply.status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => BackendError::LoginFailed {
                    status: reply.status.as_u16(),
                    body,
                },
                status => BackendError::Status {
                    method: "POST".into(),
                    path: "/login".into(),
                    status: status.as_u16(),
                    body,
                },
            });
        }
        let token: Token = serde_json::from_str(&reply.body).map_err(|e| BackendError::Decode {
            method: "POST".into(),
            path: "/login".into(),
            // serde's message names the position, never the content.
            message: format!("not a token: {e}"),
        })?;
        if let Ok(mut session) = self.session.write() {
            session.token = Some(Secret::new(token.key));
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            expires = token.expires.as_deref().unwrap_or("unknown"),
            "logged in to the MidoNet API"
        );
        Ok(())
    }

    /// Sends with exponential backoff on transport errors and 5xx answers.
    async fn send_with_retry(&self, call: &Call<'_>, login: bool) -> Result<Reply, BackendError> {
        let max = self.retry_max_elapsed;
        let backoff = RetryPolicy {
            first: (max / 20).clamp(Duration::from_millis(10), Duration::from_millis(200)),
            max: Duration::from_secs(5),
            jitter: 0.5,
        }
        .exponential(max);
        let operation = || async {
            match self.send_once(call, login).await {
                Attempt::Answer(reply) if self.is_transient(call, reply.status) => {
                    Err(backoff::Error::transient(Attempt::Answer(reply)))
                }
                Attempt::Answer(reply) => Ok(reply),
                no_answer => Err(backoff::Error::transient(no_answer)),
            }
        };
        let notify = |attempt: Attempt, wait: Duration| match attempt {
            Attempt::Answer(reply) => tracing::warn!(
                method = %call.method, path = call.path, status = reply.status.as_u16(),
                retry_in_ms = wait.as_millis() as u64, "MidoNet API unavailable, retrying"
            ),
            Attempt::NoAnswer { message, .. } => tracing::warn!(
                method = %call.method, path = call.path, error = %message,
                retry_in_ms = wait.as_millis() as u64, "MidoNet API unreachable, retrying"
            ),
        };
        match backoff::future::retry_notify(backoff, operation, notify).await {
            Ok(reply) => Ok(reply),
            Err(Attempt::Answer(reply)) => Err(BackendError::Unavailable {
                method: call.method.to_string(),
                path: call.path.to_string(),
                status: reply.status.as_u16(),
                body: self.scrub(&reply.body),
            }),
            Err(Attempt::NoAnswer { message, timeout }) => Err(BackendError::Transport {
                method: call.method.to_string(),
                path: call.path.to_string(),
                message,
                timeout,
            }),
        }
    }

    fn is_transient(&self, call: &Call<'_>, status: StatusCode) -> bool {
        status.is_server_error()
            && (call.retry_internal_error || status != StatusCode::INTERNAL_SERVER_ERROR)
    }

    async fn send_once(&self, call: &Call<'_>, login: bool) -> Attempt {
        let url = format!("{}{}", self.base, call.path);
        let mut req = self.http.request(call.method.clone(), &url);
        if let Some(ct) = call.content_type {
            req = req.header(reqwest::header::CONTENT_TYPE, ct);
        }
        if let Some(accept) = call.accept {
            req = req.header(reqwest::header::ACCEPT, accept);
        }
        if login {
            // reqwest marks the Authorization header sensitive, so it is not printed.
            req = req
                .basic_auth(&self.username, Some(self.password.expose()))
                .header(AUTH_PROJECT_HEADER, &self.project);
        } else if let Some(token) = self.token() {
            match reqwest::header::HeaderValue::from_str(token.expose()) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    req = req.header(AUTH_TOKEN_HEADER, value);
                }
                Err(_) => tracing::warn!("the session token is not a valid header value"),
            }
        }
        if let Some(body) = &call.body {
            req = req.body(body.clone());
        }
        let method = call.method.as_str().to_ascii_lowercase();
        let started = Instant::now();
        let outcome = async {
            let resp = req.send().await?;
            let status = resp.status();
            let body = resp.text().await?;
            Ok::<_, reqwest::Error>(Reply { status, body })
        }
        .await;
        match outcome {
            Ok(reply) => {
                let elapsed = started.elapsed();
                self.metrics.answered(
                    &method,
                    call.resource,
                    reply.status.as_u16(),
                    elapsed.as_secs_f64(),
                );
                tracing::debug!(
                    method = %call.method, path = call.path, status = reply.status.as_u16(),
                    elapsed_ms = elapsed.as_millis() as u64, "MidoNet API answered"
                );
                self.record(if unavailable(reply.status) {
                    Reachability::Unreachable {
                        at: Instant::now(),
                        error: format!("{} {} answered {}", call.method, call.path, reply.status),
                    }
                } else {
                    Reachability::Reachable { at: Instant::now() }
                });
                Attempt::Answer(reply)
            }
            Err(err) => {
                self.metrics.failed(&method, call.resource);
                let message = describe(&err);
                self.record(Reachability::Unreachable {
                    at: Instant::now(),
                    error: format!("{} {}: {message}", call.method, call.path),
                });
                Attempt::NoAnswer {
                    message,
                    timeout: err.is_timeout(),
                }
            }
        }
    }

    /// Truncates a response body and removes any credential from it.
    pub(crate) fn scrub(&self, body: &str) -> String {
        let mut out: String = body.chars().take(MAX_ERROR_BODY).collect();
        if body.chars().count() > MAX_ERROR_BODY {
            out.push('…');
        }
        let mut secrets = vec![self.password.clone()];
        secrets.extend(self.token());
        // Very short strings would match by coincidence and garble the body.
        for secret in secrets.iter().filter(|s| s.expose().len() >= 4) {
            out = out.replace(secret.expose(), Secret::REDACTED);
        }
        out
    }
}

/// An answer that says the API is not available (a gateway's or MidoNet's own): 500 is
/// not one, MidoNet answers it to some duplicate creations (MNA-1315).
fn unavailable(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// The error with its causes (`error sending request: connection refused`).
fn describe(err: &reqwest::Error) -> String {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
