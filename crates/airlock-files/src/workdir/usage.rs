//! How much of its budget a work directory uses: a bounded walk, made before every write.
//!
//! Why a walk and not a running total: the sandbox writes the same directory between tool
//! calls, so only looking tells what is there now. The walk is bounded so that a hostile tree
//! costs at most `max_entries + 1` `fstatat` calls and `max_depth` open descriptors.

use std::os::fd::AsFd;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::fstatat;
use serde::Serialize;

use super::{WorkDir, WorkDirError};
use crate::FileError;
use crate::name::{escape, join};
use crate::open::{self, Kind, kind, open_entry};

/// What a work directory holds, as measured by [`WorkDir::usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Sum of the apparent sizes (`st_size`) of the regular files found.
    pub bytes: u64,
    /// Entries of every kind found below the root.
    pub entries: u64,
    /// `false` if some directory was not looked into: it lies deeper than the budget's
    /// `max_depth`, or on another filesystem. Its contents are then not counted.
    pub complete: bool,
}

impl WorkDir {
    /// Measures the work directory now, by a bounded walk that never follows a symbolic link.
    ///
    /// Exactly what is counted:
    /// - `entries`: every name below the root, whatever it is (file, directory, symlink, FIFO,
    ///   ...), within `max_depth` levels;
    /// - `bytes`: the apparent size (`st_size`, as `ls -l` shows it, not the blocks in use) of
    ///   every regular file among them, each name counted once (two hard links count twice). A
    ///   sparse file counts at its full size, which errs towards refusing writes;
    /// - symbolic links count as entries of size 0 and are not followed; directories are looked
    ///   into only up to `max_depth` levels and only on the root's filesystem (otherwise
    ///   `complete` is `false`).
    ///
    /// The walk stops as soon as it has seen more than `max_entries` entries and answers
    /// [`WorkDirError::OverBudget`] (`entries`): the directory is over budget, and its exact
    /// size is not worth a longer walk. What the sandbox writes is bounded by the sandbox's own
    /// disk limit, not by this budget: the budget bounds what the harness adds, given what it
    /// can see.
    pub fn usage(&self) -> Result<Usage, WorkDirError> {
        let root = self.reopen_root()?;
        let dir = Dir::from_fd(root).map_err(|e| FileError::io(".", e))?;
        let mut walk = Walk {
            wd: self,
            usage: Usage {
                bytes: 0,
                entries: 0,
                complete: true,
            },
        };
        walk.dir(dir, "", 0)?;
        Ok(walk.usage)
    }
}

struct Walk<'a> {
    wd: &'a WorkDir,
    usage: Usage,
}

impl Walk<'_> {
    /// Counts the entries of `dir` (at path `prefix`, whose own depth is `depth`) and below.
    fn dir(&mut self, mut dir: Dir, prefix: &str, depth: usize) -> Result<(), WorkDirError> {
        let here = if prefix.is_empty() { "." } else { prefix };
        let budget = self.wd.budget;
        let mut subdirs = Vec::new();
        // A second descriptor of the same directory for `fstatat` while `dir` is being read
        // (`fstatat` does not use the file offset, so sharing it is harmless).
        let at = dir
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| FileError::io(here, e))?;
        for entry in dir.iter() {
            let entry = entry.map_err(|e| FileError::io(here, e))?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            self.usage.entries += 1;
            if self.usage.entries > budget.max_entries as u64 {
                return Err(WorkDirError::OverBudget {
                    what: "entries",
                    used: self.usage.entries,
                    adding: 0,
                    limit: budget.max_entries as u64,
                });
            }
            let st = match fstatat(&at, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed since the directory was read: nothing to count.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    let rel = join(prefix, &escape(name.to_bytes()));
                    return Err(FileError::io(&rel, e).into());
                }
            };
            match kind(&st) {
                Kind::File => {
                    let size = u64::try_from(st.st_size).unwrap_or(0);
                    self.usage.bytes = self.usage.bytes.saturating_add(size);
                }
                Kind::Dir if depth + 1 >= budget.max_depth || st.st_dev != self.wd.root_dev => {
                    // Its children would lie deeper than any path the harness may use, or
                    // on another filesystem: not measured, and said so.
                    self.usage.complete = false;
                }
                // Looked into after this directory is done, so at most `max_depth`
                // descriptors are open at once (one per level).
                Kind::Dir => subdirs.push(name.to_owned()),
                Kind::Symlink | Kind::Other(_) => {}
            }
        }
        for name in subdirs {
            let rel = join(prefix, &escape(name.to_bytes()));
            let sub = match open_entry(&dir, &name, &rel, self.wd.root_dev)? {
                Some(open::Entry::Dir(fd)) => {
                    Dir::from_fd(fd).map_err(|e| FileError::io(&rel, e))?
                }
                // Gone or replaced by a file since it was counted: nothing below it to count.
                _ => continue,
            };
            self.dir(sub, &rel, depth + 1)?;
        }
        Ok(())
    }
}
