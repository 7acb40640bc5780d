//! Reading and appending the audit chain (AUD-1 … AUD-3): one event on its
//! own, every line or one page of a workspace, the rows of a chain in
//! bounded pages (for verification), and the workspaces that have events.
//!
//! Appending inside a caller's transaction (`Store::audit_in`) lives in
//! `store.rs`, with the `Store` type, because every resource uses it.

use crate::store::{AuditRecord, Result, Store};

/// One stored audit row: the key columns the database orders and finds
/// rows by, and the line the chain hashes. Verification checks that the
/// columns agree with the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: i64,
    /// The hash as stored in its own column (64 lowercase hex digits).
    pub hash: String,
    pub line: String,
}

impl Store {
    /// Appends an audit event on its own.
    pub async fn audit(&self, workspace: &str, rec: AuditRecord) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        self.audit_in(&mut tx, workspace, rec).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every audit line of a workspace, in sequence order.
    pub async fn audit_lines(&self, workspace: &str) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar(
                "SELECT line FROM audit_events WHERE workspace_id = $1 ORDER BY seq",
            )
            .bind(workspace)
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// One page of a workspace's audit lines: sequence numbers after
    /// `after_seq`, in order, at most `limit`.
    pub async fn audit_page(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT line FROM audit_events WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(workspace)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Up to `limit` rows of a workspace's chain with sequence numbers
    /// after `after_seq`, in order: a chain of any length read in pages of
    /// bounded size (keyset pagination on the primary key).
    pub async fn audit_rows(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<AuditRow>> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT seq, hash, line FROM audit_events WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(workspace)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, hash, line)| AuditRow { seq, hash, line })
            .collect())
    }

    /// The last row of a workspace's chain: its `seq` and `hash` columns
    /// (`None` for a workspace without events).
    pub async fn audit_head(&self, workspace: &str) -> Result<Option<(i64, String)>> {
        Ok(sqlx::query_as(
            "SELECT seq, hash FROM audit_events WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Workspaces that have audit events.
    pub async fn audit_workspaces(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT workspace_id FROM audit_events ORDER BY workspace_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}
