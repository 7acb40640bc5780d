//! Runs (RUN-4, RUN-5, API-4, API-8) and plans (DUR-3): creating, reading,
//! cancelling. Every rule of run creation lives here once: the input
//! checked against the manifest, the idempotency key, the durable daily
//! quotas and their give-back when nothing was created.

use std::path::Path;
use std::time::Duration;

use airlock_iam::Permission;
use airlock_protocol::runs::{
    Cancelled, CreatePlan, ListRuns, Plan, PlanCreated, ResolveRun, RetryRun, Run, RunDetail,
    RunList, RunResolution,
};
use airlock_protocol::{Error, ErrorCode, MAX_PAGE};
use airlock_store::{Created, NewRun, Resolution, Settled};
use airlock_worker::Bundle;

use crate::caller::{Actor, Caller};
use crate::error::{Result, StoreResultExt};
use crate::service::{Service, sha256_file};

/// A settlement's reason: at most 1000 characters, no control characters
/// but newline and tab.
fn check_reason(r: &str) -> Result<()> {
    if r.chars().count() > airlock_protocol::approvals::MAX_NOTE_CHARS
        || r.chars()
            .any(|ch| ch.is_control() && ch != '\n' && ch != '\t')
    {
        return Err(Error::invalid_body(
            "reason is at most 1000 characters without control characters",
        ));
    }
    Ok(())
}

/// The run a settlement left, or `run_not_unknown` naming its state.
fn settled_run(s: Settled, verb: &str) -> Result<Run> {
    match s {
        Settled::Done(run) => Ok(*run),
        Settled::NotUnknown(state) => Err(Error::new(
            ErrorCode::RunNotUnknown,
            format!(
                "the run is {}: only a run whose outcome is unknown can be {verb}",
                state.as_str()
            ),
        )),
    }
}

/// Where a run came from, for the ones the service starts itself.
#[derive(Debug, Clone)]
pub(crate) struct StartRun {
    pub workspace: String,
    pub worker_id: String,
    pub input: serde_json::Value,
    pub trigger: String,
    pub actor: String,
    pub idempotency_key: Option<String>,
}

/// A run the caller asked for: created now, or the original run of the
/// same idempotency key.
#[derive(Debug, Clone)]
pub struct RunStarted {
    pub run: Run,
    /// False when an idempotent replay returned the original run.
    pub created: bool,
}

impl From<Created> for RunStarted {
    fn from(c: Created) -> Self {
        Self {
            run: c.run,
            created: c.created,
        }
    }
}

/// How a run is started by a caller.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `api`, `cli`, `mcp`, `ui`: recorded as the run's trigger.
    pub trigger: String,
    /// API-8: the same key and request answer the original run.
    pub idempotency_key: Option<String>,
}

/// Default and largest plan lifetimes.
const PLAN_TTL_DEFAULT_S: u64 = 900;
const PLAN_TTL_MAX_S: u64 = 7 * 86_400;

/// Checks an idempotency key: 1 to 255 printable ASCII characters.
fn check_idempotency_key(k: &str) -> Result<()> {
    if k.is_empty() || k.len() > 255 || !k.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::new(
            ErrorCode::InvalidIdempotencyKey,
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
        ));
    }
    Ok(())
}

/// The input as idempotency compares it: a file input by its content
/// (name, size, digest), not by which upload carried it — a form sent
/// twice uploads its file twice, and is still the same request (API-8).
fn idempotency_view(bundle: &Bundle, input: &serde_json::Value) -> serde_json::Value {
    let mut view = input.clone();
    for (name, spec) in &bundle.manifest.inputs {
        if matches!(spec.ty, airlock_worker::FieldType::File { .. })
            && let Some(serde_json::Value::Object(file)) = view.get_mut(name.as_str())
        {
            file.remove("upload");
        }
    }
    view
}

