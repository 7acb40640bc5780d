//! Process-wide counters for Prometheus (API-7): sandbox launches, run
//! outcomes and durations, egress decisions. Plain atomics; the HTTP layer
//! renders them with the database's gauges.

use std::sync::atomic::{AtomicU64, Ordering};

use airlock_store::RunState;

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
