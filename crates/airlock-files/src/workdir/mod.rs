//! A run's work directory as the trusted agent harness touches it (AGT-1, AGT-3: the tools
//! `read_file`, `write_file` and `list_files`).
//!
//! The same directory is a writable root of every sandbox the run starts (`run_command`), so by
//! the time the harness reads or writes it, the workload may have left anything there: symbolic
//! links (to `/etc/shadow`, to `/`, in the place of a parent directory), hard links to host files,
//! FIFOs that would block a reader, sockets, device nodes, sparse or growing files, deep trees,
//! millions of entries, names with newlines, terminal escapes or invalid UTF-8, and it may race
//! renames against the harness. The harness runs as root (under a root broker) or as the airlock
//! user, so a single followed link would hand it host files.
//!
//! Rules every operation follows:
//! - The root is a descriptor opened once ([`WorkDir::open`]), refusing a root that is itself a
//!   symbolic link. Every later open is one validated component at a time beneath a descriptor,
//!   through `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV)` with `O_NOFOLLOW` (plain `openat` of a single component with
//!   `O_NOFOLLOW` where `openat2` is missing), exactly as the output collector does
//!   (`open.rs`). A path string is never resolved by the kernel in one go.
//! - An entry's type is learned with `fstatat(AT_SYMLINK_NOFOLLOW)` before it is opened, so a
//!   FIFO, socket or device planted in advance is refused without ever being opened; the open
//!   itself is `O_NONBLOCK | O_NOCTTY` and its `fstat` is the final word, so one swapped in
//!   between the two calls cannot block the harness and is refused too.
//! - Files with more than one hard link are never read (another name of the inode may be a host
//!   file the workload wants shown to the model); writes never write into an existing inode at
//!   all (temporary file + `renameat`), so replacing such a name is safe.
//! - Paths are checked with [`validate_work_path`]; errors
//!   ([`WorkDirError`]) name only that relative path, escaped and bounded.
//! - Listings escape every name (`name::escape`): no control character, line separator, bidi
//!   control or invisible character reaches the model, and invalid UTF-8 shows as `\xNN`.
//!
//! Must not: follow a symbolic link, open a FIFO or device it has seen, read a byte past the
//! caller's bound, write into an inode it did not create, name a host path in an error, print.
//! It does not bound what the sandbox itself writes: that is the sandbox's disk limit (`--disk`).

mod error;
mod list;
mod usage;
mod write;

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::sys::stat::{FileStat, fstat};
use serde::{Deserialize, Serialize};

pub use error::WorkDirError;
pub use list::{Entry, EntryKind, ListOpts, Listing, MAX_SCANNED_NAMES};
pub use usage::Usage;
pub use write::{WriteOpts, Written};

use crate::FileError;
use crate::name::join;
use crate::names::validate_work_path;
use crate::open::{self, open_entry, open_root};
use error::shown;

/// What the harness may make the work directory hold, checked on every write.
///
/// How usage is measured is described on [`WorkDir::usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkDirBudget {
    /// Bytes of all regular files together (apparent sizes).
    pub max_bytes: u64,
    /// Entries of every kind (files, directories, symlinks, anything else) below the root.
    pub max_entries: usize,
    /// Path components: `a.txt` is at depth 1, `a/b.txt` at depth 2. Also how deep the usage
    /// walk and listings descend.
    pub max_depth: usize,
}

impl Default for WorkDirBudget {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 30,
            max_entries: 100_000,
            max_depth: 64,
        }
    }
}

/// A file's first bytes, as read by [`WorkDir::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFile {
    /// At most the `max_bytes` asked for.
    pub bytes: Vec<u8>,
    /// The file's size as `fstat` reported it after reading (or the bytes read, if more).
    pub total_size: u64,
    /// The file holds more than `bytes`: it was larger than `max_bytes`, or grew while read.
    pub truncated: bool,
}

/// A run's work directory, opened once and then reached only through its descriptor.
///
/// Every operation takes `&self` and opens its own descriptors, so one `WorkDir` may serve
/// several threads.
#[derive(Debug)]
pub struct WorkDir {
    root: OwnedFd,
    root_dev: u64,
    budget: WorkDirBudget,
}

/// A validated path: its text and its components, each one a valid name.
#[derive(Debug)]
struct RelPath {
    /// The components, `/`-free and NUL-free (the path rule refuses control characters).
    parts: Vec<(String, CString)>,
}

impl RelPath {
    /// The path of the first `n` components, for messages (already validated: shown as is).
    fn prefix(&self, n: usize) -> String {
        self.parts[..n]
            .iter()
            .fold(String::new(), |acc, (name, _)| join(&acc, name))
    }

