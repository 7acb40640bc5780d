//! The one door as the CLI sees it: each command is written once against
//! [`Door`], which either calls the service in this process (as the local
//! operator, on the server's own database and key directory) or a server
//! over HTTP (with the stored API key). Both answer the same protocol
//! types and the same [`Error`]; only the transport differs.

use std::sync::Arc;

use airlock_protocol::Error;
use airlock_protocol::actions::{Action, ActionList, SettleAction};
use airlock_protocol::approvals::{
    Approval, ApprovalList, ApprovalSettings, Approve, ListApprovals, PutApprovalSettings, Reject,
    RuleList,
};
use airlock_protocol::emergency::{EmergencyState, StopRequest, Stopped};
use airlock_protocol::models::{ModelProfile, ModelProfileList, PutModelProfile};
use airlock_protocol::retention::{DeleteWorkspace, Retention, RetentionApplied, WorkspaceDeleted};
use airlock_protocol::runs::{
    Cancelled, CreatePlan, CreateRun, ListRuns, PlanCreated, ResolveRun, RetryRun, Run, RunCreated,
    RunDetail, RunEvent, RunList, RunPlan,
};
use airlock_protocol::secrets::{PutSecret, SecretList, SecretStored};
use airlock_service::{Caller, Followed, RunOptions, Service};

use crate::client::{Remote, encode};

/// Where a command's operations go.
#[derive(Debug)]
pub enum Door {
    /// This process's service, acting as the operator.
    Local { svc: Arc<Service>, caller: Caller },
    /// A server, with an API key.
    Remote(Remote),
}

