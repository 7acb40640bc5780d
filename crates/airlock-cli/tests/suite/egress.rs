//! The egress proxy end to end (NET-1 … NET-8): a real tool inside
//! `airlock sandbox exec` reaches an allowed loopback upstream through its
//! per-sandbox proxy, is refused elsewhere with a readable reason, cannot go
//! around the proxy, and uses a credential channel without ever seeing the
//! credential.

use crate::both_users;
use crate::suite::support::*;
use crate::suite::upstream;

/// A Python client that prints `status reason-header body` for each URL.
pub(crate) const FETCH: &str = r#"
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        r = urllib.request.urlopen(url, timeout=10)
        print(r.status, "-", r.read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("x-airlock-reason"), e.read().decode()[:80])
    except Exception as e:
        print("error", type(e).__name__, str(e)[:80])
"#;

fn net_1_allowed_loopback_upstream_is_reached_through_the_proxy(who: Who) {
    let up = upstream::start();
    let allow = format!("http://127.0.0.1:{}", up.port);
    let url = format!("http://127.0.0.1:{}/hello", up.port);
    let r = exec(
        who,
        &["--allow", &allow],
        &["/usr/bin/python3", "-c", FETCH, &url],
    );
    assert_eq!(r.stdout().trim(), "200 - hello from upstream", "{r:?}");
    assert!(r.guarantee("egress_proxy"), "{r:?}");
    assert_eq!(r.json["egress"]["allowed"], 1, "{}", r.json["egress"]);
    assert!(r.json["egress"]["bytes_down"].as_u64().unwrap_or(0) > 0);
    // curl honours the same proxy variables.
    let c = exec(who, &["--allow", &allow], &["curl", "-sS", &url]);
    assert_eq!(c.stdout(), "hello from upstream", "{c:?}");
    // Positive control: without --allow the same request is refused.
    let d = exec(
        who,
        &["--egress-policy", "/dev/null"],
        &["/usr/bin/python3", "-c", FETCH, &url],
    );
    assert!(
        d.stdout().starts_with("403 ip_literal_not_allowed"),
        "{d:?}"
    );
}
both_users!(net_1_allowed_loopback_upstream_is_reached_through_the_proxy);

fn net_3_connect_tunnel_reaches_an_allowed_port_only(who: Who) {
    let up = upstream::start();
    let probe = r#"
import socket, sys
for target in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = s.recv(4096).decode(errors="replace")
    status = head.split()[1] if head else "none"
    reason = [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("x-airlock-reason:")]
    if status == "200":
        s.sendall(b"GET /tunnelled HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk: break
            data += chunk
        print(target, status, data.decode().split("\r\n\r\n", 1)[-1])
    else:
        print(target, status, reason[0] if reason else "-")
"#;
    let ok = format!("127.0.0.1:{}", up.port);
    let r = exec(
        who,
        &["--allow", &ok],
        &[
            "/usr/bin/python3",
            "-c",
            probe,
            &ok,
            "127.0.0.1:22",
            "10.0.0.1:443",
            "169.254.169.254:80",
            "localhost:443",
            "user@example.com:443",
        ],
    );
    let out = r.stdout();
    assert!(
        out.contains(&format!("{ok} 200 hello from upstream")),
        "{r:?}"
    );
    assert!(
        out.contains("127.0.0.1:22 403 ip_literal_not_allowed"),
        "{out}"
    );
    assert!(
        out.contains("10.0.0.1:443 403 ip_literal_not_allowed"),
        "{out}"
    );
    assert!(
        out.contains("169.254.169.254:80 403 metadata_address"),
        "{out}"
    );
    assert!(out.contains("localhost:443 403"), "{out}");
    assert!(out.contains("user@example.com:443 403"), "{out}");
    assert!(up.requests().iter().any(|s| s.path == "/tunnelled"));
}
both_users!(net_3_connect_tunnel_reaches_an_allowed_port_only);

fn net_1_the_proxy_cannot_be_bypassed(who: Who) {
    // With egress on (an allow rule for a host listener), nothing but the proxy is reachable:
    // not that listener directly, not DNS, not UDP. The control (uncontained, which has the
    // host's network) reaches each of them.
    let up = upstream::start();
    let allow = format!("http://127.0.0.1:{}", up.port);
    crate::suite::sandbox_attacks::no_route_out(who, &["--allow", &allow]);
    assert!(up.requests().is_empty(), "{:?}", up.requests());
}
both_users!(net_1_the_proxy_cannot_be_bypassed);

fn write_policy(dir: &std::path::Path, text: &str) -> String {
    let p = dir.join("policy.toml");
    std::fs::write(&p, text).unwrap();
    let _ = std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644));
    p.to_str().unwrap().to_string()
}

