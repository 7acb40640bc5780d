//! The loop of an agent run and the pipeline of each tool call (AGT-4):
//! emergency stop → budgets → policy → approval → journal → dispatch.
//!
//! Every step reads and writes the store under the run's fencing token;
//! a write refused for a stale token means another executor holds the run
//! now, and this one lets go without touching the run's folder
//! ([`Ended::Released`]).
//!
//! Must not: act on a response before it is persisted; dispatch without
//! the journal; answer a call twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use airlock_agent::{Action, ActionKind, Next, Policy, Verdict as PolicyVerdict};
use airlock_model::{AssistantItem, Message, NoEvents, ToolCall};
use airlock_protocol::actions::{Action as JournalAction, ActionState};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{ActionEnd, Artifact, Finish, RunErrorCode, StoreError};
use serde_json::{Map, Value, json};

use super::POLICY_VERSION;
use super::setup::Agent;
use super::state::{ResponseItem, ResultItem, State};
use super::tools::{Stops, ToolOutput};
use crate::executor::{Authorised, Outcome, RunCx};
use crate::journal::{Decided, Verdict};
use crate::service::Service;

/// How an agent run left the executor.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Terminal: write it.
    Finished(Outcome),
    /// Waiting for a person (an approval, or an outcome to settle); the
    /// run holds nothing, its folder stays, a decision requeues it.
    Parked,
    /// Another executor holds the run (or will, once the lease expires):
    /// write nothing, touch nothing.
    Released,
}

type Flow<T> = Result<T, Ended>;

fn end(code: RunErrorCode, message: impl Into<String>) -> Ended {
    Ended::Finished(Outcome::fail(code, message))
}

/// What handling one call came to.
enum Handled {
    Answered,
    /// Wait for a person.
    Park,
}

impl Service {
    pub(crate) async fn run_agent(
        self: &Arc<Self>,
        cx: &mut RunCx,
        a: Authorised,
    ) -> Result<Ended, Outcome> {
        let agent = self.agent_setup(cx, a).await?;
        // Cancel, the emergency stop and the lease, while the harness
        // holds the run.
        let watcher = self.spawn_run_watcher(cx);
        let ended = match self.agent_loop(cx, &agent).await {
            Ok(never) => match never {},
            Err(e) => e,
        };
        watcher.abort();
        Ok(ended)
    }

    /// A store failure: ours to report, unless we no longer hold the run.
    async fn lost_or(&self, agent: &Agent, message: String) -> Ended {
        match self
            .store
            .renew_lease(&agent.run.id, agent.token, self.cfg.lease)
            .await
        {
            Ok(()) => end(RunErrorCode::Internal, message),
            Err(_) => Ended::Released,
        }
    }

    async fn store_err(&self, agent: &Agent, e: StoreError) -> Ended {
        match e {
            StoreError::StaleToken => Ended::Released,
            other => self.lost_or(agent, other.to_string()).await,
        }
    }

    async fn svc_err(&self, agent: &Agent, e: Error) -> Ended {
        self.lost_or(agent, e.message).await
    }

    /// What a set cancel flag means: the emergency stop, a cancel
    /// request, or a lost lease.
    async fn stopped_by(&self, cx: &RunCx) -> Ended {
        if cx.kill.load(Ordering::SeqCst) {
            return end(
                RunErrorCode::EmergencyStop,
                "stopped by the workspace's emergency stop",
            );
        }
        match self.store.cancel_kind(&cx.claim.run.id).await {
            Ok(Some(airlock_store::CANCEL_BY_EMERGENCY_STOP)) => end(
                RunErrorCode::EmergencyStop,
                "stopped by the workspace's emergency stop",
            ),
            Ok(Some(k)) if k != 0 => end(RunErrorCode::Cancelled, "cancelled"),
            _ => Ended::Released,
        }
    }

    async fn load_state(&self, agent: &Agent) -> Flow<State> {
        let run = &agent.run;
        let items = match self.store.agent_items(&run.workspace_id, &run.id).await {
            Ok(i) => i,
            Err(e) => return Err(self.store_err(agent, e).await),
        };
        let actions = match self.store.list_actions(&run.workspace_id, &run.id).await {
            Ok(a) => a,
            Err(e) => return Err(self.store_err(agent, e).await),
        };
        State::rebuild(&items, actions, agent.input_taint.as_deref())
            .map_err(|m| end(RunErrorCode::Internal, m))
    }

