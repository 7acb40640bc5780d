//! `list_files`: a bounded, deterministic listing of a work directory, safe to show a model.

use std::collections::BinaryHeap;
use std::ffi::CString;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::fstatat;
use serde::{Deserialize, Serialize};

use super::{WorkDir, WorkDirError};
use crate::FileError;
use crate::name::{escape, join};
use crate::open::{self, Kind, kind, open_entry};

/// Names read from directories in one listing, at most. A directory with millions of entries
/// costs this many `readdir` results, not millions; the listing is then `truncated`, and the
/// names kept are the smallest of those read.
pub const MAX_SCANNED_NAMES: usize = 200_000;

/// How much one listing may show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListOpts {
    /// Entries returned, at most.
    pub max_entries: usize,
    /// Levels below the listed directory: 1 lists its entries only, 2 also theirs, and so on.
    /// Never more than the work directory's `max_depth`.
    pub max_depth: usize,
}

impl Default for ListOpts {
    fn default() -> Self {
        Self {
            max_entries: 1000,
            max_depth: 1,
        }
    }
}

/// What an entry is. Symbolic links are reported as such and never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket, device or anything else the file tools refuse.
    Other,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Relative to the work directory's root, `/`-separated, each name escaped (see
    /// `name::escape`): no control, separator or invisible character, invalid UTF-8 as `\xNN`,
    /// and a literal `\` doubled. A path with no `\` in it is the entry's real path and can be
    /// passed back to the other tools as is.
    pub path: String,
    pub kind: EntryKind,
    /// The apparent size (`st_size`) of a regular file; 0 for everything else.
    pub size: u64,
}

/// The result of [`WorkDir::list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// Depth-first, each directory's names in byte order, so the same tree always lists the
    /// same way.
    pub entries: Vec<Entry>,
    /// Some entries were left out: more than `max_entries`, or more than
    /// [`MAX_SCANNED_NAMES`] names to read. (Entries below `max_depth` are not listed and do not
    /// count as truncation: their directory is listed, and can be listed itself.)
    pub truncated: bool,
}

impl WorkDir {
    /// Lists the directory `rel` (`.` or the empty string for the root), `opts.max_depth` levels
    /// deep, at most `opts.max_entries` entries.
    ///
    /// Refused: a symbolic link (or anything but a directory) at `rel` or any of its parents.
    /// Inside the listing, symbolic links and other odd entries are shown, never followed or
    /// opened; directories are entered with the same checks as every other open.
    pub fn list(&self, rel: &str, opts: &ListOpts) -> Result<Listing, WorkDirError> {
        let path = self.parse(rel, true)?;
        let fd = self.open_dir(&path, path.parts.len())?;
        let prefix = path.text();
        let here = if prefix.is_empty() { "." } else { &prefix };
        let dir = Dir::from_fd(fd).map_err(|e| FileError::io(here, e))?;
        let mut lister = Lister {
            wd: self,
            max_entries: opts.max_entries,
            scanned: 0,
            out: Vec::new(),
            truncated: false,
        };
        let depth = opts.max_depth.min(self.budget.max_depth);
        lister.dir(dir, &prefix, depth)?;
        Ok(Listing {
            entries: lister.out,
            truncated: lister.truncated,
        })
    }
}

struct Lister<'a> {
    wd: &'a WorkDir,
    max_entries: usize,
    scanned: usize,
    out: Vec<Entry>,
    truncated: bool,
}

impl Lister<'_> {
    /// Lists `dir` (shown as `prefix`) and, while `levels > 1`, its subdirectories.
    fn dir(&mut self, mut dir: Dir, prefix: &str, levels: usize) -> Result<(), WorkDirError> {
        if levels == 0 {
            return Ok(());
        }
        let here = if prefix.is_empty() { "." } else { prefix };
        // Keep only the smallest names that can still be shown, plus one to know whether any
        // was cut: memory stays bounded by `max_entries` however large the directory is.
        let keep = self
            .max_entries
            .saturating_sub(self.out.len())
            .saturating_add(1);
        let mut smallest: BinaryHeap<Vec<u8>> = BinaryHeap::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| FileError::io(here, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.scanned += 1;
            if self.scanned > MAX_SCANNED_NAMES {
                self.truncated = true;
                break;
            }
            if smallest.len() < keep || smallest.peek().is_some_and(|max| name < max.as_slice()) {
                smallest.push(name.to_vec());
                if smallest.len() > keep {
                    smallest.pop();
                }
            }
        }
        for raw in smallest.into_sorted_vec() {
            if self.out.len() >= self.max_entries {
                self.truncated = true;
                return Ok(());
            }
            // `readdir` names never contain NUL.
            let Ok(name) = CString::new(raw) else {
                continue;
            };
            let st = match fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed since the directory was read.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    let rel = join(prefix, &escape(name.as_bytes()));
                    return Err(FileError::io(&rel, e).into());
                }
            };
            let rel = join(prefix, &escape(name.as_bytes()));
            let (kind, size) = match kind(&st) {
                Kind::File => (EntryKind::File, u64::try_from(st.st_size).unwrap_or(0)),
                Kind::Dir => (EntryKind::Dir, 0),
                Kind::Symlink => (EntryKind::Symlink, 0),
                Kind::Other(_) => (EntryKind::Other, 0),
            };
            self.out.push(Entry {
                path: rel.clone(),
                kind,
                size,
            });
            if kind == EntryKind::Dir && levels > 1 && st.st_dev == self.wd.root_dev {
                // The same checked open as everywhere: if the directory was swapped for a link
                // since `fstatat`, this refuses it.
                if let Some(open::Entry::Dir(fd)) =
                    open_entry(&dir, name.as_c_str(), &rel, self.wd.root_dev)?
                {
                    let sub = Dir::from_fd(fd).map_err(|e| FileError::io(&rel, e))?;
                    self.dir(sub, &rel, levels - 1)?;
                }
            }
        }
        Ok(())
    }
}
