//! `trace` and `check`: the data-plane model (`midonet-dataplane`) run over the live
//! topology, read from Kubernetes (the expectations, the workloads) and from the MidoNet
//! API (the virtual network, GETs only).
//!
//! The decisions (parsing a target, resolving it against the cluster, mapping resources
//! to the Translations that own them, rendering) are pure; [`cli`] does the I/O.

pub mod backend;
pub mod cli;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use k8s_openapi::api::core::v1::Pod;
use midonet_dataplane::cluster::{service_addresses, ServiceAddressKind};
use midonet_dataplane::{
    Cluster, FlowKind, Hop, Leg, Protocol, Report, SocketV4, Topology, Trace, Verdict,
};
use midonet_translators::model::Resource;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::crd::Translation;

/// The source of a trace: an attachment name, as `Cluster::attachments` names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Pod {
        namespace: String,
        name: String,
    },
    Node {
        name: String,
    },
    /// A client outside the cluster at `ip`, entering through `uplink` (the edge's first
    /// uplink if `None`): `external/IP` or `external/IP/UPLINK`.
    External {
        ip: Ipv4Addr,
        uplink: Option<String>,
    },
}

impl Source {
    pub fn parse(s: &str) -> Result<Source, String> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            ["pod", ns, name] if !ns.is_empty() && !name.is_empty() => Ok(Source::Pod {
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            ["node", name] if !name.is_empty() => Ok(Source::Node {
                name: name.to_string(),
            }),
            ["external", ip, rest @ ..] if rest.len() <= 1 => Ok(Source::External {
                ip: ip
                    .parse()
                    .map_err(|_| format!("--from {s:?}: {ip:?} is not an IPv4 address"))?,
                uplink: rest
                    .first()
                    .filter(|u| !u.is_empty())
                    .map(|u| u.to_string()),
            }),
            _ => Err(format!(
                "--from {s:?}: use pod/NAMESPACE/NAME, node/NAME or external/IP[/UPLINK]"
            )),
        }
    }

    /// The attachment the model sends from, and the source address when it is not the
    /// attachment's own (an outside client: the upstream behind the uplink).
    pub fn attachment(&self, cluster: &Cluster) -> Result<(String, Option<Ipv4Addr>), String> {
        let Source::External { ip, uplink } = self else {
            return Ok((self.attachment_name(), None));
        };
        let edge = cluster.edge.as_ref().ok_or_else(|| {
            "--from external/…: the cluster has no edge (give --edge-config)".to_string()
        })?;
        let up = match uplink {
            None => edge.uplinks.first(),
            Some(name) => edge.uplinks.iter().find(|u| &u.name == name),
        }
        .ok_or_else(|| {
            format!(
                "no uplink {:?} in the edge settings",
                uplink.as_deref().unwrap_or_default()
            )
        })?;
        Ok((
            midonet_dataplane::outside::upstream_name(&up.name),
            Some(*ip),
        ))
    }

    /// The attachment name the model knows a pod or node by (`external/IP` for an outside
    /// client, which [`Source::attachment`] resolves to an uplink's upstream).
    pub fn attachment_name(&self) -> String {
        match self {
            Source::Pod { namespace, name } => {
                midonet_dataplane::cluster::pod_name(namespace, name)
            }
            Source::Node { name } => midonet_dataplane::cluster::node_name(name),
            Source::External { ip, .. } => format!("external/{ip}"),
        }
    }
}

/// A Service port by number or by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRef {
    Number(u16),
    Name(String),
}