    async fn append(
        &self,
        agent: &Agent,
        kind: &str,
        call_key: Option<&str>,
        body: &Value,
    ) -> Flow<()> {
        match self
            .store
            .append_agent_item(&agent.run.id, agent.token, kind, call_key, body)
            .await
        {
            Ok(Ok(_)) => Ok(()),
            // Answered already (by this executor before a restart): the
            // caller reloads; never a second answer.
            Ok(Err(_)) => Ok(()),
            Err(e) => Err(self.store_err(agent, e).await),
        }
    }

    /// A run event; best-effort (the transcript and the journal are the
    /// record).
    async fn event(&self, agent: &Agent, kind: &str, data: Value) {
        let _ = self
            .store
            .append_event(&agent.run.id, agent.token, kind, &data)
            .await;
    }

    /// Records the result of one call, in the transcript and in `state`.
    async fn answer(
        &self,
        agent: &Agent,
        state: &mut State,
        key: &str,
        item: ResultItem,
    ) -> Flow<()> {
        let body =
            serde_json::to_value(&item).map_err(|e| end(RunErrorCode::Internal, e.to_string()))?;
        self.append(agent, "tool_result", Some(key), &body).await?;
        state.answered.insert(key.to_string());
        state.spent.wall_time_ms = state.spent.wall_time_ms.saturating_add(item.duration_ms);
        state.spent.egress_bytes = state.spent.egress_bytes.saturating_add(item.egress_bytes);
        if let Some(t) = &item.taint {
            state.add_taint(t);
        }
        if item.finish_refused {
            state.finish_refusals += 1;
        }
        state.messages.push(airlock_model::Message::ToolResult {
            call_id: item.call,
            content: item.content,
            is_error: item.is_error,
        });
        Ok(())
    }

    async fn error_result(
        &self,
        agent: &Agent,
        state: &mut State,
        key: &str,
        call: &ToolCall,
        content: String,
    ) -> Flow<()> {
        let item = ResultItem {
            call: call.id.clone(),
            content,
            is_error: true,
            ..ResultItem::default()
        };
        self.answer(agent, state, key, item).await
    }

