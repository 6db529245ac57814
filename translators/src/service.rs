//! Service: per service port a chain `KUBE-SVC-…` and, per address the Service is reached
//! at (cluster IP, external IPs, load-balancer ingress IPs: [`service_ips`]), a jump to it
//! from KUBE-SERVICES.
//!
//! Each port with a `nodePort` also gets a jump from KUBE-NODEPORTS, which the Nodes' chains
//! jump to for their own addresses (see [`crate::node`]), but for
//! `externalTrafficPolicy: Local` (see [`crate::endpoints`]).
//!
//! The chains are filled by the Endpoints translator (see [`crate::endpoints`]).

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;

use crate::addr::{parse_ipv4, AddrError};
use crate::ids::id_for_key;
use crate::model::{Chain, PortRange, Resource, Rule, DL_TYPE_IPV4};
use crate::naming::{backend_name, NameKey};
use crate::service_spec::{
    cluster_ipv4, external_traffic_local, node_port, valid_ports, ValidPort,
};
pub use crate::service_spec::{PROTO_TCP, PROTO_UDP};
use crate::topology::{nodeports_chain_id, services_chain_id};
pub use crate::topology::{service_port_chain_id, service_port_key, SERVICE_PORT_KIND};
use crate::translate::{
    reason, DesiredTranslation, NamespacedName, Translated, TranslationWarning, TranslatorConfig,
};

/// Kind used in the Service's Translation name.
pub const SERVICE_KIND: &str = "Service";
/// Pseudo kind of the jump from KUBE-SERVICES to a service port's chain.
pub const SERVICE_PORT_JUMP_KIND: &str = "ServicePortJump";
/// Pseudo kind of the jump from KUBE-NODEPORTS to a service port's chain.
pub const SERVICE_NODE_PORT_JUMP_KIND: &str = "ServiceNodePortJump";

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
pub(crate) fn service_ips(
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
    if svc
        .spec
        .as_ref()
        .and_then(|s| s.session_affinity.as_deref())
        == Some("ClientIP")
    {
        out.warn(
            reason::UNSUPPORTED_SESSION_AFFINITY,
            "sessionAffinity ClientIP is not served: each connection is balanced on its own \
             (translators/MAPPING.md, \"sessionAffinity: ClientIP (not served)\")"
                .to_string(),
        );
    }
    let ips = service_ips(svc, ip, |w| out.warnings.push(w));
    let services = services_chain_id(cfg);
    let mut resources: Vec<Resource> = Vec::new();
    for p in valid_ports(svc, |w| out.warnings.push(w)) {
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
        resources.extend(node_port_jump(cfg, svc, &p, &port_key, chain));
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
    use serde_json::json;

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

    #[test]
    fn client_ip_affinity_is_reported_as_not_served() {
        let cfg = TranslatorConfig::default();
        let spec = |affinity: &str| {
            json!({"clusterIP": "10.96.0.10", "sessionAffinity": affinity,
                   "ports": [{"name": "http", "port": 80}]})
        };
        let out = service(&cfg, &svc(spec("ClientIP"), json!({})));
        let reasons: Vec<&str> = out.warnings.iter().map(|w| w.reason.as_str()).collect();
        assert_eq!(reasons, [reason::UNSUPPORTED_SESSION_AFFINITY]);
        assert_eq!(out.translations.len(), 1, "still balanced per connection");
        assert!(service(&cfg, &svc(spec("None"), json!({})))
            .warnings
            .is_empty());
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
