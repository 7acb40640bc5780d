//! Thin wrappers over the system calls that have no safe binding we can
//! use. This module and the tests of `seccomp_policy` are the only places
//! with `unsafe` in airlock; each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// `fork()` for a process that is known to be single-threaded (the sandbox
/// init), where the child may run arbitrary Rust code.
pub(crate) fn fork_single_threaded() -> Result<nix::unistd::ForkResult, Errno> {
    // SAFETY: only called from the sandbox init process, which is
    // single-threaded (it is a fresh exec of the airlock binary that starts
    // no threads), so the child inherits no locks held by other threads.
    unsafe { nix::unistd::fork() }
}

/// Runs `child` in a new process that shares this one's memory until it
/// execs or ends (`clone(CLONE_VM | CLONE_VFORK)`, the way `posix_spawn`
/// starts a program); this process waits in the call until then. The
/// child's answer is its exit code when it returns instead of exec'ing; a
/// panic exits with `crate::EXIT_SANDBOX_FAILED`.
///
/// Against `fork`, no page table is copied and no page is copied on write,
/// in the child or afterwards in this process: the sandbox's PID 1 starts
/// every workload this way (BENCHMARKS.md, "The workload started without
/// a copy of PID 1").
///
/// The caller must be single-threaded (the sandbox init), as for
/// [`fork_single_threaded`]. `child` may allocate and run Rust code: this
/// process is stopped meanwhile, so nothing else uses the memory it
/// changes. It must not change state this process relies on afterwards,
/// other than leaking: descriptors, signal dispositions, credentials,
/// Landlock and seccomp are per process and stay the child's own (no
/// `CLONE_FILES`, `CLONE_SIGHAND` or `CLONE_THREAD`). Changes of ids must go
/// through the raw system calls, not libc's wrappers, which would signal
/// this process's threads (the workload's start does not change ids in the
/// namespaces level, the only one that starts it this way).
pub(crate) fn spawn_shared<F: FnOnce() -> i32>(child: F) -> Result<nix::unistd::Pid, Errno> {
    // The child's stack: its own mapping, with a guard page below it so
    // that an overflow faults rather than writing into other memory.
    const STACK: usize = 1 << 20;
    const GUARD: usize = 4096;
    // SAFETY: a fresh anonymous mapping that nothing else refers to.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    // SAFETY: the lowest page of the mapping made above.
    if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
        let e = Errno::last();
        // SAFETY: the mapping made above, used by nobody.
        unsafe { libc::munmap(base, STACK) };
        return Err(e);
    }

    extern "C" fn run<F: FnOnce() -> i32>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `Option<F>` below, alive in the frame of
        // `spawn_shared`, which cannot return before this child has exec'd
        // or ended (CLONE_VFORK).
        let slot = unsafe { &mut *arg.cast::<Option<F>>() };
        let code = match slot.take() {
            Some(f) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .unwrap_or(crate::EXIT_SANDBOX_FAILED),
            None => crate::EXIT_SANDBOX_FAILED,
        };
        // SAFETY: `_exit` ends this process without running exit handlers
        // or flushing buffers, which live in the memory it shares.
        unsafe { libc::_exit(code) }
    }

    let mut slot = Some(child);
    // The stack is the mapping above (it grows down from its end, 16-byte
    // aligned as a page boundary); `run::<F>` gets a pointer to `slot`,
    // which outlives the child's use of it (see `run`).
    // SAFETY: the caller is single-threaded, so the shared memory has no
    // other user while this thread is stopped in the call.
    let pid = unsafe {
        libc::clone(
            run::<F>,
            base.cast::<u8>().add(STACK).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut slot).cast(),
        )
    };
    let result = if pid < 0 {
        Err(Errno::last())
    } else {
        Ok(nix::unistd::Pid::from_raw(pid))
    };
    // SAFETY: the child has exec'd or ended (CLONE_VFORK), so it no longer
    // runs on this stack; nothing else refers to it.
    unsafe { libc::munmap(base, STACK) };
    result
}

/// Takes ownership of a descriptor number inherited from the broker.
pub(crate) fn inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: F_GETFD only inspects the descriptor table.
    let valid = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    if !valid {
        return None;
    }
    set_cloexec(fd);
    // SAFETY: the broker placed this descriptor at this number for us and
    // nothing else in this process owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Duplicates `fd` to the lowest free number at or above `min`, close-on-exec.
