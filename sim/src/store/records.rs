//! The store read record by record, for a reader that keeps its own copy up to date
//! (`midonet_dataplane::LiveTopology`, behind the flow probe).
//!
//! A record is one entry of the store's maps with everything the state dump renders from
//! it: a bridge with its MAC and ARP tables, a port with its link and host binding, a
//! chain with its rules in evaluation order, a group with its members. A rendering reads
//! nothing but its own record (a chain's rules are part of it). The union of every
//! record's entries is exactly the dump (unit-tested).
//!
//! Every map of the store logs the records its changes touch (`super::tracked`), so a
//! reading costs the records changed since the reader's [`Cursor`], not the store: it
//! takes the records each log marked after the cursor's position in it, renders those
//! still there and reports the others gone (if the reader had them). A cursor that is new,
//! from another store (wiped, reloaded) or behind marks a log has dropped reads everything
//! instead, and reports gone whatever it had that is no longer there.

use std::collections::{BTreeSet, HashSet};

use midonet_translators::model::Kind;
use serde_json::Value;
use uuid::Uuid;

use super::l4lb::{view_child, view_load_balancer, view_pool, Child};
use super::tracked::{ChangeLog, Mark, RecordKey};
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
    LoadBalancer,
}

/// How many maps the store has (and logs it keeps).
const MAPS: usize = 11;

/// Where a reader is: its position in each map's log, and the records it has.
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    at: Option<[Mark; MAPS]>,
    has: HashSet<RecordKey>,
}

/// What changed since the last reading: the entries of each new or changed record, and
/// the records gone; each named by its key (`Kind/id`).
pub(crate) struct Changes {
    pub changed: Vec<(String, Vec<StateEntry>)>,
    pub gone: Vec<String>,
}

