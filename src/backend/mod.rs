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

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use client::BackendClient;
pub use error::BackendError;
pub use http::Reachability;
pub use metrics::ClientMetrics;

/// A string that must not be shown: `Debug` and `Display` print `[redacted]`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that has to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_string())
    }
}

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
