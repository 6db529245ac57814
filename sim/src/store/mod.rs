//! The simulator's in-memory MidoNet topology and its rules.
//!
//! Synchronous and free of HTTP: every operation takes parsed input and returns a
//! [`Reply`] or an [`ApiError`] carrying the status MidoNet would answer. The HTTP layer
//! (`super::api`) only routes, checks media types and serialises.
//!
//! Relations are kept outside the stored bodies (a port's device, peer and host binding,
//! a chain's rule order) so that cascades and reference clearing are plain bookkeeping;
//! GET answers overlay them onto the body the way MidoNet reports them.

mod devices;
mod filtering;
mod groups;
mod l4lb;
mod records;
mod routing;
mod topology;
mod tracked;

use std::net::Ipv4Addr;

use midonet_translators::model::{BackendObject, Kind, ModelError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::admin::{StateDump, StateEntry};

pub(crate) use l4lb::Child;
use l4lb::LoadBalancerRec;
pub use records::Cursor;
use records::RecordKind;
use tracked::{InRecord, RecordKey, Tracked};

/// A stored JSON body.
pub(crate) type Body = Map<String, Value>;

/// A failed API operation: status, message and, for invalid bodies, the violations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub message: String,
    pub violations: Vec<(String, String)>,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            violations: Vec::new(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(409, message)
    }

    /// 400 with one violation of `property`.
    pub fn invalid(property: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: "the request body is invalid".into(),
            violations: vec![(property.into(), message.into())],
        }
    }

    fn missing(kind: Kind, id: Uuid) -> ApiError {
        ApiError::not_found(format!("there is no {kind} with id {id}"))
    }
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> ApiError {
        match e {
            ModelError::MissingField { field, .. } => ApiError::invalid(field, "is required"),
            ModelError::BadField { field, reason, .. } => ApiError::invalid(field, reason),
            other => ApiError::bad_request(other.to_string()),
        }
    }
}

/// A successful API operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// 201 with a `Location` of this item path.
    Created(String),
    /// 204.
    NoContent,
    /// 200 with a JSON body of this media type.
    Json(&'static str, Value),
}

