//! Process-wide counters for Prometheus (API-7): sandbox launches, run
//! outcomes and durations, egress decisions, quota refusals, and whether
//! this process holds the scheduler lock (OPS-2). Plain atomics,
//! rendered with the database's gauges by [`Service::metrics`]; front ends
//! append their own (HTTP rate limits).

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use std::fmt::Write;

use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_store::RunState;

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// Upper bounds (seconds) of the run-duration histogram buckets.
pub const DURATION_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0];

#[derive(Debug)]
pub struct Counters {
    pub sandbox_launches: AtomicU64,
    pub egress_allowed: AtomicU64,
    pub egress_denied: AtomicU64,
    /// Finished runs by terminal state (index of `TERMINAL`).
    pub finished: [AtomicU64; 6],
    /// Cumulative histogram buckets, plus +Inf at the end.
    pub duration_buckets: [AtomicU64; 11],
    pub duration_ms_sum: AtomicU64,
    /// Run creations refused by a durable quota (API-4).
    pub rejected_quota: AtomicU64,
    /// Quota units that could not be given back after a failed creation.
    pub quota_give_back_failed: AtomicU64,
    /// The scheduler of this process (OPS-2): [`SCHEDULER_NONE`],
    /// [`SCHEDULER_WAITING`] or [`SCHEDULER_LEADER`].
    pub scheduler: AtomicU8,
}

/// This process runs no scheduler (a web node): no gauge is shown.
pub const SCHEDULER_NONE: u8 = 0;
/// This process runs a scheduler that does not hold the lock.
pub const SCHEDULER_WAITING: u8 = 1;
/// This process holds the scheduler lock (on SQLite: always, while its
/// scheduler runs).
pub const SCHEDULER_LEADER: u8 = 2;

/// Records what this process's scheduler is now.
pub fn scheduler_state(state: u8) {
    COUNTERS.scheduler.store(state, Ordering::Relaxed);
}

/// The terminal states, in the order of `Counters::finished`.
pub const TERMINAL: [RunState; 6] = [
    RunState::Succeeded,
    RunState::Failed,
    RunState::Cancelled,
    RunState::TimedOut,
    RunState::Blocked,
    RunState::Unknown,
];

pub static COUNTERS: Counters = Counters {
    sandbox_launches: AtomicU64::new(0),
    egress_allowed: AtomicU64::new(0),
    egress_denied: AtomicU64::new(0),
    finished: [const { AtomicU64::new(0) }; 6],
    duration_buckets: [const { AtomicU64::new(0) }; 11],
    duration_ms_sum: AtomicU64::new(0),
    rejected_quota: AtomicU64::new(0),
    quota_give_back_failed: AtomicU64::new(0),
    scheduler: AtomicU8::new(SCHEDULER_NONE),
};

