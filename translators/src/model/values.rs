//! Small value types of the MidoNet model: MAC addresses, IPv4 CIDRs, enums carried as strings.
//!
//! Parsing from a body is strict (only the canonical spelling is accepted) so that a parsed
//! resource serialises back to exactly the JSON it came from. `FromStr` on [`MacAddr`] is
//! lenient, for callers normalising user input (e.g. a Kubernetes annotation).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An Ethernet MAC address. Serialised lowercase and colon-separated (`aa:bb:cc:dd:ee:ff`),
/// as MidoNet prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Parses only the canonical form (lowercase hex, colon separators).
    pub fn parse_canonical(s: &str) -> Option<MacAddr> {
        let mac = s.parse::<MacAddr>().ok()?;
        (mac.to_string() == s).then_some(mac)
    }

    /// Bare lowercase hex (`aabbccddeeff`), e.g. for use inside Kubernetes object names.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The address as a 48-bit number (the first byte most significant).
    pub fn to_u64(&self) -> u64 {
        self.0.iter().fold(0, |acc, b| (acc << 8) | u64::from(*b))
    }

    /// A multicast (or broadcast) address: the group bit of the first byte is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// The form MidoNet uses inside URL paths: dashes instead of colons.
    pub fn to_dashed(&self) -> String {
        self.to_string().replace(':', "-")
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Error of [`MacAddr::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}")]
pub struct BadMac(pub String);

impl FromStr for MacAddr {
    type Err = BadMac;

    /// Accepts the 48-bit forms Go's `net.ParseMAC` takes, in any case:
    /// `xx:xx:xx:xx:xx:xx`, `xx-xx-xx-xx-xx-xx` and `xxxx.xxxx.xxxx`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadMac(s.to_string());
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
            _ => return Err(bad()),
        };
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 6];
        for (i, byte) in out.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(MacAddr(out))
    }
}

/// An IPv4 address with a prefix length, written `a.b.c.d/n` (e.g. a router port's
/// `portSubnet` entry, where the address is the port's own address, not the network's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    pub fn new(addr: Ipv4Addr, prefix_len: u8) -> Option<Ipv4Cidr> {
        (prefix_len <= 32).then_some(Ipv4Cidr { addr, prefix_len })
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> Ipv4Addr {
        let mask = if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        };
        Ipv4Addr::from(u32::from(self.addr) & mask)
    }

    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        Ipv4Cidr {
            addr: ip,
            prefix_len: self.prefix_len,
        }
        .network()
            == self.network()
    }

    /// The address `n` places after the network address, if it is still inside the network.
    pub fn nth(&self, n: u32) -> Option<Ipv4Addr> {
        let size = 1u64 << (32 - u32::from(self.prefix_len.min(32)));
        if u64::from(n) >= size {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.network()).checked_add(n)?))
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// Error of [`Ipv4Cidr::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid IPv4 CIDR {0:?}")]
pub struct BadCidr(pub String);

impl FromStr for Ipv4Cidr {
    type Err = BadCidr;

    /// Accepts only the canonical form (no leading zeros in the prefix length).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadCidr(s.to_string());
        let (addr, len) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        if len.is_empty() || len.len() > 2 || !len.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix_len: u8 = len.parse().map_err(|_| bad())?;
        let cidr = Ipv4Cidr::new(addr, prefix_len).ok_or_else(bad)?;
        if cidr.to_string() != s {
            return Err(bad());
        }
        Ok(cidr)
    }
}

/// Declares a string-valued enum of the MidoNet API with its exact wire spellings.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }

            /// Parses the exact wire spelling.
            pub fn from_wire(s: &str) -> Option<$name> {
                match s { $($wire => Some($name::$variant),)+ _ => None }
            }

            /// The accepted spellings, for error messages.
            pub fn expected() -> String {
                [$($wire),+].join(", ")
            }
        }

        impl super::json::Wire for $name {
            fn read(v: serde_json::Value) -> Result<Self, String> {
                super::json::wire($name::from_wire, $name::expected())(v)
            }
            fn write(&self) -> super::json::Ordered {
                super::json::Ordered::Leaf(serde_json::Value::from(self.as_str()))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// `TunnelZone.type`.
    TunnelZoneType { Gre => "gre", Vxlan => "vxlan", Vtep => "vtep" }
}

wire_enum! {
    /// `Port.type`: which device the port belongs to.
    PortType { Bridge => "Bridge", Router => "Router" }
}

wire_enum! {
    /// `Route.type` (MidoNet's next-hop kind).
    RouteType {
        Normal => "Normal",
        BlackHole => "BlackHole",
        Reject => "Reject",
        Local => "Local",
        Fip64 => "Fip64",
    }
}

wire_enum! {
    /// `Rule.type`.
    RuleType {
        Accept => "accept",
        Drop => "drop",
        Reject => "reject",
        Return => "return",
        Jump => "jump",
        Dnat => "dnat",
        Snat => "snat",
        RevDnat => "rev_dnat",
        RevSnat => "rev_snat",
    }
}

impl RuleType {
    /// NAT rules need a `flowAction`.
    pub fn is_nat(self) -> bool {
        matches!(
            self,
            RuleType::Dnat | RuleType::Snat | RuleType::RevDnat | RuleType::RevSnat
        )
    }

    /// Forward NAT rules need at least one `natTargets` entry.
    pub fn is_forward_nat(self) -> bool {
        matches!(self, RuleType::Dnat | RuleType::Snat)
    }
}

wire_enum! {
    /// `Pool.protocol`: MidoNet's L4 load balancer balances TCP only (the REST `Pool.create`
    /// sets it).
    PoolProtocol { Tcp => "TCP" }
}

wire_enum! {
    /// `Pool.lbMethod`: how a pool picks a member for a new connection. MidoNet knows round
    /// robin only (midolman picks a random active member, see the data-plane model).
    PoolLbMethod { RoundRobin => "ROUND_ROBIN" }
}

wire_enum! {
    /// `Vip.sessionPersistence`: `SOURCE_IP` keeps every connection of one client address
    /// on one member while it stays active; absent: each connection is balanced anew.
    SessionPersistence { SourceIp => "SOURCE_IP" }
}

wire_enum! {
    /// `Pool.status` and `PoolMember.status` (`LBStatus`). A REST POST of a member sets
    /// `ACTIVE`; `MONITORED` hands the status to a health monitor; `NO_MONITOR` is what the
    /// API shows for a monitored member no monitor reports on.
    LbStatus {
        Active => "ACTIVE",
        Inactive => "INACTIVE",
        Monitored => "MONITORED",
        NoMonitor => "NO_MONITOR",
    }
}

wire_enum! {
    /// `Rule.flowAction` of NAT rules: what happens after the translation.
    FlowAction { Accept => "accept", Continue => "continue", Return => "return" }
}

wire_enum! {
    /// `Condition.fragmentPolicy`: which IP fragments a rule matches (`any`: all;
    /// `header`: unfragmented packets and first fragments; `nonheader`: later fragments
    /// only; `unfragmented`: unfragmented packets only).
    FragmentPolicy {
        Any => "any",
        Nonheader => "nonheader",
        Header => "header",
        Unfragmented => "unfragmented",
    }
}

/// A MAC address mask of a rule condition (`dlSrcMask`, `dlDstMask`): 48 bits, written
/// as three groups of four hex digits, e.g. `ffff.ff00.0000`. A bit set is a bit compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacMask(pub u64);

impl MacMask {
    /// Every bit compared (MidoNet's default when no mask is given).
    pub const ALL: MacMask = MacMask(0xffff_ffff_ffff);

    /// Whether `a` and `b` agree on every bit of the mask.
    pub fn same(self, a: MacAddr, b: MacAddr) -> bool {
        (a.to_u64() ^ b.to_u64()) & self.0 == 0
    }
}

impl fmt::Display for MacMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:04x}.{:04x}.{:04x}",
            (m >> 32) & 0xffff,
            (m >> 16) & 0xffff,
            m & 0xffff
        )
    }
}

