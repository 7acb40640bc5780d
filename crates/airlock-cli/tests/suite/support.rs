//! Helpers: run the real `airlock` binary, as root or as an unprivileged
//! user created for the tests, and parse its one JSON object.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// Who runs `airlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The test process's own user (root in CI).
    Invoker,
    /// An unprivileged user created for the tests (when the invoker is root).
    Unprivileged,
}

pub const TEST_USER: &str = "airlock-test";
/// A credential-shaped value planted in the broker's environment and files.
pub const SENTINEL: &str = "sk-airlock-sentinel-7f3a9c0e5d";

pub fn is_root() -> bool {
    nix_uid() == 0
}

fn nix_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

/// uid and gid of the unprivileged test user, creating it when needed.
pub fn test_user() -> Option<(u32, u32)> {
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *USER.get_or_init(|| {
        if !is_root() {
            return None;
        }
        let id = |flag: &str| -> Option<u32> {
            let o = Command::new("id").args([flag, TEST_USER]).output().ok()?;
            String::from_utf8(o.stdout).ok()?.trim().parse().ok()
        };
        if id("-u").is_none() {
            let _ = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    TEST_USER,
                ])
                .status();
        }
        Some((id("-u")?, id("-g")?))
    })
}

/// The binary, copied to a world-readable place so the test user can run it
/// whatever the permissions of the checkout's parents. One copy per build
/// (named after the built file's inode and mtime), shared by every test
/// process: a copy per process filled /tmp with 67 MB files. Checked on
/// every call, since anyone may clean /tmp while tests run.
pub fn airlock_bin() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let src = PathBuf::from(env!("CARGO_BIN_EXE_airlock"));
    if !is_root() {
        return src;
    }
    let Ok(meta) = std::fs::metadata(&src) else {
        return src;
    };
    let dir = std::env::temp_dir().join(format!(
        "airlock-itest-bin-{}-{}-{}",
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec()
    ));
    let dst = dir.join("airlock");
    if dst.exists() {
        return dst;
    }
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
    // The small sandbox init goes beside it first, as an install puts it
    // (the copy of airlock is what says the directory is complete), so the
    // CLI's launches start it (`airlock_sandbox::init_binary`).
    let init = PathBuf::from(env!("CARGO_BIN_EXE_airlock-sandbox-init"));
    let _ = copy_into_place(&init, &dir.join(airlock_sandbox::INIT_BINARY));
    if copy_into_place(&src, &dst) {
        dst
    } else {
        src
    }
}

/// Copies under a private name, then renames: concurrent test processes
/// never see (or execute) a half-written binary.
fn copy_into_place(src: &Path, dst: &Path) -> bool {
    let tmp = dst.with_extension(std::process::id().to_string());
    if std::fs::copy(src, &tmp).is_err() {
        return false;
    }
    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755));
    if std::fs::rename(&tmp, dst).is_err() {
        let _ = std::fs::remove_file(&tmp);
        return false;
    }
    true
}

/// A command that runs `program` as `who`.
pub fn run_as(who: Who, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match (who, test_user()) {
        (Who::Unprivileged, Some((uid, gid))) => {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_string(),
                "--".to_string(),
            ])
            .arg(program);
            c
        }
        (Who::Unprivileged, None) => panic!(
            "the unprivileged user {TEST_USER} does not exist and could not be created (run the tests as root with useradd, or set {SKIP_UNPRIVILEGED}=1)"
        ),
        (Who::Invoker, _) => Command::new(program),
    }
}

/// The host uid `who` runs as.
pub fn uid_of(who: Who) -> u32 {
    match (who, test_user()) {
        (Who::Unprivileged, Some((uid, _))) => uid,
        _ => nix_uid(),
    }
}

/// A command that runs `airlock ARGS` as `who`, with sentinel credentials in
/// its environment (they must never reach a sandbox).
pub fn airlock(who: Who) -> Command {
    let mut cmd = run_as(who, airlock_bin());
    cmd.env("OPENAI_API_KEY", SENTINEL)
        .env("AIRLOCK_TEST_SENTINEL", SENTINEL)
        .env("LD_PRELOAD", "")
        .current_dir("/");
    cmd
}

/// A directory the `who` user owns, removed on drop.
pub fn workdir(who: Who) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("airlock-itest-")
        .tempdir()
        .unwrap_or_else(|e| panic!("tempdir: {e}"));
    if let (Who::Unprivileged, Some((uid, gid))) = (who, test_user()) {
        let _ = std::os::unix::fs::chown(d.path(), Some(uid), Some(gid));
    }
    let _ = std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755));
    d
}

