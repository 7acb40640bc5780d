//! The tools (MCP-1): each parses its arguments into the protocol's
//! request types, calls one method of the service with the caller the
//! gate resolved, and shapes the answer. No rule lives here: which
//! caller may do what is the service's; this table only decides which
//! tools a caller is *shown* (those whose permission it holds).

use std::sync::Arc;
use std::time::Duration;

use airlock_protocol::approvals::{
    Approval, ApprovalList, ApprovalState, Approve, ListApprovals, Reject,
};
use airlock_protocol::audit::AuditVerification;
use airlock_protocol::runs::{Artifact, Cancelled, ListRuns, Run, RunEvent, RunList, RunState};
use airlock_protocol::secrets::SecretList;
use airlock_protocol::workers::{WorkerDetail, WorkerList};
use airlock_service::{Caller, Followed, Operation, RunOptions, Service};
use rmcp::ErrorData;
use rmcp::model::{JsonObject, ToolAnnotations};
use rmcp::schemars::{self, JsonSchema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::Progress;
use crate::schema::{input, output};

/// The largest `arguments` object a call may carry, as compact JSON.
pub const MAX_ARGUMENT_BYTES: usize = 512 * 1024;
/// The longest `get_run` waits before it answers the current state
/// (clients time a call out at about 60 s).
pub const MAX_WAIT: Duration = Duration::from_secs(50);
/// How often a waiting `get_run` looks at the run's state when no event
/// arrives (a run parked for approval sends none).
const STATE_POLL: Duration = Duration::from_secs(1);

/// One tool: its name, what it needs, its schemas and hints.
#[derive(Debug)]
pub(crate) struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// Shown only to callers that may do it (the service decides, and
    /// checks again when the tool is called).
    pub operation: Operation,
    pub input: fn() -> Arc<JsonObject>,
    pub output: fn() -> Arc<JsonObject>,
    /// (read-only, destructive, idempotent, open world)
    pub hints: (bool, bool, bool, bool),
}

impl ToolSpec {
    pub(crate) fn annotations(&self) -> ToolAnnotations {
        let (ro, destructive, idempotent, open) = self.hints;
        ToolAnnotations::with_title(self.title)
            .read_only(ro)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(open)
    }
}

const READ: (bool, bool, bool, bool) = (true, false, true, false);

