//! The scripted server's streams are what the official Python packages
//! expect: `openai` (Chat Completions, Responses) and `anthropic`
//! (Messages) assemble the same calls, arguments, stop reasons and usage
//! with their own stream helpers. So tests written against the scripted
//! server test against the real formats, not against this crate's idea of
//! them.
//!
//! `scripts/test` installs the packages into `target/pydeps` (or
//! `AIRLOCK_TEST_PYDEPS`) and `target/pydeps-anthropic` (or
//! `AIRLOCK_TEST_PYDEPS_ANTHROPIC`). Without one, its test fails, unless
//! `AIRLOCK_TEST_SKIP_OPENAI` / `AIRLOCK_TEST_SKIP_ANTHROPIC` is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use airlock_modeltest::{ScriptedServer, Step, Usage, call};
use serde_json::{Value, json};

const SCRIPT: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from openai import OpenAI
c = OpenAI(base_url=sys.argv[2] + "/v1", api_key="not-a-real-key", max_retries=0)
chat_tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
resp_tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
out = {}
with c.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}], tools=chat_tools, stream_options={"include_usage": True}) as s:
    f = s.get_final_completion()
m = f.choices[0].message
out["chat_stream"] = {"content": m.content, "calls": [[t.id, t.function.name, t.function.arguments] for t in (m.tool_calls or [])],
                      "finish": f.choices[0].finish_reason, "usage": [f.usage.prompt_tokens, f.usage.completion_tokens, f.usage.prompt_tokens_details.cached_tokens]}
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
out["chat"] = {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason}
with c.responses.stream(model="m", input="hi", tools=resp_tools) as s:
    f = s.get_final_response()
out["responses_stream"] = {"items": [[i.type, getattr(i, "call_id", None), getattr(i, "arguments", None), getattr(i, "status", None)] for i in f.output],
                           "text": f.output_text, "status": f.status,
                           "usage": [f.usage.input_tokens, f.usage.input_tokens_details.cached_tokens, f.usage.output_tokens, f.usage.output_tokens_details.reasoning_tokens]}
r = c.responses.create(model="m", input="hi", tools=resp_tools)
out["responses"] = {"items": [[i.type, getattr(i, "call_id", None), getattr(i, "arguments", None)] for i in r.output], "status": r.status}
print(json.dumps(out))
"#;

/// The folder holding `package`, or `None` when the test is skipped by
/// name; a missing package without the skip variable fails.
fn deps(package: &str, var: &str, folder: &str, skip: &str) -> Option<PathBuf> {
    let deps = std::env::var(var).map(PathBuf::from).unwrap_or_else(|_| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../target")
            .join(folder)
    });
    if deps.join(package).exists() {
        return Some(deps.canonicalize().unwrap());
    }
    assert!(
        std::env::var_os(skip).is_some(),
        "the official {package} package is not installed in {}: run scripts/test \
         (it installs it), or set {skip}=1 to skip this test",
        deps.display()
    );
    None
}

