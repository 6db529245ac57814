//! The flow state one simulated connection builds up: NAT bindings and connection
//! tracking, both keyed per device as in midolman, the MACs bridges learn, and the ARP
//! caches of routers and workloads.
//!
//! midolman `state/NatState.scala`: a NAT key is (type, source, source port, destination,
//! destination port, protocol, device), the device being the bridge or router the rule
//! ran on; for ICMP echo the ports are the identifier, and an ICMP error is keyed by the
//! packet it quotes, reversed (`NatKey.processIcmp`). A forward DNAT stores
//! `FWD_DNAT(tuple) → new destination` and the return key `REV_DNAT(new destination,
//! original source) → original destination`; SNAT likewise with `REV_SNAT(destination,
//! new source) → original source`. A reverse rule only finds state on the device that
//! made it. `state/ConnTrackState.scala`: a packet is a *return* packet when its tuple,
//! on the device it entered through, was recorded when the forward flow left the virtual
//! network.
//!
//! A load balancer's sticky VIP (`SOURCE_IP` session persistence) keeps its binding as
//! `FWD_STICKY_DNAT` with the client's source port wildcarded (`NATState.NatKey.apply`),
//! so every connection of one client address to the VIP finds it, and the return key
//! `REV_STICKY_DNAT` wildcards the client's port likewise. midolman keeps an unused key
//! for 60 s; here the state lives as long as the [`FlowState`] (one trace, or one
//! [`crate::trace::Session`]), with no clock.

use std::net::Ipv4Addr;

use midonet_translators::model::MacAddr;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use uuid::Uuid;

use crate::packet::{FlowTuple, Quoted, SocketV4};

/// Which translation a NAT key records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum NatKeyType {
    FwdDnat,
    RevDnat,
    FwdSnat,
    RevSnat,
    /// A sticky VIP's binding: the client's source port is not part of the key.
    FwdStickyDnat,
    /// Its return key: the client's port is not part of it either.
    RevStickyDnat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NatKey {
    pub ty: NatKeyType,
    pub tuple: Quoted,
    pub device: Uuid,
}

impl NatKey {
    /// The key of `tuple` on `device`: its addresses and ports, or for an ICMP error the
    /// quoted packet reversed (`NatKey.processIcmp`).
    pub(crate) fn of(ty: NatKeyType, tuple: &FlowTuple, device: Uuid) -> NatKey {
        let tuple = match tuple.icmp_error().and_then(|m| m.about) {
            Some(q) => Quoted {
                protocol: q.protocol,
                src: q.dst,
                dst: q.src,
            },
            None => tuple.key(),
        };
        let mut key = NatKey { ty, tuple, device };
        match ty {
            NatKeyType::FwdStickyDnat => key.tuple.src.port = 0,
            NatKeyType::RevStickyDnat => key.tuple.dst.port = 0,
            _ => {}
        }
        key
    }
}

/// Everything one connection leaves behind in the agents.
#[derive(Clone, Debug, Default)]
pub struct FlowState {
    nat: HashMap<NatKey, SocketV4>,
    /// Return keys: (tuple of the expected reply, device it will enter through).
    conntrack: HashSet<(Quoted, Uuid)>,
    /// (bridge, MAC) → the port the MAC was last seen entering through.
    learned: HashMap<(Uuid, MacAddr), Uuid>,
    /// (router, address) → MAC, from ARP requests it answered and replies it received.
    router_arp: HashMap<(Uuid, Ipv4Addr), MacAddr>,
    /// (workload MAC, address) → MAC, from ARP replies it received and requests for it.
    host_arp: HashMap<(MacAddr, Ipv4Addr), MacAddr>,
}

impl FlowState {
    pub(crate) fn nat_get(&self, key: &NatKey) -> Option<SocketV4> {
        self.nat.get(key).copied()
    }

    /// Records a forward binding and its return key. `new` is the translated endpoint:
    /// the destination for DNAT, the source for SNAT.
    pub(crate) fn nat_put(&mut self, key: NatKey, new: SocketV4) {
        let Some((ret, original)) = return_key(key, new) else {
            return;
        };
        self.nat.insert(key, new);
        self.nat.insert(ret, original);
    }

    /// Forgets a forward binding and its return key (`NatState.deleteNatBinding`): a
    /// load balancer drops the binding to a member no longer valid.
    pub(crate) fn nat_delete(&mut self, key: &NatKey) {
        if let Some(new) = self.nat.remove(key) {
            if let Some((ret, _)) = return_key(*key, new) {
                self.nat.remove(&ret);
            }
        }
    }

    pub(crate) fn is_tracked_return(&self, tuple: Quoted, ingress_device: Uuid) -> bool {
        self.conntrack.contains(&(tuple, ingress_device))
    }

    /// `ConnTrackState.trackConnection`: the return key of the packet as it leaves.
    pub(crate) fn track(&mut self, emitted: Quoted, egress_device: Uuid) {
        let ret = Quoted {
            protocol: emitted.protocol,
            src: emitted.dst,
            dst: emitted.src,
        };
        self.conntrack.insert((ret, egress_device));
    }

