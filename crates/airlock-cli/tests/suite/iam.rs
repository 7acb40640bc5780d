//! Identity end to end with the real binary (IAM-1, IAM-4, IAM-5 and the
//! wiring of issue 6): the bootstrap capability file, `airlock login` /
//! `--remote` / `logout`, `airlock admin reset-password`, and `airlock up`
//! on a non-loopback address inside a network namespace of our own.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::suite::runs::{Env, OWNER_PASSWORD, Server};
use crate::suite::support::*;

#[test]
fn iam_1_bootstrap_capability_is_a_0600_file_used_once() {
    let env = Env::new();
    env.sh_worker("hello", "", "echo hi\n");
    let token_file = env.data.join("keys/bootstrap.token");
    // Server::start reads the file and bootstraps through the API.
    let s = Server::start(&env, &[]);
    assert!(!token_file.exists(), "the capability is removed once used");
    // Before it was used it was 0600 in a 0700 key directory.
    let keys = std::fs::metadata(env.data.join("keys")).unwrap();
    assert_eq!(keys.permissions().mode() & 0o777, 0o700);
    drop(s);
    // A restart after bootstrap writes no new capability.
    let s = Server::start(&env, &[]);
    assert!(!token_file.exists());
    let (c, v) = s.json(
        "POST",
        "/v1/bootstrap",
        Some(r#"{"token": "alb_x", "username": "second", "password": "another long password"}"#),
        &[("authorization", "none")],
    );
    assert_eq!(c, 403, "{v}");
}

#[test]
fn iam_1_a_fresh_server_prints_where_the_capability_is() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = env
        .cmd()
        .args(["up", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let path = env.data.join("keys/bootstrap.token");
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
        if line.contains("bootstrap") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.contains(&path.display().to_string()), "{seen}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&path).unwrap();
    assert!(token.starts_with("alb_") && token.trim().len() > 40);
}

#[test]
fn iam_5_login_stores_a_0600_key_and_remote_commands_use_it() {
    let env = Env::new();
    env.sh_worker(
        "hello",
        "",
        "echo hi from the worker\necho '{}' > /airlock/output/result.json\n",
    );
    let s = Server::start(&env, &[]);
    let config = tempfile::tempdir().unwrap();
    let cli = || {
        let mut c = env.cmd();
        c.env("XDG_CONFIG_HOME", config.path())
            .env_remove("AIRLOCK_SERVER")
            .env_remove("AIRLOCK_API_KEY");
        c
    };
    let server = format!("http://127.0.0.1:{}", s.port);
    // Wrong password: a clear error, nothing stored.
    let mut c = cli()
        .args(["login", "--server", &server, "--username", "owner"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"not the password\n")
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("login_failed"));
    let creds = config.path().join("airlock/credentials.json");
    assert!(!creds.exists());

    let mut c = cli()
        .args(["login", "--server", &server, "--username", "owner"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(format!("{OWNER_PASSWORD}\n").as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&creds).unwrap()).unwrap();
    assert!(stored["api_key"].as_str().unwrap().starts_with("alk_"));

    // A remote run end to end, then the list sees it.
    let out = cli()
        .args(["--remote", "run", "hello", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["run"]["state"], "succeeded");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    let out = cli().args(["--remote", "runs", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    let out = cli()
        .args(["--remote", "runs", "logs", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hi from the worker"));

    // Logout revokes the key on the server.
    let key = stored["api_key"].as_str().unwrap().to_string();
    assert!(cli().arg("logout").status().unwrap().success());
    assert!(!creds.exists());
    let (code, _) = s.get_with_key("/v1/runs", &key);
    assert_eq!(code, 401, "a logged-out key is revoked");
    let out = cli().args(["--remote", "runs", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn iam_4_admin_reset_password_issues_a_single_use_token() {
    let env = Env::new();
    let s = Server::start(&env, &[]);
    let out = env
        .cmd()
        .args(["admin", "reset-password", "owner", "--ttl-minutes", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("alr_"));
    let body = format!(r#"{{"token": "{token}", "new_password": "the new long password"}}"#);
    let (c, _) = s.request(
        "POST",
        "/v1/password/reset",
        Some(&body),
        &[("cookie", "x=y")],
    );
    assert_eq!(c, 204);
    let (c, _) = s.request(
        "POST",
        "/v1/password/reset",
        Some(&body),
        &[("cookie", "x=y")],
    );
    assert_eq!(c, 403, "single use");
    let (c, _, _) = s.login("owner", "the new long password");
    assert_eq!(c, 201);
    // Unknown users are a clear error for the operator.
    let out = env
        .cmd()
        .args(["admin", "reset-password", "nobody"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
}

/// `airlock up` may now bind a non-loopback address. Shown inside a fresh
/// network namespace (an address of our own on its loopback device) so the
/// test never listens on the machine's real interfaces: unauthenticated
/// requests get 401, health answers, and an API key works.
#[test]
fn iam_6_non_loopback_listen_requires_authentication() {
    if !require_root("a private network namespace") {
        return;
    }
    let env = Env::new();
    // Bootstrap on loopback first to get a key.
    let key = {
        let s = Server::start(&env, &[]);
        s.key().to_string()
    };
    let bin = airlock_bin();
    let script = format!(
        r#"set -e
ip link set lo up
ip addr add 10.77.0.1/32 dev lo
AIRLOCK_DATA_DIR='{data}' AIRLOCK_WORKERS_DIR='{workers}' '{bin}' up --listen 10.77.0.1:8000 2>/dev/null >/dev/null &
pid=$!
for i in $(seq 1 200); do curl -fs http://10.77.0.1:8000/healthz >/dev/null && break; sleep 0.05; done
echo "health $(curl -s -o /dev/null -w '%{{http_code}}' http://10.77.0.1:8000/healthz)"
echo "anon $(curl -s -o /dev/null -w '%{{http_code}}' http://10.77.0.1:8000/v1/runs)"
echo "key $(curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {key}' http://10.77.0.1:8000/v1/runs)"
kill $pid; wait $pid || true
"#,
        data = env.data.display(),
        workers = env.workers.display(),
        bin = bin.display(),
    );
    let out = Command::new("unshare")
        .args(["--net", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("health 200"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("anon 401"), "{text}");
    assert!(text.contains("key 200"), "{text}");
}

/// API-1 … API-5: schemathesis (from PyPI, installed by `.ci/run` into
/// `target/pydeps-st`) generates requests from `/v1/openapi.json` of a
/// running server and checks every answer: no 5xx, only documented status
/// codes and content types, bodies that match their schemas.
#[test]
fn api_1_schemathesis_finds_no_server_errors_or_schema_violations() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-st");
    let st = root.join("bin/st");
    if !st.exists() {
        assert!(
            std::env::var("AIRLOCK_TEST_SKIP_SCHEMATHESIS").is_ok(),
            "schemathesis is not installed in {} (run .ci/run, or set AIRLOCK_TEST_SKIP_SCHEMATHESIS=1)",
            root.display()
        );
        return;
    }
    let env = Env::with_examples();
    // Fuzzing sends many unauthenticated and malformed requests on purpose:
    // the failed-authentication limit would answer most of them with 429.
    let s = Server::start(&env, &[("AIRLOCK_AUTH_FAILURE_BURST", "1000000")]);
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .current_dir(work.path())
        .env("PYTHONPATH", &root)
        .arg(&st)
        .args([
            "run",
            &format!("http://127.0.0.1:{}/v1/openapi.json", s.port),
            "-H",
            &format!("Authorization: Bearer {}", s.key()),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "-n",
            "15",
            "--request-timeout",
            "30",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// API-7: `--metrics-listen` serves Prometheus text without credentials on
/// its own address, while `/metrics` on the API listener still needs an
/// administrator (the control).
#[test]
fn api_7_metrics_listener_is_separate_from_the_api() {
    let env = Env::new();
    let mport = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{mport}");
    let s = Server::start(&env, &[("AIRLOCK_METRICS_LISTEN", &listen)]);
    let (c, _) = s.request("GET", "/metrics", None, &[("authorization", "none")]);
    assert_eq!(c, 401, "the API listener's /metrics needs credentials");
    let (c, _) = s.request("GET", "/metrics", None, &[]);
    assert_eq!(c, 200, "an owner's key may read it there");
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", mport)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stream, &mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("airlock_queue_depth"), "{out}");
    assert!(out.contains("airlock_rate_limited_total"), "{out}");
}