    fn text(&self) -> String {
        self.prefix(self.parts.len())
    }
}

impl WorkDir {
    /// Opens the work directory at `path`. The host chose `path`, so its parents may be links
    /// (`/tmp` on some systems); the directory itself may not be one.
    pub fn open(path: &Path, budget: WorkDirBudget) -> Result<Self, WorkDirError> {
        let (root, root_dev) = open_root(path)?;
        Ok(Self {
            root,
            root_dev,
            budget,
        })
    }

    /// The budget writes are checked against.
    pub fn budget(&self) -> &WorkDirBudget {
        &self.budget
    }

    /// Reads at most `max_bytes` of the regular file at `rel`.
    ///
    /// Refused: a symbolic link anywhere in the path, a FIFO, socket or device (never opened
    /// when seen in advance, see the module header), a directory, a file with more than one
    /// hard link, a mount point. A file larger than `max_bytes`, or one that grows while it is
    /// read, is cut at `max_bytes` and reported `truncated`; no byte past `max_bytes` is read,
    /// and memory use is bounded by `max_bytes` whatever size the file claims.
    pub fn read(&self, rel: &str, max_bytes: u64) -> Result<ReadFile, WorkDirError> {
        let path = self.parse(rel, false)?;
        let Some(((_, last), parents)) = path.parts.split_last() else {
            return Err(WorkDirError::IsADirectory {
                path: ".".to_owned(),
            });
        };
        let dir = self.open_dir(&path, parents.len())?;
        let text = path.text();
        match open_entry(&dir, last, &text, self.root_dev)? {
            None => Err(WorkDirError::NotFound { path: text }),
            Some(open::Entry::Dir(_)) => Err(WorkDirError::IsADirectory { path: text }),
            Some(open::Entry::File(fd, st)) => read_capped(fd, &st, max_bytes, &text),
        }
    }

    /// Parses `rel`; with `allow_root`, `.` and the empty string name the root itself.
    fn parse(&self, rel: &str, allow_root: bool) -> Result<RelPath, WorkDirError> {
        if allow_root && (rel.is_empty() || rel == ".") {
            return Ok(RelPath { parts: Vec::new() });
        }
        let bad = |error| WorkDirError::BadPath {
            path: shown(rel),
            error,
        };
        let text = validate_work_path(rel).map_err(bad)?;
        let mut parts = Vec::new();
        for name in text.split('/') {
            // The path rule refuses NUL (a control character), so this cannot fail; refuse
            // rather than panic if it ever did.
            let cname =
                CString::new(name).map_err(|_| bad(crate::names::NameError::ControlChar))?;
            parts.push((name.to_owned(), cname));
        }
        if parts.len() > self.budget.max_depth {
            return Err(FileError::TooDeep { path: shown(rel) }.into());
        }
        Ok(RelPath { parts })
    }

    /// A fresh descriptor of the root directory (its own file offset, so listing it never
    /// disturbs another operation).
    fn reopen_root(&self) -> Result<OwnedFd, WorkDirError> {
        open::reopen_dir(&self.root).map_err(|e| FileError::io(".", e).into())
    }

    /// Opens the directory named by the first `n` components of `path` (the root for `n = 0`),
    /// refusing anything but a real directory at every step.
    fn open_dir(&self, path: &RelPath, n: usize) -> Result<OwnedFd, WorkDirError> {
        let mut cur = self.reopen_root()?;
        for i in 0..n {
            let text = path.prefix(i + 1);
            match open_entry(&cur, &path.parts[i].1, &text, self.root_dev)? {
                None => return Err(WorkDirError::NotFound { path: text }),
                Some(open::Entry::Dir(fd)) => cur = fd,
                Some(open::Entry::File(..)) => {
                    return Err(WorkDirError::NotADirectory { path: text });
                }
            }
        }
        Ok(cur)
    }
}

/// Reads at most `max` bytes from an opened regular file; `st` is its `fstat` at open.
fn read_capped(fd: OwnedFd, st: &FileStat, max: u64, rel: &str) -> Result<ReadFile, WorkDirError> {
    let io = |e: &dyn std::fmt::Display| WorkDirError::from(FileError::io(rel, e));
    // The claimed size only sizes the first allocation; `take` is what bounds the read.
    let claimed = u64::try_from(st.st_size).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(claimed.min(max)).unwrap_or(0));
    let mut file = File::from(fd);
    (&mut file)
        .take(max)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&e))?;
    let now = fstat(&file).map_err(|e| io(&e))?;
    let size_now = u64::try_from(now.st_size).unwrap_or(0);
    let read = bytes.len() as u64;
    Ok(ReadFile {
        bytes,
        total_size: size_now.max(read),
        truncated: size_now > read,
    })
}