pub(crate) const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "list_workers",
        title: "List workers",
        description: "The workers (scripts and agents) this workspace can run, with their manifests.",
        operation: Operation::ReadWorkers,
        input: input::<NoArgs>,
        output: output::<WorkerList>,
        hints: READ,
    },
    ToolSpec {
        name: "describe_worker",
        title: "Describe a worker",
        description: "One worker's manifest and the JSON Schema of its inputs (what start_run's `input` may hold).",
        operation: Operation::ReadWorkers,
        input: input::<WorkerArgs>,
        output: output::<WorkerDetail>,
        hints: READ,
    },
    ToolSpec {
        name: "start_run",
        title: "Start a run",
        description: "Starts a run of a worker and returns at once (the run is queued; watch it with get_run). \
            `idempotency_key` makes a re-sent call answer the run the first one created: use a new key per intended run.",
        operation: Operation::StartRuns,
        input: input::<StartRunArgs>,
        output: output::<RunStarted>,
        hints: (false, false, true, true),
    },
    ToolSpec {
        name: "get_run",
        title: "Get a run",
        description: "A run's state, artifacts and queue position. Waits up to `wait_s` seconds (default and at most 50) \
            while the run is queued or running, sending progress notifications, then answers the state it is in; \
            call again to keep waiting. Cancelling this call ends the wait, never the run.",
        operation: Operation::ReadRuns,
        input: input::<GetRunArgs>,
        output: output::<RunStatus>,
        hints: READ,
    },
    ToolSpec {
        name: "read_run_logs",
        title: "Read a run's log",
        description: "A page of a run's events (log lines, state changes, tool calls) after the cursor `after`; \
            pass `next_after` back to read on.",
        operation: Operation::ReadRuns,
        input: input::<ReadLogsArgs>,
        output: output::<LogPage>,
        hints: READ,
    },
    ToolSpec {
        name: "list_runs",
        title: "List runs",
        description: "The workspace's runs, newest first, optionally in one state; page with `cursor`.",
        operation: Operation::ReadRuns,
        input: input::<ListRunsArgs>,
        output: output::<RunList>,
        hints: READ,
    },
    ToolSpec {
        name: "cancel_run",
        title: "Cancel a run",
        description: "Asks a run to stop (a running workload is killed after its grace period). Answers the state it is in.",
        operation: Operation::CancelRuns,
        input: input::<RunArgs>,
        output: output::<Cancelled>,
        hints: (false, true, true, false),
    },
    ToolSpec {
        name: "list_approvals",
        title: "List approvals",
        description: "Approval requests of the workspace, newest first: what a run or an agent's action waits for, \
            with the exact payload and its hash.",
        operation: Operation::ReadRuns,
        input: input::<ListApprovalsArgs>,
        output: output::<ApprovalList>,
        hints: READ,
    },
    ToolSpec {
        name: "decide_approval",
        title: "Decide an approval",
        description: "Approves or rejects a pending request. Approving needs the payload hash you reviewed. \
            Only for a key given the approvals.decide scope by name, and never for a run its own user started.",
        operation: Operation::DecideApprovals,
        input: input::<DecideArgs>,
        output: output::<Approval>,
        hints: (false, true, false, false),
    },
    ToolSpec {
        name: "list_secret_names",
        title: "List secret names",
        description: "The names of the workspace's secrets and their state. Never a value; no tool sets one.",
        operation: Operation::ListSecrets,
        input: input::<NoArgs>,
        output: output::<SecretList>,
        hints: READ,
    },
    ToolSpec {
        name: "verify_audit",
        title: "Verify the audit log",
        description: "Verifies the workspace's tamper-evident audit chain: how many events, the head hash, \
            or the first sequence number that does not verify.",
        operation: Operation::ReadAudit,
        input: input::<NoArgs>,
        output: output::<AuditVerification>,
        hints: READ,
    },
];

