//! Service: per service port a chain `KUBE-SVC-…` and, per address the Service is reached
//! at (cluster IP, external IPs, load-balancer ingress IPs: [`service_ips`]), a jump to it
//! from KUBE-SERVICES.
//!
//! Each port with a `nodePort` also gets a jump from KUBE-NODEPORTS, which the Nodes' chains
//! jump to for their own addresses (see [`crate::node`]), but for
//! `externalTrafficPolicy: Local` (see [`crate::endpoints`]).
//!
//! The chains are filled by the Endpoints translator (see [`crate::endpoints`]).
//!
//! With `sessionAffinity: ClientIP` and an edge, each TCP port also gets a pool on the
//! edge's load balancer, a `SOURCE_IP` VIP per external and load-balancer ingress IP, and
//! an `accept` per such address in KUBE-EDGE-STICKY (see [`crate::affinity`]; the
//! Endpoints translator fills the pool). What is not sticky is said in a Warning.

use k8s_openapi::api::core::v1::Service;

use crate::affinity::{affinity_warning, sticky_ports, StickyPort};
use crate::ids::id_for_key;
use crate::model::{Chain, Pool, PortRange, Resource, Rule, RuleType, Vip, DL_TYPE_IPV4};
use crate::naming::{backend_name, NameKey};
use crate::service_spec::{
    cluster_ipv4, external_traffic_local, node_port, service_ips, valid_ports, ValidPort,
};
pub use crate::service_spec::{PROTO_TCP, PROTO_UDP};
use crate::topology::{
    edge_load_balancer_id, edge_sticky_chain_id, nodeports_chain_id, service_port_pool_id,
    services_chain_id,
};
pub use crate::topology::{service_port_chain_id, service_port_key, SERVICE_PORT_KIND};
use crate::translate::{DesiredTranslation, NamespacedName, Translated, TranslatorConfig};

/// Kind used in the Service's Translation name.
pub const SERVICE_KIND: &str = "Service";
/// Pseudo kind of the jump from KUBE-SERVICES to a service port's chain.
pub const SERVICE_PORT_JUMP_KIND: &str = "ServicePortJump";
/// Pseudo kind of the jump from KUBE-NODEPORTS to a service port's chain.
pub const SERVICE_NODE_PORT_JUMP_KIND: &str = "ServiceNodePortJump";
/// Pseudo kind of a sticky port's VIP on the edge's load balancer.
pub const SERVICE_PORT_VIP_KIND: &str = "ServicePortVip";
/// Pseudo kind of a sticky port's `accept` in KUBE-EDGE-STICKY.
pub const SERVICE_PORT_STICKY_KIND: &str = "ServicePortSticky";

/// The jump from the port's `spec.ports[].nodePort` (any destination: only a Node's chain
/// jumps to KUBE-NODEPORTS, for the Node's addresses) to the port's chain. NodePort
/// and LoadBalancer Services have node ports; the apiserver allocates them unique in the
/// cluster, so the jumps of all Services match disjoint traffic: position 1.
///
/// None for `externalTrafficPolicy: Local`: a node port of such a Service may only reach
/// the addressed node's own endpoints, which the port's chain cannot tell apart; the
/// Endpoints generations DNAT it in each node's `KUBE-NODEPORTS-LOCAL-<node>` instead
/// (see [`crate::endpoints`]); on a node without endpoints nothing translates it.
fn node_port_jump(
    cfg: &TranslatorConfig,
    svc: &Service,
    p: &ValidPort,
    port_key: &str,
    chain: uuid::Uuid,
) -> Option<Resource> {
    if external_traffic_local(svc) {
        return None;
    }
    let node_port = node_port(svc, &p.name)?;
    let key = format!("{port_key}/{}/{node_port}", p.proto);
    let mut rule = Rule::jump(
        nodeports_chain_id(cfg),
        id_for_key(cfg, SERVICE_NODE_PORT_JUMP_KIND, &key),
        chain,
    )
    .at(1);
    rule.dl_type = Some(DL_TYPE_IPV4);
    rule.nw_proto = Some(p.proto);
    rule.tp_dst = Some(PortRange::single(node_port));
    Some(rule.into())
}

