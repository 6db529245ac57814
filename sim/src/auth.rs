//! Token authentication like MidoNet's: `POST /login` with basic auth (and
//! `X-Auth-Project`) answers `{key, expires}`; every other API request needs a valid
//! `X-Auth-Token`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;
use base64::Engine;

use super::store::ApiError;
use super::SimAuth;

pub(crate) const TOKEN_HEADER: &str = "x-auth-token";
const PROJECT_HEADER: &str = "x-auth-project";

/// Issued tokens and their expiry.
pub(crate) struct Authenticator {
    config: Option<SimAuth>,
    tokens: Mutex<HashMap<String, Instant>>,
}

/// A successful login.
pub(crate) struct Login {
    pub key: String,
    /// Expiry as MidoNet formats it (`EEE, dd-MM-yyyy HH:mm:ss z`).
    pub expires: String,
}

impl Authenticator {
    pub fn new(config: Option<SimAuth>) -> Authenticator {
        Authenticator {
            config,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.is_some()
    }

    /// Checks the basic credentials and project; issues a token. With authentication
    /// disabled any login succeeds (tokens are then never checked).
    pub fn login(&self, headers: &HeaderMap) -> Result<Login, ApiError> {
        let ttl = self
            .config
            .as_ref()
            .map_or(Duration::from_secs(3600), |c| c.token_ttl);
        if let Some(cfg) = &self.config {
            let (user, password) = basic_credentials(headers)?;
            if user != cfg.username || password != cfg.password.expose() {
                return Err(ApiError::new(401, "wrong username or password"));
            }
            let project = headers
                .get(PROJECT_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !cfg.project.is_empty() && project != cfg.project {
                return Err(ApiError::new(401, "wrong project"));
            }
        }
        let key = hex::encode(rand::random::<[u8; 16]>());
        if let Ok(mut tokens) = self.tokens.lock() {
            let now = Instant::now();
            tokens.retain(|_, expiry| *expiry > now);
            tokens.insert(key.clone(), now + ttl);
        }
        let expires = chrono::DateTime::<chrono::Utc>::from(SystemTime::now() + ttl)
            .format("%a, %d-%m-%Y %H:%M:%S UTC")
            .to_string();
        Ok(Login { key, expires })
    }

    /// 401 unless the request carries a valid, unexpired token (when enabled).
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(token) = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) else {
            return Err(ApiError::new(401, "authentication token required"));
        };
        let valid = self
            .tokens
            .lock()
            .map(|tokens| {
                tokens
                    .get(token)
                    .is_some_and(|expiry| *expiry > Instant::now())
            })
            .unwrap_or(false);
        if valid {
            Ok(())
        } else {
            Err(ApiError::new(
                401,
                "invalid or expired authentication token",
            ))
        }
    }

    /// The tokens currently valid (for tests that check tokens never leak into logs).
    pub fn live_tokens(&self) -> Vec<String> {
        let now = Instant::now();
        self.tokens
            .lock()
            .map(|t| {
                t.iter()
                    .filter(|(_, expiry)| **expiry > now)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets every token, as if they had all expired.
    pub fn expire_all(&self) {
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.clear();
        }
    }
}

fn basic_credentials(headers: &HeaderMap) -> Result<(String, String), ApiError> {
    let unauthorized = |m: &str| ApiError::new(401, m);
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| unauthorized("basic authorization required"))?;
    let encoded = header
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case("basic "))
        .map(|_| header[6..].trim())
        .ok_or_else(|| unauthorized("basic authorization required"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| unauthorized("malformed basic authorization"))?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| unauthorized("malformed basic authorization"))?;
    Ok((user.to_string(), password.to_string()))
}
