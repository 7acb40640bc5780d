//! `write_file`: replacing a file in a work directory without ever writing through a link.
//!
//! The sequence: look at the parents that exist and at the target (nothing created yet);
//! measure usage and check the budget; create the missing parents one at a time
//! (`mkdirat` + the checked open); create a temporary file beside the target with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` beneath the parent's descriptor; write, `fchown`, `fchmod`,
//! `fsync`; `renameat` it over the target; check that the name now holds the inode written;
//! `fsync` the directory.
//!
//! Why a temporary file and a rename instead of opening the target for writing: opening an
//! existing name writes into whatever inode it is, and the workload chooses that inode (a hard
//! link to a host file, a FIFO, a device). `rename` replaces the directory entry and never
//! touches the old inode, so a hard-linked name is replaced safely (its other names keep their
//! bytes), and readers of the work directory see the old file or the new one, never a prefix.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, renameat};
use nix::sys::stat::{Mode, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, fsync, unlinkat};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{RelPath, WorkDir, WorkDirError};
use crate::FileError;
use crate::open::{self, Kind, create_beneath, kind, open_entry};
use crate::store::hex;

/// How [`WorkDir::write`] creates what it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteOpts {
    /// Give the new file and every directory created for it to this `(uid, gid)` (`fchown`
    /// before the rename), so the workload, which runs as another uid under a root broker, can
    /// read and change them later. Changing the owner to another uid needs `CAP_CHOWN`; without
    /// it the write fails cleanly and leaves nothing behind. `None` keeps the harness's own.
    pub owner: Option<(u32, u32)>,
    /// Permission bits of the new file. `None`: those of the regular file it replaces (so a
    /// script stays executable), or `0o644` for a new file. Only the `0o777` bits are ever
    /// applied: set-uid, set-gid and sticky are never set.
    pub file_mode: Option<u32>,
    /// Permission bits of directories created for the file (`0o777` bits only).
    pub dir_mode: u32,
}

impl Default for WriteOpts {
    fn default() -> Self {
        Self {
            owner: None,
            file_mode: None,
            dir_mode: 0o755,
        }
    }
}

/// What [`WorkDir::write`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Written {
    /// Lowercase hex SHA-256 of the bytes written.
    pub sha256: String,
    /// How many bytes were written.
    pub bytes: u64,
}

/// New files get this mode when neither the caller nor a replaced file says otherwise.
const DEFAULT_FILE_MODE: u32 = 0o644;
/// Attempts at a fresh temporary name when the workload has planted the one we picked.
const TEMP_ATTEMPTS: u32 = 8;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The target as found before writing.
struct Target {
    /// Size of the regular file being replaced (it leaves the usage), else 0.
    old_size: u64,
    /// Permission bits of the regular file being replaced.
    old_mode: Option<u32>,
    exists: bool,
}

