//! Agent runs (AGT-1, AGT-2, DUR-2): the transcript the harness persists
//! before it acts, and the workspace's model profiles.
//!
//! Transcript writes are fenced like every executor write: only the holder
//! of the run's current token, while the run is `running`, appends. A
//! tool result is unique per call id, so a harness that resumes after a
//! crash cannot answer one call twice.

use sqlx::Row;

use crate::store::{AuditRecord, Result, Store, StoreError, now_ms};

/// One persisted transcript item.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentItem {
    pub seq: i64,
    /// `prompt`, `response` or `tool_result`.
    pub kind: String,
    /// The tool call a `tool_result` answers.
    pub call_id: Option<String>,
    pub body: serde_json::Value,
    pub created_at: i64,
}

/// A stored model profile (its body is the profile as JSON; parsing and
/// validation are the service's).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProfile {
    pub name: String,
    pub body: serde_json::Value,
    pub updated_at: i64,
    pub updated_by: String,
}

/// Why an item was not appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemRefusal {
    /// The call already has a result.
    CallAnswered,
}

impl Store {
    /// Appends a transcript item to a run this executor holds. `Ok(Err)`
    /// when `call_id` already has a result.
    pub async fn append_agent_item(
        &self,
        run_id: &str,
        token: i64,
        kind: &str,
        call_id: Option<&str>,
        body: &serde_json::Value,
    ) -> Result<std::result::Result<i64, ItemRefusal>> {
        let mut tx = self.pool.begin().await?;
        let ws: Option<String> = sqlx::query_scalar(
            "UPDATE runs SET fencing_token = fencing_token WHERE id = $1 AND fencing_token = $2 AND state = 'running' RETURNING workspace_id",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(ws) = ws else {
            tx.rollback().await?;
            return Err(StoreError::StaleToken);
        };
        // The run is fenced and its items are keyed by its id (random,
        // unique across workspaces); its workspace is the one just read
        // from its row. A workspace predicate here could never exclude a
        // row (the mutation check reported it as surviving), so there is
        // none.
        if let Some(call) = call_id {
            let answered: Option<i64> = sqlx::query_scalar(
                "SELECT seq FROM agent_items WHERE run_id = $1 AND call_id = $2",
            )
            .bind(run_id)
            .bind(call)
            .fetch_optional(&mut *tx)
            .await?;
            if answered.is_some() {
                tx.rollback().await?;
                return Ok(Err(ItemRefusal::CallAnswered));
            }
        }
        let seq: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM agent_items WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO agent_items (workspace_id, run_id, seq, kind, call_id, body, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&ws)
        .bind(run_id)
        .bind(seq)
        .bind(kind)
        .bind(call_id)
        .bind(body.to_string())
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(seq))
    }

    /// A run's transcript, in order.
    pub async fn agent_items(&self, workspace: &str, run_id: &str) -> Result<Vec<AgentItem>> {
        let rows = sqlx::query(
            "SELECT seq, kind, call_id, body, created_at FROM agent_items WHERE workspace_id = $1 AND run_id = $2 ORDER BY seq",
        )
        .bind(workspace)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get("body")?;
                Ok(AgentItem {
                    seq: r.try_get("seq")?,
                    kind: r.try_get("kind")?,
                    call_id: r.try_get("call_id")?,
                    body: serde_json::from_str(&body)
                        .map_err(|e| StoreError::Db(format!("agent item {e}")))?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Creates or replaces a model profile, audited.
    pub async fn put_model_profile(
        &self,
        workspace: &str,
        name: &str,
        body: &serde_json::Value,
        by: &str,
        audit: AuditRecord,
    ) -> Result<StoredProfile> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO model_profiles (workspace_id, name, body, updated_at, updated_by) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (workspace_id, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        )
        .bind(workspace)
        .bind(name)
        .bind(body.to_string())
        .bind(now)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(StoredProfile {
            name: name.to_string(),
            body: body.clone(),
            updated_at: now,
            updated_by: by.to_string(),
        })
    }

    /// One model profile of a workspace.
    pub async fn model_profile(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<StoredProfile>> {
        let row = sqlx::query(
            "SELECT name, body, updated_at, updated_by FROM model_profiles WHERE workspace_id = $1 AND name = $2",
        )
        .bind(workspace)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(profile_from_row).transpose()
    }

    /// A workspace's model profiles, by name.
    pub async fn list_model_profiles(&self, workspace: &str) -> Result<Vec<StoredProfile>> {
        let rows = sqlx::query(
            "SELECT name, body, updated_at, updated_by FROM model_profiles WHERE workspace_id = $1 ORDER BY name",
        )
        .bind(workspace)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(profile_from_row).collect()
    }

    /// Deletes a model profile, audited; false when there was none.
    pub async fn delete_model_profile(
        &self,
        workspace: &str,
        name: &str,
        audit: AuditRecord,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query("DELETE FROM model_profiles WHERE workspace_id = $1 AND name = $2")
            .bind(workspace)
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(true)
    }
}

fn profile_from_row(r: &sqlx::any::AnyRow) -> Result<StoredProfile> {
    let body: String = r.try_get("body")?;
    Ok(StoredProfile {
        name: r.try_get("name")?,
        body: serde_json::from_str(&body)
            .map_err(|e| StoreError::Db(format!("model profile {e}")))?,
        updated_at: r.try_get("updated_at")?,
        updated_by: r.try_get("updated_by")?,
    })
}
