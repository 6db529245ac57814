//! The edge settings file (`--edge-config`) as written, and its validation into
//! [`Edge`].
//!
//! Guarantees: [`EdgeSpec::validate`] answers an [`Edge`] only when every field is usable
//! (IPv4 everywhere, at least one uplink and one cluster CIDR, distinct uplink names, a
//! host UUID and a Linux interface name per uplink, every next hop on its uplink's
//! network and not the port's own address, an edge link of /30 or wider); otherwise every
//! problem found, each naming the field (`uplinks[1].nextHops[0]`) and the value. It never
//! panics on any input. Reading the file (YAML or JSON) is the caller's.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::addr::{parse_cidr, parse_ipv4, CidrError, CidrRules};
use crate::config::{Edge, Uplink};
use crate::model::Ipv4Cidr;

/// The edge link when the file names none: link-local, out of any cluster's way.
pub const DEFAULT_LINK_CIDR: &str = "169.254.0.0/30";

/// Linux's longest interface name (IFNAMSIZ - 1).
const MAX_INTERFACE_NAME: usize = 15;

/// The settings file, as written (camelCase members; unknown members are refused).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeSpec {
    #[serde(default)]
    pub uplinks: Vec<UplinkSpec>,
    /// The pod networks (e.g. the controller-manager's `--cluster-cidr`).
    #[serde(default)]
    pub cluster_cidrs: Vec<String>,
    /// The Service networks (the apiserver's `--service-cluster-ip-range`).
    #[serde(default)]
    pub service_cidrs: Vec<String>,
    /// External-IP and load-balancer ranges the upstream routes to the edge.
    #[serde(default)]
    pub external_cidrs: Vec<String>,
    /// The edge–cluster link; [`DEFAULT_LINK_CIDR`] if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_cidr: Option<String>,
}

/// One uplink as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UplinkSpec {
    pub name: String,
    /// The gateway's MidoNet host ID.
    pub host: String,
    pub interface: String,
    /// The port's address with the uplink network's prefix, e.g. `192.0.2.2/24`.
    pub address: String,
    #[serde(default)]
    pub next_hops: Vec<String>,
    /// The gateway host's tunnel endpoint: the edge joins the host to the default tunnel
    /// zone with it. Leave it out for a host that is a Node (its Translation joins it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_ip: Option<String>,
}

impl EdgeSpec {
    /// The validated edge, or every problem found.
    pub fn validate(&self) -> Result<Edge, Vec<String>> {
        let mut errors = Vec::new();
        if self.uplinks.is_empty() {
            errors.push("uplinks: at least one uplink is needed".to_string());
        }
        let mut names = BTreeSet::new();
        let mut uplinks = Vec::new();
        for (i, u) in self.uplinks.iter().enumerate() {
            if !names.insert(u.name.as_str()) {
                errors.push(format!("uplinks[{i}].name {:?}: used twice", u.name));
            }
            if let Some(up) = uplink(i, u, &mut errors) {
                let other = uplinks
                    .iter()
                    .find(|o: &&Uplink| o.host == up.host && o.tunnel_ip != up.tunnel_ip);
                if let Some(o) = other {
                    errors.push(format!(
                        "uplinks[{i}].tunnelIp: host {} has another tunnel IP in uplink {:?}",
                        up.host, o.name
                    ));
                }
                uplinks.push(up);
            }
        }
        let cluster_cidrs = cidrs("clusterCidrs", &self.cluster_cidrs, &mut errors);
        if self.cluster_cidrs.is_empty() {
            errors.push("clusterCidrs: at least one pod network is needed".to_string());
        }
        let service_cidrs = cidrs("serviceCidrs", &self.service_cidrs, &mut errors);
        if self.service_cidrs.is_empty() {
            errors.push(
                "serviceCidrs: at least one Service network is needed (the apiserver's --service-cluster-ip-range)"
                    .to_string(),
            );
        }
        let external_cidrs = cidrs("externalCidrs", &self.external_cidrs, &mut errors);
        let raw_link = self.link_cidr.as_deref().unwrap_or(DEFAULT_LINK_CIDR);
        let link = cidr("linkCidr", raw_link, CidrRules::POD_CIDR, &mut errors);
        match (errors.is_empty(), link) {
            (true, Some(link)) => Ok(Edge {
                uplinks,
                cluster_cidrs,
                service_cidrs,
                external_cidrs,
                link,
            }),
            _ => Err(errors),
        }
    }
}