fn net_2_missing_or_broken_policy_denies_everything(who: Who) {
    let up = upstream::start();
    let dir = workdir(who);
    let url = format!("http://127.0.0.1:{}/hello", up.port);
    for text in [
        "allow = [ { host = \"example.com\" } ]\nunknown_field = 1\n",
        "this is not toml",
        "[[allow]]\nhost = \"*\"\n",
        "[[allow]]\ncidr = \"169.254.0.0/16\"\n",
    ] {
        let policy = write_policy(dir.path(), &format!("{text}\n"));
        let r = exec(
            who,
            &[
                "--egress-policy",
                &policy,
                "--allow",
                &format!("http://127.0.0.1:{}", up.port),
            ],
            &["/usr/bin/python3", "-c", FETCH, &url],
        );
        assert!(r.stdout().starts_with("403 no_policy"), "{text}: {r:?}");
        assert!(r.stderr.contains("no_policy"), "{text}: {}", r.stderr);
    }
    assert!(up.requests().is_empty());
}
both_users!(net_2_missing_or_broken_policy_denies_everything);

const CHANNEL_CLIENT: &str = r#"
import json, os, sys, urllib.request
base = os.environ["AIRLOCK_CHANNEL_OPENAI_URL"]
req = urllib.request.Request(base + "/v1/chat/completions", method="POST",
    data=json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer sandbox-made-this-up", "Content-Type": "application/json"})
r = urllib.request.urlopen(req, timeout=10)
body = r.read().decode()
print(json.dumps({"status": r.status, "echo": r.headers.get("x-echo-auth"), "content": json.loads(body)["choices"][0]["message"]["content"], "headers": dict(r.headers)}))
"#;

fn channel_policy(dir: &std::path::Path, port: u16) -> String {
    write_policy(
        dir,
        &format!(
            "[channels.openai]\nupstream = \"http://127.0.0.1:{port}\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{env:AIRLOCK_TEST_CHANNEL_KEY}}\"\nmethods = [\"POST\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n"
        ),
    )
}

fn net_6_channel_injects_the_credential_the_sandbox_never_sees(who: Who) {
    let up = upstream::start();
    let dir = workdir(who);
    let policy = channel_policy(dir.path(), up.port);
    let w = workdir(who);
    let wp = path_str(w.path());
    // The client's answer goes to a file in the writable root, so the scan
    // below also covers what the sandbox wrote.
    let script = format!(
        "{CHANNEL_CLIENT}\nopen('{wp}/answer.json', 'w').write(json.dumps(dict(r.headers)) + body)\n"
    );
    let out = airlock(who)
        .env("AIRLOCK_TEST_CHANNEL_KEY", SENTINEL)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--egress-policy",
            &policy,
            "--channel",
            "openai",
            "--writable",
            wp,
            "--",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let stdout = json["stdout"].as_str().unwrap_or("");
    let answer: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{json}"));
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["content"], "hello from the scripted model");
    // Positive control: the credential exists and reached the upstream.
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {SENTINEL}").as_str())
    );
    assert_eq!(seen[0].path, "/v1/chat/completions");
    // The sandbox saw none of it: not in its output, not in the response
    // headers (the upstream echoed it; the proxy scrubbed it), not in files.
    assert_eq!(answer["echo"], "Bearer [REDACTED]", "{answer}");
    assert!(
        !out.stdout
            .windows(SENTINEL.len())
            .any(|w| w == SENTINEL.as_bytes()),
        "credential in the result"
    );
    let written = std::fs::read_to_string(w.path().join("answer.json")).unwrap_or_default();
    assert!(
        !written.contains(SENTINEL) && written.contains("scripted model"),
        "{written}"
    );
    // Nor in its environment or any file it can read.
    let reversed: String = SENTINEL.chars().rev().collect();
    let scan = exec(
        who,
        &["--egress-policy", &policy, "--channel", "openai"],
        &[
            "/usr/bin/python3",
            "-c",
            "import os,sys\nn=sys.argv[1][::-1]\nhits=[k for k,v in os.environ.items() if n in v]\nfor pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n  try:\n    hits += [pid] if n.encode() in open(f'/proc/{pid}/environ','rb').read() else []\n  except OSError: pass\nprint(hits, os.environ.get('AIRLOCK_CHANNEL_OPENAI_URL'))",
            &reversed,
        ],
    );
    assert!(
        scan.stdout()
            .starts_with("[] http://127.0.0.1:3128/channels/openai"),
        "{scan:?}"
    );
}
both_users!(net_6_channel_injects_the_credential_the_sandbox_never_sees);

