//! What the Service and the Endpoints translators both read of a Service: its IPv4 cluster
//! IP, the addresses it is reached at ([`service_ips`]), the ports MidoNet can implement,
//! and its traffic policies and session affinity.
//!
//! Both must agree on them (the Endpoints fill the chains the Service's ports got), so they
//! are read here, once; each translator reports the warnings in its own way (the Service
//! translator on the Service, the Endpoints translator not at all: the Service's problem is
//! reported once, on the Service).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Service, ServicePort};

use crate::addr::{parse_ipv4, AddrError};
use crate::translate::{reason, TranslationWarning};

/// IP protocol numbers MidoNet matches on.
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

/// The protocol number of a port's protocol (Kubernetes defaults it to TCP).
pub fn protocol_number(protocol: Option<&str>) -> Option<u8> {
    match protocol {
        None | Some("TCP") => Some(PROTO_TCP),
        Some("UDP") => Some(PROTO_UDP),
        Some(_) => None,
    }
}

/// A port number in 1..=65535.
pub fn port_number(port: i32) -> Option<u16> {
    u16::try_from(port).ok().filter(|p| *p != 0)
}

/// Whether traffic to the cluster IP may only reach endpoints on the client's own node
/// (`spec.internalTrafficPolicy: Local`; unset or `Cluster`: any endpoint).
pub fn internal_traffic_local(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.internal_traffic_policy.as_deref())
        == Some("Local")
}

/// Whether traffic from outside to a node's address and a node port may only reach
/// endpoints on that node (`spec.externalTrafficPolicy: Local`; unset or `Cluster`: any).
pub fn external_traffic_local(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local")
}

/// Whether the Service asks that one client's connections keep going to one endpoint
/// (`spec.sessionAffinity: ClientIP`; unset or `None`: each connection on its own).
pub fn client_ip_affinity(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.session_affinity.as_deref())
        == Some("ClientIP")
}

/// How long Kubernetes keeps a client on its endpoint after its last connection:
/// `sessionAffinityConfig.clientIP.timeoutSeconds`, 10800 (three hours) when unset.
pub fn affinity_timeout_seconds(svc: &Service) -> i32 {
    svc.spec
        .as_ref()
        .and_then(|s| s.session_affinity_config.as_ref())
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds)
        .unwrap_or(DEFAULT_AFFINITY_TIMEOUT_SECONDS)
}

/// The apiserver's default `timeoutSeconds` of `sessionAffinity: ClientIP`.
pub const DEFAULT_AFFINITY_TIMEOUT_SECONDS: i32 = 10800;

/// The `nodePort` of the service port named `port_name` (unnamed: `""`), if the apiserver
/// allocated one (NodePort and LoadBalancer Services, unique in the cluster).
pub fn node_port(svc: &Service, port_name: &str) -> Option<u16> {
    svc.spec
        .as_ref()?
        .ports
        .as_deref()?
        .iter()
        .find(|sp| sp.name.as_deref().unwrap_or_default() == port_name)?
        .node_port
        .and_then(port_number)
}

/// The service's IPv4 cluster IP, if it has one. Every type but ExternalName has a cluster
/// IP (NodePort and LoadBalancer Services too), and pods use it whatever the type.
///
/// `Ok(None)`: nothing to translate and nothing wrong (headless, other service types, not yet
/// allocated). `Err`: a cluster IP MidoNet cannot use.
pub fn cluster_ipv4(svc: &Service) -> Result<Option<Ipv4Addr>, TranslationWarning> {
    let Some(spec) = svc.spec.as_ref() else {
        return Ok(None);
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(None);
    }
    let primary = spec.cluster_ip.as_deref().unwrap_or_default();
    if primary.is_empty() || primary == "None" {
        return Ok(None);
    }
    // Dual-stack services list their other family in clusterIPs; use the first IPv4.
    let candidates = std::iter::once(primary).chain(
        spec.cluster_ips
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(String::as_str),
    );
    let mut invalid = None;
    for raw in candidates {
        match parse_ipv4(raw) {
            Ok(ip) => return Ok(Some(ip)),
            Err(AddrError::Ipv6) => {}
            Err(AddrError::Invalid) => {
                invalid.get_or_insert_with(|| raw.to_string());
            }
        }
    }
    Err(match invalid {
        Some(raw) => TranslationWarning::new(
            reason::INVALID_CLUSTER_IP,
            format!("cluster IP {raw:?} is not an IP address"),
        ),
        None => TranslationWarning::new(
            reason::UNSUPPORTED_IP_FAMILY,
            format!("cluster IP {primary:?} is IPv6; MidoNet needs IPv4"),
        ),
    })
}

