//! Host-side file work for roots: opening without following links, file
//! identities, the Unix-socket scan of read-only roots, and the access
//! grant that lets a root broker's sandbox uid write a writable root.
//!
//! Every root a caller names is opened from `/` with
//! `openat2(RESOLVE_NO_SYMLINKS)`: a symbolic link anywhere in the path is
//! refused, at parse time and again when the sandbox binds it, and the
//! directory found must be the one (device, inode) that was parsed. A
//! workload that can write one root therefore cannot redirect a later
//! sandbox's root by leaving a link (or another directory) behind.
//!
//! What this module must not do: follow a symbolic link, or change a
//! host file beyond the access grant it records and restores.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use serde::{Deserialize, Serialize};

use crate::sys;

/// Which file a root is: compared again when the sandbox binds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub(crate) fn of(st: &nix::sys::stat::FileStat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// Why a path could not be opened without following links.
#[derive(Debug)]
pub(crate) enum NoFollowError {
    /// This component of the path is a symbolic link.
    Symlink(PathBuf),
    /// The path does not exist (or a component is not a directory).
    Missing,
    Other(Errno),
}

impl std::fmt::Display for NoFollowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Symlink(p) => write!(f, "{} is a symbolic link", p.display()),
            Self::Missing => f.write_str("does not exist"),
            Self::Other(e) => write!(f, "{e}"),
        }
    }
}

fn no_links() -> ResolveFlag {
    ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// The first component of `path` that is a symbolic link (for messages).
fn first_symlink(path: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for c in path.components() {
        prefix.push(c);
        if std::fs::symlink_metadata(&prefix).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(prefix);
        }
    }
    None
}

fn classify(path: &Path, e: Errno) -> NoFollowError {
    match e {
        Errno::ELOOP => match first_symlink(path) {
            Some(p) => NoFollowError::Symlink(p),
            None => NoFollowError::Other(e),
        },
        Errno::ENOENT | Errno::ENOTDIR => NoFollowError::Missing,
        e => NoFollowError::Other(e),
    }
}

/// Opens `path` (absolute, normalised) with `flags`, following no symbolic
/// link in any component. Kernels without `openat2` (before 5.6) get the
/// same rule from a walk that opens one component at a time with
/// `O_NOFOLLOW`.
pub(crate) fn open_nofollow(path: &Path, flags: OFlag) -> Result<OwnedFd, NoFollowError> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(no_links());
    match openat2(nix::fcntl::AT_FDCWD, path, how) {
        Ok(fd) => Ok(fd),
        Err(Errno::ENOSYS) => walk_nofollow(path, flags),
        Err(e) => Err(classify(path, e)),
    }
}

fn walk_nofollow(path: &Path, flags: OFlag) -> Result<OwnedFd, NoFollowError> {
    use nix::fcntl::openat;
    use nix::sys::stat::Mode;
    let mut dir = nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(NoFollowError::Other)?;
    let parts: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let mut prefix = PathBuf::from("/");
    for (i, part) in parts.iter().enumerate() {
        prefix.push(part);
        let last = i + 1 == parts.len();
        let f = if last { flags } else { OFlag::O_PATH };
        let next = openat(
            &dir,
            *part,
            f | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => NoFollowError::Symlink(prefix.clone()),
            e => classify(&prefix, e),
        })?;
        let st = nix::sys::stat::fstat(&next).map_err(NoFollowError::Other)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(NoFollowError::Symlink(prefix));
        }
        dir = next;
    }
    Ok(dir)
}

/// Opens `rel` (relative, normalised) beneath the directory `base`: no
/// symbolic link, no `..`, nothing outside `base`.
pub(crate) fn open_beneath(
    base: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(no_links() | ResolveFlag::RESOLVE_BENEATH);
    openat2(base, rel, how)
}

/// `p` as an absolute path without `.` components, repeated or trailing
/// slashes; `None` when it is relative or has a `..` (which could only be
/// resolved by looking at the file system, where a link would change it).
pub(crate) fn normalised(p: &Path) -> Option<PathBuf> {
    let ok = p.is_absolute() && !p.components().any(|c| matches!(c, Component::ParentDir));
    ok.then(|| p.components().collect())
}

/// The first Unix socket under `root`, not following symbolic links.
///
/// Why: connecting to a named socket needs only write permission on it,
/// and neither the mount flags nor Landlock (whose ABI 6 scoping covers
/// abstract sockets only) govern it, so a host daemon's socket inside a
/// read-only root would be a way out of the sandbox. Only what exists at
/// parse time is seen; see THREAT_MODEL.md.
pub(crate) fn find_socket(root: &Path) -> Option<PathBuf> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            // DirEntry::file_type comes from the directory entry itself
            // (no stat) and never follows a link.
            let Ok(t) = e.file_type() else { continue };
            use std::os::unix::fs::FileTypeExt;
            if t.is_socket() {
                return Some(e.path());
            }
            if t.is_dir() {
                stack.push(e.path());
            }
        }
    }
    None
}

// ---------------------------------------------------------------- access

