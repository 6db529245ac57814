//! Packets as the model sees them: one Ethernet frame carrying IPv4 (TCP, UDP or ICMP) or
//! ARP, with the header fields midolman's `FlowMatch` gives rule conditions, routing and
//! NAT.
//!
//! As in `FlowMatch`, an ARP frame's network source and destination are its sender and
//! target protocol addresses and its "protocol" is the ARP operation; an ICMP message's
//! transport source and destination (what `tpSrc`/`tpDst` match) are its type and code,
//! while the connection's ports (what NAT and connection tracking key on) are the echo
//! identifier on both sides.

use std::fmt;
use std::net::Ipv4Addr;

use midonet_translators::model::MacAddr;
use serde::{Deserialize, Serialize};

/// Ethertype of IPv4 (`dlType` 2048).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP (`dlType` 2054).
pub const ETHERTYPE_ARP: u16 = 0x0806;

/// ICMP types and codes the model sends (RFC 792).
pub mod icmp {
    pub const ECHO_REPLY: u8 = 0;
    pub const UNREACH: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Codes of `UNREACH`.
    pub const UNREACH_NET: u8 = 0;
    pub const UNREACH_HOST: u8 = 1;
    pub const UNREACH_PORT: u8 = 3;
    pub const UNREACH_FILTER_PROHIB: u8 = 13;

    /// Whether `icmp_type` is an error message (which never triggers another).
    pub fn is_error(icmp_type: u8) -> bool {
        matches!(
            icmp_type,
            UNREACH | TIME_EXCEEDED | PARAMETER_PROBLEM | 4 | 5
        )
    }
}

/// The protocols the model simulates. NAT applies to TCP, UDP, ICMP echo and ICMP errors,
/// as in midolman (`NatState.isNatSupported`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    /// ICMP: a trace of it is a ping (echo request and reply).
    Icmp,
}

impl Protocol {
    /// The IP protocol number (`nwProto`).
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Icmp => 1,
        }
    }

    /// The protocol of a Kubernetes `protocol` field (`TCP`, `UDP`), case-insensitive.
    /// (Kubernetes has no ICMP port: `icmp` is none.)
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
            Protocol::Icmp => "icmp",
        })
    }
}

/// An IPv4 endpoint: address and L4 port (for ICMP, the echo identifier).
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

/// The packet an ICMP error is about (the start of it, quoted in the error's data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Quoted {
    pub protocol: Protocol,
    pub src: SocketV4,
    pub dst: SocketV4,
}

impl fmt::Display for Quoted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.protocol, self.src, self.dst)
    }
}

/// The ICMP header of an ICMP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IcmpMessage {
    #[serde(rename = "type")]
    pub icmp_type: u8,
    pub code: u8,
    /// An error's data: the packet it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<Quoted>,
}

impl IcmpMessage {
    pub fn is_error(&self) -> bool {
        icmp::is_error(self.icmp_type)
    }
}

impl fmt::Display for IcmpMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match (self.icmp_type, self.code) {
            (icmp::ECHO_REQUEST, _) => "echo request".to_string(),
            (icmp::ECHO_REPLY, _) => "echo reply".to_string(),
            (icmp::UNREACH, icmp::UNREACH_NET) => "net unreachable".to_string(),
            (icmp::UNREACH, icmp::UNREACH_HOST) => "host unreachable".to_string(),
            (icmp::UNREACH, icmp::UNREACH_PORT) => "port unreachable".to_string(),
            (icmp::UNREACH, icmp::UNREACH_FILTER_PROHIB) => "admin prohibited".to_string(),
            (t, c) => format!("type {t} code {c}"),
        };
        write!(f, "{name} ({}/{})", self.icmp_type, self.code)?;
        if let Some(q) = self.about {
            write!(f, " about {q}")?;
        }
        Ok(())
    }
}

/// Protocol, source and destination of a packet (and, for ICMP, its header): what a
/// trace reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowTuple {
    pub protocol: Protocol,
    pub src: SocketV4,
    pub dst: SocketV4,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<IcmpMessage>,
}

impl FlowTuple {
    /// A TCP or UDP tuple, or an ICMP echo request with identifier `src.port`.
    pub fn new(protocol: Protocol, src: SocketV4, dst: SocketV4) -> FlowTuple {
        match protocol {
            Protocol::Icmp => FlowTuple {
                protocol,
                src,
                dst: SocketV4::new(dst.ip, src.port),
                icmp: Some(IcmpMessage {
                    icmp_type: icmp::ECHO_REQUEST,
                    code: 0,
                    about: None,
                }),
            },
            _ => FlowTuple {
                protocol,
                src,
                dst,
                icmp: None,
            },
        }
    }

    /// The tuple of the reply: source and destination swapped (an echo request becomes
    /// an echo reply).
    pub fn reversed(&self) -> FlowTuple {
        FlowTuple {
            protocol: self.protocol,
            src: self.dst,
            dst: self.src,
            icmp: self.icmp.map(|m| match m.icmp_type {
                icmp::ECHO_REQUEST => IcmpMessage {
                    icmp_type: icmp::ECHO_REPLY,
                    ..m
                },
                _ => m,
            }),
        }
    }

    /// What NAT and connection-tracking keys are made of (besides the device): protocol,
    /// addresses and ports (for ICMP echo the identifier; for an ICMP error, see
    /// `state`).
    pub(crate) fn key(&self) -> Quoted {
        Quoted {
            protocol: self.protocol,
            src: self.src,
            dst: self.dst,
        }
    }