/// A service port MidoNet can implement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidPort {
    pub name: String,
    pub proto: u8,
    pub port: u16,
}

/// The service's usable ports in spec order, with a warning for each skipped one.
pub fn valid_ports(svc: &Service, mut warn: impl FnMut(TranslationWarning)) -> Vec<ValidPort> {
    let ports: &[ServicePort] = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in ports {
        let name = p.name.clone().unwrap_or_default();
        let Some(proto) = protocol_number(p.protocol.as_deref()) else {
            warn(TranslationWarning::new(
                reason::UNSUPPORTED_PROTOCOL,
                format!(
                    "port {name:?} uses protocol {:?}; only TCP and UDP are supported",
                    p.protocol.as_deref().unwrap_or_default()
                ),
            ));
            continue;
        };
        let Some(port) = port_number(p.port) else {
            warn(TranslationWarning::new(
                reason::INVALID_PORT,
                format!("port {name:?} has number {}, outside 1-65535", p.port),
            ));
            continue;
        };
        // The apiserver rejects duplicate names; were one to slip through, both ports would
        // map to the same chain.
        if !seen.insert(name.clone()) {
            warn(TranslationWarning::new(
                reason::INVALID_PORT,
                format!("port name {name:?} is used twice; only the first is translated"),
            ));
            continue;
        }
        out.push(ValidPort { name, proto, port });
    }
    out
}

/// The destination addresses a Service's ports are reached at, each once: the cluster IP,
/// then every `spec.externalIPs` entry, then every `status.loadBalancer.ingress[].ip`.
/// kube-proxy sends traffic to any of them on a service port to the port's endpoints, as
/// it does for the cluster IP, and so do the rules here; replies are un-DNATed to whichever
/// address the client used (the NAT state is per flow).
///
/// An ingress entry with `ipMode: Proxy` is skipped: the load balancer delivers such traffic
/// to the nodes or pods itself, so kube-proxy does not short-cut it. Entries with only a
/// `hostname` have nothing to match. IPv6 and malformed addresses are reported through
/// `warn` and skipped.
pub fn service_ips(
    svc: &Service,
    cluster_ip: Ipv4Addr,
    mut warn: impl FnMut(TranslationWarning),
) -> Vec<Ipv4Addr> {
    let external = svc
        .spec
        .as_ref()
        .and_then(|s| s.external_ips.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|ip| ("external IP", ip.as_str()));
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|i| i.ip_mode.as_deref() != Some("Proxy"))
        .filter_map(|i| Some(("load-balancer ingress IP", i.ip.as_deref()?)));
    let mut out = vec![cluster_ip];
    for (what, raw) in external.chain(ingress) {
        match parse_ipv4(raw) {
            Ok(ip) => {
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
            Err(AddrError::Ipv6) => warn(TranslationWarning::new(
                reason::UNSUPPORTED_IP_FAMILY,
                format!("{what} {raw:?} is IPv6 and is skipped; MidoNet needs IPv4"),
            )),
            Err(AddrError::Invalid) => warn(TranslationWarning::new(
                reason::INVALID_SERVICE_IP,
                format!("{what} {raw:?} is not an IP address and is skipped"),
            )),
        }
    }
    out
}