const ACL_ACCESS: &CStr = c"system.posix_acl_access";
const ACL_VERSION: u32 = 2;
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct AclEntry {
    tag: u16,
    id: u32,
    perm: u16,
}

fn parse_acl(bytes: &[u8]) -> Option<Vec<AclEntry>> {
    let (head, rest) = bytes.split_at_checked(4)?;
    if u32::from_le_bytes(head.try_into().ok()?) != ACL_VERSION || rest.len() % 8 != 0 {
        return None;
    }
    rest.chunks_exact(8)
        .map(|c| {
            Some(AclEntry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
        })
        .collect()
}

fn encode_acl(entries: &[AclEntry]) -> Vec<u8> {
    let mut out = ACL_VERSION.to_le_bytes().to_vec();
    for e in entries {
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        out.extend_from_slice(&e.id.to_le_bytes());
    }
    out
}

/// `current` (or the ACL equivalent of `mode`) plus `user:uid:perm`, with
/// the mask recomputed so that the new entry is effective.
fn acl_with_user(current: Option<&[AclEntry]>, mode: u32, uid: u32, perm: u16) -> Vec<AclEntry> {
    let bits = |shift: u32| u16::try_from((mode >> shift) & 7).unwrap_or(0);
    let mut entries: Vec<AclEntry> = match current {
        Some(c) => c.to_vec(),
        None => vec![
            AclEntry {
                tag: ACL_USER_OBJ,
                id: ACL_UNDEFINED_ID,
                perm: bits(6),
            },
            AclEntry {
                tag: ACL_GROUP_OBJ,
                id: ACL_UNDEFINED_ID,
                perm: bits(3),
            },
            AclEntry {
                tag: ACL_OTHER,
                id: ACL_UNDEFINED_ID,
                perm: bits(0),
            },
        ],
    };
    entries.retain(|e| !(e.tag == ACL_USER && e.id == uid) && e.tag != ACL_MASK);
    entries.push(AclEntry {
        tag: ACL_USER,
        id: uid,
        perm,
    });
    let mask = entries
        .iter()
        .filter(|e| matches!(e.tag, ACL_USER | ACL_GROUP_OBJ | ACL_GROUP))
        .fold(0, |m, e| m | e.perm);
    entries.push(AclEntry {
        tag: ACL_MASK,
        id: ACL_UNDEFINED_ID,
        perm: mask,
    });
    entries.sort();
    entries
}

/// An access grant on one host directory (or file), undone by
/// [`AccessGrant::restore`].
#[derive(Debug)]
pub(crate) struct AccessGrant {
    path: PathBuf,
    fd: OwnedFd,
    original_acl: Option<Vec<u8>>,
    original_mode: u32,
}

/// Lets host uid `uid` (primary group `gid`, no other groups) read, write
/// and (for directories) search `path`, which must still be `id`.
///
/// Why an ACL entry: a root broker's workload is the unprivileged sandbox
/// uid, and a writable root is typically a directory root created (e.g.
/// `mkdir -m700 W`, or the executor's output folder). Changing its owner
/// would hand the sandbox uid the directory's mode and ACL; one named ACL
/// entry on the root itself grants exactly "may create, rename and delete
/// entries here" and is removed again when the launch ends. Files the
/// workload creates are owned by the sandbox uid; existing files keep
/// their owner and mode. Returns `None` when the uid already has access.
pub(crate) fn grant_access(
    path: &Path,
    id: Option<FileId>,
    uid: u32,
    gid: u32,
) -> Result<Option<AccessGrant>, String> {
    grant(path, id, uid, gid, true)
}

/// Lets host uid `uid` read (and, for directories, search) `path`, which
/// must still be `id`: for the platform's read-only mounts (a run's
/// `input.json`, which the executor keeps private to the airlock user).
pub(crate) fn grant_read(
    path: &Path,
    id: Option<FileId>,
    uid: u32,
    gid: u32,
) -> Result<Option<AccessGrant>, String> {
    grant(path, id, uid, gid, false)
}

fn grant(
    path: &Path,
    id: Option<FileId>,
    uid: u32,
    gid: u32,
    write: bool,
) -> Result<Option<AccessGrant>, String> {
    let fd = open_nofollow(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("{}: {e}", path.display()))?;
    if id.is_some_and(|id| id != FileId::of(&st)) {
        return Err(format!(
            "{} changed since the spec was parsed",
            path.display()
        ));
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let need: u32 = match (is_dir, write) {
        (true, true) => 7,
        (false, true) => 6,
        (true, false) => 5,
        (false, false) => 4,
    };
    let current = sys::fget_xattr(fd.as_fd(), ACL_ACCESS).map_err(|e| match e {
        Errno::EOPNOTSUPP => no_acl_support(path, uid),
        e => format!("{}: reading its ACL: {e}", path.display()),
    })?;
    let mode = st.st_mode & 0o7777;
    let has =
        st.st_uid == uid || (st.st_gid == gid && (mode >> 3) & need == need) || mode & need == need;
    if has && current.is_none() {
        return Ok(None);
    }
    let parsed = match &current {
        Some(bytes) => Some(parse_acl(bytes).ok_or_else(|| {
            format!(
                "{}: its ACL is not in a format airlock knows",
                path.display()
            )
        })?),
        None => None,
    };
    let perm = u16::try_from(need).unwrap_or(7);
    let new = encode_acl(&acl_with_user(parsed.as_deref(), mode, uid, perm));
    sys::fset_xattr(fd.as_fd(), ACL_ACCESS, &new).map_err(|e| match e {
        Errno::EOPNOTSUPP => no_acl_support(path, uid),
        e => format!(
            "{}: setting an ACL entry for uid {uid}: {e}",
            path.display()
        ),
    })?;
    Ok(Some(AccessGrant {
        path: path.to_path_buf(),
        fd,
        original_acl: current,
        original_mode: mode,
    }))
}

fn no_acl_support(path: &Path, uid: u32) -> String {
    format!(
        "{}: its file system has no POSIX ACLs, so the sandbox uid {uid} cannot be given access; chown it to {uid} (or choose a directory on another file system)",
        path.display()
    )
}

impl AccessGrant {
    /// Puts the original ACL (or none) and group permission bits back.
    pub(crate) fn restore(self) -> Result<(), String> {
        let fail = |e: Errno| format!("{}: restoring its ACL: {e}", self.path.display());
        match &self.original_acl {
            Some(bytes) => sys::fset_xattr(self.fd.as_fd(), ACL_ACCESS, bytes).map_err(fail),
            None => {
                match sys::fremove_xattr(self.fd.as_fd(), ACL_ACCESS) {
                    Ok(()) | Err(Errno::ENODATA) => {}
                    Err(e) => return Err(fail(e)),
                }
                // Setting the ACL made the group bits show its mask; put
                // the original group bits back, keeping any other change.
                let st = nix::sys::stat::fstat(&self.fd).map_err(fail)?;
                let mode = (st.st_mode & 0o7707) | (self.original_mode & 0o070);
                nix::sys::stat::fchmod(&self.fd, nix::sys::stat::Mode::from_bits_truncate(mode))
                    .map_err(fail)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbx_3_acl_entry_is_added_with_an_effective_mask() {
        let e = acl_with_user(None, 0o700, 2_000_000_000, 7);
        assert_eq!(
            e,
            vec![
                AclEntry {
                    tag: ACL_USER_OBJ,
                    id: ACL_UNDEFINED_ID,
                    perm: 7
                },
                AclEntry {
                    tag: ACL_USER,
                    id: 2_000_000_000,
                    perm: 7
                },
                AclEntry {
                    tag: ACL_GROUP_OBJ,
                    id: ACL_UNDEFINED_ID,
                    perm: 0
                },
                AclEntry {
                    tag: ACL_MASK,
                    id: ACL_UNDEFINED_ID,
                    perm: 7
                },
                AclEntry {
                    tag: ACL_OTHER,
                    id: ACL_UNDEFINED_ID,
                    perm: 0
                },
            ]
        );
        let bytes = encode_acl(&e);
        assert_eq!(parse_acl(&bytes).unwrap(), e);
        assert!(parse_acl(&bytes[..bytes.len() - 1]).is_none());
        assert!(parse_acl(&[1, 0, 0, 0]).is_none());
    }

    #[test]
    fn sbx_3_root_with_a_symlinked_component_is_refused_and_named() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let via = d.path().join("link").join("sub");
        match open_nofollow(&via, OFlag::O_PATH) {
            Err(NoFollowError::Symlink(p)) => assert_eq!(p, d.path().join("link")),
            other => panic!("{other:?}"),
        }
        match walk_nofollow(&via, OFlag::O_PATH) {
            Err(NoFollowError::Symlink(p)) => assert_eq!(p, d.path().join("link")),
            other => panic!("{other:?}"),
        }
        // Positive control: the real path opens, by both methods.
        assert!(open_nofollow(&real.join("sub"), OFlag::O_PATH).is_ok());
        assert!(walk_nofollow(&real.join("sub"), OFlag::O_PATH).is_ok());
        assert!(matches!(
            open_nofollow(&real.join("nope"), OFlag::O_PATH),
            Err(NoFollowError::Missing)
        ));
    }

    #[test]
    fn sbx_3_socket_scan_finds_a_nested_socket_and_not_through_links() {
        let d = tempfile::tempdir().unwrap();
        let inner = d.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        assert_eq!(find_socket(d.path()), None);
        let other = tempfile::tempdir().unwrap();
        let _l = std::os::unix::net::UnixListener::bind(other.path().join("s")).unwrap();
        std::os::unix::fs::symlink(other.path(), d.path().join("link")).unwrap();
        assert_eq!(find_socket(d.path()), None, "links are not followed");
        let _s = std::os::unix::net::UnixListener::bind(inner.join("x.sock")).unwrap();
        assert_eq!(find_socket(d.path()), Some(inner.join("x.sock")));
    }
}
