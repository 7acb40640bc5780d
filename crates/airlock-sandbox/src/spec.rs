//! What a caller asks for, and the parsed spec the broker accepts.
//!
//! [`SandboxRequest`] is plain data from a front end; [`SandboxSpec::parse`]
//! turns it into a [`SandboxSpec`] or a precise [`SpecError`]. The broker
//! only takes the parsed type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::env::{self, EnvError};
use crate::hostfs::{self, FileId, NoFollowError};

/// Which driver to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverChoice {
    /// The strongest available: `namespaces`, else the `landlock` fallback.
    #[default]
    Auto,
    Namespaces,
    /// The fallback ladder's lower rung, selectable explicitly.
    Landlock,
    /// No containment at all. Development only; labelled everywhere.
    Uncontained,
}

/// Resource limits (SBX-3). `None` means the driver default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a core (1000 = one full core).
    pub cpu_millicores: Option<u64>,
    pub nofile: Option<u64>,
    /// Largest file the workload may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size_bytes: Option<u64>,
    /// Size of the private `/tmp` tmpfs, in bytes.
    pub tmp_bytes: Option<u64>,
    /// Bytes each writable root may take in new or changed data (plus one
    /// inode per 4 KiB); see [`crate::budget`]. `None`: no budget.
    pub disk_bytes: Option<u64>,
}

pub const DEFAULT_PIDS: u64 = 256;
pub const DEFAULT_NOFILE: u64 = 1024;
pub const DEFAULT_FILE_SIZE: u64 = 1 << 30;
pub const DEFAULT_TMP_BYTES: u64 = 256 << 20;
pub const DEFAULT_OUTPUT_BUDGET: usize = 1 << 20;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A host file or directory shown at another path inside the sandbox
/// (`/airlock/input.json`, `/airlock/output`, `/airlock/worker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub writable: bool,
}

/// Secret bytes on their way into a sandbox: never printed, wiped on drop.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl Drop for SecretBytes {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// A secret delivered as the read-only file `/run/secrets/NAME` (KEY-5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretFile {
    pub name: String,
    pub value: SecretBytes,
}

/// Where secret files appear inside.
pub const SECRETS_DIR: &str = "/run/secrets";

/// Mount targets live under this platform-owned prefix.
pub const MOUNT_PREFIX: &str = "/airlock";

/// A request as a front end builds it.
#[derive(Debug, Clone, Default)]
pub struct SandboxRequest {
    pub argv: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub readonly: Vec<PathBuf>,
    pub mounts: Vec<Mount>,
    /// Files under `/run/secrets` (a private read-only tmpfs).
    pub secret_files: Vec<SecretFile>,
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    pub grace: Option<Duration>,
    pub limits: Limits,
    /// Per-stream budget for captured stdout and stderr, in bytes.
    pub output_budget: Option<usize>,
    pub driver: DriverChoice,
    pub require_containment: bool,
    /// Give the sandbox its egress listener and proxy variables (NET-1).
    /// Without it the sandbox has no network at all.
    pub egress: bool,
    /// Record set-up stage timings in the result (diagnostics).
    pub timings: bool,
}

/// A request that passed every check. Built only by [`SandboxSpec::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) writable: Vec<PathBuf>,
    pub(crate) readonly: Vec<PathBuf>,
    pub(crate) mounts: Vec<Mount>,
    /// Which file each root and mount source was when parsed; the sandbox
    /// refuses to bind anything else at that path.
    pub(crate) root_ids: Vec<(PathBuf, FileId)>,
    pub(crate) secret_files: Vec<SecretFile>,
    pub(crate) declared_env: BTreeMap<String, String>,
    pub(crate) platform_env: BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) limits: Limits,
    pub(crate) output_budget: usize,
    pub(crate) driver: DriverChoice,
    pub(crate) require_containment: bool,
    pub(crate) egress: bool,
    pub(crate) timings: bool,
}

