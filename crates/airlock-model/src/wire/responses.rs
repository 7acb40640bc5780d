//! OpenAI Responses (`POST /v1/responses`), used statelessly
//! (`store: false`): every request carries the whole conversation.
//!
//! Request: system texts joined into `instructions`; the conversation is a
//! flat list of items: `message` items for text, a `function_call` item
//! per call (`call_id`, name, argument text; the provider's own item id is
//! not sent back, which would require its reasoning item too) and a
//! `function_call_output` item per result, matched by `call_id`. There is
//! no error flag: an error result starts with
//! [`super::ERROR_RESULT_PREFIX`].
//!
//! Stream: typed events; output items are announced
//! (`response.output_item.added`), filled (`response.output_text.delta`,
//! `response.function_call_arguments.delta` / `.done`) and closed
//! (`response.output_item.done`, whose item is authoritative); the
//! stream ends with `response.completed`, `response.incomplete` or
//! `response.failed` (no `[DONE]`). A call is complete when its item is
//! done with status `completed`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    ERROR_RESULT_PREFIX, FormatStream, arguments_text, error_parts, event_json, invalid,
    openai_usage, str_of, stream_error, transient_kind, u64_of,
};
use crate::conversation::{AssistantItem, Message, ModelRequest, ToolChoice};
use crate::error::{ModelError, bound};
use crate::events::{EventSink, StreamEvent};
use crate::profile::WireFormat;
use crate::response::{Builder, ModelResponse, ProviderFailure, StopReason};

const F: WireFormat = WireFormat::OpenAiResponses;

