//! A router's L4 load balancer (midolman `simulation/LoadBalancer.scala`, `Pool.scala`,
//! `PoolMember.scala`, `Vip.scala`; `RouterBase.preRouting`/`postRouting`; sticky keys in
//! `state/NATState.scala`). Tests behind it: midolman `simulation/PoolTest.scala`,
//! `VipTest.scala`, `layer4/NatTest.scala` (sticky cases).
//!
//! - Inbound (`processInbound`), after the router's ARP handling and before its inbound
//!   filter, when the router names a load balancer that is administratively up: the first
//!   VIP (pools, then VIPs, in id order) that is up and matches the packet's destination
//!   address and port, TCP only (`Vip.matches`), sends the packet to its pool:
//!   - the pool is up when it is administratively up and has an active member (weight
//!     above 0, administratively up, status `ACTIVE`: `PoolMember.isUp`);
//!   - an up pool keeps an existing binding (`FWD_STICKY_DNAT` for a sticky VIP, whose key
//!     leaves out the client's port, else `FWD_DNAT`) while its member is valid (sticky:
//!     active; else active or administratively down, to let a connection finish:
//!     `Pool.isValidBackend`), else forgets it; without a valid binding it binds to a
//!     member picked at random among the active ones (`WeightedSelector`: every active
//!     member is a path of the trace, the weights only weigh them). The packet is
//!     DNATed to the member and the inbound filter is skipped (ACCEPT);
//!   - a pool that is not up drops a sticky VIP's packet, and keeps a non-sticky VIP's
//!     connection only on a valid existing binding (`maintainConnectionIfExists`): DROP
//!     otherwise, which drops the packet.
//!
//!   No VIP matching (or the load balancer down): the inbound filter runs as usual.
//! - Outbound (`processOutbound`), after routing and before the outbound filter: a reply
//!   finds the return key of a non-sticky binding (when the load balancer has a
//!   non-sticky VIP), else of a sticky one (when it has a sticky VIP), and its source is
//!   translated back to the VIP. Then midolman decides ACCEPT or DROP (the load balancer
//!   down, no VIP matching the translated source, the member no longer valid), but
//!   `RouterBase.postRouting` skips the outbound filter for both and sends the packet on:
//!   the model does the same and says which it was. No return key: the filter runs.
//!
//! Refused (the model does not know them): a pool with a health monitor (its members'
//! status comes from the monitor), and a pool carrying a session persistence of its own
//! (REST v1 pools have none; midolman would let it override the VIPs'). Absent booleans
//! and a member's absent `status` are what MidoNet stores after a REST create (up,
//! `ACTIVE`); an absent weight is MidoNet's default 1.

use midonet_translators::model::{
    LbStatus, LoadBalancer, Pool, PoolMember, SessionPersistence, Vip,
};
use uuid::Uuid;

use super::{End, Step, Walk};
use crate::packet::{Protocol, SocketV4};
use crate::state::{NatKey, NatKeyType};
use crate::topology::Topology;

/// What the load balancer decided (`RuleResult.Action`).
pub(super) enum Lb {
    /// Not for the load balancer: the device's filter runs.
    Continue,
    /// Handled: the device's filter is skipped.
    Accept,
    /// Inbound: the packet is dropped for this reason. Outbound: handled too (the
    /// filter is skipped), the reason says why midolman decided DROP.
    Drop(String),
    /// The model refused something it does not simulate.
    Refused(End),
}

fn is_sticky(vip: &Vip) -> bool {
    vip.session_persistence == Some(SessionPersistence::SourceIp)
}

fn member_active(m: &PoolMember) -> bool {
    m.weight.unwrap_or(1) > 0
        && m.admin_state_up != Some(false)
        && m.status.unwrap_or(LbStatus::Active) == LbStatus::Active
}

fn member_disabled(m: &PoolMember) -> bool {
    m.admin_state_up == Some(false)
}

fn endpoint(m: &PoolMember) -> SocketV4 {
    SocketV4::new(m.address, m.protocol_port)
}

impl Topology {
    /// The VIPs of load balancer `lb`: its pools' in id order, each pool's in id order.
    pub(crate) fn lb_vips(&self, lb: Uuid) -> Vec<&Vip> {
        let mut pools: Vec<&Pool> = self.pools.values().filter(|p| p.parent == lb).collect();
        pools.sort_by_key(|p| p.id);
        let mut out = Vec::new();
        for p in pools {
            let mut vips: Vec<&Vip> = self.vips.values().filter(|v| v.parent == p.id).collect();
            vips.sort_by_key(|v| v.id);
            out.extend(vips);
        }
        out
    }