/// Why a request was refused. Each message names the offending part.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("no command given")]
    NoCommand,
    #[error("argument {0} contains a NUL byte")]
    NulInArgument(usize),
    #[error("{what} {path:?} must be an absolute path")]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error("{what} {path:?} does not exist or is not a directory")]
    NotADirectory { what: &'static str, path: PathBuf },
    #[error("{what} {path:?} must not contain \"..\"")]
    NotNormalised { what: &'static str, path: PathBuf },
    #[error(
        "{what} {path:?}: {link:?} is a symbolic link; roots are opened without following links, so pass the real path of a directory you control"
    )]
    SymlinkInPath {
        what: &'static str,
        path: PathBuf,
        link: PathBuf,
    },
    #[error(
        "read-only root {root:?} contains the Unix socket {socket:?}, which a sandbox could connect to; choose a narrower root"
    )]
    SocketInRoot { root: PathBuf, socket: PathBuf },
    #[error("{what} {path:?} cannot be opened: {error}")]
    Unopenable {
        what: &'static str,
        path: PathBuf,
        error: String,
    },
    #[error("{what} {path:?} would expose a system directory; choose a dedicated directory")]
    Forbidden { what: &'static str, path: PathBuf },
    #[error("working directory {0:?} is outside the writable and read-only roots")]
    CwdOutsideRoots(PathBuf),
    #[error("mount target {0:?} must be an absolute, normalised path under /airlock/")]
    BadMountTarget(PathBuf),
    #[error("mount source {0:?} does not exist")]
    BadMountSource(PathBuf),
    #[error(
        "secret file {0:?}: names are A-Z, 0-9 and _, starting with a letter, at most 64 characters"
    )]
    BadSecretName(String),
    #[error("secret file {0:?} is larger than 32 KiB")]
    SecretTooLarge(String),
    #[error("more than 64 secret files")]
    TooManySecrets,
    #[error("timeout must be between 1 ms and 7 days")]
    BadTimeout,
    #[error("{0} is larger than the supported maximum")]
    TooLarge(&'static str),
    #[error("{0} limit must be greater than zero")]
    ZeroLimit(&'static str),
    #[error(transparent)]
    Env(#[from] EnvError),
}

/// Host trees a root may never be inside of, equal to, or an ancestor of:
/// binding them would hand the workload the host's state or the platform's
/// secrets.
const FORBIDDEN_TREES: &[&str] = &[
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var/run",
    "/boot",
    "/root",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/var/mail",
    "/var/cache",
    "/var/backups",
    "/snap",
];

/// Directories that may not be a root themselves (their subdirectories may):
/// `/tmp` is where the sandbox builds its root, `/home` holds every user.
const FORBIDDEN_EXACT: &[&str] = &["/", "/tmp", "/home", "/var", "/var/tmp", "/mnt", "/media"];

/// Why `root` may not be bound into a sandbox, if it may not. `home` is the
/// invoking user's home directory: the directory itself and its dot-entries
/// (`.ssh`, `.aws`, `.config`, …) are refused, project folders are not.
pub fn forbidden_root(root: &Path, home: Option<&Path>) -> bool {
    if FORBIDDEN_EXACT.iter().any(|f| root == Path::new(f)) {
        return true;
    }
    let trees = FORBIDDEN_TREES.iter().map(Path::new);
    if trees
        .clone()
        .any(|t| root.starts_with(t) || t.starts_with(root))
    {
        return true;
    }
    if let Some(home) = home.filter(|h| h.is_absolute() && *h != Path::new("/")) {
        if home.starts_with(root) {
            return true;
        }
        if let Ok(rest) = root.strip_prefix(home)
            && rest
                .components()
                .next()
                .is_some_and(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        {
            return true;
        }
    }
    false
}

pub const MAX_GRACE: Duration = Duration::from_secs(3600);
pub const MAX_MILLICORES: u64 = 1_024_000;
pub const MAX_BYTES: u64 = 1 << 50;
pub const MAX_PIDS: u64 = 1 << 22;

impl SandboxSpec {
    pub fn parse(req: SandboxRequest) -> Result<Self, SpecError> {
        if req.argv.is_empty() || req.argv[0].is_empty() {
            return Err(SpecError::NoCommand);
        }
        if let Some(i) = req.argv.iter().position(|a| a.contains('\0')) {
            return Err(SpecError::NulInArgument(i));
        }
        let mut root_ids = Vec::new();
        let writable = resolve_roots("writable root", &req.writable, &mut root_ids)?;
        let readonly = resolve_roots("read-only root", &req.readonly, &mut root_ids)?;
        for r in &readonly {
            if let Some(socket) = hostfs::find_socket(r) {
                return Err(SpecError::SocketInRoot {
                    root: r.clone(),
                    socket,
                });
            }
        }
        let mut mounts = Vec::new();
        for m in &req.mounts {
            let normal = m.target.is_absolute()
                && m.target.starts_with(MOUNT_PREFIX)
                && m.target != Path::new(MOUNT_PREFIX)
                && m.target.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                });
            if !normal {
                return Err(SpecError::BadMountTarget(m.target.clone()));
            }
            let source = m
                .source
                .canonicalize()
                .map_err(|_| SpecError::BadMountSource(m.source.clone()))?;
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .and_then(|h| h.canonicalize().ok());
            if forbidden_root(&source, home.as_deref()) {
                return Err(SpecError::Forbidden {
                    what: "mount source",
                    path: m.source.clone(),
                });
            }
            // Mount sources are the platform's own paths (they may sit
            // below a symlinked data directory, hence canonicalize); their
            // identity is still pinned so that the sandbox binds the file
            // that was checked here.
            let id = file_id("mount source", &source)?;
            root_ids.push((source.clone(), id));
            mounts.push(Mount {
                source,
                target: m.target.clone(),
                writable: m.writable,
            });
        }
        if req.secret_files.len() > 64 {
            return Err(SpecError::TooManySecrets);
        }
        for f in &req.secret_files {
            let ok = f.name.len() <= 64
                && f.name.starts_with(|c: char| c.is_ascii_uppercase())
                && f.name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !ok {
                return Err(SpecError::BadSecretName(f.name.clone()));
            }
            if f.value.expose().len() > 32 * 1024 {
                return Err(SpecError::SecretTooLarge(f.name.clone()));
            }
        }
        let cwd = match req.cwd {
            Some(cwd) => {
                let c = if cwd.starts_with(MOUNT_PREFIX) {
                    // A path inside a mount exists only in the sandbox.
                    cwd.clone()
                } else {
                    canonical_dir("working directory", &cwd)?
                };
                let inside = writable.iter().chain(&readonly).any(|r| c.starts_with(r))
                    || mounts.iter().any(|m| cwd.starts_with(&m.target));
                if !inside && c != Path::new("/tmp") {
                    return Err(SpecError::CwdOutsideRoots(cwd));
                }
                c
            }
            None => writable
                .first()
                .cloned()
                .unwrap_or_else(|| PathBuf::from("/tmp")),
        };
        let grace = req.grace.unwrap_or(DEFAULT_GRACE);
        if grace > MAX_GRACE {
            return Err(SpecError::TooLarge("grace period"));
        }
        let l = &req.limits;
        let too_large = [
            ("memory", l.memory_bytes, MAX_BYTES),
            ("pids", l.pids, MAX_PIDS),
            ("cpu", l.cpu_millicores, MAX_MILLICORES),
            ("nofile", l.nofile, 1 << 20),
            ("file size", l.file_size_bytes, MAX_BYTES),
            ("tmp size", l.tmp_bytes, MAX_BYTES),
            ("disk budget", l.disk_bytes, MAX_BYTES),
        ];
        if let Some((name, _, _)) = too_large
            .iter()
            .find(|(_, v, max)| v.is_some_and(|v| v > *max))
        {
            return Err(SpecError::TooLarge(name));
        }
        let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(SpecError::BadTimeout);
        }
        let limits = req.limits;
        for (name, v) in [
            ("memory", limits.memory_bytes),
            ("pids", limits.pids),
            ("cpu", limits.cpu_millicores),
            ("nofile", limits.nofile),
            ("file size", limits.file_size_bytes),
            ("tmp size", limits.tmp_bytes),
            ("disk budget", limits.disk_bytes),
        ] {
            if v == Some(0) {
                return Err(SpecError::ZeroLimit(name));
            }
        }
        Ok(Self {
            argv: req.argv,
            cwd,
            writable,
            readonly,
            mounts,
            root_ids,
            secret_files: req.secret_files,
            declared_env: env::parse_declared(&req.env)?,
            platform_env: BTreeMap::new(),
            timeout,
            grace,
            limits,
            output_budget: req.output_budget.unwrap_or(DEFAULT_OUTPUT_BUDGET),
            driver: req.driver,
            require_containment: req.require_containment,
            egress: req.egress,
            timings: req.timings,
        })
    }

    /// Adds a variable the platform itself sets (run metadata, proxy
    /// settings). Only names under `AIRLOCK_` or the proxy variables.
    pub fn with_platform_env(mut self, name: &str, value: &str) -> Self {
        let allowed = name.starts_with("AIRLOCK_") || env::PLATFORM_SET.contains(&name);
        if allowed && !value.contains('\0') {
            self.platform_env
                .insert(name.to_string(), value.to_string());
        }
        self
    }

    /// Adds secret files (validated like [`SandboxRequest::secret_files`]).
    pub fn with_secret_files(mut self, files: Vec<SecretFile>) -> Self {
        let ok = |f: &SecretFile| {
            f.name.len() <= 64
                && f.name.starts_with(|c: char| c.is_ascii_uppercase())
                && f.name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && f.value.expose().len() <= 32 * 1024
        };
        self.secret_files.extend(files.into_iter().filter(ok));
        self
    }

    /// Adds declared environment variables, with the same checks as at parse.
    pub fn with_declared_env(mut self, vars: &[(String, String)]) -> Result<Self, SpecError> {
        let mut all: Vec<(String, String)> = self
            .declared_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.extend(vars.iter().cloned());
        self.declared_env = env::parse_declared(&all)?;
        Ok(self)
    }

    pub fn argv(&self) -> &[String] {
        &self.argv
    }
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    pub fn driver(&self) -> DriverChoice {
        self.driver
    }
    pub fn egress(&self) -> bool {
        self.egress
    }
}

