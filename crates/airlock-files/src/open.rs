//! Opening entries of an untrusted folder relative to a directory descriptor.
//!
//! The sequence for every entry is: `fstatat(AT_SYMLINK_NOFOLLOW)` to learn what the name is
//! without opening it (so a FIFO is never opened for reading and cannot block us, and a device is
//! never opened at all in the normal case); then `openat2` of that single component with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` and
//! `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`; then `fstat` of the descriptor we actually got, which is
//! the authoritative answer. If the workload swaps the entry between the two calls, the second
//! check sees the swap (different kind or inode) and the entry is rejected; `O_NONBLOCK` makes
//! sure the swapped-in FIFO does not block the open itself.
//!
//! This module must not accept a path with more than one component: callers validate names with
//! the name rule first, which is what makes the `openat` fallback (no `openat2`) equally safe.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, open, openat, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

use crate::FileError;
use crate::name::display;

/// Set once the kernel (or a seccomp filter) told us `openat2` does not exist.
static OPENAT2_UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// What an entry is, from its `st_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// Anything we never read; the string is the `kind` reported in [`FileError::NotRegular`].
    Other(&'static str),
}

pub(crate) fn kind(st: &FileStat) -> Kind {
    let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if fmt == SFlag::S_IFREG {
        Kind::File
    } else if fmt == SFlag::S_IFDIR {
        Kind::Dir
    } else if fmt == SFlag::S_IFLNK {
        Kind::Symlink
    } else if fmt == SFlag::S_IFIFO {
        Kind::Other("fifo")
    } else if fmt == SFlag::S_IFSOCK {
        Kind::Other("socket")
    } else if fmt == SFlag::S_IFCHR {
        Kind::Other("char_device")
    } else if fmt == SFlag::S_IFBLK {
        Kind::Other("block_device")
    } else {
        Kind::Other("unknown")
    }
}

/// An opened, checked entry.
#[derive(Debug)]
pub(crate) enum Entry {
    /// A regular file with exactly one link, and its `fstat`.
    File(OwnedFd, FileStat),
    /// A directory on the same filesystem as the root.
    Dir(OwnedFd),
}

/// Opens the root of an untrusted folder. The host chose this path, so intermediate components
/// may be symlinks (e.g. `/tmp`); the last one may not. Returns the descriptor and its `st_dev`.
pub(crate) fn open_root(dir: &Path) -> Result<(OwnedFd, u64), FileError> {
    let root = ".";
    let flags = OFlag::O_RDONLY
        | OFlag::O_DIRECTORY
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY;
    let fd = open(dir, flags, Mode::empty()).map_err(|e| match e {
        Errno::ELOOP => FileError::Symlink {
            path: root.to_owned(),
        },
        Errno::ENOTDIR => {
            // `O_DIRECTORY` reports a final symlink as ENOTDIR on some kernels: say which.
            let is_link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            if is_link {
                FileError::Symlink {
                    path: root.to_owned(),
                }
            } else {
                FileError::NotRegular {
                    path: root.to_owned(),
                    kind: "not_directory",
                }
            }
        }
        e => FileError::io(root, e),
    })?;
    let st = fstat(&fd).map_err(|e| FileError::io(root, e))?;
    Ok((fd, st.st_dev))
}

/// Opens the single component `name` under `dirfd`, checking it as described in the module
/// header. `rel` is the entry's path relative to the root, for errors. `Ok(None)` means the name
/// does not exist.
pub(crate) fn open_entry<Fd: AsFd>(
    dirfd: Fd,
    name: &CStr,
    rel: &str,
    root_dev: u64,
) -> Result<Option<Entry>, FileError> {
    let path = || display(rel.as_bytes());
    let before = match fstatat(dirfd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(None),
        Err(e) => return Err(FileError::io(&path(), e)),
    };
    let want_dir = match kind(&before) {
        Kind::File => false,
        Kind::Dir => true,
        Kind::Symlink => return Err(FileError::Symlink { path: path() }),
        Kind::Other(kind) => return Err(FileError::NotRegular { path: path(), kind }),
    };

    let mut flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    if want_dir {
        flags |= OFlag::O_DIRECTORY;
    }
    let use_openat2 = !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed);
    let fd = open_beneath(dirfd, name, flags, Mode::empty(), use_openat2).map_err(|e| match e {
        Errno::ELOOP => FileError::Symlink { path: path() },
        Errno::ENXIO => FileError::NotRegular {
            path: path(),
            kind: "socket",
        },
        Errno::EXDEV => FileError::NotRegular {
            path: path(),
            kind: "mount_point",
        },
        Errno::ENOTDIR => FileError::io(&path(), "entry changed while being opened"),
        e => FileError::io(&path(), e),
    })?;

    // The descriptor we hold is the truth; everything before was only a hint.
    let after = fstat(&fd).map_err(|e| FileError::io(&path(), e))?;
    let after_kind = kind(&after);
    if let Kind::Other(kind) = after_kind {
        return Err(FileError::NotRegular { path: path(), kind });
    }
    if after_kind != kind(&before) || (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino)
    {
        return Err(FileError::io(&path(), "entry changed while being opened"));
    }
    if after.st_dev != root_dev {
        return Err(FileError::NotRegular {
            path: path(),
            kind: "mount_point",
        });
    }
    match after_kind {
        Kind::Dir => Ok(Some(Entry::Dir(fd))),
        // A second name for this inode may live outside the folder (a hard link to a host file
        // the sandbox could read): refuse rather than guess.
        Kind::File if after.st_nlink > 1 => Err(FileError::HardLink { path: path() }),
        Kind::File => Ok(Some(Entry::File(fd, after))),
        // O_NOFOLLOW makes this unreachable; stay closed anyway.
        Kind::Symlink => Err(FileError::Symlink { path: path() }),
        Kind::Other(kind) => Err(FileError::NotRegular { path: path(), kind }),
    }
}

