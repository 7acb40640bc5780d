//! Deleting a workspace (DUR-7): every row the workspace owns and every row
//! derived from them goes in one transaction, with the `workspace.deleted`
//! audit event. What stays: the workspace's row, marked `deleted_at` (its
//! id is never reused), and its audit chain, which is append-only and stays
//! verifiable against its checkpoints. The bytes of artifacts and uploads
//! no record names any more are `gc`'s.

use std::collections::BTreeMap;

use crate::store::{AuditRecord, Result, Store};

/// What [`Store::delete_workspace`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceDeletion {
    /// Rows removed, by table.
    Deleted(BTreeMap<String, u64>),
    /// No such workspace, or deleted already.
    NotFound,
    /// Runs that have not ended (queued, running, awaiting approval, parked):
    /// nothing was removed.
    Busy(u64),
}

/// Tables with a `workspace_id` column, children before parents; every
/// owned row of a workspace is in one of them (a conformance case checks
/// the schema for any it misses).
pub const WORKSPACE_TABLES: &[&str] = &[
    "agent_items",
    "actions",
    "approvals",
    "artifacts",
    "run_events",
    "idempotency_keys",
    "plans",
    "runs",
    "uploads",
    "schedule_fires",
    "webhook_deliveries",
    "webhook_secrets",
    "secrets",
    "data_keys",
    "api_keys",
    "memberships",
    "approval_rules",
    "approval_settings",
    "emergency_stops",
    "model_profiles",
    "retention_settings",
];

impl Store {
    /// The name of a live (not deleted) workspace.
    pub async fn workspace_name(&self, workspace: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT name FROM workspaces WHERE id = $1 AND deleted_at IS NULL")
                .bind(workspace)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Deletes everything `workspace` owns (see the module docs) at `now`,
    /// appending `audit(rows removed by table)` in the same transaction.
    /// Refused, removing nothing, while any of its runs has not ended.
    pub async fn delete_workspace(
        &self,
        workspace: &str,
        now: i64,
        audit: impl FnOnce(&BTreeMap<String, u64>) -> AuditRecord,
    ) -> Result<WorkspaceDeletion> {
        let mut tx = self.pool.begin().await?;
        // Run creation takes the same lock before it checks the workspace:
        // either it queued its run before (and the count below sees it) or
        // it finds the workspace deleted.
        self.serialise_workspace(&mut tx, workspace).await?;
        let marked = sqlx::query(
            "UPDATE workspaces SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL",
        )
        .bind(workspace)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked != 1 {
            tx.rollback().await?;
            return Ok(WorkspaceDeletion::NotFound);
        }
        let unfinished: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE workspace_id = $1 \
             AND state IN ('queued', 'running', 'awaiting_approval')",
        )
        .bind(workspace)
        .fetch_one(&mut *tx)
        .await?;
        if unfinished > 0 {
            tx.rollback().await?;
            return Ok(WorkspaceDeletion::Busy(
                u64::try_from(unfinished).unwrap_or(0),
            ));
        }
        let mut removed = BTreeMap::new();
        for table in WORKSPACE_TABLES {
            let n = sqlx::query(&format!("DELETE FROM {table} WHERE workspace_id = $1"))
                .bind(workspace)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            removed.insert((*table).to_string(), n);
        }
        let n = sqlx::query("DELETE FROM quota_usage WHERE subject = $1")
            .bind(format!("ws:{workspace}"))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        removed.insert("quota_usage".into(), n);
        self.audit_in(&mut tx, workspace, audit(&removed)).await?;
        tx.commit().await?;
        Ok(WorkspaceDeletion::Deleted(removed))
    }
}