/// Records one finished run.
pub fn run_finished(state: RunState, duration_ms: u64) {
    if let Some(i) = TERMINAL.iter().position(|s| *s == state) {
        COUNTERS.finished[i].fetch_add(1, Ordering::Relaxed);
    }
    let secs = duration_ms as f64 / 1000.0;
    for (i, le) in DURATION_BUCKETS.iter().enumerate() {
        if secs <= *le {
            COUNTERS.duration_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
    }
    COUNTERS.duration_buckets[10].fetch_add(1, Ordering::Relaxed);
    COUNTERS
        .duration_ms_sum
        .fetch_add(duration_ms, Ordering::Relaxed);
}

impl Service {
    /// The Prometheus exposition text (API-7), for administrators of the
    /// workspace that owns the workers folder.
    pub async fn metrics(&self, c: &Caller) -> Result<String> {
        c.require(Permission::WorkspaceManage)?;
        if c.workspace != self.cfg.workers_workspace {
            return Err(Error::not_found());
        }
        self.metrics_text().await
    }

    /// The same text for a listener the operator keeps private
    /// (`airlock up --metrics-listen`): no caller.
    pub async fn metrics_text(&self) -> Result<String> {
        let by_state = self.store.count_by_state().await.svc()?;
        Ok(render(&by_state))
    }
}

fn render(by_state: &[(String, i64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP airlock_runs Runs in the database by state.");
    let _ = writeln!(out, "# TYPE airlock_runs gauge");
    let mut queued = 0;
    for (state, n) in by_state {
        if state == "queued" {
            queued = *n;
        }
        let _ = writeln!(out, "airlock_runs{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP airlock_queue_depth Runs waiting to start.");
    let _ = writeln!(out, "# TYPE airlock_queue_depth gauge");
    let _ = writeln!(out, "airlock_queue_depth {queued}");
    let _ = writeln!(
        out,
        "# HELP airlock_runs_finished_total Runs this process finished, by state."
    );
    let _ = writeln!(out, "# TYPE airlock_runs_finished_total counter");
    for (i, st) in TERMINAL.iter().enumerate() {
        let _ = writeln!(
            out,
            "airlock_runs_finished_total{{state=\"{}\"}} {}",
            st.as_str(),
            COUNTERS.finished[i].load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP airlock_run_duration_seconds Wall time of runs this process executed."
    );
    let _ = writeln!(out, "# TYPE airlock_run_duration_seconds histogram");
    for (i, le) in DURATION_BUCKETS.iter().enumerate() {
        let _ = writeln!(
            out,
            "airlock_run_duration_seconds_bucket{{le=\"{le}\"}} {}",
            COUNTERS.duration_buckets[i].load(Ordering::Relaxed)
        );
    }
    let count = COUNTERS.duration_buckets[10].load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "airlock_run_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "airlock_run_duration_seconds_sum {}",
        COUNTERS.duration_ms_sum.load(Ordering::Relaxed) as f64 / 1000.0
    );
    let _ = writeln!(out, "airlock_run_duration_seconds_count {count}");
    let _ = writeln!(
        out,
        "# HELP airlock_sandbox_launches_total Sandboxes started by this process."
    );
    let _ = writeln!(out, "# TYPE airlock_sandbox_launches_total counter");
    let _ = writeln!(
        out,
        "airlock_sandbox_launches_total {}",
        COUNTERS.sandbox_launches.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP airlock_egress_decisions_total Egress proxy decisions of finished runs."
    );
    let _ = writeln!(out, "# TYPE airlock_egress_decisions_total counter");
    let _ = writeln!(
        out,
        "airlock_egress_decisions_total{{decision=\"allow\"}} {}",
        COUNTERS.egress_allowed.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "airlock_egress_decisions_total{{decision=\"deny\"}} {}",
        COUNTERS.egress_denied.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP airlock_quota_refused_total Run creations refused by a daily quota."
    );
    let _ = writeln!(out, "# TYPE airlock_quota_refused_total counter");
    let _ = writeln!(
        out,
        "airlock_quota_refused_total {}",
        COUNTERS.rejected_quota.load(Ordering::Relaxed)
    );
    render_scheduler(&mut out, COUNTERS.scheduler.load(Ordering::Relaxed));
    out
}

/// `airlock_scheduler_leader`: 1 on the process holding the scheduler
/// lock, 0 on one whose scheduler waits for it, absent where none runs.
fn render_scheduler(out: &mut String, state: u8) {
    let value = match state {
        SCHEDULER_LEADER => 1,
        SCHEDULER_WAITING => 0,
        _ => return,
    };
    let _ = writeln!(
        out,
        "# HELP airlock_scheduler_leader Whether this process holds the scheduler lock (1) or waits for it (0)."
    );
    let _ = writeln!(out, "# TYPE airlock_scheduler_leader gauge");
    let _ = writeln!(out, "airlock_scheduler_leader {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_2_scheduler_gauge_shows_the_lock_state_and_nothing_without_a_scheduler() {
        let text = |state| {
            let mut out = String::new();
            render_scheduler(&mut out, state);
            out
        };
        assert!(text(SCHEDULER_LEADER).ends_with("airlock_scheduler_leader 1\n"));
        assert!(text(SCHEDULER_WAITING).ends_with("airlock_scheduler_leader 0\n"));
        assert_eq!(text(SCHEDULER_NONE), "");
    }
}
