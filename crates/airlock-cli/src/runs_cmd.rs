//! The run spine's commands: `up`, `run`, `plan`, `runs …`, `worker
//! validate`, `audit verify`. Each parses its arguments into a service call
//! and renders the outcome; the pipeline is the same one the server uses.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use airlock_service::{Config, CreateRun, Service};
use airlock_store::{DEFAULT_WORKSPACE, RunRecord, RunState, Store};
use clap::{Args, Subcommand};

/// Where things live (SPEC §2), from the environment with embedded defaults.
#[derive(Debug, Clone, Args)]
pub struct Paths {
    /// Data directory (SQLite database, artifacts).
    #[arg(long, env = "AIRLOCK_DATA_DIR", default_value = "data", global = true)]
    data_dir: PathBuf,
    /// Worker bundles folder.
    #[arg(
        long,
        env = "AIRLOCK_WORKERS_DIR",
        default_value = "workers",
        global = true
    )]
    workers_dir: PathBuf,
    /// Database URL; default: SQLite in the data directory.
    #[arg(long, env = "AIRLOCK_DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Operator egress policy (credential channels).
    #[arg(long, env = "AIRLOCK_EGRESS_POLICY", global = true)]
    egress_policy: Option<PathBuf>,
    /// Key directory (KEK, high-water marks): outside the database, 0700.
    #[arg(long, env = "AIRLOCK_KEY_DIR", global = true)]
    key_dir: Option<PathBuf>,
    /// Talk to a server with the stored API key (`airlock login`) instead
    /// of opening the local database (`run`, `runs list|get|cancel`).
    #[arg(long, env = "AIRLOCK_REMOTE", global = true)]
    pub remote: bool,
}

impl Paths {
    fn url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("airlock.db").display()))
    }
    fn config(&self) -> Config {
        let mut c = Config::with_defaults(self.data_dir.clone(), self.workers_dir.clone());
        c.egress_policy = self.egress_policy.clone();
        if let Some(k) = &self.key_dir {
            c.key_dir = k.clone();
        }
        if let Some(ms) = std::env::var("AIRLOCK_LEASE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.lease = Duration::from_millis(ms);
        }
        if let Some(n) = std::env::var("AIRLOCK_MAX_CONCURRENT")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.max_concurrent = n;
        }
        if let Ok(id) = std::env::var("AIRLOCK_NODE_ID")
            && !id.is_empty()
            && id.len() <= 64
            && !id.contains(':')
        {
            c.node_id = id;
        }
        c
    }
}

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

pub(crate) async fn open(paths: &Paths) -> Result<Arc<Service>, String> {
    std::fs::create_dir_all(&paths.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", paths.data_dir.display()))?;
    let store = Store::open(&paths.url())
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    Service::open(store, paths.config()).map_err(|e| format!("cannot open the data directory: {e}"))
}

/// Runs `f` with the service on a fresh runtime: the shape of every
/// command that works on the local database.
pub(crate) fn with_service(
    paths: &Paths,
    f: impl AsyncFnOnce(Arc<Service>) -> ExitCode,
) -> ExitCode {
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    rt.block_on(async move {
        match open(paths).await {
            Ok(svc) => f(svc).await,
            Err(e) => err(e),
        }
    })
}

pub(crate) fn err(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("airlock: {msg}");
    ExitCode::from(125)
}

/// Exit status of `airlock run`: 0 succeeded, 1 ended otherwise, 125 airlock error.
fn run_exit(r: &RunRecord) -> ExitCode {
    if r.state == RunState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn parse_input(s: &str) -> Result<serde_json::Value, String> {
    let text = match s.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("--input @{path}: {e}"))?,
        None => s.to_string(),
    };
    if text.len() > 1 << 20 {
        return Err("--input is larger than 1 MiB".into());
    }
    serde_json::from_str(&text).map_err(|e| format!("--input is not valid JSON: {e}"))
}

