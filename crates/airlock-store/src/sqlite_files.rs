//! The SQLite database's files are private to the airlock user: the
//! database file is created 0600 before SQLite opens it (SQLite gives its
//! `-wal` and `-shm` files the database file's mode), and files left with
//! looser modes by an older version are tightened. The directory that holds
//! them is created 0700 when missing.
//!
//! Why here and not through the umask: the store is a library and must not
//! change process-wide state that the sandbox and every other file the
//! process writes would inherit.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Suffixes of the files SQLite keeps next to a database.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The database file a `sqlite:` URL names (parsed as sqlx parses it) and
/// whether it may be created; `None` for in-memory databases.
pub(crate) fn database_path(url: &str) -> Option<(PathBuf, bool)> {
    let opts = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let has = |kv: &str| query.split('&').any(|p| p == kv);
    if url.contains(":memory:") || has("mode=memory") {
        return None;
    }
    let path = opts.get_filename();
    (!path.as_os_str().is_empty()).then(|| (path.to_path_buf(), !has("mode=ro")))
}

/// Removes group and other bits from a regular file or directory we find
/// at `path` (never through a symlink); absent is fine.
fn tighten(path: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if (meta.is_file() || meta.is_dir()) && mode & 0o077 != 0 {
        std::fs::set_permissions(path, Permissions::from_mode(mode & !0o077))?;
    }
    Ok(())
}

/// Makes the database named by `url` private before it is opened: its
/// directory exists (0700 when created here), the file exists 0600, and
/// the file and its companions carry no group or other permission bits.
pub(crate) fn make_private(url: &str) -> std::io::Result<()> {
    let Some((db, may_create)) = database_path(url) else {
        return Ok(());
    };
    if may_create {
        if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
            DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&db)
        {
            // An empty file is an empty SQLite database.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    tighten(&db)?;
    for suffix in COMPANIONS {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        tighten(Path::new(&name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn database_path_follows_sqlx_and_skips_memory() {
        assert_eq!(
            database_path("sqlite:///tmp/x/airlock.db?mode=rwc"),
            Some((PathBuf::from("/tmp/x/airlock.db"), true))
        );
        assert_eq!(
            database_path("sqlite://data/airlock.db"),
            Some((PathBuf::from("data/airlock.db"), true))
        );
        assert_eq!(
            database_path("sqlite://data/airlock.db?mode=ro"),
            Some((PathBuf::from("data/airlock.db"), false))
        );
        assert_eq!(database_path("sqlite::memory:"), None);
        assert_eq!(database_path("sqlite://shared?mode=memory"), None);
    }

    #[test]
    fn a_new_database_is_0600_and_loose_files_are_tightened() {
        let root = tempfile::tempdir().unwrap();
        let db = root.path().join("new/airlock.db");
        make_private(&format!("sqlite://{}", db.display())).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(db.parent().unwrap()), 0o700);
        // Positive control: files an older version left 0644 are loose
        // before, private after.
        let wal = root.path().join("new/airlock.db-wal");
        std::fs::write(&wal, b"").unwrap();
        for p in [&db, &wal] {
            std::fs::set_permissions(p, Permissions::from_mode(0o644)).unwrap();
            assert_eq!(mode(p), 0o644);
        }
        make_private(&format!("sqlite://{}", db.display())).unwrap();
        assert_eq!((mode(&db), mode(&wal)), (0o600, 0o600));
    }
}
