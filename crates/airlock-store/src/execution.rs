//! What an executor does with a run it holds (DUR-2, OPS-2): claiming
//! (the oldest queued run, or one named run), leases and their expiry, and
//! every write under a fencing token (workload started, events, artifacts,
//! the terminal write), plus the reaper for runs whose lease expired.
//!
//! Fencing is enforced here, in each `WHERE` clause: a write with a stale
//! token changes nothing and returns `StoreError::StaleToken`.

use std::time::Duration;

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::runs::{RUN_COLUMNS, run_from_row};
use crate::store::{AuditRecord, Backend, Result, Store, StoreError, now_ms};
use crate::{Artifact, RunRecord, RunState};

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

impl Store {
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

    /// A run queued again after its workload started (an idempotent run
    /// requeued by the reaper or the drain, an `unknown` run retried)
    /// starts its next attempt with no artifacts: the run's artifacts are
    /// its last attempt's, never a mix of two. The rows go in the requeue's
    /// transaction (its audit event counts them); the blobs stay for gc.
    pub(crate) async fn drop_attempt_artifacts(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
    ) -> Result<u64> {
        Ok(sqlx::query("DELETE FROM artifacts WHERE run_id = $1")
            .bind(run_id)
            .execute(&mut **tx)
            .await?
            .rows_affected())
    }

    /// Records a published artifact under the token. A row of the same name
    /// left by an earlier attempt (killed during publication, then requeued
    /// as idempotent) is replaced: the run's artifacts are its last
    /// attempt's.
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
            "INSERT INTO artifacts (workspace_id, run_id, name, digest, size, media_type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (run_id, name) DO UPDATE SET digest = excluded.digest, size = excluded.size, \
             media_type = excluded.media_type, created_at = excluded.created_at",
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
                    // A run handed back before its workload started has not
                    // used an attempt (DUR-2); a requeued started one has.
                    "UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, \
                     attempt = CASE WHEN workload_started = 0 AND attempt > 0 THEN attempt - 1 ELSE attempt END, \
                     workload_started = 0 WHERE id = $1 AND state = 'running' AND lease_expires_at < $2",
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
            let dropped = if state == RunState::Queued && started {
                self.drop_attempt_artifacts(&mut tx, &id).await?
            } else {
                0
            };
            self.audit_in(
                &mut tx,
                &ws,
                AuditRecord::system("run.reaped", Some(&id))
                    .with_result(state.as_str())
                    .with_metadata(serde_json::json!({
                        "workload_started": started,
                        "attempt": attempt,
                        "artifacts_dropped": dropped,
                    })),
            )
            .await?;
            tx.commit().await?;
            out.push((id, state));
        }
        Ok(out)
    }

    /// The SIGTERM drain's settlement of a run this executor holds under
    /// `token` (DUR-2), the same rules as the reaper's, in one transaction
    /// with its audit event `run.drained`:
    /// - an action of it `dispatched` (approved, not confirmed executed):
    ///   `outcome_unknown`, the run parked for a person, never re-executed;
    /// - the workload not started: handed back, `queued`, the attempt not
    ///   counted;
    /// - started, `idempotent` worker, first attempt: requeued once;
    /// - else `unknown` (`abandoned`), for a person to retry or resolve.
    pub async fn settle_drained(
        &self,
        run_id: &str,
        token: i64,
        idempotent: bool,
    ) -> Result<RunState> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // Take the row (SQLite: the write lock before any read); a stale
        // token matches nothing.
        let row = sqlx::query(
            "UPDATE runs SET lease_expires_at = lease_expires_at WHERE id = $1 AND fencing_token = $2 AND state = 'running' \
             RETURNING workspace_id, workload_started, attempt",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(StoreError::StaleToken);
        };
        let ws: String = row.try_get("workspace_id")?;
        let started = row.try_get::<i64, _>("workload_started")? != 0;
        let attempt: i64 = row.try_get("attempt")?;
        let dispatched: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM actions WHERE run_id = $1 AND state = 'dispatched'",
        )
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await?;
        let mut dropped = 0;
        let (state, outcome_unknown) = if dispatched > 0 {
            sqlx::query(
                "UPDATE runs SET state = 'awaiting_approval', lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
            )
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
            let ids = self
                .dispatched_outcome_unknown_in(&mut tx, &ws, run_id, now)
                .await?;
            (RunState::AwaitingApproval, ids)
        } else if !started || (idempotent && attempt < 2) {
            sqlx::query(
                "UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, \
                 attempt = CASE WHEN workload_started = 0 AND attempt > 0 THEN attempt - 1 ELSE attempt END, \
                 workload_started = 0 WHERE id = $1",
            )
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
            self.notify_queued(&mut tx, run_id).await?;
            if started {
                dropped = self.drop_attempt_artifacts(&mut tx, run_id).await?;
            }
            (RunState::Queued, Vec::new())
        } else {
            sqlx::query(
                "UPDATE runs SET state = 'unknown', finished_at = $2, error_code = $3, error_message = $4, \
                 lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
            )
            .bind(run_id)
            .bind(now)
            .bind(crate::RunErrorCode::Abandoned.as_str())
            .bind("the server stopped (drain grace period over) while the workload ran; its effects are unknown")
            .execute(&mut *tx)
            .await?;
            (RunState::Unknown, Vec::new())
        };
        if state != RunState::AwaitingApproval {
            self.run_event_in(
                &mut tx,
                run_id,
                "status",
                &serde_json::json!({"state": state.as_str(), "drained": true}),
                now,
            )
            .await?;
        }
        self.audit_in(
            &mut tx,
            &ws,
            AuditRecord::system("run.drained", Some(run_id))
                .with_result(state.as_str())
                .with_metadata(serde_json::json!({
                    "workload_started": started,
                    "attempt": attempt,
                    "handed_back": state == RunState::Queued && !started,
                    "outcome_unknown": outcome_unknown,
                    "artifacts_dropped": dropped,
                })),
        )
        .await?;
        tx.commit().await?;
        Ok(state)
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
}