// ---------------------------------------------------------------- up

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Listen address. Every route but health, bootstrap and login needs a
    /// session or an API key.
    #[arg(long, env = "AIRLOCK_LISTEN", default_value = "127.0.0.1:8000")]
    listen: String,
    /// The server is reached over TLS (a terminating proxy in front):
    /// `Secure` + `__Host-` session cookies and HSTS.
    #[arg(long, env = "AIRLOCK_TLS_PROXY")]
    tls_proxy: bool,
    /// Comma-separated proxy addresses whose `X-Forwarded-For` is believed.
    #[arg(long, env = "AIRLOCK_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<std::net::IpAddr>,
    /// Minutes a session may sit unused.
    #[arg(long, env = "AIRLOCK_SESSION_IDLE_MINUTES", default_value_t = 720)]
    session_idle_minutes: u64,
    /// Hours a session lives at most.
    #[arg(long, env = "AIRLOCK_SESSION_MAX_HOURS", default_value_t = 168)]
    session_max_hours: u64,
    /// Serve Prometheus `/metrics` without authentication on this separate
    /// address (keep it private); on the main listener `/metrics` needs an
    /// administrator.
    #[arg(long, env = "AIRLOCK_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Runs one user may create per UTC day (durable across restarts).
    #[arg(
        long,
        env = "AIRLOCK_QUOTA_RUNS_PER_USER_DAY",
        default_value_t = 10_000
    )]
    quota_runs_per_user_day: i64,
    /// Runs one workspace may create per UTC day.
    #[arg(
        long,
        env = "AIRLOCK_QUOTA_RUNS_PER_WORKSPACE_DAY",
        default_value_t = 50_000
    )]
    quota_runs_per_workspace_day: i64,
    /// Concurrent event streams per user.
    #[arg(long, env = "AIRLOCK_STREAMS_PER_USER", default_value_t = 16)]
    streams_per_user: usize,
    /// Failed authentications (401s) one client address may cause quickly
    /// before it gets 429 (refilled at one per second).
    #[arg(long, env = "AIRLOCK_AUTH_FAILURE_BURST", default_value_t = 20)]
    auth_failure_burst: u32,
    /// Sustained requests per second from one client address (burst: 3×).
    #[arg(long, env = "AIRLOCK_RATE_PER_CLIENT_PER_S", default_value_t = 200)]
    rate_per_client_per_s: u32,
    /// Sustained reads per second per API key or session (burst: 3×).
    #[arg(long, env = "AIRLOCK_RATE_READS_PER_S", default_value_t = 100)]
    rate_reads_per_s: u32,
    /// Sustained writes per second per API key or session (burst: 4×).
    #[arg(long, env = "AIRLOCK_RATE_WRITES_PER_S", default_value_t = 30)]
    rate_writes_per_s: u32,
}

