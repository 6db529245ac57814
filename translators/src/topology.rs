//! The IDs and constants one translator's resources are known by in another's.
//!
//! The per-kind translators (`global`, `node`, `pod`, `service`, `endpoints`, `policy`) never
//! import each other: what one of them refers to in another's output (the cluster router a
//! Node's port is on, the Node bridge a Pod's port is on, the `KUBE-SVC-…` chain the
//! Endpoints fill, the policy chains every pod port and node bridge filters through, the
//! edge's NodePort chains a Node's addresses and a Service's node ports are jumped from, a
//! Node's chain of the node ports of `externalTrafficPolicy: Local` Services, the edge's
//! load balancer and sticky chain and a sticky service port's pool) is
//! defined here, once, and both sides derive it from here. This module guarantees that
//! each such ID is derived in exactly one place; it assumes nothing of the translators and
//! leaves the resources themselves (bodies, order, Translations) to them and to
//! [`crate::filters`].

use uuid::Uuid;

use crate::config::TranslatorConfig;
use crate::ids::{id_for_key, sub_id};
use crate::meta::GLOBAL_LABEL;
use crate::model::Resource;
use crate::naming::{NameKey, Part};
use crate::translate::{DesiredTranslation, GLOBAL_TRANSLATION_NAMESPACE};

/// Pseudo kind of the global Translations and of the root of the global IDs.
pub const GLOBAL_KIND: &str = "midonet-global";

/// Key of the main chain; its ID is the base of every other global ID.
const MAIN_CHAIN_KEY: &str = "chain";

/// Kind used in a Node's IDs and Translation name.
pub const NODE_KIND: &str = "Node";

/// Kind used in a Pod's IDs and Translation name.
pub const POD_KIND: &str = "Pod";

/// Pseudo kind of a service port: the ID of its `KUBE-SVC-…` chain.
pub const SERVICE_PORT_KIND: &str = "ServicePort";

/// Source ports the SNAT rules (a node's, and an endpoint balanced onto itself) may use.
pub const SNAT_PORT_FROM: u16 = 30000;
pub const SNAT_PORT_TO: u16 = 60000;

/// ID of KUBE-MAIN, the inbound filter of every Node bridge.
pub fn main_chain_id(cfg: &TranslatorConfig) -> Uuid {
    id_for_key(cfg, GLOBAL_KIND, MAIN_CHAIN_KEY)
}

/// ID of KUBE-PRE (reverse NAT), jumped to from KUBE-MAIN.
pub fn pre_chain_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Pre Chain")
}

/// ID of KUBE-SERVICES (one jump per service port), jumped to from KUBE-MAIN.
pub fn services_chain_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Services Chain")
}

/// ID of the cluster router every Node bridge is linked to.
pub fn cluster_router_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Cluster Router")
}

/// ID of the edge (provider) router, when the cluster has an edge (`--edge-config`).
pub fn edge_router_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Edge Router")
}

/// ID of the edge router's L4 load balancer (`Router.loadBalancerId`): the pools of the
/// Service ports with `sessionAffinity: ClientIP` (see [`crate::affinity`]).
pub fn edge_load_balancer_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Edge Load Balancer")
}

/// ID of KUBE-EDGE-STICKY, jumped to from what enters through an uplink before
/// KUBE-SERVICES: each sticky Service address and TCP port gets an `accept` there, so that
/// the edge router's load balancer, not the uplink's DNAT, balances it.
pub fn edge_sticky_chain_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Edge Sticky Chain")
}

/// Pseudo kind of the pool of a sticky service port, on the edge's load balancer.
pub const SERVICE_PORT_POOL_KIND: &str = "ServicePortPool";

/// ID of the pool of a sticky service port (the Service translator's; the Endpoints
/// generations put their members in it).
pub fn service_port_pool_id(cfg: &TranslatorConfig, port_key: &str) -> Uuid {
    id_for_key(cfg, SERVICE_PORT_POOL_KIND, port_key)
}

/// ID of KUBE-EDGE-NODES, jumped to from what enters through an uplink: each Node adds a
/// jump from its addresses to [`nodeports_chain_id`].
pub fn edge_nodes_chain_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Edge Nodes Chain")
}

