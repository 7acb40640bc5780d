//! Vault records (KEY-4, KEY-6): wrapped data keys and sealed secrets as
//! the vault serialised them. The store never sees plaintext; it keeps
//! the sealed text, its version and when it was last used, and audits
//! writes, deletes and reads.

use sqlx::Row;

use crate::store::{AuditRecord, Result, Store, now_ms};

impl Store {
    /// The newest wrapped data key of a workspace, as the vault serialised it.
    pub async fn data_key(&self, workspace: &str) -> Result<Option<(i64, String)>> {
        let row = sqlx::query(
            "SELECT version, wrapped FROM data_keys WHERE workspace_id = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((r.try_get("version")?, r.try_get("wrapped")?)))
            .transpose()
    }

    /// One specific wrapped data key version of a workspace.
    pub async fn data_key_version(&self, workspace: &str, version: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT wrapped FROM data_keys WHERE workspace_id = $1 AND version = $2",
        )
        .bind(workspace)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every wrapped data key (for `keys rewrap`).
    pub async fn all_data_keys(&self) -> Result<Vec<(String, i64, String)>> {
        let rows = sqlx::query(
            "SELECT workspace_id, version, wrapped FROM data_keys ORDER BY workspace_id, version",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("workspace_id")?,
                    r.try_get("version")?,
                    r.try_get("wrapped")?,
                ))
            })
            .collect()
    }

    /// Stores a wrapped data key (insert, or replace when rewrapped).
    pub async fn put_data_key(&self, workspace: &str, version: i64, wrapped: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO data_keys (workspace_id, version, wrapped, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (workspace_id, version) DO UPDATE SET wrapped = excluded.wrapped",
        )
        .bind(workspace)
        .bind(version)
        .bind(wrapped)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Writes a sealed secret and its audit event in one transaction.
    pub async fn put_secret(
        &self,
        workspace: &str,
        name: &str,
        version: i64,
        sealed: &str,
        actor: &str,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO secrets (workspace_id, name, version, sealed, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (workspace_id, name) DO UPDATE SET version = excluded.version, sealed = excluded.sealed, updated_at = excluded.updated_at",
        )
        .bind(workspace)
        .bind(name)
        .bind(version)
        .bind(sealed)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("secret.written", None)
                .with_actor(airlock_audit::chain::Actor::Human(actor.to_string()))
                .with_metadata(serde_json::json!({"name": name, "version": version})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The sealed record of a secret: `(version, sealed)`.
    pub async fn get_secret(&self, workspace: &str, name: &str) -> Result<Option<(i64, String)>> {
        let row = sqlx::query(
            "SELECT version, sealed FROM secrets WHERE workspace_id = $1 AND name = $2",
        )
        .bind(workspace)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((r.try_get("version")?, r.try_get("sealed")?)))
            .transpose()
    }

    /// Every secret record (for rewrap and the start-up rollback check):
    /// `(workspace, name, version, sealed)`.
    pub async fn all_secrets(&self) -> Result<Vec<(String, String, i64, String)>> {
        let rows = sqlx::query(
            "SELECT workspace_id, name, version, sealed FROM secrets ORDER BY workspace_id, name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("workspace_id")?,
                    r.try_get("name")?,
                    r.try_get("version")?,
                    r.try_get("sealed")?,
                ))
            })
            .collect()
    }

    /// Metadata only (KEY-4): `(name, version, updated_at, last_used_at)`.
    pub async fn list_secrets(
        &self,
        workspace: &str,
    ) -> Result<Vec<(String, i64, i64, Option<i64>)>> {
        let rows = sqlx::query(
            "SELECT name, version, updated_at, last_used_at FROM secrets WHERE workspace_id = $1 ORDER BY name",
        )
        .bind(workspace)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("name")?,
                    r.try_get("version")?,
                    r.try_get("updated_at")?,
                    r.try_get("last_used_at")?,
                ))
            })
            .collect()
    }

    /// Deletes a secret, audited; false when it did not exist.
    pub async fn delete_secret(&self, workspace: &str, name: &str, actor: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query("DELETE FROM secrets WHERE workspace_id = $1 AND name = $2")
            .bind(workspace)
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("secret.deleted", None)
                .with_actor(airlock_audit::chain::Actor::Human(actor.to_string()))
                .with_metadata(serde_json::json!({"name": name})),
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Records that a run read a secret (KEY-6: reads are audited).
    pub async fn secret_read(&self, workspace: &str, name: &str, run_id: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE secrets SET last_used_at = $1 WHERE workspace_id = $2 AND name = $3")
            .bind(now_ms())
            .bind(workspace)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("secret.read", Some(run_id))
                .with_metadata(serde_json::json!({"name": name})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
