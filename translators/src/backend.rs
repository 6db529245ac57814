//! Builders of the `{kind, parent, body}` entries the translators emit.
//!
//! Field names are those of MidoNet's REST models
//! (`midonet-cluster/.../rest_api/models/*.java`). Each body is serialised from a struct, so
//! field order, and therefore the exact bytes of a Translation, never depend on serde_json
//! features. These are write-only shapes; parsing and validating entries is the job of the
//! typed backend model.

use std::net::Ipv4Addr;

use serde::Serialize;
use uuid::Uuid;

use crate::entry::TranslationResource;

/// Backend kind names.
pub mod kind {
    pub const TUNNEL_ZONE: &str = "TunnelZone";
    pub const TUNNEL_ZONE_HOST: &str = "TunnelZoneHost";
    pub const ROUTER: &str = "Router";
    pub const BRIDGE: &str = "Bridge";
    pub const PORT: &str = "Port";
    pub const PORT_LINK: &str = "PortLink";
    pub const ROUTE: &str = "Route";
    pub const CHAIN: &str = "Chain";
    pub const RULE: &str = "Rule";
    pub const HOST_INTERFACE_PORT: &str = "HostInterfacePort";
    pub const MAC_PORT: &str = "MACPort";
    pub const IPV4_MAC_PAIR: &str = "IPv4MACPair";
}

/// EtherType of IPv4, for rules that match on IPv4 header fields.
pub const DL_TYPE_IPV4: u16 = 0x0800;
/// Weight of the routes we create (MidoNet's usual default).
pub const ROUTE_WEIGHT: u32 = 100;

fn entry(kind: &str, parent: Option<Uuid>, body: &impl Serialize) -> TranslationResource {
    // Serialising these plain structs cannot fail: no maps with non-string keys, no floats.
    let body = serde_json::to_string(body).unwrap_or_else(|_| "{}".to_string());
    TranslationResource::new(
        kind,
        parent.map(|p| p.to_string()).unwrap_or_default(),
        body,
    )
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Named<'a> {
    id: Uuid,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none", rename = "type")]
    type_: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inbound_filter_id: Option<Uuid>,
}

pub fn tunnel_zone(id: Uuid, name: &str, tz_type: &str) -> TranslationResource {
    let body = Named {
        id,
        name,
        tenant_id: None,
        type_: Some(tz_type),
        inbound_filter_id: None,
    };
    entry(kind::TUNNEL_ZONE, None, &body)
}

pub fn router(id: Uuid, tenant: &str, name: &str) -> TranslationResource {
    let body = Named {
        id,
        name,
        tenant_id: Some(tenant),
        type_: None,
        inbound_filter_id: None,
    };
    entry(kind::ROUTER, None, &body)
}

pub fn bridge(id: Uuid, tenant: &str, name: &str, inbound_filter: Uuid) -> TranslationResource {
    let body = Named {
        id,
        name,
        tenant_id: Some(tenant),
        type_: None,
        inbound_filter_id: Some(inbound_filter),
    };
    entry(kind::BRIDGE, None, &body)
}