    pub(crate) fn learn(&mut self, bridge: Uuid, mac: MacAddr, port: Uuid) {
        self.learned.insert((bridge, mac), port);
    }

    pub(crate) fn learned(&self, bridge: Uuid, mac: MacAddr) -> Option<Uuid> {
        self.learned.get(&(bridge, mac)).copied()
    }

    /// Adds what `other` learned (MACs, ARP caches) as if it happened after what this
    /// state holds: an ARP exchange walked on its own state, replayed.
    pub(crate) fn merge_learning(&mut self, other: &FlowState) {
        self.learned
            .extend(other.learned.iter().map(|(k, v)| (*k, *v)));
        self.router_arp
            .extend(other.router_arp.iter().map(|(k, v)| (*k, *v)));
        self.host_arp
            .extend(other.host_arp.iter().map(|(k, v)| (*k, *v)));
    }

    pub(crate) fn router_arp_set(&mut self, router: Uuid, ip: Ipv4Addr, mac: MacAddr) {
        self.router_arp.insert((router, ip), mac);
    }

    pub(crate) fn router_arp(&self, router: Uuid, ip: Ipv4Addr) -> Option<MacAddr> {
        self.router_arp.get(&(router, ip)).copied()
    }

    pub(crate) fn host_arp_set(&mut self, host: MacAddr, ip: Ipv4Addr, mac: MacAddr) {
        self.host_arp.insert((host, ip), mac);
    }

    pub(crate) fn host_arp(&self, host: MacAddr, ip: Ipv4Addr) -> Option<MacAddr> {
        self.host_arp.get(&(host, ip)).copied()
    }
}

/// The return key of forward binding `key → new`, and what it restores
/// (`NatKeyOps.returnKey`, `returnBinding`); `None` for a return key.
fn return_key(key: NatKey, new: SocketV4) -> Option<(NatKey, SocketV4)> {
    let t = key.tuple;
    let (ty, tuple, original) = match key.ty {
        NatKeyType::FwdDnat | NatKeyType::FwdStickyDnat => (
            if key.ty == NatKeyType::FwdDnat {
                NatKeyType::RevDnat
            } else {
                NatKeyType::RevStickyDnat
            },
            Quoted {
                protocol: t.protocol,
                src: new,
                dst: t.src,
            },
            t.dst,
        ),
        NatKeyType::FwdSnat => (
            NatKeyType::RevSnat,
            Quoted {
                protocol: t.protocol,
                src: t.dst,
                dst: new,
            },
            t.src,
        ),
        NatKeyType::RevDnat | NatKeyType::RevSnat | NatKeyType::RevStickyDnat => return None,
    };
    let device = key.device;
    Some((NatKey { ty, tuple, device }, original))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Protocol;

    fn tcp(src: (&str, u16), dst: (&str, u16)) -> FlowTuple {
        let s = |(ip, port): (&str, u16)| SocketV4::new(ip.parse().unwrap(), port);
        FlowTuple::new(Protocol::Tcp, s(src), s(dst))
    }

    #[test]
    fn a_sticky_binding_serves_every_port_of_the_client() {
        // NATState.NatKey.apply: FWD_STICKY_DNAT wildcards the source port,
        // REV_STICKY_DNAT the destination port (the client's).
        let lb = Uuid::from_u128(1);
        let member = SocketV4::new("10.0.1.10".parse().unwrap(), 8080);
        let mut s = FlowState::default();
        let first = tcp(("10.0.2.10", 40000), ("10.0.9.9", 80));
        let key = NatKey::of(NatKeyType::FwdStickyDnat, &first, lb);
        s.nat_put(key, member);
        let later = tcp(("10.0.2.10", 51000), ("10.0.9.9", 80));
        assert_eq!(
            s.nat_get(&NatKey::of(NatKeyType::FwdStickyDnat, &later, lb)),
            Some(member)
        );
        // Not for another client, nor as a plain key.
        let other = tcp(("10.0.2.11", 40000), ("10.0.9.9", 80));
        assert_eq!(
            s.nat_get(&NatKey::of(NatKeyType::FwdStickyDnat, &other, lb)),
            None
        );
        assert_eq!(
            s.nat_get(&NatKey::of(NatKeyType::FwdDnat, &first, lb)),
            None
        );
        // Any reply of the member to the client finds the VIP back.
        let reply = tcp(("10.0.1.10", 8080), ("10.0.2.10", 51000));
        let ret = NatKey::of(NatKeyType::RevStickyDnat, &reply, lb);
        assert_eq!(
            s.nat_get(&ret),
            Some(SocketV4::new("10.0.9.9".parse().unwrap(), 80))
        );
        // Forgetting the binding forgets its return key (NatState.deleteNatBinding).
        s.nat_delete(&key);
        assert_eq!(s.nat_get(&key), None);
        assert_eq!(s.nat_get(&ret), None);
    }
}
