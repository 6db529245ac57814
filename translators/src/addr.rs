//! Parsing of the addresses found in Kubernetes objects, without trusting any of them.
//!
//! MidoNet's REST API only takes IPv4 (its models validate against `IPv4.regex`), so IPv6 is
//! recognised only to tell the user why it is skipped.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

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

/// An IPv4 network: its (masked) network address and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Cidr {
    /// Parses `a.b.c.d/n`. Host bits are cleared, so `10.0.0.5/24` is `10.0.0.0/24`.
    pub fn parse(s: &str) -> Result<Self, AddrError> {
        let (addr, len) = s.trim().split_once('/').ok_or(AddrError::Invalid)?;
        // Only plain decimal digits: `u8::from_str` would also take a leading '+'.
        if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AddrError::Invalid);
        }
        let prefix: u8 = len.parse().map_err(|_| AddrError::Invalid)?;
        match addr.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) if prefix <= 32 => Ok(Self {
                network: Ipv4Addr::from(u32::from(ip) & mask(prefix)),
                prefix,
            }),
            Ok(IpAddr::V6(_)) if prefix <= 128 => Err(AddrError::Ipv6),
            _ => Err(AddrError::Invalid),
        }
    }

    /// The address `n` places after the network address, if it is still inside the network.
    pub fn nth(&self, n: u32) -> Option<Ipv4Addr> {
        let size = 1u64 << 32u32.checked_sub(u32::from(self.prefix))?;
        if u64::from(n) >= size {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.network).checked_add(n)?))
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

/// Parses a 48-bit MAC address written as `xx:xx:xx:xx:xx:xx`, `xx-xx-xx-xx-xx-xx` or
/// `xxxx.xxxx.xxxx` (the forms Go's `net.ParseMAC` takes for 48-bit addresses).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let s = s.trim();
    let groups: Vec<&str> = if s.contains(':') {
        s.split(':').collect()
    } else if s.contains('-') {
        s.split('-').collect()
    } else {
        s.split('.').collect()
    };
    let hex: String = match groups.len() {
        6 if groups.iter().all(|g| g.len() == 2) => groups.concat(),
        3 if groups.iter().all(|g| g.len() == 4) => groups.concat(),
        _ => return None,
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 6];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A MAC address as bare lowercase hex, for use inside Translation names.
pub fn mac_hex(mac: &[u8; 6]) -> String {
    hex::encode(mac)
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
        let c = Ipv4Cidr::parse("10.1.2.0/24").unwrap();
        assert_eq!(c.to_string(), "10.1.2.0/24");
        assert_eq!(c.nth(1), Some(Ipv4Addr::new(10, 1, 2, 1)));
        assert_eq!(c.nth(255), Some(Ipv4Addr::new(10, 1, 2, 255)));
        assert_eq!(c.nth(256), None);
        assert_eq!(Ipv4Cidr::parse("10.1.2.9/24").unwrap(), c);
        assert_eq!(
            Ipv4Cidr::parse("0.0.0.0/0")
                .unwrap()
                .nth(1)
                .unwrap()
                .to_string(),
            "0.0.0.1"
        );
        assert_eq!(Ipv4Cidr::parse("255.255.255.255/32").unwrap().nth(1), None);
        let odd = Ipv4Cidr {
            network: Ipv4Addr::UNSPECIFIED,
            prefix: 40,
        };
        assert_eq!(odd.nth(0), None);
        assert_eq!(Ipv4Cidr::parse("fd00::/64"), Err(AddrError::Ipv6));
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x/8",
            "/8",
            "10.0.0.0/8/8",
        ] {
            assert_eq!(Ipv4Cidr::parse(bad), Err(AddrError::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn macs() {
        let want = Some([0x02, 0xab, 0xcd, 0xef, 0x01, 0x23]);
        assert_eq!(parse_mac("02:ab:cd:ef:01:23"), want);
        assert_eq!(parse_mac("02-AB-CD-EF-01-23"), want);
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
        assert_eq!(mac_hex(&[0xac, 0xca, 0xba, 0, 1, 0xff]), "accaba0001ff");
    }
}
