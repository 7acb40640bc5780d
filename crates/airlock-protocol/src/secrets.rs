//! Secrets (KEY-4): write-only values, listed by metadata only.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The pattern every secret name follows.
pub const SECRET_NAME_PATTERN: &str = "^[A-Z][A-Z0-9_]{0,63}$";
/// The largest secret value, in bytes.
pub const MAX_SECRET_BYTES: usize = 32 * 1024;

/// Metadata of one secret; never its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    pub name: String,
    /// 0 for a secret a worker declares that is not set yet.
    pub version: i64,
    pub updated_at: i64,
    pub last_used_at: Option<i64>,
    /// Workers that declare it.
    pub used_by: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// Body of `PUT /v1/secrets/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    /// The value: UTF-8 text without NUL, 1 byte to 32 KiB (bytes, so at
    /// most 32,768 characters).
    #[schema(min_length = 1, max_length = 32768, pattern = "^[^\\u0000]+$")]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SecretStored {
    pub name: String,
    pub version: i64,
}
