//! The LoadBalancer address decisions, as pure functions of the Services the IPAM sees and
//! the configured pools; [`super`] is the I/O around them.
//!
//! **Guaranteed**:
//! - *scope* ([`role`]): a Service of type LoadBalancer whose `spec.loadBalancerClass` is
//!   unset or [`LB_CLASS`] is managed; a LoadBalancer of another class is never touched; a
//!   Service of another type only loses the addresses of the pools its status still shows;
//! - *one holder per address* ([`Ledger::of`]): the ledger is rebuilt from the Services'
//!   `status.loadBalancer.ingress[].ip` (a status written but not yet seen, [`Claims`],
//!   standing for the one the Service shows), so a restart recovers it; an address shown
//!   by several managed Services is held by the one that requested it in
//!   `spec.loadBalancerIP`, else by the oldest (then by namespace and name): every other
//!   one is moved off it;
//! - *choice* ([`decide`]): a requested address is given only if it lies in a pool and no
//!   other Service holds it; otherwise the lowest free usable address of the pools, in the
//!   order they were configured. A Service keeps an address it already holds. Usable: a
//!   CIDR's every address but, for prefixes up to /30, its network and broadcast addresses
//!   (as Cilium's LB IPAM by default);
//! - *refusals* are [`Decision::Refuse`]: the caller reports them as Warning events.
//!
//! **Assumed**: IPv4 only (MidoNet's REST API validates IPv4); decisions for two Services
//! are not made concurrently against the same ledger (the shell runs one at a time).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::ObjectRef;
use midonet_translators::addr::{parse_ipv4, AddrError};
use midonet_translators::model::Ipv4Cidr;

use crate::events::reason;

/// The `spec.loadBalancerClass` this IPAM serves besides no class at all.
pub const LB_CLASS: &str = "midonet.org/lb";

/// The configured address pools, in their configured order. Empty: IPAM off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pools(Vec<Ipv4Cidr>);

impl Pools {
    pub fn new(cidrs: Vec<Ipv4Cidr>) -> Pools {
        Pools(cidrs)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A CIDR's usable addresses, first and last (inclusive), as numbers.
    fn usable(cidr: &Ipv4Cidr) -> (u32, u32) {
        let first = u32::from(cidr.network());
        let size_minus_one = u32::MAX
            .checked_shr(u32::from(cidr.prefix_len))
            .unwrap_or(0);
        let last = first | size_minus_one;
        if cidr.prefix_len <= 30 {
            (first + 1, last - 1)
        } else {
            (first, last)
        }
    }

    /// Whether `ip` is a usable address of a pool.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        self.0.iter().any(|c| {
            let (first, last) = Self::usable(c);
            (first..=last).contains(&n)
        })
    }

    /// The lowest usable address of the first pool that has one `taken` does not take.
    pub fn first_free(&self, taken: impl Fn(Ipv4Addr) -> bool) -> Option<Ipv4Addr> {
        self.0.iter().find_map(|c| {
            let (first, last) = Self::usable(c);
            // At most one step per taken address: cheap however large the pool.
            (first..=last).map(Ipv4Addr::from).find(|ip| !taken(*ip))
        })
    }
}

/// What a Service's `spec.loadBalancerIP` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    None,
    Ip(Ipv4Addr),
    /// Set, but not an IPv4 address.
    Invalid(String),
}

/// How the IPAM sees a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A LoadBalancer of no class or of [`LB_CLASS`]: it gets an address.
    Managed(Requested),
    /// A LoadBalancer of another class: left alone.
    Foreign,
    /// Not (or no more) a LoadBalancer.
    NotLoadBalancer,
}