    /// The ICMP error `self` is, if it is one.
    pub fn icmp_error(&self) -> Option<IcmpMessage> {
        self.icmp.filter(IcmpMessage::is_error)
    }
}

impl fmt::Display for FlowTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.icmp {
            Some(m) if m.is_error() => {
                write!(f, "icmp {} -> {} {m}", self.src.ip, self.dst.ip)
            }
            Some(m) => write!(
                f,
                "icmp {} -> {} {m} id {}",
                self.src.ip, self.dst.ip, self.src.port
            ),
            None => write!(f, "{} {} -> {}", self.protocol, self.src, self.dst),
        }
    }
}

/// The broadcast MAC address.
pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
/// The all-zero MAC address (an ARP request's unknown target).
pub const ZERO_MAC: MacAddr = MacAddr([0; 6]);

/// The ARP part of an ARP frame; the protocol addresses are the packet's `src.ip` and
/// `dst.ip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Arp {
    pub request: bool,
    /// Sender hardware address.
    pub sha: MacAddr,
    /// Target hardware address.
    pub tha: MacAddr,
}

impl Arp {
    /// The ARP operation, which is what `nwProto` matches on an ARP frame.
    pub fn op(&self) -> u8 {
        if self.request {
            1
        } else {
            2
        }
    }
}

/// The headers of one frame in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    pub eth_src: MacAddr,
    pub eth_dst: MacAddr,
    /// IPv4 fields (for ARP: protocol addresses, ports 0).
    pub tuple: FlowTuple,
    /// The IP TOS byte.
    pub tos: u8,
    pub(crate) arp: Option<Arp>,
}

impl Packet {
    /// An IPv4 frame.
    pub fn ip(eth_src: MacAddr, eth_dst: MacAddr, tuple: FlowTuple, tos: u8) -> Packet {
        Packet {
            eth_src,
            eth_dst,
            tuple,
            tos,
            arp: None,
        }
    }

    /// An ARP request from `sha`/`spa` for `tpa`, broadcast.
    pub(crate) fn arp_request(sha: MacAddr, spa: Ipv4Addr, tpa: Ipv4Addr) -> Packet {
        Packet {
            eth_src: sha,
            eth_dst: BROADCAST,
            tuple: arp_tuple(spa, tpa),
            tos: 0,
            arp: Some(Arp {
                request: true,
                sha,
                tha: ZERO_MAC,
            }),
        }
    }

    /// The ARP reply to `req` saying that `tpa` is at `mac`, unicast back.
    pub(crate) fn arp_reply(req: &Packet, mac: MacAddr) -> Packet {
        let sha_req = req.arp.map(|a| a.sha).unwrap_or(req.eth_src);
        Packet {
            eth_src: mac,
            eth_dst: sha_req,
            tuple: arp_tuple(req.tuple.dst.ip, req.tuple.src.ip),
            tos: 0,
            arp: Some(Arp {
                request: false,
                sha: mac,
                tha: sha_req,
            }),
        }
    }

    /// The 5-tuple (and ICMP header), as the trace reports it.
    pub fn tuple(&self) -> FlowTuple {
        self.tuple
    }

    pub fn ethertype(&self) -> u16 {
        if self.arp.is_some() {
            ETHERTYPE_ARP
        } else {
            ETHERTYPE_IPV4
        }
    }

    /// What `nwProto` matches: the IP protocol, or the ARP operation.
    pub(crate) fn nw_proto(&self) -> u8 {
        match self.arp {
            Some(a) => a.op(),
            None => self.tuple.protocol.number(),
        }
    }

    /// What `tpSrc` and `tpDst` match: TCP/UDP ports, an ICMP message's type and code,
    /// nothing (0) for ARP.
    pub(crate) fn transport(&self) -> (u16, u16) {
        if self.arp.is_some() {
            return (0, 0);
        }
        match self.tuple.icmp {
            Some(m) => (u16::from(m.icmp_type), u16::from(m.code)),
            None => (self.tuple.src.port, self.tuple.dst.port),
        }
    }

    pub(crate) fn is_arp(&self) -> bool {
        self.arp.is_some()
    }

    /// Connection tracking applies to IPv4 TCP, UDP and ICMP
    /// (`ConnTrackState.supportsConnectionTracking`).
    pub(crate) fn trackable(&self) -> bool {
        self.arp.is_none()
    }

    /// Human-readable: `proto src -> dst`, or the ARP question or answer.
    pub(crate) fn describe(&self) -> String {
        match self.arp {
            Some(a) if a.request => format!(
                "arp who-has {} tell {}",
                self.tuple.dst.ip, self.tuple.src.ip
            ),
            Some(a) => format!("arp {} is-at {}", self.tuple.src.ip, a.sha),
            None => self.tuple.to_string(),
        }
    }
}

fn arp_tuple(spa: Ipv4Addr, tpa: Ipv4Addr) -> FlowTuple {
    // ARP has no L4; the protocol is a placeholder that nothing reads (`nw_proto` gives
    // the ARP operation instead).
    FlowTuple {
        protocol: Protocol::Udp,
        src: SocketV4::new(spa, 0),
        dst: SocketV4::new(tpa, 0),
        icmp: None,
    }
}
