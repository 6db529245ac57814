//! Errors of the MidoNet API client.

use midonet_translators::model::Kind;
use uuid::Uuid;

/// Why a call to the MidoNet API failed. Response bodies are included (truncated) for
/// diagnosis; the password and the session token never are.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("invalid MidoNet API client configuration: {0}")]
    Config(String),

    #[error("cannot register the MidoNet client metrics: {0}")]
    Metrics(String),

    /// No HTTP answer: connection refused or dropped, timeout. Retried before it surfaces.
    #[error("{method} {path}: {message}")]
    Transport {
        method: String,
        path: String,
        message: String,
        timeout: bool,
    },

    /// 5xx answers until the retry budget ran out.
    #[error("{method} {path}: MidoNet API unavailable (HTTP {status}): {body}")]
    Unavailable {
        method: String,
        path: String,
        status: u16,
        body: String,
    },

    /// POST answered 404 or 400: something the resource refers to (its parent, a chain,
    /// a next-hop port) does not exist yet. Retry after the referent is pushed.
    #[error("{kind} {method} {path}: a referent does not exist yet (HTTP {status}): {body}")]
    ReferentMissing {
        kind: Kind,
        method: String,
        path: String,
        status: u16,
        body: String,
    },

    /// POST answered 409 but the resource was not found right after: it is being deleted
    /// concurrently, or the conflict was about something else. Retry.
    #[error("{kind} {path}: creation conflicted, but the resource does not exist")]
    VanishedAfterConflict { kind: Kind, path: String },

    /// MidoNet answered 409 to binding a port to a host interface, and the binding is not
    /// there: the host is in no tunnel zone (MidoNet binds ports only on hosts it can tunnel
    /// to), or the port or the interface is bound to something else already. Not retried by
    /// the client; a later attempt succeeds once the host has joined a tunnel zone.
    #[error(
        "MidoNet refused to bind port {port} to interface {interface:?} of host {host} \
         (HTTP 409: {body}); the host must be a member of a tunnel zone (the Node needs a \
         tunnel endpoint IP), and neither the port nor the interface may be bound already"
    )]
    BindingRefused {
        host: Uuid,
        port: Uuid,
        interface: String,
        body: String,
    },

    /// The port is already linked to another peer.
    #[error("port {port} is linked to {actual}, not to {wanted}")]
    LinkConflict {
        port: Uuid,
        wanted: Uuid,
        actual: Uuid,
    },

    /// `/login` refused the credentials.
    #[error("login to the MidoNet API failed (HTTP {status}): {body}")]
    LoginFailed { status: u16, body: String },

    /// Still 401 after logging in again.
    #[error("{method} {path}: unauthorized even after logging in again")]
    Unauthorized { method: String, path: String },

    /// Any other unexpected status.
    #[error("{method} {path}: unexpected HTTP {status}: {body}")]
    Status {
        method: String,
        path: String,
        status: u16,
        body: String,
    },

    /// A 2xx answer whose body is not what MidoNet sends.
    #[error("{method} {path}: cannot decode the response: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
}

impl BackendError {
    /// True when a later retry may succeed: transport failures, unavailability, referents
    /// not there yet, races with deletions, a host that has not joined a tunnel zone yet.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            BackendError::Transport { .. }
                | BackendError::Unavailable { .. }
                | BackendError::ReferentMissing { .. }
                | BackendError::VanishedAfterConflict { .. }
                | BackendError::BindingRefused { .. }
                | BackendError::LinkConflict { .. }
        )
    }

    /// True for a port binding MidoNet refused because the host is in no tunnel zone
    /// (going by MidoNet's message).
    pub fn is_host_not_in_tunnel_zone(&self) -> bool {
        matches!(self, BackendError::BindingRefused { body, .. }
            if body.to_ascii_lowercase().contains("tunnel zone"))
    }

    /// True for "a referent is not there yet" (POST answered 404 or 400).
    pub fn is_referent_missing(&self) -> bool {
        matches!(self, BackendError::ReferentMissing { .. })
    }

    /// The HTTP status of the answer behind the error, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            BackendError::Unavailable { status, .. }
            | BackendError::ReferentMissing { status, .. }
            | BackendError::LoginFailed { status, .. }
            | BackendError::Status { status, .. } => Some(*status),
            BackendError::Unauthorized { .. } => Some(401),
            BackendError::BindingRefused { .. } => Some(409),
            _ => None,
        }
    }

    /// True for a 404 answer to a GET of something that does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BackendError::Status { status: 404, .. })
    }
}
