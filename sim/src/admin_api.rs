//! Handlers of the admin API under `/_sim/` (shapes in [`super::admin`]). Not subject to
//! authentication, faults or request counting.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use midonet_dataplane::{trace, RuleOrder, Topology, Trace};
use serde::Deserialize;

use super::admin::{Faults, HostSeed, RequestCounts, StateDump, TraceRequest};
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
        .route("/_sim/trace", post(trace_connection))
}

/// Why a trace request is not answered with a trace.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TraceFailure {
    /// The request is malformed (400).
    BadRequest(String),
    /// The model cannot trace it, e.g. an unknown source (422).
    Untraceable(String),
    /// A stored body does not parse into the model (500: a simulator bug).
    Store(String),
}

/// Traces `body` (a [`TraceRequest`] as JSON) through the stored topology: pure, so the
/// handler only takes a snapshot of the store.
pub(crate) fn trace_dump(dump: &StateDump, body: &[u8]) -> Result<Trace, TraceFailure> {
    let req: TraceRequest = serde_json::from_slice(body)
        .map_err(|e| TraceFailure::BadRequest(format!("bad trace request: {e}")))?;
    let probe = req.probe.probe().map_err(TraceFailure::BadRequest)?;
    let resources = dump.typed_resources().map_err(TraceFailure::Store)?;
    // The dump lists rules chain by chain in evaluation order.
    let topo = Topology::new(resources, RuleOrder::Listed, req.attachments);
    trace(&topo, &probe).map_err(|e| TraceFailure::Untraceable(e.to_string()))
}

async fn trace_handler_answer(sim: &SimState, body: &[u8]) -> Response {
    let dump = sim.with_store(|s| s.dump());
    let (status, message) = match trace_dump(&dump, body) {
        Ok(t) => return Json(t).into_response(),
        Err(TraceFailure::BadRequest(m)) => (StatusCode::BAD_REQUEST, m),
        Err(TraceFailure::Untraceable(m)) => (StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(TraceFailure::Store(m)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("stored resource not readable by the model: {m}"),
        ),
    };
    (status, Json(serde_json::json!({"message": message}))).into_response()
}

async fn trace_connection(State(sim): State<Arc<SimState>>, body: Bytes) -> Response {
    trace_handler_answer(&sim, &body).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_requests_are_validated_before_tracing() {
        let dump = StateDump::default();
        assert!(matches!(
            trace_dump(&dump, br#"{"from":"pod/a/b","to":"nope"}"#),
            Err(TraceFailure::BadRequest(m)) if m.contains("IPv4:PORT")
        ));
        assert!(matches!(
            trace_dump(&dump, b"not json"),
            Err(TraceFailure::BadRequest(_))
        ));
        // Nothing plugged in: the model cannot start the connection.
        assert!(matches!(
            trace_dump(&dump, br#"{"from":"pod/a/b","to":"10.0.0.1:80","protocol":"udp","srcPort":1}"#),
            Err(TraceFailure::Untraceable(m)) if m.contains("pod/a/b")
        ));
    }
}
#[cfg(test)]
mod probe_request_tests {
    use super::*;

    #[test]
    fn the_trace_request_takes_the_probe_options() {
        let dump = StateDump::default();
        let body = br#"{"attachments":[],"from":"pod/a/b","to":"10.0.0.1:80","protocol":"icmp","srcIp":"10.0.0.9","tos":34,"dstMac":"02:00:00:00:00:01","answerUnreachable":3}"#;
        assert!(matches!(
            trace_dump(&dump, body),
            Err(TraceFailure::Untraceable(_))
        ));
        let req: TraceRequest = serde_json::from_slice(body).unwrap();
        let p = req.probe.probe().unwrap();
        assert_eq!(p.protocol, midonet_dataplane::Protocol::Icmp);
        assert_eq!((p.tos, p.answer_unreachable), (34, Some(3)));
        assert_eq!(p.src_ip, Some("10.0.0.9".parse().unwrap()));
        assert!(p.dst_mac.is_some());
    }
}
