//! File-system helpers for the key directory: ownership and mode checks, reads that refuse
//! symlinks and loose modes, and atomic writes (temp file + fsync + rename + directory fsync).
//!
//! Checks run on the opened file descriptor (`fstat`), not on the path, so a file swapped
//! between check and read is still the one checked.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use zeroize::Zeroizing;

use crate::error::VaultError;

/// Mode of the key directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file in the key directory.
pub const FILE_MODE: u32 = 0o600;
/// Bits that must be clear on the directory and its files: nothing for group or others.
const FORBIDDEN_BITS: u32 = 0o077;
/// Prefix of temporary files written by [`write_atomic`]; stale ones are removed on open.
pub const TEMP_PREFIX: &str = ".tmp-";

pub fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn check_owner_and_mode(path: &Path, meta: &fs::Metadata, allowed: u32) -> Result<(), VaultError> {
    let expected = current_uid();
    if meta.uid() != expected {
        return Err(VaultError::WrongOwner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            expected,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & FORBIDDEN_BITS != 0 {
        return Err(VaultError::InsecurePermissions {
            path: path.to_path_buf(),
            mode,
            allowed,
        });
    }
    Ok(())
}

/// Checks the key directory itself: a real directory (not a symlink), ours, mode 0700 or
/// stricter.
pub fn check_dir(path: &Path) -> Result<(), VaultError> {
    let meta = fs::symlink_metadata(path).map_err(VaultError::io(path))?;
    if !meta.file_type().is_dir() {
        return Err(VaultError::WrongFileType {
            path: path.to_path_buf(),
            expected: "directory",
        });
    }
    check_owner_and_mode(path, &meta, DIR_MODE)
}

/// Creates the key directory (and missing parents) with mode 0700, whatever the umask.
pub fn create_dir(path: &Path) -> Result<(), VaultError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
        .map_err(VaultError::io(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE)).map_err(VaultError::io(path))
}

fn open_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Reads a key-directory file after checking (on the descriptor) that it is a regular file,
/// ours and mode 0600 or stricter. `Ok(None)` when it does not exist. At most `limit` bytes are
/// read; the caller sees a longer file as `limit + 1` bytes and refuses it.
pub fn read_checked(path: &Path, limit: u64) -> Result<Option<Zeroizing<Vec<u8>>>, VaultError> {
    let file = match open_nofollow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink fails with ELOOP.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(VaultError::WrongFileType {
                path: path.to_path_buf(),
                expected: "regular file (it is a symlink)",
            });
        }
        Err(e) => return Err(VaultError::io(path)(e)),
    };
    let meta = file.metadata().map_err(VaultError::io(path))?;
    if !meta.file_type().is_file() {
        return Err(VaultError::WrongFileType {
            path: path.to_path_buf(),
            expected: "regular file",
        });
    }
    check_owner_and_mode(path, &meta, FILE_MODE)?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(VaultError::io(path))?;
    Ok(Some(bytes))
}

/// Checks a key-directory file that is not read (e.g. a retired KEK kept for the record).
/// `Ok(false)` when it does not exist.
pub fn check_file(path: &Path) -> Result<bool, VaultError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => {
            check_owner_and_mode(path, &meta, FILE_MODE).map(|()| true)
        }
        Ok(_) => Err(VaultError::WrongFileType {
            path: path.to_path_buf(),
            expected: "regular file",
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(VaultError::io(path)(e)),
    }
}

/// Writes `dir/name` atomically with mode 0600: a temp file is written and fsynced, renamed over
/// the target, and the directory is fsynced so the rename itself is durable. A crash leaves
/// either the old or the new content, never a mix.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), VaultError> {
    let target = dir.join(name);
    let temp: PathBuf = dir.join(format!("{TEMP_PREFIX}{name}"));
    // A stale temp file from a crash: we hold the directory lock, so nobody else is writing it.
    match fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(VaultError::io(&temp)(e)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temp)
        .map_err(VaultError::io(&temp))?;
    // create_new applied the umask, which can only remove bits; set the mode exactly anyway.
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(VaultError::io(&temp))?;
    file.write_all(bytes).map_err(VaultError::io(&temp))?;
    file.sync_all().map_err(VaultError::io(&temp))?;
    drop(file);
    fs::rename(&temp, &target).map_err(VaultError::io(&target))?;
    sync_dir(dir)
}

/// Fsyncs a directory so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), VaultError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(VaultError::io(dir))
}

/// Removes temp files left by a crash in the middle of [`write_atomic`].
pub fn remove_stale_temps(dir: &Path) -> Result<(), VaultError> {
    for entry in fs::read_dir(dir).map_err(VaultError::io(dir))? {
        let entry = entry.map_err(VaultError::io(dir))?;
        if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            let path = entry.path();
            fs::remove_file(&path).map_err(VaultError::io(&path))?;
        }
    }
    Ok(())
}

/// Fills `buf` from the operating system's CSPRNG.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), VaultError> {
    getrandom::fill(buf).map_err(|e| VaultError::Randomness(e.to_string()))
}
