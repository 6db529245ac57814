//! The resources of one policy generation, in push order (see the crate's `MAPPING.md`,
//! "NetworkPolicy"): the generation's chains and rules, its jumps from the shared ALLOW
//! chains, and only then its isolation drops, so that a new policy never drops what it
//! allows.
//!
//! Every ID descends from the generation's ([`Generation::id`]), itself from a hash of
//! everything the chains match: a changed plan is a new generation under new IDs, never a
//! rule changed in place (MidoNet cannot update rules). The isolation drops are the
//! exception: they are named after the group they drop for, so an unchanged selector keeps
//! its drop across generations.

use uuid::Uuid;

use super::{entry, PeerMatch, PortMatch, RulePlan, IPV4};
use crate::config::TranslatorConfig;
use crate::filters::tenant_chain;
use crate::ids::sub_id;
use crate::model::{Ipv4Cidr, PortRange, Resource, Rule, RuleType};
use crate::topology::{allow_chain_id, isolate_chain_id, Direction};

/// The groups of the pods a policy selects, by ID.
pub(super) struct Selected {
    /// Their addresses: what ingress rules protect.
    pub addresses: Uuid,
    /// Their ports: where egress rules' traffic comes from.
    pub ports: Uuid,
}

/// One generation of a policy.
pub(super) struct Generation<'a> {
    /// The policy's base ID (`id_for_key("NetworkPolicy", key)`).
    pub policy: Uuid,
    /// The generation's ID, below the policy's.
    pub id: Uuid,
    /// 16 hex digits naming the generation.
    pub hash: &'a str,
    /// `namespace/name`, in the chains' names.
    pub key: &'a str,
}

/// The chains and rules of a generation, each list in push order.
#[derive(Default)]
struct Emitted {
    chains: Vec<Resource>,
    rules: Vec<Resource>,
}

/// Everything the generation pushes, in push order.
pub(super) fn resources(
    cfg: &TranslatorConfig,
    generation: &Generation,
    plans: &[(Direction, Vec<RulePlan>)],
    selected: &Selected,
) -> Vec<Resource> {
    let mut emitted = Emitted::default();
    let mut jumps = Vec::new();
    let mut isolation = Vec::new();
    for (dir, plan) in plans {
        let chain = direction_chain(cfg, generation, *dir, plan, selected, &mut emitted);
        jumps.push(allow_jump(cfg, generation, *dir, chain));
        isolation.push(isolation_drop(cfg, generation, *dir, selected));
    }
    let mut resources = emitted.chains;
    resources.extend(emitted.rules);
    resources.extend(jumps);
    resources.extend(isolation);
    resources
}

/// `IN` or `OUT`, as in the generation's chain names and IDs.
fn tag(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => "IN",
        Direction::Egress => "OUT",
    }
}

/// The generation's chain of `dir`, with its rules and the peer chains they jump to; its
/// ID.
fn direction_chain(
    cfg: &TranslatorConfig,
    generation: &Generation,
    dir: Direction,
    plan: &[RulePlan],
    selected: &Selected,
    out: &mut Emitted,
) -> Uuid {
    let tag = tag(dir);
    let name = format!("KUBE-NP-{tag}-{}-{}", generation.key, generation.hash);
    let chain = sub_id(generation.id, &format!("{tag}/Chain"));
    out.chains.push(tenant_chain(cfg, chain, name.clone()));
    let mut pos = Positions::default();
    out.rules
        .push(pos.place(not_selected(chain, dir, selected)));
    for (i, rule) in plan.iter().enumerate() {
        let peers = sub_id(chain, &format!("Rule/{i}/Peers"));
        out.chains
            .push(tenant_chain(cfg, peers, format!("{name}-{i}")));
        for jump in port_jumps(chain, i, peers, rule.ports.as_deref()) {
            out.rules.push(pos.place(jump));
        }
        peer_rules(cfg, dir, &format!("{name}-{i}"), peers, &rule.peers, out);
    }
    chain
}

/// The head of a direction's chain: a packet not to (ingress) or from (egress) a selected
/// pod leaves the chain, nothing of the policy applies to it.
fn not_selected(chain: Uuid, dir: Direction, selected: &Selected) -> Rule {
    let mut head = Rule::new(chain, sub_id(chain, "Not Selected"), RuleType::Return);
    match dir {
        Direction::Ingress => {
            head.condition.ip_addr_group_dst = Some(selected.addresses);
            head.condition.inv_ip_addr_group_dst = Some(true);
        }
        Direction::Egress => {
            head.condition.port_group = Some(selected.ports);
            head.condition.inv_port_group = Some(true);
        }
    }
    head
}

/// The jumps of rule `i` from the direction's chain to the rule's peer chain: one per port
/// clause, or one for every port and protocol.
fn port_jumps(chain: Uuid, i: usize, peers: Uuid, ports: Option<&[PortMatch]>) -> Vec<Rule> {
    let Some(ports) = ports else {
        return vec![Rule::jump(
            chain,
            sub_id(chain, &format!("Rule/{i}/Any Port")),
            peers,
        )];
    };
    ports
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut jump = Rule::jump(chain, sub_id(chain, &format!("Rule/{i}/Port/{k}")), peers);
            jump.dl_type = Some(IPV4);
            jump.nw_proto = p.proto;
            if let Some((start, end)) = p.range {
                jump.tp_dst = Some(PortRange {
                    start: Some(start),
                    end: Some(end),
                    ..PortRange::default()
                });
            }
            if let Some(ip) = p.pod_ip {
                jump.nw_dst_address = Some(ip);
                jump.nw_dst_length = Some(32);
            }
            jump
        })
        .collect()
}

