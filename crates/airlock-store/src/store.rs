use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::ids::{random_id, sha256_hex};

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

/// Run states (RUN-4).
/// A run as stored: the protocol's [`airlock_protocol::runs::Run`].
pub type RunRecord = airlock_protocol::runs::Run;
pub use airlock_protocol::runs::{Artifact, RunEvent, RunState};

const RUN_COLUMNS: &str = "id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, plan_id, created_at, started_at, finished_at, attempt, fencing_token, workload_started, cancel_requested, exit_code, signal, error_code, error_message, containment, egress, outputs";

fn json_col(row: &AnyRow, col: &str) -> Result<Option<serde_json::Value>> {
    let s: Option<String> = row.try_get(col)?;
    Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
}

fn run_from_row(row: &AnyRow) -> Result<RunRecord> {
    let state: String = row.try_get("state")?;
    Ok(RunRecord {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        worker_id: row.try_get("worker_id")?,
        state: RunState::parse(&state)
            .ok_or_else(|| StoreError::Db(format!("unknown state {state:?}")))?,
        input: json_col(row, "input")?.unwrap_or(serde_json::Value::Null),
        input_hash: row.try_get("input_hash")?,
        trigger: row.try_get("trigger_source")?,
        actor: row.try_get("actor")?,
        plan_id: row.try_get("plan_id")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        attempt: row.try_get("attempt")?,
        fencing_token: row.try_get("fencing_token")?,
        workload_started: row.try_get::<i64, _>("workload_started")? != 0,
        cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
        exit_code: row.try_get("exit_code")?,
        signal: row.try_get("signal")?,
        error_code: row.try_get("error_code")?,
        error_message: row.try_get("error_message")?,
        containment: json_col(row, "containment")?,
        egress: json_col(row, "egress")?,
        outputs: json_col(row, "outputs")?,
    })
}

/// What a caller asks to create.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub workspace_id: String,
    pub worker_id: String,
    pub input: serde_json::Value,
    pub trigger: String,
    pub actor: String,
    pub plan_id: Option<String>,
    /// `(key, request hash)` for API-8 idempotency.
    pub idempotency: Option<(String, String)>,
}

/// The outcome of [`Store::create_run`].
#[derive(Debug, Clone)]
pub struct Created {
    pub run: RunRecord,
    /// False when an idempotency key returned an existing run.
    pub created: bool,
}

/// A claimed run: the executor's writes must carry `token`.
#[derive(Debug, Clone)]
pub struct Claim {
    pub run: RunRecord,
    pub token: i64,
}

/// The terminal write of an executor.
#[derive(Debug, Clone, Default)]
pub struct Finish {
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub error_code: Option<crate::RunErrorCode>,
    pub error_message: Option<String>,
    pub containment: Option<serde_json::Value>,
    pub egress: Option<serde_json::Value>,
    pub outputs: Option<serde_json::Value>,
}

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

/// A plan as stored (DUR-3): the caller's serialised plan and its status.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPlan {
    pub id: String,
    pub workspace_id: String,
    pub worker_id: String,
    pub plan: serde_json::Value,
    pub expires_at: i64,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn rfc3339(ms: i64) -> String {
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
];
const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/postgres/0001_init.sql")),
    (2, include_str!("../migrations/shared/0002_secrets.sql")),
    (3, include_str!("../migrations/shared/0003_identity.sql")),
    (4, include_str!("../migrations/shared/0004_api.sql")),
    (5, include_str!("../migrations/shared/0005_approvals.sql")),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 5;

impl Store {
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

