//! The executor: claims queued runs and drives each one through named
//! stages to its terminal state.
//!
//! ```text
//! authorise → stage → launch → collect → finish
//! ```
//!
//! - [`authorise`]: may this run start at all (its actor, worker, trigger,
//!   kind, the operator policy, the secrets it declares)? Nothing is
//!   written yet.
//! - [`stage`]: the run's folder and input, its egress plan (channel
//!   credentials read on the trusted side), its declared secrets read from
//!   the vault (audited), and the [`Launch`](airlock_launch::Launch)
//!   request built from all of it.
//! - [`launch`]: from here a crash may have had effects (DUR-2); live logs,
//!   cancel and lease renewal while the workload runs through the
//!   [`Launcher`](airlock_launch::Launcher) seam.
//! - [`collect`]: exit status, `result.json`, artifacts through the bounded
//!   file layer (redacted), and the output schema.
//! - [`finish`]: redaction of the terminal record, the run folder removed,
//!   the terminal state written under the fencing token.
//!
//! Each stage returns the next stage's input or an [`Outcome`] that ends
//! the run with one [`RunErrorCode`]; a failure on a security-relevant path
//! (a policy that cannot be read, a proxy that cannot start, an artifact
//! that cannot be redacted) ends the run, never a silent default.
//!
//! Must not: contain SQL, spawn processes other than through the launcher,
//! or let a delivered secret reach anything stored unredacted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use airlock_store::{Claim, Finish, RunErrorCode, RunState, StoreError};

use crate::agent::Ended;
use crate::service::Service;

mod authorise;
pub(crate) use authorise::{Authorised, trigger_needed};
mod collect;
pub(crate) use collect::file_error_code;
mod finish;
mod launch;
mod stage;
pub(crate) use stage::{sandbox_limits, secret_code};
#[cfg(test)]
mod tests;

/// Where the bundle, input and output appear inside the sandbox (RUN-3).
pub const WORKER_DIR: &str = "/airlock/worker";
pub const INPUT_FILE: &str = "/airlock/input.json";
/// Where a run's file inputs are, one file per input, named after it.
pub const INPUT_DIR: &str = "/airlock/input";
pub const OUTPUT_DIR: &str = "/airlock/output";

/// How long the drain waits for stopped sandboxes to return after its
/// grace period.
const DRAIN_STOP_WAIT: Duration = Duration::from_secs(15);

/// How a run ends: `succeeded`, or the state its error code implies.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) state: RunState,
    pub(crate) finish: Finish,
}

impl Outcome {
    /// Ends the run with `code` (its state follows from the code).
    pub(crate) fn fail(code: RunErrorCode, message: impl Into<String>) -> Self {
        Self::fail_with(Finish::default(), code, message)
    }

    /// Ends the run with `code`, keeping what is already known about it
    /// (exit status, containment, egress, outputs).
    pub(crate) fn fail_with(
        mut finish: Finish,
        code: RunErrorCode,
        message: impl Into<String>,
    ) -> Self {
        finish.error_code = Some(code);
        finish.error_message = Some(message.into());
        Self {
            state: code.state(),
            finish,
        }
    }

    pub(crate) fn succeeded(finish: Finish) -> Self {
        Self {
            state: RunState::Succeeded,
            finish,
        }
    }
}

/// What one run carries from stage to stage.
pub(crate) struct RunCx {
    pub(crate) claim: Claim,
    /// Set by a cancel request, the lease watcher or a stale lease.
    pub(crate) cancel: Arc<AtomicBool>,
    /// Set (with `cancel`) by the emergency stop: kill without grace.
    pub(crate) kill: Arc<AtomicBool>,
    /// Set as soon as secrets are read, so that whatever ends the run
    /// afterwards is redacted (KEY-6).
    pub(crate) redactor: Option<Arc<airlock_vault::Redactor>>,
    /// `data/runs/<id>`: staged input and the output folder.
    pub(crate) dir: PathBuf,
}

