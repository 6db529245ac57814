//! Bridges, routers, their ports, port links, and the bridges' MAC and ARP tables.

use std::net::Ipv4Addr;

use midonet_translators::model::{
    Bridge, Ipv4Cidr, Ipv4MacPair, Kind, MacAddr, MacPort, Port, PortLink, PortType, Router,
};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{
    body_of, check_name, ensure_id, force_id, item, list, mac_entry_path, parse, strip, uuid_str,
    view_arp, view_mac, ApiError, ArpEntry, BridgeRec, Device, MacEntry, Outcome, PortRec, Reply,
    RouteRec, RouterRec, Store,
};

/// Port members MidoNet manages itself; ignored in create and update bodies.
const SERVER_PORT_FIELDS: &[&str] = &[
    "peerId",
    "hostId",
    "interfaceName",
    "deviceId",
    "bridgeId",
    "routerId",
    "tunnelKey",
    "active",
    "uri",
    "previousHostId",
    "bgpStatus",
];

impl Device {
    fn kind_name(self) -> &'static str {
        match self {
            Device::Bridge => "bridge",
            Device::Router => "router",
        }
    }
}

impl Store {
    // --- Filters ------------------------------------------------------------------------

    /// Referenced filter chains must exist (MidoNet: 404).
    fn check_chains(&self, ids: &[Option<Uuid>]) -> Result<(), ApiError> {
        for id in ids.iter().flatten() {
            if !self.chains.contains_key(id) {
                return Err(ApiError::missing(Kind::Chain, *id));
            }
        }
        Ok(())
    }

    // --- Bridges ------------------------------------------------------------------------

    pub fn list_bridges(&self, tenant: Option<&str>) -> Outcome {
        let items = self
            .bridges
            .values()
            .filter(|b| tenant_matches(&b.body, tenant))
            .map(|b| Value::Object(b.body.clone()))
            .collect();
        list(Kind::Bridge.collection_media_type(), items)
    }

    pub fn get_bridge(&self, id: Uuid) -> Outcome {
        let b = self.bridge(id)?;
        item(Kind::Bridge, Value::Object(b.body.clone()))
    }

