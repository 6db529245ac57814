//! Typed MidoNet backend objects, one struct per kind.
//!
//! Field names follow the MidoNet REST models (camelCase on the wire). Only what MidoNet
//! needs to place the object (ids, discriminators) is required; every other field is
//! optional so that an absent member stays absent. Members without a typed field, and
//! explicit nulls, live in `extra` and are written back unchanged.
//!
//! Objects that hang below another one (a port below its bridge, a rule below its chain)
//! carry that owner's id in `parent`: it is the Translation entry's `parent`, not a body
//! member.

use std::net::Ipv4Addr;

use serde_json::Value;
use uuid::Uuid;

use super::json::{self, uuid_list, uuid_value, Extra, Reader, Writer};
use super::values::{FlowAction, Ipv4Cidr, MacAddr, PortType, RouteType, RuleType, TunnelZoneType};
use super::{Kind, ModelError};

/// What every typed backend object provides.
pub trait BackendObject: Sized {
    const KIND: Kind;
    /// Parses a body. `parent` must be `Some` exactly for kinds with a parent.
    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError>;
    /// The JSON body (what is POSTed or PUT).
    fn to_body(&self) -> Value;
    /// The owner's id for kinds with a parent.
    fn parent(&self) -> Option<Uuid>;
    /// Where a POST creates it, relative to the API base.
    fn post_path(&self) -> String;
    /// Its own path (PUT/GET/DELETE), relative to the API base.
    fn item_path(&self) -> String;
}

fn require_parent(kind: Kind, parent: Option<Uuid>) -> Result<Uuid, ModelError> {
    parent.ok_or(ModelError::MissingParent { kind: kind.name() })
}

fn forbid_parent(kind: Kind, parent: Option<Uuid>) -> Result<(), ModelError> {
    match parent {
        None => Ok(()),
        Some(p) => Err(ModelError::UnexpectedParent {
            kind: kind.name(),
            parent: p.to_string(),
        }),
    }
}

/// Implements `Serialize` as the body, and for parent-less kinds `Deserialize` from it.
macro_rules! serde_via_body {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&self.to_body(), s)
            }
        }
    };
    ($ty:ty, deserialize) => {
        serde_via_body!($ty);
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = <Value as serde::Deserialize>::deserialize(d)?;
                <$ty as BackendObject>::from_body(None, v).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// `Serialize`/`Deserialize` for the nested value objects of a rule.
macro_rules! serde_plain {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&self.to_value(), s)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = <Value as serde::Deserialize>::deserialize(d)?;
                <$ty>::parse(v).map_err(serde::de::Error::custom)
            }
        }
    };
}

// --- TunnelZone -------------------------------------------------------------------------

/// `TunnelZone {id, name, type}`.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelZone {
    pub id: Uuid,
    pub name: Option<String>,
    /// `type`: `vxlan` for Kubernetes clusters.
    pub zone_type: Option<TunnelZoneType>,
    pub extra: Extra,
}

