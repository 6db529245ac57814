//! Tunnel zones, their member hosts, hosts, and host interface bindings.

use midonet_translators::model::{HostInterfacePort, Kind, TunnelZone, TunnelZoneHost};
use serde_json::Value;
use uuid::Uuid;

use super::{
    body_of, check_name, ensure_id, force_id, item, list, parse, view_binding, view_host, ApiError,
    BindingRec, MemberRec, Outcome, Reply, Store, TunnelZoneRec,
};

impl Store {
    // --- Tunnel zones -------------------------------------------------------------------

    pub fn list_tunnel_zones(&self) -> Outcome {
        let items = self
            .tunnel_zones
            .values()
            .map(|tz| Value::Object(tz.body.clone()))
            .collect();
        list(Kind::TunnelZone.collection_media_type(), items)
    }

    pub fn get_tunnel_zone(&self, id: Uuid) -> Outcome {
        let tz = self.tunnel_zone(id)?;
        item(Kind::TunnelZone, Value::Object(tz.body.clone()))
    }

    fn tunnel_zone(&self, id: Uuid) -> Result<&TunnelZoneRec, ApiError> {
        self.tunnel_zones
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::TunnelZone, id))
    }

    fn validate_tunnel_zone(tz: &TunnelZone) -> Result<(), ApiError> {
        check_name(tz.name.as_ref(), 1)?;
        if tz.zone_type.is_none() {
            return Err(ApiError::invalid("type", "is required"));
        }
        Ok(())
    }

    /// MidoNet refuses any name some tunnel zone already has, the updated one included.
    fn check_tunnel_zone_name(&self, tz: &TunnelZone) -> Result<(), ApiError> {
        let name = tz.name.as_deref();
        let clash = self
            .tunnel_zones
            .values()
            .any(|other| other.body.get("name").and_then(Value::as_str) == name);
        if clash {
            return Err(ApiError::conflict(
                "a tunnel zone with this name already exists",
            ));
        }
        Ok(())
    }

    pub fn create_tunnel_zone(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        let tz: TunnelZone = parse(None, body)?;
        Self::validate_tunnel_zone(&tz)?;
        self.check_tunnel_zone_name(&tz)?;
        if self.tunnel_zones.contains_key(&tz.id) {
            return Err(ApiError::conflict(format!(
                "a tunnel zone with id {} already exists",
                tz.id
            )));
        }
        self.tunnel_zones.insert(
            tz.id,
            TunnelZoneRec {
                body: body_of(&tz),
                members: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/tunnel_zones/{}", tz.id)))
    }

    pub fn update_tunnel_zone(&mut self, id: Uuid, mut body: Value) -> Outcome {
        self.tunnel_zone(id)?;
        force_id(&mut body, id);
        let tz: TunnelZone = parse(None, body)?;
        Self::validate_tunnel_zone(&tz)?;
        self.check_tunnel_zone_name(&tz)?;
        if let Some(rec) = self.tunnel_zones.get_mut(&id) {
            rec.body = body_of(&tz);
        }
        Ok(Reply::NoContent)
    }

    pub fn delete_tunnel_zone(&mut self, id: Uuid) -> Outcome {
        self.tunnel_zones
            .remove(&id)
            .ok_or_else(|| ApiError::missing(Kind::TunnelZone, id))?;
        Ok(Reply::NoContent)
    }

    // --- Tunnel zone members ------------------------------------------------------------

    pub fn list_tunnel_zone_hosts(&self, tz: Uuid) -> Outcome {
        let rec = self.tunnel_zone(tz)?;
        let items = rec
            .members
            .iter()
            .map(|m| Value::Object(m.body.clone()))
            .collect();
        list(Kind::TunnelZoneHost.collection_media_type(), items)
    }

    pub fn get_tunnel_zone_host(&self, tz: Uuid, host: Uuid) -> Outcome {
        let rec = self.tunnel_zone(tz)?;
        let member =
            rec.members.iter().find(|m| m.host == host).ok_or_else(|| {
                ApiError::not_found("the host is not a member of the tunnel zone")
            })?;
        item(Kind::TunnelZoneHost, Value::Object(member.body.clone()))
    }

    pub fn create_tunnel_zone_host(&mut self, tz: Uuid, body: Value) -> Outcome {
        let mut member: TunnelZoneHost = parse(Some(tz), body)?;
        if member.ip_address.is_none() {
            return Err(ApiError::invalid("ipAddress", "is required"));
        }
        let rec = self.tunnel_zone(tz)?;
        if rec.members.iter().any(|m| m.host == member.host_id) {
            return Err(ApiError::conflict(
                "the host is already a member of the tunnel zone",
            ));
        }
        if !self.hosts.contains_key(&member.host_id) {
            return Err(ApiError::missing(Kind::Host, member.host_id));
        }
        member.tunnel_zone_id = Some(tz);
        let stored = MemberRec {
            host: member.host_id,
            body: body_of(&member),
        };
        if let Some(rec) = self.tunnel_zones.get_mut(&tz) {
            rec.members.push(stored);
        }
        Ok(Reply::Created(format!(
            "/tunnel_zones/{tz}/hosts/{}",
            member.host_id
        )))
    }

    pub fn delete_tunnel_zone_host(&mut self, tz: Uuid, host: Uuid) -> Outcome {
        let rec = self
            .tunnel_zones
            .get_mut(&tz)
            .ok_or_else(|| ApiError::missing(Kind::TunnelZone, tz))?;
        let before = rec.members.len();
        rec.members.retain(|m| m.host != host);
        if rec.members.len() == before {
            return Err(ApiError::not_found(
                "the host is not a member of the tunnel zone",
            ));
        }
        Ok(Reply::NoContent)
    }

    // --- Hosts --------------------------------------------------------------------------

    pub fn list_hosts(&self) -> Outcome {
        let items = self.hosts.iter().map(|(id, h)| view_host(*id, h)).collect();
        list(Kind::Host.collection_media_type(), items)
    }

    pub fn get_host(&self, id: Uuid) -> Outcome {
        let host = self
            .hosts
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Host, id))?;
        item(Kind::Host, view_host(id, host))
    }

    fn require_host(&self, id: Uuid) -> Result<(), ApiError> {
        if self.hosts.contains_key(&id) {
            Ok(())
        } else {
            Err(ApiError::missing(Kind::Host, id))
        }
    }

    // --- Host interface bindings --------------------------------------------------------

    pub fn list_host_ports(&self, host: Uuid) -> Outcome {
        self.require_host(host)?;
        let items = self
            .ports
            .iter()
            .filter_map(|(id, p)| p.binding.as_ref().map(|b| (id, b)))
            .filter(|(_, b)| b.host == host)
            .map(|(id, b)| view_binding(*id, b))
            .collect();
        list(Kind::HostInterfacePort.collection_media_type(), items)
    }

    pub fn get_host_port(&self, host: Uuid, port: Uuid) -> Outcome {
        self.require_host(host)?;
        let binding = self
            .ports
            .get(&port)
            .and_then(|p| p.binding.as_ref())
            .filter(|b| b.host == host)
            .ok_or_else(|| ApiError::not_found("the port is not bound to this host"))?;
        item(Kind::HostInterfacePort, view_binding(port, binding))
    }

    /// Binds a port to an interface of a host. Like MidoNet: the host must be in some
    /// tunnel zone (409 otherwise), and neither the port nor the interface name may be
    /// bound already (409).
    pub fn create_host_port(&mut self, host: Uuid, body: Value) -> Outcome {
        let binding: HostInterfacePort = parse(Some(host), body)?;
        let interface = binding
            .interface_name
            .clone()
            .ok_or_else(|| ApiError::invalid("interfaceName", "is required"))?;
        self.require_host(host)?;
        let in_a_zone = self
            .tunnel_zones
            .values()
            .any(|tz| tz.members.iter().any(|m| m.host == host));
        if !in_a_zone {
            return Err(ApiError::conflict(format!(
                "host {host} is not a member of any tunnel zone"
            )));
        }
        let port = self
            .ports
            .get(&binding.port_id)
            .ok_or_else(|| ApiError::missing(Kind::Port, binding.port_id))?;
        if port.binding.is_some() {
            return Err(ApiError::conflict(format!(
                "port {} is already bound to an interface",
                binding.port_id
            )));
        }
        let interface_used = self.ports.values().any(|p| {
            p.binding
                .as_ref()
                .is_some_and(|b| b.host == host && b.interface == interface)
        });
        if interface_used {
            return Err(ApiError::conflict(format!(
                "interface {interface} of host {host} is already bound"
            )));
        }
        if let Some(port) = self.ports.get_mut(&binding.port_id) {
            port.binding = Some(BindingRec { host, interface });
        }
        Ok(Reply::Created(format!(
            "/hosts/{host}/ports/{}",
            binding.port_id
        )))
    }

    /// Unbinds the port, whichever host it is bound to (as MidoNet does); 404 only when
    /// the port does not exist.
    pub fn delete_host_port(&mut self, _host: Uuid, port: Uuid) -> Outcome {
        let rec = self
            .ports
            .get_mut(&port)
            .ok_or_else(|| ApiError::missing(Kind::Port, port))?;
        rec.binding = None;
        Ok(Reply::NoContent)
    }
}
