//! The private protocol between the broker and the sandbox init process.
//!
//! The broker writes one [`InitSpec`] as JSON to descriptor [`SPEC_FD`] and
//! closes it; the init process and the workload child report
//! [`InitEvent`]s, one JSON line each, on [`STATUS_FD`]. That descriptor is
//! close-on-exec, so the workload never holds it, and the processes that do
//! hold it are non-dumpable, so the workload cannot reach it through
//! `/proc/<pid>/fd` either.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::exe::ExecutableIdentity;
use crate::report::{ContainmentReport, Guarantee, Level};

pub(crate) const SPEC_FD: i32 = 3;
pub(crate) const STATUS_FD: i32 = 4;
pub(crate) const EXE_FD: i32 = 5;
/// A Unix socket on which PID 1 hands the egress listener to the broker.
pub(crate) const CONTROL_FD: i32 = 6;

/// Where the per-sandbox egress listener is bound inside the sandbox's own
/// network namespace.
pub const EGRESS_LISTEN: std::net::SocketAddrV4 =
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 3128);

/// Resource limits applied with `setrlimit` inside.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rlimits {
    pub nofile: u64,
    pub nproc: u64,
    pub fsize: u64,
    pub cpu_secs: u64,
    /// Address-space cap, used only when no cgroup memory limit could be set.
    pub address_space: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InitSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub exe: ExecutableIdentity,
    /// Execute through the hashed descriptor (ELF); scripts go by path
    /// because their interpreter must be able to open them.
    pub exec_by_fd: bool,
    pub level: Level,
    /// Whether the init may drop to the fallback level on its own when user
    /// namespaces are unavailable (driver `auto`).
    pub allow_fallback: bool,
    pub writable: Vec<PathBuf>,
    pub readonly: Vec<PathBuf>,
    pub mounts: Vec<crate::spec::Mount>,
    #[serde(default)]
    pub secret_files: Vec<crate::spec::SecretFile>,
    /// The host uid and gid the workload's uid 1000 maps to: the invoking
    /// user's, or for a root broker the sandbox ids from [`crate::subid`].
    pub outer_uid: u32,
    pub outer_gid: u32,
    /// The init starts as root and must become `outer_uid`/`outer_gid`
    /// after it has opened its bind sources and before it creates the user
    /// namespace (which then belongs to that uid).
    #[serde(default)]
    pub switch_ids: bool,
    /// Says where the host ids came from (for the containment report).
    #[serde(default)]
    pub host_ids: String,
    /// Which file each root and mount source was at parse time.
    #[serde(default)]
    pub root_ids: Vec<(PathBuf, crate::hostfs::FileId)>,
    pub rlimits: Rlimits,
    pub tmp_bytes: u64,
    /// Byte budget of each writable root (see [`crate::budget`]).
    #[serde(default)]
    pub disk_budget: Option<u64>,
    /// Private scratch directory on the host for the fallback level.
    pub scratch: Option<PathBuf>,
    pub require_containment: bool,
    pub required_extra: Vec<String>,
    /// Guarantees established by the broker (cgroup limits).
    pub base_guarantees: Vec<Guarantee>,
    /// Create the egress listener and hand it over on [`CONTROL_FD`].
    pub egress: bool,
    /// Report set-up stage timings (`InitEvent::Timing`).
    #[serde(default)]
    pub timings: bool,
    /// A pooled sandbox (see [`crate::pool`]): the spec sent at spawn is
    /// the pool's template; the launch's own spec follows on the same pipe
    /// once the sandbox is built, with its descriptors on [`CONTROL_FD`].
    #[serde(default)]
    pub pooled: bool,
    /// Pooled launches of a root broker: the roots and mount sources the
    /// broker opened as detached trees, in the order their descriptors
    /// follow on [`CONTROL_FD`] (target, writable). `None`: PID 1 opens
    /// them itself.
    #[serde(default)]
    pub sent_roots: Option<Vec<(PathBuf, bool)>>,
}

impl InitSpec {
    /// The spec a pooled sandbox is built from: the fields of the pool's
    /// key, nothing of any launch.
    pub(crate) fn pool_template(
        (outer_uid, outer_gid): (u32, u32),
        switch_ids: bool,
        host_ids: String,
        tmp_bytes: u64,
        root_dir: PathBuf,
    ) -> Self {
        InitSpec {
            argv: Vec::new(),
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            exe: ExecutableIdentity::default(),
            exec_by_fd: true,
            level: Level::Namespaces,
            allow_fallback: false,
            writable: Vec::new(),
            readonly: Vec::new(),
            mounts: Vec::new(),
            secret_files: Vec::new(),
            outer_uid,
            outer_gid,
            switch_ids,
            host_ids,
            root_ids: Vec::new(),
            rlimits: Rlimits {
                nofile: 0,
                nproc: 0,
                fsize: 0,
                cpu_secs: 0,
                address_space: None,
            },
            tmp_bytes,
            disk_budget: None,
            scratch: Some(root_dir),
            require_containment: false,
            required_extra: Vec::new(),
            base_guarantees: Vec::new(),
            egress: false,
            timings: false,
            pooled: true,
            sent_roots: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum InitEvent {
    /// Everything is in place; the next step is exec.
    Ready {
        report: ContainmentReport,
    },
    /// `--require-containment` could not be met; nothing was executed.
    Blocked {
        missing: Vec<String>,
        report: ContainmentReport,
    },
    SetupFailed {
        stage: String,
        error: String,
    },
    ExecFailed {
        errno: i32,
    },
    ExecutableChanged,
    /// A set-up stage finished at `t_ns` (CLOCK_MONOTONIC).
    Timing {
        stage: String,
        t_ns: u64,
    },
    /// A budgeted writable root after the workload ended: whether its
    /// budget was used up, and why its commit failed, if it did.
    Budget {
        root: PathBuf,
        exhausted: bool,
        error: Option<String>,
    },
    /// A pooled sandbox is built and waits for its one launch.
    PoolReady,
    /// PID 1 has exited, and with it every process of the sandbox's PID
    /// namespace (the kernel reaps them all before PID 1 is gone). What
    /// follows is the tear-down of the namespaces, which no workload
    /// process survives to see.
    Emptied,
    /// The workload's main process ended.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process).
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}
