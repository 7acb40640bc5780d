//! Stage 3, launch: the workload runs, through the launcher seam.
//!
//! Before it starts, the run's `running` status and any redaction warning
//! are recorded — a workload whose record cannot be written is not started,
//! and a low-entropy-secret warning is the operator's only notice that a
//! value may not be redacted. Then the run is marked started (from here a
//! crash may have had effects, DUR-2), live output becomes `log` events,
//! and a watcher turns a cancel request or a lost lease into the cancel
//! flag while the launcher runs the workload.
//!
//! Why `log` events are best-effort: they are capped (10,000 per run) and
//! the live sink already drops chunks under back-pressure; what a run
//! leaves that matters is its terminal record and artifacts, written with
//! checked results by the later stages.
//!
//! Must not: interpret the workload's result (collect does).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_launch::{Controls, LaunchFailure, Launched};
use airlock_sandbox::LaunchError;
use airlock_sandbox::exe::ExeError;
use airlock_store::RunErrorCode;
use airlock_worker::Bundle;
use serde_json::json;

use super::stage::Staged;
use super::{Outcome, RunCx};
use crate::service::Service;

/// A workload that ran.
pub(crate) struct Ran {
    pub(crate) bundle: Bundle,
    pub(crate) launched: Launched,
}

/// Most `log` events one run records; the captured totals count the rest.
const MAX_LOG_EVENTS: u32 = 10_000;

/// The run code for a broker error.
pub(crate) fn launch_error_code(e: &LaunchError) -> RunErrorCode {
    match e {
        LaunchError::Executable(ExeError::NotFound(_)) => RunErrorCode::ExecutableNotFound,
        LaunchError::Executable(ExeError::Changed(_)) => RunErrorCode::ExecutableChanged,
        LaunchError::Executable(ExeError::NotExecutable(_) | ExeError::Io { .. }) => {
            RunErrorCode::ExecutableInvalid
        }
        LaunchError::ContainmentUnavailable { .. } => RunErrorCode::ContainmentUnavailable,
        LaunchError::Setup { .. } | LaunchError::Io(_) => RunErrorCode::SandboxSetupFailed,
        LaunchError::Exec { .. } => RunErrorCode::ExecFailed,
        LaunchError::SandboxIds(_) => RunErrorCode::SandboxIdsInvalid,
    }
}

/// The outcome of a launch that produced no result.
pub(crate) fn failure_outcome(f: LaunchFailure) -> Outcome {
    use airlock_sandbox::SpecError;
    match f {
        LaunchFailure::Sandbox(e @ LaunchError::ContainmentUnavailable { .. }) => {
            let mut o = Outcome::fail(RunErrorCode::ContainmentUnavailable, e.to_string());
            if let LaunchError::ContainmentUnavailable { report, .. } = &e {
                // Plain data: serialising it cannot fail. The code and
                // message already say what was missing.
                o.finish.containment = serde_json::to_value(report).ok();
            }
            o
        }
        LaunchFailure::Sandbox(e) => Outcome::fail(launch_error_code(&e), e.to_string()),
        // The executor's only declared variables and secret files are the
        // worker's secrets: a refusal there is about them.
        LaunchFailure::Request(
            e @ (SpecError::Env(_)
            | SpecError::BadSecretName(_)
            | SpecError::SecretTooLarge(_)
            | SpecError::TooManySecrets),
        ) => Outcome::fail(RunErrorCode::SecretInvalid, e.to_string()),
        LaunchFailure::Request(e) => Outcome::fail(RunErrorCode::SandboxSetupFailed, e.to_string()),
        LaunchFailure::ChannelNotConfigured(c) => Outcome::fail(
            RunErrorCode::EgressPolicyInvalid,
            format!("channel {c:?} is not configured by the operator"),
        ),
        LaunchFailure::EgressUnavailable(e) => {
            Outcome::fail(RunErrorCode::EgressUnavailable, e.to_string())
        }
    }
}