/// ID of KUBE-NODEPORTS (a global chain): each Service port with a node port adds a jump
/// from that port to its `KUBE-SVC-…` chain; each Node's `KUBE-NODE-NODEPORTS-<name>` jumps
/// to it for what is addressed to the Node.
pub fn nodeports_chain_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "NodePorts Chain")
}

/// ID of the tunnel zone hosts join unless their Node names another one.
pub fn default_tunnel_zone_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Default Tunnel Zone")
}

/// ID of a Node's bridge (the base of the Node's other IDs); its pods get their ports on it.
pub fn node_bridge_id(cfg: &TranslatorConfig, node_name: &str) -> Uuid {
    id_for_key(cfg, NODE_KIND, node_name)
}

/// ID of a Node's `KUBE-NODEPORTS-LOCAL-<name>` chain: the node ports of Services with
/// `externalTrafficPolicy: Local`, each DNATed onto this node's own endpoints, filled by
/// the Endpoints generations and jumped to from the Node's `KUBE-NODE-NODEPORTS-<name>`.
pub fn node_local_nodeports_chain_id(cfg: &TranslatorConfig, node_name: &str) -> Uuid {
    sub_id(node_bridge_id(cfg, node_name), "Local NodePorts Chain")
}

/// ID of a Node's `KUBE-NODE-NODEPORTS-<name>` chain, jumped to from KUBE-SERVICES (and,
/// with an edge, from the Node's edge chain) for what is addressed to the Node's own
/// addresses: `[jump KUBE-NODEPORTS-LOCAL-<name>, jump KUBE-NODEPORTS]`.
pub fn node_nodeports_chain_id(cfg: &TranslatorConfig, node_name: &str) -> Uuid {
    sub_id(node_bridge_id(cfg, node_name), "NodePorts Chain")
}

/// ID of a Pod's bridge port, from its `namespace/name` key.
pub fn pod_port_id(cfg: &TranslatorConfig, pod_key: &str) -> Uuid {
    id_for_key(cfg, POD_KIND, pod_key)
}

/// `namespace/name/portName` (the port name may be empty): identifies a service port's chain
/// for both the Service and the Endpoints translator.
pub fn service_port_key(namespace: &str, name: &str, port_name: &str) -> String {
    format!("{namespace}/{name}/{port_name}")
}

/// ID of the `KUBE-SVC-…` chain of a service port.
pub fn service_port_chain_id(cfg: &TranslatorConfig, port_key: &str) -> Uuid {
    id_for_key(cfg, SERVICE_PORT_KIND, port_key)
}

/// A direction of policy enforcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Traffic delivered to a selected pod (its port's outbound filter).
    Ingress,
    /// Traffic sent by a selected pod (its node bridge's outbound filter).
    Egress,
}

impl Direction {
    /// `INGRESS` or `EGRESS`, as in the chains' names and IDs.
    pub fn tag(self) -> &'static str {
        match self {
            Direction::Ingress => "INGRESS",
            Direction::Egress => "EGRESS",
        }
    }
}

/// The global chain of `dir` every pod port (ingress) or node bridge (egress) filters
/// through.
pub fn filter_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(main_chain_id(cfg), &format!("Policy {} Chain", dir.tag()))
}

/// The shared chain of `dir` every policy's ALLOW jump goes into.
pub fn allow_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(
        main_chain_id(cfg),
        &format!("Policy {} Allow Chain", dir.tag()),
    )
}

/// The shared chain of `dir` every policy's isolation drop goes into.
pub fn isolate_chain_id(cfg: &TranslatorConfig, dir: Direction) -> Uuid {
    sub_id(
        main_chain_id(cfg),
        &format!("Policy {} Isolate Chain", dir.tag()),
    )
}

/// The port group of every node's host port (the port bound to `midokube-mido`): traffic
/// that entered the network there comes from a node's host stack.
pub fn node_port_group_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Policy Node Port Group")
}

/// A global Translation (no owner) in `kube-system`, labelled [`GLOBAL_LABEL`].
pub fn global_translation(
    cfg: &TranslatorConfig,
    key: &str,
    resources: Vec<Resource>,
) -> DesiredTranslation {
    let mut tr = DesiredTranslation::versioned(
        cfg,
        GLOBAL_KIND,
        &NameKey::new(Part::Label(key)),
        GLOBAL_TRANSLATION_NAMESPACE,
        resources,
    );
    tr.labels
        .insert(GLOBAL_LABEL.to_string(), "true".to_string());
    tr
}
