//! The action journal as the agent harness uses it (DUR-2 for agents,
//! AGT-4, AGT-5), and as people read and settle it.
//!
//! The harness records every tool call before acting on it:
//!
//! ```text
//! propose_action        → proposed (same idempotency key: same action)
//! decide_action(verdict)→ Ready (decided) | Denied (aborted) | AwaitingApproval
//!   RequireApproval: a live standing rule that covers it → Ready (audited
//!   with the rule); else a request for a person, bound to the payload hash
//! park_for_approval     → the run waits holding nothing; a decision requeues it
//! dispatch_action       → DispatchTicket, after `dispatched` is committed
//! complete_action(ticket, end, result)
//! ```
//!
//! [`DispatchTicket`] is the only way to report a side effect, and only
//! [`Service::dispatch_action`] makes one — after the store committed
//! `dispatched` under the run's fencing token, with the emergency stop,
//! the payload hash and (for an approved action) the approval's expiry and
//! approver re-checked and the approval consumed in the same transaction.
//! Its fields are private to this module, so no other code in this crate
//! can forge one: code that starts a side effect should take the ticket by
//! value. An action found `dispatched` after a crash becomes
//! `outcome_unknown` ([`Service::reap_once`]); a person settles it with
//! [`Service::settle_action`].
//!
//! Must not: contain SQL; decide policy (the harness's policy hands in a
//! [`Verdict`]); retry anything.

use std::time::Duration;

use airlock_iam::Permission;
use airlock_protocol::actions::{Action, ActionList, SettleAction, Settlement};
use airlock_protocol::approvals::Approval;
use airlock_protocol::runs::Run;
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{ActionEnd, ActionRefusal, StoreError};
use serde_json::{Value, json};

use crate::approvals::{decider_roles, payload_argv, refusal_error};
use crate::caller::{Caller, OPERATOR};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// What the harness's policy decided about a proposed action (a value;
/// "no rule matched" is `RequireApproval`).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Allowed by policy; `detail` (rule, autonomy, risk class, policy
    /// version …) is recorded with the decision.
    Allow { detail: Value },
    /// Denied; the action is `aborted` with `denied`.
    Deny { detail: Value },
    /// A person decides, unless a live standing rule covers the action.
    /// `reason` is shown to the approver (what the agent said, which
    /// content tainted its context); the request expires after `ttl`.
    RequireApproval {
        detail: Value,
        reason: String,
        ttl: Duration,
    },
}

/// Where a decided action stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// `decided`: dispatch it.
    Ready(Action),
    /// `aborted` with `denied`: tell the model.
    Denied(Action),
    /// `awaiting_approval` on this request: park the run.
    AwaitingApproval(Action, Box<Approval>),
}

/// Proof that an action's `dispatched` state is committed: the only way to
/// report its outcome. Made only by [`Service::dispatch_action`]; not
/// `Clone`, consumed by [`Service::complete_action`].
#[derive(Debug)]
pub struct DispatchTicket {
    action: Action,
    run_id: String,
    token: i64,
}

impl DispatchTicket {
    /// The action as dispatched (state `dispatched`, its attempt number).
    pub fn action(&self) -> &Action {
        &self.action
    }

    /// Exactly what was approved or allowed, to execute as is.
    pub fn payload(&self) -> &Value {
        &self.action.payload
    }

