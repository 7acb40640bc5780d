//! Resolving the workload's executable once, with its identity (SBX-2).
//!
//! The resolver is the only code that searches `PATH`. It opens the file,
//! hashes the bytes through that open descriptor and records device, inode,
//! size, mtime, ctime and SHA-256. Immediately before exec the identity is
//! checked again (by the broker, and inside the sandbox on the inherited
//! descriptor and on the path); any difference refuses the launch. ELF
//! binaries are executed through the very descriptor that was hashed, so a
//! path swapped after the check cannot change what runs.
//!
//! Hashing reads the whole file on every launch (8 ms for a 6.8 MB
//! interpreter). For files no one but root can write, the digest of an
//! unchanged file comes from [`digest_cache`] instead; every other file is
//! hashed every time. Either way the digest is the SHA-256 of the bytes of
//! the inode that the descriptor holds.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub mod digest_cache;

pub use digest_cache::DigestCache;

/// What identifies one executable file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutableIdentity {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub sha256: String,
}

/// Why an executable could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ExeError {
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("{0} is not a regular executable file")]
    NotExecutable(PathBuf),
    #[error("cannot read executable {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("executable {0} changed between resolution and exec; launch refused")]
    Changed(PathBuf),
}

/// An executable resolved once: its identity and the open descriptor whose
/// bytes were hashed.
#[derive(Debug)]
pub struct ResolvedExecutable {
    identity: ExecutableIdentity,
    file: File,
    digest: DigestSource,
}

/// Where an identity's SHA-256 came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestSource {
    /// The bytes were read through the descriptor and hashed.
    Hashed,
    /// A root-only file unchanged since it was hashed (see [`digest_cache`]).
    Cached,
}

impl ResolvedExecutable {
    /// Resolves `program` the way a shell would (a name containing `/` is a
    /// path, relative to `cwd`; otherwise each `PATH` entry in order), then
    /// opens and hashes it.
    pub fn resolve(program: &str, search_path: &str, cwd: &Path) -> Result<Self, ExeError> {
        Self::resolve_with(program, search_path, cwd, digest_cache::global())
    }

    /// [`Self::resolve`] with a given digest cache.
    pub fn resolve_with(
        program: &str,
        search_path: &str,
        cwd: &Path,
        cache: &DigestCache,
    ) -> Result<Self, ExeError> {
        if program.is_empty() {
            return Err(ExeError::NotFound(String::new()));
        }
        let candidate = if program.contains('/') {
            let p = Path::new(program);
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                cwd.join(p)
            };
            if !abs.exists() {
                return Err(ExeError::NotFound(program.to_string()));
            }
            abs
        } else {
            search_path
                .split(':')
                .filter(|dir| dir.starts_with('/'))
                .map(|dir| Path::new(dir).join(program))
                .find(|p| is_executable_file(p))
                .ok_or_else(|| ExeError::NotFound(program.to_string()))?
        };
        let canonical = candidate.canonicalize().map_err(|source| ExeError::Io {
            path: candidate.clone(),
            source,
        })?;
        Self::open_with(&canonical, cache)
    }

    /// Opens an absolute, canonical path and records its identity.
    pub fn open(path: &Path) -> Result<Self, ExeError> {
        Self::open_with(path, digest_cache::global())
    }

    /// [`Self::open`] with a given digest cache.
    pub fn open_with(path: &Path, cache: &DigestCache) -> Result<Self, ExeError> {
        let io = |source| ExeError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Refuse anything but a regular file before opening it (a FIFO would
        // block the open), and open non-blocking in case one is swapped in.
        let pre = std::fs::metadata(path).map_err(io)?;
        if !pre.is_file() {
            return Err(ExeError::NotExecutable(path.to_path_buf()));
        }
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(path)
                .map_err(io)?
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(ExeError::NotExecutable(path.to_path_buf()));
        }
        // Decided on the opened descriptor, so it is about the file that
        // will run, whatever the path points at by now.
        let cacheable = digest_cache::root_only(&file, &meta, path);
        let cached = if cacheable {
            cache.get(&digest_cache::Key::of(&meta))
        } else {
            None
        };
        let (sha256, digest) = match cached {
            Some(sha256) => (sha256, DigestSource::Cached),
            None => {
                let sha256 = hash(&mut file).map_err(io)?;
                if cacheable {
                    let after = file.metadata().map_err(io)?;
                    cache.put(&meta, &after, sha256);
                }
                (sha256, DigestSource::Hashed)
            }
        };
        let identity = ExecutableIdentity {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: mtime_ns(&meta),
            ctime_ns: ctime_ns(&meta),
            sha256: hex(&sha256),
        };
        Ok(Self {
            identity,
            file,
            digest,
        })
    }

    /// Whether the digest was read from the cache or hashed now.
    pub fn digest_source(&self) -> DigestSource {
        self.digest
    }

    pub fn identity(&self) -> &ExecutableIdentity {
        &self.identity
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Checks that both the descriptor and the path still carry the
    /// recorded identity (no rehash: an in-place write changes ctime, which
    /// no caller can set).
    pub fn verify(&self) -> Result<(), ExeError> {
        let path = &self.identity.path;
        let by_fd = self.file.metadata().map_err(|source| ExeError::Io {
            path: path.clone(),
            source,
        })?;
        let by_path = std::fs::metadata(path).map_err(|_| ExeError::Changed(path.clone()))?;
        if !same_identity(&self.identity, &by_fd) || !same_identity(&self.identity, &by_path) {
            return Err(ExeError::Changed(path.clone()));
        }
        Ok(())
    }
}

