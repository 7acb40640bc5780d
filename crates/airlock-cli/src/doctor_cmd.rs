//! `airlock doctor` (CLI-1): checks this host and this data directory,
//! and says what to fix with the exact command.
//!
//! The decisive check is real: a sandbox is launched (`/bin/true` under a
//! memory and a process limit) and its containment report read. Around
//! it, the preconditions that explain a failure: user namespaces (the
//! sysctls, Ubuntu's AppArmor restriction), running inside a container,
//! cgroup delegation, the data and key directories' modes, the database
//! (read without writing) and the clock that TOTP needs. Exit status 1
//! when a check fails (the default containment level, `namespaces`, cannot
//! be reached, or the database cannot be read); warnings do not fail.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use airlock_launch::{Controls, Launch, SandboxLauncher};
use airlock_sandbox::{DriverChoice, Limits, SandboxRequest};
use clap::Args;
use serde::Serialize;
use serde_json::json;

use crate::common::Paths;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// One JSON document instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    /// What to run (or do) to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, f: impl Into<String>) -> Self {
        self.fix = Some(f.into());
        self
    }
}

fn read_num(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// User namespaces: the kernel's switches, as this user meets them.
fn user_namespaces() -> Vec<Check> {
    let mut out = Vec::new();
    match read_num("/proc/sys/user/max_user_namespaces") {
        Some(0) => out.push(
            check(
                "user_namespaces",
                Status::Fail,
                "user.max_user_namespaces is 0: no user namespace can be created",
            )
            .fix(
                "sudo sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)",
            ),
        ),
        Some(n) => out.push(check(
            "user_namespaces",
            Status::Ok,
            format!("user.max_user_namespaces = {n}"),
        )),
        None => out.push(check(
            "user_namespaces",
            Status::Warn,
            "cannot read /proc/sys/user/max_user_namespaces",
        )),
    }
    if read_num("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) && !is_root() {
        out.push(
            check(
                "unprivileged_userns_clone",
                Status::Fail,
                "kernel.unprivileged_userns_clone is 0: only root may create user namespaces",
            )
            .fix("sudo sysctl -w kernel.unprivileged_userns_clone=1"),
        );
    }
    if read_num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) && !is_root() {
        out.push(
            check(
                "apparmor_userns",
                Status::Warn,
                "Ubuntu's AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)",
            )
            .fix("give airlock an AppArmor profile with `userns,` (README: Hosts that restrict user namespaces), or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
        );
    }
    out
}

/// Inside Docker (or another container runtime)?
fn container() -> Check {
    let cgroup = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    let inside = Path::new("/.dockerenv").exists()
        || Path::new("/run/.containerenv").exists()
        || ["docker", "containerd", "kubepods", "libpod"]
            .iter()
            .any(|m| cgroup.contains(m));
    if inside {
        check(
            "container",
            Status::Warn,
            "running inside a container: its seccomp and AppArmor profiles usually forbid the namespaces a sandbox needs",
        )
        .fix("run the container with --security-opt seccomp=unconfined --security-opt apparmor=unconfined (or run airlock on the host)")
    } else {
        check("container", Status::Ok, "not inside a container")
    }
}

/// The real thing: one sandbox, and what its report says held.
fn probe() -> Vec<Check> {
    let argv = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/bin/true");
    let req = SandboxRequest {
        argv: vec![argv.to_string()],
        mounts: Vec::new(),
        secret_files: Vec::new(),
        cwd: None,
        writable: Vec::new(),
        readonly: Vec::new(),
        env: Vec::new(),
        timeout: Some(Duration::from_secs(20)),
        grace: Some(Duration::from_secs(1)),
        limits: Limits {
            memory_bytes: Some(64 << 20),
            pids: Some(32),
            ..Limits::default()
        },
        output_budget: Some(64 << 10),
        driver: DriverChoice::Auto,
        require_containment: false,
        egress: false,
        timings: false,
    };
    let launch = Launch {
        sandbox: req,
        platform_env: Vec::new(),
        egress: None,
        label: format!("doctor-{}", std::process::id()),
        run: None,
    };
    let launched = match launch.prepare().map_err(|e| e.to_string()).and_then(|p| {
        SandboxLauncher::with_broker(airlock_sandbox::Broker::new())
            .launch_prepared(p, Controls::default())
            .map_err(|e| e.to_string())
    }) {
        Ok(l) => l,
        Err(e) => {
            return vec![
                check(
                    "sandbox",
                    Status::Fail,
                    format!("a sandbox could not start: {e}"),
                )
                .fix("see the checks above; `airlock sandbox exec --json -- /bin/true` shows the full report"),
            ];
        }
    };
    let report = launched.result.containment;
    let mut out = Vec::new();
    let name = |v: serde_json::Result<serde_json::Value>| match v {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".to_string(),
    };
    let level = name(serde_json::to_value(report.level));
    let driver = name(serde_json::to_value(report.driver));
    let full = report.level == airlock_sandbox::Level::Namespaces;
    out.push(if full {
        check(
            "containment",
            Status::Ok,
            format!("level {level} (driver {driver})"),
        )
    } else {
        check(
            "containment",
            Status::Fail,
            format!("only level {level} (driver {driver}): the default level, namespaces, is not reachable"),
        )
        .fix("fix the user-namespace checks above; until then runs refuse to start unless a worker accepts a lower level")
    });
    let init = airlock_sandbox::init_binary::chosen();
    out.push(match init {
        airlock_sandbox::init_binary::InitBinary::Refused { .. } => check(
            "sandbox_init",
            Status::Warn,
            init.describe(),
        )
        .fix("put the airlock-sandbox-init of the same build beside airlock, owned like it and writable only by its owner"),
        _ => check("sandbox_init", Status::Ok, init.describe()),
    });
    for g in &report.guarantees {
        if g.in_force {
            continue;
        }
        let (status, fix) = match g.name.as_str() {
            "memory_limit" | "pids_limit" | "cgroup_kill" => (
                Status::Warn,
                "delegate a cgroup to airlock: systemd-run --user --scope -p Delegate=yes airlock up (README: cgroup delegation)",
            ),
            "landlock" | "signal_scoping" => (
                Status::Warn,
                "a kernel with Landlock (5.13+, ABI 6 for scoping) and lsm=landlock on its command line",
            ),
            "seccomp" => (
                Status::Fail,
                "a kernel with seccomp filters (CONFIG_SECCOMP_FILTER)",
            ),
            _ if full => (
                Status::Warn,
                "see THREAT_MODEL.md for what this guarantee means",
            ),
            _ => (Status::Fail, "see the user-namespace checks"),
        };
        out.push(
            check(
                "guarantee",
                status,
                format!(
                    "{} not in force{}",
                    g.name,
                    if g.detail.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", g.detail)
                    }
                ),
            )
            .fix(fix),
        );
    }
    if let Some(l) = report.get("landlock").filter(|g| g.in_force) {
        out.push(check("landlock", Status::Ok, l.detail.clone()));
    }
    if let Some(m) = report.get("memory_limit").filter(|g| g.in_force) {
        out.push(check(
            "cgroups",
            Status::Ok,
            format!("memory limit {}", m.detail),
        ));
    }
    out
}

