//! Runs (RUN-3 … RUN-7), their events and artifacts, and plans (DUR-3).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Where a run is in its life (RUN-4). Terminal states never change again.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Running,
    AwaitingApproval,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    Blocked,
    Unknown,
}

impl RunState {
    pub const ALL: [RunState; 9] = [
        Self::Queued,
        Self::Running,
        Self::AwaitingApproval,
        Self::Succeeded,
        Self::Failed,
        Self::TimedOut,
        Self::Cancelled,
        Self::Blocked,
        Self::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Blocked => "blocked",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded
                | Self::Failed
                | Self::TimedOut
                | Self::Cancelled
                | Self::Blocked
                | Self::Unknown
        )
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run as stored and shown. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: String,
    pub workspace_id: String,
    pub worker_id: String,
    pub state: RunState,
    /// The input, as checked against the worker's declared inputs.
    #[schema(value_type = Object)]
    pub input: Value,
    /// SHA-256 (hex) of the canonical input.
    pub input_hash: String,
    /// What started it: `api`, `cli`, `plan`, `schedule`, `webhook`, …
    pub trigger: String,
    /// Who started it: a user id, `cli` (the local operator), `schedule:…`, `webhook:…`.
    pub actor: String,
    pub plan_id: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub attempt: i64,
    /// Increases with every claim; an executor holding an older one can no longer write.
    pub fencing_token: i64,
    /// Whether the workload may have started (from here a crash leaves the run `unknown`
    /// unless the worker is idempotent).
    pub workload_started: bool,
    pub cancel_requested: bool,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    /// From the fixed taxonomy of run error codes (docs/workers.md).
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The sandbox's containment report: driver, level, each guarantee and whether it held.
    #[schema(value_type = Option<Object>)]
    pub containment: Option<Value>,
    /// Egress totals: allowed and denied decisions, bytes each way.
    #[schema(value_type = Option<Object>)]
    pub egress: Option<Value>,
    /// The scalar outputs (`result.json`).
    #[schema(value_type = Option<Object>)]
    pub outputs: Option<Value>,
}

/// One event of a run (API-6): `status`, `log`, `warning`, `artifact`, …
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunEvent {
    /// Increasing per run; resume after it with `Last-Event-ID`.
    pub seq: i64,
    pub at: i64,
    pub kind: String,
    #[schema(value_type = Object)]
    pub data: Value,
}

/// One server-sent event of a run's stream, as it appears on the wire:
/// `event` is the run event's kind (or `end` when the run is over), `data`
/// its JSON `data` as text, `id` its sequence number (resume with
/// `Last-Event-ID`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// A file the run published (DUR-5), content-addressed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Artifact {
    /// Path relative to the run's output folder.
    pub name: String,
    /// Lowercase hex SHA-256 of the stored bytes.
    pub digest: String,
    pub size: i64,
    pub media_type: String,
}

/// Body of `POST /v1/workers/{id}/runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// Values for the worker's declared inputs; omitted or `null` means `{}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Value,
}

/// A created run (201), or the original run of an idempotency key (200).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunCreated {
    pub run: Run,
}

/// Filters and paging of `GET /v1/runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListRuns {
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs of this worker.
    #[param(max_length = 64)]
    pub worker: Option<String>,
    /// Only runs started this way (`api`, `cli`, `plan`, `schedule`, `webhook`, …).
    #[param(max_length = 64)]
    pub trigger: Option<String>,
    /// Only runs created at or after this time (Unix milliseconds).
    #[param(minimum = 0)]
    pub since: Option<i64>,
    /// Only runs created before this time (Unix milliseconds).
    #[param(minimum = 0)]
    pub until: Option<i64>,
    /// Page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page (the same filters apply).
    #[param(max_length = 128)]
    pub cursor: Option<String>,
}

/// A page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<Run>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A run with its place in the queue and its artifacts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDetail {
    pub run: Run,
    /// 1 for the next run to start; `null` when the run is not queued.
    pub queue_position: Option<i64>,
    pub artifacts: Vec<Artifact>,
}

/// The answer to a cancel: the state the run is in now (idempotent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Cancelled {
    pub id: String,
    pub state: RunState,
}

/// Body of `POST /v1/runs/{id}/retry`: queue an `unknown` run again for a
/// new attempt (DUR-2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRun {
    /// Why (recorded in the audit chain). At most 1000 characters; no
    /// control characters but newline and tab.
    #[serde(default)]
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
    )]
    pub reason: Option<String>,
}

/// How a person says an `unknown` run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunResolution {
    Succeeded,
    Failed,
}

/// Body of `POST /v1/runs/{id}/resolve`: settle an `unknown` run by hand
/// (DUR-2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveRun {
    pub outcome: RunResolution,
    /// Why (required; recorded on the run and in the audit chain). 1 to
    /// 1000 characters; no control characters but newline and tab.
    #[schema(
        min_length = 1,
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
    )]
    pub reason: String,
}

/// A page of a run's events, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<RunEvent>,
    /// Whether the run is in a terminal state (no event will follow the last one).
    pub finished: bool,
}

/// Body of `POST /v1/plans`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePlan {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub worker: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Value,
    /// Seconds until the token expires (default 900, at most 7 days).
    #[serde(default, deserialize_with = "crate::whole::option_u64")]
    #[schema(minimum = 1, maximum = 604800)]
    pub ttl_s: Option<u64>,
}

/// What a plan pins (DUR-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Plan {
    pub plan_id: String,
    pub expires_at: i64,
    /// Worker, input and its hash, entry and runtime digests, limits and egress.
    #[schema(value_type = Object)]
    pub plan: Value,
}

/// A stored plan and its single-use token (shown once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanCreated {
    pub token: String,
    pub plan: Plan,
}

/// Body of `POST /v1/plans/run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPlan {
    #[schema(min_length = 1, max_length = 256)]
    pub token: String,
}
