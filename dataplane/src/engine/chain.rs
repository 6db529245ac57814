//! Filters, chains and NAT rules (midolman `simulation/Chain.scala`, `rules/*Rule.java`,
//! `state/NatState.scala`).
//!
//! - A filter runs one chain (`Chain.process`): an `accept`, `drop` or `reject` decides;
//!   anything else (the chain runs out, a `return`) lets the packet through.
//! - Rules are tried in order; a rule whose condition holds applies its action. `jump`
//!   runs the target chain and goes on unless it decided (its `return` comes back). A
//!   jump to a chain already traversed in this filter's evaluation, or to a chain that
//!   does not exist, continues (`Chain.jump`); the list is cleared for every filter.
//! - NAT rules translate and then act as their `flowAction`. A forward NAT rule whose
//!   targets name ports is dynamic: it keeps a binding per flow and device and a return
//!   key for the reverse rules (`DynamicForwardNatRule`, `NatState`); without ports it is
//!   static (a floating IP: `StaticForwardNatRule`): it rewrites the address and keeps
//!   no state. A reverse rule acts only when this device holds state for the packet. NAT
//!   applies to TCP, UDP, ICMP echo and ICMP errors (whose quoted packet is translated
//!   too); for anything else a dynamic rule does not apply and the chain goes on.
//! - Every target a random choice could pick is a separate path (`Choices`).

use std::net::Ipv4Addr;

use midonet_translators::model::{FlowAction, NatTarget, Rule, RuleType};
use rustc_hash::FxHashSet;
use uuid::Uuid;

use super::{End, Step, Walk};
use crate::chainrules::{ChainRules, Guard, PacketKeys};
use crate::packet::{Protocol, Quoted, SocketV4};
use crate::state::{NatKey, NatKeyType};

/// The most addresses one NAT target range contributes to the explored choices.
const MAX_RANGE_ADDRESSES: u32 = 64;

/// What a chain evaluation decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Accept,
    Drop,
    Reject,
    Return,
    Continue,
}

/// Why a filter stopped the packet.
pub(super) enum Stop {
    /// Dropped by a rule; the reason names it.
    Dropped(String),
    /// Rejected by a rule: the device decides whether it answers with an ICMP error.
    Rejected(String),
    /// The walk ended otherwise (the model refused a rule).
    End(End),
}

/// Whether a forward NAT rule is static: no target names a port.
pub(crate) fn is_static_nat(rule: &Rule) -> bool {
    rule.nat_targets
        .as_deref()
        .unwrap_or_default()
        .iter()
        .all(|t| t.port_from.unwrap_or(0) == 0 && t.port_to.unwrap_or(0) == 0)
}

