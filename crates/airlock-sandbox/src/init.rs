//! The sandbox init: the airlock binary re-executed with [`crate::INIT_ARG`].
//!
//! Running set-up in a fresh, single-threaded process (rather than in a
//! `pre_exec` hook of the multi-threaded broker) lets it use ordinary Rust:
//! `unshare(CLONE_NEWUSER)` refuses multi-threaded callers, and after
//! `fork` only a single-threaded parent leaves a child free to allocate.
//!
//! Process shape at the `namespaces` level:
//!
//! ```text
//! broker ── S1 (this process: unshares, maps uid/gid, waits)
//!            └─ S2 (PID 1 of the new PID namespace: builds the root, reaps)
//!                 └─ S3 (the workload: rlimits, caps, Landlock, seccomp, exec)
//! ```
//!
//! When S3 exits, S2 reports its status and exits, and the kernel kills
//! everything left in the PID namespace (SBX-4). S1 and S2 die with their
//! parent (`PR_SET_PDEATHSIG`), so the sandbox dies with the broker.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, chdir, pivot_root, setsid};

use crate::landlock_rules::{self, LandlockPaths};
use crate::report::{ContainmentReport, Driver, Guarantee, Level};
use crate::seccomp_policy::{self, SocketPolicy};
use crate::sys;
use crate::wire::{CONTROL_FD, EGRESS_LISTEN, EXE_FD, InitEvent, InitSpec, SPEC_FD, STATUS_FD};

/// Uid and gid of the workload inside its user namespace.
pub const SANDBOX_UID: u32 = 1000;

/// System runtime directories bound read-only (or recreated as the same
/// symlink when the host has merged `/usr`).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// Host `/etc` entries bound read-only: the loader cache, CA certificates,
/// alternatives links and the few name-service tables programs read.
/// Everything else in `/etc` (shadow, ssh keys, resolv.conf, …) is absent.
pub const ETC_ENTRIES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates.conf",
    "/etc/pki/tls/certs",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/perl",
    "/etc/gai.conf",
    "/etc/host.conf",
];

/// Device nodes bound from the host into the minimal `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

const NEW_ROOT: &str = "/tmp";

/// Entries of the sandbox's procfs re-mounted read-only: sysctls and the
/// kernel's trigger files.
pub const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// Entries of the sandbox's procfs replaced by an empty read-only file or
/// directory. `keys` and `key-users` list the kernel keys (descriptions)
/// and key quotas of the workload's host uid — the invoking user's, for an
/// unprivileged broker; `timer_list` and `sched_debug` name host
/// processes; the rest are raw kernel interfaces a workload has no use
/// for. The other host-wide files (`cpuinfo`, `meminfo`, `stat`, …) stay
/// readable and are listed in THREAT_MODEL.md.
pub const PROC_MASKED: &[&str] = &[
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kcore",
    "kmsg",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "acpi",
    "scsi",
];

/// Sent by the broker when the grace period is over.
pub(crate) const KILL_ALL: Signal = Signal::SIGUSR2;

static FORWARD_TO: AtomicI32 = AtomicI32::new(0);
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY-free: nix::kill is a thin wrapper over kill(2), which is
        // async-signal-safe.
        let _ = kill(
            Pid::from_raw(pid),
            Signal::try_from(sig).unwrap_or(Signal::SIGTERM),
        );
    }
}

