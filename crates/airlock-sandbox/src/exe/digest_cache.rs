//! The executable-identity cache: SHA-256 digests of executables that no
//! one but root can write, keyed by everything `fstat` says about the file.
//!
//! Why it is safe. A digest is served only for a file whose opened
//! descriptor shows owner uid 0 and no group or other write bit (the group
//! bits are the ACL mask when the file has an ACL, so no named user or group
//! can hold write either), on a local file system whose timestamps the
//! kernel keeps, in a directory chain that is root-owned and writable by no
//! one else. Such a file changes only by root's action. Any write changes
//! mtime and ctime, and ctime cannot be set from user space (`utimensat`
//! sets mtime and atime, and itself moves ctime to now); a replacement is a
//! new inode. The key holds device, inode, size, mtime, ctime, owner, group
//! and mode, so a changed file misses and is hashed again.
//!
//! Timestamps are only as fine as the kernel's coarse clock (a jiffy) or the
//! file system's granularity (a second on some), so a rewrite in the same
//! tick as the hashed version could keep its ctime. A digest is therefore
//! stored only when the file's ctime is at least [`SETTLE`] in the past at
//! hashing time: any later write lands at a later ctime. The digest is also
//! stored only when `fstat` after hashing equals `fstat` before, so a write
//! during hashing is never cached.
//!
//! What it must not do: decide anything about files a non-root user can
//! write. Those are hashed on every launch, as before; the cache never
//! widens what runs, it only skips re-reading bytes root has not touched.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How far in the past a file's ctime must be before its digest is stored.
/// Two seconds covers the coarsest timestamps of the file systems in
/// [`LOCAL_FILE_SYSTEMS`] (one second) and the kernel's coarse clock.
pub const SETTLE: Duration = Duration::from_secs(2);

/// At most this many digests are held; when full the map is cleared (a few
/// misses cost one hash each, and the bound needs no eviction policy).
const CAPACITY: usize = 1024;

/// File systems whose ctime the local kernel maintains. FUSE and network
/// file systems are absent: their server decides what `stat` says and who
/// may write, so nothing about their files is cached.
const LOCAL_FILE_SYSTEMS: &[nix::sys::statfs::FsType] = {
    use nix::sys::statfs::*;
    &[
        EXT4_SUPER_MAGIC, // ext2, ext3 and ext4 share the magic
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        TMPFS_MAGIC,
        OVERLAYFS_SUPER_MAGIC,
        FsType(0x7371_7368 as _), // squashfs (no nix constant)
    ]
};

/// Everything `fstat` reports that an in-place write, a chmod, a chown or a
/// replacement would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    uid: u32,
    gid: u32,
    mode: u32,
}

impl Key {
    pub(crate) fn of(meta: &Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: super::mtime_ns(meta),
            ctime_ns: super::ctime_ns(meta),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        }
    }
}

/// A bounded map from [`Key`] to digest. The launch path uses the
/// process-wide [`global`] one; tests make their own with a shorter settle
/// time.
#[derive(Debug)]
pub struct DigestCache {
    digests: Mutex<HashMap<Key, [u8; 32]>>,
    settle: Duration,
}

impl DigestCache {
    pub fn new(settle: Duration) -> Self {
        Self {
            digests: Mutex::new(HashMap::new()),
            settle,
        }
    }

    /// The digest stored for this key, if any. Callers look up only files
    /// that passed [`root_only`].
    pub(crate) fn get(&self, key: &Key) -> Option<[u8; 32]> {
        // A poisoned lock only means another launch panicked mid-insert;
        // the map holds whole entries either way.
        let map = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).copied()
    }

    /// Stores a digest computed from `before`'s file if the file has
    /// settled and did not change while it was hashed (`after`).
    pub(crate) fn put(&self, before: &Metadata, after: &Metadata, digest: [u8; 32]) {
        let key = Key::of(before);
        if key != Key::of(after) || !self.settled(key.ctime_ns) {
            return;
        }
        let mut map = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(key, digest);
    }

    fn settled(&self, ctime_ns: i128) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return false;
        };
        let now_ns = i128::try_from(now.as_nanos()).unwrap_or(i128::MAX);
        let settle_ns = i128::try_from(self.settle.as_nanos()).unwrap_or(i128::MAX);
        ctime_ns <= now_ns.saturating_sub(settle_ns)
    }
}

/// The process-wide cache every launch uses.
pub fn global() -> &'static DigestCache {
    static CACHE: LazyLock<DigestCache> = LazyLock::new(|| DigestCache::new(SETTLE));
    &CACHE
}