/// The rules of a rule's peer chain (`name` is its name): one accept per peer, or for an
/// ipBlock with exceptions a jump to a chain of its own that returns on each exception
/// before it accepts the block.
fn peer_rules(
    cfg: &TranslatorConfig,
    dir: Direction,
    name: &str,
    chain: Uuid,
    peers: &[PeerMatch],
    out: &mut Emitted,
) {
    let mut pos = Positions::default();
    for (j, peer) in peers.iter().enumerate() {
        let id = sub_id(chain, &format!("Peer/{j}"));
        let rule = match peer {
            PeerMatch::Any => Rule::new(chain, id, RuleType::Accept),
            PeerMatch::Group(group) => {
                let mut accept = Rule::new(chain, id, RuleType::Accept);
                match dir {
                    Direction::Ingress => accept.condition.ip_addr_group_src = Some(*group),
                    Direction::Egress => accept.condition.ip_addr_group_dst = Some(*group),
                }
                accept
            }
            PeerMatch::Block { cidr, except } if except.is_empty() => {
                let mut accept = Rule::new(chain, id, RuleType::Accept);
                set_net(&mut accept, dir, *cidr);
                accept
            }
            PeerMatch::Block { cidr, except } => {
                let block = sub_id(chain, &format!("Peer/{j}/Block"));
                out.chains
                    .push(tenant_chain(cfg, block, format!("{name}-{j}")));
                out.rules.extend(block_rules(dir, block, *cidr, except));
                Rule::jump(chain, id, block)
            }
        };
        out.rules.push(pos.place(rule));
    }
}

/// The chain of an ipBlock with exceptions: return on each exception, then accept the
/// block.
fn block_rules(dir: Direction, block: Uuid, cidr: Ipv4Cidr, except: &[Ipv4Cidr]) -> Vec<Resource> {
    let mut pos = Positions::default();
    let mut rules: Vec<Resource> = except
        .iter()
        .enumerate()
        .map(|(e, ex)| {
            let mut r = Rule::new(
                block,
                sub_id(block, &format!("Except/{e}")),
                RuleType::Return,
            );
            set_net(&mut r, dir, *ex);
            pos.place(r)
        })
        .collect();
    let mut accept = Rule::new(block, sub_id(block, "Accept"), RuleType::Accept);
    set_net(&mut accept, dir, cidr);
    rules.push(pos.place(accept));
    rules
}

/// The jump from the shared ALLOW chain of `dir` into the generation's `chain`. Order
/// inside the shared chains does not matter: the head is as good as any place.
fn allow_jump(
    cfg: &TranslatorConfig,
    generation: &Generation,
    dir: Direction,
    chain: Uuid,
) -> Resource {
    let mut jump = Rule::jump(
        allow_chain_id(cfg, dir),
        sub_id(generation.id, &format!("{}/Jump", tag(dir))),
        chain,
    );
    jump.position = Some(1);
    entry(jump)
}

/// The drop of IPv4 to (ingress) or from (egress) the selected pods in the shared ISOLATE
/// chain of `dir`. Named after the group it drops for: a new selector is a new group, and
/// so a new rule (rules are never updated in place).
fn isolation_drop(
    cfg: &TranslatorConfig,
    generation: &Generation,
    dir: Direction,
    selected: &Selected,
) -> Resource {
    let group = match dir {
        Direction::Ingress => selected.addresses,
        Direction::Egress => selected.ports,
    };
    let mut drop = Rule::new(
        isolate_chain_id(cfg, dir),
        sub_id(generation.policy, &format!("Isolate {}/{group}", tag(dir))),
        RuleType::Drop,
    );
    drop.position = Some(1);
    drop.dl_type = Some(IPV4);
    match dir {
        Direction::Ingress => drop.condition.ip_addr_group_dst = Some(group),
        Direction::Egress => drop.condition.port_group = Some(group),
    }
    entry(drop)
}

/// Matches `cidr` as the source (ingress) or destination (egress) of IPv4 traffic.
fn set_net(r: &mut Rule, dir: Direction, cidr: Ipv4Cidr) {
    r.dl_type = Some(IPV4);
    match dir {
        Direction::Ingress => {
            r.nw_src_address = Some(cidr.addr);
            r.nw_src_length = Some(cidr.prefix_len);
        }
        Direction::Egress => {
            r.nw_dst_address = Some(cidr.addr);
            r.nw_dst_length = Some(cidr.prefix_len);
        }
    }
}

/// Ascending positions of the rules of one chain, pushed in that order.
#[derive(Default)]
struct Positions(u32);

impl Positions {
    fn place(&mut self, mut r: Rule) -> Resource {
        self.0 += 1;
        r.position = Some(self.0);
        entry(r)
    }
}