fn uplink(i: usize, u: &UplinkSpec, errors: &mut Vec<String>) -> Option<Uplink> {
    let at = |field: &str| format!("uplinks[{i}].{field}");
    let before = errors.len();
    if u.name.trim().is_empty() {
        errors.push(format!("{}: empty", at("name")));
    }
    let host = Uuid::parse_str(u.host.trim())
        .map_err(|_| errors.push(format!("{} {:?}: not a UUID", at("host"), u.host)))
        .ok();
    let iface = u.interface.as_str();
    if iface.is_empty() || iface.len() > MAX_INTERFACE_NAME || iface.contains(['/', ' ']) {
        errors.push(format!(
            "{} {iface:?}: not a Linux interface name (1-{MAX_INTERFACE_NAME} characters, no '/' or space)",
            at("interface")
        ));
    }
    let (address, subnet) = match port_address(&u.address) {
        Some((ip, net)) => (Some(ip), Some(net)),
        None => {
            errors.push(format!(
                "{} {:?}: not an IPv4 address with a prefix of /30 or wider (e.g. 192.0.2.2/24)",
                at("address"),
                u.address
            ));
            (None, None)
        }
    };
    let tunnel_ip = match u.tunnel_ip.as_deref().map(parse_ipv4) {
        None => None,
        Some(Ok(ip)) => Some(ip),
        Some(Err(_)) => {
            errors.push(format!(
                "{} {:?}: not an IPv4 address",
                at("tunnelIp"),
                u.tunnel_ip.as_deref().unwrap_or_default()
            ));
            None
        }
    };
    if u.next_hops.is_empty() {
        errors.push(format!(
            "{}: at least one next hop is needed",
            at("nextHops")
        ));
    }
    let mut next_hops = Vec::new();
    for (j, raw) in u.next_hops.iter().enumerate() {
        let field = at(&format!("nextHops[{j}]"));
        match parse_ipv4(raw) {
            Err(_) => errors.push(format!("{field} {raw:?}: not an IPv4 address")),
            Ok(hop) if Some(hop) == address => {
                errors.push(format!("{field} {raw:?}: is the port's own address"))
            }
            Ok(hop) if subnet.is_some_and(|s| !s.contains(hop)) => errors.push(format!(
                "{field} {raw:?}: not on the uplink's network {}",
                subnet.map(|s| s.to_string()).unwrap_or_default()
            )),
            Ok(hop) => next_hops.push(hop),
        }
    }
    if errors.len() != before {
        return None;
    }
    Some(Uplink {
        name: u.name.trim().to_string(),
        host: host?,
        interface: iface.to_string(),
        address: address?,
        subnet: subnet?,
        next_hops,
        tunnel_ip,
    })
}

/// `a.b.c.d/n` as a port address and its network; the address must be a host of it.
fn port_address(raw: &str) -> Option<(Ipv4Addr, Ipv4Cidr)> {
    let (ip, _) = raw.trim().split_once('/')?;
    let ip = parse_ipv4(ip).ok()?;
    let net = parse_cidr(raw, CidrRules::POD_CIDR).ok()?;
    (ip != net.network()).then_some((ip, net))
}

fn cidrs(field: &str, raw: &[String], errors: &mut Vec<String>) -> Vec<Ipv4Cidr> {
    raw.iter()
        .enumerate()
        .filter_map(|(i, r)| cidr(&format!("{field}[{i}]"), r, CidrRules::IP_BLOCK, errors))
        .collect()
}

fn cidr(field: &str, raw: &str, rules: CidrRules, errors: &mut Vec<String>) -> Option<Ipv4Cidr> {
    match parse_cidr(raw, rules) {
        Ok(c) => Some(c),
        Err(e) => {
            let why = match e {
                CidrError::Ipv6 => "IPv6; MidoNet needs IPv4".to_string(),
                CidrError::Invalid => "not an IPv4 CIDR".to_string(),
                CidrError::PrefixTooLong { max } => format!("needs a prefix of /{max} or wider"),
            };
            errors.push(format!("{field} {raw:?}: {why}"));
            None
        }
    }
}

