//! The run spine end to end (RUN-1 … RUN-7, DUR-1 … DUR-5, API-8, AUD-1 …
//! AUD-3): the real binary, a real SQLite database, real sandboxes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::both_users;
use crate::suite::support::*;

/// A data dir and a workers dir for one test, and the user every `airlock`
/// command of the test runs as (the data directory is that user's).
pub(crate) struct Env {
    _root: tempfile::TempDir,
    pub(crate) who: Who,
    pub(crate) data: PathBuf,
    pub(crate) workers: PathBuf,
    /// The owner's API key, once a server of this env was bootstrapped.
    api_key: std::sync::Mutex<Option<String>>,
    /// Files holding the stdout and stderr of every server started here.
    server_logs: std::sync::Mutex<Vec<PathBuf>>,
    /// When set, [`Env::cmd`] runs `setpriv ARGS -- airlock` (a systemd
    /// unit's user and capability settings; `cli::systemd`) instead of
    /// running airlock as `who`.
    setpriv: std::sync::Mutex<Option<Vec<String>>>,
}

impl Env {
    pub(crate) fn new(who: Who) -> Self {
        let root = workdir(who);
        let data = root.path().join("data");
        let workers = root.path().join("workers");
        std::fs::create_dir_all(&workers).unwrap();
        Self {
            who,
            data,
            workers,
            api_key: std::sync::Mutex::new(None),
            server_logs: std::sync::Mutex::new(Vec::new()),
            setpriv: std::sync::Mutex::new(None),
            _root: root,
        }
    }
    /// The folder that holds `data/` and `workers/` (owned by the env's user).
    pub(crate) fn root(&self) -> &Path {
        self._root.path()
    }
    /// Hands a file the test wrote (as root) to the env's user.
    pub(crate) fn give(&self, path: &Path) {
        if let (Who::Unprivileged, Some((uid, gid))) = (self.who, test_user()) {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        }
    }
    pub(crate) fn with_examples(who: Who) -> Self {
        let env = Self::new(who);
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workers");
        for e in std::fs::read_dir(&examples).unwrap().flatten() {
            let dst = env.workers.join(e.file_name());
            std::fs::create_dir_all(&dst).unwrap();
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
            }
        }
        env
    }
    pub(crate) fn cmd(&self) -> Command {
        let mut c = match self.setpriv.lock().unwrap().as_ref() {
            None => airlock(self.who),
            Some(args) => {
                let mut c = Command::new("setpriv");
                c.args(args).arg("--").arg(airlock_bin());
                c.env("OPENAI_API_KEY", SENTINEL)
                    .env("AIRLOCK_TEST_SENTINEL", SENTINEL)
                    .env("LD_PRELOAD", "")
                    .current_dir("/");
                c
            }
        };
        c.env("AIRLOCK_DATA_DIR", &self.data)
            .env("AIRLOCK_WORKERS_DIR", &self.workers);
        c
    }
    /// Runs what [`Env::cmd`] starts from now on under `setpriv ARGS`
    /// (`None`: as `who` again).
    pub(crate) fn set_setpriv(&self, args: Option<Vec<String>>) {
        *self.setpriv.lock().unwrap() = args;
    }
    /// A `sh` worker with `script` as its entry.
    pub(crate) fn sh_worker(&self, id: &str, extra_toml: &str, script: &str) {
        let dir = self.workers.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("worker.toml"),
            format!("[worker]\nid = \"{id}\"\ntitle = \"{id}\"\ndescription = \"test worker\"\nkind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n{extra_toml}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("run.sh"), script).unwrap();
    }
    pub(crate) fn run_json(&self, args: &[&str]) -> (Value, i32, String) {
        let out = self
            .cmd()
            .arg("run")
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (v, out.status.code().unwrap_or(-1), stderr)
    }
    pub(crate) fn set(&self, name: &str, value: &[u8]) -> (i32, String) {
        let mut child = self
            .cmd()
            .args(["secrets", "set", name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A refused (oversized) value may be cut off mid-write: that is the point.
        let _ = child.stdin.take().unwrap().write_all(value);
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    pub(crate) fn run(&self, id: &str) -> Value {
        let out = self.cmd().args(["run", id, "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stderr).into_owned()))
    }
    /// Everything the servers of this env printed (stdout and stderr).
    pub(crate) fn server_logs(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for p in self.server_logs.lock().unwrap().iter() {
            all.extend(std::fs::read(p).unwrap_or_default());
        }
        all
    }
    /// Each KEK version in the key directory, in the forms a leak could take
    /// (raw, lower and upper hex, standard base64).
    pub(crate) fn kek_forms(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(self.data.join("keys")).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("kek-v") {
                continue;
            }
            let kek = std::fs::read(e.path()).unwrap();
            assert_eq!(kek.len(), 32, "{name}");
            let hex: String = kek.iter().map(|b| format!("{b:02x}")).collect();
            out.push((format!("{name} raw"), kek.clone()));
            out.push((format!("{name} hex"), hex.clone().into_bytes()));
            out.push((format!("{name} HEX"), hex.to_uppercase().into_bytes()));
            out.push((format!("{name} base64"), base64(&kek).into_bytes()));
        }
        assert!(!out.is_empty(), "no KEK in {}", self.data.display());
        out
    }
    /// Every byte the platform stored: database files and artifact blobs.
    pub(crate) fn stored_bytes(&self) -> Vec<u8> {
        let mut all = Vec::new();
        let mut stack = vec![self.data.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    if !p.ends_with("keys") {
                        stack.push(p);
                    }
                } else {
                    all.extend(std::fs::read(&p).unwrap_or_default());
                }
            }
        }
        all
    }
}

/// Standard base64 with padding (RFC 4648), for leak scans.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `needle` occurs in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn state(v: &Value) -> &str {
    v["run"]["state"].as_str().unwrap_or("")
}

fn run_1_each_example_worker_end_to_end(who: Who) {
    let env = Env::with_examples(who);
    let (v, code, err) =
        env.run_json(&["hello-python", "--input", r#"{"name": "Ada", "times": 2}"#]);
    assert_eq!((state(&v), code), ("succeeded", 0), "{v} {err}");
    assert_eq!(v["run"]["outputs"]["greeting"], "Hello, Ada!");
    let names: Vec<&str> = v["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"report.txt"), "{names:?}");
    assert_eq!(v["run"]["containment"]["level"], "namespaces");

    let (v, code, err) = env.run_json(&["shell-stats", "--input", r#"{"text": "one two\nthree"}"#]);
    assert_eq!((state(&v), code), ("succeeded", 0), "{v} {err}");
    assert_eq!(v["run"]["outputs"]["words"], 3);

    let (v, code, err) = env.run_json(&[
        "node-json",
        "--input",
        r#"{"document": {"b": 2, "a": [1, 2]}}"#,
    ]);
    assert_eq!((state(&v), code), ("succeeded", 0), "{v} {err}");

    // No route to the internet here: the egress worker runs, its proxy
    // refuses (no DNS), and the run fails with the egress summary recorded.
    let (v, code, _) = env.run_json(&["fetch-status"]);
    assert_eq!((state(&v), code), ("failed", 1), "{v}");
    assert!(
        v["run"]["egress"]["denied"].as_u64().unwrap_or(0) >= 1,
        "{v}"
    );

    // The agent example names the workspace model profile "triage", which
    // a fresh data directory does not have: the run is blocked and says so
    // (runs against a scripted provider are in `suite::agents`).
    let (v, code, _) = env.run_json(&["triage-agent", "--input", r#"{"issue": "crash on start"}"#]);
    assert_eq!((state(&v), code), ("blocked", 1), "{v}");
    assert_eq!(v["run"]["error_code"], "model_profile_missing");

    // Bad input never creates a run.
    let (_, code, err) = env.run_json(&["hello-python", "--input", r#"{"name": 5}"#]);
    assert_eq!(code, 125);
    assert!(err.contains("input_invalid"), "{err}");
    let (_, code, err) = env.run_json(&["no-such-worker"]);
    assert_eq!(code, 125);
    assert!(err.contains("unknown_worker"), "{err}");

    // Every state change is on the chain.
    let out = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
both_users!(run_1_each_example_worker_end_to_end);

fn dur_4_output_attacks_are_rejected_and_nothing_outside_is_read(who: Who) {
    let env = Env::new(who);
    let secret_dir = workdir(Who::Invoker);
    let secret = secret_dir.path().join("host-secret");
    std::fs::write(&secret, SENTINEL).unwrap();
    let secret_path = secret.display().to_string();
    let cases = [
        ("symlink", format!("ln -s /etc/passwd /airlock/output/link\nln -s {secret_path} /airlock/output/host"), "output_symlink"),
        ("fifo", "mkfifo /airlock/output/pipe".to_string(), "output_not_regular"),
        ("hardlink", "echo x > /airlock/output/a\nln /airlock/output/a /airlock/output/b".to_string(), "output_hard_link"),
        ("many", "i=0; while [ $i -lt 1200 ]; do : > /airlock/output/f$i; i=$((i+1)); done".to_string(), "output_too_many_files"),
        ("big", "head -c 200000 /dev/zero > /airlock/output/big".to_string(), "output_too_large"),
        ("deep", "d=/airlock/output; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18; do d=$d/d; done; mkdir -p $d; : > $d/f".to_string(), "output_too_deep"),
        ("notjson", "echo 'not json' > /airlock/output/result.json".to_string(), "schema_violation"),
    ];
    for (id, script, _) in &cases {
        env.sh_worker(
            id,
            "[limits]\noutput_bytes = 100000\n",
            &format!("set -e\n{script}\n"),
        );
    }
    for (id, _, code) in cases {
        let (v, rc, err) = env.run_json(&[id]);
        assert_eq!(state(&v), "failed", "{id}: {v} {err}");
        assert_eq!(v["run"]["error_code"], code, "{id}: {v}");
        assert_eq!(rc, 1);
    }
    // Nothing outside the output folder reached the artifact store.
    let mut stack = vec![env.data.join("artifacts")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                let bytes = std::fs::read(e.path()).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(SENTINEL),
                    "host secret published"
                );
                assert!(
                    !String::from_utf8_lossy(&bytes).contains("root:x:0:0"),
                    "host passwd published"
                );
            }
        }
    }
    // Positive control: a clean output folder publishes.
    env.sh_worker(
        "clean",
        "[outputs.ok]\ntype = \"boolean\"\n",
        "echo '{\"ok\": true}' > /airlock/output/result.json\necho hi > /airlock/output/note.txt\n",
    );
    let (v, _, err) = env.run_json(&["clean"]);
    assert_eq!(state(&v), "succeeded", "{v} {err}");
}
both_users!(dur_4_output_attacks_are_rejected_and_nothing_outside_is_read);

fn run_3_missing_required_output_is_a_schema_violation(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "needs-output",
        "[outputs.answer]\ntype = \"string\"\nrequired = true\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let (v, _, _) = env.run_json(&["needs-output"]);
    assert_eq!(
        (state(&v), v["run"]["error_code"].as_str()),
        ("failed", Some("schema_violation")),
        "{v}"
    );
    env.sh_worker(
        "gives-output",
        "[outputs.answer]\ntype = \"string\"\nrequired = true\n",
        "echo '{\"answer\": \"42\"}' > /airlock/output/result.json\n",
    );
    let (v, _, _) = env.run_json(&["gives-output"]);
    assert_eq!(state(&v), "succeeded", "{v}");
}
both_users!(run_3_missing_required_output_is_a_schema_violation);

fn dur_3_plan_tokens_are_single_use_expire_and_pin_the_worker(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "planned",
        "[inputs.n]\ntype = \"number\"\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let plan = |ttl: &str| -> String {
        let out = env
            .cmd()
            .args(["plan", "planned", "--input", r#"{"n": 1}"#, "--ttl", ttl])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["token"].as_str().unwrap().to_string()
    };
    let token = plan("600");
    let (v, code, err) = env.run_json(&["--plan", &token]);
    assert_eq!((state(&v), code), ("succeeded", 0), "{v} {err}");
    assert_eq!(v["run"]["trigger"], "plan");
    let (_, code, err) = env.run_json(&["--plan", &token]);
    assert_eq!(code, 125);
    assert!(err.contains("already used"), "{err}");
    let (_, code, err) = env.run_json(&["--plan", &format!("{token}x")]);
    assert_eq!(code, 125);
    assert!(err.contains("tampered"), "{err}");
    let short = plan("1");
    std::thread::sleep(Duration::from_millis(1100));
    let (_, code, err) = env.run_json(&["--plan", &short]);
    assert_eq!(code, 125);
    assert!(err.contains("expired"), "{err}");
    // A plan pins the entry's bytes: a changed script refuses the plan.
    let pinned = plan("600");
    std::fs::write(env.workers.join("planned/run.sh"), "echo changed\n").unwrap();
    let (_, code, err) = env.run_json(&["--plan", &pinned]);
    assert_eq!(code, 125);
    assert!(
        err.contains("changed since it was planned") && err.contains("entry_sha256"),
        "{err}"
    );
}
both_users!(dur_3_plan_tokens_are_single_use_expire_and_pin_the_worker);

fn api_8_idempotency_key_returns_the_original_run(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "idem",
        "[inputs.n]\ntype = \"number\"\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let (a, _, _) = env.run_json(&["idem", "--input", r#"{"n": 1}"#, "--idempotency-key", "k1"]);
    let (b, _, _) = env.run_json(&["idem", "--input", r#"{"n": 1}"#, "--idempotency-key", "k1"]);
    assert_eq!(a["run"]["id"], b["run"]["id"]);
    assert_eq!(
        b["run"]["attempt"], 1,
        "the original run was not executed again"
    );
    let (_, code, err) =
        env.run_json(&["idem", "--input", r#"{"n": 2}"#, "--idempotency-key", "k1"]);
    assert_eq!(code, 125);
    assert!(err.contains("idempotency_conflict"), "{err}");
}
both_users!(api_8_idempotency_key_returns_the_original_run);

/// A running `airlock up` on a free loopback port.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
    /// Sent as `Authorization: Bearer` unless a request brings its own
    /// credentials.
    key: String,
    /// This server's stdout and stderr (also in the env's `server_logs`).
    log: PathBuf,
}

/// The bootstrap flow a new operator follows (IAM-1), then a login and an
/// API key for the tests' requests.
pub(crate) const OWNER_PASSWORD: &str = "correct horse battery staple";

/// Every permission, as `POST /v1/keys` names them.
pub(crate) const ALL_SCOPES: &str = r#"["workspace.manage", "workspace.delete", "members.manage", "workers.read", "workers.write", "agents.manage", "runs.create", "runs.cancel", "runs.read", "approvals.decide", "policy.manage", "secrets.write", "secrets.list", "audit.read", "audit.export", "emergency.stop", "emergency.resume", "keys.own"]"#;

fn bootstrap_owner(s: &Server, env: &Env) -> String {
    let token = std::fs::read_to_string(env.data.join("keys/bootstrap.token")).unwrap();
    let (c, v) = s.json(
        "POST",
        "/v1/bootstrap",
        Some(&format!(
            r#"{{"token": "{}", "username": "owner", "password": "{OWNER_PASSWORD}"}}"#,
            token.trim()
        )),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let (c, cookie, csrf) = s.login("owner", OWNER_PASSWORD);
    assert_eq!(c, 201);
    // Every permission of the owner, `approvals.decide` included (a key
    // gets that one only when asked for by name).
    let (c, v) = s.json(
        "POST",
        "/v1/keys",
        Some(&format!(r#"{{"name": "tests", "scopes": {ALL_SCOPES}}}"#)),
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
    );
    assert_eq!(c, 201, "{v}");
    v["key"].as_str().unwrap().to_string()
}

impl Server {
    /// A server of `env`, ready, its owner bootstrapped through the API (once
    /// per env) and the owner's API key sent with every request.
    pub(crate) fn start(env: &Env, extra_env: &[(&str, &str)]) -> Self {
        let mut s = Self::start_unbootstrapped(env, extra_env);
        let mut key = env.api_key.lock().unwrap();
        if key.is_none() {
            *key = Some(bootstrap_owner(&s, env));
        }
        s.key = key.clone().unwrap();
        s
    }
    /// A server of `env`, ready, with no owner made and no key sent (the
    /// browser tests bootstrap through the web UI).
    pub(crate) fn start_unbootstrapped(env: &Env, extra_env: &[(&str, &str)]) -> Self {
        Self::start_command(env, &["up"], extra_env)
    }
    /// A server of `env` started with `args` (e.g. `serve --role web`)
    /// instead of `up`, its owner bootstrapped as with [`Server::start`].
    pub(crate) fn start_with(env: &Env, args: &[&str], extra_env: &[(&str, &str)]) -> Self {
        let mut s = Self::start_command(env, args, extra_env);
        let mut key = env.api_key.lock().unwrap();
        if key.is_none() {
            *key = Some(bootstrap_owner(&s, env));
        }
        s.key = key.clone().unwrap();
        s
    }
    fn start_command(env: &Env, args: &[&str], extra_env: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = env.cmd();
        // Kept outside the data directory, so stored-bytes scans and the
        // data directory's modes are about what airlock itself wrote.
        let log = {
            let mut logs = env.server_logs.lock().unwrap();
            let p = env.root().join(format!("server-{}.log", logs.len()));
            logs.push(p.clone());
            p
        };
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let log_path = log.clone();
        cmd.args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(out)
            .stderr(err);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let s = Self {
            child,
            port,
            key: String::new(),
            log: log_path,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.get("/readyz").0 != 200 {
            assert!(Instant::now() < deadline, "server did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }
    /// `http://127.0.0.1:PORT`, what a browser opens.
    pub(crate) fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    /// Everything this server printed so far (stdout and stderr).
    pub(crate) fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
    /// Signs in; returns the status, the `name=value` cookie and the CSRF token.
    pub(crate) fn login(&self, user: &str, password: &str) -> (u16, String, String) {
        let (c, raw) = self.raw(
            "POST",
            "/v1/session",
            Some(&format!(
                r#"{{"username": "{user}", "password": "{password}"}}"#
            )),
            &[],
        );
        let cookie = raw
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .and_then(|v| v.split(';').next())
            .unwrap_or("")
            .to_string();
        let body: Value =
            serde_json::from_str(raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(""))
                .unwrap_or(Value::Null);
        let csrf = body["csrf_token"].as_str().unwrap_or("").to_string();
        (c, cookie, csrf)
    }
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
    /// The server's host pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
    /// SIGKILL, and reaped.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    /// Whether the server exited on its own within `limit` (a hang guard,
    /// not a timing assertion).
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
    pub(crate) fn get_with_key(&self, path: &str, key: &str) -> (u16, String) {
        let auth = format!("Bearer {key}");
        self.request("GET", path, None, &[("authorization", &auth)])
    }
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let (code, out) = self.raw(method, path, body, headers);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }
    /// The whole response (status line, headers, body) as text.
    pub(crate) fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return (0, String::new());
        };
        let body = body.unwrap_or("");
        let host = if headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            ""
        } else {
            "Host: x\r\n"
        };
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\n{host}Connection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        let own = headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("authorization") || k.eq_ignore_ascii_case("cookie")
        });
        if !own && !self.key.is_empty() {
            req.push_str(&format!("Authorization: Bearer {}\r\n", self.key));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
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
        (code, out)
    }
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, None, &[])
    }
    pub(crate) fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let (c, b) = self.request(method, path, body, headers);
        (c, serde_json::from_str(&b).unwrap_or(Value::Null))
    }
    pub(crate) fn run_state(&self, id: &str) -> String {
        self.json("GET", &format!("/v1/runs/{id}"), None, &[]).1["run"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    pub(crate) fn wait_state(&self, id: &str, want: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.run_state(id);
            if want.contains(&s.as_str()) {
                return s;
            }
            assert!(Instant::now() < deadline, "run {id} stuck in {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many host processes have `marker` in their command line.
pub(crate) fn count_procs(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .count()
}

fn run_5_cancel_of_queued_and_running_runs_over_http(who: Who) {
    let env = Env::new(who);
    let marker = sleep_marker(who, 7000);
    env.sh_worker(
        "slow",
        "[limits]\ntimeout_s = 120\n",
        &format!("sleep {marker} & sleep {marker}\n"),
    );
    let server = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "1")]);
    let (c1, a) = server.json("POST", "/v1/workers/slow/runs", Some("{}"), &[]);
    assert_eq!(c1, 201, "{a}");
    let a = a["run"]["id"].as_str().unwrap().to_string();
    server.wait_state(&a, &["running"]);
    let (_, b) = server.json("POST", "/v1/workers/slow/runs", Some("{}"), &[]);
    let b = b["run"]["id"].as_str().unwrap().to_string();
    let (_, got) = server.json("GET", &format!("/v1/runs/{b}"), None, &[]);
    assert_eq!(got["queue_position"], 1, "{got}");
    // Queued: cancelled at once, never starts.
    let (_, r) = server.json("POST", &format!("/v1/runs/{b}/cancel"), None, &[]);
    assert_eq!(r["state"], "cancelled");
    // Running: killed with its whole tree.
    let deadline = Instant::now() + Duration::from_secs(20);
    while count_procs(&format!("sleep {marker}")) < 2 {
        assert!(Instant::now() < deadline, "workload never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, r) = server.json("POST", &format!("/v1/runs/{a}/cancel"), None, &[]);
    assert!(r["state"] == "running" || r["state"] == "cancelled", "{r}");
    assert_eq!(
        server.wait_state(&a, &["cancelled", "failed", "succeeded"]),
        "cancelled"
    );
    assert_eq!(
        count_procs(&format!("sleep {marker}")),
        0,
        "no process left"
    );
    // Idempotent: cancelling again changes nothing.
    let (_, r) = server.json("POST", &format!("/v1/runs/{a}/cancel"), None, &[]);
    assert_eq!(r["state"], "cancelled");
    assert_eq!(server.run_state(&b), "cancelled");
    let (_, ev) = server.request("GET", &format!("/v1/runs/{b}/events"), None, &[]);
    assert!(
        !ev.contains("\"running\""),
        "the cancelled queued run never started: {ev}"
    );
}
both_users!(run_5_cancel_of_queued_and_running_runs_over_http);

fn api_8_concurrent_duplicates_over_http_create_one_run(who: Who) {
    let env = Env::new(who);
    env.sh_worker("quick", "", "echo '{}' > /airlock/output/result.json\n");
    let server = std::sync::Arc::new(Server::start(&env, &[]));
    let mut handles = Vec::new();
    for _ in 0..10 {
        let s = server.clone();
        handles.push(std::thread::spawn(move || {
            s.json(
                "POST",
                "/v1/workers/quick/runs",
                Some("{}"),
                &[("Idempotency-Key", "same")],
            )
        }));
    }
    let results: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ids: std::collections::BTreeSet<String> = results
        .iter()
        .map(|(_, v)| v["run"]["id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{results:?}");
    assert_eq!(results.iter().filter(|(c, _)| *c == 201).count(), 1);
    let (c, v) = server.json(
        "POST",
        "/v1/workers/quick/runs",
        Some(r#"{"input": {"x": 1}}"#),
        &[("Idempotency-Key", "same")],
    );
    assert!(c == 409 || c == 422, "{c} {v}");
    let (c, v) = server.json("POST", "/v1/workers/quick/runs", Some("not json"), &[]);
    assert_eq!(c, 400, "{v}");
    assert!(v["error"]["code"].is_string() && v["error"]["request_id"].is_string());
}
both_users!(api_8_concurrent_duplicates_over_http_create_one_run);

fn dur_2_kill_9_of_airlock_up_mid_runs_loses_nothing_and_duplicates_nothing(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "step",
        "[inputs.i]\ntype = \"number\"\n[limits]\ntimeout_s = 60\n",
        "sleep 0.3\necho '{}' > /airlock/output/result.json\n",
    );
    let mut server = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "4")]);
    let mut ids = Vec::new();
    for i in 0..50 {
        let (c, v) = server.json(
            "POST",
            "/v1/workers/step/runs",
            Some(&format!(r#"{{"input": {{"i": {i}}}}}"#)),
            &[],
        );
        assert_eq!(c, 201, "{v}");
        ids.push(v["run"]["id"].as_str().unwrap().to_string());
    }
    // Let some finish and some be mid-flight, then kill -9.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = server.json("GET", "/v1/runs?state=succeeded&limit=500", None, &[]);
        if v["runs"].as_array().map_or(0, |a| a.len()) >= 5 {
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.child.kill(); // SIGKILL
    let _ = server.child.wait();
    drop(server);
    let server = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "4")]);
    let mut finals = std::collections::BTreeMap::new();
    let mut failed = Vec::new();
    for id in &ids {
        let s = server.wait_state(
            id,
            &[
                "succeeded",
                "failed",
                "unknown",
                "timed_out",
                "cancelled",
                "blocked",
            ],
        );
        if s == "failed" {
            // Say why, so a failure here can be diagnosed from the log.
            let (_, run) = server.json("GET", &format!("/v1/runs/{id}"), None, &[]);
            let (_, log) = server.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
            failed.push(format!("{run}\n{log}"));
        }
        *finals.entry(s).or_insert(0) += 1;
    }
    assert_eq!(finals.values().sum::<i32>(), 50, "no run lost: {finals:?}");
    assert!(failed.is_empty(), "{finals:?}: {}", failed.join("\n\n"));
    // None silently duplicated: a non-idempotent run whose workload had
    // started when the server died is `unknown`, never run twice. A run is
    // `running` (one status event) a moment before its workload starts; one
    // killed in that moment is requeued and runs once: the reaper's audit
    // event says which (`workload_started`), and only those may run again.
    let mut reaped: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut after = 0;
    loop {
        let (c, page) = server.json(
            "GET",
            &format!("/v1/audit?after={after}&limit=500"),
            None,
            &[],
        );
        assert_eq!(c, 200, "{page}");
        for e in page["events"].as_array().unwrap() {
            if e["event_type"] == "run.reaped" {
                let r = reaped
                    .entry(e["run_id"].as_str().unwrap().to_string())
                    .or_default();
                if e["metadata"]["workload_started"] == true {
                    r.1 += 1;
                } else {
                    r.0 += 1;
                }
            }
        }
        match page["next_cursor"].as_i64() {
            Some(c) => after = c,
            None => break,
        }
    }
    for id in &ids {
        let (_, ev) = server.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
        let starts = ev.matches("event: status").count();
        let (unstarted, started) = reaped.get(id).copied().unwrap_or_default();
        assert!(
            starts <= 1 + unstarted,
            "run {id} started {starts} times, requeued before its workload started {unstarted} times"
        );
        if started > 0 {
            assert_eq!(
                server.run_state(id),
                "unknown",
                "run {id} died mid-workload"
            );
        }
    }
    drop(server);
    let out = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Nothing either server printed, crash and recovery included, holds the
    // KEK (control: the logs hold the requests that created the runs).
    let logs = env.server_logs();
    assert!(contains(&logs, b"/v1/workers/step/runs"), "logs captured");
    for (form, needle) in env.kek_forms() {
        assert!(
            !contains(&logs, &needle),
            "the KEK ({form}) is in a server log"
        );
    }
}
both_users!(dur_2_kill_9_of_airlock_up_mid_runs_loses_nothing_and_duplicates_nothing);

fn aud_2_audit_verify_names_the_first_bad_sequence_on_a_tampered_copy(who: Who) {
    let env = Env::new(who);
    env.sh_worker("quick", "", "echo '{}' > /airlock/output/result.json\n");
    for _ in 0..3 {
        let (v, _, _) = env.run_json(&["quick"]);
        assert_eq!(state(&v), "succeeded");
    }
    let db = env.data.join("airlock.db");
    let ok = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(
        ok.status.success(),
        "positive control: {}",
        String::from_utf8_lossy(&ok.stdout)
    );
    // An attacker with the database file drops the triggers and edits.
    let attacks = [
        (
            "edit",
            "UPDATE audit_events SET line = replace(line, '\"run.claimed\"', '\"run.claimeD\"') WHERE seq = 2",
            "bad seq 2",
        ),
        (
            "delete",
            "DELETE FROM audit_events WHERE seq = 4",
            "bad seq 4",
        ),
        (
            "reorder",
            "UPDATE audit_events SET seq = -1 WHERE seq = 5; UPDATE audit_events SET seq = 5 WHERE seq = 6; UPDATE audit_events SET seq = 6 WHERE seq = -1",
            "bad seq 5",
        ),
        (
            "insert",
            "INSERT INTO audit_events (workspace_id, seq, line, hash) SELECT workspace_id, 100, line, hash FROM audit_events WHERE seq = 3",
            "bad seq",
        ),
    ];
    for (name, sql, expect) in attacks {
        let copy = env.data.join(format!("copy-{name}.db"));
        std::fs::copy(&db, &copy).unwrap();
        env.give(&copy);
        let wal = env.data.join(format!("copy-{name}.db-wal"));
        if std::fs::copy(env.data.join("airlock.db-wal"), &wal).is_ok() {
            env.give(&wal);
        }
        let script = format!(
            "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('DROP TRIGGER audit_events_no_update')\nc.execute('DROP TRIGGER audit_events_no_delete')\nc.executescript(\"\"\"{sql}\"\"\")\nc.commit()\n"
        );
        let st = Command::new("/usr/bin/python3")
            .args(["-c", &script, copy.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success(), "{name}");
        let out = env
            .cmd()
            .args([
                "--database-url",
                &format!("sqlite://{}", copy.display()),
                "audit",
                "verify",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{name} not detected: {text}");
        assert!(text.contains(expect), "{name}: {text}");
    }
}
both_users!(aud_2_audit_verify_names_the_first_bad_sequence_on_a_tampered_copy);

fn api_6_events_resume_after_last_event_id(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "chatty",
        "",
        "echo one\necho two >&2\necho '{}' > /airlock/output/result.json\n",
    );
    let server = Server::start(&env, &[]);
    let (_, v) = server.json("POST", "/v1/workers/chatty/runs", Some("{}"), &[]);
    let id = v["run"]["id"].as_str().unwrap().to_string();
    server.wait_state(&id, &["succeeded"]);
    let (_, all) = server.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
    let ids: Vec<&str> = all.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
    assert!(ids.len() >= 4, "{all}");
    assert!(
        all.contains("event: log") && all.contains("event: finish") && all.contains("event: end"),
        "{all}"
    );
    // A client that saw up to event 2 resumes with the rest, nothing repeated.
    let (_, rest) = server.request(
        "GET",
        &format!("/v1/runs/{id}/events"),
        None,
        &[("Last-Event-ID", "2")],
    );
    let rest_ids: Vec<&str> = rest
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(rest_ids, ids[2..].to_vec(), "{rest}");
    // Another id is a 404 with the error shape.
    let (code, body) = server.json("GET", "/v1/runs/run_nope/events", None, &[]);
    assert_eq!(code, 404);
    assert_eq!(body["error"]["code"], "not_found");
}
both_users!(api_6_events_resume_after_last_event_id);

/// A fresh PostgreSQL database for one test (dropped at the end).
pub(crate) struct PgDb(String);

impl PgDb {
    pub(crate) fn new() -> Option<Self> {
        let name = format!(
            "airlock_cli_{}_{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() % 1_000_000
        );
        let ok = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-qc",
                &format!("CREATE DATABASE {name}"),
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required"
            );
            return None;
        }
        Some(Self(name))
    }
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.0)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-qc",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0),
            ])
            .status();
    }
}

fn ops_2_two_servers_on_postgresql_share_the_queue_without_duplicates(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "step",
        "[inputs.i]\ntype = \"number\"\n",
        "sleep 0.1\necho '{}' > /airlock/output/result.json\n",
    );
    let url = db.url();
    let a = Server::start(
        &env,
        &[
            ("AIRLOCK_DATABASE_URL", &url),
            ("AIRLOCK_MAX_CONCURRENT", "2"),
        ],
    );
    let b = Server::start(
        &env,
        &[
            ("AIRLOCK_DATABASE_URL", &url),
            ("AIRLOCK_MAX_CONCURRENT", "2"),
        ],
    );
    let mut ids = Vec::new();
    for i in 0..20 {
        let server = if i % 2 == 0 { &a } else { &b };
        let (c, v) = server.json(
            "POST",
            "/v1/workers/step/runs",
            Some(&format!(r#"{{"input": {{"i": {i}}}}}"#)),
            &[],
        );
        assert_eq!(c, 201, "{v}");
        ids.push(v["run"]["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        assert_eq!(a.wait_state(id, &["succeeded", "failed"]), "succeeded");
        let (_, ev) = b.request("GET", &format!("/v1/runs/{id}/events"), None, &[]);
        assert_eq!(
            ev.matches("event: status").count(),
            1,
            "run {id} started once"
        );
        let (_, v) = a.json("GET", &format!("/v1/runs/{id}"), None, &[]);
        assert_eq!(v["run"]["attempt"], 1);
    }
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
both_users!(ops_2_two_servers_on_postgresql_share_the_queue_without_duplicates);

fn run_2_worker_validate_and_unreachable_database_are_clear_errors(who: Who) {
    let env = Env::with_examples(who);
    let ok = env
        .cmd()
        .args(["worker", "validate"])
        .arg(env.workers.join("hello-python"))
        .output()
        .unwrap();
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("ok hello-python"));
    env.sh_worker(
        "broken",
        "colour = \"blue\"\n[limits]\ntimeout_s = -3\n",
        "true\n",
    );
    let bad = env
        .cmd()
        .args(["worker", "validate"])
        .arg(env.workers.join("broken"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(
        text.contains("colour") || text.contains("limits.timeout_s"),
        "{text}"
    );
    // A broken bundle is skipped, never half-loaded; the others still run.
    let (v, code, _) = env.run_json(&["broken"]);
    assert_eq!(code, 125, "{v}");
    let (v, code, _) = env.run_json(&["hello-python", "--input", r#"{"name": "x"}"#]);
    assert_eq!((state(&v), code), ("succeeded", 0));
    // A database that is not there: one clear line, exit 125, no panic.
    let out = env
        .cmd()
        .args([
            "--database-url",
            "postgres://postgres@127.0.0.1:1/none",
            "runs",
            "list",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("cannot open the database") && !err.contains("panicked"),
        "{err}"
    );
}
both_users!(run_2_worker_validate_and_unreachable_database_are_clear_errors);

fn run_7_per_worker_cap_keeps_excess_runs_queued_with_a_position(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "single",
        "[limits]\nconcurrency = 1\ntimeout_s = 120\n",
        "sleep 60\n",
    );
    env.sh_worker("other", "", "echo '{}' > /airlock/output/result.json\n");
    let server = Server::start(&env, &[("AIRLOCK_MAX_CONCURRENT", "4")]);
    let (_, a) = server.json("POST", "/v1/workers/single/runs", Some("{}"), &[]);
    let a = a["run"]["id"].as_str().unwrap().to_string();
    server.wait_state(&a, &["running"]);
    let (_, b) = server.json("POST", "/v1/workers/single/runs", Some("{}"), &[]);
    let b = b["run"]["id"].as_str().unwrap().to_string();
    // Another worker is not held up by `single`'s cap (positive control).
    let (_, c) = server.json("POST", "/v1/workers/other/runs", Some("{}"), &[]);
    let c = c["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(server.wait_state(&c, &["succeeded", "failed"]), "succeeded");
    let (_, got) = server.json("GET", &format!("/v1/runs/{b}"), None, &[]);
    assert_eq!(got["run"]["state"], "queued", "{got}");
    assert_eq!(got["queue_position"], 1);
    for id in [&a, &b] {
        server.json("POST", &format!("/v1/runs/{id}/cancel"), None, &[]);
    }
    assert_eq!(server.wait_state(&a, &["cancelled"]), "cancelled");
}
both_users!(run_7_per_worker_cap_keeps_excess_runs_queued_with_a_position);

/// Runs once, as root: making the disk full needs a tmpfs mounted in a
/// private mount namespace, and what is checked (the publisher's handling
/// of ENOSPC) does not depend on the user airlock runs as.
#[test]
fn dur_5_full_disk_while_publishing_fails_the_run_and_leaves_nothing_half_written() {
    if !require_root("to mount a small tmpfs in a private mount namespace") {
        return;
    }
    let env = Env::new(Who::Invoker);
    env.sh_worker("big", "[limits]\noutput_bytes = 10000000\n", "head -c 3000000 /dev/urandom > /airlock/output/blob\necho '{}' > /airlock/output/result.json\n");
    std::fs::create_dir_all(env.data.join("artifacts")).unwrap();
    let db = env.data.join("db.sqlite");
    // A 1 MiB artifact store, in a mount namespace of this command only.
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs {art} && exec \"$0\" run big --json",
        art = env.data.join("artifacts").display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(airlock_bin())
        .env("AIRLOCK_DATA_DIR", &env.data)
        .env("AIRLOCK_WORKERS_DIR", &env.workers)
        .env("AIRLOCK_DATABASE_URL", format!("sqlite://{}", db.display()))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        state(&v),
        "failed",
        "{v} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["run"]["error_code"], "output_io", "{v}");
    assert!(
        v["artifacts"].as_array().is_some_and(|a| a.is_empty()),
        "nothing published: {v}"
    );
    // Positive control: the same worker publishes without the tiny disk.
    let (v, _, err) = env.run_json(&["big"]);
    assert_eq!(state(&v), "succeeded", "{v} {err}");
}

fn key_4_secrets_over_http_are_write_only(who: Who) {
    let env = Env::new(who);
    let server = Server::start(&env, &[]);
    let (c, v) = server.json(
        "PUT",
        "/v1/secrets/HTTP_TOKEN",
        Some(r#"{"value": "http-secret-value-0987"}"#),
        &[],
    );
    assert_eq!(c, 200, "{v}");
    assert_eq!(v["version"], 1);
    let (c, body) = server.get("/v1/secrets");
    assert_eq!(c, 200);
    assert!(
        body.contains("HTTP_TOKEN") && !body.contains("http-secret-value-0987"),
        "{body}"
    );
    for (name, value, want) in [
        ("lowercase", "v-1234567890", 422),
        // A platform name is forbidden, not malformed.
        ("AIRLOCK_X", "v-1234567890", 403),
        ("GOOD", "", 422),
    ] {
        let (c, v) = server.json(
            "PUT",
            &format!("/v1/secrets/{name}"),
            Some(&format!(r#"{{"value": "{value}"}}"#)),
            &[],
        );
        assert_eq!(c, want, "{name}: {v}");
        assert!(v["error"]["code"].is_string());
    }
    let (c, _) = server.json(
        "PUT",
        "/v1/secrets/GOOD",
        Some(r#"{"value": "x", "extra": 1}"#),
        &[],
    );
    assert_eq!(c, 400);
    let (c, _) = server.request("DELETE", "/v1/secrets/HTTP_TOKEN", None, &[]);
    assert_eq!(c, 204);
    let (c, _) = server.request("DELETE", "/v1/secrets/HTTP_TOKEN", None, &[]);
    assert_eq!(c, 404);
}
both_users!(key_4_secrets_over_http_are_write_only);

fn aud_4_export_verifies_with_the_published_external_script(who: Who) {
    let env = Env::new(who);
    env.sh_worker("quick", "", "echo '{}' > /airlock/output/result.json\n");
    for _ in 0..2 {
        assert_eq!(state(&env.run_json(&["quick"]).0), "succeeded");
    }
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    assert!(out.status.success());
    let export = env.data.join("export.jsonl");
    std::fs::write(&export, &out.stdout).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../airlock-audit/verify_export.py");
    let ok = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&export)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(
        String::from_utf8_lossy(&ok.stdout).starts_with("ok 6 events"),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    // Positive control: an edited export is caught by the same script.
    let tampered = String::from_utf8_lossy(&out.stdout).replacen("run.claimed", "run.claimeD", 1);
    std::fs::write(&export, tampered).unwrap();
    let bad = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&export)
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bad.stdout)
    );
    assert!(String::from_utf8_lossy(&bad.stdout).starts_with("bad seq 2"));
}
both_users!(aud_4_export_verifies_with_the_published_external_script);

fn dur_3_plans_over_http_run_once(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "planned",
        "[inputs.n]\ntype = \"number\"\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let server = Server::start(&env, &[]);
    let (c, v) = server.json(
        "POST",
        "/v1/plans",
        Some(r#"{"worker": "planned", "input": {"n": 3}}"#),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let token = v["token"].as_str().unwrap().to_string();
    let body = format!(r#"{{"token": "{token}"}}"#);
    let (c, v) = server.json("POST", "/v1/plans/run", Some(&body), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_state(&id, &["succeeded", "failed"]),
        "succeeded"
    );
    let (c, v) = server.json("POST", "/v1/plans/run", Some(&body), &[]);
    assert_eq!(c, 409, "a used token is refused: {v}");
    assert_eq!(v["error"]["code"], "plan_refused");
    let (c, _) = server.json(
        "POST",
        "/v1/plans",
        Some(r#"{"worker": "planned", "input": {"n": "x"}}"#),
        &[],
    );
    assert_eq!(c, 422);
}
both_users!(dur_3_plans_over_http_run_once);

/// A file input end to end in a real sandbox: the file uploaded over
/// HTTP is at `/airlock/input/doc`, read-only, and `/airlock/input.json`
/// gives that path; the run's output is the file's content.
fn api_5_a_file_input_reaches_the_sandbox(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "reader",
        "[inputs.doc]\ntype = \"file\"\nmax_bytes = 64\n[outputs.got]\ntype = \"json\"\n\
         [outputs.path]\ntype = \"string\"\n[outputs.readonly]\ntype = \"boolean\"\n",
        "p=$(sed -n 's/.*\"doc\":\"\\([^\"]*\\)\".*/\\1/p' /airlock/input.json)\n\
         if [ -w \"$p\" ] || echo x >> \"$p\" 2>/dev/null; then ro=false; else ro=true; fi\n\
         { printf '{\"path\": \"%s\", \"readonly\": %s, \"got\": ' \"$p\" \"$ro\"; cat \"$p\"; printf '}'; } \
         > /airlock/output/result.json\n",
    );
    let server = Server::start(&env, &[]);
    let (c, v) = server.json(
        "POST",
        "/v1/uploads?name=doc.json",
        Some(r#"{"k": [1, 2]}"#),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let upload = v["upload"]["id"].as_str().unwrap().to_string();
    let body = format!(r#"{{"input": {{"doc": {{"upload": "{upload}"}}}}}}"#);
    let (c, v) = server.json("POST", "/v1/workers/reader/runs", Some(&body), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_state(&id, &["succeeded", "failed", "blocked"]),
        "succeeded",
        "{}",
        server.json("GET", &format!("/v1/runs/{id}"), None, &[]).1
    );
    let (_, v) = server.json("GET", &format!("/v1/runs/{id}"), None, &[]);
    let outputs = &v["run"]["outputs"];
    assert_eq!(outputs["got"], serde_json::json!({"k": [1, 2]}), "{v}");
    assert_eq!(outputs["path"], "/airlock/input/doc", "{v}");
    assert_eq!(outputs["readonly"], true, "{v}");
    // Not the caller's: refused, naming the field.
    let (c, v) = server.json(
        "POST",
        "/v1/workers/reader/runs",
        Some(r#"{"input": {"doc": {"upload": "upl_nothere"}}}"#),
        &[],
    );
    assert_eq!(c, 422, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("inputs.doc: "),
        "{v}"
    );
}
both_users!(api_5_a_file_input_reaches_the_sandbox);
