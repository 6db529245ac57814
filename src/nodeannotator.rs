//! The nodeannotator: gives each Node the annotations its translation needs.
//!
//! **Guaranteed**: for a Node lacking them it sets `midonet.org/host-id` (the backend Host
//! whose name is the Node's name), `midonet.org/tunnel-zone-id` (`""`: the default zone)
//! and `midonet.org/tunnel-endpoint-ip` (the first InternalIP), in one merge patch with
//! the Node's resourceVersion as precondition: existing annotations are never overwritten,
//! and a Node changed meanwhile fails the patch and is reconciled again. A Node whose Host
//! is not (yet) known to the backend, or whose hosts cannot be listed, gets the other
//! annotations, a Warning event ([`crate::events::reason`]) and a retry with backoff
//! (`RETRY`, per Node, reset once annotated).
//!
//! **Assumed**: a Host is registered under the Node's name when the MidoNet agent starts
//! on it. Runs on the controller scaffold ([`crate::scaffold`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use midonet_translators::meta::{
    HOST_ID_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION, TUNNEL_ZONE_ID_ANNOTATION,
};

use crate::authz::{Attempt, Authz};
use crate::backend::BackendClient;
use crate::events::{reason, EventPublisher, Events};
use crate::health::Health;
use crate::locks::lock;
use crate::retry::RetryPolicy;
use crate::scaffold::{Action, Reconciler, Retry, Scaffold};

/// The controller's name, as in `--controllers`.
pub const CONTROLLER: &str = "nodeannotator";
pub const READY_CHECK: &str = "nodeannotator-cache";

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

    /// Counts a failure for `node`; the delay before its retry.
    fn next_retry(&self, node: &str) -> Duration {
        let mut f = lock(&self.failures);
        let n = f.entry(node.to_string()).or_default();
        *n = n.saturating_add(1);
        RETRY.delay(*n)
    }

    fn reset_failures(&self, node: &str) {
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
                    let delay = ctx.next_retry(&name);
                    let msg = format!("no MidoNet host named {name:?}; retrying in {delay:?}");
                    tracing::warn!("{msg}");
                    ctx.events
                        .warning(&node.object_ref(&()), reason::HOST_NOT_FOUND, msg)
                        .await;
                    // Still fill the other annotations below.
                    annotate(&node, &ctx, missing_annotations(&node, None)).await?;
                    return Ok(Action::requeue(delay));
                }
            }
            Err(err) => {
                let delay = ctx.next_retry(&name);
                let msg = format!("cannot list MidoNet hosts: {err}; retrying in {delay:?}");
                tracing::warn!("{msg}");
                ctx.events
                    .warning(&node.object_ref(&()), reason::HOST_LOOKUP_FAILED, msg)
                    .await;
                return Ok(Action::requeue(delay));
            }
        }
    }
    annotate(&node, &ctx, missing_annotations(&node, host_id.as_deref())).await?;
    ctx.reset_failures(&name);
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

impl Reconciler for AnnotatorContext {
    type Object = Node;
    type Error = AnnotatorError;
    const NAME: &'static str = CONTROLLER;

    fn reconcile(
        self: Arc<Self>,
        node: Arc<Node>,
    ) -> impl std::future::Future<Output = Result<Action, AnnotatorError>> + Send + 'static {
        reconcile(node, self)
    }

    fn failed<'a>(&'a self, node: &'a Node, err: &'a AnnotatorError) -> Retry<'a> {
        let AnnotatorError::Kube(e) = err;
        Retry {
            after: self.next_retry(&node.name_any()),
            refused: Some((Attempt::new("patch", "nodes", None), e)),
            failures: None,
        }
    }

    fn authz(&self) -> &Authz {
        &self.authz
    }
}

