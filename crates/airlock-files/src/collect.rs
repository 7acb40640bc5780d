//! Collecting a sandbox output folder (RUN-3, DUR-4) into the artifact store.
//!
//! The walk is depth-first in byte order of names, so the same folder always yields the same
//! records and the same first error. Budgets are checked in this order, each before any byte
//! of the entry is read: entry count while listing a directory (so a directory with a million
//! entries costs at most `max_files` names of memory), name rule, depth, entry type and links,
//! claimed size (`st_size`), and finally the bytes actually read, because `st_size` is only a
//! claim: a file that grows after it was measured is cut at the budget.
//!
//! Staging and publishing are separate phases: every file is first staged in the store's
//! `tmp/`, and only when the whole folder passed are the staged files renamed into `sha256/`.
//! A violation therefore publishes nothing, and dropping the staged files removes them.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::dir::Dir;
use nix::sys::stat::FileStat;
use serde::{Deserialize, Serialize};

use crate::name::{display, join, parse_name};
use crate::open::{Entry, open_entry, open_root};
use crate::sniff::sniff;
use crate::store::{StageError, Staged};
use crate::{ArtifactStore, FileError};

/// Limits for one collection. Checked before reading, and again while reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Entries (regular files *and* directories) in the whole tree. Directories count so a tree
    /// of empty directories cannot make the walk unbounded.
    pub max_files: usize,
    /// Bytes of all files together.
    pub max_total_bytes: u64,
    /// Bytes of one file.
    pub max_file_bytes: u64,
    /// Path components of any entry: `a.txt` is at depth 1, `a/b.txt` at depth 2.
    pub max_depth: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_files: 1000,
            max_total_bytes: 1 << 30,
            max_file_bytes: 256 << 20,
            max_depth: 16,
        }
    }
}

/// One published output file, ready to be recorded in the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collected {
    /// Path relative to the output folder, components joined with `/`; every component passed
    /// the name rule.
    pub rel_path: String,
    /// Bytes actually read and published.
    pub size: u64,
    /// Lowercase hex SHA-256 of those bytes; also the blob's name in the store.
    pub sha256: String,
    /// From [`sniff`](crate::sniff).
    pub media_type: &'static str,
}

/// Walks `dir` (sorted, deterministic) and publishes every regular file into `store`.
///
/// The first violation fails the whole collection and nothing of it is published (see the
/// module header). Records are sorted by `rel_path`.
pub fn collect_into(
    dir: &Path,
    budget: &Budget,
    store: &ArtifactStore,
) -> Result<Vec<Collected>, FileError> {
    let (root, root_dev) = open_root(dir)?;
    let root = Dir::from_fd(root).map_err(|e| FileError::io(".", e))?;
    let mut walk = Walk {
        budget,
        store,
        root_dev,
        entries: 0,
        total: 0,
        staged: Vec::new(),
    };
    walk.dir(root, "", 0)?;

    let mut out = Vec::with_capacity(walk.staged.len());
    // If one publish fails, the remaining staged files are dropped (and removed) with the
    // iterator; blobs already renamed are complete and immutable, so they may stay.
    for (rel_path, media_type, staged) in walk.staged {
        let (sha256, size) = store.publish(staged)?;
        out.push(Collected {
            rel_path,
            size,
            sha256,
            media_type,
        });
    }
    out.sort_by(|a, b| a.rel_path.cmp(&b.rel_path));
    Ok(out)
}

