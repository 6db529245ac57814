//! Endpoints: load-balancing a service port over its ready endpoints.
//!
//! # What is produced
//!
//! Per service port that has ready endpoints, one Translation (a *generation*) holding, in
//! push order:
//!
//! 1. a chain `KUBE-SEP-<namespace>/<name>/<port>/<hash>` (the generation chain);
//! 2. position 1: one DNAT rule (flowAction `continue`) whose `natTargets` are all ready
//!    `address:port` pairs. MidoNet picks one target at random for each new flow (midolman
//!    `NATState.chooseRandomNatTarget`): that is the load balancing. The original integration
//!    sent everything to whichever endpoint's rule came first (MNA-1264);
//! 3. positions 2..=n+1: one hairpin SNAT rule per distinct endpoint address E, matching
//!    `src = E and dst = E` after the DNAT, i.e. an endpoint that was balanced onto itself;
//!    the source becomes the cluster IP (ports 30000–60000), flowAction `continue`;
//! 4. position n+2: an `accept` rule, which ends rule processing like an accepting DNAT rule
//!    would;
//! 5. a jump from the service port's `KUBE-SVC-…` chain (made by the Service translator) to
//!    the generation chain, at position 1.
//!
//! `<hash>` is a hash of the cluster IP and the sorted target set, and it is part of the
//! Translation's name and of every ID in it. Rules cannot be updated, so a changed target set
//! is a new generation: a new Translation with new IDs; the runner deletes the old one once
//! the new one is pushed.
//!
//! # Why the hairpin SNAT comes after the DNAT
//!
//! MidoNet keeps NAT state per device (the `NatKey` holds the bridge the rule ran on) and
//! KUBE-PRE undoes NAT on replies as `[rev_snat (continue), rev_dnat (accept)]`, i.e. in the
//! reverse of DNAT-then-SNAT. Both facts require the DNAT to come first and the SNAT to apply
//! only to true hairpin traffic:
//!
//! - SNAT before DNAT leaves the reply `E -> clusterIP:P` with a DNAT reversal whose key no
//!   longer matches once `rev_snat` would have run, and `rev_dnat` accepting first leaves a
//!   packet addressed to the cluster IP, which nothing routes.
//! - SNAT on *all* traffic from an endpoint breaks the common case where endpoint E reaches
//!   its own service and is balanced onto another endpoint F on another node: F's reply goes
//!   to the cluster IP, the reverse-SNAT state sits on E's bridge, and F's bridge has none.
//!   Without SNAT, F answers E directly, the reply enters E's bridge and `rev_dnat` there
//!   restores the cluster IP as source, as for any other client.
//!
//! Only when E is balanced onto itself would the reply never leave E, so only then is SNAT
//! needed; that is what `dst = E` (matched after the DNAT rewrote the destination) selects.
//!
//! # Chain order under updates
//!
//! MidoNet inserts a POSTed rule at its `position` (1-based, default 1 = the head) and rejects
//! positions beyond `rules + 1`.
//!
//! - Inside the generation chain the order is fixed by explicit positions 1..=n+2, pushed in
//!   that order. The chain belongs to this Translation alone, so when the rule at position k
//!   is POSTed the k-1 rules before it are already there: every position is valid and the
//!   resulting order is the push order. A rule re-created later (drift repair) goes back to
//!   its own position.
//! - The jump into the generation chain is pushed last, at the head of `KUBE-SVC-…`. Until it
//!   exists the new generation is invisible and the previous one, whose jump sits further
//!   down, keeps serving; once it exists it shadows the previous one (the chain ends in
//!   `accept`, so nothing falls through to an older generation). Traffic switches between two
//!   complete, correctly ordered rule sets, never to a half-pushed one, whatever order the
//!   pusher handles the new and the pruned Translation in, and even if two generations are
//!   pushed concurrently: each generation's rules stay together in its own chain.
//!
//! The tempting alternative, the rules directly in `KUBE-SVC-…` with one Translation for the
//! DNAT rule and one per endpoint for its SNAT rule, breaks on the first update: the replaced
//! DNAT rule is POSTed at the head, in front of the surviving SNAT rules, and explicit
//! positions cannot fix that in a chain other Translations insert into and delete from.
//!
//! # Pairing
//!
//! An Endpoints object is paired with the Service of the same namespace/name, and its ports
//! with the service ports of the same name and protocol (an unnamed port pairs with the
//! unnamed port). Without the Service, or without a usable cluster IP, nothing is produced;
//! the runner re-translates the Endpoints when the Service appears or changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use sha2::{Digest, Sha256};

use crate::addr::{parse_ipv4, AddrError};
use crate::ids::{id_for_key, sub_id};
use crate::model::{Chain, FlowAction, NatTarget, Resource, Rule, RuleType};
use crate::naming::backend_name;
use crate::node::{SNAT_PORT_FROM, SNAT_PORT_TO};
use crate::service::{
    cluster_ipv4, port_number, protocol_number, service_port_chain_id, service_port_key,
    valid_ports,
};
use crate::translate::{reason, DesiredTranslation, Translated, TranslatorConfig};

/// Kind of the per-port generation Translations and of their IDs.
pub const ENDPOINTS_PORT_KIND: &str = "Endpoints-Port";

