//! The edge of the scenario (on by default, `--no-edge` for none): what the controllers get
//! to serve traffic from outside the cluster, as a cluster that exposes Services would
//! deploy them (`docs/operations.md`, "The edge").
//!
//! - the settings file for `--edge-config`, written once per run: two gateway hosts, one
//!   uplink each ([`UPLINKS`]), the scenario's pod network ([`POD_NETWORK`]), the test
//!   apiserver's Service range ([`SERVICE_NETWORK`]) and the LoadBalancer pool as the
//!   external range; read back by the controllers' own parser, so the bench's translations
//!   use exactly the edge the controllers run with;
//! - the `lbipam` controller with `--lb-pool` [`LB_POOL`]: the LoadBalancer Services'
//!   addresses come from the controllers, so the sync measures that path too;
//! - the gateway hosts, which the simulator must know before an uplink is bound to them;
//! - for the floors, which run before any controller: the addresses the IPAM will give,
//!   stood in by the pool's first ones in Service order ([`BenchEdge::with_ingress`]). The
//!   IPAM may give them in another order; each Service's Translation then holds another
//!   address, of the same size and the same resources;
//! - what the edge and its Services add to the Translations ([`Share`]): the same objects
//!   translated with the edge and without it (no edge, every Service ClusterIP), by
//!   Translation kind.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service, ServiceStatus};
use midonet_kube_controllers::config::parse_edge_config;
use midonet_translators::config::Edge;
use midonet_translators::edge_spec::{EdgeSpec, UplinkSpec};
use midonet_translators::topology::GLOBAL_KIND;
use midonet_translators::{Resource, TranslatorConfig};
use serde::Serialize;
use uuid::Uuid;

use crate::floor::Owned;
use crate::Res;

/// The LoadBalancer address pool (`--lb-pool`), also the edge's external range.
pub const LB_POOL: &str = "172.16.0.0/16";
/// Every node pod CIDR the scenario gives (`10.200.0.0/24` on, one /24 per node).
pub const POD_NETWORK: &str = "10.192.0.0/10";
/// The test apiserver's `--service-cluster-ip-range` (`scripts/k8s-env.sh`).
pub const SERVICE_NETWORK: &str = "10.96.0.0/12";
/// Per uplink: its name, its gateway host's name, its address, its next hop, the gateway's
/// tunnel endpoint (outside the nodes' `192.168.0.0/20`).
pub const UPLINKS: [(&str, &str, &str, &str, &str); 2] = [
    (
        "a",
        "gateway-a",
        "192.0.2.2/24",
        "192.0.2.1",
        "192.168.255.1",
    ),
    (
        "b",
        "gateway-b",
        "198.51.100.2/24",
        "198.51.100.1",
        "192.168.255.2",
    ),
];
/// The controllers the bench runs without the edge; with it, `lbipam` too.
const CONTROLLERS: &str = "node,pod,service,endpoints,networkpolicy,pusher";

/// The edge the bench runs the controllers with.
pub struct BenchEdge {
    /// The gateway hosts: (name, host ID).
    pub gateways: Vec<(String, Uuid)>,
    /// The settings file.
    pub file: PathBuf,
    pub edge: Arc<Edge>,
}

impl BenchEdge {
    /// Writes the settings file (in the temporary directory, named after the bench's pid)
    /// and reads it back as the controllers do.
    pub fn write() -> Res<BenchEdge> {
        let file = std::env::temp_dir().join(format!(
            "midonet-kube-bench-{}-edge.json",
            std::process::id()
        ));
        BenchEdge::write_at(file)
    }

    /// [`BenchEdge::write`] to `file`.
    pub fn write_at(file: PathBuf) -> Res<BenchEdge> {
        let gateways: Vec<(String, Uuid)> = UPLINKS
            .iter()
            .map(|(_, host, ..)| (host.to_string(), Uuid::new_v4()))
            .collect();
        let uplinks = UPLINKS
            .iter()
            .zip(&gateways)
            .map(|((name, _, address, hop, tunnel), (_, id))| UplinkSpec {
                name: name.to_string(),
                host: id.to_string(),
                interface: format!("uplink-{name}"),
                address: address.to_string(),
                next_hops: vec![hop.to_string()],
                tunnel_ip: Some(tunnel.to_string()),
            })
            .collect();
        let spec = EdgeSpec {
            uplinks,
            cluster_cidrs: vec![POD_NETWORK.to_string()],
            service_cidrs: vec![SERVICE_NETWORK.to_string()],
            external_cidrs: vec![LB_POOL.to_string()],
            link_cidr: None,
        };
        std::fs::write(&file, serde_json::to_string_pretty(&spec)?)?;
        let edge = parse_edge_config(&file.display().to_string())?;
        Ok(BenchEdge {
            gateways,
            file,
            edge,
        })
    }

    /// The translators' configuration with this edge.
    pub fn translator_config(&self) -> TranslatorConfig {
        TranslatorConfig {
            edge: Some(self.edge.clone()),
            ..TranslatorConfig::default()
        }
    }

