//! `sessionAffinity: ClientIP`: which of a Service's traffic is held to one endpoint per
//! client, and what is said about the rest (MAPPING.md, "`sessionAffinity: ClientIP`").
//!
//! # Guarantees
//!
//! - A service port is *sticky* ([`sticky_ports`]) exactly when the Service has
//!   `sessionAffinity: ClientIP`, the cluster has an edge, the port is TCP and the Service
//!   has addresses besides its cluster IP (external IPs, load-balancer ingress IPs: its
//!   *sticky addresses*). The Service translator gives such a port a pool on the edge's
//!   load balancer, a `SOURCE_IP` VIP per sticky address and an `accept` per sticky address
//!   in KUBE-EDGE-STICKY; the Endpoints translator puts the port's endpoints in the pool.
//!   Both decide it here, from the same inputs, so a pool never lacks its members' owner.
//! - [`not_sticky`] names every part of a ClientIP Service that stays balanced per
//!   connection, and [`affinity_warning`] says so on the Service.
//!
//! # Why only there
//!
//! midolman's L4 load balancer runs on a router: it DNATs in the router's pre-routing and
//! undoes it in the post-routing of the reply (`simulation/RouterBase.scala`,
//! `LoadBalancer.processInbound`/`processOutbound`), so the reply must cross the same router.
//! An outside client's reply always crosses the edge router. A pod's reply does not cross
//! the cluster router when client and endpoint share a node bridge, and a DNAT on a router
//! would make the egress NetworkPolicies (on the node bridge) see the Service address
//! instead of the endpoint. So the cluster IP, pods' connections to any address, the node
//! ports and UDP ports (the VIP matches TCP only, `simulation/Vip.scala`) keep per-connection
//! balancing. A sticky key lives until 60 s after its last use, whatever `timeoutSeconds`
//! says (midolman's flow-state expiration; the VIP has no timeout setting).
//!
//! # Left to others
//!
//! The resources (`crate::service`, `crate::endpoints`) and the IDs they share
//! (`crate::topology`).

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;

use crate::service_spec::{
    affinity_timeout_seconds, client_ip_affinity, node_port, ValidPort, PROTO_TCP, PROTO_UDP,
};
use crate::translate::{reason, TranslationWarning};

/// How long a sticky key outlives its last use, in seconds: midolman's expiration of every
/// NAT key (`FlowStateStore.DEFAULT_EXPIRATION`), with no per-VIP setting.
pub const STICKY_IDLE_SECONDS: u32 = 60;

/// One sticky TCP service port and the addresses the edge's load balancer holds it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StickyPort<'a> {
    pub port: &'a ValidPort,
    /// The Service's addresses but the cluster IP, in [`crate::service_spec::service_ips`]
    /// order; never empty.
    pub addresses: Vec<Ipv4Addr>,
}

/// The Service's addresses that are sticky for outside clients: all of `ips` (the
/// Service's addresses, [`crate::service_spec::service_ips`]) but the cluster IP.
fn sticky_addresses(cluster_ip: Ipv4Addr, ips: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
    ips.iter().copied().filter(|ip| *ip != cluster_ip).collect()
}

/// The sticky ports of `svc` among `ports` (see the module docs); `edge`: the cluster has
/// an edge.
pub fn sticky_ports<'a>(
    edge: bool,
    svc: &Service,
    ports: &'a [ValidPort],
    cluster_ip: Ipv4Addr,
    ips: &[Ipv4Addr],
) -> Vec<StickyPort<'a>> {
    let addresses = sticky_addresses(cluster_ip, ips);
    if !edge || !client_ip_affinity(svc) || addresses.is_empty() {
        return Vec::new();
    }
    ports
        .iter()
        .filter(|p| p.proto == PROTO_TCP)
        .map(|port| StickyPort {
            port,
            addresses: addresses.clone(),
        })
        .collect()
}

/// `80/TCP`.
fn port_text(p: &ValidPort) -> String {
    let proto = match p.proto {
        PROTO_TCP => "TCP",
        PROTO_UDP => "UDP",
        _ => "?",
    };
    format!("{}/{proto}", p.port)
}

/// What of a ClientIP Service stays balanced per connection, one phrase per part; empty
/// for a Service without `sessionAffinity: ClientIP`.
pub fn not_sticky(
    edge: bool,
    svc: &Service,
    ports: &[ValidPort],
    cluster_ip: Ipv4Addr,
    ips: &[Ipv4Addr],
) -> Vec<String> {
    if !client_ip_affinity(svc) {
        return Vec::new();
    }
    let addresses = sticky_addresses(cluster_ip, ips);
    let why = if !edge {
        Some("there is no edge (--edge-config)")
    } else if addresses.is_empty() {
        Some("the Service has no external or load-balancer ingress IP")
    } else if !ports.iter().any(|p| p.proto == PROTO_TCP) {
        Some("the Service has no TCP port")
    } else {
        None
    };
    if let Some(why) = why {
        return vec![format!("every connection ({why})")];
    }
    let mut out = vec![
        format!("the cluster IP {cluster_ip}"),
        "pods' connections to every address".to_string(),
    ];
    if ports.iter().any(|p| node_port(svc, &p.name).is_some()) {
        out.push("the node ports".to_string());
    }
    out.extend(
        ports
            .iter()
            .filter(|p| p.proto != PROTO_TCP)
            .map(|p| format!("port {} (the load balancer is TCP only)", port_text(p))),
    );
    out
}