pub fn endpoints(cfg: &TranslatorConfig, ep: &Endpoints, svc: Option<&Service>) -> Translated {
    let mut out = Translated::default();
    let name = match ep.metadata.name.as_deref() {
        Some(n) if !n.is_empty() => n,
        _ => return out,
    };
    let namespace = match ep.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => "default",
    };
    let Some(svc) = svc.filter(|s| {
        s.metadata.name.as_deref() == Some(name)
            && s.metadata.namespace.as_deref().unwrap_or("default") == namespace
    }) else {
        return out;
    };
    // A bad cluster IP or port is reported on the Service; here it only means "nothing".
    let Ok(Some(cluster_ip)) = cluster_ipv4(svc) else {
        return out;
    };
    let service_ports: BTreeMap<String, u8> = valid_ports(svc, |_| {})
        .into_iter()
        .map(|p| (p.name, p.proto))
        .collect();

    let targets = ready_targets(ep, &service_ports, &mut out);
    for (port_name, targets) in &targets {
        let port_key = service_port_key(namespace, name, port_name);
        let hash = generation_hash(cluster_ip, targets);
        let generation_key = format!("{port_key}/{hash}");
        let base = id_for_key(cfg, ENDPOINTS_PORT_KIND, &generation_key);
        let chain = base;

        let mut resources: Vec<Resource> = vec![
            Chain::named(
                chain,
                &cfg.tenant,
                backend_name(format!("KUBE-SEP-{generation_key}")),
            )
            .into(),
            Rule::new(chain, sub_id(base, "DNAT"), RuleType::Dnat)
                .at(1)
                .with_flow_action(FlowAction::Continue)
                .with_nat_targets(targets.iter().map(Target::nat_target).collect())
                .into(),
        ];
        let hosts: BTreeSet<Ipv4Addr> = targets.iter().map(|t| t.ip).collect();
        let mut position = 1u32;
        for ip in &hosts {
            position += 1;
            resources.push(
                Rule::new(chain, sub_id(base, &format!("SNAT/{ip}")), RuleType::Snat)
                    .at(position)
                    .with_flow_action(FlowAction::Continue)
                    .from_host(*ip)
                    .to_host(*ip)
                    .with_nat_targets(vec![NatTarget::to_ports(
                        cluster_ip,
                        Some(SNAT_PORT_FROM),
                        Some(SNAT_PORT_TO),
                    )])
                    .into(),
            );
        }
        resources.push(
            Rule::new(chain, sub_id(base, "Accept"), RuleType::Accept)
                .at(position + 1)
                .into(),
        );
        resources.push(
            Rule::jump(
                service_port_chain_id(cfg, &port_key),
                sub_id(base, "Jump"),
                chain,
            )
            .at(1)
            .into(),
        );
        out.translations.push(DesiredTranslation::versioned(
            cfg,
            ENDPOINTS_PORT_KIND,
            &format!("{name}/{port_name}/{hash}"),
            namespace,
            resources,
        ));
    }
    out
}

/// One ready endpoint `address:port`, ordered by address then port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    ip: Ipv4Addr,
    port: u16,
}

impl Target {
    fn nat_target(&self) -> NatTarget {
        NatTarget::to(self.ip, Some(self.port))
    }
}

/// Ready IPv4 `address:port` targets per service port name, sorted and de-duplicated.
fn ready_targets(
    ep: &Endpoints,
    service_ports: &BTreeMap<String, u8>,
    out: &mut Translated,
) -> BTreeMap<String, BTreeSet<Target>> {
    let mut targets: BTreeMap<String, BTreeSet<Target>> = BTreeMap::new();
    let mut invalid_addresses = BTreeSet::new();
    let mut invalid_ports = BTreeSet::new();
    let mut ipv6 = 0usize;
    for subset in ep.subsets.as_deref().unwrap_or_default() {
        let mut ports = Vec::new();
        for p in subset.ports.as_deref().unwrap_or_default() {
            let port_name = p.name.clone().unwrap_or_default();
            // Ports the Service translator skipped have no chain to fill.
            let Some(&proto) = service_ports.get(&port_name) else {
                continue;
            };
            if protocol_number(p.protocol.as_deref()) != Some(proto) {
                continue;
            }
            match port_number(p.port) {
                Some(port) => ports.push((port_name, port)),
                None => {
                    invalid_ports.insert(format!("{port_name:?}={}", p.port));
                }
            }
        }
        // Only `addresses` are ready; `notReadyAddresses` get no traffic.
        for a in subset.addresses.as_deref().unwrap_or_default() {
            let ip = match parse_ipv4(&a.ip) {
                Ok(ip) => ip,
                Err(AddrError::Ipv6) => {
                    ipv6 += 1;
                    continue;
                }
                Err(AddrError::Invalid) => {
                    invalid_addresses.insert(format!("{:?}", a.ip));
                    continue;
                }
            };
            for (port_name, port) in &ports {
                targets
                    .entry(port_name.clone())
                    .or_default()
                    .insert(Target { ip, port: *port });
            }
        }
    }
    if !invalid_addresses.is_empty() {
        out.warn(
            reason::INVALID_ENDPOINT_ADDRESS,
            format!(
                "endpoint addresses that are not IP addresses are skipped: {}",
                invalid_addresses.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if !invalid_ports.is_empty() {
        out.warn(
            reason::INVALID_PORT,
            format!(
                "endpoint ports outside 1-65535 are skipped: {}",
                invalid_ports.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if ipv6 > 0 {
        out.warn(
            reason::UNSUPPORTED_IP_FAMILY,
            format!("{ipv6} IPv6 endpoint address(es) skipped; MidoNet needs IPv4"),
        );
    }
    targets
}

/// 16 hex digits of SHA-256 over the cluster IP and the sorted targets: names a generation.
fn generation_hash(cluster_ip: Ipv4Addr, targets: &BTreeSet<Target>) -> String {
    let mut h = Sha256::new();
    h.update(cluster_ip.to_string().as_bytes());
    for t in targets {
        h.update(format!("\n{}:{}", t.ip, t.port).as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}
