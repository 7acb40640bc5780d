//! `airlock up`: the server on its embedded defaults — the HTTP API, the
//! queue, executor, reaper and scheduler in one process — and `airlock
//! serve --role web|worker|all` (CLI-1, OPS-2), the same server split in
//! its two halves: `web` answers HTTP (API, UI, MCP, metrics) and runs
//! nothing; `worker` claims and executes runs, reaps leases, ticks the
//! scheduler (while it holds the scheduler lock), signs checkpoints and
//! applies retention, and has no public listener. `up` is `serve --role
//! all`.

use std::process::ExitCode;
use std::time::Duration;

use airlock_api::limits::{Bucket, LimitConfig};
use clap::Args;

use crate::common::{Paths, err};

/// What one `airlock serve` process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// HTTP API, web interface, MCP and metrics; executes nothing.
    Web,
    /// Executor, reaper, scheduler, checkpointer, retention and drain; no
    /// public listener (only `--metrics-listen`, if given).
    Worker,
    /// Both: what `airlock up` does.
    All,
}

impl Role {
    fn serves_http(self) -> bool {
        matches!(self, Self::Web | Self::All)
    }
    fn runs_work(self) -> bool {
        matches!(self, Self::Worker | Self::All)
    }
    fn name(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::Worker => "worker",
            Self::All => "all",
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// `web`, `worker` or `all` (= `airlock up`). On PostgreSQL any number
    /// of each share one database; on SQLite one process runs work per
    /// data directory (a second `worker`/`all` is refused).
    #[arg(long, env = "AIRLOCK_ROLE", value_enum)]
    role: Role,
    #[command(flatten)]
    up: UpArgs,
}

pub fn serve_role(paths: &Paths, a: &ServeArgs) -> ExitCode {
    start(paths, &a.up, a.role)
}

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
    /// Pre-built sandboxes kept ready for each kind of launch made lately
    /// (at most 4 kinds; 0 turns the pool off). Each is two idle processes
    /// and an empty cgroup; a launch that finds none starts cold.
    #[arg(long, env = "AIRLOCK_SANDBOX_POOL", default_value_t = 2)]
    sandbox_pool: usize,
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
    /// SIGTERM/Ctrl-C drain (DUR-2): how long running runs may go on
    /// finishing after the server stops claiming (`30s`, `2m`, `500ms`, or
    /// seconds). Claimed runs that have not started are handed back at
    /// once; when the grace ends, running sandboxes are stopped and their
    /// runs settled: requeued (not started, or an idempotent worker's first
    /// attempt), else `unknown`; an agent's action in flight becomes
    /// `outcome_unknown`.
    #[arg(long, env = "AIRLOCK_DRAIN_GRACE", default_value = "30s", value_parser = parse_grace)]
    drain_grace: Duration,
    /// Do not serve MCP at `/mcp`.
    #[arg(long, env = "AIRLOCK_NO_MCP")]
    no_mcp: bool,
    /// Do not serve the web interface at `/` (the API and MCP stay).
    #[arg(long, env = "AIRLOCK_NO_UI")]
    no_ui: bool,
    /// Comma-separated `Host` values `/mcp` answers (`name` or
    /// `name:port`), against DNS rebinding. Default: localhost, 127.0.0.1,
    /// ::1 and the listen address.
    #[arg(long, env = "AIRLOCK_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    mcp_allowed_hosts: Vec<String>,
    /// Comma-separated browser origins (`https://host:port`) `/mcp`
    /// answers. Default: none (a request carrying any `Origin` gets 403;
    /// MCP hosts send none).
    #[arg(long, env = "AIRLOCK_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    mcp_allowed_origins: Vec<String>,
}

pub fn up(paths: &Paths, a: &UpArgs) -> ExitCode {
    start(paths, a, Role::All)
}

