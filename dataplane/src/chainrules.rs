//! A chain's rules in evaluation order, with an index from what a packet carries (its
//! destination, the address groups that destination is in, the port groups of the port it
//! entered through) to the rules that can match it.
//!
//! Why: the walk evaluates a chain rule by rule. A cluster's Service chain holds a jump
//! per Service port, each matching one cluster IP, and the NetworkPolicy chains hold a
//! rule or a jump per policy, each for the pods one group holds. Scanned, a packet tests
//! every other Service's and every other policy's rule, at every hop through the chain and
//! on every path a NAT choice explores; that scan was most of the time `check` and the
//! flow probe spend.
//!
//! **The rule's own condition.** A rule whose condition requires one destination address
//! (`nwDstAddress` with a /32 length), a destination in one IP address group
//! (`ipAddrGroupIdDst`) or an entry through a port of one port group (`portGroup`), that
//! field not inverted and the condition not inverted (`condInvert`), cannot match a packet
//! without it: for such a packet it is skipped without being tested (the condition is a
//! conjunction; whatever else it says, even a field the model refuses, cannot make it
//! hold). Every other rule is a candidate for every packet. Candidates are visited in the
//! chain's order, and the caller asks for the next one with the packet as it is *now* (a
//! NAT rule that lets the evaluation continue may have rewritten its destination), so the
//! rules that match, and the first of them, are those a scan finds.
//!
//! **Guards.** A chain may also start with a guard: a `return` whose only condition is an
//! inverted membership (not a destination of an IP address group; not entered through a
//! port of a port group), as each NetworkPolicy's chain does for the pods it does not
//! select. A jump to it comes straight back for a packet that is not a member, so a walk
//! that records neither hops nor the chains it consulted may skip that jump. Where nothing
//! could tell the target was not traversed (no other jump names it, so "already
//! traversed" is never asked of it, and no `traversedDevice` condition names it), the
//! jump is skipped without being visited at all: [`guarded_jumps`] indexes a chain's
//! jumps by their target's guard, for the topology as it is
//! (`Topology::guarded_jumps` memoises it and forgets it at every change).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use midonet_translators::model::{Rule, RuleType};
use rustc_hash::FxHashMap;
use uuid::Uuid;

/// A chain's rules and the index of their own conditions over them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChainRules {
    rules: Vec<Rule>,
    /// Positions by what their own conditions require.
    own: Positions,
    /// How many of `own.rest` are jumps.
    jumps: usize,
    /// What the first rule returns on, if it is a guard.
    guard: Option<Guard>,
    /// Why the model cannot evaluate a rule, by position (see
    /// `engine::condition::rule_refusal`).
    refused: FxHashMap<usize, String>,
}

/// Rule positions by what a packet needs for them to be candidates, each list ascending.
#[derive(Clone, Debug, Default)]
pub(crate) struct Positions {
    by_dst: FxHashMap<Ipv4Addr, Vec<usize>>,
    by_dst_group: FxHashMap<Uuid, Vec<usize>>,
    by_port_group: FxHashMap<Uuid, Vec<usize>>,
    /// Candidates for every packet.
    rest: Vec<usize>,
}

/// What a packet must carry for a rule to be a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    Dst(Ipv4Addr),
    DstInGroup(Uuid),
    EnteredThroughPortGroup(Uuid),
    Nothing,
}

/// What the index reads of the packet at a step of a chain's evaluation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PacketKeys<'a> {
    pub dst: Ipv4Addr,
    /// The IP address groups `dst` is in.
    pub dst_groups: Option<&'a BTreeSet<Uuid>>,
    /// The port groups of the port the packet entered the network through.
    pub port_groups: Option<&'a BTreeSet<Uuid>>,
}

/// A chain's first rule when it is `return` unless one membership holds (and nothing
/// else): a packet that is not a member leaves the chain at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Unless the destination is in this IP address group.
    DstInAddrGroup(Uuid),
    /// Unless the packet entered through a port of this port group.
    EnteredThroughPortGroup(Uuid),
}

