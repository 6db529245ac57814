//! The store read record by record, for a reader that keeps its own copy up to date
//! (`midonet_dataplane::LiveTopology`, behind the flow probe).
//!
//! A record is one entry of the store's maps with everything the state dump renders from
//! it: a bridge with its MAC and ARP tables, a port with its link and host binding, a
//! chain with its rules in evaluation order, a group with its members. A rendering reads
//! nothing but its own record (a chain's rules are part of it), so a record whose stored
//! form is unchanged renders the same. The reader keeps a fingerprint of each record's
//! stored form (a 64-bit hash of its serialisation); a reading hashes every record, which
//! is far cheaper than rendering and parsing them, and renders only those whose hash
//! changed. The union of every record's entries is exactly the dump (unit-tested).

use std::collections::HashMap;
use std::hash::Hasher;

use midonet_translators::model::Kind;
use serde_json::Value;
use uuid::Uuid;

use super::{groups, mac_entry_path, view_arp, view_binding, view_host, view_mac, Store};
use crate::admin::StateEntry;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RecordKind {
    TunnelZone,
    Router,
    Bridge,
    Port,
    Route,
    Chain,
    Host,
    PortGroup,
    IpAddrGroup,
}

/// The fingerprints of the records as a reader last saw them.
#[derive(Clone, Debug, Default)]
pub struct Seen(HashMap<(RecordKind, Uuid), u64>);

/// What changed since the last reading: the entries of each new or changed record, and
/// the records gone; each named by its key (`Kind/id`).
pub(crate) struct Changes {
    pub changed: Vec<(String, Vec<StateEntry>)>,
    pub gone: Vec<String>,
}

fn key_name(kind: RecordKind, id: Uuid) -> String {
    format!("{kind:?}/{id}")
}

/// Feeds what serde writes into a hasher.
struct HashWriter<'h>(&'h mut std::collections::hash_map::DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn fingerprint<'a>(parts: impl IntoIterator<Item = &'a dyn erased::Ser>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash_into(&mut h);
    }
    h.finish()
}

/// Serialisable parts of a record, hashed one after the other.
mod erased {
    pub trait Ser {
        fn hash_into(&self, h: &mut std::collections::hash_map::DefaultHasher);
    }

    impl<T: serde::Serialize> Ser for T {
        fn hash_into(&self, h: &mut std::collections::hash_map::DefaultHasher) {
            // Serialising a stored record cannot fail (string keys, no NaN); should it,
            // the record hashes like an empty one and is rendered again next time.
            let _ = serde_json::to_writer(super::HashWriter(h), self);
            std::hash::Hasher::write_u8(h, 0xff);
        }
    }
}

fn entry(kind: Kind, path: String, parent: Option<Uuid>, body: Value) -> StateEntry {
    StateEntry {
        kind: kind.name().to_string(),
        path,
        parent: parent.map(|p| p.to_string()).unwrap_or_default(),
        body,
    }
}

impl Store {
    /// Every record with its fingerprint.
    fn fingerprints(&self) -> Vec<((RecordKind, Uuid), u64)> {
        let mut out = Vec::new();
        let mut put = |kind, id, parts: &[&dyn erased::Ser]| {
            out.push(((kind, id), fingerprint(parts.iter().copied())));
        };
        for (id, r) in &self.tunnel_zones {
            put(RecordKind::TunnelZone, *id, &[r as &dyn erased::Ser]);
        }
        for (id, r) in &self.routers {
            put(RecordKind::Router, *id, &[r]);
        }
        for (id, r) in &self.bridges {
            put(RecordKind::Bridge, *id, &[r]);
        }
        for (id, r) in &self.ports {
            put(RecordKind::Port, *id, &[r]);
        }
        for (id, r) in &self.routes {
            put(RecordKind::Route, *id, &[r]);
        }
        for (id, c) in &self.chains {
            let rules: Vec<_> = c.rules.iter().map(|r| self.rules.get(r)).collect();
            put(RecordKind::Chain, *id, &[c, &rules]);
        }
        for (id, r) in &self.hosts {
            put(RecordKind::Host, *id, &[r]);
        }
        for (id, r) in &self.port_groups {
            put(RecordKind::PortGroup, *id, &[r]);
        }
        for (id, r) in &self.ip_addr_groups {
            put(RecordKind::IpAddrGroup, *id, &[r]);
        }
        out
    }