/// Creates the single, validated component `name` under `dirfd` as a new regular file
/// (`O_CREAT | O_EXCL`: an existing name, a symlink included, is `EEXIST`, never followed or
/// reused), opened for writing.
pub(crate) fn create_beneath<Fd: AsFd>(dirfd: Fd, name: &CStr, mode: Mode) -> nix::Result<OwnedFd> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let use_openat2 = !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed);
    open_beneath(dirfd, name, flags, mode, use_openat2)
}

/// A new open file description of the directory `dirfd` itself, so that reading its entries
/// never shares (or moves) the offset of a descriptor someone else holds.
pub(crate) fn reopen_dir<Fd: AsFd>(dirfd: Fd) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let use_openat2 = !OPENAT2_UNAVAILABLE.load(Ordering::Relaxed);
    open_beneath(dirfd, c".", flags, Mode::empty(), use_openat2)
}

/// Opens one component beneath `dirfd` without following symlinks.
fn open_beneath<Fd: AsFd>(
    dirfd: Fd,
    name: &CStr,
    flags: OFlag,
    mode: Mode,
    use_openat2: bool,
) -> nix::Result<OwnedFd> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if use_openat2 {
        let how = OpenHow::new().flags(flags).mode(mode).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
        match openat2(dirfd.as_fd(), name, how) {
            Err(Errno::ENOSYS) => OPENAT2_UNAVAILABLE.store(true, Ordering::Relaxed),
            other => return other,
        }
    }
    // Kernels before 5.6, or a seccomp filter that hides openat2. `name` is one validated
    // component (no `/`, not `.` or `..`), so with O_NOFOLLOW it cannot resolve outside `dirfd`;
    // mount points are still caught by the `st_dev` comparison in `open_entry`.
    openat(dirfd, name, flags, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dirfd(p: &Path) -> OwnedFd {
        open(p, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn dur_4_both_open_paths_refuse_a_final_symlink() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        let fd = dirfd(dir.path());
        for use_openat2 in [true, false] {
            let err = open_beneath(&fd, c"link", OFlag::O_RDONLY, Mode::empty(), use_openat2)
                .unwrap_err();
            // ENOSYS only if this kernel lacks openat2, in which case the fallback is tested.
            assert!(matches!(err, Errno::ELOOP | Errno::ENOSYS), "{err}");
        }
    }

    #[test]
    fn dur_4_both_create_paths_refuse_an_existing_name_and_never_follow_it() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        symlink(outside.path().join("made"), dir.path().join("dangling")).unwrap();
        let fd = dirfd(dir.path());
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        for use_openat2 in [true, false] {
            for name in [c"link", c"dangling"] {
                let err = open_beneath(&fd, name, flags, Mode::S_IRUSR, use_openat2).unwrap_err();
                assert!(matches!(err, Errno::EEXIST | Errno::ENOSYS), "{err}");
            }
        }
        assert!(!outside.path().join("made").exists());
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
        // Control: a fresh name is created, beneath the directory.
        drop(create_beneath(&fd, c"fresh", Mode::S_IRUSR).unwrap());
        assert!(dir.path().join("fresh").is_file());
    }

    #[test]
    fn dur_4_both_open_paths_refuse_dotdot() {
        let dir = tempfile::tempdir().unwrap();
        let fd = dirfd(dir.path());
        // openat2 refuses to climb; the fallback is only ever handed validated names, and the
        // name rule (tested in `name`) rejects `..`, so here we only pin the openat2 behaviour.
        let err = open_beneath(&fd, c"..", OFlag::O_RDONLY, Mode::empty(), true).unwrap_err();
        assert!(matches!(err, Errno::EXDEV | Errno::ENOSYS), "{err}");
    }

    #[test]
    fn dur_4_entry_kinds_are_named() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&dir.path().join("pipe"), Mode::S_IRWXU).unwrap();
        let fd = dirfd(dir.path());
        let st = fstatat(&fd, c"pipe", AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        assert_eq!(kind(&st), Kind::Other("fifo"));
        let st = fstatat(&fd, c".", AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        assert_eq!(kind(&st), Kind::Dir);
    }
}
