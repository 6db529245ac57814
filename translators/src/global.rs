//! The cluster-global resources: no Kubernetes owner, ensured before any other translator runs.
//! With an edge configured, they include the edge router ([`crate::edge`]).

use crate::edge::edge_translation;
use crate::filters::policy_globals;
use crate::ids::sub_id;
use crate::model::{
    Chain, FlowAction, Resource, Router, Rule, RuleType, TunnelZone, TunnelZoneType,
};
pub use crate::topology::{
    cluster_router_id, default_tunnel_zone_id, main_chain_id, pre_chain_id, services_chain_id,
    GLOBAL_KIND,
};
use crate::topology::{global_translation, nodeports_chain_id};
use crate::translate::{DesiredTranslation, TranslatorConfig};

/// Chain names, as they appear in MidoNet.
pub const MAIN_CHAIN_NAME: &str = "KUBE-MAIN";
pub const PRE_CHAIN_NAME: &str = "KUBE-PRE";
pub const SERVICES_CHAIN_NAME: &str = "KUBE-SERVICES";
pub const NODEPORTS_CHAIN_NAME: &str = "KUBE-NODEPORTS";

/// The global Translations, in the order they should be pushed.
///
/// Chain order: KUBE-MAIN is `[jump KUBE-PRE, jump KUBE-SERVICES]` so that return traffic is
/// reverse-NATed before the service rules see it, and KUBE-PRE is
/// `[rev_snat (continue), rev_dnat (accept)]`. KUBE-SERVICES and KUBE-NODEPORTS are filled by
/// the Service and Node translators. KUBE-MAIN and KUBE-PRE belong to this Translation alone,
/// so their rules carry explicit ascending positions and are pushed in chain order: each POST
/// at position `n` finds the `n - 1` rules before it already in place.
pub fn global(cfg: &TranslatorConfig) -> Vec<DesiredTranslation> {
    let tenant = cfg.tenant.as_str();
    let base = main_chain_id(cfg);
    let main = base;
    let pre = pre_chain_id(cfg);
    let services = services_chain_id(cfg);
    let chains: Vec<Resource> = vec![
        Chain::named(main, tenant, MAIN_CHAIN_NAME).into(),
        Chain::named(pre, tenant, PRE_CHAIN_NAME).into(),
        Chain::named(services, tenant, SERVICES_CHAIN_NAME).into(),
        Chain::named(nodeports_chain_id(cfg), tenant, NODEPORTS_CHAIN_NAME).into(),
        Rule::jump(main, sub_id(base, "Jump To Pre"), pre)
            .at(1)
            .into(),
        Rule::jump(main, sub_id(base, "Jump To Services"), services)
            .at(2)
            .into(),
        Rule::new(pre, sub_id(base, "Reverse SNAT"), RuleType::RevSnat)
            .at(1)
            .with_flow_action(FlowAction::Continue)
            .into(),
        Rule::new(pre, sub_id(base, "Reverse DNAT"), RuleType::RevDnat)
            .at(2)
            .with_flow_action(FlowAction::Accept)
            .into(),
    ];
    let mut out = vec![
        global_translation(
            cfg,
            "tunnel-zone",
            // MidoNet refuses a second zone of the same name, and a version bump builds
            // the new version's zone beside the old one: the name carries the version.
            vec![TunnelZone::new(
                default_tunnel_zone_id(cfg),
                format!("DefaultTunnelZone-{}", cfg.version),
                TunnelZoneType::Vxlan,
            )
            .into()],
        ),
        global_translation(
            cfg,
            "cluster-router",
            vec![Router::named(cluster_router_id(cfg), tenant, "ClusterRouter").into()],
        ),
        global_translation(cfg, "chains", chains),
        policy_globals(cfg),
    ];
    // With an edge (`--edge-config`), the provider router toward the outside.
    out.extend(edge_translation(cfg));
    out
}