impl Service {
    pub(crate) async fn launch(
        self: &Arc<Self>,
        cx: &RunCx,
        staged: Staged,
    ) -> Result<Ran, Outcome> {
        let run = &cx.claim.run;
        let token = cx.claim.token;
        let not_recorded = |e: airlock_store::StoreError| {
            Outcome::fail(
                RunErrorCode::Internal,
                format!("the run's record could not be written, so it did not start: {e}"),
            )
        };
        self.store
            .append_event(
                &run.id,
                token,
                "status",
                &json!({"state": "running", "attempt": run.attempt}),
            )
            .await
            .map_err(not_recorded)?;
        // KEY-6: values too weak to replace everywhere are named (never
        // shown) so the operator can fix them.
        let redactor = staged.redactor.clone();
        for w in redactor.warnings() {
            self.store
                .append_event(
                    &run.id,
                    token,
                    "warning",
                    &json!({"secret": w.name.as_str(), "warning": "low-entropy secret: redacted only as a whole word, or not at all", "detail": format!("{:?}", w.kind)}),
                )
                .await
                .map_err(not_recorded)?;
        }
        // From here on a crash may have had effects (DUR-2).
        self.store
            .mark_workload_started(&run.id, token)
            .await
            .map_err(|_| Outcome::fail(RunErrorCode::Internal, "lost the run before it started"))?;

        // Live logs: a bounded channel; a thread turns chunks into events.
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<(airlock_sandbox::output::Stream, Vec<u8>)>(1024);
        let logger = {
            let handle = tokio::runtime::Handle::current();
            let store = self.store.clone();
            let run_id = run.id.clone();
            let redactor = redactor.clone();
            std::thread::spawn(move || {
                let mut events = 0u32;
                for (stream, bytes) in rx {
                    if events >= MAX_LOG_EVENTS {
                        continue; // counted in the captured totals
                    }
                    events += 1;
                    let text = redactor.redact(&String::from_utf8_lossy(&bytes));
                    // Best-effort (see the module header).
                    let _ = handle.block_on(store.append_event(
                        &run_id,
                        token,
                        "log",
                        &json!({"stream": stream, "text": text}),
                    ));
                }
            })
        };

        // Cancel, the emergency stop and lease renewal while the workload
        // runs.
        let watcher = self.spawn_run_watcher(cx);

        crate::metrics::COUNTERS
            .sandbox_launches
            .fetch_add(1, Ordering::Relaxed);
        let launcher = self.launcher.clone();
        let controls = Controls {
            cancel: Some(cx.cancel.clone()),
            kill: Some(cx.kill.clone()),
            live_output: Some(tx),
        };
        let launch = staged.launch;
        let launched = tokio::task::spawn_blocking(move || launcher.launch(launch, controls)).await;
        watcher.abort();
        // The sender went with the launch, so the logger ends once it has
        // written what it holds; a logger that panicked lost log lines only.
        let _ = tokio::task::spawn_blocking(move || logger.join()).await;

        let launched = match launched {
            Ok(Ok(l)) => l,
            Ok(Err(f)) => return Err(failure_outcome(f)),
            Err(e) => return Err(Outcome::fail(RunErrorCode::Internal, e.to_string())),
        };
        for n in &launched.notices {
            // Degraded but closed (e.g. every name denied): worth a line in
            // the run's events, not worth failing a run that already ran.
            let _ = self
                .store
                .append_event(
                    &run.id,
                    token,
                    "warning",
                    &json!({"warning": n.code(), "detail": n.to_string()}),
                )
                .await;
        }
        if let Some(s) = &launched.egress {
            use std::sync::atomic::Ordering::Relaxed;
            crate::metrics::COUNTERS
                .egress_allowed
                .fetch_add(s.allowed, Relaxed);
            crate::metrics::COUNTERS
                .egress_denied
                .fetch_add(s.denied, Relaxed);
        }
        Ok(Ran {
            bundle: staged.bundle,
            launched,
        })
    }

    /// Turns a cancel request, the emergency stop (from any node) and a
    /// lease that can no longer be renewed into the run's cancel and kill
    /// flags, every 250 ms, and renews the lease at a third of its length,
    /// until aborted.
    /// A stop made on another node arrives here as the run's cancel kind:
    /// the workload is killed without grace and this node's proxies of the
    /// workspace close too.
    pub(crate) fn spawn_run_watcher(self: &Arc<Self>, cx: &RunCx) -> tokio::task::JoinHandle<()> {
        let svc = self.clone();
        let cancel = cx.cancel.clone();
        let kill = cx.kill.clone();
        let run_id = cx.claim.run.id.clone();
        let workspace = cx.claim.run.workspace_id.clone();
        let token = cx.claim.token;
        // Renewed at a third of the lease, so two renewals can be late
        // before anyone may take the run.
        let renew_every = (svc.cfg.lease / 3).max(Duration::from_millis(250));
        tokio::spawn(async move {
            let mut renewed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                // A failed read is "not yet"; the next tick asks again,
                // and a lease that cannot be renewed stops the workload.
                match svc.store.cancel_kind(&run_id).await {
                    Ok(Some(airlock_store::CANCEL_BY_EMERGENCY_STOP)) => {
                        svc.stop_flag(&workspace).store(true, Ordering::SeqCst);
                        kill.store(true, Ordering::SeqCst);
                        cancel.store(true, Ordering::SeqCst);
                    }
                    Ok(Some(k)) if k != 0 => cancel.store(true, Ordering::SeqCst),
                    _ => {}
                }
                if renewed.elapsed() >= renew_every
                    && svc
                        .store
                        .renew_lease(&run_id, token, svc.cfg.lease)
                        .await
                        .is_err()
                {
                    // Someone else owns the run: stop the workload.
                    cancel.store(true, Ordering::SeqCst);
                } else if renewed.elapsed() >= renew_every {
                    renewed = tokio::time::Instant::now();
                }
            }
        })
    }
}
