//! Packets as the model sees them: one Ethernet/IPv4 header plus the L4 ports, which is
//! all that MidoNet's rule conditions, routing and NAT look at.

use std::fmt;
use std::net::Ipv4Addr;

use midonet_translators::model::MacAddr;
use serde::{Deserialize, Serialize};

/// Ethertype of IPv4 (`dlType` 2048).
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// The L4 protocols the model simulates. NAT applies only to these two, as in midolman
/// (`NatState.isNatSupported`: TCP, UDP and some ICMP messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// The IP protocol number (`nwProto`).
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }

    /// The protocol of a Kubernetes `protocol` field (`TCP`, `UDP`), case-insensitive.
    pub fn from_name(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// An IPv4 endpoint: address and L4 port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SocketV4 {
    pub ip: Ipv4Addr,
    pub port: u16,
}

impl SocketV4 {
    pub fn new(ip: Ipv4Addr, port: u16) -> SocketV4 {
        SocketV4 { ip, port }
    }
}

impl fmt::Display for SocketV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port)
    }
}

/// The headers of one packet in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    pub eth_src: MacAddr,
    pub eth_dst: MacAddr,
    pub protocol: Protocol,
    pub src: SocketV4,
    pub dst: SocketV4,
}

impl Packet {
    /// The 5-tuple, as the trace reports it.
    pub fn tuple(&self) -> FlowTuple {
        FlowTuple {
            protocol: self.protocol,
            src: self.src,
            dst: self.dst,
        }
    }
}

/// Protocol, source and destination of a packet: what a NAT or connection-tracking key is
/// made of (besides the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowTuple {
    pub protocol: Protocol,
    pub src: SocketV4,
    pub dst: SocketV4,
}

impl FlowTuple {
    /// The tuple of the reply: source and destination swapped.
    pub fn reversed(&self) -> FlowTuple {
        FlowTuple {
            protocol: self.protocol,
            src: self.dst,
            dst: self.src,
        }
    }
}

impl fmt::Display for FlowTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.protocol, self.src, self.dst)
    }
}

/// The broadcast MAC address.
pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
