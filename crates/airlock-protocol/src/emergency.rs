//! The emergency stop of a workspace (AGT-6): while it holds, nothing of
//! the workspace starts, dispatches, connects out or uses an approval, and
//! what was running is killed. Resuming restarts nothing.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A workspace's stop, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EmergencyState {
    pub stopped: bool,
    /// When it last changed (Unix milliseconds); `null` if it never did.
    pub changed_at: Option<i64>,
    pub changed_by: Option<String>,
    /// Why it was stopped.
    pub reason: Option<String>,
}

/// Body of `POST /v1/emergency-stop`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// At most 1000 characters, on one line (no control characters).
    #[serde(default)]
    #[schema(max_length = 1000, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub reason: Option<String>,
}

/// What a stop did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Stopped {
    pub state: EmergencyState,
    /// Queued or waiting runs ended `cancelled` (`emergency_stop`).
    pub runs_cancelled: i64,
    /// Running runs told to stop (killed by their executor).
    pub runs_stopping: i64,
    /// Approval requests that can no longer be decided or used.
    pub approvals_cancelled: i64,
    /// Agent actions that had not been dispatched, now `aborted`.
    pub actions_aborted: i64,
}

impl<'de> Deserialize<'de> for StopRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            reason: Option<String>,
        }
        let r: Raw = crate::object_only::deserialize(d)?;
        Ok(StopRequest { reason: r.reason })
    }
}
