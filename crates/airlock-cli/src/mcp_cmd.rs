//! `airlock mcp`: MCP for local clients (MCP-1).
//!
//! `stdio` relays newline-delimited JSON-RPC between a host that starts
//! it (Claude Desktop, Cursor, Claude Code, codex) and a server's `/mcp`
//! endpoint, with the URL and API key from `AIRLOCK_SERVER` +
//! `AIRLOCK_API_KEY` (or the stored login). It never opens the database:
//! the tools, their checks and their audit are the server's, exactly as
//! over HTTP. Each message is one POST; a request's answer (JSON, or a
//! stream of progress notifications and then the answer) is copied to
//! stdout as it arrives; `notifications/cancelled` also drops the
//! request's HTTP stream, which the server takes as a cancellation.
//! Whatever the relay cannot deliver becomes a JSON-RPC error for that
//! request id, never a crash.
//!
//! `config` prints the snippet each host wants.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{Subcommand, ValueEnum};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::client::{self, Credentials};
use crate::common::err;

/// The longest line read from the host (a server refuses bodies over
/// 2 MiB anyway, with a JSON-RPC error the relay passes on).
const MAX_LINE: usize = 4 << 20;

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve MCP on stdin/stdout by relaying to a server's `/mcp`
    /// (AIRLOCK_SERVER and AIRLOCK_API_KEY, or the stored login).
    Stdio,
    /// Print the configuration snippet an MCP host needs.
    Config {
        #[arg(long, value_enum)]
        client: Host,
        /// The server URL written into the snippet (default: the stored
        /// login's, else http://127.0.0.1:8000).
        #[arg(long)]
        server: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Host {
    ClaudeDesktop,
    Cursor,
    ClaudeCode,
    Codex,
}

pub fn mcp(c: &McpCommand) -> ExitCode {
    match c {
        McpCommand::Stdio => match client::credentials() {
            Ok(creds) => crate::common::block_on(async move || relay(creds).await),
            Err(e) => err(e),
        },
        McpCommand::Config { client, server } => {
            let server = server
                .clone()
                .or_else(|| client::credentials().ok().map(|c| c.server))
                .unwrap_or_else(|| "http://127.0.0.1:8000".into());
            println!("{}", config_snippet(*client, &server));
            ExitCode::SUCCESS
        }
    }
}

/// The snippet for `host`. The API key is a placeholder: paste a key
/// made with `POST /v1/keys` (one without the `approvals.decide` scope
/// unless only a person drives this host).
fn config_snippet(host: Host, server: &str) -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "airlock".into());
    let url = format!("{}/mcp", server.trim_end_matches('/'));
    let stdio = json!({
        "command": exe,
        "args": ["mcp", "stdio"],
        "env": {"AIRLOCK_SERVER": server, "AIRLOCK_API_KEY": "alk_…"},
    });
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    match host {
        Host::ClaudeDesktop => format!(
            "# claude_desktop_config.json (Settings → Developer → Edit Config)\n{}",
            pretty(&json!({"mcpServers": {"airlock": stdio}}))
        ),
        Host::Cursor => format!(
            "# ~/.cursor/mcp.json (or .cursor/mcp.json in a project)\n{}",
            pretty(&json!({"mcpServers": {"airlock": {
                "url": url,
                "headers": {"Authorization": "Bearer alk_…"},
            }}}))
        ),
        Host::ClaudeCode => format!(
            "claude mcp add --transport http airlock {url} --header \"Authorization: Bearer alk_…\"\n\
             # or over stdio:\n\
             claude mcp add airlock --env AIRLOCK_SERVER={server} --env AIRLOCK_API_KEY=alk_… -- {exe} mcp stdio"
        ),
        Host::Codex => format!(
            "# ~/.codex/config.toml\n[mcp_servers.airlock]\ncommand = {exe:?}\nargs = [\"mcp\", \"stdio\"]\nenv = {{ AIRLOCK_SERVER = {server:?}, AIRLOCK_API_KEY = \"alk_…\" }}"
        ),
    }
}

/// What the relay shares between its tasks.
struct Shared {
    creds: Credentials,
    out: tokio::sync::mpsc::UnboundedSender<String>,
    /// Requests in flight, by id (as JSON text), to abort on cancel.
    inflight: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// The protocol version the server agreed to at `initialize`.
    version: Mutex<Option<String>>,
}

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

