//! Port groups and IP address groups with their members.
//!
//! As in MidoNet (`PortGroupResource`, `PortGroupPortResource`, `IpAddrGroupResource`,
//! `IpAddrGroupAddr*Resource`): a membership needs both the group and the port (404
//! otherwise) and a second POST of it is a 409; deleting a membership of an existing port
//! that is not a member is a 404, of a port that no longer exists a 204. Deleting a port
//! takes it out of its groups, deleting a group forgets its memberships (the storage binding
//! `Port.port_group_ids` ↔ `PortGroup.port_ids` clears both sides). An address is added
//! once (409 on the second POST) and removed idempotently (204 even when absent).
//! Rules naming a deleted group keep the reference, as MidoNet declares no binding for it.

use std::net::Ipv4Addr;

use midonet_translators::model::{IpAddrGroup, IpAddrGroupAddr, Kind, PortGroup, PortGroupPort};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{
    body_of, check_name, ensure_id, force_id, item, list, parse, strip, ApiError, IpAddrGroupRec,
    Outcome, PortGroupRec, Reply, Store,
};

impl Store {
    // --- Port groups --------------------------------------------------------------------

    pub fn list_port_groups(&self, tenant: Option<&str>) -> Outcome {
        let items = self
            .port_groups
            .values()
            .filter(|g| {
                tenant.is_none_or(|t| g.body.get("tenantId").and_then(Value::as_str) == Some(t))
            })
            .map(|g| Value::Object(g.body.clone()))
            .collect();
        list(Kind::PortGroup.collection_media_type(), items)
    }

    pub fn get_port_group(&self, id: Uuid) -> Outcome {
        item(
            Kind::PortGroup,
            Value::Object(self.port_group(id)?.body.clone()),
        )
    }

