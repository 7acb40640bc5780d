//! The action journal of agent runs (DUR-2 for agents): one row per tool
//! call, moving
//!
//! ```text
//! proposed → decided → dispatched → completed | failed | aborted
//!          ↘ awaiting_approval → approved ↗     ↘ outcome_unknown (a crash)
//! ```
//!
//! Every write by the run's executor carries its fencing token and takes
//! the run's row first (the same `UPDATE runs … WHERE fencing_token = $t`
//! the other executor writes use), so a stale executor writes nothing and
//! the writes of one run are serialised: of a hundred concurrent
//! dispatches of one action, one wins. `dispatched` commits before the
//! side effect starts, and consuming the action's approval is part of the
//! same transaction. A run whose executor died with an action dispatched
//! and unrecorded waits for a person (`outcome_unknown`); nothing here
//! ever dispatches it again on its own.
//!
//! Must not: judge an action (the service's policy does) or retry one.

use airlock_protocol::actions::{Action, ActionState, Settlement};
use airlock_protocol::approvals::{Approval, ApprovalKind, ApprovalState};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::approvals::{ApprovalRefusal, NewApproval, canonical_payload};
use crate::ids::random_id;
use crate::store::{AuditRecord, Result, Store, StoreError};

/// Why an action could not move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionRefusal {
    /// The idempotency key names an action with another payload.
    KeyReused,
    /// The action is in another state (the state it is in).
    NotIn(ActionState),
    /// The payload presented is not the action's.
    HashMismatch,
    /// The workspace is under an emergency stop.
    Stopped,
    /// The action's approval cannot be used.
    Approval(ApprovalRefusal),
}

impl std::fmt::Display for ActionRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::KeyReused => {
                f.write_str("the idempotency key names an action with another payload")
            }
            Self::NotIn(s) => write!(f, "the action is {s}"),
            Self::HashMismatch => f.write_str("the payload is not the action's"),
            Self::Stopped => f.write_str("the workspace is under an emergency stop"),
            Self::Approval(r) => write!(f, "approval refused: {r}"),
        }
    }
}

/// What [`Store::propose_action`] recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed {
    pub action: Action,
    /// False when the key named an existing action with the same payload.
    pub created: bool,
}

/// How a dispatched action ended, as its executor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionEnd {
    Completed,
    Failed,
    /// Stopped by airlock while it ran (a cancel, the emergency stop).
    Aborted,
}

impl ActionEnd {
    fn state(self) -> ActionState {
        match self {
            Self::Completed => ActionState::Completed,
            Self::Failed => ActionState::Failed,
            Self::Aborted => ActionState::Aborted,
        }
    }
}

/// A value bound to a `move_action_in` placeholder.
enum Bind {
    Text(Option<String>),
    Int(Option<i64>),
}

/// The run an executor holds, as the fence found it.
struct Fenced {
    workspace: String,
    actor: String,
    worker: String,
}

const ACTION_COLUMNS: &str = "id, workspace_id, run_id, seq, idempotency_key, kind, payload, payload_hash, state, decision, approval_id, grant_id, attempt, result, error, created_at, decided_at, dispatched_at, finished_at, settled_by";

fn json_opt(row: &AnyRow, col: &str) -> Result<Option<Value>> {
    let s: Option<String> = row.try_get(col)?;
    s.map(|s| serde_json::from_str(&s).map_err(|e| StoreError::Db(e.to_string())))
        .transpose()
}

