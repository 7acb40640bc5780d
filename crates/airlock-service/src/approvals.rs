//! Approvals as people see them (AGT-5): the inbox, a request in full
//! with its hash, the decision, the standing rules a decision may create,
//! and the workspace's approval settings.
//!
//! Who may decide (the rule, stated once, enforced here):
//! 1. The caller holds `approvals.decide` in the approval's workspace —
//!    its role now, narrowed by an API key's scopes, so a key minted
//!    without that scope (for an automation, say) can never decide.
//!    Another workspace's approval is the same `not_found` as a missing one.
//! 2. The caller is a person: a signed-in user (session, or that user's
//!    key) or the local operator. An agent is never a caller: its requests
//!    are made as `agent:<run>` from inside the service, no credential is
//!    ever minted for it, and no method that decides is reachable from the
//!    harness.
//! 3. Nobody approves their own request or a request of a run they started
//!    (`requested_by` or `run_actor` is the caller) unless the workspace's
//!    settings allow self-approval, and never with an API key: a key is
//!    what an automation or an MCP client holds, so the credential that
//!    started a run (an agent host's key) can never also wave its requests
//!    through. Rejecting is always allowed: it stops
//!    something, it starts nothing.
//! 4. An `argv_prefix` grant also needs `policy.manage`, must pass the
//!    rule checks of [`airlock_agent::grant_rules`] and must cover the request it
//!    is given on.
//! 5. When the approval is used, the approver's permission is checked
//!    again, atomically with the use (a demoted approver's approval is
//!    refused), with the hash, the expiry and the emergency stop.
//!
//! Must not: contain SQL; let a decision widen anything but the approval
//! step itself.

use airlock_iam::{Permission, Role};
use airlock_protocol::approvals::{
    Approval, ApprovalKind, ApprovalList, ApprovalSettings, Approve, Grant, ListApprovals,
    MAX_NOTE_CHARS, PutApprovalSettings, Reject, RuleList,
};
use airlock_protocol::{Error, ErrorCode, MAX_PAGE};
use airlock_store::{ApprovalRefusal, Decision};

use crate::caller::{Caller, Via};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The roles that may decide now, from the role table: the atomic
/// re-check when an approval is used reads memberships against these.
pub(crate) fn decider_roles() -> Vec<&'static str> {
    Role::ALL
        .iter()
        .filter(|r| r.permits(Permission::ApprovalsDecide))
        .map(|r| r.as_str())
        .collect()
}

/// The error a refused decision or use answers.
pub(crate) fn refusal_error(r: ApprovalRefusal) -> Error {
    match r {
        ApprovalRefusal::NotOpen(s) => Error::new(
            ErrorCode::ApprovalNotPending,
            format!("the approval is {s}; it cannot be decided or used again"),
        ),
        ApprovalRefusal::Expired => Error::new(ErrorCode::ApprovalExpired, "the approval expired"),
        ApprovalRefusal::HashMismatch => Error::new(
            ErrorCode::ApprovalHashMismatch,
            "the payload hash is not the request's",
        ),
        ApprovalRefusal::Stopped => Error::new(
            ErrorCode::EmergencyStopped,
            "the workspace is under an emergency stop",
        ),
        ApprovalRefusal::ApproverLost => {
            Error::forbidden("the approver no longer holds approvals.decide")
        }
    }
}

fn check_note(note: &Option<String>) -> Result<Option<String>> {
    match note {
        None => Ok(None),
        Some(n) if n.chars().count() > MAX_NOTE_CHARS => Err(Error::invalid_body(format!(
            "note is at most {MAX_NOTE_CHARS} characters"
        ))),
        Some(n) if n.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            Err(Error::invalid_body("note holds a control character"))
        }
        Some(n) => Ok(Some(n.clone())),
    }
}

fn is_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn rule_refused(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::RuleRefused, msg)
}

