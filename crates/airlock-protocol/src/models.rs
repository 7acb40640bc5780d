//! Model profiles (AGT-2): a workspace's routing metadata for a model —
//! its wire format, where requests go (a credential channel of the
//! operator's egress policy, or a keyless base URL), the model id, prices
//! and limits. A profile never holds a credential; the key stays a
//! deployment secret behind its channel.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Body of `PUT /v1/model-profiles/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutModelProfile {
    /// The profile: `format` (`openai-chat`, `openai-responses`,
    /// `anthropic-messages`), `channel` or `base_url`, `model`, optional
    /// `max_output_tokens`, `temperature`, `stream`,
    /// `parallel_tool_calls`, `tool_choice` (`auto` or `required`), `prices`
    /// (US dollars per million tokens:
    /// `input`, `cached_input`, `output`, `reasoning`), `limits`, `compat`.
    #[schema(value_type = Object)]
    pub profile: Value,
}

/// A stored profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelProfile {
    /// 1 to 64 characters of `a-z`, `0-9`, `.`, `_`, `-`, starting with a
    /// letter or digit; what an agent's `model` names.
    pub name: String,
    /// The profile as validated and stored (normalised).
    #[schema(value_type = Object)]
    pub profile: Value,
    /// Unix milliseconds.
    pub updated_at: i64,
    pub updated_by: String,
}

/// `GET /v1/model-profiles`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelProfileList {
    pub profiles: Vec<ModelProfile>,
}
