//! What every translation depends on besides the object itself.
//!
//! It sits below identities (`ids`), the translators' shared types (`translate`) and the
//! translators, and uses only the model's value types: the edge settings ([`Edge`]) are
//! held here as validated values, read and checked by [`crate::edge_spec`].

use std::net::Ipv4Addr;
use std::sync::Arc;

use uuid::Uuid;

use crate::model::Ipv4Cidr;
use crate::version::TRANSLATION_VERSION;

/// Tenant the original integration used, and our default.
pub const DEFAULT_TENANT: &str = "midonetkube";

/// What every translation depends on besides the object itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranslatorConfig {
    /// MidoNet tenant: seeds every ID and is the `tenantId` of Bridges, Routers and Chains.
    pub tenant: String,
    /// Translation version: seeds every versioned name and every ID.
    pub version: String,
    /// The edge toward the outside (`--edge-config`), if the cluster has one: the global
    /// Translations then build it, and the Node and Service translators add the NodePort
    /// rules it jumps to. `None`: traffic starts inside the cluster only.
    pub edge: Option<Arc<Edge>>,
}

impl Default for TranslatorConfig {
    fn default() -> Self {
        Self {
            tenant: DEFAULT_TENANT.to_string(),
            version: TRANSLATION_VERSION.to_string(),
            edge: None,
        }
    }
}

/// The edge (provider) router's settings, validated: at least one uplink, at least one
/// cluster CIDR, every next hop on its uplink's network, distinct uplink names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub uplinks: Vec<Uplink>,
    /// The pod networks: routed from the edge to the cluster router, and source-NATed to
    /// the uplink's address on their way out.
    pub cluster_cidrs: Vec<Ipv4Cidr>,
    /// The Service networks (the apiserver's `--service-cluster-ip-range`): a cluster IP
    /// no rule DNATed (a Service without endpoints) is dropped on the cluster router and
    /// on the edge (black-hole routes), not sent upstream by the default route.
    pub service_cidrs: Vec<Ipv4Cidr>,
    /// The external-IP and load-balancer ranges the upstream routes to the edge: an
    /// address of them no Service holds is dropped at the edge (a black-hole route).
    pub external_cidrs: Vec<Ipv4Cidr>,
    /// The link between the edge and the cluster router: the edge's port takes its first
    /// address, the cluster router's port the second.
    pub link: Ipv4Cidr,
}

/// One uplink: an edge router port bound to an interface of a gateway host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uplink {
    /// Unique among the uplinks; names its resources' IDs and chains.
    pub name: String,
    /// The MidoNet host (gateway) the interface is on.
    pub host: Uuid,
    pub interface: String,
    /// The port's own address, inside `subnet`.
    pub address: Ipv4Addr,
    pub subnet: Ipv4Cidr,
    /// The upstream routers: one default route each, all of equal weight.
    pub next_hops: Vec<Ipv4Addr>,
    /// The gateway host's tunnel endpoint, if the edge is to join it to the default tunnel
    /// zone (MidoNet binds ports only on member hosts); `None` for a host that is a member
    /// already (e.g. a Node, whose own Translation joins it).
    pub tunnel_ip: Option<Ipv4Addr>,
}