/// Whether no one but root can write `file` (its `fstat` is `meta`) or
/// replace it at `path`: root-owned with no group or other write on the
/// file and on every directory above it, on a local file system.
///
/// Group write is refused even for gid 0: membership of group root is not
/// root, and refusing it keeps the rule one line. The sticky bit does not
/// help either (`/tmp`'s 1777 lets anyone add files next to root's). A
/// path with a symbolic link in it is refused (the resolver passes
/// canonical paths), so the directories checked are the ones the path
/// walks through.
pub(crate) fn root_only(file: &File, meta: &Metadata, path: &Path) -> bool {
    fn only_root_writes(m: &Metadata) -> bool {
        m.uid() == 0 && m.mode() & 0o022 == 0
    }
    if !only_root_writes(meta) {
        return false;
    }
    let local = nix::sys::statfs::fstatfs(file)
        .is_ok_and(|s| LOCAL_FILE_SYSTEMS.contains(&s.filesystem_type()));
    if !local || !path.is_absolute() {
        return false;
    }
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && only_root_writes(&m)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use sha2::{Digest, Sha256};

    use super::DigestCache;
    use crate::exe::{DigestSource, ResolvedExecutable, hex};

    /// Tests use a short settle time and wait it out, so a file they write
    /// can be cached; the waiting is a precondition, never an assertion.
    const TEST_SETTLE: Duration = Duration::from_millis(100);

    fn settle() {
        std::thread::sleep(TEST_SETTLE * 2);
    }

    /// A directory whose whole chain only root can write: under the test
    /// binary's own (root-built) directory. `None` when not root, since
    /// only root can make the root-owned files the cache is for.
    fn root_only_dir() -> Option<tempfile::TempDir> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: the executable-identity cache tests need root");
            return None;
        }
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::Builder::new()
            .prefix("exe-cache-")
            .tempdir_in(exe.parent().unwrap())
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(dir)
    }

    fn write_exe(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn sha(path: &Path) -> String {
        hex(&Sha256::digest(std::fs::read(path).unwrap()))
    }

    fn resolve(path: &Path, cache: &DigestCache) -> (DigestSource, String) {
        let exe = ResolvedExecutable::open_with(path, cache).unwrap();
        (exe.digest_source(), exe.identity().sha256.clone())
    }

    /// Writes, settles and resolves twice: the second resolve must be a
    /// hit (the positive control every test below relies on).
    fn cached(path: &Path, bytes: &[u8], cache: &DigestCache) -> String {
        write_exe(path, bytes);
        settle();
        let first = resolve(path, cache);
        assert_eq!(first, (DigestSource::Hashed, sha(path)));
        let second = resolve(path, cache);
        assert_eq!(
            second,
            (DigestSource::Cached, sha(path)),
            "control: a settled root-only file is served from the cache (is the test directory chain root-only?)"
        );
        second.1
    }

    #[test]
    fn sbx_2_cached_digest_equals_hashing_the_file() {
        let Some(dir) = root_only_dir() else { return };
        let cache = DigestCache::new(TEST_SETTLE);
        let tool = dir.path().join("tool");
        let digest = cached(&tool, b"#!/bin/sh\necho one\n", &cache);
        assert_eq!(digest, hex(&Sha256::digest(b"#!/bin/sh\necho one\n")));
        // And through PATH search, as a launch resolves it.
        let exe = ResolvedExecutable::resolve_with(
            "tool",
            dir.path().to_str().unwrap(),
            Path::new("/"),
            &cache,
        )
        .unwrap();
        assert_eq!(exe.digest_source(), DigestSource::Cached);
        assert_eq!(exe.identity().sha256, digest);
        exe.verify().unwrap();
    }

    #[test]
    fn sbx_2_cache_never_serves_a_file_rewritten_in_place() {
        let Some(dir) = root_only_dir() else { return };
        let cache = DigestCache::new(TEST_SETTLE);
        type Rewrite = fn(&Path);
        let cases: [(&str, Rewrite); 3] = [
            ("same size, new bytes", |p| {
                std::fs::write(p, b"#!/bin/sh\necho TWO\n").unwrap()
            }),
            ("longer", |p| {
                std::fs::write(p, b"#!/bin/sh\necho twenty\n").unwrap()
            }),
            ("same size, mtime put back", |p| {
                let before = std::fs::metadata(p).unwrap();
                std::fs::write(p, b"#!/bin/sh\necho TWO\n").unwrap();
                let f = std::fs::File::options().write(true).open(p).unwrap();
                let t = nix::sys::time::TimeSpec::new(before.mtime(), before.mtime_nsec());
                nix::sys::stat::futimens(&f, &t, &t).unwrap();
            }),
        ];
        for (name, rewrite) in cases {
            let tool = dir.path().join(name.replace([' ', ','], "-"));
            let old = cached(&tool, b"#!/bin/sh\necho one\n", &cache);
            let ino = std::fs::metadata(&tool).unwrap().ino();
            rewrite(&tool);
            assert_eq!(
                std::fs::metadata(&tool).unwrap().ino(),
                ino,
                "{name}: in place"
            );
            let (source, digest) = resolve(&tool, &cache);
            assert_eq!(
                (source, &digest),
                (DigestSource::Hashed, &sha(&tool)),
                "{name}"
            );
            assert_ne!(digest, old, "{name}: the old digest is never reported");
        }
    }

    #[test]
    fn sbx_2_cache_never_serves_a_file_replaced_by_rename() {
        let Some(dir) = root_only_dir() else { return };
        let cache = DigestCache::new(TEST_SETTLE);
        let tool = dir.path().join("tool");
        let old = cached(&tool, b"#!/bin/sh\necho one\n", &cache);
        // The replacement has the same size and has itself settled.
        let other = dir.path().join("other");
        write_exe(&other, b"#!/bin/sh\necho two\n");
        settle();
        std::fs::rename(&other, &tool).unwrap();
        let (source, digest) = resolve(&tool, &cache);
        assert_eq!((source, &digest), (DigestSource::Hashed, &sha(&tool)));
        assert_ne!(digest, old);
    }

    #[test]
    fn sbx_2_files_a_non_root_user_can_write_or_replace_are_always_hashed() {
        let Some(dir) = root_only_dir() else { return };
        let cache = DigestCache::new(TEST_SETTLE);
        let chown = |p: &Path, uid: u32| {
            std::os::unix::fs::chown(p, Some(uid), None).unwrap();
        };
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        // (case, weaken, restore); each gets its own directory `d` holding `d/tool`.
        type Step<'a> = &'a dyn Fn(&Path, &Path);
        let cases: [(&str, Step<'_>, Step<'_>); 6] = [
            ("file owned by a user", &|_, f| chown(f, 65534), &|_, f| {
                chown(f, 0)
            }),
            (
                "file writable by group root",
                &|_, f| chmod(f, 0o775),
                &|_, f| chmod(f, 0o755),
            ),
            (
                "file writable by others",
                &|_, f| chmod(f, 0o757),
                &|_, f| chmod(f, 0o755),
            ),
            (
                "directory owned by a user",
                &|d, _| chown(d, 65534),
                &|d, _| chown(d, 0),
            ),
            (
                "directory writable by group root",
                &|d, _| chmod(d, 0o775),
                &|d, _| chmod(d, 0o755),
            ),
            (
                "sticky world-writable directory",
                &|d, _| chmod(d, 0o1777),
                &|d, _| chmod(d, 0o755),
            ),
        ];
        for (i, (name, weaken, restore)) in cases.into_iter().enumerate() {
            let d: PathBuf = dir.path().join(format!("case-{i}"));
            std::fs::create_dir(&d).unwrap();
            chmod(&d, 0o755);
            let tool = d.join("tool");
            write_exe(&tool, b"#!/bin/sh\necho one\n");
            weaken(&d, &tool);
            settle();
            for round in 0..3 {
                assert_eq!(
                    resolve(&tool, &cache),
                    (DigestSource::Hashed, sha(&tool)),
                    "{name}: round {round}"
                );
            }
            // Positive control: the same file, made root-only, is cached.
            restore(&d, &tool);
            settle();
            resolve(&tool, &cache);
            assert_eq!(
                resolve(&tool, &cache).0,
                DigestSource::Cached,
                "{name}: control"
            );
        }
    }

    #[test]
    fn sbx_2_a_file_changed_within_the_settle_time_is_not_cached() {
        let Some(dir) = root_only_dir() else { return };
        let tool = dir.path().join("tool");
        write_exe(&tool, b"#!/bin/sh\necho one\n");
        // Fresh ctime: a rewrite in the same timestamp tick could keep it,
        // so the launch cache (two seconds) hashes every time.
        let cache = DigestCache::new(super::SETTLE);
        assert_eq!(resolve(&tool, &cache).0, DigestSource::Hashed);
        assert_eq!(resolve(&tool, &cache).0, DigestSource::Hashed);
        // Control: with no settle time the same file is cached.
        let eager = DigestCache::new(Duration::ZERO);
        resolve(&tool, &eager);
        assert_eq!(resolve(&tool, &eager).0, DigestSource::Cached);
    }
}
