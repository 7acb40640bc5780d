//! Runs as callers see them (RUN-4, RUN-5, API-8): creating a run (with its
//! idempotency key), reading and listing runs, queue positions, cancelling,
//! counts by state, and reading a run's events and artifacts.
//!
//! What an executor writes while it holds a run (claims, leases and every
//! write under a fencing token) lives in `execution.rs`, not here.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::ids::{random_id, sha256_hex};
use crate::store::{AuditRecord, Backend, Result, Store, StoreError, now_ms};

/// Run states (RUN-4).
/// A run as stored: the protocol's [`airlock_protocol::runs::Run`].
pub type RunRecord = airlock_protocol::runs::Run;
pub use airlock_protocol::runs::{Artifact, RunEvent, RunState};

/// Which runs a listing keeps (every field optional; `None` keeps all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunFilter<'a> {
    pub state: Option<RunState>,
    pub worker: Option<&'a str>,
    /// The trigger (`api`, `cli`, `schedule`, …).
    pub trigger: Option<&'a str>,
    /// Created at or after (Unix milliseconds).
    pub since: Option<i64>,
    /// Created before (Unix milliseconds).
    pub until: Option<i64>,
}

pub(crate) const RUN_COLUMNS: &str = "id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, plan_id, created_at, started_at, finished_at, attempt, fencing_token, workload_started, cancel_requested, exit_code, signal, error_code, error_message, containment, egress, outputs";

fn json_col(row: &AnyRow, col: &str) -> Result<Option<serde_json::Value>> {
    let s: Option<String> = row.try_get(col)?;
    Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
}

pub(crate) fn run_from_row(row: &AnyRow) -> Result<RunRecord> {
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

impl Store {
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

    /// Creates a queued run (API-8: an idempotency key with the same
    /// request returns the original; with a different one, a conflict;
    /// concurrent duplicates create exactly one run).
    /// The run an idempotency key already created for `new`'s actor, when
    /// `request_hash` is that request's; another request under the same
    /// key is [`StoreError::IdempotencyConflict`].
    pub(crate) async fn replayed_run(
        &self,
        new: &NewRun,
        key: &str,
        request_hash: &str,
    ) -> Result<RunRecord> {
        let row = sqlx::query(
            "SELECT request_hash, run_id FROM idempotency_keys WHERE workspace_id = $1 AND actor = $2 AND key = $3",
        )
        .bind(&new.workspace_id)
        .bind(&new.actor)
        .bind(key)
        .fetch_one(&self.pool)
        .await?;
        let existing_hash: String = row.try_get("request_hash")?;
        if existing_hash != request_hash {
            return Err(StoreError::IdempotencyConflict);
        }
        let run_id: String = row.try_get("run_id")?;
        self.get_run(&new.workspace_id, &run_id)
            .await?
            .ok_or(StoreError::NotFound)
    }

    pub async fn create_run(&self, new: NewRun) -> Result<Created> {
        let input_text =
            serde_json::to_string(&new.input).map_err(|e| StoreError::Db(e.to_string()))?;
        let input_hash = sha256_hex(input_text.as_bytes());
        let id = random_id("run");
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // Serialised with the workspace's deletion (and its audit appends)
        // first: a run is never queued in a workspace being deleted. In
        // SQLite this takes the write lock at once, so the reads below
        // cannot deadlock on a lock upgrade.
        self.serialise_workspace(&mut tx, &new.workspace_id).await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, plan_id, created_at) \
             SELECT $1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9 \
             WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = $2 AND deleted_at IS NULL)",
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
        .await?
        .rows_affected();
        if inserted == 0 {
            tx.rollback().await?;
            return Err(StoreError::NotFound);
        }
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
                let run = self.replayed_run(&new, key, request_hash).await?;
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
        let filter = RunFilter {
            state,
            ..RunFilter::default()
        };
        self.list_runs_where(workspace, &filter, limit, before)
            .await
    }

    /// Newest first, only the runs `filter` keeps; `before` is a cursor
    /// (the last id of the previous page, under the same filter).
    pub async fn list_runs_where(
        &self,
        workspace: &str,
        filter: &RunFilter<'_>,
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
        let state_filter = filter.state.map(RunState::as_str).unwrap_or("");
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE workspace_id = $1 AND ($2 = '' OR state = $2) \
             AND (created_at < $3 OR (created_at = $3 AND id < $4) OR $4 = '') \
             AND ($6 = '' OR worker_id = $6) AND ($7 = '' OR trigger_source = $7) \
             AND created_at >= $8 AND created_at < $9 \
             ORDER BY created_at DESC, id DESC LIMIT $5"
        ))
        .bind(workspace)
        .bind(state_filter)
        .bind(t)
        .bind(&cid)
        .bind(limit)
        .bind(filter.worker.unwrap_or(""))
        .bind(filter.trigger.unwrap_or(""))
        .bind(filter.since.unwrap_or(i64::MIN))
        .bind(filter.until.unwrap_or(i64::MAX))
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
}