/// Two chains are equal when their rules are: the index follows from them.
impl PartialEq for ChainRules {
    fn eq(&self, other: &Self) -> bool {
        self.rules == other.rules
    }
}

impl ChainRules {
    /// The rules in evaluation order.
    pub(crate) fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.rules.len()
    }

    /// Why the model cannot evaluate the rule at `at`, if it cannot.
    pub(crate) fn refusal(&self, at: usize) -> Option<&str> {
        self.refused.get(&at).map(String::as_str)
    }

    /// The chain's guard, if its first rule is one.
    pub(crate) fn guard(&self) -> Option<Guard> {
        self.guard
    }

    /// Adds `rule` at the end.
    pub(crate) fn push(&mut self, rule: Rule) {
        let at = self.rules.len();
        if at == 0 {
            self.guard = guard_of(&rule);
        }
        self.index(at, &rule);
        self.rules.push(rule);
    }

    /// Adds `rule` at position `at` (0-based, at most [`ChainRules::len`]).
    pub(crate) fn insert(&mut self, at: usize, rule: Rule) {
        if at >= self.rules.len() {
            self.push(rule);
        } else {
            self.rules.insert(at, rule);
            self.reindex();
        }
    }

    /// Removes every rule `gone` says, in one pass and one re-index (a chain of thousands
    /// of rules emptied rule by rule would re-index it once per rule).
    pub(crate) fn remove_all(&mut self, gone: impl Fn(&Rule) -> bool) {
        let before = self.rules.len();
        self.rules.retain(|r| !gone(r));
        if self.rules.len() != before {
            self.reindex();
        }
    }

    /// The position of the first rule at or after `from` that can match `pkt`. With
    /// `guarded` (the chain's [`guarded_jumps`], for a walk that may skip them), the
    /// jumps to a guard `pkt` does not pass are skipped too.
    pub(crate) fn next_candidate(
        &self,
        from: usize,
        pkt: &PacketKeys<'_>,
        guarded: Option<&Positions>,
    ) -> Option<usize> {
        // Nothing indexed (most chains are short): every rule is a candidate, and the
        // look-ups below would cost more than the tests they save.
        if self.own.is_flat() && guarded.is_none_or(Positions::is_flat) {
            return (from < self.rules.len()).then_some(from);
        }
        let own = self.own.first_indexed(from, pkt);
        let rest = match guarded {
            Some(g) => earliest(g.first_indexed(from, pkt), first_from(&g.rest, from)),
            None => first_from(&self.own.rest, from),
        };
        earliest(own, rest)
    }

    /// Whether any jump needs nothing of a packet by its own condition.
    pub(crate) fn has_jumps(&self) -> bool {
        self.jumps > 0
    }

    fn index(&mut self, at: usize, rule: &Rule) {
        if let Some(why) = crate::engine::rule_refusal(rule) {
            self.refused.insert(at, why);
        }
        let needs = needs(rule);
        if needs == Needs::Nothing && rule.rule_type == RuleType::Jump {
            self.jumps += 1;
        }
        self.own.put(at, needs);
    }

    fn reindex(&mut self) {
        self.own = Positions::default();
        self.jumps = 0;
        self.refused.clear();
        self.guard = self.rules.first().and_then(guard_of);
        let rules = std::mem::take(&mut self.rules);
        for (at, rule) in rules.iter().enumerate() {
            self.index(at, rule);
        }
        self.rules = rules;
    }
}

impl Positions {
    fn put(&mut self, at: usize, needs: Needs) {
        match needs {
            Needs::Dst(ip) => self.by_dst.entry(ip).or_default().push(at),
            Needs::DstInGroup(g) => self.by_dst_group.entry(g).or_default().push(at),
            Needs::EnteredThroughPortGroup(g) => self.by_port_group.entry(g).or_default().push(at),
            Needs::Nothing => self.rest.push(at),
        }
    }

