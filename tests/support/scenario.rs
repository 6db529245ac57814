//! The benchmark's scenario objects (`midonet_testkit::scenario`), created and
//! deleted with bounded concurrency, retried through apiserver outages.

use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use midonet_kube_controllers::authz;

/// Requests in flight while creating or deleting objects.
pub const CONCURRENCY: usize = 16;

use midonet_testkit::scenario::api_in_namespace_of;
#[allow(unused_imports)]
pub use midonet_testkit::scenario::{Scale, Scenario};

/// Creating and deleting a scenario's objects, retried through apiserver outages; panics on
/// anything else (test code).
#[allow(async_fn_in_trait)]
pub trait ScenarioApi {
    async fn create_namespaces(&self, client: &Client);
    async fn create_nodes(&self, client: &Client);
    async fn create_pods(&self, client: &Client, range: std::ops::Range<usize>);
    async fn delete_pods(&self, client: &Client, range: std::ops::Range<usize>);
    async fn create_services(&self, client: &Client, range: std::ops::Range<usize>);
    async fn delete_services(&self, client: &Client, range: std::ops::Range<usize>);
    async fn create_endpoints(&self, client: &Client, range: std::ops::Range<usize>);
    async fn delete_endpoints(&self, client: &Client, range: std::ops::Range<usize>);
    async fn create(&self, client: &Client);
}

impl ScenarioApi for Scenario {
    async fn create_namespaces(&self, client: &Client) {
        let api: Api<Namespace> = Api::all(client.clone());
        for i in 0..self.scale.namespaces {
            let ns = self.namespace_object(i);
            let pp = PostParams::default();
            with_retry("create namespace", 409, || api.create(&pp, &ns)).await;
        }
    }

    async fn create_nodes(&self, client: &Client) {
        let api: Api<Node> = Api::all(client.clone());
        create_all(
            (0..self.scale.nodes).map(|i| self.node(i)).collect(),
            |_| api.clone(),
        )
        .await;
    }

    /// Creates the pods, then gives them their addresses through the status subresource,
    /// as a kubelet would.
    async fn create_pods(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(
            range.clone().map(|i| self.pod(i)).collect(),
            api_in_namespace_of(client),
        )
        .await;
        stream::iter(range)
            .map(|i| async move {
                let api: Api<Pod> = Api::namespaced(client.clone(), &self.namespace(i));
                let name = Self::pod_name(i);
                let status = Patch::Merge(self.pod_status(i));
                let pp = PatchParams::default();
                with_retry(&format!("set the address of {name}"), 0, || {
                    api.patch_status(&name, &pp, &status)
                })
                .await;
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<()>>()
            .await;
    }

    async fn delete_pods(&self, client: &Client, range: std::ops::Range<usize>) {
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

    async fn create_services(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(
            range.map(|i| self.service(i)).collect(),
            api_in_namespace_of(client),
        )
        .await;
    }

    async fn delete_services(&self, client: &Client, range: std::ops::Range<usize>) {
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

    async fn create_endpoints(&self, client: &Client, range: std::ops::Range<usize>) {
        create_all(
            range.map(|i| self.endpoints(i)).collect(),
            api_in_namespace_of(client),
        )
        .await;
    }

    async fn delete_endpoints(&self, client: &Client, range: std::ops::Range<usize>) {
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

    async fn create(&self, client: &Client) {
        self.create_namespaces(client).await;
        self.create_nodes(client).await;
        self.create_pods(client, 0..self.scale.pods).await;
        self.create_services(client, 0..self.scale.services).await;
        self.create_endpoints(client, 0..self.scale.services).await;
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

/// Whether `err` is worth retrying while the apiserver restarts: unreachable, 5xx, 429, or a
/// new apiserver whose admission caches have not synced yet (a 403 of its own).
fn transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429 || authz::is_not_ready_yet(s),
        _ => true,
    }
}

/// Retries `op` while the apiserver is away or warming up ([`transient`]); `done_after_retry`
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
                if !transient(&e) || start.elapsed() > RETRY_FOR {
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

/// The small cluster of the deletion tests, named `name`: 2 Nodes, 20 Pods, 4 Services of 2
/// endpoints each, in one namespace.
pub fn small(name: &str) -> Scenario {
    Scenario::new(
        name,
        Scale {
            nodes: 2,
            pods: 20,
            services: 4,
            endpoints_per_service: 2,
            namespaces: 1,
        },
    )
}

/// The UIDs of `scenario`'s Pods `pods` and Services `services` (in its first namespace).
pub async fn owner_uids(
    scenario: &Scenario,
    client: &Client,
    pods: std::ops::Range<usize>,
    services: std::ops::Range<usize>,
) -> Vec<String> {
    let namespace = scenario.namespace(0);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let service_api: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let mut uids = Vec::new();
    for i in pods {
        let pod = pod_api.get(&Scenario::pod_name(i)).await.expect("get pod");
        uids.extend(pod.metadata.uid);
    }
    for i in services {
        let service = service_api
            .get(&Scenario::service_name(i))
            .await
            .expect("get service");
        uids.extend(service.metadata.uid);
    }
    uids
}

/// Waits until no Translation names an owner among `uids` (its owner-uid label).
pub async fn wait_owned_translations_gone(client: &Client, uids: &[String], what: &str) {
    use midonet_kube_controllers::crd::Translation;
    use midonet_translators::meta::OWNER_UID_LABEL;
    let trs: Api<Translation> = Api::all(client.clone());
    super::wait_until(what, super::CEILING, || async {
        let left = trs.list(&Default::default()).await.ok()?;
        let owned = |t: &Translation| {
            t.label(OWNER_UID_LABEL)
                .is_some_and(|uid| uids.iter().any(|u| u == uid))
        };
        (!left.items.iter().any(owned)).then_some(())
    })
    .await
}