    /// The records that changed since `seen` (which is brought up to date).
    pub(crate) fn changes_since(&self, seen: &mut Seen) -> Changes {
        let mut now = HashMap::new();
        let mut changed = Vec::new();
        for (key, fp) in self.fingerprints() {
            if seen.0.get(&key) != Some(&fp) {
                changed.push((key_name(key.0, key.1), self.record_entries(key.0, key.1)));
            }
            now.insert(key, fp);
        }
        let gone = seen
            .0
            .keys()
            .filter(|k| !now.contains_key(k))
            .map(|k| key_name(k.0, k.1))
            .collect();
        seen.0 = now;
        Changes { changed, gone }
    }

    /// What the dump renders from one record.
    pub(crate) fn record_entries(&self, kind: RecordKind, id: Uuid) -> Vec<StateEntry> {
        let mut out = Vec::new();
        match kind {
            RecordKind::TunnelZone => {
                if let Some(tz) = self.tunnel_zones.get(&id) {
                    out.push(entry(
                        Kind::TunnelZone,
                        format!("/tunnel_zones/{id}"),
                        None,
                        Value::Object(tz.body.clone()),
                    ));
                    for m in &tz.members {
                        out.push(entry(
                            Kind::TunnelZoneHost,
                            format!("/tunnel_zones/{id}/hosts/{}", m.host),
                            Some(id),
                            Value::Object(m.body.clone()),
                        ));
                    }
                }
            }
            RecordKind::Router => {
                if let Some(r) = self.routers.get(&id) {
                    out.push(entry(
                        Kind::Router,
                        format!("/routers/{id}"),
                        None,
                        Value::Object(r.body.clone()),
                    ));
                }
            }
            RecordKind::Bridge => {
                if let Some(b) = self.bridges.get(&id) {
                    out.push(entry(
                        Kind::Bridge,
                        format!("/bridges/{id}"),
                        None,
                        Value::Object(b.body.clone()),
                    ));
                    for e in &b.mac_table {
                        out.push(entry(
                            Kind::MacPort,
                            mac_entry_path(id, e),
                            Some(id),
                            view_mac(e),
                        ));
                    }
                    for e in &b.arp_table {
                        out.push(entry(
                            Kind::Ipv4MacPair,
                            format!(
                                "/bridges/{id}/arp_table/{}_{}",
                                e.ip,
                                e.mac.replace(':', "-")
                            ),
                            Some(id),
                            view_arp(e),
                        ));
                    }
                }
            }
            RecordKind::Port => {
                if let Some(p) = self.ports.get(&id) {
                    out.push(entry(
                        Kind::Port,
                        format!("/ports/{id}"),
                        Some(p.device),
                        self.view_port(id, p),
                    ));
                    if let (Some(peer), true) = (p.peer, p.link_origin) {
                        out.push(entry(
                            Kind::PortLink,
                            format!("/ports/{id}/link"),
                            Some(id),
                            serde_json::json!({"portId": id.to_string(), "peerId": peer.to_string()}),
                        ));
                    }
                    if let Some(b) = &p.binding {
                        out.push(entry(
                            Kind::HostInterfacePort,
                            format!("/hosts/{}/ports/{id}", b.host),
                            Some(b.host),
                            view_binding(id, b),
                        ));
                    }
                }
            }
            RecordKind::Route => {
                if let Some(r) = self.routes.get(&id) {
                    out.push(entry(
                        Kind::Route,
                        format!("/routes/{id}"),
                        Some(r.router),
                        self.view_route(r),
                    ));
                }
            }
            RecordKind::Chain => {
                if let Some(c) = self.chains.get(&id) {
                    out.push(entry(
                        Kind::Chain,
                        format!("/chains/{id}"),
                        None,
                        Value::Object(c.body.clone()),
                    ));
                    for (index, rule_id) in c.rules.iter().enumerate() {
                        if let Some(rule) = self.rules.get(rule_id) {
                            out.push(entry(
                                Kind::Rule,
                                format!("/rules/{rule_id}"),
                                Some(id),
                                self.view_rule(rule, index),
                            ));
                        }
                    }
                }
            }
            RecordKind::Host => {
                if let Some(h) = self.hosts.get(&id) {
                    out.push(entry(
                        Kind::Host,
                        format!("/hosts/{id}"),
                        None,
                        view_host(id, h),
                    ));
                }
            }
            RecordKind::PortGroup => {
                if let Some(g) = self.port_groups.get(&id) {
                    out.push(entry(
                        Kind::PortGroup,
                        format!("/port_groups/{id}"),
                        None,
                        Value::Object(g.body.clone()),
                    ));
                    for port in &g.ports {
                        out.push(entry(
                            Kind::PortGroupPort,
                            format!("/port_groups/{id}/ports/{port}"),
                            Some(id),
                            groups::view_member(id, *port),
                        ));
                    }
                }
            }
            RecordKind::IpAddrGroup => {
                if let Some(g) = self.ip_addr_groups.get(&id) {
                    out.push(entry(
                        Kind::IpAddrGroup,
                        format!("/ip_addr_groups/{id}"),
                        None,
                        Value::Object(g.body.clone()),
                    ));
                    for addr in &g.addrs {
                        out.push(entry(
                            Kind::IpAddrGroupAddr,
                            groups::addr_path(id, *addr),
                            Some(id),
                            groups::view_addr(id, *addr),
                        ));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Device, Outcome, Reply};
    use midonet_dataplane::{Attachment, LiveTopology, RuleOrder, Topology};
    use midonet_translators::model::MacAddr;
    use serde_json::json;

    const H: &str = "00000000-0000-4000-8000-000000000001";
    const B: &str = "00000000-0000-4000-8000-0000000000b1";
    const R: &str = "00000000-0000-4000-8000-0000000000a1";
    const P1: &str = "00000000-0000-4000-8000-000000000011";
    const P2: &str = "00000000-0000-4000-8000-000000000012";
    const PI: &str = "00000000-0000-4000-8000-000000000013";
    const RP: &str = "00000000-0000-4000-8000-000000000021";
    const C: &str = "00000000-0000-4000-8000-0000000000c1";
    const G: &str = "00000000-0000-4000-8000-0000000000d1";
    const RULE1: &str = "00000000-0000-4000-8000-0000000000e1";
    const RULE2: &str = "00000000-0000-4000-8000-0000000000e2";
    const RULE3: &str = "00000000-0000-4000-8000-0000000000e3";

    fn uuid(s: &str) -> Uuid {
        Uuid::parse_str(s).unwrap()
    }

    fn ok(o: Outcome) {
        match o {
            Ok(Reply::Created(_)) | Ok(Reply::NoContent) | Ok(Reply::Json(..)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }

    fn attachment(name: &str, iface: &str, ip: &str, mac: u8) -> Attachment {
        Attachment {
            name: name.into(),
            host: uuid(H),
            interface: iface.into(),
            mac: MacAddr([2, 0, 0, 0, 0, mac]),
            ips: vec![ip.parse().unwrap()],
            subnet: Some(
                midonet_translators::model::Ipv4Cidr::new("10.0.0.0".parse().unwrap(), 24).unwrap(),
            ),
            gateway: Some("10.0.0.1".parse().unwrap()),
        }
    }

    /// A bridge with two bound ports and a port linked to a router, the router's route
    /// back, a chain of rules on one port, MAC and ARP entries, a port group and an
    /// address group.
    fn populated() -> Store {
        let mut s = Store::default();
        s.add_hosts(&[("h".into(), uuid(H))]);
        let tz = "00000000-0000-4000-8000-0000000000f1";
        ok(s.create_tunnel_zone(json!({"id": tz, "name": "tz", "type": "vxlan"})));
        ok(s.create_tunnel_zone_host(uuid(tz), json!({"hostId": H, "ipAddress": "192.168.0.1"})));
        ok(s.create_bridge(json!({"id": B, "name": "b", "tenantId": "t"})));
        ok(s.create_router(json!({"id": R, "name": "r", "tenantId": "t"})));
        for p in [P1, P2, PI] {
            ok(s.create_port(Device::Bridge, uuid(B), json!({"id": p, "type": "Bridge"})));
        }
        ok(s.create_port(
            Device::Router,
            uuid(R),
            json!({"id": RP, "type": "Router", "portAddress": "10.0.0.1",
                   "networkAddress": "10.0.0.0", "networkLength": 24,
                   "portMac": "02:00:00:00:01:01"}),
        ));
        ok(s.link_ports(uuid(PI), json!({"peerId": RP})));
        ok(s.create_host_port(uuid(H), json!({"portId": P1, "interfaceName": "a"})));
        ok(s.create_host_port(uuid(H), json!({"portId": P2, "interfaceName": "b"})));
        ok(s.create_route(
            uuid(R),
            json!({"type": "Normal", "srcNetworkAddr": "0.0.0.0", "srcNetworkLength": 0,
                   "dstNetworkAddr": "10.0.0.0", "dstNetworkLength": 24,
                   "nextHopPort": RP, "weight": 100}),
        ));
        ok(s.create_chain(json!({"id": C, "name": "c", "tenantId": "t"})));
        ok(s.create_rule(
            uuid(C),
            json!({"id": RULE1, "type": "accept", "position": 1,
                                          "nwProto": 6}),
        ));
        ok(s.create_rule(uuid(C), json!({"id": RULE2, "type": "drop", "position": 2})));
        let mut port = s.ports[&uuid(P2)].body.clone();
        port.insert("inboundFilterId".into(), json!(C));
        ok(s.update_port(uuid(P2), serde_json::Value::Object(port)));
        ok(s.create_mac_entry(
            uuid(B),
            None,
            json!({"macAddr": "02:00:00:00:00:0b", "portId": P2}),
        ));
        ok(s.create_arp_entry(
            uuid(B),
            json!({"ip": "10.0.0.11", "mac": "02:00:00:00:00:0b"}),
        ));
        ok(s.create_port_group(json!({"id": G, "name": "g", "tenantId": "t"})));
        ok(s.create_port_group_port(uuid(G), json!({"portId": P1})));
        ok(s.create_ip_addr_group(
            json!({"id": "00000000-0000-4000-8000-0000000000d2", "name": "i"}),
        ));
        ok(s.create_ip_addr_group_addr(
            "00000000-0000-4000-8000-0000000000d2".parse().unwrap(),
            json!({"addr": "10.0.0.10", "version": 4}),
        ));
        s
    }

    fn sorted(mut v: Vec<StateEntry>) -> Vec<StateEntry> {
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }

    #[test]
    fn every_record_together_renders_the_dump() {
        let s = populated();
        let mut all = Vec::new();
        for (key, _) in s.fingerprints() {
            all.extend(s.record_entries(key.0, key.1));
        }
        let dump = s.dump();
        assert!(dump.resources.len() > 15, "{}", dump.resources.len());
        assert_eq!(sorted(all), sorted(dump.resources));
    }

    /// The incremental topology equals the one built from the whole dump, after each of a
    /// series of creates, updates and deletes (cascades included).
    #[test]
    fn applying_changes_equals_a_full_rebuild() {
        let atts = [
            attachment("pod/x/a", "a", "10.0.0.10", 0x0a),
            attachment("pod/x/b", "b", "10.0.0.11", 0x0b),
        ];
        let mut s = populated();
        let mut seen = Seen::default();
        let mut live = LiveTopology::new(atts.clone());
        let mut step = |s: &Store, what: &str, expect_changes: bool| {
            let c = s.changes_since(&mut seen);
            assert_eq!(
                !c.changed.is_empty() || !c.gone.is_empty(),
                expect_changes,
                "{what}"
            );
            let mut changes = Vec::new();
            for (key, entries) in c.changed {
                changes.push((key, Some(crate::admin::typed_entries(&entries).unwrap())));
            }
            changes.extend(c.gone.into_iter().map(|k| (k, None)));
            live.apply(changes);
            let full = Topology::new(
                s.dump().typed_resources().unwrap(),
                RuleOrder::Listed,
                atts.clone(),
            );
            assert!(
                live.topology() == &full,
                "{what}: {:#?}\n---\n{full:#?}",
                live.topology()
            );
        };
        step(&s, "first reading", true);
        step(&s, "nothing changed", false);
        // A rule inserted at the head: the chain's order changes.
        ok(s.create_rule(
            uuid(C),
            json!({"id": RULE3, "type": "return", "position": 1}),
        ));
        step(&s, "rule inserted", true);
        ok(s.delete_rule(uuid(RULE1)));
        step(&s, "rule deleted", true);
        // An update of a port body (its filter goes).
        let mut port = s.ports[&uuid(P2)].body.clone();
        port.remove("inboundFilterId");
        ok(s.update_port(uuid(P2), serde_json::Value::Object(port)));
        step(&s, "port updated", true);
        // A port deleted: its binding, MAC entries and group membership go with it.
        ok(s.delete_port(uuid(P1)));
        step(&s, "port deleted", true);
        // The chain deleted: its rules go.
        ok(s.delete_chain(uuid(C)));
        step(&s, "chain deleted", true);
        // The bridge deleted: its ports, their links and bindings, its tables go.
        ok(s.delete_bridge(uuid(B)));
        step(&s, "bridge deleted", true);
        ok(s.delete_router(uuid(R)));
        step(&s, "router deleted", true);
    }
}
