//! A scripted reply as each provider would send it: a whole JSON body, or
//! the list of SSE frames of a stream. Written from the providers'
//! documentation independently of `airlock-model`'s decoders, so the two
//! check each other rather than share mistakes.

use serde_json::{Value, json};

use crate::script::{Call, Fault, Format, Reply, Step, Usage};

/// What to send (before delivery faults are applied).
#[derive(Debug)]
pub enum Rendered {
    Body(Value),
    Events(Vec<String>),
}

/// How the reply ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Normal,
    Truncated,
}

/// Pieces of about `n` bytes, cut on character boundaries.
fn fragments(s: &str, n: usize) -> Vec<String> {
    let n = n.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < s.len() {
        let mut end = (start + n).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(s[start..end].to_string());
        start = end;
    }
    out
}

fn half(s: &str) -> String {
    let mut cut = s.len() / 2;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_string()
}

/// The reply as it stands after a token limit: the last call's arguments
/// (or the text) cut in half.
fn truncated(reply: &Reply) -> Reply {
    match reply {
        Reply::Text(t) => Reply::Text(half(t)),
        Reply::Calls { text, calls } => {
            let mut calls = calls.clone();
            if let Some(last) = calls.last_mut() {
                last.arguments = half(&last.arguments);
            }
            Reply::Calls {
                text: text.clone(),
                calls,
            }
        }
    }
}

fn parts(reply: &Reply) -> (Option<&str>, &[Call]) {
    match reply {
        Reply::Text(t) => (Some(t.as_str()), &[]),
        Reply::Calls { text, calls } => (text.as_deref(), calls.as_slice()),
    }
}

fn sse_data(v: &Value) -> String {
    format!("data: {v}\n\n")
}

fn sse_named(name: &str, v: &Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

/// Renders `step` for `format`.
pub fn render(
    format: Format,
    step: &Step,
    model: &str,
    stream: bool,
    include_usage: bool,
) -> Rendered {
    let end = if step.fault == Fault::Truncate {
        End::Truncated
    } else {
        End::Normal
    };
    let reply = if end == End::Truncated {
        truncated(&step.reply)
    } else {
        step.reply.clone()
    };
    let mut r = match (format, stream) {
        (Format::Chat, false) => Rendered::Body(chat_body(&reply, step.usage, model, end)),
        (Format::Chat, true) => {
            Rendered::Events(chat_events(&reply, step, model, end, include_usage))
        }
        (Format::Responses, false) => {
            Rendered::Body(responses_body(&reply, step.usage, model, end))
        }
        (Format::Responses, true) => Rendered::Events(responses_events(&reply, step, model, end)),
        (Format::Anthropic, false) => {
            Rendered::Body(anthropic_body(&reply, step.usage, model, end))
        }
        (Format::Anthropic, true) => Rendered::Events(anthropic_events(&reply, step, model, end)),
    };
    // Reported errors replace the end of the answer.
    let error = match &step.fault {
        Fault::ErrorEvent { kind, message } => Some((kind.clone(), message.clone(), false)),
        Fault::Failed { code, message } => Some((code.clone(), message.clone(), true)),
        _ => None,
    };
    if let Some((kind, message, failed)) = error {
        r = match r {
            Rendered::Body(_) => Rendered::Body(error_body(format, &kind, &message, failed, model)),
            Rendered::Events(mut events) => {
                events.truncate(1);
                events.push(error_event(format, &kind, &message, failed, model));
                Rendered::Events(events)
            }
        };
    }
    r
}

fn error_body(format: Format, kind: &str, message: &str, failed: bool, model: &str) -> Value {
    match format {
        Format::Chat => json!({"error": {"message": message, "type": kind, "code": kind}}),
        Format::Responses if failed => json!({
            "id": "resp_scripted", "object": "response", "status": "failed", "model": model,
            "output": [], "error": {"code": kind, "message": message},
        }),
        Format::Responses => json!({"error": {"message": message, "type": kind, "code": kind}}),
        Format::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
    }
}

fn error_event(format: Format, kind: &str, message: &str, failed: bool, model: &str) -> String {
    match format {
        Format::Chat => {
            sse_data(&json!({"error": {"message": message, "type": kind, "code": kind}}))
        }
        Format::Responses if failed => sse_named(
            "response.failed",
            &json!({"type": "response.failed", "sequence_number": 99, "response": {
                "id": "resp_scripted", "object": "response", "status": "failed", "model": model,
                "output": [], "error": {"code": kind, "message": message},
            }}),
        ),
        Format::Responses => sse_named(
            "error",
            &json!({"type": "error", "sequence_number": 99, "code": kind, "message": message, "param": null}),
        ),
        Format::Anthropic => sse_named(
            "error",
            &json!({"type": "error", "error": {"type": kind, "message": message}}),
        ),
    }
}

// ---- Chat Completions ----

fn chat_usage(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}

fn chat_finish(calls: &[Call], end: End) -> &'static str {
    match (end, calls.is_empty()) {
        (End::Truncated, _) => "length",
        (End::Normal, true) => "stop",
        (End::Normal, false) => "tool_calls",
    }
}