fn canonical_dir(what: &'static str, p: &Path) -> Result<PathBuf, SpecError> {
    if !p.is_absolute() {
        return Err(SpecError::NotAbsolute {
            what,
            path: p.to_path_buf(),
        });
    }
    let c = p.canonicalize().map_err(|_| SpecError::NotADirectory {
        what,
        path: p.to_path_buf(),
    })?;
    if !c.is_dir() {
        return Err(SpecError::NotADirectory {
            what,
            path: p.to_path_buf(),
        });
    }
    Ok(c)
}

/// Resolves caller-chosen roots: absolute, no `..`, no symbolic link in
/// any component (opened from `/` with `RESOLVE_NO_SYMLINKS`), an existing
/// directory, not forbidden. Records each root's identity in `ids`.
fn resolve_roots(
    what: &'static str,
    roots: &[PathBuf],
    ids: &mut Vec<(PathBuf, FileId)>,
) -> Result<Vec<PathBuf>, SpecError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.as_deref().and_then(|h| h.canonicalize().ok());
    let mut out = Vec::new();
    for r in roots {
        if !r.is_absolute() {
            return Err(SpecError::NotAbsolute {
                what,
                path: r.clone(),
            });
        }
        let Some(path) = hostfs::normalised(r) else {
            return Err(SpecError::NotNormalised {
                what,
                path: r.clone(),
            });
        };
        // The forbidden trees are checked on the path as written: with no
        // link allowed anywhere in it, that is the path that gets bound.
        if forbidden_root(&path, home.as_deref()) {
            return Err(SpecError::Forbidden {
                what,
                path: r.clone(),
            });
        }
        let fd = hostfs::open_nofollow(&path, nix::fcntl::OFlag::O_PATH).map_err(|e| match e {
            NoFollowError::Symlink(link) => SpecError::SymlinkInPath {
                what,
                path: r.clone(),
                link,
            },
            NoFollowError::Missing => SpecError::NotADirectory {
                what,
                path: r.clone(),
            },
            NoFollowError::Other(e) => SpecError::Unopenable {
                what,
                path: r.clone(),
                error: e.to_string(),
            },
        })?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| SpecError::Unopenable {
            what,
            path: r.clone(),
            error: e.to_string(),
        })?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(SpecError::NotADirectory {
                what,
                path: r.clone(),
            });
        }
        if !out.contains(&path) {
            ids.push((path.clone(), FileId::of(&st)));
            out.push(path);
        }
    }
    Ok(out)
}

