//! The per-request transcript check: is this request body a conversation
//! the provider would accept, tool calls and results included?
//!
//! The rules, per format:
//! - **Chat Completions**: roles are system, developer, user, assistant,
//!   tool; an assistant's `tool_calls` have unique ids, `type: function`
//!   and string arguments holding a JSON object (llama.cpp parses them);
//!   the messages right after it are `tool` messages
//!   answering each of those ids exactly once, before any other message; no
//!   `tool` message answers a call that is not open.
//! - **Responses**: `input` items are messages, `function_call` (unique
//!   `call_id`, name, string arguments) and `function_call_output`; every
//!   call has exactly one output after it and before the next user
//!   message; no output without its call.
//! - **Anthropic Messages**: `max_tokens` present; roles only user and
//!   assistant, alternating, starting with user; `tool_use` only from the
//!   assistant with an object `input`; the message after an assistant turn
//!   with `tool_use` blocks is a user message that **starts** with one
//!   `tool_result` per call (each id once) before any other block; no
//!   `tool_result` elsewhere; no empty text blocks.
//!
//! Every format: a model id, tools with valid names and object schemas.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

use crate::script::Format;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn tool_name_ok(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks one request body for `format`.
pub fn check(format: Format, body: &Value) -> Result<(), String> {
    if s(body, "model").is_none_or(str::is_empty) {
        return Err("model is missing".into());
    }
    match format {
        Format::Chat => check_chat(body),
        Format::Responses => check_responses(body),
        Format::Anthropic => check_anthropic(body),
    }
}

pub fn check_chat(body: &Value) -> Result<(), String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages must be a non-empty array")?;
    let mut ids = HashSet::new();
    let mut open: HashSet<String> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = s(m, "role").ok_or(format!("messages[{i}] has no role"))?;
        if role == "tool" {
            let id = s(m, "tool_call_id")
                .ok_or(format!("messages[{i}] tool message without tool_call_id"))?;
            if !open.remove(id) {
                return Err(format!(
                    "messages[{i}] answers {id:?}, which is not an open tool call"
                ));
            }
            if !m
                .get("content")
                .is_some_and(|c| c.is_string() || c.is_array())
            {
                return Err(format!("messages[{i}] tool content must be a string"));
            }
            continue;
        }
        if let Some(id) = open.iter().next() {
            return Err(format!(
                "messages[{i}] ({role}) comes before the result of tool call {id:?}"
            ));
        }
        match role {
            "system" | "developer" | "user" => {
                if m.get("content").is_none_or(Value::is_null) {
                    return Err(format!("messages[{i}] ({role}) has no content"));
                }
            }
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array);
                if m.get("content").is_none_or(Value::is_null) && calls.is_none_or(Vec::is_empty) {
                    return Err(format!(
                        "messages[{i}] assistant has neither content nor tool calls"
                    ));
                }
                for (k, c) in calls.into_iter().flatten().enumerate() {
                    let id = s(c, "id")
                        .filter(|x| !x.is_empty())
                        .ok_or(format!("messages[{i}].tool_calls[{k}] has no id"))?;
                    if s(c, "type") != Some("function") {
                        return Err(format!(
                            "messages[{i}].tool_calls[{k}] type is not function"
                        ));
                    }
                    let f = c
                        .get("function")
                        .ok_or(format!("messages[{i}].tool_calls[{k}] has no function"))?;
                    if s(f, "name").is_none_or(str::is_empty)
                        || !f.get("arguments").is_some_and(Value::is_string)
                    {
                        return Err(format!(
                            "messages[{i}].tool_calls[{k}] needs a name and string arguments"
                        ));
                    }
                    // Compatible servers (llama.cpp) parse the arguments to
                    // render their templates and refuse text that is not JSON.
                    let args = s(f, "arguments").unwrap_or("");
                    if !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()) {
                        return Err(format!(
                            "messages[{i}].tool_calls[{k}] arguments are not a JSON object"
                        ));
                    }
                    if !ids.insert(id.to_string()) {
                        return Err(format!("tool call id {id:?} is used twice"));
                    }
                    open.insert(id.to_string());
                }
            }
            other => return Err(format!("messages[{i}] has unknown role {other:?}")),
        }
    }
    if let Some(id) = open.iter().next() {
        return Err(format!("tool call {id:?} has no result"));
    }
    if let Some(tools) = body.get("tools") {
        for (k, t) in tools
            .as_array()
            .ok_or("tools must be an array")?
            .iter()
            .enumerate()
        {
            let f = t
                .get("function")
                .ok_or(format!("tools[{k}] has no function"))?;
            if s(t, "type") != Some("function") || !s(f, "name").is_some_and(tool_name_ok) {
                return Err(format!("tools[{k}] needs type function and a valid name"));
            }
            if f.get("parameters").and_then(|p| s(p, "type")) != Some("object") {
                return Err(format!("tools[{k}] parameters must be an object schema"));
            }
        }
    }
    Ok(())
}