pub(crate) fn find(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

// ---- arguments -------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkerArgs {
    /// The worker's id (from list_workers).
    worker_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRunArgs {
    /// The worker's id (from list_workers).
    worker_id: String,
    /// Values for the worker's inputs (describe_worker gives their schema).
    #[serde(default)]
    input: Option<JsonObject>,
    /// 1 to 255 printable ASCII characters, new for each intended run: a
    /// re-sent call with the same key answers the first call's run.
    idempotency_key: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetRunArgs {
    run_id: String,
    /// Seconds to wait for the run to settle (0 answers at once; default
    /// and at most 50).
    #[serde(default)]
    #[schemars(range(max = 50))]
    wait_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunArgs {
    run_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadLogsArgs {
    run_id: String,
    /// Events after this sequence number (`next_after` of the previous
    /// page; 0 or absent for the start).
    #[serde(default)]
    #[schemars(range(min = 0))]
    after: Option<i64>,
    /// Page size, 1 to 500 (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    limit: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRunsArgs {
    /// Only runs in this state.
    #[serde(default)]
    state: Option<StateArg>,
    /// Page size, 1 to 500 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    cursor: Option<String>,
}

/// A run state as an argument: the protocol's own [`RunState`], whose
/// schema's `enum` is read from [`RunState::ALL`] (one list, no mirror).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(transparent)]
pub(crate) struct StateArg(RunState);

impl JsonSchema for StateArg {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
        schemars::json_schema!({"type": "string", "enum": names})
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListApprovalsArgs {
    /// Only approvals in this state: pending, approved, used, rejected,
    /// expired or cancelled.
    #[serde(default)]
    state: Option<String>,
    /// Only approvals of this run.
    #[serde(default)]
    run_id: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    limit: Option<i64>,
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DecisionArg {
    Approve,
    Reject,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideArgs {
    approval_id: String,
    decision: DecisionArg,
    /// The `payload_hash` of the request you reviewed (64 hex
    /// characters); required to approve, so an approval is bound to
    /// exactly what was shown.
    #[serde(default)]
    payload_hash: Option<String>,
    /// At most 1000 characters.
    #[serde(default)]
    note: Option<String>,
}

// ---- answers that exist only here ------------------------------------------

/// `start_run`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunStarted {
    pub run: Run,
    /// False when the idempotency key had already started this run.
    pub created: bool,
}

/// `get_run`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunStatus {
    pub run: Run,
    /// 1 for the next run to start; `null` when not queued.
    pub queue_position: Option<i64>,
    pub artifacts: Vec<Artifact>,
    /// True when the run will not move without someone: it is over, or
    /// waits for an approval. False when the wait ended first.
    pub settled: bool,
}

/// `read_run_logs`' answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LogPage {
    pub events: Vec<RunEvent>,
    /// The run is over and no event follows the last one.
    pub finished: bool,
    /// Pass as `after` to read on.
    pub next_after: i64,
}

// ---- dispatch ----------------------------------------------------------------

/// What a call produced: a body for `structuredContent`, or the service's
/// refusal (a tool error the model can read, not a protocol error).
pub(crate) enum Outcome {
    Ok(Value),
    Refused(airlock_protocol::Error),
}

fn args<T: DeserializeOwned>(a: Option<JsonObject>) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(a.unwrap_or_default()))
        .map_err(|e| ErrorData::invalid_params(format!("arguments: {e}"), None))
}

fn ok<T: Serialize>(r: Result<T, airlock_protocol::Error>) -> Result<Outcome, ErrorData> {
    match r {
        Ok(v) => serde_json::to_value(v)
            .map(Outcome::Ok)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None)),
        Err(e) => Ok(Outcome::Refused(e)),
    }
}

fn is_settled(s: RunState) -> bool {
    s.is_terminal() || s == RunState::AwaitingApproval
}

