//! Anthropic Messages (`POST /v1/messages`).
//!
//! Request: system texts joined into `system`; messages alternate user and
//! assistant (consecutive messages of one role are merged); a call is a
//! `tool_use` block whose `input` is an object (argument text that is not
//! a JSON object is sent as `{}`: the API refuses anything else, and the
//! model is told through the error result); results are `tool_result`
//! blocks (with `is_error`) placed **first** in the next user message, any
//! user text after them. Empty text blocks are left out (the API refuses
//! them).
//!
//! Stream: `message_start`, then per block `content_block_start`,
//! `content_block_delta` (`text_delta`, `input_json_delta`) and
//! `content_block_stop` (which marks a call complete), then
//! `message_delta` (stop reason, cumulative output usage) and
//! `message_stop`, the terminal event. `ping` is ignored; `error` is an
//! error (overloaded and API errors are retried).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{FormatStream, error_parts, event_json, invalid, str_of, stream_error, u64_of};
use crate::conversation::{AssistantItem, Message, ModelRequest, ToolChoice};
use crate::error::ModelError;
use crate::events::{EventSink, StreamEvent};
use crate::profile::WireFormat;
use crate::response::{Builder, ModelResponse, StopReason, Usage, parse_arguments};

const F: WireFormat = WireFormat::AnthropicMessages;

/// The version header every request carries.
pub const API_VERSION: &str = "2023-06-01";

pub(crate) fn encode(r: &ModelRequest) -> Value {
    let mut system = Vec::new();
    // (role, tool_result blocks, other blocks)
    let mut turns: Vec<(&str, Vec<Value>, Vec<Value>)> = Vec::new();
    let mut push =
        |role: &'static str, result: Option<Value>, block: Option<Value>| match turns.last_mut() {
            Some((r, results, blocks)) if *r == role => {
                results.extend(result);
                blocks.extend(block);
            }
            _ => turns.push((
                role,
                result.into_iter().collect(),
                block.into_iter().collect(),
            )),
        };
    for m in &r.messages {
        match m {
            Message::System { text } => system.push(text.as_str()),
            Message::User { text } => {
                if !text.is_empty() {
                    push("user", None, Some(json!({"type": "text", "text": text})));
                }
            }
            Message::Assistant { items } => {
                for i in items {
                    match i {
                        AssistantItem::Text { text } if text.is_empty() => {}
                        AssistantItem::Text { text } => {
                            push(
                                "assistant",
                                None,
                                Some(json!({"type": "text", "text": text})),
                            );
                        }
                        AssistantItem::ToolCall(c) => {
                            let input =
                                parse_arguments(&c.arguments).unwrap_or_else(|_| Map::new());
                            push(
                                "assistant",
                                None,
                                Some(
                                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                                ),
                            );
                        }
                    }
                }
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push("user", Some(block), None);
            }
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut results, blocks)| {
            results.extend(blocks);
            json!({"role": role, "content": results})
        })
        .collect();
    let mut body = json!({
        "model": r.model,
        "max_tokens": r.max_output_tokens,
        "messages": messages,
        "stream": r.stream,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(t) = r.temperature {
        body["temperature"] = json!(t);
    }
    if !r.tools.is_empty() {
        body["tools"] = Value::Array(
            r.tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect(),
        );
        let mut choice = json!({"type": match r.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "any",
            ToolChoice::None => "none",
        }});
        if r.parallel_tool_calls == Some(false) && r.tool_choice != ToolChoice::None {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        body["tool_choice"] = choice;
    }
    body
}

fn stop_of(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn" | "stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolCalls,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("refusal") => StopReason::ContentFilter,
        // pause_turn, model_context_window_exceeded, unknown, none.
        _ => StopReason::Incomplete,
    }
}

/// Anthropic's counts, kept apart until the end (`message_delta` repeats
/// them cumulatively).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    seen: bool,
}

impl Counts {
    fn update(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        self.seen = true;
        if let Some(n) = u64_of(u, "input_tokens") {
            self.input = n;
        }
        if let Some(n) = u64_of(u, "cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = u64_of(u, "cache_creation_input_tokens") {
            self.cache_write = n;
        }
        if let Some(n) = u64_of(u, "output_tokens") {
            self.output = n;
        }
    }

    /// Anthropic's `input_tokens` excludes cache reads and writes; ours
    /// includes them. Thinking is not broken out: reasoning stays 0.
    fn usage(&self) -> Option<Usage> {
        self.seen.then(|| Usage {
            input_tokens: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_write),
            cached_input_tokens: self.cache_read,
            output_tokens: self.output,
            reasoning_tokens: 0,
        })
    }
}

