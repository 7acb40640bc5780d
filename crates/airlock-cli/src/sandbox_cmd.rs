//! `airlock sandbox exec` (SBX-7).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use airlock_launch::{Controls, EgressPlan, Launch, LaunchFailure, SandboxLauncher};
use airlock_sandbox::{
    Broker, DriverChoice, EXIT_SANDBOX_FAILED, LaunchError, Limits, SandboxRequest, SubidChoice,
};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run one command in a fresh sandbox and report what happened.
    ///
    /// Exit status: the command's own, 128+N when killed by signal N, or 125
    /// when the sandbox itself could not start (with a one-line reason on
    /// stderr).
    Exec(ExecArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DriverArg {
    Auto,
    Namespaces,
    Landlock,
    Uncontained,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Allow egress to HOST[:PORT] through the sandbox's proxy (repeatable).
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    allow: Vec<String>,
    /// Give the sandbox a credential channel (repeatable).
    #[arg(long = "channel", value_name = "NAME")]
    channel: Vec<String>,
    /// Wall-clock limit in seconds, start-up included.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    timeout: f64,
    /// Seconds between SIGTERM and SIGKILL after the timeout.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    grace: f64,
    /// Memory limit in MiB.
    #[arg(long, value_name = "MIB")]
    memory: Option<u64>,
    /// Limit on processes and threads.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// CPU bandwidth in cores (e.g. 0.5).
    #[arg(long, value_name = "CORES")]
    cpus: Option<f64>,
    /// Budget of new and changed data per writable root, in MiB (and one
    /// inode per 4 KiB). Writes land in a private overlay on a capped
    /// tmpfs (counted as memory) and reach the root when the command ends.
    #[arg(long, value_name = "MIB")]
    disk: Option<u64>,
    /// Directory the command may write (repeatable); bound at the same path.
    #[arg(long = "writable", value_name = "DIR")]
    writable: Vec<PathBuf>,
    /// Directory the command may read (repeatable); bound read-only.
    #[arg(long = "readonly", value_name = "DIR")]
    readonly: Vec<PathBuf>,
    /// Show a host file or directory at a path under /airlock inside
    /// (repeatable): HOST:/airlock/NAME, read-only unless suffixed :rw.
    #[arg(long = "mount", value_name = "HOST:TARGET[:rw]")]
    mount: Vec<String>,
    /// Working directory (inside a writable or read-only root).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Set an environment variable inside (repeatable; loader and
    /// interpreter variables are refused).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Bytes of stdout and of stderr to keep (the rest is counted).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    output_budget: usize,
    /// Refuse to run (exit 125, containment_unavailable) unless full
    /// containment and every requested limit are in force.
    #[arg(long)]
    require_containment: bool,
    /// Sandbox driver.
    #[arg(long, value_enum, default_value = "auto")]
    driver: DriverArg,
    /// Egress policy file (TOML: allow rules, hosts map, channels, limits);
    /// `--allow` rules are added to it. Also `AIRLOCK_EGRESS_POLICY`.
    #[arg(long, value_name = "FILE", env = "AIRLOCK_EGRESS_POLICY")]
    egress_policy: Option<PathBuf>,
    /// Write one JSON line per egress decision and closed connection here.
    #[arg(long, value_name = "FILE")]
    egress_log: Option<PathBuf>,
    /// When airlock runs as root: the host ids its workloads run as, as
    /// FIRST:COUNT or the name of a user whose /etc/subuid and /etc/subgid
    /// entries to use. The workload is the first uid and gid of the range,
    /// never 0. Default: the entries of user `airlock`, else
    /// 2000000000:65536. A range overlapping an account or another user's
    /// range is refused.
    #[arg(long, value_name = "FIRST:COUNT|USER", env = "AIRLOCK_SUBID_RANGE")]
    subid_range: Option<String>,
    /// Include set-up stage timings (milliseconds since launch) in --json.
    #[arg(long)]
    timings: bool,
    /// Print exactly one JSON object on stdout instead of passing output through.
    #[arg(long)]
    json: bool,
    /// Launch the command N times from this one process (as `airlock up`
    /// and agents do) and print one JSON summary: per-launch wall times,
    /// median, p95, launches per second, and the last launch's result.
    /// For measuring; the command's output is not passed through.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// With --repeat: launches in flight at once.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "repeat")]
    concurrency: usize,
    /// With --repeat: pre-built sandboxes kept ready (see `airlock up
    /// --sandbox-pool`); 0 launches every sandbox cold.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "repeat")]
    pool: usize,
    /// With --repeat: milliseconds each launcher waits after a launch (an
    /// agent's think time, during which the pool refills).
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "repeat")]
    pause_ms: u64,
    /// With --repeat and --pool: stock the pool for this launch before the
    /// first one (as `airlock up` does for its runs' default limits), then
    /// launch in waves of --concurrency, and before each wave wait (up to
    /// 30 s) until the pool has a sandbox ready for every launch of the
    /// wave (at most --pool), so that every launch measures a pooled
    /// start: a burst arriving at a server whose pool was refilled while it
    /// was idle. The summary then has each wave's wall time.
    #[arg(long, requires = "pool")]
    pool_wait: bool,
    /// Pass the command's output through byte for byte even to a terminal. By default,
    /// control characters (escape sequences, lone carriage returns, bidi overrides) are shown
    /// as escapes when stdout or stderr is a terminal, so the command cannot act on it.
    #[arg(long)]
    raw: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(cmd: SandboxCommand) -> ExitCode {
    match cmd {
        SandboxCommand::Exec(args) => exec(args),
    }
}

