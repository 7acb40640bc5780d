//! The audit log (AUD-1 … AUD-4) as clients read it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Paging of `GET /v1/audit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListAudit {
    /// Events after this sequence number (the previous page's `next_cursor`).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Only events of this type (`approval.approved`), or, ending in `*`,
    /// of every type with that prefix (`approval.*`).
    #[param(max_length = 128)]
    pub event_type: Option<String>,
    /// Only events by this actor: its id (a user id, a run id) or its
    /// kind (`human`, `agent`, `service`, `system`).
    #[param(max_length = 128)]
    pub actor: Option<String>,
}

/// How many events one filtered `GET /v1/audit` reads at most: a page
/// may then hold fewer than `limit` events, and `next_cursor` says where
/// to go on.
pub const MAX_AUDIT_SCAN: i64 = 10_000;

/// A page of audit events in sequence order (with a filter, those of
/// the events read that match it). Each event is the chained
/// record exactly as hashed (`airlock-audit-v1`): `workspace_id`, `seq`,
/// `at`, `actor`, `event_type`, `target`, ids, `decision`,
/// `payload_hash`, `result`, `metadata`, `prev_hash`, `hash`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    pub next_cursor: Option<i64>,
}

/// The result of verifying a workspace's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditVerification {
    pub ok: bool,
    /// How many events verified (when `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// The hash of the last event (hex, when `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The first sequence number that does not verify (when not `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad_seq: Option<u64>,
    /// The signed checkpoint the chain was checked against (AUD-4): the
    /// newest whose signature verified. Absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointUsed>,
    /// A checkpoint that is not to be trusted (a signature that does not
    /// verify): the verification fails, naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_error: Option<String>,
    /// What the verification could not check, or skipped: no checkpoint
    /// (a cut tail would not show), torn checkpoint lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Which signed checkpoint a verification used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckpointUsed {
    /// The last sequence number it covers.
    pub seq: u64,
    /// The chain's hash there (hex).
    pub head: String,
    /// When it was made (RFC 3339).
    pub at: String,
}

/// A signed checkpoint made on demand (`airlock audit checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckpointMade {
    pub workspace: String,
    pub seq: u64,
    pub head: String,
    pub at: String,
    /// False when the head had not moved since the newest checkpoint and
    /// none was written.
    pub written: bool,
}