/// A sticky port's resources (`sessionAffinity: ClientIP`, see [`crate::affinity`]): its
/// pool on the edge's load balancer, a `SOURCE_IP` VIP per sticky address, then per sticky
/// address the `accept` in KUBE-EDGE-STICKY that lets what comes from outside reach the
/// load balancer un-DNATed. The accepts come last: until the VIPs exist, the uplink's
/// DNAT keeps serving the address. Every ID covers its body (the pool's is the port's
/// key, which its body does not depend on); the accepts match disjoint traffic across
/// Services, so position 1.
fn sticky_resources(cfg: &TranslatorConfig, port_key: &str, s: &StickyPort) -> Vec<Resource> {
    let p = s.port;
    let pool = service_port_pool_id(cfg, port_key);
    let mut out: Vec<Resource> = vec![Pool::new(edge_load_balancer_id(cfg), pool).into()];
    for ip in &s.addresses {
        let key = format!("{port_key}/{ip}/{}", p.port);
        let id = id_for_key(cfg, SERVICE_PORT_VIP_KIND, &key);
        out.push(Vip::new(pool, id, *ip, p.port).sticky().into());
    }
    for ip in &s.addresses {
        let key = format!("{port_key}/{ip}/{}/{}", p.proto, p.port);
        let id = id_for_key(cfg, SERVICE_PORT_STICKY_KIND, &key);
        let accept = Rule::new(edge_sticky_chain_id(cfg), id, RuleType::Accept).at(1);
        out.push(accept.to_service(*ip, p.proto, p.port).into());
    }
    out
}

