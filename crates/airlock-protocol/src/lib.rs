//! The typed protocol of airlock: what every front end (HTTP API, CLI in
//! remote mode, MCP, web UI) sends and receives. Each operation of the
//! service layer takes one of these requests and answers one of these
//! responses or an [`Error`] with a code from [`ErrorCode`].
//!
//! Types only: no I/O, no HTTP (status codes belong to the API crate), no
//! rules. The constraints the server enforces are written on the types
//! (`#[schema(...)]`) so the OpenAPI document states them and clients can
//! check before sending; the service checks them again.
//!
//! Field names and shapes are the wire format: renaming one is a breaking
//! change for clients.

pub mod actions;
pub mod approvals;
pub mod audit;
pub mod emergency;
pub mod error;
pub mod identity;
pub mod models;
pub mod retention;
pub mod runs;
pub mod secrets;
pub mod uploads;
pub mod webhooks;
pub mod workers;

pub use error::{Error, ErrorBody, ErrorCode, ErrorDetail};

/// Integers as JSON Schema counts them: `4409` and `4409.0` are the same
/// integer (serde's `u64` refuses the second), fractions and negatives are
/// refused.
pub mod whole {
    use serde::{Deserialize, Deserializer};

    pub fn option_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let v = Option::<serde_json::Number>::deserialize(d)?;
        let Some(n) = v else { return Ok(None) };
        if let Some(u) = n.as_u64() {
            return Ok(Some(u));
        }
        match n.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a non-negative integer, got {n}"
            ))),
        }
    }
}
pub use runs::RunState;

/// Bodies whose every field is optional: serde's derive would also take a
/// JSON array (the fields in order), so `[]` would be a valid empty body.
/// These take an object only.
pub(crate) mod object_only {
    use serde::de::{DeserializeOwned, Error};
    use serde::{Deserialize, Deserializer};

    /// `T` from a JSON object (and nothing else).
    pub fn deserialize<'de, D: Deserializer<'de>, T: DeserializeOwned>(
        d: D,
    ) -> Result<T, D::Error> {
        let map = serde_json::Map::deserialize(d)?;
        serde_json::from_value(serde_json::Value::Object(map)).map_err(D::Error::custom)
    }
}

/// Largest page of any list operation.
pub const MAX_PAGE: i64 = 500;