async fn relay(creds: Credentials) -> ExitCode {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    let shared = Arc::new(Shared {
        creds,
        out: tx,
        inflight: Mutex::new(HashMap::new()),
        version: Mutex::new(None),
    });
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let mut buf = Vec::new();
        let n = match (&mut stdin)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(n) => n,
            Err(e) => {
                eprintln!("airlock mcp: stdin: {e}");
                break;
            }
        };
        if n == 0 {
            break;
        }
        if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
            // Skip the rest of the over-long line.
            let mut rest = Vec::new();
            let _ = stdin.read_until(b'\n', &mut rest).await;
            let _ = shared.out.send(error_line(
                &Value::Null,
                -32600,
                &format!("a message is at most {MAX_LINE} bytes"),
            ));
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                let _ = shared.out.send(error_line(
                    &Value::Null,
                    -32700,
                    &format!("parse error: {e}"),
                ));
                continue;
            }
        };
        let id = msg.get("id").cloned();
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        if method == "notifications/cancelled"
            && let Some(rid) = msg.pointer("/params/requestId")
            && let Ok(mut m) = shared.inflight.lock()
            && let Some(h) = m.remove(&rid.to_string())
        {
            h.abort();
        }
        let body = text.as_bytes().to_vec();
        let s = shared.clone();
        let key = id.as_ref().map(Value::to_string);
        let is_initialize = method == "initialize";
        let routing = routing_headers(&msg);
        let handle = tasks.spawn(async move {
            forward(&s, body, id.clone(), is_initialize, routing).await;
            if let (Some(k), Ok(mut m)) = (id.map(|i| i.to_string()), s.inflight.lock()) {
                m.remove(&k);
            }
        });
        if let (Some(k), Ok(mut m)) = (key, shared.inflight.lock()) {
            m.insert(k, handle);
        }
        // Reap finished tasks as we go.
        while tasks.try_join_next().is_some() {}
    }
    // The host closed stdin: let answers in flight arrive, then stop.
    while tasks.join_next().await.is_some() {}
    drop(shared);
    let _ = writer.await;
    ExitCode::SUCCESS
}

/// The HTTP headers the streamable HTTP transport mirrors from a message
/// (2026-07-28): the protocol version its envelope names, its method, and
/// the name a tool call, prompt or resource read targets. Values that are
/// not plain visible ASCII are left out (the server then reads the body).
fn routing_headers(msg: &Value) -> Vec<(&'static str, String)> {
    let safe = |v: &str| v.bytes().all(|b| (0x20..0x7f).contains(&b));
    let mut out = Vec::new();
    if let Some(v) = msg
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| safe(v))
    {
        out.push(("mcp-protocol-version", v.to_string()));
    }
    if let Some(m) = msg
        .get("method")
        .and_then(Value::as_str)
        .filter(|v| safe(v))
    {
        out.push(("mcp-method", m.to_string()));
        let name_key = match m {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" => Some("uri"),
            _ => None,
        };
        if let Some(n) = name_key
            .and_then(|k| msg.get("params")?.get(k)?.as_str())
            .filter(|v| safe(v))
        {
            out.push(("mcp-name", n.to_string()));
        }
    }
    out
}

/// One message to the server and its answer back to the host.
async fn forward(
    s: &Shared,
    body: Vec<u8>,
    id: Option<Value>,
    is_initialize: bool,
    routing: Vec<(&'static str, String)>,
) {
    let bearer = format!("Bearer {}", s.creds.api_key);
    let version = s.version.lock().ok().and_then(|v| v.clone());
    let mut headers = vec![
        ("authorization", bearer.as_str()),
        ("accept", "application/json, text/event-stream"),
    ];
    let stamped = routing.iter().any(|(k, _)| *k == "mcp-protocol-version");
    if let (Some(v), false) = (version.as_deref(), stamped) {
        headers.push(("mcp-protocol-version", v));
    }
    headers.extend(routing.iter().map(|(k, v)| (*k, v.as_str())));
    let fail = |msg: String| {
        match &id {
            Some(id) => {
                let _ = s.out.send(error_line(id, -32603, &msg));
            }
            None => eprintln!("airlock mcp: {msg}"),
        };
    };
    let resp = match client::send(&s.creds.server, "POST", "/mcp", &headers, Some(body)).await {
        Ok(r) => r,
        Err(e) => return fail(format!("the server could not be reached: {}", e.message)),
    };
    let status = resp.status();
    let is_sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = resp.into_body();
    if is_sse {
        let mut parser = client::SseParser::default();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return fail("the server's stream broke".into());
            };
            let Some(chunk) = frame.data_ref() else {
                continue;
            };
            for ev in parser.push(chunk) {
                if ev.data.trim().is_empty() {
                    continue;
                }
                deliver(s, &ev.data, is_initialize);
            }
        }
        return;
    }
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return fail(format!("the server's answer broke: {e}")),
    };
    if status.as_u16() == 202 || bytes.is_empty() && status.is_success() {
        return;
    }
    let text = String::from_utf8_lossy(&bytes);
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    match parsed {
        // A JSON-RPC message (or batch): pass it on.
        Some(v) if v.get("jsonrpc").is_some() || v.is_array() => deliver(s, &text, is_initialize),
        // The API's error shape (401, 403, 413, 429…): name it.
        Some(v) => {
            let code = v
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("");
            let message = v
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            fail(format!("the server answered {status}: {code}: {message}"))
        }
        None => fail(format!(
            "the server answered {status}: {}",
            text.chars().take(200).collect::<String>()
        )),
    }
}

fn deliver(s: &Shared, text: &str, is_initialize: bool) {
    if is_initialize
        && let Ok(v) = serde_json::from_str::<Value>(text)
        && let Some(pv) = v.pointer("/result/protocolVersion").and_then(Value::as_str)
        && let Ok(mut g) = s.version.lock()
    {
        *g = Some(pv.to_string());
    }
    // One message per line: re-serialise so no newline inside survives.
    let line = match serde_json::from_str::<Value>(text) {
        Ok(v) => v.to_string(),
        Err(_) => return,
    };
    let _ = s.out.send(line);
}