pub(crate) fn decode_body(
    v: &Value,
    max_argument_bytes: usize,
) -> Result<ModelResponse, ModelError> {
    if str_of(v, "type") == Some("error")
        && let Some((kind, message)) = error_parts(v)
    {
        return Err(stream_error(kind, message));
    }
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(F, "the message has no content list"))?;
    let mut b = Builder::new(max_argument_bytes);
    b.response_id = str_of(v, "id").map(str::to_string);
    b.model = str_of(v, "model").map(str::to_string);
    for block in content {
        match str_of(block, "type") {
            Some("text") => b.push_text(str_of(block, "text").unwrap_or("")),
            Some("tool_use") => {
                let slot = b.open_call(
                    str_of(block, "id").unwrap_or(""),
                    str_of(block, "name").unwrap_or(""),
                );
                let input = block
                    .get("input")
                    .cloned()
                    .unwrap_or(Value::Object(Map::new()));
                b.set_arguments(slot, &input.to_string());
                if let Some(c) = b.call_mut(slot) {
                    c.complete = true;
                }
            }
            _ => {}
        }
    }
    let mut counts = Counts::default();
    if let Some(u) = v.get("usage") {
        counts.update(u);
    }
    b.usage = counts.usage();
    let reason = str_of(v, "stop_reason");
    Ok(b.finish(stop_of(reason), reason.map(str::to_string), None))
}

#[derive(Debug)]
struct Block {
    slot: usize,
    /// `input` of `content_block_start`, used when no delta follows.
    start_input: Option<String>,
    saw_delta: bool,
}

#[derive(Debug)]
pub(crate) struct Stream {
    b: Builder,
    blocks: HashMap<u64, Block>,
    counts: Counts,
    stop: Option<String>,
}

impl Stream {
    pub fn new(max_argument_bytes: usize) -> Self {
        Self {
            b: Builder::new(max_argument_bytes),
            blocks: HashMap::new(),
            counts: Counts::default(),
            stop: None,
        }
    }
}

impl FormatStream for Stream {
    fn event(&mut self, data: &str, sink: &mut dyn EventSink) -> Result<bool, ModelError> {
        let v = event_json(F, data)?;
        match str_of(&v, "type").unwrap_or("") {
            "message_start" => {
                if let Some(m) = v.get("message") {
                    self.b.response_id = str_of(m, "id").map(str::to_string);
                    self.b.model = str_of(m, "model").map(str::to_string);
                    if let Some(u) = m.get("usage") {
                        self.counts.update(u);
                    }
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (u64_of(&v, "index"), v.get("content_block"))
                else {
                    return Ok(false);
                };
                let slot = match str_of(block, "type") {
                    Some("text") => {
                        let s = self.b.open_text();
                        let text = str_of(block, "text").unwrap_or("");
                        self.b.text_at(s, text);
                        s
                    }
                    Some("tool_use") => {
                        let id = str_of(block, "id").unwrap_or("");
                        let name = str_of(block, "name").unwrap_or("");
                        sink.event(StreamEvent::ToolCallStarted {
                            id: id.to_string(),
                            name: name.to_string(),
                        });
                        self.b.open_call(id, name)
                    }
                    // Thinking, redacted thinking, server tools: not ours.
                    _ => return Ok(false),
                };
                let start_input = block
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    .map(Value::to_string);
                self.blocks.insert(
                    index,
                    Block {
                        slot,
                        start_input,
                        saw_delta: false,
                    },
                );
            }
            "content_block_delta" => {
                let (Some(index), Some(delta)) = (u64_of(&v, "index"), v.get("delta")) else {
                    return Ok(false);
                };
                let Some(block) = self.blocks.get_mut(&index) else {
                    return Ok(false);
                };
                match str_of(delta, "type") {
                    Some("text_delta") => {
                        let text = str_of(delta, "text").unwrap_or("");
                        self.b.text_at(block.slot, text);
                        if !text.is_empty() {
                            sink.event(StreamEvent::TextDelta {
                                text: text.to_string(),
                            });
                        }
                    }
                    Some("input_json_delta") => {
                        block.saw_delta = true;
                        let slot = block.slot;
                        self.b
                            .append_arguments(slot, str_of(delta, "partial_json").unwrap_or(""));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = u64_of(&v, "index").and_then(|i| self.blocks.get(&i)) {
                    let (slot, fallback) = (
                        block.slot,
                        (!block.saw_delta)
                            .then(|| block.start_input.clone())
                            .flatten(),
                    );
                    if let Some(input) = fallback {
                        self.b.set_arguments(slot, &input);
                    }
                    if let Some(c) = self.b.call_mut(slot) {
                        c.complete = true;
                        sink.event(StreamEvent::ToolCallDone { id: c.id.clone() });
                    }
                }
            }
            "message_delta" => {
                if let Some(r) = v.get("delta").and_then(|d| str_of(d, "stop_reason")) {
                    self.stop = Some(r.to_string());
                }
                if let Some(u) = v.get("usage") {
                    self.counts.update(u);
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let (kind, message) = error_parts(&v).unwrap_or(("error".into(), String::new()));
                return Err(stream_error(kind, message));
            }
            // ping and anything new.
            _ => {}
        }
        Ok(false)
    }

    fn finish(mut self: Box<Self>) -> Result<ModelResponse, ModelError> {
        self.b.usage = self.counts.usage();
        let stop = stop_of(self.stop.as_deref());
        Ok(self.b.finish(stop, self.stop, None))
    }
}
