//! The broker: the one place that creates workload processes (SBX-1).
//!
//! [`Broker::run`] resolves the executable (SBX-2), creates the cgroup,
//! starts the sandbox init (or, for the `uncontained` driver, the workload
//! itself), drains stdout and stderr into bounded buffers, enforces the
//! timeout — which starts before anything is spawned, so it includes
//! start-up — with a grace period and then a kill of the whole tree, and
//! returns one [`RunResult`].

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::cgroup::{Cgroup, CgroupLimits};
use crate::env;
use crate::exe::{ExeError, ExecutableIdentity, ResolvedExecutable};
use crate::output::Captured;
use crate::pool::{Pool, PoolKey, PoolStats, Pooled};
use crate::report::{ContainmentReport, Guarantee, Level};
use crate::spec::{self, DriverChoice, Limits, SandboxSpec};
use crate::subid::{SubidChoice, SubidError};
use crate::sys;
use crate::wire::{
    CONTROL_FD, EGRESS_LISTEN, EXE_FD, InitEvent, InitSpec, Rlimits, SPEC_FD, STATUS_FD,
};

/// Receives the sandbox's egress listener (NET-1), called once, before the
/// workload starts, on the broker's thread. The trusted side serves it.
pub type EgressHook<'a> = &'a mut dyn FnMut(std::net::TcpListener);

/// Optional controls of one launch.
#[derive(Default)]
pub struct Hooks<'a> {
    /// Receives the egress listener when the spec asks for egress.
    pub on_listener: Option<EgressHook<'a>>,
    /// Set to stop the workload (RUN-5): same kill sequence as a timeout,
    /// reported as `cancelled`.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Set (with `cancel`) to kill without the grace period: the workload
    /// gets no time to react (the emergency stop, AGT-6).
    pub kill: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Live stdout/stderr chunks (bounded; see [`crate::output::LiveSink`]).
    pub live_output: Option<crate::output::LiveSink>,
}

impl std::fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("cancel", &self.cancel)
            .field("kill", &self.kill)
            .finish_non_exhaustive()
    }
}

/// Waits for the child, slicing the wait so a cancel flag is noticed.
fn wait_until(
    rx: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
    until: Instant,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<std::io::Result<std::process::ExitStatus>, bool> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let slice = if cancel.is_some() {
            left.min(Duration::from_millis(100))
        } else {
            left
        };
        match rx.recv_timeout(slice) {
            Ok(r) => return Ok(r),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(false),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst)) {
                    return Err(true);
                }
                if Instant::now() >= until {
                    return Err(false);
                }
            }
        }
    }
}

/// Status lines read from one launch's init at most (a workload cannot
/// write there; this bounds what a broken init could make the broker hold).
const STATUS_LINES: usize = 64;

