//! The `Store` type: opening a database (SQLite or PostgreSQL), its
//! migrations, readiness and run notifications, the store's error type,
//! and the one helper every audited write goes through (`audit_in`: the
//! caller's state change and its audit event commit in one transaction).
//!
//! The queries of each resource live in their own file as further
//! `impl Store` blocks (`runs.rs`, `execution.rs`, `plans.rs`, `audit.rs`,
//! `secrets.rs`, `identity.rs`, …); this file holds no resource's queries.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

/// The workspace every row belongs to until identity lands.
pub const DEFAULT_WORKSPACE: &str = "ws_default";

/// Which database is behind the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(String),
    #[error("unsupported database url (use sqlite:// or postgres://)")]
    BadUrl,
    #[error("the run was claimed by someone else (stale fencing token)")]
    StaleToken,
    #[error("idempotency key reused with a different request")]
    IdempotencyConflict,
    #[error("not found")]
    NotFound,
    #[error("plan token refused: {0}")]
    Plan(&'static str),
    #[error("audit: {0}")]
    Audit(String),
    #[error("already exists")]
    Conflict,
    #[error("a workspace keeps at least one owner")]
    LastOwner,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// An audit record as the caller describes it; the store assigns the
/// sequence number, time and chain hashes.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub event_type: String,
    pub actor: airlock_audit::chain::Actor,
    pub target: Option<String>,
    pub run_id: Option<String>,
    pub decision: Option<String>,
    pub result: Option<String>,
    pub metadata: serde_json::Value,
    /// AUD-1: the agent action an event is about.
    pub action_id: Option<String>,
    /// AUD-1: the payload hash a decision or approval is bound to.
    pub payload_hash: Option<String>,
}

impl AuditRecord {
    pub fn system(event_type: &str, run_id: Option<&str>) -> Self {
        Self {
            event_type: event_type.to_string(),
            actor: airlock_audit::chain::Actor::System,
            target: None,
            run_id: run_id.map(str::to_string),
            decision: None,
            result: None,
            metadata: serde_json::json!({}),
            action_id: None,
            payload_hash: None,
        }
    }
    pub fn with_result(mut self, result: &str) -> Self {
        self.result = Some(result.to_string());
        self
    }
    pub fn with_metadata(mut self, m: serde_json::Value) -> Self {
        self.metadata = m;
        self
    }
    pub fn with_actor(mut self, actor: airlock_audit::chain::Actor) -> Self {
        self.actor = actor;
        self
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `ms` since the epoch as RFC 3339 UTC with milliseconds (what audit events carry).
pub fn rfc3339(ms: i64) -> String {
    // Civil-from-days (Howard Hinnant), UTC.
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    url: String,
}

// Migrations whose SQL is the same on both backends live once, in
// `migrations/shared/`; only the first differs by dialect (its triggers).
const SQLITE_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/sqlite/0001_init.sql")),
    (2, include_str!("../migrations/shared/0002_secrets.sql")),
    (3, include_str!("../migrations/shared/0003_identity.sql")),
    (4, include_str!("../migrations/shared/0004_api.sql")),
    (5, include_str!("../migrations/shared/0005_approvals.sql")),
    (6, include_str!("../migrations/shared/0006_agents.sql")),
    (7, include_str!("../migrations/shared/0007_retention.sql")),
    (
        8,
        include_str!("../migrations/shared/0008_login_throttles.sql"),
    ),
    (
        9,
        include_str!("../migrations/shared/0009_workspace_purge.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/postgres/0001_init.sql")),
    (2, include_str!("../migrations/shared/0002_secrets.sql")),
    (3, include_str!("../migrations/shared/0003_identity.sql")),
    (4, include_str!("../migrations/shared/0004_api.sql")),
    (5, include_str!("../migrations/shared/0005_approvals.sql")),
    (6, include_str!("../migrations/shared/0006_agents.sql")),
    (7, include_str!("../migrations/shared/0007_retention.sql")),
    (
        8,
        include_str!("../migrations/shared/0008_login_throttles.sql"),
    ),
    (
        9,
        include_str!("../migrations/shared/0009_workspace_purge.sql"),
    ),
];

/// The grants of the runtime role in the two-role PostgreSQL setup (AUD-3),
/// as the owner runs them: `sql/postgres_runtime_role.sql` for the role
/// `role`. `None` unless `role` is a plain lowercase identifier (it is
/// written into SQL).
pub fn postgres_runtime_grants(role: &str) -> Option<String> {
    let plain = (1..=63).contains(&role.len())
        && role.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && role
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    plain.then(|| include_str!("../sql/postgres_runtime_role.sql").replace("airlock_runtime", role))
}

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 9;

/// What [`Store::inspect`] found, without writing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseState {
    /// A SQLite file that does not exist yet (created on first start).
    Absent,
    /// Reachable; the newest schema version applied (0: none yet).
    Reachable { schema_version: i64 },
}