pub fn service(cfg: &TranslatorConfig, svc: &Service) -> Translated {
    let (namespace, name) = match NamespacedName::of(SERVICE_KIND, &svc.metadata) {
        Ok(id) => (id.namespace, id.name),
        Err(w) => return Translated::refused(w),
    };
    let mut out = Translated::default();
    let ip = match cluster_ipv4(svc) {
        Ok(Some(ip)) => ip,
        Ok(None) => return out,
        Err(w) => {
            out.warnings.push(w);
            return out;
        }
    };
    let ips = service_ips(svc, ip, |w| out.warnings.push(w));
    let ports = valid_ports(svc, |w| out.warnings.push(w));
    let edge = cfg.edge.is_some();
    out.warnings
        .extend(affinity_warning(edge, svc, &ports, ip, &ips));
    let sticky = sticky_ports(edge, svc, &ports, ip, &ips);
    let services = services_chain_id(cfg);
    let mut resources: Vec<Resource> = Vec::new();
    for p in &ports {
        let port_key = service_port_key(namespace, name, &p.name);
        let chain = service_port_chain_id(cfg, &port_key);
        resources.push(
            Chain::named(
                chain,
                &cfg.tenant,
                backend_name(format!("KUBE-SVC-{port_key}")),
            )
            .into(),
        );
        // Rules cannot be updated: the jump's ID covers everything it matches, so a changed
        // cluster IP, protocol or port is a new rule (and the old one is removed) rather than
        // a changed body under the same ID. KUBE-SERVICES is shared by all services and its
        // rules match disjoint traffic, so their order is irrelevant: position 1.
        resources.extend(node_port_jump(cfg, svc, p, &port_key, chain));
        for ip in &ips {
            let jump_key = format!("{port_key}/{ip}/{}/{}", p.proto, p.port);
            resources.push(
                Rule::jump(
                    services,
                    id_for_key(cfg, SERVICE_PORT_JUMP_KIND, &jump_key),
                    chain,
                )
                .at(1)
                .to_service(*ip, p.proto, p.port)
                .into(),
            );
        }
        if let Some(s) = sticky.iter().find(|s| s.port == p) {
            resources.extend(sticky_resources(cfg, &port_key, s));
        }
    }
    if !resources.is_empty() {
        out.translations.push(DesiredTranslation::versioned(
            cfg,
            SERVICE_KIND,
            &NameKey::object(name),
            namespace,
            resources,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::reason;
    use serde_json::json;
    use std::net::Ipv4Addr;

    fn svc(spec: serde_json::Value, status: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_service_is_reached_at_its_cluster_external_and_ingress_ips() {
        let s = svc(
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                   "externalIPs": ["203.0.113.1", "10.96.0.10", "fd00::1", "bogus", "203.0.113.1"],
                   "ports": [{"name": "http", "port": 80}]}),
            json!({"loadBalancer": {"ingress": [
                {"ip": "192.0.2.1"},
                {"hostname": "lb.example.com"},
                {"ip": "192.0.2.2", "ipMode": "Proxy"},
                {"ip": "192.0.2.3", "ipMode": "VIP"},
                {"ip": "203.0.113.1"}]}}),
        );
        let mut warnings = Vec::new();
        let ips = service_ips(&s, "10.96.0.10".parse().unwrap(), |w| warnings.push(w));
        let want: Vec<Ipv4Addr> = ["10.96.0.10", "203.0.113.1", "192.0.2.1", "192.0.2.3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(ips, want);
        let reasons: Vec<&str> = warnings.iter().map(|w| w.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [reason::UNSUPPORTED_IP_FAMILY, reason::INVALID_SERVICE_IP]
        );
        assert!(warnings[1].message.contains("\"bogus\""), "{warnings:?}");
    }

    /// A LoadBalancer Service (cluster IP 10.96.0.10, external IP 203.0.113.1, ingress IP
    /// 192.0.2.1, TCP port http 80 and UDP port dns 53) with `sessionAffinity: affinity`.
    fn lb_service(affinity: &str) -> Service {
        svc(
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.10", "sessionAffinity": affinity,
                   "externalIPs": ["203.0.113.1"],
                   "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                             {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]}),
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}),
        )
    }

    /// What the Service's Translation puts on the edge's load balancer and in
    /// KUBE-EDGE-STICKY, as text: `pool <id>`, `vip <address>:<port> <persistence> <pool>`,
    /// `accept <address>:<proto>/<port>`.
    fn sticky_parts(cfg: &TranslatorConfig, out: &Translated) -> Vec<String> {
        let sticky_chain = edge_sticky_chain_id(cfg).to_string();
        let mut parts = Vec::new();
        for r in out.translations.iter().flat_map(|t| &t.resources) {
            let b: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            match r.kind.as_str() {
                "Pool" => parts.push(format!(
                    "pool {} {} on {}",
                    b["id"].as_str().unwrap(),
                    b["lbMethod"].as_str().unwrap(),
                    b["loadBalancerId"].as_str().unwrap()
                )),
                "Vip" => parts.push(format!(
                    "vip {}:{} {} {}",
                    b["address"].as_str().unwrap(),
                    b["protocolPort"],
                    b["sessionPersistence"].as_str().unwrap_or("none"),
                    b["poolId"].as_str().unwrap()
                )),
                "Rule" if r.parent == sticky_chain => parts.push(format!(
                    "{} {}/{}:{}/{}",
                    b["type"].as_str().unwrap(),
                    b["nwDstAddress"].as_str().unwrap(),
                    b["nwDstLength"],
                    b["nwProto"],
                    b["tpDst"]["start"]
                )),
                "LoadBalancer" | "PoolMember" => panic!("not the Service's: {}", r.kind),
                _ => {}
            }
        }
        parts
    }

    #[test]
    fn client_ip_affinity_holds_outside_clients_at_the_tcp_ports_of_external_and_ingress_ips() {
        let cfg = crate::edge_spec::example_config();
        let out = service(&cfg, &lb_service("ClientIP"));
        let pool = service_port_pool_id(&cfg, "ns/web/http");
        let lb = edge_load_balancer_id(&cfg);
        // One pool for the TCP port, a sticky VIP at each address an outside client uses
        // (not the cluster IP, which only pods use), and the accepts that keep the uplink's
        // DNAT off them. The UDP port has none of it: MidoNet's VIP is TCP only.
        assert_eq!(
            sticky_parts(&cfg, &out),
            [
                format!("pool {pool} ROUND_ROBIN on {lb}"),
                format!("vip 203.0.113.1:80 SOURCE_IP {pool}"),
                format!("vip 192.0.2.1:80 SOURCE_IP {pool}"),
                "accept 203.0.113.1/32:6/80".to_string(),
                "accept 192.0.2.1/32:6/80".to_string(),
            ]
        );
        // Pods keep reaching every address and port per connection (KUBE-SERVICES).
        let jumps = out.translations[0]
            .resources
            .iter()
            .filter(|r| r.parent == services_chain_id(&cfg).to_string())
            .count();
        assert_eq!(jumps, 3 * 2);
        let reasons: Vec<&str> = out.warnings.iter().map(|w| w.reason.as_str()).collect();
        assert_eq!(reasons, [reason::UNSUPPORTED_SESSION_AFFINITY]);
        let message = &out.warnings[0].message;
        for part in [
            "203.0.113.1:80/TCP, 192.0.2.1:80/TCP",
            "timeoutSeconds 10800 is not honoured",
            "the cluster IP 10.96.0.10",
            "pods' connections to every address",
            "the node ports",
            "port 53/UDP",
        ] {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }

    #[test]
    fn without_an_edge_or_client_ip_affinity_nothing_is_sticky() {
        let edge = crate::edge_spec::example_config();
        let plain = TranslatorConfig::default();
        // No edge: nothing brings outside clients in, nothing is sticky, and the Warning
        // says so; the Service is still balanced per connection.
        let out = service(&plain, &lb_service("ClientIP"));
        assert!(sticky_parts(&plain, &out).is_empty());
        assert_eq!(out.translations.len(), 1, "still balanced per connection");
        assert_eq!(out.warnings.len(), 1);
        assert!(
            out.warnings[0]
                .message
                .contains("not served for this Service: every connection (there is no edge"),
            "{}",
            out.warnings[0].message
        );
        // `None`: none of it, and nothing to warn about.
        let out = service(&edge, &lb_service("None"));
        assert!(sticky_parts(&edge, &out).is_empty());
        assert!(out.warnings.is_empty());
        // A ClientIP Service with only a cluster IP has no address outside clients use.
        let cluster_only = svc(
            json!({"clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
                   "ports": [{"name": "http", "port": 80}]}),
            json!({}),
        );
        let out = service(&edge, &cluster_only);
        assert!(sticky_parts(&edge, &out).is_empty());
        assert_eq!(out.warnings.len(), 1);
    }

    #[test]
    fn each_address_gets_its_own_jump_per_port() {
        let cfg = TranslatorConfig::default();
        let s = svc(
            json!({"clusterIP": "10.96.0.10", "externalIPs": ["203.0.113.1"],
                   "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}),
            json!({}),
        );
        let out = service(&cfg, &s);
        assert!(out.warnings.is_empty());
        let mut jumps = Vec::new();
        for r in &out.translations[0].resources {
            let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            if body["type"] == "jump" {
                jumps.push(format!(
                    "{}:{}",
                    body["nwDstAddress"].as_str().unwrap(),
                    body["tpDst"]["start"]
                ));
            }
        }
        assert_eq!(
            jumps,
            [
                "10.96.0.10:80",
                "203.0.113.1:80",
                "10.96.0.10:53",
                "203.0.113.1:53"
            ]
        );
        // Without extra addresses the Service is what it was.
        let plain = svc(
            json!({"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}),
            json!({}),
        );
        assert_eq!(service(&cfg, &plain).translations[0].resources.len(), 2);
    }
}
