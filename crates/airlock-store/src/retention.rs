//! Retention per workspace (DUR-7): the settings, and removing what they
//! let go of. Rows go; the bytes of artifacts and uploads no row names any
//! more are `gc`'s (with its trash and recovery window), so a blob another
//! run or upload still names is never touched here.
//!
//! What each setting removes, for material older than its number of days:
//! - `runs_days`: runs that ended (`succeeded`, `failed`, `timed_out`,
//!   `cancelled`, `blocked`; never `unknown`, which waits for a person) more
//!   than that long ago, with everything derived from them: events,
//!   artifact records, the agent transcript, actions, approvals,
//!   idempotency keys and plans. The audit chain keeps its events.
//! - `logs_days`: the `log` events of such runs (the run stays).
//! - `artifacts_days`: the artifact records of such runs.
//! - `uploads_days`: uploads made that long ago, unless the input of a run
//!   that has not ended names their digest.
//! - `fires_days`: schedule fires made that long ago, except each
//!   schedule's newest (the scheduler's watermark).
//!
//! Webhook replay records are kept one day whatever the settings (they are
//! the replay protection; `webhooks.rs`).

use sqlx::Row;

use crate::store::{AuditRecord, Result, Store, now_ms};

/// A workspace's retention, in days per kind of material (`None`: kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionSettings {
    pub runs_days: Option<i64>,
    pub logs_days: Option<i64>,
    pub artifacts_days: Option<i64>,
    pub uploads_days: Option<i64>,
    pub fires_days: Option<i64>,
}

impl RetentionSettings {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What one pass removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionRemoved {
    pub runs: u64,
    pub log_events: u64,
    pub artifacts: u64,
    pub uploads: u64,
    pub fires: u64,
}

impl RetentionRemoved {
    pub fn total(&self) -> u64 {
        self.runs + self.log_events + self.artifacts + self.uploads + self.fires
    }
}

/// Ended states whose runs retention may remove.
const ENDED: &str = "('succeeded', 'failed', 'timed_out', 'cancelled', 'blocked')";

/// Runs removed per transaction: a long backlog goes in short steps.
pub(crate) const RUNS_PER_STEP: i64 = 200;

const DAY_MS: i64 = 86_400_000;

fn cutoff(now: i64, days: i64) -> i64 {
    now.saturating_sub(days.saturating_mul(DAY_MS))
}

/// The ids of up to `RUNS_PER_STEP` expired runs ($1 workspace, $2 cutoff).
fn expired_runs() -> String {
    format!(
        "SELECT id FROM runs WHERE workspace_id = $1 AND state IN {ENDED} \
         AND finished_at IS NOT NULL AND finished_at < $2 ORDER BY finished_at, id LIMIT {RUNS_PER_STEP}"
    )
}

/// Runs whose material ($1 workspace, $2 cutoff) is expired, for
/// `WHERE run_id IN (…)`.
fn ended_before() -> String {
    format!(
        "SELECT id FROM runs WHERE workspace_id = $1 AND state IN {ENDED} \
         AND finished_at IS NOT NULL AND finished_at < $2"
    )
}

/// Uploads ($1 workspace, $2 cutoff) no unfinished run's input names.
const EXPIRED_UPLOADS: &str = "FROM uploads u WHERE u.workspace_id = $1 AND u.created_at < $2 \
     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.workspace_id = u.workspace_id \
     AND r.state IN ('queued', 'running', 'awaiting_approval', 'unknown') \
     AND r.input LIKE '%' || u.digest || '%')";

/// Fires ($1 workspace, $2 cutoff) that are not their schedule's newest.
const EXPIRED_FIRES: &str = "FROM schedule_fires f WHERE f.workspace_id = $1 AND f.created_at < $2 \
     AND f.fire_at < (SELECT MAX(g.fire_at) FROM schedule_fires g WHERE g.workspace_id = f.workspace_id \
     AND g.worker_id = f.worker_id AND g.trigger_index = f.trigger_index)";

/// What a setting other than `runs_days` removes: rows of `table` matching
/// `rows` ($1 workspace, $2 the setting's cutoff), counted in `field`.
struct Part {
    days: Option<i64>,
    table: &'static str,
    rows: String,
    field: fn(&mut RetentionRemoved) -> &mut u64,
}

fn parts(s: &RetentionSettings) -> [Part; 4] {
    [
        Part {
            days: s.logs_days,
            table: "run_events",
            rows: format!("kind = 'log' AND run_id IN ({})", ended_before()),
            field: |r| &mut r.log_events,
        },
        Part {
            days: s.artifacts_days,
            table: "artifacts",
            rows: format!("run_id IN ({})", ended_before()),
            field: |r| &mut r.artifacts,
        },
        Part {
            days: s.uploads_days,
            table: "uploads",
            rows: format!("id IN (SELECT u.id {EXPIRED_UPLOADS})"),
            field: |r| &mut r.uploads,
        },
        // The newest fire of each schedule is read before anything goes,
        // so removing older ones cannot make another the newest.
        Part {
            days: s.fires_days,
            table: "schedule_fires",
            rows: format!(
                "(workspace_id, worker_id, trigger_index, fire_at) IN \
                 (SELECT f.workspace_id, f.worker_id, f.trigger_index, f.fire_at {EXPIRED_FIRES})"
            ),
            field: |r| &mut r.fires,
        },
    ]
}

/// Tables holding rows derived from a run, by `run_id`; the run goes last.
pub(crate) const RUN_CHILDREN: &[&str] = &[
    "run_events",
    "artifacts",
    "agent_items",
    "actions",
    "approvals",
    "idempotency_keys",
    "plans",
];

impl Store {
    /// A workspace's retention settings (all `None` when never set).
    pub async fn retention_settings(&self, workspace: &str) -> Result<RetentionSettings> {
        let row = sqlx::query(
            "SELECT runs_days, logs_days, artifacts_days, uploads_days, fires_days \
             FROM retention_settings WHERE workspace_id = $1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else {
            return Ok(RetentionSettings::default());
        };
        Ok(RetentionSettings {
            runs_days: r.try_get("runs_days")?,
            logs_days: r.try_get("logs_days")?,
            artifacts_days: r.try_get("artifacts_days")?,
            uploads_days: r.try_get("uploads_days")?,
            fires_days: r.try_get("fires_days")?,
        })
    }