/// Reads a pooled launch's status events on the calling thread until PID 1
/// reports `Emptied` (true), collecting the others in `events`. False, with
/// nothing lost, at `until`, when `cancel` is set, at the end of the pipe or
/// after `lines_left` lines: the caller hands the rest of the pipe to a
/// reading thread. A partial line is waited for (the init writes its lines
/// whole).
fn read_until_emptied(
    status: &mut BufReader<std::fs::File>,
    until: Instant,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    events: &mut Vec<InitEvent>,
    lines_left: &mut usize,
) -> bool {
    use std::os::fd::AsFd;
    while *lines_left > 0 {
        if status.buffer().is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            let slice = match cancel {
                Some(_) => left.min(Duration::from_millis(100)),
                None => left,
            };
            let ms = u16::try_from(slice.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(
                status.get_ref().as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => {
                    let cancelled = cancel.is_some_and(|c| c.load(Ordering::SeqCst));
                    if cancelled || Instant::now() >= until {
                        return false;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        let mut line = String::new();
        match status.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        *lines_left -= 1;
        match serde_json::from_str::<InitEvent>(&line) {
            Ok(InitEvent::Emptied) => return true,
            Ok(ev) => events.push(ev),
            Err(_) => {}
        }
    }
    false
}

/// [`wait_until`], or at once when the launch is already known to be over,
/// or already cancelled or past its deadline (when [`read_until_emptied`]
/// gave up for that reason, the answer must not wait another slice).
fn wait_until_or(
    over: bool,
    rx: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
    until: Instant,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<std::io::Result<std::process::ExitStatus>, bool> {
    if over {
        return Ok(Ok(std::process::ExitStatus::from_raw(0)));
    }
    if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
        // An end already reported still wins, as in `wait_until`.
        return rx.try_recv().map_err(|_| true);
    }
    wait_until(rx, until, cancel)
}

/// Waits up to `grace` for the child after SIGTERM, in slices so that a
/// kill flag ends the grace period at once. `Err` when the grace is over.
fn wait_grace(
    rx: &mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
    grace: Duration,
    kill: Option<&std::sync::atomic::AtomicBool>,
) -> Result<std::io::Result<std::process::ExitStatus>, ()> {
    let until = Instant::now() + grace;
    loop {
        if kill.is_some_and(|k| k.load(std::sync::atomic::Ordering::SeqCst)) {
            return Err(());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(());
        }
        let slice = if kill.is_some() {
            left.min(Duration::from_millis(20))
        } else {
            left
        };
        match rx.recv_timeout(slice) {
            Ok(r) => return Ok(r),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The result record of one launch (SBX-1).
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Exit code when the workload exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when it was killed.
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Stopped because the caller cancelled it.
    pub cancelled: bool,
    pub duration_ms: u64,
    #[serde(skip)]
    pub stdout: Captured,
    #[serde(skip)]
    pub stderr: Captured,
    pub containment: ContainmentReport,
    /// Limits that were hit: `memory`, `pids`, `disk`, `timeout`, `stdout`,
    /// `stderr`.
    pub limit_hits: Vec<String>,
    /// Budgeted writable roots whose commit failed (see [`crate::budget`]):
    /// what the workload wrote there did not fully reach the host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commit_errors: Vec<String>,
    pub executable: ExecutableIdentity,
    /// Milliseconds since the launch began at which each stage finished,
    /// when the spec asked for timings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timings: Vec<(String, f64)>,
}

impl RunResult {
    /// The status a shell would report: the exit code, or 128 + signal.
    pub fn status_code(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => crate::EXIT_SANDBOX_FAILED,
        }
    }
}

/// Why a workload was not launched. Nothing of the workload ran.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Executable(#[from] ExeError),
    #[error("containment_unavailable: required guarantees not in force: {}", missing.join(", "))]
    ContainmentUnavailable {
        missing: Vec<String>,
        report: Box<ContainmentReport>,
    },
    #[error("sandbox set-up failed at {stage}: {error}")]
    Setup { stage: String, error: String },
    #[error("cannot execute {path}: {error}")]
    Exec { path: PathBuf, error: String },
    #[error(transparent)]
    SandboxIds(#[from] SubidError),
    #[error("sandbox could not start: {0}")]
    Io(#[from] std::io::Error),
}

impl LaunchError {
    /// A stable, machine-readable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Executable(ExeError::NotFound(_)) => "executable_not_found",
            Self::Executable(ExeError::Changed(_)) => "executable_changed",
            Self::Executable(_) => "executable_invalid",
            Self::ContainmentUnavailable { .. } => "containment_unavailable",
            Self::Setup { .. } => "sandbox_setup_failed",
            Self::Exec { .. } => "exec_failed",
            Self::SandboxIds(_) => "sandbox_ids_invalid",
            Self::Io(_) => "sandbox_setup_failed",
        }
    }
}

/// Who a launch's workload is on the host.
struct LaunchIds {
    /// The broker is root: the workload gets the sandbox ids.
    root: bool,
    outer_uid: u32,
    outer_gid: u32,
    /// Where the ids come from, for the containment report.
    host_ids: String,
}

/// Launches workloads.
#[derive(Debug, Clone)]
pub struct Broker {
    init_exe: PathBuf,
    /// Where a root broker takes its workloads' host uid and gid from.
    subids: SubidChoice,
    /// Pre-built sandboxes (see [`crate::pool`]), when enabled.
    pool: Option<Arc<Pool>>,
}

impl Default for Broker {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) static LAUNCHES: AtomicU64 = AtomicU64::new(0);

impl Broker {
    /// A broker whose sandbox init is the small `airlock-sandbox-init` beside
    /// the running binary when that one may be used ([`crate::init_binary`]),
    /// and otherwise the running binary itself, whose `main` must then call
    /// [`crate::init::main_if_requested`].
    pub fn new() -> Self {
        Self {
            init_exe: crate::init_binary::chosen().path(),
            subids: SubidChoice::Default,
            pool: None,
        }
    }

    /// A broker that uses another binary (which must call
    /// [`crate::init::main_if_requested`]) as the sandbox init.
    pub fn with_init_exe(path: PathBuf) -> Self {
        Self {
            init_exe: path,
            subids: SubidChoice::Default,
            pool: None,
        }
    }

    /// Keeps `per_key` pre-built sandboxes ready for each kind of launch
    /// this broker made recently (see [`crate::pool`]); 0 turns the pool
    /// off. Launches at the `namespaces` level take one when one is ready
    /// and launch cold otherwise. The pool's thread and its sandboxes end
    /// when the last clone of this broker is dropped.
    pub fn with_pool(mut self, per_key: usize) -> std::io::Result<Self> {
        self.pool = match per_key {
            0 => None,
            n => Some(Pool::start(n, Box::new(build_pooled))?),
        };
        Ok(self)
    }

    /// Starts keeping sandboxes ready for launches under `limits` before
    /// the first such launch (the pool otherwise learns a kind of launch
    /// from its first, cold, launch): `airlock up` stocks its runs'
    /// default limits at start, and a burst of launches then finds the
    /// pool full. Returns whether the pool is on; without it, nothing to
    /// do.
    pub fn stock(&self, limits: &Limits) -> Result<bool, LaunchError> {
        let Some(pool) = &self.pool else {
            return Ok(false);
        };
        let ids = self.launch_ids()?;
        pool.stock(self.pool_key(&ids, limits));
        Ok(true)
    }

    /// How many pooled sandboxes are ready for launches under `limits`
    /// (0 without a pool, or when the ids cannot be resolved).
    pub fn pool_ready_for(&self, limits: &Limits) -> usize {
        match (&self.pool, self.launch_ids()) {
            (Some(pool), Ok(ids)) => pool.ready_for(&self.pool_key(&ids, limits)),
            _ => 0,
        }
    }

    /// The host ids this broker's next launch runs as (SBX-3: a root
    /// broker's workloads are never host root; a bad range is refused
    /// before anything is created).
    fn launch_ids(&self) -> Result<LaunchIds, SubidError> {
        if nix::unistd::geteuid().is_root() {
            let ids = crate::subid::resolve(&self.subids)?;
            let host_ids = format!(
                "sandbox ids from {} (uids {}, gids {})",
                ids.source, ids.uid_range, ids.gid_range
            );
            Ok(LaunchIds {
                root: true,
                outer_uid: ids.uid,
                outer_gid: ids.gid,
                host_ids,
            })
        } else {
            Ok(LaunchIds {
                root: false,
                outer_uid: nix::unistd::geteuid().as_raw(),
                outer_gid: nix::unistd::getegid().as_raw(),
                host_ids: "the invoking user".to_string(),
            })
        }
    }

    /// Everything a pooled sandbox for a launch under `limits` is built
    /// with: a launch takes only a sandbox of its own key.
    fn pool_key(&self, ids: &LaunchIds, limits: &Limits) -> PoolKey {
        PoolKey {
            init_exe: self.init_exe.clone(),
            outer_uid: ids.outer_uid,
            outer_gid: ids.outer_gid,
            switch_ids: ids.root,
            host_ids: ids.host_ids.clone(),
            limits: (
                limits.memory_bytes,
                Some(limits.pids.unwrap_or(spec::DEFAULT_PIDS)),
                limits.cpu_millicores,
            ),
            tmp_bytes: limits.tmp_bytes.unwrap_or(spec::DEFAULT_TMP_BYTES),
        }
    }

    /// The pool's counters, when the pool is on.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(|p| p.stats())
    }

    /// Process ids of the ready pooled sandboxes' inits (tests,
    /// diagnostics).
    pub fn pool_ready_pids(&self) -> Vec<u32> {
        self.pool
            .as_ref()
            .map(|p| p.ready_pids())
            .unwrap_or_default()
    }

    /// Where a root broker takes its workloads' host ids from (see
    /// [`crate::subid`]); ignored by an unprivileged broker, whose
    /// workloads are always its own uid.
    pub fn with_subids(mut self, choice: SubidChoice) -> Self {
        self.subids = choice;
        self
    }

    /// The host uid and gid this broker's workloads run as when they are
    /// not the broker's own: a root broker's workloads are the sandbox ids
    /// (SBX-3). `None` for an unprivileged broker. For files the platform
    /// prepares in a writable root that the workload must later change.
    pub fn workload_owner(&self) -> Result<Option<(u32, u32)>, SubidError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        let ids = crate::subid::resolve(&self.subids)?;
        Ok(Some((ids.uid, ids.gid)))
    }

    /// Runs one workload to completion.
    pub fn run(&self, spec: &SandboxSpec) -> Result<RunResult, LaunchError> {
        self.run_with(spec, Hooks::default())
    }

    /// Runs one workload; when the spec asks for egress, `on_listener`
    /// receives the sandbox's listener before the workload starts.
    pub fn run_with(&self, spec: &SandboxSpec, hooks: Hooks<'_>) -> Result<RunResult, LaunchError> {
        self.run_inner(spec, hooks, None)
    }

    /// Like [`Broker::run_with`], calling `before_start` after the broker's
    /// own identity check (SBX-2) and the spawn of the sandbox's init, and
    /// before the init starts the workload. Tests use that window to prove
    /// what the sandbox re-checks by itself (an executable swapped there is
    /// refused inside).
    pub fn run_with_before_start(
        &self,
        spec: &SandboxSpec,
        hooks: Hooks<'_>,
        before_start: &mut dyn FnMut(),
    ) -> Result<RunResult, LaunchError> {
        self.run_inner(spec, hooks, Some(before_start))
    }

    fn run_inner(
        &self,
        spec: &SandboxSpec,
        hooks: Hooks<'_>,
        before_start: Option<&mut dyn FnMut()>,
    ) -> Result<RunResult, LaunchError> {
        let start = Instant::now();
        let t0 = crate::wire::monotonic_ns();
        let deadline = start + spec.timeout;
        let mut platform = spec.platform_env.clone();
        if spec.egress {
            let url = format!("http://{EGRESS_LISTEN}");
            for name in [
                "HTTP_PROXY",
                "HTTPS_PROXY",
                "ALL_PROXY",
                "http_proxy",
                "https_proxy",
                "all_proxy",
            ] {
                platform.insert(name.to_string(), url.clone());
            }
            platform.insert("NO_PROXY".into(), String::new());
            platform.insert("no_proxy".into(), String::new());
        }
        let env = env::build(&spec.declared_env, &platform, |n| std::env::var(n).ok());
        let search = env
            .get("PATH")
            .map(String::as_str)
            .unwrap_or(env::SANDBOX_PATH);
        let exe = ResolvedExecutable::resolve(&spec.argv[0], search, &spec.cwd)?;
        match spec.driver {
            DriverChoice::Uncontained if spec.egress => Err(LaunchError::Setup {
                stage: "egress".into(),
                error: "the uncontained driver has the host's network; egress policy cannot be enforced".into(),
            }),
            DriverChoice::Uncontained => {
                run_uncontained(spec, env, exe, start, deadline, hooks, before_start)
            }
            _ => {
                let mut hooks = hooks;
                let mut before_start = before_start;
                let mut attempt = |use_pool: bool| {
                    let at = Attempt {
                        start,
                        deadline,
                        t0,
                        use_pool,
                    };
                    self.run_contained(spec, &env, &exe, at, &mut hooks, &mut before_start)
                };
                match attempt(true) {
                    // The pooled sandbox died after the pool checked it and
                    // before it took the launch: nothing of the workload
                    // ran, so the launch goes cold (its timings say
                    // `pool_handoff_failed`).
                    Err(Contained::PoolHandoff) => match attempt(false) {
                        Err(Contained::Launch(e)) => Err(e),
                        // A cold attempt never hands off to the pool.
                        Err(Contained::PoolHandoff) => Err(LaunchError::Setup {
                            stage: "pool".into(),
                            error: "the pooled sandbox did not take the launch".into(),
                        }),
                        Ok(r) => Ok(r),
                    },
                    Err(Contained::Launch(e)) => Err(e),
                    Ok(r) => Ok(r),
                }
            }
        }
    }

    fn run_contained(
        &self,
        spec: &SandboxSpec,
        env: &BTreeMap<String, String>,
        exe: &ResolvedExecutable,
        at: Attempt,
        hooks: &mut Hooks<'_>,
        before_start: &mut Option<&mut dyn FnMut()>,
    ) -> Result<RunResult, Contained> {
        let Attempt {
            start,
            deadline,
            t0,
            use_pool,
        } = at;
        let mut marks: Vec<(String, u64)> = Vec::new();
        let mut mark = |stage: &str| {
            if spec.timings {
                marks.push((stage.to_string(), crate::wire::monotonic_ns()));
            }
        };
        if !use_pool && self.pool.is_some() {
            mark("pool_handoff_failed");
        }
        mark("resolved");
        // Cgroup directories of brokers that died without removing them
        // (kill -9) are removed by the next broker on this host, once per
        // process.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| {
            let _ = crate::cgroup::remove_stale();
            remove_stale_scratch();
        });
        // SBX-3: a root broker's workloads are never host root. The ids are
        // resolved (and a bad range refused) before anything is created.
        let LaunchIds {
            root,
            outer_uid,
            outer_gid,
            host_ids,
        } = self.launch_ids()?;
        // The sandbox uid must be able to write its writable roots; files
        // it creates there stay owned by it (see hostfs::grant_access).
        let mut grants = Grants(Vec::new());
        if root {
            let id_of = |p: &std::path::Path| {
                spec.root_ids
                    .iter()
                    .find(|(q, _)| q == p)
                    .map(|(_, id)| *id)
            };
            let writable = spec
                .writable
                .iter()
                .chain(spec.mounts.iter().filter(|m| m.writable).map(|m| &m.source));
            for w in writable {
                match crate::hostfs::grant_access(w, id_of(w), outer_uid, outer_gid) {
                    Ok(Some(g)) => grants.0.push(g),
                    Ok(None) => {}
                    Err(error) => {
                        return Err(LaunchError::Setup {
                            stage: "writable root access".into(),
                            error,
                        }
                        .into());
                    }
                }
            }
            // The platform's read-only file mounts (a run's input.json) are
            // private to the airlock user on the host: the sandbox uid gets
            // read access to exactly those files for the launch. Read-only
            // directory mounts and `--readonly` roots are not granted
            // anything: what the sandbox uid may not read stays unreadable.
            for m in spec.mounts.iter().filter(|m| !m.writable) {
                if !m.source.is_file() {
                    continue;
                }
                match crate::hostfs::grant_read(&m.source, id_of(&m.source), outer_uid, outer_gid) {
                    Ok(Some(g)) => grants.0.push(g),
                    Ok(None) => {}
                    Err(error) => {
                        return Err(LaunchError::Setup {
                            stage: "read-only mount access".into(),
                            error,
                        }
                        .into());
                    }
                }
            }
        }
        let level = match spec.driver {
            DriverChoice::Landlock => Level::LandlockSeccomp,
            _ => Level::Namespaces,
        };
        let pids = spec.limits.pids.unwrap_or(spec::DEFAULT_PIDS);
        let limits = CgroupLimits {
            memory_bytes: spec.limits.memory_bytes,
            pids: Some(pids),
            cpu_millicores: spec.limits.cpu_millicores,
        };
        let tmp_bytes = spec.limits.tmp_bytes.unwrap_or(spec::DEFAULT_TMP_BYTES);
        // A pre-built sandbox when the pool has one for exactly this key.
        let pooled = match &self.pool {
            Some(pool) if use_pool && level == Level::Namespaces => {
                let ids = LaunchIds {
                    root,
                    outer_uid,
                    outer_gid,
                    host_ids: host_ids.clone(),
                };
                let taken = pool.take(&self.pool_key(&ids, &spec.limits));
                mark(if taken.is_some() {
                    "pool_taken"
                } else {
                    "pool_empty"
                });
                // A root that holds the pooled root's mount point (`/tmp`,
                // say) would show the sandbox its own root, writable: such
                // a launch goes cold.
                match taken {
                    Some(p) if overlaps_pool_dir(spec, &p.root_dir) => {
                        p.discard();
                        None
                    }
                    other => other,
                }
            }
            _ => None,
        };
        let (cgroup, mut base) = match &pooled {
            Some(p) => (None, p.base.clone()),
            None => {
                let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
                let name = format!("airlock-{}-{n}", std::process::id());
                let (cg, base) = Cgroup::create(&name, limits);
                (Some((cg, name)), base)
            }
        };
        mark("cgroup_created");
        let memory_in_cgroup = base.iter().any(|g| g.name == "memory_limit" && g.in_force);
        // Without a cgroup memory controller, RLIMIT_AS is the fallback cap.
        let address_space = spec.limits.memory_bytes.filter(|_| !memory_in_cgroup);
        if address_space.is_some() {
            base.retain(|g| g.name != "memory_limit");
        }
        let mut required_extra = Vec::new();
        if spec.limits.memory_bytes.is_some() {
            required_extra.push("memory_limit".to_string());
        }
        if spec.limits.pids.is_some() {
            required_extra.push("pids_limit".to_string());
        }
        if spec.limits.cpu_millicores.is_some() {
            required_extra.push("cpu_limit".to_string());
        }
        if spec.limits.disk_bytes.is_some() {
            required_extra.push("disk_budget".to_string());
        }

        // The fallback level shares the host's /tmp: give it a private one.
        // A pooled sandbox's field names the directory its root is on.
        let scratch = match (&pooled, &cgroup) {
            (Some(p), _) => Some(p.root_dir.clone()),
            (None, Some((_, name)))
                if level == Level::LandlockSeccomp || spec.driver == DriverChoice::Auto =>
            {
                Some(make_scratch(name, (outer_uid, outer_gid))?)
            }
            _ => None,
        };
        let mut env = env.clone();
        if level == Level::LandlockSeccomp
            && let Some(s) = &scratch
        {
            let s = s.display().to_string();
            env.insert("HOME".into(), s.clone());
            env.insert("TMPDIR".into(), s);
        }

        let timeout_secs = spec.timeout.as_secs() + spec.grace.as_secs() + 2;
        let mut init = InitSpec {
            argv: spec.argv.clone(),
            env: env.into_iter().collect(),
            cwd: spec.cwd.clone(),
            exe: exe.identity().clone(),
            exec_by_fd: true,
            level,
            allow_fallback: spec.driver == DriverChoice::Auto && pooled.is_none(),
            writable: spec.writable.clone(),
            readonly: spec.readonly.clone(),
            mounts: spec.mounts.clone(),
            secret_files: spec.secret_files.clone(),
            outer_uid,
            outer_gid,
            switch_ids: root,
            host_ids,
            root_ids: spec.root_ids.clone(),
            rlimits: Rlimits {
                nofile: spec.limits.nofile.unwrap_or(spec::DEFAULT_NOFILE),
                nproc: pids,
                fsize: spec
                    .limits
                    .file_size_bytes
                    .unwrap_or(spec::DEFAULT_FILE_SIZE),
                cpu_secs: timeout_secs,
                address_space,
            },
            tmp_bytes,
            disk_budget: spec.limits.disk_bytes,
            scratch: scratch.clone(),
            require_containment: spec.require_containment,
            required_extra,
            base_guarantees: base,
            egress: spec.egress,
            timings: spec.timings,
            pooled: pooled.is_some(),
            sent_roots: None,
        };

        let exe_fd = OwnedFd::from(exe.file().try_clone()?);
        let exe_fd = high_fd(exe_fd)?;
        // Cold: spawn the init now. Pooled: hand the launch to the waiting
        // sandbox. Either way: the init's process, the status pipe, the
        // control socket (egress listener), the workload's stdout and
        // stderr, and the cgroup.
        let (mut child, status_r, control_ours, out, err, cgroup, pooled_dir) = match pooled {
            None => {
                let payload = serde_json::to_vec(&init).map_err(std::io::Error::other)?;
                let (cgroup, _) = cgroup.unwrap_or_default();
                let (spec_r, spec_w) = high_pipe()?;
                let (status_r, status_w) = high_pipe()?;
                let (control_ours, control_theirs) = std::os::unix::net::UnixStream::pair()?;
                let control_theirs = high_fd(OwnedFd::from(control_theirs))?;
                // SBX-2: the identity is checked immediately before the
                // spawn (and again inside, just before exec).
                exe.verify()?;
                let mut child = spawn_init(
                    &self.init_exe,
                    &spec_r,
                    &status_w,
                    Some(&exe_fd),
                    spec.egress.then_some(&control_theirs),
                    true,
                )?;
                mark("init_spawned");
                drop((spec_r, status_w, exe_fd, control_theirs));
                // The spec goes first so the init can build its namespaces
                // while the (sometimes slow: an RCU grace period) cgroup
                // migration runs; the init forks nothing until it reads
                // the "go" byte.
                let mut spec_pipe = std::fs::File::from(spec_w);
                let mut line = payload;
                line.push(b'\n');
                // A failed write means the init died; its status tells why.
                let _ = spec_pipe.write_all(&line);
                mark("spec_sent");
                if !cgroup.is_empty() && cgroup.add(child.id()).is_err() {
                    // The limits we reported as applied would not hold:
                    // stop now.
                    drop(spec_pipe);
                    let _ = child.kill();
                    let _ = child.wait();
                    cgroup.destroy();
                    return Err(LaunchError::Setup {
                        stage: "cgroup attach".into(),
                        error: "could not move the sandbox into its cgroup".into(),
                    }
                    .into());
                }
                if let Some(f) = before_start {
                    f();
                }
                let _ = spec_pipe.write_all(b"G");
                drop(spec_pipe);
                mark("cgroup_attached");
                let out = child.stdout.take();
                let err = child.stderr.take();
                let status = BufReader::new(std::fs::File::from(status_r));
                (child, status, control_ours, out, err, cgroup, None)
            }
            Some(mut p) => {
                let sent = if root {
                    // The sandbox is no longer root: the broker opens the
                    // launch's roots, as detached trees, with root's access.
                    let opened = crate::init::open_roots(&init, crate::init::Opener::Detached)
                        .map_err(|(stage, error)| LaunchError::Setup {
                            stage: stage.into(),
                            error,
                        });
                    match opened {
                        Ok(o) => Some(o),
                        Err(e) => {
                            p.discard();
                            return Err(e.into());
                        }
                    }
                } else {
                    None
                };
                init.sent_roots = sent
                    .as_ref()
                    .map(|v| v.iter().map(|s| (s.target.clone(), s.writable)).collect());
                let (out_r, out_w) = high_pipe()?;
                let (err_r, err_w) = high_pipe()?;
                if let Err(e) = exe.verify() {
                    p.discard();
                    return Err(e.into());
                }
                if let Some(f) = before_start {
                    f();
                }
                // The descriptors go first: PID 1 wakes on the spec and
                // finds them queued, instead of sleeping again on each.
                let roots = sent.iter().flatten().map(|s| &s.fd);
                let handed = crate::pool::send_fds(
                    &p.control,
                    [&exe_fd, &out_w, &err_w].into_iter().chain(roots),
                )
                .and_then(|()| crate::pool::send_spec(&mut p.spec, &init));
                drop((exe_fd, out_w, err_w, sent));
                mark("spec_sent");
                if handed.is_err() {
                    // The init died since the pool checked it; nothing of
                    // the workload ran (PID 1 reads the whole spec and every
                    // descriptor before it starts anything).
                    p.discard();
                    return Err(Contained::PoolHandoff);
                }
                let Pooled {
                    child,
                    cgroup,
                    status,
                    control,
                    root_dir,
                    spec: spec_pipe,
                    ..
                } = p;
                drop(spec_pipe);
                (
                    child,
                    status,
                    control,
                    Some(std::fs::File::from(out_r)),
                    Some(std::fs::File::from(err_r)),
                    cgroup,
                    Some(root_dir),
                )
            }
        };
        let is_pooled = pooled_dir.is_some();
        let child_pid = child.id();
        let pidfd = sys::pidfd_open(child_pid);
        let signal = |sig: Signal| match &pidfd {
            Some(fd) => sys::pidfd_signal(fd, sig),
            None => {
                let _ = kill(
                    Pid::from_raw(i32::try_from(child_pid).unwrap_or(i32::MAX)),
                    sig,
                );
            }
        };
        if spec.egress {
            // The init sends the listener before it starts the workload, or
            // closes the socket when set-up fails (its status tells why).
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let _ = control_ours.set_read_timeout(Some(wait));
            if let Ok(Some(fd)) = sys::recv_fd(control_ours.as_raw_fd())
                && let Some(hook) = hooks.on_listener.as_mut()
            {
                hook(std::net::TcpListener::from(fd));
            }
        }
        drop(control_ours);

        let budget = spec.output_budget;
        let (out_rx, err_rx) = spawn_drains(out, err, budget, hooks.live_output.clone());
        let (wait_tx, wait_rx) = mpsc::channel();
        let (ev_tx, ev_rx) = mpsc::channel();
        // A pooled launch is over when PID 1 is gone (every process of the
        // sandbox with it): the init's own exit, after the namespaces are
        // torn down, is waited for in the background.
        //
        // This thread reads the status pipe of a pooled launch itself until
        // then: one wake-up fewer than a reading thread handing the events
        // over. At the deadline, on cancel, or if the init ends without
        // `Emptied`, a reading thread takes the rest over as for a cold
        // launch, and the timeout and grace handling below applies.
        let mut status_r = status_r;
        let mut early = Vec::new();
        let mut lines_left = STATUS_LINES;
        let emptied_early = is_pooled
            && read_until_emptied(
                &mut status_r,
                deadline,
                hooks.cancel.as_deref(),
                &mut early,
                &mut lines_left,
            );
        let emptied = is_pooled.then(|| wait_tx.clone());
        if emptied_early {
            drop(ev_tx);
        } else {
            crate::helpers::spawn(move || {
                for line in status_r.lines().map_while(Result::ok).take(lines_left) {
                    let Ok(ev) = serde_json::from_str::<InitEvent>(&line) else {
                        continue;
                    };
                    if let (InitEvent::Emptied, Some(tx)) = (&ev, &emptied) {
                        let _ = tx.send(Ok(std::process::ExitStatus::from_raw(0)));
                        break;
                    }
                    let _ = ev_tx.send(ev);
                }
            });
        }
        let (exited_tx, exited_rx) = mpsc::channel::<()>();
        crate::helpers::spawn(move || {
            let _ = wait_tx.send(child.wait());
            let _ = exited_tx.send(());
        });
        let mut timed_out = false;
        let mut cancelled = false;
        let waited = match wait_until_or(emptied_early, &wait_rx, deadline, hooks.cancel.as_deref())
        {
            Ok(r) => Some(r),
            Err(by_cancel) => {
                cancelled = by_cancel;
                timed_out = !by_cancel;
                signal(Signal::SIGTERM);
                match wait_grace(&wait_rx, spec.grace, hooks.kill.as_deref()) {
                    Ok(r) => Some(r),
                    Err(_) => {
                        // Grace is over. The init kills its whole tree on
                        // KILL_ALL (the fallback level's subreaper needs to
                        // do it itself); SIGKILL and the cgroup follow.
                        signal(crate::init::KILL_ALL);
                        match wait_rx.recv_timeout(Duration::from_secs(2)) {
                            Ok(r) => Some(r),
                            Err(_) => {
                                signal(Signal::SIGKILL);
                                cgroup.kill();
                                wait_rx.recv().ok()
                            }
                        }
                    }
                }
            }
        };
        mark(if is_pooled {
            "sandbox_emptied"
        } else {
            "init_exited"
        });
        // Whatever is left in the group dies now (SBX-4). A pooled sandbox
        // that reported itself empty has only its init left, tearing its
        // namespaces down: that is killed with the group in the background.
        if !is_pooled {
            cgroup.kill();
        }
        let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);

        let events: Vec<InitEvent> = {
            let mut v = early;
            while let Ok(e) = ev_rx.recv_timeout(Duration::from_secs(5)) {
                v.push(e);
            }
            v
        };
        let collect = |rx: mpsc::Receiver<Captured>| {
            rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
        };
        let stdout = collect(out_rx);
        let stderr = collect(err_rx);
        let oom = cgroup.oom_killed();
        let pids_hit = cgroup.pids_limit_hit();
        mark("output_collected");
        // The pool's filler replaces what was taken once this sandbox is
        // gone: building the next one while this one tears down, or while
        // the caller still handles this result, would take the CPU from
        // both (two cores).
        let pool = self.pool.clone();
        let cleanup = move || {
            let _ = exited_rx.recv();
            cgroup.destroy();
            if let Some(s) = &scratch {
                let _ = std::fs::remove_dir_all(s);
            }
            if let Some(p) = pool {
                p.launched();
            }
        };
        if is_pooled {
            crate::helpers::spawn(cleanup);
        } else {
            cleanup();
        }
        mark("cleaned_up");

        let mut report = None;
        let mut exit = None;
        let mut disk_exhausted = false;
        let mut commit_errors = Vec::new();
        for e in events {
            match e {
                InitEvent::Ready { report: r } => report = Some(r),
                InitEvent::Blocked { missing, report } => {
                    return Err(LaunchError::ContainmentUnavailable {
                        missing,
                        report: Box::new(report),
                    }
                    .into());
                }
                InitEvent::SetupFailed { stage, error } => {
                    return Err(LaunchError::Setup { stage, error }.into());
                }
                InitEvent::ExecutableChanged => {
                    return Err(ExeError::Changed(exe.identity().path.clone()).into());
                }
                InitEvent::ExecFailed { errno } => {
                    return Err(LaunchError::Exec {
                        path: exe.identity().path.clone(),
                        error: nix::errno::Errno::from_raw(errno).desc().to_string(),
                    }
                    .into());
                }
                InitEvent::Exited { code, signal } => exit = Some((code, signal)),
                InitEvent::Budget {
                    root,
                    exhausted,
                    error,
                } => {
                    disk_exhausted |= exhausted;
                    if let Some(e) = error {
                        commit_errors.push(format!("{}: {e}", root.display()));
                    }
                }
                InitEvent::Timing { stage, t_ns } => marks.push((stage, t_ns)),
                InitEvent::PoolReady | InitEvent::Emptied => {}
            }
        }
        let Some(containment) = report else {
            if timed_out || cancelled {
                return Err(LaunchError::Setup {
                    stage: "start-up".into(),
                    error: "timed out before the workload started".into(),
                }
                .into());
            }
            let how = match waited {
                Some(Ok(s)) => format!("sandbox init ended ({s}) without starting the workload"),
                _ => "sandbox init vanished".into(),
            };
            return Err(LaunchError::Setup {
                stage: "start-up".into(),
                error: how,
            }
            .into());
        };
        let (exit_code, signal) = match exit {
            Some((code, signal)) if !timed_out || code.is_some() || signal.is_some() => {
                (code, signal)
            }
            // Killed by us (timeout) or the init itself was killed: SIGKILL.
            _ => (None, Some(Signal::SIGKILL as i32)),
        };
        let mut limit_hits = Vec::new();
        if timed_out {
            limit_hits.push("timeout".into());
        }
        if oom {
            limit_hits.push("memory".into());
        }
        if pids_hit {
            limit_hits.push("pids".into());
        }
        if disk_exhausted {
            limit_hits.push("disk".into());
        }
        if stdout.truncated() {
            limit_hits.push("stdout".into());
        }
        if stderr.truncated() {
            limit_hits.push("stderr".into());
        }
        Ok(RunResult {
            exit_code,
            signal,
            timed_out,
            cancelled,
            duration_ms,
            stdout,
            stderr,
            containment,
            limit_hits,
            commit_errors,
            executable: exe.identity().clone(),
            timings: {
                marks.sort_by_key(|(_, t)| *t);
                marks
                    .into_iter()
                    .map(|(s, t)| (s, t.saturating_sub(t0) as f64 / 1e6))
                    .collect()
            },
        })
    }
}