/// Runs the nodeannotator until `shutdown` resolves.
pub async fn run(
    ctx: Arc<AnnotatorContext>,
    health: Health,
    workers: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scaffold = Scaffold::<AnnotatorContext>::register(&health);
    health.register(READY_CHECK);
    let synced = health.clone();
    let (store, nodes) =
        crate::cache::cached(Api::<Node>::all(ctx.kube.clone()), &ctx.authz, move |ok| {
            synced.set(READY_CHECK, ok)
        });
    let controller = scaffold.controller(nodes, store, workers, shutdown);
    scaffold.run(controller, ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{answer_all, mock_apiserver, ApiServer, Exchange};
    use http::Method;
    use serde_json::json;

    const HOST: uuid::Uuid = uuid::Uuid::from_u128(0x1d);

    /// The annotator over a mocked apiserver and a simulator knowing `hosts`.
    async fn context(
        hosts: &[(&str, uuid::Uuid)],
    ) -> (Arc<AnnotatorContext>, ApiServer, midonet_sim::SimHandle) {
        let registry = prometheus::Registry::new();
        let cfg = midonet_sim::SimConfig {
            hosts: hosts.iter().map(|(n, id)| (n.to_string(), *id)).collect(),
            ..midonet_sim::SimConfig::default()
        };
        let (backend, sim) = crate::fixtures::simulator(cfg, &registry).await;
        let (kube, apiserver) = mock_apiserver();
        let authz = Authz::new(&registry).unwrap();
        let limits = crate::events::EventLimits {
            qps: 100.0,
            burst: 100,
        };
        let events = EventPublisher::start(answer_all(), authz.clone(), limits, &registry).unwrap();
        let ctx = Arc::new(AnnotatorContext::new(kube, backend, authz, &events));
        (ctx, apiserver, sim)
    }

    fn node(annotations: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "resourceVersion": "5", "annotations": annotations},
                "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_node_whose_host_is_known_gets_every_missing_annotation_once() {
        let (ctx, apiserver, sim) = context(&[("n1", HOST)]).await;
        let played = apiserver.play(vec![Exchange::new(Method::PATCH, "/api/v1/nodes/n1")
            .with(
                "/metadata/annotations/midonet.org~1host-id",
                json!(HOST.to_string()),
            )
            .with(
                "/metadata/annotations/midonet.org~1tunnel-zone-id",
                json!(""),
            )
            .with(
                "/metadata/annotations/midonet.org~1tunnel-endpoint-ip",
                json!("10.0.0.1"),
            )
            // Fails rather than overwrite what someone set meanwhile.
            .with("/metadata/resourceVersion", json!("5"))]);
        let action = reconcile(node(json!({})), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change());
        // Annotated already: nothing to write.
        let done = node(json!({
            "midonet.org/host-id": HOST.to_string(),
            "midonet.org/tunnel-zone-id": "",
            "midonet.org/tunnel-endpoint-ip": "10.0.0.2",
        }));
        assert_eq!(reconcile(done, ctx).await.unwrap(), Action::await_change());
        played.done().await;
        sim.shutdown().await;
    }

    #[tokio::test]
    async fn a_node_without_its_host_gets_the_rest_and_is_retried() {
        let (ctx, apiserver, sim) = context(&[]).await;
        let played = apiserver.play(vec![Exchange::new(Method::PATCH, "/api/v1/nodes/n1")
            .without("/metadata/annotations/midonet.org~1host-id")
            .with(
                "/metadata/annotations/midonet.org~1tunnel-zone-id",
                json!(""),
            )]);
        let action = reconcile(node(json!({})), ctx).await.unwrap();
        assert_ne!(
            action,
            Action::await_change(),
            "retried until the host registers"
        );
        played.done().await;
        sim.shutdown().await;
    }

    #[tokio::test]
    async fn a_conflicting_write_fails_and_the_error_policy_backs_off() {
        let (ctx, apiserver, sim) = context(&[("n1", HOST)]).await;
        let played = apiserver.play(vec![
            Exchange::new(Method::PATCH, "/api/v1/nodes/n1").fail(409, "Conflict"),
            Exchange::new(Method::PATCH, "/api/v1/nodes/n1").fail(409, "Conflict"),
        ]);
        let n1 = node(json!({}));
        let err = reconcile(n1.clone(), ctx.clone()).await.unwrap_err();
        let first = Reconciler::failed(&*ctx, &n1, &err).after;
        let err = reconcile(n1.clone(), ctx.clone()).await.unwrap_err();
        let retry = Reconciler::failed(&*ctx, &n1, &err);
        played.done().await;
        // 1 s, then 2 s (each ±20 %).
        assert!(first < Duration::from_millis(1300), "{first:?}");
        assert!(
            retry.after > Duration::from_millis(1500),
            "{:?}",
            retry.after
        );
        let (attempt, _) = retry.refused.expect("reported if RBAC refused it");
        assert_eq!((attempt.verb, attempt.resource), ("patch", "nodes"));
        sim.shutdown().await;
    }
}
