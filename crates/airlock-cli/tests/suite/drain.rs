//! DUR-2 end to end: the SIGTERM drain of `airlock up` (stop claiming,
//! hand back what has not started, let running work finish within the
//! grace period, settle the rest), the crash matrix for script runs
//! (SIGKILL after a claim and after the sandbox started, then a restart),
//! and a person settling an `unknown` run (`airlock runs retry|resolve`).
//! The agent side of the crash matrix (an action dispatched, running,
//! exited) is in `agents.rs`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::suite::runs::{Env, Server, count_procs};
use crate::suite::support::*;

/// A script worker: `top` holds top-level manifest keys (`idempotent`).
fn worker(env: &Env, id: &str, top: &str, script: &str) {
    let dir = env.workers.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("worker.toml"),
        format!("{top}\n[worker]\nid = \"{id}\"\ntitle = \"{id}\"\ndescription = \"test worker\"\nkind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n[limits]\ntimeout_s = 600\n"),
    )
    .unwrap();
    std::fs::write(dir.join("run.sh"), script).unwrap();
}

/// A worker that blocks (a `sleep` whose argument is `marker`, so the test
/// can count it) until the file `quick` exists in its bundle; then it
/// succeeds at once. The test adds the file after a drain or crash so the
/// next attempt finishes.
fn blocking(env: &Env, id: &str, top: &str, marker: &str) {
    worker(
        env,
        id,
        top,
        &format!(
            "if [ -e /airlock/worker/quick ]; then echo '{{}}' > /airlock/output/result.json; exit 0; fi\nsleep {marker}\n"
        ),
    );
}

fn unblock(env: &Env, id: &str) {
    std::fs::write(env.workers.join(id).join("quick"), "").unwrap();
}