/// Reads one small file at `rel` (e.g. `result.json`, or `sub/result.json`) under `dir` with the
/// same rules as [`collect_into`]; `Ok(None)` if it is absent.
///
/// `rel` is split on `/` and every component must pass the name rule, so `..`, absolute paths,
/// empty components and trailing slashes are [`FileError::BadName`].
pub fn read_bounded(dir: &Path, rel: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, FileError> {
    let bad = || FileError::BadName {
        path: display(rel.as_bytes()),
    };
    let mut parts = Vec::new();
    for part in rel.split('/') {
        let name = parse_name(part.as_bytes()).ok_or_else(bad)?;
        parts.push((name, CString::new(name).map_err(|_| bad())?));
    }
    let last = parts.len().saturating_sub(1);

    let (mut cur, root_dev) = open_root(dir)?;
    let mut walked = String::new();
    for (i, (name, cname)) in parts.iter().enumerate() {
        walked = join(&walked, name);
        match open_entry(&cur, cname, &walked, root_dev)? {
            None => return Ok(None),
            Some(Entry::Dir(fd)) if i < last => cur = fd,
            Some(Entry::Dir(_)) => {
                return Err(FileError::NotRegular {
                    path: display(walked.as_bytes()),
                    kind: "directory",
                });
            }
            // `a/b` where `a` is a file: there is no such path, as open(2) would say.
            Some(Entry::File(..)) if i < last => return Ok(None),
            Some(Entry::File(fd, st)) => return read_small(fd, &st, &walked, max_bytes).map(Some),
        }
    }
    Ok(None)
}

fn read_small(fd: OwnedFd, st: &FileStat, rel: &str, max: u64) -> Result<Vec<u8>, FileError> {
    let too_large = || FileError::TooLarge {
        path: display(rel.as_bytes()),
        limit: max,
    };
    let claimed = u64::try_from(st.st_size).unwrap_or(0);
    if claimed > max {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(usize::try_from(claimed).unwrap_or(0));
    File::from(fd)
        .take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| FileError::io(&display(rel.as_bytes()), e))?;
    if buf.len() as u64 > max {
        return Err(too_large());
    }
    Ok(buf)
}

struct Walk<'a> {
    budget: &'a Budget,
    store: &'a ArtifactStore,
    root_dev: u64,
    entries: usize,
    total: u64,
    staged: Vec<(String, &'static str, Staged)>,
}

impl Walk<'_> {
    /// Collects directory `dir`, whose path is `prefix` and whose own depth is `depth`.
    fn dir(&mut self, mut dir: Dir, prefix: &str, depth: usize) -> Result<(), FileError> {
        let here = if prefix.is_empty() { "." } else { prefix };
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| FileError::io(&display(here.as_bytes()), e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.budget.max_files {
                return Err(FileError::TooManyFiles {
                    limit: self.budget.max_files,
                });
            }
            names.push(name.to_vec());
        }
        names.sort_unstable();

        for raw in names {
            let Some(name) = parse_name(&raw) else {
                return Err(FileError::BadName {
                    path: join(&display(prefix.as_bytes()), &display(&raw)),
                });
            };
            let rel = join(prefix, name);
            if depth + 1 > self.budget.max_depth {
                return Err(FileError::TooDeep {
                    path: display(rel.as_bytes()),
                });
            }
            let cname = CString::new(name).map_err(|_| FileError::BadName {
                path: display(rel.as_bytes()),
            })?;
            match open_entry(&dir, &cname, &rel, self.root_dev)? {
                None => return Err(FileError::io(&display(rel.as_bytes()), "entry vanished")),
                Some(Entry::Dir(fd)) => {
                    let sub =
                        Dir::from_fd(fd).map_err(|e| FileError::io(&display(rel.as_bytes()), e))?;
                    self.dir(sub, &rel, depth + 1)?;
                }
                Some(Entry::File(fd, st)) => self.file(fd, &st, rel, name)?,
            }
        }
        Ok(())
    }

    fn file(
        &mut self,
        fd: OwnedFd,
        st: &FileStat,
        rel: String,
        name: &str,
    ) -> Result<(), FileError> {
        let per_file = self.budget.max_file_bytes;
        let remaining = self.budget.max_total_bytes.saturating_sub(self.total);
        let too_large = || FileError::TooLarge {
            path: display(rel.as_bytes()),
            limit: per_file,
        };
        let max_total = self.budget.max_total_bytes;
        let total_too_large = || FileError::TotalTooLarge { limit: max_total };
        // The claim first: cheap, and it spares copying a file we would reject anyway.
        let claimed = u64::try_from(st.st_size).unwrap_or(0);
        if claimed > per_file {
            return Err(too_large());
        }
        if claimed > remaining {
            return Err(total_too_large());
        }
        // Then the bytes: whichever budget is tighter stops the copy.
        let limit = per_file.min(remaining);
        let staged = self
            .store
            .stage(File::from(fd), limit)
            .map_err(|e| match e {
                StageError::Exceeded if limit == per_file => too_large(),
                // The remaining total was the tighter budget, and the file went past it.
                StageError::Exceeded => total_too_large(),
                StageError::Io(e) => FileError::io(&display(rel.as_bytes()), e),
            })?;
        self.total += staged.size;
        let media = sniff(&staged.prefix, name);
        self.staged.push((rel, media, staged));
        Ok(())
    }
}