    /// The arguments `check` needs for the outside flows.
    pub fn check_args(&self) -> Vec<String> {
        vec!["--edge-config".into(), self.file.display().to_string()]
    }

    /// `services` as the IPAM will have them: each LoadBalancer Service given the pool's
    /// next usable address, in order (see the module docs); an error if the pool has too
    /// few.
    pub fn with_ingress(services: &[Service]) -> Res<Vec<Service>> {
        let (base, prefix) = LB_POOL.split_once('/').ok_or("LB_POOL is not a CIDR")?;
        let base = u32::from(base.parse::<Ipv4Addr>()?);
        // Every address but the network's and the broadcast's, as the IPAM gives them.
        let usable = (1u32 << (32 - prefix.parse::<u32>()?)) - 2;
        let mut out = services.to_vec();
        let lbs = out.iter_mut().filter(|s| is_load_balancer(s));
        for (next, s) in (1..).zip(lbs) {
            if next > usable {
                return Err(
                    format!("more LoadBalancer Services than {LB_POOL} has addresses").into(),
                );
            }
            let ip = Ipv4Addr::from(base + next);
            s.status = Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ..LoadBalancerIngress::default()
                    }]),
                }),
                ..ServiceStatus::default()
            });
        }
        Ok(out)
    }
}

/// A LoadBalancer Service the IPAM serves (no `loadBalancerClass`, as the scenario's).
fn is_load_balancer(s: &Service) -> bool {
    let spec = s.spec.as_ref();
    spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        && spec
            .and_then(|s| s.load_balancer_class.as_deref())
            .is_none()
}

/// The controllers' arguments besides the bench's fixed ones: which controllers, and with
/// `edge` its settings and the LoadBalancer pool.
pub fn controller_args(edge: Option<&BenchEdge>) -> Vec<String> {
    match edge {
        None => vec!["--controllers".into(), CONTROLLERS.into()],
        Some(e) => {
            let mut args = vec!["--controllers".into(), format!("{CONTROLLERS},lbipam")];
            args.extend(e.check_args());
            args.extend(["--lb-pool".into(), LB_POOL.into()]);
            args
        }
    }
}

/// The LoadBalancer Services among `services`, and how many of them hold an address.
pub fn load_balancers_addressed(services: &[Service]) -> (usize, usize) {
    let lbs = services.iter().filter(|s| is_load_balancer(s));
    let addressed = lbs.clone().filter(|s| {
        let status = s.status.as_ref().and_then(|s| s.load_balancer.as_ref());
        status
            .and_then(|lb| lb.ingress.as_ref())
            .is_some_and(|i| i.iter().any(|i| i.ip.is_some()))
    });
    (lbs.count(), addressed.count())
}

/// A Translation's kind: its name's first segment (`pod`, `endpoints-port`, …); for a
/// global one, that and its key (`midonet-global.edge`).
pub fn translation_kind(name: &str) -> String {
    let first = name.split('.').next().unwrap_or(name);
    match name.rsplit('.').next().filter(|_| name.contains('.')) {
        Some(key) if first == GLOBAL_KIND => format!("{first}.{key}"),
        _ => first.to_string(),
    }
}

/// Translations and the backend resources they ask for (distinct item paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub translations: usize,
    pub resources: usize,
}

/// `translations`, counted by kind (and `all`).
pub fn count_by_kind(translations: &[Owned]) -> BTreeMap<String, Count> {
    let mut paths: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut out: BTreeMap<String, Count> = BTreeMap::new();
    for o in translations {
        let t = &o.translation;
        let kind = translation_kind(&t.name);
        let item_paths = t
            .resources
            .iter()
            .filter_map(|e| Resource::from_entry(e).ok())
            .map(|r| r.item_path());
        for k in [kind, "all".to_string()] {
            out.entry(k.clone()).or_default().translations += 1;
            paths.entry(k).or_default().extend(item_paths.clone());
        }
    }
    for (k, p) in paths {
        out.entry(k).or_default().resources = p.len();
    }
    out
}

/// What the edge and its Services add, on paper: the Translations of the scenario's objects
/// with the edge, and without it, by kind.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Share {
    pub with_edge: BTreeMap<String, Count>,
    pub without_edge: BTreeMap<String, Count>,
}

impl Share {
    pub fn of(with_edge: &[Owned], without_edge: &[Owned]) -> Share {
        Share {
            with_edge: count_by_kind(with_edge),
            without_edge: count_by_kind(without_edge),
        }
    }

    /// `services` as they would be without the edge: ClusterIP, no node ports, no
    /// `externalTrafficPolicy`, no load-balancer status.
    pub fn plain_services(services: &[Service]) -> Vec<Service> {
        let mut out = services.to_vec();
        for s in &mut out {
            s.status = None;
            if let Some(spec) = s.spec.as_mut() {
                spec.type_ = Some("ClusterIP".into());
                spec.external_traffic_policy = None;
                for p in spec.ports.iter_mut().flatten() {
                    p.node_port = None;
                }
            }
        }
        out
    }