fn python(script: &str, deps: &std::path::Path, base: &str) -> Value {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script, deps.to_str().unwrap(), base])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_2_official_openai_client_reads_the_scripted_streams() {
    let Some(deps) = deps(
        "openai",
        "AIRLOCK_TEST_PYDEPS",
        "pydeps",
        "AIRLOCK_TEST_SKIP_OPENAI",
    ) else {
        return;
    };
    let usage = Usage {
        input: 40,
        cached: 8,
        output: 12,
        reasoning: 3,
    };
    let server = ScriptedServer::start([
        Step::text_and_calls(
            "Reading both.",
            vec![
                call("call_1", "read_file", r#"{"path": "a.txt"}"#),
                call("call_2", "read_file", r#"{"path": "b/ç.txt"}"#),
            ],
        )
        .interleave()
        .fragment(4)
        .usage(usage),
        Step::text("Plain answer."),
        Step::text_and_calls(
            "Let me see.",
            vec![call("call_3", "read_file", r#"{"path": "c"}"#)],
        )
        .fragment(3)
        .usage(usage),
        Step::calls(vec![call("call_4", "read_file", "{}")]),
    ])
    .await
    .unwrap();
    let base = server.base_url();
    let got = tokio::task::spawn_blocking(move || python(SCRIPT, &deps, &base))
        .await
        .unwrap();
    assert_eq!(
        got,
        json!({
            "chat_stream": {
                "content": "Reading both.",
                "calls": [["call_1", "read_file", "{\"path\": \"a.txt\"}"], ["call_2", "read_file", "{\"path\": \"b/ç.txt\"}"]],
                "finish": "tool_calls",
                "usage": [40, 12, 8],
            },
            "chat": {"content": "Plain answer.", "finish": "stop"},
            "responses_stream": {
                "items": [["message", null, null, "completed"], ["function_call", "call_3", "{\"path\": \"c\"}", "completed"]],
                "text": "Let me see.",
                "status": "completed",
                "usage": [40, 8, 12, 3],
            },
            "responses": {"items": [["function_call", "call_4", "{}"]], "status": "completed"},
        })
    );
    assert_eq!(server.violations(), Vec::<String>::new());
}

const ANTHROPIC_SCRIPT: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from anthropic import Anthropic
c = Anthropic(base_url=sys.argv[2], api_key="not-a-real-key", max_retries=0)
tools = [{"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
def blocks(m):
    return [[b.type, getattr(b, "text", None), getattr(b, "id", None), getattr(b, "input", None)] for b in m.content]
out = {}
with c.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=tools) as s:
    m = s.get_final_message()
out["stream"] = {"blocks": blocks(m), "stop": m.stop_reason,
                 "usage": [m.usage.input_tokens, m.usage.cache_read_input_tokens, m.usage.output_tokens]}
m = c.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=tools)
out["whole"] = {"blocks": blocks(m), "stop": m.stop_reason}
with c.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=tools) as s:
    m = s.get_final_message()
out["truncated"] = {"stop": m.stop_reason}
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_2_official_anthropic_client_reads_the_scripted_streams() {
    let Some(deps) = deps(
        "anthropic",
        "AIRLOCK_TEST_PYDEPS_ANTHROPIC",
        "pydeps-anthropic",
        "AIRLOCK_TEST_SKIP_ANTHROPIC",
    ) else {
        return;
    };
    let usage = Usage {
        input: 40,
        cached: 8,
        output: 12,
        reasoning: 0,
    };
    let server = ScriptedServer::start([
        Step::text_and_calls(
            "Reading both.",
            vec![
                call("toolu_1", "read_file", r#"{"path": "a.txt"}"#),
                call("toolu_2", "read_file", r#"{"path": "b/ç.txt"}"#),
            ],
        )
        .fragment(4)
        .usage(usage),
        Step::calls(vec![call("toolu_3", "read_file", "{}")]),
        Step::calls(vec![call("toolu_4", "read_file", r#"{"path": "long"}"#)])
            .fault(airlock_modeltest::Fault::Truncate),
    ])
    .await
    .unwrap();
    let base = server.base_url();
    let got = tokio::task::spawn_blocking(move || python(ANTHROPIC_SCRIPT, &deps, &base))
        .await
        .unwrap();
    assert_eq!(
        got,
        json!({
            "stream": {
                "blocks": [
                    ["text", "Reading both.", null, null],
                    ["tool_use", null, "toolu_1", {"path": "a.txt"}],
                    ["tool_use", null, "toolu_2", {"path": "b/ç.txt"}],
                ],
                "stop": "tool_use",
                "usage": [32, 8, 12],
            },
            "whole": {"blocks": [["tool_use", null, "toolu_3", {}]], "stop": "tool_use"},
            "truncated": {"stop": "max_tokens"},
        })
    );
    assert_eq!(server.violations(), Vec::<String>::new());
}
