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
//!
//! Each object is declared once, as a field table (`backend_object!`): the table gives
//! the struct, the body reader and the body writer. The writer emits the members in table
//! order, then the `extra` members; the table order is therefore the byte layout of every
//! body a translator writes (and of its `body_hash`), and must not be reordered.

use std::net::Ipv4Addr;

use serde_json::Value;
use uuid::Uuid;

use super::json::{self, Extra, Ordered, Reader, Wire, Writer};
use super::values::{
    FlowAction, FragmentPolicy, Ipv4Cidr, LbStatus, MacAddr, MacMask, PoolLbMethod, PoolProtocol,
    PortType, RouteType, RuleType, SessionPersistence, TunnelZoneType,
};
use super::{Kind, ModelError};

/// What every typed backend object provides.
pub trait BackendObject: Sized {
    const KIND: Kind;
    /// Parses a body. `parent` must be `Some` exactly for kinds with a parent.
    fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError>;
    /// The JSON body (what is POSTed or PUT).
    fn to_body(&self) -> Value;
    /// The body as compact JSON text, members in the object's declared order: the form a
    /// Translation stores (see [`crate::model::Resource::to_entry`]).
    fn to_body_text(&self) -> String;
    /// The owner's id for kinds with a parent.
    fn parent(&self) -> Option<Uuid>;
    /// Where a POST creates it, relative to the API base.
    fn post_path(&self) -> String;
    /// Its own path (PUT/GET/DELETE), relative to the API base.
    fn item_path(&self) -> String;
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

// --- The field-table macros ----------------------------------------------------------------
//
// A field table is a list of `name: mode Type = "wireName"` rows (`;`-separated). Modes:
//
// - `req`: a required member, typed `Type`;
// - `opt`: an optional member, typed `Option<Type>`;
// - `parent`: the entry's parent (no `= "…"`), typed `Type` (always `Uuid`);
// - `flat`: another field table whose members sit in this same body (no `= "…"`);
// - `boxed`: as `flat`, the struct kept behind a `Box` (a large table that would bloat every
//   `Resource`);
// - `extra`: the members no row takes (no `= "…"`), typed `Extra`; must be the last row.
//
// `req`/`opt` rows parse with `<Type as Wire>::read` unless they name a parser with
// `, via path::to::parser`.

macro_rules! field_ty {
    (req $t:ty) => { $t };
    (opt $t:ty) => { Option<$t> };
    (parent $t:ty) => { $t };
    (flat $t:ty) => { $t };
    (boxed $t:ty) => { Box<$t> };
    (extra $t:ty) => { $t };
}

macro_rules! read_field {
    ($r:ident, req, $t:ty, $key:literal) => {
        $r.req($key, <$t as Wire>::read)?
    };
    ($r:ident, req, $t:ty, $key:literal, $parse:expr) => {
        $r.req($key, $parse)?
    };
    ($r:ident, opt, $t:ty, $key:literal) => {
        $r.opt($key, <$t as Wire>::read)?
    };
    ($r:ident, opt, $t:ty, $key:literal, $parse:expr) => {
        $r.opt($key, $parse)?
    };
    ($r:ident, parent, $t:ty) => {
        $r.parent()?
    };
    ($r:ident, flat, $t:ty) => {
        <$t>::read_fields($r)?
    };
    ($r:ident, boxed, $t:ty) => {
        Box::new(<$t>::read_fields($r)?)
    };
    ($r:ident, extra, $t:ty) => {
        $r.rest()
    };
}

macro_rules! write_field {
    ($w:ident, req, $v:expr, $key:literal) => {{
        $w.put($key, &$v);
    }};
    ($w:ident, opt, $v:expr, $key:literal) => {{
        $w.opt($key, $v.as_ref());
    }};
    ($w:ident, parent, $v:expr) => {{}};
    ($w:ident, flat, $v:expr) => {{
        $v.write_fields($w);
    }};
    ($w:ident, boxed, $v:expr) => {{
        $v.write_fields($w);
    }};
    ($w:ident, extra, $v:expr) => {{
        $w.extra(&$v);
    }};
}

macro_rules! parent_field {
    (parent, $v:expr) => {
        Some($v)
    };
    ($mode:ident, $v:expr) => {
        None
    };
}

/// Declares a struct from its field table, with `read_fields`/`write_fields`.
macro_rules! body_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $mode:ident $ty:ty $(= $key:literal)? $(, via $parse:expr)?
            );* $(;)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: field_ty!($mode $ty), )*
        }

        impl $name {
            fn read_fields(r: &mut Reader) -> Result<Self, ModelError> {
                Ok($name {
                    $( $field: read_field!(r, $mode, $ty $(, $key)? $(, $parse)?), )*
                })
            }

            fn write_fields(&self, w: &mut Writer) {
                $( write_field!(w, $mode, self.$field $(, $key)?); )*
            }

            #[allow(dead_code)]
            fn parent_id(&self) -> Option<Uuid> {
                None$(.or(parent_field!($mode, self.$field)))*
            }

            /// The body, members in table order.
            #[allow(dead_code)]
            pub(crate) fn ordered(&self) -> Ordered {
                let mut w = Writer::new();
                self.write_fields(&mut w);
                w.finish()
            }
        }
    };
}

