//! Client of the MidoNet REST API.
//!
//! [`BackendClient`] pushes typed [`Resource`](midonet_translators::model::Resource)s:
//! `apply` creates or updates one (POST, then PUT or an existence check on conflict),
//! `delete` removes one (a missing resource counts as deleted). It logs in with the
//! configured credentials when the API asks for it, retries transient failures with
//! exponential backoff, and records Prometheus metrics under the original controller's
//! names.
//!
//! Credentials never appear in logs or errors: the password and the session token are
//! [`Secret`]s, whose `Debug` and `Display` print `[redacted]`.

mod client;
mod error;
mod http;
mod metrics;

use std::path::PathBuf;
use std::time::Duration;

pub use client::BackendClient;
pub use error::BackendError;
pub use http::Reachability;
pub use metrics::ClientMetrics;
pub use midonet_translators::Secret;

/// How to reach and authenticate to the MidoNet API.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// API base including its path prefix, e.g. `http://midonet-api:8181/midonet-api`.
    /// Resource paths (`/bridges`, …) are appended to it.
    pub url: url::Url,
    pub username: String,
    pub password: Secret,
    /// Sent as `X-Auth-Project` when logging in.
    pub project: String,
    /// PEM file with extra CA certificates to trust for `https` URLs.
    pub ca_file: Option<PathBuf>,
    /// Limit of one HTTP request (connect, send, receive).
    pub timeout: Duration,
    /// How long transient failures of one call are retried before they are returned.
    pub retry_max_elapsed: Duration,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            // A constant, so this cannot fail.
            url: url::Url::parse("http://127.0.0.1:8181/midonet-api")
                .expect("the default API URL is valid"),
            username: String::new(),
            password: Secret::default(),
            project: String::new(),
            ca_file: None,
            timeout: Duration::from_secs(10),
            retry_max_elapsed: Duration::from_secs(30),
        }
    }
}