    fn bridge(&self, id: Uuid) -> Result<&BridgeRec, ApiError> {
        self.bridges
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, id))
    }

    pub fn create_bridge(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        let bridge: Bridge = parse(None, body)?;
        check_name(bridge.name.as_ref(), 0)?;
        if self.bridges.contains_key(&bridge.id) {
            return Err(ApiError::conflict(format!(
                "a bridge with id {} already exists",
                bridge.id
            )));
        }
        self.check_chains(&[bridge.inbound_filter_id, bridge.outbound_filter_id])?;
        self.bridges.insert(
            bridge.id,
            BridgeRec {
                body: body_of(&bridge),
                ports: Vec::new(),
                mac_table: Vec::new(),
                arp_table: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/bridges/{}", bridge.id)))
    }

    pub fn update_bridge(&mut self, id: Uuid, mut body: Value) -> Outcome {
        self.bridge(id)?;
        force_id(&mut body, id);
        let bridge: Bridge = parse(None, body)?;
        check_name(bridge.name.as_ref(), 0)?;
        self.check_chains(&[bridge.inbound_filter_id, bridge.outbound_filter_id])?;
        if let Some(rec) = self.bridges.get_mut(&id) {
            rec.body = body_of(&bridge);
        }
        Ok(Reply::NoContent)
    }

    /// Deletes the bridge with its ports (and everything a port deletion cascades to) and
    /// its MAC and ARP tables.
    pub fn delete_bridge(&mut self, id: Uuid) -> Outcome {
        let rec = self
            .bridges
            .remove(&id)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, id))?;
        for port in rec.ports {
            self.remove_port(port);
        }
        Ok(Reply::NoContent)
    }

    // --- Routers ------------------------------------------------------------------------

    pub fn list_routers(&self, tenant: Option<&str>) -> Outcome {
        let items = self
            .routers
            .values()
            .filter(|r| tenant_matches(&r.body, tenant))
            .map(|r| Value::Object(r.body.clone()))
            .collect();
        list(Kind::Router.collection_media_type(), items)
    }

    pub fn get_router(&self, id: Uuid) -> Outcome {
        let r = self.router(id)?;
        item(Kind::Router, Value::Object(r.body.clone()))
    }

    pub(crate) fn router(&self, id: Uuid) -> Result<&RouterRec, ApiError> {
        self.routers
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Router, id))
    }

    pub fn create_router(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        let router: Router = parse(None, body)?;
        check_name(router.name.as_ref(), 0)?;
        if self.routers.contains_key(&router.id) {
            return Err(ApiError::conflict(format!(
                "a router with id {} already exists",
                router.id
            )));
        }
        self.check_chains(&[router.inbound_filter_id, router.outbound_filter_id])?;
        self.check_router_binding(router.id, router.load_balancer_id)?;
        self.bind_router(router.id, None, router.load_balancer_id);
        self.routers.insert(
            router.id,
            RouterRec {
                body: body_of(&router),
                ports: Vec::new(),
                routes: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/routers/{}", router.id)))
    }

    /// Replaces the body: the router is bound to the load balancer it names, and
    /// unbound from the one it named before.
    pub fn update_router(&mut self, id: Uuid, mut body: Value) -> Outcome {
        let was = self.router(id)?.body.get("loadBalancerId").cloned();
        force_id(&mut body, id);
        let router: Router = parse(None, body)?;
        check_name(router.name.as_ref(), 0)?;
        self.check_chains(&[router.inbound_filter_id, router.outbound_filter_id])?;
        self.check_router_binding(id, router.load_balancer_id)?;
        let was = was
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok());
        self.bind_router(id, was, router.load_balancer_id);
        if let Some(rec) = self.routers.get_mut(&id) {
            rec.body = body_of(&router);
        }
        Ok(Reply::NoContent)
    }

    /// Deletes the router with its ports and routes; a router that names a load balancer
    /// is a 409 (MidoNet's binding refuses it).
    pub fn delete_router(&mut self, id: Uuid) -> Outcome {
        if let Some(lb) = self.router(id)?.body.get("loadBalancerId") {
            return Err(ApiError::conflict(format!(
                "router {id} still uses load balancer {lb}"
            )));
        }
        let rec = self
            .routers
            .remove(&id)
            .ok_or_else(|| ApiError::missing(Kind::Router, id))?;
        for port in rec.ports {
            self.remove_port(port);
        }
        for route in rec.routes {
            self.routes.remove(&route);
        }
        Ok(Reply::NoContent)
    }

    // --- Ports --------------------------------------------------------------------------

    pub fn list_ports(&self) -> Outcome {
        let items = self
            .ports
            .iter()
            .map(|(id, p)| self.view_port(*id, p))
            .collect();
        list(Kind::Port.collection_media_type(), items)
    }

    pub fn list_device_ports(&self, device: Device, id: Uuid) -> Outcome {
        let ports = match device {
            Device::Bridge => &self.bridge(id)?.ports,
            Device::Router => &self.router(id)?.ports,
        };
        let items = ports
            .iter()
            .filter_map(|p| self.ports.get(p).map(|rec| self.view_port(*p, rec)))
            .collect();
        list(Kind::Port.collection_media_type(), items)
    }

    pub fn get_port(&self, id: Uuid) -> Outcome {
        let rec = self
            .ports
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Port, id))?;
        item(Kind::Port, self.view_port(id, rec))
    }

    /// A port as MidoNet reports it: its body plus device, peer and host binding.
    pub(crate) fn view_port(&self, id: Uuid, rec: &PortRec) -> Value {
        let mut body = rec.body.clone();
        body.insert("id".into(), uuid_str(id));
        body.insert("deviceId".into(), uuid_str(rec.device));
        if let Some(peer) = rec.peer {
            body.insert("peerId".into(), uuid_str(peer));
        }
        if let Some(b) = &rec.binding {
            body.insert("hostId".into(), uuid_str(b.host));
            body.insert("interfaceName".into(), Value::String(b.interface.clone()));
        }
        Value::Object(body)
    }

    /// Creates a port on a bridge or router. A router port's address is completed from
    /// `portSubnet` (or the other way round), it gets a random MAC when none is given, and
    /// MidoNet's `Local` route to each of its addresses is created with it.
    pub fn create_port(&mut self, device: Device, device_id: Uuid, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        strip(&mut body, SERVER_PORT_FIELDS);
        let mut port: Port = parse(Some(device_id), body)?;
        check_port_type(device, &port)?;
        match device {
            Device::Bridge => {
                self.bridge(device_id)?;
            }
            Device::Router => {
                self.router(device_id)?;
            }
        }
        if self.ports.contains_key(&port.id) {
            return Err(ApiError::conflict(format!(
                "a port with id {} already exists",
                port.id
            )));
        }
        self.check_chains(&[port.inbound_filter_id, port.outbound_filter_id])?;
        if device == Device::Router {
            complete_router_port(&mut port);
            if port.port_mac.is_none() {
                port.port_mac = Some(random_mac());
            }
        }
        let id = port.id;
        self.ports.insert(
            id,
            PortRec {
                body: body_of(&port),
                device_kind: device,
                device: device_id,
                peer: None,
                link_origin: false,
                binding: None,
            },
        );
        match device {
            Device::Bridge => {
                if let Some(b) = self.bridges.get_mut(&device_id) {
                    b.ports.push(id);
                }
            }
            Device::Router => {
                if let Some(r) = self.routers.get_mut(&device_id) {
                    r.ports.push(id);
                }
                for subnet in port.port_subnet.iter().flatten() {
                    self.add_local_route(device_id, id, *subnet);
                }
            }
        }
        Ok(Reply::Created(format!("/ports/{id}")))
    }

    /// MidoNet routes a router port's own address to the port itself.
    fn add_local_route(&mut self, router: Uuid, port: Uuid, subnet: Ipv4Cidr) {
        let id = Uuid::new_v5(&port, format!("local-route/{subnet}").as_bytes());
        let body = json!({
            "id": id.to_string(),
            "type": "Local",
            "srcNetworkAddr": "0.0.0.0",
            "srcNetworkLength": 0,
            "dstNetworkAddr": subnet.addr.to_string(),
            "dstNetworkLength": 32,
            "nextHopPort": port.to_string(),
            "weight": 0,
            "learned": false,
        });
        let Value::Object(body) = body else { return };
        self.routes.insert(
            id,
            RouteRec {
                body,
                router,
                next_hop_port: Some(port),
            },
        );
        if let Some(r) = self.routers.get_mut(&router) {
            r.routes.push(id);
        }
    }

    /// Replaces the port's body; its device, type, link and binding stay.
    pub fn update_port(&mut self, id: Uuid, mut body: Value) -> Outcome {
        let rec = self
            .ports
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Port, id))?;
        let (device, device_id) = (rec.device_kind, rec.device);
        force_id(&mut body, id);
        strip(&mut body, SERVER_PORT_FIELDS);
        let mut port: Port = parse(Some(device_id), body)?;
        check_port_type(device, &port)?;
        self.check_chains(&[port.inbound_filter_id, port.outbound_filter_id])?;
        if device == Device::Router {
            complete_router_port(&mut port);
        }
        if let Some(rec) = self.ports.get_mut(&id) {
            rec.body = body_of(&port);
        }
        Ok(Reply::NoContent)
    }

    pub fn delete_port(&mut self, id: Uuid) -> Outcome {
        if self.remove_port(id) {
            Ok(Reply::NoContent)
        } else {
            Err(ApiError::missing(Kind::Port, id))
        }
    }

    /// Removes a port: its routes (those whose next hop it is) go, its peer is unlinked,
    /// its host binding disappears with it. MAC table entries naming it stay, as in
    /// MidoNet, whose state tables are not bound to ports.
    pub(crate) fn remove_port(&mut self, id: Uuid) -> bool {
        let Some(rec) = self.ports.remove(&id) else {
            return false;
        };
        self.forget_port_memberships(id);
        match rec.device_kind {
            Device::Bridge => {
                if let Some(b) = self.bridges.get_mut(&rec.device) {
                    b.ports.retain(|p| *p != id);
                }
            }
            Device::Router => {
                if let Some(r) = self.routers.get_mut(&rec.device) {
                    r.ports.retain(|p| *p != id);
                }
            }
        }
        if let Some(peer) = rec.peer.and_then(|p| self.ports.get_mut(&p)) {
            peer.peer = None;
            peer.link_origin = false;
        }
        let routes: Vec<Uuid> = self
            .routes
            .iter()
            .filter(|(_, r)| r.next_hop_port == Some(id))
            .map(|(route_id, _)| *route_id)
            .collect();
        for route in routes {
            self.remove_route(route);
        }
        true
    }

    // --- Links --------------------------------------------------------------------------

    /// Links two ports; both must exist (404) and be unlinked (409).
    pub fn link_ports(&mut self, port: Uuid, body: Value) -> Outcome {
        let link: PortLink = parse(Some(port), body)?;
        let peer = link.peer_id;
        if peer == port {
            return Err(ApiError::bad_request("a port cannot be linked to itself"));
        }
        let this = self
            .ports
            .get(&port)
            .ok_or_else(|| ApiError::missing(Kind::Port, port))?;
        let other = self
            .ports
            .get(&peer)
            .ok_or_else(|| ApiError::missing(Kind::Port, peer))?;
        if this.peer.is_some() || other.peer.is_some() {
            return Err(ApiError::conflict(
                "the ports are not linkable: one of them is already linked",
            ));
        }
        if let Some(p) = self.ports.get_mut(&port) {
            p.peer = Some(peer);
            p.link_origin = true;
        }
        if let Some(p) = self.ports.get_mut(&peer) {
            p.peer = Some(port);
            p.link_origin = false;
        }
        Ok(Reply::Created(format!("/ports/{port}/link")))
    }

    /// Unlinks the port (and its peer); 404 only if the port does not exist.
    pub fn unlink_port(&mut self, port: Uuid) -> Outcome {
        let rec = self
            .ports
            .get_mut(&port)
            .ok_or_else(|| ApiError::missing(Kind::Port, port))?;
        let peer = rec.peer.take();
        rec.link_origin = false;
        if let Some(other) = peer.and_then(|p| self.ports.get_mut(&p)) {
            other.peer = None;
            other.link_origin = false;
        }
        Ok(Reply::NoContent)
    }

    // --- MAC table ----------------------------------------------------------------------

    pub fn list_mac_table(&self, bridge: Uuid, vlan: Option<u16>) -> Outcome {
        let items = self
            .bridge(bridge)?
            .mac_table
            .iter()
            .filter(|e| vlan.is_none_or(|v| v == e.vlan))
            .map(view_mac)
            .collect();
        list(Kind::MacPort.collection_media_type(), items)
    }

    /// Adds `macAddr → portId`; the port must be a port of this bridge (400 otherwise,
    /// 404 if it does not exist at all).
    pub fn create_mac_entry(&mut self, bridge: Uuid, vlan: Option<u16>, body: Value) -> Outcome {
        let entry: MacPort = parse(Some(bridge), body)?;
        let vlan = vlan.or(entry.vlan_id).unwrap_or(0);
        let port = self
            .ports
            .get(&entry.port_id)
            .ok_or_else(|| ApiError::missing(Kind::Port, entry.port_id))?;
        if port.device_kind != Device::Bridge || port.device != bridge {
            return Err(ApiError::bad_request(format!(
                "port {} is not a port of bridge {bridge}",
                entry.port_id
            )));
        }
        let new = MacEntry {
            vlan,
            mac: entry.mac_addr.to_string(),
            port: entry.port_id,
        };
        let rec = self
            .bridges
            .get_mut(&bridge)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, bridge))?;
        if rec.mac_table.contains(&new) {
            return Err(ApiError::conflict("the MAC table already has this entry"));
        }
        let path = mac_entry_path(bridge, &new);
        rec.mac_table.push(new);
        Ok(Reply::Created(path))
    }

    pub fn get_mac_entry(&self, bridge: Uuid, vlan: Option<u16>, entry: &str) -> Outcome {
        let rec = self.bridge(bridge)?;
        let wanted = parse_mac_entry(vlan, entry)?;
        let found = rec
            .mac_table
            .iter()
            .find(|e| **e == wanted)
            .ok_or_else(|| ApiError::not_found("the MAC table has no such entry"))?;
        item(Kind::MacPort, view_mac(found))
    }

    /// Removes the entry; removing an absent entry succeeds, as in MidoNet.
    pub fn delete_mac_entry(&mut self, bridge: Uuid, vlan: Option<u16>, entry: &str) -> Outcome {
        let wanted = parse_mac_entry(vlan, entry)?;
        let rec = self
            .bridges
            .get_mut(&bridge)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, bridge))?;
        rec.mac_table.retain(|e| *e != wanted);
        Ok(Reply::NoContent)
    }

    // --- ARP table ----------------------------------------------------------------------

    pub fn list_arp_table(&self, bridge: Uuid) -> Outcome {
        let items = self
            .bridge(bridge)?
            .arp_table
            .iter()
            .map(view_arp)
            .collect();
        list(Kind::Ipv4MacPair.collection_media_type(), items)
    }

    pub fn create_arp_entry(&mut self, bridge: Uuid, body: Value) -> Outcome {
        let pair: Ipv4MacPair = parse(Some(bridge), body)?;
        let rec = self
            .bridges
            .get_mut(&bridge)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, bridge))?;
        let new = ArpEntry {
            ip: pair.ip,
            mac: pair.mac.to_string(),
        };
        if rec.arp_table.contains(&new) {
            return Err(ApiError::conflict("the ARP table already has this entry"));
        }
        rec.arp_table.push(new);
        Ok(Reply::Created(format!(
            "/bridges/{bridge}/arp_table/{}_{}",
            pair.ip,
            pair.mac.to_dashed()
        )))
    }

    pub fn get_arp_entry(&self, bridge: Uuid, entry: &str) -> Outcome {
        let rec = self.bridge(bridge)?;
        let wanted = parse_arp_entry(entry)?;
        let found = rec
            .arp_table
            .iter()
            .find(|e| **e == wanted)
            .ok_or_else(|| ApiError::not_found("the ARP table has no such entry"))?;
        item(Kind::Ipv4MacPair, view_arp(found))
    }

    pub fn delete_arp_entry(&mut self, bridge: Uuid, entry: &str) -> Outcome {
        let wanted = parse_arp_entry(entry)?;
        let rec = self
            .bridges
            .get_mut(&bridge)
            .ok_or_else(|| ApiError::missing(Kind::Bridge, bridge))?;
        rec.arp_table.retain(|e| *e != wanted);
        Ok(Reply::NoContent)
    }
}

