//! Approvals (AGT-5): a request for a person to allow exactly one payload,
//! bound to the SHA-256 of its RFC 8785 canonical JSON, with an expiry;
//! the decisions on it, the standing grants ("rules") a decision may
//! create, and the workspace's approval settings.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Where an approval request is in its life. Only `pending` can be
/// decided and only `approved` can be used; every other state is final.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for a person.
    Pending,
    /// Approved, not used yet.
    Approved,
    Rejected,
    /// Nobody decided (or used it) before `expires_at`.
    Expired,
    /// Approved and used, once.
    Consumed,
    /// Its run was cancelled or stopped first.
    Cancelled,
}

impl ApprovalState {
    pub const ALL: [ApprovalState; 6] = [
        Self::Pending,
        Self::Approved,
        Self::Rejected,
        Self::Expired,
        Self::Consumed,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Consumed => "consumed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an approval is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A whole run of a worker with `[approvals] required = true`.
    Run,
    /// One action (tool call) of an agent run.
    Action,
}

impl ApprovalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Action => "action",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "run" => Some(Self::Run),
            "action" => Some(Self::Action),
            _ => None,
        }
    }
}

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// This request, used once (the default).
    #[default]
    Once,
    /// This request, and later actions of the same run whose payload has
    /// exactly this hash (agent actions only).
    Payload,
    /// This request, and later `run_command` actions of the same worker
    /// whose argv (each segment of a compound shell command) starts with
    /// `argv_prefix` (agent actions only; never an interpreter or a
    /// `-c`/`-e` form).
    ArgvPrefix,
}

impl Grant {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Payload => "payload",
            Self::ArgvPrefix => "argv_prefix",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "once" => Some(Self::Once),
            "payload" => Some(Self::Payload),
            "argv_prefix" => Some(Self::ArgvPrefix),
            _ => None,
        }
    }
}

/// One approval request and what became of it. Times are Unix
/// milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Approval {
    pub id: String,
    pub workspace_id: String,
    pub run_id: String,
    pub worker_id: String,
    /// The agent action it is for (`kind = action`).
    pub action_id: Option<String>,
    pub kind: ApprovalKind,
    /// Exactly what would be executed, in full.
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Lowercase hex SHA-256 of the RFC 8785 canonical JSON of `payload`.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub payload_hash: String,
    /// Who asked: the run's creator for a run, `agent:<run>` for an action.
    pub requested_by: String,
    /// Who started the run.
    pub run_actor: String,
    /// Why it is asked (the manifest's reason, or what the agent said and
    /// which content tainted its context).
    pub reason: Option<String>,
    pub state: ApprovalState,
    pub created_at: i64,
    /// Neither a decision nor a use is accepted at or after this instant.
    pub expires_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub note: Option<String>,
    pub grant: Option<Grant>,
    /// The rule the decision created, if any.
    pub grant_id: Option<String>,
    pub consumed_at: Option<i64>,
}

/// Filters and paging of `GET /v1/approvals`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListApprovals {
    /// Only approvals in this state.
    pub state: Option<ApprovalState>,
    /// Only approvals of this run.
    #[param(max_length = 128)]
    pub run: Option<String>,
    /// Page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    #[param(max_length = 128)]
    pub cursor: Option<String>,
}

/// A page of approvals, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// The longest note on a decision.
pub const MAX_NOTE_CHARS: usize = 1000;
/// The most elements of an argv-prefix rule.
pub const MAX_PREFIX_ARGS: usize = 16;

/// Body of `POST /v1/approvals/{id}/approve`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Approve {
    /// How far the approval reaches (default `once`).
    #[serde(default)]
    pub grant: Option<Grant>,
    /// The argv prefix of an `argv_prefix` grant (1 to 16 elements, each
    /// 1 to 256 characters).
    #[serde(default)]
    #[schema(max_items = 16, min_items = 1)]
    pub argv_prefix: Option<Vec<String>>,
    /// The hash the approver reviewed: when given, the approval is refused
    /// unless it is the request's (`approval_hash_mismatch`).
    #[serde(default)]
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub payload_hash: Option<String>,
    /// At most 1000 characters; no control characters but newline and tab.
    #[serde(default)]
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
    )]
    pub note: Option<String>,
}