    /// The members of `pool`, in id order.
    pub(crate) fn pool_members_of(&self, pool: Uuid) -> Vec<&PoolMember> {
        let mut v: Vec<&PoolMember> = self
            .pool_members
            .values()
            .filter(|m| m.parent == pool)
            .collect();
        v.sort_by_key(|m| m.id);
        v
    }
}

impl<'t> Walk<'_, '_, 't> {
    /// Why the model cannot run `pool`, if it cannot.
    fn pool_refusal(pool: &Pool) -> Option<String> {
        if let Some(hm) = pool.health_monitor_id {
            return Some(format!(
                "pool {} has health monitor {hm}: member status from a health monitor is not modelled",
                pool.id
            ));
        }
        match pool.extra.get("sessionPersistence") {
            Some(v) if !v.is_null() => Some(format!(
                "pool {} has a session persistence of its own ({v}): not modelled",
                pool.id
            )),
            _ => None,
        }
    }

    /// The load balancer router `router` names: none is [`Lb::Continue`], a missing one
    /// is refused.
    fn balancer_of(
        &mut self,
        router: Uuid,
        lb: Option<Uuid>,
    ) -> Result<(Uuid, &'t LoadBalancer), Lb> {
        let Some(lb) = lb else {
            return Err(Lb::Continue);
        };
        self.sh.consulted.read(lb);
        match self.topo().load_balancers.get(&lb) {
            Some(balancer) => Ok((lb, balancer)),
            None => Err(Lb::Refused(self.unsupported(
                Some(router),
                format!("the router names load balancer {lb}, which does not exist"),
            ))),
        }
    }

    /// `LoadBalancer.processInbound` of the load balancer router `router` names.
    pub(super) fn lb_inbound(&mut self, router: Uuid, lb: Option<Uuid>) -> Lb {
        let topo = self.topo();
        let (lb, balancer) = match self.balancer_of(router, lb) {
            Ok(found) => found,
            Err(lb) => return lb,
        };
        if balancer.admin_state_up == Some(false) || self.pkt.tuple.protocol != Protocol::Tcp {
            return Lb::Continue;
        }
        let dst = self.pkt.tuple.dst;
        let Some(vip) = topo.lb_vips(lb).into_iter().find(|v| {
            v.admin_state_up != Some(false) && v.address == dst.ip && v.protocol_port == dst.port
        }) else {
            return Lb::Continue;
        };
        let Some(pool) = topo.pools.get(&vip.parent) else {
            return Lb::Refused(self.unsupported(
                Some(lb),
                format!(
                    "VIP {} names pool {}, which does not exist",
                    vip.id, vip.parent
                ),
            ));
        };
        if let Some(why) = Self::pool_refusal(pool) {
            return Lb::Refused(self.unsupported(Some(lb), why));
        }
        let sticky = is_sticky(vip);
        self.hop(Step::LoadBalancer, Some(lb), || {
            let kind = if sticky {
                "sticky (SOURCE_IP)"
            } else {
                "non-sticky"
            };
            format!("matches {kind} VIP {} ({dst}) of pool {}", vip.id, pool.id)
        });
        let members = topo.pool_members_of(pool.id);
        let active: Vec<&PoolMember> = members
            .iter()
            .copied()
            .filter(|m| member_active(m))
            .collect();
        let pool_up = pool.admin_state_up != Some(false) && !active.is_empty();
        let ty = if sticky {
            NatKeyType::FwdStickyDnat
        } else {
            NatKeyType::FwdDnat
        };
        let key = NatKey::of(ty, &self.pkt.tuple, lb);
        let down = || {
            format!(
                "pool {} is down or has no active member: the load balancer drops the packet",
                pool.id
            )
        };
        // `Pool.maintainConnectionIfExists`: a sticky VIP of a pool that is not up
        // drops, whatever binding there is.
        if !pool_up && sticky {
            return Lb::Drop(down());
        }
        if self.keep_binding(&key, &members, sticky) {
            return Lb::Accept;
        }
        if !pool_up {
            return Lb::Drop(down());
        }
        let pick = if active.len() > 1 {
            self.sh.choices.choose(active.len())
        } else {
            0
        };
        let member = active[pick];
        self.sh.state.nat_put(key, endpoint(member));
        self.lb_dnat(lb, endpoint(member), || {
            format!("chose member {} of {} active", member.id, active.len())
        });
        Lb::Accept
    }