extern "C" fn note_signal(sig: libc::c_int) {
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

/// If this process was started as the sandbox init, runs it and exits;
/// otherwise returns immediately. Call first thing in `main`.
pub fn main_if_requested() {
    let first = std::env::args_os().nth(1);
    if first.as_deref() == Some(std::ffi::OsStr::new(crate::INIT_ID_ARG)) {
        // Asked by a broker choosing its init (`init_binary`): which build is this, and may
        // this binary make a user namespace here (an AppArmor profile names binaries by path)?
        // This process is single-threaded and ends at once, so the namespace goes with it.
        let userns = if unshare(CloneFlags::CLONE_NEWUSER).is_ok() {
            "userns"
        } else {
            "no-userns"
        };
        // The answer is this process's protocol with the asking broker, on stdout.
        let answer = format!("{} {userns}\n", crate::INIT_ID);
        let code = i32::from(std::io::stdout().write_all(answer.as_bytes()).is_err());
        std::process::exit(code);
    }
    if first.as_deref() != Some(std::ffi::OsStr::new(crate::INIT_ARG)) {
        return;
    }
    let code = run();
    // Flushes nothing of importance; exit without running destructors of
    // the broker's world (there is none in this process).
    std::process::exit(code);
}

/// Writes events to the broker.
struct Status(File);

impl Status {
    fn mark(&mut self, on: bool, stage: &str) {
        if on {
            self.send(&InitEvent::Timing {
                stage: stage.to_string(),
                t_ns: crate::wire::monotonic_ns(),
            });
        }
    }

    fn send(&mut self, e: &InitEvent) {
        self.send_all(std::slice::from_ref(e));
    }

    /// Several events in one write: the broker wakes once for all of them.
    fn send_all(&mut self, events: &[InitEvent]) {
        let mut lines = Vec::new();
        for e in events {
            if let Ok(line) = serde_json::to_vec(e) {
                lines.extend_from_slice(&line);
                lines.push(b'\n');
            }
        }
        let _ = self.0.write_all(&lines);
    }
    fn fail(&mut self, stage: &str, error: impl std::fmt::Display) -> i32 {
        self.send(&InitEvent::SetupFailed {
            stage: stage.to_string(),
            error: error.to_string(),
        });
        crate::EXIT_SANDBOX_FAILED
    }
}

fn run() -> i32 {
    // Die with the broker even if it is killed with SIGKILL. The broker
    // starts this process with posix_spawn, which runs none of its code in
    // the child, so the signal is set here, and the broker's pid (the next
    // argument) says whether the broker died before it was.
    let broker = std::env::args()
        .nth(2)
        .and_then(|p| p.parse::<i32>().ok())
        .map(nix::unistd::Pid::from_raw);
    match broker {
        Some(pid) => {
            if sys::die_with_parent_again(pid).is_err() {
                return crate::EXIT_SANDBOX_FAILED;
            }
        }
        None => return crate::EXIT_SANDBOX_FAILED,
    }
    let Some(status_fd) = sys::inherited_fd(STATUS_FD) else {
        return crate::EXIT_SANDBOX_FAILED;
    };
    let mut status = Status(File::from(status_fd));
    // The broker names its build: an init from another one (a binary replaced beside a running
    // broker) may read the spec differently, so it runs nothing.
    let id = std::env::args().nth(3).unwrap_or_default();
    if id != crate::INIT_ID {
        return status.fail(
            "init_id",
            format!(
                "this sandbox init is build {}, the broker is {id:?}",
                crate::INIT_ID
            ),
        );
    }
    // The spec is one JSON line; the same pipe later carries one "go" byte
    // once the broker has put this process into its cgroup, so cgroup
    // attachment overlaps with namespace set-up.
    let Some(spec_fd) = sys::inherited_fd(SPEC_FD) else {
        return status.fail("spec", "missing spec descriptor");
    };
    let mut spec_pipe = std::io::BufReader::new(File::from(spec_fd));
    let spec: InitSpec = {
        use std::io::BufRead;
        let mut line = String::new();
        let read = (&mut spec_pipe).take(16 << 20).read_line(&mut line);
        match read
            .map_err(|e| e.to_string())
            .and_then(|_| serde_json::from_str(&line).map_err(|e| e.to_string()))
        {
            Ok(s) => s,
            Err(e) => return status.fail("spec", e),
        }
    };
    let go = Go(spec_pipe);
    if spec.pooled {
        // A pooled init gets its executable with its launch, later.
        return match spec.level {
            Level::Namespaces => namespaces(spec, status, None, go),
            _ => status.fail("pool", "only the namespaces level is pooled"),
        };
    }
    let Some(exe) = sys::inherited_fd(EXE_FD) else {
        return status.fail("spec", "missing executable descriptor");
    };
    match spec.level {
        Level::Namespaces => namespaces(spec, status, Some(exe), go),
        _ => fallback(spec, status, exe, Vec::new(), go),
    }
}

// ---------------------------------------------------------------- namespaces

/// The broker's "you are in your cgroup" signal: must arrive before the
/// first fork, so that every descendant is born inside the cgroup.
struct Go(std::io::BufReader<File>);

impl Go {
    /// Waits for the byte; gives the pipe back (a pooled sandbox's launch
    /// spec comes on it later).
    fn wait(mut self) -> Result<std::io::BufReader<File>, String> {
        let mut b = [0u8; 1];
        match self.0.read(&mut b) {
            Ok(1) if b[0] == b'G' => Ok(self.0),
            Ok(_) => Err("the broker withdrew the launch".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn namespaces(spec: InitSpec, mut status: Status, exe: Option<OwnedFd>, go: Go) -> i32 {
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    status.mark(spec.timings, "init_started");
    // A root broker's init opens every host source now, as root, as a
    // detached mount tree (those survive the change of mount namespace),
    // and then becomes the sandbox ids. The user namespace created below
    // therefore belongs to the sandbox uid: the workload's host uid is
    // never 0, and the kernel's per-user counts (inotify instances,
    // message queues, pending signals) are charged to the sandbox uid,
    // not to root.
    // The broker, while this process is alive to read it (its death
    // kills this process until the change of ids below clears that).
    let broker = nix::unistd::getppid();
    let pre_opened = if spec.switch_ids {
        // A pooled sandbox has no roots yet: the broker opens them for its
        // launch.
        let opened = if spec.pooled {
            open_system(Opener::Detached).map(|system| (system, Vec::new()))
        } else {
            open_sources(&spec, Opener::Detached)
        };
        let sources = match opened {
            Ok(s) => s,
            Err((stage, e)) => return status.fail(stage, e),
        };
        if let Err(e) = become_ids(spec.outer_uid, spec.outer_gid) {
            return status.fail("switch to the sandbox ids", e);
        }
        // The uid change cleared the parent-death signal: without it, a
        // broker killed with SIGKILL would leave this sandbox running.
        if let Err(e) = sys::die_with_parent_again(broker) {
            return status.fail("die with the broker", e);
        }
        Some(sources)
    } else {
        None
    };
    if let Err(e) = unshare(flags) {
        if spec.allow_fallback
            && let Some(exe) = exe
        {
            let why = Guarantee::new(
                "user_namespace",
                false,
                format!("unavailable ({e}); fell back to landlock + seccomp"),
            );
            return fallback(spec, status, exe, vec![why], go);
        }
        return status.fail("unshare", format!("user namespaces unavailable: {e}"));
    }
    let maps = fs::write("/proc/self/setgroups", "deny")
        .and_then(|()| {
            fs::write(
                "/proc/self/gid_map",
                format!("{SANDBOX_UID} {} 1", spec.outer_gid),
            )
        })
        .and_then(|()| {
            fs::write(
                "/proc/self/uid_map",
                format!("{SANDBOX_UID} {} 1", spec.outer_uid),
            )
        });
    if let Err(e) = maps {
        return status.fail("uid_map", e);
    }
    status.mark(spec.timings, "namespaces_created");
    // Nothing in the sandbox may read this process's memory or descriptors
    // (set only now: a non-dumpable process cannot write its own uid_map).
    let _ = nix::sys::prctl::set_dumpable(false);

    // The seccomp program is compiled once here, before any fork, and the
    // capability count read.
    let seccomp = seccomp_policy::compile(SocketPolicy::UnixAndLoopbackInet, libc::EPERM as u32);
    let _ = sys::cap_last_cap();
    let spec_pipe = match go.wait() {
        Ok(pipe) => pipe,
        Err(e) => return status.fail("cgroup attach", e),
    };

    match sys::fork_single_threaded() {
        Err(e) => status.fail("fork", e),
        Ok(ForkResult::Parent { child }) => {
            FORWARD_TO.store(child.as_raw(), Ordering::SeqCst);
            for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                sys::on_signal(sig, forward_signal);
            }
            drop(spec_pipe);
            drop(exe);
            quiet_stdio();
            while let Err(nix::errno::Errno::EINTR) = waitpid(child, None) {}
            // PID 1 is gone, so is every process of its namespace: the
            // broker may report the launch while this process tears the
            // namespaces down.
            status.send(&InitEvent::Emptied);
            0
        }
        Ok(ForkResult::Child) => {
            let _ = sys::die_with_parent();
            let code = match exe {
                Some(exe) => {
                    drop(spec_pipe);
                    pid_one(&spec, &mut status, exe, seccomp, pre_opened)
                }
                None => pooled_pid_one(&spec, &mut status, seccomp, pre_opened, spec_pipe),
            };
            // Exiting PID 1 tears the namespace down: every descendant dies.
            std::process::exit(code);
        }
    }
}

/// S2: PID 1 of the new namespace.
fn pid_one(
    spec: &InitSpec,
    status: &mut Status,
    exe: OwnedFd,
    seccomp: Result<seccomp_policy::CompiledPolicy, seccomp_policy::SeccompError>,
    pre_opened: Option<Sources>,
) -> i32 {
    status.mark(spec.timings, "pid1_started");
    let built = match build_root(spec, pre_opened) {
        Ok(b) => b,
        Err((stage, e)) => return status.fail(stage, e),
    };
    status.mark(spec.timings, "root_built");
    let _ = nix::unistd::sethostname("airlock");
    if let Err(e) = sys::loopback_up() {
        return status.fail("loopback", e);
    }
    let report = containment_report(spec, built.proc_mounted, built.user_limits, &built.budgets);
    start_workload(spec, status, exe, None, report, built.budgets, seccomp)
}

/// S2 of a pooled sandbox: builds the platform's part of the root, says it
/// is ready, then takes exactly one launch from the spec pipe and ends with
/// it. It never reads a second spec: a pooled sandbox is used once.
fn pooled_pid_one(
    template: &InitSpec,
    status: &mut Status,
    seccomp: Result<seccomp_policy::CompiledPolicy, seccomp_policy::SeccompError>,
    pre_opened: Option<Sources>,
    mut spec_pipe: std::io::BufReader<File>,
) -> i32 {
    let Some(root) = template.scratch.clone() else {
        return status.fail("pool", "no directory for the pooled root");
    };
    // Slave, not private, while the sandbox waits: mounts the host makes
    // in the meantime still reach this copy, so a launch's roots resolve
    // against the host as it is at launch time (made private below).
    let slave = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    );
    if let Err(e) = slave {
        return status.fail("make mounts slave", e);
    }
    let system = match pre_opened {
        Some((system, _)) => Ok(system),
        None => open_system(Opener::Path),
    };
    let built = match system.and_then(|s| build_system(template, &root, s)) {
        Ok(b) => b,
        Err((stage, e)) => return status.fail(stage, e),
    };
    let _ = nix::unistd::sethostname("airlock");
    if let Err(e) = sys::loopback_up() {
        return status.fail("loopback", e);
    }
    status.send(&InitEvent::PoolReady);

    // The one launch.
    let spec: InitSpec = {
        use std::io::BufRead;
        let mut line = String::new();
        match (&mut spec_pipe).take(16 << 20).read_line(&mut line) {
            // The broker dropped this sandbox unused.
            Ok(0) => return 0,
            Ok(_) => match serde_json::from_str(&line) {
                Ok(s) => s,
                Err(e) => return status.fail("spec", e),
            },
            Err(e) => return status.fail("spec", e),
        }
    };
    drop(spec_pipe);
    status.mark(spec.timings, "pool_launch_received");
    if let Err(e) = pool_compatible(template, &spec) {
        return status.fail("pool", e);
    }
    let Some(control) = sys::inherited_fd(CONTROL_FD) else {
        return status.fail("pool", "missing control socket");
    };
    let take = || match sys::recv_fd(control.as_raw_fd()) {
        Ok(Some(fd)) => Ok(fd),
        Ok(None) => Err(("pool", "the broker closed the launch".to_string())),
        Err(e) => Err(("pool", e.to_string())),
    };
    let received = take().and_then(|exe| Ok((exe, take()?, take()?)));
    let (exe, out, err) = match received {
        Ok(fds) => fds,
        Err((stage, e)) => return status.fail(stage, e),
    };
    let roots = match &spec.sent_roots {
        Some(sent) => sent
            .iter()
            .map(|(target, writable)| {
                let fd = take()?;
                received_source(fd, target, *writable)
            })
            .collect::<SetupResult<Vec<Source>>>(),
        None => open_roots(&spec, Opener::Path),
    };
    let private = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    );
    if let Err(e) = private {
        return status.fail("make mounts private", e);
    }
    let budgets = match roots.and_then(|r| finish_root(&spec, &root, r)) {
        Ok(b) => b,
        Err((stage, e)) => return status.fail(stage, e),
    };
    status.mark(spec.timings, "root_built");
    let report = containment_report(&spec, built.proc_mounted, built.user_limits, &budgets);
    if spec.egress {
        // The listener goes back on the same socket, which stays open as
        // CONTROL_FD for the hand-over below.
        let _ = std::os::fd::IntoRawFd::into_raw_fd(control);
    } else {
        drop(control);
    }
    start_workload(
        &spec,
        status,
        exe,
        Some((out, err)),
        report,
        budgets,
        seccomp,
    )
}

/// The fields a pooled sandbox was built for must be the launch's.
fn pool_compatible(template: &InitSpec, spec: &InitSpec) -> Result<(), String> {
    let same = spec.pooled
        && spec.level == template.level
        && spec.outer_uid == template.outer_uid
        && spec.outer_gid == template.outer_gid
        && spec.switch_ids == template.switch_ids
        && spec.host_ids == template.host_ids
        && spec.tmp_bytes == template.tmp_bytes
        && spec.scratch == template.scratch;
    if same {
        Ok(())
    } else {
        Err("the launch does not match the pooled sandbox (ids, level or /tmp size)".into())
    }
}

/// A root the broker opened as a detached tree and sent.
fn received_source(fd: OwnedFd, target: &Path, writable: bool) -> SetupResult<Source> {
    let meta = stage("stat bind source", nix::sys::stat::fstat(&fd))?;
    Ok(Source {
        fd,
        target: target.to_path_buf(),
        writable,
        is_dir: meta.st_mode & libc::S_IFMT == libc::S_IFDIR,
        detached: true,
    })
}

/// The containment report of a built sandbox, before the workload's own
/// guarantees (rlimits, capabilities, Landlock, seccomp) are added.
fn containment_report(
    spec: &InitSpec,
    proc_mounted: bool,
    user_limits: Guarantee,
    budgets: &[crate::budget::Budgeted],
) -> ContainmentReport {
    let mut report = ContainmentReport {
        driver: Driver::Namespaces,
        level: Level::Namespaces,
        guarantees: spec.base_guarantees.clone(),
    };
    let pid_isolated = nix::unistd::getpid().as_raw() == 1;
    for (name, ok, detail) in [
        (
            "user_namespace",
            true,
            format!(
                "uid {SANDBOX_UID} inside = host uid {}, gid {SANDBOX_UID} = host gid {}",
                spec.outer_uid, spec.outer_gid
            ),
        ),
        ("mount_namespace", true, String::new()),
        ("pid_namespace", pid_isolated, String::new()),
        ("network_namespace", true, "loopback only".to_string()),
        ("ipc_namespace", true, String::new()),
        ("uts_namespace", true, String::new()),
        ("cgroup_namespace", true, String::new()),
    ] {
        report.push(Guarantee::new(name, ok, detail));
    }
    report.push(host_uid_guarantee(spec));
    report.push(user_limits);
    report.push(Guarantee::new(
        "private_root",
        true,
        "tmpfs root, read-only system binds",
    ));
    report.push(Guarantee::new(
        "fresh_proc",
        proc_mounted,
        if proc_mounted {
            ""
        } else {
            "procfs could not be mounted; /proc is empty"
        },
    ));
    if let Some(bytes) = spec.disk_budget {
        report.push(Guarantee::new(
            "disk_budget",
            true,
            format!(
                "{bytes} bytes and {} inodes of new data per writable root ({} budgeted): a private overlay on a capped tmpfs, committed to the root when the workload ends",
                crate::budget::inodes_for(bytes),
                budgets.len()
            ),
        ));
    }
    report
}

/// PID 1 with its root built: hands over the egress listener, forks the
/// workload (with `stdio` as its stdout and stderr when given: a pooled
/// sandbox gets its launch's pipes), reaps until it ends and reports.
fn start_workload(
    spec: &InitSpec,
    status: &mut Status,
    exe: OwnedFd,
    stdio: Option<(OwnedFd, OwnedFd)>,
    mut report: ContainmentReport,
    budgets: Vec<crate::budget::Budgeted>,
    seccomp: Result<seccomp_policy::CompiledPolicy, seccomp_policy::SeccompError>,
) -> i32 {
    if spec.egress {
        // NET-1: the listener lives in this empty network namespace, so it
        // is reachable from the sandbox and from nowhere else; the trusted
        // proxy holds the only other reference and identifies the sandbox
        // by it.
        let Some(control) = sys::inherited_fd(CONTROL_FD) else {
            return status.fail("egress", "missing control socket");
        };
        let listener = match std::net::TcpListener::bind(EGRESS_LISTEN) {
            Ok(l) => l,
            Err(e) => return status.fail("egress listener", e),
        };
        if let Err(e) = sys::send_fd(control.as_raw_fd(), listener.as_raw_fd()) {
            return status.fail("egress handover", e);
        }
        drop(listener);
        drop(control);
        report.push(Guarantee::new(
            "egress_proxy",
            true,
            format!(
                "only path out: per-sandbox listener {EGRESS_LISTEN} served by the trusted proxy"
            ),
        ));
    }

    let landlock = LandlockPaths {
        read_exec: readable_roots(spec),
        read_only: vec![
            PathBuf::from("/proc"),
            PathBuf::from(crate::spec::SECRETS_DIR),
        ],
        list_only: vec![PathBuf::from("/")],
        read_write: spec
            .writable
            .iter()
            .cloned()
            .chain(
                spec.mounts
                    .iter()
                    .filter(|m| m.writable)
                    .map(|m| m.target.clone()),
            )
            .chain([PathBuf::from("/tmp"), PathBuf::from("/dev/shm")])
            .collect(),
        devices: DEVICES.iter().map(|d| Path::new("/dev").join(d)).collect(),
        deny_tcp: false,
    };

    // The workload shares PID 1's memory until it execs (no copy of PID 1's
    // pages or page tables); everything it captures is borrowed, so what
    // PID 1 owns is still PID 1's to close when the workload has exec'd.
    let started = sys::spawn_shared(|| {
        if let Some((out, err)) = &stdio
            && (sys::dup_onto(out.as_raw_fd(), 1).is_err()
                || sys::dup_onto(err.as_raw_fd(), 2).is_err())
        {
            return status.fail("stdio", "could not take the launch's pipes");
        }
        workload(
            spec,
            status,
            &exe,
            report,
            &landlock,
            seccomp.as_ref().ok(),
            SocketPolicy::UnixAndLoopbackInet,
        )
    });
    match started {
        Err(e) => status.fail("fork", e),
        Ok(child) => {
            // Back here once the workload has exec'd (or ended).
            status.mark(spec.timings, "workload_execed");
            drop(exe);
            drop(stdio);
            quiet_stdio();
            for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                sys::on_signal(sig, note_signal);
            }
            let exit = reap_until(child, || {
                let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
                if sig != 0 {
                    // kill(-1) from PID 1 reaches every other process of
                    // this namespace and nothing outside it.
                    let _ = kill(
                        Pid::from_raw(-1),
                        Signal::try_from(sig).unwrap_or(Signal::SIGTERM),
                    );
                }
            });
            status.mark(spec.timings, "workload_exited");
            // Everything else in this namespace dies now (SBX-4), before
            // anything is reported: nothing of the workload may run while
            // its writes are read back. Once `waitpid` finds no child,
            // this process is the namespace's last (PID 1 reaps every
            // orphan of its namespace, and nobody outside joins it).
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            let emptied = loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::__WALL)) {
                    Err(nix::errno::Errno::ECHILD) => break true,
                    Err(nix::errno::Errno::EINTR) | Ok(_) => {}
                    Err(_) => break false,
                }
            };
            let mut events: Vec<InitEvent> = budgets
                .iter()
                .map(|b| InitEvent::Budget {
                    root: b.path.clone(),
                    exhausted: crate::budget::exhausted(b),
                    error: crate::budget::commit(b).err(),
                })
                .collect();
            events.push(exit);
            if emptied {
                events.push(InitEvent::Emptied);
            }
            status.send_all(&events);
            0
        }
    }
}

