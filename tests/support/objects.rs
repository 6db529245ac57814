//! Kubernetes objects the tests create by hand, and what a kubelet, the CNI plugin and the
//! nodeannotator do to them (addresses, host ids), written once for every test binary.

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use midonet_translators::meta::{HOST_ID_ANNOTATION, MAC_ADDRESS_ANNOTATION};
use serde_json::json;
use uuid::Uuid;

/// A Node with a pod CIDR and addresses, e.g. `&[("InternalIP", "192.168.0.11")]`.
pub fn node(name: &str, cidr: &str, addresses: &[(&str, &str)]) -> Node {
    let addresses: Vec<_> = addresses
        .iter()
        .map(|(t, a)| json!({"type": t, "address": a}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"podCIDR": cidr},
        "status": {"addresses": addresses}
    }))
    .unwrap()
}

/// A Node with one InternalIP.
pub fn node_at(name: &str, cidr: &str, internal_ip: &str) -> Node {
    node(name, cidr, &[("InternalIP", internal_ip)])
}

/// A Pod scheduled on `node`, with the CNI plugin's MAC annotation if given. It has no
/// address until [`set_pod_ip`].
pub fn pod(name: &str, node: &str, mac: Option<&str>) -> Pod {
    let annotations = match mac {
        Some(m) => json!({MAC_ADDRESS_ANNOTATION: m}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap()
}

/// A ClusterIP Service with one port, `http` 80 → 8080/TCP.
pub fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap()
}

/// The Endpoints of a [`service`]: `ips` on port `http` 8080/TCP; no subset without `ips`.
pub fn endpoints(name: &str, ips: &[&str]) -> Endpoints {
    let addresses: Vec<_> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let subsets = if ips.is_empty() {
        json!([])
    } else {
        json!([{"addresses": addresses, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}])
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name}, "subsets": subsets
    }))
    .unwrap()
}

/// Gives a pod its address as a kubelet does once the CNI plugin has set it up: through
/// the status subresource (a create drops the status).
pub async fn set_pod_ip(pods: &Api<Pod>, name: &str, ip: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("set the address of pod {name}: {e}"));
}

/// Waits (60 s at most) until the nodeannotator has annotated each node with its host id.
pub async fn wait_host_ids(nodes: &Api<Node>, hosts: &[(&str, Uuid)]) {
    for (name, host) in hosts {
        super::wait_until(
            &format!("the nodeannotator sets the host id of {name}"),
            super::CEILING,
            || async {
                let n = nodes.get(name).await.ok()?;
                (n.annotations().get(HOST_ID_ANNOTATION) == Some(&host.to_string())).then_some(())
            },
        )
        .await;
    }
}

/// The sum of the samples of metric `name` whose labels contain `filter`, from the
/// controllers' `/metrics` on `port`. The endpoint comes up with the controllers: a read
/// right after their start waits for it (at most 30 s).
pub async fn metric(port: u16, name: &str, filter: impl AsRef<str>) -> f64 {
    let filter = filter.as_ref();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = super::wait_until("the metrics endpoint", super::CEILING, || async {
        reqwest::get(&url).await.ok()?.text().await.ok()
    })
    .await;
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