impl Service {
    /// Claims and runs queued work until `stop` flips, at most
    /// `max_concurrent` at a time.
    pub async fn run_executor(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.cfg.max_concurrent.max(1)));
        // PostgreSQL: LISTEN/NOTIFY wakes this executor when any node queues
        // a run; the 500 ms poll below is the fallback.
        let listener = match self.store.subscribe().await {
            Ok(Some(mut l)) => {
                let svc = self.clone();
                Some(tokio::spawn(async move {
                    while l.recv().await.is_ok() {
                        svc.wake.notify_one();
                    }
                }))
            }
            _ => None,
        };
        loop {
            if *stop.borrow() {
                break;
            }
            // Waiting for a free slot must not outlast a stop: the drain
            // starts at once, and no run is claimed after it.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p,
                r = stop.changed() => match r {
                    Ok(()) => continue,
                    // No one can stop us any more: just wait for a slot.
                    Err(_) => slots.clone().acquire_owned().await,
                },
            };
            let Ok(permit) = permit else {
                break;
            };
            if *stop.borrow() {
                break;
            }
            // RUN-7: skip workers already at their own cap. Without the
            // counts the caps cannot be honoured: claim nothing this round.
            let claim = match self.store.running_per_worker().await {
                Ok(counts) => {
                    let at_cap: Vec<String> = counts
                        .into_iter()
                        .filter(|(w, n)| {
                            self.worker(w).is_some_and(|b| {
                                u64::try_from(*n).unwrap_or(0) >= b.manifest.limits.concurrency
                            })
                        })
                        .map(|(w, _)| w)
                        .collect();
                    self.store
                        .claim_next(&self.owner, self.cfg.lease, &at_cap)
                        .await
                }
                Err(e) => Err(e),
            };
            match claim {
                Ok(Some(claim)) => {
                    let svc = self.clone();
                    tokio::spawn(async move {
                        svc.execute(claim).await;
                        drop(permit);
                    });
                }
                Ok(None) | Err(_) => {
                    drop(permit);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        }
        if let Some(l) = listener {
            l.abort();
        }
        self.drain(&slots).await;
    }

    /// SIGTERM drain (DUR-2), once the executor has stopped claiming: a
    /// claimed run that has not started its workload is handed back (see
    /// [`Self::hand_back`]); running runs get `drain_grace` to finish;
    /// then their sandboxes are stopped (the cancel flag: a lost lease, as
    /// the harness and the launcher know it) and each is settled by
    /// [`airlock_store::Store::settle_drained`]. Runs parked for a person
    /// hold nothing and are left waiting.
    async fn drain(&self, slots: &Arc<tokio::sync::Semaphore>) {
        self.draining.store(true, Ordering::SeqCst);
        // The semaphore is never closed, so this returns once every permit
        // is back, i.e. every execution has ended.
        let all = u32::try_from(self.cfg.max_concurrent.max(1)).unwrap_or(u32::MAX);
        let idle = || slots.clone().acquire_many_owned(all);
        if tokio::time::timeout(self.cfg.drain_grace, idle())
            .await
            .is_ok()
        {
            return;
        }
        let running: Vec<(String, Arc<AtomicBool>)> = match self.cancels.lock() {
            Ok(c) => c.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Err(_) => Vec::new(),
        };
        if let Ok(mut d) = self.drain_stopped.lock() {
            d.extend(running.iter().map(|(id, _)| id.clone()));
        }
        for (_, flag) in &running {
            flag.store(true, Ordering::SeqCst);
        }
        // A stopped sandbox returns at once; should an execution still not
        // end (a store that does not answer), its lease lapses and startup
        // recovery settles it by the same rules.
        let _ = tokio::time::timeout(DRAIN_STOP_WAIT, idle()).await;
    }

    /// Hands a claimed run back to the queue while draining, before its
    /// workload started: `queued` again, the attempt not counted.
    async fn hand_back_if_draining(&self, cx: &RunCx) -> Result<(), Ended> {
        if !self.draining.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _ = self
            .store
            .settle_drained(&cx.claim.run.id, cx.claim.token, false)
            .await;
        // Settled (or held by someone else): either way, write nothing more.
        Err(Ended::Released)
    }

    /// DUR-2 reaper: requeues or marks `unknown` runs whose lease expired;
    /// parks the runs of a dead executor that had an action dispatched
    /// (`outcome_unknown`, for a person); expires approval requests nobody
    /// decided in time.
    pub async fn run_reaper(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            // A failed pass changes nothing (each run is settled in its own
            // transaction); the next pass retries.
            let _ = self.reap_once().await;
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.lease / 2) => {}
                _ = stop.changed() => if *stop.borrow() { break },
            }
        }
    }

    pub async fn reap_once(&self) -> Result<Vec<(String, RunState)>, StoreError> {
        // First the agent runs with an action in flight: they wait for a
        // person and are never requeued by the pass below.
        let mut out: Vec<(String, RunState)> = self
            .store
            .recover_dispatched(airlock_store::now_ms())
            .await?
            .into_iter()
            .map(|(run, _)| (run, RunState::AwaitingApproval))
            .collect();
        for a in self.store.expire_approvals(self.now()).await? {
            let state = match a.kind {
                airlock_protocol::approvals::ApprovalKind::Run => RunState::Blocked,
                airlock_protocol::approvals::ApprovalKind::Action => RunState::Queued,
            };
            out.push((a.run_id, state));
        }
        let idempotent = |worker: &str| self.is_idempotent(worker);
        out.extend(self.store.reap_expired(&idempotent).await?);
        if out.iter().any(|(_, s)| *s == RunState::Queued) {
            self.wake.notify_one();
        }
        Ok(out)
    }

    /// Startup recovery: runs leased by a previous incarnation of this node
    /// are dead; settle them the same way the reaper would.
    pub async fn recover_startup(&self) -> Result<Vec<(String, RunState)>, StoreError> {
        // Owners are `node:pid`. Several processes may share a node id (two
        // `airlock up` on one host): only a holder whose process is gone is
        // known dead; live holders keep their leases until they expire.
        for (run_id, owner) in self
            .store
            .lease_owners(&format!("{}:", self.cfg.node_id))
            .await?
        {
            let pid = owner.rsplit(':').next().and_then(|p| p.parse::<u32>().ok());
            let alive = pid.is_some_and(|p| {
                p != std::process::id() && Path::new(&format!("/proc/{p}")).exists()
            });
            if !alive {
                self.store.expire_lease(&run_id, &owner).await?;
            }
        }
        self.reap_once().await
    }

    /// Runs one claimed run to its terminal state.
    pub async fn execute(self: &Arc<Self>, claim: Claim) {
        let run_id = claim.run.id.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let kill = Arc::new(AtomicBool::new(false));
        if let Ok(mut c) = self.cancels.lock() {
            c.insert(run_id.clone(), cancel.clone());
        }
        if let Ok(mut k) = self.kills.lock() {
            k.insert(run_id.clone(), kill.clone());
        }
        let started = std::time::Instant::now();
        let mut cx = RunCx {
            dir: self.run_dir(&run_id),
            claim,
            cancel,
            kill,
            redactor: None,
        };
        let ended = match self.stages(&mut cx).await {
            Ok(e) => e,
            Err(o) => Ended::Finished(o),
        };
        if let Ok(mut c) = self.cancels.lock() {
            c.remove(&run_id);
        }
        if let Ok(mut k) = self.kills.lock() {
            k.remove(&run_id);
        }
        // Stopped by the drain when its grace ended: settled by the drain's
        // rules (requeued, `unknown`, or parked with its action
        // `outcome_unknown`), unless it had succeeded anyway.
        let drain_stopped = self
            .drain_stopped
            .lock()
            .map(|mut d| d.remove(&run_id))
            .unwrap_or(false);
        let ended = match ended {
            Ended::Finished(o) if drain_stopped && o.state != RunState::Succeeded => {
                Ended::Released
            }
            other => other,
        };
        if drain_stopped && matches!(ended, Ended::Released) {
            let idempotent = self.is_idempotent(&cx.claim.run.worker_id);
            let settled = self
                .store
                .settle_drained(&run_id, cx.claim.token, idempotent)
                .await;
            // Only a script run can end `unknown` here (an agent run never
            // marks a workload started): nothing will use its folder again.
            if matches!(settled, Ok(RunState::Unknown)) {
                let _ = std::fs::remove_dir_all(&cx.dir);
            }
            return;
        }
        let outcome = match ended {
            Ended::Finished(o) => Some(o),
            Ended::Parked | Ended::Released => None,
        };
        // Parked (waiting for a person) or released (someone else holds
        // it): nothing is written and the folder stays.
        let Some(outcome) = outcome else {
            return;
        };
        crate::metrics::run_finished(
            outcome.state,
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        );
        self.finish(&cx, outcome).await;
    }

    /// authorise → stage → launch → collect; the first stage that ends the
    /// run returns its outcome. An agent run goes from authorise to the
    /// harness ([`crate::agent`]).
    async fn stages(self: &Arc<Self>, cx: &mut RunCx) -> Result<Ended, Outcome> {
        if let Err(e) = self.hand_back_if_draining(cx).await {
            return Ok(e);
        }
        // The crash matrix (DUR-2): killed holding a claim, before anything
        // started.
        crate::agent::crash_point("after_claim");
        let authorised = self.authorise(&cx.claim.run).await?;
        if authorised.bundle.manifest.agent().is_some() {
            return self.run_agent(cx, authorised).await;
        }
        let staged = self.stage(cx, authorised).await?;
        // The last moment before the workload starts.
        if let Err(e) = self.hand_back_if_draining(cx).await {
            return Ok(e);
        }
        let ran = self.launch(cx, staged).await?;
        Ok(Ended::Finished(self.collect(cx, ran).await))
    }

    /// Whether the drain stopped this run when its grace period ended.
    pub(crate) fn is_drain_stopped(&self, run_id: &str) -> bool {
        self.drain_stopped
            .lock()
            .map(|d| d.contains(run_id))
            .unwrap_or(false)
    }

    /// Whether a worker declares itself `idempotent` (DUR-2).
    fn is_idempotent(&self, worker: &str) -> bool {
        self.worker(worker).is_some_and(|b| b.manifest.idempotent)
    }

    fn run_dir(&self, run_id: &str) -> PathBuf {
        self.cfg.data_dir.join("runs").join(run_id)
    }
}