/// The destination of a trace, as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Service {
        namespace: String,
        name: String,
        port: PortRef,
    },
    Pod {
        namespace: String,
        name: String,
        port: u16,
    },
    Address(SocketV4),
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let bad = || {
            format!("--to {s:?}: use svc/NAMESPACE/NAME:PORT, pod/NAMESPACE/NAME:PORT or IP:PORT")
        };
        if let Ok(addr) = s.parse::<SocketAddrV4>() {
            return Ok(Target::Address(SocketV4::new(*addr.ip(), addr.port())));
        }
        let (object, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let parts: Vec<&str> = object.split('/').collect();
        match parts.as_slice() {
            [kind, ns, name] if !ns.is_empty() && !name.is_empty() && !port.is_empty() => {
                match *kind {
                    "svc" | "service" => Ok(Target::Service {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        port: match port.parse::<u16>() {
                            Ok(n) => PortRef::Number(n),
                            Err(_) => PortRef::Name(port.to_string()),
                        },
                    }),
                    "pod" => Ok(Target::Pod {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        port: port.parse().map_err(|_| bad())?,
                    }),
                    _ => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }
}

/// Which address of a Service `svc/…` targets: `trace --via`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Via {
    /// The cluster IP.
    #[default]
    ClusterIp,
    /// The first IPv4 `spec.externalIPs` entry.
    ExternalIp,
    /// The first IPv4 `status.loadBalancer.ingress[].ip` (not `ipMode: Proxy`).
    LoadBalancer,
    /// This address, which must be one of the Service's.
    Address(Ipv4Addr),
}

impl Via {
    pub fn parse(s: &str) -> Result<Via, String> {
        match s {
            "cluster-ip" => Ok(Via::ClusterIp),
            "external-ip" => Ok(Via::ExternalIp),
            "lb" | "load-balancer" => Ok(Via::LoadBalancer),
            _ => s.parse().map(Via::Address).map_err(|_| {
                format!("--via {s:?}: use cluster-ip, external-ip, lb or one of the Service's IPs")
            }),
        }
    }

    fn describe(self) -> String {
        match self {
            Via::ClusterIp => "IPv4 cluster IP".into(),
            Via::ExternalIp => "IPv4 external IP (spec.externalIPs)".into(),
            Via::LoadBalancer => {
                "IPv4 load-balancer ingress IP (status.loadBalancer.ingress[].ip)".into()
            }
            Via::Address(ip) => format!("address {ip}"),
        }
    }
}

/// A target resolved against the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Destination {
    /// What was asked for, e.g. `svc/app/web:http`.
    pub target: String,
    pub address: SocketV4,
    pub protocol: Protocol,
    /// The pod it names or whose IP it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The Service port it names, `svc/NS/NAME:PORT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Which of the Service's addresses `address` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<ServiceAddressKind>,
}

/// Resolves `target` in `cluster`. `protocol` is the one asked for; without it a Service
/// port's own protocol is used, and TCP otherwise. `via` picks the Service's address (only
/// a Service target takes one other than the cluster IP).
pub fn resolve(
    cluster: &Cluster,
    target: &Target,
    text: &str,
    protocol: Option<Protocol>,
    via: Via,
) -> Result<Destination, String> {
    if via != Via::ClusterIp && !matches!(target, Target::Service { .. }) {
        return Err(format!(
            "--via applies to svc/NAMESPACE/NAME:PORT, not {text:?}"
        ));
    }
    match target {
        Target::Address(a) => Ok(Destination {
            target: text.to_string(),
            address: *a,
            protocol: protocol.unwrap_or(Protocol::Tcp),
            pod: pod_with_ip(cluster, a.ip),
            service: None,
            via: None,
        }),
        Target::Pod {
            namespace,
            name,
            port,
        } => {
            let address = pod_address(cluster, namespace, name, *port)?;
            Ok(Destination {
                target: text.to_string(),
                address,
                protocol: protocol.unwrap_or(Protocol::Tcp),
                pod: Some(midonet_dataplane::cluster::pod_name(namespace, name)),
                service: None,
                via: None,
            })
        }
        Target::Service {
            namespace,
            name,
            port,
        } => {
            let svc = cluster
                .services
                .iter()
                .find(|s| is_named(&s.metadata, namespace, name))
                .ok_or_else(|| format!("service {namespace}/{name} not found"))?;
            let which = format!("service {namespace}/{name}");
            let (ip, kind) = service_address(svc, &which, via)?;
            let (number, proto) = service_port(svc, &which, port, protocol)?;
            Ok(Destination {
                target: text.to_string(),
                address: SocketV4::new(ip, number),
                protocol: proto,
                pod: None,
                service: Some(format!("svc/{namespace}/{name}:{number}")),
                via: Some(kind),
            })
        }
    }
}

/// Whether `meta` is of the object `namespace/name`.
fn is_named(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    namespace: &str,
    name: &str,
) -> bool {
    meta.namespace.as_deref() == Some(namespace) && meta.name.as_deref() == Some(name)
}