/// Body of `POST /v1/approvals/{id}/reject`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reject {
    /// At most 1000 characters; no control characters but newline and tab.
    #[serde(default)]
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
    )]
    pub note: Option<String>,
}

/// What kind of standing grant a rule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// Actions of one run with exactly one payload hash.
    Payload,
    /// `run_command` actions of one worker whose argv starts with a prefix.
    ArgvPrefix,
}

impl RuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Payload => "payload",
            Self::ArgvPrefix => "argv_prefix",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "payload" => Some(Self::Payload),
            "argv_prefix" => Some(Self::ArgvPrefix),
            _ => None,
        }
    }
}

/// A standing grant created by an approval ("always allow similar"): it
/// lets a matching later action skip the approval step, and nothing else —
/// never a sandbox, egress or platform limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalRule {
    pub id: String,
    pub workspace_id: String,
    pub kind: RuleKind,
    pub worker_id: String,
    /// `payload` rules: the run they belong to.
    pub run_id: Option<String>,
    /// `payload` rules: the hash an action's payload must have.
    pub payload_hash: Option<String>,
    /// `argv_prefix` rules: the prefix.
    pub argv_prefix: Option<Vec<String>>,
    /// The approval whose decision created it.
    pub source_approval: String,
    pub created_by: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub revoked_by: Option<String>,
}

/// The workspace's rules, newest first (revoked ones included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RuleList {
    pub rules: Vec<ApprovalRule>,
}

/// A workspace's approval settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalSettings {
    /// Whether the member who started a run may approve its requests
    /// (default false: a second person decides).
    pub allow_self_approval: bool,
    pub updated_at: Option<i64>,
    pub updated_by: Option<String>,
}

/// Body of `PUT /v1/approval-settings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutApprovalSettings {
    pub allow_self_approval: bool,
}

impl<'de> Deserialize<'de> for Approve {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            grant: Option<Grant>,
            #[serde(default)]
            argv_prefix: Option<Vec<String>>,
            #[serde(default)]
            payload_hash: Option<String>,
            #[serde(default)]
            note: Option<String>,
        }
        let r: Raw = crate::object_only::deserialize(d)?;
        Ok(Approve {
            grant: r.grant,
            argv_prefix: r.argv_prefix,
            payload_hash: r.payload_hash,
            note: r.note,
        })
    }
}

impl<'de> Deserialize<'de> for Reject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            note: Option<String>,
        }
        let r: Raw = crate::object_only::deserialize(d)?;
        Ok(Reject { note: r.note })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn api_5_optional_bodies_take_an_object_only() {
        assert!(serde_json::from_str::<Approve>("[]").is_err());
        assert!(serde_json::from_str::<Reject>("[null]").is_err());
        assert!(serde_json::from_str::<crate::emergency::StopRequest>("[]").is_err());
        assert!(serde_json::from_str::<Approve>(r#"{"nope": 1}"#).is_err());
        // Positive controls.
        assert_eq!(
            serde_json::from_str::<Approve>("{}").unwrap(),
            Approve::default()
        );
        let a: Approve = serde_json::from_str(
            r#"{"grant": "argv_prefix", "argv_prefix": ["git"], "note": "ok"}"#,
        )
        .unwrap();
        assert_eq!(a.grant, Some(Grant::ArgvPrefix));
        assert_eq!(a.note.as_deref(), Some("ok"));
        assert_eq!(
            serde_json::from_str::<crate::emergency::StopRequest>(r#"{"reason": "drill"}"#)
                .unwrap()
                .reason
                .as_deref(),
            Some("drill")
        );
    }
}
