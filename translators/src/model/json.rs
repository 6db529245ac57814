//! Field-by-field reading and writing of MidoNet JSON bodies.
//!
//! Bodies are read by hand rather than with `#[derive(Deserialize)]` for two reasons:
//! errors name the kind and the field (`Rule.nwSrcLength: must be at most 32`), and the
//! round trip is exact. Every member the typed fields do not carry (unknown fields, and
//! explicit `null`s of known fields) is kept in the object's `extra` map and written back,
//! so `{"portId": null}` stays `{"portId": null}` rather than losing the member.

use std::net::Ipv4Addr;
use std::str::FromStr;

use serde_json::{Map, Value};
use uuid::Uuid;

use super::values::{Ipv4Cidr, MacAddr, MacMask};
use super::ModelError;

/// Members of a body that the typed fields do not carry.
pub type Extra = Map<String, Value>;

/// A UUID as MidoNet prints it: lowercase, hyphenated.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    let id = Uuid::parse_str(s).ok()?;
    (s.len() == 36 && id.hyphenated().to_string() == s).then_some(id)
}

/// Takes the typed fields out of one JSON object.
pub(crate) struct Reader {
    kind: &'static str,
    /// The entry's parent, for kinds that have one.
    parent: Option<Uuid>,
    map: Map<String, Value>,
    /// Known fields that were present with an explicit `null`.
    nulls: Vec<String>,
}

impl Reader {
    pub(crate) fn new(kind: &'static str, body: Value) -> Result<Reader, ModelError> {
        match body {
            Value::Object(map) => Ok(Reader {
                kind,
                parent: None,
                map,
                nulls: Vec::new(),
            }),
            _ => Err(ModelError::NotAnObject { kind }),
        }
    }

    pub(crate) fn with_parent(mut self, parent: Option<Uuid>) -> Reader {
        self.parent = parent;
        self
    }

    /// The entry's parent, which the kind requires.
    pub(crate) fn parent(&self) -> Result<Uuid, ModelError> {
        self.parent
            .ok_or(ModelError::MissingParent { kind: self.kind })
    }

    fn bad(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::BadField {
            kind: self.kind,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// Removes `key`; `None` if it is absent or `null` (a `null` is remembered).
    fn take(&mut self, key: &str) -> Option<Value> {
        match self.map.remove(key) {
            None => None,
            Some(Value::Null) => {
                self.nulls.push(key.to_string());
                None
            }
            Some(v) => Some(v),
        }
    }

    /// Reads an optional field with `parse`, which explains a bad value.
    pub(crate) fn opt<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(Value) -> Result<T, String>,
    ) -> Result<Option<T>, ModelError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => parse(v).map(Some).map_err(|reason| self.bad(key, reason)),
        }
    }

    /// Reads a required field.
    pub(crate) fn req<T>(
        &mut self,
        key: &str,
        parse: impl FnOnce(Value) -> Result<T, String>,
    ) -> Result<T, ModelError> {
        let kind = self.kind;
        self.opt(key, parse)?
            .ok_or_else(|| ModelError::MissingField {
                kind,
                field: key.to_string(),
            })
    }

    /// The members not taken so far, plus the explicit nulls of known fields.
    pub(crate) fn rest(&mut self) -> Extra {
        let mut map = std::mem::take(&mut self.map);
        for key in self.nulls.drain(..) {
            map.insert(key, Value::Null);
        }
        map
    }
}

