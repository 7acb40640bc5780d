//! The scheduler (RUN-6): fires every schedule trigger of the loaded
//! workers exactly once, even with several nodes ticking at once.
//!
//! Each tick, for each `kind = "schedule"` trigger (identified by the worker
//! and the trigger's position in `[[triggers]]`):
//!
//! 1. The schedule's newest row in `schedule_fires` is its *watermark*.
//!    A schedule with no row yet is *armed* at the tick's instant (an
//!    `armed` row, not a fire): it never fires for times before it was
//!    first seen, and its first fire is the next future one.
//! 2. Fires due are those in `(watermark, now]`. **Catch-up window: one
//!    fire.** After downtime only the most recent missed fire is run; the
//!    older ones are dropped, never replayed as a burst.
//! 3. The due fire is claimed with an insert on the fire's primary key:
//!    of all the nodes that compute it, exactly one claims it, and only
//!    that one creates the run — through the service's run creation, with
//!    trigger and actor `schedule` and the idempotency key
//!    `schedule:{worker}:{index}:{fire_at}`. (The worker is part of the key
//!    because idempotency keys are per workspace and actor.)
//! 4. The outcome is recorded on the fire: `created` with the run id;
//!    `skipped_missing_input` when the trigger's input lacks a required
//!    input (with a `schedule.skipped` audit event); `failed` for any other
//!    refusal (with `schedule.failed`). A store error leaves the fire
//!    `claimed`: once stale ([`FIRE_STALE_MS`]) any node takes it over and
//!    retries, and the idempotency key makes the retry return the same run
//!    if the first attempt got that far.
//!
//! Fire instants come from [`crate::schedule_eval`] (wall-clock time in the
//! trigger's zone, DST gaps and folds fire once). A schedule whose zone is
//! unknown is skipped; [`Service::run_scheduler`] logs it once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use airlock_store::{AuditRecord, FIRE_CLAIMED, StoreError};
use airlock_worker::Trigger;
use serde::Serialize;

use crate::schedule_eval::{Schedule, ScheduleError};
use airlock_protocol::ErrorCode;

use crate::runs::StartRun;
use crate::service::Service;

/// A fire left `claimed` this long (its node died between the claim and
/// the outcome) is taken over by the next node that ticks.
pub const FIRE_STALE_MS: i64 = 120_000;

/// How often [`Service::run_scheduler`] ticks.
pub const TICK: Duration = Duration::from_secs(1);

/// How often a process without the scheduler lock tries to take it (OPS-2).
pub const LOCK_RETRY: Duration = Duration::from_secs(3);

/// One schedule trigger of a loaded worker.
#[derive(Debug, Clone)]
pub struct ScheduleEntry {
    pub workspace: String,
    pub worker_id: String,
    /// Position in the worker's `[[triggers]]`.
    pub trigger_index: usize,
    pub cron: String,
    pub timezone: String,
    /// The input of each fire.
    pub input: serde_json::Value,
    /// The evaluated schedule, or why it cannot be evaluated.
    pub schedule: Result<Schedule, ScheduleError>,
}

/// What became of one fire this node claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FireOutcome {
    pub workspace: String,
    pub worker_id: String,
    pub trigger_index: usize,
    /// The fire instant (Unix ms).
    pub fire_at: i64,
    pub result: FireResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FireResult {
    /// A run was created (or, on a takeover, found) for the fire.
    Created { run_id: String },
    /// A required input is missing from the trigger's input.
    SkippedMissingInput { reason: String },
    /// Any other refusal (the worker went away, an idempotency conflict).
    Failed { reason: String },
}

impl FireResult {
    /// The outcome as stored in `schedule_fires`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Created { .. } => "created",
            Self::SkippedMissingInput { .. } => "skipped_missing_input",
            Self::Failed { .. } => "failed",
        }
    }
}

