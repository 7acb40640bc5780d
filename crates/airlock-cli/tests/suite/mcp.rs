//! MCP end to end (MCP-1): the official MCP Python SDK (`mcp`, installed
//! into `target/pydeps-mcp` by scripts/test) as a real client of `airlock
//! up`'s `/mcp`, over streamable HTTP and over `airlock mcp stdio`, in the
//! 2025-11-25 handshake and the stateless 2026-07-28 revision; and
//! hostile input straight on the wire.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::suite::runs::{Env, OWNER_PASSWORD, Server};
use crate::suite::support::*;

/// Set to skip (not fail) the cases that need the Python SDK.
const SKIP: &str = "AIRLOCK_TEST_SKIP_MCP_CLIENT";

fn pydeps() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-mcp")
}

/// Whether the official client is there; fails the test when it is not
/// unless the skip variable is set.
fn have_client() -> bool {
    if pydeps().join("mcp").is_dir() {
        return true;
    }
    if std::env::var_os(SKIP).is_some() {
        eprintln!(
            "skipped: no MCP Python SDK in {} ({SKIP})",
            pydeps().display()
        );
        return false;
    }
    panic!(
        "the MCP Python SDK is not in {}: run scripts/test (it installs it), or set {SKIP}=1",
        pydeps().display()
    );
}

fn workers(env: &Env) {
    env.sh_worker(
        "echo",
        "[inputs.name]\ntype = \"string\"\nrequired = true\ndescription = \"who\"\nmax_length = 40\n\
         [inputs.loud]\ntype = \"boolean\"\nrequired = false\ndefault = false\ndescription = \"shout\"\n",
        // The pause keeps the run under way when get_run is first called,
        // so the wait (and its progress notifications) always happens.
        "sleep 1\necho \"hello $(cat /airlock/input.json)\"\necho done >&2\n",
    );
    env.sh_worker("slow", "", "sleep 120\n");
    env.sh_worker(
        "gated",
        "[approvals]\nrequired = true\nreason = \"touches production\"\n",
        "echo gated ran\n",
    );
}

/// A session of `user` and a key it mints with `body`.
fn key_of(s: &Server, user: &str, password: &str, body: &str) -> String {
    let (c, cookie, csrf) = s.login(user, password);
    assert_eq!(c, 201, "login {user}");
    let (c, v) = s.json(
        "POST",
        "/v1/keys",
        Some(body),
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
    );
    assert_eq!(c, 201, "{v}");
    v["key"].as_str().unwrap().to_string()
}