pub fn role(svc: &Service) -> Role {
    let Some(spec) = &svc.spec else {
        return Role::NotLoadBalancer;
    };
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return Role::NotLoadBalancer;
    }
    if spec
        .load_balancer_class
        .as_deref()
        .is_some_and(|c| c != LB_CLASS)
    {
        return Role::Foreign;
    }
    let requested = match spec.load_balancer_ip.as_deref().map(str::trim) {
        None | Some("") => Requested::None,
        Some(s) => match parse_ipv4(s) {
            Ok(ip) => Requested::Ip(ip),
            Err(AddrError::Ipv6) => Requested::Invalid(format!("{s} (IPv6; MidoNet needs IPv4)")),
            Err(AddrError::Invalid) => Requested::Invalid(s.to_string()),
        },
    };
    Role::Managed(requested)
}

/// The IPv4 addresses of the Service's `status.loadBalancer.ingress`, in order (hostnames
/// and unparsable entries are skipped).
pub fn shown(svc: &Service) -> Vec<Ipv4Addr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| match i.ip.as_deref()?.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => Some(ip),
            _ => None,
        })
        .collect()
}

/// The status this process wrote, per Service, until the Service shows it: its one
/// ingress address, or none (`None`: its ingress was removed).
pub type Claims = HashMap<ObjectRef<Service>, Option<Ipv4Addr>>;

/// Whether `svc` shows what `claim` wrote.
pub fn shows(svc: &Service, claim: Option<Ipv4Addr>) -> bool {
    shown(svc) == Vec::from_iter(claim)
}

/// Which managed Service holds which pool address.
#[derive(Debug, Default)]
pub struct Ledger {
    holders: BTreeMap<Ipv4Addr, ObjectRef<Service>>,
}

/// Rank of a claim on an address: lower wins.
type Rank = (bool, Option<Time>, Option<String>, String);

impl Ledger {
    /// The ledger of `services` (every Service the IPAM sees), with `claims`: what this
    /// process wrote into a Service's status that the Service may not show yet.
    pub fn of<'a>(
        services: impl IntoIterator<Item = &'a Service>,
        pools: &Pools,
        claims: &Claims,
    ) -> Ledger {
        let mut best: BTreeMap<Ipv4Addr, (Rank, ObjectRef<Service>)> = BTreeMap::new();
        for svc in services {
            let Role::Managed(requested) = role(svc) else {
                continue;
            };
            let key = ObjectRef::from_obj(svc);
            // What was written last stands for what the Service shows.
            let ips: Vec<Ipv4Addr> = match claims.get(&key) {
                Some(claim) => claim.iter().copied().collect(),
                None => shown(svc),
            };
            for ip in ips.into_iter().filter(|ip| pools.contains(*ip)) {
                let rank: Rank = (
                    requested != Requested::Ip(ip),
                    svc.metadata.creation_timestamp.clone(),
                    key.namespace.clone(),
                    key.name.clone(),
                );
                let better = best.get(&ip).is_none_or(|(r, _)| rank < *r);
                if better {
                    best.insert(ip, (rank, key.clone()));
                }
            }
        }
        Ledger {
            holders: best.into_iter().map(|(ip, (_, k))| (ip, k)).collect(),
        }
    }

    /// Who holds `ip`.
    pub fn holder(&self, ip: Ipv4Addr) -> Option<&ObjectRef<Service>> {
        self.holders.get(&ip)
    }

    /// Whether `ip` is held by a Service other than `me`.
    fn taken_from(&self, me: &ObjectRef<Service>, ip: Ipv4Addr) -> bool {
        self.holder(ip).is_some_and(|h| h != me)
    }
}

/// `namespace/name`.
fn named(key: &ObjectRef<Service>) -> String {
    match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.clone(),
    }
}

/// What to do about one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Its status is right.
    Keep,
    /// Its status becomes exactly `ingress: [{ip}]`.
    Assign(Ipv4Addr),
    /// Its status loses its ingress: it holds a pool address it should not.
    Clear,
    /// No address for it: report `reason` (a Warning) with `message`; `clear` when its status
    /// shows a pool address it must give up.
    Refuse {
        reason: &'static str,
        message: String,
        clear: bool,
    },
}