/// One attempt of a contained launch: the launch's clock, and whether it
/// may take a pooled sandbox.
#[derive(Clone, Copy)]
struct Attempt {
    start: Instant,
    deadline: Instant,
    t0: u64,
    use_pool: bool,
}

/// Why a contained attempt ended without a result.
enum Contained {
    Launch(LaunchError),
    /// The pooled sandbox was gone when the launch was handed to it;
    /// nothing ran, so the launch may be made again cold.
    PoolHandoff,
}

impl<E: Into<LaunchError>> From<E> for Contained {
    fn from(e: E) -> Self {
        Contained::Launch(e.into())
    }
}

/// Spawns the sandbox init with its descriptors in place: the spec and
/// status pipes, and when given the executable and the control socket.
/// `piped`: the workload inherits the init's stdout and stderr (a cold
/// launch); otherwise they are `/dev/null` (a pooled sandbox gets its
/// launch's pipes later).
fn spawn_init(
    init_exe: &Path,
    spec_r: &OwnedFd,
    status_w: &OwnedFd,
    exe_fd: Option<&OwnedFd>,
    control: Option<&OwnedFd>,
    piped: bool,
) -> std::io::Result<sys::SpawnedInit> {
    let fds = [
        (spec_r.as_raw_fd(), SPEC_FD),
        (status_w.as_raw_fd(), STATUS_FD),
        (exe_fd.map_or(-1, |f| f.as_raw_fd()), EXE_FD),
        (control.map_or(-1, |f| f.as_raw_fd()), CONTROL_FD),
    ];
    let broker = std::process::id().to_string();
    sys::spawn_init(
        init_exe,
        &[crate::INIT_ARG, &broker, crate::INIT_ID],
        &fds,
        piped,
    )
}

