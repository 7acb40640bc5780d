//! OPS-2 / CLI-1 end to end: `airlock serve --role web|worker` processes
//! sharing one PostgreSQL database — the queue under worker crashes, the
//! single scheduler (advisory lock) handed over when its holder dies, SSE
//! on a web node for runs a worker node executed — and the SQLite refusal
//! of a second process that would run work.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::suite::runs::{Env, PgDb, Server};
use crate::suite::support::*;

/// One `airlock serve --role worker` process (no HTTP listener).
pub(crate) struct Node {
    child: Child,
    log: PathBuf,
}

impl Node {
    /// Started and ready (its `{"event":"ready"}` line printed).
    fn worker(env: &Env, url: &str, n: usize) -> Self {
        Self::worker_with(env, url, n, &[])
    }
    /// [`Node::worker`] with more environment.
    pub(crate) fn worker_with(env: &Env, url: &str, n: usize, extra: &[(&str, &str)]) -> Self {
        let log = env.root().join(format!("worker-{n}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = env.cmd();
        cmd.args(["serve", "--role", "worker"])
            .env("AIRLOCK_DATABASE_URL", url)
            .env("AIRLOCK_MAX_CONCURRENT", "4")
            .env("AIRLOCK_LEASE_MS", "3000")
            .stdout(out)
            .stderr(err);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let node = Self { child, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !node.text().contains(r#""event":"ready""#) {
            assert!(
                Instant::now() < deadline,
                "worker did not start: {}",
                node.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One value from the database, as `psql -At` prints it.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-Atc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const WEB: &[&str] = &["serve", "--role", "web"];

/// 500 runs created through two web nodes, executed by three worker nodes
/// of which one is SIGKILLed and restarted every 3 s. The worker is not
/// idempotent, so DUR-2 never runs a started workload again: a run whose
/// worker died after the workload started settles `unknown`; one handed
/// back before it started runs later. Evidence of execution: the script's
/// first act is to print `exec-mark`, which the executor stores as a log
/// event of the run, fenced by the claim's token (a process whose claim
/// was taken over cannot append). So: every run ends `succeeded` or
/// `unknown` (none lost), a succeeded run shows the mark exactly once, no
/// run shows it twice (none executed twice), and no run used a second
/// attempt.
fn ops_2_three_workers_two_webs_lose_nothing_and_run_nothing_twice(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "mark",
        "[inputs.i]\ntype = \"number\"\n[limits]\ntimeout_s = 60\n",
        "echo exec-mark\nsleep 0.1\necho '{}' > /airlock/output/result.json\n",
    );
    env.sh_worker(
        "twice",
        "",
        "echo exec-mark\necho exec-mark\necho '{}' > /airlock/output/result.json\n",
    );
    let url = db.url();
    let web_env: &[(&str, &str)] = &[
        ("AIRLOCK_DATABASE_URL", &url),
        ("AIRLOCK_RATE_WRITES_PER_S", "2000"),
        ("AIRLOCK_RATE_READS_PER_S", "2000"),
        ("AIRLOCK_RATE_PER_CLIENT_PER_S", "5000"),
    ];
    let webs = [
        Server::start_with(&env, WEB, web_env),
        Server::start_with(&env, WEB, web_env),
    ];
    let workers: Arc<Mutex<Vec<Node>>> = Arc::new(Mutex::new(
        (0..3).map(|n| Node::worker(&env, &url, n)).collect(),
    ));
    let env = Arc::new(env);
    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(Mutex::new(0usize));
    let killer = {
        let (workers, stop, env, url, kills) = (
            workers.clone(),
            stop.clone(),
            env.clone(),
            url.clone(),
            kills.clone(),
        );
        std::thread::spawn(move || {
            let mut n = 3;
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(3));
                let i = n % 3;
                workers.lock().unwrap()[i].kill9();
                *kills.lock().unwrap() += 1;
                let fresh = Node::worker(&env, &url, n);
                workers.lock().unwrap()[i] = fresh;
                n += 1;
            }
        })
    };
    const RUNS: usize = 500;
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let web = &webs[i % 2];
        let (c, v) = web.json(
            "POST",
            "/v1/workers/mark/runs",
            Some(&format!(r#"{{"input": {{"i": {i}}}}}"#)),
            &[],
        );
        assert_eq!(c, 201, "{v}");
        ids.push(v["run"]["id"].as_str().unwrap().to_string());
    }
    // Every run reaches an end while the killing goes on.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut states = Vec::new();
    for id in &ids {
        loop {
            let s = webs[0].run_state(id);
            if ["succeeded", "unknown", "failed", "cancelled"].contains(&s.as_str()) {
                states.push(s);
                break;
            }
            assert!(Instant::now() < deadline, "run {id} stuck in {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    stop.store(true, Ordering::SeqCst);
    killer.join().unwrap();
    let kills = *kills.lock().unwrap();
    eprintln!(
        "{RUNS} runs ended in {:.1} s with {kills} worker kills",
        started.elapsed().as_secs_f64()
    );
    assert!(kills >= 2, "the workers were killed while runs went on");
    let mut unknown = 0;
    for (id, state) in ids.iter().zip(&states) {
        let (_, ev) = webs[1].request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
        let marks = ev.matches("exec-mark").count();
        assert!(marks <= 1, "run {id} executed {marks} times: {ev}");
        let (_, v) = webs[1].json("GET", &format!("/v1/runs/{id}"), None, &[]);
        assert_eq!(v["run"]["attempt"], 1, "{v}");
        match state.as_str() {
            "succeeded" => assert_eq!(marks, 1, "run {id}: {ev}"),
            "unknown" => unknown += 1,
            other => panic!("run {id} ended {other}: {ev}"),
        }
    }
    eprintln!("{unknown} run(s) settled unknown (their worker died mid-run)");
    // Positive control: the count sees a second execution when there is
    // one (a worker printing the mark twice in one run counts 2).
    let (c, v) = webs[0].json("POST", "/v1/workers/twice/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let twice = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(webs[0].wait_state(&twice, &["succeeded"]), "succeeded");
    let (_, ev) = webs[0].request("GET", &format!("/v1/runs/{twice}/events"), None, &[]);
    assert_eq!(ev.matches("exec-mark").count(), 2, "{ev}");
    drop(webs);
    drop(workers);
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

#[test]
fn ops_2_three_workers_two_webs_lose_nothing_and_run_nothing_twice_as_invoker() {
    ops_2_three_workers_two_webs_lose_nothing_and_run_nothing_twice(Who::Invoker);
}

/// Which `serve` process holds the scheduler lock (its pid), per the
/// database; `None` while nobody does.
fn lock_holder(url: &str) -> Option<u32> {
    let holders = psql(
        url,
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.objid = 7231002 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    let lines: Vec<&str> = holders.lines().collect();
    assert!(lines.len() <= 1, "two scheduler lock holders: {holders}");
    lines
        .first()
        .and_then(|l| l.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

/// Three worker nodes; the scheduler lock holder is SIGKILLed once it has
/// armed the schedule; another node takes the lock over and the first due
/// time after the kill fires exactly once. Cron has minute resolution (five
/// fields, no seconds), so the test waits for the next whole minute after
/// the kill (up to ~65 s); a faster honest way would need a seconds field
/// in the cron grammar, which RUN-6 does not have.
fn ops_2_scheduler_lock_passes_on_and_each_fire_happens_once(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "tick",
        "[[triggers]]\nkind = \"schedule\"\ncron = \"* * * * *\"\ntimezone = \"UTC\"\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let url = db.url();
    let mut nodes: Vec<Node> = (0..3).map(|n| Node::worker(&env, &url, n)).collect();
    let wait_holder = |not: Option<u32>| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(p) = lock_holder(&url)
                && Some(p) != not
            {
                return p;
            }
            assert!(Instant::now() < deadline, "nobody took the scheduler lock");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Positive control of the holder query: it sees the one holder, one of
    // our nodes.
    let first = wait_holder(None);
    let i = nodes
        .iter()
        .position(|n| n.pid() == first)
        .expect("the holder is one of the three nodes");
    assert!(nodes[i].text().contains("scheduler_lock_acquired"));
    // The schedule is armed by the holder; wait for that, then kill it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while psql(&url, "SELECT count(*) FROM schedule_fires") == "0" {
        assert!(Instant::now() < deadline, "the schedule was never armed");
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes[i].kill9();
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let second = wait_holder(Some(first));
    assert!(nodes.iter().any(|n| n.pid() == second && n.pid() != first));
    // The first whole minute after the kill fires (by the new holder),
    // once, its run created once.
    let deadline = Instant::now() + Duration::from_secs(90);
    while psql(
        &url,
        &format!(
            "SELECT count(*) FROM schedule_fires WHERE outcome = 'created' AND fire_at > {killed_at}"
        ),
    ) == "0"
    {
        assert!(Instant::now() < deadline, "the schedule never fired");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let fires = psql(
        &url,
        "SELECT fire_at, count(*) FROM schedule_fires WHERE outcome = 'created' GROUP BY fire_at",
    );
    for line in fires.lines() {
        assert!(line.ends_with("|1"), "{fires}");
    }
    let runs: i64 = psql(
        &url,
        "SELECT count(*) FROM runs WHERE worker_id = 'tick' AND trigger_source = 'schedule'",
    )
    .parse()
    .unwrap();
    assert_eq!(runs as usize, fires.lines().count(), "one run per fire");
    // Only the lock holder ticks: the two others never logged taking it.
    let acquired = nodes
        .iter()
        .filter(|n| n.text().contains("scheduler_lock_acquired"))
        .count();
    assert_eq!(acquired, 2, "the first holder, then exactly one successor");
}

#[test]
fn ops_2_scheduler_lock_passes_on_and_each_fire_happens_once_as_invoker() {
    ops_2_scheduler_lock_passes_on_and_each_fire_happens_once(Who::Invoker);
}

/// An SSE client on a web node sees the events of a run a worker node
/// executed. Positive control: with no worker node alive the run stays
/// queued (the web node executes nothing), so what the stream shows came
/// from the worker.
fn ops_2_sse_on_a_web_node_follows_a_run_executed_by_a_worker_node(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "hello",
        "",
        "echo hello-from-worker\nprintf 'made by the worker' > /airlock/output/a.txt\necho '{}' > /airlock/output/result.json\n",
    );
    let url = db.url();
    let web = Server::start_with(&env, WEB, &[("AIRLOCK_DATABASE_URL", &url)]);
    let (c, v) = web.json("POST", "/v1/workers/hello/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(web.run_state(&id), "queued", "a web node executes nothing");
    let worker = Node::worker(&env, &url, 0);
    // The stream is opened while the run may still be going; it ends with
    // the run's `end` event.
    let (code, ev) = web.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
    assert_eq!(code, 200);
    assert!(ev.contains("hello-from-worker"), "{ev}");
    assert!(ev.contains("event: end"), "{ev}");
    assert_eq!(web.run_state(&id), "succeeded");
    // The web node serves the artifact the worker published (one machine,
    // one data directory; across machines the blob store is S3:
    // `cli::blobs`).
    let (code, body) = web.request("GET", &format!("/v1/runs/{id}/artifacts/a.txt"), None, &[]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("made by the worker"), "{body}");
    assert!(worker.text().contains(r#""role":"worker""#));
}

#[test]
fn ops_2_sse_on_a_web_node_follows_a_run_executed_by_a_worker_node_as_invoker() {
    ops_2_sse_on_a_web_node_follows_a_run_executed_by_a_worker_node(Who::Invoker);
}

/// On SQLite a second process that would run work on the same data
/// directory is refused with a clear error (exit 125); a web node beside
/// the one worker is fine, and its runs are executed by that worker.
fn cli_1_sqlite_refuses_a_second_worker_process(who: Who) {
    let env = Env::new(who);
    env.sh_worker("w", "", "echo '{}' > /airlock/output/result.json\n");
    let url = format!("sqlite://{}", env.data.join("airlock.db").display());
    // Positive control: the first worker starts.
    let _first = Node::worker(&env, &url, 0);
    let out = env
        .cmd()
        .args(["serve", "--role", "worker"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("another airlock process already runs work"),
        "{err}"
    );
    let up = env.cmd().args(["up"]).output().unwrap();
    assert_eq!(up.status.code(), Some(125));
    // The web node beside it: a run created there is executed by the one
    // worker (SQLite: no NOTIFY, the worker's poll finds it).
    let web = Server::start_with(&env, WEB, &[]);
    let (c, v) = web.json("POST", "/v1/workers/w/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(web.wait_state(&id, &["succeeded", "failed"]), "succeeded");
}

#[test]
fn cli_1_sqlite_refuses_a_second_worker_process_as_invoker() {
    cli_1_sqlite_refuses_a_second_worker_process(Who::Invoker);
}

/// A free loopback port (bound, then released for the process to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of `airlock_scheduler_leader` on a metrics listener, `None`
/// when the text has no such line (or nothing answers yet).
fn leader_gauge(port: u16) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("airlock_scheduler_leader "))
        .map(str::to_string)
}

/// OPS-2: which worker node holds the scheduler lock is a Prometheus gauge
/// on each node's metrics listener: `airlock_scheduler_leader 1` on the
/// holder, `0` on the other; once the holder is SIGKILLed, the other
/// shows `1`. A web node, which runs no scheduler, shows no such gauge. Control:
/// the gauge agrees with the database's own view of who holds the
/// advisory lock (the pid in `pg_stat_activity`), and it changes.
fn ops_2_the_scheduler_holder_is_a_metric(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker("w", "", "echo '{}' > /airlock/output/result.json\n");
    let url = db.url();
    let ports = [free_port(), free_port()];
    let mut nodes: Vec<Node> = ports
        .iter()
        .enumerate()
        .map(|(n, p)| {
            let listen = format!("127.0.0.1:{p}");
            Node::worker_with(&env, &url, n, &[("AIRLOCK_METRICS_LISTEN", &listen)])
        })
        .collect();
    // Both gauges settle: one holder, one waiting.
    let settled = |want: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got: Vec<Option<String>> = ports.iter().map(|p| leader_gauge(*p)).collect();
            let mut sorted: Vec<&str> = got.iter().map(|g| g.as_deref().unwrap_or("-")).collect();
            sorted.sort();
            if sorted == want {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "gauges never became {want:?}: {got:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let got = settled(&["0", "1"]);
    let i = got.iter().position(|g| g.as_deref() == Some("1")).unwrap();
    assert_eq!(
        lock_holder(&url),
        Some(nodes[i].pid()),
        "the gauge names the node the database says holds the lock"
    );
    // A web node runs no scheduler: no gauge at all.
    let web = Server::start_with(&env, WEB, &[("AIRLOCK_DATABASE_URL", &url)]);
    let (code, text) = web.request("GET", "/metrics", None, &[]);
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("airlock_queue_depth"), "{text}");
    assert!(!text.contains("airlock_scheduler_leader"), "{text}");
    // The holder dies; the other node takes the lock and says so.
    nodes[i].kill9();
    let other = 1 - i;
    let deadline = Instant::now() + Duration::from_secs(30);
    while leader_gauge(ports[other]).as_deref() != Some("1") {
        assert!(
            Instant::now() < deadline,
            "the survivor never showed 1: {:?}",
            leader_gauge(ports[other])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lock_holder(&url), Some(nodes[other].pid()));
}

#[test]
fn ops_2_the_scheduler_holder_is_a_metric_as_invoker() {
    ops_2_the_scheduler_holder_is_a_metric(Who::Invoker);
}
