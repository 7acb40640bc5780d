//! Identity end to end with the real binary (IAM-1, IAM-4, IAM-5 and the
//! wiring of issue 6): the bootstrap capability file, `airlock login` /
//! `--remote` / `logout`, `airlock admin reset-password`, and `airlock up`
//! on a non-loopback address inside a network namespace of our own.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::both_users;
use crate::suite::runs::{Env, OWNER_PASSWORD, Server};
use crate::suite::support::*;

fn iam_1_bootstrap_capability_is_a_0600_file_used_once(who: Who) {
    let env = Env::new(who);
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
both_users!(iam_1_bootstrap_capability_is_a_0600_file_used_once);

fn iam_1_a_fresh_server_prints_where_the_capability_is(who: Who) {
    let env = Env::new(who);
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
both_users!(iam_1_a_fresh_server_prints_where_the_capability_is);

fn iam_5_login_stores_a_0600_key_and_remote_commands_use_it(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "hello",
        "",
        "echo hi from the worker\necho '{}' > /airlock/output/result.json\n",
    );
    let s = Server::start(&env, &[]);
    let config = workdir(who);
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
both_users!(iam_5_login_stores_a_0600_key_and_remote_commands_use_it);

fn iam_4_admin_reset_password_issues_a_single_use_token(who: Who) {
    let env = Env::new(who);
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
both_users!(iam_4_admin_reset_password_issues_a_single_use_token);

/// `airlock up` may now bind a non-loopback address. Shown inside a fresh
/// network namespace (an address of our own on its loopback device) so the
/// test never listens on the machine's real interfaces: unauthenticated
/// requests get 401, health answers, and an API key works.
fn iam_6_non_loopback_listen_requires_authentication(who: Who) {
    if !require_root("to create a network namespace") {
        return;
    }
    let env = Env::new(who);
    // Bootstrap on loopback first to get a key.
    let key = {
        let s = Server::start(&env, &[]);
        s.key().to_string()
    };
    let bin = airlock_bin();
    // The namespace needs root; the server in it runs as the env's user.
    let as_user = match (who, test_user()) {
        (Who::Unprivileged, Some((uid, gid))) => {
            format!("setpriv --reuid={uid} --regid={gid} --clear-groups --")
        }
        _ => String::new(),
    };
    let script = format!(
        r#"set -e
ip link set lo up
ip addr add 10.77.0.1/32 dev lo
AIRLOCK_DATA_DIR='{data}' AIRLOCK_WORKERS_DIR='{workers}' {as_user} '{bin}' up --listen 10.77.0.1:8000 2>/dev/null >/dev/null &
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
both_users!(iam_6_non_loopback_listen_requires_authentication);

/// API-1 … API-5: schemathesis (from PyPI, installed by `scripts/test`
/// into `target/pydeps-st`) generates requests from `/v1/openapi.json` of a
/// running server in every phase (examples, coverage, fuzzing, stateful)
/// and applies every check: no 5xx, documented status codes, content types
/// and headers, bodies and SSE events that match their schemas, schema-valid
/// requests accepted and schema-violating ones rejected, no ignored auth.
/// The exceptions, each with its reason, are in `tests/schemathesis.toml`.
/// Positive control: the run's API key still works afterwards (a run whose
/// credential died would test nothing but 401s). Runs once, as the
/// invoker: the HTTP contract does not depend on the server's user.
#[test]
fn api_1_schemathesis_finds_no_server_errors_or_schema_violations() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-st");
    let st = root.join("bin/st");
    if !st.exists() {
        assert!(
            std::env::var("AIRLOCK_TEST_SKIP_SCHEMATHESIS").is_ok(),
            "schemathesis is not installed in {}: run scripts/test (it installs it), or set AIRLOCK_TEST_SKIP_SCHEMATHESIS=1 to skip this test",
            root.display()
        );
        return;
    }
    let env = Env::with_examples(Who::Invoker);
    // Fuzzing sends many unauthenticated and malformed requests on purpose:
    // the failed-authentication limit would answer most of them with 429,
    // and the per-identity buckets would leave some operations untested.
    let s = Server::start(
        &env,
        &[
            ("AIRLOCK_AUTH_FAILURE_BURST", "1000000"),
            ("AIRLOCK_RATE_READS_PER_S", "100000"),
            ("AIRLOCK_RATE_WRITES_PER_S", "100000"),
        ],
    );
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .current_dir(work.path())
        .env("PYTHONPATH", &root)
        .arg(&st)
        .arg("--config-file")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml"))
        .args([
            "run",
            &format!("http://127.0.0.1:{}/v1/openapi.json", s.port),
            "-H",
            &format!("Authorization: Bearer {}", s.key()),
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "-n",
            "15",
            "--request-timeout",
            "30",
            "--seed",
            "20261201",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Positive control: the credential lived through the whole run.
    let (status, body) = s.get_with_key("/v1/runs", s.key());
    assert_eq!(status, 200, "the run's key died during the run: {body}");
    assert!(text.contains("Stateful"), "{text}");
}

/// API-7: `--metrics-listen` serves Prometheus text without credentials on
/// its own address, while `/metrics` on the API listener still needs an
/// administrator (the control).
fn api_7_metrics_listener_is_separate_from_the_api(who: Who) {
    let env = Env::new(who);
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
both_users!(api_7_metrics_listener_is_separate_from_the_api);

/// The `Retry-After` seconds of a raw 429 answer.
fn retry_after(raw: &str) -> Option<u64> {
    raw.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_string)
        })
        .and_then(|v| v.trim().parse().ok())
}

/// IAM-2 across nodes (OPS-2): two `airlock up` on one PostgreSQL database.
/// Failed logins through node A until the account's wait is 16 s; then the
/// right password through node B, which has seen no failure itself, is
/// throttled too (the state is the database's). Positive control: another
/// account name on B is not throttled (a plain 401), and once the wait is
/// over the right password works on B. Also: an upload link signed on A
/// is honoured on B, which shares the key directory.
fn iam_2_login_throttle_reached_on_one_node_holds_on_another(who: Who) {
    let Some(db) = crate::suite::runs::PgDb::new() else {
        return;
    };
    let env = Env::new(who);
    env.sh_worker("hello", "", "echo hi\n");
    let url = db.url();
    let a = Server::start(&env, &[("AIRLOCK_DATABASE_URL", &url)]);
    let b = Server::start(&env, &[("AIRLOCK_DATABASE_URL", &url)]);
    // The nodes share the key directory (docs/operations.md): an upload
    // link signed by node A (download.key) is honoured by node B; the same
    // link with its signature changed is refused there (control).
    let doc = r#"{"shared": [1, 2, 3]}"#;
    let (c, v) = a.json("POST", "/v1/uploads?name=doc.json", Some(doc), &[]);
    assert_eq!(c, 201, "{v}");
    let link = v["download_url"].as_str().unwrap().to_string();
    let (c, body) = crate::suite::ops::download(&b, &link);
    assert_eq!(c, "200", "a link made on A works on B");
    assert!(body == doc.as_bytes(), "the upload's bytes");
    let last = link.chars().last().unwrap();
    let forged = format!(
        "{}{}",
        &link[..link.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let (c, _) = crate::suite::ops::download(&b, &forged);
    assert_eq!(c, "403", "a changed signature is refused on B");

    let attempt = |s: &Server, user: &str, password: &str| {
        s.raw(
            "POST",
            "/v1/session",
            Some(&format!(
                r#"{{"username": "{user}", "password": "{password}"}}"#
            )),
            &[("authorization", "none")],
        )
    };
    // 5 free failures, then waits of 1, 2, 4, 8 s: the 10th failure leaves
    // a 16 s wait. A throttled attempt does not count; wait it out.
    let mut failures = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while failures < 10 {
        assert!(Instant::now() < deadline, "10 failures within 2 minutes");
        let (c, raw) = attempt(&a, "owner", "wrong password, wrong");
        match c {
            401 => failures += 1,
            429 => std::thread::sleep(Duration::from_secs(retry_after(&raw).unwrap_or(1))),
            other => panic!("unexpected {other}: {raw}"),
        }
    }
    let (c, raw) = attempt(&a, "owner", OWNER_PASSWORD);
    assert_eq!(c, 429, "throttled on the node that saw the failures: {raw}");
    // Node B has answered no login yet (its own per-address buckets are
    // empty): its 429 comes from the shared state.
    let (c, raw) = attempt(&b, "owner", OWNER_PASSWORD);
    assert_eq!(
        c, 429,
        "the right password through node B is throttled: {raw}"
    );
    assert!(retry_after(&raw).unwrap_or(0) >= 1, "{raw}");
    // Positive control: another account is not throttled on B.
    let (c, raw) = attempt(&b, "someone-else", "wrong password, wrong");
    assert_eq!(c, 401, "another account is not throttled: {raw}");
    // And the wait ends: never a permanent lock-out.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (c, raw) = attempt(&b, "owner", OWNER_PASSWORD);
        if c == 201 {
            break;
        }
        assert_eq!(c, 429, "{raw}");
        assert!(Instant::now() < deadline, "the wait ends: {raw}");
        std::thread::sleep(Duration::from_secs(retry_after(&raw).unwrap_or(1)));
    }
    // Both nodes audited into the one chain.
    drop((a, b));
    let out = env
        .cmd()
        .env("AIRLOCK_DATABASE_URL", &url)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
both_users!(iam_2_login_throttle_reached_on_one_node_holds_on_another);