fn fail(json_mode: bool, code: &str, message: &str) -> ExitCode {
    eprintln!("airlock: {code}: {message}");
    if json_mode {
        let obj = json!({"error": {"code": code, "message": message}, "exit_code": null});
        println!("{obj}");
    }
    ExitCode::from(EXIT_SANDBOX_FAILED as u8)
}

fn secs(v: f64, what: &str) -> Result<Duration, String> {
    if !v.is_finite() || v <= 0.0 || v > 7.0 * 24.0 * 3600.0 {
        return Err(format!(
            "{what} must be a positive number of seconds up to 7 days"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

fn exec(a: ExecArgs) -> ExitCode {
    let timeout = match secs(a.timeout, "--timeout") {
        Ok(t) => t,
        Err(e) => return fail(a.json, "invalid_argument", &e),
    };
    let grace = match secs(a.grace, "--grace") {
        Ok(t) => t,
        Err(e) => return fail(a.json, "invalid_argument", &e),
    };
    let mut env = Vec::new();
    for kv in &a.env {
        match kv.split_once('=') {
            Some((k, v)) => env.push((k.to_string(), v.to_string())),
            None => {
                return fail(
                    a.json,
                    "invalid_argument",
                    &format!("--env {kv:?} must be NAME=VALUE"),
                );
            }
        }
    }
    let cpu_millicores = match a.cpus {
        None => None,
        Some(c) if c.is_finite() && c > 0.0 && c <= 1024.0 => Some((c * 1000.0).round() as u64),
        Some(_) => {
            return fail(
                a.json,
                "invalid_argument",
                "--cpus must be between 0 and 1024",
            );
        }
    };
    let memory_bytes = match a.memory {
        None => None,
        Some(m) if m > 0 && m <= 1 << 30 => Some(m << 20),
        Some(_) => {
            return fail(
                a.json,
                "invalid_argument",
                "--memory must be between 1 and 2^30 MiB",
            );
        }
    };
    let disk_bytes = match a.disk {
        None => None,
        Some(m) if m > 0 && m <= 1 << 30 => Some(m << 20),
        Some(_) => {
            return fail(
                a.json,
                "invalid_argument",
                "--disk must be between 1 and 2^30 MiB",
            );
        }
    };
    let mut mounts = Vec::new();
    for m in &a.mount {
        let (spec_part, writable) = match m.strip_suffix(":rw") {
            Some(rest) => (rest, true),
            None => (m.as_str(), false),
        };
        let Some((src, dst)) = spec_part.split_once(':') else {
            return fail(
                a.json,
                "invalid_argument",
                &format!("--mount {m:?} must be HOST:/airlock/NAME[:rw]"),
            );
        };
        mounts.push(airlock_sandbox::Mount {
            source: PathBuf::from(src),
            target: PathBuf::from(dst),
            writable,
        });
    }
    let req = SandboxRequest {
        argv: a.command.clone(),
        mounts,
        secret_files: Vec::new(),
        cwd: a.cwd.clone(),
        writable: a.writable.clone(),
        readonly: a.readonly.clone(),
        env,
        timeout: Some(timeout),
        grace: Some(grace),
        limits: Limits {
            memory_bytes,
            pids: a.pids,
            cpu_millicores,
            disk_bytes,
            ..Limits::default()
        },
        output_budget: Some(a.output_budget),
        driver: match a.driver {
            DriverArg::Auto => DriverChoice::Auto,
            DriverArg::Namespaces => DriverChoice::Namespaces,
            DriverArg::Landlock => DriverChoice::Landlock,
            DriverArg::Uncontained => DriverChoice::Uncontained,
        },
        require_containment: a.require_containment,
        // Set by the launcher from the egress plan.
        egress: false,
        timings: a.timings,
    };
    let subids = match a.subid_range.as_deref().map(str::parse::<SubidChoice>) {
        None => SubidChoice::Default,
        Some(Ok(c)) => c,
        Some(Err(e)) => return fail(a.json, "invalid_argument", &e.to_string()),
    };
    let egress = match egress_plan(&a) {
        Ok(e) => e,
        Err(msg) => return fail(a.json, "invalid_argument", &msg),
    };
    if a.repeat > 1 {
        return repeat(&a, req, subids);
    }
    let launch = Launch {
        sandbox: req,
        platform_env: Vec::new(),
        egress,
        label: format!("sbx-{}", std::process::id()),
        run: None,
    };
    // The request is parsed (roots opened and pinned) before the egress
    // log is opened, so that bad input is reported first and a root swapped
    // from here on is refused when the sandbox binds it. A refused request
    // prints its error only, not the driver warning.
    let prepared = match launch.prepare() {
        Ok(p) => p,
        Err(e) => return fail(a.json, "invalid_argument", &e.to_string()),
    };
    let prepared = match egress_log(&a) {
        Ok(Some(log)) => prepared.with_egress_log(log),
        Ok(None) => prepared,
        Err(msg) => return fail(a.json, "invalid_argument", &msg),
    };
    if matches!(a.driver, DriverArg::Uncontained) {
        eprintln!(
            "airlock: warning: driver 'uncontained' runs the command WITHOUT any sandbox (development only)"
        );
    }
    let launcher = SandboxLauncher::with_broker(Broker::new().with_subids(subids));
    let outcome = launcher.launch_prepared(prepared, Controls::default());
    let launched = match outcome {
        Ok(l) => l,
        Err(LaunchFailure::Sandbox(e)) => {
            if a.json
                && let LaunchError::ContainmentUnavailable { missing, report } = &e
            {
                eprintln!("airlock: containment_unavailable: {}", missing.join(", "));
                let obj = json!({
                    "error": {"code": "containment_unavailable", "message": e.to_string(), "missing": missing},
                    "exit_code": null,
                    "containment": report,
                });
                println!("{obj}");
                return ExitCode::from(EXIT_SANDBOX_FAILED as u8);
            }
            return fail(a.json, e.reason(), &e.to_string());
        }
        Err(e @ (LaunchFailure::Request(_) | LaunchFailure::ChannelNotConfigured(_))) => {
            return fail(a.json, "invalid_argument", &e.to_string());
        }
        Err(e @ LaunchFailure::EgressUnavailable(_)) => {
            return fail(a.json, e.code(), &e.to_string());
        }
    };
    for n in &launched.notices {
        eprintln!("airlock: warning: {}: {n}", n.code());
    }
    let egress_summary = launched.egress.unwrap_or_default();
    let result = launched.result;
    let code = result.status_code();
    if a.json {
        let obj = json!({
            "exit_code": result.exit_code,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "duration_ms": result.duration_ms,
            "stdout": result.stdout.text(),
            "stderr": result.stderr.text(),
            "stdout_bytes": result.stdout.total_bytes,
            "stdout_dropped": result.stdout.dropped_bytes,
            "stderr_bytes": result.stderr.total_bytes,
            "stderr_dropped": result.stderr.dropped_bytes,
            "limit_hits": result.limit_hits,
            "commit_errors": result.commit_errors,
            "containment": result.containment,
            "executable": result.executable,
            "egress": egress_summary,
            "timings": result.timings,
        });
        println!("{obj}");
    } else {
        // The workload's bytes are untrusted: on a terminal they are shown, not obeyed.
        let shown = |bytes: &[u8], tty: bool| -> Vec<u8> {
            if tty && !a.raw {
                crate::term::for_terminal(bytes)
            } else {
                bytes.to_vec()
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&shown(&result.stdout.bytes, out.is_terminal()));
        let _ = out.flush();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&shown(&result.stderr.bytes, err.is_terminal()));
        if result.timed_out {
            let _ = writeln!(err, "airlock: timed out after {} ms", result.duration_ms);
        }
        for e in &result.commit_errors {
            let _ = writeln!(err, "airlock: disk budget commit failed: {e}");
        }
        if result.stdout.truncated() || result.stderr.truncated() {
            let _ = writeln!(
                err,
                "airlock: output truncated ({} stdout and {} stderr bytes dropped)",
                result.stdout.dropped_bytes, result.stderr.dropped_bytes
            );
        }
    }
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(EXIT_SANDBOX_FAILED as u8))
}

/// The egress plan for `--allow`, `--channel` and `--egress-policy`;
/// `None` when the sandbox gets no network at all. Its log is set later
/// ([`egress_log`]).
/// `--repeat`: N launches of the same request from one launcher, C at a
/// time, and one JSON summary.
fn repeat(a: &ExecArgs, req: SandboxRequest, subids: SubidChoice) -> ExitCode {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    if a.egress_log.is_some() {
        return fail(
            true,
            "invalid_argument",
            "--repeat does not take --egress-log",
        );
    }
    if a.repeat > 100_000 || a.concurrency == 0 || a.concurrency > 256 || a.pool > 16 {
        return fail(
            true,
            "invalid_argument",
            "--repeat at most 100000, --concurrency 1 to 256, --pool at most 16",
        );
    }
    let broker = Broker::new().with_subids(subids);
    let broker = match broker.clone().with_pool(a.pool) {
        Ok(b) => b,
        Err(e) => return fail(true, "sandbox_setup_failed", &e.to_string()),
    };
    let launcher = SandboxLauncher::with_broker(broker.clone());
    // With --pool-wait the pool learns this kind of launch now, as `airlock
    // up` stocks its runs' limits at start; without it, from the first
    // launch, which starts cold.
    if a.pool_wait
        && let Err(e) = broker.stock(&req.limits)
    {
        return fail(true, e.reason(), &e.to_string());
    }
    let walls = Mutex::new(Vec::with_capacity(a.repeat));
    let failures = Mutex::new(Vec::new());
    let last = Mutex::new(None);
    // One launch: its wall time, or why it failed.
    let launch_one = || {
        let egress = match egress_plan(a) {
            Ok(e) => e,
            Err(m) => {
                failures.lock().unwrap_or_else(|p| p.into_inner()).push(m);
                return;
            }
        };
        let launch = Launch {
            sandbox: req.clone(),
            platform_env: Vec::new(),
            egress,
            label: format!("sbx-{}", std::process::id()),
            run: None,
        };
        let t = std::time::Instant::now();
        let outcome = launch
            .prepare()
            .and_then(|p| launcher.launch_prepared(p, Controls::default()));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match outcome {
            Ok(l) => {
                walls.lock().unwrap_or_else(|p| p.into_inner()).push(ms);
                *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(l.result);
            }
            Err(e) => failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.to_string()),
        }
        if a.pause_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
    };
    let waves_ms = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    if a.pool_wait {
        // Waves: every launcher takes part in each (a barrier before and
        // after the wait for the pool), and launch `wave * C + k` is
        // launcher k's.
        let want = a.pool.min(a.concurrency);
        let waves = a.repeat.div_ceil(a.concurrency);
        let gate = std::sync::Barrier::new(a.concurrency);
        let wave_start = Mutex::new(std::time::Instant::now());
        let wave_done = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for k in 0..a.concurrency {
                let (gate, wave_start, wave_done) = (&gate, &wave_start, &wave_done);
                let (launch_one, waves_ms) = (&launch_one, &waves_ms);
                let (broker, limits) = (&broker, &req.limits);
                scope.spawn(move || {
                    for wave in 0..waves {
                        if gate.wait().is_leader() {
                            let until = std::time::Instant::now() + Duration::from_secs(30);
                            while broker.pool_ready_for(limits) < want
                                && std::time::Instant::now() < until
                            {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            wave_done.store(0, Ordering::SeqCst);
                            *wave_start.lock().unwrap_or_else(|p| p.into_inner()) =
                                std::time::Instant::now();
                        }
                        gate.wait();
                        if wave * a.concurrency + k < a.repeat {
                            launch_one();
                        }
                        // The last launcher of the wave to finish times it.
                        if wave_done.fetch_add(1, Ordering::SeqCst) + 1 == a.concurrency {
                            let began = *wave_start.lock().unwrap_or_else(|p| p.into_inner());
                            waves_ms
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(began.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                });
            }
        });
    } else {
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..a.concurrency {
                scope.spawn(|| {
                    while next.fetch_add(1, Ordering::Relaxed) < a.repeat {
                        launch_one();
                    }
                });
            }
        });
    }
    let elapsed = started.elapsed().as_secs_f64();
    // In the order the launches ended; the statistics sort a copy.
    let walls = walls.into_inner().unwrap_or_else(|p| p.into_inner());
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut sorted = walls.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted.get(i).copied()
    };
    let last = last.into_inner().unwrap_or_else(|p| p.into_inner());
    let stats = broker.pool_stats();
    let obj = json!({
        "launches": walls.len(),
        "failed": failures.len(),
        "failures": failures.iter().take(5).collect::<Vec<_>>(),
        "concurrency": a.concurrency,
        "pool": a.pool,
        "pause_ms": a.pause_ms,
        "pooled": stats.map_or(0, |s| s.pooled),
        "cold": stats.map_or(walls.len() as u64, |s| s.empty),
        "median_ms": at(0.5),
        "p95_ms": at(0.95),
        "min_ms": sorted.first(),
        "max_ms": sorted.last(),
        "launches_per_second": walls.len() as f64 / elapsed.max(1e-9),
        "waves_ms": waves_ms.into_inner().unwrap_or_else(|p| p.into_inner()),
        "wall_ms": walls,
        "last": last.as_ref().map(|r| json!({
            "exit_code": r.exit_code,
            "signal": r.signal,
            "stdout": r.stdout.text(),
            "stderr": r.stderr.text(),
            "containment": r.containment,
            "timings": r.timings,
        })),
    });
    println!("{obj}");
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_SANDBOX_FAILED as u8)
    }
}

