//! Handlers of the admin API under `/_sim/` (shapes in [`super::admin`]). Not subject to
//! authentication, faults or request counting.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::admin::{Faults, HostSeed, RequestCounts, StateDump};
use super::api::empty;
use super::SimState;

pub(crate) const ADMIN_PREFIX: &str = "/_sim";

pub(crate) fn routes() -> Router<Arc<SimState>> {
    Router::new()
        .route("/_sim/state", get(state))
        .route("/_sim/requests", get(requests))
        .route("/_sim/requests/reset", post(reset_requests))
        .route("/_sim/faults", get(faults).put(set_faults))
        .route("/_sim/hosts", get(hosts).post(add_hosts))
        .route("/_sim/wipe", post(wipe))
        .route("/_sim/tokens", get(tokens))
        .route("/_sim/tokens/expire", post(expire_tokens))
        .route("/_sim/health", get(|| async { "ok" }))
}

async fn state(State(sim): State<Arc<SimState>>) -> Json<StateDump> {
    Json(sim.with_store(|s| s.dump()))
}

async fn requests(State(sim): State<Arc<SimState>>) -> Json<RequestCounts> {
    Json(sim.counter.snapshot())
}

async fn reset_requests(State(sim): State<Arc<SimState>>) -> Response {
    sim.counter.reset();
    empty(StatusCode::NO_CONTENT)
}

async fn faults(State(sim): State<Arc<SimState>>) -> Json<Faults> {
    Json(sim.faults.get())
}

async fn set_faults(State(sim): State<Arc<SimState>>, Json(faults): Json<Faults>) -> Json<Faults> {
    tracing::info!(?faults, "faults changed");
    Json(sim.faults.set(faults))
}

async fn hosts(State(sim): State<Arc<SimState>>) -> Json<Vec<HostSeed>> {
    Json(sim.with_store(|s| {
        s.hosts
            .iter()
            .map(|(id, h)| HostSeed::new(h.name.clone(), *id))
            .collect()
    }))
}

async fn add_hosts(
    State(sim): State<Arc<SimState>>,
    Json(seeds): Json<Vec<HostSeed>>,
) -> Json<Vec<HostSeed>> {
    let pairs: Vec<(String, uuid::Uuid)> = seeds.into_iter().map(|h| (h.name, h.id)).collect();
    sim.with_store(|s| s.add_hosts(&pairs));
    sim.mark_dirty();
    hosts(State(sim)).await
}

#[derive(Deserialize)]
struct WipeParams {
    #[serde(default)]
    hosts: bool,
}

async fn wipe(State(sim): State<Arc<SimState>>, Query(params): Query<WipeParams>) -> Response {
    sim.with_store(|s| s.wipe(params.hosts));
    sim.mark_dirty();
    empty(StatusCode::NO_CONTENT)
}

async fn tokens(State(sim): State<Arc<SimState>>) -> Json<Vec<String>> {
    Json(sim.auth.live_tokens())
}

async fn expire_tokens(State(sim): State<Arc<SimState>>) -> Response {
    sim.auth.expire_all();
    empty(StatusCode::NO_CONTENT)
}