/// Executes a run in this process once it may start: a run waiting for a
/// person is waited for (requests nobody decides expire, so this ends),
/// a run another executor claimed is followed to its end.
async fn execute_locally(svc: &Arc<Service>, caller: &Caller, run_id: &str) -> Result<(), Error> {
    use airlock_protocol::RunState;
    loop {
        let run = svc.get_run(caller, run_id).await?;
        match run.state {
            RunState::Queued => {
                if svc.execute_here(caller, run_id).await? {
                    return Ok(());
                }
            }
            RunState::AwaitingApproval => {
                svc.expire_approvals_once().await?;
            }
            RunState::Running => {}
            _ => return Ok(()),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A run a command started: new, or the original of its idempotency key.
#[derive(Debug)]
pub struct Started {
    pub run: Run,
    pub created: bool,
}

impl Door {
    pub async fn create_run(
        &self,
        worker: &str,
        input: serde_json::Value,
        idempotency_key: Option<String>,
    ) -> Result<Started, Error> {
        match self {
            Door::Local { svc, caller } => {
                let s = svc
                    .create_run(
                        caller,
                        worker,
                        input,
                        RunOptions {
                            trigger: "cli".into(),
                            idempotency_key,
                        },
                    )
                    .await?;
                Ok(Started {
                    run: s.run,
                    created: s.created,
                })
            }
            Door::Remote(r) => {
                let key = idempotency_key.unwrap_or_default();
                let headers: Vec<(&str, &str)> = if key.is_empty() {
                    Vec::new()
                } else {
                    vec![("idempotency-key", key.as_str())]
                };
                let reply = r
                    .request(
                        "POST",
                        &format!("/v1/workers/{}/runs", encode(worker)),
                        &headers,
                        Some(&CreateRun { input }),
                    )
                    .await?;
                let created = reply.status == 201;
                let body: RunCreated = reply.json()?;
                Ok(Started {
                    run: body.run,
                    created,
                })
            }
        }
    }

    pub async fn run_plan(&self, token: &str) -> Result<Run, Error> {
        match self {
            Door::Local { svc, caller } => svc.run_plan(caller, token).await,
            Door::Remote(r) => {
                let body = RunPlan {
                    token: token.to_string(),
                };
                let created: RunCreated = r
                    .request("POST", "/v1/plans/run", &[], Some(&body))
                    .await?
                    .json()?;
                Ok(created.run)
            }
        }
    }

    pub async fn create_plan(&self, req: &CreatePlan) -> Result<PlanCreated, Error> {
        match self {
            Door::Local { svc, caller } => svc.create_plan(caller, req).await,
            Door::Remote(r) => r.request("POST", "/v1/plans", &[], Some(req)).await?.json(),
        }
    }

    /// Waits until a new run is over, handing its events to `sink` when
    /// given. The local door executes the run in this process, through the
    /// same executor a server uses; a server executes its own runs and the
    /// remote door follows its event stream.
    pub async fn wait(
        &self,
        run_id: &str,
        sink: Option<&mut (dyn FnMut(&RunEvent) + Send)>,
    ) -> Result<(), Error> {
        match (self, sink) {
            (Door::Local { svc, caller }, None) => execute_locally(svc, caller, run_id).await,
            (Door::Local { svc, caller }, Some(sink)) => {
                let (executed, followed) = tokio::join!(
                    execute_locally(svc, caller, run_id),
                    self.follow(run_id, 0, sink)
                );
                executed?;
                followed
            }
            (Door::Remote(r), Some(sink)) => r.follow(run_id, 0, sink).await,
            (Door::Remote(r), None) => r.follow(run_id, 0, &mut |_: &RunEvent| {}).await,
        }
    }

    pub async fn run_detail(&self, id: &str) -> Result<RunDetail, Error> {
        match self {
            Door::Local { svc, caller } => svc.run_detail(caller, id).await,
            Door::Remote(r) => r.get(&format!("/v1/runs/{}", encode(id))).await,
        }
    }

    pub async fn list_runs(&self, q: &ListRuns) -> Result<RunList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_runs(caller, q).await,
            Door::Remote(r) => {
                let mut path = format!("/v1/runs?limit={}", q.limit.unwrap_or(50));
                if let Some(st) = q.state {
                    path.push_str(&format!("&state={}", st.as_str()));
                }
                if let Some(c) = &q.cursor {
                    path.push_str(&format!("&cursor={}", encode(c)));
                }
                r.get(&path).await
            }
        }
    }

    pub async fn cancel_run(&self, id: &str) -> Result<Cancelled, Error> {
        match self {
            Door::Local { svc, caller } => svc.cancel_run(caller, id).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/runs/{}/cancel", encode(id)),
                    &[],
                    None::<&()>,
                )
                .await?
                .json(),
        }
    }

    pub async fn retry_run(&self, id: &str, b: &RetryRun) -> Result<Run, Error> {
        match self {
            Door::Local { svc, caller } => svc.retry_run(caller, id, b).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/runs/{}/retry", encode(id)),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }

    pub async fn resolve_run(&self, id: &str, b: &ResolveRun) -> Result<Run, Error> {
        match self {
            Door::Local { svc, caller } => svc.resolve_run(caller, id, b).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/runs/{}/resolve", encode(id)),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }

    pub async fn run_log(&self, id: &str) -> Result<String, Error> {
        match self {
            Door::Local { svc, caller } => svc.run_log(caller, id).await,
            Door::Remote(r) => r
                .request(
                    "GET",
                    &format!("/v1/runs/{}/logs", encode(id)),
                    &[],
                    None::<&()>,
                )
                .await?
                .text(),
        }
    }

    /// Calls `f` for each event of a run after `after`, until the run is
    /// over and every event was seen.
    pub async fn follow(
        &self,
        id: &str,
        after: i64,
        f: &mut (dyn FnMut(&RunEvent) + Send),
    ) -> Result<(), Error> {
        match self {
            Door::Local { svc, caller } => {
                let mut follower = svc.follow_events(caller, id, after).await?;
                while let Some(next) = follower.next().await {
                    match next? {
                        Followed::Events(events) => events.iter().for_each(&mut *f),
                        Followed::End => break,
                    }
                }
                Ok(())
            }
            Door::Remote(r) => r.follow(id, after, f).await,
        }
    }

    pub async fn list_secrets(&self) -> Result<SecretList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_secrets(caller).await,
            Door::Remote(r) => r.get("/v1/secrets").await,
        }
    }

    pub async fn put_secret(&self, name: &str, value: Vec<u8>) -> Result<SecretStored, Error> {
        match self {
            Door::Local { svc, caller } => svc.put_secret(caller, name, value).await,
            Door::Remote(r) => {
                let value = String::from_utf8(value).map_err(|_| {
                    Error::new(
                        airlock_protocol::ErrorCode::SecretInvalid,
                        "over HTTP a secret value must be UTF-8",
                    )
                })?;
                r.request(
                    "PUT",
                    &format!("/v1/secrets/{}", encode(name)),
                    &[],
                    Some(&PutSecret { value }),
                )
                .await?
                .json()
            }
        }
    }

    pub async fn delete_secret(&self, name: &str) -> Result<(), Error> {
        match self {
            Door::Local { svc, caller } => svc.delete_secret(caller, name).await,
            Door::Remote(r) => r
                .request(
                    "DELETE",
                    &format!("/v1/secrets/{}", encode(name)),
                    &[],
                    None::<&()>,
                )
                .await?
                .empty(),
        }
    }

    pub async fn list_model_profiles(&self) -> Result<ModelProfileList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_model_profiles(caller).await,
            Door::Remote(r) => r.get("/v1/model-profiles").await,
        }
    }

    pub async fn get_model_profile(&self, name: &str) -> Result<ModelProfile, Error> {
        match self {
            Door::Local { svc, caller } => svc.get_model_profile(caller, name).await,
            Door::Remote(r) => r.get(&format!("/v1/model-profiles/{}", encode(name))).await,
        }
    }

    pub async fn put_model_profile(
        &self,
        name: &str,
        b: &PutModelProfile,
    ) -> Result<ModelProfile, Error> {
        match self {
            Door::Local { svc, caller } => svc.put_model_profile(caller, name, b).await,
            Door::Remote(r) => r
                .request(
                    "PUT",
                    &format!("/v1/model-profiles/{}", encode(name)),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }

    pub async fn delete_model_profile(&self, name: &str) -> Result<(), Error> {
        match self {
            Door::Local { svc, caller } => svc.delete_model_profile(caller, name).await,
            Door::Remote(r) => r
                .request(
                    "DELETE",
                    &format!("/v1/model-profiles/{}", encode(name)),
                    &[],
                    None::<&()>,
                )
                .await?
                .empty(),
        }
    }

    pub async fn list_approvals(&self, q: &ListApprovals) -> Result<ApprovalList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_approvals(caller, q).await,
            Door::Remote(r) => {
                let mut path = format!("/v1/approvals?limit={}", q.limit.unwrap_or(50));
                if let Some(st) = q.state {
                    path.push_str(&format!("&state={}", st.as_str()));
                }
                if let Some(run) = &q.run {
                    path.push_str(&format!("&run={}", encode(run)));
                }
                if let Some(c) = &q.cursor {
                    path.push_str(&format!("&cursor={}", encode(c)));
                }
                r.get(&path).await
            }
        }
    }

    pub async fn get_approval(&self, id: &str) -> Result<Approval, Error> {
        match self {
            Door::Local { svc, caller } => svc.get_approval(caller, id).await,
            Door::Remote(r) => r.get(&format!("/v1/approvals/{}", encode(id))).await,
        }
    }

    pub async fn approve(&self, id: &str, b: &Approve) -> Result<Approval, Error> {
        match self {
            Door::Local { svc, caller } => svc.approve(caller, id, b).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/approvals/{}/approve", encode(id)),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }

    pub async fn reject(&self, id: &str, b: &Reject) -> Result<Approval, Error> {
        match self {
            Door::Local { svc, caller } => svc.reject(caller, id, b).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/approvals/{}/reject", encode(id)),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }

    pub async fn list_rules(&self) -> Result<RuleList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_approval_rules(caller).await,
            Door::Remote(r) => r.get("/v1/approval-rules").await,
        }
    }

    pub async fn revoke_rule(&self, id: &str) -> Result<(), Error> {
        match self {
            Door::Local { svc, caller } => svc.revoke_approval_rule(caller, id).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/approval-rules/{}/revoke", encode(id)),
                    &[],
                    None::<&()>,
                )
                .await?
                .empty(),
        }
    }

    pub async fn approval_settings(&self) -> Result<ApprovalSettings, Error> {
        match self {
            Door::Local { svc, caller } => svc.approval_settings(caller).await,
            Door::Remote(r) => r.get("/v1/approval-settings").await,
        }
    }

    pub async fn put_approval_settings(
        &self,
        b: &PutApprovalSettings,
    ) -> Result<ApprovalSettings, Error> {
        match self {
            Door::Local { svc, caller } => svc.put_approval_settings(caller, b).await,
            Door::Remote(r) => r
                .request("PUT", "/v1/approval-settings", &[], Some(b))
                .await?
                .json(),
        }
    }

    pub async fn emergency_state(&self) -> Result<EmergencyState, Error> {
        match self {
            Door::Local { svc, caller } => svc.emergency_state(caller).await,
            Door::Remote(r) => r.get("/v1/emergency-stop").await,
        }
    }

    pub async fn emergency_stop(&self, b: &StopRequest) -> Result<Stopped, Error> {
        match self {
            Door::Local { svc, caller } => svc.emergency_stop(caller, b).await,
            Door::Remote(r) => r
                .request("POST", "/v1/emergency-stop", &[], Some(b))
                .await?
                .json(),
        }
    }

    pub async fn emergency_resume(&self) -> Result<EmergencyState, Error> {
        match self {
            Door::Local { svc, caller } => svc.emergency_resume(caller).await,
            Door::Remote(r) => r
                .request("POST", "/v1/emergency-stop/resume", &[], None::<&()>)
                .await?
                .json(),
        }
    }

    pub async fn get_retention(&self) -> Result<Retention, Error> {
        match self {
            Door::Local { svc, caller } => svc.get_retention(caller).await,
            Door::Remote(r) => r.get("/v1/retention").await,
        }
    }

    pub async fn set_retention(&self, b: &Retention) -> Result<Retention, Error> {
        match self {
            Door::Local { svc, caller } => svc.set_retention(caller, b).await,
            Door::Remote(r) => r
                .request("PUT", "/v1/retention", &[], Some(b))
                .await?
                .json(),
        }
    }

    /// A retention pass now; `dry_run`: only what it would remove.
    pub async fn apply_retention(&self, dry_run: bool) -> Result<RetentionApplied, Error> {
        match self {
            Door::Local { svc, caller } => svc.apply_retention(caller, dry_run).await,
            Door::Remote(r) if dry_run => r.get("/v1/retention/preview").await,
            Door::Remote(r) => r
                .request("POST", "/v1/retention/apply", &[], None::<&()>)
                .await?
                .json(),
        }
    }

    pub async fn delete_workspace(
        &self,
        id: &str,
        confirm: &str,
    ) -> Result<WorkspaceDeleted, Error> {
        match self {
            Door::Local { svc, caller } => svc.delete_workspace(caller, id, confirm).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!("/v1/workspaces/{}/delete", encode(id)),
                    &[],
                    Some(&DeleteWorkspace {
                        confirm: confirm.to_string(),
                    }),
                )
                .await?
                .json(),
        }
    }

    pub async fn list_actions(&self, run_id: &str) -> Result<ActionList, Error> {
        match self {
            Door::Local { svc, caller } => svc.list_actions(caller, run_id).await,
            Door::Remote(r) => r.get(&format!("/v1/runs/{}/actions", encode(run_id))).await,
        }
    }

    pub async fn settle_action(
        &self,
        run_id: &str,
        action_id: &str,
        b: &SettleAction,
    ) -> Result<Action, Error> {
        match self {
            Door::Local { svc, caller } => svc.settle_action(caller, run_id, action_id, b).await,
            Door::Remote(r) => r
                .request(
                    "POST",
                    &format!(
                        "/v1/runs/{}/actions/{}/settle",
                        encode(run_id),
                        encode(action_id)
                    ),
                    &[],
                    Some(b),
                )
                .await?
                .json(),
        }
    }
}
