//! Parsing of the addresses found in Kubernetes objects, without trusting any of them: one
//! parser per kind of address (IPv4 address, CIDR, MAC).
//!
//! MidoNet's REST API only takes IPv4 (its models validate against `IPv4.regex`), so IPv6 is
//! recognised only to tell the user why it is skipped.

use std::net::{IpAddr, Ipv4Addr};

use crate::model::{Ipv4Cidr, MacAddr};

/// Why a string is not a usable IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrError {
    /// Well-formed, but IPv6.
    Ipv6,
    /// Not an address at all.
    Invalid,
}

/// Parses an IPv4 address; an IPv6 one is reported as such.
pub fn parse_ipv4(s: &str) -> Result<Ipv4Addr, AddrError> {
    match s.trim().parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => Ok(ip),
        Ok(IpAddr::V6(_)) => Err(AddrError::Ipv6),
        Err(_) => Err(AddrError::Invalid),
    }
}

/// Why a string is not a usable IPv4 CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CidrError {
    /// Well-formed, but IPv6.
    Ipv6,
    /// Not a CIDR at all.
    Invalid,
    /// An IPv4 CIDR with a longer prefix than the use allows.
    PrefixTooLong { max: u8 },
}

/// What a use of a CIDR accepts beyond its syntax (see [`parse_cidr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CidrRules {
    /// The longest prefix accepted.
    pub max_prefix: u8,
}

impl CidrRules {
    /// A node's pod CIDR (`spec.podCIDR`, `spec.podCIDRs`): it must hold the pods' gateway
    /// and the node's own address besides the network address, so /30 at most.
    pub const POD_CIDR: CidrRules = CidrRules { max_prefix: 30 };
    /// A NetworkPolicy `ipBlock` (`cidr` and each `except`): any prefix, /32 a single host.
    pub const IP_BLOCK: CidrRules = CidrRules { max_prefix: 32 };
    /// A LoadBalancer address pool (`--lb-pool`): any prefix, /32 a single address.
    pub const LB_POOL: CidrRules = CidrRules { max_prefix: 32 };
}

/// Parses `a.b.c.d/n` into the model's CIDR: the one CIDR parser of the translators. The
/// rules, the same for every use but the prefix limit in `rules`:
///
/// - surrounding whitespace is ignored; the prefix length is 1 to 3 decimal digits (no
///   sign), at most 32;
/// - host bits are cleared: `10.0.0.5/24` is `10.0.0.0/24` (Kubernetes accepts both fields
///   with host bits set, and the network is what they mean);
/// - an IPv6 network (prefix at most 128) is [`CidrError::Ipv6`], so that the caller can
///   say it is skipped because MidoNet needs IPv4, rather than that it is malformed;
/// - a prefix longer than `rules.max_prefix` is [`CidrError::PrefixTooLong`].
///
/// (The model's `Ipv4Cidr::from_str` is not for Kubernetes input: it reads the canonical
/// form a Translation body holds and refuses anything else.)
pub fn parse_cidr(s: &str, rules: CidrRules) -> Result<Ipv4Cidr, CidrError> {
    let (addr, len) = s.trim().split_once('/').ok_or(CidrError::Invalid)?;
    // Only plain decimal digits: `u8::from_str` would also take a leading '+'.
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CidrError::Invalid);
    }
    let prefix: u8 = len.parse().map_err(|_| CidrError::Invalid)?;
    let ip = match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip,
        Ok(IpAddr::V6(_)) if prefix <= 128 => return Err(CidrError::Ipv6),
        _ => return Err(CidrError::Invalid),
    };
    let cidr = Ipv4Cidr::new(ip, prefix).ok_or(CidrError::Invalid)?;
    if prefix > rules.max_prefix {
        return Err(CidrError::PrefixTooLong {
            max: rules.max_prefix,
        });
    }
    Ipv4Cidr::new(cidr.network(), prefix).ok_or(CidrError::Invalid)
}

