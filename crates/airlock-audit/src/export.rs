//! JSON Lines export and import of a chain (AUD-4), the format `verify_export.py` reads.
//!
//! One event per line: a JSON object with the thirteen event members of
//! [`chain::EVENT_FIELDS`](crate::chain::EVENT_FIELDS) plus `prev_hash` and `hash` (64
//! lowercase hex digits each). Lines are written in RFC 8785 canonical form, so an export is
//! deterministic. To verify a line, drop `prev_hash` and `hash`, canonicalise the rest and
//! apply [the published algorithm](crate::chain).
//!
//! Import is strict, so that what is verified is exactly what the line says: no duplicate
//! keys at any depth, exactly the fifteen members (optional values present as `null`), and the
//! event must serialise back to the same JSON (for example `{"kind":"system","id":null}` is
//! refused, since it would be hashed as `{"kind":"system"}`).

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::chain::{AuditEvent, ChainedEvent, EVENT_FIELDS};
use crate::hex;
use crate::jcs::{self, JcsError};

/// Why a line is not an exported event.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("line is not valid json")]
    Json(#[source] serde_json::Error),
    #[error("line is not a json object")]
    NotObject,
    #[error("member `{0}` is missing")]
    MissingField(&'static str),
    #[error("member `{0}` is not part of an exported event")]
    UnknownField(String),
    #[error("member `{field}` is not 64 lowercase hex digits")]
    BadHash { field: &'static str },
    #[error("line does not describe an audit event")]
    Event(#[source] serde_json::Error),
    #[error("event metadata is not a json object")]
    MetadataNotObject,
    #[error("line is not in the form the event serialises to")]
    NonCanonical,
    #[error("event has no canonical form")]
    Canonical(#[source] JcsError),
}

/// The export line of `e` (canonical JSON, no trailing newline).
pub fn to_json_line(e: &ChainedEvent) -> Result<String, ExportError> {
    let mut object = event_object(&e.event)?;
    object.insert("prev_hash".to_owned(), Value::String(e.prev_hash_hex()));
    object.insert("hash".to_owned(), Value::String(e.hash_hex()));
    let bytes = jcs::canonicalize(&Value::Object(object)).map_err(ExportError::Canonical)?;
    // Canonical JSON is UTF-8 by construction; the conversion cannot fail.
    String::from_utf8(bytes).map_err(|_| ExportError::NonCanonical)
}

/// Parses one export line. It does not verify the hash: feed the result to a
/// [`Verifier`](crate::chain::Verifier).
pub fn from_json_line(line: &str) -> Result<ChainedEvent, ExportError> {
    serde_json::from_str::<NoDuplicateKeys>(line).map_err(ExportError::Json)?;
    let Value::Object(mut object) = serde_json::from_str(line).map_err(ExportError::Json)? else {
        return Err(ExportError::NotObject);
    };
    let prev_hash = take_hash(&mut object, "prev_hash")?;
    let hash = take_hash(&mut object, "hash")?;
    for name in EVENT_FIELDS {
        if !object.contains_key(name) {
            return Err(ExportError::MissingField(name));
        }
    }
    if let Some(unknown) = object.keys().find(|k| !EVENT_FIELDS.contains(&k.as_str())) {
        return Err(ExportError::UnknownField(unknown.clone()));
    }
    let as_read = Value::Object(object);
    let event: AuditEvent = serde_json::from_value(as_read.clone()).map_err(ExportError::Event)?;
    if !event.metadata.is_object() {
        return Err(ExportError::MetadataNotObject);
    }
    if Value::Object(event_object(&event)?) != as_read {
        return Err(ExportError::NonCanonical);
    }
    Ok(ChainedEvent {
        event,
        prev_hash,
        hash,
    })
}

fn event_object(e: &AuditEvent) -> Result<Map<String, Value>, ExportError> {
    match serde_json::to_value(e).map_err(ExportError::Event)? {
        Value::Object(object) => Ok(object),
        _ => Err(ExportError::NotObject),
    }
}

fn take_hash(
    object: &mut Map<String, Value>,
    field: &'static str,
) -> Result<[u8; 32], ExportError> {
    match object.remove(field) {
        None => Err(ExportError::MissingField(field)),
        Some(Value::String(s)) => hex::decode_hash(&s).map_err(|_| ExportError::BadHash { field }),
        Some(_) => Err(ExportError::BadHash { field }),
    }
}

/// Deserialises any JSON and fails on an object with a repeated key, at any depth.
/// (`serde_json::Value` silently keeps the last of repeated keys; other parsers keep the first,
/// so a line with repeated keys could be read two ways.)
struct NoDuplicateKeys;

impl<'de> Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeysVisitor)
    }
}

struct NoDuplicateKeysVisitor;

impl<'de> Visitor<'de> for NoDuplicateKeysVisitor {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any json value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        NoDuplicateKeys::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom("repeated object key"));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }
}