impl Walk<'_, '_, '_> {
    /// Runs a filter chain (`InAndOutFilters.doFilters`).
    pub(super) fn filter(&mut self, chain: Option<Uuid>, what: &str) -> Result<(), Stop> {
        let Some(chain) = chain else { return Ok(()) };
        let topo = self.topo();
        self.sh.consulted.read(chain);
        if !topo.chains.contains_key(&chain) {
            let why =
                format!("{what}: chain {chain} does not exist (MidoNet refuses such a reference)");
            return Err(Stop::End(self.unsupported(Some(self.current_device), why)));
        }
        let name = || {
            topo.name_of(chain)
                .unwrap_or_else(|| format!("chain {chain}"))
        };
        self.rule_hop(Step::Rule, chain, None, || format!("{what}: {}", name()));
        let mut traversed = std::mem::take(&mut self.chains_traversed);
        traversed.clear();
        let result = self.run_chain(chain, &mut traversed);
        self.chains_traversed = traversed;
        let (decision, rule) = match result {
            Ok(d) => d,
            Err(end) => return Err(Stop::End(end)),
        };
        let by = |verb: &str| match rule {
            Some(r) => format!("{verb} by {what} ({}, rule {r})", name()),
            None => format!("{verb} by {what} ({})", name()),
        };
        match decision {
            Decision::Accept | Decision::Return | Decision::Continue => Ok(()),
            Decision::Drop => Err(Stop::Dropped(by("dropped"))),
            Decision::Reject => Err(Stop::Rejected(by("rejected"))),
        }
    }

    /// `Chain.apply`: the decision and the rule that made it.
    fn run_chain(
        &mut self,
        chain: Uuid,
        traversed: &mut FxHashSet<Uuid>,
    ) -> Result<(Decision, Option<Uuid>), End> {
        let topo = self.topo();
        self.sh.consulted.chain(chain);
        self.tag(chain);
        traversed.insert(chain);
        let Some(rules) = topo.chain_rules(chain) else {
            return Ok((Decision::Continue, None));
        };
        // Only the rules that can match the packet (as it is at each step: a NAT rule
        // that continues may rewrite its destination), in order (`chainrules`).
        let guarded = self
            .may_skip_guarded_jumps()
            .then(|| topo.guarded_jumps(chain))
            .flatten();
        if guarded.is_some() {
            self.sh.consulted.guarded(chain);
        }
        let port_groups = self.port_groups;
        let keys_now = |dst: Ipv4Addr| PacketKeys {
            dst,
            dst_groups: topo.addr_groups_of.get(&dst),
            port_groups,
        };
        let mut keys = keys_now(self.pkt.tuple.dst.ip);
        let mut from = 0;
        loop {
            if keys.dst != self.pkt.tuple.dst.ip {
                keys = keys_now(self.pkt.tuple.dst.ip);
            }
            let Some(at) = rules.next_candidate(from, &keys, guarded.as_deref()) else {
                break;
            };
            from = at + 1;
            let rule = &rules.rules()[at];
            if let Some(why) = rules.refusal(at) {
                let reason = format!("rule {} of chain {chain}: {why}", rule.id);
                self.rule_hop(Step::Unsupported, chain, Some(rule.id), reason.clone());
                return Err(End::Unsupported {
                    reason,
                    packet: self.pkt,
                });
            }
            if !self.matches(rule) {
                continue;
            }
            let decision = match rule.rule_type {
                RuleType::Accept => Decision::Accept,
                RuleType::Drop => Decision::Drop,
                RuleType::Reject => Decision::Reject,
                RuleType::Return => Decision::Return,
                RuleType::Jump => match self.jump(chain, rule, traversed)? {
                    (Decision::Continue, _) => continue,
                    (d, by) => return Ok((d, by)),
                },
                RuleType::Dnat | RuleType::Snat => {
                    if !self.forward_nat(rule, chain) {
                        continue;
                    }
                    flow_decision(rule.flow_action)
                }
                RuleType::RevDnat | RuleType::RevSnat => {
                    if !self.reverse_nat(rule, chain) {
                        continue;
                    }
                    flow_decision(rule.flow_action)
                }
            };
            if decision != Decision::Continue {
                self.rule_hop(Step::Rule, chain, Some(rule.id), || {
                    format!("{} → {}", rule.rule_type, decision_name(decision))
                });
                return Ok((decision, Some(rule.id)));
            }
        }
        Ok((Decision::Continue, None))
    }

    /// `Chain.jump`: the target's decision, or `Continue` when it returned, ran out, was
    /// traversed already in this evaluation, or does not exist.
    fn jump(
        &mut self,
        chain: Uuid,
        rule: &Rule,
        traversed: &mut FxHashSet<Uuid>,
    ) -> Result<(Decision, Option<Uuid>), End> {
        let topo = self.topo();
        let Some(target) = rule.jump_chain_id else {
            return Ok((Decision::Continue, None));
        };
        self.sh.consulted.read(target);
        if !topo.chains.contains_key(&target) {
            self.rule_hop(Step::Rule, chain, Some(rule.id), || {
                format!("jump to missing chain {target}: ignored (midolman continues)")
            });
            return Ok((Decision::Continue, None));
        }
        if traversed.contains(&target) {
            self.rule_hop(Step::Rule, chain, Some(rule.id), || {
                format!("jump to chain {target}, already traversed: continues")
            });
            return Ok((Decision::Continue, None));
        }
        // Nobody sees the hops nor the chains consulted: a jump known to come straight
        // back changes nothing but the list of chains traversed (`chainrules::Guard`).
        if !self.sh.record && self.sh.consulted.off && self.returns_at_once(target) {
            traversed.insert(target);
            self.tag(target);
            return Ok((Decision::Continue, None));
        }
        let name = || {
            topo.name_of(target)
                .unwrap_or_else(|| format!("chain {target}"))
        };
        self.rule_hop(Step::Rule, chain, Some(rule.id), || {
            format!("jump to {}", name())
        });
        match self.run_chain(target, traversed)? {
            (Decision::Return | Decision::Continue, _) => {
                self.rule_hop(Step::Rule, target, None, || format!("back from {}", name()));
                Ok((Decision::Continue, None))
            }
            other => Ok(other),
        }
    }

    /// Whether a jump to a guard the packet does not pass may be skipped unvisited: nobody
    /// sees the hops (`Topology::guarded_jumps` indexes only the jumps whose skipping
    /// nothing else could tell; the chains consulted note the chain, so that `check`
    /// weighs the skipped guards).
    fn may_skip_guarded_jumps(&self) -> bool {
        !self.sh.record
    }

    /// Whether `chain` starts with a guard that returns this packet.
    fn returns_at_once(&self, chain: Uuid) -> bool {
        let topo = self.topo();
        match topo.chain_rules(chain).and_then(ChainRules::guard) {
            Some(Guard::DstInAddrGroup(g)) => !topo
                .ip_addr_groups
                .get(&g)
                .is_some_and(|s| s.contains(&self.pkt.tuple.dst.ip)),
            Some(Guard::EnteredThroughPortGroup(g)) => {
                !self.port_groups.is_some_and(|s| s.contains(&g))
            }
            None => false,
        }
    }

    /// `NatState.isNatSupported`: TCP, UDP, ICMP echo, ICMP errors with data.
    fn nat_supported(&self) -> bool {
        if self.pkt.is_arp() {
            return false;
        }
        match self.pkt.tuple.icmp {
            None => true,
            Some(m) if m.is_error() => m.about.is_some(),
            Some(m) => matches!(m.icmp_type, 0 | 8),
        }
    }

    /// Applies a `dnat`/`snat` rule; false if it does not apply (the chain goes on).
    fn forward_nat(&mut self, rule: &Rule, chain: Uuid) -> bool {
        if is_static_nat(rule) {
            self.static_nat(rule, chain);
            return true;
        }
        if !self.nat_supported() {
            return false;
        }
        let dnat = rule.rule_type == RuleType::Dnat;
        let ty = if dnat {
            NatKeyType::FwdDnat
        } else {
            NatKeyType::FwdSnat
        };
        let key = NatKey::of(ty, &self.pkt.tuple, self.current_device);
        let binding = match self.sh.state.nat_get(&key) {
            Some(b) => b,
            None => {
                let icmp = self.pkt.tuple.protocol == Protocol::Icmp;
                let candidates = nat_candidates(
                    rule.nat_targets.as_deref().unwrap_or_default(),
                    icmp.then_some(key.tuple.dst.port),
                );
                let pick = if candidates.len() > 1 {
                    self.sh.choices.choose(candidates.len())
                } else {
                    0
                };
                let Some(b) = candidates.get(pick).copied() else {
                    return false;
                };
                self.sh.state.nat_put(key, b);
                b
            }
        };
        // An ICMP message keeps its identifier: only the address is translated.
        let icmp = self.pkt.tuple.icmp.is_some();
        let side = if dnat {
            &mut self.pkt.tuple.dst
        } else {
            &mut self.pkt.tuple.src
        };
        let from = *side;
        side.ip = binding.ip;
        if !icmp {
            side.port = binding.port;
        }
        let to = *side;
        if dnat {
            self.nw_dst_rewritten = true;
        }
        self.rule_hop(Step::Nat, chain, Some(rule.id), || {
            format!("{} {from} → {to}", rule.rule_type)
        });
        true
    }

    /// A static (floating IP) rule: the address only, no state; for an ICMP error the
    /// quoted packet too (`StaticForwardNatRule`).
    fn static_nat(&mut self, rule: &Rule, chain: Uuid) {
        let Some(target) = rule
            .nat_targets
            .as_deref()
            .unwrap_or_default()
            .first()
            .and_then(|t| t.address_from)
        else {
            return;
        };
        let c = &rule.condition;
        let before = self.pkt.tuple;
        if rule.rule_type == RuleType::Dnat {
            if c.icmp_data_src_ip_address.is_none() && c.icmp_data_dst_ip_address.is_none() {
                self.pkt.tuple.dst.ip = target;
                self.nw_dst_rewritten = true;
            }
            match (c.icmp_data_dst_ip_address, rule.nw_dst_address) {
                (Some(from), _) => {
                    self.quoted_rewrite(false, from, target, None);
                }
                (None, Some(from)) => {
                    self.quoted_rewrite(true, from, target, None);
                }
                (None, None) => {}
            }
        } else {
            self.pkt.tuple.src.ip = target;
            if let Some(from) = rule.nw_src_address {
                self.quoted_rewrite(false, from, target, None);
            }
        }
        let after = self.pkt.tuple;
        self.rule_hop(Step::Nat, chain, Some(rule.id), || {
            format!("static {}: {before} → {after}", rule.rule_type)
        });
    }

    /// Rewrites the packet an ICMP error quotes: its source (`src`) or destination
    /// address `from` to `to` (and port, if given and the quoted packet has ports).
    /// Whether it changed anything.
    fn quoted_rewrite(
        &mut self,
        src: bool,
        from: Ipv4Addr,
        to: Ipv4Addr,
        port: Option<u16>,
    ) -> bool {
        let Some(m) = self.pkt.tuple.icmp.as_mut().filter(|m| m.is_error()) else {
            return false;
        };
        let Some(q) = m.about.as_mut() else {
            return false;
        };
        let has_ports = q.protocol != Protocol::Icmp;
        let side = if src { &mut q.src } else { &mut q.dst };
        if side.ip != from {
            return false;
        }
        side.ip = to;
        if let (Some(p), true) = (port, has_ports) {
            side.port = p;
        }
        true
    }

    /// Applies a `rev_dnat`/`rev_snat` rule; false if this device holds no state for it.
    fn reverse_nat(&mut self, rule: &Rule, chain: Uuid) -> bool {
        if !self.nat_supported() {
            return false;
        }
        let dnat = rule.rule_type == RuleType::RevDnat;
        let ty = if dnat {
            NatKeyType::RevDnat
        } else {
            NatKeyType::RevSnat
        };
        let key = NatKey::of(ty, &self.pkt.tuple, self.current_device);
        let Some(original) = self.sh.state.nat_get(&key) else {
            return false;
        };
        let before = self.pkt.tuple;
        let changed = if self.pkt.tuple.icmp.is_some() {
            self.reverse_icmp(dnat, key.tuple, original)
        } else {
            // A reverse DNAT restores the reply's source, a reverse SNAT its destination.
            if dnat {
                self.pkt.tuple.src = original;
            } else {
                self.pkt.tuple.dst = original;
                self.nw_dst_rewritten = true;
            }
            true
        };
        if changed {
            let after = self.pkt.tuple;
            self.rule_hop(Step::Nat, chain, Some(rule.id), || {
                format!("{} {before} → {after}", rule.rule_type)
            });
        }
        changed
    }

    /// Reverse NAT of an ICMP message (`reverseDnatTransformation`,
    /// `reverseSnatTransformation`): the outer address if it is the translated one, and
    /// the quoted packet of an error.
    fn reverse_icmp(&mut self, dnat: bool, key: Quoted, original: SocketV4) -> bool {
        if dnat {
            let outer = self.pkt.tuple.src.ip == key.src.ip;
            if outer {
                self.pkt.tuple.src.ip = original.ip;
            }
            let inner = self.quoted_rewrite(false, key.src.ip, original.ip, Some(original.port));
            outer || inner
        } else {
            let outer = self.pkt.tuple.dst.ip == key.dst.ip;
            if outer {
                self.pkt.tuple.dst.ip = original.ip;
                self.nw_dst_rewritten = true;
            }
            let inner = self.quoted_rewrite(true, key.dst.ip, original.ip, Some(original.port));
            outer || inner
        }
    }
}