/// IAM-1: while no owner exists, a fresh one-time capability is written to
/// the key directory (0600) at every start; its path is printed.
async fn open_bootstrap(svc: &Service) -> Result<Option<PathBuf>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let store = svc.store();
    if store.bootstrap_state().await.map_err(|e| e.to_string())?
        == airlock_store::BootstrapState::Closed
    {
        return Ok(None);
    }
    let token = airlock_iam::keys::new_prefixed_token("alb");
    let dir = &svc.config().key_dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("bootstrap.token");
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(format!("{token}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let state = store
        .bootstrap_begin(
            &airlock_iam::keys::token_hash(&token),
            airlock_store::now_ms(),
        )
        .await
        .map_err(|e| e.to_string())?;
    if state == airlock_store::BootstrapState::Closed {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    Ok(Some(path))
}

pub fn up(paths: &Paths, a: &UpArgs) -> ExitCode {
    let addr: std::net::SocketAddr = match a.listen.parse() {
        Ok(x) => x,
        Err(_) => return err(format!("--listen {:?} is not an address", a.listen)),
    };
    if !addr.ip().is_loopback() && !a.tls_proxy {
        eprintln!(
            "airlock: warning: listening on {addr} without --tls-proxy: passwords and session cookies cross the network in clear text"
        );
    }
    let auth_cfg = airlock_api::auth::AuthConfig {
        idle_timeout: Duration::from_secs(a.session_idle_minutes.clamp(1, 525_600) * 60),
        absolute_timeout: Duration::from_secs(a.session_max_hours.clamp(1, 8_760) * 3600),
        secure_cookies: a.tls_proxy,
        trusted_proxies: a.trusted_proxies.clone(),
        ..Default::default()
    };
    with_service(paths, async |svc| {
        for (path, e) in svc.worker_errors() {
            eprintln!("airlock: skipped worker {}: {e}", path.display());
        }
        // KEY-3: a database restored from an older backup is refused.
        if let Err(e) = svc.secrets().startup_check().await {
            return err(format!(
                "{}: {e} (after restoring a backup on purpose, run `airlock keys accept-restore`)",
                e.code()
            ));
        }
        match svc.recover_startup().await {
            Ok(r) if !r.is_empty() => eprintln!(
                "airlock: recovered {} run(s) from a previous start",
                r.len()
            ),
            Ok(_) => {}
            Err(e) => return err(format!("startup recovery failed: {e}")),
        }
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => return err(format!("cannot listen on {addr}: {e}")),
        };
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let executor = tokio::spawn(svc.clone().run_executor(stop_rx.clone()));
        let reaper = tokio::spawn(svc.clone().run_reaper(stop_rx.clone()));
        // RUN-6: cron triggers; each fire is claimed in the database, so
        // several nodes fire it once.
        let scheduler = tokio::spawn(svc.clone().run_scheduler(
            std::sync::Arc::new(airlock_iam::SystemClock),
            stop_rx.clone(),
        ));
        let workers = svc.list_workers().len();
        println!(
            "{}",
            serde_json::json!({"event": "listening", "address": addr.to_string(), "workers": workers, "database": svc.store().backend()})
        );
        eprintln!("airlock: serving {workers} worker(s) on http://{addr}");
        let bootstrap_file = match open_bootstrap(&svc).await {
            Ok(p) => p,
            Err(e) => return err(format!("bootstrap: {e}")),
        };
        if let Some(p) = &bootstrap_file {
            eprintln!(
                "airlock: no owner yet: a one-time bootstrap capability is in {} (POST it to /v1/bootstrap with a username and password)",
                p.display()
            );
        }
        let limits = airlock_api::limits::LimitConfig {
            runs_per_user_per_day: a.quota_runs_per_user_day,
            runs_per_workspace_per_day: a.quota_runs_per_workspace_day,
            streams_per_user: a.streams_per_user,
            auth_failures_per_client: Some(airlock_api::limits::Bucket {
                burst: a.auth_failure_burst.max(1),
                per_second: 1,
            }),
            per_client: Some(airlock_api::limits::Bucket {
                burst: a.rate_per_client_per_s.saturating_mul(3).max(1),
                per_second: a.rate_per_client_per_s.max(1),
            }),
            reads_per_identity: Some(airlock_api::limits::Bucket {
                burst: a.rate_reads_per_s.saturating_mul(3).max(1),
                per_second: a.rate_reads_per_s.max(1),
            }),
            writes_per_identity: Some(airlock_api::limits::Bucket {
                burst: a.rate_writes_per_s.saturating_mul(4).max(1),
                per_second: a.rate_writes_per_s.max(1),
            }),
        };
        let mut state = airlock_api::AppState::with_limits(
            svc.clone(),
            airlock_api::auth::Auth::new(auth_cfg, std::sync::Arc::new(airlock_iam::SystemClock)),
            limits,
        );
        state.bootstrap_file = bootstrap_file;
        if let Some(maddr) = a.metrics_listen {
            let ml = match tokio::net::TcpListener::bind(maddr).await {
                Ok(l) => l,
                Err(e) => return err(format!("cannot listen on {maddr}: {e}")),
            };
            eprintln!("airlock: metrics on http://{maddr}/metrics (no authentication)");
            let mstate = state.clone();
            tokio::spawn(async move {
                let router = axum::Router::new().route(
                    "/metrics",
                    axum::routing::get(move || {
                        let st = mstate.clone();
                        async move {
                            match airlock_api::metrics::render(&st).await {
                                Ok(t) => (axum::http::StatusCode::OK, t),
                                Err(_) => {
                                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new())
                                }
                            }
                        }
                    }),
                );
                let _ = axum::serve(ml, router).await;
            });
        }
        // One access-log line per request on stderr, with its request id.
        let app = airlock_api::app(state)
            .layer(axum::middleware::from_fn(access_log))
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        };
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        // SIGTERM drain: stop claiming; running work finishes (DUR-2).
        let _ = stop_tx.send(true);
        let _ = executor.await;
        reaper.abort();
        scheduler.abort();
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => err(e),
        }
    })
}