    /// The loop. Never returns `Ok`: every way out is an [`Ended`].
    async fn agent_loop(
        self: &Arc<Self>,
        cx: &RunCx,
        agent: &Agent,
    ) -> Flow<std::convert::Infallible> {
        let stops = Stops {
            cancel: cx.cancel.clone(),
            kill: cx.kill.clone(),
        };
        let mut state = self.load_state(agent).await?;
        if !state.opened {
            let messages = self.opening(agent).await?;
            self.append(agent, "prompt", None, &json!({"messages": messages}))
                .await?;
            state.messages.extend(messages);
            state.opened = true;
            self.event(
                agent,
                "agent",
                json!({"event": "started", "model_profile": agent.spec.model, "model": agent.profile.model, "autonomy": agent.autonomy, "tools": agent.granted.iter().map(|k| k.name()).collect::<Vec<_>>()}),
            )
            .await;
        }
        loop {
            if cx.cancel.load(Ordering::SeqCst) {
                return Err(self.stopped_by(cx).await);
            }
            // 1. Answer every call of the last response, in order.
            for (key, call) in state.unanswered() {
                if cx.cancel.load(Ordering::SeqCst) {
                    return Err(self.stopped_by(cx).await);
                }
                match self
                    .handle_call(cx, agent, &mut state, &key, &call, &stops)
                    .await?
                {
                    Handled::Answered => {}
                    Handled::Park => {
                        match self.park_for_approval(&agent.run, agent.token).await {
                            Ok(true) => return Err(Ended::Parked),
                            // Decided meanwhile: carry on from the store.
                            Ok(false) => {}
                            Err(e) => return Err(self.svc_err(agent, e).await),
                        }
                        state = self.load_state(agent).await?;
                        break;
                    }
                }
            }
            if !state.unanswered().is_empty() {
                continue;
            }
            // 2. A turn without calls: the model thinks it is done.
            if let Some((_, last)) = &state.last
                && last.tool_calls().next().is_none()
                && !state.reminded_since_last
            {
                let can_finish = agent.granted.contains(&ActionKind::Finish);
                if !can_finish {
                    // Without a finish tool, the end of a turn is the end.
                    let outputs = state.outputs.clone();
                    return Err(self.conclude(cx, agent, &state, outputs).await);
                }
                if state.reminders >= 1 {
                    return Err(end(
                        RunErrorCode::AgentNoFinish,
                        "the model stopped without calling finish, also after a reminder",
                    ));
                }
                let text = "You stopped without calling `finish`. Call `finish` with the outputs to end the run (or keep working with the tools).";
                self.append(agent, "user", None, &json!({"text": text}))
                    .await?;
                state.reminders += 1;
                state.reminded_since_last = true;
                state.messages.push(airlock_model::Message::user(text));
            }
            // 3. The next model request, within the budgets.
            if let Err(b) = agent.budgets.check(&state.spent, Next::ModelRequest) {
                return Err(end(budget_code(b.budget), b.to_string()));
            }
            // No tool call left in the budget: the model is told, and
            // offered only the tools that conclude the run, so it can
            // finish instead of being cut off at its next call (the
            // budget still ends the run if it calls anything else).
            let wind_down = agent.granted.contains(&ActionKind::Finish)
                && matches!(
                    agent.budgets.check(&state.spent, Next::ToolCall),
                    Err(b) if b.budget == airlock_agent::Budget::ToolCalls
                );
            let tools = if wind_down {
                if !state.wound_down {
                    let text = "This run's tool-call budget is spent: no more commands, files or requests. Only `write_output` and `finish` remain. Call `finish` now with the outputs.";
                    self.append(
                        agent,
                        "user",
                        None,
                        &json!({"text": text, "note": "tool_budget"}),
                    )
                    .await?;
                    state.messages.push(airlock_model::Message::user(text));
                    state.wound_down = true;
                }
                agent
                    .tools
                    .iter()
                    .filter(|t| {
                        t.name == ActionKind::Finish.name()
                            || t.name == ActionKind::WriteOutput.name()
                    })
                    .cloned()
                    .collect()
            } else {
                agent.tools.clone()
            };
            let request = agent.profile.request(state.messages.clone(), tools);
            if let Err(e) = request.validate() {
                return Err(end(
                    RunErrorCode::Internal,
                    format!("the transcript is not valid to send: {e}"),
                ));
            }
            let started = Instant::now();
            let response = {
                let cancel = cx.cancel.clone();
                let mut events = NoEvents;
                tokio::select! {
                    r = agent.client.complete(&request, &mut events) => r,
                    () = wait_set(cancel) => return Err(self.stopped_by(cx).await),
                }
            };
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let mut response = match response {
                Ok(r) => r,
                Err(e) => {
                    self.event(
                        agent,
                        "model",
                        json!({"error": e.code(), "message": e.to_string(), "duration_ms": duration_ms}),
                    )
                    .await;
                    return Err(end(RunErrorCode::ModelFailed, format!("{}: {e}", e.code())));
                }
            };
            unique_call_ids(&mut response, &state.messages);
            let cost = agent.profile.cost(&response.usage).ok().map(|c| c.0);
            let item = ResponseItem {
                response,
                cost_nano_usd: cost,
                duration_ms,
            };
            let body = serde_json::to_value(&item)
                .map_err(|e| end(RunErrorCode::Internal, e.to_string()))?;
            // Persisted before anything in it is acted on (DUR-2).
            self.append(agent, "response", None, &body).await?;
            super::crash_point("after_response_persisted");
            self.event(
                agent,
                "model",
                json!({
                    "step": state.spent.steps + 1,
                    "stop_reason": item.response.stop_reason.code(),
                    "usage": item.response.usage,
                    "usage_reported": item.response.usage_reported,
                    "cost_nano_usd": cost,
                    "attempts": item.response.attempts,
                    "duration_ms": duration_ms,
                    "tool_calls": item.response.tool_calls().map(|c| c.name.clone()).collect::<Vec<_>>(),
                }),
            )
            .await;
            // Reload: the sequence number of the response is the store's.
            state = self.load_state(agent).await?;
        }
    }