/// Runs one scenario of tests/mcp_client.py; its JSON answer.
fn client(
    s: &Server,
    key: &str,
    scenario: &str,
    transport: &str,
    mode: &str,
    args: Value,
) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(scenario)
        .args(["--transport", transport, "--mode", mode])
        .args(["--url", &format!("http://127.0.0.1:{}", s.port)])
        .args(["--key", key])
        .arg("--airlock")
        .arg(airlock_bin())
        .args(["--args", &args.to_string()])
        .env("PYTHONPATH", pydeps())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{scenario} over {transport}/{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn audit_calls(s: &Server, operation: &str) -> usize {
    let mut n = 0;
    let mut after = 0;
    loop {
        let (c, v) = s.json(
            "GET",
            &format!("/v1/audit?after={after}&limit=500"),
            None,
            &[],
        );
        assert_eq!(c, 200, "{v}");
        let events = v["events"].as_array().unwrap();
        n += events
            .iter()
            .filter(|e| e["event_type"] == "mcp.call" && e["metadata"]["operation"] == operation)
            .count();
        match v["next_cursor"].as_i64() {
            Some(c) => after = c,
            None => return n,
        }
    }
}

/// The tour of every tool and resource, by the official client, over
/// both transports and both protocol eras.
#[test]
fn mcp_1_the_official_client_drives_every_tool_over_http_and_stdio() {
    if !have_client() {
        return;
    }
    let env = Env::new(Who::Invoker);
    workers(&env);
    let s = Server::start(&env, &[]);
    // A key as an MCP host would get it: default scopes.
    let key = key_of(&s, "owner", OWNER_PASSWORD, r#"{"name": "mcp host"}"#);
    for (i, (transport, mode)) in [
        ("http", "legacy"),
        ("http", "auto"),
        ("stdio", "legacy"),
        ("stdio", "auto"),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{transport}/{mode}");
        let idem = format!("tour-{i}");
        let v = client(
            &s,
            &key,
            "tour",
            transport,
            mode,
            json!({"worker": "echo", "input": {"name": "ada"}, "key": idem, "slow_worker": "slow"}),
        );
        let want_version = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(v["protocol_version"], want_version, "{what}");
        // Tools: filtered by the key's permissions (no approvals.decide by
        // default), each with an output schema the client validated.
        let tools: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(
            tools.contains(&"start_run") && tools.contains(&"verify_audit"),
            "{what}: {tools:?}"
        );
        assert!(!tools.contains(&"decide_approval"), "{what}: {tools:?}");
        assert_eq!(v["has_output_schema"], true, "{what}");
        assert_eq!(v["annotations"]["get_run"]["read_only"], true, "{what}");
        assert_eq!(
            v["annotations"]["cancel_run"]["destructive"], true,
            "{what}"
        );
        assert_eq!(v["workers"], json!(["echo", "gated", "slow"]), "{what}");
        // describe_worker: the inputs as JSON Schema.
        let schema = &v["describe"]["input_schema"];
        assert_eq!(schema["required"], json!(["name"]), "{what}: {schema}");
        assert_eq!(schema["properties"]["name"]["maxLength"], 40, "{what}");
        assert_eq!(schema["properties"]["loud"]["default"], false, "{what}");
        // start_run twice with one idempotency key: one run.
        assert_eq!(v["start"]["created"], true, "{what}");
        assert_eq!(v["start_again"]["created"], false, "{what}");
        assert_eq!(
            v["start"]["run"]["id"], v["start_again"]["run"]["id"],
            "{what}"
        );
        assert_eq!(v["start"]["run"]["trigger"], "mcp", "{what}");
        let run = v["start"]["run"]["id"].as_str().unwrap();
        // get_run waited with progress notifications to the end.
        assert_eq!(
            v["settled"]["run"]["state"], "succeeded",
            "{what}: {}",
            v["settled"]
        );
        assert_eq!(v["settled"]["settled"], true, "{what}");
        assert!(
            !v["progress"].as_array().unwrap().is_empty(),
            "{what}: no progress notification"
        );
        // Logs by cursor, and the resources of the run.
        let logs = v["logs"]["events"].as_array().unwrap();
        assert!(
            logs.iter()
                .any(|e| e["kind"] == "log" && e["data"]["text"].as_str().unwrap().contains("ada")),
            "{what}: {logs:?}"
        );
        assert_eq!(v["logs_after"]["events"], json!([]), "{what}");
        assert_eq!(v["logs_after"]["finished"], true, "{what}");
        assert_eq!(v["resource_run"]["run"]["id"], run, "{what}");
        assert!(
            v["resource_log"].as_str().unwrap().contains("hello"),
            "{what}"
        );
        assert_eq!(
            v["templates"],
            json!(["airlock://runs/{run_id}", "airlock://runs/{run_id}/log"])
        );
        assert_eq!(v["audit"]["ok"], true, "{what}");
        assert_eq!(v["secrets"]["secrets"], json!([]), "{what}");
        // cancel_run stops the run.
        assert_eq!(
            v["cancelled"]["run"]["state"], "cancelled",
            "{what}: {}",
            v["cancelled"]
        );
        // Another workspace's or a missing run: a tool error, not a crash.
        assert_eq!(v["missing"]["error"]["code"], "not_found", "{what}");
    }
    // Every call is audited: 4 tours × 3 start_run calls.
    assert_eq!(audit_calls(&s, "start_run"), 12);
    assert!(audit_calls(&s, "get_run") >= 8);
    assert!(audit_calls(&s, "read_resource") >= 8);
    // And the re-sent starts created nothing: 4 echo + 4 slow runs.
    let (_, runs) = s.json("GET", "/v1/runs?limit=100", None, &[]);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 8, "{runs}");
}

/// Approvals over MCP: the host's key (no `approvals.decide`) cannot
/// decide; another member's key given the scope by name can, and only
/// with the hash of what it was shown.
#[test]
fn mcp_1_only_a_scoped_key_of_another_person_decides_an_approval() {
    if !have_client() {
        return;
    }
    let env = Env::new(Who::Invoker);
    workers(&env);
    let s = Server::start(&env, &[]);
    let host_key = key_of(&s, "owner", OWNER_PASSWORD, r#"{"name": "mcp host"}"#);
    let v = client(
        &s,
        &host_key,
        "approvals_start",
        "http",
        "auto",
        json!({"worker": "gated", "key": "gated-1"}),
    );
    assert_eq!(v["run"]["run"]["state"], "awaiting_approval", "{v}");
    assert!(
        !v["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("decide_approval")),
        "{v}"
    );
    assert_eq!(
        v["decide_without_scope"]["error"]["code"], "forbidden",
        "{v}"
    );
    let run = v["run"]["run"]["id"].as_str().unwrap().to_string();
    let a = &v["pending"]["approvals"][0];
    let (approval, hash) = (
        a["id"].as_str().unwrap(),
        a["payload_hash"].as_str().unwrap(),
    );
    assert_eq!(s.run_state(&run), "awaiting_approval");

    // The owner's own key with the scope named: still never self-approves.
    let own_scoped = key_of(
        &s,
        "owner",
        OWNER_PASSWORD,
        r#"{"name": "own", "scopes": ["approvals.decide", "runs.read"]}"#,
    );
    let v = client(
        &s,
        &own_scoped,
        "approvals_decide",
        "http",
        "legacy",
        json!({"approval": approval, "hash": hash, "run": run}),
    );
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("decide_approval"))
    );
    assert_eq!(v["approved"]["error"]["code"], "self_approval", "{v}");

    // Another member, with a key given approvals.decide by name.
    let (c, m) = s.json(
        "PUT",
        "/v1/members/approver",
        Some(r#"{"role": "admin"}"#),
        &[],
    );
    assert_eq!(c, 201, "{m}");
    let token = m["setup_token"].as_str().unwrap();
    let pw = "another horse battery staple";
    let (c, r) = s.request(
        "POST",
        "/v1/password/reset",
        Some(&json!({"token": token, "new_password": pw}).to_string()),
        &[("authorization", "")],
    );
    assert!(c == 204 || c == 200, "{c} {r}");
    let approver = key_of(
        &s,
        "approver",
        pw,
        r#"{"name": "approver", "scopes": ["approvals.decide", "runs.read"]}"#,
    );
    let v = client(
        &s,
        &approver,
        "approvals_decide",
        "stdio",
        "auto",
        json!({"approval": approval, "hash": hash, "run": run}),
    );
    assert_eq!(
        v["wrong_hash"]["error"]["code"], "approval_hash_mismatch",
        "{v}"
    );
    assert_eq!(v["approved"]["state"], "approved", "{v}");
    assert_eq!(v["settled"]["run"]["state"], "succeeded", "{v}");
    // Every decision call is audited, refusals included: one without the
    // scope, two by the owner's scoped key, two by the approver's.
    assert_eq!(audit_calls(&s, "decide_approval"), 5);
}

/// Cancelling a waiting get_run ends the wait, never the run.
#[test]
fn mcp_1_a_cancelled_wait_leaves_the_run_alone() {
    if !have_client() {
        return;
    }
    let env = Env::new(Who::Invoker);
    workers(&env);
    let s = Server::start(&env, &[]);
    let key = key_of(&s, "owner", OWNER_PASSWORD, r#"{"name": "mcp host"}"#);
    let (c, v) = s.json("POST", "/v1/workers/slow/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let run = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(s.wait_state(&run, &["running"]), "running");
    for (transport, mode) in [("http", "auto"), ("stdio", "legacy")] {
        let v = client(
            &s,
            &key,
            "cancel_wait",
            transport,
            mode,
            json!({"run": run}),
        );
        assert_eq!(v["wait_ended"], "cancelled", "{transport}: {v}");
        assert_eq!(v["after"]["run"]["state"], "running", "{transport}: {v}");
        assert_eq!(
            v["after"]["run"]["cancel_requested"], false,
            "{transport}: {v}"
        );
    }
    assert_eq!(s.run_state(&run), "running");
    let (c, _) = s.json("POST", &format!("/v1/runs/{run}/cancel"), None, &[]);
    assert_eq!(c, 200);
}

/// One JSON-RPC POST to `/mcp` with `key`; status and body.
fn rpc(s: &Server, key: &str, body: &str, extra: &[(&str, &str)]) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let mut h = vec![
        ("authorization", auth.as_str()),
        ("accept", "application/json, text/event-stream"),
        ("host", "127.0.0.1"),
    ];
    h.extend_from_slice(extra);
    let (c, b) = s.request("POST", "/mcp", Some(body), &h);
    (c, serde_json::from_str(&b).unwrap_or(Value::Null))
}

fn call(name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}})
        .to_string()
}