pub(crate) fn dup_above(fd: &OwnedFd, min: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor that nothing else owns.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh, valid descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

pub(crate) fn set_cloexec(fd: RawFd) {
    // SAFETY: F_SETFD on a descriptor number; failure is harmless.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

/// Marks every descriptor from 3 up close-on-exec.
pub(crate) fn cloexec_from_3() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r != 0 {
        for fd in 3..1024 {
            set_cloexec(fd);
        }
    }
}

/// Duplicates `src` onto `dst` (clearing close-on-exec on `dst`). Used in
/// the broker's `pre_exec`, so it must stay async-signal-safe.
pub(crate) fn dup_onto(src: RawFd, dst: RawFd) -> std::io::Result<()> {
    if src == dst {
        // SAFETY: clearing FD_CLOEXEC on a descriptor we own.
        let r = unsafe { libc::fcntl(dst, libc::F_SETFD, 0) };
        return if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        };
    }
    // SAFETY: dup2 is async-signal-safe and only touches the fd table.
    if unsafe { libc::dup2(src, dst) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the parent-death signal to SIGKILL (async-signal-safe).
pub(crate) fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) with a constant signal.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the parent-death signal again after a change of ids, which clears
/// it (prctl(2)), and checks that `parent` — read before the change — is
/// still the parent: if it died in between, the signal will never come,
/// and the caller must end itself.
pub(crate) fn die_with_parent_again(parent: nix::unistd::Pid) -> std::io::Result<()> {
    die_with_parent()?;
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::other("the parent is gone"));
    }
    Ok(())
}

/// A process started by [`spawn_init`]: the parts of `std::process::Child`
/// the broker uses.
#[derive(Debug)]
pub(crate) struct SpawnedInit {
    pid: libc::pid_t,
    ended: Option<std::process::ExitStatus>,
    /// The read ends of its stdout and stderr, when they were piped.
    pub stdout: Option<std::fs::File>,
    pub stderr: Option<std::fs::File>,
}