/// The Warning of a Service with `sessionAffinity: ClientIP`: where the affinity holds
/// (and for how long) and exactly what stays balanced per connection. `None` without it.
pub fn affinity_warning(
    edge: bool,
    svc: &Service,
    ports: &[ValidPort],
    cluster_ip: Ipv4Addr,
    ips: &[Ipv4Addr],
) -> Option<TranslationWarning> {
    let loose = not_sticky(edge, svc, ports, cluster_ip, ips);
    if loose.is_empty() {
        return None;
    }
    let sticky = sticky_ports(edge, svc, ports, cluster_ip, ips);
    let see = "translators/MAPPING.md, \"sessionAffinity: ClientIP\"";
    let message = if sticky.is_empty() {
        format!(
            "sessionAffinity ClientIP is not served for this Service: {} is balanced on its \
             own; it is served only for clients outside the cluster, through the edge, at \
             external and load-balancer ingress IPs and TCP ports ({see})",
            loose.join("; ")
        )
    } else {
        let at: Vec<String> = sticky
            .iter()
            .flat_map(|s| {
                s.addresses
                    .iter()
                    .map(|ip| format!("{ip}:{}", port_text(s.port)))
            })
            .collect();
        format!(
            "sessionAffinity ClientIP holds a client to one endpoint only from outside the \
             cluster, through the edge, at {}, while the client keeps connecting and \
             {STICKY_IDLE_SECONDS} s after (timeoutSeconds {} is not honoured); balanced per \
             connection: {} ({see})",
            at.join(", "),
            affinity_timeout_seconds(svc),
            loose.join("; ")
        )
    };
    Some(TranslationWarning::new(
        reason::UNSUPPORTED_SESSION_AFFINITY,
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_spec::{cluster_ipv4, service_ips, valid_ports};
    use serde_json::json;

    fn svc(affinity: &str, external: &[&str], ingress: &[&str]) -> Service {
        let ingress: Vec<_> = ingress.iter().map(|ip| json!({"ip": ip})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                     "sessionAffinity": affinity, "externalIPs": external,
                     "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                               {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]},
            "status": {"loadBalancer": {"ingress": ingress}}
        }))
        .unwrap()
    }

    /// (sticky "address:port" list, not-sticky phrases) of `s`, with or without an edge.
    fn decide(edge: bool, s: &Service) -> (Vec<String>, Vec<String>) {
        let cluster_ip = cluster_ipv4(s).unwrap().unwrap();
        let ports = valid_ports(s, |_| {});
        let ips = service_ips(s, cluster_ip, |_| {});
        let sticky = sticky_ports(edge, s, &ports, cluster_ip, &ips)
            .iter()
            .flat_map(|p| p.addresses.iter().map(|a| format!("{a}:{}", p.port.port)))
            .collect();
        (sticky, not_sticky(edge, s, &ports, cluster_ip, &ips))
    }

    #[test]
    fn only_tcp_ports_at_external_and_ingress_ips_are_sticky_and_only_with_an_edge() {
        let s = svc("ClientIP", &["203.0.113.1"], &["192.0.2.1"]);
        let (sticky, loose) = decide(true, &s);
        assert_eq!(sticky, ["203.0.113.1:80", "192.0.2.1:80"]);
        assert_eq!(
            loose,
            [
                "the cluster IP 10.96.0.10",
                "pods' connections to every address",
                "the node ports",
                "port 53/UDP (the load balancer is TCP only)"
            ]
        );
        let (sticky, loose) = decide(false, &s);
        assert!(sticky.is_empty());
        assert_eq!(
            loose,
            ["every connection (there is no edge (--edge-config))"]
        );
        // Only a cluster IP: nothing is sticky, even with an edge.
        let (sticky, loose) = decide(true, &svc("ClientIP", &[], &[]));
        assert!(sticky.is_empty());
        assert_eq!(
            loose,
            ["every connection (the Service has no external or load-balancer ingress IP)"]
        );
        // Without ClientIP nothing is sticky and nothing is said.
        assert_eq!(
            decide(true, &svc("None", &["203.0.113.1"], &[])),
            (vec![], vec![])
        );
    }

    #[test]
    fn the_warning_says_where_affinity_holds_and_what_stays_per_connection() {
        let s = svc("ClientIP", &["203.0.113.1"], &[]);
        let cluster_ip = cluster_ipv4(&s).unwrap().unwrap();
        let ports = valid_ports(&s, |_| {});
        let ips = service_ips(&s, cluster_ip, |_| {});
        let w = affinity_warning(true, &s, &ports, cluster_ip, &ips).unwrap();
        assert_eq!(w.reason, reason::UNSUPPORTED_SESSION_AFFINITY);
        assert_eq!(
            w.message,
            "sessionAffinity ClientIP holds a client to one endpoint only from outside the \
             cluster, through the edge, at 203.0.113.1:80/TCP, while the client keeps \
             connecting and 60 s after (timeoutSeconds 10800 is not honoured); balanced per \
             connection: the cluster IP 10.96.0.10; pods' connections to every address; the \
             node ports; port 53/UDP (the load balancer is TCP only) (translators/MAPPING.md, \
             \"sessionAffinity: ClientIP\")"
        );
        let w = affinity_warning(false, &s, &ports, cluster_ip, &ips).unwrap();
        assert!(
            w.message.starts_with(
                "sessionAffinity ClientIP is not served for this Service: every connection \
                 (there is no edge (--edge-config)) is balanced on its own"
            ),
            "{}",
            w.message
        );
        let none = svc("None", &["203.0.113.1"], &[]);
        assert!(affinity_warning(true, &none, &ports, cluster_ip, &ips).is_none());
    }
}
