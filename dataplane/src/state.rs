//! The flow state one simulated connection builds up: NAT bindings and connection
//! tracking, both keyed per device as in midolman, and the MACs bridges learn.
//!
//! midolman `state/NatState.scala`: a NAT key is (type, source, source port, destination,
//! destination port, protocol, device), the device being the bridge or router the rule
//! ran on. A forward DNAT stores `FWD_DNAT(tuple) → new destination` and the return key
//! `REV_DNAT(new destination, original source) → original destination`; SNAT likewise with
//! `REV_SNAT(destination, new source) → original source`. A reverse rule only finds state
//! on the device that made it. `state/ConnTrackState.scala`: a packet is a *return* packet
//! when its tuple, on the device it entered through, was recorded when the forward flow
//! left the virtual network.

use midonet_translators::model::MacAddr;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use uuid::Uuid;

use crate::packet::{FlowTuple, SocketV4};

/// Which translation a NAT key records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum NatKeyType {
    FwdDnat,
    RevDnat,
    FwdSnat,
    RevSnat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NatKey {
    pub ty: NatKeyType,
    pub tuple: FlowTuple,
    pub device: Uuid,
}

/// Everything one connection leaves behind in the agents.
#[derive(Clone, Debug, Default)]
pub struct FlowState {
    nat: HashMap<NatKey, SocketV4>,
    /// Return keys: (tuple of the expected reply, device it will enter through).
    conntrack: HashSet<(FlowTuple, Uuid)>,
    /// (bridge, MAC) → the port the MAC was last seen entering through.
    learned: HashMap<(Uuid, MacAddr), Uuid>,
}

impl FlowState {
    pub(crate) fn nat_get(&self, key: &NatKey) -> Option<SocketV4> {
        self.nat.get(key).copied()
    }

    /// Records a forward binding and its return key. `new` is the translated endpoint:
    /// the destination for DNAT, the source for SNAT.
    pub(crate) fn nat_put(&mut self, key: NatKey, new: SocketV4) {
        let (ret_ty, ret_tuple, original) = match key.ty {
            NatKeyType::FwdDnat => (
                NatKeyType::RevDnat,
                FlowTuple {
                    protocol: key.tuple.protocol,
                    src: new,
                    dst: key.tuple.src,
                },
                key.tuple.dst,
            ),
            NatKeyType::FwdSnat => (
                NatKeyType::RevSnat,
                FlowTuple {
                    protocol: key.tuple.protocol,
                    src: key.tuple.dst,
                    dst: new,
                },
                key.tuple.src,
            ),
            NatKeyType::RevDnat | NatKeyType::RevSnat => return,
        };
        self.nat.insert(key, new);
        self.nat.insert(
            NatKey {
                ty: ret_ty,
                tuple: ret_tuple,
                device: key.device,
            },
            original,
        );
    }

    pub(crate) fn is_tracked_return(&self, tuple: FlowTuple, ingress_device: Uuid) -> bool {
        self.conntrack.contains(&(tuple, ingress_device))
    }

    pub(crate) fn track(&mut self, emitted: FlowTuple, egress_device: Uuid) {
        self.conntrack.insert((emitted.reversed(), egress_device));
    }

    pub(crate) fn learn(&mut self, bridge: Uuid, mac: MacAddr, port: Uuid) {
        self.learned.insert((bridge, mac), port);
    }

    pub(crate) fn learned(&self, bridge: Uuid, mac: MacAddr) -> Option<Uuid> {
        self.learned.get(&(bridge, mac)).copied()
    }
}