fn tenant_matches(body: &super::Body, tenant: Option<&str>) -> bool {
    tenant.is_none_or(|t| body.get("tenantId").and_then(Value::as_str) == Some(t))
}

fn check_port_type(device: Device, port: &Port) -> Result<(), ApiError> {
    let ok = matches!(
        (device, port.port_type),
        (Device::Bridge, PortType::Bridge) | (Device::Router, PortType::Router)
    );
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "not a {} port: type is {}",
            device.kind_name(),
            port.port_type
        )))
    }
}

/// Fills `portAddress`/`networkAddress`/`networkLength` from `portSubnet`, or
/// `portSubnet` from `portAddress` and `networkLength`, as MidoNet's router port does.
fn complete_router_port(port: &mut Port) {
    match port.port_subnet.as_ref().and_then(|s| s.first()).copied() {
        Some(subnet) => {
            port.port_address.get_or_insert(subnet.addr);
            port.network_address.get_or_insert(subnet.network());
            port.network_length.get_or_insert(subnet.prefix_len);
        }
        None => {
            if let Some(addr) = port.port_address {
                let len = port.network_length.unwrap_or(0);
                port.port_subnet = Ipv4Cidr::new(addr, len).map(|c| vec![c]);
            }
        }
    }
}

/// A random locally administered unicast MAC.
fn random_mac() -> MacAddr {
    let mut bytes: [u8; 6] = rand::random();
    bytes[0] = (bytes[0] & 0xfe) | 0x02;
    MacAddr(bytes)
}

/// `{mac-with-dashes}_{portId}` of a MAC table item path.
fn parse_mac_entry(vlan: Option<u16>, entry: &str) -> Result<MacEntry, ApiError> {
    let (mac, port) = entry
        .split_once('_')
        .ok_or_else(|| ApiError::bad_request("a MAC entry is written {mac}_{portId}"))?;
    let mac: MacAddr = mac
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{mac:?} is not a MAC address")))?;
    let port = Uuid::parse_str(port)
        .map_err(|_| ApiError::bad_request(format!("{port:?} is not a port id")))?;
    Ok(MacEntry {
        vlan: vlan.unwrap_or(0),
        mac: mac.to_string(),
        port,
    })
}

/// `{ip}_{mac-with-dashes}` of an ARP table item path.
fn parse_arp_entry(entry: &str) -> Result<ArpEntry, ApiError> {
    let (ip, mac) = entry
        .split_once('_')
        .ok_or_else(|| ApiError::bad_request("an ARP entry is written {ip}_{mac}"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{ip:?} is not an IPv4 address")))?;
    let mac: MacAddr = mac
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{mac:?} is not a MAC address")))?;
    Ok(ArpEntry {
        ip,
        mac: mac.to_string(),
    })
}