    /// Replaces a workspace's retention settings, with its audit event.
    pub async fn set_retention_settings(
        &self,
        workspace: &str,
        s: RetentionSettings,
        by: &str,
        audit: AuditRecord,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO retention_settings (workspace_id, runs_days, logs_days, artifacts_days, uploads_days, fires_days, updated_at, updated_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (workspace_id) DO UPDATE SET \
             runs_days = excluded.runs_days, logs_days = excluded.logs_days, artifacts_days = excluded.artifacts_days, \
             uploads_days = excluded.uploads_days, fires_days = excluded.fires_days, \
             updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        )
        .bind(workspace)
        .bind(s.runs_days)
        .bind(s.logs_days)
        .bind(s.artifacts_days)
        .bind(s.uploads_days)
        .bind(s.fires_days)
        .bind(now_ms())
        .bind(by)
        .execute(&mut *tx)
        .await?;
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Workspaces with any retention set (the periodic pass visits these).
    pub async fn workspaces_with_retention(&self) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT workspace_id FROM retention_settings WHERE runs_days IS NOT NULL \
             OR logs_days IS NOT NULL OR artifacts_days IS NOT NULL OR uploads_days IS NOT NULL \
             OR fires_days IS NOT NULL ORDER BY workspace_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get("workspace_id").map_err(Into::into))
            .collect()
    }

    /// What applying `s` at `now` would remove from `workspace`.
    pub async fn retention_preview(
        &self,
        workspace: &str,
        s: RetentionSettings,
        now: i64,
    ) -> Result<RetentionRemoved> {
        let count = |sql: String, at: i64| async move {
            let n: i64 = sqlx::query_scalar(&sql)
                .bind(workspace)
                .bind(at)
                .fetch_one(&self.pool)
                .await?;
            Result::Ok(u64::try_from(n).unwrap_or(0))
        };
        let mut out = RetentionRemoved::default();
        if let Some(d) = s.runs_days {
            let at = cutoff(now, d);
            out.runs = count(format!("SELECT COUNT(*) FROM ({}) x", ended_before()), at).await?;
        }
        for part in parts(&s) {
            if let Some(d) = part.days {
                let sql = format!("SELECT COUNT(*) FROM {} WHERE {}", part.table, part.rows);
                *(part.field)(&mut out) = count(sql, cutoff(now, d)).await?;
            }
        }
        Ok(out)
    }

    /// Removes what `s` lets go of at `now`, in short transactions: runs
    /// (with their derived rows) up to [`RUNS_PER_STEP`] at a time, then
    /// the rest in one. Each transaction that removes anything appends
    /// `audit(what it removed)` in the same commit, so no removal goes
    /// unrecorded and a crash between steps leaves fewer rows, never a
    /// half-removed run.
    pub async fn apply_retention(
        &self,
        workspace: &str,
        s: RetentionSettings,
        now: i64,
        audit: impl Fn(&RetentionRemoved) -> AuditRecord,
    ) -> Result<RetentionRemoved> {
        let mut out = RetentionRemoved::default();
        if let Some(d) = s.runs_days {
            let at = cutoff(now, d);
            loop {
                let mut tx = self.pool.begin().await?;
                let ids = format!("SELECT id FROM ({}) x", expired_runs());
                for table in RUN_CHILDREN {
                    sqlx::query(&format!("DELETE FROM {table} WHERE run_id IN ({ids})"))
                        .bind(workspace)
                        .bind(at)
                        .execute(&mut *tx)
                        .await?;
                }
                let n = sqlx::query(&format!("DELETE FROM runs WHERE id IN ({ids})"))
                    .bind(workspace)
                    .bind(at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n > 0 {
                    let step = RetentionRemoved {
                        runs: n,
                        ..RetentionRemoved::default()
                    };
                    self.audit_in(&mut tx, workspace, audit(&step)).await?;
                }
                tx.commit().await?;
                out.runs += n;
                if n < RUNS_PER_STEP as u64 {
                    break;
                }
            }
        }
        let mut tx = self.pool.begin().await?;
        for part in parts(&s) {
            if let Some(d) = part.days {
                let sql = format!("DELETE FROM {} WHERE {}", part.table, part.rows);
                *(part.field)(&mut out) = sqlx::query(&sql)
                    .bind(workspace)
                    .bind(cutoff(now, d))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
        }
        let rest = RetentionRemoved { runs: 0, ..out };
        if rest.total() > 0 {
            self.audit_in(&mut tx, workspace, audit(&rest)).await?;
        }
        tx.commit().await?;
        Ok(out)
    }
}

impl Store {
    /// The state of run `id` in any workspace, `None` when no run has that
    /// id (the operator's `airlock recover` asks about folders named after
    /// runs; no caller-facing path uses this).
    pub async fn run_state_anywhere(&self, id: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT state FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?)
    }
}
