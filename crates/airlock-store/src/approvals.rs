//! Approvals (AGT-5): requests bound to the SHA-256 of the RFC 8785
//! canonical JSON of a payload, decided once and used once; the standing
//! rules a decision may create; the workspace's approval settings.
//!
//! Every change is one guarded `UPDATE … WHERE state = …` whose row count
//! says who won: two deciders racing, or a hundred consumers of one
//! approval, leave exactly one winner on both backends. The effect of a
//! decision on its run (queued again, or ended) and on its action, the
//! run's `approval` event and the audit event commit in the same
//! transaction. Times are passed in by the caller (Unix milliseconds) so
//! tests control the clock; an approval is valid strictly before its
//! `expires_at`.
//!
//! Must not: decide who may approve (the service does, and passes the roles
//! that hold `approvals.decide` for the atomic re-check at use).

use airlock_protocol::approvals::{
    Approval, ApprovalKind, ApprovalRule, ApprovalSettings, ApprovalState, Grant, RuleKind,
};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::ids::{random_id, sha256_hex};
use crate::runs::{Created, NewRun};
use crate::store::{AuditRecord, Backend, Result, Store, StoreError};
use crate::{RunErrorCode, RunState};

/// The largest canonical payload an approval or action holds.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 10;

/// The canonical text of a payload (RFC 8785) and its lowercase hex
/// SHA-256: what an approval binds and an action records.
pub fn canonical_payload(v: &Value) -> std::result::Result<(String, String), String> {
    if !v.is_object() {
        return Err("a payload is a JSON object".into());
    }
    let bytes = airlock_audit::canonicalize(v).map_err(|e| e.to_string())?;
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "the canonical payload is {} bytes; at most {MAX_PAYLOAD_BYTES}",
            bytes.len()
        ));
    }
    let hash = sha256_hex(&bytes);
    let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
    Ok((text, hash))
}

/// Why an approval could not be decided or used. A missing approval (or
/// another workspace's) is [`StoreError::NotFound`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalRefusal {
    /// Decided, used, expired or cancelled already (the state it is in).
    NotOpen(ApprovalState),
    /// At or after `expires_at`.
    Expired,
    /// The payload presented is not the approved one.
    HashMismatch,
    /// The workspace is under an emergency stop.
    Stopped,
    /// The approver no longer holds `approvals.decide` in the workspace.
    ApproverLost,
}

impl std::fmt::Display for ApprovalRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotOpen(s) => write!(f, "the approval is {s}"),
            Self::Expired => f.write_str("the approval expired"),
            Self::HashMismatch => f.write_str("the payload is not the approved one"),
            Self::Stopped => f.write_str("the workspace is under an emergency stop"),
            Self::ApproverLost => f.write_str("the approver no longer holds approvals.decide"),
        }
    }
}

/// What a person decided.
#[derive(Debug, Clone)]
pub struct Decision {
    pub approve: bool,
    /// The decider's actor id (a user id, or `cli` for the operator).
    pub by: String,
    pub audit_actor: airlock_audit::chain::Actor,
    pub note: Option<String>,
    /// How far an approval reaches (ignored for a rejection).
    pub grant: Grant,
    /// The prefix of an `argv_prefix` grant, already checked.
    pub argv_prefix: Option<Vec<String>>,
    /// When given, the decision is refused unless it is the request's hash.
    pub expected_hash: Option<String>,
    pub now: i64,
}

/// A new approval request (the store assigns id, state and hash).
#[derive(Debug, Clone)]
pub struct NewApproval {
    pub payload: Value,
    pub reason: Option<String>,
    pub requested_by: String,
    pub expires_at: i64,
    pub now: i64,
}

pub(crate) const APPROVAL_COLUMNS: &str = "id, workspace_id, run_id, worker_id, action_id, kind, payload, payload_hash, requested_by, run_actor, reason, state, created_at, expires_at, decided_by, decided_at, note, grant_kind, grant_id, consumed_at";

