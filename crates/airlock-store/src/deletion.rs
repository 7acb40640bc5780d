//! Deleting a workspace (DUR-7) in two parts.
//!
//! 1. **The cut**, one transaction with the `workspace.deleted` audit event:
//!    the workspace is marked `deleted_at` (no run can be queued there any
//!    more, and its id is never reused), and everything that reaches it or
//!    holds its keys goes: memberships, API keys, secrets and their data
//!    keys, webhook secrets, rules and settings ([`CUT_TABLES`]). From this
//!    commit on nobody reaches anything of the workspace.
//! 2. **The purge**, in short transactions so a large workspace never holds
//!    the database's write lock for long: its runs with every row derived
//!    from them, 200 runs per step, then its uploads, schedule fires and
//!    webhook replay records 1,000 rows per step, and finally a sweep of
//!    every table in [`WORKSPACE_TABLES`] and its quota usage, with
//!    `purged_at` set and the `workspace.purged` audit event (what the
//!    purge removed) in the same commit.
//!
//! A crash between steps leaves a deleted workspace with rows still to go;
//! [`Store::unpurged_workspaces`] names it and the purge is resumed (the
//! hourly maintenance pass does it). What stays for good: the workspace's
//! row and its audit chain, which is append-only and stays verifiable
//! against its checkpoints. The bytes of artifacts and uploads no record
//! names any more are `gc`'s.

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

    /// Deletes `workspace` at `now`: the cut, with
    /// `audit(rows the cut removed, by table)` in its transaction, then the
    /// purge ([`Store::purge_workspace`]). Answers every row removed, by
    /// table. Refused, removing nothing, while any of its runs has not
    /// ended.
    pub async fn delete_workspace(
        &self,
        workspace: &str,
        now: i64,
        audit: impl FnOnce(&BTreeMap<String, u64>) -> AuditRecord,
        purged: impl FnOnce(&BTreeMap<String, u64>) -> AuditRecord,
    ) -> Result<WorkspaceDeletion> {
        let mut removed = match self.cut_workspace(workspace, now, audit).await? {
            WorkspaceDeletion::Deleted(r) => r,
            other => return Ok(other),
        };
        let rest = self.purge_workspace(workspace, now, purged).await?;
        for (table, n) in rest {
            *removed.entry(table).or_insert(0) += n;
        }
        Ok(WorkspaceDeletion::Deleted(removed))
    }

    /// The cut alone (see the module docs): what [`Store::delete_workspace`]
    /// commits first. Left alone, as after a crash, the workspace is gone
    /// for everyone and [`Store::unpurged_workspaces`] names it.
    pub async fn cut_workspace(
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
        for table in CUT_TABLES {
            let n = delete_owned(&mut tx, table, workspace).await?;
            removed.insert((*table).to_string(), n);
        }
        self.audit_in(&mut tx, workspace, audit(&removed)).await?;
        tx.commit().await?;
        Ok(WorkspaceDeletion::Deleted(removed))
    }

    /// Deleted workspaces whose purge has not finished (a crash between
    /// its steps), oldest first.
    pub async fn unpurged_workspaces(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM workspaces WHERE deleted_at IS NOT NULL AND purged_at IS NULL \
             ORDER BY deleted_at, id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The purge of a deleted workspace (see the module docs), resumable:
    /// each step removes what is left, so running it again after a crash
    /// finishes the work. The last step sets `purged_at` and appends
    /// `audit(rows this purge removed, by table)`. A workspace that is not
    /// deleted, or is purged already, is left alone (an empty answer).
    pub async fn purge_workspace(
        &self,
        workspace: &str,
        now: i64,
        audit: impl FnOnce(&BTreeMap<String, u64>) -> AuditRecord,
    ) -> Result<BTreeMap<String, u64>> {
        let mut removed: BTreeMap<String, u64> = BTreeMap::new();
        let pending: Option<i64> = sqlx::query_scalar(
            "SELECT deleted_at FROM workspaces WHERE id = $1 AND deleted_at IS NOT NULL AND purged_at IS NULL",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?;
        if pending.is_none() {
            return Ok(removed);
        }
        let mut add = |table: &str, n: u64| *removed.entry(table.to_string()).or_insert(0) += n;
        // Runs with what derives from them, a step of runs at a time.
        let step = crate::retention::RUNS_PER_STEP;
        let ids = format!(
            "SELECT id FROM (SELECT id FROM runs WHERE workspace_id = $1 ORDER BY id LIMIT {step}) x"
        );
        loop {
            let mut tx = self.pool.begin().await?;
            for table in crate::retention::RUN_CHILDREN {
                let n = sqlx::query(&format!("DELETE FROM {table} WHERE run_id IN ({ids})"))
                    .bind(workspace)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                add(table, n);
            }
            let n = sqlx::query(&format!("DELETE FROM runs WHERE id IN ({ids})"))
                .bind(workspace)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            add("runs", n);
            if n < step as u64 {
                break;
            }
        }
        // Tables indexed by workspace first: a batch of rows at a time.
        for table in ["uploads", "schedule_fires", "webhook_deliveries"] {
            let rows = match self.backend {
                crate::store::Backend::Sqlite => format!(
                    "rowid IN (SELECT rowid FROM {table} WHERE workspace_id = $1 LIMIT {ROWS_PER_STEP})"
                ),
                crate::store::Backend::Postgres => format!(
                    "ctid = ANY (ARRAY(SELECT ctid FROM {table} WHERE workspace_id = $1 LIMIT {ROWS_PER_STEP}))"
                ),
            };
            loop {
                let n = sqlx::query(&format!("DELETE FROM {table} WHERE {rows}"))
                    .bind(workspace)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                add(table, n);
                if n < ROWS_PER_STEP {
                    break;
                }
            }
        }
        // The sweep: whatever is left anywhere (rows of a run-derived table
        // that name no run), the quota usage, the mark and the event.
        let mut tx = self.pool.begin().await?;
        let marked = sqlx::query(
            "UPDATE workspaces SET purged_at = $2 WHERE id = $1 AND deleted_at IS NOT NULL AND purged_at IS NULL",
        )
        .bind(workspace)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked != 1 {
            // Another node finished the purge meanwhile.
            tx.rollback().await?;
            return Ok(removed);
        }
        for table in WORKSPACE_TABLES {
            let n = delete_owned(&mut tx, table, workspace).await?;
            add(table, n);
        }
        let n = sqlx::query("DELETE FROM quota_usage WHERE subject = $1")
            .bind(format!("ws:{workspace}"))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        add("quota_usage", n);
        let counts: BTreeMap<String, u64> = removed.into_iter().filter(|(_, n)| *n > 0).collect();
        self.audit_in(&mut tx, workspace, audit(&counts)).await?;
        tx.commit().await?;
        Ok(counts)
    }
}

/// Removes every row of `table` (one of [`WORKSPACE_TABLES`]) that
/// `workspace` owns, in `tx`; answers how many.
async fn delete_owned(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &str,
    workspace: &str,
) -> Result<u64> {
    Ok(
        sqlx::query(&format!("DELETE FROM {table} WHERE workspace_id = $1"))
            .bind(workspace)
            .execute(&mut **tx)
            .await?
            .rows_affected(),
    )
}

/// Rows of a workspace-indexed table removed per purge step.
const ROWS_PER_STEP: u64 = 1_000;

/// What the cut removes, in its one transaction: every table that lets
/// anyone reach the workspace or holds its keys, and its settings (all of
/// them small).
pub const CUT_TABLES: &[&str] = &[
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