    /// The opening messages: the harness's rules, `AGENT.md`, the input.
    async fn opening(&self, agent: &Agent) -> Flow<Vec<airlock_model::Message>> {
        let b = &agent.bundle;
        let rel = b
            .entry
            .strip_prefix(&b.dir)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let text = airlock_files::read_bounded(&b.dir, &rel, airlock_worker::MAX_PROMPT_BYTES)
            .map_err(|e| end(RunErrorCode::StagingFailed, format!("the prompt: {e}")))?
            .ok_or_else(|| end(RunErrorCode::StagingFailed, "the prompt file is gone"))?;
        let text = String::from_utf8_lossy(&text).into_owned();
        Ok(super::prompt::opening(&b.manifest, &text, &agent.run.input))
    }

    /// The payload an approval binds to: the action as data, and what it
    /// runs under (run, worker, policy version, egress).
    fn payload_of(agent: &Agent, action: &Action) -> Value {
        let mut p = match action.payload() {
            Value::Object(m) => m,
            other => {
                let mut m = Map::new();
                m.insert("action".into(), other);
                m
            }
        };
        p.insert("run".into(), json!(agent.run.id));
        p.insert("worker".into(), json!(agent.run.worker_id));
        p.insert("policy_version".into(), json!(POLICY_VERSION));
        if matches!(
            action.kind(),
            ActionKind::RunCommand | ActionKind::HttpRequest
        ) {
            let m = &agent.bundle.manifest;
            p.insert(
                "egress".into(),
                json!({
                    "allow": m.egress.allow.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                    "channels": m.egress.channels.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                }),
            );
        }
        Value::Object(p)
    }

    /// One tool call through the pipeline.
    async fn handle_call(
        self: &Arc<Self>,
        cx: &RunCx,
        agent: &Agent,
        state: &mut State,
        key: &str,
        call: &ToolCall,
        stops: &Stops,
    ) -> Flow<Handled> {
        // Calls the provider did not complete, or whose arguments are not
        // an object, are answered, never executed.
        if let Some(msg) = call.error_for_model() {
            self.error_result(agent, state, key, call, msg).await?;
            return Ok(Handled::Answered);
        }
        let args = call.ready().cloned().unwrap_or_default();
        let text = Value::Object(args).to_string();
        let granted = |k: ActionKind| agent.granted.contains(&k);
        let action = match Action::parse(&call.name, &text, &granted) {
            Ok(a) => a,
            Err(e) => {
                self.error_result(
                    agent,
                    state,
                    key,
                    call,
                    format!("tool call not executed: {e}"),
                )
                .await?;
                return Ok(Handled::Answered);
            }
        };
        // The run's own record is checked before it is proposed.
        if let Action::WriteOutput { name, value } = &action
            && let Err(msg) = check_output(&agent.bundle.manifest, name, value)
        {
            self.error_result(agent, state, key, call, msg).await?;
            return Ok(Handled::Answered);
        }
        let mut finish_outputs = None;
        if let Action::Finish { outputs, .. } = &action {
            let mut merged = state.outputs.clone();
            for (k, v) in outputs {
                merged.insert(k.clone(), v.clone());
            }
            if let Err(msg) = self.check_finish(agent, &merged).await {
                let last_chance = state.finish_refusals == 0;
                let item = ResultItem {
                    call: call.id.clone(),
                    content: format!(
                        "finish refused: {msg}.{}",
                        if last_chance {
                            " Fix the outputs and call finish again (this is the one retry)."
                        } else {
                            ""
                        }
                    ),
                    is_error: true,
                    finish_refused: true,
                    ..ResultItem::default()
                };
                self.answer(agent, state, key, item).await?;
                if !last_chance {
                    return Err(end(RunErrorCode::SchemaViolation, msg));
                }
                return Ok(Handled::Answered);
            }
            finish_outputs = Some(merged);
        }

        let payload = Self::payload_of(agent, &action);
        let mut a = match self
            .propose_action(&agent.run, agent.token, key, action.kind().name(), &payload)
            .await
        {
            Ok((a, _)) => a,
            Err(e) => return Err(self.svc_err(agent, e).await),
        };
        loop {
            match a.state {
                ActionState::Proposed => {
                    // Budgets come before the policy: nobody is asked to
                    // approve an action the run can no longer afford
                    // (checked again at dispatch, after any wait).
                    if action.kind() != ActionKind::Finish
                        && let Err(b) = agent.budgets.check(&state.spent, Next::ToolCall)
                    {
                        let _ = self
                            .abort_action(
                                &agent.run,
                                agent.token,
                                &a.id,
                                b.budget.code(),
                                &b.to_string(),
                            )
                            .await;
                        return Err(end(budget_code(b.budget), b.to_string()));
                    }
                    let verdict = self.verdict(agent, state, &action);
                    a = match self
                        .decide_action(&agent.run, agent.token, &a.id, verdict)
                        .await
                    {
                        Ok(Decided::Ready(x) | Decided::Denied(x)) => x,
                        Ok(Decided::AwaitingApproval(x, _)) => x,
                        Err(e) => return Err(self.svc_err(agent, e).await),
                    };
                }
                ActionState::AwaitingApproval | ActionState::OutcomeUnknown => {
                    return Ok(Handled::Park);
                }
                // Ours only while we ran it; found after a restart, the
                // reaper makes it `outcome_unknown` once our lease lapses.
                ActionState::Dispatched => return Err(Ended::Released),
                ActionState::Completed | ActionState::Failed | ActionState::Aborted => {
                    let item = settled_result(call, &a);
                    self.answer(agent, state, key, item).await?;
                    return Ok(Handled::Answered);
                }
                ActionState::Decided | ActionState::Approved => {
                    return self
                        .dispatch(
                            cx,
                            agent,
                            state,
                            key,
                            call,
                            &action,
                            &payload,
                            a,
                            stops,
                            finish_outputs,
                        )
                        .await;
                }
            }
        }
    }