impl SpawnedInit {
    pub(crate) fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// SIGKILL, unless it has already been reaped (its pid may be reused).
    pub(crate) fn kill(&mut self) -> std::io::Result<()> {
        if self.ended.is_some() {
            return Ok(());
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(std::io::Error::from)
    }

    pub(crate) fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.reap(0)?
            .ok_or_else(|| std::io::Error::other("waitpid returned without a status"))
    }

    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    fn reap(&mut self, flags: libc::c_int) -> std::io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(s) = self.ended {
            return Ok(Some(s));
        }
        let mut raw = 0;
        loop {
            // SAFETY: waitpid on our own child, into a local.
            let r = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
            if r == self.pid {
                let s = std::process::ExitStatus::from_raw(raw);
                self.ended = Some(s);
                return Ok(Some(s));
            }
            if r == 0 {
                return Ok(None);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Starts the sandbox init with `posix_spawn` (glibc starts it with
/// `clone(CLONE_VM | CLONE_VFORK)`): the broker, a process with many threads
/// and megabytes of memory, is not copied for it, where `fork` copied its
/// page tables on every launch and every pool refill (BENCHMARKS.md, "The
/// workload started without a copy of PID 1").
///
/// The init gets exactly: stdin from `/dev/null`; stdout and stderr piped
/// back (`piped`) or `/dev/null`; each `(source, target)` of `fds` duplicated
/// onto its target, and the target closed where the source is `-1`; nothing
/// else (every descriptor above the highest target is closed, whatever the
/// broker inherited); an empty environment, `/` as its directory, every
/// signal at its default disposition and none blocked. It sets its own
/// parent-death signal first thing (`args` carries the broker's pid to
/// check against), since `posix_spawn` runs no code of ours in the child.
pub(crate) fn spawn_init(
    exe: &std::path::Path,
    args: &[&str],
    fds: &[(RawFd, RawFd)],
    piped: bool,
) -> std::io::Result<SpawnedInit> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(exe.as_os_str().as_bytes())?;
    let mut argv_owned = vec![path.clone()];
    for a in args {
        argv_owned.push(CString::new(*a)?);
    }
    let mut argv: Vec<*mut libc::c_char> =
        argv_owned.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let pipes = if piped {
        let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Some(((out_r, out_w), (err_r, err_w)))
    } else {
        None
    };
    let highest = fds.iter().map(|(_, t)| *t).max().unwrap_or(2).max(2);

    let check = |r: libc::c_int| -> std::io::Result<()> {
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(r))
        }
    };
    // SAFETY: all-zero is the state these two C structs are initialised
    // from; each is initialised right below before any other use and
    // destroyed on every path out (the guards).
    let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    // SAFETY: as for `actions`.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    // SAFETY: initialises the struct we own.
    check(unsafe { libc::posix_spawn_file_actions_init(&mut actions) })?;
    struct Actions(*mut libc::posix_spawn_file_actions_t);
    impl Drop for Actions {
        fn drop(&mut self) {
            // SAFETY: initialised above, destroyed once, here.
            unsafe { libc::posix_spawn_file_actions_destroy(self.0) };
        }
    }
    let _actions = Actions(&raw mut actions);
    // SAFETY: initialises the struct we own.
    check(unsafe { libc::posix_spawnattr_init(&mut attr) })?;
    struct Attr(*mut libc::posix_spawnattr_t);
    impl Drop for Attr {
        fn drop(&mut self) {
            // SAFETY: initialised above, destroyed once, here.
            unsafe { libc::posix_spawnattr_destroy(self.0) };
        }
    }
    let _attr = Attr(&raw mut attr);

    let null = c"/dev/null";
    let root = c"/";
    // SAFETY: each call below records an action in the initialised
    // struct; the strings are 'static and the descriptors are only numbers
    // the child acts on.
    unsafe {
        check(libc::posix_spawn_file_actions_addopen(
            &mut actions,
            0,
            null.as_ptr(),
            libc::O_RDONLY,
            0,
        ))?;
        match &pipes {
            Some(((_, out_w), (_, err_w))) => {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    out_w.as_raw_fd(),
                    1,
                ))?;
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    err_w.as_raw_fd(),
                    2,
                ))?;
            }
            None => {
                for target in [1, 2] {
                    check(libc::posix_spawn_file_actions_addopen(
                        &mut actions,
                        target,
                        null.as_ptr(),
                        libc::O_WRONLY,
                        0,
                    ))?;
                }
            }
        }
        for &(source, target) in fds {
            if source >= 0 {
                // Sources are above every target (the broker keeps them
                // high), so no duplication overwrites a later source.
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    source,
                    target,
                ))?;
            } else {
                // A close of a descriptor that is not open is not an
                // error for glibc's posix_spawn.
                check(libc::posix_spawn_file_actions_addclose(
                    &mut actions,
                    target,
                ))?;
            }
        }
        check(libc::posix_spawn_file_actions_addclosefrom_np(
            &mut actions,
            highest + 1,
        ))?;
        check(libc::posix_spawn_file_actions_addchdir_np(
            &mut actions,
            root.as_ptr(),
        ))?;
        let mut none: libc::sigset_t = std::mem::zeroed();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigfillset(&mut all);
        check(libc::posix_spawnattr_setsigmask(&mut attr, &none))?;
        check(libc::posix_spawnattr_setsigdefault(&mut attr, &all))?;
        check(libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
        ))?;
    }
    let mut pid: libc::pid_t = 0;
    // SAFETY: the path, argv and envp are NUL-terminated arrays of
    // NUL-terminated strings that outlive the call; the file actions and
    // attributes were initialised above.
    check(unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions,
            &attr,
            argv.as_mut_ptr(),
            envp.as_mut_ptr(),
        )
    })?;
    let (stdout, stderr) = match pipes {
        Some(((out_r, _), (err_r, _))) => (
            Some(std::fs::File::from(out_r)),
            Some(std::fs::File::from(err_r)),
        ),
        None => (None, None),
    };
    Ok(SpawnedInit {
        pid,
        ended: None,
        stdout,
        stderr,
    })
}

/// Runs `f` in the child of `Command::spawn` before exec.
pub(crate) fn set_pre_exec(
    cmd: &mut std::process::Command,
    f: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: every closure passed here only calls async-signal-safe
    // functions (dup2, fcntl, prctl, setsid) and does not allocate.
    unsafe {
        cmd.pre_exec(f);
    }
}