/// Reaps children until `main` exits; returns its exit event.
fn reap_until(main: Pid, mut on_interrupt: impl FnMut()) -> InitEvent {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == main => {
                return InitEvent::Exited {
                    code: Some(code),
                    signal: None,
                };
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == main => {
                return InitEvent::Exited {
                    code: None,
                    signal: Some(sig as i32),
                };
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => on_interrupt(),
            Err(_) => {
                return InitEvent::Exited {
                    code: None,
                    signal: None,
                };
            }
        }
    }
}

/// Points stdin/stdout/stderr at /dev/null so that only the workload holds
/// the broker's pipes.
fn quiet_stdio() {
    if let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            let _ = sys::dup_onto(null.as_raw_fd(), fd);
        }
    }
}

fn readable_roots(spec: &InitSpec) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    v.push(PathBuf::from("/etc"));
    v.extend(spec.readonly.iter().cloned());
    v.extend(
        spec.mounts
            .iter()
            .filter(|m| !m.writable)
            .map(|m| m.target.clone()),
    );
    if !v
        .iter()
        .chain(&spec.writable)
        .any(|r| spec.exe.path.starts_with(r))
    {
        v.push(spec.exe.path.clone());
    }
    v
}

type SetupResult<T> = Result<T, (&'static str, String)>;

fn stage<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>) -> SetupResult<T> {
    r.map_err(|e| (name, e.to_string()))
}