/// A directory that must be the airlock user's alone.
fn private_dir(name: &'static str, dir: &Path) -> Check {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check(
            name,
            Status::Ok,
            format!(
                "{} does not exist yet (created 0700 on first start)",
                dir.display()
            ),
        ),
        Err(e) => check(name, Status::Fail, format!("{}: {e}", dir.display())),
        Ok(m) => {
            let me = nix::unistd::geteuid().as_raw();
            if m.uid() != me {
                check(
                    name,
                    Status::Fail,
                    format!(
                        "{} belongs to uid {}, not to you (uid {me})",
                        dir.display(),
                        m.uid()
                    ),
                )
                .fix(format!("sudo chown -R {me} {}", dir.display()))
            } else if m.mode() & 0o077 != 0 {
                check(
                    name,
                    Status::Fail,
                    format!(
                        "{} is mode {:o}: others can read it",
                        dir.display(),
                        m.mode() & 0o777
                    ),
                )
                .fix(format!("chmod 700 {}", dir.display()))
            } else {
                check(
                    name,
                    Status::Ok,
                    format!("{} is 0700 and yours", dir.display()),
                )
            }
        }
    }
}

async fn database(paths: &Paths) -> Check {
    let url = paths.url();
    let shown = if url.starts_with("sqlite:") {
        url.clone()
    } else {
        "the PostgreSQL database of AIRLOCK_DATABASE_URL".to_string()
    };
    match airlock_service::inspect_database(&url).await {
        Ok(r) if !r.exists => check(
            "database",
            Status::Ok,
            format!("{shown} does not exist yet (created and migrated by `airlock up`)"),
        ),
        Ok(r) if r.schema_version > r.known_version => check(
            "database",
            Status::Fail,
            format!(
                "{shown} is at schema {} but this build knows only {}: a newer airlock wrote it",
                r.schema_version, r.known_version
            ),
        )
        .fix("run the airlock version that migrated it, or restore the backup taken before"),
        Ok(r) if r.schema_version < r.known_version => check(
            "database",
            Status::Ok,
            format!(
                "{shown} reachable, schema {} of {}: `airlock up` migrates it on start",
                r.schema_version, r.known_version
            ),
        ),
        Ok(r) => check(
            "database",
            Status::Ok,
            format!("{shown} reachable, schema {} (current)", r.schema_version),
        ),
        Err(e) => check(
            "database",
            Status::Fail,
            format!("{shown} cannot be read: {}", e.message),
        )
        .fix("check AIRLOCK_DATABASE_URL (or --data-dir), that the server is up and the user may connect"),
    }
}