pub(crate) fn encode(r: &ModelRequest) -> Value {
    let mut instructions = Vec::new();
    let mut input = Vec::new();
    for m in &r.messages {
        match m {
            Message::System { text } => instructions.push(text.as_str()),
            Message::User { text } => {
                input.push(json!({"type": "message", "role": "user", "content": text}));
            }
            Message::Assistant { items } => {
                for i in items {
                    match i {
                        AssistantItem::Text { text } if text.is_empty() => {}
                        AssistantItem::Text { text } => input.push(
                            json!({"type": "message", "role": "assistant", "content": text}),
                        ),
                        AssistantItem::ToolCall(c) => input.push(json!({
                            "type": "function_call",
                            "call_id": c.id,
                            "name": c.name,
                            "arguments": c.arguments,
                        })),
                    }
                }
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => input.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": if *is_error { format!("{ERROR_RESULT_PREFIX}{content}") } else { content.clone() },
            })),
        }
    }
    let mut body = json!({
        "model": r.model,
        "input": input,
        "stream": r.stream,
        "store": false,
        "max_output_tokens": r.max_output_tokens,
    });
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    if !r.tools.is_empty() {
        body["tools"] = Value::Array(
            r.tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                        "strict": false,
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

/// The text of a `message` item: its `output_text` and `refusal` parts.
fn message_text(item: &Value) -> String {
    item.get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| str_of(p, "text").or_else(|| str_of(p, "refusal")))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

/// A function call item is complete when its status says so (an item
/// without a status, from a server that does not send one, counts as
/// complete; the response's own status still gates execution).
fn call_complete(item: &Value) -> bool {
    matches!(str_of(item, "status"), None | Some("completed"))
}

/// What the terminal response object says: the stop, the provider's word,
/// a failure. A failure of a transient kind is an error (retried).
fn terminal(
    b: &mut Builder,
    resp: &Value,
) -> Result<(StopReason, Option<String>, Option<ProviderFailure>), ModelError> {
    if let Some(id) = str_of(resp, "id") {
        b.response_id = Some(id.to_string());
    }
    if let Some(m) = str_of(resp, "model") {
        b.model = Some(m.to_string());
    }
    if let Some(u) = resp.get("usage").and_then(openai_usage) {
        b.usage = Some(u);
    }
    let status = str_of(resp, "status").unwrap_or("completed");
    Ok(match status {
        "completed" => (StopReason::EndTurn, Some(status.to_string()), None),
        "incomplete" => {
            let reason = resp
                .get("incomplete_details")
                .and_then(|d| str_of(d, "reason"))
                .unwrap_or("incomplete");
            let stop = match reason {
                "max_output_tokens" => StopReason::MaxTokens,
                "content_filter" => StopReason::ContentFilter,
                _ => StopReason::Incomplete,
            };
            (stop, Some(reason.to_string()), None)
        }
        "failed" => {
            let (kind, message) = error_parts(resp).unwrap_or(("failed".into(), String::new()));
            if transient_kind(&kind) {
                return Err(stream_error(kind, message));
            }
            (
                StopReason::Error,
                Some(status.to_string()),
                Some(ProviderFailure {
                    kind: bound(kind),
                    message: bound(message),
                }),
            )
        }
        other => (StopReason::Incomplete, Some(other.to_string()), None),
    })
}

pub(crate) fn decode_body(
    v: &Value,
    max_argument_bytes: usize,
) -> Result<ModelResponse, ModelError> {
    if str_of(v, "status").is_none()
        && let Some((kind, message)) = error_parts(v)
    {
        return Err(stream_error(kind, message));
    }
    let output = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(F, "the response has no output list"))?;
    let mut b = Builder::new(max_argument_bytes);
    for item in output {
        match str_of(item, "type") {
            Some("message") => b.push_text(&message_text(item)),
            Some("function_call") => {
                let slot = b.open_call(
                    str_of(item, "call_id").unwrap_or(""),
                    str_of(item, "name").unwrap_or(""),
                );
                b.set_arguments(slot, &arguments_text(item.get("arguments")));
                if let Some(c) = b.call_mut(slot) {
                    c.complete = call_complete(item);
                }
            }
            _ => {}
        }
    }
    let (stop, provider_stop, failure) = terminal(&mut b, v)?;
    Ok(b.finish(stop, provider_stop, failure))
}

#[derive(Debug)]
pub(crate) struct Stream {
    b: Builder,
    /// `output_index` → builder slot.
    slots: BTreeMap<u64, usize>,
    /// Item id → `output_index` (for events that name only the item).
    item_index: BTreeMap<String, u64>,
    end: Option<(StopReason, Option<String>, Option<ProviderFailure>)>,
}

impl Stream {
    pub fn new(max_argument_bytes: usize) -> Self {
        Self {
            b: Builder::new(max_argument_bytes),
            slots: BTreeMap::new(),
            item_index: BTreeMap::new(),
            end: None,
        }
    }

    fn index_of(&self, v: &Value) -> Option<u64> {
        u64_of(v, "output_index")
            .or_else(|| str_of(v, "item_id").and_then(|id| self.item_index.get(id).copied()))
    }

    /// The slot for an item, opened from the item when first seen.
    fn slot_for(
        &mut self,
        index: u64,
        item: Option<&Value>,
        sink: &mut dyn EventSink,
    ) -> Option<usize> {
        if let Some(&s) = self.slots.get(&index) {
            return Some(s);
        }
        let item = item?;
        if let Some(id) = str_of(item, "id") {
            self.item_index.insert(id.to_string(), index);
        }
        let slot = match str_of(item, "type") {
            Some("message") => self.b.open_text(),
            Some("function_call") => {
                let id = str_of(item, "call_id").unwrap_or("");
                let name = str_of(item, "name").unwrap_or("");
                sink.event(StreamEvent::ToolCallStarted {
                    id: id.to_string(),
                    name: name.to_string(),
                });
                self.b.open_call(id, name)
            }
            // Reasoning and other items carry nothing the harness uses.
            _ => return None,
        };
        self.slots.insert(index, slot);
        Some(slot)
    }
}

impl FormatStream for Stream {
    fn event(&mut self, data: &str, sink: &mut dyn EventSink) -> Result<bool, ModelError> {
        let v = event_json(F, data)?;
        let kind = str_of(&v, "type").unwrap_or("");
        match kind {
            "response.created" | "response.in_progress" => {
                if let Some(r) = v.get("response") {
                    self.b.response_id = str_of(r, "id").map(str::to_string);
                    self.b.model = str_of(r, "model").map(str::to_string);
                }
            }
            "response.output_item.added" => {
                if let Some(index) = u64_of(&v, "output_index") {
                    let item = v.get("item");
                    if let Some(slot) = self.slot_for(index, item, sink) {
                        let args = arguments_text(item.and_then(|i| i.get("arguments")));
                        if !args.is_empty() {
                            self.b.append_arguments(slot, &args);
                        }
                    }
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = str_of(&v, "delta").unwrap_or("");
                if let Some(index) = self.index_of(&v) {
                    let message = json!({"type": "message"});
                    if let Some(slot) = self.slot_for(index, Some(&message), sink) {
                        self.b.text_at(slot, delta);
                    }
                }
                if !delta.is_empty() {
                    sink.event(StreamEvent::TextDelta {
                        text: delta.to_string(),
                    });
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(slot) = self.index_of(&v).and_then(|i| self.slots.get(&i).copied()) {
                    self.b
                        .append_arguments(slot, str_of(&v, "delta").unwrap_or(""));
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(slot), Some(args)) = (
                    self.index_of(&v).and_then(|i| self.slots.get(&i).copied()),
                    str_of(&v, "arguments"),
                ) {
                    self.b.set_arguments(slot, args);
                }
            }
            "response.output_item.done" => {
                let Some(index) = u64_of(&v, "output_index") else {
                    return Ok(false);
                };
                let Some(item) = v.get("item") else {
                    return Ok(false);
                };
                let Some(slot) = self.slot_for(index, Some(item), sink) else {
                    return Ok(false);
                };
                match str_of(item, "type") {
                    Some("message") => self.b.set_text(slot, &message_text(item)),
                    Some("function_call") => {
                        if item.get("arguments").is_some() {
                            self.b
                                .set_arguments(slot, &arguments_text(item.get("arguments")));
                        }
                        let complete = call_complete(item);
                        if let Some(c) = self.b.call_mut(slot) {
                            if let Some(id) = str_of(item, "call_id") {
                                c.id = id.to_string();
                            }
                            if let Some(name) = str_of(item, "name") {
                                c.name = name.to_string();
                            }
                            c.complete = complete;
                            if complete {
                                sink.event(StreamEvent::ToolCallDone { id: c.id.clone() });
                            }
                        }
                    }
                    _ => {}
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let resp = v
                    .get("response")
                    .ok_or_else(|| invalid(F, format!("{kind} without a response")))?;
                self.end = Some(terminal(&mut self.b, resp)?);
                return Ok(true);
            }
            "error" => {
                let kind = str_of(&v, "code")
                    .or_else(|| v.get("error").and_then(|e| str_of(e, "code")))
                    .or_else(|| v.get("error").and_then(|e| str_of(e, "type")))
                    .unwrap_or("error")
                    .to_string();
                let message = str_of(&v, "message")
                    .or_else(|| v.get("error").and_then(|e| str_of(e, "message")))
                    .unwrap_or("")
                    .to_string();
                return Err(stream_error(kind, message));
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ModelResponse, ModelError> {
        let (stop, provider_stop, failure) = self
            .end
            .ok_or_else(|| invalid(F, "the stream ended without a terminal response"))?;
        Ok(self.b.finish(stop, provider_stop, failure))
    }
}