/// Whether a launch's roots or mount sources hold, or lie inside, the
/// directory a pooled sandbox's root is mounted on.
fn overlaps_pool_dir(spec: &SandboxSpec, dir: &Path) -> bool {
    spec.writable
        .iter()
        .chain(&spec.readonly)
        .chain(spec.mounts.iter().map(|m| &m.source))
        .any(|p| dir.starts_with(p) || p.starts_with(dir))
}

/// Builds one pooled sandbox for `key` (the pool's filler thread calls
/// this): its cgroup, its init (moved into the cgroup before it forks),
/// its namespaces and the platform's part of its root.
fn build_pooled(key: &PoolKey) -> Result<Pooled, String> {
    let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let name = format!("airlock-{}-{n}", std::process::id());
    let root_dir =
        make_scratch(&name, (key.outer_uid, key.outer_gid)).map_err(|e| e.to_string())?;
    let (cgroup, base) = Cgroup::create(&name, key.cgroup_limits());
    let template = InitSpec::pool_template(
        (key.outer_uid, key.outer_gid),
        key.switch_ids,
        key.host_ids.clone(),
        key.tmp_bytes,
        root_dir.clone(),
    );
    let fail = |mut child: Option<sys::SpawnedInit>, cgroup: Cgroup, e: String| {
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        cgroup.destroy();
        let _ = std::fs::remove_dir(&root_dir);
        e
    };
    let spawned = (|| {
        let (spec_r, spec_w) = high_pipe()?;
        let (status_r, status_w) = high_pipe()?;
        let (control_ours, control_theirs) = std::os::unix::net::UnixStream::pair()?;
        let control_theirs = high_fd(OwnedFd::from(control_theirs))?;
        let child = spawn_init(
            &key.init_exe,
            &spec_r,
            &status_w,
            None,
            Some(&control_theirs),
            false,
        )?;
        Ok::<_, std::io::Error>((child, spec_w, status_r, control_ours))
    })();
    let (child, spec_w, status_r, control) = match spawned {
        Ok(s) => s,
        Err(e) => return Err(fail(None, cgroup, e.to_string())),
    };
    let mut spec_pipe = std::fs::File::from(spec_w);
    if let Err(e) = crate::pool::send_spec(&mut spec_pipe, &template) {
        return Err(fail(Some(child), cgroup, e.to_string()));
    }
    if !cgroup.is_empty() && cgroup.add(child.id()).is_err() {
        return Err(fail(
            Some(child),
            cgroup,
            "could not move the sandbox into its cgroup".into(),
        ));
    }
    if let Err(e) = spec_pipe.write_all(b"G") {
        return Err(fail(Some(child), cgroup, e.to_string()));
    }
    let mut status = BufReader::new(std::fs::File::from(status_r));
    if let Err(e) = crate::pool::await_ready(&mut status, Duration::from_secs(10)) {
        return Err(fail(Some(child), cgroup, e));
    }
    Ok(Pooled {
        child,
        cgroup,
        base,
        spec: spec_pipe,
        status,
        control,
        root_dir,
        built_at: Instant::now(),
    })
}

