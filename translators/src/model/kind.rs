//! The backend kinds: their Translation names, media types and what MidoNet lets us do
//! with them.

use std::fmt;

/// The one list of backend kinds. Each row is
///
/// ```text
/// Variant = "TranslationName", "MediaType-vN", ["CollectionMediaType-vN"];
/// ```
///
/// where `Variant` names the [`Kind`] variant, the [`crate::model::Resource`] variant and the
/// object struct of `objects.rs` alike, and the collection media type is `[]` when MidoNet
/// does not list the kind. Everything that enumerates kinds (`Kind`, its names and media
/// types, the `Resource` enum, its parser and `From` impls, the unknown-kind error) is
/// generated from this list by passing a macro name to `for_each_kind!`.
macro_rules! for_each_kind {
    ($callback:ident) => {
        $callback! {
            TunnelZone = "TunnelZone", "TunnelZone-v1", ["TunnelZone-v1"];
            TunnelZoneHost = "TunnelZoneHost", "TunnelZoneHost-v1", ["TunnelZoneHost-v1"];
            Router = "Router", "Router-v3", ["Router-v3"];
            Bridge = "Bridge", "Bridge-v4", ["Bridge-v4"];
            Port = "Port", "Port-v3", ["Port-v3"];
            PortLink = "PortLink", "PortLink-v1", [];
            Route = "Route", "Route-v1", ["Route-v1"];
            Chain = "Chain", "Chain-v1", ["Chain-v1"];
            Rule = "Rule", "Rule-v2", ["Rule-v2"];
            Host = "Host", "Host-v3", ["Host-v3"];
            HostInterfacePort = "HostInterfacePort", "HostInterfacePort-v1", ["HostInterfacePort-v1"];
            /// Translation name `MACPort`: an entry of a bridge's MAC table.
            ///
            /// `MACPort-v2` is spelt as the original controller spelt it; MidoNet declares
            /// `MacPort-v2` and compares media types case-insensitively, so both are accepted.
            MacPort = "MACPort", "MACPort-v2", ["MacPort-v2"];
            /// Translation name `IPv4MACPair`: an entry of a bridge's ARP table.
            Ipv4MacPair = "IPv4MACPair", "IP4Mac-v1", ["IP4Mac-v1"];
            /// A set of ports rules can match by (`portGroup`): the port the packet entered
            /// through.
            PortGroup = "PortGroup", "PortGroup-v1", ["PortGroup-v1"];
            /// Membership of a port in a port group.
            PortGroupPort = "PortGroupPort", "PortGroupPort-v1", ["PortGroupPort-v1"];
            /// A set of addresses rules can match by (`ipAddrGroupSrc`/`ipAddrGroupDst`).
            IpAddrGroup = "IpAddrGroup", "IpAddrGroup-v1", ["IpAddrGroup-v1"];
            /// One address of an IP address group.
            IpAddrGroupAddr = "IpAddrGroupAddr", "IpAddrGroupAddr-v1", ["IpAddrGroupAddr-v1"];
            /// An L4 load balancer; a router uses it once the router names it
            /// (`Router.loadBalancerId`).
            LoadBalancer = "LoadBalancer", "LoadBalancer-v1", ["LoadBalancer-v1"];
            /// A pool of members of load balancer `parent`.
            Pool = "Pool", "Pool-v1", ["Pool-v1"];
            /// A backend (address and port) of pool `parent`.
            PoolMember = "PoolMember", "PoolMember-v1", ["PoolMember-v1"];
            /// A virtual IP (address and port) of pool `parent`. MidoNet spells the media
            /// type `VIP-v1`.
            Vip = "Vip", "VIP-v1", ["VIP-v1"];
        }
    };
}
pub(crate) use for_each_kind;

macro_rules! declare_kinds {
    ($(
        $(#[$meta:meta])*
        $variant:ident = $name:literal, $media:literal, [$($collection:literal)?];
    )+) => {
        /// A kind of MidoNet backend resource, as named in a Translation entry's `kind`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kind {
            $($(#[$meta])* $variant,)+
        }

        const KIND_COUNT: usize = [$($name),+].len();

        impl Kind {
            /// Every kind, in a fixed order.
            pub const ALL: [Kind; KIND_COUNT] = [$(Kind::$variant),+];

            /// The name used in Translation entries (and by the original Go controller).
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)+
                }
            }

            /// The vendor media type sent as `Content-Type` on POST/PUT and as `Accept` on
            /// GET.
            pub fn media_type(self) -> &'static str {
                match self {
                    $(Kind::$variant => concat!("application/vnd.org.midonet.", $media, "+json"),)+
                }
            }

            /// The media type of a list of this kind (`Accept` of a collection GET), if
            /// MidoNet lists the kind at all.
            pub fn collection_media_type(self) -> Option<&'static str> {
                match self {
                    $(Kind::$variant => None$(.or(Some(concat!(
                        "application/vnd.org.midonet.collection.",
                        $collection,
                        "+json"
                    ))))?,)+
                }
            }
        }
    };
}
for_each_kind!(declare_kinds);

const VND: &str = "application/vnd.org.midonet.";

impl Kind {
    /// The kind with this Translation name (exact, case-sensitive).
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Every Translation name, comma-separated (for error messages).
    pub fn expected_names() -> String {
        Kind::ALL.map(Kind::name).join(", ")
    }

    /// True if MidoNet updates this kind in place with PUT on its item path.
    /// Everything else is create-or-exists: a POST conflict is settled by a GET.
    ///
    /// MidoNet takes PUTs of load balancers and pool members too, but not as a full
    /// update: a load balancer PUT must repeat the `routerId` the router binding set (and a
    /// POST may not carry one), and a pool member PUT keeps its old address, port and
    /// status. They are create-or-exists here, so a changed body is reported, never
    /// silently half-applied.
    pub fn updatable(self) -> bool {
        matches!(
            self,
            Kind::Router
                | Kind::Bridge
                | Kind::Port
                | Kind::TunnelZone
                | Kind::PortGroup
                | Kind::Pool
                | Kind::Vip
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
                | Kind::LoadBalancer
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
                Kind::PortGroup,
                Kind::Pool,
                Kind::Vip
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
        assert_eq!(
            Kind::MacPort.media_type(),
            "application/vnd.org.midonet.MACPort-v2+json"
        );
        assert_eq!(
            Kind::MacPort.collection_media_type(),
            Some("application/vnd.org.midonet.collection.MacPort-v2+json")
        );
        assert_eq!(
            Kind::Ipv4MacPair.media_type(),
            "application/vnd.org.midonet.IP4Mac-v1+json"
        );
        assert_eq!(
            Kind::Vip.media_type(),
            "application/vnd.org.midonet.VIP-v1+json"
        );
        assert_eq!(
            Kind::PoolMember.collection_media_type(),
            Some("application/vnd.org.midonet.collection.PoolMember-v1+json")
        );
    }

    #[test]
    fn the_expected_names_list_every_kind() {
        assert_eq!(
            Kind::expected_names(),
            "TunnelZone, TunnelZoneHost, Router, Bridge, Port, PortLink, Route, Chain, Rule, \
             Host, HostInterfacePort, MACPort, IPv4MACPair, PortGroup, PortGroupPort, \
             IpAddrGroup, IpAddrGroupAddr, LoadBalancer, Pool, PoolMember, Vip"
        );
        let err = crate::model::ModelError::UnknownKind("Switch".into()).to_string();
        assert!(err.starts_with("unknown backend kind \"Switch\" (expected one of: TunnelZone,"));
        assert!(err.ends_with("PoolMember, Vip)"), "{err}");
    }
}
