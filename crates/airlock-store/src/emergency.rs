//! The emergency stop (AGT-6), durable: one row per workspace that ever
//! stopped. Stopping is one transaction: the flag, every queued or waiting
//! run of the workspace ended `cancelled` (`emergency_stop`), every
//! running one told to stop (`cancel_requested = 2`, which executors on
//! every node poll), open approval requests cancelled, actions that were
//! not dispatched aborted, and the audit event. Resuming clears the flag
//! and restarts nothing.
//!
//! Why the running runs carry the stop in `cancel_requested`: every
//! executor already polls that column for its runs (RUN-5), so a stop
//! reaches runs on other nodes without a new channel, and the value says
//! which kind of cancel it was.

use airlock_protocol::emergency::{EmergencyState, Stopped};
use serde_json::json;
use sqlx::Row;

use crate::RunErrorCode;
use crate::store::{AuditRecord, Result, Store};

/// `runs.cancel_requested` for a cancel by a person (RUN-5).
pub const CANCEL_BY_REQUEST: i64 = 1;
/// `runs.cancel_requested` for the emergency stop.
pub const CANCEL_BY_EMERGENCY_STOP: i64 = 2;

/// A stop as the store carried it out.
#[derive(Debug, Clone, PartialEq)]
pub struct StopOutcome {
    pub stopped: Stopped,
    /// The runs that were running: their executors must kill them.
    pub running: Vec<String>,
}

impl Store {
    pub async fn emergency_state(&self, workspace: &str) -> Result<EmergencyState> {
        let row = sqlx::query(
            "SELECT stopped, changed_at, changed_by, reason FROM emergency_stops WHERE workspace_id = $1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            None => EmergencyState {
                stopped: false,
                changed_at: None,
                changed_by: None,
                reason: None,
            },
            Some(r) => EmergencyState {
                stopped: r.try_get::<i64, _>("stopped")? != 0,
                changed_at: r.try_get("changed_at")?,
                changed_by: r.try_get("changed_by")?,
                reason: r.try_get("reason")?,
            },
        })
    }

    /// Whether the workspace is stopped now.
    pub async fn emergency_stopped(&self, workspace: &str) -> Result<bool> {
        Ok(self.emergency_state(workspace).await?.stopped)
    }

    /// Whether the workspace is stopped, read inside `tx`.
    pub(crate) async fn stopped_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
    ) -> Result<bool> {
        let v: Option<i64> =
            sqlx::query_scalar("SELECT stopped FROM emergency_stops WHERE workspace_id = $1")
                .bind(workspace)
                .fetch_optional(&mut **tx)
                .await?;
        Ok(v.unwrap_or(0) != 0)
    }

    /// The workspaces stopped now.
    pub async fn stopped_workspaces(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT workspace_id FROM emergency_stops WHERE stopped = 1 ORDER BY workspace_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Stops a workspace (see the module header). Stopping a stopped
    /// workspace sweeps again and keeps the first stop's record.
    pub async fn emergency_stop(
        &self,
        workspace: &str,
        by: &str,
        audit_actor: airlock_audit::chain::Actor,
        reason: Option<&str>,
        now: i64,
    ) -> Result<StopOutcome> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO emergency_stops (workspace_id, stopped, changed_at, changed_by, reason) VALUES ($1, 1, $2, $3, $4) \
             ON CONFLICT (workspace_id) DO UPDATE SET stopped = 1, \
             changed_at = CASE WHEN emergency_stops.stopped = 1 THEN emergency_stops.changed_at ELSE excluded.changed_at END, \
             changed_by = CASE WHEN emergency_stops.stopped = 1 THEN emergency_stops.changed_by ELSE excluded.changed_by END, \
             reason = CASE WHEN emergency_stops.stopped = 1 THEN emergency_stops.reason ELSE excluded.reason END",
        )
        .bind(workspace)
        .bind(now)
        .bind(by)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        let code = RunErrorCode::EmergencyStop;
        let cancelled: Vec<String> = sqlx::query_scalar(
            "UPDATE runs SET state = $1, cancel_requested = $2, finished_at = $3, error_code = $4, error_message = $5, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE workspace_id = $6 AND state IN ('queued', 'awaiting_approval') RETURNING id",
        )
        .bind(code.state().as_str())
        .bind(CANCEL_BY_EMERGENCY_STOP)
        .bind(now)
        .bind(code.as_str())
        .bind(code.description())
        .bind(workspace)
        .fetch_all(&mut *tx)
        .await?;
        let running: Vec<String> = sqlx::query_scalar(
            "UPDATE runs SET cancel_requested = $1 WHERE workspace_id = $2 AND state = 'running' RETURNING id",
        )
        .bind(CANCEL_BY_EMERGENCY_STOP)
        .bind(workspace)
        .fetch_all(&mut *tx)
        .await?;
        let approvals = self
            .cancel_open_approvals_in(&mut tx, workspace, None, now)
            .await?;
        let actions = self
            .abort_open_actions_in(
                &mut tx,
                workspace,
                None,
                "emergency_stop",
                "the workspace's emergency stop",
                now,
            )
            .await?;
        for id in &cancelled {
            self.run_event_in(
                &mut tx,
                id,
                "finish",
                &json!({"state": code.state().as_str(), "error_code": code.as_str()}),
                now,
            )
            .await?;
        }
        let to_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let stopped = Stopped {
            state: EmergencyState {
                stopped: true,
                changed_at: None,
                changed_by: None,
                reason: None,
            },
            runs_cancelled: to_i64(cancelled.len()),
            runs_stopping: to_i64(running.len()),
            approvals_cancelled: i64::try_from(approvals).unwrap_or(i64::MAX),
            actions_aborted: i64::try_from(actions).unwrap_or(i64::MAX),
        };
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("emergency.stopped", None)
                .with_actor(audit_actor)
                .with_decision("stop")
                .with_metadata(json!({
                    "reason": reason,
                    "runs_cancelled": stopped.runs_cancelled,
                    "runs_stopping": stopped.runs_stopping,
                    "approvals_cancelled": stopped.approvals_cancelled,
                    "actions_aborted": stopped.actions_aborted,
                })),
        )
        .await?;
        tx.commit().await?;
        let state = self.emergency_state(workspace).await?;
        Ok(StopOutcome {
            stopped: Stopped { state, ..stopped },
            running,
        })
    }

    /// Clears a workspace's stop (audited). Restarts nothing: what the stop
    /// ended stays ended.
    pub async fn emergency_resume(
        &self,
        workspace: &str,
        by: &str,
        audit_actor: airlock_audit::chain::Actor,
        now: i64,
    ) -> Result<EmergencyState> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE emergency_stops SET stopped = 0, changed_at = $1, changed_by = $2, reason = NULL \
             WHERE workspace_id = $3 AND stopped = 1",
        )
        .bind(now)
        .bind(by)
        .bind(workspace)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            self.audit_in(
                &mut tx,
                workspace,
                AuditRecord::system("emergency.resumed", None)
                    .with_actor(audit_actor)
                    .with_decision("resume"),
            )
            .await?;
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        self.emergency_state(workspace).await
    }

    /// Which kind of cancel a run carries: 0 none, [`CANCEL_BY_REQUEST`] or
    /// [`CANCEL_BY_EMERGENCY_STOP`]; `None` for no such run.
    pub async fn cancel_kind(&self, run_id: &str) -> Result<Option<i64>> {
        Ok(
            sqlx::query_scalar("SELECT cancel_requested FROM runs WHERE id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }
}