impl WorkDir {
    /// Writes `bytes` to the file at `rel`, replacing it atomically, creating missing parent
    /// directories (at most the budget's `max_depth` levels in all).
    ///
    /// Refused before anything is created: a symbolic link at `rel` or at any parent, a parent
    /// that is not a directory, a target that is a directory, FIFO, socket or device, and a
    /// write that would take the work directory over its budget ([`WorkDir::usage`] is measured
    /// first; replacing a file frees its old size). A file with other hard links is replaced,
    /// not written into: its other names keep their bytes.
    ///
    /// A crash between creating the temporary file and the rename can leave
    /// `.airlock-write-<pid>-<nanos>-<n>.tmp` beside the target.
    pub fn write(
        &self,
        rel: &str,
        bytes: &[u8],
        opts: &WriteOpts,
    ) -> Result<Written, WorkDirError> {
        let path = self.parse(rel, false)?;
        let Some(((_, last), parents)) = path.parts.split_last() else {
            return Err(WorkDirError::NotFound {
                path: ".".to_owned(),
            });
        };
        let text = path.text();

        // 1. Look, without creating anything.
        let mut dir = self.reopen_root()?;
        let mut existing = 0;
        while existing < parents.len() {
            let here = path.prefix(existing + 1);
            match open_entry(&dir, &parents[existing].1, &here, self.root_dev)? {
                None => break,
                Some(open::Entry::Dir(fd)) => dir = fd,
                Some(open::Entry::File(..)) => {
                    return Err(WorkDirError::NotADirectory { path: here });
                }
            }
            existing += 1;
        }
        let target = if existing == parents.len() {
            inspect_target(&dir, last, &text)?
        } else {
            Target {
                old_size: 0,
                old_mode: None,
                exists: false,
            }
        };

        // 2. The budget, against what is there now.
        let new_entries = (parents.len() - existing) as u64 + u64::from(!target.exists);
        let len = bytes.len() as u64;
        self.check_budget(new_entries, target.old_size, len)?;

        // 3. Missing parents, each created and then opened with the usual checks. If anything
        // later fails, the directories made here are removed again (if still empty), so a
        // failed write leaves the work directory as it found it.
        let mut made = MadeDirs(Vec::new());
        for (i, (_, name)) in parents.iter().enumerate().skip(existing) {
            let (sub, created) = self.make_dir(&dir, &path, i, opts)?;
            if created {
                let parent = dir.try_clone().map_err(|e| FileError::io(&text, e))?;
                made.0.push((parent, name.clone()));
            }
            dir = sub;
        }

        // 4. The file.
        let mode = opts
            .file_mode
            .or(target.old_mode)
            .unwrap_or(DEFAULT_FILE_MODE);
        replace(&dir, last, &text, bytes, mode, opts.owner)?;
        made.0.clear();
        Ok(Written {
            sha256: hex(&Sha256::digest(bytes)),
            bytes: len,
        })
    }

    /// Refuses a write that adds `new_entries` entries and replaces `old_size` bytes by `len`.
    fn check_budget(&self, new_entries: u64, old_size: u64, len: u64) -> Result<(), WorkDirError> {
        let b = &self.budget;
        let usage = match self.usage() {
            Ok(u) => u,
            Err(WorkDirError::OverBudget {
                what, used, limit, ..
            }) => {
                return Err(WorkDirError::OverBudget {
                    what,
                    used,
                    adding: new_entries,
                    limit,
                });
            }
            Err(e) => return Err(e),
        };
        if usage.entries.saturating_add(new_entries) > b.max_entries as u64 {
            return Err(WorkDirError::OverBudget {
                what: "entries",
                used: usage.entries,
                adding: new_entries,
                limit: b.max_entries as u64,
            });
        }
        let after = usage.bytes.saturating_sub(old_size).saturating_add(len);
        if after > b.max_bytes {
            return Err(WorkDirError::OverBudget {
                what: "bytes",
                used: usage.bytes,
                adding: len.saturating_sub(old_size),
                limit: b.max_bytes,
            });
        }
        Ok(())
    }

    /// Creates (if absent) and opens the parent directory `path.parts[i]` inside `dir`; says
    /// whether this call created it.
    fn make_dir(
        &self,
        dir: &OwnedFd,
        path: &RelPath,
        i: usize,
        opts: &WriteOpts,
    ) -> Result<(OwnedFd, bool), WorkDirError> {
        let here = path.prefix(i + 1);
        let name = &path.parts[i].1;
        let mode = opts.dir_mode & 0o777;
        let created = match mkdirat(dir, name.as_c_str(), Mode::from_bits_truncate(mode)) {
            Ok(()) => true,
            // Made by someone else meanwhile (or a link): the checked open decides.
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(FileError::io(&here, e).into()),
        };
        let fd = match open_entry(dir, name, &here, self.root_dev)? {
            Some(open::Entry::Dir(fd)) => fd,
            None => {
                return Err(FileError::io(&here, "directory vanished while being created").into());
            }
            Some(open::Entry::File(..)) => return Err(WorkDirError::NotADirectory { path: here }),
        };
        if created {
            let settled = set_owner_and_mode(&fd, opts.owner, mode, &here)
                .and_then(|()| fsync(dir).map_err(|e| FileError::io(&here, e).into()));
            if let Err(e) = settled {
                let _ = unlinkat(dir, name.as_c_str(), UnlinkatFlags::RemoveDir);
                return Err(e);
            }
        }
        Ok((fd, created))
    }
}