fn action_from_row(row: &AnyRow) -> Result<Action> {
    let state: String = row.try_get("state")?;
    let payload: String = row.try_get("payload")?;
    Ok(Action {
        id: row.try_get("id")?,
        run_id: row.try_get("run_id")?,
        seq: row.try_get("seq")?,
        idempotency_key: row.try_get("idempotency_key")?,
        kind: row.try_get("kind")?,
        payload: serde_json::from_str(&payload).map_err(|e| StoreError::Db(e.to_string()))?,
        payload_hash: row.try_get("payload_hash")?,
        state: ActionState::parse(&state)
            .ok_or_else(|| StoreError::Db(format!("unknown action state {state:?}")))?,
        decision: json_opt(row, "decision")?,
        approval_id: row.try_get("approval_id")?,
        grant_id: row.try_get("grant_id")?,
        attempt: row.try_get("attempt")?,
        result: json_opt(row, "result")?,
        error: json_opt(row, "error")?,
        created_at: row.try_get("created_at")?,
        decided_at: row.try_get("decided_at")?,
        dispatched_at: row.try_get("dispatched_at")?,
        finished_at: row.try_get("finished_at")?,
        settled_by: row.try_get("settled_by")?,
    })
}

/// The `tool_call` event on a run's stream for an action's new state.
fn action_event(a: &Action) -> Value {
    json!({
        "action_id": a.id,
        "seq": a.seq,
        "kind": a.kind,
        "state": a.state.as_str(),
        "payload_hash": a.payload_hash,
        "approval_id": a.approval_id,
        "attempt": a.attempt,
    })
}

fn agent(run_id: &str) -> airlock_audit::chain::Actor {
    airlock_audit::chain::Actor::Agent(format!("agent:{run_id}"))
}