/// Brings the loopback interface of the current network namespace up.
pub(crate) fn loopback_up() -> Result<(), Errno> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads into the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the union field written by SIOCGIFFLAGS is ifru_flags.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The highest capability number this kernel knows (63 when it cannot be
/// read: dropping numbers it does not know is harmless). Read once per
/// process; the sandbox init reads it before it forks, so the workload's
/// set-up does not open a procfs file again.
pub(crate) fn cap_last_cap() -> libc::c_ulong {
    static LAST: std::sync::OnceLock<libc::c_ulong> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
            .unwrap_or(63)
    })
}

/// Drops every capability: sets the secure bits that stop the kernel from
/// granting them back, empties the bounding and ambient sets, then the
/// effective, permitted and inheritable sets. Returns whether all sets are
/// empty afterwards.
pub(crate) fn drop_all_capabilities() -> bool {
    drop_all_capabilities_then(|| true)
}

/// Like [`drop_all_capabilities`], running `between` after the bounding set
/// is emptied and before the remaining sets are cleared (used to change uid
/// while CAP_SETUID is still held).
pub(crate) fn drop_all_capabilities_then(between: impl FnOnce() -> bool) -> bool {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl calls with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0);
        for cap in 0..=cap_last_cap() {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let between_ok = between();
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: capset with a v3 header and two data structs, as documented.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) } == 0;
    let mut now = [Data::default(); 2];
    hdr.version = VERSION_3;
    // SAFETY: capget fills the two data structs we own.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, now.as_mut_ptr()) } == 0;
    // SAFETY: PR_CAPBSET_READ with a capability number.
    let bounding_empty = unsafe { libc::prctl(libc::PR_CAPBSET_READ, 0, 0, 0, 0) } == 0;
    between_ok
        && set
        && got
        && now
            .iter()
            .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0)
        && bounding_empty
}

/// Executes the descriptor itself (`execveat(fd, "", …, AT_EMPTY_PATH)`), or
/// the path when `by_fd` is false. Returns only on failure.
pub(crate) fn exec(
    fd: RawFd,
    path: &std::path::Path,
    argv: &[CString],
    envp: &[CString],
    by_fd: bool,
) -> Errno {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    if by_fd {
        let empty = c"";
        // SAFETY: argv and envp are NULL-terminated arrays of pointers to
        // CStrings that outlive the call; on success it does not return.
        unsafe {
            libc::syscall(
                libc::SYS_execveat,
                fd,
                empty.as_ptr(),
                argv_ptrs.as_ptr(),
                envp_ptrs.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
        }
    } else {
        let Ok(p) = CString::new(path.as_os_str().as_encoded_bytes()) else {
            return Errno::EINVAL;
        };
        // SAFETY: as above.
        unsafe {
            libc::execve(p.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
        }
    }
    Errno::last()
}

/// Installs `handler` for `sig` without SA_RESTART, so a blocking wait is
/// interrupted and the loop can act on the signal.
pub(crate) fn on_signal(sig: nix::sys::signal::Signal, handler: extern "C" fn(libc::c_int)) {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(handler),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handlers we install only store into an atomic, which is
    // async-signal-safe.
    unsafe {
        let _ = sigaction(sig, &action);
    }
}

/// Restores default signal dispositions and an empty mask (a workload must
/// not inherit the init's handlers or blocked signals).
pub(crate) fn reset_signals() {
    use nix::sys::signal::{
        SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, sigaction, sigprocmask,
    };
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for sig in nix::sys::signal::Signal::iterator() {
        if matches!(
            sig,
            nix::sys::signal::Signal::SIGKILL | nix::sys::signal::Signal::SIGSTOP
        ) {
            continue;
        }
        // SAFETY: restoring the default disposition is always sound.
        unsafe {
            let _ = sigaction(sig, &dfl);
        }
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Whether `fd`'s file starts with `#!`.
pub(crate) fn is_script(fd: RawFd) -> bool {
    let mut buf = [0u8; 2];
    // SAFETY: pread into a two-byte buffer we own; does not move the offset.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 2, 0) };
    n == 2 && &buf == b"#!"
}

/// A descriptor for process `pid` (`pidfd_open`): signals sent through it
/// can never reach another process that reused the number.
pub(crate) fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor returned by the kernel, owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `sig` through a pidfd; a process that already exited is not an error.
pub(crate) fn pidfd_signal(fd: &OwnedFd, sig: nix::sys::signal::Signal) {
    // SAFETY: pidfd_send_signal with a valid pidfd, a signal number and no siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// Marks every inherited descriptor from 3 up close-on-exec; for `pre_exec`
/// (close_range is async-signal-safe).
pub(crate) fn cloexec_inherited() -> std::io::Result<()> {
    cloexec_from_3();
    Ok(())
}

/// Sends one descriptor over a Unix socket (SCM_RIGHTS).
pub(crate) fn send_fd(socket: RawFd, fd: RawFd) -> Result<(), Errno> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"L")];
    sendmsg::<()>(socket, &iov, &cmsg, MsgFlags::empty(), None).map(|_| ())
}

/// Receives one descriptor sent with [`send_fd`]; `None` on end of file.
pub(crate) fn recv_fd(socket: RawFd) -> Result<Option<OwnedFd>, Errno> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buf = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        socket,
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut received = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: the kernel just installed this descriptor in our
                // table for us (SCM_RIGHTS); nothing else owns it.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                if received.is_none() {
                    received = Some(owned);
                }
            }
        }
    }
    Ok(received)
}