/// Parses a 48-bit MAC address in any form Go's `net.ParseMAC` takes for 48-bit addresses
/// (see [`MacAddr`]'s `FromStr`), ignoring surrounding whitespace.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    s.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses() {
        assert_eq!(parse_ipv4("10.0.0.1"), Ok(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(parse_ipv4("fd00::1"), Err(AddrError::Ipv6));
        for bad in [
            "",
            "10.0.0",
            "10.0.0.256",
            "host",
            "010.0.0.1",
            "10.0.0.1/32",
        ] {
            assert_eq!(parse_ipv4(bad), Err(AddrError::Invalid), "{bad:?}");
        }
    }

    fn cidr(s: &str) -> Result<Ipv4Cidr, CidrError> {
        parse_cidr(s, CidrRules::IP_BLOCK)
    }

    #[test]
    fn cidr_syntax() {
        assert_eq!(cidr("10.1.2.0/24").unwrap().to_string(), "10.1.2.0/24");
        assert_eq!(cidr(" 10.1.2.0/24 \n").unwrap().to_string(), "10.1.2.0/24");
        assert_eq!(cidr("10.1.2.0/024").unwrap().to_string(), "10.1.2.0/24");
        assert_eq!(cidr("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/0008",
            "10.0.0.0 /8",
            "x/8",
            "/8",
            "10.0.0.0/8/8",
            "010.0.0.0/8",
            "fd00::/129",
        ] {
            assert_eq!(cidr(bad), Err(CidrError::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn cidr_host_bits_are_cleared() {
        for rules in [CidrRules::POD_CIDR, CidrRules::IP_BLOCK] {
            let c = parse_cidr("10.1.2.9/24", rules).unwrap();
            assert_eq!(c.to_string(), "10.1.2.0/24");
            assert_eq!(parse_cidr("10.1.2.0/24", rules), Ok(c));
            assert_eq!(
                parse_cidr("255.255.255.255/0", rules).unwrap().to_string(),
                "0.0.0.0/0"
            );
        }
    }

    #[test]
    fn cidr_ipv6_is_told_apart() {
        for rules in [CidrRules::POD_CIDR, CidrRules::IP_BLOCK] {
            assert_eq!(parse_cidr("fd00::/64", rules), Err(CidrError::Ipv6));
            assert_eq!(parse_cidr("::/0", rules), Err(CidrError::Ipv6));
            assert_eq!(parse_cidr("fd00::/128", rules), Err(CidrError::Ipv6));
        }
    }

    #[test]
    fn cidr_prefix_limits() {
        // A pod CIDR needs the network, the gateway and the node's address: /30 at most.
        let pod = |s| parse_cidr(s, CidrRules::POD_CIDR);
        assert_eq!(pod("10.0.0.0/30").unwrap().to_string(), "10.0.0.0/30");
        for over in ["10.0.0.0/31", "10.0.0.0/32"] {
            assert_eq!(
                pod(over),
                Err(CidrError::PrefixTooLong { max: 30 }),
                "{over}"
            );
        }
        // An ipBlock takes any prefix: /32 is one host.
        assert_eq!(cidr("10.0.0.7/32").unwrap().to_string(), "10.0.0.7/32");
        assert_eq!(cidr("10.0.0.7/31").unwrap().to_string(), "10.0.0.6/31");
        // Malformed beats too long.
        assert_eq!(pod("10.0.0.0/33"), Err(CidrError::Invalid));
    }

    #[test]
    fn macs() {
        let want = Some(MacAddr([0x02, 0xab, 0xcd, 0xef, 0x01, 0x23]));
        assert_eq!(parse_mac("02:ab:cd:ef:01:23"), want);
        assert_eq!(parse_mac(" 02-AB-CD-EF-01-23\n"), want);
        assert_eq!(parse_mac("02ab.cdef.0123"), want);
        for bad in [
            "",
            "02:ab:cd:ef:01",
            "02:ab:cd:ef:01:2g",
            "2:ab:cd:ef:01:23",
            "02abcdef0123",
            "é1:ab:cd:ef:01:23",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
    }
}