fn egress_plan(a: &ExecArgs) -> Result<Option<EgressPlan>, String> {
    use airlock_egress::policy::EnvAndFiles;
    use airlock_egress::proxy::NullLog;
    use std::sync::Arc;
    if a.allow.is_empty() && a.channel.is_empty() && a.egress_policy.is_none() {
        return Ok(None);
    }
    let loaded = match &a.egress_policy {
        Some(p) => airlock_egress::Policy::load(p, &EnvAndFiles),
        None => Ok(airlock_egress::Policy::default()),
    };
    let policy = match loaded {
        Ok(mut p) => {
            for rule in &a.allow {
                p.add_allow(rule)
                    .map_err(|e| format!("--allow {rule:?}: {e}"))?;
            }
            for ch in &a.channel {
                if !p.channels.contains_key(ch) {
                    return Err(format!(
                        "channel {ch:?} is not configured in the egress policy (--egress-policy)"
                    ));
                }
            }
            Ok(p)
        }
        Err(e) => {
            eprintln!("airlock: warning: no_policy: {e}; the sandbox's egress denies everything");
            Err(e)
        }
    };
    // The launcher keeps only these channels reachable from the sandbox.
    Ok(Some(EgressPlan {
        policy,
        channels: a.channel.clone(),
        log: Arc::new(NullLog),
        resolver: None,
        halt: None,
    }))
}

/// `--egress-log FILE`, opened (a FIFO blocks here until read).
fn egress_log(
    a: &ExecArgs,
) -> Result<Option<std::sync::Arc<dyn airlock_egress::proxy::LogSink>>, String> {
    let Some(path) = &a.egress_log else {
        return Ok(None);
    };
    let f =
        std::fs::File::create(path).map_err(|e| format!("--egress-log {}: {e}", path.display()))?;
    Ok(Some(std::sync::Arc::new(
        airlock_egress::proxy::WriterLog::new(Box::new(f)),
    )))
}
