//! Disk budgets for writable roots (`--disk`): a private overlay whose
//! upper layer is a size- and inode-capped tmpfs, committed to the root
//! when the workload ends.
//!
//! Why an overlay: a writable root is a host directory on whatever file
//! system the operator chose, and the only kernel mechanism that bounds
//! what one directory tree may hold — project quotas — needs file-system
//! support (ext4 `prjquota`, XFS `pquota`) that is often absent (this
//! project's own CI kernel has no quota format at all), needs root, and
//! counts existing files only after relabelling them. The overlay works
//! for every user and file system at the `namespaces` level: everything
//! the workload writes lands in the capped tmpfs (so `ENOSPC` at the
//! budget, and `statfs` inside shows the budget, not the host's free
//! space), and reads of unchanged files go to the root itself.
//!
//! The commit is done by the sandbox's PID 1 after it has killed every
//! other process of the sandbox, with the same host identity as the
//! workload, inside the same mount view, through descriptors and without
//! following any link: it can write nothing the workload could not have
//! written directly. It applies new and changed files (written to a
//! temporary name, then renamed over), directories, symbolic links and
//! deletions (overlay whiteouts and opaque directories). Set-uid and
//! set-gid bits are never carried over; extended attributes and hard links
//! between new files are not kept. The commit is per file, not atomic as a
//! whole.
//!
//! What this module must not do: follow a link, or touch anything outside
//! the lower root it was given.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Where the overlay records that a directory hides the lower one.
const OPAQUE: &std::ffi::CStr = c"user.overlay.opaque";

/// One budgeted root, set up by the sandbox's PID 1.
#[derive(Debug)]
pub(crate) struct Budgeted {
    /// The root's path (host and sandbox).
    pub path: PathBuf,
    /// The root itself (the overlay's lower layer).
    pub lower: OwnedFd,
    /// The overlay's upper layer (on the capped tmpfs).
    pub upper: OwnedFd,
    /// The capped tmpfs's root, for the budget check.
    pub scratch: OwnedFd,
}

/// Inodes allowed for a byte budget: one per 4 KiB, at least 256.
pub(crate) fn inodes_for(bytes: u64) -> u64 {
    (bytes / 4096).max(256)
}

/// Whether the budget of `b` was used up (bytes or inodes).
pub(crate) fn exhausted(b: &Budgeted) -> bool {
    nix::sys::statvfs::fstatvfs(&b.scratch)
        .is_ok_and(|s| s.blocks_available() == 0 || s.files_available() == 0)
}

fn dir_of(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn names(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir_of(dir)).map_err(|e| e.to_string())? {
        out.push(e.map_err(|e| e.to_string())?.file_name());
    }
    Ok(out)
}

fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<FileStat>, Errno> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(s) => Ok(Some(s)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind(st: &FileStat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Removes `name` in `dir`, recursively for a directory (never following
/// a link). Absent is fine.
fn remove_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), String> {
    let Some(st) = stat_at(dir, name).map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if kind(&st) == libc::S_IFDIR {
        let sub = open_dir_at(dir, name).map_err(|e| e.to_string())?;
        clear_dir(sub.as_fd())?;
        unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(|e| e.to_string())
    } else {
        unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| e.to_string())
    }
}

fn clear_dir(dir: BorrowedFd<'_>) -> Result<(), String> {
    for n in names(dir)? {
        remove_at(dir, &n)?;
    }
    Ok(())
}

fn mode_of(st: &FileStat) -> Mode {
    // Never carry set-uid, set-gid (nor sticky) bits over.
    Mode::from_bits_truncate(st.st_mode & 0o777)
}

/// Copies the regular file `name` from `upper` to `lower`: a temporary
/// file beside it, then a rename over the old entry.
fn commit_file(
    upper: BorrowedFd<'_>,
    lower: BorrowedFd<'_>,
    name: &OsStr,
    st: &FileStat,
) -> Result<(), String> {
    let src = openat(
        upper,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| e.to_string())?;
    if let Some(old) = stat_at(lower, name).map_err(|e| e.to_string())?
        && kind(&old) == libc::S_IFDIR
    {
        remove_at(lower, name)?;
    }
    let mut tmp_name = b".airlock-commit-".to_vec();
    tmp_name.extend_from_slice(name.as_bytes());
    let tmp_name = OsString::from(std::ffi::OsStr::from_bytes(&tmp_name));
    let _ = unlinkat(lower, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
    let dst = openat(
        lower,
        tmp_name.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        mode_of(st),
    )
    .map_err(|e| e.to_string())?;
    let mut r = fs::File::from(src);
    let mut w = fs::File::from(dst);
    let copied = std::io::copy(&mut r, &mut w).and_then(|_| w.flush());
    let times = [
        nix::sys::time::TimeSpec::new(st.st_atime, st.st_atime_nsec),
        nix::sys::time::TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
    ];
    let _ = nix::sys::stat::futimens(&w, &times[0], &times[1]);
    if let Err(e) = copied {
        let _ = unlinkat(lower, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e.to_string());
    }
    drop(w);
    renameat(lower, tmp_name.as_os_str(), lower, name).map_err(|e| {
        let _ = unlinkat(lower, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
        e.to_string()
    })
}

/// Applies the upper directory `upper` to the lower directory `lower`.
fn commit_dir(upper: BorrowedFd<'_>, lower: BorrowedFd<'_>, at: &Path) -> Result<(), String> {
    for name in names(upper)? {
        let here = at.join(&name);
        let ctx = |e: String| format!("{}: {e}", here.display());
        let Some(st) = stat_at(upper, &name).map_err(|e| ctx(e.to_string()))? else {
            continue;
        };
        match kind(&st) {
            // A whiteout: the workload deleted this entry.
            libc::S_IFCHR if st.st_rdev == 0 => remove_at(lower, &name).map_err(ctx)?,
            libc::S_IFDIR => {
                let sub_upper = open_dir_at(upper, &name).map_err(|e| ctx(e.to_string()))?;
                let opaque = crate::sys::fget_xattr(sub_upper.as_fd(), OPAQUE)
                    .ok()
                    .flatten()
                    .is_some_and(|v| v == b"y");
                match stat_at(lower, &name).map_err(|e| ctx(e.to_string()))? {
                    Some(old) if kind(&old) == libc::S_IFDIR && !opaque => {}
                    Some(_) => {
                        remove_at(lower, &name).map_err(ctx)?;
                        mkdirat(lower, name.as_os_str(), Mode::from_bits_truncate(0o700))
                            .map_err(|e| ctx(e.to_string()))?;
                    }
                    None => mkdirat(lower, name.as_os_str(), Mode::from_bits_truncate(0o700))
                        .map_err(|e| ctx(e.to_string()))?,
                }
                let sub_lower = open_dir_at(lower, &name).map_err(|e| ctx(e.to_string()))?;
                commit_dir(sub_upper.as_fd(), sub_lower.as_fd(), &here)?;
                nix::sys::stat::fchmod(&sub_lower, mode_of(&st)).map_err(|e| ctx(e.to_string()))?;
            }
            libc::S_IFREG => commit_file(upper, lower, &name, &st).map_err(ctx)?,
            libc::S_IFLNK => {
                let target = nix::fcntl::readlinkat(upper, name.as_os_str())
                    .map_err(|e| ctx(e.to_string()))?;
                remove_at(lower, &name).map_err(ctx)?;
                nix::unistd::symlinkat(target.as_os_str(), lower, name.as_os_str())
                    .map_err(|e| ctx(e.to_string()))?;
            }
            // FIFOs, sockets and device nodes made by the workload stay in
            // the sandbox.
            _ => {}
        }
    }
    Ok(())
}

/// Mounts the budget over the root already bound at `target` (inside the
/// new root `root`, before `pivot_root`): a capped tmpfs, and an overlay
/// whose lower layer is the root and whose upper layer lives on that tmpfs.
/// The tmpfs is detached from the tree again at once; only the returned
/// descriptors (and the overlay) keep it.
pub(crate) fn mount_over(
    root: &Path,
    target: &Path,
    index: usize,
    bytes: u64,
) -> Result<Budgeted, (&'static str, String)> {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    let stage = |name: &'static str| move |e: Errno| (name, e.to_string());
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let lower =
        nix::fcntl::open(target, dir_flags, Mode::empty()).map_err(stage("open budgeted root"))?;
    let staging = root.join(format!(".airlock-budget-{index}"));
    fs::create_dir(&staging).map_err(|e| ("budget staging", e.to_string()))?;
    let options = format!("mode=0700,size={bytes},nr_inodes={}", inodes_for(bytes) + 2);
    mount(
        Some("tmpfs"),
        &staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(stage("mount budget tmpfs"))?;
    let scratch =
        nix::fcntl::open(&staging, dir_flags, Mode::empty()).map_err(stage("open budget tmpfs"))?;
    for (name, mode) in [("upper", 0o755), ("work", 0o700)] {
        mkdirat(&scratch, name, Mode::from_bits_truncate(mode)).map_err(stage("budget layers"))?;
    }
    let upper =
        open_dir_at(scratch.as_fd(), OsStr::new("upper")).map_err(stage("budget layers"))?;
    let work = open_dir_at(scratch.as_fd(), OsStr::new("work")).map_err(stage("budget layers"))?;
    // Layers by descriptor: no path of the caller's is parsed as options.
    let overlay = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        dir_of(lower.as_fd()).display(),
        dir_of(upper.as_fd()).display(),
        dir_of(work.as_fd()).display()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(overlay.as_str()),
    )
    .map_err(stage("mount budget overlay"))?;
    drop(work);
    umount2(&staging, MntFlags::MNT_DETACH).map_err(stage("detach budget tmpfs"))?;
    let _ = fs::remove_dir(&staging);
    Ok(Budgeted {
        path: target
            .strip_prefix(root)
            .map(|p| Path::new("/").join(p))
            .unwrap_or_else(|_| target.to_path_buf()),
        lower,
        upper,
        scratch,
    })
}

/// Commits a budgeted root. Every other process of the sandbox must be
/// dead already.
pub(crate) fn commit(b: &Budgeted) -> Result<(), String> {
    commit_dir(b.upper.as_fd(), b.lower.as_fd(), &b.path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dirfd(p: &Path) -> OwnedFd {
        nix::fcntl::open(
            p,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    #[test]
    fn sbx_3_commit_applies_files_dirs_links_and_deletions_without_following_links() {
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let l = lower.path();
        let u = upper.path();
        fs::write(l.join("keep"), "keep").unwrap();
        fs::write(l.join("gone"), "old").unwrap();
        fs::create_dir_all(l.join("olddir/deep")).unwrap();
        fs::write(l.join("olddir/deep/f"), "x").unwrap();
        fs::write(l.join("changed"), "old").unwrap();
        // A link in the lower root pointing outside: the commit must
        // replace the link, never write through it.
        std::os::unix::fs::symlink(outside.path(), l.join("out")).unwrap();

        fs::write(u.join("changed"), "new").unwrap();
        fs::write(u.join("added"), "added").unwrap();
        fs::set_permissions(u.join("added"), fs::Permissions::from_mode(0o6755)).unwrap();
        fs::create_dir_all(u.join("newdir/sub")).unwrap();
        fs::write(u.join("newdir/sub/f"), "f").unwrap();
        fs::create_dir(u.join("out")).unwrap();
        fs::write(u.join("out/escape"), "escape").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", u.join("link")).unwrap();
        nix::sys::stat::mknod(
            &u.join("gone"),
            nix::sys::stat::SFlag::S_IFCHR,
            Mode::empty(),
            0,
        )
        .unwrap();
        nix::sys::stat::mknod(
            &u.join("olddir"),
            nix::sys::stat::SFlag::S_IFCHR,
            Mode::empty(),
            0,
        )
        .unwrap();

        let (ud, ld) = (dirfd(u), dirfd(l));
        commit_dir(ud.as_fd(), ld.as_fd(), Path::new("/w")).unwrap();

        assert_eq!(fs::read_to_string(l.join("keep")).unwrap(), "keep");
        assert_eq!(fs::read_to_string(l.join("changed")).unwrap(), "new");
        assert_eq!(fs::read_to_string(l.join("added")).unwrap(), "added");
        let mode = fs::metadata(l.join("added")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "set-id bits are never committed");
        assert_eq!(fs::read_to_string(l.join("newdir/sub/f")).unwrap(), "f");
        assert!(!l.join("gone").exists());
        assert!(!l.join("olddir").exists());
        assert_eq!(
            fs::read_link(l.join("link")).unwrap(),
            PathBuf::from("/etc/passwd")
        );
        assert!(l.join("out").is_dir() && !l.join("out").is_symlink());
        assert_eq!(fs::read_to_string(l.join("out/escape")).unwrap(), "escape");
        // Positive control for the link case: nothing reached the outside.
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(fs::read_dir(l).unwrap().all(|e| {
            !e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".airlock-commit")
        }));
    }
}