    /// The policy's verdict as the journal records it.
    fn verdict(&self, agent: &Agent, state: &State, action: &Action) -> Verdict {
        let granted = |k: ActionKind| agent.granted.contains(&k);
        let rules = super::setup::rules_of(&agent.spec.rules);
        let d = Policy {
            autonomy: agent.autonomy,
            granted: &granted,
            rules: &rules,
            tainted_by: &state.taint,
        }
        .decide(action);
        let detail = json!({
            "reasons": d.reasons,
            "rules": d.rules,
            "tainted_by": d.tainted_by,
            "autonomy": agent.autonomy,
            "policy_version": POLICY_VERSION,
        });
        match d.verdict {
            PolicyVerdict::Allow => Verdict::Allow { detail },
            PolicyVerdict::Deny => Verdict::Deny { detail },
            PolicyVerdict::RequireApproval => Verdict::RequireApproval {
                reason: approval_reason(action, &d),
                detail,
                ttl: Duration::from_secs(agent.spec.approval_ttl_s),
            },
        }
    }

    /// Budgets, the actor's authority and the stop, then the journal's
    /// dispatch, the tool, and the result.
    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        self: &Arc<Self>,
        cx: &RunCx,
        agent: &Agent,
        state: &mut State,
        key: &str,
        call: &ToolCall,
        action: &Action,
        payload: &Value,
        a: JournalAction,
        stops: &Stops,
        finish_outputs: Option<Map<String, Value>>,
    ) -> Flow<Handled> {
        let action_id = a.id.clone();
        let abort = |code: &'static str, message: String| {
            let action_id = action_id.clone();
            async move {
                let _ = self
                    .abort_action(&agent.run, agent.token, &action_id, code, &message)
                    .await;
            }
        };
        if cx.cancel.load(Ordering::SeqCst) {
            abort(
                "cancelled",
                "the run was stopped before this action ran".into(),
            )
            .await;
            return Err(self.stopped_by(cx).await);
        }
        if action.kind() != ActionKind::Finish
            && let Err(b) = agent.budgets.check(&state.spent, Next::ToolCall)
        {
            abort(b.budget.code(), b.to_string()).await;
            return Err(end(budget_code(b.budget), b.to_string()));
        }
        // IAM-6: the human actor's authority, again, before every effect.
        match self.actor_may_run(&agent.run).await {
            Ok(true) => {}
            Ok(false) => {
                let m = "the member who started this run may no longer create runs";
                abort("actor_not_authorized", m.into()).await;
                return Err(end(RunErrorCode::ActorNotAuthorized, m));
            }
            Err(e) => return Err(self.store_err(agent, e).await),
        }
        let ticket = match self
            .dispatch_action(&agent.run, agent.token, &a.id, payload)
            .await
        {
            Ok(t) => t,
            Err(e) if e.code == ErrorCode::EmergencyStopped => {
                return Err(end(
                    RunErrorCode::EmergencyStop,
                    "the workspace's emergency stop; the action did not run",
                ));
            }
            Err(e) => {
                // An approval that expired or no longer holds: the journal
                // moved the action; answer from what it says now.
                let now = self
                    .store
                    .list_actions(&agent.run.workspace_id, &agent.run.id)
                    .await
                    .ok()
                    .and_then(|all| all.into_iter().find(|x| x.id == a.id));
                match now {
                    Some(x) if x.state == ActionState::Aborted => {
                        self.answer(agent, state, key, settled_result(call, &x))
                            .await?;
                        return Ok(Handled::Answered);
                    }
                    _ => return Err(self.svc_err(agent, e).await),
                }
            }
        };
        super::crash_point("after_dispatched");
        let out = match action {
            Action::Finish { .. } => ToolOutput {
                ok: true,
                content: "finished".into(),
                record: json!({}),
                ..ToolOutput::default()
            },
            _ => self.run_tool(agent, &ticket, action, stops).await,
        };
        super::crash_point("after_tool_exit");
        // Stopped by the SIGTERM drain (DUR-2): what the command did before
        // it was killed is not known, so nothing is recorded here; the
        // action stays `dispatched` and the drain makes it
        // `outcome_unknown` for a person, as recovery after a crash would.
        if out.aborted && self.is_drain_stopped(&agent.run.id) {
            return Err(Ended::Released);
        }
        let end_state = if out.aborted {
            ActionEnd::Aborted
        } else if out.ok {
            ActionEnd::Completed
        } else {
            ActionEnd::Failed
        };
        let error = (!out.ok)
            .then(|| json!({"message": out.content.chars().take(2000).collect::<String>()}));
        if let Err(e) = self
            .complete_action(ticket, end_state, Some(&out.record), error.as_ref())
            .await
        {
            return Err(self.svc_err(agent, e).await);
        }
        state.spent.tool_calls += u64::from(action.kind() != ActionKind::Finish);
        if let Action::WriteOutput { name, value } = action {
            state.outputs.insert(name.clone(), value.clone());
        }
        if out.aborted {
            return Err(self.stopped_by(cx).await);
        }
        let item = ResultItem {
            call: call.id.clone(),
            content: out.content,
            is_error: !out.ok,
            duration_ms: out.duration_ms,
            egress_bytes: out.egress_bytes,
            taint: out.taint,
            action: Some(a.id.clone()),
            finish_refused: false,
        };
        self.answer(agent, state, key, item).await?;
        if let Some(outputs) = finish_outputs {
            return Err(self.conclude(cx, agent, state, outputs).await);
        }
        Ok(Handled::Answered)
    }

    /// Whether `outputs` (and the files under `output/`) satisfy the
    /// declared outputs.
    async fn check_finish(
        &self,
        agent: &Agent,
        outputs: &Map<String, Value>,
    ) -> Result<(), String> {
        let files = output_files(agent).await;
        agent
            .bundle
            .manifest
            .check_outputs(&Value::Object(outputs.clone()), &files)
            .map_err(|e| e.to_string())
    }

    /// Ends the run: file outputs published from `output/`, the outputs
    /// checked one last time.
    async fn conclude(
        &self,
        _cx: &RunCx,
        agent: &Agent,
        _state: &State,
        outputs: Map<String, Value>,
    ) -> Ended {
        let m = &agent.bundle.manifest;
        if let Err(msg) = self.check_finish(agent, &outputs).await {
            return end(RunErrorCode::SchemaViolation, msg);
        }
        let out_dir = agent.work.join("output");
        if out_dir.is_dir() {
            let budget = airlock_files::Budget {
                max_files: 1000,
                max_total_bytes: m.limits.output_bytes,
                max_file_bytes: m.limits.output_bytes,
                max_depth: 16,
            };
            let root = self.cfg.data_dir.join("artifacts");
            let collected = tokio::task::spawn_blocking(move || {
                let store = airlock_files::ArtifactStore::open(&root).map_err(|e| {
                    airlock_files::FileError::Io {
                        path: root.display().to_string(),
                        error: e.to_string(),
                    }
                })?;
                airlock_files::collect_into(&out_dir, &budget, &store)
            })
            .await;
            let files = match collected {
                Ok(Ok(f)) => f,
                Ok(Err(e)) => {
                    return end(crate::executor::file_error_code(&e), e.to_string());
                }
                Err(e) => return end(RunErrorCode::Internal, e.to_string()),
            };
            for f in files {
                // Every node may serve it (DUR-5): published before its row.
                if let Err(e) = self.blobs.publish(&f.sha256).await {
                    return end(
                        RunErrorCode::Internal,
                        format!("artifact {} could not be stored: {e}", f.rel_path),
                    );
                }
                let a = Artifact {
                    name: f.rel_path.clone(),
                    digest: f.sha256.clone(),
                    size: i64::try_from(f.size).unwrap_or(i64::MAX),
                    media_type: f.media_type.to_string(),
                };
                if let Err(e) = self
                    .store
                    .add_artifact(&agent.run.id, agent.token, &a)
                    .await
                {
                    return self.store_err(agent, e).await;
                }
            }
        }
        Ended::Finished(Outcome::succeeded(Finish {
            outputs: Some(Value::Object(outputs)),
            ..Finish::default()
        }))
    }
}

