//! The broker and the Linux sandbox drivers (SBX-1 … SBX-7).
//!
//! This crate is the one place in airlock that creates processes for
//! workloads. Everything untrusted — script workers, agent tool commands,
//! `airlock sandbox exec` — goes through [`Broker::run`], which takes a
//! parsed [`SandboxSpec`] and returns one [`RunResult`].
//!
//! Drivers, strongest first (SBX-6):
//! - `namespaces`: user, mount, PID, network, IPC, UTS and cgroup namespaces,
//!   a tmpfs root with read-only system binds, Landlock, seccomp, rlimits and
//!   cgroup limits. Entered by re-executing the airlock binary as a small
//!   init process (see [`init`]), so that all set-up runs single-threaded.
//! - `landlock`: the fallback when user namespaces are unavailable: Landlock
//!   and seccomp with every network socket denied; no PID or mount isolation.
//! - `uncontained`: development only, labelled as such in every report.
//!
//! What this crate must not do: print, read configuration files, know about
//! runs, workers or HTTP. It never decides policy beyond what a spec says.

pub mod broker;
mod budget;
pub mod cgroup;
pub mod env;
pub mod exe;
mod helpers;
mod hostfs;
pub mod init;
pub mod init_binary;
pub mod landlock_rules;
pub mod output;
mod pool;
pub mod report;
pub mod seccomp_policy;
pub mod spec;
pub mod subid;
mod sys;
mod wire;

pub use broker::{Broker, Hooks, LaunchError, RunResult};
pub use exe::{DigestCache, DigestSource, ExecutableIdentity, ResolvedExecutable};
pub use pool::PoolStats;
pub use report::{ContainmentReport, Driver, Guarantee, Level};
pub use spec::{
    DriverChoice, Limits, Mount, SECRETS_DIR, SandboxRequest, SandboxSpec, SecretBytes, SecretFile,
    SpecError,
};
pub use subid::{IdRange, SandboxIds, SubidChoice, SubidError};
pub use sys::retain_freed_heap;

/// Large blocks (1 MiB and up) go back to the system when freed, instead
/// of staying in glibc's per-thread arenas (the `sys` module has why):
/// the binary calls this first thing. It lives here because this crate
/// holds the only `unsafe` code of the workspace.
pub fn return_large_blocks_to_the_system() -> bool {
    sys::fixed_mmap_threshold(1 << 20)
}

/// One malloc arena for the whole process unless `MALLOC_ARENA_MAX` says
/// otherwise (the `sys` module has why): the binary calls this first
/// thing, beside [`return_large_blocks_to_the_system`].
pub fn one_malloc_arena() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    sys::limit_arenas(1)
}

/// The hidden first argument that turns the airlock binary into the sandbox
/// init process. The binary's `main` must call [`init::main_if_requested`]
/// before doing anything else (in particular before starting threads).
pub const INIT_ARG: &str = "__airlock-sandbox-init";

/// The hidden first argument that makes a sandbox init print [`INIT_ID`] and exit.
pub const INIT_ID_ARG: &str = "__airlock-sandbox-init-id";

/// This build's sandbox init protocol: the crate's version and a hash of its sources
/// (`build.rs`). The broker passes it to every init it starts, and an init from another build
/// refuses to run.
pub const INIT_ID: &str = env!("AIRLOCK_SANDBOX_INIT_ID");

/// The small sandbox init binary's file name, looked for beside the running binary
/// ([`init_binary`]).
pub const INIT_BINARY: &str = "airlock-sandbox-init";

/// Exit status used when the sandbox itself could not start (SBX-7).
pub const EXIT_SANDBOX_FAILED: i32 = 125;