pub fn check_responses(body: &Value) -> Result<(), String> {
    // A plain string is a single user message.
    if body
        .get("input")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
    {
        return Ok(());
    }
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("input must be a non-empty string or array")?;
    let mut ids = HashSet::new();
    let mut open: HashSet<String> = HashSet::new();
    for (i, item) in input.iter().enumerate() {
        let kind = s(item, "type").unwrap_or("message");
        match kind {
            "message" => {
                let role = s(item, "role").ok_or(format!("input[{i}] message has no role"))?;
                if !["user", "assistant", "system", "developer"].contains(&role) {
                    return Err(format!("input[{i}] has unknown role {role:?}"));
                }
                if role == "user"
                    && let Some(id) = open.iter().next()
                {
                    return Err(format!(
                        "input[{i}] user message comes before the output of call {id:?}"
                    ));
                }
                if !item
                    .get("content")
                    .is_some_and(|c| c.is_string() || c.is_array())
                {
                    return Err(format!("input[{i}] message has no content"));
                }
            }
            "function_call" => {
                let id = s(item, "call_id")
                    .filter(|x| !x.is_empty())
                    .ok_or(format!("input[{i}] function_call has no call_id"))?;
                if s(item, "name").is_none_or(str::is_empty)
                    || !item.get("arguments").is_some_and(Value::is_string)
                {
                    return Err(format!(
                        "input[{i}] function_call needs a name and string arguments"
                    ));
                }
                if !ids.insert(id.to_string()) {
                    return Err(format!("call_id {id:?} is used twice"));
                }
                open.insert(id.to_string());
            }
            "function_call_output" => {
                let id = s(item, "call_id")
                    .ok_or(format!("input[{i}] function_call_output has no call_id"))?;
                if !open.remove(id) {
                    return Err(format!(
                        "input[{i}] output for {id:?}, which is not an open call"
                    ));
                }
                if !item
                    .get("output")
                    .is_some_and(|o| o.is_string() || o.is_array())
                {
                    return Err(format!("input[{i}] output must be a string"));
                }
            }
            other => return Err(format!("input[{i}] has unknown type {other:?}")),
        }
    }
    if let Some(id) = open.iter().next() {
        return Err(format!("No tool output found for function call {id}"));
    }
    if let Some(tools) = body.get("tools") {
        for (k, t) in tools
            .as_array()
            .ok_or("tools must be an array")?
            .iter()
            .enumerate()
        {
            if s(t, "type") != Some("function") || !s(t, "name").is_some_and(tool_name_ok) {
                return Err(format!("tools[{k}] needs type function and a valid name"));
            }
            if t.get("parameters").and_then(|p| s(p, "type")) != Some("object") {
                return Err(format!("tools[{k}] parameters must be an object schema"));
            }
        }
    }
    Ok(())
}

fn blocks(m: &Value, i: usize) -> Result<Vec<Value>, String> {
    match m.get("content") {
        Some(Value::String(t)) if !t.is_empty() => {
            Ok(vec![serde_json::json!({"type": "text", "text": t})])
        }
        Some(Value::Array(b)) if !b.is_empty() => Ok(b.clone()),
        _ => Err(format!(
            "messages[{i}] content must be a non-empty string or block list"
        )),
    }
}