impl Store {
    /// Connects to `url` without creating, migrating or writing (a SQLite
    /// file is opened read-only) and reads the newest applied schema
    /// version: what `airlock doctor` reports.
    pub async fn inspect(url: &str) -> Result<DatabaseState> {
        sqlx::any::install_default_drivers();
        let url = if let Some(path) = url.strip_prefix("sqlite://") {
            let file = path.split('?').next().unwrap_or(path);
            if !std::path::Path::new(file).exists() {
                return Ok(DatabaseState::Absent);
            }
            format!("sqlite://{file}?mode=ro")
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            url.to_string()
        } else {
            return Err(StoreError::BadUrl);
        };
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&url)
            .await?;
        // No migrations table yet (a fresh PostgreSQL database) reads as 0.
        let version =
            sqlx::query_scalar::<_, i64>("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
        pool.close().await;
        Ok(DatabaseState::Reachable {
            schema_version: version,
        })
    }

    /// Opens (creating when needed) and migrates. `sqlite://PATH` or
    /// `postgres://…`.
    pub async fn open(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::BadUrl);
        };
        let pool = match backend {
            Backend::Sqlite => {
                crate::sqlite_files::make_private(url).map_err(|e| {
                    StoreError::Db(format!("cannot make the database private: {e}"))
                })?;
                let url = if url.contains('?') {
                    url.to_string()
                } else {
                    format!("{url}?mode=rwc")
                };
                AnyPoolOptions::new()
                    .max_connections(8)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            use sqlx::Executor;
                            for pragma in [
                                "PRAGMA journal_mode=WAL",
                                "PRAGMA synchronous=NORMAL",
                                "PRAGMA busy_timeout=10000",
                                "PRAGMA foreign_keys=ON",
                            ] {
                                conn.execute(pragma).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
            Backend::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(16)
                    // A database that is gone should say so promptly.
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(url)
                    .await?
            }
        };
        let store = Self {
            pool,
            backend,
            url: url.to_string(),
        };
        store.migrate().await?;
        store.ensure_workspace(DEFAULT_WORKSPACE, "default").await?;
        Ok(store)
    }

    /// A store over a pool someone else opened (no migrations): the
    /// read-only connection of `maintenance`.
    pub(crate) fn from_parts(pool: AnyPool, backend: Backend, url: &str) -> Self {
        Self {
            pool,
            backend,
            url: url.to_string(),
        }
    }

    /// The URL this store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// On PostgreSQL, a listener that receives a notification whenever a run
    /// is queued (OPS-2); `None` on SQLite, where executors poll.
    pub async fn subscribe(&self) -> Result<Option<sqlx::postgres::PgListener>> {
        if self.backend != Backend::Postgres {
            return Ok(None);
        }
        let mut l = sqlx::postgres::PgListener::connect(&self.url).await?;
        l.listen("airlock_service").await?;
        Ok(Some(l))
    }

    async fn migrate(&self) -> Result<()> {
        // A current schema needs nothing, not even the `CREATE TABLE IF NOT
        // EXISTS` below: a runtime role without CREATE on the schema (the
        // two-role PostgreSQL setup, AUD-3) opens a migrated database.
        let current =
            sqlx::query_scalar::<_, i64>("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
                .fetch_one(&self.pool)
                .await
                .ok();
        if current.is_some_and(|v| v >= SCHEMA_VERSION) {
            return Ok(());
        }
        sqlx::raw_sql("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
            .execute(&self.pool)
            .await?;
        let migrations = match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        for (version, sql) in migrations {
            let mut tx = self.pool.begin().await?;
            if self.backend == Backend::Postgres {
                // Two processes starting at once: one migrates, one waits.
                sqlx::query("SELECT pg_advisory_xact_lock(7231001)")
                    .execute(&mut *tx)
                    .await?;
            }
            let done: Option<i64> =
                sqlx::query_scalar("SELECT version FROM schema_migrations WHERE version = $1")
                    .bind(*version)
                    .fetch_optional(&mut *tx)
                    .await?;
            if done.is_none() {
                sqlx::raw_sql(sql).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
                    .bind(*version)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// Whether the database answers and its schema is current (`/readyz`).
    pub async fn ready(&self) -> Result<bool> {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations")
            .fetch_one(&self.pool)
            .await?;
        Ok(v == Some(SCHEMA_VERSION))
    }

    pub async fn ensure_workspace(&self, id: &str, name: &str) -> Result<()> {
        sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING")
            .bind(id)
            .bind(name)
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Raw pool access for tests that attack the database directly.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    // ------------------------------------------------------------ audit

    /// Appends an audit event inside `tx` (the caller's state change and
    /// this event commit together). Per-workspace appends are serialised:
    /// SQLite by its single writer, PostgreSQL by an advisory lock.
    pub(crate) async fn audit_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        rec: AuditRecord,
    ) -> Result<()> {
        self.serialise_workspace(tx, workspace).await?;
        let last: Option<String> = sqlx::query_scalar(
            "SELECT line FROM audit_events WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 1",
        )
        .bind(workspace)
        .fetch_optional(&mut **tx)
        .await?;
        let prev = match last {
            Some(l) => Some(
                airlock_audit::from_json_line(&l).map_err(|e| StoreError::Audit(e.to_string()))?,
            ),
            None => None,
        };
        let seq = prev.as_ref().map_or(1, |p| p.event.seq + 1);
        let event = airlock_audit::chain::AuditEvent {
            workspace_id: workspace.to_string(),
            seq,
            at: rfc3339(now_ms()),
            actor: rec.actor,
            event_type: rec.event_type,
            target: rec.target,
            request_id: None,
            run_id: rec.run_id,
            action_id: rec.action_id,
            decision: rec.decision,
            payload_hash: rec.payload_hash,
            result: rec.result,
            metadata: rec.metadata,
        };
        let chained = airlock_audit::chain::append(prev.as_ref(), event)
            .map_err(|e| StoreError::Audit(e.to_string()))?;
        let line =
            airlock_audit::to_json_line(&chained).map_err(|e| StoreError::Audit(e.to_string()))?;
        sqlx::query(
            "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ($1, $2, $3, $4)",
        )
        .bind(workspace)
        .bind(i64::try_from(seq).unwrap_or(i64::MAX))
        .bind(line)
        .bind(crate::ids::hex(&chained.hash))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Serialises `tx` with every other transaction of `workspace` that
    /// calls this (audit appends, run creation, workspace deletion), until
    /// it ends: PostgreSQL by a transaction-scoped advisory lock (taken
    /// again by the same transaction, it is held once more), SQLite by
    /// taking its single write lock now.
    pub(crate) async fn serialise_workspace(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
    ) -> Result<()> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(workspace)
                .execute(&mut **tx)
                .await?;
        } else {
            // Take SQLite's write lock before reading the chain head: a
            // deferred transaction that reads first and then writes fails
            // with SQLITE_BUSY (snapshot) when another writer committed in
            // between, and the busy timeout does not retry that. A write
            // statement that matches no row still takes the lock.
            sqlx::query("UPDATE workspaces SET name = name WHERE 1 = 0")
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(super::rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