/// The identity of a canonical path, opened without following links.
fn file_id(what: &'static str, path: &Path) -> Result<FileId, SpecError> {
    let fd = hostfs::open_nofollow(path, nix::fcntl::OFlag::O_PATH).map_err(|e| {
        SpecError::Unopenable {
            what,
            path: path.to_path_buf(),
            error: e.to_string(),
        }
    })?;
    nix::sys::stat::fstat(&fd)
        .map(|st| FileId::of(&st))
        .map_err(|e| SpecError::Unopenable {
            what,
            path: path.to_path_buf(),
            error: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(argv: &[&str]) -> SandboxRequest {
        SandboxRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn sbx_7_missing_command_is_refused() {
        assert!(matches!(
            SandboxSpec::parse(req(&[])),
            Err(SpecError::NoCommand)
        ));
    }

    #[test]
    fn sbx_1_cwd_outside_writable_roots_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let mut r = req(&["true"]);
        r.writable = vec![dir.path().to_path_buf()];
        r.cwd = Some(other.path().to_path_buf());
        assert!(matches!(
            SandboxSpec::parse(r.clone()),
            Err(SpecError::CwdOutsideRoots(_))
        ));
        r.cwd = Some(dir.path().to_path_buf()); // positive control
        assert!(SandboxSpec::parse(r).is_ok());
    }

    #[test]
    fn sbx_5_system_directories_cannot_be_roots() {
        for root in [
            "/",
            "/etc",
            "/etc/ssh",
            "/proc/self",
            "/run",
            "/home",
            "/usr",
            "/tmp",
            "/var",
            "/root",
            "/var/lib",
        ] {
            let mut r = req(&["true"]);
            r.writable = vec![PathBuf::from(root)];
            assert!(
                matches!(SandboxSpec::parse(r), Err(SpecError::Forbidden { .. })),
                "{root}"
            );
        }
    }

    #[test]
    fn sbx_5_home_and_its_dot_directories_are_refused_but_projects_pass() {
        let home = Path::new("/home/alice");
        for bad in [
            "/home/alice",
            "/home/alice/.ssh",
            "/home/alice/.config/gh",
            "/home",
            "/root/.cargo",
            "/var/lib/postgresql",
        ] {
            assert!(forbidden_root(Path::new(bad), Some(home)), "{bad}");
        }
        for ok in [
            "/home/alice/src/project",
            "/home/bob/shared",
            "/tmp/work",
            "/data/jobs",
            "/var/tmp/x",
            "/opt/tool",
        ] {
            assert!(!forbidden_root(Path::new(ok), Some(home)), "{ok}");
        }
    }

    #[test]
    fn sbx_1_huge_limits_are_refused() {
        let mut r = req(&["true"]);
        r.grace = Some(Duration::from_secs(100_000));
        assert!(matches!(SandboxSpec::parse(r), Err(SpecError::TooLarge(_))));
        let mut r = req(&["true"]);
        r.limits.cpu_millicores = Some(u64::MAX);
        assert!(matches!(
            SandboxSpec::parse(r),
            Err(SpecError::TooLarge("cpu"))
        ));
    }

    #[test]
    fn sbx_5_denied_env_is_refused_at_parse() {
        let mut r = req(&["true"]);
        r.env = vec![("LD_PRELOAD".into(), "/tmp/x.so".into())];
        assert!(matches!(
            SandboxSpec::parse(r),
            Err(SpecError::Env(EnvError::Denied(_)))
        ));
    }

    #[test]
    fn sbx_3_roots_through_links_or_dotdot_and_sockets_are_refused_at_parse() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let parse = |w: Vec<PathBuf>, ro: Vec<PathBuf>| {
            let mut r = req(&["true"]);
            r.writable = w;
            r.readonly = ro;
            SandboxSpec::parse(r)
        };
        match parse(vec![d.path().join("link/sub")], vec![]) {
            Err(SpecError::SymlinkInPath { link, .. }) => assert_eq!(link, d.path().join("link")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(vec![real.join("sub/..")], vec![]),
            Err(SpecError::NotNormalised { .. })
        ));
        let sock = real.join("sub/s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        match parse(vec![], vec![real.clone()]) {
            Err(SpecError::SocketInRoot { socket, .. }) => assert_eq!(socket, sock),
            other => panic!("{other:?}"),
        }
        // Positive control: the real path parses, its identity is pinned,
        // and a socket in a writable root is not a reason to refuse.
        let spec = parse(vec![real.join("sub")], vec![]).unwrap();
        assert_eq!(spec.root_ids.len(), 1);
        assert_eq!(spec.writable, vec![real.join("sub")]);
    }

    #[test]
    fn sbx_1_relative_roots_and_zero_limits_are_refused() {
        let mut r = req(&["true"]);
        r.writable = vec![PathBuf::from("relative/dir")];
        assert!(matches!(
            SandboxSpec::parse(r),
            Err(SpecError::NotAbsolute { .. })
        ));
        let mut r = req(&["true"]);
        r.limits.pids = Some(0);
        assert!(matches!(
            SandboxSpec::parse(r),
            Err(SpecError::ZeroLimit("pids"))
        ));
        let mut r = req(&["true"]);
        r.timeout = Some(Duration::ZERO);
        assert!(matches!(SandboxSpec::parse(r), Err(SpecError::BadTimeout)));
    }
}