fn key_name(kind: RecordKind, id: Uuid) -> String {
    format!("{kind:?}/{id}")
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
    /// Every record there is.
    fn record_keys(&self) -> Vec<RecordKey> {
        fn of<'a>(
            kind: RecordKind,
            ids: impl Iterator<Item = &'a Uuid> + 'a,
        ) -> impl Iterator<Item = RecordKey> + 'a {
            ids.map(move |id| (kind, *id))
        }
        of(RecordKind::TunnelZone, self.tunnel_zones.keys())
            .chain(of(RecordKind::Router, self.routers.keys()))
            .chain(of(RecordKind::Bridge, self.bridges.keys()))
            .chain(of(RecordKind::Port, self.ports.keys()))
            .chain(of(RecordKind::Route, self.routes.keys()))
            .chain(of(RecordKind::Chain, self.chains.keys()))
            .chain(of(RecordKind::Host, self.hosts.keys()))
            .chain(of(RecordKind::PortGroup, self.port_groups.keys()))
            .chain(of(RecordKind::IpAddrGroup, self.ip_addr_groups.keys()))
            .chain(of(RecordKind::LoadBalancer, self.load_balancers.keys()))
            .collect()
    }

    fn has_record(&self, (kind, id): RecordKey) -> bool {
        match kind {
            RecordKind::TunnelZone => self.tunnel_zones.contains_key(&id),
            RecordKind::Router => self.routers.contains_key(&id),
            RecordKind::Bridge => self.bridges.contains_key(&id),
            RecordKind::Port => self.ports.contains_key(&id),
            RecordKind::Route => self.routes.contains_key(&id),
            RecordKind::Chain => self.chains.contains_key(&id),
            RecordKind::Host => self.hosts.contains_key(&id),
            RecordKind::PortGroup => self.port_groups.contains_key(&id),
            RecordKind::IpAddrGroup => self.ip_addr_groups.contains_key(&id),
            RecordKind::LoadBalancer => self.load_balancers.contains_key(&id),
        }
    }

    /// Every map's change log (rules log their chains' records).
    fn logs(&self) -> [&ChangeLog; MAPS] {
        [
            self.tunnel_zones.log(),
            self.routers.log(),
            self.bridges.log(),
            self.ports.log(),
            self.routes.log(),
            self.chains.log(),
            self.rules.log(),
            self.hosts.log(),
            self.port_groups.log(),
            self.ip_addr_groups.log(),
            self.load_balancers.log(),
        ]
    }

    /// The records that changed since `cursor` (which is brought up to date).
    pub(crate) fn changes_since(&self, cursor: &mut Cursor) -> Changes {
        let logs = self.logs();
        let marked: Option<BTreeSet<RecordKey>> = cursor.at.and_then(|at| {
            let mut keys = BTreeSet::new();
            for (log, at) in logs.iter().zip(at) {
                keys.extend(log.since(at)?.copied());
            }
            Some(keys)
        });
        cursor.at = Some(logs.map(ChangeLog::now));
        let mut changes = Changes {
            changed: Vec::new(),
            gone: Vec::new(),
        };
        match marked {
            Some(keys) => {
                for key in keys {
                    if self.has_record(key) {
                        changes
                            .changed
                            .push((key_name(key.0, key.1), self.record_entries(key.0, key.1)));
                        cursor.has.insert(key);
                    } else if cursor.has.remove(&key) {
                        changes.gone.push(key_name(key.0, key.1));
                    }
                }
            }
            None => {
                let now: HashSet<RecordKey> = self.record_keys().into_iter().collect();
                let mut gone: Vec<RecordKey> = cursor.has.difference(&now).copied().collect();
                gone.sort();
                changes.gone = gone.into_iter().map(|k| key_name(k.0, k.1)).collect();
                let mut keys: Vec<RecordKey> = now.iter().copied().collect();
                keys.sort();
                changes.changed = keys
                    .into_iter()
                    .map(|k| (key_name(k.0, k.1), self.record_entries(k.0, k.1)))
                    .collect();
                cursor.has = now;
            }
        }
        changes
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
            RecordKind::LoadBalancer => out = self.load_balancer_entries(id),
        }
        out
    }

    /// A load balancer, then each pool with its members and VIPs.
    fn load_balancer_entries(&self, id: Uuid) -> Vec<StateEntry> {
        let Some(lb) = self.load_balancers.get(&id) else {
            return Vec::new();
        };
        let mut out = vec![entry(
            Kind::LoadBalancer,
            format!("/load_balancers/{id}"),
            None,
            view_load_balancer(lb),
        )];
        for pool in &lb.pools {
            out.push(entry(
                Kind::Pool,
                format!("/pools/{}", pool.id),
                Some(id),
                view_pool(id, pool),
            ));
            for (child, kind, list) in [
                (Child::Member, Kind::PoolMember, &pool.members),
                (Child::Vip, Kind::Vip, &pool.vips),
            ] {
                for c in list {
                    out.push(entry(
                        kind,
                        child.path(c.id),
                        Some(pool.id),
                        view_child(child, id, pool.id, c),
                    ));
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
            networks: Vec::new(),
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
        for key in s.record_keys() {
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
        let mut seen = Cursor::default();
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

    /// A reader's copy of the records, kept up to date from its readings.
    #[derive(Default)]
    struct Reader {
        cursor: Cursor,
        records: std::collections::BTreeMap<String, Vec<StateEntry>>,
    }

    impl Reader {
        /// Reads the changes; answers the keys reported changed and gone, sorted.
        fn read(&mut self, s: &Store) -> (Vec<String>, Vec<String>) {
            let c = s.changes_since(&mut self.cursor);
            let mut changed: Vec<String> = c.changed.iter().map(|(k, _)| k.clone()).collect();
            for (k, e) in c.changed {
                self.records.insert(k, e);
            }
            for k in &c.gone {
                assert!(self.records.remove(k).is_some(), "{k} gone, never read");
            }
            let mut gone = c.gone;
            changed.sort();
            gone.sort();
            (changed, gone)
        }
    }

    /// What a new reader reads.
    fn fresh(s: &Store) -> std::collections::BTreeMap<String, Vec<StateEntry>> {
        let mut r = Reader::default();
        r.read(s);
        r.records
    }

    /// The reader's copy is what a new reader reads, and together its records render the
    /// dump.
    fn in_step(r: &Reader, s: &Store, what: &str) {
        assert!(r.records == fresh(s), "{what}: the reader's copy differs");
        let all: Vec<StateEntry> = r.records.values().flatten().cloned().collect();
        assert_eq!(sorted(all), sorted(s.dump().resources), "{what}");
    }

    fn key(kind: &str, id: &str) -> String {
        format!("{kind}/{id}")
    }

    /// Every kind of change the API makes, cascades included, reaches an incremental
    /// reader: after each, its copy equals a fresh reading. The records a simple change
    /// touches are exactly the ones reported.
    #[test]
    fn an_incremental_reader_follows_every_kind_of_change() {
        let mut s = populated();
        let mut r = Reader::default();
        let (changed, gone) = r.read(&s);
        assert_eq!(changed.len(), s.record_keys().len());
        assert!(gone.is_empty());
        in_step(&r, &s, "first reading");
        assert_eq!(r.read(&s), (vec![], vec![]), "nothing changed");

        // (what, the change, the records it changes and removes; None: not checked).
        type Step = (
            &'static str,
            Box<dyn Fn(&mut Store)>,
            Option<(Vec<String>, Vec<String>)>,
        );
        let tz = "00000000-0000-4000-8000-0000000000f1";
        let h2 = "00000000-0000-4000-8000-000000000002";
        let c2 = "00000000-0000-4000-8000-0000000000c2";
        let jump = "00000000-0000-4000-8000-0000000000e4";
        let route = "00000000-0000-4000-8000-000000000031";
        let ig = "00000000-0000-4000-8000-0000000000d2";
        let steps: Vec<Step> = vec![
            (
                "rule inserted at the head",
                Box::new(|s| {
                    ok(s.create_rule(
                        uuid(C),
                        json!({"id": RULE3, "type": "return", "position": 1}),
                    ))
                }),
                Some((vec![key("Chain", C)], vec![])),
            ),
            (
                "rule deleted",
                Box::new(|s| ok(s.delete_rule(uuid(RULE1)))),
                Some((vec![key("Chain", C)], vec![])),
            ),
            (
                "host added",
                Box::new(move |s| s.add_hosts(&[("h2".into(), uuid(h2))])),
                Some((vec![key("Host", h2)], vec![])),
            ),
            (
                "tunnel zone member added",
                Box::new(move |s| {
                    ok(s.create_tunnel_zone_host(
                        uuid(tz),
                        json!({"hostId": h2, "ipAddress": "192.168.0.2"}),
                    ))
                }),
                Some((vec![key("TunnelZone", tz)], vec![])),
            ),
            (
                "tunnel zone updated",
                Box::new(move |s| {
                    ok(s.update_tunnel_zone(uuid(tz), json!({"name": "tz2", "type": "vxlan"})))
                }),
                Some((vec![key("TunnelZone", tz)], vec![])),
            ),
            (
                "tunnel zone member removed",
                Box::new(move |s| ok(s.delete_tunnel_zone_host(uuid(tz), uuid(h2)))),
                Some((vec![key("TunnelZone", tz)], vec![])),
            ),
            (
                "port unbound",
                Box::new(|s| ok(s.delete_host_port(uuid(H), uuid(P1)))),
                Some((vec![key("Port", P1)], vec![])),
            ),
            (
                "port bound",
                Box::new(|s| {
                    ok(s.create_host_port(uuid(H), json!({"portId": P1, "interfaceName": "a2"})))
                }),
                Some((vec![key("Port", P1)], vec![])),
            ),
            (
                "ports unlinked",
                Box::new(|s| ok(s.unlink_port(uuid(PI)))),
                Some((vec![key("Port", PI), key("Port", RP)], vec![])),
            ),
            (
                "ports linked",
                Box::new(|s| ok(s.link_ports(uuid(PI), json!({"peerId": RP})))),
                Some((vec![key("Port", PI), key("Port", RP)], vec![])),
            ),
            (
                "bridge updated",
                Box::new(|s| ok(s.update_bridge(uuid(B), json!({"name": "b2", "tenantId": "t"})))),
                Some((vec![key("Bridge", B)], vec![])),
            ),
            (
                "router updated",
                Box::new(|s| ok(s.update_router(uuid(R), json!({"name": "r2", "tenantId": "t"})))),
                Some((vec![key("Router", R)], vec![])),
            ),
            (
                "MAC entry deleted",
                Box::new(|s| {
                    ok(s.delete_mac_entry(uuid(B), None, &format!("02-00-00-00-00-0b_{P2}")))
                }),
                Some((vec![key("Bridge", B)], vec![])),
            ),
            (
                "ARP entry deleted",
                Box::new(|s| ok(s.delete_arp_entry(uuid(B), "10.0.0.11_02-00-00-00-00-0b"))),
                Some((vec![key("Bridge", B)], vec![])),
            ),
            (
                "route created",
                Box::new(move |s| {
                    ok(s.create_route(
                        uuid(R),
                        json!({"id": route, "type": "Normal", "srcNetworkAddr": "0.0.0.0",
                               "srcNetworkLength": 0, "dstNetworkAddr": "10.1.0.0",
                               "dstNetworkLength": 16, "nextHopPort": RP, "weight": 100}),
                    ))
                }),
                None,
            ),
            (
                "route deleted",
                Box::new(move |s| ok(s.delete_route(uuid(route)))),
                None,
            ),
            (
                "port group updated",
                Box::new(|s| ok(s.update_port_group(uuid(G), json!({"name": "g2"})))),
                Some((vec![key("PortGroup", G)], vec![])),
            ),
            (
                "port group member added",
                Box::new(|s| ok(s.create_port_group_port(uuid(G), json!({"portId": P2})))),
                Some((vec![key("PortGroup", G)], vec![])),
            ),
            (
                "port group member removed",
                Box::new(|s| ok(s.delete_port_group_port(uuid(G), uuid(P2)))),
                Some((vec![key("PortGroup", G)], vec![])),
            ),
            (
                "address removed from a group",
                Box::new(move |s| ok(s.delete_ip_addr_group_addr(uuid(ig), "10.0.0.10"))),
                Some((vec![key("IpAddrGroup", ig)], vec![])),
            ),
            (
                "a chain jumping to C, and a filter on the router",
                Box::new(move |s| {
                    ok(s.create_chain(json!({"id": c2, "name": "c2", "tenantId": "t"})));
                    ok(s.create_rule(
                        uuid(c2),
                        json!({"id": jump, "type": "jump", "jumpChainId": C, "position": 1}),
                    ));
                    ok(s.update_router(
                        uuid(R),
                        json!({"name": "r2", "tenantId": "t", "inboundFilterId": C}),
                    ));
                }),
                Some((vec![key("Chain", c2), key("Router", R)], vec![])),
            ),
            (
                // The chain's rules go, the jumps to it, the filters naming it.
                "chain deleted",
                Box::new(|s| ok(s.delete_chain(uuid(C)))),
                Some((
                    vec![key("Chain", c2), key("Port", P2), key("Router", R)],
                    vec![key("Chain", C)],
                )),
            ),
            (
                // Its binding, its memberships and its MAC entries go.
                "port deleted",
                Box::new(|s| ok(s.delete_port(uuid(P1)))),
                None,
            ),
            (
                // Its ports go, their links and bindings, its tables.
                "bridge deleted",
                Box::new(|s| ok(s.delete_bridge(uuid(B)))),
                None,
            ),
            (
                // Its ports and routes go.
                "router deleted",
                Box::new(|s| ok(s.delete_router(uuid(R)))),
                None,
            ),
            (
                "groups deleted",
                Box::new(move |s| {
                    ok(s.delete_port_group(uuid(G)));
                    ok(s.delete_ip_addr_group(uuid(ig)));
                }),
                Some((vec![], vec![key("IpAddrGroup", ig), key("PortGroup", G)])),
            ),
            (
                "tunnel zone deleted",
                Box::new(move |s| ok(s.delete_tunnel_zone(uuid(tz)))),
                Some((vec![], vec![key("TunnelZone", tz)])),
            ),
            (
                "created and deleted between two readings",
                Box::new(|s| {
                    ok(s.create_bridge(json!({"id": B, "name": "b", "tenantId": "t"})));
                    ok(s.delete_bridge(uuid(B)));
                }),
                Some((vec![], vec![])),
            ),
            (
                "wiped, hosts kept",
                Box::new(|s| {
                    ok(s.create_router(json!({"id": R, "name": "r", "tenantId": "t"})));
                    s.wipe(false);
                }),
                Some((
                    vec![key("Host", H), key("Host", h2)],
                    vec![key("Chain", c2)],
                )),
            ),
        ];
        let mut late: Option<Reader> = None;
        for (i, (what, change, want)) in steps.into_iter().enumerate() {
            change(&mut s);
            let got = r.read(&s);
            if let Some(want) = want {
                let mut want = want;
                want.0.sort();
                want.1.sort();
                assert_eq!(got, want, "{what}");
            }
            in_step(&r, &s, what);
            // A reader that starts halfway reads everything first, then follows.
            if i == 10 {
                let mut l = Reader::default();
                l.read(&s);
                late = Some(l);
            }
            if let Some(l) = late.as_mut() {
                l.read(&s);
                in_step(l, &s, what);
            }
        }
        assert!(late.is_some());
    }

    /// A reader whose cursor is reset (what `StoreReader::changes` does after an error)
    /// reads everything again; one whose store was wiped (hosts too) reports every record
    /// it had gone.
    #[test]
    fn a_reset_reader_reads_everything_and_a_wiped_store_is_all_gone() {
        let mut s = populated();
        let mut r = Reader::default();
        r.read(&s);
        ok(s.delete_rule(uuid(RULE2)));
        r.read(&s);
        r.cursor = Cursor::default();
        let (changed, gone) = r.read(&s);
        assert_eq!(changed.len(), s.record_keys().len());
        assert!(gone.is_empty());
        in_step(&r, &s, "after a reset");
        let had = r.records.len();
        s.wipe(true);
        let (changed, gone) = r.read(&s);
        assert!(changed.is_empty(), "{changed:?}");
        assert_eq!(gone.len(), had);
        assert!(r.records.is_empty());
    }

    /// A reader behind the marks a log dropped (too many deleted records) reads everything,
    /// and reports gone exactly what it had and no longer is.
    #[test]
    fn a_reader_behind_dropped_marks_reads_everything() {
        let mut s = populated();
        s.bridges.set_slack(2);
        let mut r = Reader::default();
        r.read(&s);
        let mut ahead = Reader::default();
        for i in 0..10u32 {
            let id = format!("00000000-0000-4000-8000-00000000{i:04x}");
            ok(s.create_bridge(json!({"id": id, "name": "x", "tenantId": "t"})));
            ok(s.delete_bridge(uuid(&id)));
            if i == 8 {
                ahead.read(&s);
            }
        }
        ok(s.delete_port_group(uuid(G)));
        let (changed, gone) = r.read(&s);
        assert_eq!(changed.len(), s.record_keys().len(), "a full reading");
        assert_eq!(gone, vec![key("PortGroup", G)]);
        in_step(&r, &s, "behind dropped marks");
        // Later changes are read incrementally again.
        ok(s.delete_rule(uuid(RULE2)));
        assert_eq!(r.read(&s), (vec![key("Chain", C)], vec![]));
        in_step(&r, &s, "after the full reading");
        ahead.read(&s);
        in_step(&ahead, &s, "a reader just behind");
    }
}