/// A bind source, opened before the new root hides the host's paths.
pub(crate) struct Source {
    pub(crate) fd: OwnedFd,
    pub(crate) target: PathBuf,
    pub(crate) writable: bool,
    is_dir: bool,
    /// `fd` is a detached mount tree (attach with `move_mount`), not a
    /// path to bind.
    detached: bool,
}

/// How bind sources are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    /// `O_PATH` descriptors, bound later through `/proc/self/fd` (by the
    /// sandbox's PID 1, in its own mount namespace).
    Path,
    /// Detached copies (`open_tree(OPEN_TREE_CLONE)`), made by a root init
    /// before it gives up root: they carry root's access to the host
    /// (a writable root under a 0700 data directory, say) into a mount
    /// namespace where nobody is root.
    Detached,
}

/// The platform's host sources of the new root: the same for every
/// sandbox.
pub(crate) struct SystemSources {
    system: Vec<Source>,
    symlinks: Vec<(PathBuf, PathBuf)>,
    devices: Vec<Source>,
}

/// Every host source of the new root: the platform's and the launch's
/// roots and mount sources (parents first).
pub(crate) type Sources = (SystemSources, Vec<Source>);

fn finish_source(fd: OwnedFd, target: &Path, writable: bool, how: Opener) -> SetupResult<Source> {
    let meta = stage("stat bind source", nix::sys::stat::fstat(&fd))?;
    let is_dir = meta.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let (fd, detached) = match how {
        Opener::Path => (fd, false),
        Opener::Detached => (
            stage("clone bind source", sys::open_tree_clone(fd.as_fd()))?,
            true,
        ),
    };
    Ok(Source {
        fd,
        target: target.to_path_buf(),
        writable,
        is_dir,
        detached,
    })
}

/// Opens a platform source (system directories, `/etc` entries, devices,
/// the executable); `None` when it does not exist on this host.
fn open_source(
    path: &Path,
    target: &Path,
    writable: bool,
    how: Opener,
) -> SetupResult<Option<Source>> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    if fs::metadata(path).is_err() {
        return Ok(None);
    }
    let fd = stage(
        "open bind source",
        open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()),
    )?;
    finish_source(fd, target, writable, how).map(Some)
}

/// Opens a caller-chosen root (or a mount source) without following any
/// symbolic link, from `/` or — when it lies inside a root opened before
/// it — beneath that root's descriptor, and checks that it is still the
/// file that was parsed. A link or another directory swapped in since (by
/// another sandbox that can write a parent, say) refuses the launch.
fn open_root(
    path: &Path,
    target: &Path,
    writable: bool,
    how: Opener,
    spec: &InitSpec,
    opened: &mut Vec<(PathBuf, OwnedFd)>,
) -> SetupResult<Source> {
    use nix::fcntl::OFlag;
    let changed = |e: String| {
        (
            "open root",
            format!(
                "{}: {e} (changed since the spec was parsed?)",
                path.display()
            ),
        )
    };
    let parent = opened
        .iter()
        .filter(|(p, _)| path.starts_with(p) && path != p)
        .max_by_key(|(p, _)| p.components().count());
    let fd = match parent {
        Some((p, pfd)) => {
            let rel = path.strip_prefix(p).unwrap_or(path);
            crate::hostfs::open_beneath(pfd.as_fd(), rel, OFlag::O_PATH)
                .map_err(|e| changed(e.to_string()))?
        }
        None => {
            crate::hostfs::open_nofollow(path, OFlag::O_PATH).map_err(|e| changed(e.to_string()))?
        }
    };
    let st = stage("stat root", nix::sys::stat::fstat(&fd))?;
    if let Some((_, id)) = spec.root_ids.iter().find(|(p, _)| p == path)
        && *id != crate::hostfs::FileId::of(&st)
    {
        return Err(changed("another file is at this path now".into()));
    }
    let keep = stage("open root", sys::dup_above(&fd, 10))?;
    opened.push((path.to_path_buf(), keep));
    finish_source(fd, target, writable, how)
}

/// Opens every host source of the new root while the host tree is visible.
fn open_sources(spec: &InitSpec, how: Opener) -> SetupResult<Sources> {
    Ok((open_system(how)?, open_roots(spec, how)?))
}

