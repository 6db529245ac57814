//! What a backend resource needs to exist before MidoNet accepts its creation, and what its
//! creation makes exist. The pusher uses this to hold back a Translation until the
//! Translations it builds on have been pushed, instead of sending requests MidoNet is bound
//! to refuse (404 for a missing parent, 409 for a port bound on a host outside every tunnel
//! zone) and retrying them.

use serde_json::Value;
use uuid::Uuid;

use super::{json::parse_uuid, Resource};

/// Something in the backend one resource may need and another may provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Referent {
    /// The resource with this ID: a bridge, router, port, chain, rule, tunnel zone, host.
    Object(Uuid),
    /// The host is a member of some tunnel zone: MidoNet binds ports only on such hosts.
    TunnelZoneMember(Uuid),
}

impl Resource {
    /// The resource's own ID, for kinds that have one (`id` in the body).
    pub fn own_id(&self) -> Option<Uuid> {
        self.body()
            .get("id")
            .and_then(Value::as_str)
            .and_then(parse_uuid)
    }

    /// What creating this resource makes exist.
    pub fn provides(&self) -> Vec<Referent> {
        let mut out: Vec<Referent> = self.own_id().map(Referent::Object).into_iter().collect();
        if let Resource::TunnelZoneHost(member) = self {
            out.push(Referent::TunnelZoneMember(member.host_id));
        }
        out
    }

    /// What must exist before MidoNet accepts this resource: its parent, every other
    /// resource its body names by ID (peer port, next-hop port, jump chain, filters, …),
    /// and, for a port binding, the host's tunnel zone membership. Sorted, no duplicates.
    pub fn requires(&self) -> Vec<Referent> {
        let own = self.own_id();
        let mut ids = Vec::new();
        collect_uuids(&self.body(), &mut ids);
        let mut out: Vec<Referent> = self
            .parent()
            .into_iter()
            .chain(ids)
            .filter(|id| Some(*id) != own)
            .map(Referent::Object)
            .collect();
        if let Resource::HostInterfacePort(binding) = self {
            out.push(Referent::TunnelZoneMember(binding.parent));
        }
        out.sort();
        out.dedup();
        out
    }
}

impl Resource {
    /// The resources whose deletion MidoNet's cascades take this one with (from its
    /// storage bindings): its parent (a bridge its ports, MAC and ARP entries; a router its
    /// ports and routes; a chain its rules; a group its members; a zone its memberships);
    /// a route goes with its next-hop port, a rule with the chain it jumps to, a binding,
    /// a link and a port-group membership with their port. Filter references are cleared,
    /// not cascaded, and a rule naming an address group stays when the group goes.
    pub fn deleted_with(&self) -> Vec<Uuid> {
        let mut out: Vec<Uuid> = self.parent().into_iter().collect();
        match self {
            Resource::Route(r) => out.extend(r.next_hop_port),
            Resource::Rule(r) => out.extend(r.jump_chain_id),
            Resource::HostInterfacePort(b) => out.push(b.port_id),
            Resource::PortLink(l) => out.push(l.peer_id),
            Resource::PortGroupPort(m) => out.push(m.port_id),
            _ => {}
        }
        out
    }
}

impl Resource {
    /// The MidoNet hosts this resource names (a port binding's host, a tunnel zone member).
    /// Hosts are registered by MidoNet's agents: no Translation ever provides one, so the
    /// pusher never waits for a provider of these.
    pub fn hosts(&self) -> Vec<Uuid> {
        match self {
            Resource::HostInterfacePort(binding) => {
                let mut out = vec![binding.parent];
                out.extend(binding.host_id.filter(|h| *h != binding.parent));
                out
            }
            Resource::TunnelZoneHost(member) => vec![member.host_id],
            _ => Vec::new(),
        }
    }
}

/// Every string in `value` (at any depth) that is a canonical UUID.
fn collect_uuids(value: &Value, out: &mut Vec<Uuid>) {
    match value {
        Value::String(s) => out.extend(parse_uuid(s)),
        Value::Array(items) => items.iter().for_each(|v| collect_uuids(v, out)),
        Value::Object(members) => members.values().for_each(|v| collect_uuids(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bridge, HostInterfacePort, Port, Rule, RuleType, TunnelZoneHost};

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn a_bridge_port_needs_its_bridge_and_provides_itself() {
        let port: Resource = Port::bridge_port(id(1), id(2)).into();
        assert_eq!(port.own_id(), Some(id(2)));
        assert_eq!(port.provides(), vec![Referent::Object(id(2))]);
        assert_eq!(port.requires(), vec![Referent::Object(id(1))]);
    }

    #[test]
    fn a_bridge_needs_nothing_of_ours() {
        let bridge: Resource = Bridge::new(id(7)).into();
        assert_eq!(bridge.provides(), vec![Referent::Object(id(7))]);
        assert!(bridge.requires().is_empty());
    }

    #[test]
    fn a_jump_rule_needs_its_chain_and_its_target() {
        let rule: Resource = Rule::jump(id(1), id(2), id(3)).into();
        assert_eq!(
            rule.requires(),
            vec![Referent::Object(id(1)), Referent::Object(id(3))]
        );
        let plain: Resource = Rule::new(id(1), id(4), RuleType::Accept).into();
        assert_eq!(plain.requires(), vec![Referent::Object(id(1))]);
    }

    #[test]
    fn a_rule_matching_on_groups_needs_them() {
        // The NetworkPolicy groups live in Translations of their own: a policy's rules
        // must wait for them.
        let mut rule = Rule::new(id(1), id(2), RuleType::Accept);
        rule.condition.ip_addr_group_src = Some(id(3));
        rule.condition.port_group = Some(id(4));
        let rule: Resource = rule.into();
        assert_eq!(
            rule.requires(),
            vec![
                Referent::Object(id(1)),
                Referent::Object(id(3)),
                Referent::Object(id(4))
            ]
        );
        let group: Resource = crate::model::IpAddrGroup::new(id(3), "g".to_string()).into();
        assert_eq!(group.provides(), vec![Referent::Object(id(3))]);
    }

    #[test]
    fn a_port_binding_needs_the_host_in_a_tunnel_zone() {
        let binding: Resource = HostInterfacePort::new(id(5), id(6), "eth0").into();
        assert_eq!(binding.own_id(), None);
        assert!(binding.provides().is_empty());
        assert_eq!(
            binding.requires(),
            vec![
                Referent::Object(id(5)),
                Referent::Object(id(6)),
                Referent::TunnelZoneMember(id(5)),
            ]
        );
    }

    #[test]
    fn hosts_are_named_by_bindings_and_memberships_only() {
        let binding: Resource = HostInterfacePort::new(id(5), id(6), "eth0").into();
        assert_eq!(binding.hosts(), vec![id(5)]);
        let member: Resource =
            TunnelZoneHost::new(id(8), id(5), std::net::Ipv4Addr::new(10, 0, 0, 1)).into();
        assert_eq!(member.hosts(), vec![id(5)]);
        let port: Resource = Port::bridge_port(id(1), id(2)).into();
        assert!(port.hosts().is_empty());
    }

    #[test]
    fn a_membership_provides_the_host_membership() {
        let member: Resource =
            TunnelZoneHost::new(id(8), id(5), std::net::Ipv4Addr::new(10, 0, 0, 1)).into();
        assert_eq!(member.provides(), vec![Referent::TunnelZoneMember(id(5))]);
        assert_eq!(
            member.requires(),
            vec![Referent::Object(id(5)), Referent::Object(id(8))]
        );
    }
}
