//! The small sandbox init: `airlock-sandbox-init`, beside the running binary.
//!
//! Every cold launch and every pooled sandbox built starts the sandbox init with `exec`. The
//! airlock binary is about 32 MB with 28,000 relocations to apply at start; with a binary holding
//! only this crate's init, a cold launch is about 0.6 ms (11–13%) faster (BENCHMARKS, "A small
//! init binary"). A broker made with [`crate::Broker::new`] uses it when all of these hold:
//! - it is a regular, executable file (not a symbolic link) in the running binary's directory;
//! - neither it nor that directory can be written by group or others, and both belong to root or
//!   to the running binary's owner: only who could replace the airlock binary can replace it;
//! - it holds this build's id ([`crate::INIT_ID`]) in its bytes;
//! - where user namespaces are granted per binary path (Ubuntu's AppArmor restriction, for a
//!   broker that is not root), asked with [`crate::INIT_ID_ARG`], it names this build and says
//!   it can make one: an init refused one where the airlock binary was granted it would lower
//!   the containment level, so it is not used.
//!
//! Otherwise the broker re-executes the running binary (`/proc/self/exe`), as before, and
//! [`chosen`] says why. An init replaced after the choice is caught at each start: the broker
//! passes [`crate::INIT_ID`], and an init of another build reports a set-up failure and runs
//! nothing.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Which binary a broker starts as the sandbox init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitBinary {
    /// The small init at this path.
    Small(PathBuf),
    /// No small init beside the running binary: the running binary is the init.
    Absent,
    /// There is one and it is not used, for this reason: the running binary is the init.
    Refused { path: PathBuf, reason: String },
}

impl InitBinary {
    /// The path the broker executes.
    pub fn path(&self) -> PathBuf {
        match self {
            InitBinary::Small(p) => p.clone(),
            _ => PathBuf::from("/proc/self/exe"),
        }
    }

    /// One line for `airlock doctor` and logs.
    pub fn describe(&self) -> String {
        match self {
            InitBinary::Small(p) => format!("{} (this build's small init)", p.display()),
            InitBinary::Absent => {
                format!("the running binary (no {} beside it)", crate::INIT_BINARY)
            }
            InitBinary::Refused { path, reason } => {
                format!("the running binary ({} not used: {reason})", path.display())
            }
        }
    }
}

/// The choice for this process, made once.
pub fn chosen() -> &'static InitBinary {
    static CHOSEN: OnceLock<InitBinary> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let own = std::fs::metadata("/proc/self/exe").map(|m| m.uid());
        match (std::env::current_exe(), own) {
            (Ok(me), Ok(owner)) => match me.parent() {
                Some(dir) => examine(&dir.join(crate::INIT_BINARY), owner),
                None => InitBinary::Absent,
            },
            _ => InitBinary::Absent,
        }
    })
}

/// Whether the file at `path` may be the sandbox init of a binary owned by `owner`, asking it
/// about user namespaces only where the host grants them per binary.
pub fn examine(path: &Path, owner: u32) -> InitBinary {
    examine_with(path, owner, userns_granted_per_binary())
}

/// Ubuntu's AppArmor grants unprivileged user namespaces per binary path; root needs no grant.
fn userns_granted_per_binary() -> bool {
    let restricted =
        std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .is_ok_and(|v| v.trim() == "1");
    restricted && !nix::unistd::geteuid().is_root()
}

/// The largest file taken for a small init (the release init is about 1 MB; the airlock binary,
/// 32 MB, would be read whole at every start for nothing).
const MAX_SIZE: u64 = 16 << 20;

/// [`examine`], with `ask`: run the candidate to ask whether it can make a user namespace here.
/// Otherwise nothing is executed: this build's id is looked for in its bytes. Asking costs an
/// exec (about 1.1 ms), which a one-shot `airlock sandbox exec` would pay for a 0.6 ms gain.
pub fn examine_with(path: &Path, owner: u32, ask: bool) -> InitBinary {
    let refuse = |reason: String| InitBinary::Refused {
        path: path.to_path_buf(),
        reason,
    };
    // Not followed: a link's target lives in a directory this check does not look at.
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return InitBinary::Absent,
        Err(e) => return refuse(format!("cannot read it: {e}")),
    };
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return refuse("not an executable file".into());
    }
    let Some(dir) = path.parent() else {
        return refuse("it has no directory".into());
    };
    let dir_meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) => return refuse(format!("cannot read its directory: {e}")),
    };
    for (what, m) in [("it", &meta), ("its directory", &dir_meta)] {
        if m.mode() & 0o022 != 0 {
            return refuse(format!("{what} can be written by group or others"));
        }
        if m.uid() != 0 && m.uid() != owner {
            return refuse(format!(
                "{what} belongs to uid {}, not root or the running binary's owner",
                m.uid()
            ));
        }
    }
    if meta.len() > MAX_SIZE {
        return refuse(format!("it is larger than {} MiB", MAX_SIZE >> 20));
    }
    // The id is in the init's read-only data (it names it in its answers); another build's init
    // holds another id.
    match std::fs::read(path) {
        Ok(bytes) if memchr::memmem::find(&bytes, crate::INIT_ID.as_bytes()).is_some() => {}
        Ok(_) => {
            return refuse(format!(
                "it does not hold this build's id {:?}",
                crate::INIT_ID
            ));
        }
        Err(e) => return refuse(format!("cannot read it: {e}")),
    }
    if !ask {
        return InitBinary::Small(path.to_path_buf());
    }
    let answer = match build_of(path) {
        Ok(a) => a,
        Err(e) => return refuse(format!("asking its build failed: {e}")),
    };
    let (id, userns) = answer.split_once(' ').unwrap_or((&answer, ""));
    if id != crate::INIT_ID {
        return refuse(format!(
            "it is build {id:?}, this binary is {:?}",
            crate::INIT_ID
        ));
    }
    if userns != "userns" {
        return refuse(
            "it cannot make a user namespace here (on hosts that restrict them, give it an AppArmor profile like airlock's)".into(),
        );
    }
    InitBinary::Small(path.to_path_buf())
}

/// Runs the binary with [`crate::INIT_ID_ARG`] and returns what it prints (at most 256 bytes)
/// before it closes its stdout, within two seconds. Waits on the pipe, not on a clock: the
/// answer takes about as long as the exec.
fn build_of(path: &Path) -> std::io::Result<String> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut child = Command::new(path)
        .arg(crate::INIT_ID_ARG)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let answer = (|| {
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no pipe"))?;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer within 2 s",
                ));
            }
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                // Readable or closed: the read below does not block.
                Ok(n) if n > 0 => {}
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            match stdout.read(&mut buf) {
                Ok(0) => return Ok(String::from_utf8_lossy(&out).trim().to_string()),
                Ok(n) => {
                    out.extend_from_slice(buf.get(..n).unwrap_or_default());
                    if out.len() > 256 {
                        return Err(std::io::Error::other("its answer is too long"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    })();
    // Its stdout is closed or it took too long: it is not waited on any further.
    let _ = child.kill();
    let _ = child.wait();
    answer
}