/// Declares a backend object: its field table (see above), its kind and its REST paths.
/// `paths(o)` binds `o` to the object in the two path expressions.
macro_rules! backend_object {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $kind:ident { $($fields:tt)* }
        paths($o:ident) { post: $post:expr, item: $item:expr $(,)? }
    ) => {
        body_struct! {
            $(#[$meta])*
            #[derive(Clone, Debug, PartialEq)]
            pub struct $name { $($fields)* }
        }

        impl BackendObject for $name {
            const KIND: Kind = Kind::$kind;

            fn from_body(parent: Option<Uuid>, body: Value) -> Result<Self, ModelError> {
                if !Self::KIND.has_parent() {
                    forbid_parent(Self::KIND, parent)?;
                }
                let mut r = Reader::new(Self::KIND.name(), body)?.with_parent(parent);
                Self::read_fields(&mut r)
            }

            fn to_body(&self) -> Value {
                self.ordered().into_value()
            }

            fn to_body_text(&self) -> String {
                self.ordered().to_text()
            }

            fn parent(&self) -> Option<Uuid> {
                self.parent_id()
            }

            fn post_path(&self) -> String {
                #[allow(unused_variables)]
                let $o = self;
                $post
            }

            fn item_path(&self) -> String {
                let $o = self;
                $item
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&self.ordered(), s)
            }
        }
    };
}

