//! OpenAI Chat Completions (`POST /v1/chat/completions`) and the servers
//! compatible with it.
//!
//! Request: system messages stay in place; an assistant turn is one
//! message with `content` (text or null) and `tool_calls` (argument text
//! that is not a JSON object goes back as `{}`); each result is a
//! `tool` message with its `tool_call_id`, right after the call's turn.
//! There is no error flag on a result, so an error result's content starts
//! with [`super::ERROR_RESULT_PREFIX`].
//!
//! Stream: `data:` chunks whose `choices[0].delta` carries text and tool
//! call fragments keyed by `index` (the id and name in the first fragment,
//! the argument text spread over the rest); `finish_reason` in a later
//! chunk; usage in a last chunk with empty `choices` when
//! `stream_options.include_usage` was asked; `data: [DONE]` ends it. The
//! finish reason is what marks the calls complete.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{
    ERROR_RESULT_PREFIX, FormatStream, arguments_text, error_parts, event_json, invalid,
    openai_usage, str_of, stream_error, u64_of,
};
use crate::conversation::{AssistantItem, Message, ModelRequest, ToolChoice};
use crate::error::ModelError;
use crate::events::{EventSink, StreamEvent};
use crate::profile::{Compat, MaxTokensField, WireFormat};
use crate::response::{Builder, ModelResponse, StopReason, parse_arguments};

const F: WireFormat = WireFormat::OpenAiChat;

pub(crate) fn encode(r: &ModelRequest, compat: &Compat) -> Value {
    let mut messages = Vec::new();
    for m in &r.messages {
        match m {
            Message::System { text } => messages.push(json!({"role": "system", "content": text})),
            Message::User { text } => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant { items } => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for i in items {
                    match i {
                        AssistantItem::Text { text: t } => text.push_str(t),
                        AssistantItem::ToolCall(c) => calls.push(json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": sendable_arguments(&c.arguments)},
                        })),
                    }
                }
                let mut msg = json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { Value::String(text) },
                });
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => messages.push(json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": if *is_error { format!("{ERROR_RESULT_PREFIX}{content}") } else { content.clone() },
            })),
        }
    }
    let mut body = json!({
        "model": r.model,
        "messages": messages,
        "stream": r.stream,
    });
    let field = match compat.max_tokens_field {
        MaxTokensField::MaxTokens => "max_tokens",
        MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
    };
    body[field] = json!(r.max_output_tokens);
    if r.stream && compat.stream_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    // Some compatible servers refuse an empty tool list or a choice
    // without tools: both are left out when there are none.
    if !r.tools.is_empty() {
        body["tools"] = Value::Array(
            r.tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        },
                    })
                })
                .collect(),
        );
        body["tool_choice"] = json!(match r.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        });
        if let Some(p) = r.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(p);
        }
    }
    body
}

/// Argument text as it goes back to the server. Compatible servers parse
/// it to render their chat templates (llama.cpp refuses the request when
/// it is not JSON), so text that is not a JSON object is sent as `{}`; the
/// error result that answers the call tells the model what was wrong.
fn sendable_arguments(raw: &str) -> String {
    match parse_arguments(raw) {
        Ok(_) if !raw.trim().is_empty() => raw.to_string(),
        _ => "{}".to_string(),
    }
}

fn stop_of(finish: Option<&str>) -> StopReason {
    match finish {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolCalls,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::Incomplete,
    }
}

/// Text of `content`: a string, or an array of `{type: text, text}` parts.
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| str_of(p, "text"))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

pub(crate) fn decode_body(
    v: &Value,
    max_argument_bytes: usize,
) -> Result<ModelResponse, ModelError> {
    if let Some((kind, message)) = error_parts(v) {
        return Err(stream_error(kind, message));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| invalid(F, "no choices in the response"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| invalid(F, "the choice has no message"))?;
    let mut b = Builder::new(max_argument_bytes);
    b.response_id = str_of(v, "id").map(str::to_string);
    b.model = str_of(v, "model").map(str::to_string);
    b.usage = v.get("usage").and_then(openai_usage);
    let mut text = content_text(message.get("content"));
    if text.is_empty() {
        text = content_text(message.get("refusal"));
    }
    b.push_text(&text);
    let finish = str_of(choice, "finish_reason");
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for c in calls {
            let f = c.get("function").unwrap_or(&Value::Null);
            let slot = b.open_call(
                str_of(c, "id").unwrap_or(""),
                str_of(f, "name").unwrap_or(""),
            );
            b.set_arguments(slot, &arguments_text(f.get("arguments")));
            if let Some(call) = b.call_mut(slot) {
                call.complete = finish.is_some();
            }
        }
    }
    Ok(b.finish(stop_of(finish), finish.map(str::to_string), None))
}