pub(crate) type Outcome = Result<Reply, ApiError>;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct HostRec {
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TunnelZoneRec {
    pub body: Body,
    /// Member hosts in insertion order.
    pub members: Vec<MemberRec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct MemberRec {
    pub host: Uuid,
    pub body: Body,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct BridgeRec {
    pub body: Body,
    pub ports: Vec<Uuid>,
    pub mac_table: Vec<MacEntry>,
    pub arp_table: Vec<ArpEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MacEntry {
    pub vlan: u16,
    /// Canonical (lowercase, colon-separated).
    pub mac: String,
    pub port: Uuid,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ArpEntry {
    pub ip: Ipv4Addr,
    pub mac: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RouterRec {
    pub body: Body,
    pub ports: Vec<Uuid>,
    pub routes: Vec<Uuid>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Device {
    Bridge,
    Router,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PortRec {
    pub body: Body,
    pub device_kind: Device,
    pub device: Uuid,
    pub peer: Option<Uuid>,
    /// True on the side the link was POSTed to (where the state dump lists it).
    pub link_origin: bool,
    pub binding: Option<BindingRec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct BindingRec {
    pub host: Uuid,
    pub interface: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RouteRec {
    pub body: Body,
    pub router: Uuid,
    pub next_hop_port: Option<Uuid>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ChainRec {
    pub body: Body,
    /// Rule ids in evaluation order.
    pub rules: Vec<Uuid>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RuleRec {
    pub body: Body,
    pub chain: Uuid,
    pub jump_chain: Option<Uuid>,
}

/// The whole simulated topology. Serialisable as the snapshot file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
///
/// Each map logs the records its changes touch (`tracked`), for the readers of
/// `records::Store::changes_since`.
pub(crate) struct Store {
    pub hosts: Tracked<HostRec>,
    pub tunnel_zones: Tracked<TunnelZoneRec>,
    pub bridges: Tracked<BridgeRec>,
    pub routers: Tracked<RouterRec>,
    pub ports: Tracked<PortRec>,
    pub routes: Tracked<RouteRec>,
    pub chains: Tracked<ChainRec>,
    /// A rule is part of its chain's record.
    pub rules: Tracked<RuleRec>,
    pub port_groups: Tracked<PortGroupRec>,
    pub ip_addr_groups: Tracked<IpAddrGroupRec>,
    /// A load balancer with its pools, their members and VIPs.
    pub load_balancers: Tracked<LoadBalancerRec>,
}

macro_rules! in_own_record {
    ($($rec:ty => $kind:ident),* $(,)?) => {
        $(impl InRecord for $rec {
            fn record(&self, id: Uuid) -> RecordKey {
                (RecordKind::$kind, id)
            }
        })*
    };
}

in_own_record! {
    HostRec => Host,
    TunnelZoneRec => TunnelZone,
    BridgeRec => Bridge,
    RouterRec => Router,
    PortRec => Port,
    RouteRec => Route,
    ChainRec => Chain,
    PortGroupRec => PortGroup,
    IpAddrGroupRec => IpAddrGroup,
    LoadBalancerRec => LoadBalancer,
}

impl InRecord for RuleRec {
    fn record(&self, _id: Uuid) -> RecordKey {
        (RecordKind::Chain, self.chain)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PortGroupRec {
    pub body: Body,
    /// Member ports in insertion order.
    pub ports: Vec<Uuid>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct IpAddrGroupRec {
    pub body: Body,
    /// Addresses in insertion order.
    pub addrs: Vec<Ipv4Addr>,
}

// --- Helpers shared by the operations ---------------------------------------------------

/// MidoNet assigns an id when a create omits it.
pub(crate) fn ensure_id(body: &mut Value) {
    if let Value::Object(map) = body {
        if map.get("id").is_none_or(Value::is_null) {
            map.insert("id".into(), Value::String(Uuid::new_v4().to_string()));
        }
    }
}

/// Forces the body's `id` to the path's id (MidoNet keeps the stored id on update).
pub(crate) fn force_id(body: &mut Value, id: Uuid) {
    if let Value::Object(map) = body {
        map.insert("id".into(), Value::String(id.to_string()));
    }
}

/// Removes members the server owns and derives itself.
pub(crate) fn strip(body: &mut Value, keys: &[&str]) {
    if let Value::Object(map) = body {
        for key in keys {
            map.remove(*key);
        }
    }
}

/// Parses a body with the shared model; model errors become 400 violations.
pub(crate) fn parse<T: BackendObject>(parent: Option<Uuid>, body: Value) -> Result<T, ApiError> {
    T::from_body(parent, body).map_err(ApiError::from)
}

/// The object form of a typed object's body.
pub(crate) fn body_of<T: BackendObject>(obj: &T) -> Body {
    match obj.to_body() {
        Value::Object(map) => map,
        _ => Body::new(),
    }
}

/// A name longer than MidoNet's 255 characters is a violation.
pub(crate) fn check_name(name: Option<&String>, min: usize) -> Result<(), ApiError> {
    let len = name.map_or(0, |n| n.chars().count());
    if name.is_none() && min > 0 {
        return Err(ApiError::invalid("name", "is required"));
    }
    if len < min || len > 255 {
        return Err(ApiError::invalid(
            "name",
            format!("must be {min} to 255 characters long"),
        ));
    }
    Ok(())
}

pub(crate) fn uuid_str(id: Uuid) -> Value {
    Value::String(id.to_string())
}

fn list(media: Option<&'static str>, items: Vec<Value>) -> Outcome {
    Ok(Reply::Json(
        media.unwrap_or("application/json"),
        Value::Array(items),
    ))
}

fn item(kind: Kind, value: Value) -> Outcome {
    Ok(Reply::Json(kind.media_type(), value))
}

impl Store {
    /// Adds or renames hosts.
    pub fn add_hosts(&mut self, hosts: &[(String, Uuid)]) {
        for (name, id) in hosts {
            self.hosts.insert(*id, HostRec { name: name.clone() });
        }
    }

    /// Forgets every resource; hosts are kept unless `hosts` is true.
    pub fn wipe(&mut self, hosts: bool) {
        let kept = std::mem::take(&mut self.hosts);
        *self = Store::default();
        if !hosts {
            self.hosts = kept;
        }
    }

    /// Every stored resource as the admin API reports it.
    pub fn dump(&self) -> StateDump {
        let mut resources = Vec::new();
        let entry = |kind: Kind, path: String, parent: Option<Uuid>, body: Value| StateEntry {
            kind: kind.name().to_string(),
            path,
            parent: parent.map(|p| p.to_string()).unwrap_or_default(),
            body,
        };
        for (id, tz) in &self.tunnel_zones {
            resources.push(entry(
                Kind::TunnelZone,
                format!("/tunnel_zones/{id}"),
                None,
                Value::Object(tz.body.clone()),
            ));
        }
        for (tz_id, tz) in &self.tunnel_zones {
            for m in &tz.members {
                resources.push(entry(
                    Kind::TunnelZoneHost,
                    format!("/tunnel_zones/{tz_id}/hosts/{}", m.host),
                    Some(*tz_id),
                    Value::Object(m.body.clone()),
                ));
            }
        }
        for (id, r) in &self.routers {
            resources.push(entry(
                Kind::Router,
                format!("/routers/{id}"),
                None,
                Value::Object(r.body.clone()),
            ));
        }
        for (id, b) in &self.bridges {
            resources.push(entry(
                Kind::Bridge,
                format!("/bridges/{id}"),
                None,
                Value::Object(b.body.clone()),
            ));
        }
        for (id, p) in &self.ports {
            resources.push(entry(
                Kind::Port,
                format!("/ports/{id}"),
                Some(p.device),
                self.view_port(*id, p),
            ));
        }
        for (id, p) in &self.ports {
            if let (Some(peer), true) = (p.peer, p.link_origin) {
                resources.push(entry(
                    Kind::PortLink,
                    format!("/ports/{id}/link"),
                    Some(*id),
                    serde_json::json!({"portId": id.to_string(), "peerId": peer.to_string()}),
                ));
            }
        }
        for (id, r) in &self.routes {
            resources.push(entry(
                Kind::Route,
                format!("/routes/{id}"),
                Some(r.router),
                self.view_route(r),
            ));
        }
        for (id, c) in &self.chains {
            resources.push(entry(
                Kind::Chain,
                format!("/chains/{id}"),
                None,
                Value::Object(c.body.clone()),
            ));
        }
        for (chain_id, c) in &self.chains {
            for (index, rule_id) in c.rules.iter().enumerate() {
                if let Some(rule) = self.rules.get(rule_id) {
                    resources.push(entry(
                        Kind::Rule,
                        format!("/rules/{rule_id}"),
                        Some(*chain_id),
                        self.view_rule(rule, index),
                    ));
                }
            }
        }
        for (id, h) in &self.hosts {
            resources.push(entry(
                Kind::Host,
                format!("/hosts/{id}"),
                None,
                view_host(*id, h),
            ));
        }
        for (port_id, p) in &self.ports {
            if let Some(b) = &p.binding {
                resources.push(entry(
                    Kind::HostInterfacePort,
                    format!("/hosts/{}/ports/{port_id}", b.host),
                    Some(b.host),
                    view_binding(*port_id, b),
                ));
            }
        }
        for (bridge_id, b) in &self.bridges {
            for e in &b.mac_table {
                resources.push(entry(
                    Kind::MacPort,
                    mac_entry_path(*bridge_id, e),
                    Some(*bridge_id),
                    view_mac(e),
                ));
            }
            for e in &b.arp_table {
                resources.push(entry(
                    Kind::Ipv4MacPair,
                    format!(
                        "/bridges/{bridge_id}/arp_table/{}_{}",
                        e.ip,
                        e.mac.replace(':', "-")
                    ),
                    Some(*bridge_id),
                    view_arp(e),
                ));
            }
        }
        for (id, g) in &self.port_groups {
            resources.push(entry(
                Kind::PortGroup,
                format!("/port_groups/{id}"),
                None,
                Value::Object(g.body.clone()),
            ));
            for port in &g.ports {
                resources.push(entry(
                    Kind::PortGroupPort,
                    format!("/port_groups/{id}/ports/{port}"),
                    Some(*id),
                    groups::view_member(*id, *port),
                ));
            }
        }
        for (id, g) in &self.ip_addr_groups {
            resources.push(entry(
                Kind::IpAddrGroup,
                format!("/ip_addr_groups/{id}"),
                None,
                Value::Object(g.body.clone()),
            ));
            for addr in &g.addrs {
                resources.push(entry(
                    Kind::IpAddrGroupAddr,
                    groups::addr_path(*id, *addr),
                    Some(*id),
                    groups::view_addr(*id, *addr),
                ));
            }
        }
        for id in self.load_balancers.keys() {
            resources.extend(self.record_entries(RecordKind::LoadBalancer, *id));
        }
        let rule_order = self
            .chains
            .iter()
            .map(|(id, c)| {
                (
                    id.to_string(),
                    c.rules.iter().map(Uuid::to_string).collect(),
                )
            })
            .collect();
        StateDump {
            resources,
            rule_order,
        }
    }
}

fn view_host(id: Uuid, h: &HostRec) -> Value {
    serde_json::json!({
        "id": id.to_string(),
        "name": h.name,
        "alive": true,
        "addresses": [],
        "hostInterfaces": [],
    })
}

fn view_binding(port: Uuid, b: &BindingRec) -> Value {
    serde_json::json!({
        "hostId": b.host.to_string(),
        "portId": port.to_string(),
        "interfaceName": b.interface,
    })
}

fn view_mac(e: &MacEntry) -> Value {
    serde_json::json!({"macAddr": e.mac, "portId": e.port.to_string(), "vlanId": e.vlan})
}

fn view_arp(e: &ArpEntry) -> Value {
    serde_json::json!({"ip": e.ip.to_string(), "mac": e.mac})
}

fn mac_entry_path(bridge: Uuid, e: &MacEntry) -> String {
    let entry = format!("{}_{}", e.mac.replace(':', "-"), e.port);
    if e.vlan == 0 {
        format!("/bridges/{bridge}/mac_table/{entry}")
    } else {
        format!("/bridges/{bridge}/vlans/{}/mac_table/{entry}", e.vlan)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::{Outcome, Reply};

    /// The HTTP status an operation answers.
    pub(crate) fn status(o: Outcome) -> u16 {
        match o {
            Ok(Reply::Created(_)) => 201,
            Ok(Reply::NoContent) => 204,
            Ok(Reply::Json(..)) => 200,
            Err(e) => e.status,
        }
    }
}
