//! The action journal of an agent run (DUR-2 for agents): every tool call
//! is a row that moves through
//!
//! ```text
//! proposed → decided → [awaiting_approval → approved] → dispatched
//!          → completed | failed | outcome_unknown | aborted
//! ```
//!
//! `dispatched` is written before the side effect starts; an action found
//! dispatched without a result after a crash becomes `outcome_unknown` and
//! waits for a person (never retried, never reported as aborted).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Where an action is. `completed`, `failed` and `aborted` are final;
/// `outcome_unknown` ends only when a person settles it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    /// Parsed and recorded; no decision yet.
    Proposed,
    /// The policy decided (allow, or allowed by a standing rule); ready to
    /// dispatch unless the decision was to deny.
    Decided,
    AwaitingApproval,
    Approved,
    /// The side effect may have started (written before it does).
    Dispatched,
    Completed,
    /// It ran and did not succeed.
    Failed,
    /// It was dispatched and nobody knows whether it took effect.
    OutcomeUnknown,
    /// It was stopped by airlock: denied, rejected, expired, cancelled,
    /// emergency stop (before or while running).
    Aborted,
}

impl ActionState {
    pub const ALL: [ActionState; 9] = [
        Self::Proposed,
        Self::Decided,
        Self::AwaitingApproval,
        Self::Approved,
        Self::Dispatched,
        Self::Completed,
        Self::Failed,
        Self::OutcomeUnknown,
        Self::Aborted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Decided => "decided",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Approved => "approved",
            Self::Dispatched => "dispatched",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Aborted => "aborted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// No further transition (a person settles `outcome_unknown`).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Aborted)
    }
}

impl std::fmt::Display for ActionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One action of a run. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Action {
    pub id: String,
    pub run_id: String,
    /// Order within the run, from 1.
    pub seq: i64,
    /// Unique per run: the same key proposed again is the same action.
    pub idempotency_key: String,
    /// The tool (`run_command`, `write_file`, `http_request`, …).
    pub kind: String,
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Lowercase hex SHA-256 of the RFC 8785 canonical JSON of `payload`.
    pub payload_hash: String,
    pub state: ActionState,
    /// The policy's decision, as a value.
    #[schema(value_type = Option<Object>)]
    pub decision: Option<Value>,
    pub approval_id: Option<String>,
    /// The standing rule that allowed it without a new approval.
    pub grant_id: Option<String>,
    /// How many times it was dispatched (a person's re-run adds one).
    pub attempt: i64,
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    pub created_at: i64,
    pub decided_at: Option<i64>,
    pub dispatched_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The person who settled an unknown outcome.
    pub settled_by: Option<String>,
}

/// A run's actions, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActionList {
    pub actions: Vec<Action>,
}

/// What a person says about an action whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    /// It took effect: `completed`.
    Succeeded,
    /// It did not: `failed`.
    Failed,
    /// Run it again, after a new approval of the same payload.
    Rerun,
}

/// Body of `POST /v1/runs/{id}/actions/{action}/settle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleAction {
    pub outcome: Settlement,
    /// At most 1000 characters; no control characters but newline and tab.
    #[serde(default)]
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
    )]
    pub note: Option<String>,
}