/// Hostile input on the wire: no key, a browser's cookie, a foreign
/// Origin or Host, malformed JSON-RPC, unknown tools, wrong types, 1 MiB
/// of arguments. Each gets a refusal or a JSON-RPC error; none starts a
/// run; the server stays up.
#[test]
fn mcp_1_hostile_requests_get_errors_and_start_nothing() {
    let env = Env::new(Who::Invoker);
    workers(&env);
    let s = Server::start(&env, &[]);
    let key = s.key().to_string();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

    // Positive control: the same request with the key and a loopback Host.
    let (c, v) = rpc(&s, &key, list, &[]);
    assert_eq!(c, 200, "{v}");
    assert!(v["result"]["tools"].as_array().unwrap().len() >= 10, "{v}");

    // Each revision a client may still speak is agreed to as asked.
    for version in ["2025-06-18", "2025-11-25"] {
        let init = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}});
        let (c, v) = rpc(&s, &key, &init.to_string(), &[]);
        assert_eq!(c, 200, "{v}");
        assert_eq!(v["result"]["protocolVersion"], version, "{v}");
        assert_eq!(v["result"]["serverInfo"]["name"], "airlock", "{v}");
    }

    // No key; a session cookie instead of a key (ignored at /mcp).
    let (c, raw) = s.raw(
        "POST",
        "/mcp",
        Some(list),
        &[("authorization", ""), ("host", "127.0.0.1")],
    );
    assert_eq!(c, 401, "{raw}");
    assert!(
        raw.to_lowercase().contains("www-authenticate: bearer"),
        "{raw}"
    );
    let (lc, cookie, _csrf) = s.login("owner", OWNER_PASSWORD);
    assert_eq!(lc, 201);
    let (c, _) = s.request(
        "POST",
        "/mcp",
        Some(list),
        &[("cookie", &cookie), ("host", "127.0.0.1")],
    );
    assert_eq!(c, 401, "a session cookie is not a credential at /mcp");
    let (c, _) = rpc(&s, "alk_not_a_key", list, &[]);
    assert_eq!(c, 401);

    // A foreign Origin (a web page driving the user's browser) and a
    // foreign Host (DNS rebinding).
    let (c, _) = rpc(&s, &key, list, &[("origin", "https://evil.example")]);
    assert_eq!(c, 403);
    let (c, _) = s.request(
        "POST",
        "/mcp",
        Some(list),
        &[
            ("host", "evil.example"),
            ("accept", "application/json, text/event-stream"),
        ],
    );
    assert_eq!(c, 403);

    let runs_before = s.json("GET", "/v1/runs?limit=100", None, &[]).1["runs"]
        .as_array()
        .unwrap()
        .len();
    let jsonrpc_error = |c: u16, v: &Value, what: &str| {
        assert!(
            v["error"]["code"].is_i64(),
            "{what}: not a JSON-RPC error ({c}): {v}"
        );
    };
    // Malformed JSON and a message that is not JSON-RPC.
    let (c, v) = rpc(
        &s,
        &key,
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
        &[],
    );
    jsonrpc_error(c, &v, "malformed");
    let (c, v) = rpc(&s, &key, r#"{"hello": "world"}"#, &[]);
    jsonrpc_error(c, &v, "not JSON-RPC");
    // Unknown tool; wrong argument types; unknown argument; missing one.
    let (c, v) = rpc(&s, &key, &call("rm_rf", json!({})), &[]);
    jsonrpc_error(c, &v, "unknown tool");
    for bad in [
        json!({"worker_id": 5, "idempotency_key": "x"}),
        json!({"worker_id": "echo", "idempotency_key": "x", "input": "not an object"}),
        json!({"worker_id": "echo", "idempotency_key": "x", "sneaky": true}),
        json!({"worker_id": "echo"}),
    ] {
        let (c, v) = rpc(&s, &key, &call("start_run", bad.clone()), &[]);
        jsonrpc_error(c, &v, &bad.to_string());
        assert_eq!(v["error"]["code"], -32602, "{bad}: {v}");
    }
    // 1 MiB of arguments.
    let big = "x".repeat(1 << 20);
    let (c, v) = rpc(
        &s,
        &key,
        &call(
            "start_run",
            json!({"worker_id": "echo", "idempotency_key": "big", "input": {"name": big}}),
        ),
        &[],
    );
    jsonrpc_error(c, &v, "1 MiB");
    // A service refusal is a tool error the model can read.
    let (c, v) = rpc(
        &s,
        &key,
        &call(
            "start_run",
            json!({"worker_id": "echo", "idempotency_key": "bad-input", "input": {"name": 3}}),
        ),
        &[],
    );
    assert_eq!(c, 200, "{v}");
    assert_eq!(v["result"]["isError"], true, "{v}");
    let runs_after = s.json("GET", "/v1/runs?limit=100", None, &[]).1["runs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(runs_before, runs_after, "a malformed call started a run");
    assert_eq!(s.get("/readyz").0, 200);
}

/// The stdio relay: garbage lines get JSON-RPC errors on stdout and the
/// relay keeps serving; a closed stdin ends it cleanly.
#[test]
fn mcp_1_the_stdio_relay_answers_garbage_with_errors() {
    let env = Env::new(Who::Invoker);
    workers(&env);
    let s = Server::start(&env, &[]);
    let mut child = Command::new(airlock_bin())
        .args(["mcp", "stdio"])
        .env("AIRLOCK_SERVER", format!("http://127.0.0.1:{}", s.port))
        .env("AIRLOCK_API_KEY", s.key())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    writeln!(stdin, "this is not json").unwrap();
    let v = next();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    writeln!(stdin, "{}", call("no_such_tool", json!({}))).unwrap();
    let v = next();
    assert_eq!(v["id"], 7, "{v}");
    assert!(v["error"]["code"].is_i64(), "{v}");
    // Still serving: a real call answers.
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":8,"method":"tools/list"}}"#).unwrap();
    let v = next();
    assert_eq!(v["id"], 8, "{v}");
    assert!(v["result"]["tools"].is_array(), "{v}");
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the relay did not end with stdin"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `airlock mcp config` prints, for each host, a snippet that names the
/// relay (or the URL) and a placeholder key, never a real one.
#[test]
fn mcp_1_config_prints_each_hosts_snippet() {
    for (client, must) in [
        ("claude-desktop", "\"mcpServers\""),
        ("cursor", "http://127.0.0.1:9/mcp"),
        ("claude-code", "claude mcp add"),
        ("codex", "[mcp_servers.airlock]"),
    ] {
        let out = Command::new(airlock_bin())
            .args([
                "mcp",
                "config",
                "--client",
                client,
                "--server",
                "http://127.0.0.1:9",
            ])
            .env("HOME", "/nonexistent")
            .env_remove("AIRLOCK_API_KEY")
            .output()
            .unwrap();
        assert!(out.status.success(), "{client}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(must), "{client}: {text}");
        assert!(text.contains("alk_…"), "{client}: {text}");
        if client != "cursor" {
            assert!(
                text.contains("mcp") && text.contains("stdio"),
                "{client}: {text}"
            );
        }
    }
    // The JSON ones parse once their comment line is dropped.
    for client in ["claude-desktop", "cursor"] {
        let out = Command::new(airlock_bin())
            .args([
                "mcp",
                "config",
                "--client",
                client,
                "--server",
                "http://127.0.0.1:9",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let json: String = text.lines().skip(1).collect::<Vec<_>>().join("\n");
        serde_json::from_str::<Value>(&json).unwrap_or_else(|e| panic!("{client}: {e}: {json}"));
    }
}
