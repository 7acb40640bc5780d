//! Login throttle state (IAM-2), shared by every node on this database.
//!
//! The policy (free failures, doubling delay, cap, how long a quiet key is
//! remembered) lives in `airlock_iam::throttle`; this module keeps only the
//! state, one row per (kind, key), so that a throttle reached through one
//! web node holds on every other. A failure is counted by one atomic upsert,
//! so concurrent failures on several nodes each count. Times are passed in
//! by the caller (Unix milliseconds) so tests control the clock.

use crate::store::{Result, Store};

/// Which throttle a key belongs to; each kind has its own policy and bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleKind {
    /// Account names (and second-factor attempts per user).
    Account,
    /// Client addresses.
    Client,
}

impl ThrottleKind {
    fn as_str(self) -> &'static str {
        match self {
            ThrottleKind::Account => "account",
            ThrottleKind::Client => "client",
        }
    }
}

impl Store {
    /// The time before which `key` may not try again, if it is known.
    pub async fn throttle_next_allowed(
        &self,
        kind: ThrottleKind,
        key: &str,
    ) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT next_allowed_at FROM login_throttles WHERE kind = $1 AND throttle_key = $2",
        )
        .bind(kind.as_str())
        .bind(key)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Counts one failure of `key` at `now` and, when `delay(failures)` (the
    /// policy, given the new count) is positive, moves its next allowed time
    /// to `now + delay` unless it is already later. Returns the new count.
    pub async fn throttle_failure(
        &self,
        kind: ThrottleKind,
        key: &str,
        now: i64,
        delay: &(dyn Fn(i64) -> i64 + Send + Sync),
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let failures: i64 = sqlx::query_scalar(
            "INSERT INTO login_throttles (kind, throttle_key, failures, next_allowed_at, last_failure_at) \
             VALUES ($1, $2, 1, $3, $3) \
             ON CONFLICT (kind, throttle_key) DO UPDATE \
             SET failures = login_throttles.failures + 1, last_failure_at = $3 \
             RETURNING failures",
        )
        .bind(kind.as_str())
        .bind(key)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let wait = delay(failures);
        if wait > 0 {
            sqlx::query(
                "UPDATE login_throttles SET next_allowed_at = \
                 CASE WHEN next_allowed_at < $3 THEN $3 ELSE next_allowed_at END \
                 WHERE kind = $1 AND throttle_key = $2",
            )
            .bind(kind.as_str())
            .bind(key)
            .bind(now.saturating_add(wait))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(failures)
    }

    /// Forgets `key` (after a success).
    pub async fn throttle_clear(&self, kind: ThrottleKind, key: &str) -> Result<()> {
        sqlx::query("DELETE FROM login_throttles WHERE kind = $1 AND throttle_key = $2")
            .bind(kind.as_str())
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Bounds the table: forgets keys of `kind` whose last failure is before
    /// `quiet_before` and whose wait has passed at `now`; then, if more than
    /// `max_entries` keys remain, drops the oldest down to 90% of it — keys
    /// whose wait has passed first, still-waiting ones only if that is not
    /// enough. Returns how many rows went.
    pub async fn prune_throttles(
        &self,
        kind: ThrottleKind,
        now: i64,
        quiet_before: i64,
        max_entries: i64,
    ) -> Result<u64> {
        let mut removed = sqlx::query(
            "DELETE FROM login_throttles \
             WHERE kind = $1 AND last_failure_at < $2 AND next_allowed_at <= $3",
        )
        .bind(kind.as_str())
        .bind(quiet_before)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM login_throttles WHERE kind = $1")
            .bind(kind.as_str())
            .fetch_one(&self.pool)
            .await?;
        let max_entries = max_entries.max(0);
        if count > max_entries {
            let excess = count - (max_entries - max_entries / 10);
            removed += sqlx::query(
                "DELETE FROM login_throttles WHERE kind = $1 AND throttle_key IN (\
                 SELECT throttle_key FROM login_throttles WHERE kind = $1 \
                 ORDER BY CASE WHEN next_allowed_at > $2 THEN 1 ELSE 0 END, last_failure_at \
                 LIMIT $3)",
            )
            .bind(kind.as_str())
            .bind(now)
            .bind(excess)
            .execute(&self.pool)
            .await?
            .rows_affected();
        }
        Ok(removed)
    }
}
