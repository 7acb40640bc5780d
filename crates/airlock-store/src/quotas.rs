//! Durable quotas (API-4): usage per subject (`user:ID`, `ws:ID`) per
//! window, in the database so a restart does not reset them and several
//! nodes share them. Taking a unit is one atomic statement.

use crate::store::{Result, Store};

impl Store {
    /// Takes one unit of `subject`'s quota in the window starting at
    /// `window_start`; `false` (and nothing taken) when `limit` is reached.
    pub async fn take_quota(&self, subject: &str, window_start: i64, limit: i64) -> Result<bool> {
        if limit <= 0 {
            return Ok(false);
        }
        let used: Option<i64> = sqlx::query_scalar(
            "INSERT INTO quota_usage (subject, window_start, used) VALUES ($1, $2, 1) \
             ON CONFLICT (subject, window_start) DO UPDATE SET used = quota_usage.used + 1 \
             WHERE quota_usage.used < $3 RETURNING used",
        )
        .bind(subject)
        .bind(window_start)
        .bind(limit)
        .fetch_optional(&self.pool)
        .await?;
        Ok(used.is_some())
    }

    /// Returns a unit taken for work that was then not created.
    pub async fn give_back_quota(&self, subject: &str, window_start: i64) -> Result<()> {
        sqlx::query(
            "UPDATE quota_usage SET used = used - 1 WHERE subject = $1 AND window_start = $2 AND used > 0",
        )
        .bind(subject)
        .bind(window_start)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Units used in a window.
    pub async fn quota_used(&self, subject: &str, window_start: i64) -> Result<i64> {
        let used: Option<i64> = sqlx::query_scalar(
            "SELECT used FROM quota_usage WHERE subject = $1 AND window_start = $2",
        )
        .bind(subject)
        .bind(window_start)
        .fetch_optional(&self.pool)
        .await?;
        Ok(used.unwrap_or(0))
    }
}