/// Starts the stdout and stderr drain threads.
fn spawn_drains(
    out: Option<std::fs::File>,
    err: Option<std::fs::File>,
    budget: usize,
    live: Option<crate::output::LiveSink>,
) -> (mpsc::Receiver<Captured>, mpsc::Receiver<Captured>) {
    use crate::output::{Stream, drain_live};
    let (out_tx, out_rx) = mpsc::channel();
    let (err_tx, err_rx) = mpsc::channel();
    if let Some(o) = out {
        let live = live.clone().map(|l| (Stream::Stdout, l));
        crate::helpers::spawn(move || {
            let _ = out_tx.send(drain_live(o, budget, live));
        });
    }
    if let Some(e) = err {
        let live = live.map(|l| (Stream::Stderr, l));
        crate::helpers::spawn(move || {
            let _ = err_tx.send(drain_live(e, budget, live));
        });
    }
    (out_rx, err_rx)
}

fn make_scratch(name: &str, (uid, gid): (u32, u32)) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    // The name can already exist: left by a broker that died and had this
    // process's pid (pids are reused), or planted by someone else in a
    // shared /tmp. Never reuse it (create_dir does not follow a link
    // either); take the next free name.
    let mut k = 0u32;
    let dir = loop {
        let dir = match k {
            0 => std::env::temp_dir().join(format!("{name}-scratch")),
            k => std::env::temp_dir().join(format!("{name}-{k}-scratch")),
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 100 => k += 1,
            Err(e) => return Err(e),
        }
    };
    if nix::unistd::geteuid().is_root() {
        // The fallback level drops root to the sandbox ids, which must own
        // its scratch.
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    Ok(dir)
}