/// A cluster with an edge of two uplinks on one gateway host (the second with two next
/// hops), for the translators' tests.
#[cfg(test)]
pub(crate) fn example_config() -> crate::translate::TranslatorConfig {
    let up = |name: &str, addr: &str, hops: &[&str]| UplinkSpec {
        name: name.into(),
        host: "6f1b1a52-1d27-4a3e-9b53-4f5e2c5b1a01".into(),
        interface: "eth1".into(),
        address: addr.into(),
        next_hops: hops.iter().map(|h| h.to_string()).collect(),
        tunnel_ip: Some("10.0.0.9".into()),
    };
    let spec = EdgeSpec {
        uplinks: vec![
            up("a", "192.0.2.2/24", &["192.0.2.1"]),
            up("b", "198.51.100.2/24", &["198.51.100.1", "198.51.100.254"]),
        ],
        cluster_cidrs: vec!["10.244.0.0/16".into()],
        service_cidrs: vec!["10.96.0.0/12".into()],
        external_cidrs: vec!["203.0.113.0/24".into()],
        link_cidr: None,
    };
    match spec.validate() {
        Ok(edge) => crate::translate::TranslatorConfig {
            edge: Some(std::sync::Arc::new(edge)),
            ..crate::translate::TranslatorConfig::default()
        },
        Err(e) => panic!("the example edge is valid: {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uplink(name: &str, address: &str, hops: &[&str]) -> UplinkSpec {
        UplinkSpec {
            name: name.into(),
            host: "6f1b1a52-1d27-4a3e-9b53-4f5e2c5b1a01".into(),
            interface: "eth1".into(),
            address: address.into(),
            next_hops: hops.iter().map(|h| h.to_string()).collect(),
            tunnel_ip: None,
        }
    }

    fn spec(uplinks: Vec<UplinkSpec>) -> EdgeSpec {
        EdgeSpec {
            uplinks,
            cluster_cidrs: vec!["10.244.0.0/16".into()],
            service_cidrs: vec!["10.96.0.0/12".into()],
            external_cidrs: vec!["203.0.113.0/24".into()],
            link_cidr: None,
        }
    }

    #[test]
    fn a_valid_file_gives_the_edge() {
        let edge = spec(vec![
            uplink("a", "192.0.2.2/24", &["192.0.2.1", "192.0.2.254"]),
            uplink("b", "198.51.100.2/30", &["198.51.100.1"]),
        ])
        .validate()
        .unwrap();
        assert_eq!(edge.uplinks.len(), 2);
        assert_eq!(edge.uplinks[0].address, Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(edge.uplinks[0].subnet.to_string(), "192.0.2.0/24");
        assert_eq!(edge.uplinks[0].next_hops.len(), 2);
        assert_eq!(edge.link.to_string(), "169.254.0.0/30");
        assert_eq!(edge.external_cidrs[0].to_string(), "203.0.113.0/24");
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let mut bad = uplink("a", "192.0.2.0/24", &["10.0.0.1", "x"]);
        bad.host = "not-a-uuid".into();
        bad.interface = "a-much-too-long-interface".into();
        let mut s = spec(vec![
            bad,
            uplink("a", "192.0.2.2/24", &["192.0.2.2"]),
            uplink("c", "192.0.2.2/24", &[]),
        ]);
        s.cluster_cidrs = vec!["fd00::/64".into()];
        s.link_cidr = Some("169.254.0.0/31".into());
        let errors = s.validate().unwrap_err();
        let want = [
            "uplinks[0].host \"not-a-uuid\": not a UUID",
            "uplinks[0].interface \"a-much-too-long-interface\"",
            "uplinks[0].address \"192.0.2.0/24\"",
            "uplinks[0].nextHops[1] \"x\": not an IPv4 address",
            "uplinks[1].name \"a\": used twice",
            "uplinks[1].nextHops[0] \"192.0.2.2\": is the port's own address",
            "uplinks[2].nextHops: at least one next hop is needed",
            "clusterCidrs[0] \"fd00::/64\": IPv6",
            "linkCidr \"169.254.0.0/31\": needs a prefix of /30 or wider",
        ];
        for w in want {
            assert!(errors.iter().any(|e| e.starts_with(w)), "{w}: {errors:#?}");
        }
        // A next hop off the uplink's network is named with the network (the address was
        // unusable in uplinks[0], so it is checked on a good one).
        let off = spec(vec![uplink("a", "192.0.2.2/24", &["10.0.0.1"])])
            .validate()
            .unwrap_err();
        assert_eq!(
            off,
            ["uplinks[0].nextHops[0] \"10.0.0.1\": not on the uplink's network 192.0.2.0/24"]
        );
        assert_eq!(
            EdgeSpec::default().validate().unwrap_err(),
            [
                "uplinks: at least one uplink is needed",
                "clusterCidrs: at least one pod network is needed",
                "serviceCidrs: at least one Service network is needed (the apiserver's --service-cluster-ip-range)"
            ]
        );
    }
}
