//! Schedule fires (RUN-6): the record that makes each fire of a schedule
//! happen exactly once across every scheduler node.
//!
//! A fire is identified by `(workspace, worker, trigger index, fire instant)`
//! — the table's primary key. A node that computes a due fire *claims* it
//! with an `INSERT … ON CONFLICT DO NOTHING`; exactly one node's insert
//! succeeds, and only that node creates the run. The claimant then records
//! the outcome (`created` with the run id, `skipped_missing_input`, or
//! `failed`). A row left `claimed` (its node died between the claim and the
//! outcome) can be taken over with [`Store::reclaim_fire`] once it is stale;
//! the run itself is created under an idempotency key, so a takeover never
//! duplicates it.
//!
//! Besides fires, a schedule seen for the first time gets one `armed` row at
//! the instant it was first seen: the watermark from which fires are due, so
//! that a new schedule never fires for times before the cluster knew it.
//! [`Store::last_fire`] ignores `armed` rows; [`Store::latest_fire`] (the
//! watermark) does not. All times are Unix milliseconds passed in by the
//! caller.

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::store::{Result, Store, StoreError};

/// Outcome of a fire that a node claimed and is creating the run for.
pub const FIRE_CLAIMED: &str = "claimed";
/// Outcome of the watermark row written when a schedule is first seen.
pub const FIRE_ARMED: &str = "armed";

/// One row of `schedule_fires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleFire {
    pub worker_id: String,
    pub trigger_index: i64,
    /// The fire instant (for `armed`, the instant the schedule was first
    /// seen).
    pub fire_at: i64,
    /// `armed`, `claimed`, `created`, `skipped_missing_input`, `failed`.
    pub outcome: String,
    pub run_id: Option<String>,
    /// When the fire was claimed (or last reclaimed).
    pub created_at: i64,
}

const FIRE_COLUMNS: &str = "worker_id, trigger_index, fire_at, outcome, run_id, created_at";

fn fire_from_row(row: &AnyRow) -> Result<ScheduleFire> {
    Ok(ScheduleFire {
        worker_id: row.try_get("worker_id")?,
        trigger_index: row.try_get("trigger_index")?,
        fire_at: row.try_get("fire_at")?,
        outcome: row.try_get("outcome")?,
        run_id: row.try_get("run_id")?,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Claims one fire. True iff this call inserted the row: of any number
    /// of nodes claiming the same fire at once, exactly one gets `true`.
    pub async fn claim_fire(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
        fire_at_ms: i64,
        now: i64,
    ) -> Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO schedule_fires (workspace_id, worker_id, trigger_index, fire_at, outcome, run_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, NULL, $6) \
             ON CONFLICT (workspace_id, worker_id, trigger_index, fire_at) DO NOTHING",
        )
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(fire_at_ms)
        .bind(FIRE_CLAIMED)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Takes over a fire still `claimed` since before `stale_before` (its
    /// claimant presumably died). True iff this call took it over; the
    /// claim time becomes `now`, so concurrent takeovers resolve to one.
    pub async fn reclaim_fire(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
        fire_at_ms: i64,
        stale_before: i64,
        now: i64,
    ) -> Result<bool> {
        let updated = sqlx::query(
            "UPDATE schedule_fires SET created_at = $1 \
             WHERE workspace_id = $2 AND worker_id = $3 AND trigger_index = $4 AND fire_at = $5 \
             AND outcome = $6 AND created_at < $7",
        )
        .bind(now)
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(fire_at_ms)
        .bind(FIRE_CLAIMED)
        .bind(stale_before)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    /// Records what became of a claimed fire. `NotFound` when the fire was
    /// never claimed.
    pub async fn set_fire_outcome(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
        fire_at_ms: i64,
        outcome: &str,
        run_id: Option<&str>,
    ) -> Result<()> {
        let updated = sqlx::query(
            "UPDATE schedule_fires SET outcome = $1, run_id = $2 \
             WHERE workspace_id = $3 AND worker_id = $4 AND trigger_index = $5 AND fire_at = $6",
        )
        .bind(outcome)
        .bind(run_id)
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(fire_at_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if updated == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// The instant of the most recent fire of a schedule (any outcome but
    /// `armed`), or `None` when it never fired.
    pub async fn last_fire(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
    ) -> Result<Option<i64>> {
        let last: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(fire_at) FROM schedule_fires \
             WHERE workspace_id = $1 AND worker_id = $2 AND trigger_index = $3 AND outcome <> $4",
        )
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(FIRE_ARMED)
        .fetch_one(&self.pool)
        .await?;
        Ok(last)
    }

    /// The newest row of a schedule, `armed` included: the scheduler's
    /// watermark (fires at or before it are never due again).
    pub async fn latest_fire(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
    ) -> Result<Option<ScheduleFire>> {
        let row = sqlx::query(&format!(
            "SELECT {FIRE_COLUMNS} FROM schedule_fires \
             WHERE workspace_id = $1 AND worker_id = $2 AND trigger_index = $3 \
             ORDER BY fire_at DESC LIMIT 1"
        ))
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(fire_from_row).transpose()
    }

    /// Writes the `armed` watermark of a schedule seen for the first time.
    /// Two nodes arming at once leave two rows; the newest is the
    /// watermark, which is harmless.
    pub async fn arm_schedule(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO schedule_fires (workspace_id, worker_id, trigger_index, fire_at, outcome, run_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, NULL, $4) \
             ON CONFLICT (workspace_id, worker_id, trigger_index, fire_at) DO NOTHING",
        )
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(now)
        .bind(FIRE_ARMED)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The newest `limit` rows of a schedule (`armed` included), newest
    /// first.
    pub async fn list_fires(
        &self,
        workspace: &str,
        worker: &str,
        trigger_index: i64,
        limit: i64,
    ) -> Result<Vec<ScheduleFire>> {
        let rows = sqlx::query(&format!(
            "SELECT {FIRE_COLUMNS} FROM schedule_fires \
             WHERE workspace_id = $1 AND worker_id = $2 AND trigger_index = $3 \
             ORDER BY fire_at DESC LIMIT $4"
        ))
        .bind(workspace)
        .bind(worker)
        .bind(trigger_index)
        .bind(limit.clamp(1, 1000))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(fire_from_row).collect()
    }
}
