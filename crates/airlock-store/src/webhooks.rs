//! Webhook records (API-9): the versions of each endpoint's signing secret
//! and the replay store.
//!
//! Secret *values* live in the vault; this table only says which versions
//! exist, when each was made and when it was retired. The replay store
//! remembers every accepted delivery id per endpoint; its primary key makes
//! "have I seen this delivery?" and "remember it" one atomic statement, so
//! two copies of a delivery racing each other are accepted once. Times are
//! passed in by the caller (Unix milliseconds) so tests control the clock.

use sqlx::Row;

use crate::store::{AuditRecord, Backend, Result, Store, StoreError};

/// One live secret version of a webhook endpoint: `(version, created_at)`.
pub type WebhookSecretVersion = (i64, i64);

impl Store {
    /// Adds the next secret version of a worker's webhook endpoint (1 for
    /// the first) and records `audit` (given `worker` and `version` in its
    /// metadata) in the same transaction.
    pub async fn add_webhook_secret_version(
        &self,
        workspace: &str,
        worker: &str,
        now: i64,
        audit: AuditRecord,
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        // Computing the next version and inserting it is one statement (in
        // SQLite it takes the write lock at once). On PostgreSQL rotations
        // in one workspace are serialised by the lock the audit append
        // takes anyway (re-entrant within the transaction); should two
        // still compute the same number, the loser inserts nothing and
        // tries again with a fresh snapshot.
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(workspace)
                .execute(&mut *tx)
                .await?;
        }
        let mut version = None;
        for _ in 0..5 {
            version = sqlx::query_scalar::<_, i64>(
                "INSERT INTO webhook_secrets (workspace_id, worker_id, version, created_at) \
                 SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3 FROM webhook_secrets \
                 WHERE workspace_id = $1 AND worker_id = $2 \
                 ON CONFLICT (workspace_id, worker_id, version) DO NOTHING RETURNING version",
            )
            .bind(workspace)
            .bind(worker)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if version.is_some() {
                break;
            }
        }
        let Some(version) = version else {
            tx.rollback().await?;
            return Err(StoreError::Conflict);
        };
        let mut audit = audit;
        match &mut audit.metadata {
            serde_json::Value::Object(m) => {
                m.insert("worker".into(), worker.into());
                m.insert("version".into(), version.into());
            }
            other => *other = serde_json::json!({"worker": worker, "version": version}),
        }
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(version)
    }

    /// The live (not retired) secret versions of an endpoint, newest first.
    pub async fn webhook_secret_versions(
        &self,
        workspace: &str,
        worker: &str,
    ) -> Result<Vec<WebhookSecretVersion>> {
        let rows = sqlx::query(
            "SELECT version, created_at FROM webhook_secrets \
             WHERE workspace_id = $1 AND worker_id = $2 AND retired_at IS NULL \
             ORDER BY version DESC",
        )
        .bind(workspace)
        .bind(worker)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("version")?, r.try_get("created_at")?)))
            .collect()
    }

    /// Retires every live version older than `version`, audited; returns
    /// the versions this call retired (so the caller can drop their values
    /// from the vault). Concurrent callers each get a disjoint set.
    pub async fn retire_webhook_secrets_before(
        &self,
        workspace: &str,
        worker: &str,
        version: i64,
        now: i64,
    ) -> Result<Vec<i64>> {
        let mut tx = self.pool.begin().await?;
        let mut retired: Vec<i64> = sqlx::query_scalar(
            "UPDATE webhook_secrets SET retired_at = $4 \
             WHERE workspace_id = $1 AND worker_id = $2 AND version < $3 AND retired_at IS NULL \
             RETURNING version",
        )
        .bind(workspace)
        .bind(worker)
        .bind(version)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        if retired.is_empty() {
            tx.rollback().await?;
            return Ok(retired);
        }
        retired.sort_unstable();
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("webhook.secret_retired", None)
                .with_metadata(serde_json::json!({"worker": worker, "versions": retired})),
        )
        .await?;
        tx.commit().await?;
        Ok(retired)
    }

    /// Remembers a delivery id for an endpoint: true iff it was not seen
    /// before. Atomic: of two concurrent calls with the same id exactly one
    /// gets true.
    pub async fn record_delivery(
        &self,
        workspace: &str,
        worker: &str,
        delivery_id: &str,
        now: i64,
    ) -> Result<bool> {
        let n = sqlx::query(
            "INSERT INTO webhook_deliveries (workspace_id, worker_id, delivery_id, received_at) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (workspace_id, worker_id, delivery_id) DO NOTHING",
        )
        .bind(workspace)
        .bind(worker)
        .bind(delivery_id)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Links a recorded delivery to the run it created.
    pub async fn set_delivery_run(
        &self,
        workspace: &str,
        worker: &str,
        delivery_id: &str,
        run_id: &str,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET run_id = $4 \
             WHERE workspace_id = $1 AND worker_id = $2 AND delivery_id = $3",
        )
        .bind(workspace)
        .bind(worker)
        .bind(delivery_id)
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The run a recorded delivery created, if any: `Some(None)` for a
    /// delivery recorded without a run, `None` for an unknown one.
    pub async fn delivery_run(
        &self,
        workspace: &str,
        worker: &str,
        delivery_id: &str,
    ) -> Result<Option<Option<String>>> {
        Ok(sqlx::query_scalar(
            "SELECT run_id FROM webhook_deliveries \
             WHERE workspace_id = $1 AND worker_id = $2 AND delivery_id = $3",
        )
        .bind(workspace)
        .bind(worker)
        .bind(delivery_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Forgets deliveries received before `older_than_ms`; returns how many.
    pub async fn prune_deliveries(&self, older_than_ms: i64) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM webhook_deliveries WHERE received_at < $1")
                .bind(older_than_ms)
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }
}
