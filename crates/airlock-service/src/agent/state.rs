//! An agent run's state, rebuilt from what the store holds: the transcript
//! (opening messages, each model response, each tool result, reminders)
//! and the action journal. Nothing else is trusted across a restart.
//!
//! Transcript items (`agent_items.body`):
//!
//! | kind | body |
//! |---|---|
//! | `prompt` | `{"messages": [Message]}`: the opening |
//! | `response` | `{"response": ModelResponse, "cost_nano_usd": n \| null, "duration_ms": n}` |
//! | `tool_result` | `{"call": id, "content", "is_error", "duration_ms", "egress_bytes", "taint", "action", "finish_refused"}`; its `call_id` column is `<response seq>:<call id>` |
//! | `user` | `{"text": …}`: a reminder from the harness; `{"text", "note": "tool_budget"}`: the tool-call budget is spent, only `finish` and `write_output` are offered from then on |
//!
//! Must not: contain SQL; decide anything.

use std::collections::HashSet;

use airlock_agent::Spent;
use airlock_model::{Message, ModelResponse};
use airlock_protocol::actions::Action;
use airlock_store::AgentItem;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A model response as persisted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResponseItem {
    pub(crate) response: ModelResponse,
    pub(crate) cost_nano_usd: Option<u64>,
    pub(crate) duration_ms: u64,
}

/// A tool result as persisted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ResultItem {
    pub(crate) call: String,
    pub(crate) content: String,
    pub(crate) is_error: bool,
    #[serde(default)]
    pub(crate) duration_ms: u64,
    #[serde(default)]
    pub(crate) egress_bytes: u64,
    /// What untrusted content this result brought into the context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) taint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<String>,
    /// A `finish` whose outputs did not match (one corrective retry).
    #[serde(default)]
    pub(crate) finish_refused: bool,
}

/// The key of a call: unique per run even when a provider reuses call ids
/// across responses.
pub(crate) fn call_key(response_seq: i64, call_id: &str) -> String {
    format!("{response_seq}:{call_id}")
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// The conversation so far, as the model will see it.
    pub(crate) messages: Vec<Message>,
    /// Whether the opening was persisted.
    pub(crate) opened: bool,
    /// The last response and its sequence number.
    pub(crate) last: Option<(i64, ModelResponse)>,
    /// Keys of the calls that have a result.
    pub(crate) answered: HashSet<String>,
    pub(crate) spent: Spent,
    /// What tainted the context, oldest first, without repeats.
    pub(crate) taint: Vec<String>,
    pub(crate) finish_refusals: u32,
    pub(crate) reminders: u32,
    /// A reminder was added after the last response.
    pub(crate) reminded_since_last: bool,
    /// The model was told the tool-call budget is spent (once).
    pub(crate) wound_down: bool,
    /// Outputs set by completed `write_output` actions, in order.
    pub(crate) outputs: Map<String, Value>,
    /// The journal, by idempotency key.
    pub(crate) actions: Vec<Action>,
}

impl State {
    pub(crate) fn add_taint(&mut self, t: &str) {
        if !self.taint.iter().any(|x| x == t) {
            self.taint.push(t.to_string());
        }
    }

    /// Rebuilds the state. `Err` names an item that cannot be read (a
    /// corrupt transcript ends the run; it is never guessed at).
    pub(crate) fn rebuild(
        items: &[AgentItem],
        actions: Vec<Action>,
        input_taint: Option<&str>,
    ) -> Result<State, String> {
        let mut s = State::default();
        if let Some(t) = input_taint {
            s.add_taint(t);
        }
        for item in items {
            let bad = |e: serde_json::Error| format!("transcript item {}: {e}", item.seq);
            match item.kind.as_str() {
                "prompt" => {
                    let m: Vec<Message> = serde_json::from_value(
                        item.body.get("messages").cloned().unwrap_or(Value::Null),
                    )
                    .map_err(bad)?;
                    s.messages.extend(m);
                    s.opened = true;
                }
                "response" => {
                    let r: ResponseItem = serde_json::from_value(item.body.clone()).map_err(bad)?;
                    s.spent.steps += 1;
                    s.spent.tokens = s
                        .spent
                        .tokens
                        .saturating_add(r.response.usage.total_tokens());
                    s.spent.cost_nano_usd = s
                        .spent
                        .cost_nano_usd
                        .saturating_add(r.cost_nano_usd.unwrap_or(0));
                    s.spent.wall_time_ms = s.spent.wall_time_ms.saturating_add(r.duration_ms);
                    s.messages.push(r.response.to_message());
                    s.last = Some((item.seq, r.response));
                    s.reminded_since_last = false;
                }
                "tool_result" => {
                    let r: ResultItem = serde_json::from_value(item.body.clone()).map_err(bad)?;
                    s.spent.wall_time_ms = s.spent.wall_time_ms.saturating_add(r.duration_ms);
                    s.spent.egress_bytes = s.spent.egress_bytes.saturating_add(r.egress_bytes);
                    if let Some(t) = &r.taint {
                        s.add_taint(t);
                    }
                    if r.finish_refused {
                        s.finish_refusals += 1;
                    }
                    if let Some(k) = &item.call_id {
                        s.answered.insert(k.clone());
                    }
                    s.messages.push(Message::ToolResult {
                        call_id: r.call,
                        content: r.content,
                        is_error: r.is_error,
                    });
                }
                "user" => {
                    let text = item
                        .body
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if item.body.get("note").and_then(Value::as_str) == Some("tool_budget") {
                        s.wound_down = true;
                    } else {
                        s.reminders += 1;
                        s.reminded_since_last = true;
                    }
                    s.messages.push(Message::user(text));
                }
                other => {
                    return Err(format!(
                        "transcript item {}: unknown kind {other:?}",
                        item.seq
                    ));
                }
            }
        }
        s.set_actions(actions);
        Ok(s)
    }

    /// Takes the journal: tool calls spent and outputs written.
    pub(crate) fn set_actions(&mut self, actions: Vec<Action>) {
        use airlock_protocol::actions::ActionState;
        self.spent.tool_calls = actions
            .iter()
            .filter(|a| a.dispatched_at.is_some() && a.kind != "finish")
            .count() as u64;
        self.outputs = Map::new();
        for a in &actions {
            if a.kind == "write_output"
                && a.state == ActionState::Completed
                && let (Some(name), Some(value)) = (
                    a.payload.get("name").and_then(Value::as_str),
                    a.payload.get("value"),
                )
            {
                self.outputs.insert(name.to_string(), value.clone());
            }
        }
        self.actions = actions;
    }

    /// The calls of the last response that still need a result, in order.
    pub(crate) fn unanswered(&self) -> Vec<(String, airlock_model::ToolCall)> {
        let Some((seq, r)) = &self.last else {
            return Vec::new();
        };
        r.tool_calls()
            .map(|c| (call_key(*seq, &c.id), c.clone()))
            .filter(|(k, _)| !self.answered.contains(k))
            .collect()
    }
}
