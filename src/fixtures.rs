//! Unit-test fixtures: a mocked apiserver, in the manner of kube-rs' `controller-rs`
//! (`fixtures.rs`, built on `tower-test`), so that a reconcile's Kubernetes I/O is tested
//! in a few lines, without a control plane.
//!
//! A test takes a [`Client`] and its [`ApiServer`] from [`mock_apiserver`], has the code
//! under test use the client, and plays a scenario on the apiserver side: the requests the
//! code must make, in order ([`Exchange`]: method, path, what the body must hold), each
//! with the answer it gets, and what must hold when it comes ([`Exchange::when`], e.g. the
//! backend already cleaned before a finalizer is removed). [`ApiServer::play`] panics
//! (failing the test) on a request other than the next expected one, and on one the
//! scenario does not expect at all; [`Played::done`] fails when an expected request never
//! came.
//!
//! **Assumes** the code under test makes the requests of the scenario one after the other
//! (the scenario is a sequence). Requests of another component sharing the client (events)
//! would interleave: give that component its own client ([`answer_all`]).
//!
//! The pusher's tests use the same pieces: a `PusherContext` over [`mock_apiserver`]'s
//! client, its Translations seeded with `TranslationInformer::replay`, the MidoNet API
//! simulator as its backend, and a scenario of its status and finalizer writes (and, on
//! a second mocked apiserver, of its events); see `pusher::reconcile_tests`.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// How long [`Played::done`] waits for the scenario's requests.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(5);

/// A client whose requests go to the returned [`ApiServer`].
pub fn mock_apiserver() -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer(handle))
}

/// A client whose every request is answered `201 Created` with its own body: for a
/// component whose requests a test does not look at (the event publisher).
pub fn answer_all() -> Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let body = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let reply = Response::builder()
                .status(StatusCode::CREATED)
                .body(Body::from(body.to_vec()));
            if let Ok(reply) = reply {
                send.send_response(reply);
            }
        }
    });
    Client::new(service, "default")
}

/// The apiserver side of [`mock_apiserver`].
pub struct ApiServer(Handle);

/// One request the scenario expects, and its answer.
pub struct Exchange {
    method: Method,
    path: String,
    body: Vec<(String, Value)>,
    absent: Vec<String>,
    status: StatusCode,
    answer: Value,
    check: Option<Box<dyn FnOnce() + Send>>,
}

impl Exchange {
    /// A `method` request of `path` (without the query), answered `200 {}` unless told
    /// otherwise.
    pub fn new(method: Method, path: &str) -> Self {
        Exchange {
            method,
            path: path.to_string(),
            body: Vec::new(),
            absent: Vec::new(),
            status: StatusCode::OK,
            answer: json!({}),
            check: None,
        }
    }

    /// `check` holds when the request comes (it panics otherwise, failing the scenario):
    /// what the code under test must have done before making it.
    pub fn when(mut self, check: impl FnOnce() + Send + 'static) -> Self {
        self.check = Some(Box::new(check));
        self
    }

    /// The request's body must hold `value` at the JSON `pointer` (e.g.
    /// `/preconditions/uid`).
    pub fn with(mut self, pointer: &str, value: Value) -> Self {
        self.body.push((pointer.to_string(), value));
        self
    }

    /// The request's body must hold nothing at the JSON `pointer`.
    pub fn without(mut self, pointer: &str) -> Self {
        self.absent.push(pointer.to_string());
        self
    }

    /// Answered `status` with `body`.
    pub fn answer(mut self, status: u16, body: Value) -> Self {
        self.status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.answer = body;
        self
    }

    /// Answered with the apiserver's failure `code` (a `Status` with `reason`).
    pub fn fail(self, code: u16, reason: &str) -> Self {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{reason} (test)"), "reason": reason, "code": code,
        });
        self.answer(code, status)
    }

    async fn check_and_answer(mut self, request: Request<Body>) -> Response<Body> {
        let what = format!("{} {}", request.method(), request.uri());
        if let Some(check) = self.check.take() {
            check();
        }
        assert_eq!(request.method(), &self.method, "{what}");
        assert_eq!(request.uri().path(), self.path, "{what}");
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        for (pointer, want) in &self.body {
            assert_eq!(
                body.pointer(pointer),
                Some(want),
                "{what}: {pointer} in {body}"
            );
        }
        for pointer in &self.absent {
            assert_eq!(body.pointer(pointer), None, "{what}: {pointer} in {body}");
        }
        let answer = serde_json::to_vec(&self.answer).unwrap_or_default();
        Response::builder()
            .status(self.status)
            .body(Body::from(answer))
            .unwrap_or_else(|_| Response::new(Body::from(Vec::new())))
    }
}

impl ApiServer {
    /// Plays `scenario` in the background; then answers nothing more (a further request
    /// stays unanswered, and [`Played::done`] fails on it).
    pub fn play(self, scenario: Vec<Exchange>) -> Played {
        let ApiServer(mut handle) = self;
        Played(tokio::spawn(async move {
            for exchange in scenario {
                let (request, send) = handle.next_request().await.unwrap_or_else(|| {
                    panic!(
                        "the client went before {} {}",
                        exchange.method, exchange.path
                    )
                });
                send.send_response(exchange.check_and_answer(request).await);
            }
            handle
        }))
    }
}

/// A scenario being played.
pub struct Played(tokio::task::JoinHandle<Handle>);

impl Played {
    /// Waits for every expected request; fails on a missing one, on an unexpected one made
    /// meanwhile, and on one made within a moment after.
    pub async fn done(self) {
        let mut handle = tokio::time::timeout(SCENARIO_TIMEOUT, self.0)
            .await
            .expect("the scenario's requests did not all come")
            .expect("the scenario failed");
        let extra = tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await;
        if let Ok(Some((request, _))) = extra {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

/// The path of the Translation collection of `namespace`, or of `name` in it.
pub fn translations_path(namespace: &str, name: Option<&str>) -> String {
    let collection = format!("/apis/midonet.org/v1/namespaces/{namespace}/translations");
    match name {
        Some(name) => format!("{collection}/{name}"),
        None => collection,
    }
}

/// The MidoNet API simulator started with `cfg`, and a backend client of it (metrics in
/// `registry`) that gives up on a failing request quickly.
pub async fn simulator(
    cfg: midonet_sim::SimConfig,
    registry: &prometheus::Registry,
) -> (crate::backend::BackendClient, midonet_sim::SimHandle) {
    let sim = midonet_sim::start(cfg).await.expect("the simulator starts");
    let backend = crate::backend::BackendClient::new(
        crate::backend::BackendConfig {
            url: sim.api_url(),
            username: "admin".into(),
            password: midonet_translators::Secret::new("admin"),
            project: "admin".into(),
            ca_file: None,
            timeout: Duration::from_secs(2),
            retry_max_elapsed: Duration::from_millis(100),
        },
        registry,
    )
    .expect("a backend client");
    (backend, sim)
}
