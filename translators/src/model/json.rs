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

use super::values::{Ipv4Cidr, MacAddr};
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
    map: Map<String, Value>,
    /// Known fields that were present with an explicit `null`.
    nulls: Vec<String>,
}

impl Reader {
    pub(crate) fn new(kind: &'static str, body: Value) -> Result<Reader, ModelError> {
        match body {
            Value::Object(map) => Ok(Reader {
                kind,
                map,
                nulls: Vec::new(),
            }),
            _ => Err(ModelError::NotAnObject { kind }),
        }
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

    /// The members not taken, plus the explicit nulls of known fields.
    pub(crate) fn finish(mut self) -> Extra {
        for key in self.nulls {
            self.map.insert(key, Value::Null);
        }
        self.map
    }
}

/// Builds a JSON object from typed fields and the `extra` members.
#[derive(Default)]
pub(crate) struct Writer {
    map: Map<String, Value>,
}

impl Writer {
    pub(crate) fn new() -> Writer {
        Writer::default()
    }

    pub(crate) fn put(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.map.insert(key.to_string(), value.into());
        self
    }

    pub(crate) fn opt<T: Into<Value>>(&mut self, key: &str, value: Option<T>) -> &mut Self {
        if let Some(v) = value {
            self.map.insert(key.to_string(), v.into());
        }
        self
    }

    /// Typed fields win over `extra` members of the same name (an explicit `null` kept in
    /// `extra` only shows when the typed field is unset).
    pub(crate) fn finish(&mut self, extra: &Extra) -> Value {
        let mut map = std::mem::take(&mut self.map);
        for (k, v) in extra {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(map)
    }
}

// --- Parsers for `Reader::opt` / `Reader::req` -------------------------------------------

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

pub(crate) fn u8_max(max: u8) -> impl FnOnce(Value) -> Result<u8, String> {
    move |v| uint(u64::from(max))(v).map(|n| n as u8)
}

pub(crate) fn u16_any(v: Value) -> Result<u16, String> {
    uint(u64::from(u16::MAX))(v).map(|n| n as u16)
}

pub(crate) fn u32_any(v: Value) -> Result<u32, String> {
    uint(u64::from(u32::MAX))(v).map(|n| n as u32)
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

/// JSON array of UUID strings.
pub(crate) fn uuid_list(ids: &[Uuid]) -> Value {
    Value::Array(ids.iter().copied().map(uuid_value).collect())
}