/// The decision for `svc` given the `ledger` of every Service and the `pools`.
pub fn decide(svc: &Service, pools: &Pools, ledger: &Ledger) -> Decision {
    let me = ObjectRef::from_obj(svc);
    let shown = shown(svc);
    let shows_pool_address = shown.iter().any(|ip| pools.contains(*ip));
    let requested = match role(svc) {
        Role::Foreign => return Decision::Keep,
        Role::NotLoadBalancer if shows_pool_address => return Decision::Clear,
        Role::NotLoadBalancer => return Decision::Keep,
        Role::Managed(requested) => requested,
    };
    let refuse = |reason, message| Decision::Refuse {
        reason,
        message,
        clear: shows_pool_address,
    };
    let ip = match requested {
        Requested::Invalid(s) => {
            let msg = format!("spec.loadBalancerIP {s:?} is not an IPv4 address");
            return refuse(reason::LB_IP_UNAVAILABLE, msg);
        }
        Requested::Ip(ip) if !pools.contains(ip) => {
            let msg = format!("spec.loadBalancerIP {ip} is in no address pool (--lb-pool)");
            return refuse(reason::LB_IP_UNAVAILABLE, msg);
        }
        Requested::Ip(ip) => match ledger.holder(ip) {
            Some(other) if *other != me => {
                let msg = format!(
                    "spec.loadBalancerIP {ip} is held by Service {}",
                    named(other)
                );
                return refuse(reason::LB_IP_UNAVAILABLE, msg);
            }
            _ => ip,
        },
        Requested::None => {
            let held = shown
                .iter()
                .copied()
                .find(|ip| pools.contains(*ip) && !ledger.taken_from(&me, *ip));
            match held.or_else(|| pools.first_free(|ip| ledger.holder(ip).is_some())) {
                Some(ip) => ip,
                None => {
                    let msg = "every address of the pools (--lb-pool) is taken".to_string();
                    return refuse(reason::LB_POOL_EXHAUSTED, msg);
                }
            }
        }
    };
    if shown == [ip] {
        Decision::Keep
    } else {
        Decision::Assign(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use midonet_translators::addr::{parse_cidr, CidrRules};
    use serde_json::json;

    fn pools(cidrs: &[&str]) -> Pools {
        Pools::new(
            cidrs
                .iter()
                .map(|c| parse_cidr(c, CidrRules::LB_POOL).unwrap())
                .collect(),
        )
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// A Service `name` in `ns`, of `type_`, created at second `age`, with `extra` spec
    /// fields and the ingress addresses `shown`.
    fn svc(name: &str, type_: &str, age: u32, extra: serde_json::Value, shown: &[&str]) -> Service {
        let mut spec = json!({"type": type_, "ports": [{"port": 80}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let ingress: Vec<_> = shown.iter().map(|ip| json!({"ip": ip})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                         "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z")},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": ingress}},
        }))
        .unwrap()
    }

    fn lb(name: &str, shown: &[&str]) -> Service {
        svc(name, "LoadBalancer", 0, json!({}), shown)
    }

    fn decide_among(target: &Service, others: &[Service], pools: &Pools) -> Decision {
        let all = others.iter().chain([target]);
        decide(target, pools, &Ledger::of(all, pools, &HashMap::new()))
    }

    #[test]
    fn usable_addresses_skip_network_and_broadcast_up_to_a_slash_30() {
        let p = pools(&["192.0.2.0/30", "198.51.100.7/32", "203.0.113.0/31"]);
        assert!(!p.contains(ip("192.0.2.0")));
        assert!(p.contains(ip("192.0.2.1")) && p.contains(ip("192.0.2.2")));
        assert!(!p.contains(ip("192.0.2.3")));
        assert!(p.contains(ip("198.51.100.7")));
        assert!(p.contains(ip("203.0.113.0")) && p.contains(ip("203.0.113.1")));
        assert!(!p.contains(ip("10.0.0.1")));
        let everything = pools(&["0.0.0.0/0"]);
        assert!(everything.contains(ip("255.255.255.254")));
        assert!(!everything.contains(ip("255.255.255.255")));
    }

    #[test]
    fn the_lowest_free_address_of_the_pools_in_order_is_given() {
        let p = pools(&["192.0.2.0/30", "198.51.100.0/29"]);
        let a = lb("a", &[]);
        assert_eq!(decide_among(&a, &[], &p), Decision::Assign(ip("192.0.2.1")));
        let others = [lb("b", &["192.0.2.1"]), lb("c", &["192.0.2.2"])];
        assert_eq!(
            decide_among(&a, &others, &p),
            Decision::Assign(ip("198.51.100.1")),
            "the next pool once the first is full"
        );
    }

    #[test]
    fn a_held_address_is_kept_and_never_given_twice() {
        let p = pools(&["192.0.2.0/29"]);
        let a = lb("a", &["192.0.2.3"]);
        assert_eq!(
            decide_among(&a, &[lb("b", &["192.0.2.1"])], &p),
            Decision::Keep
        );
        // Two Services show the same address: the older keeps it, the other moves.
        let old = svc("old", "LoadBalancer", 1, json!({}), &["192.0.2.1"]);
        let young = svc("young", "LoadBalancer", 2, json!({}), &["192.0.2.1"]);
        assert_eq!(
            decide_among(&old, std::slice::from_ref(&young), &p),
            Decision::Keep
        );
        assert_eq!(
            decide_among(&young, &[old], &p),
            Decision::Assign(ip("192.0.2.2"))
        );
    }

    #[test]
    fn claims_not_yet_seen_hold_their_address() {
        let p = pools(&["192.0.2.0/29"]);
        let (a, b) = (lb("a", &[]), lb("b", &[]));
        let claims = HashMap::from([(ObjectRef::from_obj(&a), Some(ip("192.0.2.1")))]);
        let ledger = Ledger::of([&a, &b], &p, &claims);
        assert_eq!(decide(&b, &p, &ledger), Decision::Assign(ip("192.0.2.2")));
        // A claim of a Service that is gone holds nothing.
        let ledger = Ledger::of([&b], &p, &claims);
        assert_eq!(decide(&b, &p, &ledger), Decision::Assign(ip("192.0.2.1")));
        // A status cleared but still shown holds nothing either.
        let c = lb("c", &["192.0.2.1"]);
        let cleared = HashMap::from([(ObjectRef::from_obj(&c), None)]);
        let ledger = Ledger::of([&b, &c], &p, &cleared);
        assert_eq!(decide(&b, &p, &ledger), Decision::Assign(ip("192.0.2.1")));
        assert!(shows(&b, None) && !shows(&c, None) && shows(&c, Some(ip("192.0.2.1"))));
    }

    #[test]
    fn a_requested_address_is_given_when_free_and_in_a_pool() {
        let p = pools(&["192.0.2.0/29"]);
        let want = |s: &str| svc("a", "LoadBalancer", 0, json!({"loadBalancerIP": s}), &[]);
        assert_eq!(
            decide_among(&want("192.0.2.5"), &[], &p),
            Decision::Assign(ip("192.0.2.5"))
        );
        let taken = decide_among(&want("192.0.2.5"), &[lb("b", &["192.0.2.5"])], &p);
        assert!(
            matches!(&taken, Decision::Refuse { reason: r, message, clear: false }
                if *r == reason::LB_IP_UNAVAILABLE && message.contains("ns/b")),
            "{taken:?}"
        );
        for bad in ["10.9.9.9", "192.0.2.7", "nonsense", "2001:db8::1"] {
            let d = decide_among(&want(bad), &[], &p);
            assert!(
                matches!(&d, Decision::Refuse { reason: r, .. } if *r == reason::LB_IP_UNAVAILABLE),
                "{bad}: {d:?}"
            );
        }
        // The requester wins an address another Service shows.
        let requester = svc(
            "z",
            "LoadBalancer",
            9,
            json!({"loadBalancerIP": "192.0.2.1"}),
            &[],
        );
        let holder = lb("a", &["192.0.2.1"]);
        let claims = HashMap::from([(ObjectRef::from_obj(&requester), Some(ip("192.0.2.1")))]);
        let ledger = Ledger::of([&requester, &holder], &p, &claims);
        assert_eq!(
            decide(&holder, &p, &ledger),
            Decision::Assign(ip("192.0.2.2"))
        );
    }

    #[test]
    fn a_requested_address_replaces_another_one_shown() {
        let p = pools(&["192.0.2.0/29"]);
        let a = svc(
            "a",
            "LoadBalancer",
            0,
            json!({"loadBalancerIP": "192.0.2.4"}),
            &["192.0.2.1"],
        );
        assert_eq!(decide_among(&a, &[], &p), Decision::Assign(ip("192.0.2.4")));
        let unavailable = svc(
            "a",
            "LoadBalancer",
            0,
            json!({"loadBalancerIP": "10.0.0.1"}),
            &["192.0.2.1"],
        );
        assert!(matches!(
            decide_among(&unavailable, &[], &p),
            Decision::Refuse { clear: true, .. }
        ));
    }

    #[test]
    fn an_exhausted_pool_is_refused() {
        let p = pools(&["192.0.2.0/30"]);
        let others = [lb("b", &["192.0.2.1"]), lb("c", &["192.0.2.2"])];
        let d = decide_among(&lb("a", &[]), &others, &p);
        assert!(
            matches!(&d, Decision::Refuse { reason: r, clear: false, .. } if *r == reason::LB_POOL_EXHAUSTED),
            "{d:?}"
        );
    }

    #[test]
    fn only_no_class_or_ours_is_managed() {
        let p = pools(&["192.0.2.0/29"]);
        let ours = svc(
            "a",
            "LoadBalancer",
            0,
            json!({"loadBalancerClass": LB_CLASS}),
            &[],
        );
        assert_eq!(
            decide_among(&ours, &[], &p),
            Decision::Assign(ip("192.0.2.1"))
        );
        let theirs = svc(
            "a",
            "LoadBalancer",
            0,
            json!({"loadBalancerClass": "example.com/lb"}),
            &["192.0.2.1"],
        );
        assert_eq!(role(&theirs), Role::Foreign);
        assert_eq!(decide_among(&theirs, &[], &p), Decision::Keep);
        // Another class's address is not in the ledger: given to a Service of ours.
        assert_eq!(
            decide_among(&lb("b", &[]), &[theirs], &p),
            Decision::Assign(ip("192.0.2.1"))
        );
    }

    #[test]
    fn a_service_that_stops_being_a_load_balancer_loses_only_pool_addresses() {
        let p = pools(&["192.0.2.0/29"]);
        let was = svc("a", "ClusterIP", 0, json!({}), &["192.0.2.1"]);
        assert_eq!(decide_among(&was, &[], &p), Decision::Clear);
        let cloud = svc("a", "NodePort", 0, json!({}), &["10.1.1.1"]);
        assert_eq!(decide_among(&cloud, &[], &p), Decision::Keep);
        let plain = svc("a", "ClusterIP", 0, json!({}), &[]);
        assert_eq!(decide_among(&plain, &[], &p), Decision::Keep);
        // Its address is free for the others at once.
        assert_eq!(
            decide_among(&lb("b", &[]), &[was], &p),
            Decision::Assign(ip("192.0.2.1"))
        );
    }

    #[test]
    fn an_address_outside_the_pools_is_replaced() {
        let p = pools(&["192.0.2.0/29"]);
        let a = lb("a", &["10.1.1.1"]);
        assert_eq!(decide_among(&a, &[], &p), Decision::Assign(ip("192.0.2.1")));
    }
}