    /// Whether `key` already names a run of this caller in this workspace
    /// (API-8), so a retry can be answered without spending quota.
    pub async fn idempotency_key_used(
        &self,
        workspace: &str,
        actor: &str,
        key: &str,
    ) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM idempotency_keys WHERE workspace_id = $1 AND actor = $2 AND key = $3",
        )
        .bind(workspace)
        .bind(actor)
        .bind(key)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
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

    /// Workspaces that have audit events.
    pub async fn audit_workspaces(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT workspace_id FROM audit_events ORDER BY workspace_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    // ------------------------------------------------------------ runs

    /// Creates a queued run (API-8: an idempotency key with the same
    /// request returns the original; with a different one, a conflict;
    /// concurrent duplicates create exactly one run).
    pub async fn create_run(&self, new: NewRun) -> Result<Created> {
        let input_text =
            serde_json::to_string(&new.input).map_err(|e| StoreError::Db(e.to_string()))?;
        let input_hash = sha256_hex(input_text.as_bytes());
        let id = random_id("run");
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // Write first: in SQLite this takes the write lock at once, so the
        // reads below cannot deadlock on a lock upgrade.
        sqlx::query(
            "INSERT INTO runs (id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, plan_id, created_at) \
             VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9)",
        )
        .bind(&id)
        .bind(&new.workspace_id)
        .bind(&new.worker_id)
        .bind(&input_text)
        .bind(&input_hash)
        .bind(&new.trigger)
        .bind(&new.actor)
        .bind(&new.plan_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some((key, request_hash)) = &new.idempotency {
            let inserted = sqlx::query(
                "INSERT INTO idempotency_keys (workspace_id, actor, key, request_hash, run_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (workspace_id, actor, key) DO NOTHING",
            )
            .bind(&new.workspace_id)
            .bind(&new.actor)
            .bind(key)
            .bind(request_hash)
            .bind(&id)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                tx.rollback().await?;
                let row = sqlx::query(
                    "SELECT request_hash, run_id FROM idempotency_keys WHERE workspace_id = $1 AND actor = $2 AND key = $3",
                )
                .bind(&new.workspace_id)
                .bind(&new.actor)
                .bind(key)
                .fetch_one(&self.pool)
                .await?;
                let existing_hash: String = row.try_get("request_hash")?;
                if &existing_hash != request_hash {
                    return Err(StoreError::IdempotencyConflict);
                }
                let run_id: String = row.try_get("run_id")?;
                let run = self
                    .get_run(&new.workspace_id, &run_id)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                return Ok(Created {
                    run,
                    created: false,
                });
            }
        }
        if self.backend == Backend::Postgres {
            // OPS-2: wake idle executors on every node (delivered at commit).
            sqlx::query("SELECT pg_notify('airlock_service', $1)")
                .bind(&id)
                .execute(&mut *tx)
                .await?;
        }
        self.audit_in(
            &mut tx,
            &new.workspace_id,
            AuditRecord::system("run.created", Some(&id))
                .with_actor(airlock_audit::chain::Actor::Human(new.actor.clone()))
                .with_metadata(serde_json::json!({"worker": new.worker_id, "trigger": new.trigger, "input_hash": input_hash})),
        )
        .await?;
        tx.commit().await?;
        let run = self
            .get_run(&new.workspace_id, &id)
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(Created { run, created: true })
    }

    pub async fn get_run(&self, workspace: &str, id: &str) -> Result<Option<RunRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// Newest first; `before` is a cursor (the last id of the previous page).
    pub async fn list_runs(
        &self,
        workspace: &str,
        state: Option<RunState>,
        limit: i64,
        before: Option<&str>,
    ) -> Result<Vec<RunRecord>> {
        let limit = limit.clamp(1, 500);
        let cursor = match before {
            Some(id) => sqlx::query_scalar::<_, i64>(
                "SELECT created_at FROM runs WHERE workspace_id = $1 AND id = $2",
            )
            .bind(workspace)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .map(|t| (t, id.to_string())),
            None => None,
        };
        let (t, cid) = cursor.unwrap_or((i64::MAX, String::new()));
        let state_filter = state.map(RunState::as_str).unwrap_or("");
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE workspace_id = $1 AND ($2 = '' OR state = $2) \
             AND (created_at < $3 OR (created_at = $3 AND id < $4) OR $4 = '') \
             ORDER BY created_at DESC, id DESC LIMIT $5"
        ))
        .bind(workspace)
        .bind(state_filter)
        .bind(t)
        .bind(&cid)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// 1-based position in the queue, for queued runs.
    pub async fn queue_position(&self, workspace: &str, id: &str) -> Result<Option<i64>> {
        let Some(run) = self.get_run(workspace, id).await? else {
            return Ok(None);
        };
        if run.state != RunState::Queued {
            return Ok(None);
        }
        let ahead: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE state = 'queued' AND cancel_requested = 0 AND (created_at < $1 OR (created_at = $1 AND id < $2))",
        )
        .bind(run.created_at)
        .bind(&run.id)
        .fetch_one(&self.pool)
        .await?;
        Ok(Some(ahead + 1))
    }

    /// Claims the oldest queued run not in `exclude_workers` (workers at
    /// their concurrency cap), with a lease and a fresh fencing token.
    pub async fn claim_next(
        &self,
        owner: &str,
        lease: Duration,
        exclude_workers: &[String],
    ) -> Result<Option<Claim>> {
        let now = now_ms();
        let expires = now + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let excluded = serde_json::to_string(exclude_workers).unwrap_or_else(|_| "[]".into());
        let lock = match self.backend {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let not_excluded = match self.backend {
            Backend::Postgres => {
                "NOT (worker_id = ANY (SELECT json_array_elements_text($4::json)))"
            }
            Backend::Sqlite => "worker_id NOT IN (SELECT value FROM json_each($4))",
        };
        let sql = format!(
            "UPDATE runs SET state = 'running', lease_owner = $1, lease_expires_at = $2, \
             fencing_token = fencing_token + 1, attempt = attempt + 1, started_at = COALESCE(started_at, $3) \
             WHERE id = (SELECT id FROM runs WHERE state = 'queued' AND cancel_requested = 0 AND {not_excluded} \
                         ORDER BY created_at, id LIMIT 1 {lock}) \
             AND state = 'queued' RETURNING {RUN_COLUMNS}"
        );
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&sql)
            .bind(owner)
            .bind(expires)
            .bind(now)
            .bind(&excluded)
            .fetch_optional(&mut *tx)
            .await?;
        self.finish_claim(tx, row, owner).await
    }

    /// Completes a claim inside its transaction: the audit event commits
    /// with the state change, and the new fencing token is returned.
    async fn finish_claim(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        row: Option<AnyRow>,
        owner: &str,
    ) -> Result<Option<Claim>> {
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(None);
        };
        let run = run_from_row(&row)?;
        self.audit_in(
            &mut tx,
            &run.workspace_id,
            AuditRecord::system("run.claimed", Some(&run.id))
                .with_metadata(serde_json::json!({"owner": owner, "token": run.fencing_token, "attempt": run.attempt})),
        )
        .await?;
        tx.commit().await?;
        let token = run.fencing_token;
        Ok(Some(Claim { run, token }))
    }

    /// Claims one specific queued run (the CLI's `airlock run` executes
    /// exactly the run it created, through the same pipeline).
    pub async fn claim_run(
        &self,
        owner: &str,
        lease: Duration,
        run_id: &str,
    ) -> Result<Option<Claim>> {
        let now = now_ms();
        let expires = now + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE runs SET state = 'running', lease_owner = $1, lease_expires_at = $2, \
             fencing_token = fencing_token + 1, attempt = attempt + 1, started_at = COALESCE(started_at, $3) \
             WHERE id = $4 AND state = 'queued' AND cancel_requested = 0 RETURNING {RUN_COLUMNS}"
        ))
        .bind(owner)
        .bind(expires)
        .bind(now)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        self.finish_claim(tx, row, owner).await
    }

    /// Lease owners of running runs whose owner starts with `owner_prefix`.
    pub async fn lease_owners(&self, owner_prefix: &str) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT id, lease_owner FROM runs WHERE state = 'running' AND substr(lease_owner, 1, length($1)) = $1",
        )
        .bind(owner_prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("lease_owner")?)))
            .collect()
    }

    /// Expires the lease of one run held by `owner` (its holder is known dead).
    pub async fn expire_lease(&self, run_id: &str, owner: &str) -> Result<()> {
        sqlx::query("UPDATE runs SET lease_expires_at = 0 WHERE id = $1 AND state = 'running' AND lease_owner = $2")
            .bind(run_id)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn stale(affected: u64) -> Result<()> {
        if affected == 0 {
            Err(StoreError::StaleToken)
        } else {
            Ok(())
        }
    }

    /// Extends the lease; refused for a stale token.
    pub async fn renew_lease(&self, run_id: &str, token: i64, lease: Duration) -> Result<()> {
        let expires = now_ms() + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let n = sqlx::query("UPDATE runs SET lease_expires_at = $1 WHERE id = $2 AND fencing_token = $3 AND state = 'running'")
            .bind(expires)
            .bind(run_id)
            .bind(token)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Self::stale(n)
    }

    /// Records that the workload is about to start: from here on, a crash
    /// may have had effects (DUR-2).
    pub async fn mark_workload_started(&self, run_id: &str, token: i64) -> Result<()> {
        let n = sqlx::query("UPDATE runs SET workload_started = 1 WHERE id = $1 AND fencing_token = $2 AND state = 'running'")
            .bind(run_id)
            .bind(token)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Self::stale(n)
    }

    /// Appends a run event (logs, status, artifacts …) under the token.
    pub async fn append_event(
        &self,
        run_id: &str,
        token: i64,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "UPDATE runs SET next_event_seq = next_event_seq + 1 WHERE id = $1 AND fencing_token = $2 AND state = 'running' \
             RETURNING next_event_seq - 1 AS seq, workspace_id",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(StoreError::StaleToken);
        };
        let seq: i64 = row.try_get("seq")?;
        let ws: String = row.try_get("workspace_id")?;
        sqlx::query("INSERT INTO run_events (workspace_id, run_id, seq, at, kind, data) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(&ws)
            .bind(run_id)
            .bind(seq)
            .bind(now_ms())
            .bind(kind)
            .bind(data.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Events after `after_seq`, oldest first.
    pub async fn events(
        &self,
        workspace: &str,
        run_id: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<RunEvent>> {
        let rows = sqlx::query(
            "SELECT seq, at, kind, data FROM run_events WHERE workspace_id = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(workspace)
        .bind(run_id)
        .bind(after_seq)
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let data: String = r.try_get("data")?;
                Ok(RunEvent {
                    seq: r.try_get("seq")?,
                    at: r.try_get("at")?,
                    kind: r.try_get("kind")?,
                    data: serde_json::from_str(&data).unwrap_or(serde_json::Value::Null),
                })
            })
            .collect()
    }

    /// Records a published artifact under the token.
    pub async fn add_artifact(&self, run_id: &str, token: i64, a: &Artifact) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let ws: Option<String> = sqlx::query_scalar(
            "UPDATE runs SET next_event_seq = next_event_seq WHERE id = $1 AND fencing_token = $2 AND state = 'running' RETURNING workspace_id",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(ws) = ws else {
            tx.rollback().await?;
            return Err(StoreError::StaleToken);
        };
        sqlx::query(
            "INSERT INTO artifacts (workspace_id, run_id, name, digest, size, media_type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&ws)
        .bind(run_id)
        .bind(&a.name)
        .bind(&a.digest)
        .bind(a.size)
        .bind(&a.media_type)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn artifacts(&self, workspace: &str, run_id: &str) -> Result<Vec<Artifact>> {
        let rows = sqlx::query("SELECT name, digest, size, media_type FROM artifacts WHERE workspace_id = $1 AND run_id = $2 ORDER BY name")
            .bind(workspace)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Artifact {
                    name: r.try_get("name")?,
                    digest: r.try_get("digest")?,
                    size: r.try_get("size")?,
                    media_type: r.try_get("media_type")?,
                })
            })
            .collect()
    }

    /// The executor's terminal write, with its audit event, under the token.
    pub async fn finish_run(
        &self,
        run_id: &str,
        token: i64,
        state: RunState,
        f: &Finish,
    ) -> Result<()> {
        let js = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string());
        let mut tx = self.pool.begin().await?;
        let ws: Option<String> = sqlx::query_scalar(
            "UPDATE runs SET state = $1, finished_at = $2, exit_code = $3, signal = $4, error_code = $5, error_message = $6, \
             containment = $7, egress = $8, outputs = $9, lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $10 AND fencing_token = $11 AND state = 'running' RETURNING workspace_id",
        )
        .bind(state.as_str())
        .bind(now_ms())
        .bind(f.exit_code)
        .bind(f.signal)
        .bind(f.error_code.map(crate::RunErrorCode::as_str))
        .bind(&f.error_message)
        .bind(js(&f.containment))
        .bind(js(&f.egress))
        .bind(js(&f.outputs))
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(ws) = ws else {
            tx.rollback().await?;
            return Err(StoreError::StaleToken);
        };
        self.audit_in(
            &mut tx,
            &ws,
            AuditRecord::system("run.finished", Some(run_id))
                .with_result(state.as_str())
                .with_metadata(
                    serde_json::json!({"error_code": f.error_code.map(crate::RunErrorCode::as_str), "exit_code": f.exit_code}),
                ),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// RUN-5: idempotent cancel. A queued run becomes `cancelled` at once
    /// and never starts; a running one is flagged (its executor kills it and
    /// writes `cancelled`); a terminal run is unchanged. Returns the state
    /// after the call.
    pub async fn cancel_run(&self, workspace: &str, run_id: &str, actor: &str) -> Result<RunState> {
        let mut tx = self.pool.begin().await?;
        let queued = sqlx::query(
            "UPDATE runs SET state = 'cancelled', cancel_requested = 1, finished_at = $1, error_code = $4 \
             WHERE workspace_id = $2 AND id = $3 AND state = 'queued'",
        )
        .bind(now_ms())
        .bind(workspace)
        .bind(run_id)
        .bind(crate::RunErrorCode::Cancelled.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let running = if queued == 0 {
            sqlx::query("UPDATE runs SET cancel_requested = 1 WHERE workspace_id = $1 AND id = $2 AND state = 'running' AND cancel_requested = 0")
                .bind(workspace)
                .bind(run_id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        } else {
            0
        };
        if queued + running > 0 {
            self.audit_in(
                &mut tx,
                workspace,
                AuditRecord::system("run.cancel_requested", Some(run_id))
                    .with_actor(airlock_audit::chain::Actor::Human(actor.to_string()))
                    .with_result(if queued > 0 {
                        "cancelled"
                    } else {
                        "cancelling"
                    }),
            )
            .await?;
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        let run = self
            .get_run(workspace, run_id)
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(run.state)
    }

    /// Whether a cancel was requested for a running run.
    pub async fn cancel_requested(&self, run_id: &str) -> Result<bool> {
        let v: Option<i64> = sqlx::query_scalar("SELECT cancel_requested FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(v.unwrap_or(0) != 0)
    }

    /// DUR-2 reaper: runs whose lease expired. A run whose workload had not
    /// started is requeued; one that may have had effects is requeued once
    /// if `idempotent(worker)` says so, else it becomes `unknown`.
    pub async fn reap_expired(
        &self,
        idempotent: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Vec<(String, RunState)>> {
        let now = now_ms();
        let rows = sqlx::query("SELECT id, workspace_id, worker_id, workload_started, attempt FROM runs WHERE state = 'running' AND lease_expires_at < $1")
            .bind(now)
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::new();
        for r in rows {
            let id: String = r.try_get("id")?;
            let ws: String = r.try_get("workspace_id")?;
            let worker: String = r.try_get("worker_id")?;
            let started = r.try_get::<i64, _>("workload_started")? != 0;
            let attempt: i64 = r.try_get("attempt")?;
            let (state, sql) = if !started || (idempotent(&worker) && attempt < 2) {
                (
                    RunState::Queued,
                    "UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, workload_started = 0 WHERE id = $1 AND state = 'running' AND lease_expires_at < $2",
                )
            } else {
                (
                    RunState::Unknown,
                    "UPDATE runs SET state = 'unknown', finished_at = $2, error_code = $3, lease_owner = NULL WHERE id = $1 AND state = 'running' AND lease_expires_at < $2",
                )
            };
            let mut tx = self.pool.begin().await?;
            let mut query = sqlx::query(sql).bind(&id).bind(now);
            if state == RunState::Unknown {
                query = query.bind(crate::RunErrorCode::Abandoned.as_str());
            }
            let n = query.execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                tx.rollback().await?;
                continue;
            }
            self.audit_in(
                &mut tx,
                &ws,
                AuditRecord::system("run.reaped", Some(&id))
                    .with_result(state.as_str())
                    .with_metadata(
                        serde_json::json!({"workload_started": started, "attempt": attempt}),
                    ),
            )
            .await?;
            tx.commit().await?;
            out.push((id, state));
        }
        Ok(out)
    }

    /// Counts of runs by state (for metrics and the queue view).
    pub async fn count_by_state(&self) -> Result<Vec<(String, i64)>> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM runs GROUP BY state ORDER BY state")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("state")?, r.try_get("n")?)))
            .collect()
    }

    /// Running runs per worker (for per-worker caps).
    pub async fn running_per_worker(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT worker_id, COUNT(*) AS n FROM runs WHERE state = 'running' GROUP BY worker_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("worker_id")?, r.try_get("n")?)))
            .collect()
    }

    // ------------------------------------------------------------ plans

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

    // ------------------------------------------------------------ vault records

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

    /// Raw pool access for tests that attack the database directly.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
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
