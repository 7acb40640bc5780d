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

/// Columns a workspace export never contains: sealed secret values, wrapped
/// data keys, API key and plan token hashes. (The export is for the workspace's people;
/// none of these is of use without the deployment's keys, and each is
/// material an attacker would want.)
pub const EXPORT_WITHHELD: &[(&str, &str)] = &[
    ("data_keys", "wrapped"),
    ("secrets", "sealed"),
    ("api_keys", "token_hash"),
    ("plans", "token_hash"),
];

/// A workspace's row as an export shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceRow {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub deleted_at: Option<i64>,
}

impl Store {
    /// The workspace's own row, deleted or not.
    pub async fn workspace_row(&self, workspace: &str) -> Result<Option<WorkspaceRow>> {
        use sqlx::Row;
        let row =
            sqlx::query("SELECT id, name, created_at, deleted_at FROM workspaces WHERE id = $1")
                .bind(workspace)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| {
            Ok(WorkspaceRow {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                created_at: r.try_get("created_at")?,
                deleted_at: r.try_get("deleted_at")?,
            })
        })
        .transpose()
    }

    /// Every row of `table` (one of [`WORKSPACE_TABLES`]) owned by
    /// `workspace`, streamed to `each` as a JSON object of its columns,
    /// without the [`EXPORT_WITHHELD`] ones. Answers how many rows.
    pub async fn export_rows(
        &self,
        table: &str,
        workspace: &str,
        mut each: impl FnMut(serde_json::Value) -> std::io::Result<()>,
    ) -> Result<u64> {
        use futures_util::TryStreamExt;
        use sqlx::{Column, Row};
        if !WORKSPACE_TABLES.contains(&table) {
            return Err(crate::StoreError::NotFound);
        }
        let sql = format!("SELECT * FROM {table} WHERE workspace_id = $1");
        let mut rows = sqlx::query(&sql).bind(workspace).fetch(&self.pool);
        let mut n = 0;
        while let Some(r) = rows.try_next().await? {
            let mut obj = serde_json::Map::new();
            for (i, c) in r.columns().iter().enumerate() {
                let name = c.name();
                if EXPORT_WITHHELD.contains(&(table, name)) {
                    continue;
                }
                let v = if let Ok(v) = r.try_get::<Option<i64>, _>(i) {
                    v.map_or(serde_json::Value::Null, Into::into)
                } else if let Ok(v) = r.try_get::<Option<String>, _>(i) {
                    v.map_or(serde_json::Value::Null, Into::into)
                } else if let Ok(v) = r.try_get::<Option<f64>, _>(i) {
                    v.map_or(serde_json::Value::Null, Into::into)
                } else {
                    serde_json::Value::Null
                };
                obj.insert(name.to_string(), v);
            }
            each(serde_json::Value::Object(obj))
                .map_err(|e| crate::StoreError::Db(e.to_string()))?;
            n += 1;
        }
        Ok(n)
    }
}
