//! Moving files of the data directory into a trash area and back (DUR-6, `airlock gc`).
//!
//! A candidate is checked when it is planned (its [`Identity`]: device, inode, size, and that
//! it is a regular file) and again when it is moved: [`move_checked`] opens the name with
//! `O_NOFOLLOW`, compares the descriptor's identity with the planned one, renames with
//! `RENAME_NOREPLACE`, and compares what arrived at the destination once more. Anything swapped
//! in between — a symbolic link, another file, a directory — is refused, and a swap that lands
//! after the rename is put back where it was. Nothing here follows a symbolic link or replaces
//! an existing name.
//!
//! What this module must not do: delete anything (purging is the caller's, after its recovery
//! window), or know why a file is a candidate.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{AT_FDCWD, OFlag, RenameFlags, renameat2};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::hex;

/// What a file was when it was checked: a regular file with this device, inode and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

/// Why a move or restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TrashError {
    /// The name no longer is the file that was checked (a symbolic link, another file, gone).
    #[error("{path}: changed since it was checked ({why})")]
    Changed { path: String, why: String },
    /// The destination exists; nothing is ever overwritten.
    #[error("{path}: already exists")]
    Exists { path: String },
    #[error("{path}: {error}")]
    Io { path: String, error: String },
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> TrashError {
    TrashError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

/// The identity of the regular file at `path`, without following a final symbolic link.
pub fn identity(path: &Path) -> Result<Identity, TrashError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| io_err(path, e))?;
    if !meta.file_type().is_file() {
        return Err(TrashError::Changed {
            path: path.display().to_string(),
            why: "not a regular file".into(),
        });
    }
    Ok(Identity {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.len(),
    })
}

/// The SHA-256 (lowercase hex) of the regular file at `path`, opened with `O_NOFOLLOW`.
pub fn sha256_file(path: &Path) -> Result<String, TrashError> {
    let mut file = open_nofollow(path)?;
    hash_reader(&mut file).map_err(|e| io_err(path, e))
}

fn open_nofollow(path: &Path) -> Result<File, TrashError> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                TrashError::Changed {
                    path: path.display().to_string(),
                    why: "a symbolic link".into(),
                }
            } else {
                io_err(path, e)
            }
        })
}

fn same(a: &std::fs::Metadata, want: Identity) -> bool {
    a.file_type().is_file() && a.dev() == want.dev && a.ino() == want.ino && a.len() == want.size
}

/// Moves `src` to `dest` (which must not exist; its parent is created 0700) only if `src` is
/// still the regular file `want` with content `sha256`; both directories are synced afterwards.
///
/// The descriptor opened for the check stays open across the rename, so its inode cannot be
/// freed and its number reused: a destination with the same device and inode is that file.
pub fn move_checked(
    src: &Path,
    dest: &Path,
    want: Identity,
    sha256: &str,
) -> Result<(), TrashError> {
    let changed = |why: &str| TrashError::Changed {
        path: src.display().to_string(),
        why: why.to_string(),
    };
    let mut file = open_nofollow(src)?;
    let meta = file.metadata().map_err(|e| io_err(src, e))?;
    if !same(&meta, want) {
        return Err(changed("another file"));
    }
    if hash_reader(&mut file).map_err(|e| io_err(src, e))? != sha256 {
        return Err(changed("other content"));
    }
    let parent = dest.parent().ok_or_else(|| io_err(dest, "no parent"))?;
    make_dirs(parent)?;
    rename_noreplace(src, dest)?;
    // The name may have been swapped between the check and the rename: what arrived is the
    // truth. Put it back if it is not the file that was checked.
    let arrived = std::fs::symlink_metadata(dest).map_err(|e| io_err(dest, e))?;
    if !same(&arrived, want) {
        let back = rename_noreplace(dest, src);
        return Err(match back {
            Ok(()) => changed("swapped before the move; put back"),
            Err(e) => changed(&format!(
                "swapped before the move; left at the destination: {e}"
            )),
        });
    }
    drop(file);
    sync_parent(src)?;
    sync_parent(dest)?;
    Ok(())
}