pub(crate) fn approval_from_row(row: &AnyRow) -> Result<Approval> {
    let bad = |what: &str, v: &str| StoreError::Db(format!("unknown approval {what} {v:?}"));
    let kind: String = row.try_get("kind")?;
    let state: String = row.try_get("state")?;
    let grant: Option<String> = row.try_get("grant_kind")?;
    let payload: String = row.try_get("payload")?;
    Ok(Approval {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        run_id: row.try_get("run_id")?,
        worker_id: row.try_get("worker_id")?,
        action_id: row.try_get("action_id")?,
        kind: ApprovalKind::parse(&kind).ok_or_else(|| bad("kind", &kind))?,
        payload: serde_json::from_str(&payload).map_err(|e| StoreError::Db(e.to_string()))?,
        payload_hash: row.try_get("payload_hash")?,
        requested_by: row.try_get("requested_by")?,
        run_actor: row.try_get("run_actor")?,
        reason: row.try_get("reason")?,
        state: ApprovalState::parse(&state).ok_or_else(|| bad("state", &state))?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        decided_by: row.try_get("decided_by")?,
        decided_at: row.try_get("decided_at")?,
        note: row.try_get("note")?,
        grant: match grant {
            None => None,
            Some(g) => Some(Grant::parse(&g).ok_or_else(|| bad("grant", &g))?),
        },
        grant_id: row.try_get("grant_id")?,
        consumed_at: row.try_get("consumed_at")?,
    })
}

const RULE_COLUMNS: &str = "id, workspace_id, kind, worker_id, run_id, payload_hash, argv_prefix, source_approval, created_by, created_at, revoked_at, revoked_by";

fn rule_from_row(row: &AnyRow) -> Result<ApprovalRule> {
    let kind: String = row.try_get("kind")?;
    let prefix: Option<String> = row.try_get("argv_prefix")?;
    Ok(ApprovalRule {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        kind: RuleKind::parse(&kind)
            .ok_or_else(|| StoreError::Db(format!("unknown rule kind {kind:?}")))?,
        worker_id: row.try_get("worker_id")?,
        run_id: row.try_get("run_id")?,
        payload_hash: row.try_get("payload_hash")?,
        argv_prefix: match prefix {
            None => None,
            Some(p) => Some(serde_json::from_str(&p).map_err(|e| StoreError::Db(e.to_string()))?),
        },
        source_approval: row.try_get("source_approval")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        revoked_by: row.try_get("revoked_by")?,
    })
}

impl AuditRecord {
    /// The agent action an event is about.
    pub fn with_action(mut self, action_id: Option<&str>) -> Self {
        self.action_id = action_id.map(str::to_string);
        self
    }
    /// The payload hash an event is bound to.
    pub fn with_payload_hash(mut self, hash: &str) -> Self {
        self.payload_hash = Some(hash.to_string());
        self
    }
    /// The decision an event records (policy verdict, approve/reject).
    pub fn with_decision(mut self, decision: &str) -> Self {
        self.decision = Some(decision.to_string());
        self
    }
    /// What the event acts on.
    pub fn with_target(mut self, target: &str) -> Self {
        self.target = Some(target.to_string());
        self
    }
}

/// The SQL that reads a JSON array of strings bound as one parameter.
pub(crate) fn json_strings(backend: Backend, param: &str) -> String {
    match backend {
        Backend::Postgres => format!("(SELECT json_array_elements_text({param}::json))"),
        Backend::Sqlite => format!("(SELECT value FROM json_each({param}))"),
    }
}

