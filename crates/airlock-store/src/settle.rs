//! A person settles a run whose outcome is `unknown` (DUR-2): retry it
//! (a new attempt of the same run, queued again) or resolve it as
//! `failed` or `succeeded`. Each is one guarded `UPDATE … WHERE state =
//! 'unknown'` whose row count names the winner, with its run event and
//! its audit event (actor and reason) in the same transaction.
//!
//! Who may settle is the service's decision, not this module's.

use crate::runs::{RUN_COLUMNS, run_from_row};
use crate::store::{AuditRecord, Result, Store, StoreError, now_ms};
use crate::{RunRecord, RunState};

/// What settling came to.
#[derive(Debug, Clone)]
pub enum Settled {
    /// The run as it is now.
    Done(Box<RunRecord>),
    /// The run is not `unknown` (its state now): nothing changed.
    NotUnknown(RunState),
}

/// How a person resolves an `unknown` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Succeeded,
    Failed,
}

impl Resolution {
    pub fn state(self) -> RunState {
        match self {
            Self::Succeeded => RunState::Succeeded,
            Self::Failed => RunState::Failed,
        }
    }
}

impl Store {
    /// The state of a run in `workspace` (another workspace's run is
    /// `NotFound`, like a missing one).
    async fn settle_refusal(&self, workspace: &str, run_id: &str) -> Result<Settled> {
        match self.get_run(workspace, run_id).await? {
            Some(r) => Ok(Settled::NotUnknown(r.state)),
            None => Err(StoreError::NotFound),
        }
    }

    /// Retry: an `unknown` run is queued again for a new attempt (the
    /// claim counts it); its earlier outcome is kept in its events and the
    /// audit chain (`run.retried`, with the actor and the reason).
    pub async fn retry_unknown(
        &self,
        workspace: &str,
        run_id: &str,
        audit_actor: airlock_audit::chain::Actor,
        reason: Option<&str>,
    ) -> Result<Settled> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE runs SET state = 'queued', finished_at = NULL, error_code = NULL, error_message = NULL, \
             exit_code = NULL, signal = NULL, lease_owner = NULL, lease_expires_at = NULL, workload_started = 0 \
             WHERE workspace_id = $1 AND id = $2 AND state = 'unknown' RETURNING {RUN_COLUMNS}"
        ))
        .bind(workspace)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return self.settle_refusal(workspace, run_id).await;
        };
        let run = run_from_row(&row)?;
        let dropped = self.drop_attempt_artifacts(&mut tx, run_id).await?;
        let by = actor_label(&audit_actor);
        self.run_event_in(
            &mut tx,
            run_id,
            "status",
            &serde_json::json!({"state": "queued", "retried": true, "by": by, "reason": reason, "previous_attempt": run.attempt}),
            now,
        )
        .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("run.retried", Some(run_id))
                .with_actor(audit_actor)
                .with_result("queued")
                .with_metadata(serde_json::json!({
                    "reason": reason,
                    "previous_attempt": run.attempt,
                    "artifacts_dropped": dropped,
                })),
        )
        .await?;
        self.notify_queued(&mut tx, run_id).await?;
        tx.commit().await?;
        Ok(Settled::Done(Box::new(run)))
    }

    /// Resolve: a person says how an `unknown` run ended. The run keeps
    /// its `abandoned` code when resolved `failed`; `succeeded` clears it.
    /// The reason is stored as the run's message and in `run.resolved`.
    pub async fn resolve_unknown(
        &self,
        workspace: &str,
        run_id: &str,
        resolution: Resolution,
        audit_actor: airlock_audit::chain::Actor,
        reason: &str,
    ) -> Result<Settled> {
        let now = now_ms();
        let state = resolution.state();
        let by = actor_label(&audit_actor);
        let message = format!("resolved {} by {by}: {reason}", state.as_str());
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE runs SET state = $1, error_code = CASE WHEN $6 = 1 THEN NULL ELSE error_code END, \
             error_message = $2, finished_at = COALESCE(finished_at, $3) \
             WHERE workspace_id = $4 AND id = $5 AND state = 'unknown' RETURNING {RUN_COLUMNS}"
        ))
        .bind(state.as_str())
        .bind(&message)
        .bind(now)
        .bind(workspace)
        .bind(run_id)
        .bind(i64::from(resolution == Resolution::Succeeded))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return self.settle_refusal(workspace, run_id).await;
        };
        let run = run_from_row(&row)?;
        self.run_event_in(
            &mut tx,
            run_id,
            "status",
            &serde_json::json!({"state": state.as_str(), "resolved": true, "by": by, "reason": reason}),
            now,
        )
        .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("run.resolved", Some(run_id))
                .with_actor(audit_actor)
                .with_result(state.as_str())
                .with_metadata(serde_json::json!({"reason": reason, "from": "unknown"})),
        )
        .await?;
        tx.commit().await?;
        Ok(Settled::Done(Box::new(run)))
    }
}

/// Who settled, for the run's event (the audit event carries the actor
/// itself).
fn actor_label(a: &airlock_audit::chain::Actor) -> String {
    use airlock_audit::chain::Actor;
    match a {
        Actor::Human(id) | Actor::Agent(id) | Actor::Service(id) => id.clone(),
        Actor::System => "system".into(),
    }
}