/// The address of port `port` of the pod `namespace/name`.
fn pod_address(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<SocketV4, String> {
    let pod = cluster
        .pods
        .iter()
        .find(|p| is_named(&p.metadata, namespace, name))
        .ok_or_else(|| format!("pod {namespace}/{name} not found"))?;
    let ip =
        pod_ip(pod).ok_or_else(|| format!("pod {namespace}/{name} has no IPv4 status.podIP"))?;
    Ok(SocketV4::new(ip, port))
}

/// The Service's address `via` picks, and which of its addresses it is. `service` names it
/// in errors.
fn service_address(
    svc: &k8s_openapi::api::core::v1::Service,
    service: &str,
    via: Via,
) -> Result<(Ipv4Addr, ServiceAddressKind), String> {
    let spec = svc
        .spec
        .as_ref()
        .ok_or_else(|| format!("{service} has no spec"))?;
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .into_iter()
        .chain(spec.cluster_ips.iter().flatten().map(String::as_str))
        .find_map(|s| s.parse::<Ipv4Addr>().ok())
        .ok_or_else(|| format!("{service} has no IPv4 cluster IP"))?;
    service_addresses(svc, cluster_ip)
        .into_iter()
        .find(|(ip, kind)| match via {
            Via::ClusterIp => *kind == ServiceAddressKind::ClusterIp,
            Via::ExternalIp => *kind == ServiceAddressKind::ExternalIp,
            Via::LoadBalancer => *kind == ServiceAddressKind::LoadBalancerIngress,
            Via::Address(want) => *ip == want,
        })
        .ok_or_else(|| format!("{service} has no {}", via.describe()))
}

/// The number and protocol of the Service's port `port` (of `protocol`, when given).
/// `service` names it in errors.
fn service_port(
    svc: &k8s_openapi::api::core::v1::Service,
    service: &str,
    port: &PortRef,
    protocol: Option<Protocol>,
) -> Result<(u16, Protocol), String> {
    let found = svc
        .spec
        .iter()
        .flat_map(|spec| spec.ports.iter().flatten())
        .filter(|p| match port {
            PortRef::Number(n) => i32::from(*n) == p.port,
            PortRef::Name(n) => p.name.as_deref() == Some(n.as_str()),
        })
        .filter_map(|p| {
            let proto = Protocol::from_name(p.protocol.as_deref().unwrap_or("TCP"))?;
            Some((u16::try_from(p.port).ok()?, proto))
        })
        .find(|(_, proto)| protocol.is_none_or(|want| want == *proto));
    found.ok_or_else(|| {
        let which = match port {
            PortRef::Number(n) => n.to_string(),
            PortRef::Name(n) => format!("{n:?}"),
        };
        let proto = protocol.map(|p| format!(" ({p})")).unwrap_or_default();
        format!("{service} has no port {which}{proto}")
    })
}

fn pod_ip(pod: &Pod) -> Option<Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

fn pod_with_ip(cluster: &Cluster, ip: Ipv4Addr) -> Option<String> {
    cluster
        .pods
        .iter()
        .find(|p| pod_ip(p) == Some(ip))
        .and_then(|p| {
            Some(midonet_dataplane::cluster::pod_name(
                p.metadata.namespace.as_deref()?,
                p.metadata.name.as_deref()?,
            ))
        })
}

/// Which Translation (`namespace/name`) owns each backend resource id: from the item
/// paths of their desired resources and of what they pushed.
#[derive(Clone, Debug, Default)]
pub struct Owners(HashMap<Uuid, String>);

impl Owners {
    pub fn from_translations(trs: &[Translation]) -> Owners {
        let mut map = HashMap::new();
        for tr in trs {
            let owner = match (&tr.metadata.namespace, &tr.metadata.name) {
                (Some(ns), Some(name)) => format!("{ns}/{name}"),
                (None, Some(name)) => name.clone(),
                _ => continue,
            };
            let desired = tr
                .desired_resources()
                .iter()
                .filter_map(|e| Resource::from_entry(e).ok())
                .map(|r| r.item_path());
            let pushed = tr
                .status
                .iter()
                .flat_map(|s| s.pushed.iter().map(|p| p.path.clone()));
            for path in desired.chain(pushed) {
                if let Some(id) = id_of_path(&path) {
                    map.entry(id).or_insert_with(|| owner.clone());
                }
            }
        }
        Owners(map)
    }

    pub fn of(&self, id: Uuid) -> Option<&str> {
        self.0.get(&id).map(String::as_str)
    }
}

/// The resource id an item path ends with (`/rules/{id}`); `None` for paths that end in
/// something else (`/ports/{id}/link`, MAC and ARP entries).
fn id_of_path(path: &str) -> Option<Uuid> {
    path.rsplit('/')
        .next()
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// The verdict of a whole trace: delivered on some path; else unsupported when the model
/// could not tell on some path (it refused a rule it does not evaluate, say); else
/// rejected when a router answered with an ICMP error; else dropped.
pub fn verdict(t: &Trace) -> Verdict {
    let any = |v: Verdict| t.paths.iter().any(|p| p.forward.verdict == v);
    if t.delivered() {
        Verdict::Delivered
    } else if t.unsupported().is_some() {
        Verdict::Unsupported
    } else if any(Verdict::Rejected) {
        Verdict::Rejected
    } else {
        Verdict::Dropped
    }
}

/// The path the summary shows: the first delivered one, else the first.
fn main_path(t: &Trace) -> Option<&midonet_dataplane::Path> {
    t.paths
        .iter()
        .find(|p| p.forward.verdict == Verdict::Delivered)
        .or_else(|| t.paths.first())
}

/// A hop as JSON with the names of its device, chain and rule owners.
fn hop_json(h: &Hop, topo: &Topology, owners: &Owners) -> Value {
    let mut v = serde_json::to_value(h).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        if let Some(name) = h.device.and_then(|d| topo.name_of(d)) {
            m.insert("deviceName".into(), Value::String(name));
        }
        if let Some(name) = h.chain.and_then(|c| topo.name_of(c)) {
            m.insert("chainName".into(), Value::String(name));
        }
        // The rule's or route's Translation first: it is the most specific owner.
        if let Some(owner) = [h.rule, h.route, h.chain, h.device]
            .into_iter()
            .flatten()
            .find_map(|id| owners.of(id))
        {
            m.insert("translation".into(), Value::String(owner.to_string()));
        }
    }
    v
}

fn leg_json(l: &Leg, topo: &Topology, owners: &Owners) -> Value {
    json!({
        "verdict": l.verdict,
        "deliveredTo": l.delivered_to,
        "received": l.received,
        "dropReason": l.drop_reason,
        "droppedPacket": l.dropped_packet,
        "answeredWith": l.answered_with,
        "unsupported": l.unsupported,
        "hops": l.hops.iter().map(|h| hop_json(h, topo, owners)).collect::<Vec<_>>(),
    })
}

/// The JSON output of `trace -o json`.
pub fn trace_json(t: &Trace, dest: &Destination, topo: &Topology, owners: &Owners) -> Value {
    let main = main_path(t);
    let mut reply = main
        .and_then(|p| p.reply.as_ref())
        .map(|r| leg_json(r, topo, owners))
        .unwrap_or(Value::Null);
    if let Value::Object(m) = &mut reply {
        m.insert("clientSees".into(), json!(main.and_then(|p| p.client_sees)));
        m.insert("works".into(), json!(main.is_some_and(|p| p.works)));
    }
    json!({
        "verdict": verdict(t),
        "from": t.from,
        "sent": t.sent,
        "to": {
            "target": dest.target,
            "pod": dest.pod,
            "service": dest.service,
            "via": dest.via,
            "ip": dest.address.ip,
            "port": dest.address.port,
            "protocol": dest.protocol,
        },
        "candidates": t.candidates().into_iter().map(|(w, s)| json!({
            "workload": w, "ip": s.ip, "port": s.port,
        })).collect::<Vec<_>>(),
        "allPathsWork": t.all_work(),
        "forward": main.map(|p| leg_json(&p.forward, topo, owners)),
        "reply": reply,
        "paths": t.paths.len(),
        "truncated": t.truncated,
        "trace": t,
    })
}

fn hop_line(h: &Hop, topo: &Topology, owners: &Owners) -> String {
    let mut parts = vec![format!("{:<12}", format!("{:?}", h.step).to_lowercase())];
    if let Some(d) = h.device {
        parts.push(topo.name_of(d).unwrap_or_else(|| format!("port {d}")));
    }
    if let Some(c) = h.chain {
        parts.push(topo.name_of(c).unwrap_or_else(|| format!("chain {c}")));
    }
    if let Some(r) = h.rule {
        parts.push(format!("rule {r}"));
    }
    if let Some(r) = h.route {
        parts.push(format!("route {r}"));
    }
    if let Some(owner) = [h.rule, h.route, h.chain, h.device]
        .into_iter()
        .flatten()
        .find_map(|id| owners.of(id))
    {
        parts.push(format!("[Translation {owner}]"));
    }
    if !h.detail.is_empty() {
        parts.push(h.detail.clone());
    }
    parts.push(format!("=> {}", h.packet));
    parts.join("  ")
}

fn leg_text(out: &mut String, title: &str, l: &Leg, topo: &Topology, owners: &Owners) {
    out.push_str(&format!("{title}:\n"));
    for h in &l.hops {
        out.push_str(&format!("  {}\n", hop_line(h, topo, owners)));
    }
    match (l.verdict, &l.delivered_to, l.received) {
        (Verdict::Delivered, Some(w), Some(r)) => {
            out.push_str(&format!("  delivered to {w} as {r}\n"))
        }
        (Verdict::Unsupported, _, _) => out.push_str(&format!(
            "  the model cannot tell: {}\n",
            l.unsupported.as_deref().unwrap_or("no reason given")
        )),
        (Verdict::Rejected, _, _) => out.push_str(&format!(
            "  rejected: {}\n",
            l.drop_reason.as_deref().unwrap_or("no reason given")
        )),
        _ => out.push_str(&format!(
            "  dropped: {}\n",
            l.drop_reason.as_deref().unwrap_or("no reason given")
        )),
    }
    if let Some(a) = l.answered_with {
        out.push_str(&format!("  answered with {a}\n"));
    }
}

/// The text output of `trace`.
pub fn trace_text(t: &Trace, dest: &Destination, topo: &Topology, owners: &Owners) -> String {
    let via = match dest.via {
        Some(ServiceAddressKind::ExternalIp) => ", external IP",
        Some(ServiceAddressKind::LoadBalancerIngress) => ", load-balancer ingress",
        Some(ServiceAddressKind::NodePort) => ", node port",
        Some(ServiceAddressKind::ClusterIp) | None => "",
    };
    let mut out = format!(
        "{} {} -> {} ({}{}{via})\n",
        t.sent.protocol,
        t.from,
        dest.target,
        dest.address,
        dest.pod
            .as_ref()
            .map(|p| format!(", {p}"))
            .unwrap_or_default()
    );
    if let Some(p) = main_path(t) {
        leg_text(&mut out, "forward", &p.forward, topo, owners);
        if let Some(r) = &p.reply {
            leg_text(&mut out, "reply", r, topo, owners);
        }
        match p.client_sees {
            Some(seen) => out.push_str(&format!("client sees the reply from {seen}\n")),
            None if p.reply.is_some() => out.push_str("the reply does not reach the client\n"),
            None => {}
        }
    }
    let candidates = t.candidates();
    match verdict(t) {
        Verdict::Delivered => {
            out.push_str(&format!(
                "verdict: DELIVERED on {} of {} path(s) to:\n",
                t.paths
                    .iter()
                    .filter(|p| p.forward.verdict == Verdict::Delivered)
                    .count(),
                t.paths.len()
            ));
            for (w, s) in candidates {
                out.push_str(&format!("  {w} {s}\n"));
            }
            if !t.all_work() {
                out.push_str("warning: not every path works end to end (see -o json)\n");
            }
        }
        Verdict::Dropped => out.push_str("verdict: DROPPED\n"),
        Verdict::Rejected => out.push_str("verdict: REJECTED (an ICMP error answered it)\n"),
        Verdict::Unsupported => out.push_str(&format!(
            "verdict: UNSUPPORTED: the model does not simulate {}\n",
            t.unsupported().unwrap_or("something on the way")
        )),
    }
    if t.truncated {
        out.push_str("warning: more paths exist than were explored\n");
    }
    out
}

/// The table output of `check`.
pub fn check_table(r: &Report, elapsed: std::time::Duration) -> String {
    let mut out = format!("{:<18} {:>8} {:>8}\n", "FLOW", "CHECKED", "FAILED");
    for kind in FlowKind::ALL {
        let t = r.by_kind.get(&kind).copied().unwrap_or_default();
        // Without an edge there is no outside, without node ports no node-port flow: their
        // rows would only say so.
        if !kind.in_every_cluster() && t.checked == 0 {
            continue;
        }
        out.push_str(&format!(
            "{:<18} {:>8} {:>8}\n",
            kind.name(),
            t.checked,
            t.failed
        ));
    }
    for f in &r.failures {
        out.push_str(&format!(
            "FAILED {} {} -> {} {}: {}\n",
            f.kind.name(),
            f.from,
            f.to,
            f.protocol,
            f.problem
        ));
    }
    for u in &r.unplugged {
        out.push_str(&format!("unplugged: {u}\n"));
    }
    for e in &r.unverifiable_endpoints {
        out.push_str(&format!("unverifiable endpoint: {e}\n"));
    }
    for n in &r.not_served {
        out.push_str(&format!("not served: {n}\n"));
    }
    for p in &r.topology_problems {
        out.push_str(&format!(
            "topology problem: {}: {}\n",
            p.resource, p.problem
        ));
    }
    out.push_str(&format!(
        "{} flow(s) checked, {} failed, in {:.1}s\n",
        r.flows_checked,
        r.failures.len(),
        elapsed.as_secs_f64()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_resolves_at_the_address_asked_for() {
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "app"},
            "spec": {"clusterIP": "10.96.0.10",
                     "externalIPs": ["2001:db8::1", "198.51.100.7", "198.51.100.8"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"},
                                                    {"ip": "203.0.113.5"}]}}
        }))
        .unwrap();
        let plain: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "plain", "namespace": "app"},
            "spec": {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}
        }))
        .unwrap();
        let cluster = Cluster {
            services: vec![svc, plain],
            ..Cluster::default()
        };
        let at = |to: &str, via: Via| {
            resolve(&cluster, &Target::parse(to).unwrap(), to, None, via)
                .map(|d| (d.address, d.via))
        };
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        use ServiceAddressKind::*;
        assert_eq!(
            at("svc/app/web:http", Via::ClusterIp),
            Ok((SocketV4::new(ip("10.96.0.10"), 80), Some(ClusterIp)))
        );
        // The first IPv4 external IP, the first ingress with an IP.
        assert_eq!(
            at("svc/app/web:http", Via::ExternalIp),
            Ok((SocketV4::new(ip("198.51.100.7"), 80), Some(ExternalIp)))
        );
        assert_eq!(
            at("svc/app/web:80", Via::LoadBalancer),
            Ok((
                SocketV4::new(ip("203.0.113.5"), 80),
                Some(LoadBalancerIngress)
            ))
        );
        // Any of its addresses by value; not someone else's.
        assert_eq!(
            at("svc/app/web:80", Via::Address(ip("198.51.100.8"))),
            Ok((SocketV4::new(ip("198.51.100.8"), 80), Some(ExternalIp)))
        );
        assert_eq!(
            at("svc/app/web:80", Via::Address(ip("10.96.0.10"))),
            Ok((SocketV4::new(ip("10.96.0.10"), 80), Some(ClusterIp)))
        );
        let err = at("svc/app/web:80", Via::Address(ip("198.51.100.9"))).unwrap_err();
        assert!(err.contains("no address 198.51.100.9"), "{err}");
        let err = at("svc/app/plain:80", Via::ExternalIp).unwrap_err();
        assert!(err.contains("app/plain has no IPv4 external IP"), "{err}");
        let err = at("svc/app/plain:80", Via::LoadBalancer).unwrap_err();
        assert!(err.contains("load-balancer ingress"), "{err}");
        // Only a Service has addresses to choose from.
        assert!(at("10.96.0.10:80", Via::ExternalIp).is_err());
        assert_eq!(Via::parse("lb"), Ok(Via::LoadBalancer));
        assert_eq!(Via::parse("load-balancer"), Ok(Via::LoadBalancer));
        assert_eq!(Via::parse("external-ip"), Ok(Via::ExternalIp));
        assert_eq!(Via::parse("cluster-ip"), Ok(Via::ClusterIp));
        assert_eq!(Via::parse("1.2.3.4"), Ok(Via::Address(ip("1.2.3.4"))));
        assert!(Via::parse("external").is_err());
    }

    #[test]
    fn targets_and_sources_parse() {
        assert_eq!(
            Target::parse("svc/app/web:http"),
            Ok(Target::Service {
                namespace: "app".into(),
                name: "web".into(),
                port: PortRef::Name("http".into())
            })
        );
        assert_eq!(
            Target::parse("svc/app/web:80"),
            Ok(Target::Service {
                namespace: "app".into(),
                name: "web".into(),
                port: PortRef::Number(80)
            })
        );
        assert_eq!(
            Target::parse("pod/app/a1:8080"),
            Ok(Target::Pod {
                namespace: "app".into(),
                name: "a1".into(),
                port: 8080
            })
        );
        assert_eq!(
            Target::parse("10.96.0.10:53"),
            Ok(Target::Address(SocketV4::new(
                Ipv4Addr::new(10, 96, 0, 10),
                53
            )))
        );
        assert!(Target::parse("pod/app/a1:http").is_err());
        assert!(Target::parse("svc/app:80").is_err());
        assert!(Target::parse("10.0.0.1").is_err());
        assert_eq!(
            Source::parse("node/n1").map(|s| s.attachment_name()),
            Ok("node/n1".into())
        );
        assert_eq!(
            Source::parse("pod/a/b").map(|s| s.attachment_name()),
            Ok("pod/a/b".into())
        );
        assert!(Source::parse("pod/a").is_err());
        assert_eq!(
            Source::parse("external/198.18.0.10/b"),
            Ok(Source::External {
                ip: Ipv4Addr::new(198, 18, 0, 10),
                uplink: Some("b".into())
            })
        );
        assert!(Source::parse("external/nope").is_err());
        // Without an edge, an outside client has nowhere to come from.
        let err = Source::parse("external/198.18.0.10")
            .unwrap()
            .attachment(&Cluster::default())
            .unwrap_err();
        assert!(err.contains("no edge"), "{err}");
    }

    #[test]
    fn a_route_hop_names_its_route_and_its_translation() {
        let route = Uuid::parse_str("11111111-1111-4111-8111-111111111111").unwrap();
        let router = Uuid::parse_str("22222222-2222-4222-8222-222222222222").unwrap();
        let hop = Hop {
            step: midonet_dataplane::Step::Route,
            device: Some(router),
            chain: None,
            rule: None,
            route: Some(route),
            ports: Vec::new(),
            detail: "route 10.244.2.0/24".into(),
            packet: "tcp 10.244.1.10:40000 -> 10.244.2.10:8080".into(),
        };
        let topo = Topology::new(Vec::new(), midonet_dataplane::RuleOrder::Listed, Vec::new());
        let owners = Owners(HashMap::from([
            (route, "kube-system/node-b".to_string()),
            (router, "cluster-router".to_string()),
        ]));
        let v = hop_json(&hop, &topo, &owners);
        assert_eq!(v["step"], "route");
        assert_eq!(v["route"], route.to_string());
        assert!(v.get("rule").is_none(), "{v}");
        // The route's owner, not the router's.
        assert_eq!(v["translation"], "kube-system/node-b");
        let line = hop_line(&hop, &topo, &owners);
        assert!(line.contains(&format!("route {route}")), "{line}");
        assert!(!line.contains("rule "), "{line}");
        assert!(line.contains("[Translation kube-system/node-b]"), "{line}");
    }

    #[test]
    fn owners_come_from_item_paths() {
        assert_eq!(
            id_of_path("/rules/11111111-1111-4111-8111-111111111111"),
            Uuid::parse_str("11111111-1111-4111-8111-111111111111").ok()
        );
        assert_eq!(
            id_of_path("/ports/11111111-1111-4111-8111-111111111111/link"),
            None
        );
    }
}
