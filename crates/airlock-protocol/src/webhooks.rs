//! Webhook triggers (API-9).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Optional body of a rotation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// A secret issued by the sender (Slack's signing secret, Stripe's
    /// `whsec_…` endpoint secret). Omit it to have one generated.
    /// Printable ASCII without spaces; for a Standard Webhooks endpoint,
    /// `whsec_` and the base64 of 16 to 64 bytes.
    #[serde(default)]
    #[schema(min_length = 16, max_length = 512, pattern = "^[!-~]{16,512}$")]
    pub secret: Option<String>,
}

/// The new secret, shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RotatedSecret {
    /// Configure this at the sender. Standard Webhooks: `whsec_<base64>`;
    /// other formats: the string itself is the HMAC key.
    pub secret: String,
    pub version: i64,
    /// `standard`, `github`, `slack` or `stripe`.
    pub format: String,
    /// Where the sender posts, relative to this server.
    pub endpoint: String,
    /// Until when (Unix ms) the previous version still verifies; `null`
    /// when there is none.
    pub previous_valid_until: Option<i64>,
}

/// A run started by a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WebhookRun {
    pub id: String,
    pub worker_id: String,
    pub state: String,
    pub created_at: i64,
}

/// The answer to an accepted delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Accepted {
    pub run: WebhookRun,
}