    /// Per kind that differs (and `all`): (kind, added Translations, added resources).
    pub fn added(&self) -> Vec<(String, i64, i64)> {
        let kinds: BTreeSet<&String> = self
            .with_edge
            .keys()
            .chain(self.without_edge.keys())
            .collect();
        let signed = |c: Option<&Count>| {
            let c = c.copied().unwrap_or_default();
            (c.translations as i64, c.resources as i64)
        };
        kinds
            .into_iter()
            .filter_map(|k| {
                let (t1, r1) = signed(self.with_edge.get(k));
                let (t0, r0) = signed(self.without_edge.get(k));
                (t1 != t0 || r1 != r0).then(|| (k.clone(), t1 - t0, r1 - r0))
            })
            .collect()
    }

    /// One line: what is added in all, then by kind.
    pub fn describe(&self) -> String {
        let added = self.added();
        let all = added.iter().find(|(k, ..)| k == "all");
        let (t, r) = all.map_or((0, 0), |(_, t, r)| (*t, *r));
        let parts: Vec<String> = added
            .iter()
            .filter(|(k, ..)| k != "all")
            .map(|(k, t, r)| format!("{k} {t:+}/{r:+}"))
            .collect();
        format!("{t:+} / {r:+} ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_testkit::scenario::{Scale, Scenario};

    /// The edge written to a file of this test's own (tests run in parallel in one
    /// process).
    fn edge_for(test: &str) -> BenchEdge {
        let file = std::env::temp_dir().join(format!(
            "midonet-kube-bench-{}-{test}.json",
            std::process::id()
        ));
        BenchEdge::write_at(file).unwrap()
    }

    #[test]
    fn the_settings_are_what_the_controllers_accept() {
        let e = edge_for("settings");
        assert_eq!(e.edge.uplinks.len(), 2);
        assert_eq!(e.gateways.len(), 2);
        assert_eq!(e.edge.uplinks[1].host, e.gateways[1].1);
        // Every pod address of the scenario is in the pod network the edge routes.
        let s = Scenario::new("t", Scale::S);
        let net = &e.edge.cluster_cidrs[0];
        assert!([0, 1999].iter().all(|i| net.contains(s.pod_ip(*i))));
        let args = controller_args(Some(&e));
        assert!(args.contains(&format!("{CONTROLLERS},lbipam")));
        std::fs::remove_file(&e.file).unwrap();
    }

    #[test]
    fn the_floor_gives_each_load_balancer_the_pools_next_address() {
        let mut s = Scenario::new("t", Scale::S);
        s.edge_services_every = 10;
        let services: Vec<Service> = (0..30).map(|i| s.service(i)).collect();
        assert_eq!(load_balancers_addressed(&services), (3, 0));
        let given = BenchEdge::with_ingress(&services).unwrap();
        assert_eq!(load_balancers_addressed(&given), (3, 3));
        let ip = |i: usize| {
            given[i]
                .status
                .clone()
                .unwrap()
                .load_balancer
                .unwrap()
                .ingress
        };
        assert_eq!(ip(12).unwrap()[0].ip.as_deref(), Some("172.16.0.2"));
        assert!(given[3].status.is_none());
    }

    #[test]
    fn the_share_is_an_ingress_jump_per_load_balancer_and_a_node_port_jump_unless_local() {
        let e = edge_for("share");
        std::fs::remove_file(&e.file).unwrap();
        let mut s = Scenario::new("t", Scale::SMALL);
        s.edge_services_every = 2;
        // Service 0 a LoadBalancer (Cluster), Service 1 NodePort (Local), as the apiserver
        // stores them.
        let services: Vec<Service> = (0..2)
            .map(|i| {
                let mut svc = s.service(i);
                let spec = svc.spec.as_mut().unwrap();
                spec.cluster_ip = Some(Scenario::cluster_ip(i).to_string());
                spec.type_ = Some(if i == 0 { "LoadBalancer" } else { "NodePort" }.into());
                spec.ports.as_mut().unwrap()[0].node_port = Some(30000 + i as i32);
                svc
            })
            .collect();
        let with = BenchEdge::with_ingress(&services).unwrap();
        let cfg = e.translator_config();
        let translate = |cfg: &TranslatorConfig, svcs: &[Service]| {
            crate::floor::translate_all(cfg, &[], &[], svcs, &[])
        };
        let share = Share::of(
            &translate(&cfg, &with),
            &translate(
                &TranslatorConfig::default(),
                &Share::plain_services(&services),
            ),
        );
        let added = share.added();
        let service = added.iter().find(|(k, ..)| k == "service");
        // Service 0: a node-port jump and an ingress jump. Service 1: none, its node port is
        // DNATed per node by its Endpoints' Translation (none here).
        assert_eq!(service, Some(&("service".to_string(), 0, 2)), "{added:?}");
        assert!(added
            .iter()
            .any(|(k, t, _)| k == "midonet-global.edge" && *t == 1));
    }

    #[test]
    fn a_global_translations_kind_carries_its_key() {
        assert_eq!(
            translation_kind("midonet-global.2.edge"),
            "midonet-global.edge"
        );
        assert_eq!(
            translation_kind("endpoints-port.2.ns.svc"),
            "endpoints-port"
        );
        assert_eq!(translation_kind("pod"), "pod");
    }
}