    fn port_group(&self, id: Uuid) -> Result<&PortGroupRec, ApiError> {
        self.port_groups
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::PortGroup, id))
    }

    pub fn create_port_group(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        strip(&mut body, &["portIds"]);
        let group: PortGroup = parse(None, body)?;
        check_name(group.name.as_ref(), 0)?;
        if self.port_groups.contains_key(&group.id) {
            return Err(ApiError::conflict(format!(
                "a port group with id {} already exists",
                group.id
            )));
        }
        self.port_groups.insert(
            group.id,
            PortGroupRec {
                body: body_of(&group),
                ports: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/port_groups/{}", group.id)))
    }

    /// Replaces the body; the memberships stay.
    pub fn update_port_group(&mut self, id: Uuid, mut body: Value) -> Outcome {
        self.port_group(id)?;
        force_id(&mut body, id);
        strip(&mut body, &["portIds"]);
        let group: PortGroup = parse(None, body)?;
        check_name(group.name.as_ref(), 0)?;
        if let Some(rec) = self.port_groups.get_mut(&id) {
            rec.body = body_of(&group);
        }
        Ok(Reply::NoContent)
    }

    pub fn delete_port_group(&mut self, id: Uuid) -> Outcome {
        self.port_groups
            .remove(&id)
            .map(|_| Reply::NoContent)
            .ok_or_else(|| ApiError::missing(Kind::PortGroup, id))
    }

    pub fn list_port_group_ports(&self, group: Uuid) -> Outcome {
        let items = self
            .port_group(group)?
            .ports
            .iter()
            .map(|p| view_member(group, *p))
            .collect();
        list(Kind::PortGroupPort.collection_media_type(), items)
    }

    pub fn create_port_group_port(&mut self, group: Uuid, body: Value) -> Outcome {
        let member: PortGroupPort = parse(Some(group), body)?;
        if !self.ports.contains_key(&member.port_id) {
            return Err(ApiError::missing(Kind::Port, member.port_id));
        }
        let rec = self
            .port_groups
            .get_mut(&group)
            .ok_or_else(|| ApiError::missing(Kind::PortGroup, group))?;
        if rec.ports.contains(&member.port_id) {
            return Err(ApiError::conflict(format!(
                "port {} is already a member of port group {group}",
                member.port_id
            )));
        }
        rec.ports.push(member.port_id);
        Ok(Reply::Created(format!(
            "/port_groups/{group}/ports/{}",
            member.port_id
        )))
    }

    pub fn get_port_group_port(&self, group: Uuid, port: Uuid) -> Outcome {
        if !self.port_group(group)?.ports.contains(&port) {
            return Err(ApiError::not_found("Resource not found"));
        }
        item(Kind::PortGroupPort, view_member(group, port))
    }

    pub fn delete_port_group_port(&mut self, group: Uuid, port: Uuid) -> Outcome {
        let port_exists = self.ports.contains_key(&port);
        let rec = self
            .port_groups
            .get_mut(&group)
            .ok_or_else(|| ApiError::missing(Kind::PortGroup, group))?;
        let member = rec.ports.contains(&port);
        if port_exists && !member {
            return Err(ApiError::not_found(format!(
                "port {port} is not a member of port group {group}"
            )));
        }
        rec.ports.retain(|p| *p != port);
        Ok(Reply::NoContent)
    }

    /// Takes a deleted port out of every group.
    pub(crate) fn forget_port_memberships(&mut self, port: Uuid) {
        self.port_groups.update_each(|_, g| {
            let before = g.ports.len();
            g.ports.retain(|p| *p != port);
            g.ports.len() != before
        });
    }

    // --- IP address groups --------------------------------------------------------------

    pub fn list_ip_addr_groups(&self) -> Outcome {
        let items = self
            .ip_addr_groups
            .values()
            .map(|g| Value::Object(g.body.clone()))
            .collect();
        list(Kind::IpAddrGroup.collection_media_type(), items)
    }

    pub fn get_ip_addr_group(&self, id: Uuid) -> Outcome {
        item(
            Kind::IpAddrGroup,
            Value::Object(self.ip_addr_group(id)?.body.clone()),
        )
    }

    fn ip_addr_group(&self, id: Uuid) -> Result<&IpAddrGroupRec, ApiError> {
        self.ip_addr_groups
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::IpAddrGroup, id))
    }

    /// MidoNet requires a name of 1 to 255 characters.
    pub fn create_ip_addr_group(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        let group: IpAddrGroup = parse(None, body)?;
        check_name(group.name.as_ref(), 1)?;
        if self.ip_addr_groups.contains_key(&group.id) {
            return Err(ApiError::conflict(format!(
                "an IP address group with id {} already exists",
                group.id
            )));
        }
        self.ip_addr_groups.insert(
            group.id,
            IpAddrGroupRec {
                body: body_of(&group),
                addrs: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/ip_addr_groups/{}", group.id)))
    }

    pub fn delete_ip_addr_group(&mut self, id: Uuid) -> Outcome {
        self.ip_addr_groups
            .remove(&id)
            .map(|_| Reply::NoContent)
            .ok_or_else(|| ApiError::missing(Kind::IpAddrGroup, id))
    }

    pub fn list_ip_addr_group_addrs(&self, group: Uuid) -> Outcome {
        let items = self
            .ip_addr_group(group)?
            .addrs
            .iter()
            .map(|a| view_addr(group, *a))
            .collect();
        list(Kind::IpAddrGroupAddr.collection_media_type(), items)
    }

    /// `version` must be 4 (the simulator keeps IPv4 only); a second POST of an address
    /// is a 409.
    pub fn create_ip_addr_group_addr(&mut self, group: Uuid, body: Value) -> Outcome {
        let addr: IpAddrGroupAddr = parse(Some(group), body)?;
        if addr.version != Some(4) {
            return Err(ApiError::bad_request(format!(
                "Invalid IP version: {}",
                addr.version.map_or("none".to_string(), |v| v.to_string())
            )));
        }
        let rec = self
            .ip_addr_groups
            .get_mut(&group)
            .ok_or_else(|| ApiError::missing(Kind::IpAddrGroup, group))?;
        if rec.addrs.contains(&addr.addr) {
            return Err(ApiError::conflict(format!(
                "IP address group {group} already has {}",
                addr.addr
            )));
        }
        rec.addrs.push(addr.addr);
        Ok(Reply::Created(addr_path(group, addr.addr)))
    }

    pub fn get_ip_addr_group_addr(&self, group: Uuid, addr: &str) -> Outcome {
        let ip = parse_addr(addr)?;
        if !self.ip_addr_group(group)?.addrs.contains(&ip) {
            return Err(ApiError::not_found(format!(
                "The IP address group does not contain the specified address {addr}"
            )));
        }
        item(Kind::IpAddrGroupAddr, view_addr(group, ip))
    }

    pub fn delete_ip_addr_group_addr(&mut self, group: Uuid, addr: &str) -> Outcome {
        let ip = parse_addr(addr)?;
        let rec = self
            .ip_addr_groups
            .get_mut(&group)
            .ok_or_else(|| ApiError::missing(Kind::IpAddrGroup, group))?;
        rec.addrs.retain(|a| *a != ip);
        Ok(Reply::NoContent)
    }
}

fn parse_addr(addr: &str) -> Result<Ipv4Addr, ApiError> {
    addr.parse()
        .map_err(|_| ApiError::bad_request(format!("{addr:?} is not an IPv4 address")))
}

pub(crate) fn addr_path(group: Uuid, addr: Ipv4Addr) -> String {
    format!("/ip_addr_groups/{group}/versions/4/ip_addrs/{addr}")
}

pub(crate) fn view_member(group: Uuid, port: Uuid) -> Value {
    json!({"portGroupId": group.to_string(), "portId": port.to_string()})
}

pub(crate) fn view_addr(group: Uuid, addr: Ipv4Addr) -> Value {
    json!({"ipAddrGroupId": group.to_string(), "addr": addr.to_string(), "version": 4})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::status;
    use crate::store::Device;

    const B: &str = "11111111-1111-4111-8111-111111111111";
    const P: &str = "22222222-2222-4222-8222-222222222222";
    const G: &str = "33333333-3333-4333-8333-333333333333";

    fn uuid(s: &str) -> Uuid {
        Uuid::parse_str(s).unwrap()
    }

    #[test]
    fn port_group_memberships_follow_midonet() {
        let mut s = Store::default();
        assert_eq!(status(s.create_bridge(json!({"id": B}))), 201);
        let member = json!({"portId": P});
        assert_eq!(
            status(s.create_port_group(json!({"id": G, "name": "g"}))),
            201
        );
        // The port must exist.
        assert_eq!(
            status(s.create_port_group_port(uuid(G), member.clone())),
            404
        );
        assert_eq!(
            status(s.create_port(Device::Bridge, uuid(B), json!({"id": P, "type": "Bridge"}))),
            201
        );
        assert_eq!(
            status(s.create_port_group_port(uuid(G), member.clone())),
            201
        );
        assert_eq!(
            status(s.create_port_group_port(uuid(G), member.clone())),
            409
        );
        assert_eq!(status(s.get_port_group_port(uuid(G), uuid(P))), 200);
        // Deleting the port takes it out of the group; deleting the gone membership is fine.
        assert_eq!(status(s.delete_port(uuid(P))), 204);
        assert_eq!(status(s.get_port_group_port(uuid(G), uuid(P))), 404);
        assert_eq!(status(s.delete_port_group_port(uuid(G), uuid(P))), 204);
        assert_eq!(status(s.delete_port_group(uuid(G))), 204);
        assert_eq!(status(s.delete_port_group(uuid(G))), 404);
    }

    #[test]
    fn ip_addr_groups_need_a_name_and_hold_each_address_once() {
        let mut s = Store::default();
        assert_eq!(status(s.create_ip_addr_group(json!({"id": G}))), 400);
        assert_eq!(
            status(s.create_ip_addr_group(json!({"id": G, "name": "g"}))),
            201
        );
        let addr = json!({"addr": "10.0.0.5", "version": 4});
        assert_eq!(
            status(s.create_ip_addr_group_addr(uuid(G), addr.clone())),
            201
        );
        assert_eq!(status(s.create_ip_addr_group_addr(uuid(G), addr)), 409);
        assert_eq!(
            status(s.create_ip_addr_group_addr(uuid(G), json!({"addr": "10.0.0.6"}))),
            400
        );
        assert_eq!(status(s.get_ip_addr_group_addr(uuid(G), "10.0.0.5")), 200);
        assert_eq!(
            status(s.delete_ip_addr_group_addr(uuid(G), "10.0.0.5")),
            204
        );
        assert_eq!(
            status(s.delete_ip_addr_group_addr(uuid(G), "10.0.0.5")),
            204
        );
        assert_eq!(status(s.get_ip_addr_group_addr(uuid(G), "10.0.0.5")), 404);
        let dump = s.dump();
        assert!(dump.resources.iter().any(|e| e.kind == "IpAddrGroup"));
    }
}