/// Opens the platform's sources: system directories, `/etc` entries and
/// devices.
fn open_system(how: Opener) -> SetupResult<SystemSources> {
    let mut system = Vec::new();
    let mut symlinks = Vec::new();
    for dir in SYSTEM_DIRS {
        let p = Path::new(dir);
        match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = fs::read_link(p) {
                    symlinks.push((p.to_path_buf(), t));
                }
            }
            Ok(_) => system.extend(open_source(p, p, false, how)?),
            Err(_) => {}
        }
    }
    for e in ETC_ENTRIES {
        system.extend(open_source(Path::new(e), Path::new(e), false, how)?);
    }
    let mut devices = Vec::new();
    for d in DEVICES {
        let p = Path::new("/dev").join(d);
        devices.extend(open_source(&p, &p, true, how)?);
    }
    Ok(SystemSources {
        system,
        symlinks,
        devices,
    })
}

/// Opens a launch's roots and mount sources (and the executable when no
/// root holds it), parents first. A root broker opens them as detached
/// trees; for a pooled sandbox it does so itself, in the broker.
pub(crate) fn open_roots(spec: &InitSpec, how: Opener) -> SetupResult<Vec<Source>> {
    // Roots and mount sources, shallowest host path first, so that one
    // inside another is opened beneath it.
    let mut wanted: Vec<(&Path, &Path, bool)> = Vec::new();
    wanted.extend(
        spec.writable
            .iter()
            .map(|w| (w.as_path(), w.as_path(), true)),
    );
    wanted.extend(
        spec.readonly
            .iter()
            .map(|r| (r.as_path(), r.as_path(), false)),
    );
    wanted.extend(
        spec.mounts
            .iter()
            .map(|m| (m.source.as_path(), m.target.as_path(), m.writable)),
    );
    wanted.sort_by_key(|(p, _, _)| p.components().count());
    let mut opened = Vec::new();
    let mut roots = Vec::new();
    for (path, target, writable) in wanted {
        roots.push(open_root(path, target, writable, how, spec, &mut opened)?);
    }
    let covered = SYSTEM_DIRS
        .iter()
        .map(Path::new)
        .chain(spec.writable.iter().map(PathBuf::as_path))
        .chain(spec.readonly.iter().map(PathBuf::as_path))
        .any(|r| spec.exe.path.starts_with(r));
    if !covered {
        roots.extend(open_source(&spec.exe.path, &spec.exe.path, false, how)?);
    }
    // Parents before children.
    roots.sort_by_key(|s| s.target.components().count());
    Ok(roots)
}

/// Gives up root for the sandbox ids (root broker only). Without
/// `SECBIT_KEEP_CAPS` the change clears every capability.
fn become_ids(uid: u32, gid: u32) -> Result<(), String> {
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    if uid == 0 || gid == 0 {
        return Err("refusing to map the sandbox to host id 0".into());
    }
    let g = Gid::from_raw(gid);
    let u = Uid::from_raw(uid);
    setgroups(&[])
        .and_then(|()| setresgid(g, g, g))
        .and_then(|()| setresuid(u, u, u))
        .map_err(|e| e.to_string())?;
    let ids = nix::unistd::getresuid().map_err(|e| e.to_string())?;
    if [ids.real, ids.effective, ids.saved]
        .iter()
        .any(|i| i.as_raw() != uid)
    {
        return Err("the uid change did not take".into());
    }
    // The uid change made this process non-dumpable, which hands its
    // /proc/self files to root; the maps below must be written by this
    // process itself. It becomes non-dumpable again right after them.
    nix::sys::prctl::set_dumpable(true).map_err(|e| e.to_string())
}

/// The `unprivileged_host_uid` guarantee: which host uid the workload is.
fn host_uid_guarantee(spec: &InitSpec) -> Guarantee {
    Guarantee::new(
        "unprivileged_host_uid",
        spec.outer_uid != 0 && spec.outer_gid != 0,
        format!(
            "host uid {}, gid {} ({})",
            spec.outer_uid, spec.outer_gid, spec.host_ids
        ),
    )
}

/// What building the root established besides the mounts.
struct Built {
    proc_mounted: bool,
    user_limits: Guarantee,
    budgets: Vec<crate::budget::Budgeted>,
}

/// What building the platform's part of the root established.
struct SystemBuilt {
    proc_mounted: bool,
    user_limits: Guarantee,
}

/// Builds the new root on a tmpfs and pivots into it.
fn build_root(spec: &InitSpec, pre_opened: Option<Sources>) -> SetupResult<Built> {
    stage(
        "make mounts private",
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        ),
    )?;

    // 1. Every bind source, opened while the host tree is still visible
    // (by the root init before it gave up root, or now).
    let (system, roots) = match pre_opened {
        Some(s) => s,
        None => open_sources(spec, Opener::Path)?,
    };
    let root = Path::new(NEW_ROOT);
    let SystemBuilt {
        proc_mounted,
        user_limits,
    } = build_system(spec, root, system)?;
    let budgets = finish_root(spec, root, roots)?;
    Ok(Built {
        proc_mounted,
        user_limits,
        budgets,
    })
}

/// The platform's part of the new root at `root`: the tmpfs, system binds,
/// `/etc`, `/proc`, `/dev` and `/tmp`. Nothing of a launch.
fn build_system(spec: &InitSpec, root: &Path, system: SystemSources) -> SetupResult<SystemBuilt> {
    let SystemSources {
        system: sources,
        symlinks,
        devices,
    } = system;
    stage(
        "mount root tmpfs",
        mount(
            Some("tmpfs"),
            root,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(tmpfs_options("0755", 16 << 20).as_str()),
        ),
    )?;
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    for (link, target) in &symlinks {
        stage("symlink", symlink(target, under(link)))?;
    }
    for s in &sources {
        bind(s, &under(&s.target))?;
    }
    stage("mkdir", mkdirs(&under(Path::new("/etc"))))?;
    write_etc(root)?;

    // /proc
    let proc_dir = under(Path::new("/proc"));
    stage("mkdir", mkdirs(&proc_dir))?;
    let proc_mounted = mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .is_ok();
    let mut user_limits = Guarantee::new("per_user_limits", false, "no procfs");
    if proc_mounted {
        // Before /proc/sys turns read-only: this user namespace's own caps
        // on the kernel's per-user counts.
        user_limits = cap_user_namespace(spec, &proc_dir);
        // Host information keyed by user (key descriptions and quotas) or
        // naming host processes (timers, scheduler and latency tables),
        // and the raw kernel interfaces: an empty read-only file or
        // directory in their place.
        for entry in PROC_MASKED {
            let p = proc_dir.join(entry);
            let Ok(meta) = fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stage(
                    "mask /proc entry",
                    mount(
                        Some("tmpfs"),
                        &p,
                        Some("tmpfs"),
                        MsFlags::MS_RDONLY
                            | MsFlags::MS_NOSUID
                            | MsFlags::MS_NODEV
                            | MsFlags::MS_NOEXEC,
                        Some("size=4k,nr_inodes=1,mode=0555"),
                    ),
                )?;
            } else {
                stage(
                    "mask /proc entry",
                    mount(
                        Some("/dev/null"),
                        &p,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    ),
                )?;
                stage(
                    "mask /proc entry",
                    mount(
                        None::<&str>,
                        &p,
                        None::<&str>,
                        MsFlags::MS_BIND
                            | MsFlags::MS_REMOUNT
                            | MsFlags::MS_RDONLY
                            | MsFlags::MS_NOSUID
                            | MsFlags::MS_NOEXEC,
                        None::<&str>,
                    ),
                )?;
            }
        }
        // Kernel tunables and triggers stay read-only whatever the
        // workload's host uid.
        for entry in PROC_READ_ONLY {
            let p = proc_dir.join(entry);
            if p.exists() {
                let src = p.display().to_string();
                let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
                stage(
                    "bind /proc entry",
                    mount(Some(src.as_str()), &p, None::<&str>, bind, None::<&str>),
                )?;
                let ro = MsFlags::MS_BIND
                    | MsFlags::MS_REMOUNT
                    | MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                stage(
                    "read-only /proc entry",
                    mount(None::<&str>, &p, None::<&str>, ro, None::<&str>),
                )?;
            }
        }
    }

    // /dev
    let dev = under(Path::new("/dev"));
    stage("mkdir", mkdirs(&dev))?;
    stage(
        "mount /dev",
        mount(
            Some("tmpfs"),
            &dev,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some(tmpfs_options("0755", 64 << 10).as_str()),
        ),
    )?;
    for s in &devices {
        bind(s, &under(&s.target))?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        stage("symlink", symlink(target, dev.join(name)))?;
    }
    let shm = dev.join("shm");
    stage("mkdir", mkdirs(&shm))?;
    stage(
        "mount /dev/shm",
        mount(
            Some("tmpfs"),
            &shm,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(tmpfs_options("1777", SHM_BYTES).as_str()),
        ),
    )?;

    // /tmp: private, size-capped.
    let tmp = under(Path::new("/tmp"));
    stage("mkdir", mkdirs(&tmp))?;
    stage(
        "mount /tmp",
        mount(
            Some("tmpfs"),
            &tmp,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(tmpfs_options("1777", spec.tmp_bytes).as_str()),
        ),
    )?;
    Ok(SystemBuilt {
        proc_mounted,
        user_limits,
    })
}

