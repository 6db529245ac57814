//! The typed MidoNet backend model: the one description of every backend resource, used
//! by the translators (which build typed resources), the pusher, the REST client, the
//! simulator, the sweep and the data-plane model.
//!
//! A Translation stores its backend resources as stringly typed entries
//! (`{kind, parent, body}`, see [`crate::entry`]). [`Resource`] is the typed form of one
//! entry: it knows its REST paths and media type, and converts back to the same entry.
//!
//! # One serialiser
//!
//! Every body is written by the object's field table (see `objects.rs`): members in table
//! order, then the unknown members kept from parsing. [`Resource::to_entry`] stores that
//! text, so it is what Translations hold and what the pusher's `body_hash` covers; reordering
//! a table, or changing how a field is formatted, changes the bytes of existing
//! Translations and makes their Rules and Routes (which MidoNet cannot update) report
//! `ImmutableResourceChanged`. The golden files of `translators/tests/golden` pin those
//! bytes. [`Resource::body`] is the same JSON as a `serde_json::Value`, for requests and for
//! the simulator, where member order does not matter.
//!
//! The round trip is lossless at the JSON level: for every entry `e` that
//! [`Resource::from_entry`] accepts, `from_entry(e)?.to_entry()` has the same kind and
//! parent, and a body that parses to the same JSON value (member order and whitespace are
//! not kept, since JSON objects have none that matters). To make that possible, UUIDs,
//! MAC addresses and CIDRs are only accepted in the canonical spelling MidoNet itself
//! prints (lowercase), and unknown members and explicit nulls are carried along.
//!
//! # Adding a MidoNet kind
//!
//! 1. `kind.rs`: append one row to `for_each_kind!`:
//!    `Variant = "TranslationName", "MediaType-vN", ["CollectionMediaType-vN"];` (`[]` if
//!    MidoNet has no collection GET for it). This alone declares the [`Kind`] variant, its
//!    name, media types, the [`Resource`] variant, its parsing/dispatch, the `From` impl and
//!    the unknown-kind error text. Add the kind to [`Kind::has_parent`] if its entries carry
//!    a parent, and to [`Kind::updatable`] if MidoNet updates it with PUT.
//! 2. `objects.rs`: declare the struct named `Variant` with `backend_object!`: one row per
//!    body member in the order the body should be written
//!    (`field: req|opt Type = "wireName"`, `, via json::parser` for a narrower parse;
//!    `parent: parent Uuid;` first if the kind has a parent; `extra: extra Extra;` last),
//!    then its `post` and `item` paths. Add a constructor (`new`) in an `impl` below it.
//!    Nested JSON objects use `nested_value!`; a new member type implements `json::Wire`.
//! 3. `mod.rs`: re-export the struct (`pub use objects::{…}`).
//! 4. `referents.rs`: only if creating it needs something beyond its parent and the
//!    UUIDs its body names (those are found automatically), or it provides more than its
//!    own `id`.
//! 5. `tests.rs`: add a case to `paths_and_media_types_of_every_kind` and a valid base
//!    body to `arb_body` (the compiler asks for the latter).
//! 6. Outside this crate: the simulator's store (`sim/src/store/`) must accept and serve the
//!    kind, and the data-plane model (`dataplane/src/topology.rs`) must either use it or
//!    ignore it deliberately.

mod json;
mod kind;
mod objects;
mod referents;
mod values;

use serde_json::Value;
use uuid::Uuid;

use crate::entry::TranslationResource;

pub use json::{parse_uuid, Extra};
use kind::for_each_kind;
pub use kind::Kind;
pub use objects::{
    BackendObject, Bridge, Chain, ConditionExtras, Host, HostInterfacePort, Ipv4MacPair, MacPort,
    NatTarget, Port, PortLink, PortRange, Route, Router, Rule, TunnelZone, TunnelZoneHost,
    DL_TYPE_IPV4,
};
pub use objects::{IpAddrGroup, IpAddrGroupAddr, PortGroup, PortGroupPort};
pub use objects::{LoadBalancer, Pool, PoolMember, Vip};
pub use referents::Referent;
pub use values::{
    BadCidr, BadMac, BadMacMask, FlowAction, FragmentPolicy, Ipv4Cidr, LbStatus, MacAddr, MacMask,
    PoolLbMethod, PoolProtocol, PortType, RouteType, RuleType, SessionPersistence, TunnelZoneType,
};

/// Why a Translation entry is not a valid backend resource.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("unknown backend kind {0:?} (expected one of: {names})", names = Kind::expected_names())]
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

/// Declares [`Resource`] with one variant per row of `for_each_kind!`, its per-variant
/// dispatch and the `From` impl of each object.
macro_rules! declare_resource {
    ($(
        $(#[$meta:meta])*
        $variant:ident = $name:literal, $media:literal, [$($collection:literal)?];
    )+) => {
        /// One typed backend resource.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Resource {
            $($variant($variant),)+
        }

        $(impl From<$variant> for Resource {
            fn from(o: $variant) -> Resource {
                Resource::$variant(o)
            }
        })+

        impl Resource {
            /// Builds a resource of `kind` from a parent and a parsed body.
            pub fn from_body(
                kind: Kind,
                parent: Option<Uuid>,
                body: Value,
            ) -> Result<Resource, ModelError> {
                match kind {
                    $(Kind::$variant => $variant::from_body(parent, body).map(Resource::$variant),)+
                }
            }

            pub fn kind(&self) -> Kind {
                match self {
                    $(Resource::$variant(_) => Kind::$variant,)+
                }
            }

            /// The owner's id (bridge of a bridge port, chain of a rule, …), if the kind has
            /// one.
            pub fn parent(&self) -> Option<Uuid> {
                match self {
                    $(Resource::$variant(o) => o.parent(),)+
                }
            }

            /// Where a POST creates the resource, relative to the API base, e.g.
            /// `/bridges/{parent}/ports`.
            pub fn post_path(&self) -> String {
                match self {
                    $(Resource::$variant(o) => o.post_path(),)+
                }
            }

            /// The resource's own path relative to the API base (PUT/GET/DELETE), e.g.
            /// `/ports/{id}`. It is the stable identity of the backend resource.
            pub fn item_path(&self) -> String {
                match self {
                    $(Resource::$variant(o) => o.item_path(),)+
                }
            }

            /// The JSON body that is POSTed or PUT.
            pub fn body(&self) -> Value {
                match self {
                    $(Resource::$variant(o) => o.to_body(),)+
                }
            }

            /// The body as a Translation stores it: compact JSON, members in the object's
            /// declared order.
            pub fn body_text(&self) -> String {
                match self {
                    $(Resource::$variant(o) => o.to_body_text(),)+
                }
            }
        }
    };
}
for_each_kind!(declare_resource);

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

    /// The Translation entry of this resource.
    pub fn to_entry(&self) -> TranslationResource {
        TranslationResource {
            kind: self.kind().name().to_string(),
            parent: self.parent().map(|p| p.to_string()).unwrap_or_default(),
            body: self.body_text(),
        }
    }

    /// Shorthand for `self.kind().media_type()`.
    pub fn media_type(&self) -> &'static str {
        self.kind().media_type()
    }
}

#[cfg(test)]
mod tests;
