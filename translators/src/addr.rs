//! Parsing of the addresses found in Kubernetes objects, without trusting any of them.
//!
//! MidoNet's REST API only takes IPv4 (its models validate against `IPv4.regex`), so IPv6 is
//! recognised only to tell the user why it is skipped.

use std::net::{IpAddr, Ipv4Addr};

use crate::model::{Ipv4Cidr, MacAddr};

/// Why a string is not a usable IPv4 address or CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrError {
    /// Well-formed, but IPv6.
    Ipv6,
    /// Not an address (or CIDR) at all.
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

/// Parses `a.b.c.d/n` into the model's CIDR. Host bits are cleared, so `10.0.0.5/24` is
/// `10.0.0.0/24`; an IPv6 network is reported as such.
pub fn parse_cidr(s: &str) -> Result<Ipv4Cidr, AddrError> {
    let (addr, len) = s.trim().split_once('/').ok_or(AddrError::Invalid)?;
    // Only plain decimal digits: `u8::from_str` would also take a leading '+'.
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AddrError::Invalid);
    }
    let prefix: u8 = len.parse().map_err(|_| AddrError::Invalid)?;
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            let cidr = Ipv4Cidr::new(ip, prefix).ok_or(AddrError::Invalid)?;
            Ipv4Cidr::new(cidr.network(), prefix).ok_or(AddrError::Invalid)
        }
        Ok(IpAddr::V6(_)) if prefix <= 128 => Err(AddrError::Ipv6),
        _ => Err(AddrError::Invalid),
    }
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

    #[test]
    fn cidrs() {
        let c = parse_cidr("10.1.2.0/24").unwrap();
        assert_eq!(c.to_string(), "10.1.2.0/24");
        assert_eq!(parse_cidr("10.1.2.9/24").unwrap(), c);
        assert_eq!(parse_cidr(" 10.1.2.9/24 ").unwrap(), c);
        assert_eq!(parse_cidr("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        assert_eq!(parse_cidr("fd00::/64"), Err(AddrError::Ipv6));
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x/8",
            "/8",
            "10.0.0.0/8/8",
            "fd00::/129",
        ] {
            assert_eq!(parse_cidr(bad), Err(AddrError::Invalid), "{bad:?}");
        }
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