/// `{"event":"request", request_id, method, path, status, ms}` on stderr.
async fn access_log(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = std::time::Instant::now();
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let r = next.run(req).await;
    let rid = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    eprintln!(
        "{}",
        serde_json::json!({
            "event": "request",
            "request_id": rid,
            "method": method,
            "path": path,
            "status": r.status().as_u16(),
            "ms": started.elapsed().as_secs_f64() * 1000.0,
        })
    );
    r
}

// ---------------------------------------------------------------- run / plan

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Worker id (omit with --plan).
    #[arg(required_unless_present = "plan")]
    worker: Option<String>,
    /// Input as JSON, or @FILE.
    #[arg(long, default_value = "{}")]
    input: String,
    /// Execute exactly this plan (from `airlock plan`).
    #[arg(long, conflicts_with = "worker")]
    plan: Option<String>,
    /// Idempotency key: the same key and request return the original run.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Print the run as one JSON object.
    #[arg(long)]
    json: bool,
    /// Print log lines as they arrive.
    #[arg(long)]
    follow: bool,
}

pub fn run(paths: &Paths, a: &RunArgs) -> ExitCode {
    if paths.remote {
        return remote(async || remote_run(a).await);
    }
    with_service(paths, async |svc| {
        let created = match (&a.plan, &a.worker) {
            (Some(token), _) => svc.run_plan(DEFAULT_WORKSPACE, token, "cli").await,
            (None, Some(worker)) => {
                let input = match parse_input(&a.input) {
                    Ok(i) => i,
                    Err(e) => return err(e),
                };
                svc.create_run(CreateRun {
                    workspace: DEFAULT_WORKSPACE.into(),
                    worker_id: worker.clone(),
                    input,
                    trigger: "cli".into(),
                    actor: "cli".into(),
                    idempotency_key: a.idempotency_key.clone(),
                })
                .await
            }
            (None, None) => return err("give a worker id or --plan"),
        };
        let created = match created {
            Ok(c) => c,
            Err(e) => return err(format!("{}: {e}", e.code())),
        };
        let id = created.run.id.clone();
        let progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
        if progress {
            eprintln!(
                "airlock: {id} {} ({})",
                created.run.worker_id,
                if created.created {
                    "queued"
                } else {
                    "existing run"
                }
            );
        }
        let started = std::time::Instant::now();
        if created.created {
            // Execute this run in this process, through the same pipeline.
            let claim = match svc
                .store()
                .claim_run(
                    &format!("cli:{}", std::process::id()),
                    svc.config().lease,
                    &id,
                )
                .await
            {
                Ok(Some(c)) => Some(c),
                Ok(None) => None,
                Err(e) => return err(e),
            };
            if let Some(claim) = claim {
                let follower = a
                    .follow
                    .then(|| tokio::spawn(follow(svc.clone(), id.clone())));
                svc.execute(claim).await;
                if let Some(f) = follower {
                    let _ = f.await;
                }
            }
        }
        let run = match svc.get(DEFAULT_WORKSPACE, &id).await {
            Ok(r) => r,
            Err(e) => return err(e),
        };
        if progress {
            eprintln!(
                "airlock: {id} {} after {:.1} s",
                run.state.as_str(),
                started.elapsed().as_secs_f64()
            );
        }
        print_run(&svc, &run, a.json).await;
        run_exit(&run)
    })
}