pub fn check_anthropic(body: &Value) -> Result<(), String> {
    if body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0) == 0 {
        return Err("max_tokens: Field required".into());
    }
    if let Some(sys) = body.get("system")
        && !(sys.is_string() || sys.is_array())
    {
        return Err("system must be a string or a list of text blocks".into());
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages must be a non-empty array")?;
    let mut ids = HashSet::new();
    // The tool_use ids of the previous assistant turn, in order.
    let mut pending: VecDeque<String> = VecDeque::new();
    let mut last_role = "";
    for (i, m) in messages.iter().enumerate() {
        let role = s(m, "role").ok_or(format!("messages[{i}] has no role"))?;
        if role != "user" && role != "assistant" {
            return Err(format!(
                "messages[{i}]: unexpected role {role:?} (system goes in the system parameter)"
            ));
        }
        if i == 0 && role != "user" {
            return Err("the first message must use the user role".into());
        }
        if role == last_role {
            return Err(format!(
                "messages[{i}]: roles must alternate between user and assistant"
            ));
        }
        last_role = role;
        let content = blocks(m, i)?;
        if role == "assistant" {
            for (k, b) in content.iter().enumerate() {
                match s(b, "type") {
                    Some("text") if s(b, "text").is_none_or(str::is_empty) => {
                        return Err(format!(
                            "messages[{i}].content[{k}]: text content blocks must be non-empty"
                        ));
                    }
                    Some("tool_use") => {
                        let id = s(b, "id")
                            .filter(|x| !x.is_empty())
                            .ok_or(format!("messages[{i}].content[{k}] tool_use has no id"))?;
                        if s(b, "name").is_none_or(str::is_empty) {
                            return Err(format!("messages[{i}].content[{k}] tool_use has no name"));
                        }
                        if !b.get("input").is_some_and(Value::is_object) {
                            return Err(format!(
                                "messages[{i}].content[{k}].input: Input should be a valid dictionary"
                            ));
                        }
                        if !ids.insert(id.to_string()) {
                            return Err(format!("tool_use ids must be unique: {id:?}"));
                        }
                        pending.push_back(id.to_string());
                    }
                    Some("tool_result") => {
                        return Err(format!(
                            "messages[{i}].content[{k}]: tool_result in an assistant message"
                        ));
                    }
                    _ => {}
                }
            }
        } else {
            let mut expected: HashSet<String> = pending.drain(..).collect();
            let mut results_done = false;
            for (k, b) in content.iter().enumerate() {
                match s(b, "type") {
                    Some("tool_result") => {
                        if results_done {
                            return Err(format!(
                                "messages[{i}].content[{k}]: tool_result blocks must come first in the user message"
                            ));
                        }
                        let id = s(b, "tool_use_id")
                            .ok_or(format!("messages[{i}].content[{k}] has no tool_use_id"))?;
                        if !expected.remove(id) {
                            return Err(format!(
                                "messages[{i}].content[{k}]: unexpected tool_use_id {id:?} (no matching tool_use in the previous message)"
                            ));
                        }
                        if let Some(e) = b.get("is_error")
                            && !e.is_boolean()
                        {
                            return Err(format!(
                                "messages[{i}].content[{k}].is_error must be a boolean"
                            ));
                        }
                    }
                    Some("tool_use") => {
                        return Err(format!(
                            "messages[{i}].content[{k}]: tool_use in a user message"
                        ));
                    }
                    Some("text") => {
                        if s(b, "text").is_none_or(str::is_empty) {
                            return Err(format!(
                                "messages[{i}].content[{k}]: text content blocks must be non-empty"
                            ));
                        }
                        results_done = true;
                    }
                    _ => results_done = true,
                }
            }
            if let Some(id) = expected.iter().next() {
                return Err(format!(
                    "messages[{i}]: tool_use ids were found without tool_result blocks immediately after: {id}"
                ));
            }
        }
    }
    if let Some(id) = pending.front() {
        return Err(format!("tool_use {id:?} has no tool_result"));
    }
    if let Some(tools) = body.get("tools") {
        for (k, t) in tools
            .as_array()
            .ok_or("tools must be an array")?
            .iter()
            .enumerate()
        {
            if !s(t, "name").is_some_and(tool_name_ok) {
                return Err(format!("tools[{k}] needs a valid name"));
            }
            if t.get("input_schema").and_then(|p| s(p, "type")) != Some("object") {
                return Err(format!("tools[{k}].input_schema must be an object schema"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    type Mutation = (&'static str, fn(&mut Value), &'static str);

    fn run(format: Format, good: Value, cases: &[Mutation]) {
        // Positive control: the well-formed body passes.
        assert_eq!(check(format, &good), Ok(()), "{format:?} good body");
        for (name, mutate, want) in cases {
            let mut b = good.clone();
            mutate(&mut b);
            let e = check(format, &b).expect_err(name);
            assert!(e.contains(want), "{format:?} {name}: {e}");
        }
    }

    #[test]
    fn agt_2_transcript_check_chat() {
        let good = json!({"model": "m", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "more"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]});
        run(
            Format::Chat,
            good,
            &[
                (
                    "missing result",
                    |b| {
                        b["messages"].as_array_mut().unwrap().remove(4);
                    },
                    "comes before the result",
                ),
                (
                    "missing last result",
                    |b| {
                        let m = b["messages"].as_array_mut().unwrap();
                        m.truncate(4);
                    },
                    "has no result",
                ),
                (
                    "duplicate result",
                    |b| {
                        let m = b["messages"].as_array_mut().unwrap();
                        m.insert(
                            4,
                            json!({"role": "tool", "tool_call_id": "b", "content": "2"}),
                        );
                    },
                    "not an open tool call",
                ),
                (
                    "orphan result",
                    |b| {
                        b["messages"][3]["tool_call_id"] = json!("zz");
                    },
                    "not an open tool call",
                ),
                (
                    "user between",
                    |b| {
                        b["messages"]
                            .as_array_mut()
                            .unwrap()
                            .insert(3, json!({"role": "user", "content": "x"}));
                    },
                    "comes before the result",
                ),
                (
                    "object arguments",
                    |b| {
                        b["messages"][2]["tool_calls"][0]["function"]["arguments"] = json!({});
                    },
                    "string arguments",
                ),
                (
                    "duplicate id",
                    |b| {
                        b["messages"][2]["tool_calls"][1]["id"] = json!("a");
                    },
                    "used twice",
                ),
                (
                    "bad tool name",
                    |b| {
                        b["tools"][0]["function"]["name"] = json!("a b");
                    },
                    "valid name",
                ),
                (
                    "no model",
                    |b| {
                        b["model"] = json!("");
                    },
                    "model",
                ),
            ],
        );
    }

    #[test]
    fn agt_2_transcript_check_responses() {
        let good = json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": "u"},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "1"},
            {"type": "function_call_output", "call_id": "b", "output": "2"},
            {"type": "message", "role": "user", "content": "more"}],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]});
        run(
            Format::Responses,
            good,
            &[
                (
                    "missing output",
                    |b| {
                        b["input"].as_array_mut().unwrap().remove(4);
                    },
                    "before the output of call",
                ),
                (
                    "missing output at end",
                    |b| {
                        b["input"].as_array_mut().unwrap().truncate(4);
                    },
                    "No tool output found",
                ),
                (
                    "output before call",
                    |b| {
                        b["input"].as_array_mut().unwrap().swap(1, 3);
                    },
                    "not an open call",
                ),
                (
                    "duplicate output",
                    |b| {
                        b["input"].as_array_mut().unwrap().insert(
                            4,
                            json!({"type": "function_call_output", "call_id": "a", "output": "1"}),
                        );
                    },
                    "not an open call",
                ),
                (
                    "duplicate call id",
                    |b| {
                        b["input"][2]["call_id"] = json!("a");
                    },
                    "used twice",
                ),
                (
                    "unknown item",
                    |b| {
                        b["input"][0]["type"] = json!("bogus");
                    },
                    "unknown type",
                ),
                (
                    "bad parameters",
                    |b| {
                        b["tools"][0]["parameters"] = json!({"type": "array"});
                    },
                    "object schema",
                ),
            ],
        );
    }

    #[test]
    fn agt_2_transcript_check_anthropic() {
        let good = json!({"model": "m", "max_tokens": 100, "system": "s", "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2", "is_error": true},
                {"type": "text", "text": "more"}]}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}]});
        run(
            Format::Anthropic,
            good,
            &[
                (
                    "text before results",
                    |b| {
                        b["messages"][2]["content"]
                            .as_array_mut()
                            .unwrap()
                            .swap(0, 2);
                    },
                    "must come first",
                ),
                (
                    "missing result",
                    |b| {
                        b["messages"][2]["content"]
                            .as_array_mut()
                            .unwrap()
                            .remove(1);
                    },
                    "without tool_result blocks",
                ),
                (
                    "orphan result",
                    |b| {
                        b["messages"][2]["content"][0]["tool_use_id"] = json!("zz");
                    },
                    "unexpected tool_use_id",
                ),
                (
                    "string input",
                    |b| {
                        b["messages"][1]["content"][1]["input"] = json!("{}");
                    },
                    "valid dictionary",
                ),
                (
                    "system role",
                    |b| {
                        b["messages"]
                            .as_array_mut()
                            .unwrap()
                            .insert(0, json!({"role": "system", "content": "s"}));
                    },
                    "unexpected role",
                ),
                (
                    "not alternating",
                    |b| {
                        b["messages"]
                            .as_array_mut()
                            .unwrap()
                            .insert(0, json!({"role": "user", "content": "x"}));
                    },
                    "alternate",
                ),
                (
                    "empty text",
                    |b| {
                        b["messages"][1]["content"][0]["text"] = json!("");
                    },
                    "non-empty",
                ),
                (
                    "no max_tokens",
                    |b| {
                        b.as_object_mut().unwrap().remove("max_tokens");
                    },
                    "max_tokens",
                ),
                (
                    "last call unanswered",
                    |b| {
                        b["messages"].as_array_mut().unwrap().truncate(2);
                    },
                    "has no tool_result",
                ),
                (
                    "result in assistant",
                    |b| {
                        b["messages"][1]["content"][0] =
                            json!({"type": "tool_result", "tool_use_id": "a", "content": "x"});
                    },
                    "tool_result in an assistant",
                ),
                (
                    "duplicate ids",
                    |b| {
                        b["messages"][1]["content"][2]["id"] = json!("a");
                    },
                    "unique",
                ),
            ],
        );
    }
}