/// The argv of an action payload (`run_command`), if it has one.
pub(crate) fn payload_argv(payload: &serde_json::Value) -> Option<Vec<String>> {
    payload
        .get("argv")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

impl Service {
    /// A page of the workspace's approval requests, newest first.
    pub async fn list_approvals(&self, c: &Caller, q: &ListApprovals) -> Result<ApprovalList> {
        c.require(Permission::RunsRead)?;
        let limit = q.limit.unwrap_or(50);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::invalid_query(format!(
                "limit must be between 1 and {MAX_PAGE}"
            )));
        }
        for (name, v) in [("cursor", &q.cursor), ("run", &q.run)] {
            if v.as_ref().is_some_and(|v| v.chars().count() > 128) {
                return Err(Error::invalid_query(format!(
                    "{name} is at most 128 characters"
                )));
            }
        }
        let approvals = self
            .store
            .list_approvals(
                &c.workspace,
                q.state,
                q.run.as_deref(),
                limit,
                q.cursor.as_deref(),
            )
            .await
            .svc()?;
        let next_cursor = if i64::try_from(approvals.len()).unwrap_or(0) == limit {
            approvals.last().map(|a| a.id.clone())
        } else {
            None
        };
        Ok(ApprovalList {
            approvals,
            next_cursor,
        })
    }

    /// One request, its payload in full with its hash.
    pub async fn get_approval(&self, c: &Caller, id: &str) -> Result<Approval> {
        c.require(Permission::RunsRead)?;
        self.store
            .get_approval(&c.workspace, id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)
    }

    /// Approves a pending request (rules 1 … 4 of the module header).
    pub async fn approve(&self, c: &Caller, id: &str, b: &Approve) -> Result<Approval> {
        c.require(Permission::ApprovalsDecide)?;
        let a = self.get_approval_in(&c.workspace, id).await?;
        let note = check_note(&b.note)?;
        if let Some(h) = &b.payload_hash
            && !is_hash(h)
        {
            return Err(Error::invalid_body(
                "payload_hash is 64 lowercase hex characters",
            ));
        }
        if c.actor_id() == a.requested_by || c.actor_id() == a.run_actor {
            if matches!(c.principal().map(|p| &p.via), Some(Via::ApiKey { .. })) {
                return Err(Error::new(
                    ErrorCode::SelfApproval,
                    "an API key never approves a request of a run its user started (or asked for), whatever the workspace's settings: another member decides, or you do from a signed-in session",
                ));
            }
            let settings = self.store.approval_settings(&c.workspace).await.svc()?;
            if !settings.allow_self_approval {
                return Err(Error::new(
                    ErrorCode::SelfApproval,
                    "you started this run (or asked for this approval); another member decides, unless the workspace allows self-approval",
                ));
            }
        }
        let grant = b.grant.unwrap_or_default();
        if grant != Grant::ArgvPrefix && b.argv_prefix.is_some() {
            return Err(Error::invalid_body(
                "argv_prefix goes only with grant argv_prefix",
            ));
        }
        match (grant, a.kind) {
            (Grant::Once, _) => {}
            (_, ApprovalKind::Run) => {
                return Err(rule_refused(
                    "a run's approval is used once; standing grants are for agent actions",
                ));
            }
            (Grant::Payload, ApprovalKind::Action) => {}
            (Grant::ArgvPrefix, ApprovalKind::Action) => {
                c.require(Permission::PolicyManage)?;
                let Some(prefix) = &b.argv_prefix else {
                    return Err(rule_refused("grant argv_prefix needs argv_prefix"));
                };
                airlock_agent::grant_rules::check_prefix(prefix)
                    .map_err(|e| rule_refused(e.to_string()))?;
                let covers = payload_argv(&a.payload).is_some_and(|argv| {
                    airlock_agent::grant_rules::argv_covered(&argv, std::slice::from_ref(prefix))
                });
                if !covers {
                    return Err(rule_refused(
                        "the rule does not cover the command it would approve",
                    ));
                }
            }
        }
        let d = Decision {
            approve: true,
            by: c.actor_id().to_string(),
            audit_actor: c.audit_actor(),
            note,
            grant,
            argv_prefix: b.argv_prefix.clone(),
            expected_hash: b.payload_hash.clone(),
            now: self.now(),
        };
        self.decided(c, id, &d).await
    }

    /// Rejects a pending request.
    pub async fn reject(&self, c: &Caller, id: &str, b: &Reject) -> Result<Approval> {
        c.require(Permission::ApprovalsDecide)?;
        self.get_approval_in(&c.workspace, id).await?;
        let note = check_note(&b.note)?;
        let d = Decision {
            approve: false,
            by: c.actor_id().to_string(),
            audit_actor: c.audit_actor(),
            note,
            grant: Grant::Once,
            argv_prefix: None,
            expected_hash: None,
            now: self.now(),
        };
        self.decided(c, id, &d).await
    }

    async fn decided(&self, c: &Caller, id: &str, d: &Decision) -> Result<Approval> {
        let a = self
            .store
            .decide_approval(&c.workspace, id, d)
            .await
            .svc()?
            .map_err(refusal_error)?;
        // A run queued by the decision starts now on this node.
        self.wake.notify_one();
        Ok(a)
    }

    pub(crate) async fn get_approval_in(&self, workspace: &str, id: &str) -> Result<Approval> {
        self.store
            .get_approval(workspace, id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)
    }

    /// The workspace's standing rules (revoked ones included).
    pub async fn list_approval_rules(&self, c: &Caller) -> Result<RuleList> {
        c.require(Permission::PolicyManage)?;
        Ok(RuleList {
            rules: self.store.list_rules(&c.workspace).await.svc()?,
        })
    }

    /// Revokes a rule; `not_found` when there is no live rule `id`.
    pub async fn revoke_approval_rule(&self, c: &Caller, id: &str) -> Result<()> {
        c.require(Permission::PolicyManage)?;
        if self
            .store
            .revoke_rule(&c.workspace, id, c.actor_id(), c.audit_actor(), self.now())
            .await
            .svc()?
        {
            Ok(())
        } else {
            Err(Error::not_found())
        }
    }

    pub async fn approval_settings(&self, c: &Caller) -> Result<ApprovalSettings> {
        c.require(Permission::RunsRead)?;
        self.store.approval_settings(&c.workspace).await.svc()
    }

    /// Sets whether the member who started a run may approve its
    /// requests.
    pub async fn put_approval_settings(
        &self,
        c: &Caller,
        b: &PutApprovalSettings,
    ) -> Result<ApprovalSettings> {
        c.require(Permission::PolicyManage)?;
        self.store
            .put_approval_settings(
                &c.workspace,
                b.allow_self_approval,
                c.actor_id(),
                c.audit_actor(),
                self.now(),
            )
            .await
            .svc()
    }

    /// Expires requests nobody decided in time (the reaper's pass; also
    /// called by a local `airlock run` that waits for a person). Returns
    /// how many expired.
    pub async fn expire_approvals_once(&self) -> Result<usize> {
        let expired = self.store.expire_approvals(self.now()).await.svc()?;
        if expired.iter().any(|a| a.kind == ApprovalKind::Action) {
            self.wake.notify_one();
        }
        Ok(expired.len())
    }
}