/// A launch's part of the root at `root` (its roots, budgets and secrets),
/// then the switch into it.
fn finish_root(
    spec: &InitSpec,
    root: &Path,
    roots: Vec<Source>,
) -> SetupResult<Vec<crate::budget::Budgeted>> {
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    // Writable and read-only roots, parents first. A budgeted writable
    // root gets its overlay right after its bind, before any root nested
    // in it is bound on top.
    let mut budgets = Vec::new();
    for s in &roots {
        let target = under(&s.target);
        bind(s, &target)?;
        let is_root = spec.writable.contains(&s.target);
        if let Some(bytes) = spec
            .disk_budget
            .filter(|_| s.writable && s.is_dir && is_root)
        {
            budgets.push(crate::budget::mount_over(
                root,
                &target,
                budgets.len(),
                bytes,
            )?);
        }
    }

    // KEY-5: declared secrets as read-only files on a private tmpfs; the
    // bytes came through the spec pipe and never touch a disk.
    if !spec.secret_files.is_empty() {
        let dir = under(Path::new(crate::spec::SECRETS_DIR));
        stage("mkdir", mkdirs(&dir))?;
        stage(
            "mount /run/secrets",
            mount(
                Some("tmpfs"),
                &dir,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(tmpfs_options("0500", 4 << 20).as_str()),
            ),
        )?;
        for f in &spec.secret_files {
            let p = dir.join(&f.name);
            stage("write secret", fs::write(&p, f.value.expose()))?;
            stage(
                "chmod secret",
                fs::set_permissions(&p, fs::Permissions::from_mode(0o400)),
            )?;
        }
        let ro = MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC;
        stage(
            "read-only /run/secrets",
            mount(
                None::<&str>,
                &dir,
                None::<&str>,
                ro,
                Some(tmpfs_options("0500", 4 << 20).as_str()),
            ),
        )?;
    }

    // 3. Enter it: pivot_root(".", ".") stacks the old root on top of the
    // new one; detaching it leaves only the new root.
    stage("chdir new root", chdir(root))?;
    stage("pivot_root", pivot_root(".", "."))?;
    stage("detach old root", umount2(".", MntFlags::MNT_DETACH))?;
    stage("chdir /", chdir("/"))?;
    // Read-only /dev and root (the binds and tmpfs mounts below keep their own flags).
    let _ = mount(
        None::<&str>,
        "/dev",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(tmpfs_options("0755", 64 << 10).as_str()),
    );
    stage(
        "remount root read-only",
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(tmpfs_options("0755", 16 << 20).as_str()),
        ),
    )?;
    Ok(budgets)
}

/// Size of the private `/dev/shm`.
pub const SHM_BYTES: u64 = 64 << 20;

/// Options of one of the sandbox's tmpfs mounts. `size=` bounds the pages
/// of its files but not their inodes and dentries (about 1 KiB of kernel
/// memory each, counted by no rlimit), so the inode count is capped too:
/// one per 4 KiB page of the size, which keeps that kernel memory within
/// about a quarter of the size.
fn tmpfs_options(mode: &str, bytes: u64) -> String {
    format!(
        "mode={mode},size={bytes},nr_inodes={}",
        (bytes / 4096).max(64)
    )
}