fn start(paths: &Paths, a: &UpArgs, role: Role) -> ExitCode {
    let addr: std::net::SocketAddr = match a.listen.parse() {
        Ok(x) => x,
        Err(_) => return err(format!("--listen {:?} is not an address", a.listen)),
    };
    if role.serves_http() && !addr.ip().is_loopback() && !a.tls_proxy {
        eprintln!(
            "airlock: warning: listening on {addr} without --tls-proxy: passwords and session cookies cross the network in clear text"
        );
    }
    let absolute = Duration::from_secs(a.session_max_hours.clamp(1, 8_760) * 3600);
    let mut paths = paths.clone();
    paths.remote = false;
    // OPS-1: JSON lines on stderr from here on; the guard writes what is
    // queued when `up` returns.
    let _log = crate::logging::init();
    let mut cfg = paths.config();
    cfg.egress_log = crate::logging::egress_sink();
    cfg.sandbox_pool = a.sandbox_pool.min(16);
    cfg.identity.idle_timeout = Duration::from_secs(a.session_idle_minutes.clamp(1, 525_600) * 60);
    cfg.identity.absolute_timeout = absolute;
    cfg.drain_grace = a.drain_grace;
    cfg.quotas.runs_per_user_per_day = a.quota_runs_per_user_day;
    cfg.quotas.runs_per_workspace_per_day = a.quota_runs_per_workspace_day;
    let http = airlock_api::auth::HttpConfig {
        secure_cookies: a.tls_proxy,
        trusted_proxies: a.trusted_proxies.clone(),
        cookie_max_age: absolute,
    };
    let limits = LimitConfig {
        streams_per_user: a.streams_per_user,
        auth_failures_per_client: Some(Bucket {
            burst: a.auth_failure_burst.max(1),
            per_second: 1,
        }),
        per_client: Some(Bucket {
            burst: a.rate_per_client_per_s.saturating_mul(3).max(1),
            per_second: a.rate_per_client_per_s.max(1),
        }),
        reads_per_identity: Some(Bucket {
            burst: a.rate_reads_per_s.saturating_mul(3).max(1),
            per_second: a.rate_reads_per_s.max(1),
        }),
        writes_per_identity: Some(Bucket {
            burst: a.rate_writes_per_s.saturating_mul(4).max(1),
            per_second: a.rate_writes_per_s.max(1),
        }),
    };
    crate::common::block_on(async move || {
        let svc = match crate::common::open_with(&paths, cfg).await {
            Ok(s) => s,
            Err(e) => return err(e),
        };
        let mcp = (!a.no_mcp).then(|| {
            let mut hosts = a.mcp_allowed_hosts.clone();
            if hosts.is_empty() {
                hosts = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
                if !addr.ip().is_unspecified() {
                    hosts.push(addr.ip().to_string());
                }
            }
            airlock_mcp::HttpOptions {
                allowed_hosts: hosts,
                allowed_origins: a.mcp_allowed_origins.clone(),
                shutdown: airlock_mcp::CancellationToken::new(),
            }
        });
        // SQLite: one process runs work per database file (its executor
        // claims are not safe across processes), checked with a lock file
        // held until exit.
        let _work_lock = if role.runs_work() && svc.database_backend() == "sqlite" {
            match work_lock(&paths) {
                Ok(f) => Some(f),
                Err(e) => return err(e),
            }
        } else {
            None
        };
        serve(
            svc,
            role,
            addr,
            a.metrics_listen,
            http,
            limits,
            mcp,
            !a.no_ui,
        )
        .await
    })
}

