//! The backend kinds: their Translation names, media types and what MidoNet lets us do
//! with them.

use std::fmt;

/// A kind of MidoNet backend resource, as named in a Translation entry's `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    TunnelZone,
    TunnelZoneHost,
    Router,
    Bridge,
    Port,
    PortLink,
    Route,
    Chain,
    Rule,
    Host,
    HostInterfacePort,
    /// Translation name `MACPort`: an entry of a bridge's MAC table.
    MacPort,
    /// Translation name `IPv4MACPair`: an entry of a bridge's ARP table.
    Ipv4MacPair,
    /// A set of ports rules can match by (`portGroup`): the port the packet entered through.
    PortGroup,
    /// Membership of a port in a port group.
    PortGroupPort,
    /// A set of addresses rules can match by (`ipAddrGroupSrc`/`ipAddrGroupDst`).
    IpAddrGroup,
    /// One address of an IP address group.
    IpAddrGroupAddr,
}

const VND: &str = "application/vnd.org.midonet.";

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 17] = [
        Kind::TunnelZone,
        Kind::TunnelZoneHost,
        Kind::Router,
        Kind::Bridge,
        Kind::Port,
        Kind::PortLink,
        Kind::Route,
        Kind::Chain,
        Kind::Rule,
        Kind::Host,
        Kind::HostInterfacePort,
        Kind::MacPort,
        Kind::Ipv4MacPair,
        Kind::PortGroup,
        Kind::PortGroupPort,
        Kind::IpAddrGroup,
        Kind::IpAddrGroupAddr,
    ];

    /// The name used in Translation entries (and by the original Go controller).
    pub fn name(self) -> &'static str {
        match self {
            Kind::TunnelZone => "TunnelZone",
            Kind::TunnelZoneHost => "TunnelZoneHost",
            Kind::Router => "Router",
            Kind::Bridge => "Bridge",
            Kind::Port => "Port",
            Kind::PortLink => "PortLink",
            Kind::Route => "Route",
            Kind::Chain => "Chain",
            Kind::Rule => "Rule",
            Kind::Host => "Host",
            Kind::HostInterfacePort => "HostInterfacePort",
            Kind::MacPort => "MACPort",
            Kind::Ipv4MacPair => "IPv4MACPair",
            Kind::PortGroup => "PortGroup",
            Kind::PortGroupPort => "PortGroupPort",
            Kind::IpAddrGroup => "IpAddrGroup",
            Kind::IpAddrGroupAddr => "IpAddrGroupAddr",
        }
    }

    /// The kind with this Translation name (exact, case-sensitive).
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The vendor media type sent as `Content-Type` on POST/PUT and as `Accept` on GET.
    ///
    /// `MACPort-v2` is spelt as the original controller spelt it; MidoNet declares
    /// `MacPort-v2` and compares media types case-insensitively, so both are accepted.
    pub fn media_type(self) -> &'static str {
        match self {
            Kind::TunnelZone => "application/vnd.org.midonet.TunnelZone-v1+json",
            Kind::TunnelZoneHost => "application/vnd.org.midonet.TunnelZoneHost-v1+json",
            Kind::Router => "application/vnd.org.midonet.Router-v3+json",
            Kind::Bridge => "application/vnd.org.midonet.Bridge-v4+json",
            Kind::Port => "application/vnd.org.midonet.Port-v3+json",
            Kind::PortLink => "application/vnd.org.midonet.PortLink-v1+json",
            Kind::Route => "application/vnd.org.midonet.Route-v1+json",
            Kind::Chain => "application/vnd.org.midonet.Chain-v1+json",
            Kind::Rule => "application/vnd.org.midonet.Rule-v2+json",
            Kind::Host => "application/vnd.org.midonet.Host-v3+json",
            Kind::HostInterfacePort => "application/vnd.org.midonet.HostInterfacePort-v1+json",
            Kind::MacPort => "application/vnd.org.midonet.MACPort-v2+json",
            Kind::Ipv4MacPair => "application/vnd.org.midonet.IP4Mac-v1+json",
            Kind::PortGroup => "application/vnd.org.midonet.PortGroup-v1+json",
            Kind::PortGroupPort => "application/vnd.org.midonet.PortGroupPort-v1+json",
            Kind::IpAddrGroup => "application/vnd.org.midonet.IpAddrGroup-v1+json",
            Kind::IpAddrGroupAddr => "application/vnd.org.midonet.IpAddrGroupAddr-v1+json",
        }
    }

    /// The media type of a list of this kind (`Accept` of a collection GET), if MidoNet
    /// lists the kind at all.
    pub fn collection_media_type(self) -> Option<&'static str> {
        Some(match self {
            Kind::TunnelZone => "application/vnd.org.midonet.collection.TunnelZone-v1+json",
            Kind::TunnelZoneHost => "application/vnd.org.midonet.collection.TunnelZoneHost-v1+json",
            Kind::Router => "application/vnd.org.midonet.collection.Router-v3+json",
            Kind::Bridge => "application/vnd.org.midonet.collection.Bridge-v4+json",
            Kind::Port => "application/vnd.org.midonet.collection.Port-v3+json",
            Kind::PortLink => return None,
            Kind::Route => "application/vnd.org.midonet.collection.Route-v1+json",
            Kind::Chain => "application/vnd.org.midonet.collection.Chain-v1+json",
            Kind::Rule => "application/vnd.org.midonet.collection.Rule-v2+json",
            Kind::Host => "application/vnd.org.midonet.collection.Host-v3+json",
            Kind::HostInterfacePort => {
                "application/vnd.org.midonet.collection.HostInterfacePort-v1+json"
            }
            Kind::MacPort => "application/vnd.org.midonet.collection.MacPort-v2+json",
            Kind::Ipv4MacPair => "application/vnd.org.midonet.collection.IP4Mac-v1+json",
            Kind::PortGroup => "application/vnd.org.midonet.collection.PortGroup-v1+json",
            Kind::PortGroupPort => "application/vnd.org.midonet.collection.PortGroupPort-v1+json",
            Kind::IpAddrGroup => "application/vnd.org.midonet.collection.IpAddrGroup-v1+json",
            Kind::IpAddrGroupAddr => {
                "application/vnd.org.midonet.collection.IpAddrGroupAddr-v1+json"
            }
        })
    }

    /// True if MidoNet updates this kind in place with PUT on its item path.
    /// Everything else is create-or-exists: a POST conflict is settled by a GET.
    pub fn updatable(self) -> bool {
        matches!(
            self,
            Kind::Router | Kind::Bridge | Kind::Port | Kind::TunnelZone | Kind::PortGroup
        )
    }

    /// True if entries of this kind carry a parent UUID (see [`crate::model::Resource`]).
    pub fn has_parent(self) -> bool {
        !matches!(
            self,
            Kind::TunnelZone
                | Kind::Router
                | Kind::Bridge
                | Kind::Chain
                | Kind::Host
                | Kind::PortGroup
                | Kind::IpAddrGroup
        )
    }

    /// True if the media type names a vendor type (`application/vnd.org.midonet.…`).
    pub fn is_vendor_media_type(media_type: &str) -> bool {
        media_type
            .get(..VND.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(VND))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
            assert!(Kind::is_vendor_media_type(k.media_type()));
        }
        assert_eq!(Kind::from_name("MACPort"), Some(Kind::MacPort));
        assert_eq!(Kind::from_name("IPv4MACPair"), Some(Kind::Ipv4MacPair));
        assert_eq!(Kind::from_name("macport"), None);
        assert_eq!(Kind::from_name(""), None);
    }

    #[test]
    fn updatable_kinds() {
        let updatable: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.updatable()).collect();
        assert_eq!(
            updatable,
            vec![
                Kind::TunnelZone,
                Kind::Router,
                Kind::Bridge,
                Kind::Port,
                Kind::PortGroup
            ]
        );
    }

    #[test]
    fn media_types() {
        assert_eq!(
            Kind::Router.media_type(),
            "application/vnd.org.midonet.Router-v3+json"
        );
        assert_eq!(
            Kind::Host.collection_media_type(),
            Some("application/vnd.org.midonet.collection.Host-v3+json")
        );
        assert_eq!(Kind::PortLink.collection_media_type(), None);
    }
}