/// SHA-256 of the whole file, read through the descriptor from its start
/// (the descriptor is fresh, so its offset is 0).
fn hash(file: &mut File) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

/// Compares recorded identity with fresh metadata (everything but the hash).
pub fn same_identity(id: &ExecutableIdentity, meta: &std::fs::Metadata) -> bool {
    meta.dev() == id.dev
        && meta.ino() == id.ino
        && meta.size() == id.size
        && mtime_ns(meta) == id.mtime_ns
        && ctime_ns(meta) == id.ctime_ns
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbx_2_resolves_through_path_with_identity() {
        let exe = ResolvedExecutable::resolve("true", "/nonexistent:/usr/bin:/bin", Path::new("/"))
            .unwrap();
        assert!(exe.identity().path.is_absolute());
        assert_eq!(exe.identity().sha256.len(), 64);
        exe.verify().unwrap();
    }

    #[test]
    fn sbx_2_missing_and_non_executable_are_refused() {
        assert!(matches!(
            ResolvedExecutable::resolve("no-such-cmd-xyz", "/usr/bin", Path::new("/")),
            Err(ExeError::NotFound(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("data.txt");
        std::fs::write(&f, "x").unwrap();
        assert!(matches!(
            ResolvedExecutable::resolve(f.to_str().unwrap(), "", Path::new("/")),
            Err(ExeError::NotExecutable(_))
        ));
    }

    #[test]
    fn sbx_2_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o755)).unwrap();
        assert!(matches!(
            ResolvedExecutable::resolve(fifo.to_str().unwrap(), "", Path::new("/")),
            Err(ExeError::NotExecutable(_))
        ));
    }

    #[test]
    fn sbx_2_replaced_executable_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\necho one\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = ResolvedExecutable::resolve(tool.to_str().unwrap(), "", Path::new("/")).unwrap();
        exe.verify().unwrap(); // positive control: unchanged file passes

        // Replace by rename: same path, new inode.
        let other = dir.path().join("other");
        std::fs::write(&other, "#!/bin/sh\necho two\n").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&other, &tool).unwrap();
        assert!(matches!(exe.verify(), Err(ExeError::Changed(_))));
    }

    #[test]
    fn sbx_2_in_place_rewrite_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\necho one\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = ResolvedExecutable::resolve(tool.to_str().unwrap(), "", Path::new("/")).unwrap();
        // Same inode, new bytes (a different length, so the check does not
        // hinge on the timestamp granularity of the filesystem).
        std::fs::write(&tool, "#!/bin/sh\necho twenty\n").unwrap();
        assert!(matches!(exe.verify(), Err(ExeError::Changed(_))));
    }
}
