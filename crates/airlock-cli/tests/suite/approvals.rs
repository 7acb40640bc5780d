//! Approvals and the emergency stop end to end (AGT-5, AGT-6, CLI-1): the
//! real binary — `airlock up` with its executor and reaper, and the CLI on
//! the same data directory (as the operator) or against the server
//! (`--remote`, with the owner's key) — real sandboxes, real processes.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::both_users;
use crate::suite::runs::{Env, Server, count_procs};
use crate::suite::support::*;

/// `airlock ARGS` as the env's user, on its data directory.
pub(crate) fn cli(env: &Env, args: &[&str]) -> Output {
    env.cmd().args(args).output().unwrap()
}

/// `airlock --remote ARGS` against `s` with the owner's key.
pub(crate) fn remote(env: &Env, s: &Server, args: &[&str]) -> Output {
    env.cmd()
        .env("AIRLOCK_SERVER", format!("http://127.0.0.1:{}", s.port))
        .env("AIRLOCK_API_KEY", s.key())
        .arg("--remote")
        .args(args)
        .output()
        .unwrap()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {} / {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Creates a run over HTTP as the owner; returns its id and state.
fn start(s: &Server, worker: &str) -> (String, String) {
    let (c, v) = s.json(
        "POST",
        &format!("/v1/workers/{worker}/runs"),
        Some("{}"),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    (
        v["run"]["id"].as_str().unwrap().to_string(),
        v["run"]["state"].as_str().unwrap().to_string(),
    )
}

/// The id of the one approval request of `run`, through the local CLI.
fn request_of(env: &Env, run: &str) -> String {
    let o = cli(env, &["approvals", "list", "--run", run, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&o);
    v["approvals"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no request for {run}: {v}"))
        .to_string()
}

fn error_code(s: &Server, run: &str) -> Value {
    s.json("GET", &format!("/v1/runs/{run}"), None, &[]).1["run"]["error_code"].clone()
}

fn agt_5_a_worker_that_requires_approval_runs_only_once_approved(who: Who) {
    let env = Env::new(who);
    let script = "echo ran > /airlock/output/ran.txt\n";
    env.sh_worker(
        "gated",
        "[approvals]\nrequired = true\nreason = \"deploys to production\"\n",
        script,
    );
    env.sh_worker("brief", "[approvals]\nrequired = true\nttl_s = 1\n", script);
    // Control: the same script without [approvals] runs at once.
    env.sh_worker("plain", "", script);
    // A short lease makes the reaper (which expires requests) pass often.
    let s = Server::start(&env, &[("AIRLOCK_LEASE_MS", "1000")]);
    let (plain, _) = start(&s, "plain");
    assert_eq!(s.wait_state(&plain, &["succeeded", "failed"]), "succeeded");

    // Waiting: nothing executes before a person decides.
    let (run, state) = start(&s, "gated");
    assert_eq!(state, "awaiting_approval");
    let id = request_of(&env, &run);
    let o = cli(&env, &["approvals", "show", &id, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = json_of(&o);
    assert_eq!(a["state"], "pending");
    assert_eq!(a["reason"], "deploys to production");
    assert_eq!(a["payload"]["worker"], "gated");
    let hash = a["payload_hash"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(s.run_state(&run), "awaiting_approval");
    // Nothing ran while it waited: no artifact, no `running` status.
    let (c, _) = s.request(
        "GET",
        &format!("/v1/runs/{run}/artifacts/ran.txt"),
        None,
        &[],
    );
    assert_eq!(c, 404, "nothing ran while waiting");
    let (_, v) = s.json("GET", &format!("/v1/runs/{run}"), None, &[]);
    assert_eq!(v["run"]["started_at"], Value::Null, "{v}");
    // The owner started it: the owner may not approve it (over --remote).
    let o = remote(&env, &s, &["approvals", "approve", &id]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("self_approval"), "{}", stderr(&o));
    // A wrong hash is refused; the operator approves what it reviewed.
    let o = cli(
        &env,
        &["approvals", "approve", &id, "--hash", &"0".repeat(64)],
    );
    assert!(
        stderr(&o).contains("approval_hash_mismatch"),
        "{}",
        stderr(&o)
    );
    let o = cli(
        &env,
        &["approvals", "approve", &id, "--hash", &hash, "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_of(&o)["state"], "approved");
    assert_eq!(
        s.wait_state(&run, &["succeeded", "failed", "blocked"]),
        "succeeded"
    );
    let (c, body) = s.request(
        "GET",
        &format!("/v1/runs/{run}/artifacts/ran.txt"),
        None,
        &[],
    );
    assert_eq!(c, 200, "{body}");
    assert!(body.contains("ran\n"), "{body}");
    // Used once: a replay is refused.
    let o = cli(&env, &["approvals", "approve", &id]);
    assert!(
        stderr(&o).contains("approval_not_pending"),
        "{}",
        stderr(&o)
    );
    let o = cli(&env, &["approvals", "show", &id, "--json"]);
    assert_eq!(json_of(&o)["state"], "consumed");

    // Rejected (over --remote: rejecting one's own run is allowed): it ends.
    let (run, _) = start(&s, "gated");
    let id = request_of(&env, &run);
    let o = remote(
        &env,
        &s,
        &["approvals", "reject", &id, "--note", "not today"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(s.wait_state(&run, &["blocked", "succeeded"]), "blocked");
    assert_eq!(error_code(&s, &run), "approval_rejected");

    // Nobody decides: the request expires and the run ends; nothing hangs.
    let (run, _) = start(&s, "brief");
    assert_eq!(s.wait_state(&run, &["blocked", "succeeded"]), "blocked");
    assert_eq!(error_code(&s, &run), "approval_expired");
    let o = cli(&env, &["approvals", "list", "--run", &run, "--json"]);
    assert_eq!(json_of(&o)["approvals"][0]["state"], "expired");

    // The run's event stream carried each request and decision.
    let (_, ev) = s.request("GET", &format!("/v1/runs/{run}/events"), None, &[]);
    assert!(ev.contains("event: approval"), "{ev}");
}
both_users!(agt_5_a_worker_that_requires_approval_runs_only_once_approved);

/// A local `airlock run` of a gated worker waits for the decision (made
/// here by another CLI process, as the operator, with self-approval
/// allowed for the workspace) and then executes in its own process.
fn agt_5_a_local_run_waits_for_its_approval(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "gated",
        "[approvals]\nrequired = true\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    // The operator started it, so the operator approving it is
    // self-approval: refused until the workspace allows it.
    let o = cli(&env, &["approvals", "settings", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_of(&o)["allow_self_approval"], false);
    let run = env
        .cmd()
        .args(["run", "gated", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let o = cli(&env, &["approvals", "list", "--state", "pending", "--json"]);
        if let Some(id) = json_of(&o)["approvals"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "no request appeared");
        std::thread::sleep(Duration::from_millis(100));
    };
    let o = cli(&env, &["approvals", "approve", &id]);
    assert!(stderr(&o).contains("self_approval"), "{}", stderr(&o));
    let o = cli(
        &env,
        &["approvals", "settings", "--allow-self-approval", "true"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cli(&env, &["approvals", "approve", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = run.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(v["run"]["state"], "succeeded", "{v} {}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
}
both_users!(agt_5_a_local_run_waits_for_its_approval);

/// Polls until no process has `marker` in its command line; how long it
/// took, or `None` after `bound`.
fn gone_within(marker: &str, bound: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < bound {
        if count_procs(marker) == 0 {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (count_procs(marker) == 0).then(|| t0.elapsed())
}

fn wait_running(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while count_procs(marker) == 0 {
        assert!(Instant::now() < deadline, "workload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// AGT-6: a stop kills the workspace's running sandboxes within 1 s —
/// even a workload that ignores SIGTERM (no grace period) — ends them
/// `cancelled` (`emergency_stop`), refuses new runs while it holds, and
/// resuming restarts nothing. Once through the server's own API (this
/// node: the kill flag), once through the CLI on the same database
/// (another process: the server's watcher sees the stop in the database).
fn agt_6_emergency_stop_kills_running_sandboxes_within_a_second(who: Who) {
    let env = Env::new(who);
    let marker = format!("{}.{}", 8000 + std::process::id() % 1000, 6);
    env.sh_worker(
        "sleeper",
        "[limits]\ntimeout_s = 120\n",
        &format!("trap '' TERM\nsleep {marker} & sleep {marker}\nwait\n"),
    );
    env.sh_worker("plain", "", "echo '{}' > /airlock/output/result.json\n");
    env.sh_worker("gated", "[approvals]\nrequired = true\n", "true\n");
    let s = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "1")]);

    // Control: the workload really ignores SIGTERM — a plain cancel waits
    // out the 2 s grace period before the kill, so the 1 s below is the
    // stop's own kill without grace, not a polite workload.
    let (r, _) = start(&s, "sleeper");
    wait_running(&marker);
    let t0 = Instant::now();
    let (c, v) = s.json("POST", &format!("/v1/runs/{r}/cancel"), None, &[]);
    assert_eq!(c, 200, "{v}");
    let plain_cancel = gone_within(&marker, Duration::from_secs(10)).map(|_| t0.elapsed());
    eprintln!("AGT-6 control: a plain cancel of the same workload took {plain_cancel:?}");
    assert!(
        plain_cancel.is_some_and(|d| d >= Duration::from_millis(1500)),
        "the workload must ignore SIGTERM for this test to mean anything: {plain_cancel:?}"
    );
    assert_eq!(s.wait_state(&r, &["cancelled", "failed"]), "cancelled");
    assert_eq!(error_code(&s, &r), "cancelled");

    for (round, via) in ["http", "cli"].into_iter().enumerate() {
        let (running, _) = start(&s, "sleeper");
        wait_running(&marker);
        // Queued behind it, and one waiting for a person.
        let (queued, _) = start(&s, "plain");
        let (waiting, _) = start(&s, "gated");
        let t0 = Instant::now();
        let stopped = match via {
            "http" => {
                let (c, v) = s.json(
                    "POST",
                    "/v1/emergency-stop",
                    Some(r#"{"reason": "drill"}"#),
                    &[],
                );
                assert_eq!(c, 200, "{v}");
                v
            }
            _ => {
                let o = cli(&env, &["stop", "--reason", "drill", "--json"]);
                assert!(o.status.success(), "{}", stderr(&o));
                json_of(&o)
            }
        };
        let call = t0.elapsed();
        assert_eq!(stopped["runs_stopping"], 1, "{stopped}");
        assert_eq!(stopped["runs_cancelled"], 2, "{stopped}");
        let gone = gone_within(&marker, Duration::from_secs(1));
        eprintln!(
            "AGT-6 ({via}): stop call {call:?}, every process gone {gone:?} after it returned"
        );
        assert!(
            gone.is_some(),
            "round {round} ({via}): processes left after 1 s"
        );
        assert_eq!(
            s.wait_state(&running, &["cancelled", "failed", "succeeded"]),
            "cancelled"
        );
        for run in [&running, &queued, &waiting] {
            assert_eq!(s.run_state(run), "cancelled", "{run}");
            assert_eq!(error_code(&s, run), "emergency_stop", "{run}");
        }
        // While stopped, nothing new starts: over HTTP and through the CLI.
        let (c, v) = s.json("POST", "/v1/workers/plain/runs", Some("{}"), &[]);
        assert_eq!(
            (c, v["error"]["code"].clone()),
            (409, "emergency_stopped".into())
        );
        let (_, code, err) = env.run_json(&["plain"]);
        assert_eq!(code, 125);
        assert!(err.contains("emergency_stopped"), "{err}");
        let o = cli(&env, &["stop", "--show", "--json"]);
        assert_eq!(json_of(&o)["stopped"], true);
        // Resume restarts nothing; new runs run again.
        let o = remote(&env, &s, &["resume", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(json_of(&o)["stopped"], false);
        std::thread::sleep(Duration::from_millis(700));
        for run in [&running, &queued, &waiting] {
            assert_eq!(s.run_state(run), "cancelled", "{run} stays ended");
        }
        assert_eq!(count_procs(&marker), 0);
        let (fresh, _) = start(&s, "plain");
        assert_eq!(s.wait_state(&fresh, &["succeeded", "failed"]), "succeeded");
    }
    let (_, audit) = s.request("GET", "/v1/audit?limit=500", None, &[]);
    assert!(audit.contains("emergency.stopped") && audit.contains("emergency.resumed"));
}
both_users!(agt_6_emergency_stop_kills_running_sandboxes_within_a_second);
