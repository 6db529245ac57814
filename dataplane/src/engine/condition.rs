//! Rule conditions, as midolman evaluates them (`rules/Condition.java`, `matches`).
//!
//! A condition is a conjunction of every field it sets, each possibly inverted, the whole
//! inverted by `condInvert`; the fragment policy is tested outside the inversion. Every
//! member of MidoNet's REST `Condition` is evaluated. The packet context a condition
//! reads: the in-port and out-port as the device sets them (a port's own filters see that
//! port), the groups of the exterior port the packet entered the network through
//! (`portGroup`) and of the current in- and out-port (`inPortGroup`, `outPortGroup`), the
//! devices traversed so far (`traversedDevice`), whether a rule on this device rewrote
//! the destination (`matchNwDstRewritten`), and the connection direction, whose first
//! question starts connection tracking (`matchForwardFlow`, `matchReturnFlow`).
//!
//! The model's frames are untagged and unfragmented: `noVlan` holds, a `vlan` does not,
//! and every fragment policy but `nonheader` accepts them.
//!
//! A rule carrying a member the model does not know is refused ([`rule_refusal`]): a
//! walk that reaches it ends as unsupported, naming the rule, rather than guessing.

use std::net::Ipv4Addr;

use midonet_translators::model::{FragmentPolicy, MacAddr, MacMask, PortRange, Rule, RuleType};
use serde_json::Value;
use uuid::Uuid;

use super::Walk;
use crate::topology::contains_len;

/// Members a REST rule body may carry that do not take part in matching: links and
/// display (`uri`, `chainId`, `jumpChainName`), the position in the chain, and the meter
/// a rule counts its packets in.
const NOT_MATCHED: &[&str] = &["uri", "chainId", "jumpChainName", "meterName"];

/// Why the model cannot evaluate `rule`, if it cannot: a member it does not know (a
/// `null` is an absent member), or a rule midolman itself cannot load.
pub(crate) fn rule_refusal(rule: &Rule) -> Option<String> {
    let unknown = |extra: &serde_json::Map<String, Value>, skip: &[&str]| {
        extra
            .iter()
            .find(|(k, v)| !v.is_null() && !skip.contains(&k.as_str()))
            .map(|(k, _)| k.clone())
    };
    if let Some(k) = unknown(&rule.extra, NOT_MATCHED) {
        return Some(format!("member {k:?} is not one the model evaluates"));
    }
    for r in [&rule.tp_src, &rule.tp_dst].into_iter().flatten() {
        if let Some(k) = unknown(&r.extra, &[]) {
            return Some(format!(
                "port range member {k:?} is not one the model evaluates"
            ));
        }
    }
    let targets = rule.nat_targets.as_deref().unwrap_or_default();
    if let Some(k) = targets.iter().find_map(|t| unknown(&t.extra, &[])) {
        return Some(format!(
            "NAT target member {k:?} is not one the model evaluates"
        ));
    }
    match rule.rule_type {
        RuleType::Jump if rule.jump_chain_id.is_none() => {
            Some("a jump rule without jumpChainId (midolman cannot load it)".into())
        }
        RuleType::Dnat | RuleType::Snat => nat_refusal(rule),
        _ => None,
    }
}

fn nat_refusal(rule: &Rule) -> Option<String> {
    let targets = rule.nat_targets.as_deref().unwrap_or_default();
    if targets.is_empty() {
        return Some("a forward NAT rule without targets (midolman cannot load it)".into());
    }
    if targets
        .iter()
        .any(|t| t.address_from.is_none() || t.address_to.is_none())
    {
        return Some("a NAT target without addressFrom and addressTo".into());
    }
    // Without ports in any target the rule is a static (floating IP) rule, which takes
    // exactly one target (`StaticForwardNatRule.setNatTargets`).
    if super::chain::is_static_nat(rule) && targets.len() != 1 {
        return Some(format!(
            "a static NAT rule (no target ports) with {} targets (midolman cannot load it)",
            targets.len()
        ));
    }
    None
}