/// `fgetxattr`: the attribute's bytes, or `None` when it is not set.
pub(crate) fn fget_xattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<Option<Vec<u8>>, Errno> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: fgetxattr writes at most buf.len() bytes into the buffer we own.
    let n = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return match Errno::last() {
            Errno::ENODATA => Ok(None),
            e => Err(e),
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Ok(Some(buf))
}

/// `fsetxattr` (create or replace).
pub(crate) fn fset_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> Result<(), Errno> {
    // SAFETY: fsetxattr reads value.len() bytes from a slice we own.
    let r = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    Errno::result(r).map(drop)
}

/// `fremovexattr`.
pub(crate) fn fremove_xattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: a descriptor and a NUL-terminated name.
    let r = unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) };
    Errno::result(r).map(drop)
}

/// `getxattr` on a path (following links; used on cgroup directories).
pub(crate) fn get_xattr(path: &std::path::Path, name: &CStr) -> Result<Option<Vec<u8>>, Errno> {
    let Ok(p) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return Err(Errno::EINVAL);
    };
    let mut buf = vec![0u8; 256];
    // SAFETY: getxattr writes at most buf.len() bytes into the buffer we own.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return match Errno::last() {
            Errno::ENODATA => Ok(None),
            e => Err(e),
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Ok(Some(buf))
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH)`: a
/// detached copy of the mount tree at `fd`, which survives the caller's
/// later change of mount namespace and can be attached in the new one
/// with [`move_mount_to`].
pub(crate) fn open_tree_clone(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let flags = OPEN_TREE_CLONE
        | AT_RECURSIVE
        | libc::AT_EMPTY_PATH as libc::c_uint
        | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: open_tree with a descriptor, an empty NUL-terminated path and
    // flags; returns a new descriptor or -1.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    let r = Errno::result(r)?;
    // SAFETY: a fresh descriptor from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(RawFd::try_from(r).map_err(|_| Errno::EBADF)?) })
}

/// Attaches the detached mount tree `fd` at `target`.
pub(crate) fn move_mount_to(fd: BorrowedFd<'_>, target: &std::path::Path) -> Result<(), Errno> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    let Ok(t) = CString::new(target.as_os_str().as_encoded_bytes()) else {
        return Err(Errno::EINVAL);
    };
    // SAFETY: move_mount with a descriptor, an empty path, AT_FDCWD and a
    // NUL-terminated target we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(r).map(drop)
}

/// Makes glibc's malloc serve every block of at least `bytes` with a
/// mapping of its own, given back to the system when freed. By default
/// glibc raises that threshold to the size of each such block freed, after
/// which blocks that size come from per-thread arenas it never trims: an
/// idle `airlock up` held 140 MiB after 20 logins (Argon2 allocates 19 MiB
/// per hash) and 374 MiB after a burst of four at once. Returns whether
/// the allocator took the setting (false on other C libraries).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn fixed_mmap_threshold(bytes: usize) -> bool {
    let Ok(v) = std::ffi::c_int::try_from(bytes) else {
        return false;
    };
    // SAFETY: mallopt only changes the allocator's parameters, under the
    // allocator's own lock; it reads and writes no memory of ours and is
    // safe to call at any time from any thread.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, v) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn fixed_mmap_threshold(_bytes: usize) -> bool {
    false
}

/// Limits glibc's malloc to `n` arenas. By default it makes up to eight
/// per core, one for each thread that meets contention, and keeps what
/// each arena once held: over 100 runs an idle `airlock up` on SQLite grew
/// from 30 to 35 MiB, 31 MiB with one arena (BENCHMARKS.md: "Server
/// memory"). Small blocks still come from each thread's own cache
/// (tcache) without the arena's lock. Returns whether the allocator took
/// the setting.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn limit_arenas(n: u16) -> bool {
    // SAFETY: as in `fixed_mmap_threshold`: mallopt changes allocator
    // parameters only, under the allocator's own lock.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, std::ffi::c_int::from(n)) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn limit_arenas(_n: u16) -> bool {
    false
}

/// Asks glibc's allocator to keep up to `bytes` of freed memory for reuse
/// instead of handing it back to the kernel at once, and to serve blocks of
/// up to a quarter of that from its heap instead of mapping each one. For a
/// short process that allocates and frees the same large buffers in a
/// loop (`airlock audit verify` reads pages of about 600 KB: the database's
/// aggregate, the driver's copy), where giving the memory back and faulting
/// it in again cost as much as the work. Process-wide; memory in use is
/// unchanged, only freed memory up to `bytes` may stay mapped. Returns
/// whether the allocator took both settings (false off glibc).
pub fn retain_freed_heap(bytes: usize) -> bool {
    #[cfg(target_env = "gnu")]
    {
        let Ok(trim) = libc::c_int::try_from(bytes) else {
            return false;
        };
        // SAFETY: mallopt only sets allocator parameters; it takes two
        // integers, touches no memory of ours and may be called at any time
        // from any thread (glibc takes its arena locks).
        let trim_ok = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, trim) } == 1;
        // SAFETY: as above.
        let mmap_ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, trim / 4) } == 1;
        trim_ok && mmap_ok
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = bytes;
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glibc_takes_the_retained_heap_settings() {
        // On glibc both settings are accepted; a size that does not fit
        // the allocator's integer is refused without calling it.
        assert_eq!(super::retain_freed_heap(64 << 20), cfg!(target_env = "gnu"));
        assert!(!super::retain_freed_heap(usize::MAX));
    }

    fn exit_code(pid: nix::unistd::Pid) -> i32 {
        match nix::sys::wait::waitpid(pid, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => code,
            other => panic!("{other:?}"),
        }
    }

    /// `spawn_shared` starts a process that writes this process's memory
    /// (it is not a copy), keeps its own descriptor table, answers its exit
    /// code, turns a panic into the sandbox's failure code, and returns
    /// here only once the child has exec'd. Control: the same child started
    /// with `fork_single_threaded` leaves this process's memory unchanged.
    /// (The test harness runs other threads, which stay idle meanwhile;
    /// the init that uses this has none.)
    #[test]
    fn a_shared_spawn_writes_this_memory_but_keeps_its_own_descriptors() {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicU32, Ordering};
        let seen = AtomicU32::new(0);
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_raw_fd();
        let pid = super::spawn_shared(|| {
            seen.store(7, Ordering::SeqCst);
            // SAFETY: (test) closes the child's copy of the descriptor.
            unsafe { libc::close(fd) };
            3
        })
        .unwrap();
        assert_eq!(exit_code(pid), 3);
        assert_eq!(seen.load(Ordering::SeqCst), 7, "the child's write is here");
        // SAFETY: (test) F_GETFD only inspects the descriptor table.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(flags >= 0, "still open here");

        // Control: a forked child's write stays in its copy.
        match super::fork_single_threaded().unwrap() {
            nix::unistd::ForkResult::Child => {
                seen.store(9, Ordering::SeqCst);
                // SAFETY: (test) ends the forked child at once.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => assert_eq!(exit_code(child), 0),
        }
        assert_eq!(seen.load(Ordering::SeqCst), 7);

        let pid = super::spawn_shared(|| panic!("in the child")).unwrap();
        assert_eq!(exit_code(pid), crate::EXIT_SANDBOX_FAILED);

        // The call returns once the child has exec'd (it ran `true`), not
        // before: what the child wrote just before its exec is here.
        let pid = super::spawn_shared(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            seen.store(11, Ordering::SeqCst);
            let argv = [c"true".to_owned()];
            let errno = super::exec(-1, std::path::Path::new("/bin/true"), &argv, &[], false);
            100 + errno as i32
        })
        .unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 11);
        assert_eq!(exit_code(pid), 0);
    }
}
