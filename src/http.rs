//! The operations endpoints: `/metrics` (Prometheus text), `/healthz` (no controller loop
//! is wedged, see [`crate::health`]) and `/readyz` (every registered readiness check passes).

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;

use crate::health::Health;

#[derive(Clone)]
struct OpsState {
    registry: Registry,
    health: Health,
}

async fn metrics(State(state): State<OpsState>) -> impl IntoResponse {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&state.registry.gather(), &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
            buf,
        )
            .into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

async fn healthz(State(state): State<OpsState>) -> impl IntoResponse {
    let wedges = state.health.liveness().wedges();
    let mut body = String::new();
    for controller in state.health.liveness().controllers() {
        let mine: Vec<_> = wedges
            .iter()
            .filter(|w| w.controller() == controller)
            .collect();
        if mine.is_empty() {
            body.push_str(&format!("[+] {controller}\n"));
        }
        for w in mine {
            body.push_str(&format!("[-] {w}\n"));
        }
    }
    if wedges.is_empty() {
        body.push_str("ok\n");
        (StatusCode::OK, body)
    } else {
        // The liveness probe is about to restart the process: say why.
        for w in &wedges {
            tracing::error!(controller = w.controller(), "not live: {w}");
        }
        body.push_str("not ok\n");
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    let mut body = String::new();
    for (name, ok) in state.health.checks() {
        body.push_str(&format!("[{}] {name}\n", if ok { "+" } else { "-" }));
    }
    if state.health.is_ready() {
        body.push_str("ready\n");
        (StatusCode::OK, body)
    } else {
        body.push_str("not ready\n");
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

/// Binds the operations endpoints; returns the bound address and the serving future.
pub async fn bind(
    addr: SocketAddr,
    registry: Registry,
    health: Health,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>>,
)> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(OpsState { registry, health });
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, async move { axum::serve(listener, app).await }))
}