impl Service {
    /// Every schedule trigger of the loaded workers.
    pub fn schedules(&self) -> Vec<ScheduleEntry> {
        let Ok(w) = self.workers.read() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for b in w.bundles.values() {
            for (i, t) in b.manifest.triggers.iter().enumerate() {
                if let Trigger::Schedule {
                    cron,
                    timezone,
                    input,
                } = t
                {
                    out.push(ScheduleEntry {
                        workspace: self.cfg.workers_workspace.clone(),
                        worker_id: b.id.as_str().to_string(),
                        trigger_index: i,
                        cron: cron.as_str().to_string(),
                        timezone: timezone.as_str().to_string(),
                        input: serde_json::Value::Object(input.clone()),
                        schedule: Schedule::new(cron.as_str(), timezone.as_str()),
                    });
                }
            }
        }
        out
    }

    /// One scheduler pass at `now_ms`: arms new schedules, takes over stale
    /// claims, and claims and runs the fire due on each schedule. Returns
    /// the fires this node handled (fires another node claimed are not
    /// listed). A store error ends the pass; the next pass resumes.
    pub async fn schedule_tick(&self, now_ms: i64) -> Result<Vec<FireOutcome>, StoreError> {
        let mut out = Vec::new();
        for entry in self.schedules() {
            let Ok(schedule) = &entry.schedule else {
                continue;
            };
            let idx = i64::try_from(entry.trigger_index).unwrap_or(i64::MAX);
            let (ws, worker) = (entry.workspace.as_str(), entry.worker_id.as_str());
            let Some(latest) = self.store.latest_fire(ws, worker, idx).await? else {
                self.store.arm_schedule(ws, worker, idx, now_ms).await?;
                continue;
            };
            let stale_before = now_ms.saturating_sub(FIRE_STALE_MS);
            if latest.outcome == FIRE_CLAIMED
                && latest.created_at < stale_before
                && self
                    .store
                    .reclaim_fire(ws, worker, idx, latest.fire_at, stale_before, now_ms)
                    .await?
            {
                out.push(self.fire(&entry, latest.fire_at).await?);
            }
            if let Some(fire_at) = schedule.latest_in(latest.fire_at, now_ms)
                && self
                    .store
                    .claim_fire(ws, worker, idx, fire_at, now_ms)
                    .await?
            {
                out.push(self.fire(&entry, fire_at).await?);
            }
        }
        Ok(out)
    }

    /// Creates the run of a fire this node claimed and records the outcome.
    async fn fire(&self, entry: &ScheduleEntry, fire_at: i64) -> Result<FireOutcome, StoreError> {
        let idx = i64::try_from(entry.trigger_index).unwrap_or(i64::MAX);
        let (ws, worker) = (entry.workspace.as_str(), entry.worker_id.as_str());
        let created = self
            .start_run(StartRun {
                workspace: entry.workspace.clone(),
                worker_id: entry.worker_id.clone(),
                input: entry.input.clone(),
                trigger: "schedule".into(),
                actor: "schedule".into(),
                idempotency_key: Some(format!("schedule:{worker}:{idx}:{fire_at}")),
            })
            .await;
        let result = match created {
            Ok(c) => FireResult::Created { run_id: c.run.id },
            Err(e) if e.code == ErrorCode::InputInvalid => {
                FireResult::SkippedMissingInput { reason: e.message }
            }
            // A store failure leaves the fire claimed: a later tick (here
            // or on another node) takes it over and retries.
            Err(e) if e.code == ErrorCode::Internal => {
                return Err(StoreError::Db(e.message));
            }
            Err(other) => FireResult::Failed {
                reason: other.message,
            },
        };
        let run_id = match &result {
            FireResult::Created { run_id } => Some(run_id.as_str()),
            _ => None,
        };
        self.store
            .set_fire_outcome(ws, worker, idx, fire_at, result.code(), run_id)
            .await?;
        let event = match &result {
            FireResult::Created { .. } => None,
            FireResult::SkippedMissingInput { reason } => Some(("schedule.skipped", reason)),
            FireResult::Failed { reason } => Some(("schedule.failed", reason)),
        };
        if let Some((event, reason)) = event {
            let mut rec = AuditRecord::system(event, None)
                .with_result(result.code())
                .with_metadata(serde_json::json!({
                    "worker": worker,
                    "trigger_index": entry.trigger_index,
                    "fire_at": fire_at,
                    "cron": entry.cron,
                    "timezone": entry.timezone,
                    "reason": reason,
                }));
            rec.target = Some(format!("worker:{worker}"));
            self.store.audit(ws, rec).await?;
        }
        Ok(FireOutcome {
            workspace: entry.workspace.clone(),
            worker_id: entry.worker_id.clone(),
            trigger_index: entry.trigger_index,
            fire_at,
            result,
        })
    }