    /// `Pool.applyExistingIfValidBackend`: applies an existing binding whose member is
    /// still valid; forgets one whose member is not.
    fn keep_binding(&mut self, key: &NatKey, members: &[&PoolMember], sticky: bool) -> bool {
        let Some(to) = self.sh.state.nat_get(key) else {
            return false;
        };
        let valid = members
            .iter()
            .any(|m| endpoint(m) == to && (member_active(m) || (!sticky && member_disabled(m))));
        if !valid {
            self.sh.state.nat_delete(key);
            self.hop(Step::LoadBalancer, Some(key.device), || {
                format!("forgets the binding to {to}: the member is no longer valid")
            });
            return false;
        }
        self.lb_dnat(key.device, to, || {
            let kind = if sticky { "sticky" } else { "existing" };
            format!("reuses the {kind} binding")
        });
        true
    }

    fn lb_dnat(&mut self, lb: Uuid, to: SocketV4, why: impl FnOnce() -> String) {
        let from = self.pkt.tuple.dst;
        self.pkt.tuple.dst = to;
        self.nw_dst_rewritten = true;
        self.hop(Step::Nat, Some(lb), || {
            format!("{}: dnat {from} → {to}", why())
        });
    }

    /// `LoadBalancer.processOutbound` of the load balancer router `router` names.
    pub(super) fn lb_outbound(&mut self, router: Uuid, lb: Option<Uuid>) -> Lb {
        let topo = self.topo();
        let (lb, balancer) = match self.balancer_of(router, lb) {
            Ok(found) => found,
            Err(lb) => return lb,
        };
        let vips = topo.lb_vips(lb);
        let has_sticky = vips.iter().any(|v| is_sticky(v));
        let has_plain = vips.iter().any(|v| !is_sticky(v));
        // An ICMP message is not translated by a sticky return key (`NATState`).
        let icmp = self.pkt.tuple.protocol == Protocol::Icmp;
        let backend = self.pkt.tuple.src;
        let found = [
            (has_plain, NatKeyType::RevDnat),
            (has_sticky && !icmp, NatKeyType::RevStickyDnat),
        ]
        .into_iter()
        .filter(|(has, _)| *has)
        .find_map(|(_, ty)| {
            let key = NatKey::of(ty, &self.pkt.tuple, lb);
            self.sh.state.nat_get(&key).map(|vip| (ty, vip))
        });
        let Some((ty, vip_end)) = found else {
            return Lb::Continue;
        };
        self.pkt.tuple.src = vip_end;
        self.hop(Step::Nat, Some(lb), || {
            format!("reverse dnat {backend} → {vip_end} ({ty:?} key)")
        });
        let decision = self.lb_return_decision(balancer.admin_state_up, &vips, backend);
        match decision {
            None => Lb::Accept,
            Some(why) => {
                self.hop(Step::LoadBalancer, Some(lb), || {
                    format!(
                        "{why}: midolman's DROP, which skips the outbound filter as ACCEPT does"
                    )
                });
                Lb::Drop(why)
            }
        }
    }

    /// Why midolman answers DROP for a reverse-translated reply from `backend`, if it does.
    fn lb_return_decision(
        &self,
        admin_up: Option<bool>,
        vips: &[&Vip],
        backend: SocketV4,
    ) -> Option<String> {
        if admin_up == Some(false) {
            return Some("the load balancer is administratively down".into());
        }
        let src = self.pkt.tuple.src;
        let Some(vip) = vips.iter().find(|v| {
            v.admin_state_up != Some(false)
                && v.address == src.ip
                && v.protocol_port == src.port
                && self.pkt.tuple.protocol == Protocol::Tcp
        }) else {
            return Some(format!("no VIP is {src} any more"));
        };
        let topo = self.topo();
        let sticky = is_sticky(vip);
        let valid = topo.pool_members_of(vip.parent).iter().any(|m| {
            endpoint(m) == backend && (member_active(m) || (!sticky && member_disabled(m)))
        });
        (!valid).then(|| {
            format!(
                "{backend} is no longer a valid member of pool {}",
                vip.parent
            )
        })
    }
}