/// Runs one tool. `Err` is a protocol error (bad arguments); a refusal by
/// the service is an [`Outcome::Refused`].
pub(crate) async fn call(
    svc: &Arc<Service>,
    c: &Caller,
    spec: &ToolSpec,
    arguments: Option<JsonObject>,
    progress: &Progress,
) -> Result<Outcome, ErrorData> {
    match spec.name {
        "list_workers" => {
            let NoArgs {} = args(arguments)?;
            ok(svc.list_workers(c))
        }
        "describe_worker" => {
            let a: WorkerArgs = args(arguments)?;
            ok(svc.get_worker(c, &a.worker_id))
        }
        "start_run" => {
            let a: StartRunArgs = args(arguments)?;
            let opts = RunOptions {
                trigger: "mcp".into(),
                idempotency_key: Some(a.idempotency_key),
            };
            let input = Value::Object(a.input.unwrap_or_default());
            ok(svc
                .create_run(c, &a.worker_id, input, opts)
                .await
                .map(|s| RunStarted {
                    run: s.run,
                    created: s.created,
                }))
        }
        "get_run" => {
            let a: GetRunArgs = args(arguments)?;
            let wait = Duration::from_secs(a.wait_s.unwrap_or(50)).min(MAX_WAIT);
            ok(wait_for_run(svc, c, &a.run_id, wait, progress).await)
        }
        "read_run_logs" => {
            let a: ReadLogsArgs = args(arguments)?;
            let after = a.after.unwrap_or(0);
            ok(svc
                .run_events(c, &a.run_id, after, a.limit.unwrap_or(200))
                .await
                .map(|p| LogPage {
                    next_after: p.events.last().map_or(after, |e| e.seq),
                    events: p.events,
                    finished: p.finished,
                }))
        }
        "list_runs" => {
            let a: ListRunsArgs = args(arguments)?;
            let q = ListRuns {
                state: a.state.map(|s| s.0),
                limit: a.limit,
                cursor: a.cursor,
                ..Default::default()
            };
            ok(svc.list_runs(c, &q).await)
        }
        "cancel_run" => {
            let a: RunArgs = args(arguments)?;
            ok(svc.cancel_run(c, &a.run_id).await)
        }
        "list_approvals" => {
            let a: ListApprovalsArgs = args(arguments)?;
            let state = match a.state {
                None => None,
                Some(s) => Some(
                    serde_json::from_value::<ApprovalState>(Value::String(s.clone())).map_err(
                        |_| ErrorData::invalid_params(format!("state: no state {s:?}"), None),
                    )?,
                ),
            };
            let q = ListApprovals {
                state,
                run: a.run_id,
                limit: a.limit,
                cursor: a.cursor,
            };
            ok(svc.list_approvals(c, &q).await)
        }
        "decide_approval" => {
            let a: DecideArgs = args(arguments)?;
            match a.decision {
                DecisionArg::Approve => {
                    let Some(hash) = a.payload_hash else {
                        return Err(ErrorData::invalid_params(
                            "payload_hash: approving needs the hash of the payload you reviewed",
                            None,
                        ));
                    };
                    let b = Approve {
                        grant: None,
                        argv_prefix: None,
                        payload_hash: Some(hash),
                        note: a.note,
                    };
                    ok(svc.approve(c, &a.approval_id, &b).await)
                }
                DecisionArg::Reject => {
                    let b = Reject { note: a.note };
                    ok(svc.reject(c, &a.approval_id, &b).await)
                }
            }
        }
        "list_secret_names" => {
            let NoArgs {} = args(arguments)?;
            ok(svc.list_secrets(c).await)
        }
        "verify_audit" => {
            let NoArgs {} = args(arguments)?;
            ok(svc.verify_audit(c).await)
        }
        other => Err(ErrorData::invalid_params(
            format!("no tool {other:?}"),
            None,
        )),
    }
}

/// `get_run`: the run now if it is settled; else its events followed
/// (each batch a progress notification) until it settles, the wait ends,
/// or the call is cancelled — the run itself is never touched.
async fn wait_for_run(
    svc: &Arc<Service>,
    c: &Caller,
    run_id: &str,
    wait: Duration,
    progress: &Progress,
) -> Result<RunStatus, airlock_protocol::Error> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut run = svc.get_run(c, run_id).await?;
    if !is_settled(run.state) && !wait.is_zero() {
        let mut follower = svc.follow_events(c, run_id, 0).await?;
        let mut seen = 0usize;
        let mut told = (0usize, run.state);
        progress.send(0, seen, run.state).await;
        let mut step = 0u64;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline || progress.cancelled() {
                break;
            }
            let slice = (deadline - now).min(STATE_POLL);
            tokio::select! {
                _ = progress.wait_cancelled() => break,
                next = tokio::time::timeout(slice, follower.next()) => {
                    match next {
                        Ok(Some(Ok(Followed::Events(evs)))) => seen += evs.len(),
                        Ok(Some(Ok(Followed::End)) | None) => {}
                        Ok(Some(Err(e))) => return Err(e),
                        Err(_) => {}
                    }
                }
            }
            run = svc.get_run(c, run_id).await?;
            if (seen, run.state) != told {
                step += 1;
                progress.send(step, seen, run.state).await;
                told = (seen, run.state);
            }
            if is_settled(run.state) {
                break;
            }
        }
    }
    let d = svc.run_detail(c, run_id).await?;
    Ok(RunStatus {
        settled: is_settled(d.run.state),
        run: d.run,
        queue_position: d.queue_position,
        artifacts: d.artifacts,
    })
}