impl TunnelZone {
    pub fn new(id: Uuid, name: impl Into<String>, zone_type: TunnelZoneType) -> Self {
        TunnelZone {
            id,
            name: Some(name.into()),
            zone_type: Some(zone_type),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for TunnelZone {
    const KIND: Kind = Kind::TunnelZone;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        forbid_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(TunnelZone {
            id: r.req("id", json::uuid)?,
            name: r.opt("name", json::string)?,
            zone_type: r.opt(
                "type",
                json::wire(TunnelZoneType::from_wire, TunnelZoneType::expected()),
            )?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("name", self.name.clone())
            .opt("type", self.zone_type.map(|t| t.as_str()))
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        None
    }

    fn post_path(&self) -> String {
        "/tunnel_zones".to_string()
    }

    fn item_path(&self) -> String {
        format!("/tunnel_zones/{}", self.id)
    }
}
serde_via_body!(TunnelZone, deserialize);

// --- TunnelZoneHost ---------------------------------------------------------------------

/// Membership of a host in a tunnel zone: `TunnelZoneHost {tunnelZoneId, hostId, ipAddress}`.
/// `parent` is the tunnel zone.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelZoneHost {
    pub parent: Uuid,
    pub tunnel_zone_id: Option<Uuid>,
    pub host_id: Uuid,
    /// The host's tunnel endpoint address.
    pub ip_address: Option<Ipv4Addr>,
    pub extra: Extra,
}

impl TunnelZoneHost {
    pub fn new(tunnel_zone: Uuid, host_id: Uuid, ip_address: Ipv4Addr) -> Self {
        TunnelZoneHost {
            parent: tunnel_zone,
            tunnel_zone_id: None,
            host_id,
            ip_address: Some(ip_address),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for TunnelZoneHost {
    const KIND: Kind = Kind::TunnelZoneHost;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(TunnelZoneHost {
            parent,
            tunnel_zone_id: r.opt("tunnelZoneId", json::uuid)?,
            host_id: r.req("hostId", json::uuid)?,
            ip_address: r.opt("ipAddress", json::ipv4)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .opt("tunnelZoneId", self.tunnel_zone_id.map(uuid_value))
            .put("hostId", uuid_value(self.host_id))
            .opt("ipAddress", self.ip_address.map(json::text))
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/tunnel_zones/{}/hosts", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/tunnel_zones/{}/hosts/{}", self.parent, self.host_id)
    }
}
serde_via_body!(TunnelZoneHost);

// --- Bridge and Router ------------------------------------------------------------------

/// Declares the two L2/L3 devices, which share their REST fields.
macro_rules! device {
    ($(#[$meta:meta])* $name:ident, $kind:expr, $collection:literal) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            pub id: Uuid,
            pub tenant_id: Option<String>,
            pub name: Option<String>,
            pub admin_state_up: Option<bool>,
            /// Chain applied to traffic entering the device.
            pub inbound_filter_id: Option<Uuid>,
            /// Chain applied to traffic leaving the device.
            pub outbound_filter_id: Option<Uuid>,
            pub extra: Extra,
        }

        impl $name {
            pub fn new(id: Uuid) -> Self {
                $name {
                    id,
                    tenant_id: None,
                    name: None,
                    admin_state_up: None,
                    inbound_filter_id: None,
                    outbound_filter_id: None,
                    extra: Extra::new(),
                }
            }
        }

        impl BackendObject for $name {
            const KIND: Kind = $kind;

            fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
                forbid_parent(Self::KIND, parent)?;
                let mut r = Reader::new(Self::KIND.name(), body)?;
                Ok($name {
                    id: r.req("id", json::uuid)?,
                    tenant_id: r.opt("tenantId", json::string)?,
                    name: r.opt("name", json::string)?,
                    admin_state_up: r.opt("adminStateUp", json::boolean)?,
                    inbound_filter_id: r.opt("inboundFilterId", json::uuid)?,
                    outbound_filter_id: r.opt("outboundFilterId", json::uuid)?,
                    extra: r.finish(),
                })
            }

            fn to_body(&self) -> Value {
                Writer::new()
                    .put("id", uuid_value(self.id))
                    .opt("tenantId", self.tenant_id.clone())
                    .opt("name", self.name.clone())
                    .opt("adminStateUp", self.admin_state_up)
                    .opt("inboundFilterId", self.inbound_filter_id.map(uuid_value))
                    .opt("outboundFilterId", self.outbound_filter_id.map(uuid_value))
                    .finish(&self.extra)
            }

            fn parent(&self) -> Option<Uuid> {
                None
            }

            fn post_path(&self) -> String {
                format!("/{}", $collection)
            }

            fn item_path(&self) -> String {
                format!("/{}/{}", $collection, self.id)
            }
        }
        serde_via_body!($name, deserialize);
    };
}

device!(
    /// A virtual router: `Router {id, tenantId, name, adminStateUp, inboundFilterId, outboundFilterId}`.
    Router, Kind::Router, "routers"
);
device!(
    /// A virtual bridge (MidoNet "network"): `Bridge {id, tenantId, name, adminStateUp,
    /// inboundFilterId, outboundFilterId}`.
    Bridge, Kind::Bridge, "bridges"
);

// --- Port -------------------------------------------------------------------------------

/// A bridge or router port. `parent` is the bridge or router, per `port_type`.
///
/// Router ports carry their address either as `portSubnet` (`["10.0.0.1/24"]`, what the
/// original controller sends) or as `portAddress` + `networkAddress` + `networkLength`.
#[derive(Clone, Debug, PartialEq)]
pub struct Port {
    pub parent: Uuid,
    pub id: Uuid,
    /// `type`: `Bridge` or `Router`.
    pub port_type: PortType,
    pub admin_state_up: Option<bool>,
    pub inbound_filter_id: Option<Uuid>,
    pub outbound_filter_id: Option<Uuid>,
    pub port_address: Option<Ipv4Addr>,
    pub network_address: Option<Ipv4Addr>,
    pub network_length: Option<u8>,
    pub port_subnet: Option<Vec<Ipv4Cidr>>,
    pub port_mac: Option<MacAddr>,
    pub vlan_id: Option<u16>,
    pub extra: Extra,
}

impl Port {
    pub fn new(parent: Uuid, id: Uuid, port_type: PortType) -> Self {
        Port {
            parent,
            id,
            port_type,
            admin_state_up: None,
            inbound_filter_id: None,
            outbound_filter_id: None,
            port_address: None,
            network_address: None,
            network_length: None,
            port_subnet: None,
            port_mac: None,
            vlan_id: None,
            extra: Extra::new(),
        }
    }

    /// A port of bridge `bridge`.
    pub fn bridge_port(bridge: Uuid, id: Uuid) -> Self {
        Port::new(bridge, id, PortType::Bridge)
    }

    /// A port of router `router`.
    pub fn router_port(router: Uuid, id: Uuid) -> Self {
        Port::new(router, id, PortType::Router)
    }
}

impl BackendObject for Port {
    const KIND: Kind = Kind::Port;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Port {
            parent,
            id: r.req("id", json::uuid)?,
            port_type: r.req(
                "type",
                json::wire(PortType::from_wire, PortType::expected()),
            )?,
            admin_state_up: r.opt("adminStateUp", json::boolean)?,
            inbound_filter_id: r.opt("inboundFilterId", json::uuid)?,
            outbound_filter_id: r.opt("outboundFilterId", json::uuid)?,
            port_address: r.opt("portAddress", json::ipv4)?,
            network_address: r.opt("networkAddress", json::ipv4)?,
            network_length: r.opt("networkLength", json::prefix_len)?,
            port_subnet: r.opt("portSubnet", json::array(json::cidr))?,
            port_mac: r.opt("portMac", json::mac)?,
            vlan_id: r.opt("vlanId", json::u16_any)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .put("type", self.port_type.as_str())
            .opt("adminStateUp", self.admin_state_up)
            .opt("inboundFilterId", self.inbound_filter_id.map(uuid_value))
            .opt("outboundFilterId", self.outbound_filter_id.map(uuid_value))
            .opt("portAddress", self.port_address.map(json::text))
            .opt("networkAddress", self.network_address.map(json::text))
            .opt("networkLength", self.network_length)
            .opt(
                "portSubnet",
                self.port_subnet
                    .as_ref()
                    .map(|s| s.iter().map(json::text).collect::<Vec<_>>()),
            )
            .opt("portMac", self.port_mac.map(json::text))
            .opt("vlanId", self.vlan_id)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        match self.port_type {
            PortType::Bridge => format!("/bridges/{}/ports", self.parent),
            PortType::Router => format!("/routers/{}/ports", self.parent),
        }
    }

    fn item_path(&self) -> String {
        format!("/ports/{}", self.id)
    }
}
serde_via_body!(Port);

// --- PortLink ---------------------------------------------------------------------------

/// A link between two interior ports: `PortLink {portId, peerId}`. `parent` is the port the
/// link is created on; `portId` may be left out (the original controller leaves it out).
#[derive(Clone, Debug, PartialEq)]
pub struct PortLink {
    pub parent: Uuid,
    pub port_id: Option<Uuid>,
    pub peer_id: Uuid,
    pub extra: Extra,
}

impl PortLink {
    pub fn new(port: Uuid, peer: Uuid) -> Self {
        PortLink {
            parent: port,
            port_id: None,
            peer_id: peer,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for PortLink {
    const KIND: Kind = Kind::PortLink;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(PortLink {
            parent,
            port_id: r.opt("portId", json::uuid)?,
            peer_id: r.req("peerId", json::uuid)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .opt("portId", self.port_id.map(uuid_value))
            .put("peerId", uuid_value(self.peer_id))
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/ports/{}/link", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/ports/{}/link", self.parent)
    }
}
serde_via_body!(PortLink);

// --- Route ------------------------------------------------------------------------------

/// A route of router `parent`.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub parent: Uuid,
    pub id: Uuid,
    /// `type`: `Normal` routes need a `nextHopPort` on the same router.
    pub route_type: Option<RouteType>,
    pub src_network_addr: Option<Ipv4Addr>,
    pub src_network_length: Option<u8>,
    pub dst_network_addr: Option<Ipv4Addr>,
    pub dst_network_length: Option<u8>,
    pub next_hop_port: Option<Uuid>,
    pub next_hop_gateway: Option<Ipv4Addr>,
    pub weight: Option<u32>,
    pub extra: Extra,
}

impl Route {
    /// A `Normal` route from anywhere to `dst` via `next_hop_port`.
    pub fn normal(router: Uuid, id: Uuid, dst: Ipv4Cidr, next_hop_port: Uuid) -> Self {
        Route {
            parent: router,
            id,
            route_type: Some(RouteType::Normal),
            src_network_addr: Some(Ipv4Addr::UNSPECIFIED),
            src_network_length: Some(0),
            dst_network_addr: Some(dst.addr),
            dst_network_length: Some(dst.prefix_len),
            next_hop_port: Some(next_hop_port),
            next_hop_gateway: None,
            weight: None,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for Route {
    const KIND: Kind = Kind::Route;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Route {
            parent,
            id: r.req("id", json::uuid)?,
            route_type: r.opt(
                "type",
                json::wire(RouteType::from_wire, RouteType::expected()),
            )?,
            src_network_addr: r.opt("srcNetworkAddr", json::ipv4)?,
            src_network_length: r.opt("srcNetworkLength", json::prefix_len)?,
            dst_network_addr: r.opt("dstNetworkAddr", json::ipv4)?,
            dst_network_length: r.opt("dstNetworkLength", json::prefix_len)?,
            next_hop_port: r.opt("nextHopPort", json::uuid)?,
            next_hop_gateway: r.opt("nextHopGateway", json::ipv4)?,
            weight: r.opt("weight", json::u32_any)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("type", self.route_type.map(|t| t.as_str()))
            .opt("srcNetworkAddr", self.src_network_addr.map(json::text))
            .opt("srcNetworkLength", self.src_network_length)
            .opt("dstNetworkAddr", self.dst_network_addr.map(json::text))
            .opt("dstNetworkLength", self.dst_network_length)
            .opt("nextHopPort", self.next_hop_port.map(uuid_value))
            .opt("nextHopGateway", self.next_hop_gateway.map(json::text))
            .opt("weight", self.weight)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/routers/{}/routes", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/routes/{}", self.id)
    }
}
serde_via_body!(Route);

// --- Chain ------------------------------------------------------------------------------

/// A rule chain: `Chain {id, tenantId, name}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    pub id: Uuid,
    pub tenant_id: Option<String>,
    pub name: Option<String>,
    pub extra: Extra,
}

impl Chain {
    pub fn new(id: Uuid) -> Self {
        Chain {
            id,
            tenant_id: None,
            name: None,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for Chain {
    const KIND: Kind = Kind::Chain;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        forbid_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Chain {
            id: r.req("id", json::uuid)?,
            tenant_id: r.opt("tenantId", json::string)?,
            name: r.opt("name", json::string)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("tenantId", self.tenant_id.clone())
            .opt("name", self.name.clone())
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        None
    }

    fn post_path(&self) -> String {
        "/chains".to_string()
    }

    fn item_path(&self) -> String {
        format!("/chains/{}", self.id)
    }
}
serde_via_body!(Chain, deserialize);

// --- Rule -------------------------------------------------------------------------------

/// A transport port range of a rule condition: `{start, end}`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PortRange {
    pub start: Option<u16>,
    pub end: Option<u16>,
    pub extra: Extra,
}

impl PortRange {
    /// The range of the single port `port`.
    pub fn single(port: u16) -> Self {
        PortRange {
            start: Some(port),
            end: Some(port),
            extra: Extra::new(),
        }
    }

    fn parse(v: Value) -> Result<PortRange, String> {
        let read = || -> Result<PortRange, ModelError> {
            let mut r = Reader::new("PortRange", v)?;
            let start = r.opt("start", json::u16_any)?;
            let end = r.opt("end", json::u16_any)?;
            Ok(PortRange {
                start,
                end,
                extra: r.finish(),
            })
        };
        read().map_err(|e| e.to_string())
    }

    fn to_value(&self) -> Value {
        Writer::new()
            .opt("start", self.start)
            .opt("end", self.end)
            .finish(&self.extra)
    }
}
serde_plain!(PortRange);

/// A target of a forward NAT rule: `{addressFrom, addressTo, portFrom, portTo}`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NatTarget {
    pub address_from: Option<Ipv4Addr>,
    pub address_to: Option<Ipv4Addr>,
    pub port_from: Option<u16>,
    pub port_to: Option<u16>,
    pub extra: Extra,
}

impl NatTarget {
    /// Translate to exactly `addr` (and `port`, if given).
    pub fn to(addr: Ipv4Addr, port: Option<u16>) -> Self {
        NatTarget {
            address_from: Some(addr),
            address_to: Some(addr),
            port_from: port,
            port_to: port,
            extra: Extra::new(),
        }
    }

    fn parse(v: Value) -> Result<NatTarget, String> {
        let read = || -> Result<NatTarget, ModelError> {
            let mut r = Reader::new("NatTarget", v)?;
            let address_from = r.opt("addressFrom", json::ipv4)?;
            let address_to = r.opt("addressTo", json::ipv4)?;
            let port_from = r.opt("portFrom", json::u16_any)?;
            let port_to = r.opt("portTo", json::u16_any)?;
            Ok(NatTarget {
                address_from,
                address_to,
                port_from,
                port_to,
                extra: r.finish(),
            })
        };
        read().map_err(|e| e.to_string())
    }

    fn to_value(&self) -> Value {
        Writer::new()
            .opt("addressFrom", self.address_from.map(json::text))
            .opt("addressTo", self.address_to.map(json::text))
            .opt("portFrom", self.port_from)
            .opt("portTo", self.port_to)
            .finish(&self.extra)
    }
}
serde_plain!(NatTarget);

/// A rule of chain `parent`. Which fields matter depends on `rule_type`: `jump` needs
/// `jumpChainId`; NAT rules need `flowAction`; `dnat`/`snat` need `natTargets`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub parent: Uuid,
    pub id: Uuid,
    /// `type`.
    pub rule_type: RuleType,
    /// 1-based insertion position in the chain; MidoNet defaults to 1 (the head).
    pub position: Option<u32>,
    pub flow_action: Option<FlowAction>,
    pub nat_targets: Option<Vec<NatTarget>>,
    pub jump_chain_id: Option<Uuid>,
    /// Ethertype to match, e.g. 0x0800 for IPv4.
    pub dl_type: Option<u16>,
    /// IP protocol number to match, e.g. 6 for TCP.
    pub nw_proto: Option<u8>,
    pub nw_src_address: Option<Ipv4Addr>,
    pub nw_src_length: Option<u8>,
    pub nw_dst_address: Option<Ipv4Addr>,
    pub nw_dst_length: Option<u8>,
    pub tp_src: Option<PortRange>,
    pub tp_dst: Option<PortRange>,
    /// The rest of MidoNet's rule condition (`condInvert`, inversions, ports, groups,
    /// connection direction). None of the current translators sets them; the data-plane
    /// model evaluates them.
    pub condition: ConditionExtras,
    pub extra: Extra,
}

/// The condition fields of a Rule beyond the L3/L4 match above, named as MidoNet's REST
/// `Condition` names them. An absent flag is `false`, an absent set is empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConditionExtras {
    /// `condInvert`: the whole condition is negated.
    pub cond_invert: Option<bool>,
    /// Match only packets of a forward flow (not a tracked reply).
    pub match_forward_flow: Option<bool>,
    /// Match only replies of a tracked connection.
    pub match_return_flow: Option<bool>,
    pub in_ports: Option<Vec<Uuid>>,
    pub inv_in_ports: Option<bool>,
    pub out_ports: Option<Vec<Uuid>>,
    pub inv_out_ports: Option<bool>,
    /// Matches when the packet entered the virtual network through a port of this group.
    pub port_group: Option<Uuid>,
    pub inv_port_group: Option<bool>,
    pub ip_addr_group_src: Option<Uuid>,
    pub inv_ip_addr_group_src: Option<bool>,
    pub ip_addr_group_dst: Option<Uuid>,
    pub inv_ip_addr_group_dst: Option<bool>,
    pub inv_dl_type: Option<bool>,
    pub inv_nw_proto: Option<bool>,
    pub inv_nw_src: Option<bool>,
    pub inv_nw_dst: Option<bool>,
    pub inv_tp_src: Option<bool>,
    pub inv_tp_dst: Option<bool>,
}

impl Rule {
    pub fn new(chain: Uuid, id: Uuid, rule_type: RuleType) -> Self {
        Rule {
            parent: chain,
            id,
            rule_type,
            position: None,
            flow_action: None,
            nat_targets: None,
            jump_chain_id: None,
            dl_type: None,
            nw_proto: None,
            nw_src_address: None,
            nw_src_length: None,
            nw_dst_address: None,
            nw_dst_length: None,
            tp_src: None,
            tp_dst: None,
            condition: ConditionExtras::default(),
            extra: Extra::new(),
        }
    }

    /// A rule of `chain` jumping to `target`.
    pub fn jump(chain: Uuid, id: Uuid, target: Uuid) -> Self {
        Rule {
            jump_chain_id: Some(target),
            ..Rule::new(chain, id, RuleType::Jump)
        }
    }
}

impl BackendObject for Rule {
    const KIND: Kind = Kind::Rule;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Rule {
            parent,
            id: r.req("id", json::uuid)?,
            rule_type: r.req(
                "type",
                json::wire(RuleType::from_wire, RuleType::expected()),
            )?,
            position: r.opt("position", json::u32_any)?,
            flow_action: r.opt(
                "flowAction",
                json::wire(FlowAction::from_wire, FlowAction::expected()),
            )?,
            nat_targets: r.opt("natTargets", json::array(NatTarget::parse))?,
            jump_chain_id: r.opt("jumpChainId", json::uuid)?,
            dl_type: r.opt("dlType", json::u16_any)?,
            nw_proto: r.opt("nwProto", json::u8_max(u8::MAX))?,
            nw_src_address: r.opt("nwSrcAddress", json::ipv4)?,
            nw_src_length: r.opt("nwSrcLength", json::prefix_len)?,
            nw_dst_address: r.opt("nwDstAddress", json::ipv4)?,
            nw_dst_length: r.opt("nwDstLength", json::prefix_len)?,
            tp_src: r.opt("tpSrc", PortRange::parse)?,
            tp_dst: r.opt("tpDst", PortRange::parse)?,
            condition: ConditionExtras {
                cond_invert: r.opt("condInvert", json::boolean)?,
                match_forward_flow: r.opt("matchForwardFlow", json::boolean)?,
                match_return_flow: r.opt("matchReturnFlow", json::boolean)?,
                in_ports: r.opt("inPorts", json::array(json::uuid))?,
                inv_in_ports: r.opt("invInPorts", json::boolean)?,
                out_ports: r.opt("outPorts", json::array(json::uuid))?,
                inv_out_ports: r.opt("invOutPorts", json::boolean)?,
                port_group: r.opt("portGroup", json::uuid)?,
                inv_port_group: r.opt("invPortGroup", json::boolean)?,
                ip_addr_group_src: r.opt("ipAddrGroupSrc", json::uuid)?,
                inv_ip_addr_group_src: r.opt("invIpAddrGroupSrc", json::boolean)?,
                ip_addr_group_dst: r.opt("ipAddrGroupDst", json::uuid)?,
                inv_ip_addr_group_dst: r.opt("invIpAddrGroupDst", json::boolean)?,
                inv_dl_type: r.opt("invDlType", json::boolean)?,
                inv_nw_proto: r.opt("invNwProto", json::boolean)?,
                inv_nw_src: r.opt("invNwSrc", json::boolean)?,
                inv_nw_dst: r.opt("invNwDst", json::boolean)?,
                inv_tp_src: r.opt("invTpSrc", json::boolean)?,
                inv_tp_dst: r.opt("invTpDst", json::boolean)?,
            },
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        let c = &self.condition;
        Writer::new()
            .put("id", uuid_value(self.id))
            .put("type", self.rule_type.as_str())
            .opt("position", self.position)
            .opt("flowAction", self.flow_action.map(|a| a.as_str()))
            .opt(
                "natTargets",
                self.nat_targets
                    .as_ref()
                    .map(|t| t.iter().map(NatTarget::to_value).collect::<Vec<_>>()),
            )
            .opt("jumpChainId", self.jump_chain_id.map(uuid_value))
            .opt("dlType", self.dl_type)
            .opt("nwProto", self.nw_proto)
            .opt("nwSrcAddress", self.nw_src_address.map(json::text))
            .opt("nwSrcLength", self.nw_src_length)
            .opt("nwDstAddress", self.nw_dst_address.map(json::text))
            .opt("nwDstLength", self.nw_dst_length)
            .opt("tpSrc", self.tp_src.as_ref().map(PortRange::to_value))
            .opt("tpDst", self.tp_dst.as_ref().map(PortRange::to_value))
            .opt("condInvert", c.cond_invert)
            .opt("matchForwardFlow", c.match_forward_flow)
            .opt("matchReturnFlow", c.match_return_flow)
            .opt("inPorts", c.in_ports.as_deref().map(uuid_list))
            .opt("invInPorts", c.inv_in_ports)
            .opt("outPorts", c.out_ports.as_deref().map(uuid_list))
            .opt("invOutPorts", c.inv_out_ports)
            .opt("portGroup", c.port_group.map(uuid_value))
            .opt("invPortGroup", c.inv_port_group)
            .opt("ipAddrGroupSrc", c.ip_addr_group_src.map(uuid_value))
            .opt("invIpAddrGroupSrc", c.inv_ip_addr_group_src)
            .opt("ipAddrGroupDst", c.ip_addr_group_dst.map(uuid_value))
            .opt("invIpAddrGroupDst", c.inv_ip_addr_group_dst)
            .opt("invDlType", c.inv_dl_type)
            .opt("invNwProto", c.inv_nw_proto)
            .opt("invNwSrc", c.inv_nw_src)
            .opt("invNwDst", c.inv_nw_dst)
            .opt("invTpSrc", c.inv_tp_src)
            .opt("invTpDst", c.inv_tp_dst)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/chains/{}/rules", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/rules/{}", self.id)
    }
}
serde_via_body!(Rule);

// --- Host -------------------------------------------------------------------------------

/// A MidoNet host (an agent). Read-only: hosts register themselves; we only list them to
/// resolve Kubernetes node names.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub id: Uuid,
    pub name: Option<String>,
    pub extra: Extra,
}

impl Host {
    pub fn new(id: Uuid, name: impl Into<String>) -> Self {
        Host {
            id,
            name: Some(name.into()),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for Host {
    const KIND: Kind = Kind::Host;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        forbid_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Host {
            id: r.req("id", json::uuid)?,
            name: r.opt("name", json::string)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("name", self.name.clone())
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        None
    }

    fn post_path(&self) -> String {
        "/hosts".to_string()
    }

    fn item_path(&self) -> String {
        format!("/hosts/{}", self.id)
    }
}
serde_via_body!(Host, deserialize);

// --- HostInterfacePort ------------------------------------------------------------------

/// Binding of port `portId` to interface `interfaceName` on host `parent`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostInterfacePort {
    pub parent: Uuid,
    pub host_id: Option<Uuid>,
    pub port_id: Uuid,
    pub interface_name: Option<String>,
    pub extra: Extra,
}

impl HostInterfacePort {
    pub fn new(host: Uuid, port: Uuid, interface_name: impl Into<String>) -> Self {
        HostInterfacePort {
            parent: host,
            host_id: Some(host),
            port_id: port,
            interface_name: Some(interface_name.into()),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for HostInterfacePort {
    const KIND: Kind = Kind::HostInterfacePort;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(HostInterfacePort {
            parent,
            host_id: r.opt("hostId", json::uuid)?,
            port_id: r.req("portId", json::uuid)?,
            interface_name: r.opt("interfaceName", json::string)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .opt("hostId", self.host_id.map(uuid_value))
            .put("portId", uuid_value(self.port_id))
            .opt("interfaceName", self.interface_name.clone())
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/hosts/{}/ports", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/hosts/{}/ports/{}", self.parent, self.port_id)
    }
}
serde_via_body!(HostInterfacePort);

// --- MACPort ----------------------------------------------------------------------------

/// An entry `macAddr → portId` of bridge `parent`'s MAC table.
#[derive(Clone, Debug, PartialEq)]
pub struct MacPort {
    pub parent: Uuid,
    pub mac_addr: MacAddr,
    pub port_id: Uuid,
    /// VLAN of the entry; absent or 0 means untagged.
    pub vlan_id: Option<u16>,
    pub extra: Extra,
}

impl MacPort {
    pub fn new(bridge: Uuid, mac_addr: MacAddr, port_id: Uuid) -> Self {
        MacPort {
            parent: bridge,
            mac_addr,
            port_id,
            vlan_id: None,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for MacPort {
    const KIND: Kind = Kind::MacPort;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(MacPort {
            parent,
            mac_addr: r.req("macAddr", json::mac)?,
            port_id: r.req("portId", json::uuid)?,
            vlan_id: r.opt("vlanId", json::u16_any)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("macAddr", self.mac_addr.to_string())
            .put("portId", uuid_value(self.port_id))
            .opt("vlanId", self.vlan_id)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/bridges/{}/mac_table", self.parent)
    }

    /// Untagged entries live under `mac_table`; tagged ones under `vlans/{vlan}/mac_table`.
    fn item_path(&self) -> String {
        let entry = format!("{}_{}", self.mac_addr.to_dashed(), self.port_id);
        match self.vlan_id {
            Some(vlan) if vlan != 0 => {
                format!("/bridges/{}/vlans/{vlan}/mac_table/{entry}", self.parent)
            }
            _ => format!("/bridges/{}/mac_table/{entry}", self.parent),
        }
    }
}
serde_via_body!(MacPort);

// --- IPv4MACPair ------------------------------------------------------------------------

/// An entry `ip → mac` of bridge `parent`'s ARP table.
#[derive(Clone, Debug, PartialEq)]
pub struct Ipv4MacPair {
    pub parent: Uuid,
    pub ip: Ipv4Addr,
    pub mac: MacAddr,
    pub extra: Extra,
}

impl Ipv4MacPair {
    pub fn new(bridge: Uuid, ip: Ipv4Addr, mac: MacAddr) -> Self {
        Ipv4MacPair {
            parent: bridge,
            ip,
            mac,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for Ipv4MacPair {
    const KIND: Kind = Kind::Ipv4MacPair;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(Ipv4MacPair {
            parent,
            ip: r.req("ip", json::ipv4)?,
            mac: r.req("mac", json::mac)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("ip", self.ip.to_string())
            .put("mac", self.mac.to_string())
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/bridges/{}/arp_table", self.parent)
    }

    fn item_path(&self) -> String {
        format!(
            "/bridges/{}/arp_table/{}_{}",
            self.parent,
            self.ip,
            self.mac.to_dashed()
        )
    }
}
serde_via_body!(Ipv4MacPair);

// --- PortGroup --------------------------------------------------------------------------

/// A set of ports: `PortGroup {id, tenantId, name, stateful}`. A rule condition's
/// `portGroup` matches packets that entered the virtual network through a member port.
#[derive(Clone, Debug, PartialEq)]
pub struct PortGroup {
    pub id: Uuid,
    pub tenant_id: Option<String>,
    pub name: Option<String>,
    pub stateful: Option<bool>,
    pub extra: Extra,
}

impl PortGroup {
    pub fn new(id: Uuid, name: impl Into<String>) -> Self {
        PortGroup {
            id,
            tenant_id: None,
            name: Some(name.into()),
            stateful: None,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for PortGroup {
    const KIND: Kind = Kind::PortGroup;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        forbid_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(PortGroup {
            id: r.req("id", json::uuid)?,
            tenant_id: r.opt("tenantId", json::string)?,
            name: r.opt("name", json::string)?,
            stateful: r.opt("stateful", json::boolean)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("tenantId", self.tenant_id.clone())
            .opt("name", self.name.clone())
            .opt("stateful", self.stateful)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        None
    }

    fn post_path(&self) -> String {
        "/port_groups".to_string()
    }

    fn item_path(&self) -> String {
        format!("/port_groups/{}", self.id)
    }
}
serde_via_body!(PortGroup, deserialize);

// --- PortGroupPort ----------------------------------------------------------------------

/// Membership of port `portId` in port group `parent`: `PortGroupPort {portGroupId, portId}`.
#[derive(Clone, Debug, PartialEq)]
pub struct PortGroupPort {
    pub parent: Uuid,
    pub port_group_id: Option<Uuid>,
    pub port_id: Uuid,
    pub extra: Extra,
}

impl PortGroupPort {
    pub fn new(port_group: Uuid, port: Uuid) -> Self {
        PortGroupPort {
            parent: port_group,
            port_group_id: Some(port_group),
            port_id: port,
            extra: Extra::new(),
        }
    }
}

impl BackendObject for PortGroupPort {
    const KIND: Kind = Kind::PortGroupPort;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(PortGroupPort {
            parent,
            port_group_id: r.opt("portGroupId", json::uuid)?,
            port_id: r.req("portId", json::uuid)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .opt("portGroupId", self.port_group_id.map(uuid_value))
            .put("portId", uuid_value(self.port_id))
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/port_groups/{}/ports", self.parent)
    }

    fn item_path(&self) -> String {
        format!("/port_groups/{}/ports/{}", self.parent, self.port_id)
    }
}
serde_via_body!(PortGroupPort);

// --- IpAddrGroup ------------------------------------------------------------------------

/// A set of addresses: `IpAddrGroup {id, name}` (MidoNet requires a name of 1 to 255
/// characters). Rule conditions match it by source or destination address.
#[derive(Clone, Debug, PartialEq)]
pub struct IpAddrGroup {
    pub id: Uuid,
    pub name: Option<String>,
    pub extra: Extra,
}

impl IpAddrGroup {
    pub fn new(id: Uuid, name: impl Into<String>) -> Self {
        IpAddrGroup {
            id,
            name: Some(name.into()),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for IpAddrGroup {
    const KIND: Kind = Kind::IpAddrGroup;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        forbid_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(IpAddrGroup {
            id: r.req("id", json::uuid)?,
            name: r.opt("name", json::string)?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .put("id", uuid_value(self.id))
            .opt("name", self.name.clone())
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        None
    }

    fn post_path(&self) -> String {
        "/ip_addr_groups".to_string()
    }

    fn item_path(&self) -> String {
        format!("/ip_addr_groups/{}", self.id)
    }
}
serde_via_body!(IpAddrGroup, deserialize);

// --- IpAddrGroupAddr --------------------------------------------------------------------

/// Address `addr` of IP address group `parent`: `IpAddrGroupAddr {ipAddrGroupId, addr,
/// version}`. `version` is MidoNet's type discriminator (4 for IPv4, the only family
/// Kubernetes pods get here). Only single addresses, no prefixes.
#[derive(Clone, Debug, PartialEq)]
pub struct IpAddrGroupAddr {
    pub parent: Uuid,
    pub ip_addr_group_id: Option<Uuid>,
    pub addr: Ipv4Addr,
    pub version: Option<u8>,
    pub extra: Extra,
}

impl IpAddrGroupAddr {
    pub fn new(group: Uuid, addr: Ipv4Addr) -> Self {
        IpAddrGroupAddr {
            parent: group,
            ip_addr_group_id: Some(group),
            addr,
            version: Some(4),
            extra: Extra::new(),
        }
    }
}

impl BackendObject for IpAddrGroupAddr {
    const KIND: Kind = Kind::IpAddrGroupAddr;

    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
        let parent = require_parent(Self::KIND, parent)?;
        let mut r = Reader::new(Self::KIND.name(), body)?;
        Ok(IpAddrGroupAddr {
            parent,
            ip_addr_group_id: r.opt("ipAddrGroupId", json::uuid)?,
            addr: r.req("addr", json::ipv4)?,
            version: r.opt("version", json::u8_max(4))?,
            extra: r.finish(),
        })
    }

    fn to_body(&self) -> Value {
        Writer::new()
            .opt("ipAddrGroupId", self.ip_addr_group_id.map(uuid_value))
            .put("addr", self.addr.to_string())
            .opt("version", self.version)
            .finish(&self.extra)
    }

    fn parent(&self) -> Option<Uuid> {
        Some(self.parent)
    }

    fn post_path(&self) -> String {
        format!("/ip_addr_groups/{}/ip_addrs", self.parent)
    }

    fn item_path(&self) -> String {
        format!(
            "/ip_addr_groups/{}/versions/4/ip_addrs/{}",
            self.parent, self.addr
        )
    }
}
serde_via_body!(IpAddrGroupAddr);
