//! Memory, pids and CPU limits through cgroups (SBX-3, SBX-4).
//!
//! Detected at run time, never assumed: cgroup v2 when our own cgroup is
//! delegated to us (writable, controllers available), v1 controllers when
//! the hierarchy is writable (typically as root). Each limit is reported as
//! applied or not. A v2 group, even one without controllers, gives
//! `cgroup.kill`, which kills every descendant atomically; on v1 the group's
//! processes are killed in a loop until it is empty.
//!
//! Delegation: a v2 group that systemd delegated (`Delegate=yes`, marked
//! with the `trusted.delegate` or `user.delegate` extended attribute), or
//! one our own uid owns, is ours to arrange. When its controllers are
//! available but not enabled for children, the broker enables them,
//! first moving itself into a leaf `airlock-broker-<pid>` if the "no
//! internal processes" rule requires it. That is how an unprivileged user
//! gets real memory, pids and CPU limits (README: cgroup delegation).
//!
//! Group names carry the broker's pid (`airlock-<pid>-<n>`), so that
//! [`remove_stale`] can remove the groups of a broker that died.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::report::Guarantee;

/// What to apply.
#[derive(Debug, Clone, Copy, Default)]
pub struct CgroupLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_millicores: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    fn v1_name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Pids => "pids",
            Self::Cpu => "cpu",
        }
    }
    fn guarantee(self) -> &'static str {
        match self {
            Self::Memory => "memory_limit",
            Self::Pids => "pids_limit",
            Self::Cpu => "cpu_limit",
        }
    }
}

/// One created group (possibly spanning several v1 hierarchies).
#[derive(Debug, Default)]
pub struct Cgroup {
    v2: Option<PathBuf>,
    v1: Vec<(Controller, PathBuf)>,
    memory_v2: bool,
}

/// A mounted hierarchy from `/proc/self/mountinfo`.
#[derive(Debug)]
struct Mount {
    root: String,
    point: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

fn mounts() -> Vec<Mount> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let fstype = *r.first()?;
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            let controllers = r
                .get(2)
                .map(|o| o.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            Some(Mount {
                root: unescape(l.get(3)?),
                point: PathBuf::from(unescape(l.get(4)?)),
                v2,
                controllers,
            })
        })
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Our own cgroup path per hierarchy: ("" for v2, or the controller list).
fn own_paths() -> Vec<(String, String)> {
    let Ok(s) = fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    s.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            let ctrl = it.next()?.to_string();
            let path = it.next()?.to_string();
            Some((ctrl, path))
        })
        .collect()
}

fn dir_for(m: &Mount, own: &str) -> Option<PathBuf> {
    let rel = own.strip_prefix(&m.root).unwrap_or(own);
    let rel = rel.trim_start_matches('/');
    if rel.contains("..") {
        return None;
    }
    Some(if rel.is_empty() {
        m.point.clone()
    } else {
        m.point.join(rel)
    })
}

