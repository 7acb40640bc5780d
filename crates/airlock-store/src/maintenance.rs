//! What `airlock validate` and `airlock gc` ask of the database (DUR-6):
//! a read-only connection, the integrity check, the schema version, and
//! every row that names a blob. Nothing here writes.

use std::time::Duration;

use sqlx::Row;
use sqlx::any::AnyPoolOptions;

use crate::store::{Backend, Result, Store, StoreError};

/// A row that names a blob in the artifact store by its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// `artifact` or `upload`.
    pub kind: &'static str,
    /// `run_id/name` for an artifact, the upload's id for an upload.
    pub object: String,
    pub digest: String,
    pub size: i64,
}

impl Store {
    /// Connects without creating, migrating or writing: a SQLite file is
    /// opened with `mode=ro` (a missing file is an error, not a new
    /// database); a PostgreSQL session is made read-only
    /// (`default_transaction_read_only`).
    pub async fn open_read_only(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let (backend, conn_url) = if let Some(path) = url.strip_prefix("sqlite://") {
            let file = path.split('?').next().unwrap_or(path);
            if !std::path::Path::new(file).is_file() {
                return Err(StoreError::Db(format!("no database file at {file}")));
            }
            (Backend::Sqlite, format!("sqlite://{file}?mode=ro"))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_string())
        } else {
            return Err(StoreError::BadUrl);
        };
        let read_only = backend == Backend::Postgres;
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    use sqlx::Executor;
                    if read_only {
                        conn.execute("SET default_transaction_read_only = on")
                            .await?;
                    } else {
                        conn.execute("PRAGMA query_only=ON").await?;
                    }
                    Ok(())
                })
            })
            .connect(&conn_url)
            .await?;
        Ok(Self::from_parts(pool, backend, url))
    }

    /// The database's own integrity check: SQLite's `PRAGMA quick_check`
    /// (its problems, none when it answers `ok`); on PostgreSQL a round
    /// trip (the server keeps its own pages).
    pub async fn integrity_problems(&self) -> Result<Vec<String>> {
        match self.backend {
            Backend::Sqlite => {
                let rows = sqlx::query("PRAGMA quick_check")
                    .fetch_all(&self.pool)
                    .await?;
                let mut out = Vec::new();
                for r in rows {
                    let line: String = r.try_get(0)?;
                    if line != "ok" {
                        out.push(line);
                    }
                }
                Ok(out)
            }
            Backend::Postgres => {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(Vec::new())
            }
        }
    }

    /// The newest applied schema version (0: none).
    pub async fn schema_version(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar::<_, i64>("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Every artifact and upload row, with the digest and size it names.
    pub async fn blob_refs(&self) -> Result<Vec<BlobRef>> {
        let mut out = Vec::new();
        let rows =
            sqlx::query("SELECT run_id, name, digest, size FROM artifacts ORDER BY run_id, name")
                .fetch_all(&self.pool)
                .await?;
        for r in rows {
            let run: String = r.try_get("run_id")?;
            let name: String = r.try_get("name")?;
            out.push(BlobRef {
                kind: "artifact",
                object: format!("{run}/{name}"),
                digest: r.try_get("digest")?,
                size: r.try_get("size")?,
            });
        }
        let rows = sqlx::query("SELECT id, digest, size FROM uploads ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        for r in rows {
            out.push(BlobRef {
                kind: "upload",
                object: r.try_get("id")?,
                digest: r.try_get("digest")?,
                size: r.try_get("size")?,
            });
        }
        Ok(out)
    }

    /// Whether any artifact or upload row names `digest` (gc asks again
    /// right before it moves a blob).
    pub async fn digest_referenced(&self, digest: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM artifacts WHERE digest = $1) \
             + (SELECT COUNT(*) FROM uploads WHERE digest = $1)",
        )
        .bind(digest)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }
}