fn hash_reader(file: &mut File) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match std::io::Read::read(file, &mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// Renames `from` to `to` without replacing anything at `to` (creating `to`'s parent 0700),
/// then syncs both directories.
pub fn put_back(from: &Path, to: &Path) -> Result<(), TrashError> {
    let parent = to.parent().ok_or_else(|| io_err(to, "no parent"))?;
    make_dirs(parent)?;
    rename_noreplace(from, to)?;
    sync_parent(from)?;
    sync_parent(to)?;
    Ok(())
}

fn rename_noreplace(from: &Path, to: &Path) -> Result<(), TrashError> {
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(|e| {
        if e == nix::errno::Errno::EEXIST {
            TrashError::Exists {
                path: to.display().to_string(),
            }
        } else {
            io_err(from, e)
        }
    })
}

/// Creates `dir` and its missing parents with mode 0700.
pub fn make_dirs(dir: &Path) -> Result<(), TrashError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_err(dir, e))
}

/// `fsync` of the directory holding `path`.
pub fn sync_parent(path: &Path) -> Result<(), TrashError> {
    let parent = path.parent().ok_or_else(|| io_err(path, "no parent"))?;
    File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(parent, e))
}

/// Writes `bytes` to `path` atomically (a temporary file beside it, `fsync`, rename, `fsync` of
/// the directory): a reader sees the old or the new content, never a prefix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrashError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&tmp, e)),
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(&tmp)
        .map_err(|e| io_err(&tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    sync_parent(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn dur_6_move_checked_moves_the_checked_file_and_put_back_restores_it() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a/blob");
        make_dirs(src.parent().unwrap()).unwrap();
        std::fs::write(&src, b"bytes").unwrap();
        let want = identity(&src).unwrap();
        let sha = sha256_file(&src).unwrap();
        let dest = dir.path().join("trash/1/blob");
        move_checked(&src, &dest, want, &sha).unwrap();
        assert!(!src.exists());
        assert_eq!(std::fs::read(&dest).unwrap(), b"bytes");
        // Nothing is overwritten on the way back.
        std::fs::write(&src, b"new").unwrap();
        assert!(matches!(
            put_back(&dest, &src),
            Err(TrashError::Exists { .. })
        ));
        std::fs::remove_file(&src).unwrap();
        put_back(&dest, &src).unwrap();
        assert_eq!(std::fs::read(&src).unwrap(), b"bytes");
    }

    #[test]
    fn dur_6_a_candidate_swapped_for_a_symlink_or_another_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"host file").unwrap();
        let src = dir.path().join("blob");
        std::fs::write(&src, b"bytes").unwrap();
        let want = identity(&src).unwrap();
        let sha = sha256_file(&src).unwrap();

        // A symbolic link in its place.
        std::fs::remove_file(&src).unwrap();
        symlink(&outside, &src).unwrap();
        let dest = dir.path().join("trash/blob");
        let e = move_checked(&src, &dest, want, &sha).unwrap_err();
        assert!(matches!(e, TrashError::Changed { .. }), "{e}");
        assert!(!dest.exists() && std::fs::symlink_metadata(&dest).is_err());
        assert_eq!(std::fs::read(&outside).unwrap(), b"host file");

        // Another regular file of the same size in its place.
        std::fs::remove_file(&src).unwrap();
        std::fs::write(&src, b"other").unwrap();
        let e = move_checked(&src, &dest, want, &sha).unwrap_err();
        assert!(matches!(e, TrashError::Changed { .. }), "{e}");
        assert!(src.exists() && !dest.exists());

        // Control: the identity of what is there now moves.
        let now = identity(&src).unwrap();
        let now_sha = sha256_file(&src).unwrap();
        move_checked(&src, &dest, now, &now_sha).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"other");
    }
}