/// NET-6 end to end: an upstream that quotes the credential in its error body (JSON, base64,
/// percent-encoded) hands the sandbox `[REDACTED]` in each place. Control: the upstream did
/// receive the credential it quoted, so the body it sent held it.
fn net_6_a_channel_response_body_quoting_the_credential_is_scrubbed(who: Who) {
    let up = upstream::start();
    let dir = workdir(who);
    let policy = channel_policy(dir.path(), up.port);
    let client = r#"
import os, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request(os.environ["AIRLOCK_CHANNEL_OPENAI_URL"] + "/v1/echo", method="POST", data=b"{}"), timeout=10)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"#;
    let out = airlock(who)
        .env("AIRLOCK_TEST_CHANNEL_KEY", SENTINEL)
        .args(["sandbox", "exec", "--json", "--egress-policy", &policy])
        .args([
            "--channel",
            "openai",
            "--",
            "/usr/bin/python3",
            "-c",
            client,
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let stdout = json["stdout"].as_str().unwrap_or("");
    let (status, body) = stdout.trim().split_once(' ').unwrap_or(("", ""));
    assert_eq!(status, "401", "{json}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{stdout}"));
    assert_eq!(
        body["error"]["message"],
        "Incorrect API key provided: Bearer [REDACTED]"
    );
    // Base64 of the whole header value: the characters that carry the credential are
    // replaced (at most two boundary characters mixing with "Bearer " and padding remain).
    assert!(
        body["error"]["key_b64"]
            .as_str()
            .is_some_and(|v| v.contains("[REDACTED]")),
        "{body}"
    );
    assert_eq!(
        body["error"]["retry_url"], "https://example.org/retry?key=Bearer%20[REDACTED]",
        "{body}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let echoed = upstream::echo_body(&format!("Bearer {SENTINEL}"));
    let b64 = serde_json::from_str::<serde_json::Value>(&echoed).unwrap()["error"]["key_b64"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.contains(SENTINEL) && !text.contains(&b64), "{text}");
    // Positive control: the upstream received the credential (and so quoted it).
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {SENTINEL}").as_str())
    );
}
both_users!(net_6_a_channel_response_body_quoting_the_credential_is_scrubbed);

fn net_6_channel_refuses_other_methods_paths_and_trace(who: Who) {
    let up = upstream::start();
    let dir = workdir(who);
    let policy = channel_policy(dir.path(), up.port);
    let probe = r#"
import os, urllib.request, urllib.error
base = os.environ["AIRLOCK_CHANNEL_OPENAI_URL"]
for method, path in [("GET", "/v1/models"), ("POST", "/admin/keys"), ("POST", "/v1/../admin"), ("TRACE", "/v1/x"), ("POST", "/v1/%2e%2e/admin")]:
    try:
        r = urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=b"{}" if method == "POST" else None), timeout=10)
        print(method, path, r.status)
    except urllib.error.HTTPError as e:
        print(method, path, e.code, e.headers.get("x-airlock-reason"))
