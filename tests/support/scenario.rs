//! Scenario objects at scale, built the way the benchmark (`src/bin/bench.rs`) builds them:
//! Nodes with their host-id and tunnel-endpoint annotations preset (so no nodeannotator is
//! needed), Pods spread over the Nodes, ClusterIP Services with their Endpoints, in a few
//! namespaces. Created with bounded concurrency.

use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use midonet_translators::meta::{HOST_ID_ANNOTATION, TUNNEL_ENDPOINT_IP_ANNOTATION};
use serde_json::{json, Value};
use uuid::Uuid;

/// Requests in flight while creating or deleting objects.
pub const CONCURRENCY: usize = 16;

#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub nodes: usize,
    pub pods: usize,
    pub services: usize,
    pub endpoints_per_service: usize,
    pub namespaces: usize,
}

impl Scale {
    /// Scenario S of the benchmark: 50 Nodes, 2,000 Pods, 300 Services × 4 endpoints.
    pub const S: Scale = Scale {
        nodes: 50,
        pods: 2000,
        services: 300,
        endpoints_per_service: 4,
        namespaces: 4,
    };
}

/// Objects of one scenario; `prefix` keeps several scenarios in one cluster apart.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub prefix: String,
    pub scale: Scale,
    /// Simulator hosts, one per Node: (node name, host id).
    pub hosts: Vec<(String, Uuid)>,
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

impl Scenario {
    pub fn new(prefix: &str, scale: Scale) -> Scenario {
        let hosts = (0..scale.nodes)
            .map(|i| (format!("{prefix}-node-{i}"), Uuid::new_v4()))
            .collect();
        Scenario {
            prefix: prefix.to_string(),
            scale,
            hosts,
        }
    }

    pub fn namespace(&self, i: usize) -> String {
        format!("{}-{}", self.prefix, i % self.scale.namespaces.max(1))
    }

    pub fn node(&self, i: usize) -> Node {
        let ip = format!("192.168.{}.{}", i / 250, 1 + i % 250);
        obj(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.hosts[i].0,
                         "annotations": {HOST_ID_ANNOTATION: self.hosts[i].1.to_string(),
                                         TUNNEL_ENDPOINT_IP_ANNOTATION: ip}},
            "spec": {"podCIDR": format!("10.{}.{}.0/24", 100 + i / 256, i % 256)},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
        }))
    }

    pub fn pod_name(i: usize) -> String {
        format!("pod-{i}")
    }

    /// Pod `i` on node `i mod nodes`.
    pub fn pod(&self, i: usize) -> Pod {
        obj(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": Self::pod_name(i), "namespace": self.namespace(i)},
            "spec": {"nodeName": self.hosts[i % self.hosts.len().max(1)].0,
                     "containers": [{"name": "c", "image": "x"}]}
        }))
    }

    pub fn service_name(i: usize) -> String {
        format!("svc-{i}")
    }

    pub fn service(&self, i: usize) -> Service {
        obj(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": Self::service_name(i), "namespace": self.namespace(i)},
            "spec": {"type": "ClusterIP",
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }))
    }

    pub fn endpoints(&self, i: usize) -> Endpoints {
        let addresses: Vec<Value> = (0..self.scale.endpoints_per_service)
            .map(|k| json!({"ip": format!("10.{}.{}.{}", 200 + i / 250, i % 250, 10 + k % 240)}))
            .collect();
        obj(json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": Self::service_name(i), "namespace": self.namespace(i)},
            "subsets": [{"addresses": addresses,
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
        }))
    }

    pub async fn create_namespaces(&self, client: &Client) {
        let api: Api<Namespace> = Api::all(client.clone());
        for i in 0..self.scale.namespaces {
            let ns: Namespace = obj(json!({"metadata": {"name": self.namespace(i)}}));
            let pp = PostParams::default();
            with_retry("create namespace", 409, || api.create(&pp, &ns)).await;
        }
    }

    pub async fn create_nodes(&self, client: &Client) {
        let api: Api<Node> = Api::all(client.clone());
        create_all(
            (0..self.scale.nodes).map(|i| self.node(i)).collect(),
            |_| api.clone(),
        )
        .await;
    }

    pub async fn create_pods(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(range.map(|i| self.pod(i)).collect(), ns_api(client)).await;
    }

    pub async fn delete_pods(&self, client: &Client, range: std::ops::Range<usize>) {
        delete_all(
            range
                .map(|i| {
                    let api: Api<Pod> = Api::namespaced(client.clone(), &self.namespace(i));
                    (api, Self::pod_name(i))
                })
                .collect(),
        )
        .await;
    }

    pub async fn create_services(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(range.map(|i| self.service(i)).collect(), ns_api(client)).await;
    }

    pub async fn delete_services(&self, client: &Client, range: std::ops::Range<usize>) {
        delete_all(
            range
                .map(|i| {
                    let api: Api<Service> = Api::namespaced(client.clone(), &self.namespace(i));
                    (api, Self::service_name(i))
                })
                .collect(),
        )
        .await;
    }

    pub async fn create_endpoints(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(range.map(|i| self.endpoints(i)).collect(), ns_api(client)).await;
    }

    pub async fn delete_endpoints(&self, client: &Client, range: std::ops::Range<usize>) {
        delete_all(
            range
                .map(|i| {
                    let api: Api<Endpoints> = Api::namespaced(client.clone(), &self.namespace(i));
                    (api, Self::service_name(i))
                })
                .collect(),
        )
        .await;
    }

    /// Namespaces, Nodes, Pods, Services, Endpoints, in that order.
    pub async fn create(&self, client: &Client) {
        self.create_namespaces(client).await;
        self.create_nodes(client).await;
        self.create_pods(client, 0..self.scale.pods).await;
        self.create_services(client, 0..self.scale.services).await;
        self.create_endpoints(client, 0..self.scale.services).await;
    }
}

