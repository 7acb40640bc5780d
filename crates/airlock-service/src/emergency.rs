//! The emergency stop of a workspace (AGT-6): stop, resume, state; and the
//! flags that make it reach what is already running.
//!
//! A stop is durable (the store's `emergency_stops`) and checked by the
//! service before a run is created or starts, before every dispatch of an
//! agent action and every use of an approval (atomically with it). What is
//! running is reached two ways: on this node at once, through the cancel
//! flags the executor keeps per run ([`Service::cancels`]) and a kill
//! without grace; on other nodes through the run's `cancel_requested`,
//! which their executors poll every 250 ms. Each workspace also has a flag
//! in memory that the egress proxies of its sandboxes read on every new
//! request ([`Service::stop_flag`]): set by a local stop or when a watcher
//! sees a stop, refreshed from the database when a run of the workspace is
//! staged.
//!
//! Resuming clears the flag; it restarts nothing.
//!
//! Must not: contain SQL; restart anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_iam::Permission;
use airlock_protocol::emergency::{EmergencyState, StopRequest, Stopped};
use airlock_protocol::{Error, ErrorCode};

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The longest reason a stop records.
const MAX_REASON_CHARS: usize = 1000;

pub(crate) fn stopped_error() -> Error {
    Error::new(
        ErrorCode::EmergencyStopped,
        "the workspace is under an emergency stop; resume it first",
    )
}

impl Service {
    /// The in-memory stop flag of a workspace (created unset), shared with
    /// the egress proxies of its sandboxes on this node.
    pub(crate) fn stop_flag(&self, workspace: &str) -> Arc<AtomicBool> {
        match self.stops.lock() {
            Ok(mut m) => m
                .entry(workspace.to_string())
                .or_insert_with(|| Arc::new(AtomicBool::new(false)))
                .clone(),
            // A poisoned map: a fresh flag that says "stopped" keeps the
            // proxy closed rather than open.
            Err(_) => Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether the workspace is stopped, from the database.
    pub(crate) async fn stopped(&self, workspace: &str) -> Result<bool> {
        self.store.emergency_stopped(workspace).await.svc()
    }

    /// Refused (`emergency_stopped`) while the workspace is stopped.
    pub(crate) async fn require_not_stopped(&self, workspace: &str) -> Result<()> {
        if self.stopped(workspace).await? {
            Err(stopped_error())
        } else {
            Ok(())
        }
    }

    /// The workspace's stop, as stored.
    pub async fn emergency_state(&self, c: &Caller) -> Result<EmergencyState> {
        c.require(Permission::RunsRead)?;
        self.store.emergency_state(&c.workspace).await.svc()
    }

    /// Stops the caller's workspace: queued and waiting runs end
    /// `cancelled` (`emergency_stop`), running ones are killed (on this
    /// node now, without a grace period; elsewhere within a poll), open
    /// approvals are cancelled, undispatched actions aborted, and the
    /// egress proxies of its sandboxes refuse new requests. Idempotent.
    pub async fn emergency_stop(&self, c: &Caller, b: &StopRequest) -> Result<Stopped> {
        c.require(Permission::EmergencyStop)?;
        if let Some(r) = &b.reason
            && (r.chars().count() > MAX_REASON_CHARS || r.chars().any(char::is_control))
        {
            return Err(Error::invalid_body(format!(
                "reason is at most {MAX_REASON_CHARS} characters without control characters"
            )));
        }
        // The proxies close first: nothing new leaves while the rest
        // happens.
        self.stop_flag(&c.workspace).store(true, Ordering::SeqCst);
        let out = self
            .store
            .emergency_stop(
                &c.workspace,
                c.actor_id(),
                c.audit_actor(),
                b.reason.as_deref(),
                self.now(),
            )
            .await
            .svc()?;
        for run in &out.running {
            self.kill_now(run);
        }
        tracing::warn!(
            workspace = %c.workspace,
            runs_stopping = out.stopped.runs_stopping,
            runs_cancelled = out.stopped.runs_cancelled,
            "emergency stop"
        );
        Ok(out.stopped)
    }

    /// Clears the caller's workspace's stop. Restarts nothing.
    pub async fn emergency_resume(&self, c: &Caller) -> Result<EmergencyState> {
        c.require(Permission::EmergencyResume)?;
        let st = self
            .store
            .emergency_resume(&c.workspace, c.actor_id(), c.audit_actor(), self.now())
            .await
            .svc()?;
        self.stop_flag(&c.workspace)
            .store(st.stopped, Ordering::SeqCst);
        Ok(st)
    }

    /// Stops a run executing on this node at once: its cancel flag, and
    /// its kill flag (the sandbox is killed without a grace period).
    pub(crate) fn kill_now(&self, run_id: &str) {
        if let Ok(kills) = self.kills.lock()
            && let Some(flag) = kills.get(run_id)
        {
            flag.store(true, Ordering::SeqCst);
        }
        if let Ok(cancels) = self.cancels.lock()
            && let Some(flag) = cancels.get(run_id)
        {
            flag.store(true, Ordering::SeqCst);
        }
    }
}