"#;
    let out = airlock(who)
        .env("AIRLOCK_TEST_CHANNEL_KEY", SENTINEL)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--egress-policy",
            &policy,
            "--channel",
            "openai",
            "--",
            "/usr/bin/python3",
            "-c",
            probe,
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = json["stdout"].as_str().unwrap_or("");
    assert!(
        s.contains("GET /v1/models 403 channel_method_not_allowed"),
        "{s}"
    );
    assert!(
        s.contains("POST /admin/keys 403 channel_path_not_allowed"),
        "{s}"
    );
    assert!(s.contains("TRACE /v1/x 405 method_not_allowed"), "{s}");
    assert!(
        s.contains("/v1/%2e%2e/admin 403 channel_path_not_allowed"),
        "{s}"
    );
    assert!(
        up.requests()
            .iter()
            .all(|r| r.path.starts_with("/v1/") && !r.path.contains("..")),
        "{:?}",
        up.requests()
    );
}
both_users!(net_6_channel_refuses_other_methods_paths_and_trace);

/// The official `openai` package, installed by `scripts/test` into
/// `target/pydeps` (or `AIRLOCK_TEST_PYDEPS`), completes a chat request
/// through the channel. Without the package the test fails, unless
/// `AIRLOCK_TEST_SKIP_OPENAI` is set.
fn net_6_official_openai_client_completes_a_chat(who: Who) {
    let deps = std::env::var("AIRLOCK_TEST_PYDEPS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps")
        });
    if !deps.join("openai").exists() {
        // A missing package fails the case (it never passes silently), unless skipped by name.
        assert!(
            std::env::var_os("AIRLOCK_TEST_SKIP_OPENAI").is_some(),
            "the official openai package is not installed in {}: run scripts/test \
             (it installs it), or set AIRLOCK_TEST_SKIP_OPENAI=1 to skip this test",
            deps.display()
        );
        eprintln!(
            "skipped (AIRLOCK_TEST_SKIP_OPENAI): openai package not installed in {}",
            deps.display()
        );
        return;
    }
    let deps = deps.canonicalize().unwrap();
    let up = upstream::start();
    let dir = workdir(who);
    let policy = channel_policy(dir.path(), up.port);
    let client = format!(
        "import sys, os\nsys.path.insert(0, {deps:?})\nfrom openai import OpenAI\nc = OpenAI(base_url=os.environ['AIRLOCK_CHANNEL_OPENAI_URL'] + '/v1', api_key='not-a-real-key')\nr = c.chat.completions.create(model='gpt-test', messages=[{{'role': 'user', 'content': 'hi'}}])\nprint(r.choices[0].message.content)\n",
        deps = deps.to_str().unwrap()
    );
    let out = airlock(who)
        .env("AIRLOCK_TEST_CHANNEL_KEY", SENTINEL)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--timeout",
            "60",
            "--egress-policy",
            &policy,
            "--channel",
            "openai",
            "--readonly",
            deps.to_str().unwrap(),
            "--",
            "/usr/bin/python3",
            "-c",
            &client,
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["stdout"].as_str().unwrap_or("").trim(),
        "hello from the scripted model",
        "{json}"
    );
    let seen = up.requests();
    assert_eq!(
        seen.last().and_then(|s| s.header("authorization")),
        Some(format!("Bearer {SENTINEL}").as_str())
    );
}
both_users!(net_6_official_openai_client_completes_a_chat);