/// What is at the target name now; refuses what may not be replaced.
fn inspect_target(dir: &OwnedFd, name: &CString, text: &str) -> Result<Target, WorkDirError> {
    let st = match fstatat(dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => {
            return Ok(Target {
                old_size: 0,
                old_mode: None,
                exists: false,
            });
        }
        Err(e) => return Err(FileError::io(text, e).into()),
    };
    let path = || text.to_owned();
    match kind(&st) {
        Kind::File => Ok(Target {
            old_size: u64::try_from(st.st_size).unwrap_or(0),
            old_mode: Some(st.st_mode & 0o777),
            exists: true,
        }),
        Kind::Dir => Err(WorkDirError::IsADirectory { path: path() }),
        Kind::Symlink => Err(FileError::Symlink { path: path() }.into()),
        Kind::Other(kind) => Err(FileError::NotRegular { path: path(), kind }.into()),
    }
}

/// Directories this write created, each with its parent, removed (newest first, only if still
/// empty) when the write fails after creating them.
struct MadeDirs(Vec<(OwnedFd, CString)>);

impl Drop for MadeDirs {
    fn drop(&mut self) {
        for (parent, name) in self.0.iter().rev() {
            // Best effort; `rmdir` never removes a directory that is not empty.
            let _ = unlinkat(parent, name.as_c_str(), UnlinkatFlags::RemoveDir);
        }
    }
}

/// Removes the temporary file unless it was renamed into place.
struct TempFile<'a> {
    dir: &'a OwnedFd,
    name: CString,
    armed: bool,
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: it only ever names an entry inside the work directory.
            let _ = unlinkat(self.dir, self.name.as_c_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// Writes `bytes` to a new temporary file in `dir` and renames it over `name`.
fn replace(
    dir: &OwnedFd,
    name: &CString,
    text: &str,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<(), WorkDirError> {
    let io = |e: &dyn std::fmt::Display| WorkDirError::from(FileError::io(text, e));
    let (fd, tmp) = create_temp(dir).map_err(|e| io(&e))?;
    let mut tmp = TempFile {
        dir,
        name: tmp,
        armed: true,
    };
    let mut file = File::from(fd);
    file.write_all(bytes).map_err(|e| io(&e))?;
    set_owner_and_mode(&file, owner, mode & 0o777, text)?;
    file.sync_all().map_err(|e| io(&e))?;
    let ours = fstat(&file).map_err(|e| io(&e))?;
    renameat(dir, tmp.name.as_c_str(), dir, name.as_c_str()).map_err(|e| match e {
        // Became a directory since it was inspected.
        Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => WorkDirError::IsADirectory {
            path: text.to_owned(),
        },
        e => io(&e),
    })?;
    tmp.armed = false;
    // The name must now hold the inode we wrote; if the workload moved something else over it
    // in between, say so rather than report bytes that are not there.
    let now = fstatat(dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| io(&e))?;
    if (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino) {
        return Err(io(&"file changed while being written"));
    }
    fsync(dir).map_err(|e| io(&e))?;
    Ok(())
}

/// Creates a fresh temporary file in `dir`; a name the workload planted is skipped, never used.
fn create_temp(dir: &OwnedFd) -> nix::Result<(OwnedFd, CString)> {
    let mut last = Errno::EEXIST;
    for _ in 0..TEMP_ATTEMPTS {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        // Not guessable in advance (the time), and never reused within this process (`n`).
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(".airlock-write-{}-{nanos}-{n}.tmp", std::process::id());
        // Digits, dots, dashes and letters only: no NUL.
        let Ok(name) = CString::new(name) else {
            return Err(Errno::EINVAL);
        };
        match create_beneath(dir, &name, Mode::from_bits_truncate(0o600)) {
            Ok(fd) => return Ok((fd, name)),
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// `fchown` (if asked) then `fchmod`, in that order: a change of owner may clear mode bits.
fn set_owner_and_mode<Fd: AsFd>(
    fd: Fd,
    owner: Option<(u32, u32)>,
    mode: u32,
    text: &str,
) -> Result<(), WorkDirError> {
    if let Some((uid, gid)) = owner {
        fchown(
            fd.as_fd(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
        )
        .map_err(|e| FileError::io(text, format!("cannot give it to uid {uid} gid {gid}: {e}")))?;
    }
    fchmod(fd.as_fd(), Mode::from_bits_truncate(mode)).map_err(|e| FileError::io(text, e))?;
    Ok(())
}