/// Why a string is not a MAC mask.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a MAC mask (three groups of four hex digits, e.g. ffff.ff00.0000)")]
pub struct BadMacMask(pub String);

impl FromStr for MacMask {
    type Err = BadMacMask;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = s.split('.').collect();
        if words.len() != 3 {
            return Err(BadMacMask(s.to_string()));
        }
        let mut mask = 0u64;
        for w in words {
            if w.len() != 4 || !w.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(BadMacMask(s.to_string()));
            }
            let v = u64::from_str_radix(w, 16).map_err(|_| BadMacMask(s.to_string()))?;
            mask = (mask << 16) | v;
        }
        Ok(MacMask(mask))
    }
}

/// Serialises through the canonical spelling (`Display`) and parses with `FromStr`.
macro_rules! serde_as_text {
    ($($t:ty),+) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(|e: <$t as FromStr>::Err| serde::de::Error::custom(e.0))
            }
        }
    )+};
}
serde_as_text!(MacAddr, Ipv4Cidr, MacMask);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parsing() {
        let mac: MacAddr = "AA-bb-0c-DD-ee-0F".parse().unwrap();
        assert_eq!(mac.to_string(), "aa:bb:0c:dd:ee:0f");
        assert_eq!(mac.to_dashed(), "aa-bb-0c-dd-ee-0f");
        assert!(MacAddr::parse_canonical("aa:bb:0c:dd:ee:0f").is_some());
        assert!(MacAddr::parse_canonical("AA:bb:0c:dd:ee:0f").is_none());
        assert!(MacAddr::parse_canonical("aabb.0cdd.ee0f").is_none());
        let dotted: MacAddr = "02ab.CDEF.0123".parse().unwrap();
        assert_eq!(dotted, MacAddr([0x02, 0xab, 0xcd, 0xef, 0x01, 0x23]));
        assert_eq!(dotted.to_hex(), "02abcdef0123");
        for bad in [
            "",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:fg",
            "aaa:bb:cc:dd:ee:f",
            "+a:bb:cc:dd:ee:ff",
            "aa:bb-cc:dd:ee:ff",
            "02abcdef0123",
            "é1:ab:cd:ef:01:23",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn cidr_parsing() {
        let c: Ipv4Cidr = "10.1.2.3/24".parse().unwrap();
        assert_eq!(c.network(), Ipv4Addr::new(10, 1, 2, 0));
        assert_eq!(
            Ipv4Cidr::new(Ipv4Addr::new(1, 2, 3, 4), 0)
                .unwrap()
                .network(),
            Ipv4Addr::UNSPECIFIED
        );
        assert_eq!(c.nth(1), Some(Ipv4Addr::new(10, 1, 2, 1)));
        assert_eq!(c.nth(255), Some(Ipv4Addr::new(10, 1, 2, 255)));
        assert_eq!(c.nth(256), None);
        let all: Ipv4Cidr = "0.0.0.0/0".parse().unwrap();
        assert_eq!(all.nth(1), Some(Ipv4Addr::new(0, 0, 0, 1)));
        let host: Ipv4Cidr = "255.255.255.255/32".parse().unwrap();
        assert_eq!(host.nth(0), Some(Ipv4Addr::BROADCAST));
        assert_eq!(host.nth(1), None);
        for bad in [
            "10.0.0.1",
            "10.0.0.1/33",
            "10.0.0.1/024",
            "10.0.0.1/",
            "10.0.0.1/+4",
            "10.0.0.01/8",
        ] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn mac_masks() {
        let m: MacMask = "ffff.ff00.0000".parse().unwrap();
        assert_eq!(m, MacMask(0xffff_ff00_0000));
        assert_eq!(m.to_string(), "ffff.ff00.0000");
        let a: MacAddr = "02:11:33:00:11:01".parse().unwrap();
        let b: MacAddr = "02:11:33:ff:ff:ff".parse().unwrap();
        assert!(m.same(a, b));
        assert!(!MacMask::ALL.same(a, b));
        for bad in [
            "ffff.ff00",
            "ffff.ff00.000",
            "fffff.f00.0000",
            "ffff.ff00.00g0",
        ] {
            assert!(bad.parse::<MacMask>().is_err(), "{bad}");
        }
    }

    #[test]
    fn wire_enums() {
        assert_eq!(RuleType::from_wire("rev_dnat"), Some(RuleType::RevDnat));
        assert_eq!(RuleType::from_wire("DNAT"), None);
        assert!(RuleType::expected().contains("rev_snat"));
        for t in RouteType::ALL {
            assert_eq!(RouteType::from_wire(t.as_str()), Some(*t));
        }
    }
}