/// The stream state.
#[derive(Debug)]
pub(crate) struct Stream {
    b: Builder,
    /// Provider `index` → builder slot.
    calls: HashMap<u64, usize>,
    /// Call slots in order.
    order: Vec<usize>,
    /// The last fragment's key and slot (for fragments without an index).
    last: Option<(u64, usize)>,
    unindexed: u64,
    finish: Option<String>,
}

impl Stream {
    pub fn new(max_argument_bytes: usize) -> Self {
        Self {
            b: Builder::new(max_argument_bytes),
            calls: HashMap::new(),
            order: Vec::new(),
            last: None,
            unindexed: 0,
            finish: None,
        }
    }

    fn fragment(&mut self, tc: &Value, sink: &mut dyn EventSink) {
        let id = str_of(tc, "id").unwrap_or("");
        let f = tc.get("function").unwrap_or(&Value::Null);
        let name = str_of(f, "name").unwrap_or("");
        // The index says which call a fragment belongs to. Servers that
        // leave it out send one call after another: a new id starts a new
        // call, anything else continues the last one.
        let index = match u64_of(tc, "index") {
            Some(i) => i,
            None => {
                let continues = self.last.and_then(|(k, slot)| {
                    let same = id.is_empty() || self.b.call_mut(slot).is_some_and(|c| c.id == id);
                    same.then_some(k)
                });
                match continues {
                    Some(k) => k,
                    None => {
                        // Keys far from any real index.
                        self.unindexed += 1;
                        u64::MAX - self.unindexed
                    }
                }
            }
        };
        let slot = match self.calls.get(&index) {
            Some(&s) => s,
            None => {
                let s = self.b.open_call(id, name);
                self.calls.insert(index, s);
                self.order.push(s);
                sink.event(StreamEvent::ToolCallStarted {
                    id: id.to_string(),
                    name: name.to_string(),
                });
                s
            }
        };
        self.last = Some((index, slot));
        if let Some(c) = self.b.call_mut(slot) {
            // Some servers repeat the id and name on every fragment: the
            // first ones stand.
            if c.id.is_empty() && !id.is_empty() {
                c.id = id.to_string();
            }
            if c.name.is_empty() && !name.is_empty() {
                c.name = name.to_string();
            }
        }
        let args = arguments_text(f.get("arguments"));
        if !args.is_empty() {
            self.b.append_arguments(slot, &args);
        }
    }
}

impl FormatStream for Stream {
    fn event(&mut self, data: &str, sink: &mut dyn EventSink) -> Result<bool, ModelError> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let v = event_json(F, data)?;
        if let Some((kind, message)) = error_parts(&v) {
            return Err(stream_error(kind, message));
        }
        if self.b.response_id.is_none() {
            self.b.response_id = str_of(&v, "id").map(str::to_string);
        }
        if self.b.model.is_none() {
            self.b.model = str_of(&v, "model").map(str::to_string);
        }
        if let Some(u) = v.get("usage").and_then(openai_usage) {
            self.b.usage = Some(u);
        }
        // n = 1: only the first choice is read.
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| u64_of(c, "index").unwrap_or(0) == 0))
        else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            let mut text = content_text(delta.get("content"));
            if text.is_empty() {
                text = content_text(delta.get("refusal"));
            }
            if !text.is_empty() {
                self.b.push_text(&text);
                sink.event(StreamEvent::TextDelta { text });
            }
            if let Some(tcs) = delta.get("tool_calls").and_then(Value::as_array) {
                for tc in tcs {
                    self.fragment(tc, sink);
                }
            }
        }
        if let Some(f) = str_of(choice, "finish_reason") {
            self.finish = Some(f.to_string());
            for &slot in &self.order {
                if let Some(c) = self.b.call_mut(slot)
                    && !c.complete
                {
                    c.complete = true;
                    sink.event(StreamEvent::ToolCallDone { id: c.id.clone() });
                }
            }
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelResponse, ModelError> {
        let stop = stop_of(self.finish.as_deref());
        Ok(self.b.finish(stop, self.finish, None))
    }
}