    /// Every position a packet may not be a candidate for, in no particular order.
    pub(crate) fn indexed(&self) -> impl Iterator<Item = usize> + '_ {
        let dst = self.by_dst.values().flatten();
        let groups = self.by_dst_group.values().flatten();
        dst.chain(groups)
            .chain(self.by_port_group.values().flatten())
            .copied()
    }

    /// Whether every position is a candidate for every packet.
    pub(crate) fn is_flat(&self) -> bool {
        self.by_dst.is_empty() && self.by_dst_group.is_empty() && self.by_port_group.is_empty()
    }

    /// The first position at or after `from` among those `pkt` carries what they need.
    fn first_indexed(&self, from: usize, pkt: &PacketKeys<'_>) -> Option<usize> {
        let mut best = self.by_dst.get(&pkt.dst).and_then(|p| first_from(p, from));
        if !self.by_dst_group.is_empty() {
            for g in pkt.dst_groups.into_iter().flatten() {
                let at = self.by_dst_group.get(g).and_then(|p| first_from(p, from));
                best = earliest(best, at);
            }
        }
        if !self.by_port_group.is_empty() {
            for g in pkt.port_groups.into_iter().flatten() {
                let at = self.by_port_group.get(g).and_then(|p| first_from(p, from));
                best = earliest(best, at);
            }
        }
        best
    }
}

fn first_from(positions: &[usize], from: usize) -> Option<usize> {
    positions
        .get(positions.partition_point(|&p| p < from))
        .copied()
}

