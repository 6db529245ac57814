//! The typed MidoNet backend model.
//!
//! A Translation stores its backend resources as stringly typed entries
//! (`{kind, parent, body}`, see [`crate::entry`]). [`Resource`] is the typed form of one
//! entry: it knows its REST paths and media type, and converts back to the same entry.
//!
//! The round trip is lossless at the JSON level: for every entry `e` that
//! [`Resource::from_entry`] accepts, `from_entry(e)?.to_entry()` has the same kind and
//! parent, and a body that parses to the same JSON value (member order and whitespace are
//! not kept, since JSON objects have none that matters). To make that possible, UUIDs,
//! MAC addresses and CIDRs are only accepted in the canonical spelling MidoNet itself
//! prints (lowercase), and unknown members and explicit nulls are carried along.

mod json;
mod kind;
mod objects;
mod referents;
mod values;

use serde_json::Value;
use uuid::Uuid;

use crate::entry::TranslationResource;

pub use json::{parse_uuid, Extra};
pub use kind::Kind;
pub use objects::{
    BackendObject, Bridge, Chain, ConditionExtras, Host, HostInterfacePort, Ipv4MacPair, MacPort,
    NatTarget, Port, PortLink, PortRange, Route, Router, Rule, TunnelZone, TunnelZoneHost,
};
pub use objects::{IpAddrGroup, IpAddrGroupAddr, PortGroup, PortGroupPort};
pub use referents::Referent;
pub use values::{
    BadCidr, BadMac, FlowAction, Ipv4Cidr, MacAddr, PortType, RouteType, RuleType, TunnelZoneType,
};

