//! The scenario's Kubernetes objects written to the bench's cluster
//! (`midonet_testkit::scenario`): namespaces, Nodes, Pods with their addresses, Services
//! and their Endpoints, at a bounded concurrency. Writes are plain creates; what the
//! apiserver answers (uids, cluster IPs) is what the later phases translate and probe.

use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use midonet_testkit::scenario::{api_in_namespace_of, Scenario};

use crate::{Bench, Res};

/// Namespaces the scenario spreads its objects over.
pub const NAMESPACES: usize = 4;
/// The scratch namespace of the cost measures (`costs.rs`).
pub const COST_NS: &str = "bench-costs";

/// Runs `f` on `items`, `limit` at a time; the first error ends it.
pub async fn each_concurrent<T, F, Fut>(
    items: impl IntoIterator<Item = T>,
    limit: usize,
    f: F,
) -> Res<()>
where
    F: FnMut(T) -> Fut,
    Fut: std::future::Future<Output = Res<()>>,
{
    stream::iter(items)
        .map(Ok)
        .try_for_each_concurrent(limit, f)
        .await
}

/// Creates objects at concurrency 16; returns them as the apiserver stored them.
pub async fn create_all<K>(api: impl Fn(&K) -> Api<K>, objs: Vec<K>) -> Res<Vec<K>>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<Result<K, kube::Error>> = stream::iter(objs)
        .map(|o| {
            let api = api(&o);
            async move { api.create(&PostParams::default(), &o).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    Ok(results
        .into_iter()
        .collect::<Result<Vec<K>, kube::Error>>()?)
}

/// Gives pod `i` its address through the status subresource, as a kubelet does once the
/// CNI plugin has set it up (a create drops the status); returns it as stored.
pub async fn set_pod_ip(client: &Client, scenario: &Scenario, i: usize) -> Res<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &scenario.namespace(i));
    let status = Patch::Merge(scenario.pod_status(i));
    Ok(api
        .patch_status(&Scenario::pod_name(i), &PatchParams::default(), &status)
        .await?)
}

/// [`set_pod_ip`] of pods `range`, 16 at a time; returns them as stored.
pub async fn set_pod_ips(
    client: &Client,
    scenario: &Scenario,
    range: std::ops::Range<usize>,
) -> Res<Vec<Pod>> {
    let results: Vec<Res<Pod>> = stream::iter(range)
        .map(|i| set_pod_ip(client, scenario, i))
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The scenario's objects as stored.
pub struct Objects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub endpoints: Vec<Endpoints>,
    /// How long creating them took (the namespaces excluded).
    pub create_time: Duration,
}

/// Creates the scenario's namespaces (and the costs' scratch namespace), then its Nodes,
/// Pods with their addresses, Services and Endpoints.
pub async fn create(bench: &Bench) -> Res<Objects> {
    let (client, scenario, args) = (&bench.client, &bench.scenario, &bench.args);
    let ns_api_all: Api<Namespace> = Api::all(client.clone());
    let mut cost_ns = Namespace::default();
    cost_ns.metadata.name = Some(COST_NS.to_string());
    for ns in (0..NAMESPACES)
        .map(|i| scenario.namespace_object(i))
        .chain([cost_ns])
    {
        ns_api_all.create(&PostParams::default(), &ns).await?;
    }
    let t_create = Instant::now();
    let node_objs = (0..args.nodes).map(|i| scenario.node(i)).collect();
    let nodes = create_all(|_: &Node| Api::all(client.clone()), node_objs).await?;
    let pod_objs = (0..args.pods).map(|i| scenario.pod(i)).collect();
    create_all(api_in_namespace_of(client), pod_objs).await?;
    let pods = set_pod_ips(client, scenario, 0..args.pods).await?;
    let svc_objs = (0..args.services).map(|i| scenario.service(i)).collect();
    let services = create_all(api_in_namespace_of(client), svc_objs).await?;
    let ep_objs = (0..args.services).map(|i| scenario.endpoints(i)).collect();
    let endpoints = create_all(api_in_namespace_of(client), ep_objs).await?;
    Ok(Objects {
        nodes,
        pods,
        services,
        endpoints,
        create_time: t_create.elapsed(),
    })
}
