//! The nodeannotator: gives each Node the annotations its translation needs.
//!
//! For a Node lacking them it sets `midonet.org/host-id` (the backend Host whose name is the
//! Node's name), `midonet.org/tunnel-zone-id` (`""`: the default zone) and
//! `midonet.org/tunnel-endpoint-ip` (the first InternalIP). Existing annotations are never
//! overwritten. A Node whose Host is not (yet) known to the backend is retried with backoff
//! and reported with a Warning event.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::{Client, Resource, ResourceExt};
use midonet_translators::meta::{
    HOST_ID_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION, TUNNEL_ZONE_ID_ANNOTATION,
};
use tracing::Instrument;

use crate::authz::{Attempt, Authz};
use crate::backend::BackendClient;
use crate::events::{EventPublisher, Events};
use crate::health::Health;
use crate::locks::lock;
use crate::retry::RetryPolicy;

/// The controller's name, as in `--controllers`.
pub const CONTROLLER: &str = "nodeannotator";
pub const READY_CHECK: &str = "nodeannotator-cache";
pub const HOST_NOT_FOUND: &str = "MidoNetHostNotFound";
pub const BACKEND_ERROR: &str = "MidoNetHostLookupFailed";

/// A Host is registered when its agent starts: a second, doubling to a minute.
const RETRY: RetryPolicy = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60));

pub struct AnnotatorContext {
    pub kube: Client,
    pub backend: BackendClient,
    pub events: Events,
    pub authz: Authz,
    failures: Mutex<HashMap<String, u32>>,
}

impl AnnotatorContext {
    pub fn new(
        kube: Client,
        backend: BackendClient,
        authz: Authz,
        events: &EventPublisher,
    ) -> Self {
        AnnotatorContext {
            events: events.for_controller("midonet-kube-controllers-nodeannotator"),
            kube,
            backend,
            authz,
            failures: Mutex::default(),
        }
    }

    fn failed(&self, node: &str) -> Duration {
        let mut f = lock(&self.failures);
        let n = f.entry(node.to_string()).or_default();
        *n = n.saturating_add(1);
        RETRY.delay(*n)
    }

    fn succeeded(&self, node: &str) {
        lock(&self.failures).remove(node);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AnnotatorError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The annotations a Node is missing, given the host id once known.
pub fn missing_annotations(node: &Node, host_id: Option<&str>) -> BTreeMap<String, String> {
    let existing = node.annotations();
    let mut out = BTreeMap::new();
    if !existing.contains_key(HOST_ID_ANNOTATION) {
        if let Some(id) = host_id {
            out.insert(HOST_ID_ANNOTATION.to_string(), id.to_string());
        }
    }
    if !existing.contains_key(TUNNEL_ZONE_ID_ANNOTATION) {
        out.insert(TUNNEL_ZONE_ID_ANNOTATION.to_string(), String::new());
    }
    if !existing.contains_key(TUNNEL_ENDPOINT_IP_ANNOTATION) {
        let internal_ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone());
        if let Some(ip) = internal_ip {
            out.insert(TUNNEL_ENDPOINT_IP_ANNOTATION.to_string(), ip);
        }
    }
    out
}

async fn reconcile(node: Arc<Node>, ctx: Arc<AnnotatorContext>) -> Result<Action, AnnotatorError> {
    let name = node.name_any();
    let mut host_id = None;
    if !node.annotations().contains_key(HOST_ID_ANNOTATION) {
        match ctx.backend.list_hosts().await {
            Ok(hosts) => {
                host_id = hosts
                    .iter()
                    .find(|h| h.name.as_deref() == Some(name.as_str()))
                    .map(|h| h.id.to_string());
                if host_id.is_none() {
                    let delay = ctx.failed(&name);
                    let msg = format!("no MidoNet host named {name:?}; retrying in {delay:?}");
                    tracing::warn!("{msg}");
                    ctx.events
                        .warning(&node.object_ref(&()), HOST_NOT_FOUND, msg)
                        .await;
                    // Still fill the other annotations below.
                    annotate(&node, &ctx, missing_annotations(&node, None)).await?;
                    return Ok(Action::requeue(delay));
                }
            }
            Err(err) => {
                let delay = ctx.failed(&name);
                let msg = format!("cannot list MidoNet hosts: {err}; retrying in {delay:?}");
                tracing::warn!("{msg}");
                ctx.events
                    .warning(&node.object_ref(&()), BACKEND_ERROR, msg)
                    .await;
                return Ok(Action::requeue(delay));
            }
        }
    }
    annotate(&node, &ctx, missing_annotations(&node, host_id.as_deref())).await?;
    ctx.succeeded(&name);
    Ok(Action::await_change())
}

async fn annotate(
    node: &Node,
    ctx: &AnnotatorContext,
    add: BTreeMap<String, String>,
) -> Result<(), AnnotatorError> {
    if add.is_empty() {
        return Ok(());
    }
    // The resourceVersion precondition makes the patch fail (and the reconcile retry with a
    // fresh Node) rather than overwrite annotations someone else set meanwhile.
    let patch = serde_json::json!({
        "metadata": {"annotations": add, "resourceVersion": node.resource_version()}
    });
    Api::<Node>::all(ctx.kube.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    tracing::info!(annotations = ?add.keys().collect::<Vec<_>>(), "node annotated");
    Ok(())
}

fn error_policy(node: Arc<Node>, err: &AnnotatorError, ctx: Arc<AnnotatorContext>) -> Action {
    let delay = ctx.failed(&node.name_any());
    // Outside the reconcile's span: name the Node here.
    let span = crate::logfields::object_span(CONTROLLER, &*node);
    let _entered = span.enter();
    let AnnotatorError::Kube(e) = err;
    if ctx.authz.report(Attempt::new("patch", "nodes", None), e) {
        // Already logged as an authorization error (rate-limited); retried all the same.
        tracing::debug!(error = %err, retry_in = ?delay, "annotating failed; retrying");
    } else {
        tracing::warn!(error = %err, retry_in = ?delay, "annotating failed; retrying");
    }
    Action::requeue(delay)
}

pub async fn run(
    ctx: Arc<AnnotatorContext>,
    health: Health,
    workers: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    health.register(READY_CHECK);
    let liveness = health.liveness().register(CONTROLLER);
    let synced = health.clone();
    let (store, nodes) =
        crate::cache::cached(Api::<Node>::all(ctx.kube.clone()), &ctx.authz, move |ok| {
            synced.set(READY_CHECK, ok)
        });
    let nodes = liveness.queue_of(nodes);
    let controller = Controller::for_stream(nodes, store.clone())
        .with_config(controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(shutdown);
    let probe = liveness.clone();
    controller
        .run(
            move |node, ctx| {
                let span = crate::logfields::object_span(CONTROLLER, &*node);
                probe.reconcile(reconcile(node, ctx).instrument(span))
            },
            error_policy,
            ctx,
        )
        .for_each(|_| async { liveness.progressed() })
        .await;
}