/// Result of one `sandbox exec --json`.
#[derive(Debug)]
pub struct Exec {
    pub json: Value,
    pub code: i32,
    pub stderr: String,
}

impl Exec {
    pub fn stdout(&self) -> &str {
        self.json["stdout"].as_str().unwrap_or("")
    }
    pub fn guarantee(&self, name: &str) -> bool {
        self.json["containment"]["guarantees"]
            .as_array()
            .is_some_and(|gs| {
                gs.iter()
                    .any(|g| g["name"] == name && g["in_force"] == true)
            })
    }
    pub fn level(&self) -> &str {
        self.json["containment"]["level"].as_str().unwrap_or("")
    }
    pub fn hit(&self, limit: &str) -> bool {
        self.json["limit_hits"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == limit))
    }
}

/// `airlock sandbox exec --json OPTS -- CMD…` as `who`.
pub fn exec(who: Who, opts: &[&str], cmd: &[&str]) -> Exec {
    exec_from(airlock(who), opts, cmd)
}

/// Like [`exec`], from a prepared [`airlock`] command (more environment, say).
pub fn exec_from(mut base: Command, opts: &[&str], cmd: &[&str]) -> Exec {
    let out: Output = base
        .args(["sandbox", "exec", "--json"])
        .args(opts)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("spawn airlock: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("null");
    assert!(
        lines.next().is_none(),
        "more than one JSON object on stdout: {stdout}"
    );
    let json: Value =
        serde_json::from_str(first).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    Exec {
        json,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

pub fn exec_sh(who: Who, opts: &[&str], script: &str) -> Exec {
    let cmd = sh(script);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    exec(who, opts, &refs)
}

pub fn py(who: Who, opts: &[&str], code: &str) -> Exec {
    exec(who, opts, &["/usr/bin/python3", "-c", code])
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_else(|| panic!("non-UTF-8 path"))
}

/// Generates one test per user kind from a scenario `fn(Who)`.
#[macro_export]
macro_rules! both_users {
    ($name:ident) => {
        mod $name {
            use super::*;
            #[test]
            fn as_invoker() {
                super::$name(Who::Invoker);
            }
            #[test]
            fn as_unprivileged_user() {
                if !$crate::suite::support::require_test_user() {
                    return;
                }
                super::$name(Who::Unprivileged);
            }
        }
    };
}

/// Set to skip, rather than fail, the cases that need root (a private network or mount
/// namespace, a chown, the unprivileged user) when the suite does not run as root.
pub const SKIP_ROOT: &str = "AIRLOCK_TEST_SKIP_ROOT";
/// Set to skip, rather than fail, the unprivileged half of `both_users!` scenarios when the
/// test user cannot be created.
pub const SKIP_UNPRIVILEGED: &str = "AIRLOCK_TEST_SKIP_UNPRIVILEGED";

/// Whether a case that needs root may run: true as root; without root, a failure naming
/// `why`, unless [`SKIP_ROOT`] is set (then false, and the case is skipped out loud).
pub fn require_root(why: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var_os(SKIP_ROOT).is_some(),
        "this case needs root ({why}); run the suite as root, or set {SKIP_ROOT}=1 to skip it"
    );
    eprintln!("skipped ({SKIP_ROOT}): needs root ({why})");
    false
}

/// Whether the unprivileged half of a `both_users!` scenario may run: the test user exists
/// (created as root); otherwise a failure, unless the matching skip variable is set.
pub fn require_test_user() -> bool {
    if test_user().is_some() {
        return true;
    }
    if !require_root("creating the unprivileged user airlock-test") {
        return false;
    }
    assert!(
        std::env::var_os(SKIP_UNPRIVILEGED).is_some(),
        "the unprivileged user {TEST_USER} could not be created (see `useradd --system \
         --no-create-home {TEST_USER}`); fix that, or set {SKIP_UNPRIVILEGED}=1 to skip"
    );
    eprintln!("skipped ({SKIP_UNPRIVILEGED}): no user {TEST_USER}");
    false
}

/// A `sleep` argument (a number of seconds) that appears in no other
/// test's process command lines, so a test can count the processes it
/// started by their command line: `base`'s leading digit, the test
/// process's whole pid, which user runs it, and a per-process counter (the
/// two `both_users!` variants of one test share a process).
pub fn sleep_marker(who: Who, base: u32) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let user = if who == Who::Invoker { 1 } else { 2 };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}{:07}.{user}{n:03}", base / 1000, std::process::id())
}