fn ns_api<K>(client: &Client) -> impl Fn(&K) -> Api<K> + '_
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    move |o: &K| {
        Api::namespaced(
            client.clone(),
            o.meta().namespace.as_deref().unwrap_or("default"),
        )
    }
}

/// How long one object's creation or deletion is retried while the apiserver does not
/// answer (it may be restarting).
const RETRY_FOR: Duration = Duration::from_secs(90);

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Retries `op` while the apiserver is unreachable or answers 5xx/429; `done_after_retry`
/// says which error code means "already done by an attempt whose answer was lost".
async fn with_retry<T, F, Fut>(what: &str, done_after_retry: u16, mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let start = Instant::now();
    let mut retried = false;
    loop {
        match op().await {
            Ok(v) => return Some(v),
            Err(e) if retried && status_code(&e) == Some(done_after_retry) => return None,
            Err(e) => {
                let transient = match status_code(&e) {
                    None => true,
                    Some(code) => code >= 500 || code == 429,
                };
                if !transient || start.elapsed() > RETRY_FOR {
                    panic!("{what}: {e}");
                }
                retried = true;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// Creates every object, `CONCURRENCY` at a time, retrying while the apiserver is away;
/// panics on any other failure.
pub async fn create_all<K>(objs: Vec<K>, api: impl Fn(&K) -> Api<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    stream::iter(objs)
        .map(|o| {
            let api = api(&o);
            async move {
                let what = format!("create {:?}", o.meta().name);
                let pp = PostParams::default();
                with_retry(&what, 409, || api.create(&pp, &o)).await;
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Deletes every object (grace period 0), `CONCURRENCY` at a time, retrying while the
/// apiserver is away; panics on any other failure.
pub async fn delete_all<K>(objs: Vec<(Api<K>, String)>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    stream::iter(objs)
        .map(|(api, name)| async move {
            let what = format!("delete {name}");
            with_retry(&what, 404, || async {
                api.delete(&name, &DeleteParams::default().grace_period(0))
                    .await
                    .map(|_| ())
            })
            .await;
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}
