//! Uploads (API-5): a user's file, stored content-addressed in the artifact store, recorded
//! here with the workspace and user that own it.
//!
//! The bytes never touch the database; a row names them by SHA-256 digest. Every query carries
//! the workspace id, so another workspace's upload is indistinguishable from a missing one.
//! Times are passed in by the caller (Unix milliseconds), as for identity records.

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::store::{AuditRecord, Result, Store, StoreError};

/// One upload as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UploadRecord {
    pub id: String,
    pub workspace_id: String,
    pub user_id: String,
    /// The validated relative name the user gave.
    pub name: String,
    /// Lowercase hex SHA-256 of the content (the artifact-store key).
    pub digest: String,
    pub size: i64,
    /// The media type checked against the content.
    pub media_type: String,
    pub created_at: i64,
}

const UPLOAD_COLUMNS: &str =
    "id, workspace_id, user_id, name, digest, size, media_type, created_at";

fn upload_from_row(r: &AnyRow) -> Result<UploadRecord> {
    Ok(UploadRecord {
        id: r.try_get("id")?,
        workspace_id: r.try_get("workspace_id")?,
        user_id: r.try_get("user_id")?,
        name: r.try_get("name")?,
        digest: r.try_get("digest")?,
        size: r.try_get("size")?,
        media_type: r.try_get("media_type")?,
        created_at: r.try_get("created_at")?,
    })
}

impl Store {
    /// Records an upload and its audit event in one transaction. An id that already exists
    /// (in any workspace) is [`StoreError::Conflict`] and changes nothing.
    pub async fn create_upload(&self, rec: &UploadRecord, audit: AuditRecord) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO uploads ({UPLOAD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (id) DO NOTHING"
        ))
        .bind(&rec.id)
        .bind(&rec.workspace_id)
        .bind(&rec.user_id)
        .bind(&rec.name)
        .bind(&rec.digest)
        .bind(rec.size)
        .bind(&rec.media_type)
        .bind(rec.created_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            tx.rollback().await?;
            return Err(StoreError::Conflict);
        }
        self.audit_in(&mut tx, &rec.workspace_id, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    /// One upload of `workspace`; another workspace's id is `None`, like a missing one.
    pub async fn get_upload(&self, workspace: &str, id: &str) -> Result<Option<UploadRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(upload_from_row).transpose()
    }

    /// A user's uploads in `workspace`, newest first, at most `limit` (clamped to 1..=500).
    pub async fn list_uploads(
        &self,
        workspace: &str,
        user_id: &str,
        limit: i64,
    ) -> Result<Vec<UploadRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE workspace_id = $1 AND user_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3"
        ))
        .bind(workspace)
        .bind(user_id)
        .bind(limit.clamp(1, 500))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(upload_from_row).collect()
    }
}