impl Walk<'_, '_, '_> {
    /// midolman `Condition.matches`.
    pub(super) fn matches(&mut self, rule: &Rule) -> bool {
        let c = &rule.condition;
        // Unfragmented packets: only `nonheader` (later fragments) refuses them, whatever
        // `condInvert` says.
        if c.fragment_policy == Some(FragmentPolicy::Nonheader) {
            return false;
        }
        let invert = c.cond_invert.unwrap_or(false);
        self.read_ports_whose_groups_it_asks(rule);
        self.conjunction(rule) != invert
    }

    /// Notes the reads of the in- and out-port whose groups `rule` asks about
    /// (`crate::reads`): a port's memberships are read through the port, and a walk whose
    /// frame an outbound filter drops never reaches its out-port. The groups of the
    /// exterior port a packet entered through (`portGroup`) were read with that port.
    fn read_ports_whose_groups_it_asks(&mut self, rule: &Rule) {
        let c = &rule.condition;
        for (group, port) in [
            (c.in_port_group, self.in_port),
            (c.out_port_group, self.out_port),
        ] {
            if let (Some(_), Some(port)) = (group, port) {
                self.sh.consulted.read(port);
            }
        }
    }

    fn conjunction(&mut self, rule: &Rule) -> bool {
        let c = &rule.condition;
        if c.match_forward_flow == Some(true) && !self.is_forward() {
            return false;
        }
        if c.match_return_flow == Some(true) && self.is_forward() {
            return false;
        }
        // Untagged frames: `noVlan` holds, a VLAN condition does not.
        if c.vlan.unwrap_or(0) != 0 {
            return false;
        }
        self.context_fields(rule) && self.header_fields(rule) && self.state_fields(rule)
    }

    /// Ports and port groups.
    fn context_fields(&self, rule: &Rule) -> bool {
        let c = &rule.condition;
        let topo = self.topo();
        let groups_of = |p: Option<Uuid>| p.and_then(|p| topo.port_groups.get(&p));
        let group = |have: Option<&std::collections::BTreeSet<Uuid>>,
                     g: Option<Uuid>,
                     inv: Option<bool>| match g {
            None => true,
            Some(g) => inv.unwrap_or(false) ^ have.is_some_and(|s| s.contains(&g)),
        };
        let port_set = |set: &Option<Vec<Uuid>>, port: Option<Uuid>, inv: Option<bool>| match set {
            Some(s) if !s.is_empty() => inv.unwrap_or(false) ^ port.is_some_and(|p| s.contains(&p)),
            _ => true,
        };
        group(self.port_groups, c.port_group, c.inv_port_group)
            && group(
                groups_of(self.in_port),
                c.in_port_group,
                c.inv_in_port_group,
            )
            && group(
                groups_of(self.out_port),
                c.out_port_group,
                c.inv_out_port_group,
            )
            && port_set(&c.in_ports, self.in_port, c.inv_in_ports)
            && port_set(&c.out_ports, self.out_port, c.inv_out_ports)
    }

    /// L2, L3 and L4 header fields and address groups.
    fn header_fields(&self, rule: &Rule) -> bool {
        let c = &rule.condition;
        let pkt = &self.pkt;
        let (tp_src, tp_dst) = pkt.transport();
        let (src, dst) = (pkt.tuple.src.ip, pkt.tuple.dst.ip);
        let topo = self.topo();
        let group = |g: Option<Uuid>, inv: Option<bool>, ip: Ipv4Addr| match g {
            None => true,
            Some(g) => {
                inv.unwrap_or(false) ^ topo.ip_addr_groups.get(&g).is_some_and(|s| s.contains(&ip))
            }
        };
        field(rule.dl_type.map(|t| t == pkt.ethertype()), c.inv_dl_type)
            && field(
                mac_match(c.dl_src, c.dl_src_mask, pkt.eth_src),
                c.inv_dl_src,
            )
            && field(
                mac_match(c.dl_dst, c.dl_dst_mask, pkt.eth_dst),
                c.inv_dl_dst,
            )
            && field(c.nw_tos.map(|t| t == pkt.tos), c.inv_nw_tos)
            && field(rule.nw_proto.map(|p| p == pkt.nw_proto()), c.inv_nw_proto)
            && field(
                prefix(rule.nw_src_address, rule.nw_src_length, src),
                c.inv_nw_src,
            )
            && field(
                prefix(rule.nw_dst_address, rule.nw_dst_length, dst),
                c.inv_nw_dst,
            )
            && field(
                rule.tp_src.as_ref().map(|r| in_range(r, tp_src)),
                c.inv_tp_src,
            )
            && field(
                rule.tp_dst.as_ref().map(|r| in_range(r, tp_dst)),
                c.inv_tp_dst,
            )
            && group(c.ip_addr_group_src, c.inv_ip_addr_group_src, src)
            && group(c.ip_addr_group_dst, c.inv_ip_addr_group_dst, dst)
    }

    /// What the walk so far did: devices traversed, the ICMP error's data, a rewritten
    /// destination.
    fn state_fields(&self, rule: &Rule) -> bool {
        let c = &rule.condition;
        let quoted = self.pkt.tuple.icmp_error().and_then(|m| m.about);
        // An ICMP data condition on a packet without ICMP error data does not hold.
        let icmp_data = |addr: Option<Ipv4Addr>, len: Option<u8>, ip: Option<Ipv4Addr>| {
            addr.map(|a| ip.is_some_and(|ip| contains_len(Some(a), Some(len.unwrap_or(0)), ip)))
        };
        field(
            c.traversed_device.map(|d| self.traversed.contains(&d)),
            c.inv_traversed_device,
        ) && field(
            icmp_data(
                c.icmp_data_src_ip_address,
                c.icmp_data_src_ip_length,
                quoted.map(|q| q.src.ip),
            ),
            c.inv_icmp_data_src_ip,
        ) && field(
            icmp_data(
                c.icmp_data_dst_ip_address,
                c.icmp_data_dst_ip_length,
                quoted.map(|q| q.dst.ip),
            ),
            c.inv_icmp_data_dst_ip,
        ) && (c.match_nw_dst_rewritten != Some(true) || self.nw_dst_rewritten)
    }
}

/// One field of the conjunction: absent holds; present holds when it matches, or when it
/// does not and it is inverted.
fn field(matched: Option<bool>, inv: Option<bool>) -> bool {
    match matched {
        None => true,
        Some(m) => inv.unwrap_or(false) ^ m,
    }
}

fn prefix(addr: Option<Ipv4Addr>, len: Option<u8>, ip: Ipv4Addr) -> Option<bool> {
    addr.map(|a| contains_len(Some(a), Some(len.unwrap_or(0)), ip))
}

fn mac_match(want: Option<MacAddr>, mask: Option<MacMask>, have: MacAddr) -> Option<bool> {
    want.map(|w| mask.unwrap_or(MacMask::ALL).same(w, have))
}

fn in_range(r: &PortRange, port: u16) -> bool {
    let start = r.start.unwrap_or(0);
    let end = r.end.unwrap_or(u16::MAX);
    (start..=end).contains(&port)
}