impl Store {
    /// Takes the run's row for an executor write: refused (`StaleToken`)
    /// unless `token` is the run's current fencing token and it is running.
    async fn fence_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
        token: i64,
    ) -> Result<Fenced> {
        let row = sqlx::query(
            "UPDATE runs SET next_event_seq = next_event_seq WHERE id = $1 AND fencing_token = $2 AND state = 'running' \
             RETURNING workspace_id, actor, worker_id",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::StaleToken);
        };
        Ok(Fenced {
            workspace: row.try_get("workspace_id")?,
            actor: row.try_get("actor")?,
            worker: row.try_get("worker_id")?,
        })
    }

    async fn action_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
        action_id: &str,
    ) -> Result<Action> {
        let row = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE run_id = $1 AND id = $2"
        ))
        .bind(run_id)
        .bind(action_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref()
            .map(action_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// Moves an action from one of `from` to `to` inside `tx`, setting the
    /// extra columns; `None` when it was in none of them.
    #[allow(clippy::too_many_arguments)]
    async fn move_action_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        action_id: &str,
        from: &[ActionState],
        to: ActionState,
        set: &str,
        binds: Vec<Bind>,
        now: i64,
    ) -> Result<Option<Action>> {
        let from: Vec<String> = from.iter().map(|s| format!("'{}'", s.as_str())).collect();
        // `set` and the state names are this module's own text, never a
        // caller's; every value is bound.
        let sql = format!(
            "UPDATE actions SET state = $1{set} WHERE id = $2 AND state IN ({}) \
             RETURNING {ACTION_COLUMNS}",
            from.join(", ")
        );
        let mut q = sqlx::query(&sql)
            .bind(to.as_str())
            .bind(action_id)
            .bind(now);
        for b in binds {
            q = match b {
                Bind::Text(v) => q.bind(v),
                Bind::Int(v) => q.bind(v),
            };
        }
        let row = q.fetch_optional(&mut **tx).await?;
        row.as_ref().map(action_from_row).transpose()
    }

    async fn action_recorded_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        a: &Action,
        audit: AuditRecord,
        now: i64,
    ) -> Result<()> {
        self.run_event_in(tx, &a.run_id, "tool_call", &action_event(a), now)
            .await?;
        self.audit_in(
            tx,
            workspace,
            audit
                .with_action(Some(&a.id))
                .with_payload_hash(&a.payload_hash)
                .with_target(&a.kind),
        )
        .await
    }

    /// Records a proposed action under the run's token. The same
    /// idempotency key with the same payload is the same action (a model
    /// response replayed after a crash proposes nothing new); with another
    /// payload it is refused.
    pub async fn propose_action(
        &self,
        run_id: &str,
        token: i64,
        idempotency_key: &str,
        kind: &str,
        payload: &Value,
        now: i64,
    ) -> Result<std::result::Result<Proposed, ActionRefusal>> {
        let (text, hash) = canonical_payload(payload).map_err(StoreError::Db)?;
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        let existing = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE run_id = $1 AND idempotency_key = $2"
        ))
        .bind(run_id)
        .bind(idempotency_key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = existing {
            tx.rollback().await?;
            let action = action_from_row(&row)?;
            if action.payload_hash != hash || action.kind != kind {
                return Ok(Err(ActionRefusal::KeyReused));
            }
            return Ok(Ok(Proposed {
                action,
                created: false,
            }));
        }
        let id = random_id("act");
        let row = sqlx::query(&format!(
            "INSERT INTO actions (id, workspace_id, run_id, seq, idempotency_key, kind, payload, payload_hash, state, created_at) \
             SELECT $1, $2, $3, COALESCE(MAX(seq), 0) + 1, $4, $5, $6, $7, 'proposed', $8 FROM actions WHERE run_id = $3 \
             RETURNING {ACTION_COLUMNS}"
        ))
        .bind(&id)
        .bind(&run.workspace)
        .bind(run_id)
        .bind(idempotency_key)
        .bind(kind)
        .bind(&text)
        .bind(&hash)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let action = action_from_row(&row)?;
        self.action_recorded_in(
            &mut tx,
            &run.workspace,
            &action,
            AuditRecord::system("action.proposed", Some(run_id))
                .with_actor(agent(run_id))
                .with_metadata(json!({"idempotency_key": idempotency_key, "seq": action.seq})),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(Proposed {
            action,
            created: true,
        }))
    }

    /// Records the policy's decision on a proposed action: allowed
    /// (`decided`, ready to dispatch; `grant_id` names the standing rule
    /// that allowed it, if any) or denied (`aborted`, error `denied`).
    #[allow(clippy::too_many_arguments)]
    pub async fn decide_action(
        &self,
        run_id: &str,
        token: i64,
        action_id: &str,
        allow: bool,
        decision: &Value,
        grant_id: Option<&str>,
        now: i64,
    ) -> Result<std::result::Result<Action, ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        let (to, error) = if allow {
            (ActionState::Decided, None)
        } else {
            (
                ActionState::Aborted,
                Some(
                    json!({"code": "denied", "message": "the policy denied the action"})
                        .to_string(),
                ),
            )
        };
        let moved = self
            .move_action_in(
                &mut tx,
                action_id,
                &[ActionState::Proposed],
                to,
                ", decided_at = $3, decision = $4, grant_id = $5, error = $6, finished_at = $7",
                vec![
                    Bind::Text(Some(decision.to_string())),
                    Bind::Text(grant_id.map(str::to_string)),
                    Bind::Text(error),
                    Bind::Int((!allow).then_some(now)),
                ],
                now,
            )
            .await?;
        let Some(a) = moved else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        self.action_recorded_in(
            &mut tx,
            &run.workspace,
            &a,
            AuditRecord::system("action.decided", Some(run_id))
                .with_decision(if allow { "allow" } else { "deny" })
                .with_metadata(json!({"decision": decision, "rule": grant_id})),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(a))
    }

    /// The policy requires a person: the proposed action waits
    /// (`awaiting_approval`) on a new request for exactly its payload, asked
    /// as `agent:<run>`. Refused while the workspace is stopped.
    #[allow(clippy::too_many_arguments)]
    pub async fn request_action_approval(
        &self,
        run_id: &str,
        token: i64,
        action_id: &str,
        decision: &Value,
        reason: Option<String>,
        expires_at: i64,
        now: i64,
    ) -> Result<std::result::Result<(Action, Approval), ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        if self.stopped_in(&mut tx, &run.workspace).await? {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::Stopped));
        }
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        if current.state != ActionState::Proposed {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        }
        let approval = self
            .insert_approval_in(
                &mut tx,
                &run.workspace,
                run_id,
                &run.worker,
                Some(action_id),
                ApprovalKind::Action,
                &run.actor,
                &NewApproval {
                    payload: current.payload.clone(),
                    reason,
                    requested_by: format!("agent:{run_id}"),
                    expires_at,
                    now,
                },
            )
            .await?;
        let Some(a) = self
            .move_action_in(
                &mut tx,
                action_id,
                &[ActionState::Proposed],
                ActionState::AwaitingApproval,
                ", decided_at = $3, decision = $4, approval_id = $5",
                vec![
                    Bind::Text(Some(decision.to_string())),
                    Bind::Text(Some(approval.id.clone())),
                ],
                now,
            )
            .await?
        else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        self.action_recorded_in(
            &mut tx,
            &run.workspace,
            &a,
            AuditRecord::system("action.decided", Some(run_id))
                .with_decision("require_approval")
                .with_metadata(json!({"decision": decision, "approval": approval.id})),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Ok((a, approval)))
    }

    /// The run waits for a person, holding nothing: `running` →
    /// `awaiting_approval`, lease released, if (and only if) one of its
    /// requests is still pending or one of its actions waits to be settled
    /// (`outcome_unknown`). False when neither (they were decided
    /// meanwhile: carry on). A decision or settlement puts the run back in
    /// the queue.
    pub async fn park_for_approval(&self, run_id: &str, token: i64, now: i64) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "UPDATE runs SET state = 'awaiting_approval', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND fencing_token = $2 AND state = 'running' \
             AND (EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = $1 AND a.workspace_id = runs.workspace_id AND a.state = 'pending') \
                  OR EXISTS (SELECT 1 FROM actions x WHERE x.run_id = $1 AND x.workspace_id = runs.workspace_id AND x.state = 'outcome_unknown')) \
             RETURNING workspace_id",
        )
        .bind(run_id)
        .bind(token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            // Not parked: stale, or nothing pending any more.
            let mut check = self.pool.begin().await?;
            self.fence_in(&mut check, run_id, token).await?;
            check.rollback().await?;
            return Ok(false);
        };
        let ws: String = row.try_get("workspace_id")?;
        self.run_event_in(
            &mut tx,
            run_id,
            "status",
            &json!({"state": "awaiting_approval"}),
            now,
        )
        .await?;
        self.audit_in(
            &mut tx,
            &ws,
            AuditRecord::system("run.awaiting_approval", Some(run_id)),
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Dispatches an action, once: under the run's token, with the
    /// workspace not stopped, for exactly the payload recorded, from
    /// `decided` (allowed) or `approved` — consuming the approval in the
    /// same transaction after the same checks as
    /// [`Store::consume_approval`]. `dispatched` commits before the caller
    /// starts the side effect.
    #[allow(clippy::too_many_arguments)]
    pub async fn dispatch_action(
        &self,
        run_id: &str,
        token: i64,
        action_id: &str,
        payload_hash: &str,
        now: i64,
        decider_roles: &[&str],
        operator: &str,
    ) -> Result<std::result::Result<Action, ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        let ws = run.workspace.as_str();
        if self.stopped_in(&mut tx, ws).await? {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::Stopped));
        }
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        if current.payload_hash != payload_hash {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::HashMismatch));
        }
        match (current.state, &current.approval_id) {
            (ActionState::Decided, None) => {}
            (ActionState::Approved, Some(approval)) => {
                let used = self
                    .consume_in(
                        &mut tx,
                        ws,
                        approval,
                        payload_hash,
                        now,
                        decider_roles,
                        operator,
                    )
                    .await?;
                if used.is_none() {
                    tx.rollback().await?;
                    let why = self
                        .approval_refusal_of(ws, approval, now, payload_hash)
                        .await?;
                    return Ok(Err(ActionRefusal::Approval(why)));
                }
            }
            (state, _) => {
                tx.rollback().await?;
                return Ok(Err(ActionRefusal::NotIn(state)));
            }
        }
        let Some(a) = self
            .move_action_in(
                &mut tx,
                action_id,
                &[current.state],
                ActionState::Dispatched,
                ", dispatched_at = $3, attempt = attempt + 1",
                Vec::new(),
                now,
            )
            .await?
        else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        self.action_recorded_in(
            &mut tx,
            ws,
            &a,
            AuditRecord::system("action.dispatched", Some(run_id))
                .with_actor(agent(run_id))
                .with_metadata(
                    json!({"approval": a.approval_id, "rule": a.grant_id, "attempt": a.attempt}),
                ),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(a))
    }

    async fn approval_refusal_of(
        &self,
        workspace: &str,
        approval_id: &str,
        now: i64,
        payload_hash: &str,
    ) -> Result<ApprovalRefusal> {
        let Some(a) = self.get_approval(workspace, approval_id).await? else {
            return Err(StoreError::NotFound);
        };
        Ok(if a.state != ApprovalState::Approved {
            ApprovalRefusal::NotOpen(a.state)
        } else if now >= a.expires_at {
            ApprovalRefusal::Expired
        } else if a.payload_hash != payload_hash {
            ApprovalRefusal::HashMismatch
        } else if self.emergency_stopped(workspace).await? {
            ApprovalRefusal::Stopped
        } else {
            ApprovalRefusal::ApproverLost
        })
    }

    /// Records how a dispatched action ended (its result or error, as
    /// values), under the run's token.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_action(
        &self,
        run_id: &str,
        token: i64,
        action_id: &str,
        end: ActionEnd,
        result: Option<&Value>,
        error: Option<&Value>,
        now: i64,
    ) -> Result<std::result::Result<Action, ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        let Some(a) = self
            .move_action_in(
                &mut tx,
                action_id,
                &[ActionState::Dispatched],
                end.state(),
                ", finished_at = $3, result = $4, error = $5",
                vec![
                    Bind::Text(result.map(Value::to_string)),
                    Bind::Text(error.map(Value::to_string)),
                ],
                now,
            )
            .await?
        else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        self.action_recorded_in(
            &mut tx,
            &run.workspace,
            &a,
            AuditRecord::system(&format!("action.{}", a.state.as_str()), Some(run_id))
                .with_actor(agent(run_id))
                .with_result(a.state.as_str()),
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(a))
    }

    /// Aborts an action that was not dispatched (the run is cancelled, the
    /// budget ran out, the harness gave up on it), under the run's token.
    pub async fn abort_action(
        &self,
        run_id: &str,
        token: i64,
        action_id: &str,
        code: &str,
        message: &str,
        now: i64,
    ) -> Result<std::result::Result<Action, ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        let run = self.fence_in(&mut tx, run_id, token).await?;
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        let Some(a) = self
            .abort_waiting_action_in(&mut tx, &run.workspace, action_id, code, message, now)
            .await?
        else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        if let Some(approval) = &a.approval_id {
            sqlx::query(
                "UPDATE approvals SET state = 'cancelled', decided_at = COALESCE(decided_at, $1) \
                 WHERE id = $2 AND state IN ('pending', 'approved')",
            )
            .bind(now)
            .bind(approval)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Ok(a))
    }

    /// Aborts one action that has not been dispatched, inside `tx`, with
    /// its event and audit record.
    pub(crate) async fn abort_waiting_action_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        action_id: &str,
        code: &str,
        message: &str,
        now: i64,
    ) -> Result<Option<Action>> {
        let error = json!({"code": code, "message": message}).to_string();
        let moved = self
            .move_action_in(
                tx,
                action_id,
                &[
                    ActionState::Proposed,
                    ActionState::Decided,
                    ActionState::AwaitingApproval,
                    ActionState::Approved,
                ],
                ActionState::Aborted,
                ", finished_at = $3, error = $4",
                vec![Bind::Text(Some(error))],
                now,
            )
            .await?;
        if let Some(a) = &moved {
            self.action_recorded_in(
                tx,
                workspace,
                a,
                AuditRecord::system("action.aborted", Some(&a.run_id)).with_result(code),
                now,
            )
            .await?;
        }
        Ok(moved)
    }

    /// Aborts every action of a run (or of the workspace) that was not
    /// dispatched, inside `tx`. Returns how many.
    pub(crate) async fn abort_open_actions_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        run_id: Option<&str>,
        code: &str,
        message: &str,
        now: i64,
    ) -> Result<u64> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM actions WHERE workspace_id = $1 AND ($2 = '' OR run_id = $2) \
             AND state IN ('proposed', 'decided', 'awaiting_approval', 'approved') ORDER BY run_id, seq",
        )
        .bind(workspace)
        .bind(run_id.unwrap_or(""))
        .fetch_all(&mut **tx)
        .await?;
        let mut n = 0;
        for id in ids {
            if self
                .abort_waiting_action_in(tx, workspace, &id, code, message, now)
                .await?
                .is_some()
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// A run's actions, in order.
    pub async fn list_actions(&self, workspace: &str, run_id: &str) -> Result<Vec<Action>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE workspace_id = $1 AND run_id = $2 ORDER BY seq LIMIT 10000"
        ))
        .bind(workspace)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(action_from_row).collect()
    }

    pub async fn get_action(
        &self,
        workspace: &str,
        run_id: &str,
        action_id: &str,
    ) -> Result<Option<Action>> {
        let row = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE workspace_id = $1 AND run_id = $2 AND id = $3"
        ))
        .bind(workspace)
        .bind(run_id)
        .bind(action_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(action_from_row).transpose()
    }

    /// Recovery (the reaper's first pass, and startup's): a run whose
    /// lease expired while one of its actions was dispatched without a
    /// result waits for a person — the run `awaiting_approval` (lease
    /// released), every such action `outcome_unknown`. Never dispatched
    /// again on its own; never reported as aborted. Returns the runs and
    /// their actions.
    pub async fn recover_dispatched(&self, now: i64) -> Result<Vec<(String, Vec<String>)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.workspace_id, r.id FROM runs r JOIN actions a ON a.run_id = r.id AND a.workspace_id = r.workspace_id \
             WHERE r.state = 'running' AND r.lease_expires_at < $1 AND a.state = 'dispatched'",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in rows {
            let ws: String = r.try_get("workspace_id")?;
            let run_id: String = r.try_get("id")?;
            let mut tx = self.pool.begin().await?;
            let n = sqlx::query(
                "UPDATE runs SET state = 'awaiting_approval', lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND state = 'running' AND lease_expires_at < $2",
            )
            .bind(&run_id)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                tx.rollback().await?;
                continue;
            }
            let ids = self
                .dispatched_outcome_unknown_in(&mut tx, &ws, &run_id, now)
                .await?;
            tx.commit().await?;
            out.push((run_id, ids));
        }
        Ok(out)
    }

    /// Inside the transaction that parked `run_id`: every action of it
    /// still `dispatched` becomes `outcome_unknown` (audited), and the run
    /// gets its `awaiting_approval` status event. Shared by recovery and
    /// the SIGTERM drain (DUR-2), so both settle an action the same way.
    pub(crate) async fn dispatched_outcome_unknown_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        ws: &str,
        run_id: &str,
        now: i64,
    ) -> Result<Vec<String>> {
        let rows = sqlx::query(&format!(
            "UPDATE actions SET state = 'outcome_unknown' WHERE run_id = $1 AND state = 'dispatched' \
             RETURNING {ACTION_COLUMNS}"
        ))
        .bind(run_id)
        .fetch_all(&mut **tx)
        .await?;
        let mut ids = Vec::new();
        for row in &rows {
            let a = action_from_row(row)?;
            self.action_recorded_in(
                tx,
                ws,
                &a,
                AuditRecord::system("action.outcome_unknown", Some(run_id))
                    .with_result("outcome_unknown")
                    .with_metadata(json!({"attempt": a.attempt})),
                now,
            )
            .await?;
            ids.push(a.id);
        }
        self.run_event_in(
            tx,
            run_id,
            "status",
            &json!({"state": "awaiting_approval", "outcome_unknown": ids}),
            now,
        )
        .await?;
        Ok(ids)
    }

    /// A person settles an action whose outcome is unknown: it took effect
    /// (`completed`), it did not (`failed`), or it should run again after a
    /// new approval of the same payload (`rerun`: the action waits on
    /// `rerun`'s request). The run resumes once nothing of it waits for a
    /// person.
    #[allow(clippy::too_many_arguments)]
    pub async fn settle_action(
        &self,
        workspace: &str,
        run_id: &str,
        action_id: &str,
        settlement: Settlement,
        by: &str,
        audit_actor: airlock_audit::chain::Actor,
        note: Option<&str>,
        rerun: Option<(String, i64)>,
        now: i64,
    ) -> Result<std::result::Result<Action, ActionRefusal>> {
        let mut tx = self.pool.begin().await?;
        // Take the run's row first (SQLite: the write lock before any read).
        let run = sqlx::query(
            "UPDATE runs SET next_event_seq = next_event_seq WHERE workspace_id = $1 AND id = $2 RETURNING actor, worker_id",
        )
        .bind(workspace)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(run) = run else {
            tx.rollback().await?;
            return Err(StoreError::NotFound);
        };
        let actor: String = run.try_get("actor")?;
        let worker: String = run.try_get("worker_id")?;
        let current = self.action_in(&mut tx, run_id, action_id).await?;
        if current.state != ActionState::OutcomeUnknown {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        }
        let settled = json!({"settled_by": by, "settlement": settlement, "note": note}).to_string();
        let moved = match settlement {
            Settlement::Succeeded | Settlement::Failed => {
                let to = if settlement == Settlement::Succeeded {
                    ActionState::Completed
                } else {
                    ActionState::Failed
                };
                self.move_action_in(
                    &mut tx,
                    action_id,
                    &[ActionState::OutcomeUnknown],
                    to,
                    ", finished_at = $3, settled_by = $4, result = $5",
                    vec![Bind::Text(Some(by.to_string())), Bind::Text(Some(settled))],
                    now,
                )
                .await?
            }
            Settlement::Rerun => {
                let (reason, expires_at) = rerun.unwrap_or_default();
                let approval = self
                    .insert_approval_in(
                        &mut tx,
                        workspace,
                        run_id,
                        &worker,
                        Some(action_id),
                        ApprovalKind::Action,
                        &actor,
                        &NewApproval {
                            payload: current.payload.clone(),
                            reason: Some(reason),
                            requested_by: by.to_string(),
                            expires_at,
                            now,
                        },
                    )
                    .await?;
                self.move_action_in(
                    &mut tx,
                    action_id,
                    &[ActionState::OutcomeUnknown],
                    ActionState::AwaitingApproval,
                    ", decided_at = $3, settled_by = $4, approval_id = $5, result = $6",
                    vec![
                        Bind::Text(Some(by.to_string())),
                        Bind::Text(Some(approval.id)),
                        Bind::Text(Some(settled)),
                    ],
                    now,
                )
                .await?
            }
        };
        let Some(a) = moved else {
            tx.rollback().await?;
            return Ok(Err(ActionRefusal::NotIn(current.state)));
        };
        self.action_recorded_in(
            &mut tx,
            workspace,
            &a,
            AuditRecord::system("action.settled", Some(run_id))
                .with_actor(audit_actor)
                .with_decision(match settlement {
                    Settlement::Succeeded => "succeeded",
                    Settlement::Failed => "failed",
                    Settlement::Rerun => "rerun",
                })
                .with_metadata(json!({"note": note, "approval": a.approval_id})),
            now,
        )
        .await?;
        self.resume_if_settled_in(&mut tx, run_id).await?;
        tx.commit().await?;
        Ok(Ok(a))
    }
}
