//! Plans (DUR-3): a caller's serialised plan stored behind an opaque,
//! single-use token (stored hashed), and consuming that token atomically.

use std::time::Duration;

use sqlx::Row;

use crate::ids::{random_id, sha256_hex};
use crate::store::{AuditRecord, Result, Store, StoreError, now_ms};

/// A plan as stored (DUR-3): the caller's serialised plan and its status.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPlan {
    pub id: String,
    pub workspace_id: String,
    pub worker_id: String,
    pub plan: serde_json::Value,
    pub expires_at: i64,
}

impl Store {
    /// Stores a plan and returns its opaque token (shown once; stored hashed).
    pub async fn create_plan(
        &self,
        workspace: &str,
        worker_id: &str,
        plan: &serde_json::Value,
        ttl: Duration,
    ) -> Result<(String, StoredPlan)> {
        let token = random_id("plan");
        let id = random_id("pln");
        let now = now_ms();
        let expires_at = now + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO plans (id, workspace_id, token_hash, worker_id, plan, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
            .bind(&id)
            .bind(workspace)
            .bind(sha256_hex(token.as_bytes()))
            .bind(worker_id)
            .bind(plan.to_string())
            .bind(now)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("plan.created", None)
                .with_metadata(serde_json::json!({"plan": id, "worker": worker_id})),
        )
        .await?;
        tx.commit().await?;
        Ok((
            token,
            StoredPlan {
                id,
                workspace_id: workspace.to_string(),
                worker_id: worker_id.to_string(),
                plan: plan.clone(),
                expires_at,
            },
        ))
    }

    /// Consumes a plan token atomically: used, expired or unknown tokens
    /// are refused; exactly one caller wins a race.
    pub async fn consume_plan(&self, workspace: &str, token: &str) -> Result<StoredPlan> {
        let hash = sha256_hex(token.as_bytes());
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "UPDATE plans SET used_at = $1 WHERE workspace_id = $2 AND token_hash = $3 AND used_at IS NULL AND expires_at > $1 \
             RETURNING id, worker_id, plan, expires_at",
        )
        .bind(now)
        .bind(workspace)
        .bind(&hash)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let status = sqlx::query(
                "SELECT used_at, expires_at FROM plans WHERE workspace_id = $1 AND token_hash = $2",
            )
            .bind(workspace)
            .bind(&hash)
            .fetch_optional(&self.pool)
            .await?;
            return Err(StoreError::Plan(match status {
                None => "unknown or tampered token",
                Some(r) if r.try_get::<Option<i64>, _>("used_at")?.is_some() => {
                    "token already used"
                }
                Some(_) => "token expired",
            }));
        };
        let plan: String = row.try_get("plan")?;
        let stored = StoredPlan {
            id: row.try_get("id")?,
            workspace_id: workspace.to_string(),
            worker_id: row.try_get("worker_id")?,
            plan: serde_json::from_str(&plan).map_err(|e| StoreError::Db(e.to_string()))?,
            expires_at: row.try_get("expires_at")?,
        };
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("plan.consumed", None)
                .with_metadata(serde_json::json!({"plan": stored.id})),
        )
        .await?;
        tx.commit().await?;
        Ok(stored)
    }
}