/// `Deserialize` from a body, for parent-less kinds.
macro_rules! deserialize_via_body {
    ($ty:ty) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = <Value as serde::Deserialize>::deserialize(d)?;
                <$ty as BackendObject>::from_body(None, v).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A JSON object nested inside a body (a rule's NAT target, a port range): its field table,
/// read and written as one member value, and serde through the same.
macro_rules! nested_value {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        body_struct! {
            $(#[$meta])*
            #[derive(Clone, Debug, Default, PartialEq)]
            pub struct $name { $($fields)* }
        }

        impl Wire for $name {
            fn read(v: Value) -> Result<Self, String> {
                let read = || -> Result<$name, ModelError> {
                    let mut r = Reader::new(stringify!($name), v)?;
                    $name::read_fields(&mut r)
                };
                read().map_err(|e| e.to_string())
            }

            fn write(&self) -> Ordered {
                self.ordered()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                serde::Serialize::serialize(&self.ordered(), s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = <Value as serde::Deserialize>::deserialize(d)?;
                <$name as Wire>::read(v).map_err(serde::de::Error::custom)
            }
        }
    };
}

// --- TunnelZone -------------------------------------------------------------------------

backend_object! {
    /// `TunnelZone {id, name, type}`.
    pub struct TunnelZone: TunnelZone {
        id: req Uuid = "id";
        name: opt String = "name";
        /// `type`: `vxlan` for Kubernetes clusters.
        zone_type: opt TunnelZoneType = "type";
        extra: extra Extra;
    }
    paths(o) {
        post: "/tunnel_zones".to_string(),
        item: format!("/tunnel_zones/{}", o.id),
    }
}
deserialize_via_body!(TunnelZone);

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

// --- TunnelZoneHost ---------------------------------------------------------------------

backend_object! {
    /// Membership of a host in a tunnel zone: `TunnelZoneHost {tunnelZoneId, hostId,
    /// ipAddress}`. `parent` is the tunnel zone.
    pub struct TunnelZoneHost: TunnelZoneHost {
        parent: parent Uuid;
        tunnel_zone_id: opt Uuid = "tunnelZoneId";
        host_id: req Uuid = "hostId";
        /// The host's tunnel endpoint address.
        ip_address: opt Ipv4Addr = "ipAddress";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/tunnel_zones/{}/hosts", o.parent),
        item: format!("/tunnel_zones/{}/hosts/{}", o.parent, o.host_id),
    }
}

impl TunnelZoneHost {
    /// Membership of `host_id` in `tunnel_zone`; the body names the zone too.
    pub fn new(tunnel_zone: Uuid, host_id: Uuid, ip_address: Ipv4Addr) -> Self {
        TunnelZoneHost {
            parent: tunnel_zone,
            tunnel_zone_id: Some(tunnel_zone),
            host_id,
            ip_address: Some(ip_address),
            extra: Extra::new(),
        }
    }
}

// --- Bridge and Router ------------------------------------------------------------------

/// Declares the two L2/L3 devices, which share their REST fields.
/// `more` lists the optional members only one of the two has, written after the shared
/// ones.
macro_rules! device {
    (
        $(#[$meta:meta])* $name:ident, $collection:literal,
        more { $($(#[$fmeta:meta])* $field:ident: $fty:ty = $key:literal;)* }
    ) => {
        backend_object! {
            $(#[$meta])*
            pub struct $name: $name {
                id: req Uuid = "id";
                name: opt String = "name";
                tenant_id: opt String = "tenantId";
                admin_state_up: opt bool = "adminStateUp";
                /// Chain applied to traffic entering the device.
                inbound_filter_id: opt Uuid = "inboundFilterId";
                /// Chain applied to traffic leaving the device.
                outbound_filter_id: opt Uuid = "outboundFilterId";
                $($(#[$fmeta])* $field: opt $fty = $key;)*
                extra: extra Extra;
            }
            paths(o) {
                post: format!("/{}", $collection),
                item: format!("/{}/{}", $collection, o.id),
            }
        }
        deserialize_via_body!($name);

        impl $name {
            pub fn new(id: Uuid) -> Self {
                $name {
                    id,
                    name: None,
                    tenant_id: None,
                    admin_state_up: None,
                    inbound_filter_id: None,
                    outbound_filter_id: None,
                    $($field: None,)*
                    extra: Extra::new(),
                }
            }

            /// A device named `name`, owned by `tenant`.
            pub fn named(id: Uuid, tenant: impl Into<String>, name: impl Into<String>) -> Self {
                $name {
                    name: Some(name.into()),
                    tenant_id: Some(tenant.into()),
                    ..$name::new(id)
                }
            }
        }
    };
}

device!(
    /// A virtual router: `Router {id, name, tenantId, adminStateUp, inboundFilterId,
    /// outboundFilterId, loadBalancerId}`.
    Router, "routers",
    more {
        /// The L4 load balancer the router runs (MidoNet's binding `Router.load_balancer_id`
        /// ↔ `LoadBalancer.router_id`). A router is bound to a load balancer by a PUT of
        /// the router naming it (a load balancer POST may not name its router); a PUT
        /// without it unbinds. Deleting the load balancer clears it; deleting a router that
        /// names one is refused.
        load_balancer_id: Uuid = "loadBalancerId";
    }
);
device!(
    /// A virtual bridge (MidoNet "network"): `Bridge {id, name, tenantId, adminStateUp,
    /// inboundFilterId, outboundFilterId}`.
    Bridge, "bridges",
    more {}
);

// --- Port -------------------------------------------------------------------------------

backend_object! {
    /// A bridge or router port. `parent` is the bridge or router, per `port_type`.
    ///
    /// Router ports carry their address either as `portSubnet` (`["10.0.0.1/24"]`, what the
    /// original controller sends) or as `portAddress` + `networkAddress` + `networkLength`.
    pub struct Port: Port {
        parent: parent Uuid;
        id: req Uuid = "id";
        /// `type`: `Bridge` or `Router`.
        port_type: req PortType = "type";
        admin_state_up: opt bool = "adminStateUp";
        inbound_filter_id: opt Uuid = "inboundFilterId";
        outbound_filter_id: opt Uuid = "outboundFilterId";
        port_address: opt Ipv4Addr = "portAddress";
        network_address: opt Ipv4Addr = "networkAddress";
        network_length: opt u8 = "networkLength", via json::prefix_len;
        port_subnet: opt Vec<Ipv4Cidr> = "portSubnet";
        port_mac: opt MacAddr = "portMac";
        vlan_id: opt u16 = "vlanId";
        extra: extra Extra;
    }
    paths(o) {
        post: match o.port_type {
            PortType::Bridge => format!("/bridges/{}/ports", o.parent),
            PortType::Router => format!("/routers/{}/ports", o.parent),
        },
        item: format!("/ports/{}", o.id),
    }
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

    /// A port of router `router` with address `address` in `network`.
    ///
    /// Give it a MAC ([`Port::port_mac`]): MidoNet randomises a missing `portMac` on POST
    /// and clears it on PUT (MNA-1251), so only an explicit one survives re-pushes.
    pub fn router_port(router: Uuid, id: Uuid) -> Self {
        Port::new(router, id, PortType::Router)
    }

    /// Sets `portAddress`, `networkAddress` and `networkLength` from `address` inside
    /// `network`.
    pub fn with_address(mut self, address: Ipv4Addr, network: Ipv4Cidr) -> Self {
        self.port_address = Some(address);
        self.network_address = Some(network.network());
        self.network_length = Some(network.prefix_len);
        self
    }
}

// --- PortLink ---------------------------------------------------------------------------

backend_object! {
    /// A link between two interior ports: `PortLink {portId, peerId}`. `parent` is the port
    /// the link is created on; `portId` may be left out (the original controller leaves it
    /// out).
    pub struct PortLink: PortLink {
        parent: parent Uuid;
        port_id: opt Uuid = "portId";
        peer_id: req Uuid = "peerId";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/ports/{}/link", o.parent),
        item: format!("/ports/{}/link", o.parent),
    }
}

impl PortLink {
    /// A link from `port` to `peer` whose body leaves `portId` out.
    pub fn new(port: Uuid, peer: Uuid) -> Self {
        PortLink {
            parent: port,
            port_id: None,
            peer_id: peer,
            extra: Extra::new(),
        }
    }

    /// A link from `port` to `peer` whose body names both.
    pub fn between(port: Uuid, peer: Uuid) -> Self {
        PortLink {
            port_id: Some(port),
            ..PortLink::new(port, peer)
        }
    }
}

// --- Route ------------------------------------------------------------------------------

backend_object! {
    /// A route of router `parent`.
    pub struct Route: Route {
        parent: parent Uuid;
        id: req Uuid = "id";
        src_network_addr: opt Ipv4Addr = "srcNetworkAddr";
        src_network_length: opt u8 = "srcNetworkLength", via json::prefix_len;
        dst_network_addr: opt Ipv4Addr = "dstNetworkAddr";
        dst_network_length: opt u8 = "dstNetworkLength", via json::prefix_len;
        next_hop_port: opt Uuid = "nextHopPort";
        next_hop_gateway: opt Ipv4Addr = "nextHopGateway";
        weight: opt u32 = "weight";
        /// `type`: `Normal` routes need a `nextHopPort` on the same router.
        route_type: opt RouteType = "type";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/routers/{}/routes", o.parent),
        item: format!("/routes/{}", o.id),
    }
}

impl Route {
    /// A `Normal` route from anywhere to `dst` via `next_hop_port`.
    pub fn normal(router: Uuid, id: Uuid, dst: Ipv4Cidr, next_hop_port: Uuid) -> Self {
        Route {
            parent: router,
            id,
            src_network_addr: Some(Ipv4Addr::UNSPECIFIED),
            src_network_length: Some(0),
            dst_network_addr: Some(dst.addr),
            dst_network_length: Some(dst.prefix_len),
            next_hop_port: Some(next_hop_port),
            next_hop_gateway: None,
            weight: None,
            route_type: Some(RouteType::Normal),
            extra: Extra::new(),
        }
    }
}

// --- Chain ------------------------------------------------------------------------------

backend_object! {
    /// A rule chain: `Chain {id, name, tenantId}`.
    pub struct Chain: Chain {
        id: req Uuid = "id";
        name: opt String = "name";
        tenant_id: opt String = "tenantId";
        extra: extra Extra;
    }
    paths(o) {
        post: "/chains".to_string(),
        item: format!("/chains/{}", o.id),
    }
}
deserialize_via_body!(Chain);

impl Chain {
    pub fn new(id: Uuid) -> Self {
        Chain {
            id,
            name: None,
            tenant_id: None,
            extra: Extra::new(),
        }
    }

    /// A chain named `name`, owned by `tenant`.
    pub fn named(id: Uuid, tenant: impl Into<String>, name: impl Into<String>) -> Self {
        Chain {
            name: Some(name.into()),
            tenant_id: Some(tenant.into()),
            ..Chain::new(id)
        }
    }
}

// --- Rule -------------------------------------------------------------------------------

nested_value! {
    /// A transport port range of a rule condition: `{start, end}`.
    pub struct PortRange {
        start: opt u16 = "start";
        end: opt u16 = "end";
        extra: extra Extra;
    }
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
}

nested_value! {
    /// A target of a forward NAT rule: `{addressFrom, addressTo, portFrom, portTo}`.
    pub struct NatTarget {
        address_from: opt Ipv4Addr = "addressFrom";
        address_to: opt Ipv4Addr = "addressTo";
        port_from: opt u16 = "portFrom";
        port_to: opt u16 = "portTo";
        extra: extra Extra;
    }
}

impl NatTarget {
    /// Translate to exactly `addr` (and `port`, if given).
    pub fn to(addr: Ipv4Addr, port: Option<u16>) -> Self {
        NatTarget::to_ports(addr, port, port)
    }

    /// Translate to exactly `addr` and a port in `from..=to` (a source port range for SNAT).
    pub fn to_ports(addr: Ipv4Addr, from: Option<u16>, to: Option<u16>) -> Self {
        NatTarget {
            address_from: Some(addr),
            address_to: Some(addr),
            port_from: from,
            port_to: to,
            extra: Extra::new(),
        }
    }
}

body_struct! {
    /// The condition fields of a Rule beyond the L3/L4 match of [`Rule`], named as MidoNet's
    /// REST `Condition` names them (`rest_api/models/Condition.java`): together with
    /// [`Rule`]'s own they are every member of it. An absent flag is `false`, an absent set
    /// is empty.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ConditionExtras {
        /// `condInvert`: the whole condition is negated.
        cond_invert: opt bool = "condInvert";
        /// Match only packets of a forward flow (not a tracked reply).
        match_forward_flow: opt bool = "matchForwardFlow";
        /// Match only replies of a tracked connection.
        match_return_flow: opt bool = "matchReturnFlow";
        in_ports: opt Vec<Uuid> = "inPorts";
        inv_in_ports: opt bool = "invInPorts";
        out_ports: opt Vec<Uuid> = "outPorts";
        inv_out_ports: opt bool = "invOutPorts";
        /// Matches when the packet entered the virtual network through a port of this group.
        port_group: opt Uuid = "portGroup";
        inv_port_group: opt bool = "invPortGroup";
        ip_addr_group_src: opt Uuid = "ipAddrGroupSrc";
        inv_ip_addr_group_src: opt bool = "invIpAddrGroupSrc";
        ip_addr_group_dst: opt Uuid = "ipAddrGroupDst";
        inv_ip_addr_group_dst: opt bool = "invIpAddrGroupDst";
        inv_dl_type: opt bool = "invDlType";
        inv_nw_proto: opt bool = "invNwProto";
        inv_nw_src: opt bool = "invNwSrc";
        inv_nw_dst: opt bool = "invNwDst";
        inv_tp_src: opt bool = "invTpSrc";
        inv_tp_dst: opt bool = "invTpDst";
        // The members below complete MidoNet's REST `Condition`; every one is optional,
        // so a body without them is written exactly as before.
        /// Matches when the port the packet entered the current device through is in
        /// this group.
        in_port_group: opt Uuid = "inPortGroup";
        inv_in_port_group: opt bool = "invInPortGroup";
        /// Matches when the port the packet leaves the current device through is in
        /// this group.
        out_port_group: opt Uuid = "outPortGroup";
        inv_out_port_group: opt bool = "invOutPortGroup";
        /// Matches when the packet has traversed this device (port, bridge, router or
        /// chain) so far.
        traversed_device: opt Uuid = "traversedDevice";
        inv_traversed_device: opt bool = "invTraversedDevice";
        /// Matches untagged frames only.
        no_vlan: opt bool = "noVlan";
        /// Matches frames whose outer VLAN tag is this one (0: no condition).
        vlan: opt u16 = "vlan";
        dl_src: opt MacAddr = "dlSrc";
        /// The bits of `dlSrc` compared; absent: all of them.
        dl_src_mask: opt MacMask = "dlSrcMask";
        inv_dl_src: opt bool = "invDlSrc";
        dl_dst: opt MacAddr = "dlDst";
        dl_dst_mask: opt MacMask = "dlDstMask";
        inv_dl_dst: opt bool = "invDlDst";
        /// The IP TOS byte.
        nw_tos: opt u8 = "nwTos";
        inv_nw_tos: opt bool = "invNwTos";
        /// Matches when a rule on this device rewrote the destination address.
        match_nw_dst_rewritten: opt bool = "matchNwDstRewritten";
        fragment_policy: opt FragmentPolicy = "fragmentPolicy";
        /// The source address inside the data of an ICMP error, with its prefix length.
        icmp_data_src_ip_address: opt Ipv4Addr = "icmpDataSrcIpAddress";
        icmp_data_src_ip_length: opt u8 = "icmpDataSrcIpLength", via json::prefix_len;
        inv_icmp_data_src_ip: opt bool = "invIcmpDataSrcIp";
        /// The destination address inside the data of an ICMP error.
        icmp_data_dst_ip_address: opt Ipv4Addr = "icmpDataDstIpAddress";
        icmp_data_dst_ip_length: opt u8 = "icmpDataDstIpLength", via json::prefix_len;
        inv_icmp_data_dst_ip: opt bool = "invIcmpDataDstIp";
    }
}

backend_object! {
    /// A rule of chain `parent`. Which fields matter depends on `rule_type`: `jump` needs
    /// `jumpChainId`; NAT rules need `flowAction`; `dnat`/`snat` need `natTargets`.
    pub struct Rule: Rule {
        parent: parent Uuid;
        id: req Uuid = "id";
        /// `type`.
        rule_type: req RuleType = "type";
        /// 1-based insertion position in the chain; MidoNet defaults to 1 (the head).
        position: opt u32 = "position";
        flow_action: opt FlowAction = "flowAction";
        jump_chain_id: opt Uuid = "jumpChainId";
        /// Ethertype to match, e.g. 0x0800 for IPv4.
        dl_type: opt u16 = "dlType";
        nw_src_address: opt Ipv4Addr = "nwSrcAddress";
        nw_src_length: opt u8 = "nwSrcLength", via json::prefix_len;
        nw_dst_address: opt Ipv4Addr = "nwDstAddress";
        nw_dst_length: opt u8 = "nwDstLength", via json::prefix_len;
        /// IP protocol number to match, e.g. 6 for TCP.
        nw_proto: opt u8 = "nwProto";
        tp_src: opt PortRange = "tpSrc";
        tp_dst: opt PortRange = "tpDst";
        nat_targets: opt Vec<NatTarget> = "natTargets";
        /// The rest of MidoNet's rule condition (`condInvert`, inversions, ports, groups,
        /// connection direction, L2, TOS, fragments, VLAN, ICMP data). The translators set
        /// few of them; the data-plane model evaluates every one.
        condition: boxed ConditionExtras;
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/chains/{}/rules", o.parent),
        item: format!("/rules/{}", o.id),
    }
}

/// EtherType of IPv4, for rules that match on IPv4 header fields.
pub const DL_TYPE_IPV4: u16 = 0x0800;

impl Rule {
    pub fn new(chain: Uuid, id: Uuid, rule_type: RuleType) -> Self {
        Rule {
            parent: chain,
            id,
            rule_type,
            position: None,
            flow_action: None,
            jump_chain_id: None,
            dl_type: None,
            nw_src_address: None,
            nw_src_length: None,
            nw_dst_address: None,
            nw_dst_length: None,
            nw_proto: None,
            tp_src: None,
            tp_dst: None,
            nat_targets: None,
            condition: Box::default(),
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

    /// Inserted at `position` (1-based) of the chain.
    pub fn at(mut self, position: u32) -> Self {
        self.position = Some(position);
        self
    }

    pub fn with_flow_action(mut self, action: FlowAction) -> Self {
        self.flow_action = Some(action);
        self
    }

    pub fn with_nat_targets(mut self, targets: Vec<NatTarget>) -> Self {
        self.nat_targets = Some(targets);
        self
    }

    /// Matches IPv4 packets from exactly `ip`.
    pub fn from_host(mut self, ip: Ipv4Addr) -> Self {
        self.dl_type = Some(DL_TYPE_IPV4);
        self.nw_src_address = Some(ip);
        self.nw_src_length = Some(32);
        self
    }

    /// Matches IPv4 packets to exactly `ip` (as rewritten by the rules before, if any).
    pub fn to_host(mut self, ip: Ipv4Addr) -> Self {
        self.dl_type = Some(DL_TYPE_IPV4);
        self.nw_dst_address = Some(ip);
        self.nw_dst_length = Some(32);
        self
    }

    /// Matches IPv4 packets to exactly `ip`, L4 protocol `proto`, destination port `port`.
    pub fn to_service(self, ip: Ipv4Addr, proto: u8, port: u16) -> Self {
        let mut rule = self.to_host(ip);
        rule.nw_proto = Some(proto);
        rule.tp_dst = Some(PortRange::single(port));
        rule
    }
}

// --- Host -------------------------------------------------------------------------------

backend_object! {
    /// A MidoNet host (an agent). Read-only: hosts register themselves; we only list them to
    /// resolve Kubernetes node names.
    pub struct Host: Host {
        id: req Uuid = "id";
        name: opt String = "name";
        extra: extra Extra;
    }
    paths(o) {
        post: "/hosts".to_string(),
        item: format!("/hosts/{}", o.id),
    }
}
deserialize_via_body!(Host);

impl Host {
    pub fn new(id: Uuid, name: impl Into<String>) -> Self {
        Host {
            id,
            name: Some(name.into()),
            extra: Extra::new(),
        }
    }
}

// --- HostInterfacePort ------------------------------------------------------------------

backend_object! {
    /// Binding of port `portId` to interface `interfaceName` on host `parent`.
    pub struct HostInterfacePort: HostInterfacePort {
        parent: parent Uuid;
        host_id: opt Uuid = "hostId";
        port_id: req Uuid = "portId";
        interface_name: opt String = "interfaceName";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/hosts/{}/ports", o.parent),
        item: format!("/hosts/{}/ports/{}", o.parent, o.port_id),
    }
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

// --- MACPort ----------------------------------------------------------------------------

backend_object! {
    /// An entry `macAddr → portId` of bridge `parent`'s MAC table.
    pub struct MacPort: MacPort {
        parent: parent Uuid;
        mac_addr: req MacAddr = "macAddr";
        port_id: req Uuid = "portId";
        /// VLAN of the entry; absent or 0 means untagged.
        vlan_id: opt u16 = "vlanId";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/bridges/{}/mac_table", o.parent),
        // Untagged entries live under `mac_table`; tagged ones under `vlans/{vlan}/mac_table`.
        item: {
            let entry = format!("{}_{}", o.mac_addr.to_dashed(), o.port_id);
            match o.vlan_id {
                Some(vlan) if vlan != 0 => {
                    format!("/bridges/{}/vlans/{vlan}/mac_table/{entry}", o.parent)
                }
                _ => format!("/bridges/{}/mac_table/{entry}", o.parent),
            }
        },
    }
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

// --- IPv4MACPair ------------------------------------------------------------------------

backend_object! {
    /// An entry `ip → mac` of bridge `parent`'s ARP table.
    pub struct Ipv4MacPair: Ipv4MacPair {
        parent: parent Uuid;
        ip: req Ipv4Addr = "ip";
        mac: req MacAddr = "mac";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/bridges/{}/arp_table", o.parent),
        item: format!(
            "/bridges/{}/arp_table/{}_{}",
            o.parent,
            o.ip,
            o.mac.to_dashed()
        ),
    }
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

// --- PortGroup --------------------------------------------------------------------------

backend_object! {
    /// A set of ports: `PortGroup {id, tenantId, name, stateful}`. A rule condition's
    /// `portGroup` matches packets that entered the virtual network through a member port.
    pub struct PortGroup: PortGroup {
        id: req Uuid = "id";
        tenant_id: opt String = "tenantId";
        name: opt String = "name";
        stateful: opt bool = "stateful";
        extra: extra Extra;
    }
    paths(o) {
        post: "/port_groups".to_string(),
        item: format!("/port_groups/{}", o.id),
    }
}
deserialize_via_body!(PortGroup);

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

// --- PortGroupPort ----------------------------------------------------------------------

backend_object! {
    /// Membership of port `portId` in port group `parent`: `PortGroupPort {portGroupId,
    /// portId}`.
    pub struct PortGroupPort: PortGroupPort {
        parent: parent Uuid;
        port_group_id: opt Uuid = "portGroupId";
        port_id: req Uuid = "portId";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/port_groups/{}/ports", o.parent),
        item: format!("/port_groups/{}/ports/{}", o.parent, o.port_id),
    }
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

// --- IpAddrGroup ------------------------------------------------------------------------

backend_object! {
    /// A set of addresses: `IpAddrGroup {id, name}` (MidoNet requires a name of 1 to 255
    /// characters). Rule conditions match it by source or destination address.
    pub struct IpAddrGroup: IpAddrGroup {
        id: req Uuid = "id";
        name: opt String = "name";
        extra: extra Extra;
    }
    paths(o) {
        post: "/ip_addr_groups".to_string(),
        item: format!("/ip_addr_groups/{}", o.id),
    }
}
deserialize_via_body!(IpAddrGroup);

impl IpAddrGroup {
    pub fn new(id: Uuid, name: impl Into<String>) -> Self {
        IpAddrGroup {
            id,
            name: Some(name.into()),
            extra: Extra::new(),
        }
    }
}

// --- IpAddrGroupAddr --------------------------------------------------------------------

backend_object! {
    /// Address `addr` of IP address group `parent`: `IpAddrGroupAddr {ipAddrGroupId, addr,
    /// version}`. `version` is MidoNet's type discriminator (4 for IPv4, the only family
    /// Kubernetes pods get here). Only single addresses, no prefixes.
    pub struct IpAddrGroupAddr: IpAddrGroupAddr {
        parent: parent Uuid;
        ip_addr_group_id: opt Uuid = "ipAddrGroupId";
        addr: req Ipv4Addr = "addr";
        version: opt u8 = "version", via json::u8_max(4);
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/ip_addr_groups/{}/ip_addrs", o.parent),
        item: format!("/ip_addr_groups/{}/versions/4/ip_addrs/{}", o.parent, o.addr),
    }
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

// --- L4 load balancing: LoadBalancer, Pool, PoolMember, Vip ------------------------------
//
// MidoNet's REST models `rest_api/models/{LoadBalancer,Pool,PoolMember,Vip}.java` and
// resources `services/rest_api/resources/{LoadBalancer,Pool,PoolMember,Vip}Resource.scala`.
// Storage bindings (`MidonetBackend.scala`): a load balancer's pools, a pool's members and
// VIPs are deleted with it (CASCADE); a router naming a load balancer refuses deletion
// (ERROR) and the load balancer's deletion clears the router's `loadBalancerId`.

backend_object! {
    /// An L4 load balancer: `LoadBalancer {id, routerId, adminStateUp}`. `routerId` is
    /// read-only: MidoNet refuses a POST that names it (400) and a PUT that changes it; it
    /// is set by a PUT of the router naming the load balancer (`Router.loadBalancerId`).
    pub struct LoadBalancer: LoadBalancer {
        id: req Uuid = "id";
        router_id: opt Uuid = "routerId";
        /// MidoNet's default: `true`.
        admin_state_up: opt bool = "adminStateUp";
        extra: extra Extra;
    }
    paths(o) {
        post: "/load_balancers".to_string(),
        item: format!("/load_balancers/{}", o.id),
    }
}
deserialize_via_body!(LoadBalancer);

impl LoadBalancer {
    pub fn new(id: Uuid) -> Self {
        LoadBalancer {
            id,
            router_id: None,
            admin_state_up: Some(true),
            extra: Extra::new(),
        }
    }
}

backend_object! {
    /// A pool of load balancer `parent`: `Pool {id, loadBalancerId, adminStateUp,
    /// healthMonitorId, protocol, lbMethod, status}`. MidoNet requires `lbMethod`; a POST
    /// sets `protocol` to `TCP` and `status` to `ACTIVE` whatever the body says. Created
    /// through `/load_balancers/{lb}/pools` (which sets `loadBalancerId`), or `/pools` with
    /// `loadBalancerId` in the body.
    pub struct Pool: Pool {
        parent: parent Uuid;
        id: req Uuid = "id";
        load_balancer_id: opt Uuid = "loadBalancerId";
        admin_state_up: opt bool = "adminStateUp";
        /// A health monitor decides which members are up; the data-plane model refuses a
        /// pool that has one.
        health_monitor_id: opt Uuid = "healthMonitorId";
        protocol: opt PoolProtocol = "protocol";
        lb_method: req PoolLbMethod = "lbMethod";
        status: opt LbStatus = "status";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/load_balancers/{}/pools", o.parent),
        item: format!("/pools/{}", o.id),
    }
}

impl Pool {
    /// A round-robin TCP pool of `load_balancer`.
    pub fn new(load_balancer: Uuid, id: Uuid) -> Self {
        Pool {
            parent: load_balancer,
            id,
            load_balancer_id: Some(load_balancer),
            admin_state_up: Some(true),
            health_monitor_id: None,
            protocol: Some(PoolProtocol::Tcp),
            lb_method: PoolLbMethod::RoundRobin,
            status: None,
            extra: Extra::new(),
        }
    }
}

backend_object! {
    /// A member of pool `parent`: `PoolMember {id, poolId, address, protocolPort, weight,
    /// adminStateUp, status}`. A REST POST makes the member `adminStateUp: true`, `status:
    /// ACTIVE` whatever the body says (`PoolMember.create`); `weight` defaults to 1, and
    /// only a member with a positive weight receives connections. MidoNet defaults an absent
    /// `protocolPort` to 0; the model requires it, as a member without a port is a bug of
    /// ours.
    pub struct PoolMember: PoolMember {
        parent: parent Uuid;
        id: req Uuid = "id";
        pool_id: opt Uuid = "poolId";
        address: req Ipv4Addr = "address";
        protocol_port: req u16 = "protocolPort";
        weight: opt u32 = "weight";
        admin_state_up: opt bool = "adminStateUp";
        status: opt LbStatus = "status";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/pools/{}/pool_members", o.parent),
        item: format!("/pool_members/{}", o.id),
    }
}

impl PoolMember {
    /// Backend `address:port` of `pool`, weight 1.
    pub fn new(pool: Uuid, id: Uuid, address: Ipv4Addr, protocol_port: u16) -> Self {
        PoolMember {
            parent: pool,
            id,
            pool_id: Some(pool),
            address,
            protocol_port,
            weight: Some(1),
            admin_state_up: None,
            status: None,
            extra: Extra::new(),
        }
    }
}

backend_object! {
    /// A virtual IP of pool `parent`: `Vip {id, loadBalancerId, poolId, address,
    /// protocolPort, sessionPersistence, adminStateUp}`. MidoNet derives `loadBalancerId`
    /// from the pool (it is not stored). Created through `/pools/{pool}/vips`, or `/vips`
    /// with `poolId` in the body (400 if that pool does not exist).
    pub struct Vip: Vip {
        parent: parent Uuid;
        id: req Uuid = "id";
        load_balancer_id: opt Uuid = "loadBalancerId";
        pool_id: opt Uuid = "poolId";
        address: req Ipv4Addr = "address";
        protocol_port: req u16 = "protocolPort";
        /// Absent (or null): no persistence.
        session_persistence: opt SessionPersistence = "sessionPersistence";
        /// MidoNet's default: `true`.
        admin_state_up: opt bool = "adminStateUp";
        extra: extra Extra;
    }
    paths(o) {
        post: format!("/pools/{}/vips", o.parent),
        item: format!("/vips/{}", o.id),
    }
}

impl Vip {
    /// `address:protocol_port` balanced over `pool`, without session persistence.
    pub fn new(pool: Uuid, id: Uuid, address: Ipv4Addr, protocol_port: u16) -> Self {
        Vip {
            parent: pool,
            id,
            load_balancer_id: None,
            pool_id: Some(pool),
            address,
            protocol_port,
            session_persistence: None,
            admin_state_up: Some(true),
            extra: Extra::new(),
        }
    }

    /// The same VIP with `SOURCE_IP` session persistence.
    pub fn sticky(mut self) -> Self {
        self.session_persistence = Some(SessionPersistence::SourceIp);
        self
    }
}
