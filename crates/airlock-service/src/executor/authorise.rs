//! Stage 1, authorise: may this run start at all? Reads, never writes.
//!
//! In order: the run's creator may still create runs (IAM-6), its worker is
//! loaded in its workspace, the run came from a trigger the worker declares
//! (RUN-6), the worker kind executes, the workspace is not under an
//! emergency stop (AGT-6), and — when the run uses egress or declares
//! secrets — the operator's egress policy can be read and none of the
//! declared secrets is a channel credential (KEY-5). Last, a run that
//! needs an approval (`[approvals] required`, or one was asked for it)
//! consumes it, once, for exactly the payload about to execute (AGT-5).
//!
//! Must not: read a secret value or touch the run's folder. The approval
//! is the one write, and it comes last, so nothing else can refuse the
//! run after its approval is spent here.

use std::path::Path;

use airlock_store::{RunErrorCode, RunRecord, StoreError};
use airlock_worker::{Bundle, TriggerKind};

use super::{Outcome, WORKER_DIR};
use crate::service::Service;

/// A run that may start.
pub(crate) struct Authorised {
    pub(crate) bundle: Bundle,
    pub(crate) argv: Vec<String>,
    /// The operator egress policy's text, read once (the channel check
    /// below and the proxy's policy see the same bytes); `None` when no
    /// policy is configured or this run needs none.
    pub(crate) policy_text: Option<String>,
}

/// Which declared trigger a run's source needs (RUN-6). Every front end
/// that starts a run by hand counts as `manual`; an unknown source needs a
/// trigger no worker can declare, so it never runs.
pub(crate) fn trigger_needed(source: &str) -> Option<TriggerKind> {
    match source {
        "cli" | "api" | "plan" | "ui" | "mcp" => Some(TriggerKind::Manual),
        "schedule" => Some(TriggerKind::Schedule),
        "webhook" => Some(TriggerKind::Webhook),
        _ => None,
    }
}

