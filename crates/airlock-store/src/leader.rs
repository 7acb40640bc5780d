//! The scheduler lock (OPS-2): on PostgreSQL one process at a time runs
//! the scheduler loop, the one holding a session-level advisory lock on a
//! connection of its own. The lock lives as long as that connection: when
//! the holder dies (or its connection breaks), the server releases it and
//! the next process that tries takes it over. The per-fire primary-key
//! claim in `schedule_fires` stays the safety net for the moments two
//! processes could both believe they hold it (a half-open connection).

use std::str::FromStr;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::store::{Backend, Result, Store};

/// The advisory lock key of the scheduler (apart from the migration lock,
/// 7231001, and the per-workspace audit locks, which hash a workspace id).
pub const SCHEDULER_LOCK_KEY: i64 = 7_231_002;

/// The `application_name` prefix of the connection holding the lock, so
/// `pg_stat_activity` shows who holds it.
pub const SCHEDULER_APP_PREFIX: &str = "airlock-scheduler ";

/// A held scheduler lock. SQLite has no such lock (one worker process per
/// database file, enforced by the CLI's lock file): there it is always held.
#[derive(Debug)]
pub struct SchedulerLock {
    conn: Option<PgConnection>,
}

impl SchedulerLock {
    /// Whether the lock is still held: its connection still answers. A
    /// broken connection means the server has released the lock.
    pub async fn still_held(&mut self) -> bool {
        match self.conn.as_mut() {
            None => true,
            Some(c) => c.ping().await.is_ok(),
        }
    }

    /// Releases the lock now (a clean shutdown hands it over at once).
    pub async fn release(self) {
        if let Some(mut c) = self.conn {
            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(SCHEDULER_LOCK_KEY)
                .execute(&mut c)
                .await;
            let _ = c.close().await;
        }
    }
}

impl Store {
    /// Tries once to take the scheduler lock for `holder` (shown as
    /// `application_name`); `None` when another process holds it.
    pub async fn try_scheduler_lock(&self, holder: &str) -> Result<Option<SchedulerLock>> {
        if self.backend() != Backend::Postgres {
            return Ok(Some(SchedulerLock { conn: None }));
        }
        let name: String = format!("{SCHEDULER_APP_PREFIX}{holder}")
            .chars()
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .take(63)
            .collect();
        let opts = PgConnectOptions::from_str(self.url())?.application_name(&name);
        let mut conn = PgConnection::connect_with(&opts).await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(SCHEDULER_LOCK_KEY)
            .fetch_one(&mut conn)
            .await?;
        if got {
            Ok(Some(SchedulerLock { conn: Some(conn) }))
        } else {
            let _ = conn.close().await;
            Ok(None)
        }
    }

    /// Who holds the scheduler lock (the holder string given to
    /// [`Store::try_scheduler_lock`]), if anyone; always `None` on SQLite.
    pub async fn scheduler_lock_holder(&self) -> Result<Option<String>> {
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        let name: Option<String> = sqlx::query_scalar(
            "SELECT a.application_name::TEXT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND ((l.classid::BIGINT << 32) | l.objid::BIGINT) = $1 LIMIT 1",
        )
        .bind(SCHEDULER_LOCK_KEY)
        .fetch_optional(self.pool())
        .await?;
        Ok(name.map(|n| {
            n.strip_prefix(SCHEDULER_APP_PREFIX)
                .unwrap_or(&n)
                .to_string()
        }))
    }
}