/// Why a Translation entry is not a valid backend resource.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("unknown backend kind {0:?} (expected one of: TunnelZone, TunnelZoneHost, Router, Bridge, Port, PortLink, Route, Chain, Rule, Host, HostInterfacePort, MACPort, IPv4MACPair, PortGroup, PortGroupPort, IpAddrGroup, IpAddrGroupAddr)")]
    UnknownKind(String),
    #[error("{kind}: parent {parent:?} is not a lowercase hyphenated UUID")]
    BadParent { kind: &'static str, parent: String },
    #[error("{kind}: a parent UUID is required")]
    MissingParent { kind: &'static str },
    #[error("{kind}: has no parent, but the entry names {parent:?}")]
    UnexpectedParent { kind: &'static str, parent: String },
    #[error("{kind}: body is not valid JSON: {reason}")]
    BadJson { kind: &'static str, reason: String },
    #[error("{kind}: body must be a JSON object")]
    NotAnObject { kind: &'static str },
    #[error("{kind}.{field}: required field is missing")]
    MissingField { kind: &'static str, field: String },
    #[error("{kind}.{field}: {reason}")]
    BadField {
        kind: &'static str,
        field: String,
        reason: String,
    },
}

/// One typed backend resource.
#[derive(Clone, Debug, PartialEq)]
pub enum Resource {
    TunnelZone(TunnelZone),
    TunnelZoneHost(TunnelZoneHost),
    Router(Router),
    Bridge(Bridge),
    Port(Port),
    PortLink(PortLink),
    Route(Route),
    Chain(Chain),
    Rule(Rule),
    Host(Host),
    HostInterfacePort(HostInterfacePort),
    MacPort(MacPort),
    Ipv4MacPair(Ipv4MacPair),
    PortGroup(PortGroup),
    PortGroupPort(PortGroupPort),
    IpAddrGroup(IpAddrGroup),
    IpAddrGroupAddr(IpAddrGroupAddr),
}

/// Applies `$f` to the object inside any variant.
macro_rules! each_variant {
    ($res:expr, $obj:ident => $body:expr) => {
        match $res {
            Resource::TunnelZone($obj) => $body,
            Resource::TunnelZoneHost($obj) => $body,
            Resource::Router($obj) => $body,
            Resource::Bridge($obj) => $body,
            Resource::Port($obj) => $body,
            Resource::PortLink($obj) => $body,
            Resource::Route($obj) => $body,
            Resource::Chain($obj) => $body,
            Resource::Rule($obj) => $body,
            Resource::Host($obj) => $body,
            Resource::HostInterfacePort($obj) => $body,
            Resource::MacPort($obj) => $body,
            Resource::Ipv4MacPair($obj) => $body,
            Resource::PortGroup($obj) => $body,
            Resource::PortGroupPort($obj) => $body,
            Resource::IpAddrGroup($obj) => $body,
            Resource::IpAddrGroupAddr($obj) => $body,
        }
    };
}

impl Resource {
    /// Parses a Translation entry. Rejects unknown kinds, a parent that is missing, present
    /// when it must not be, or not a lowercase UUID, and bodies that are not JSON objects or
    /// whose fields are malformed.
    pub fn from_entry(e: &TranslationResource) -> Result<Resource, ModelError> {
        let kind =
            Kind::from_name(&e.kind).ok_or_else(|| ModelError::UnknownKind(e.kind.clone()))?;
        let parent = if e.parent.is_empty() {
            None
        } else {
            Some(parse_uuid(&e.parent).ok_or_else(|| ModelError::BadParent {
                kind: kind.name(),
                parent: e.parent.clone(),
            })?)
        };
        let body: Value = serde_json::from_str(&e.body).map_err(|err| ModelError::BadJson {
            kind: kind.name(),
            reason: err.to_string(),
        })?;
        Resource::from_body(kind, parent, body)
    }

    /// Builds a resource of `kind` from a parent and a parsed body.
    pub fn from_body(
        kind: Kind,
        parent: Option<Uuid>,
        body: Value,
    ) -> Result<Resource, ModelError> {
        fn parse<T: BackendObject>(
            parent: Option<Uuid>,
            body: Value,
            wrap: fn(T) -> Resource,
        ) -> Result<Resource, ModelError> {
            T::from_body(parent, body).map(wrap)
        }
        match kind {
            Kind::TunnelZone => parse(parent, body, Resource::TunnelZone),
            Kind::TunnelZoneHost => parse(parent, body, Resource::TunnelZoneHost),
            Kind::Router => parse(parent, body, Resource::Router),
            Kind::Bridge => parse(parent, body, Resource::Bridge),
            Kind::Port => parse(parent, body, Resource::Port),
            Kind::PortLink => parse(parent, body, Resource::PortLink),
            Kind::Route => parse(parent, body, Resource::Route),
            Kind::Chain => parse(parent, body, Resource::Chain),
            Kind::Rule => parse(parent, body, Resource::Rule),
            Kind::Host => parse(parent, body, Resource::Host),
            Kind::HostInterfacePort => parse(parent, body, Resource::HostInterfacePort),
            Kind::MacPort => parse(parent, body, Resource::MacPort),
            Kind::Ipv4MacPair => parse(parent, body, Resource::Ipv4MacPair),
            Kind::PortGroup => parse(parent, body, Resource::PortGroup),
            Kind::PortGroupPort => parse(parent, body, Resource::PortGroupPort),
            Kind::IpAddrGroup => parse(parent, body, Resource::IpAddrGroup),
            Kind::IpAddrGroupAddr => parse(parent, body, Resource::IpAddrGroupAddr),
        }
    }

    /// The Translation entry of this resource.
    pub fn to_entry(&self) -> TranslationResource {
        TranslationResource {
            kind: self.kind().name().to_string(),
            parent: self.parent().map(|p| p.to_string()).unwrap_or_default(),
            body: self.body().to_string(),
        }
    }

    pub fn kind(&self) -> Kind {
        each_variant!(self, _o => kind_of(_o))
    }

    /// The owner's id (bridge of a bridge port, chain of a rule, …), if the kind has one.
    pub fn parent(&self) -> Option<Uuid> {
        each_variant!(self, o => o.parent())
    }

    /// Where a POST creates the resource, relative to the API base, e.g.
    /// `/bridges/{parent}/ports`.
    pub fn post_path(&self) -> String {
        each_variant!(self, o => o.post_path())
    }

    /// The resource's own path relative to the API base (PUT/GET/DELETE), e.g.
    /// `/ports/{id}`. It is the stable identity of the backend resource.
    pub fn item_path(&self) -> String {
        each_variant!(self, o => o.item_path())
    }

    /// The JSON body that is POSTed or PUT.
    pub fn body(&self) -> Value {
        each_variant!(self, o => o.to_body())
    }

    /// Shorthand for `self.kind().media_type()`.
    pub fn media_type(&self) -> &'static str {
        self.kind().media_type()
    }
}

fn kind_of<T: BackendObject>(_: &T) -> Kind {
    T::KIND
}

macro_rules! from_object {
    ($($variant:ident),+) => {
        $(impl From<$variant> for Resource {
            fn from(o: $variant) -> Resource {
                Resource::$variant(o)
            }
        })+
    };
}
from_object!(
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
    MacPort,
    Ipv4MacPair,
    PortGroup,
    PortGroupPort,
    IpAddrGroup,
    IpAddrGroupAddr
);

#[cfg(test)]
mod tests;
