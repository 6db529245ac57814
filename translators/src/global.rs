//! The cluster-global resources: no Kubernetes owner, ensured before any other translator runs.

use uuid::Uuid;

use crate::backend::{self, Rule};
use crate::ids::{id_for_key, sub_id};
use crate::translate::{DesiredTranslation, TranslatorConfig};

/// Pseudo kind of the global Translations and of the root of the global IDs.
pub const GLOBAL_KIND: &str = "midonet-global";

/// Key of the main chain; its ID is the base of every other global ID.
const MAIN_CHAIN_KEY: &str = "chain";

/// Chain names, as they appear in MidoNet.
pub const MAIN_CHAIN_NAME: &str = "KUBE-MAIN";
pub const PRE_CHAIN_NAME: &str = "KUBE-PRE";
pub const SERVICES_CHAIN_NAME: &str = "KUBE-SERVICES";

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

/// ID of the tunnel zone hosts join unless their Node names another one.
pub fn default_tunnel_zone_id(cfg: &TranslatorConfig) -> Uuid {
    sub_id(main_chain_id(cfg), "Default Tunnel Zone")
}

/// The global Translations, in the order they should be pushed.
///
/// Chain order: KUBE-MAIN is `[jump KUBE-PRE, jump KUBE-SERVICES]` so that return traffic is
/// reverse-NATed before the service rules see it, and KUBE-PRE is
/// `[rev_snat (continue), rev_dnat (accept)]`. Both chains belong to this Translation alone,
/// so their rules carry explicit ascending positions and are pushed in chain order: each POST
/// at position `n` finds the `n - 1` rules before it already in place.
pub fn global(cfg: &TranslatorConfig) -> Vec<DesiredTranslation> {
    let tenant = cfg.tenant.as_str();
    let base = main_chain_id(cfg);
    let main = base;
    let pre = pre_chain_id(cfg);
    let services = services_chain_id(cfg);
    let chains = vec![
        backend::chain(main, tenant, MAIN_CHAIN_NAME),
        backend::chain(pre, tenant, PRE_CHAIN_NAME),
        backend::chain(services, tenant, SERVICES_CHAIN_NAME),
        Rule::jump(sub_id(base, "Jump To Pre"), main, pre, 1).entry(),
        Rule::jump(sub_id(base, "Jump To Services"), main, services, 2).entry(),
        Rule::new(sub_id(base, "Reverse SNAT"), pre, "rev_snat", 1)
            .flow_action("continue")
            .entry(),
        Rule::new(sub_id(base, "Reverse DNAT"), pre, "rev_dnat", 2)
            .flow_action("accept")
            .entry(),
    ];
    vec![
        DesiredTranslation::global(
            cfg,
            "tunnel-zone",
            vec![backend::tunnel_zone(
                default_tunnel_zone_id(cfg),
                "DefaultTunnelZone",
                "vxlan",
            )],
        ),
        DesiredTranslation::global(
            cfg,
            "cluster-router",
            vec![backend::router(
                cluster_router_id(cfg),
                tenant,
                "ClusterRouter",
            )],
        ),
        DesiredTranslation::global(cfg, "chains", chains),
        crate::policy::policy_globals(cfg),
    ]
}
