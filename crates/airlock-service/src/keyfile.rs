//! 32-byte secrets in the key directory that the service creates itself
//! on first use (`download.key`, `audit-signing.key`): created 0600 with
//! `O_EXCL` from the OS CSPRNG, read only when they are regular files
//! readable by their owner alone, never followed through a symbolic link.
//! The directory is created 0700.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

pub(crate) const KEY_LEN: usize = 32;

/// Reads `dir/name`, or creates it (0600, `O_EXCL`) with 32 bytes from the OS CSPRNG.
/// Two processes starting together: one creates, the other sees `AlreadyExists` and reads the
/// winner's key once it is complete.
pub(crate) fn load_or_create(dir: &Path, name: &str) -> std::io::Result<[u8; KEY_LEN]> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(name);
    for _ in 0..100 {
        if let Some(key) = read(&path, name)? {
            return Ok(key);
        }
        let mut key = [0u8; KEY_LEN];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(&key)?;
                f.sync_all()?;
                std::fs::File::open(dir)?.sync_all()?;
                return Ok(key);
            }
            // Someone else is creating it: read theirs once it is written.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!("{name} is incomplete")))
}

/// `Ok(None)` when the key file is missing or still being written.
pub(crate) fn read(path: &Path, name: &str) -> std::io::Result<Option<[u8; KEY_LEN]>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_file() || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{name} must be a regular file readable by its owner only"
        )));
    }
    let file = std::fs::File::open(path)?;
    let opened = file.metadata()?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(std::io::Error::other(format!(
            "{name} changed while opening"
        )));
    }
    let mut buf = Vec::with_capacity(KEY_LEN + 1);
    file.take(KEY_LEN as u64 + 1).read_to_end(&mut buf)?;
    match <[u8; KEY_LEN]>::try_from(buf.as_slice()) {
        Ok(k) => Ok(Some(k)),
        Err(_) if buf.len() < KEY_LEN => Ok(None),
        Err(_) => Err(std::io::Error::other(format!("{name} is not 32 bytes"))),
    }
}