impl Service {
    pub(crate) async fn authorise(&self, run: &RunRecord) -> Result<Authorised, Outcome> {
        // IAM-6: queued work re-checks its actor's authority when it runs.
        match self.actor_may_run(run).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(Outcome::fail(
                    RunErrorCode::ActorNotAuthorized,
                    "the member who created this run may no longer create runs in this workspace; it did not start",
                ));
            }
            Err(e) => return Err(Outcome::fail(RunErrorCode::Internal, e.to_string())),
        }
        let Some(bundle) = self.worker_in(&run.workspace_id, &run.worker_id) else {
            return Err(Outcome::fail(
                RunErrorCode::WorkerMissing,
                format!("worker {:?} is not loaded", run.worker_id),
            ));
        };
        let m = &bundle.manifest;
        if !trigger_needed(&run.trigger).is_some_and(|k| m.declares_trigger(k)) {
            return Err(Outcome::fail(
                RunErrorCode::TriggerNotDeclared,
                format!(
                    "worker {:?} does not declare a trigger for runs from {:?}; it did not start",
                    run.worker_id, run.trigger
                ),
            ));
        }
        // An agent has no command: the harness runs its loop here, in the
        // trusted process (AGT-1).
        let mut argv = if m.agent().is_some() {
            Vec::new()
        } else {
            match m.command(Path::new(WORKER_DIR)) {
                Ok(a) => a,
                Err(e) => return Err(Outcome::fail(RunErrorCode::Internal, e.to_string())),
            }
        };
        if argv.len() == 1 {
            // A native entry runs from its host path, where the broker
            // resolves and hashes it (it is bound there read-only).
            argv[0] = bundle.entry.display().to_string();
        }
        // AGT-6: nothing of a stopped workspace starts.
        match self.stopped(&run.workspace_id).await {
            Ok(false) => {}
            Ok(true) => {
                return Err(Outcome::fail(
                    RunErrorCode::EmergencyStop,
                    "the workspace's emergency stop; the run did not start",
                ));
            }
            Err(e) => return Err(Outcome::fail(RunErrorCode::Internal, e.to_string())),
        }

        // An agent's model channel lives in the operator's policy too.
        let wants_egress =
            !m.egress.allow.is_empty() || !m.egress.channels.is_empty() || m.agent().is_some();
        let policy_text = match &self.cfg.egress_policy {
            Some(p) if wants_egress || !m.secrets.names.is_empty() => {
                // Unreadable is not empty: an empty list of channel
                // credentials would let the check below pass.
                Some(std::fs::read_to_string(p).map_err(|e| {
                    Outcome::fail(
                        RunErrorCode::EgressPolicyUnreadable,
                        format!("cannot read the egress policy {}: {e}", p.display()),
                    )
                })?)
            }
            _ => None,
        };
        // KEY-5: a channel's credential can never be delivered to a sandbox,
        // whatever a manifest declares.
        if let Some(text) = &policy_text {
            let channel_secrets = crate::secrets::channel_secret_names(text);
            if let Some(n) = m
                .secrets
                .names
                .iter()
                .find(|n| channel_secrets.iter().any(|c| c == n.as_str()))
            {
                return Err(Outcome::fail(
                    RunErrorCode::SecretForbidden,
                    format!(
                        "secret {} is a channel credential and is never delivered to a sandbox",
                        n.as_str()
                    ),
                ));
            }
        }
        self.use_run_approval(run, &bundle).await?;
        Ok(Authorised {
            bundle,
            argv,
            policy_text,
        })
    }

    /// AGT-5 for script runs: a run that needs an approval (its worker
    /// says so, or one was asked for it when it was created) uses it now,
    /// once — refused unless it is approved, unexpired, bound to the hash
    /// of the payload about to execute (worker, input, entry and runtime
    /// digests, limits, egress), its approver still holds
    /// `approvals.decide` and the workspace is not stopped.
    async fn use_run_approval(&self, run: &RunRecord, bundle: &Bundle) -> Result<(), Outcome> {
        let internal = |e: String| Outcome::fail(RunErrorCode::Internal, e);
        let approval = self
            .store
            .run_approval(&run.workspace_id, &run.id)
            .await
            .map_err(|e| internal(e.to_string()))?;
        let Some(a) = approval else {
            if bundle.manifest.approvals.required {
                return Err(Outcome::fail(
                    RunErrorCode::ApprovalInvalid,
                    "the worker requires an approval and this run has none (it was created before the requirement); it did not start",
                ));
            }
            return Ok(());
        };
        let payload = Self::plan_body(bundle, &run.input);
        let (_, hash) = airlock_store::canonical_payload(&payload).map_err(internal)?;
        let used = self
            .store
            .consume_approval(
                &run.workspace_id,
                &a.id,
                &hash,
                self.now(),
                &crate::approvals::decider_roles(),
                crate::caller::OPERATOR,
            )
            .await
            .map_err(|e| internal(e.to_string()))?;
        let why = match used {
            Ok(_) => return Ok(()),
            Err(why) => why,
        };
        // Best effort: the refusal is also in the run's terminal record.
        let _ = self.store.audit_approval_refused(&a, why, self.now()).await;
        use airlock_store::ApprovalRefusal as R;
        let (code, msg) = match why {
            R::Expired => (
                RunErrorCode::ApprovalExpired,
                "the approval expired before the run was claimed".to_string(),
            ),
            R::Stopped => (
                RunErrorCode::EmergencyStop,
                "the workspace's emergency stop; the run did not start".to_string(),
            ),
            R::HashMismatch => (
                RunErrorCode::ApprovalInvalid,
                "the worker changed since the approval: the payload about to execute is not the approved one".to_string(),
            ),
            R::ApproverLost => (
                RunErrorCode::ApprovalInvalid,
                "the approver no longer holds approvals.decide".to_string(),
            ),
            R::NotOpen(s) => (
                RunErrorCode::ApprovalInvalid,
                format!("the run's approval is {s}, not approved and unused"),
            ),
        };
        Err(Outcome::fail(code, format!("{msg}; it did not start")))
    }

    /// A run created by a user (`usr_…`) starts only if that user is still
    /// a member whose role permits `runs.create`. Local operator actors
    /// (the CLI on the server's own files, the system) are not members.
    pub(crate) async fn actor_may_run(&self, run: &RunRecord) -> Result<bool, StoreError> {
        if !run.actor.starts_with("usr_") {
            return Ok(true);
        }
        let Some(m) = self.store.membership(&run.workspace_id, &run.actor).await? else {
            return Ok(false);
        };
        Ok(airlock_iam::Role::parse(&m.role)
            .is_some_and(|r| r.permits(airlock_iam::Permission::RunsCreate)))
    }
}