fn flow_decision(action: Option<FlowAction>) -> Decision {
    match action.unwrap_or(FlowAction::Accept) {
        FlowAction::Accept => Decision::Accept,
        FlowAction::Continue => Decision::Continue,
        FlowAction::Return => Decision::Return,
    }
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Accept => "accept",
        Decision::Drop => "drop",
        Decision::Reject => "reject",
        Decision::Return => "return",
        Decision::Continue => "continue",
    }
}

/// Every endpoint a dynamic NAT rule's targets can pick (midolman picks a target, an
/// address and a port at random: the model explores each target and address, with the
/// first port of the target's range; an ICMP message keeps `icmp_port`, its identifier).
fn nat_candidates(targets: &[NatTarget], icmp_port: Option<u16>) -> Vec<SocketV4> {
    let mut out = Vec::new();
    for t in targets {
        let (Some(from), Some(to)) = (t.address_from, t.address_to) else {
            continue;
        };
        let (from_u, to_u) = (u32::from(from), u32::from(to));
        if to_u < from_u {
            continue;
        }
        let port = icmp_port.unwrap_or(t.port_from.unwrap_or(0));
        for a in from_u..=to_u.min(from_u.saturating_add(MAX_RANGE_ADDRESSES - 1)) {
            let s = SocketV4::new(Ipv4Addr::from(a), port);
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}
