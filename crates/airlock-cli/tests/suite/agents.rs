//! Agent runs end to end (AGT-1 … AGT-7, DUR-2 for agents): the real
//! binary under `airlock up`, real sandboxes for `run_command`, a real
//! database (SQLite, and PostgreSQL for the crash matrix), and the
//! scripted model server on loopback speaking the providers' wire format.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock_modeltest::{Fault, ScriptedServer, Step, call};
use serde_json::{Value, json};

use crate::both_users;
use crate::suite::runs::{Env, PgDb, Server, count_procs};
use crate::suite::support::*;

/// The scripted model server and the runtime it runs on.
pub(crate) struct Model {
    rt: tokio::runtime::Runtime,
    pub(crate) server: ScriptedServer,
}

impl Model {
    pub(crate) fn start(steps: Vec<Step>) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(ScriptedServer::start(steps)).unwrap();
        Self { rt, server }
    }

    /// Every tool result the model was sent in request `i`.
    pub(crate) fn results(&self, i: usize) -> Vec<String> {
        let reqs = self.server.requests();
        reqs[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn requests(&self) -> usize {
        self.server.requests().len()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = &self.rt;
    }
}

/// An agent worker `agent` in `env`: `tools`, `autonomy`, then `rest`.
pub(crate) fn agent_worker(env: &Env, tools: &[&str], autonomy: &str, rest: &str) {
    let dir = env.workers.join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let tools = tools
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        dir.join("worker.toml"),
        format!(
            "[worker]\nid = \"agent\"\ntitle = \"agent\"\nkind = \"agent\"\nentry = \"AGENT.md\"\n\n[agent]\nmodel = \"local\"\ntools = [{tools}]\nautonomy = \"{autonomy}\"\n{rest}"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("AGENT.md"), "# Test agent\nFollow the input.\n").unwrap();
}

/// The `local` model profile, at the scripted server.
pub(crate) fn put_profile(env: &Env, model: &Model, extra: &str) {
    put_profile_in(env, None, model, extra);
}

/// [`put_profile`] into the database at `db` (default: the env's SQLite).
fn put_profile_in(env: &Env, db: Option<&str>, model: &Model, extra: &str) {
    let p = env.root().join("profile.toml");
    std::fs::write(
        &p,
        format!(
            "format = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"scripted\"\nstream = true\n{extra}\n[prices]\ninput = 0.0\noutput = 0.0\n",
            model.server.base_url()
        ),
    )
    .unwrap();
    env.give(&p);
    let mut cmd = env.cmd();
    if let Some(url) = db {
        cmd.env("AIRLOCK_DATABASE_URL", url);
    }
    let o = cmd
        .args(["models", "put", "local", "--file"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

const MODEL_ENV: (&str, &str) = ("AIRLOCK_MODEL_ALLOW_PRIVATE", "127.0.0.1/32");

// The database the local CLI opens in this thread's test (the crash
// matrix on PostgreSQL sets it).
thread_local! {
    static DB: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Starts a run of `agent` over HTTP; its id.
fn start(s: &Server, input: Value) -> String {
    let (c, v) = s.json(
        "POST",
        "/v1/workers/agent/runs",
        Some(&json!({"input": input}).to_string()),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    v["run"]["id"].as_str().unwrap().to_string()
}

/// The pending approval of `run`, once it appears.
fn pending(s: &Server, run: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = s.json(
            "GET",
            &format!("/v1/approvals?state=pending&run={run}"),
            None,
            &[],
        );
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            return a.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no approval request for {run}: {v}; run: {}",
            s.json("GET", &format!("/v1/runs/{run}"), None, &[]).1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The operator (the local CLI) approves what it reviewed.
fn approve(env: &Env, a: &Value) {
    let id = a["id"].as_str().unwrap();
    let hash = a["payload_hash"].as_str().unwrap();
    let mut cmd = env.cmd();
    if let Some(url) = DB.with(|d| d.borrow().clone()) {
        cmd.env("AIRLOCK_DATABASE_URL", url);
    }
    let o = cmd
        .args(["approvals", "approve", id, "--hash", hash])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn actions(s: &Server, run: &str) -> Vec<Value> {
    let (c, v) = s.json("GET", &format!("/v1/runs/{run}/actions"), None, &[]);
    assert_eq!(c, 200, "{v}");
    v["actions"].as_array().cloned().unwrap_or_default()
}

fn work_dir(env: &Env, run: &str) -> PathBuf {
    env.data.join("runs").join(run).join("work")
}

fn agt_1_an_agent_runs_a_command_in_the_sandbox_and_finishes(who: Who) {
    let env = Env::new(who);
    agent_worker(&env, &["run_command", "finish"], "ask-writes", "");
    let model = Model::start(vec![
        Step::calls(vec![call(
            "c1",
            "run_command",
            r#"{"argv": ["sh", "-c", "echo hello > greeting.txt; id -u; cat greeting.txt; ls /airlock"]}"#,
        )]),
        Step::calls(vec![call("c2", "finish", "{}")]),
    ]);
    put_profile(&env, &model, "");
    let s = Server::start(&env, &[MODEL_ENV]);
    let run = start(&s, json!({}));
    // A command changes state: a person decides, bound to its payload.
    let a = pending(&s, &run);
    assert_eq!(a["payload"]["tool"], "run_command");
    assert_eq!(a["payload"]["argv"][0], "sh");
    assert_eq!(s.run_state(&run), "awaiting_approval");
    approve(&env, &a);
    assert_eq!(
        s.wait_state(&run, &["succeeded", "failed", "blocked"]),
        "succeeded"
    );
    assert_eq!(model.server.violations(), Vec::<String>::new());
    let result = &model.results(1)[0];
    assert!(result.contains("exit status 0"), "{result}");
    assert!(result.contains("hello"), "{result}");
    // The command ran in the sandbox: as root, never as host uid 0; its
    // work directory is /airlock/work.
    let uid: u32 = result
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .expect("id -u printed");
    if is_root() {
        assert_ne!(uid, 0, "{result}");
    }
    assert!(result.contains("work"), "{result}");
    // Journal: dispatched once, completed; usage in the model events.
    let acts = actions(&s, &run);
    assert_eq!(acts[0]["state"], "completed");
    assert_eq!(acts[0]["attempt"], 1);
    let (_, ev) = s.request("GET", &format!("/v1/runs/{run}/events"), None, &[]);
    assert!(ev.contains("event: model"), "{ev}");
    assert!(ev.contains("\"usage\""), "{ev}");
    // The run's folder is gone once it ended.
    assert!(!work_dir(&env, &run).exists());
}
both_users!(agt_1_an_agent_runs_a_command_in_the_sandbox_and_finishes);

/// Where the crash matrix kills the server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// While the model's answer is streaming.
    MidStream,
    /// After the response is stored, before its calls are handled.
    AfterResponse,
    /// During the wait for a person's approval.
    ApprovalWait,
    /// After `dispatched` is committed, before the sandbox starts.
    AfterDispatched,
    /// While the command runs.
    WhileRunning,
    /// After the command exited, before its result is stored.
    AfterExit,
}

fn crash_case(env: &Env, db: Option<&str>, point: Point) {
    eprintln!("crash case {point:?}");
    let counter = "echo x >> /airlock/work/counter";
    let sleep = if point == Point::WhileRunning {
        "; sleep 30"
    } else {
        ""
    };
    let act = format!(r#"{{"argv": ["sh", "-c", "{counter}{sleep}"]}}"#);
    let first = Step::calls(vec![call("a1", "run_command", &act)]);
    let mut steps = Vec::new();
    if point == Point::MidStream {
        // The first answer stalls mid-stream; after the restart the request
        // is sent again and answered.
        steps.push(Step::calls(vec![call("a1", "run_command", &act)]).fault(Fault::StallAfter(2)));
    }
    steps.push(first);
    steps.push(Step::calls(vec![call(
        "a2",
        "run_command",
        r#"{"argv": ["sh", "-c", "wc -l < /airlock/work/counter"]}"#,
    )]));
    steps.push(Step::calls(vec![call("a3", "finish", "{}")]));
    let model = Model::start(steps);
    DB.with(|d| *d.borrow_mut() = db.map(str::to_string));
    put_profile_in(env, db, &model, "");
    let crash_env = match point {
        Point::AfterResponse => Some("after_response_persisted"),
        Point::AfterDispatched => Some("after_dispatched"),
        Point::AfterExit => Some("after_tool_exit"),
        _ => None,
    };
    let mut base: Vec<(&str, &str)> = vec![MODEL_ENV];
    if let Some(url) = db {
        base.push(("AIRLOCK_DATABASE_URL", url));
    }
    let mut first_env = base.clone();
    if let Some(p) = crash_env {
        first_env.push(("AIRLOCK_TEST_CRASH_AT", p));
    }
    let mut s = Server::start(env, &first_env);
    let run = start(&s, json!({}));
    let marker_counter = |env: &Env| {
        std::fs::read_to_string(work_dir(env, &run).join("counter"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    match point {
        Point::MidStream => {
            let deadline = Instant::now() + Duration::from_secs(60);
            while model.requests() < 1 {
                assert!(Instant::now() < deadline, "no model request");
                std::thread::sleep(Duration::from_millis(20));
            }
            s.kill9();
        }
        // The first response is stored, then the server kills itself.
        Point::AfterResponse => {
            assert!(s.wait_exit(Duration::from_secs(60)), "no crash");
        }
        Point::ApprovalWait => {
            let a = pending(&s, &run);
            s.kill9();
            let s2 = Server::start(env, &base);
            // The same request, decidable with the same hash and expiry.
            let again = pending(&s2, &run);
            assert_eq!(again["id"], a["id"]);
            assert_eq!(again["payload_hash"], a["payload_hash"]);
            assert_eq!(again["expires_at"], a["expires_at"]);
            s = s2;
        }
        _ => {
            let a = pending(&s, &run);
            approve(env, &a);
            match point {
                Point::WhileRunning => {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while marker_counter(env) < 1 {
                        assert!(Instant::now() < deadline, "the command never ran");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    s.kill9();
                }
                // The server kills itself at its crash point.
                _ => assert!(s.wait_exit(Duration::from_secs(60)), "{point:?}: no crash"),
            }
        }
    }
    drop(s);
    let s = Server::start(env, &base);
    match point {
        Point::AfterDispatched | Point::WhileRunning | Point::AfterExit => {
            // Dispatched and never finished: never run again on its own;
            // the run waits for a person.
            assert_eq!(
                s.wait_state(&run, &["awaiting_approval"]),
                "awaiting_approval"
            );
            let acts = actions(&s, &run);
            assert_eq!(acts[0]["state"], "outcome_unknown", "{point:?}: {acts:?}");
            let id = acts[0]["id"].as_str().unwrap();
            if point == Point::AfterDispatched {
                // It never started: the person has it run again (a new
                // approval of the same payload).
                assert_eq!(marker_counter(env), 0);
                // (The owner asks over HTTP; the operator approves: the
                // one who asks for a re-run does not approve it.)
                let (c, v) = s.json(
                    "POST",
                    &format!("/v1/runs/{run}/actions/{id}/settle"),
                    Some(r#"{"outcome": "rerun", "note": "it never started"}"#),
                    &[],
                );
                assert_eq!(c, 200, "{v}");
                approve(env, &pending(&s, &run));
            } else {
                assert_eq!(marker_counter(env), 1, "{point:?}");
                let (c, v) = s.json(
                    "POST",
                    &format!("/v1/runs/{run}/actions/{id}/settle"),
                    Some(r#"{"outcome": "succeeded", "note": "the counter shows it ran"}"#),
                    &[],
                );
                assert_eq!(c, 200, "{v}");
            }
        }
        Point::ApprovalWait => approve(env, &pending(&s, &run)),
        Point::MidStream | Point::AfterResponse => {
            // Nothing was dispatched: the run resumes and asks again for
            // the same call (the stored response is not requested twice).
            approve(env, &pending(&s, &run));
        }
    }
    // The report command asks for its own approval.
    approve(env, &pending(&s, &run));
    assert_eq!(
        s.wait_state(&run, &["succeeded", "failed", "blocked", "cancelled"]),
        "succeeded",
        "{point:?}"
    );
    let results = model.results(model.requests() - 1);
    let report = results.last().unwrap();
    assert!(
        report.contains("\n1\n"),
        "{point:?}: the side effect happened {report}"
    );
    assert_eq!(model.server.violations(), Vec::<String>::new(), "{point:?}");
    let expected = 3 + usize::from(point == Point::MidStream);
    assert_eq!(
        model.requests(),
        expected,
        "{point:?}: one request per step"
    );
}

/// Each point on a fresh environment (and, for PostgreSQL, a fresh
/// database from `db`).
fn dur_2_crash_matrix(db: impl Fn() -> Option<Option<PgDb>>) {
    for point in [
        Point::MidStream,
        Point::AfterResponse,
        Point::ApprovalWait,
        Point::AfterDispatched,
        Point::WhileRunning,
        Point::AfterExit,
    ] {
        let Some(pg) = db() else { return };
        let env = Env::new(Who::Invoker);
        agent_worker(&env, &["run_command", "finish"], "ask-writes", "");
        crash_case(&env, pg.as_ref().map(PgDb::url).as_deref(), point);
    }
}

#[test]
fn dur_2_agent_crash_matrix_sqlite() {
    dur_2_crash_matrix(|| Some(None));
}

#[test]
fn dur_2_agent_crash_matrix_postgres() {
    dur_2_crash_matrix(|| PgDb::new().map(Some));
}

#[test]
fn agt_6_emergency_stop_during_a_tool_kills_it_and_nothing_follows() {
    let env = Env::new(Who::Invoker);
    agent_worker(&env, &["run_command", "finish"], "ask-writes", "");
    let marker = sleep_marker(Who::Invoker, 6000);
    let model = Model::start(vec![
        Step::calls(vec![call(
            "s",
            "run_command",
            &format!(r#"{{"argv": ["sleep", "{marker}"]}}"#),
        )]),
        Step::calls(vec![call("f", "finish", "{}")]),
    ]);
    put_profile(&env, &model, "");
    let s = Server::start(&env, &[MODEL_ENV]);
    let run = start(&s, json!({}));
    approve(&env, &pending(&s, &run));
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_procs(&format!("sleep {marker}")) == 0 {
        assert!(Instant::now() < deadline, "the tool never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    let (c, v) = s.json(
        "POST",
        "/v1/emergency-stop",
        Some(r#"{"reason": "test"}"#),
        &[],
    );
    assert_eq!(c, 200, "{v}");
    while count_procs(&format!("sleep {marker}")) > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the tool survived the stop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone = t0.elapsed();
    assert_eq!(
        s.wait_state(&run, &["cancelled", "failed", "succeeded"]),
        "cancelled"
    );
    let (_, v) = s.json("GET", &format!("/v1/runs/{run}"), None, &[]);
    assert_eq!(v["run"]["error_code"], "emergency_stop", "{v}");
    let acts = actions(&s, &run);
    assert_eq!(acts[0]["state"], "aborted", "{acts:?}");
    assert_eq!(model.requests(), 1, "no model request after the stop");
    // Recorded, not asserted (timing): the issue's bound is 1 s.
    eprintln!("emergency stop: the tool's process was gone after {gone:?}");
}