fn chat_body(reply: &Reply, usage: Usage, model: &str, end: End) -> Value {
    let (text, calls) = parts(reply);
    let mut message = json!({"role": "assistant", "content": text.filter(|t| !t.is_empty())});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": chat_finish(calls, end)}],
        "usage": chat_usage(usage),
    })
}

fn chat_events(
    reply: &Reply,
    step: &Step,
    model: &str,
    end: End,
    include_usage: bool,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        sse_data(&json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    };
    let (text, calls) = parts(reply);
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for f in fragments(text.unwrap_or(""), step.fragment) {
        out.push(chunk(json!({"content": f}), Value::Null));
    }
    // Per call: its opening fragment (id, name), then argument pieces.
    let mut per_call: Vec<Vec<String>> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = vec![chunk(
                json!({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}]}),
                Value::Null,
            )];
            for f in fragments(&c.arguments, step.fragment) {
                v.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": f}}]}),
                    Value::Null,
                ));
            }
            v
        })
        .collect();
    if step.interleave {
        let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
        for k in 0..longest {
            for c in &per_call {
                if let Some(e) = c.get(k) {
                    out.push(e.clone());
                }
            }
        }
    } else {
        for c in per_call.iter_mut() {
            out.append(c);
        }
    }
    out.push(chunk(json!({}), json!(chat_finish(calls, end))));
    if include_usage {
        out.push(sse_data(&json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": chat_usage(step.usage),
        })));
    }
    out.push("data: [DONE]\n\n".to_string());
    out
}

// ---- Responses ----

fn responses_usage(u: Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.output,
    })
}