/// A JSON value whose object members keep the order they were written in.
///
/// This is what makes a body's text a pure function of the typed object: the members come
/// in the order the object's field table declares them (then the `extra` members), whatever
/// `serde_json::Map` does with key order. The text is what Translations store and what
/// `body_hash` is computed from, so that order is part of the contract.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ordered {
    Leaf(Value),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    /// The same JSON as a plain `Value` (whose member order is `serde_json`'s own).
    pub(crate) fn into_value(self) -> Value {
        match self {
            Ordered::Leaf(v) => v,
            Ordered::Array(items) => {
                Value::Array(items.into_iter().map(Self::into_value).collect())
            }
            Ordered::Object(members) => Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
            ),
        }
    }

    /// Compact JSON text, members in written order.
    pub(crate) fn to_text(&self) -> String {
        // Serialising strings, numbers, booleans and nulls cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Ordered::Leaf(v) => v.serialize(s),
            Ordered::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Ordered::Object(members) => {
                let mut map = s.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// A type that is read from and written to one body member.
pub(crate) trait Wire: Sized {
    /// Parses the member's value; the error explains what is wrong with it.
    fn read(v: Value) -> Result<Self, String>;
    fn write(&self) -> Ordered;
}

impl Wire for Uuid {
    fn read(v: Value) -> Result<Self, String> {
        uuid(v)
    }
    fn write(&self) -> Ordered {
        Ordered::Leaf(uuid_value(*self))
    }
}

impl Wire for String {
    fn read(v: Value) -> Result<Self, String> {
        string(v)
    }
    fn write(&self) -> Ordered {
        Ordered::Leaf(Value::String(self.clone()))
    }
}

impl Wire for bool {
    fn read(v: Value) -> Result<Self, String> {
        boolean(v)
    }
    fn write(&self) -> Ordered {
        Ordered::Leaf(Value::Bool(*self))
    }
}

/// Parsed from and written as their `Display`/`FromStr` text.
macro_rules! wire_as_text {
    ($($t:ty => $parse:path),+) => {$(
        impl Wire for $t {
            fn read(v: Value) -> Result<Self, String> {
                $parse(v)
            }
            fn write(&self) -> Ordered {
                Ordered::Leaf(text(self))
            }
        }
    )+};
}
wire_as_text!(Ipv4Addr => ipv4, MacAddr => mac, Ipv4Cidr => cidr, MacMask => mac_mask);

/// Unsigned integers over their whole range; narrower ranges use a `via` parser.
macro_rules! wire_uint {
    ($($t:ty),+) => {$(
        impl Wire for $t {
            fn read(v: Value) -> Result<Self, String> {
                uint(u64::from(<$t>::MAX))(v).map(|n| n as $t)
            }
            fn write(&self) -> Ordered {
                Ordered::Leaf(Value::from(*self))
            }
        }
    )+};
}
wire_uint!(u8, u16, u32);

impl<T: Wire> Wire for Vec<T> {
    fn read(v: Value) -> Result<Self, String> {
        array(T::read)(v)
    }
    fn write(&self) -> Ordered {
        Ordered::Array(self.iter().map(Wire::write).collect())
    }
}

/// Builds a body from typed fields and the `extra` members, in written order.
#[derive(Default)]
pub(crate) struct Writer {
    members: Vec<(String, Ordered)>,
}

impl Writer {
    pub(crate) fn new() -> Writer {
        Writer::default()
    }

    pub(crate) fn put(&mut self, key: &str, value: &impl Wire) -> &mut Self {
        self.members.push((key.to_string(), value.write()));
        self
    }

    pub(crate) fn opt(&mut self, key: &str, value: Option<&impl Wire>) -> &mut Self {
        if let Some(v) = value {
            self.put(key, v);
        }
        self
    }

    /// Appends the `extra` members. Typed fields win over `extra` members of the same name
    /// (an explicit `null` kept in `extra` only shows when the typed field is unset).
    pub(crate) fn extra(&mut self, extra: &Extra) -> &mut Self {
        for (k, v) in extra {
            if !self.members.iter().any(|(have, _)| have == k) {
                self.members.push((k.clone(), Ordered::Leaf(v.clone())));
            }
        }
        self
    }

    pub(crate) fn finish(&mut self) -> Ordered {
        Ordered::Object(std::mem::take(&mut self.members))
    }
}

// --- Parsers of member values ------------------------------------------------------------

pub(crate) fn string(v: Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(format!("expected a string, got {}", type_name(&other))),
    }
}

pub(crate) fn boolean(v: Value) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("expected true or false, got {}", type_name(&v)))
}

pub(crate) fn uuid(v: Value) -> Result<Uuid, String> {
    let s = string(v)?;
    parse_uuid(&s).ok_or_else(|| format!("{s:?} is not a lowercase hyphenated UUID"))
}

pub(crate) fn ipv4(v: Value) -> Result<Ipv4Addr, String> {
    let s = string(v)?;
    Ipv4Addr::from_str(&s).map_err(|_| format!("{s:?} is not an IPv4 address"))
}

pub(crate) fn mac(v: Value) -> Result<MacAddr, String> {
    let s = string(v)?;
    MacAddr::parse_canonical(&s).ok_or_else(|| {
        format!("{s:?} is not a MAC address in lowercase colon form (aa:bb:cc:dd:ee:ff)")
    })
}

pub(crate) fn mac_mask(v: Value) -> Result<MacMask, String> {
    let s = string(v)?;
    s.parse::<MacMask>().map_err(|e| e.to_string())
}

pub(crate) fn cidr(v: Value) -> Result<Ipv4Cidr, String> {
    let s = string(v)?;
    s.parse::<Ipv4Cidr>()
        .map_err(|_| format!("{s:?} is not an IPv4 CIDR (a.b.c.d/n, n <= 32)"))
}

/// An unsigned integer no larger than `max`.
pub(crate) fn uint(max: u64) -> impl FnOnce(Value) -> Result<u64, String> {
    move |v| match v.as_u64() {
        Some(n) if n <= max => Ok(n),
        Some(n) => Err(format!("{n} is out of range (at most {max})")),
        None => Err(format!("expected an unsigned integer, got {v}")),
    }
}

/// A `u8` no larger than `max`.
pub(crate) fn u8_max(max: u8) -> impl FnOnce(Value) -> Result<u8, String> {
    move |v| uint(u64::from(max))(v).map(|n| n as u8)
}

/// A prefix length: 0..=32.
pub(crate) fn prefix_len(v: Value) -> Result<u8, String> {
    u8_max(32)(v)
}

/// A JSON array whose items are parsed with `item`.
pub(crate) fn array<T>(
    item: impl Fn(Value) -> Result<T, String>,
) -> impl FnOnce(Value) -> Result<Vec<T>, String> {
    move |v| match v {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| item(v).map_err(|e| format!("item {i}: {e}")))
            .collect(),
        other => Err(format!("expected an array, got {}", type_name(&other))),
    }
}

/// A string-valued enum, parsed with its exact wire spelling.
pub(crate) fn wire<T>(
    from_wire: fn(&str) -> Option<T>,
    expected: String,
) -> impl FnOnce(Value) -> Result<T, String> {
    move |v| {
        let s = string(v)?;
        from_wire(&s).ok_or_else(|| format!("unknown value {s:?} (expected one of: {expected})"))
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// JSON string of a UUID.
pub(crate) fn uuid_value(id: Uuid) -> Value {
    Value::String(id.hyphenated().to_string())
}

/// JSON string of anything `Display`.
pub(crate) fn text(v: impl ToString) -> Value {
    Value::String(v.to_string())
}
