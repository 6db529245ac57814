//! A chain's rules in evaluation order, with an index from a destination address to the
//! rules that can match only packets sent to it.
//!
//! Why: the walk evaluates a chain rule by rule, and a cluster's Service chain holds a jump
//! per Service port, each matching one cluster IP. Scanned, a packet to one Service tests
//! every other Service's rule, at every hop through the chain and on every path a NAT
//! choice explores; that scan was most of the time `check` and the flow probe spend.
//!
//! A rule whose condition requires one destination address (`nwDstAddress` with a /32
//! length, neither that field nor the whole condition inverted) cannot match a packet to
//! any other address: for such a packet it is skipped without being tested. Every other
//! rule is a candidate for every packet. Candidates are visited in the chain's order, and
//! the caller asks for the next one with the packet's destination *now* (a NAT rule that
//! lets the evaluation continue may have rewritten it), so the rules that match, and the
//! first of them, are those a scan finds.
//!
//! A chain may also start with a guard: a `return` whose only condition is an inverted
//! membership (not a destination of an IP address group; not entered through a port of a
//! port group), as each NetworkPolicy's chain does for the pods it does not select. A
//! jump to it comes straight back for a packet that is not a member, so a walk that
//! records neither hops nor the chains it consulted may skip that jump (`Guard`).

use std::net::Ipv4Addr;

use midonet_translators::model::{Rule, RuleType};
use rustc_hash::FxHashMap;
use uuid::Uuid;

/// A chain's rules and the destination index over them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChainRules {
    rules: Vec<Rule>,
    /// Destination → positions of the rules that match only packets to it, ascending.
    by_dst: FxHashMap<Ipv4Addr, Vec<usize>>,
    /// Positions of every other rule, ascending.
    unindexed: Vec<usize>,
    /// What the first rule returns on, if it is a guard.
    guard: Option<Guard>,
    /// Why the model cannot evaluate a rule, by position (see
    /// `engine::condition::rule_refusal`).
    refused: FxHashMap<usize, String>,
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

    /// Whether the chain has a rule with id `id`.
    pub(crate) fn contains(&self, id: Uuid) -> bool {
        self.rules.iter().any(|r| r.id == id)
    }

    /// Removes the rule with id `id`, if there is one.
    pub(crate) fn remove(&mut self, id: Uuid) {
        let before = self.rules.len();
        self.rules.retain(|r| r.id != id);
        if self.rules.len() != before {
            self.reindex();
        }
    }

    /// The position of the first rule at or after `from` that can match a packet to
    /// `dst`.
    pub(crate) fn next_candidate(&self, from: usize, dst: Ipv4Addr) -> Option<usize> {
        // Nothing indexed (most chains are short): every rule is a candidate, and the
        // look-ups below would cost more than the tests they save.
        if self.by_dst.is_empty() {
            return (from < self.rules.len()).then_some(from);
        }
        let first_from = |positions: &[usize]| {
            positions
                .get(positions.partition_point(|&p| p < from))
                .copied()
        };
        let for_dst = self.by_dst.get(&dst).and_then(|p| first_from(p));
        let any = first_from(&self.unindexed);
        match (for_dst, any) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn index(&mut self, at: usize, rule: &Rule) {
        if let Some(why) = crate::engine::rule_refusal(rule) {
            self.refused.insert(at, why);
        }
        match only_destination(rule) {
            Some(dst) => self.by_dst.entry(dst).or_default().push(at),
            None => self.unindexed.push(at),
        }
    }

    fn reindex(&mut self) {
        self.by_dst.clear();
        self.unindexed.clear();
        self.refused.clear();
        self.guard = self.rules.first().and_then(guard_of);
        let rules = std::mem::take(&mut self.rules);
        for (at, rule) in rules.iter().enumerate() {
            self.index(at, rule);
        }
        self.rules = rules;
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

    fn visited(chain: &ChainRules, dst: Ipv4Addr) -> Vec<usize> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(i) = chain.next_candidate(from, dst) {
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
        assert_eq!(chain.next_candidate(1, ip("10.96.0.2")), Some(1));
        assert_eq!(chain.next_candidate(5, ip("10.96.0.2")), Some(6));
        assert_eq!(chain.next_candidate(5, ip("10.96.0.1")), Some(5));
        assert_eq!(chain.next_candidate(6, ip("10.96.0.1")), None);
        assert_eq!(chain.next_candidate(7, ip("10.96.0.2")), None);
    }

    #[test]
    fn inserting_and_removing_keep_the_index_in_step() {
        let mut chain = mixed();
        chain.insert(0, to(8, "10.96.0.2", 32));
        chain.insert(3, to(9, "10.96.0.1", 32));
        chain.remove(Uuid::from_u128(105));
        chain.remove(Uuid::from_u128(999));
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
        chain.remove(Uuid::from_u128(103));
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
}