/// Caps of this user namespace's share of the kernel's per-user counts.
///
/// Those counts are kept per user namespace and charged up the chain to
/// the namespace's owner: the sandbox uid for a root broker, the invoking
/// user otherwise. These caps bound what one sandbox can take of its
/// owner's allowance (so that a workload cannot use every inotify instance
/// of the user who launched it), and forbid new namespaces of every kind
/// inside (seccomp refuses them already; this holds even without it).
fn cap_user_namespace(spec: &InitSpec, proc_dir: &Path) -> Guarantee {
    let dir = proc_dir.join("sys/user");
    let read = |name: &str| -> Option<u64> {
        fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
    };
    let mut applied = Vec::new();
    let mut failed = Vec::new();
    for (name, cap) in USER_NAMESPACE_CAPS {
        let Some(current) = read(name) else { continue };
        let value = match cap {
            UserCap::Zero => 0,
            UserCap::AtMost(n) => current.min(*n),
        };
        match fs::write(dir.join(name), value.to_string()) {
            Ok(()) => applied.push(format!("{name}={value}")),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    let owner = if spec.switch_ids {
        format!("charged to the sandbox uid {}", spec.outer_uid)
    } else {
        format!("charged to the invoking uid {}", spec.outer_uid)
    };
    Guarantee::new(
        "per_user_limits",
        failed.is_empty() && !applied.is_empty(),
        if failed.is_empty() {
            format!("{owner}; this sandbox's share: {}", applied.join(" "))
        } else {
            format!("{owner}; could not cap: {}", failed.join(", "))
        },
    )
}

#[derive(Debug, Clone, Copy)]
enum UserCap {
    Zero,
    AtMost(u64),
}

/// `/proc/sys/user` limits set inside every sandbox's user namespace.
const USER_NAMESPACE_CAPS: &[(&str, UserCap)] = &[
    ("max_inotify_instances", UserCap::AtMost(16)),
    ("max_inotify_watches", UserCap::AtMost(65_536)),
    ("max_fanotify_groups", UserCap::Zero),
    ("max_fanotify_marks", UserCap::Zero),
    ("max_user_namespaces", UserCap::Zero),
    ("max_mnt_namespaces", UserCap::Zero),
    ("max_pid_namespaces", UserCap::Zero),
    ("max_net_namespaces", UserCap::Zero),
    ("max_ipc_namespaces", UserCap::Zero),
    ("max_uts_namespaces", UserCap::Zero),
    ("max_cgroup_namespaces", UserCap::Zero),
    ("max_time_namespaces", UserCap::Zero),
];

fn mkdirs(p: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o755).create(p)
}

/// Bind-mounts an opened source at `target` (creating the mount point) and
/// makes it read-only unless writable. Flags the kernel locked on the
/// source mount (nosuid, nodev, noexec, atime) are kept.
fn bind(s: &Source, target: &Path) -> SetupResult<()> {
    if s.is_dir {
        stage("mkdir", mkdirs(target))?;
    } else {
        if let Some(parent) = target.parent() {
            stage("mkdir", mkdirs(parent))?;
        }
        if !target.exists() {
            stage("create mount point", File::create(target))?;
        }
    }
    if s.detached {
        stage("attach bind", sys::move_mount_to(s.fd.as_fd(), target))?;
    } else {
        let src = format!("/proc/self/fd/{}", s.fd.as_raw_fd());
        stage(
            "bind mount",
            mount(
                Some(src.as_str()),
                target,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            ),
        )?;
    }
    let locked = stage("statvfs", nix::sys::statvfs::statvfs(target))?.flags();
    use nix::sys::statvfs::FsFlags;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if !s.writable {
        flags |= MsFlags::MS_RDONLY;
    }
    for (f, m) in [
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if locked.contains(f) {
            flags |= m;
        }
    }
    if !s.target.starts_with("/dev") || !s.writable {
        stage(
            "remount bind",
            mount(None::<&str>, target, None::<&str>, flags, None::<&str>),
        )?;
    } else {
        // Device nodes: keep them usable (no MS_NODEV), but nosuid/noexec.
        let dev_flags =
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
        let _ = mount(None::<&str>, target, None::<&str>, dev_flags, None::<&str>);
    }
    Ok(())
}

/// Synthesised name-service files: the sandbox sees its own identity, not
/// the host's accounts.
fn write_etc(root: &Path) -> SetupResult<()> {
    let etc = root.join("etc");
    let files = [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\nairlock:x:{SANDBOX_UID}:{SANDBOX_UID}:airlock sandbox:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            format!("root:x:0:\nairlock:x:{SANDBOX_UID}:\nnogroup:x:65534:\n"),
        ),
        (
            "hosts",
            "127.0.0.1 localhost airlock\n::1 localhost ip6-localhost\n".to_string(),
        ),
        ("hostname", "airlock\n".to_string()),
    ];
    for (name, content) in files {
        let p = etc.join(name);
        stage("write /etc", fs::write(&p, content))?;
        stage(
            "chmod /etc",
            fs::set_permissions(&p, fs::Permissions::from_mode(0o644)),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------- workload

/// S3 (or the fallback's only child): lock down and exec. Returns an exit
/// code only when the launch is refused or exec fails.
fn workload(
    spec: &InitSpec,
    status: &mut Status,
    exe: &OwnedFd,
    mut report: ContainmentReport,
    landlock: &LandlockPaths,
    seccomp: Option<&seccomp_policy::CompiledPolicy>,
    sockets: SocketPolicy,
) -> i32 {
    let _ = sys::die_with_parent();
    sys::reset_signals();
    let _ = setsid();
    if let Err(e) = chdir(&spec.cwd) {
        return status.fail("chdir", format!("{}: {e}", spec.cwd.display()));
    }

    // rlimits
    let r = &spec.rlimits;
    let mut limits = vec![
        (Resource::RLIMIT_NOFILE, r.nofile, "nofile"),
        (Resource::RLIMIT_NPROC, r.nproc, "nproc"),
        (Resource::RLIMIT_FSIZE, r.fsize, "fsize"),
        (Resource::RLIMIT_CORE, 0, "core"),
        (Resource::RLIMIT_CPU, r.cpu_secs, "cpu"),
    ];
    if let Some(a) = r.address_space {
        limits.push((Resource::RLIMIT_AS, a, "as"));
    }
    let mut rl_ok = true;
    let mut applied = Vec::new();
    for (res, v, name) in limits {
        match setrlimit(res, v, v) {
            Ok(()) => applied.push(format!("{name}={v}")),
            Err(_) => rl_ok = false,
        }
    }
    report.push(Guarantee::new("rlimits", rl_ok, applied.join(" ")));
    if let Some(a) = r.address_space {
        // RLIMIT_AS is not a memory limit: it caps each process's address
        // space, and pages that are never mapped — a memfd or tmpfs file
        // filled with write(2), pipe and socket buffers, inodes and other
        // kernel objects — are not counted at all (a workload held
        // 320 MiB in a memfd under --memory 64). So the memory guarantee
        // is reported as not in force, and --require-containment --memory
        // refuses; the address-space cap is reported for what it is.
        report.push(Guarantee::new(
            "address_space_limit",
            rl_ok,
            format!("{a} bytes per process via RLIMIT_AS"),
        ));
        report.push(Guarantee::new(
            "memory_limit",
            false,
            "no writable cgroup memory controller: RLIMIT_AS caps each process's address space only (memfd and tmpfs pages written with write(2), pipe and socket buffers and kernel objects are not counted); run airlock in a delegated cgroup (README: cgroup delegation)",
        ));
    }

    if report.level == Level::LandlockSeccomp && nix::unistd::geteuid().is_root() {
        // No user namespace to make "root" harmless: become the sandbox
        // ids (never 0; see crate::subid). The uid change clears every
        // capability; the bounding set goes first.
        let (uid, gid) = (spec.outer_uid, spec.outer_gid);
        let parent = nix::unistd::getppid();
        let caps = uid != 0
            && gid != 0
            && sys::drop_all_capabilities_then(|| {
                let g = nix::unistd::Gid::from_raw(gid);
                let u = nix::unistd::Uid::from_raw(uid);
                nix::unistd::setgroups(&[])
                    .and_then(|()| nix::unistd::setresgid(g, g, g))
                    .and_then(|()| nix::unistd::setresuid(u, u, u))
                    .is_ok()
            });
        if !caps || nix::unistd::geteuid().is_root() {
            return status.fail("fallback", "could not give up root for the sandbox ids");
        }
        // The change of ids cleared the parent-death signal.
        if let Err(e) = sys::die_with_parent_again(parent) {
            return status.fail("die with the init", e);
        }
        report.push(Guarantee::new(
            "capabilities_dropped",
            caps,
            format!("root dropped to uid {uid}"),
        ));
    }
    if report.level == Level::LandlockSeccomp {
        let uid = nix::unistd::geteuid();
        report.push(Guarantee::new(
            "non_root_uid",
            !uid.is_root(),
            format!("host uid {uid}"),
        ));
    }
    if report.level == Level::Namespaces {
        let caps = sys::drop_all_capabilities();
        report.push(Guarantee::new(
            "capabilities_dropped",
            caps,
            "bounding, ambient, effective, permitted, inheritable",
        ));
        report.push(Guarantee::new(
            "non_root_uid",
            nix::unistd::getuid().as_raw() == SANDBOX_UID && spec.outer_uid != 0,
            format!("uid {SANDBOX_UID} inside, host uid {}", spec.outer_uid),
        ));
    }
    let nnp = nix::sys::prctl::set_no_new_privs().is_ok();
    report.push(Guarantee::new("no_new_privs", nnp, ""));

    status.mark(spec.timings, "workload_forked");
    for g in landlock_rules::apply(landlock) {
        report.push(g);
    }
    status.mark(spec.timings, "landlocked");
    if report.level == Level::LandlockSeccomp && !report.in_force("signal_scoping") {
        // Without a PID namespace, only Landlock's signal scoping stops the
        // workload from signalling the broker and every other process of
        // the same user. Refuse rather than run that exposed.
        return status.fail(
            "fallback",
            "the landlock fallback needs Landlock ABI 6 signal scoping, which this kernel lacks; enable user namespaces (see README)",
        );
    }

    let seccomp_ok = match seccomp {
        Some(p) => match seccomp_policy::install(p) {
            Ok(()) => Guarantee::new(
                "seccomp",
                true,
                format!(
                    "{} deny rules, sockets: {}",
                    seccomp_policy::DENY_RULES.len(),
                    match sockets {
                        SocketPolicy::UnixAndLoopbackInet => "unix + inet in empty netns",
                        SocketPolicy::NoSockets => "unix only",
                    }
                ),
            ),
            Err(e) => Guarantee::new("seccomp", false, e),
        },
        None => Guarantee::new("seccomp", false, "no policy for this architecture"),
    };
    let setid = seccomp_ok.in_force;
    report.push(seccomp_ok);
    report.push(Guarantee::new(
        "no_setid_files",
        setid,
        "chmod, fchmod, fchmodat, fchmodat2, open, openat, creat, mknod and mknodat refuse modes with S_ISUID or S_ISGID (seccomp); openat2 answers ENOSYS; mkdir cannot set them",
    ));
    status.mark(spec.timings, "locked_down");
    report.push(Guarantee::new("dies_with_parent", true, "PR_SET_PDEATHSIG"));

    // The executable must still be the one that was resolved and hashed.
    let exe_ok = fs::File::from(match exe.try_clone() {
        Ok(f) => f,
        Err(e) => return status.fail("executable", e),
    })
    .metadata()
    .ok()
    .is_some_and(|m| crate::exe::same_identity(&spec.exe, &m))
        && fs::metadata(&spec.exe.path).is_ok_and(|m| crate::exe::same_identity(&spec.exe, &m));
    if !exe_ok {
        status.send(&InitEvent::ExecutableChanged);
        return crate::EXIT_SANDBOX_FAILED;
    }

    if spec.require_containment {
        let extra: Vec<&str> = spec.required_extra.iter().map(String::as_str).collect();
        let missing = report.missing(&extra);
        if !missing.is_empty() {
            status.send(&InitEvent::Blocked { missing, report });
            return crate::EXIT_SANDBOX_FAILED;
        }
    }

    let argv: Vec<CString> = spec
        .argv
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let envp: Vec<CString> = spec
        .env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let by_fd = spec.exec_by_fd && !sys::is_script(exe.as_raw_fd());
    status.send(&InitEvent::Ready { report });
    sys::cloexec_from_3();
    let errno = sys::exec(exe.as_raw_fd(), &spec.exe.path, &argv, &envp, by_fd);
    status.send(&InitEvent::ExecFailed {
        errno: errno as i32,
    });
    127
}

// ---------------------------------------------------------------- fallback

/// The fallback rung: no namespaces. Landlock is the filesystem boundary,
/// seccomp refuses every network socket, and this process becomes a child
/// subreaper so that it can kill every descendant when the workload ends.
fn fallback(
    spec: InitSpec,
    mut status: Status,
    exe: OwnedFd,
    notes: Vec<Guarantee>,
    go: Go,
) -> i32 {
    if let Err(e) = go.wait() {
        return status.fail("cgroup attach", e);
    }
    if !spec.secret_files.is_empty() {
        return status.fail(
            "secrets",
            "secret files need the namespaces level (user namespaces are unavailable on this host)",
        );
    }
    if !spec.mounts.is_empty() {
        return status.fail("mounts", "mounts at /airlock need the namespaces level (user namespaces are unavailable on this host)");
    }
    if spec.egress {
        // Without a network namespace there is no private loopback for a
        // listener, and every socket is refused here: fail closed.
        return status.fail(
            "egress",
            "egress needs the namespaces level (user namespaces are unavailable on this host)",
        );
    }
    let mut report = ContainmentReport {
        driver: Driver::Landlock,
        level: Level::LandlockSeccomp,
        guarantees: spec.base_guarantees.clone(),
    };
    for g in notes {
        report.push(g);
    }
    for name in [
        "mount_namespace",
        "pid_namespace",
        "network_namespace",
        "ipc_namespace",
        "uts_namespace",
        "private_root",
    ] {
        report.push(Guarantee::new(name, false, "fallback level"));
    }
    if report.get("user_namespace").is_none() {
        report.push(Guarantee::new("user_namespace", false, "fallback level"));
    }
    report.push(host_uid_guarantee(&spec));
    if spec.disk_budget.is_some() {
        report.push(Guarantee::new(
            "disk_budget",
            false,
            "the fallback level has no mount namespace for the budget's overlay",
        ));
    }
    report.push(Guarantee::new(
        "network_denied",
        true,
        "seccomp: no socket(); landlock: no TCP bind/connect",
    ));
    let _ = nix::sys::prctl::set_dumpable(false);
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let seccomp = seccomp_policy::compile(SocketPolicy::NoSockets, libc::EPERM as u32);
    let mut read_write: Vec<PathBuf> = spec.writable.clone();
    read_write.extend(spec.scratch.clone());
    let landlock = LandlockPaths {
        read_exec: {
            let mut v: Vec<PathBuf> = SYSTEM_DIRS
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect();
            v.extend(ETC_ENTRIES.iter().map(PathBuf::from).filter(|p| p.exists()));
            v.extend(spec.readonly.iter().cloned());
            if !v
                .iter()
                .chain(&spec.writable)
                .any(|r| spec.exe.path.starts_with(r))
            {
                v.push(spec.exe.path.clone());
            }
            v
        },
        read_only: Vec::new(),
        list_only: Vec::new(),
        read_write,
        devices: DEVICES.iter().map(|d| Path::new("/dev").join(d)).collect(),
        deny_tcp: true,
    };
    match sys::fork_single_threaded() {
        Err(e) => status.fail("fork", e),
        Ok(ForkResult::Child) => {
            let code = workload(
                &spec,
                &mut status,
                &exe,
                report,
                &landlock,
                seccomp.as_ref().ok(),
                SocketPolicy::NoSockets,
            );
            std::process::exit(code)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(exe);
            quiet_stdio();
            FORWARD_TO.store(child.as_raw(), Ordering::SeqCst);
            for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                sys::on_signal(sig, forward_signal);
            }
            // The broker's "grace is over": without a PID namespace or a
            // cgroup, only this subreaper can find every descendant, so it
            // does the killing itself rather than being killed first.
            sys::on_signal(KILL_ALL, note_signal);
            let exit = reap_until(child, || {
                if PENDING_SIGNAL.swap(0, Ordering::SeqCst) == KILL_ALL as i32 {
                    let _ = kill(child, Signal::SIGKILL);
                    kill_descendants();
                }
            });
            kill_descendants();
            status.send(&exit);
            0
        }
    }
}

/// Kills and reaps every remaining descendant (they were re-parented to us
/// as subreaper).
fn kill_descendants() {
    let me = std::process::id();
    for _ in 0..1000 {
        let children =
            fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
        let pids: Vec<i32> = children
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for p in &pids {
            let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
        }
        while let Ok(s) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if s == WaitStatus::StillAlive {
                break;
            }
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PID 1 of a pooled sandbox refuses a launch whose ids, level or
    /// `/tmp` size differ from what it was built with (the broker's key
    /// check is the first line; this is the second).
    #[test]
    fn a_pooled_sandbox_refuses_a_launch_it_was_not_built_for() {
        let template = InitSpec::pool_template(
            (2_000_000_000, 2_000_000_000),
            true,
            "range".into(),
            64 << 20,
            PathBuf::from("/tmp/airlock-1-1-scratch"),
        );
        let launch = |f: &dyn Fn(&mut InitSpec)| {
            let mut s = template.clone();
            s.argv = vec!["/bin/true".into()];
            f(&mut s);
            pool_compatible(&template, &s)
        };
        // Control: the launch it was built for is taken.
        assert!(launch(&|_| {}).is_ok());
        assert!(launch(&|s| s.outer_uid += 1).is_err());
        assert!(launch(&|s| s.outer_gid += 1).is_err());
        assert!(launch(&|s| s.switch_ids = false).is_err());
        assert!(launch(&|s| s.tmp_bytes *= 2).is_err());
        assert!(launch(&|s| s.level = Level::LandlockSeccomp).is_err());
        assert!(launch(&|s| s.pooled = false).is_err());
        assert!(launch(&|s| s.scratch = Some(PathBuf::from("/tmp/x"))).is_err());
    }
}