fn page_size(limit: Option<i64>, default: i64) -> Result<i64> {
    let limit = limit.unwrap_or(default);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::invalid_query(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    Ok(limit)
}

impl Service {
    /// The worker as `workspace` sees it, which must declare a trigger for
    /// runs from `trigger` (RUN-6: a webhook-only worker cannot be started
    /// by hand), and the input checked against its declared inputs.
    /// File inputs name an upload, which must be `actor`'s in `workspace`
    /// (see [`Self::resolve_uploads`]).
    async fn checked_input(
        &self,
        workspace: &str,
        actor: &str,
        worker_id: &str,
        trigger: &str,
        input: &serde_json::Value,
    ) -> Result<(Bundle, serde_json::Value)> {
        let bundle = self.worker_in(workspace, worker_id).ok_or_else(|| {
            Error::new(
                ErrorCode::UnknownWorker,
                format!("unknown worker {worker_id:?}"),
            )
        })?;
        if !crate::executor::trigger_needed(trigger)
            .is_some_and(|k| bundle.manifest.declares_trigger(k))
        {
            return Err(Error::new(
                ErrorCode::TriggerNotDeclared,
                format!("worker {worker_id:?} declares no trigger for runs from {trigger:?}"),
            ));
        }
        let input = if input.is_null() {
            serde_json::json!({})
        } else {
            input.clone()
        };
        let input = bundle
            .manifest
            .check_input(&input)
            .map_err(|e| Error::new(ErrorCode::InputInvalid, format!("input rejected: {e}")))?;
        let input = self
            .resolve_uploads(workspace, actor, &bundle, input)
            .await?;
        Ok((bundle, input))
    }

    /// Resolves each file input's `{"upload": id}` (already shape-checked
    /// by the manifest) to what staging needs:
    /// `{"upload": id, "name": …, "size": …, "sha256": …}`. The upload must
    /// be in `workspace` and belong to `actor` — the uploads module's rule:
    /// an upload is served back only to the user who made it, so only that
    /// user may hand it to a run. Another user's, another workspace's and a
    /// missing id are the same refusal. It must fit the input's `max_bytes`
    /// (and the upload limit). A `sha256` the caller gave pins the content:
    /// it must match. The run's input hash covers the digest.
    async fn resolve_uploads(
        &self,
        workspace: &str,
        actor: &str,
        bundle: &Bundle,
        mut input: serde_json::Value,
    ) -> Result<serde_json::Value> {
        let refused = |name: &str, msg: String| {
            Error::new(
                ErrorCode::InputInvalid,
                format!("input rejected: inputs.{name}: {msg}"),
            )
        };
        for (name, spec) in &bundle.manifest.inputs {
            let airlock_worker::FieldType::File { max_bytes } = &spec.ty else {
                continue;
            };
            let Some(v) = input.get_mut(name.as_str()) else {
                continue;
            };
            let name = name.as_str();
            let id = airlock_worker::file_upload_id(v)
                .ok_or_else(|| {
                    refused(
                        name,
                        "a file input is given as {\"upload\": \"<upload id>\"}".into(),
                    )
                })?
                .to_string();
            let pinned = v.get("sha256").and_then(|d| d.as_str()).map(str::to_string);
            let rec = self
                .store
                .get_upload(workspace, &id)
                .await
                .svc()?
                .filter(|r| r.user_id == actor)
                .ok_or_else(|| {
                    refused(
                        name,
                        format!("{id:?} is not an upload of yours in this workspace"),
                    )
                })?;
            let size = u64::try_from(rec.size).map_err(Error::internal)?;
            let limit = max_bytes
                .unwrap_or(crate::uploads::MAX_UPLOAD_BYTES as u64)
                .min(crate::uploads::MAX_UPLOAD_BYTES as u64);
            if size > limit {
                return Err(refused(
                    name,
                    format!("the upload is {size} bytes, more than this input's limit of {limit}"),
                ));
            }
            if pinned.is_some_and(|d| d != rec.digest) {
                return Err(refused(
                    name,
                    "the upload's content does not match the given sha256".into(),
                ));
            }
            *v = serde_json::json!({
                "upload": rec.id,
                "name": rec.name,
                "size": size,
                "sha256": rec.digest,
            });
        }
        Ok(input)
    }

    /// Creates a queued run with no quota: the scheduler's and the
    /// webhook endpoint's path (they take their own quotas).
    pub(crate) async fn start_run(&self, req: StartRun) -> Result<RunStarted> {
        let (bundle, input) = self
            .checked_input(
                &req.workspace,
                &req.actor,
                &req.worker_id,
                &req.trigger,
                &req.input,
            )
            .await?;
        let request_hash = airlock_store::sha256_hex(
            format!("{}\n{}", req.worker_id, idempotency_view(&bundle, &input)).as_bytes(),
        );
        if let Some(k) = &req.idempotency_key {
            check_idempotency_key(k)?;
        }
        self.insert_run(
            &bundle,
            NewRun {
                workspace_id: req.workspace,
                worker_id: req.worker_id,
                input,
                trigger: req.trigger,
                actor: req.actor,
                plan_id: None,
                idempotency: req.idempotency_key.map(|k| (k, request_hash)),
            },
        )
        .await
        .map(Into::into)
    }

    /// Inserts a run: queued, or — when its worker requires an approval
    /// (AGT-5) — waiting in `awaiting_approval` with its request, which
    /// binds the hash of exactly what would execute. Nothing is created in
    /// a workspace under an emergency stop (AGT-6).
    async fn insert_run(&self, bundle: &Bundle, new: NewRun) -> Result<Created> {
        self.require_not_stopped(&new.workspace_id).await?;
        let approvals = &bundle.manifest.approvals;
        let created = if approvals.required {
            let payload = Self::plan_body(bundle, &new.input);
            airlock_store::canonical_payload(&payload).map_err(|e| {
                Error::new(
                    ErrorCode::InputInvalid,
                    format!("the run's payload cannot be canonicalised for its approval: {e}"),
                )
            })?;
            let now = self.now();
            let ttl_ms = i64::try_from(approvals.ttl_s())
                .unwrap_or(i64::MAX)
                .saturating_mul(1000);
            let req = airlock_store::NewApproval {
                payload,
                reason: approvals.reason.clone(),
                requested_by: new.actor.clone(),
                expires_at: now.saturating_add(ttl_ms),
                now,
            };
            self.store
                .create_run_awaiting_approval(new, req)
                .await
                .svc()?
                .0
        } else {
            self.store.create_run(new).await.svc()?
        };
        self.wake.notify_one();
        Ok(created)
    }

    /// The daily quotas a caller's run counts against (API-4): a user's
    /// runs count against the user's and the workspace's; the local
    /// operator's against none.
    fn run_quotas(&self, c: &Caller) -> Vec<(String, i64)> {
        match &c.actor {
            Actor::User(p) => vec![
                (
                    format!("user:{}", p.user.id),
                    self.cfg.quotas.runs_per_user_per_day,
                ),
                (
                    format!("ws:{}", c.workspace),
                    self.cfg.quotas.runs_per_workspace_per_day,
                ),
            ],
            Actor::Operator => Vec::new(),
        }
    }

    /// Starts a run of `worker_id` with `input` (RUN-4, API-4, API-8).
    /// A retry with the same idempotency key answers the original run
    /// (or `idempotency_conflict`) without spending quota.
    pub async fn create_run(
        &self,
        c: &Caller,
        worker_id: &str,
        input: serde_json::Value,
        opts: RunOptions,
    ) -> Result<RunStarted> {
        c.require(Permission::RunsCreate)?;
        if let Some(k) = &opts.idempotency_key {
            check_idempotency_key(k)?;
        }
        let replay = match &opts.idempotency_key {
            Some(k) => self
                .store
                .idempotency_key_used(&c.workspace, c.actor_id(), k)
                .await
                .svc()?,
            None => false,
        };
        let taken = if replay {
            Vec::new()
        } else {
            self.take_quotas(&self.run_quotas(c)).await?
        };
        let started = self
            .start_run(StartRun {
                workspace: c.workspace.clone(),
                worker_id: worker_id.to_string(),
                input,
                trigger: opts.trigger,
                actor: c.actor_id().to_string(),
                idempotency_key: opts.idempotency_key,
            })
            .await;
        match &started {
            // A replay that raced past the pre-check created nothing.
            Ok(s) if !s.created => self.give_back(taken).await,
            Ok(_) => {}
            Err(_) => self.give_back(taken).await,
        }
        started
    }

    /// A page of the workspace's runs, newest first.
    pub async fn list_runs(&self, c: &Caller, q: &ListRuns) -> Result<RunList> {
        c.require(Permission::RunsRead)?;
        let limit = page_size(q.limit, 50)?;
        if q.cursor.as_ref().is_some_and(|c| c.chars().count() > 128) {
            return Err(Error::invalid_query("cursor is at most 128 characters"));
        }
        for (name, v) in [("worker", &q.worker), ("trigger", &q.trigger)] {
            if v.as_ref().is_some_and(|v| v.chars().count() > 64) {
                return Err(Error::invalid_query(format!(
                    "{name} is at most 64 characters"
                )));
            }
        }
        for (name, v) in [("since", q.since), ("until", q.until)] {
            if v.is_some_and(|v| v < 0) {
                return Err(Error::invalid_query(format!(
                    "{name} is a time in Unix milliseconds (0 or more)"
                )));
            }
        }
        let filter = airlock_store::RunFilter {
            state: q.state,
            worker: q.worker.as_deref().filter(|w| !w.is_empty()),
            trigger: q.trigger.as_deref().filter(|t| !t.is_empty()),
            since: q.since,
            until: q.until,
        };
        let runs = self
            .store
            .list_runs_where(&c.workspace, &filter, limit, q.cursor.as_deref())
            .await
            .svc()?;
        let next_cursor = if i64::try_from(runs.len()).unwrap_or(0) == limit {
            runs.last().map(|r| r.id.clone())
        } else {
            None
        };
        Ok(RunList { runs, next_cursor })
    }

    /// One run; another workspace's is the same `not_found` as a missing one.
    pub async fn get_run(&self, c: &Caller, run_id: &str) -> Result<Run> {
        c.require(Permission::RunsRead)?;
        self.run_in(&c.workspace, run_id).await
    }

    pub(crate) async fn run_in(&self, workspace: &str, run_id: &str) -> Result<Run> {
        self.store
            .get_run(workspace, run_id)
            .await
            .svc()?
            .ok_or_else(Error::not_found)
    }

    /// A run with its queue position and artifacts.
    pub async fn run_detail(&self, c: &Caller, run_id: &str) -> Result<RunDetail> {
        let run = self.get_run(c, run_id).await?;
        let queue_position = self
            .store
            .queue_position(&c.workspace, run_id)
            .await
            .svc()?;
        let artifacts = self.store.artifacts(&c.workspace, run_id).await.svc()?;
        Ok(RunDetail {
            run,
            queue_position,
            artifacts,
        })
    }

    /// RUN-5: idempotent cancel; a queued or waiting run ends at once, a
    /// running run on this node is killed now (other nodes see the request
    /// on their next lease check).
    pub async fn cancel_run(&self, c: &Caller, run_id: &str) -> Result<Cancelled> {
        c.require(Permission::RunsCancel)?;
        // A run waiting for a person ends at once; its requests can no
        // longer be decided.
        self.store
            .cancel_waiting_run(&c.workspace, run_id, c.actor_id(), self.now())
            .await
            .svc()?;
        let state = self
            .store
            .cancel_run(&c.workspace, run_id, c.actor_id())
            .await
            .svc()?;
        if let Ok(cancels) = self.cancels.lock()
            && let Some(flag) = cancels.get(run_id)
        {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(Cancelled {
            id: run_id.to_string(),
            state,
        })
    }

    /// DUR-2: a person retries a run whose outcome is `unknown` — it is
    /// queued again for a new attempt of the same run (its earlier
    /// attempt stays in its events and the audit chain, `run.retried` with
    /// the actor and reason). Settling needs `runs.cancel` (the people who
    /// may stop a run may close it); a retry starts work again, so it also
    /// needs `runs.create` and a workspace not under an emergency stop.
    /// Any other state is `run_not_unknown`; another workspace's run is
    /// `not_found`.
    pub async fn retry_run(&self, c: &Caller, run_id: &str, b: &RetryRun) -> Result<Run> {
        c.require(Permission::RunsCancel)?;
        c.require(Permission::RunsCreate)?;
        if let Some(r) = &b.reason {
            check_reason(r)?;
        }
        self.require_not_stopped(&c.workspace).await?;
        let settled = self
            .store
            .retry_unknown(&c.workspace, run_id, c.audit_actor(), b.reason.as_deref())
            .await
            .svc()?;
        let run = settled_run(settled, "retried")?;
        self.wake.notify_one();
        Ok(run)
    }

    /// DUR-2: a person says how a run whose outcome is `unknown` ended
    /// (`succeeded` or `failed`) and why; `run.resolved` records the actor
    /// and the reason. Needs `runs.cancel`. Any other state is
    /// `run_not_unknown`; another workspace's run is `not_found`. (An
    /// agent action in `outcome_unknown` is settled by
    /// [`Service::settle_action`].)
    pub async fn resolve_run(&self, c: &Caller, run_id: &str, b: &ResolveRun) -> Result<Run> {
        c.require(Permission::RunsCancel)?;
        if b.reason.trim().is_empty() {
            return Err(Error::invalid_body("a reason is required"));
        }
        check_reason(&b.reason)?;
        let resolution = match b.outcome {
            RunResolution::Succeeded => Resolution::Succeeded,
            RunResolution::Failed => Resolution::Failed,
        };
        let settled = self
            .store
            .resolve_unknown(&c.workspace, run_id, resolution, c.audit_actor(), &b.reason)
            .await
            .svc()?;
        settled_run(settled, "resolved")
    }

    /// Executes a queued run in this process now, through the same
    /// executor a server uses: the local CLI's `airlock run`. Returns
    /// whether this process ran it (false when another executor had
    /// already claimed it). The local operator only.
    pub async fn execute_here(
        self: &std::sync::Arc<Self>,
        c: &Caller,
        run_id: &str,
    ) -> Result<bool> {
        if !matches!(c.actor, Actor::Operator) {
            return Err(Error::forbidden(
                "only the local operator executes runs in its own process",
            ));
        }
        self.run_in(&c.workspace, run_id).await?;
        let claim = self
            .store
            .claim_run(
                &format!("cli:{}", std::process::id()),
                self.cfg.lease,
                run_id,
            )
            .await
            .svc()?;
        match claim {
            Some(claim) => {
                self.execute(claim).await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// What a plan pins (DUR-3) and what a run's approval binds (AGT-5):
    /// worker, input and its hash, entry and runtime digests, limits and
    /// egress.
    pub(crate) fn plan_body(bundle: &Bundle, input: &serde_json::Value) -> serde_json::Value {
        let m = &bundle.manifest;
        let runtime = m
            .command(Path::new("/airlock/worker"))
            .ok()
            .and_then(|argv| argv.first().cloned());
        let runtime_identity = runtime.as_deref().and_then(|r| {
            airlock_sandbox::ResolvedExecutable::resolve(
                r,
                airlock_sandbox::env::SANDBOX_PATH,
                Path::new("/"),
            )
            .ok()
            .map(|e| serde_json::json!({"path": e.identity().path, "sha256": e.identity().sha256}))
        });
        serde_json::json!({
            "worker": bundle.id.as_str(),
            "input": input,
            "input_hash": airlock_store::sha256_hex(input.to_string().as_bytes()),
            "entry_sha256": sha256_file(&bundle.entry),
            "runtime": runtime_identity,
            "limits": serde_json::to_value(&m.limits).unwrap_or_default(),
            "egress": serde_json::to_value(&m.egress).unwrap_or_default(),
        })
    }

    /// Stores a plan and returns its opaque single-use token (DUR-3).
    pub async fn create_plan(&self, c: &Caller, req: &CreatePlan) -> Result<PlanCreated> {
        c.require(Permission::RunsCreate)?;
        let ttl_s = req.ttl_s.unwrap_or(PLAN_TTL_DEFAULT_S);
        if !(1..=PLAN_TTL_MAX_S).contains(&ttl_s) {
            return Err(Error::invalid_body(format!(
                "ttl_s must be between 1 and {PLAN_TTL_MAX_S}"
            )));
        }
        let (bundle, input) = self
            .checked_input(
                c.workspace.as_str(),
                c.actor_id(),
                &req.worker,
                "plan",
                &req.input,
            )
            .await?;
        let body = Self::plan_body(&bundle, &input);
        let (token, stored) = self
            .store
            .create_plan(&c.workspace, &req.worker, &body, Duration::from_secs(ttl_s))
            .await
            .svc()?;
        Ok(PlanCreated {
            token,
            plan: Plan {
                plan_id: stored.id,
                expires_at: stored.expires_at,
                plan: body,
            },
        })
    }

    /// Executes exactly a stored plan: the token is consumed atomically and
    /// nothing the plan pinned may have changed. Counts against quotas like
    /// any run.
    pub async fn run_plan(&self, c: &Caller, token: &str) -> Result<Run> {
        c.require(Permission::RunsCreate)?;
        // Checked before the token is spent: a stopped workspace keeps its
        // plans usable for after the resume.
        self.require_not_stopped(&c.workspace).await?;
        let taken = self.take_quotas(&self.run_quotas(c)).await?;
        let created = self.run_plan_inner(c, token).await;
        if created.is_err() {
            self.give_back(taken).await;
        }
        created
    }

    async fn run_plan_inner(&self, c: &Caller, token: &str) -> Result<Run> {
        let stored = self.store.consume_plan(&c.workspace, token).await.svc()?;
        let input = stored.plan.get("input").cloned().unwrap_or_default();
        let (bundle, input) = self
            .checked_input(
                &c.workspace,
                c.actor_id(),
                &stored.worker_id,
                "plan",
                &input,
            )
            .await?;
        let now = Self::plan_body(&bundle, &input);
        if now != stored.plan {
            let changed: Vec<&str> = ["input_hash", "entry_sha256", "runtime", "limits", "egress"]
                .into_iter()
                .filter(|k| now.get(*k) != stored.plan.get(*k))
                .collect();
            return Err(Error::new(
                ErrorCode::PlanRefused,
                format!(
                    "plan refused: the worker changed since it was planned ({})",
                    changed.join(", ")
                ),
            ));
        }
        let created = self
            .insert_run(
                &bundle,
                NewRun {
                    workspace_id: c.workspace.clone(),
                    worker_id: stored.worker_id.clone(),
                    input,
                    trigger: "plan".into(),
                    actor: c.actor_id().to_string(),
                    plan_id: Some(stored.id),
                    idempotency: None,
                },
            )
            .await?;
        Ok(created.run)
    }

    /// Takes one unit of each `(subject, daily limit)` or none of them:
    /// `quota_exceeded` with the wait until the end of the UTC day when any
    /// is used up. Returns what to give back if creation fails.
    pub(crate) async fn take_quotas(
        &self,
        subjects: &[(String, i64)],
    ) -> Result<Vec<(String, i64)>> {
        let now = self.now();
        let day = now - now.rem_euclid(86_400_000);
        let mut taken: Vec<(String, i64)> = Vec::new();
        for (subject, limit) in subjects {
            if *limit == i64::MAX {
                continue;
            }
            if !self.store.take_quota(subject, day, *limit).await.svc()? {
                self.give_back(taken).await;
                crate::metrics::COUNTERS
                    .rejected_quota
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let wait = u64::try_from(day + 86_400_000 - now).unwrap_or(1);
                return Err(Error::limited(
                    ErrorCode::QuotaExceeded,
                    "the daily run quota is used up",
                    Duration::from_millis(wait),
                ));
            }
            taken.push((subject.clone(), day));
        }
        Ok(taken)
    }

    /// Gives back quota units taken for a creation that created nothing.
    /// A give-back that fails leaves the unit spent (the safe direction).
    pub(crate) async fn give_back(&self, taken: Vec<(String, i64)>) {
        for (sub, d) in taken {
            if self.store.give_back_quota(&sub, d).await.is_err() {
                crate::metrics::COUNTERS
                    .quota_give_back_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}