/// TOTP needs a clock within a step or two of the truth.
fn clock() -> Check {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // 2025-01-01: no real clock reads earlier than this build.
    if now < 1_735_689_600 {
        return check(
            "clock",
            Status::Fail,
            "the system clock is before 2025: sign-in codes (TOTP) will fail",
        )
        .fix("sudo timedatectl set-ntp true (or set the time)");
    }
    let synced = std::process::Command::new("timedatectl")
        .args(["show", "-p", "NTPSynchronized", "--value"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match synced.as_deref() {
        Some("yes") => check("clock", Status::Ok, "synchronised (NTP)"),
        Some("no") => check(
            "clock",
            Status::Warn,
            "not synchronised: TOTP codes fail once it drifts past 30 s",
        )
        .fix("sudo timedatectl set-ntp true"),
        _ => check(
            "clock",
            Status::Ok,
            "plausible (synchronisation unknown: no timedatectl)",
        ),
    }
}

pub fn doctor(paths: &Paths, a: &DoctorArgs) -> ExitCode {
    let mut checks = user_namespaces();
    checks.push(container());
    checks.extend(probe());
    checks.push(private_dir("data_directory", &paths.data_dir));
    checks.push(private_dir("key_directory", &paths.data_dir.join("keys")));
    checks.push(match crate::common::runtime() {
        Ok(rt) => rt.block_on(database(paths)),
        Err(e) => check("database", Status::Fail, format!("no runtime: {e}")),
    });
    checks.push(clock());
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if a.json {
        println!("{}", json!({"ok": !failed, "checks": checks}));
    } else {
        for c in &checks {
            let mark = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{mark} {}: {}", c.name, c.detail);
            if let (Some(f), false) = (&c.fix, c.status == Status::Ok) {
                println!("     fix: {f}");
            }
        }
        if failed {
            println!(
                "\nairlock cannot run workloads with its default guarantees here; fix the FAIL lines first."
            );
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