    /// Pass to anything outside that honours one: a retry of the same
    /// action is then recognisable.
    pub fn idempotency_key(&self) -> &str {
        &self.action.idempotency_key
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// The error for a journal move that could not happen.
fn action_error(r: ActionRefusal) -> Error {
    match r {
        ActionRefusal::KeyReused => Error::new(
            ErrorCode::IdempotencyConflict,
            "the idempotency key names an action with another payload",
        ),
        ActionRefusal::NotIn(s) => Error::new(
            ErrorCode::Conflict,
            format!("the action is {s}; it cannot make that move"),
        ),
        ActionRefusal::HashMismatch => Error::new(
            ErrorCode::ApprovalHashMismatch,
            "the payload is not the action's (one field changed)",
        ),
        ActionRefusal::Stopped => crate::emergency::stopped_error(),
        ActionRefusal::Approval(a) => refusal_error(a),
    }
}

/// A store failure of an executor write: a stale token says someone else
/// holds the run now.
fn fenced(e: StoreError) -> Error {
    match e {
        StoreError::StaleToken => Error::new(
            ErrorCode::Conflict,
            "the run is no longer held with this token (claimed again, parked or ended)",
        ),
        other => crate::error::store(other),
    }
}

impl Service {
    /// Records a proposed action of a run this executor holds (`run` is
    /// the claimed run, `token` its fencing token). The same idempotency
    /// key with the same payload returns the same action.
    pub async fn propose_action(
        &self,
        run: &Run,
        token: i64,
        idempotency_key: &str,
        kind: &str,
        payload: &Value,
    ) -> Result<(Action, bool)> {
        if idempotency_key.is_empty() || idempotency_key.len() > 255 {
            return Err(Error::invalid_body(
                "an action's idempotency key is 1 to 255 characters",
            ));
        }
        airlock_store::canonical_payload(payload).map_err(Error::invalid_body)?;
        let p = self
            .store
            .propose_action(&run.id, token, idempotency_key, kind, payload, self.now())
            .await
            .map_err(fenced)?
            .map_err(action_error)?;
        Ok((p.action, p.created))
    }

    /// Records the policy's verdict on a proposed action. For
    /// `RequireApproval`, a live standing rule of the run's worker that
    /// covers it (exactly this payload in this run, or an argv prefix for
    /// `run_command`) allows it without a new request; the rule's id is
    /// recorded and audited. A standing rule is a person's explicit rule,
    /// so it applies in a tainted context too (AGT-4: "unless a rule
    /// explicitly allows them"); its narrowness is what bounds it.
    pub async fn decide_action(
        &self,
        run: &Run,
        token: i64,
        action_id: &str,
        verdict: Verdict,
    ) -> Result<Decided> {
        let now = self.now();
        let (allow, detail, ask) = match verdict {
            Verdict::Allow { detail } => {
                (true, json!({"verdict": "allow", "detail": detail}), None)
            }
            Verdict::Deny { detail } => (false, json!({"verdict": "deny", "detail": detail}), None),
            Verdict::RequireApproval {
                detail,
                reason,
                ttl,
            } => (
                false,
                json!({"verdict": "require_approval", "detail": detail}),
                Some((reason, ttl)),
            ),
        };
        let Some((reason, ttl)) = ask else {
            let a = self
                .store
                .decide_action(&run.id, token, action_id, allow, &detail, None, now)
                .await
                .map_err(fenced)?
                .map_err(action_error)?;
            return Ok(if allow {
                Decided::Ready(a)
            } else {
                Decided::Denied(a)
            });
        };
        let action = self
            .store
            .get_action(&run.workspace_id, &run.id, action_id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)?;
        if let Some(rule) = self.covering_rule(run, &action).await? {
            let detail = json!({"verdict": "allow_by_rule", "rule": rule, "detail": detail});
            let a = self
                .store
                .decide_action(&run.id, token, action_id, true, &detail, Some(&rule), now)
                .await
                .map_err(fenced)?
                .map_err(action_error)?;
            return Ok(Decided::Ready(a));
        }
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let (a, approval) = self
            .store
            .request_action_approval(
                &run.id,
                token,
                action_id,
                &detail,
                Some(reason),
                now.saturating_add(ttl_ms),
                now,
            )
            .await
            .map_err(fenced)?
            .map_err(action_error)?;
        Ok(Decided::AwaitingApproval(a, Box::new(approval)))
    }

    /// The live standing rule that covers `action`, if any.
    async fn covering_rule(&self, run: &Run, action: &Action) -> Result<Option<String>> {
        let rules = self
            .store
            .live_rules(&run.workspace_id, &run.worker_id, &run.id)
            .await
            .svc()?;
        for r in &rules {
            match r.kind {
                airlock_protocol::approvals::RuleKind::Payload => {
                    if r.run_id.as_deref() == Some(run.id.as_str())
                        && r.payload_hash.as_deref() == Some(action.payload_hash.as_str())
                    {
                        return Ok(Some(r.id.clone()));
                    }
                }
                airlock_protocol::approvals::RuleKind::ArgvPrefix => {
                    let (Some(prefix), Some(argv)) =
                        (&r.argv_prefix, payload_argv(&action.payload))
                    else {
                        continue;
                    };
                    if action.kind == "run_command"
                        && airlock_agent::grant_rules::argv_covered(
                            &argv,
                            std::slice::from_ref(prefix),
                        )
                    {
                        return Ok(Some(r.id.clone()));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The run waits for a person, holding nothing, if one of its requests
    /// is still pending (true); false when none is — carry on. After a
    /// decision the run is queued again and claimed with a new token.
    pub async fn park_for_approval(&self, run: &Run, token: i64) -> Result<bool> {
        self.store
            .park_for_approval(&run.id, token, self.now())
            .await
            .map_err(fenced)
    }

    /// Dispatches an action once: `dispatched` is committed (and an
    /// approval consumed) before this returns the ticket that lets the
    /// side effect start. `payload` must be exactly the recorded one.
    pub async fn dispatch_action(
        &self,
        run: &Run,
        token: i64,
        action_id: &str,
        payload: &Value,
    ) -> Result<DispatchTicket> {
        let (_, hash) = airlock_store::canonical_payload(payload).map_err(Error::invalid_body)?;
        let roles = decider_roles();
        let action = self
            .store
            .dispatch_action(
                &run.id,
                token,
                action_id,
                &hash,
                self.now(),
                &roles,
                OPERATOR,
            )
            .await
            .map_err(fenced)?
            .map_err(action_error)?;
        Ok(DispatchTicket {
            action,
            run_id: run.id.clone(),
            token,
        })
    }

    /// Records how a dispatched action ended, consuming its ticket.
    pub async fn complete_action(
        &self,
        ticket: DispatchTicket,
        end: ActionEnd,
        result: Option<&Value>,
        error: Option<&Value>,
    ) -> Result<Action> {
        self.store
            .finish_action(
                &ticket.run_id,
                ticket.token,
                &ticket.action.id,
                end,
                result,
                error,
                self.now(),
            )
            .await
            .map_err(fenced)?
            .map_err(action_error)
    }

    /// Aborts an action that was not dispatched (`code` says why: a
    /// budget, a cancel, the model gave up on it).
    pub async fn abort_action(
        &self,
        run: &Run,
        token: i64,
        action_id: &str,
        code: &str,
        message: &str,
    ) -> Result<Action> {
        self.store
            .abort_action(&run.id, token, action_id, code, message, self.now())
            .await
            .map_err(fenced)?
            .map_err(action_error)
    }

    /// A run's actions, in order.
    pub async fn list_actions(&self, c: &Caller, run_id: &str) -> Result<ActionList> {
        c.require(Permission::RunsRead)?;
        self.run_in(&c.workspace, run_id).await?;
        Ok(ActionList {
            actions: self.store.list_actions(&c.workspace, run_id).await.svc()?,
        })
    }

    /// A person settles an action whose outcome is unknown: it succeeded,
    /// it failed, or it runs again after a new approval of the same
    /// payload (which expires after `ttl`). The run resumes once nothing
    /// of it waits for a person.
    pub async fn settle_action(
        &self,
        c: &Caller,
        run_id: &str,
        action_id: &str,
        b: &SettleAction,
    ) -> Result<Action> {
        c.require(Permission::ApprovalsDecide)?;
        if let Some(n) = &b.note
            && (n.chars().count() > airlock_protocol::approvals::MAX_NOTE_CHARS
                || n.chars()
                    .any(|ch| ch.is_control() && ch != '\n' && ch != '\t'))
        {
            return Err(Error::invalid_body(
                "note is at most 1000 characters without control characters",
            ));
        }
        let now = self.now();
        let rerun = (b.outcome == Settlement::Rerun).then(|| {
            (
                "re-run an action whose outcome is unknown".to_string(),
                now.saturating_add(RERUN_APPROVAL_TTL_MS),
            )
        });
        let a = self
            .store
            .settle_action(
                &c.workspace,
                run_id,
                action_id,
                b.outcome,
                c.actor_id(),
                c.audit_actor(),
                b.note.as_deref(),
                rerun,
                now,
            )
            .await
            .svc()?
            .map_err(action_error)?;
        self.wake.notify_one();
        Ok(a)
    }
}

/// How long a person has to approve the re-run they asked for: a day.
const RERUN_APPROVAL_TTL_MS: i64 = 86_400_000;