#[test]
fn net_8_proxy_check_prints_one_json_line_per_url() {
    let dir = workdir(Who::Invoker);
    let policy = write_policy(
        dir.path(),
        "[[allow]]\nhost = \"api.example.org\"\n[[allow]]\nhost = \"*.corp-apps.net\"\nports = [443, 8443]\n[hosts]\n\"api.example.org\" = [\"93.184.215.14\"]\n",
    );
    let out = airlock(Who::Invoker)
        .args([
            "proxy",
            "check",
            "--policy",
            &policy,
            "--no-resolve",
            "https://api.example.org/v1",
            "https://evil.example.net/",
            "https://a.corp-apps.net:8443/x",
            "https://corp-apps.net/",
            "http://169.254.169.254/latest",
            "https://0x7f.1/",
        ])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    let d = |i: usize| {
        (
            lines[i]["decision"].as_str().unwrap().to_string(),
            lines[i]["reason"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(d(0), ("allow".into(), "allowed".into()));
    assert_eq!(lines[0]["resolved"][0], "93.184.215.14");
    assert_eq!(d(1).0, "deny");
    assert_eq!(d(2).0, "allow");
    assert_eq!(
        d(3),
        ("deny".into(), "no_matching_rule".into()),
        "*.x must not match x"
    );
    assert_eq!(d(4), ("deny".into(), "metadata_address".into()));
    assert_eq!(d(5), ("deny".into(), "ip_literal_not_allowed".into()));
}

/// NET-7 / OPS-1 under `airlock up`: each egress decision of a run is one
/// JSON line on the server's structured log, with the run and sandbox it
/// belongs to — an allowed channel request and a denied plain request (with
/// its reason) — and the channel's credential is on none of them (nor
/// anywhere else in the server's log). Every line of the log is JSON with a
/// timestamp, a level and a target. Control: the credential did reach the
/// upstream, so the scan looked for a value that was in use.
#[test]
fn net_7_each_egress_decision_of_a_run_is_a_structured_server_log_line() {
    const KEY: &str = "sk-net7-credential-3b0c9f";
    let env = crate::suite::runs::Env::new(Who::Invoker);
    let up = upstream::start();
    let policy = env.root().join("egress.toml");
    std::fs::write(
        &policy,
        format!("[channels.model]\nupstream = \"http://127.0.0.1:{}\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{env:AIRLOCK_TEST_NET7_KEY}}\"\nmethods = [\"POST\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n", up.port),
    )
    .unwrap();
    env.sh_worker(
        "caller",
        "[egress]\nchannels = [\"model\"]\n",
        "python3 -c \"\nimport os, urllib.request as u\nu.urlopen(u.Request(os.environ['AIRLOCK_CHANNEL_MODEL_URL']+'/v1/chat/completions', data=b'{}', method='POST'))\ntry:\n    u.urlopen('http://denied.example.org/')\nexcept Exception:\n    pass\n\" && echo '{}' > /airlock/output/result.json\n",
    );
    let s = crate::suite::runs::Server::start(
        &env,
        &[
            ("AIRLOCK_EGRESS_POLICY", policy.to_str().unwrap()),
            ("AIRLOCK_TEST_NET7_KEY", KEY),
        ],
    );
    let (c, v) = s.json("POST", "/v1/workers/caller/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        s.wait_state(&id, &["succeeded", "failed", "blocked"]),
        "succeeded"
    );
    // The lines are written a moment after the decisions: wait for both.
    let egress_lines = || -> Vec<serde_json::Value> {
        s.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "airlock::egress" && v["run"] == id.as_str())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let lines = loop {
        let lines = egress_lines();
        let allowed = lines
            .iter()
            .any(|l| l["decision"] == "allow" && l["channel"] == "model");
        let denied = lines
            .iter()
            .any(|l| l["decision"] == "deny" && l["reason"].is_string());
        if allowed && denied {
            break lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no allow and deny lines for run {id}: {}",
            s.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for l in &lines {
        assert!(l["sandbox"].is_string(), "{l}");
        assert!(l["timestamp"].is_string(), "{l}");
        assert_eq!(l["level"], "INFO", "{l}");
    }
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str()),
        "control: the channel used the credential"
    );
    let log = s.log_text();
    assert!(!log.contains(KEY), "the credential is in the server's log");
    // Every line of the log is JSON, apart from the human start-up notes
    // (`airlock: …`) and the `listening` line on stdout.
    for l in log.lines().filter(|l| !l.starts_with("airlock: ")) {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        if v["event"] != "listening" {
            assert!(v["timestamp"].is_string() && v["target"].is_string(), "{l}");
        }
    }
}