fn message_item(i: usize, text: &str, status: &str) -> Value {
    json!({
        "id": format!("msg_{i}"), "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

fn call_item(i: usize, c: &Call, status: &str, arguments: &str) -> Value {
    json!({
        "id": format!("fc_{i}"), "type": "function_call", "status": status,
        "call_id": c.id, "name": c.name, "arguments": arguments,
    })
}

/// The output items and the terminal response object.
fn responses_output(reply: &Reply, end: End) -> Vec<Value> {
    let (text, calls) = parts(reply);
    let mut items = Vec::new();
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        let status = if end == End::Truncated && calls.is_empty() {
            "incomplete"
        } else {
            "completed"
        };
        items.push(message_item(0, t, status));
    }
    for (k, c) in calls.iter().enumerate() {
        let last = k + 1 == calls.len();
        let status = if end == End::Truncated && last {
            "incomplete"
        } else {
            "completed"
        };
        items.push(call_item(items.len(), c, status, &c.arguments));
    }
    items
}

fn responses_object(output: Vec<Value>, usage: Usage, model: &str, end: End) -> Value {
    let mut r = json!({
        "id": "resp_scripted",
        "object": "response",
        "created_at": 0,
        "model": model,
        "output": output,
        "usage": responses_usage(usage),
        "error": null,
    });
    match end {
        End::Normal => {
            r["status"] = json!("completed");
            r["incomplete_details"] = Value::Null;
        }
        End::Truncated => {
            r["status"] = json!("incomplete");
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
    }
    r
}

fn responses_body(reply: &Reply, usage: Usage, model: &str, end: End) -> Value {
    responses_object(responses_output(reply, end), usage, model, end)
}

fn responses_events(reply: &Reply, step: &Step, model: &str, end: End) -> Vec<String> {
    let mut seq = 0u64;
    let mut ev = |name: &str, mut v: Value| {
        v["type"] = json!(name);
        v["sequence_number"] = json!(seq);
        seq += 1;
        sse_named(name, &v)
    };
    let mut out = vec![ev(
        "response.created",
        json!({"response": {"id": "resp_scripted", "object": "response", "status": "in_progress", "model": model, "output": []}}),
    )];
    let items = responses_output(reply, end);
    let (text, calls) = parts(reply);
    let mut index = 0usize;
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        out.push(ev("response.output_item.added", json!({"output_index": index, "item": {
            "id": "msg_0", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
        out.push(ev(
            "response.content_part.added",
            json!({"item_id": "msg_0", "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ));
        for f in fragments(t, step.fragment) {
            out.push(ev(
                "response.output_text.delta",
                json!({"item_id": "msg_0", "output_index": index, "content_index": 0, "delta": f}),
            ));
        }
        out.push(ev(
            "response.output_text.done",
            json!({"item_id": "msg_0", "output_index": index, "content_index": 0, "text": t}),
        ));
        out.push(ev(
            "response.content_part.done",
            json!({"item_id": "msg_0", "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "text": t, "annotations": []}}),
        ));
        out.push(ev("response.output_item.done", json!({"output_index": index, "item": items.get(index).cloned().unwrap_or(Value::Null)})));
        index += 1;
    }
    for c in calls {
        let id = format!("fc_{index}");
        out.push(ev(
            "response.output_item.added",
            json!({"output_index": index, "item": call_item(index, c, "in_progress", "")}),
        ));
        for f in fragments(&c.arguments, step.fragment) {
            out.push(ev(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": f}),
            ));
        }
        out.push(ev(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": c.arguments}),
        ));
        out.push(ev("response.output_item.done", json!({"output_index": index, "item": items.get(index).cloned().unwrap_or(Value::Null)})));
        index += 1;
    }
    let terminal = match end {
        End::Normal => "response.completed",
        End::Truncated => "response.incomplete",
    };
    out.push(ev(
        terminal,
        json!({"response": responses_object(items, step.usage, model, end)}),
    ));
    out
}

// ---- Anthropic Messages ----

/// Anthropic's `input_tokens` excludes cache reads.
fn anthropic_usage(u: Usage) -> Value {
    json!({
        "input_tokens": u.input.saturating_sub(u.cached),
        "cache_read_input_tokens": u.cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": u.output,
    })
}

fn anthropic_stop(calls: &[Call], end: End) -> &'static str {
    match (end, calls.is_empty()) {
        (End::Truncated, _) => "max_tokens",
        (End::Normal, true) => "end_turn",
        (End::Normal, false) => "tool_use",
    }
}

fn anthropic_body(reply: &Reply, usage: Usage, model: &str, end: End) -> Value {
    let (text, calls) = parts(reply);
    let mut content = Vec::new();
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for c in calls {
        // A whole body carries `input` as JSON: argument text that is not
        // JSON travels as a string (a wrong type the client must refuse).
        let input =
            serde_json::from_str::<Value>(&c.arguments).unwrap_or_else(|_| json!(c.arguments));
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    json!({
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": anthropic_stop(calls, end),
        "stop_sequence": null,
        "usage": anthropic_usage(usage),
    })
}

fn anthropic_events(reply: &Reply, step: &Step, model: &str, end: End) -> Vec<String> {
    let (text, calls) = parts(reply);
    let mut start_usage = anthropic_usage(step.usage);
    start_usage["output_tokens"] = json!(1);
    let mut out = vec![
        sse_named(
            "message_start",
            &json!({"type": "message_start", "message": {
            "id": "msg_scripted", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
        ),
        sse_named("ping", &json!({"type": "ping"})),
    ];
    let mut index = 0usize;
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        out.push(sse_named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}),
        ));
        for f in fragments(t, step.fragment) {
            out.push(sse_named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": f}}),
            ));
        }
        out.push(sse_named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for c in calls {
        out.push(sse_named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
        ));
        out.push(sse_named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ));
        for f in fragments(&c.arguments, step.fragment) {
            out.push(sse_named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": f}}),
            ));
        }
        out.push(sse_named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push(sse_named(
        "message_delta",
        &json!({"type": "message_delta",
        "delta": {"stop_reason": anthropic_stop(calls, end), "stop_sequence": null},
        "usage": {"output_tokens": step.usage.output}}),
    ));
    out.push(sse_named("message_stop", &json!({"type": "message_stop"})));
    out
}