async fn follow(svc: Arc<Service>, id: String) {
    let mut after = 0;
    loop {
        let events = svc
            .store()
            .events(DEFAULT_WORKSPACE, &id, after, 500)
            .await
            .unwrap_or_default();
        for e in &events {
            after = e.seq;
            if e.kind == "log" {
                let text = e.data["text"].as_str().unwrap_or("");
                if e.data["stream"] == "stderr" {
                    eprint!("{text}");
                } else {
                    print!("{text}");
                }
            }
        }
        let _ = std::io::stdout().flush();
        let done = svc
            .get(DEFAULT_WORKSPACE, &id)
            .await
            .map(|r| r.state.is_terminal())
            .unwrap_or(true);
        if done && events.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn print_run(svc: &Service, run: &RunRecord, json: bool) {
    let artifacts = svc
        .store()
        .artifacts(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap_or_default();
    if json {
        println!(
            "{}",
            serde_json::json!({"run": run, "artifacts": artifacts})
        );
        return;
    }
    let code = run
        .error_code
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    println!(
        "{} {} {}{}",
        run.id,
        run.worker_id,
        run.state.as_str(),
        code
    );
    if let Some(m) = &run.error_message {
        println!("  {m}");
    }
    if let Some(o) = &run.outputs
        && o.as_object().is_some_and(|o| !o.is_empty())
    {
        println!("  outputs: {o}");
    }
    for a in artifacts {
        println!(
            "  artifact {} ({} bytes, {}, sha256 {})",
            a.name, a.size, a.media_type, a.digest
        );
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    worker: String,
    #[arg(long, default_value = "{}")]
    input: String,
    /// Seconds until the token expires.
    #[arg(long, default_value_t = 900)]
    ttl: u64,
}

pub fn plan(paths: &Paths, a: &PlanArgs) -> ExitCode {
    with_service(paths, async |svc| {
        let input = match parse_input(&a.input) {
            Ok(i) => i,
            Err(e) => return err(e),
        };
        match svc
            .plan(
                DEFAULT_WORKSPACE,
                &a.worker,
                &input,
                Duration::from_secs(a.ttl.clamp(1, 7 * 86_400)),
            )
            .await
        {
            Ok((token, plan)) => {
                println!("{}", serde_json::json!({"token": token, "plan": plan}));
                ExitCode::SUCCESS
            }
            Err(e) => err(format!("{}: {e}", e.code())),
        }
    })
}

// ---------------------------------------------------------------- remote

/// Runs a remote command on a fresh runtime; its error becomes exit 125.
fn remote(f: impl AsyncFnOnce() -> Result<ExitCode, String>) -> ExitCode {
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    rt.block_on(f()).unwrap_or_else(err)
}

/// `airlock --remote run`: create over HTTP, then follow until it ends.
async fn remote_run(a: &RunArgs) -> Result<ExitCode, String> {
    use crate::iam_cmd::{authed, credentials};
    let c = credentials()?;
    let created = match (&a.plan, &a.worker) {
        (Some(token), _) => {
            authed(
                &c,
                "POST",
                "/v1/plans/run",
                &[],
                Some(&serde_json::json!({"token": token})),
            )
            .await?
        }
        (None, Some(worker)) => {
            let input = parse_input(&a.input)?;
            let key = a.idempotency_key.clone().unwrap_or_default();
            let headers: Vec<(&str, &str)> = if key.is_empty() {
                Vec::new()
            } else {
                vec![("idempotency-key", key.as_str())]
            };
            authed(
                &c,
                "POST",
                &format!("/v1/workers/{worker}/runs"),
                &headers,
                Some(&serde_json::json!({"input": input})),
            )
            .await?
        }
        (None, None) => return Err("give a worker id or --plan".into()),
    };
    let id = created["run"]["id"].as_str().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
        return Err("the server returned no run id".into());
    }
    loop {
        let v = authed(&c, "GET", &format!("/v1/runs/{id}"), &[], None).await?;
        let state = v["run"]["state"].as_str().unwrap_or("");
        if RunState::parse(state).is_some_and(RunState::is_terminal) {
            if a.json {
                println!("{v}");
            } else {
                println!("{id} {state}");
                if let Some(o) = v["run"].get("outputs").filter(|o| !o.is_null()) {
                    println!("{o}");
                }
            }
            return Ok(if state == "succeeded" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn remote_runs(cmd: &RunsCommand) -> Result<ExitCode, String> {
    use crate::iam_cmd::{authed, credentials};
    let c = credentials()?;
    let safe = |id: &str| -> Result<(), String> {
        if id.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
            Ok(())
        } else {
            Err("not a run id".into())
        }
    };
    match cmd {
        RunsCommand::List { state, limit, json } => {
            let mut path = format!("/v1/runs?limit={}", (*limit).clamp(1, 500));
            if let Some(st) = state {
                let st = RunState::parse(st).ok_or("unknown --state")?;
                path.push_str(&format!("&state={}", st.as_str()));
            }
            let v = authed(&c, "GET", &path, &[], None).await?;
            if *json {
                println!("{v}");
            } else {
                for r in v["runs"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<12} {:<10} {}",
                        r["id"].as_str().unwrap_or(""),
                        r["worker_id"].as_str().unwrap_or(""),
                        r["state"].as_str().unwrap_or(""),
                        r["error_code"].as_str().unwrap_or("")
                    );
                }
            }
        }
        RunsCommand::Get { id, .. } => {
            safe(id)?;
            println!(
                "{}",
                authed(&c, "GET", &format!("/v1/runs/{id}"), &[], None).await?
            );
        }
        RunsCommand::Cancel { id } => {
            safe(id)?;
            let v = authed(&c, "POST", &format!("/v1/runs/{id}/cancel"), &[], None).await?;
            println!("{id} {}", v["state"].as_str().unwrap_or(""));
        }
        RunsCommand::Logs { id, follow } => {
            safe(id)?;
            if *follow {
                return Err(
                    "--follow is local only; remotely, follow GET /v1/runs/{id}/events".into(),
                );
            }
            let text = crate::iam_cmd::authed_text(&c, &format!("/v1/runs/{id}/logs")).await?;
            print!("{text}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- runs …

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Newest first.
    List {
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    Get {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's log (and, with --follow, wait for more).
    Logs {
        id: String,
        #[arg(long)]
        follow: bool,
    },
    /// Cancel (idempotent): queued never starts, running is killed.
    Cancel { id: String },
}

pub fn runs(paths: &Paths, cmd: &RunsCommand) -> ExitCode {
    if paths.remote {
        return remote(async || remote_runs(cmd).await);
    }
    with_service(paths, async |svc| match cmd {
        RunsCommand::List { state, limit, json } => {
            let st = match state.as_deref().map(RunState::parse) {
                Some(None) => return err("unknown --state"),
                Some(s) => s,
                None => None,
            };
            let runs = match svc
                .store()
                .list_runs(DEFAULT_WORKSPACE, st, (*limit).clamp(1, 500), None)
                .await
            {
                Ok(r) => r,
                Err(e) => return err(e),
            };
            if *json {
                println!("{}", serde_json::json!({"runs": runs}));
            } else {
                for r in runs {
                    println!(
                        "{}  {:<12} {:<10} {}",
                        r.id,
                        r.worker_id,
                        r.state.as_str(),
                        r.error_code.unwrap_or_default()
                    );
                }
            }
            ExitCode::SUCCESS
        }
        RunsCommand::Get { id, json } => match svc.get(DEFAULT_WORKSPACE, id).await {
            Ok(r) => {
                print_run(&svc, &r, *json).await;
                ExitCode::SUCCESS
            }
            Err(e) => err(e),
        },
        RunsCommand::Logs { id, follow: f } => {
            if svc.get(DEFAULT_WORKSPACE, id).await.is_err() {
                return err("not found");
            }
            if *f {
                follow(svc.clone(), id.clone()).await;
            } else {
                let events = svc
                    .store()
                    .events(DEFAULT_WORKSPACE, id, 0, 10_000)
                    .await
                    .unwrap_or_default();
                for e in events.iter().filter(|e| e.kind == "log") {
                    print!("{}", e.data["text"].as_str().unwrap_or(""));
                }
            }
            ExitCode::SUCCESS
        }
        RunsCommand::Cancel { id } => match svc.cancel(DEFAULT_WORKSPACE, id, "cli").await {
            Ok(state) => {
                println!("{id} {}", state.as_str());
                ExitCode::SUCCESS
            }
            Err(e) => err(e),
        },
    })
}

// ---------------------------------------------------------------- worker validate

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Lint a bundle offline (RUN-2): exit 0 and a summary, or exit 1 and one line per problem.
    Validate { dir: PathBuf },
}

pub fn worker(cmd: &WorkerCommand) -> ExitCode {
    match cmd {
        WorkerCommand::Validate { dir } => match airlock_worker::load_bundle(dir) {
            Ok(b) => {
                let m = &b.manifest;
                println!(
                    "ok {} ({} inputs, {} outputs, timeout {} s, memory {} MiB)",
                    b.id.as_str(),
                    m.inputs.len(),
                    m.outputs.len(),
                    m.limits.timeout_s,
                    m.limits.memory_mb
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                for p in e.problems() {
                    println!("{p}");
                }
                ExitCode::from(1)
            }
        },
    }
}

// ---------------------------------------------------------------- audit verify

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify every workspace's hash chain; names the first bad sequence number.
    Verify,
    /// Write a workspace's events as JSON Lines, verifiable with the
    /// published algorithm (`crates/airlock-audit/verify_export.py`).
    Export {
        #[arg(long, default_value = DEFAULT_WORKSPACE)]
        workspace: String,
    },
}

pub fn audit(paths: &Paths, cmd: &AuditCommand) -> ExitCode {
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    rt.block_on(async move {
        let store = match Store::open(&paths.url()).await {
            Ok(s) => s,
            Err(e) => return err(format!("cannot open the database: {e}")),
        };
        if let AuditCommand::Export { workspace } = cmd {
            let lines = match store.audit_lines(workspace).await {
                Ok(l) => l,
                Err(e) => return err(e),
            };
            let mut out = std::io::stdout().lock();
            for l in lines {
                if writeln!(out, "{l}").is_err() {
                    return err("cannot write the export");
                }
            }
            return ExitCode::SUCCESS;
        }
        let workspaces = match store.audit_workspaces().await {
            Ok(w) => w,
            Err(e) => return err(e),
        };
        let mut bad = false;
        for ws in workspaces {
            let lines = match store.audit_lines(&ws).await {
                Ok(l) => l,
                Err(e) => return err(e),
            };
            let mut events = Vec::new();
            for (i, l) in lines.iter().enumerate() {
                match airlock_audit::from_json_line(l) {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        println!("{ws}: bad seq {}: unreadable event: {e}", i + 1);
                        bad = true;
                    }
                }
            }
            match airlock_audit::chain::verify(events.iter()) {
                Ok(s) => println!(
                    "{ws}: ok {} events head={}",
                    s.count,
                    airlock_audit::hex::encode(&s.head)
                ),
                Err(e) => {
                    println!("{ws}: bad seq {}: {e}", e.first_bad_seq());
                    bad = true;
                }
            }
        }
        if bad {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    })
}

// ---------------------------------------------------------------- secrets / keys

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Store a new version of a secret; the value is read from stdin, never argv.
    Set { name: String },
    /// Metadata only: name, version, updated, used by, last used.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a secret.
    Rm { name: String },
}

pub fn secrets(paths: &Paths, cmd: &SecretsCommand) -> ExitCode {
    with_service(paths, async |svc| match cmd {
        SecretsCommand::Set { name } => {
            let mut value = Vec::new();
            if let Err(e) =
                std::io::Read::read_to_end(&mut std::io::stdin().take(33 * 1024), &mut value)
            {
                return err(format!("cannot read the value from stdin: {e}"));
            }
            if value.last() == Some(&b'\n') {
                value.pop();
            }
            match svc
                .secrets()
                .set(DEFAULT_WORKSPACE, name, value, "cli")
                .await
            {
                Ok(v) => {
                    println!("{name} version {v}");
                    ExitCode::SUCCESS
                }
                Err(e) => err(format!("{}: {e}", e.code())),
            }
        }
        SecretsCommand::List { json } => match svc
            .secrets()
            .list(DEFAULT_WORKSPACE, &svc.declared_secrets())
            .await
        {
            Ok(list) => {
                if *json {
                    println!("{}", serde_json::json!({"secrets": list}));
                } else {
                    for s in list {
                        println!(
                            "{:<32} v{:<4} used by: {}",
                            s.name,
                            s.version,
                            s.used_by.join(", ")
                        );
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => err(format!("{}: {e}", e.code())),
        },
        SecretsCommand::Rm { name } => {
            match svc.secrets().remove(DEFAULT_WORKSPACE, name, "cli").await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => err(format!("no secret named {name}")),
                Err(e) => err(format!("{}: {e}", e.code())),
            }
        }
    })
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Install a new KEK version (old versions still decrypt).
    Rotate,
    /// Move every data key to the newest KEK version (resumable).
    Rewrap,
    /// Retire a KEK version (rewrap first; data still under it then fails).
    Retire {
        #[arg(value_name = "VERSION")]
        kek_version: u32,
    },
    /// Accept a legitimately restored backup: reset the high-water marks to
    /// the database's versions (audited).
    AcceptRestore,
}

pub fn keys(paths: &Paths, cmd: &KeysCommand) -> ExitCode {
    with_service(paths, async |svc| match cmd {
        KeysCommand::Rotate => match svc.secrets().rotate() {
            Ok(v) => {
                println!("kek version {v} is current");
                ExitCode::SUCCESS
            }
            Err(e) => err(e),
        },
        KeysCommand::Rewrap => {
            let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
            match svc
                .secrets()
                .rewrap_all(|done, total| {
                    if tty {
                        eprint!("\rrewrapped {done}/{total}");
                    }
                })
                .await
            {
                Ok((done, _)) => {
                    if tty {
                        eprintln!();
                    }
                    println!(
                        "rewrapped {done} data key(s) to kek version {}",
                        svc.secrets().current_kek_version().unwrap_or(0)
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => err(format!("{}: {e}", e.code())),
            }
        }
        KeysCommand::Retire { kek_version } => match svc.secrets().retire(*kek_version) {
            Ok(()) => {
                println!("kek version {kek_version} retired");
                ExitCode::SUCCESS
            }
            Err(e) => err(format!("{}: {e}", e.code())),
        },
        KeysCommand::AcceptRestore => match svc.secrets().accept_restore().await {
            Ok(n) => {
                println!("high-water marks reset ({n} change(s)); audited");
                ExitCode::SUCCESS
            }
            Err(e) => err(format!("{}: {e}", e.code())),
        },
    })
}