pub fn chain(id: Uuid, tenant: &str, name: &str) -> TranslationResource {
    let body = Named {
        id,
        name,
        tenant_id: Some(tenant),
        type_: None,
        inbound_filter_id: None,
    };
    entry(kind::CHAIN, None, &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PortBody<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    type_: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    outbound_filter_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port_address: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    network_address: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    network_length: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port_mac: Option<&'a str>,
}

/// A port on a bridge, optionally with an outbound filter chain.
pub fn bridge_port(id: Uuid, bridge: Uuid, outbound_filter: Option<Uuid>) -> TranslationResource {
    let body = PortBody {
        id,
        type_: "Bridge",
        outbound_filter_id: outbound_filter,
        port_address: None,
        network_address: None,
        network_length: None,
        port_mac: None,
    };
    entry(kind::PORT, Some(bridge), &body)
}

/// A port on a router with an address in `network/length`.
///
/// The MAC is always given: MidoNet randomises a missing `portMac` on POST and clears it on
/// PUT (MNA-1251), so only an explicit, deterministic one survives re-pushes.
pub fn router_port(
    id: Uuid,
    router: Uuid,
    address: Ipv4Addr,
    network: Ipv4Addr,
    length: u8,
    mac: &str,
) -> TranslationResource {
    let body = PortBody {
        id,
        type_: "Router",
        outbound_filter_id: None,
        port_address: Some(address),
        network_address: Some(network),
        network_length: Some(length),
        port_mac: Some(mac),
    };
    entry(kind::PORT, Some(router), &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PortLinkBody {
    port_id: Uuid,
    peer_id: Uuid,
}

/// Links `port` with `peer`; the entry's parent is `port`.
pub fn port_link(port: Uuid, peer: Uuid) -> TranslationResource {
    let body = PortLinkBody {
        port_id: port,
        peer_id: peer,
    };
    entry(kind::PORT_LINK, Some(port), &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RouteBody {
    id: Uuid,
    src_network_addr: Ipv4Addr,
    src_network_length: u8,
    dst_network_addr: Ipv4Addr,
    dst_network_length: u8,
    next_hop_port: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_hop_gateway: Option<Ipv4Addr>,
    weight: u32,
    #[serde(rename = "type")]
    type_: &'static str,
}

/// A route on `router` from anywhere to `dst/dst_len` through `next_hop_port`.
pub fn route(
    id: Uuid,
    router: Uuid,
    dst: Ipv4Addr,
    dst_len: u8,
    next_hop_port: Uuid,
    next_hop_gateway: Option<Ipv4Addr>,
) -> TranslationResource {
    let body = RouteBody {
        id,
        src_network_addr: Ipv4Addr::UNSPECIFIED,
        src_network_length: 0,
        dst_network_addr: dst,
        dst_network_length: dst_len,
        next_hop_port,
        next_hop_gateway,
        weight: ROUTE_WEIGHT,
        type_: "Normal",
    };
    entry(kind::ROUTE, Some(router), &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HostInterfacePortBody<'a> {
    host_id: Uuid,
    port_id: Uuid,
    interface_name: &'a str,
}

/// Binds `port` to the interface `interface_name` of `host`; the entry's parent is the host.
pub fn host_interface_port(host: Uuid, port: Uuid, interface_name: &str) -> TranslationResource {
    let body = HostInterfacePortBody {
        host_id: host,
        port_id: port,
        interface_name,
    };
    entry(kind::HOST_INTERFACE_PORT, Some(host), &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TunnelZoneHostBody {
    tunnel_zone_id: Uuid,
    host_id: Uuid,
    ip_address: Ipv4Addr,
}

pub fn tunnel_zone_host(tunnel_zone: Uuid, host: Uuid, ip: Ipv4Addr) -> TranslationResource {
    let body = TunnelZoneHostBody {
        tunnel_zone_id: tunnel_zone,
        host_id: host,
        ip_address: ip,
    };
    entry(kind::TUNNEL_ZONE_HOST, Some(tunnel_zone), &body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MacPortBody<'a> {
    mac_addr: &'a str,
    port_id: Uuid,
}

/// A MAC-table entry of `bridge`: frames for `mac` go to `port`.
pub fn mac_port(bridge: Uuid, mac: &str, port: Uuid) -> TranslationResource {
    let body = MacPortBody {
        mac_addr: mac,
        port_id: port,
    };
    entry(kind::MAC_PORT, Some(bridge), &body)
}

#[derive(Serialize)]
struct Ip4MacBody<'a> {
    ip: Ipv4Addr,
    mac: &'a str,
}

/// An ARP-table entry of `bridge`.
pub fn ipv4_mac_pair(bridge: Uuid, ip: Ipv4Addr, mac: &str) -> TranslationResource {
    let body = Ip4MacBody { ip, mac };
    entry(kind::IPV4_MAC_PAIR, Some(bridge), &body)
}

/// A NAT target: addresses and L4 ports a NAT rule may rewrite to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NatTarget {
    pub address_from: Ipv4Addr,
    pub address_to: Ipv4Addr,
    pub port_from: u16,
    pub port_to: u16,
}

impl NatTarget {
    /// Exactly one address and one port.
    pub fn single(address: Ipv4Addr, port: u16) -> Self {
        Self {
            address_from: address,
            address_to: address,
            port_from: port,
            port_to: port,
        }
    }

    /// One address, a range of source ports (for SNAT).
    pub fn port_range(address: Ipv4Addr, from: u16, to: u16) -> Self {
        Self {
            address_from: address,
            address_to: address,
            port_from: from,
            port_to: to,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortRange {
    pub start: u16,
    pub end: u16,
}

/// A rule body. Build with [`Rule::new`] and the setters; emit with [`Rule::entry`].
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    id: Uuid,
    #[serde(rename = "type")]
    type_: &'static str,
    /// 1-based; MidoNet inserts the rule at this position of the chain at POST time.
    position: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    flow_action: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jump_chain_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dl_type: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nw_src_address: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nw_src_length: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nw_dst_address: Option<Ipv4Addr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nw_dst_length: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nw_proto: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tp_dst: Option<PortRange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nat_targets: Option<Vec<NatTarget>>,
    #[serde(skip)]
    chain: Uuid,
}

impl Rule {
    /// A rule of `type_` in `chain` at `position`.
    pub fn new(id: Uuid, chain: Uuid, type_: &'static str, position: u32) -> Self {
        Self {
            id,
            type_,
            position,
            flow_action: None,
            jump_chain_id: None,
            dl_type: None,
            nw_src_address: None,
            nw_src_length: None,
            nw_dst_address: None,
            nw_dst_length: None,
            nw_proto: None,
            tp_dst: None,
            nat_targets: None,
            chain,
        }
    }

    /// A jump to `target` matching everything.
    pub fn jump(id: Uuid, chain: Uuid, target: Uuid, position: u32) -> Self {
        let mut rule = Self::new(id, chain, "jump", position);
        rule.jump_chain_id = Some(target);
        rule
    }

    pub fn flow_action(mut self, action: &'static str) -> Self {
        self.flow_action = Some(action);
        self
    }

    /// Match IPv4 packets from exactly `ip`.
    pub fn from_host(mut self, ip: Ipv4Addr) -> Self {
        self.dl_type = Some(DL_TYPE_IPV4);
        self.nw_src_address = Some(ip);
        self.nw_src_length = Some(32);
        self
    }

    /// Match IPv4 packets to exactly `ip` (as rewritten by the rules before, if any).
    pub fn to_host(mut self, ip: Ipv4Addr) -> Self {
        self.dl_type = Some(DL_TYPE_IPV4);
        self.nw_dst_address = Some(ip);
        self.nw_dst_length = Some(32);
        self
    }

    /// Match IPv4 packets to exactly `ip`, L4 protocol `proto`, destination port `port`.
    pub fn to_service(mut self, ip: Ipv4Addr, proto: u8, port: u16) -> Self {
        self.dl_type = Some(DL_TYPE_IPV4);
        self.nw_dst_address = Some(ip);
        self.nw_dst_length = Some(32);
        self.nw_proto = Some(proto);
        self.tp_dst = Some(PortRange {
            start: port,
            end: port,
        });
        self
    }

    pub fn nat_targets(mut self, targets: Vec<NatTarget>) -> Self {
        self.nat_targets = Some(targets);
        self
    }

    pub fn entry(&self) -> TranslationResource {
        entry(kind::RULE, Some(self.chain), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_use_midonet_field_names() {
        let id = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let r = router_port(
            id,
            other,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 0),
            24,
            "ac:ca:ba:00:00:01",
        );
        assert_eq!(r.kind, "Port");
        assert_eq!(r.parent, other.to_string());
        assert_eq!(
            r.body,
            format!(
                r#"{{"id":"{id}","type":"Router","portAddress":"10.0.0.1","networkAddress":"10.0.0.0","networkLength":24,"portMac":"ac:ca:ba:00:00:01"}}"#
            )
        );
        let rule = Rule::new(id, other, "dnat", 2)
            .flow_action("accept")
            .nat_targets(vec![NatTarget::single(Ipv4Addr::new(10, 0, 0, 5), 80)])
            .entry();
        assert_eq!(rule.parent, other.to_string());
        assert_eq!(
            rule.body,
            format!(
                r#"{{"id":"{id}","type":"dnat","position":2,"flowAction":"accept","natTargets":[{{"addressFrom":"10.0.0.5","addressTo":"10.0.0.5","portFrom":80,"portTo":80}}]}}"#
            )
        );
    }
}