/// The exclusive lock on `DATA/work.lock` of the one process that runs
/// work on a SQLite database.
fn work_lock(paths: &Paths) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    let p = paths.data_dir.join("work.lock");
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&p)
        .map_err(|e| format!("cannot open {}: {e}", p.display()))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        format!(
            "another airlock process already runs work on this SQLite database ({} is locked): on SQLite run one `up` or `serve --role worker|all` per data directory; several workers need PostgreSQL (--database-url postgres://…)",
            p.display()
        )
    })
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    svc: std::sync::Arc<airlock_service::Service>,
    role: Role,
    addr: std::net::SocketAddr,
    metrics_listen: Option<std::net::SocketAddr>,
    http: airlock_api::auth::HttpConfig,
    limits: LimitConfig,
    mcp: Option<airlock_mcp::HttpOptions>,
    ui: bool,
) -> ExitCode {
    for (path, e) in svc.worker_errors() {
        eprintln!("airlock: skipped worker {}: {e}", path.display());
    }
    // KEY-3: a database restored from an older backup is refused.
    if let Err(e) = svc.startup_check().await {
        return err(format!(
            "{}: {} (after restoring a backup on purpose, run `airlock keys accept-restore`)",
            e.code, e.message
        ));
    }
    if role.runs_work() {
        match svc.recover_startup().await {
            Ok(r) if !r.is_empty() => eprintln!(
                "airlock: recovered {} run(s) from a previous start",
                r.len()
            ),
            Ok(_) => {}
            Err(e) => return err(format!("startup recovery failed: {e}")),
        }
    }
    let listener = if role.serves_http() {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => return err(format!("cannot listen on {addr}: {e}")),
        }
    } else {
        None
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut background = Vec::new();
    let executor = role.runs_work().then(|| {
        let executor = tokio::spawn(svc.clone().run_executor(stop_rx.clone()));
        background.push(tokio::spawn(svc.clone().run_reaper(stop_rx.clone())));
        // RUN-6: cron triggers; each fire is claimed in the database, and
        // on PostgreSQL only the holder of the scheduler lock ticks (OPS-2).
        background.push(tokio::spawn(
            svc.clone()
                .run_scheduler(svc.config().clock.clone(), stop_rx.clone()),
        ));
        // AUD-4: signed checkpoints of the audit chains, periodically.
        background.push(tokio::spawn(svc.clone().run_checkpointer(stop_rx.clone(), |r| {
            if let Err(e) = r {
                tracing::error!(target: "airlock::audit", event = "checkpoint_failed", error = %e.message);
            }
        })));
        // DUR-7: retention passes over workspaces that set it (hourly).
        background.push(tokio::spawn(svc.clone().run_retention(stop_rx.clone(), |ws, r| match r {
            Ok(a) if a.removed.runs + a.removed.log_events + a.removed.artifacts + a.removed.uploads + a.removed.fires > 0 => {
                tracing::info!(target: "airlock::retention", event = "retention_applied", workspace = ws, runs = a.removed.runs, log_events = a.removed.log_events, artifacts = a.removed.artifacts, uploads = a.removed.uploads, fires = a.removed.fires);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(target: "airlock::retention", event = "retention_failed", workspace = ws, error = %e.message);
            }
        })));
        executor
    });
    let workers = svc.loaded_workers();
    if role.serves_http() {
        println!(
            "{}",
            serde_json::json!({"event": "listening", "address": addr.to_string(), "workers": workers, "database": svc.database_backend(), "blob_store": svc.blob_store(), "role": role.name()})
        );
        if ui {
            eprintln!("airlock: web interface at http://{addr}/");
        }
        eprintln!(
            "airlock: serving {workers} worker(s) on http://{addr}{}",
            if mcp.is_some() {
                format!(" (MCP at http://{addr}/mcp)")
            } else {
                String::new()
            }
        );
        match svc.prepare_bootstrap().await {
            Ok(Some(p)) => eprintln!(
                "airlock: no owner yet: a one-time bootstrap capability is in {} (paste it at http://{addr}/bootstrap, or POST it to /v1/bootstrap with a username and password)",
                p.display()
            ),
            Ok(None) => {}
            Err(e) => return err(format!("bootstrap: {}", e.message)),
        }
    } else {
        println!(
            "{}",
            serde_json::json!({"event": "ready", "role": role.name(), "workers": workers, "database": svc.database_backend(), "pid": std::process::id()})
        );
        eprintln!("airlock: worker node executing {workers} worker(s); no HTTP listener");
    }
    let state = airlock_api::AppState::with_limits(svc.clone(), http, limits);
    if let Some(maddr) = metrics_listen {
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
                        match airlock_api::metrics::unauthenticated_text(&st).await {
                            Ok(t) => (axum::http::StatusCode::OK, t),
                            Err(_) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new()),
                        }
                    }
                }),
            );
            if let Err(e) = axum::serve(ml, router).await {
                eprintln!("airlock: the metrics listener stopped: {e}");
            }
        });
    }
    let mcp_stop = mcp.as_ref().map(|m| m.shutdown.clone());
    let stop_tx = std::sync::Arc::new(stop_tx);
    let stop_on_signal = stop_tx.clone();
    let shutdown = async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        if let Some(t) = mcp_stop {
            t.cancel();
        }
        // SIGTERM drain (DUR-2): stop claiming at once, while the HTTP
        // side finishes its open requests; the executor hands back what
        // has not started and gives running work its grace period.
        eprintln!("airlock: draining: no new runs are claimed");
        let _ = stop_on_signal.send(true);
    };
    let served = match listener {
        Some(listener) => {
            // One access-log line per request on stderr, with its request
            // id. MCP (MCP-1): open streams (a get_run waiting) end when
            // the server stops, so a graceful shutdown does not wait.
            let mcp_router = mcp.map(|m| {
                axum::Router::new().fallback_service(airlock_mcp::http_service(svc.clone(), m))
            });
            let fronts = airlock_api::Fronts {
                mcp: mcp_router,
                ui: ui.then(airlock_ui::router),
            };
            let app = airlock_api::app_with_fronts(state, fronts)
                .layer(axum::middleware::from_fn(access_log))
                .into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            shutdown.await;
            Ok(())
        }
    };
    // Also when the listener failed without a signal.
    let _ = stop_tx.send(true);
    if let Some(executor) = executor {
        let _ = executor.await;
        eprintln!("airlock: drained");
    }
    // Stopping the scheduler drops its lock connection: the lock passes
    // to another worker at its next try.
    for task in background {
        task.abort();
    }
    // A last checkpoint once the work has stopped (a clean shutdown), by
    // the processes that sign them.
    if role.runs_work() {
        match svc.checkpoint_audit(false).await {
            Ok(made) => {
                let signed = made.iter().filter(|m| m.written).count();
                println!(
                    "{}",
                    serde_json::json!({"event": "checkpoint", "signed": signed})
                );
            }
            Err(e) => eprintln!(
                "airlock: audit checkpoint at shutdown failed: {}",
                e.message
            ),
        }
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => err(e),
    }
}

/// A duration: `30s`, `2m`, `500ms`, or a number of seconds.
fn parse_grace(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 2m, 500ms)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("{s:?} is not a duration (e.g. 30s, 2m, 500ms)")),
    };
    if d > Duration::from_secs(24 * 3600) {
        return Err("the drain grace is at most 24h".into());
    }
    Ok(d)
}

/// `{"event":"request", request_id, method, path, status, ms}` on the
/// structured log.
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
    tracing::info!(
        target: "airlock::http",
        event = "request",
        request_id = rid,
        method = %method,
        path = %path,
        status = r.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
    );
    r
}