impl Cgroup {
    /// Creates a group named `name` and applies `limits` where possible.
    /// Returns the group (if any part of it exists) and one guarantee per
    /// limit plus `cgroup_kill`.
    pub fn create(name: &str, limits: CgroupLimits) -> (Self, Vec<Guarantee>) {
        let mut cg = Cgroup::default();
        let mut applied: Vec<(Controller, String)> = Vec::new();
        let mut failed: Vec<(Controller, String)> = Vec::new();
        let mounts = mounts();
        let own = own_paths();

        // cgroup v2: a leaf under our own group (or under the delegated
        // group we moved out of).
        if let Some(m) = mounts.iter().find(|m| m.v2)
            && let Some((_, path)) = own.iter().find(|(c, _)| c.is_empty())
            && let Some(own_dir) = dir_for(m, path)
        {
            let wanted: Vec<&str> = [
                ("memory", limits.memory_bytes.is_some()),
                ("pids", limits.pids.is_some()),
                ("cpu", limits.cpu_millicores.is_some()),
            ]
            .iter()
            .filter(|(_, w)| *w)
            .map(|(c, _)| *c)
            .collect();
            let parent = prepare_v2_parent(own_dir, &wanted);
            let dir = parent.join(name);
            if fs::create_dir(&dir).is_ok() {
                let available =
                    fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
                for (c, key) in [
                    (Controller::Memory, "memory"),
                    (Controller::Pids, "pids"),
                    (Controller::Cpu, "cpu"),
                ] {
                    if !available.split_whitespace().any(|x| x == key) {
                        continue;
                    }
                    let r = match c {
                        Controller::Memory => limits.memory_bytes.map(|b| {
                            let _ = fs::write(dir.join("memory.swap.max"), "0");
                            fs::write(dir.join("memory.max"), b.to_string())
                        }),
                        Controller::Pids => limits
                            .pids
                            .map(|p| fs::write(dir.join("pids.max"), p.to_string())),
                        Controller::Cpu => limits
                            .cpu_millicores
                            .map(|m| fs::write(dir.join("cpu.max"), format!("{} 100000", m * 100))),
                    };
                    match r {
                        Some(Ok(())) => {
                            if c == Controller::Memory {
                                cg.memory_v2 = true;
                            }
                            applied.push((c, "cgroup v2".into()));
                        }
                        Some(Err(e)) => failed.push((c, format!("cgroup v2: {e}"))),
                        None => {}
                    }
                }
                cg.v2 = Some(dir);
            }
        }

        // cgroup v1 for whatever v2 did not cover.
        for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
            let wanted = match c {
                Controller::Memory => limits.memory_bytes.is_some(),
                Controller::Pids => limits.pids.is_some(),
                Controller::Cpu => limits.cpu_millicores.is_some(),
            };
            if !wanted || applied.iter().any(|(a, _)| *a == c) {
                continue;
            }
            let key = c.v1_name();
            let Some(m) = mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|x| x == key))
            else {
                continue;
            };
            let Some((_, path)) = own
                .iter()
                .find(|(ctrls, _)| ctrls.split(',').any(|x| x == key))
            else {
                continue;
            };
            let Some(parent) = dir_for(m, path) else {
                continue;
            };
            let dir = parent.join(name);
            if let Err(e) = fs::create_dir(&dir) {
                failed.push((c, format!("cgroup v1: {e}")));
                continue;
            }
            let r = match c {
                Controller::Memory => {
                    let b = limits.memory_bytes.unwrap_or(u64::MAX);
                    fs::write(dir.join("memory.limit_in_bytes"), b.to_string()).map(|()| {
                        // Swap counts too, when the kernel accounts it.
                        let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), b.to_string());
                    })
                }
                Controller::Pids => fs::write(
                    dir.join("pids.max"),
                    limits.pids.unwrap_or(u64::MAX).to_string(),
                ),
                Controller::Cpu => {
                    let m = limits.cpu_millicores.unwrap_or(1000);
                    fs::write(dir.join("cpu.cfs_period_us"), "100000").and_then(|()| {
                        fs::write(dir.join("cpu.cfs_quota_us"), (m * 100).to_string())
                    })
                }
            };
            match r {
                Ok(()) => applied.push((c, "cgroup v1".into())),
                Err(e) => failed.push((c, format!("cgroup v1: {e}"))),
            }
            cg.v1.push((c, dir));
        }

        let mut report = Vec::new();
        for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
            let wanted = match c {
                Controller::Memory => limits.memory_bytes,
                Controller::Pids => limits.pids,
                Controller::Cpu => limits.cpu_millicores,
            };
            let Some(v) = wanted else { continue };
            if let Some((_, how)) = applied.iter().find(|(a, _)| *a == c) {
                report.push(Guarantee::new(
                    c.guarantee(),
                    true,
                    format!("{v} via {how}"),
                ));
            } else {
                let why = failed
                    .iter()
                    .find(|(a, _)| *a == c)
                    .map(|(_, w)| w.clone())
                    .unwrap_or_else(|| "no writable cgroup hierarchy with this controller".into());
                report.push(Guarantee::new(c.guarantee(), false, why));
            }
        }
        report.push(Guarantee::new(
            "cgroup_kill",
            cg.v2.is_some() || !cg.v1.is_empty(),
            if cg.v2.is_some() {
                "cgroup v2 cgroup.kill"
            } else if !cg.v1.is_empty() {
                "cgroup v1 kill loop"
            } else {
                "no writable cgroup: PID-namespace teardown only"
            },
        ));
        (cg, report)
    }

    pub fn is_empty(&self) -> bool {
        self.v2.is_none() && self.v1.is_empty()
    }

    /// Moves `pid` into every part of the group.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        if let Some(d) = &self.v2 {
            fs::write(d.join("cgroup.procs"), pid.to_string())?;
        }
        for (_, d) in &self.v1 {
            fs::write(d.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// Kills every process in the group.
    pub fn kill(&self) {
        if let Some(d) = &self.v2
            && fs::write(d.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for (_, d) in &self.v1 {
            for _ in 0..100 {
                let procs = fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::yield_now();
            }
        }
    }

    /// Whether the memory limit killed something (OOM) during the run.
    pub fn oom_killed(&self) -> bool {
        if self.memory_v2
            && let Some(d) = &self.v2
        {
            return count_field(&d.join("memory.events"), "oom_kill") > 0;
        }
        self.v1
            .iter()
            .filter(|(c, _)| *c == Controller::Memory)
            .any(|(_, d)| count_field(&d.join("memory.oom_control"), "oom_kill") > 0)
    }

    /// Whether the pids limit refused a fork during the run.
    pub fn pids_limit_hit(&self) -> bool {
        let v1 = self
            .v1
            .iter()
            .filter(|(c, _)| *c == Controller::Pids)
            .any(|(_, d)| count_field(&d.join("pids.events"), "max") > 0);
        v1 || self
            .v2
            .as_ref()
            .is_some_and(|d| count_field(&d.join("pids.events"), "max") > 0)
    }

    /// Kills what is left and removes the directories.
    pub fn destroy(self) {
        self.kill();
        let mut dirs: Vec<PathBuf> = self.v1.iter().map(|(_, d)| d.clone()).collect();
        dirs.extend(self.v2.clone());
        for d in dirs {
            for _ in 0..200 {
                if fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// Set when this process moved itself into a leaf of a delegated v2
/// group: sandbox groups are then created beside that leaf.
static MOVED_FROM: OnceLock<PathBuf> = OnceLock::new();

/// The v2 group under which sandbox groups are created, with the wanted
/// controllers enabled for its children when the group is delegated.
fn prepare_v2_parent(own: PathBuf, wanted: &[&str]) -> PathBuf {
    if let Some(p) = MOVED_FROM.get() {
        return p.clone();
    }
    let words = |f: &str| -> Vec<String> {
        fs::read_to_string(own.join(f))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let available = words("cgroup.controllers");
    let enabled = words("cgroup.subtree_control");
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| available.iter().any(|a| a == c) && !enabled.iter().any(|e| e == c))
        .collect();
    if missing.is_empty() || !delegated(&own) {
        return own;
    }
    let request = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let control = own.join("cgroup.subtree_control");
    match fs::write(&control, &request) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            // "No internal processes": this process sits in the group.
            let leaf = own.join(format!("airlock-broker-{}", std::process::id()));
            let _ = fs::create_dir(&leaf);
            if fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).is_ok() {
                let _ = MOVED_FROM.set(own.clone());
                let _ = fs::write(&control, &request);
            }
            own
        }
        _ => own,
    }
}

/// Whether a v2 group was delegated to this process's user.
fn delegated(dir: &Path) -> bool {
    let marked = [c"trusted.delegate", c"user.delegate"].iter().any(|name| {
        crate::sys::get_xattr(dir, name).is_ok_and(|v| v.as_deref() == Some(b"1".as_slice()))
    });
    let euid = nix::unistd::geteuid();
    let ours = !euid.is_root()
        && std::os::unix::fs::MetadataExt::uid(&match fs::metadata(dir) {
            Ok(m) => m,
            Err(_) => return marked,
        }) == euid.as_raw();
    marked || ours
}

/// A group left by a broker that is no longer running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleGroup {
    pub path: PathBuf,
    pub removed: bool,
    /// Why it could not be removed, when it was not.
    pub error: Option<String>,
}

/// The broker pid in a group name this crate creates, if it is one.
fn broker_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("airlock-")?;
    let (pid, tail) = match rest.strip_prefix("broker-") {
        Some(pid) => (pid, None),
        None => {
            let (pid, n) = rest.split_once('-')?;
            (pid, Some(n))
        }
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || tail.is_some_and(|n| !digits(n)) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the groups (`airlock-<pid>-<n>`, `airlock-broker-<pid>`) that a
/// broker which is no longer running left beside this process's own
/// groups, killing anything still inside them first. Called by the
/// broker once per process before its first launch; also meant for a
/// `doctor` command. Groups of a live broker are never touched: a pid that
/// exists (even if reused by another program) keeps its groups.
pub fn remove_stale() -> Vec<StaleGroup> {
    let mounts = mounts();
    let own = own_paths();
    let mut parents: Vec<PathBuf> = Vec::new();
    for m in &mounts {
        let mine = own.iter().find(|(ctrls, _)| {
            if m.v2 {
                ctrls.is_empty()
            } else {
                !ctrls.is_empty()
                    && ctrls
                        .split(',')
                        .any(|c| m.controllers.iter().any(|x| x == c))
            }
        });
        if let Some((_, path)) = mine
            && let Some(dir) = dir_for(m, path)
        {
            parents.push(dir);
        }
    }
    parents.extend(MOVED_FROM.get().cloned());
    parents.sort();
    parents.dedup();
    let mut out = Vec::new();
    for parent in parents {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(broker_pid) else {
                continue;
            };
            if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
                continue;
            }
            let path = e.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            // Another user's leftovers (a root broker's, seen by an
            // unprivileged one sharing its cgroup) cannot be killed or
            // removed from here: not ours to sweep.
            let euid = nix::unistd::geteuid();
            if !euid.is_root() && std::os::unix::fs::MetadataExt::uid(&meta) != euid.as_raw() {
                continue;
            }
            let v2 = path.join("cgroup.kill").exists();
            let cg = if v2 {
                Cgroup {
                    v2: Some(path.clone()),
                    ..Cgroup::default()
                }
            } else {
                Cgroup {
                    v1: vec![(Controller::Pids, path.clone())],
                    ..Cgroup::default()
                }
            };
            cg.kill();
            let (removed, error) = remove_group_dir(|| fs::remove_dir(&path), 200);
            out.push(StaleGroup {
                path,
                removed,
                error,
            });
        }
    }
    out
}

/// Removes a killed group's directory with `remove`, waiting (5 ms a try,
/// at most `tries`) only while the kernel says it is busy (its processes
/// still exiting). Any other refusal (no permission, say) is final at
/// once: retrying it only delayed the first launch of a process by a
/// second. Answers whether it is gone, and the last error if not.
fn remove_group_dir(
    mut remove: impl FnMut() -> std::io::Result<()>,
    tries: u32,
) -> (bool, Option<String>) {
    let mut error = None;
    for _ in 0..tries {
        match remove() {
            Ok(()) => return (true, None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (true, None),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                error = Some(e.to_string());
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return (false, Some(e.to_string())),
        }
    }
    (false, error)
}

fn count_field(path: &Path, key: &str) -> u64 {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stale group's directory is retried only while busy; a refusal
    /// such as EACCES ends the attempt at once (it used to cost 200 tries,
    /// a second, on an unprivileged broker's first launch). Control: a
    /// busy directory that empties on the third try is removed.
    #[test]
    fn a_stale_group_is_retried_only_while_busy() {
        let mut calls = 0;
        let (removed, error) = remove_group_dir(
            || {
                calls += 1;
                Err(std::io::Error::from_raw_os_error(nix::libc::EACCES))
            },
            200,
        );
        assert!(!removed);
        assert!(error.is_some());
        assert_eq!(calls, 1);

        let mut calls = 0;
        let (removed, error) = remove_group_dir(
            || {
                calls += 1;
                if calls < 3 {
                    Err(std::io::Error::from_raw_os_error(nix::libc::EBUSY))
                } else {
                    Ok(())
                }
            },
            200,
        );
        assert!(removed && error.is_none());
        assert_eq!(calls, 3);

        let mut calls = 0;
        let (removed, error) = remove_group_dir(
            || {
                calls += 1;
                Err(std::io::Error::from_raw_os_error(nix::libc::EBUSY))
            },
            4,
        );
        assert!(!removed && error.is_some());
        assert_eq!(calls, 4);
    }

    #[test]
    fn sbx_4_only_our_group_names_yield_a_broker_pid() {
        assert_eq!(broker_pid("airlock-800-0"), Some(800));
        assert_eq!(broker_pid("airlock-broker-42"), Some(42));
        for other in [
            "airlock-800-0-scratch",
            "airlock-",
            "airlock-x-1",
            "airlock-1-",
            "airlock-broker-",
            "user.slice",
            "airlockd-1-2",
        ] {
            assert_eq!(broker_pid(other), None, "{other}");
        }
    }
}