fn earliest(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `chain`'s jumps indexed by their target's guard: `rules`' positions by the membership a
/// packet needs for the jump to do anything. Only jumps that need nothing by their own
/// condition, that the model does not refuse, and whose target exists, starts with a
/// guard and is named by no other jump (`jumps_to`) are indexed; every other position of
/// `rules.own.rest` stays a candidate for every packet.
pub(crate) fn guarded_jumps(
    rules: &ChainRules,
    target_guard: impl Fn(Uuid) -> Option<Guard>,
    jumps_to: impl Fn(Uuid) -> usize,
) -> Positions {
    let mut out = Positions::default();
    for &at in &rules.own.rest {
        let rule = &rules.rules[at];
        let is_jump = rule.rule_type == RuleType::Jump;
        let target = rule
            .jump_chain_id
            .filter(|_| is_jump && !rules.refused.contains_key(&at));
        let needs = match target.filter(|t| jumps_to(*t) == 1).and_then(&target_guard) {
            Some(Guard::DstInAddrGroup(g)) => Needs::DstInGroup(g),
            Some(Guard::EnteredThroughPortGroup(g)) => Needs::EnteredThroughPortGroup(g),
            None => Needs::Nothing,
        };
        out.put(at, needs);
    }
    out
}

/// What a rule's own condition requires of a packet (see the module docs): one
/// requirement is enough to skip it, the most selective taken.
fn needs(rule: &Rule) -> Needs {
    let c = &rule.condition;
    if c.cond_invert.unwrap_or(false) {
        return Needs::Nothing;
    }
    if let Some(dst) = only_destination(rule) {
        return Needs::Dst(dst);
    }
    match (c.ip_addr_group_dst, c.port_group) {
        (Some(g), _) if !c.inv_ip_addr_group_dst.unwrap_or(false) => Needs::DstInGroup(g),
        (_, Some(g)) if !c.inv_port_group.unwrap_or(false) => Needs::EnteredThroughPortGroup(g),
        _ => Needs::Nothing,
    }
}

/// The one destination address a rule can match, if its condition requires one (see the
/// module docs).
fn only_destination(rule: &Rule) -> Option<Ipv4Addr> {
    let c = &rule.condition;
    let inverted = c.cond_invert.unwrap_or(false) || c.inv_nw_dst.unwrap_or(false);
    match (rule.nw_dst_address, rule.nw_dst_length) {
        (Some(addr), Some(32)) if !inverted => Some(addr),
        _ => None,
    }
}

/// The guard `rule` is, if it is one: `return` with one inverted membership as its whole
/// condition. Anything else set on it (even a field at its neutral value) makes it an
/// ordinary rule: the shortcut is only taken where it is plainly sound.
fn guard_of(rule: &Rule) -> Option<Guard> {
    if rule.rule_type != RuleType::Return {
        return None;
    }
    let c = &rule.condition;
    let mut plain = Rule::new(rule.parent, rule.id, RuleType::Return);
    plain.position = rule.position;
    let guard = match (c.ip_addr_group_dst, c.port_group) {
        (Some(g), None) => {
            plain.condition.ip_addr_group_dst = Some(g);
            plain.condition.inv_ip_addr_group_dst = Some(true);
            Guard::DstInAddrGroup(g)
        }
        (None, Some(g)) => {
            plain.condition.port_group = Some(g);
            plain.condition.inv_port_group = Some(true);
            Guard::EnteredThroughPortGroup(g)
        }
        _ => return None,
    };
    (plain == *rule).then_some(guard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::contains_len;
    use midonet_translators::model::RuleType;

    fn rule(n: u128) -> Rule {
        Rule::new(
            Uuid::from_u128(1),
            Uuid::from_u128(100 + n),
            RuleType::Accept,
        )
    }
    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn to(n: u128, dst: &str, len: u8) -> Rule {
        let mut r = rule(n);
        r.nw_dst_address = Some(ip(dst));
        r.nw_dst_length = Some(len);
        r
    }

    /// Whether a scan could find `rule` matching a packet to `dst`, by its destination
    /// field alone (the other fields could still rule it out).
    fn may_match(rule: &Rule, dst: Ipv4Addr) -> bool {
        let c = &rule.condition;
        let field = contains_len(rule.nw_dst_address, rule.nw_dst_length, dst)
            != c.inv_nw_dst.unwrap_or(false);
        field || c.cond_invert.unwrap_or(false)
    }

    /// The index visits every rule that may match, and skips only rules that cannot.
    fn agrees_with_a_scan(chain: &ChainRules, dst: Ipv4Addr) {
        let seen = visited(chain, dst);
        for (i, r) in chain.rules().iter().enumerate() {
            if may_match(r, dst) {
                assert!(seen.contains(&i), "rule {i} may match {dst} but is skipped");
            }
        }
    }

    fn to_dst(dst: Ipv4Addr) -> PacketKeys<'static> {
        PacketKeys {
            dst,
            dst_groups: None,
            port_groups: None,
        }
    }

    fn visited(chain: &ChainRules, dst: Ipv4Addr) -> Vec<usize> {
        visited_by(chain, &to_dst(dst), None)
    }

    fn visited_by(chain: &ChainRules, pkt: &PacketKeys, guarded: Option<&Positions>) -> Vec<usize> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(i) = chain.next_candidate(from, pkt, guarded) {
            out.push(i);
            from = i + 1;
        }
        out
    }

    /// A /32 rule, a /24, an inverted field, an inverted condition, a rule without a
    /// destination, and a second /32 to the same address.
    fn mixed() -> ChainRules {
        let mut chain = ChainRules::default();
        chain.push(to(1, "10.96.0.1", 32));
        chain.push(to(2, "10.96.0.0", 24));
        let mut inv_field = to(3, "10.96.0.2", 32);
        inv_field.condition.inv_nw_dst = Some(true);
        chain.push(inv_field);
        let mut inv_all = to(4, "10.96.0.3", 32);
        inv_all.condition.cond_invert = Some(true);
        chain.push(inv_all);
        chain.push(rule(5));
        chain.push(to(6, "10.96.0.1", 32));
        chain.push(to(7, "10.96.0.2", 32));
        chain
    }

    #[test]
    fn only_rules_that_can_match_the_destination_are_visited_in_chain_order() {
        let chain = mixed();
        assert_eq!(visited(&chain, ip("10.96.0.1")), [0, 1, 2, 3, 4, 5]);
        assert_eq!(visited(&chain, ip("10.96.0.2")), [1, 2, 3, 4, 6]);
        assert_eq!(visited(&chain, ip("10.96.0.3")), [1, 2, 3, 4]);
        assert_eq!(visited(&chain, ip("192.168.0.1")), [1, 2, 3, 4]);
        for dst in [
            "10.96.0.1",
            "10.96.0.2",
            "10.96.0.3",
            "10.96.0.9",
            "1.2.3.4",
        ] {
            agrees_with_a_scan(&chain, ip(dst));
        }
    }

    #[test]
    fn a_walk_resumes_after_any_position_with_the_destination_it_has_then() {
        let chain = mixed();
        // After a rewrite to 10.96.0.2 past position 0, the rules for the new address
        // from there on, and nothing before.
        let next = |from, dst| chain.next_candidate(from, &to_dst(ip(dst)), None);
        assert_eq!(next(1, "10.96.0.2"), Some(1));
        assert_eq!(next(5, "10.96.0.2"), Some(6));
        assert_eq!(next(5, "10.96.0.1"), Some(5));
        assert_eq!(next(6, "10.96.0.1"), None);
        assert_eq!(next(7, "10.96.0.2"), None);
    }

    #[test]
    fn inserting_and_removing_keep_the_index_in_step() {
        let mut chain = mixed();
        chain.insert(0, to(8, "10.96.0.2", 32));
        chain.insert(3, to(9, "10.96.0.1", 32));
        chain.remove_all(|r| r.id == Uuid::from_u128(105));
        chain.remove_all(|r| r.id == Uuid::from_u128(999));
        assert_eq!(chain.len(), 8);
        let ids: Vec<u128> = chain.rules().iter().map(|r| r.id.as_u128() - 100).collect();
        assert_eq!(ids, [8, 1, 2, 9, 3, 4, 6, 7]);
        for dst in ["10.96.0.1", "10.96.0.2", "10.96.0.3", "1.2.3.4"] {
            agrees_with_a_scan(&chain, ip(dst));
        }
        assert_eq!(visited(&chain, ip("10.96.0.1")), [1, 2, 3, 4, 5, 6]);
    }

    /// A policy chain's head as the translators write it: `return` unless the destination
    /// is in the selected pods' group (ingress) or the packet came from one of their
    /// ports (egress).
    fn head(n: u128, dst_group: bool) -> Rule {
        let mut r = rule(n);
        r.rule_type = RuleType::Return;
        r.position = Some(1);
        let g = Uuid::from_u128(7);
        if dst_group {
            r.condition.ip_addr_group_dst = Some(g);
            r.condition.inv_ip_addr_group_dst = Some(true);
        } else {
            r.condition.port_group = Some(g);
            r.condition.inv_port_group = Some(true);
        }
        r
    }

    #[test]
    fn a_first_rule_returning_unless_one_membership_is_a_guard() {
        let g = Uuid::from_u128(7);
        let mut chain = ChainRules::default();
        chain.push(head(1, true));
        chain.push(rule(2));
        assert_eq!(chain.guard(), Some(Guard::DstInAddrGroup(g)));
        chain.insert(0, rule(3));
        assert_eq!(chain.guard(), None);
        chain.remove_all(|r| r.id == Uuid::from_u128(103));
        assert_eq!(chain.guard(), Some(Guard::DstInAddrGroup(g)));
        let mut egress = ChainRules::default();
        egress.push(head(1, false));
        assert_eq!(egress.guard(), Some(Guard::EnteredThroughPortGroup(g)));
    }

    #[test]
    fn a_return_with_anything_more_or_less_is_no_guard() {
        let mut not_inverted = head(1, true);
        not_inverted.condition.inv_ip_addr_group_dst = None;
        let mut more = head(1, true);
        more.nw_proto = Some(6);
        let mut neutral_but_set = head(1, true);
        neutral_but_set.condition.cond_invert = Some(false);
        let mut both = head(1, true);
        both.condition.port_group = Some(Uuid::from_u128(8));
        both.condition.inv_port_group = Some(true);
        let mut accept = head(1, true);
        accept.rule_type = RuleType::Accept;
        for r in [not_inverted, more, neutral_but_set, both, accept] {
            assert_eq!(guard_of(&r), None, "{r:?}");
        }
    }

    fn group(n: u128) -> Uuid {
        Uuid::from_u128(50 + n)
    }

    fn set(ids: &[Uuid]) -> BTreeSet<Uuid> {
        ids.iter().copied().collect()
    }

    /// A drop to the pods of group 1 (as an isolation rule), one from the ports of group
    /// 2, the same with the field inverted, the same with the condition inverted, and an
    /// unconditional accept.
    fn memberships() -> ChainRules {
        let mut chain = ChainRules::default();
        let mut to_group = rule(1);
        to_group.condition.ip_addr_group_dst = Some(group(1));
        chain.push(to_group.clone());
        let mut from_group = rule(2);
        from_group.condition.port_group = Some(group(2));
        chain.push(from_group.clone());
        let mut inv_field = to_group.clone();
        inv_field.id = Uuid::from_u128(103);
        inv_field.condition.inv_ip_addr_group_dst = Some(true);
        chain.push(inv_field);
        let mut inv_all = from_group;
        inv_all.id = Uuid::from_u128(104);
        inv_all.condition.cond_invert = Some(true);
        chain.push(inv_all);
        chain.push(rule(5));
        chain
    }

    #[test]
    fn a_rule_needing_a_membership_is_visited_only_for_a_member() {
        let chain = memberships();
        let (g1, g2) = (set(&[group(1)]), set(&[group(2)]));
        let keys = |dst_groups, port_groups| PacketKeys {
            dst: ip("10.200.0.10"),
            dst_groups,
            port_groups,
        };
        assert_eq!(visited_by(&chain, &keys(None, None), None), [2, 3, 4]);
        assert_eq!(
            visited_by(&chain, &keys(Some(&g1), None), None),
            [0, 2, 3, 4]
        );
        assert_eq!(
            visited_by(&chain, &keys(None, Some(&g2)), None),
            [1, 2, 3, 4]
        );
        assert_eq!(
            visited_by(&chain, &keys(Some(&g2), Some(&g1)), None),
            [2, 3, 4]
        );
    }

    /// An ALLOW chain as the translators write it: a jump per policy. Chain 11 is guarded
    /// by group 1's addresses, 12 by group 2's ports, 13 has no guard, 14 is guarded but
    /// named by a second jump elsewhere, 15 does not exist (no guard); the jump at 5, to
    /// 16 guarded by group 1's addresses, has a condition of its own (which needs no
    /// membership: the jump does nothing without the target's).
    #[test]
    fn jumps_are_indexed_by_their_targets_guards_when_nothing_else_can_tell() {
        let jump = |n: u128, target: u128| {
            let mut r = rule(n);
            r.rule_type = RuleType::Jump;
            r.jump_chain_id = Some(Uuid::from_u128(target));
            r
        };
        let mut chain = ChainRules::default();
        for (n, t) in [(0, 11), (1, 12), (2, 13), (3, 14), (4, 15)] {
            chain.push(jump(n, t));
        }
        let mut conditioned = jump(5, 16);
        conditioned.nw_proto = Some(6);
        chain.push(conditioned);
        assert!(chain.has_jumps());
        let guard = |t: Uuid| match t.as_u128() {
            11 | 14 | 16 => Some(Guard::DstInAddrGroup(group(1))),
            12 => Some(Guard::EnteredThroughPortGroup(group(2))),
            _ => None,
        };
        let jumps_to = |t: Uuid| if t.as_u128() == 14 { 2 } else { 1 };
        let guarded = guarded_jumps(&chain, guard, jumps_to);
        let (g1, g2) = (set(&[group(1)]), set(&[group(2)]));
        let keys = |dst_groups, port_groups| PacketKeys {
            dst: ip("10.200.0.10"),
            dst_groups,
            port_groups,
        };
        let none = keys(None, None);
        assert_eq!(visited_by(&chain, &none, Some(&guarded)), [2, 3, 4]);
        assert_eq!(
            visited_by(&chain, &keys(Some(&g1), None), Some(&guarded)),
            [0, 2, 3, 4, 5]
        );
        assert_eq!(
            visited_by(&chain, &keys(None, Some(&g2)), Some(&guarded)),
            [1, 2, 3, 4]
        );
        // Without the guarded index every jump is a candidate.
        assert_eq!(visited_by(&chain, &none, None), [0, 1, 2, 3, 4, 5]);
    }
}