/// Access grants on writable roots, undone when the launch ends (also on
/// every early return). A broker killed with SIGKILL leaves the ACL entry
/// for the sandbox uid in place; it grants nothing to anyone else.
struct Grants(Vec<crate::hostfs::AccessGrant>);

impl Drop for Grants {
    fn drop(&mut self) {
        for g in self.0.drain(..) {
            let _ = g.restore();
        }
    }
}

/// Removes the fallback scratch directories (`airlock-<pid>-<n>[-k]-scratch`
/// in the temporary directory) of brokers that are no longer running and
/// that this user may remove.
fn remove_stale_scratch() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("airlock-"))
            .and_then(|n| n.strip_suffix("-scratch"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir
            && pid != std::process::id()
            && !std::path::Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A pipe whose ends are numbered above the fixed init descriptors, so that
/// the `dup2` calls in `pre_exec` never overwrite one another's sources.
fn high_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    Ok((high_fd(r)?, high_fd(w)?))
}

fn high_fd(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > EXE_FD {
        return Ok(fd);
    }
    sys::dup_above(&fd, 10)
}

/// The development driver: no containment, but the same environment
/// allowlist, timeout, output budget and result record, and labelled
/// `uncontained` everywhere.
fn run_uncontained(
    spec: &SandboxSpec,
    env: BTreeMap<String, String>,
    exe: ResolvedExecutable,
    start: Instant,
    deadline: Instant,
    hooks: Hooks<'_>,
    before_start: Option<&mut dyn FnMut()>,
) -> Result<RunResult, LaunchError> {
    if spec.require_containment {
        let report = ContainmentReport::uncontained();
        return Err(LaunchError::ContainmentUnavailable {
            missing: report.missing(&[]),
            report: Box::new(report),
        });
    }
    let mut cmd = Command::new(&exe.identity().path);
    cmd.arg0(&spec.argv[0])
        .args(&spec.argv[1..])
        .env_clear()
        .envs(env)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    sys::set_pre_exec(&mut cmd, || {
        sys::cloexec_inherited()?;
        nix::unistd::setsid().map_err(std::io::Error::from)?;
        sys::die_with_parent()
    });
    use std::os::unix::process::CommandExt;
    exe.verify()?;
    let mut child = cmd.spawn()?;
    if let Some(f) = before_start {
        f();
    }
    let pgid = Pid::from_raw(-(i32::try_from(child.id()).unwrap_or(i32::MAX)));
    let budget = spec.output_budget;
    let out = child.stdout.take();
    let err = child.stderr.take();
    let out = out.map(|o| std::fs::File::from(OwnedFd::from(o)));
    let err = err.map(|e| std::fs::File::from(OwnedFd::from(e)));
    let (out_rx, err_rx) = spawn_drains(out, err, budget, hooks.live_output.clone());
    let (wait_tx, wait_rx) = mpsc::channel();
    crate::helpers::spawn(move || {
        let _ = wait_tx.send(child.wait());
    });
    let mut timed_out = false;
    let mut cancelled = false;
    let status = match wait_until(&wait_rx, deadline, hooks.cancel.as_deref()) {
        Ok(r) => r.ok(),
        Err(by_cancel) => {
            cancelled = by_cancel;
            timed_out = !by_cancel;
            let _ = kill(pgid, Signal::SIGTERM);
            match wait_grace(&wait_rx, spec.grace, hooks.kill.as_deref()) {
                Ok(r) => r.ok(),
                Err(_) => {
                    let _ = kill(pgid, Signal::SIGKILL);
                    wait_rx.recv().ok().and_then(Result::ok)
                }
            }
        }
    };
    let _ = kill(pgid, Signal::SIGKILL);
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let collect =
        |rx: mpsc::Receiver<Captured>| rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    let stdout = collect(out_rx);
    let stderr = collect(err_rx);
    let mut limit_hits = Vec::new();
    if timed_out {
        limit_hits.push("timeout".into());
    }
    if stdout.truncated() {
        limit_hits.push("stdout".into());
    }
    if stderr.truncated() {
        limit_hits.push("stderr".into());
    }
    let mut containment = ContainmentReport::uncontained();
    containment.push(Guarantee::new("environment_allowlist", true, ""));
    Ok(RunResult {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        cancelled,
        duration_ms,
        stdout,
        stderr,
        containment,
        limit_hits,
        commit_errors: Vec::new(),
        executable: exe.identity().clone(),
        timings: Vec::new(),
    })
}