fn create(s: &Server, worker: &str) -> String {
    let (c, v) = s.json(
        "POST",
        &format!("/v1/workers/{worker}/runs"),
        Some("{}"),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    v["run"]["id"].as_str().unwrap().to_string()
}

fn run_of(s: &Server, id: &str) -> Value {
    s.json("GET", &format!("/v1/runs/{id}"), None, &[]).1["run"].clone()
}

/// The run as the local CLI reads it from the database (no server up).
fn local_run(env: &Env, id: &str) -> Value {
    let out = env
        .cmd()
        .args(["runs", "get", id, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["run"].clone()
}

fn wait_procs(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_procs(&format!("sleep {marker}")) < 1 {
        assert!(Instant::now() < deadline, "workload {marker} never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_workload_started(s: &Server, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while run_of(s, id)["workload_started"] != true {
        assert!(Instant::now() < deadline, "run {id} never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every audit event of the workspace, oldest first.
fn audit(s: &Server) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let (c, page) = s.json(
            "GET",
            &format!("/v1/audit?after={after}&limit=500"),
            None,
            &[],
        );
        assert_eq!(c, 200, "{page}");
        out.extend(page["events"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_i64() {
            Some(c) => after = c,
            None => return out,
        }
    }
}

fn events_of<'a>(all: &'a [Value], kind: &str, run: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|e| e["event_type"] == kind && e["run_id"] == run)
        .collect()
}

/// How many times a run's workload was started: its `running` status
/// events.
fn starts(s: &Server, id: &str) -> usize {
    let (_, ev) = s.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
    ev.matches("\"state\":\"running\"").count()
}

fn sigterm(pid: u32) {
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

const TERMINAL: &[&str] = &[
    "succeeded",
    "failed",
    "unknown",
    "timed_out",
    "cancelled",
    "blocked",
];

/// DUR-2 drain: SIGTERM with three runs in flight and two queued. The
/// queued ones are handed back untouched (attempt not consumed), the run
/// that finishes within the grace period succeeds, and when the grace
/// ends the two blocked runs' sandboxes are stopped: the non-idempotent
/// one becomes `unknown`, the idempotent one is requeued once. After a
/// restart each handed-back run runs exactly once; a person retries the
/// `unknown` run (audited with the reason), and resolving a run that is
/// not `unknown` is refused.
#[test]
fn dur_2_sigterm_drains_hands_back_and_settles() {
    let env = Env::new(Who::Invoker);
    let m_stuck = sleep_marker(Who::Invoker, 8000);
    let m_idem = sleep_marker(Who::Invoker, 8000);
    blocking(&env, "stuck", "", &m_stuck);
    blocking(&env, "stuck-idem", "idempotent = true", &m_idem);
    worker(
        &env,
        "brief",
        "",
        "sleep 4\necho '{}' > /airlock/output/result.json\n",
    );
    worker(
        &env,
        "quick",
        "",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let mut s = Server::start(
        &env,
        &[
            ("AIRLOCK_MAX_CONCURRENT", "3"),
            ("AIRLOCK_DRAIN_GRACE", "20s"),
        ],
    );
    let b = create(&s, "stuck");
    let c = create(&s, "stuck-idem");
    wait_procs(&m_stuck);
    wait_procs(&m_idem);
    let a = create(&s, "brief");
    wait_workload_started(&s, &a);
    // Every slot is taken: these two wait in the queue.
    let d = create(&s, "quick");
    let e = create(&s, "quick");
    sigterm(s.pid());
    assert!(
        s.wait_exit(Duration::from_secs(120)),
        "the drain never ended"
    );
    let log = s.log_text();
    assert!(log.contains("draining"), "{log}");
    // No sandbox outlived the drain.
    assert_eq!(count_procs(&format!("sleep {m_stuck}")), 0);
    assert_eq!(count_procs(&format!("sleep {m_idem}")), 0);
    let ra = local_run(&env, &a);
    assert_eq!(ra["state"], "succeeded", "finished within the grace: {ra}");
    let rb = local_run(&env, &b);
    assert_eq!(rb["state"], "unknown", "{rb}");
    assert_eq!(rb["error_code"], "abandoned", "{rb}");
    let rc = local_run(&env, &c);
    assert_eq!(rc["state"], "queued", "idempotent: requeued once: {rc}");
    assert_eq!(rc["attempt"], 1, "{rc}");
    for q in [&d, &e] {
        let r = local_run(&env, q);
        assert_eq!(r["state"], "queued", "handed back: {r}");
        assert_eq!(r["attempt"], 0, "no attempt consumed: {r}");
        assert_eq!(r["workload_started"], false, "{r}");
    }

    // Restart: the handed-back runs run exactly once; the idempotent run
    // its second (and last) attempt.
    unblock(&env, "stuck-idem");
    unblock(&env, "stuck");
    let s = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "3")]);
    for q in [&d, &e] {
        assert_eq!(s.wait_state(q, TERMINAL), "succeeded");
        assert_eq!(run_of(&s, q)["attempt"], 1);
        assert_eq!(starts(&s, q), 1, "run {q} ran more than once");
    }
    assert_eq!(s.wait_state(&c, TERMINAL), "succeeded");
    assert_eq!(run_of(&s, &c)["attempt"], 2);
    assert_eq!(starts(&s, &c), 2);
    // The unknown run stays unknown until a person acts.
    assert_eq!(s.run_state(&b), "unknown");
    let all = audit(&s);
    let drained_b = events_of(&all, "run.drained", &b);
    assert_eq!(drained_b.len(), 1, "{all:?}");
    assert_eq!(drained_b[0]["result"], "unknown");
    assert_eq!(drained_b[0]["metadata"]["workload_started"], true);
    let drained_c = events_of(&all, "run.drained", &c);
    assert_eq!(drained_c.len(), 1);
    assert_eq!(drained_c[0]["result"], "queued");
    assert!(
        events_of(&all, "run.drained", &d).is_empty(),
        "never claimed: nothing to settle"
    );

    // Resolve refuses a run that is not unknown (control below: retry of
    // the unknown one works).
    let (code, v) = s.json(
        "POST",
        &format!("/v1/runs/{a}/resolve"),
        Some(r#"{"outcome": "failed", "reason": "x"}"#),
        &[],
    );
    assert_eq!(code, 409, "{v}");
    assert_eq!(v["error"]["code"], "run_not_unknown");
    assert_eq!(run_of(&s, &a)["state"], "succeeded");
    let (code, v) = s.json(
        "POST",
        &format!("/v1/runs/{b}/retry"),
        Some(r#"{"reason": "checked the target: nothing was written"}"#),
        &[],
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["state"], "queued");
    assert_eq!(s.wait_state(&b, TERMINAL), "succeeded");
    assert_eq!(run_of(&s, &b)["attempt"], 2);
    let all = audit(&s);
    let retried = events_of(&all, "run.retried", &b);
    assert_eq!(retried.len(), 1, "{all:?}");
    assert_eq!(
        retried[0]["metadata"]["reason"],
        "checked the target: nothing was written"
    );
    assert_eq!(retried[0]["actor"]["kind"], "human", "{}", retried[0]);
    // A second retry: the run is no longer unknown.
    let (code, v) = s.json("POST", &format!("/v1/runs/{b}/retry"), Some("{}"), &[]);
    assert_eq!(code, 409, "{v}");
    drop(s);
    let out = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--drain-grace` takes a duration and refuses anything else (before
/// anything is opened).
#[test]
fn dur_2_drain_grace_is_a_flag_with_a_checked_value() {
    let env = Env::new(Who::Invoker);
    let out = env
        .cmd()
        .args(["up", "--listen", "127.0.0.1:0", "--drain-grace", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a duration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// DUR-2 crash matrix for script runs, then a person settles the result
/// with the CLI: SIGKILL right after a claim (nothing started) → the run
/// is requeued, not counted, and runs once; SIGKILL while the sandboxes
/// run → the non-idempotent run is `unknown`, the idempotent one is
/// requeued once. `airlock runs resolve` closes the unknown run (audited
/// with the reason) and refuses it a second time.
#[test]
fn dur_2_crash_matrix_after_claim_and_after_sandbox_start() {
    let env = Env::new(Who::Invoker);
    worker(
        &env,
        "quick",
        "",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let m_stuck = sleep_marker(Who::Invoker, 8000);
    let m_idem = sleep_marker(Who::Invoker, 8000);
    blocking(&env, "stuck", "", &m_stuck);
    blocking(&env, "stuck-idem", "idempotent = true", &m_idem);

    // 1. Killed holding a claim: the server kills itself at the crash point.
    let mut s = Server::start(&env, &[("AIRLOCK_TEST_CRASH_AT", "after_claim")]);
    let q = create(&s, "quick");
    assert!(s.wait_exit(Duration::from_secs(60)), "no crash");
    drop(s);
    let r = local_run(&env, &q);
    assert_eq!(r["state"], "running", "the claim was taken: {r}");
    assert_eq!(r["attempt"], 1);
    let mut s = Server::start(&env, &[]);
    assert_eq!(s.wait_state(&q, TERMINAL), "succeeded");
    assert_eq!(
        run_of(&s, &q)["attempt"],
        1,
        "the lost claim is not counted"
    );
    assert_eq!(starts(&s, &q), 1);
    let all = audit(&s);
    let reaped = events_of(&all, "run.reaped", &q);
    assert_eq!(reaped.len(), 1, "{all:?}");
    assert_eq!(reaped[0]["result"], "queued");
    assert_eq!(reaped[0]["metadata"]["workload_started"], false);

    // 2. Killed while the sandboxes run.
    let b = create(&s, "stuck");
    let c = create(&s, "stuck-idem");
    wait_procs(&m_stuck);
    wait_procs(&m_idem);
    s.kill9();
    drop(s);
    unblock(&env, "stuck-idem");
    let s = Server::start(&env, &[]);
    assert_eq!(s.wait_state(&b, TERMINAL), "unknown");
    assert_eq!(s.wait_state(&c, TERMINAL), "succeeded");
    assert_eq!(run_of(&s, &c)["attempt"], 2, "requeued once");
    assert_eq!(starts(&s, &b), 1, "never re-run on its own");
    drop(s);

    // 3. A person resolves the unknown run with the CLI.
    let out = env
        .cmd()
        .args([
            "runs",
            "resolve",
            &b,
            "--as",
            "failed",
            "--reason",
            "the job's log shows it never wrote",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{b} failed")
    );
    let r = local_run(&env, &b);
    assert_eq!(r["state"], "failed");
    assert!(
        r["error_message"]
            .as_str()
            .unwrap()
            .contains("the job's log shows it never wrote"),
        "{r}"
    );
    // Again: refused, nothing changed.
    let out = env
        .cmd()
        .args(["runs", "resolve", &b, "--as", "succeeded", "--reason", "x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run_not_unknown"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(local_run(&env, &b)["state"], "failed");
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("run.resolved") && text.contains("the job's log shows it never wrote"),
        "{text}"
    );
}

/// DUR-2 crash matrix, the publication point: SIGKILL after the first of a
/// run's two artifacts is recorded (`AIRLOCK_TEST_CRASH_AT=during_publication`,
/// a debug-build hook), then a restart. The workload has had its effects:
/// a non-idempotent run becomes `unknown` and is not started again; an
/// idempotent one is requeued once, and its second attempt publishes both
/// artifacts (the first attempt's row of the same name replaced), which
/// download byte for byte. Control: the same worker without a crash
/// publishes both at the first attempt.
#[test]
fn dur_2_crash_matrix_during_output_publication() {
    let env = Env::new(Who::Invoker);
    let script = "seq 1 500 > /airlock/output/a.txt\nseq 501 900 > /airlock/output/b.txt\necho '{}' > /airlock/output/result.json\n";
    worker(&env, "publish", "", script);
    worker(&env, "publish-idem", "idempotent = true", script);
    let a: String = (1..=500).map(|i| format!("{i}\n")).collect();
    let b: String = (501..=900).map(|i| format!("{i}\n")).collect();
    let artifacts_ok = |s: &Server, id: &str| {
        for (name, want) in [("a.txt", &a), ("b.txt", &b)] {
            let (c, body) =
                crate::suite::ops::download(s, &format!("/v1/runs/{id}/artifacts/{name}"));
            assert_eq!(c, "200", "{id} {name}");
            assert!(body == want.as_bytes(), "{id} {name} byte for byte");
        }
    };

    // Control: no crash, both artifacts at the first attempt.
    let s = Server::start(&env, &[]);
    let ok = create(&s, "publish");
    assert_eq!(s.wait_state(&ok, TERMINAL), "succeeded");
    artifacts_ok(&s, &ok);
    drop(s);

    // Non-idempotent: killed mid-publication → unknown, never re-run.
    let mut s = Server::start(&env, &[("AIRLOCK_TEST_CRASH_AT", "during_publication")]);
    let p = create(&s, "publish");
    assert!(s.wait_exit(Duration::from_secs(60)), "no crash");
    drop(s);
    let r = local_run(&env, &p);
    assert_eq!(r["state"], "running", "killed before the run finished: {r}");
    let s = Server::start(&env, &[]);
    assert_eq!(s.wait_state(&p, TERMINAL), "unknown");
    assert_eq!(starts(&s, &p), 1, "never re-run on its own");
    let all = audit(&s);
    let reaped = events_of(&all, "run.reaped", &p);
    assert_eq!(reaped.len(), 1, "{all:?}");
    assert_eq!(reaped[0]["metadata"]["workload_started"], true);
    drop(s);

    // Idempotent: requeued once; the second attempt publishes everything.
    let mut s = Server::start(&env, &[("AIRLOCK_TEST_CRASH_AT", "during_publication")]);
    let q = create(&s, "publish-idem");
    assert!(s.wait_exit(Duration::from_secs(60)), "no crash");
    drop(s);
    let s = Server::start(&env, &[]);
    assert_eq!(s.wait_state(&q, TERMINAL), "succeeded");
    assert_eq!(run_of(&s, &q)["attempt"], 2, "requeued once");
    assert_eq!(starts(&s, &q), 2);
    artifacts_ok(&s, &q);
    assert_eq!(
        s.wait_state(&p, TERMINAL),
        "unknown",
        "still waiting for a person"
    );
}