/// The files under the work directory's `output/`, relative to it.
async fn output_files(agent: &Agent) -> Vec<String> {
    let wd = agent.workdir.clone();
    tokio::task::spawn_blocking(move || {
        let opts = airlock_files::workdir::ListOpts {
            max_entries: 1000,
            max_depth: 16,
        };
        wd.list("output", &opts)
            .map(|l| {
                l.entries
                    .into_iter()
                    .filter(|e| e.kind == airlock_files::workdir::EntryKind::File)
                    .filter_map(|e| e.path.strip_prefix("output/").map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    })
    .await
    .unwrap_or_default()
}

/// One declared output set by `write_output`.
fn check_output(m: &airlock_worker::Manifest, name: &str, value: &Value) -> Result<(), String> {
    let Some((_, spec)) = m.outputs.iter().find(|(n, _)| n.as_str() == name) else {
        return Err(format!(
            "write_output refused: {name:?} is not a declared output"
        ));
    };
    if spec.path.is_some() {
        return Err(format!(
            "write_output refused: {name:?} is a file output; write it to output/{} with write_file",
            spec.path
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_default()
        ));
    }
    let files: Vec<String> = m
        .outputs
        .values()
        .filter_map(|s| s.path.as_ref().map(|p| p.to_string()))
        .collect();
    let mut one = Map::new();
    one.insert(name.to_string(), value.clone());
    match m.check_outputs(&Value::Object(one), &files) {
        Ok(()) => Ok(()),
        Err(
            airlock_worker::OutputError::Missing { .. }
            | airlock_worker::OutputError::FileMissing { .. },
        ) => Ok(()),
        Err(e) => Err(format!("write_output refused: {e}")),
    }
}

/// What the model is told about an action that ended without this
/// executor running it now (denied, rejected, expired, settled, or run
/// before a restart).
/// Gives every call of `response` an id no earlier call of the transcript
/// has (nor another call of the same response), before it is stored. All
/// three wire formats are stateless about ids (the whole transcript is
/// sent each time and a result names its call), and some compatible
/// servers number their calls per response (`call_0` every turn); the
/// transcript check refuses an id used twice, so a reused one gets a
/// suffix here instead of ending the run.
fn unique_call_ids(response: &mut airlock_model::ModelResponse, earlier: &[Message]) {
    let mut seen: std::collections::HashSet<String> = earlier
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { items } => Some(items),
            _ => None,
        })
        .flatten()
        .filter_map(|i| match i {
            AssistantItem::ToolCall(c) => Some(c.id.clone()),
            AssistantItem::Text { .. } => None,
        })
        .collect();
    for item in &mut response.items {
        if let airlock_model::ResponseItem::ToolCall(c) = item {
            if !seen.contains(&c.id) {
                seen.insert(c.id.clone());
                continue;
            }
            let mut n = 2u32;
            let fresh = loop {
                let candidate = format!("{}~{n}", c.id);
                if !seen.contains(&candidate) {
                    break candidate;
                }
                n = n.saturating_add(1);
            };
            seen.insert(fresh.clone());
            c.id = fresh;
        }
    }
}

fn settled_result(call: &ToolCall, a: &JournalAction) -> ResultItem {
    let content = match a.state {
        ActionState::Completed => match a.result.as_ref().and_then(|r| r.get("settlement")) {
            Some(_) => "a person settled this action: it took effect".to_string(),
            None => format!(
                "done (the harness restarted since; recorded result: {})",
                a.result.clone().unwrap_or(Value::Null)
            ),
        },
        ActionState::Failed => match a.result.as_ref().and_then(|r| r.get("settlement")) {
            Some(_) => "a person settled this action: it did not take effect".to_string(),
            None => format!(
                "failed (recorded: {})",
                a.error.clone().unwrap_or(Value::Null)
            ),
        },
        _ => {
            let code = a
                .error
                .as_ref()
                .and_then(|e| e.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("aborted");
            let reasons = a
                .decision
                .as_ref()
                .and_then(|d| d.pointer("/detail/reasons"))
                .cloned()
                .unwrap_or(Value::Null);
            match code {
                "denied" => format!("denied by policy ({reasons}); it did not run"),
                "approval_rejected" => "a person rejected this action; it did not run".into(),
                "approval_expired" => {
                    "approval_expired: nobody approved this action in time; it did not run".into()
                }
                other => format!("{other}: the action did not run"),
            }
        }
    };
    ResultItem {
        call: call.id.clone(),
        content,
        is_error: a.state != ActionState::Completed,
        action: Some(a.id.clone()),
        ..ResultItem::default()
    }
}

/// What the approver reads: the action, why a person decides, and what
/// tainted the context.
fn approval_reason(action: &Action, d: &airlock_agent::Decision) -> String {
    let what = match action {
        Action::RequestApproval { reason } => format!("The agent asks: {reason}"),
        Action::RunCommand { argv, cwd, .. } => format!(
            "Run {} in the work directory{}",
            serde_json::to_string(argv).unwrap_or_default(),
            cwd.as_deref()
                .map(|c| format!(" (in {c})"))
                .unwrap_or_default()
        ),
        Action::WriteFile {
            path,
            content_bytes,
            content_sha256,
            ..
        } => format!("Write {content_bytes} bytes to {path} (sha256 {content_sha256})"),
        Action::HttpRequest { method, url, .. } => format!("Send {method} {url}"),
        Action::ReadFile { path } => format!("Read {path}"),
        Action::ListFiles { path } => format!("List {}", path.as_deref().unwrap_or(".")),
        Action::WriteOutput { name, .. } => format!("Set output {name}"),
        Action::Finish { .. } => "Finish the run".into(),
    };
    let mut s = format!("{what}. Why a person decides: {}.", d.reasons.join("; "));
    if !d.tainted_by.is_empty() {
        s.push_str(&format!(
            " Untrusted content is in the agent's context: {}.",
            d.tainted_by.join("; ")
        ));
    }
    s.chars().take(1000).collect()
}

fn budget_code(b: airlock_agent::Budget) -> RunErrorCode {
    match b {
        airlock_agent::Budget::Steps => RunErrorCode::BudgetSteps,
        airlock_agent::Budget::ToolCalls => RunErrorCode::BudgetToolCalls,
        airlock_agent::Budget::Tokens => RunErrorCode::BudgetTokens,
        airlock_agent::Budget::Cost => RunErrorCode::BudgetCost,
        airlock_agent::Budget::WallTime => RunErrorCode::BudgetWallTime,
        airlock_agent::Budget::EgressBytes => RunErrorCode::BudgetEgressBytes,
    }
}

/// Resolves once `flag` is set (polled: the flag is set by another task
/// or thread without a waker).
async fn wait_set(flag: Arc<std::sync::atomic::AtomicBool>) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