impl Store {
    /// Appends an event to a run's stream inside `tx`, whatever the run's
    /// state and without a fencing token: the store's own records
    /// (approvals requested and decided, actions) on a run the caller
    /// already found in its workspace (by its primary key, as the
    /// executor's writes do).
    pub(crate) async fn run_event_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
        kind: &str,
        data: &Value,
        now: i64,
    ) -> Result<()> {
        let row = sqlx::query(
            "UPDATE runs SET next_event_seq = next_event_seq + 1 WHERE id = $1 \
             RETURNING next_event_seq - 1 AS seq, workspace_id",
        )
        .bind(run_id)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound);
        };
        let seq: i64 = row.try_get("seq")?;
        let workspace: String = row.try_get("workspace_id")?;
        sqlx::query("INSERT INTO run_events (workspace_id, run_id, seq, at, kind, data) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(&workspace)
            .bind(run_id)
            .bind(seq)
            .bind(now)
            .bind(kind)
            .bind(data.to_string())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Inserts a pending approval inside `tx`, with its `approval` event
    /// and audit event.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_approval_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        run_id: &str,
        worker_id: &str,
        action_id: Option<&str>,
        kind: ApprovalKind,
        run_actor: &str,
        req: &NewApproval,
    ) -> Result<Approval> {
        let (payload, hash) = canonical_payload(&req.payload).map_err(StoreError::Db)?;
        let id = random_id("apr");
        let row = sqlx::query(&format!(
            "INSERT INTO approvals (id, workspace_id, run_id, worker_id, action_id, kind, payload, payload_hash, requested_by, run_actor, reason, state, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending', $12, $13) RETURNING {APPROVAL_COLUMNS}"
        ))
        .bind(&id)
        .bind(workspace)
        .bind(run_id)
        .bind(worker_id)
        .bind(action_id)
        .bind(kind.as_str())
        .bind(&payload)
        .bind(&hash)
        .bind(&req.requested_by)
        .bind(run_actor)
        .bind(&req.reason)
        .bind(req.now)
        .bind(req.expires_at)
        .fetch_one(&mut **tx)
        .await?;
        let approval = approval_from_row(&row)?;
        self.run_event_in(tx, run_id, "approval", &approval_event(&approval), req.now)
            .await?;
        let actor = if kind == ApprovalKind::Action {
            airlock_audit::chain::Actor::Agent(req.requested_by.clone())
        } else {
            airlock_audit::chain::Actor::Human(req.requested_by.clone())
        };
        self.audit_in(
            tx,
            workspace,
            AuditRecord::system("approval.requested", Some(run_id))
                .with_actor(actor)
                .with_target(&id)
                .with_action(action_id)
                .with_payload_hash(&hash)
                .with_metadata(
                    json!({"approval": id, "kind": kind.as_str(), "expires_at": req.expires_at}),
                ),
        )
        .await?;
        Ok(approval)
    }

    /// Creates a run that waits for a person (`[approvals] required`): the
    /// run in `awaiting_approval` and its approval request commit together,
    /// so no executor can claim the run before the request exists. An
    /// idempotency key behaves as for [`Store::create_run`] (the original
    /// run, or a conflict).
    // The shape of `create_run`, kept apart while the store is split into
    // per-resource files; fold the two together afterwards.
    pub async fn create_run_awaiting_approval(
        &self,
        new: NewRun,
        req: NewApproval,
    ) -> Result<(Created, Option<Approval>)> {
        let input_text =
            serde_json::to_string(&new.input).map_err(|e| StoreError::Db(e.to_string()))?;
        let input_hash = sha256_hex(input_text.as_bytes());
        let id = random_id("run");
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO runs (id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, plan_id, created_at) \
             VALUES ($1, $2, $3, 'awaiting_approval', $4, $5, $6, $7, $8, $9)",
        )
        .bind(&id)
        .bind(&new.workspace_id)
        .bind(&new.worker_id)
        .bind(&input_text)
        .bind(&input_hash)
        .bind(&new.trigger)
        .bind(&new.actor)
        .bind(&new.plan_id)
        .bind(req.now)
        .execute(&mut *tx)
        .await?;
        if let Some((key, request_hash)) = &new.idempotency {
            let inserted = sqlx::query(
                "INSERT INTO idempotency_keys (workspace_id, actor, key, request_hash, run_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (workspace_id, actor, key) DO NOTHING",
            )
            .bind(&new.workspace_id)
            .bind(&new.actor)
            .bind(key)
            .bind(request_hash)
            .bind(&id)
            .bind(req.now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                tx.rollback().await?;
                let run = self.replayed_run(&new, key, request_hash).await?;
                let run_id = run.id.clone();
                let approval = self.run_approval(&new.workspace_id, &run_id).await?;
                return Ok((
                    Created {
                        run,
                        created: false,
                    },
                    approval,
                ));
            }
        }
        self.audit_in(
            &mut tx,
            &new.workspace_id,
            AuditRecord::system("run.created", Some(&id))
                .with_actor(airlock_audit::chain::Actor::Human(new.actor.clone()))
                .with_metadata(json!({"worker": new.worker_id, "trigger": new.trigger, "input_hash": input_hash, "awaiting_approval": true})),
        )
        .await?;
        let approval = self
            .insert_approval_in(
                &mut tx,
                &new.workspace_id,
                &id,
                &new.worker_id,
                None,
                ApprovalKind::Run,
                &new.actor,
                &req,
            )
            .await?;
        tx.commit().await?;
        let run = self
            .get_run(&new.workspace_id, &id)
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok((Created { run, created: true }, Some(approval)))
    }

    pub async fn get_approval(&self, workspace: &str, id: &str) -> Result<Option<Approval>> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    /// The newest approval request of a run for the run itself (`kind = run`).
    pub async fn run_approval(&self, workspace: &str, run_id: &str) -> Result<Option<Approval>> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE workspace_id = $1 AND run_id = $2 AND kind = 'run' \
             ORDER BY created_at DESC, id DESC LIMIT 1"
        ))
        .bind(workspace)
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    /// Newest first; `before` is a cursor (the last id of the previous page).
    pub async fn list_approvals(
        &self,
        workspace: &str,
        state: Option<ApprovalState>,
        run_id: Option<&str>,
        limit: i64,
        before: Option<&str>,
    ) -> Result<Vec<Approval>> {
        let limit = limit.clamp(1, 500);
        let cursor = match before {
            Some(id) => sqlx::query_scalar::<_, i64>(
                "SELECT created_at FROM approvals WHERE workspace_id = $1 AND id = $2",
            )
            .bind(workspace)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .map(|t| (t, id.to_string())),
            None => None,
        };
        let (t, cid) = cursor.unwrap_or((i64::MAX, String::new()));
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE workspace_id = $1 AND ($2 = '' OR state = $2) \
             AND ($3 = '' OR run_id = $3) \
             AND (created_at < $4 OR (created_at = $4 AND id < $5) OR $5 = '') \
             ORDER BY created_at DESC, id DESC LIMIT $6"
        ))
        .bind(workspace)
        .bind(state.map(ApprovalState::as_str).unwrap_or(""))
        .bind(run_id.unwrap_or(""))
        .bind(t)
        .bind(&cid)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    /// Why a guarded change of approval `id` matched no row.
    async fn approval_refusal(
        &self,
        workspace: &str,
        id: &str,
        now: i64,
        want: ApprovalState,
        hash: Option<&str>,
    ) -> Result<ApprovalRefusal> {
        let Some(a) = self.get_approval(workspace, id).await? else {
            return Err(StoreError::NotFound);
        };
        Ok(if a.state != want {
            ApprovalRefusal::NotOpen(a.state)
        } else if now >= a.expires_at {
            ApprovalRefusal::Expired
        } else if hash.is_some_and(|h| h != a.payload_hash) {
            ApprovalRefusal::HashMismatch
        } else if self.emergency_stopped(workspace).await? {
            ApprovalRefusal::Stopped
        } else {
            ApprovalRefusal::ApproverLost
        })
    }

    /// Decides a pending approval: exactly one of any number of racing
    /// decisions wins; a decided, expired or cancelled one is refused. An
    /// approved run request queues its run; a rejected one ends it
    /// `blocked` (`approval_rejected`). An approved action request makes its
    /// action `approved`, a rejected one `aborted`, and the run resumes
    /// once none of its requests is pending. A grant beyond `once` creates
    /// its rule in the same transaction.
    pub async fn decide_approval(
        &self,
        workspace: &str,
        id: &str,
        d: &Decision,
    ) -> Result<std::result::Result<Approval, ApprovalRefusal>> {
        let new_state = if d.approve {
            ApprovalState::Approved
        } else {
            ApprovalState::Rejected
        };
        let grant = d.approve.then_some(d.grant);
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE approvals SET state = $1, decided_by = $2, decided_at = $3, note = $4, grant_kind = $5 \
             WHERE workspace_id = $6 AND id = $7 AND state = 'pending' AND expires_at > $3 \
             AND ($8 = '' OR payload_hash = $8) RETURNING {APPROVAL_COLUMNS}"
        ))
        .bind(new_state.as_str())
        .bind(&d.by)
        .bind(d.now)
        .bind(&d.note)
        .bind(grant.map(Grant::as_str))
        .bind(workspace)
        .bind(id)
        .bind(d.expected_hash.as_deref().unwrap_or(""))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let why = self
                .approval_refusal(
                    workspace,
                    id,
                    d.now,
                    ApprovalState::Pending,
                    d.expected_hash.as_deref(),
                )
                .await?;
            return Ok(Err(why));
        };
        let mut a = approval_from_row(&row)?;
        // A standing grant, when one was asked for.
        if let Some(kind) = match grant {
            Some(Grant::Payload) => Some(RuleKind::Payload),
            Some(Grant::ArgvPrefix) => Some(RuleKind::ArgvPrefix),
            _ => None,
        } {
            let rule_id = random_id("rul");
            let prefix = d
                .argv_prefix
                .as_ref()
                .map(|p| serde_json::to_string(p).unwrap_or_default());
            let (run_id, hash) = match kind {
                RuleKind::Payload => (Some(a.run_id.as_str()), Some(a.payload_hash.as_str())),
                RuleKind::ArgvPrefix => (None, None),
            };
            sqlx::query(
                "INSERT INTO approval_rules (id, workspace_id, kind, worker_id, run_id, payload_hash, argv_prefix, source_approval, created_by, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(&rule_id)
            .bind(workspace)
            .bind(kind.as_str())
            .bind(&a.worker_id)
            .bind(run_id)
            .bind(hash)
            .bind(&prefix)
            .bind(&a.id)
            .bind(&d.by)
            .bind(d.now)
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE approvals SET grant_id = $1 WHERE id = $2")
                .bind(&rule_id)
                .bind(&a.id)
                .execute(&mut *tx)
                .await?;
            self.audit_in(
                &mut tx,
                workspace,
                AuditRecord::system("approval_rule.created", Some(&a.run_id))
                    .with_actor(d.audit_actor.clone())
                    .with_target(&rule_id)
                    .with_payload_hash(&a.payload_hash)
                    .with_metadata(json!({"rule": rule_id, "kind": kind.as_str(), "worker": a.worker_id, "argv_prefix": d.argv_prefix, "approval": a.id})),
            )
            .await?;
            a.grant_id = Some(rule_id);
        }
        match (a.kind, d.approve) {
            (ApprovalKind::Run, true) => {
                sqlx::query(
                    "UPDATE runs SET state = 'queued' WHERE id = $1 AND state = 'awaiting_approval'",
                )
                .bind(&a.run_id)
                .execute(&mut *tx)
                .await?;
                self.notify_queued(&mut tx, &a.run_id).await?;
            }
            (ApprovalKind::Run, false) => {
                self.end_waiting_run_in(
                    &mut tx,
                    workspace,
                    &a.run_id,
                    RunErrorCode::ApprovalRejected,
                    d.now,
                )
                .await?;
            }
            (ApprovalKind::Action, approve) => {
                if let Some(action) = &a.action_id {
                    if approve {
                        sqlx::query(
                            "UPDATE actions SET state = 'approved' WHERE id = $1 AND state = 'awaiting_approval'",
                        )
                        .bind(action)
                        .execute(&mut *tx)
                        .await?;
                    } else {
                        self.abort_waiting_action_in(
                            &mut tx,
                            workspace,
                            action,
                            "approval_rejected",
                            d.note.as_deref().unwrap_or("a person rejected the action"),
                            d.now,
                        )
                        .await?;
                    }
                }
                self.resume_if_settled_in(&mut tx, &a.run_id).await?;
            }
        }
        self.run_event_in(&mut tx, &a.run_id, "approval", &approval_event(&a), d.now)
            .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system(
                if d.approve {
                    "approval.approved"
                } else {
                    "approval.rejected"
                },
                Some(&a.run_id),
            )
            .with_actor(d.audit_actor.clone())
            .with_target(&a.id)
            .with_action(a.action_id.as_deref())
            .with_decision(new_state.as_str())
            .with_payload_hash(&a.payload_hash)
            .with_metadata(
                json!({"approval": a.id, "grant": grant.map(Grant::as_str), "rule": a.grant_id}),
            ),
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(a))
    }

    /// Uses an approved run request, once: atomically checks that it is
    /// `approved`, not expired, bound to `payload_hash`, that the workspace
    /// is not stopped and that its approver is the operator or still a
    /// member whose role is one of `decider_roles` — and marks it consumed.
    /// Of any number of concurrent consumers, one wins.
    pub async fn consume_approval(
        &self,
        workspace: &str,
        id: &str,
        payload_hash: &str,
        now: i64,
        decider_roles: &[&str],
        operator: &str,
    ) -> Result<std::result::Result<Approval, ApprovalRefusal>> {
        let mut tx = self.pool.begin().await?;
        let got = self
            .consume_in(
                &mut tx,
                workspace,
                id,
                payload_hash,
                now,
                decider_roles,
                operator,
            )
            .await?;
        let Some(a) = got else {
            tx.rollback().await?;
            let why = self
                .approval_refusal(
                    workspace,
                    id,
                    now,
                    ApprovalState::Approved,
                    Some(payload_hash),
                )
                .await?;
            return Ok(Err(why));
        };
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("approval.consumed", Some(&a.run_id))
                .with_target(&a.id)
                .with_action(a.action_id.as_deref())
                .with_payload_hash(&a.payload_hash)
                .with_metadata(json!({"approval": a.id, "decided_by": a.decided_by})),
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(a))
    }

    /// The guarded consume statement, inside `tx`; `None` when it matched
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn consume_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        id: &str,
        payload_hash: &str,
        now: i64,
        decider_roles: &[&str],
        operator: &str,
    ) -> Result<Option<Approval>> {
        let roles = serde_json::to_string(decider_roles).unwrap_or_else(|_| "[]".into());
        let role_set = json_strings(self.backend, "$6");
        let row = sqlx::query(&format!(
            "UPDATE approvals SET state = 'consumed', consumed_at = $1 \
             WHERE workspace_id = $2 AND id = $3 AND state = 'approved' AND expires_at > $1 AND payload_hash = $4 \
             AND NOT EXISTS (SELECT 1 FROM emergency_stops s WHERE s.workspace_id = $2 AND s.stopped = 1) \
             AND (decided_by = $5 OR EXISTS (SELECT 1 FROM memberships m WHERE m.workspace_id = $2 \
                  AND m.user_id = approvals.decided_by AND m.role IN {role_set})) \
             RETURNING {APPROVAL_COLUMNS}"
        ))
        .bind(now)
        .bind(workspace)
        .bind(id)
        .bind(payload_hash)
        .bind(operator)
        .bind(&roles)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    /// Records a refused use of an approval (AUD-1), on its own.
    pub async fn audit_approval_refused(
        &self,
        a: &Approval,
        why: ApprovalRefusal,
        now: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        self.run_event_in(&mut tx, &a.run_id,
            "approval",
            &json!({"id": a.id, "state": a.state.as_str(), "refused": why.to_string(), "payload_hash": a.payload_hash}),
            now,
        )
        .await?;
        self.audit_in(
            &mut tx,
            &a.workspace_id,
            AuditRecord::system("approval.refused", Some(&a.run_id))
                .with_target(&a.id)
                .with_action(a.action_id.as_deref())
                .with_payload_hash(&a.payload_hash)
                .with_result(&why.to_string()),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Expires every pending request whose time is up (across workspaces:
    /// the reaper's pass). A run request's run ends `blocked`
    /// (`approval_expired`); an action request's action is `aborted` and
    /// its run resumes so the agent hears it. Returns what expired.
    pub async fn expire_approvals(&self, now: i64) -> Result<Vec<Approval>> {
        let due = sqlx::query(
            "SELECT workspace_id, id FROM approvals WHERE state = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT 500",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in due {
            let ws: String = r.try_get("workspace_id")?;
            let id: String = r.try_get("id")?;
            let mut tx = self.pool.begin().await?;
            let row = sqlx::query(&format!(
                "UPDATE approvals SET state = 'expired', decided_at = $1 \
                 WHERE id = $2 AND state = 'pending' AND expires_at <= $1 \
                 RETURNING {APPROVAL_COLUMNS}"
            ))
            .bind(now)
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else {
                tx.rollback().await?;
                continue;
            };
            let a = approval_from_row(&row)?;
            match (a.kind, &a.action_id) {
                (ApprovalKind::Run, _) => {
                    self.end_waiting_run_in(
                        &mut tx,
                        &ws,
                        &a.run_id,
                        RunErrorCode::ApprovalExpired,
                        now,
                    )
                    .await?;
                }
                (ApprovalKind::Action, action) => {
                    if let Some(action) = action {
                        self.abort_waiting_action_in(
                            &mut tx,
                            &ws,
                            action,
                            "approval_expired",
                            "nobody approved the action before its request expired",
                            now,
                        )
                        .await?;
                    }
                    self.resume_if_settled_in(&mut tx, &a.run_id).await?;
                }
            }
            self.run_event_in(&mut tx, &a.run_id, "approval", &approval_event(&a), now)
                .await?;
            self.audit_in(
                &mut tx,
                &ws,
                AuditRecord::system("approval.expired", Some(&a.run_id))
                    .with_target(&a.id)
                    .with_action(a.action_id.as_deref())
                    .with_payload_hash(&a.payload_hash)
                    .with_result("expired"),
            )
            .await?;
            tx.commit().await?;
            out.push(a);
        }
        Ok(out)
    }

    /// Ends a run that was waiting for a person (never started) with
    /// `code`, inside `tx`; its open requests are cancelled.
    pub(crate) async fn end_waiting_run_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        run_id: &str,
        code: RunErrorCode,
        now: i64,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE runs SET state = $1, finished_at = $2, error_code = $3, error_message = $4, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $5 AND state = 'awaiting_approval'",
        )
        .bind(code.state().as_str())
        .bind(now)
        .bind(code.as_str())
        .bind(code.description())
        .bind(run_id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Ok(false);
        }
        self.cancel_open_approvals_in(tx, workspace, Some(run_id), now)
            .await?;
        self.run_event_in(
            tx,
            run_id,
            "finish",
            &json!({"state": code.state().as_str(), "error_code": code.as_str()}),
            now,
        )
        .await?;
        self.audit_in(
            tx,
            workspace,
            AuditRecord::system("run.finished", Some(run_id))
                .with_result(code.state().as_str())
                .with_metadata(json!({"error_code": code.as_str()})),
        )
        .await?;
        Ok(true)
    }

    /// Cancels the pending and approved-but-unused requests of one run (or
    /// of the whole workspace), inside `tx`. Returns how many.
    pub(crate) async fn cancel_open_approvals_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workspace: &str,
        run_id: Option<&str>,
        now: i64,
    ) -> Result<u64> {
        Ok(sqlx::query(
            "UPDATE approvals SET state = 'cancelled', decided_at = COALESCE(decided_at, $1) \
             WHERE workspace_id = $2 AND ($3 = '' OR run_id = $3) AND state IN ('pending', 'approved')",
        )
        .bind(now)
        .bind(workspace)
        .bind(run_id.unwrap_or(""))
        .execute(&mut **tx)
        .await?
        .rows_affected())
    }

    /// A waiting run goes back to the queue (so its harness resumes) once
    /// nothing about it waits for a person: no pending request and no
    /// action whose outcome is unknown.
    pub(crate) async fn resume_if_settled_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE runs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $1 AND state = 'awaiting_approval' \
             AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = $1 AND a.state = 'pending') \
             AND NOT EXISTS (SELECT 1 FROM actions x WHERE x.run_id = $1 AND x.state = 'outcome_unknown')",
        )
        .bind(run_id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if n > 0 {
            self.notify_queued(tx, run_id).await?;
        }
        Ok(n > 0)
    }

    /// OPS-2: wakes idle executors on every node (delivered at commit).
    pub(crate) async fn notify_queued(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
    ) -> Result<()> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify('airlock_service', $1)")
                .bind(run_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Cancels a run that is waiting for a person (RUN-5 for
    /// `awaiting_approval`): it ends `cancelled` and its requests can no
    /// longer be decided. False when the run was not waiting.
    pub async fn cancel_waiting_run(
        &self,
        workspace: &str,
        run_id: &str,
        actor: &str,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE runs SET state = 'cancelled', cancel_requested = 1, finished_at = $1, error_code = $2, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE workspace_id = $3 AND id = $4 AND state = 'awaiting_approval'",
        )
        .bind(now)
        .bind(RunErrorCode::Cancelled.as_str())
        .bind(workspace)
        .bind(run_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        self.cancel_open_approvals_in(&mut tx, workspace, Some(run_id), now)
            .await?;
        self.abort_open_actions_in(
            &mut tx,
            workspace,
            Some(run_id),
            "cancelled",
            "the run was cancelled",
            now,
        )
        .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("run.cancel_requested", Some(run_id))
                .with_actor(airlock_audit::chain::Actor::Human(actor.to_string()))
                .with_result(RunState::Cancelled.as_str()),
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    // ------------------------------------------------------------ rules

    /// The workspace's rules, newest first (revoked ones included).
    pub async fn list_rules(&self, workspace: &str) -> Result<Vec<ApprovalRule>> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rules WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1000"
        ))
        .bind(workspace)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rule_from_row).collect()
    }

    /// The live rules that could cover an action of `worker` in `run_id`:
    /// its argv-prefix rules and the run's payload rules.
    pub async fn live_rules(
        &self,
        workspace: &str,
        worker: &str,
        run_id: &str,
    ) -> Result<Vec<ApprovalRule>> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rules WHERE workspace_id = $1 AND worker_id = $2 \
             AND revoked_at IS NULL AND (kind = 'argv_prefix' OR run_id = $3) ORDER BY created_at, id"
        ))
        .bind(workspace)
        .bind(worker)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rule_from_row).collect()
    }

    /// Revokes a rule (audited); false when there is no live rule `id`.
    pub async fn revoke_rule(
        &self,
        workspace: &str,
        id: &str,
        by: &str,
        audit_actor: airlock_audit::chain::Actor,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE approval_rules SET revoked_at = $1, revoked_by = $2 WHERE workspace_id = $3 AND id = $4 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(by)
        .bind(workspace)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("approval_rule.revoked", None)
                .with_actor(audit_actor)
                .with_target(id)
                .with_metadata(json!({"rule": id})),
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    // ------------------------------------------------------------ settings

    pub async fn approval_settings(&self, workspace: &str) -> Result<ApprovalSettings> {
        let row = sqlx::query(
            "SELECT allow_self_approval, updated_at, updated_by FROM approval_settings WHERE workspace_id = $1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            None => ApprovalSettings {
                allow_self_approval: false,
                updated_at: None,
                updated_by: None,
            },
            Some(r) => ApprovalSettings {
                allow_self_approval: r.try_get::<i64, _>("allow_self_approval")? != 0,
                updated_at: r.try_get("updated_at")?,
                updated_by: r.try_get("updated_by")?,
            },
        })
    }

    /// Sets the workspace's approval settings (audited).
    pub async fn put_approval_settings(
        &self,
        workspace: &str,
        allow_self_approval: bool,
        by: &str,
        audit_actor: airlock_audit::chain::Actor,
        now: i64,
    ) -> Result<ApprovalSettings> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO approval_settings (workspace_id, allow_self_approval, updated_at, updated_by) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (workspace_id) DO UPDATE SET allow_self_approval = excluded.allow_self_approval, \
             updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        )
        .bind(workspace)
        .bind(i64::from(allow_self_approval))
        .bind(now)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        self.audit_in(
            &mut tx,
            workspace,
            AuditRecord::system("approval_settings.changed", None)
                .with_actor(audit_actor)
                .with_metadata(json!({"allow_self_approval": allow_self_approval})),
        )
        .await?;
        tx.commit().await?;
        Ok(ApprovalSettings {
            allow_self_approval,
            updated_at: Some(now),
            updated_by: Some(by.to_string()),
        })
    }
}

/// The `approval` event on a run's stream: enough to act on, with the hash.
pub(crate) fn approval_event(a: &Approval) -> Value {
    json!({
        "id": a.id,
        "kind": a.kind.as_str(),
        "state": a.state.as_str(),
        "action_id": a.action_id,
        "payload_hash": a.payload_hash,
        "expires_at": a.expires_at,
        "decided_by": a.decided_by,
        "grant": a.grant.map(Grant::as_str),
    })
}