    /// Ticks every second (on whole seconds of `clock`) until `stop` turns
    /// true or its sender is dropped. Schedules that cannot be evaluated
    /// and store errors are logged (`tracing`) once each, not every tick.
    pub async fn run_scheduler(
        self: Arc<Self>,
        clock: Arc<dyn airlock_iam::Clock>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut reported: HashSet<String> = HashSet::new();
        let mut last_error: Option<String> = None;
        // OPS-2: only the holder of the scheduler lock ticks; the others
        // try again every LOCK_RETRY. On SQLite the lock is always held.
        let holder = format!("{}:{}", self.cfg.node_id, std::process::id());
        let mut lock: Option<airlock_store::SchedulerLock> = None;
        let mut next_try = tokio::time::Instant::now();
        crate::metrics::scheduler_state(crate::metrics::SCHEDULER_WAITING);
        loop {
            if *stop.borrow() {
                break;
            }
            if let Some(l) = lock.as_mut()
                && !l.still_held().await
            {
                lock = None;
                crate::metrics::scheduler_state(crate::metrics::SCHEDULER_WAITING);
                tracing::warn!(target: "airlock::scheduler", event = "scheduler_lock_lost", holder = %holder);
            }
            if lock.is_none() && tokio::time::Instant::now() >= next_try {
                match self.store.try_scheduler_lock(&holder).await {
                    Ok(Some(l)) => {
                        lock = Some(l);
                        crate::metrics::scheduler_state(crate::metrics::SCHEDULER_LEADER);
                        tracing::info!(target: "airlock::scheduler", event = "scheduler_lock_acquired", holder = %holder);
                    }
                    Ok(None) => next_try = tokio::time::Instant::now() + LOCK_RETRY,
                    Err(e) => {
                        next_try = tokio::time::Instant::now() + LOCK_RETRY;
                        tracing::error!(target: "airlock::scheduler", event = "scheduler_lock_failed", error = %e);
                    }
                }
            }
            if lock.is_none() {
                tokio::select! {
                    changed = stop.changed() => if changed.is_err() { break },
                    () = tokio::time::sleep(TICK) => {}
                }
                continue;
            }
            for entry in self.schedules() {
                if let Err(e) = &entry.schedule {
                    let msg = format!(
                        "schedule {}.triggers[{}] is ignored: {e}",
                        entry.worker_id, entry.trigger_index
                    );
                    if reported.insert(msg.clone()) {
                        tracing::warn!(target: "airlock::scheduler", "{msg}");
                    }
                }
            }
            match self.schedule_tick(clock.now_ms()).await {
                Ok(_) => last_error = None,
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        tracing::error!(target: "airlock::scheduler", "{msg}");
                        last_error = Some(msg);
                    }
                }
            }
            let tick_ms = i64::try_from(TICK.as_millis()).unwrap_or(1000);
            let wait = (tick_ms - clock.now_ms().rem_euclid(tick_ms)).clamp(50, tick_ms);
            let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(1000));
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
        if let Some(l) = lock {
            l.release().await;
        }
        crate::metrics::scheduler_state(crate::metrics::SCHEDULER_NONE);
    }

    /// Who holds the scheduler lock (`node:pid`), on PostgreSQL.
    pub async fn scheduler_lock_holder(&self) -> Result<Option<String>, StoreError> {
        self.store.scheduler_lock_holder().await
    }
}
