//! The sandbox pool (issue 14): pre-built sandboxes are used once, only by a
//! launch they were built for, never when dead, and give every guarantee a
//! cold launch gives. A pool that is empty or cannot keep up means cold
//! launches, never failures.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::*;
use crate::both_users;

/// `airlock sandbox exec --repeat N … --json` as `who`: the summary.
fn repeat(who: Who, opts: &[&str], cmd: &[&str]) -> Value {
    let out = airlock(who)
        .args(["sandbox", "exec", "--json"])
        .args(opts)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Name → in force, for every guarantee of a containment report.
fn guarantees(report: &Value) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = report["guarantees"]
        .as_array()
        .unwrap_or_else(|| panic!("no guarantees in {report}"))
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or("").to_string(),
                g["in_force"] == true,
            )
        })
        .collect();
    v.sort();
    v
}

/// Each launch records in the writable root whether its `/tmp` had been
/// seen by an earlier workload (a reused sandbox would have it); the first
/// two lines are the check's positive control inside the same sandbox.
const ONCE: &str = r#"
touch /tmp/seen && test -e /tmp/seen && echo control >> "$W/log"
test "$(cat /tmp/earlier 2>/dev/null)" = yes && echo REUSED >> "$W/log"
echo yes > /tmp/earlier
echo "ok $(id -u)" >> "$W/log"
"#;

/// Three launches from one process with a pool of one, stocked before the
/// first (`--pool-wait`): all three pooled; no sandbox is used twice (each `/tmp` is new), the
/// writable root works in a pooled sandbox, and the pooled report has
/// exactly the guarantees, in force or not, of a cold launch of the same
/// request.
fn sbx_pool_launches_are_used_once_and_keep_every_guarantee(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let script = format!("W={wp}\n{ONCE}");
    let summary = repeat(
        who,
        &[
            "--repeat",
            "3",
            "--pool",
            "1",
            "--pool-wait",
            "--timings",
            "--writable",
            wp,
        ],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["launches"], 3, "{summary}");
    assert_eq!(summary["pooled"], 3, "{summary}");
    assert_eq!(summary["cold"], 0, "{summary}");
    assert_eq!(summary["waves_ms"].as_array().map(Vec::len), Some(3));
    let log = std::fs::read_to_string(w.path().join("log")).unwrap();
    assert_eq!(log.matches("control").count(), 3, "{log}");
    assert!(!log.contains("REUSED"), "a sandbox was used twice: {log}");
    assert_eq!(log.matches("ok 1000").count(), 3, "{log}");
    let last = &summary["last"];
    let stages: Vec<&str> = last["timings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t[0].as_str())
        .collect();
    assert!(stages.contains(&"pool_taken"), "{stages:?}");

    let cold = exec_sh(who, &["--writable", wp], &script);
    assert_eq!(cold.code, 0, "{:?}", cold.json);
    let pooled = guarantees(&last["containment"]);
    assert_eq!(pooled, guarantees(&cold.json["containment"]));
    assert_eq!(last["containment"]["level"], "namespaces");
    for needed in [
        "pid_namespace",
        "mount_namespace",
        "network_namespace",
        "private_root",
        "seccomp",
        "capabilities_dropped",
        "unprivileged_host_uid",
    ] {
        assert!(
            pooled.contains(&(needed.to_string(), true)),
            "{needed} not in force: {pooled:?}"
        );
    }
}
both_users!(sbx_pool_launches_are_used_once_and_keep_every_guarantee);

/// More launches at once than the pool holds: every launch succeeds, the
/// ones that found no sandbox ready started cold, and `--timings` says so.
#[test]
fn sbx_pool_an_exhausted_pool_falls_back_to_cold_launches() {
    let summary = repeat(
        Who::Invoker,
        &[
            "--repeat",
            "8",
            "--concurrency",
            "4",
            "--pool",
            "1",
            "--timings",
        ],
        &["/bin/true"],
    );
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["launches"], 8, "{summary}");
    let (pooled, cold) = (
        summary["pooled"].as_u64().unwrap(),
        summary["cold"].as_u64().unwrap(),
    );
    assert_eq!(pooled + cold, 8, "{summary}");
    // The first four start together before anything is stocked.
    assert!(cold >= 4, "{summary}");
    let stages: Vec<&str> = summary["last"]["timings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t[0].as_str())
        .collect();
    assert!(
        stages.contains(&"pool_taken") || stages.contains(&"pool_empty"),
        "{stages:?}"
    );
}

/// A burst at a stocked pool: with `--pool-wait` the pool is stocked before
/// the first launch and refilled between waves, so two waves of four
/// launches at once all take pooled sandboxes. Control: the same burst
/// without stocking finds the pool empty at least once.
#[test]
fn sbx_pool_a_stocked_pool_serves_a_burst_from_its_first_launch() {
    let opts = |wait: bool| {
        let mut v = vec!["--repeat", "8", "--concurrency", "4", "--pool", "4"];
        if wait {
            v.push("--pool-wait");
        }
        repeat(Who::Invoker, &v, &["/bin/true"])
    };
    let stocked = opts(true);
    assert_eq!(stocked["failed"], 0, "{stocked}");
    assert_eq!(stocked["pooled"], 8, "{stocked}");
    assert_eq!(stocked["cold"], 0, "{stocked}");
    assert_eq!(stocked["waves_ms"].as_array().map(Vec::len), Some(2));
    let unstocked = opts(false);
    assert_eq!(unstocked["failed"], 0, "{unstocked}");
    assert!(unstocked["cold"].as_u64().unwrap() >= 1, "{unstocked}");
}

/// A broker stocked for some limits before any launch hands its first
/// launch under those limits a pooled sandbox, and only those limits:
/// a launch under other limits starts cold.
#[test]
fn sbx_pool_stocking_prepares_exactly_the_stocked_limits() {
    let broker = pooled_broker(1);
    let limits = airlock_sandbox::Limits {
        memory_bytes: Some(64 << 20),
        ..Default::default()
    };
    assert!(broker.stock(&limits).unwrap());
    eventually("a stocked sandbox", || broker.pool_ready_for(&limits) >= 1);
    let other = spec(&["/bin/true"], |r| r.limits.memory_bytes = Some(96 << 20));
    assert_eq!(broker.run(&other).unwrap().exit_code, Some(0));
    let s = broker.pool_stats().unwrap();
    assert_eq!((s.pooled, s.empty), (0, 1), "{s:?}");
    let same = spec(&["/bin/true"], |r| r.limits = limits.clone());
    assert_eq!(broker.run(&same).unwrap().exit_code, Some(0));
    let s = broker.pool_stats().unwrap();
    assert_eq!((s.pooled, s.empty), (1, 1), "{s:?}");
    // Without a pool there is nothing to stock.
    let plain = airlock_sandbox::Broker::with_init_exe(airlock_bin());
    assert!(!plain.stock(&limits).unwrap());
}

/// Whether process `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// Waits, up to a minute, for `f` to hold (a wait, not a timing check).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < until, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spec(
    argv: &[&str],
    f: impl FnOnce(&mut airlock_sandbox::SandboxRequest),
) -> airlock_sandbox::SandboxSpec {
    let mut req = airlock_sandbox::SandboxRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        timeout: Some(Duration::from_secs(60)),
        timings: true,
        ..Default::default()
    };
    f(&mut req);
    airlock_sandbox::SandboxSpec::parse(req).unwrap()
}

fn pooled_broker(per_key: usize) -> airlock_sandbox::Broker {
    airlock_sandbox::Broker::with_init_exe(airlock_bin())
        .with_pool(per_key)
        .unwrap()
}

/// The memory limit of the cgroup the process with `marker` in its command
/// line is in, read on the host.
fn memory_limit_of(marker: &str) -> Option<u64> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmd).contains(marker) {
            continue;
        }
        let groups = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
        for line in groups.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            // cgroup v1's memory controller; v2 on a hybrid host (under
            // `unified`) or on a pure v2 host (the mount itself).
            let files = if controllers.split(',').any(|c| c == "memory") {
                vec![
                    Path::new("/sys/fs/cgroup/memory")
                        .join(rel)
                        .join("memory.limit_in_bytes"),
                ]
            } else if controllers.is_empty() {
                vec![
                    Path::new("/sys/fs/cgroup/unified")
                        .join(rel)
                        .join("memory.max"),
                    Path::new("/sys/fs/cgroup").join(rel).join("memory.max"),
                ]
            } else {
                continue;
            };
            for file in files {
                if let Some(v) = std::fs::read_to_string(file)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// Launches `sh -c` waiting for `W/go` in a thread, reads the workload's
/// cgroup memory limit on the host, then lets it finish.
fn limit_seen_by_a_launch(broker: &airlock_sandbox::Broker, memory_mib: u64) -> u64 {
    let w = workdir(Who::Invoker);
    let wp = path_str(w.path()).to_string();
    let marker = format!("pool-limit-{}-{memory_mib}", std::process::id());
    let script = format!(
        "i=0; while [ ! -e {wp}/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done # {marker}"
    );
    let s = spec(&["/bin/sh", "-c", &script], |r| {
        r.writable = vec![w.path().to_path_buf()];
        r.limits.memory_bytes = Some(memory_mib << 20);
    });
    let b = broker.clone();
    let t = std::thread::spawn(move || b.run(&s));
    let mut seen = None;
    eventually("the workload to start", || {
        seen = memory_limit_of(&marker);
        seen.is_some()
    });
    std::fs::write(w.path().join("go"), "").unwrap();
    let r = t.join().unwrap().unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    seen.unwrap()
}

/// A pooled sandbox is only ever handed to a launch with its own limits:
/// with a sandbox ready for 64 MiB, a launch asking for 96 MiB starts cold
/// and its workload's cgroup has 96 MiB (read on the host), and a launch
/// asking for 64 MiB again takes the pooled one (control: the limit check
/// can see a difference).
#[test]
fn sbx_pool_a_sandbox_built_for_other_limits_is_never_handed_out() {
    if !require_root("cgroup limits read on the host") {
        return;
    }
    let broker = pooled_broker(1);
    assert_eq!(limit_seen_by_a_launch(&broker, 64), 64 << 20);
    eventually("a sandbox for 64 MiB", || {
        broker.pool_stats().unwrap().ready >= 1
    });
    let before = broker.pool_stats().unwrap();
    assert_eq!(limit_seen_by_a_launch(&broker, 96), 96 << 20);
    let after = broker.pool_stats().unwrap();
    assert_eq!(after.pooled, before.pooled, "96 MiB took a 64 MiB sandbox");
    assert_eq!(after.empty, before.empty + 1);
    eventually("a sandbox for 64 MiB", || {
        broker.pool_ready_pids().len() >= 2
    });
    assert_eq!(limit_seen_by_a_launch(&broker, 64), 64 << 20);
    assert_eq!(broker.pool_stats().unwrap().pooled, after.pooled + 1);
}

/// A pooled sandbox killed while it waits is never handed out: the next
/// launch starts cold and succeeds, and the filler builds a new one.
#[test]
fn sbx_pool_a_killed_pooled_sandbox_is_never_used_and_is_replaced() {
    let broker = pooled_broker(1);
    let s = spec(&["/bin/true"], |_| {});
    assert_eq!(broker.run(&s).unwrap().exit_code, Some(0));
    eventually("a ready sandbox", || broker.pool_ready_pids().len() == 1);
    let victim = broker.pool_ready_pids()[0];
    let before = broker.pool_stats().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually("the victim to die", || !running(victim));
    // The launch succeeds: handed the dead sandbox, it would have failed
    // (nobody reads its spec). It starts cold, or — when the filler's own
    // sweep found the dead one first — takes a replacement built since.
    let r = broker.run(&s).unwrap();
    assert_eq!(r.exit_code, Some(0));
    let stages: Vec<&str> = r.timings.iter().map(|(s, _)| s.as_str()).collect();
    let after = broker.pool_stats().unwrap();
    assert!(after.dead > before.dead, "{after:?}");
    assert!(
        stages.contains(&"pool_empty") || after.built > before.built,
        "{stages:?} {after:?}"
    );
    eventually("a replacement", || {
        broker
            .pool_ready_pids()
            .first()
            .is_some_and(|p| *p != victim)
    });
    let pooled = broker.pool_stats().unwrap().pooled;
    let r = broker.run(&s).unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(broker.pool_stats().unwrap().pooled, pooled + 1);
}

/// A pooled sandbox that dies after the pool checked it and before it took
/// the launch costs the launch nothing: it runs cold, and its timings say
/// `pool_handoff_failed`. The hook runs in exactly that window (after the
/// sandbox was taken, before its spec is written). Controls: the sandbox
/// killed is the one that was taken (the pool no longer lists it, and the
/// launch reports the failed hand-off, which only a dead pooled sandbox
/// causes), and a launch without the kill is pooled.
#[test]
fn sbx_pool_a_sandbox_dead_at_the_hand_off_means_a_cold_launch() {
    let broker = pooled_broker(1);
    let s = spec(&["/bin/echo", "ran"], |_| {});
    assert_eq!(broker.run(&s).unwrap().exit_code, Some(0));
    eventually("a ready sandbox", || broker.pool_ready_pids().len() == 1);
    let victim = broker.pool_ready_pids()[0];
    let mut killed = Vec::new();
    let r = broker
        .run_with_before_start(&s, airlock_sandbox::Hooks::default(), &mut || {
            if !killed.is_empty() {
                return;
            }
            assert!(!broker.pool_ready_pids().contains(&victim));
            // The waiting sandbox is its init and the init's child (the
            // sandbox's PID 1): both die, so nothing reads the launch.
            killed.push(victim);
            killed.extend(sandbox_inits_of(victim));
            for pid in &killed {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            eventually("the taken sandbox to die", || {
                killed.iter().all(|p| !running(*p))
            });
        })
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(r.stdout.text().trim(), "ran");
    let stages: Vec<&str> = r.timings.iter().map(|(s, _)| s.as_str()).collect();
    assert!(stages.contains(&"pool_handoff_failed"), "{stages:?}");
    assert!(!stages.contains(&"pool_taken"), "{stages:?}");
    assert!(killed.len() >= 2, "{killed:?}");
    // Control: the pool serves the next launch as usual.
    eventually("a replacement", || {
        broker
            .pool_ready_pids()
            .first()
            .is_some_and(|p| *p != victim)
    });
    let r = broker.run(&s).unwrap();
    let stages: Vec<&str> = r.timings.iter().map(|(s, _)| s.as_str()).collect();
    assert!(stages.contains(&"pool_taken"), "{stages:?}");
    assert!(!stages.contains(&"pool_handoff_failed"), "{stages:?}");
}

/// A workload in a pooled sandbox cannot reach the sandboxes waiting in
/// the pool: after a preflight proves it is in its own PID namespace (it
/// sees only its sandbox's processes), it sends SIGKILL to every process
/// it can (`kill -9 -1`), and the two waiting sandboxes live on and serve
/// the next launches.
#[test]
fn sbx_pool_a_workload_cannot_signal_the_waiting_sandboxes() {
    let broker = pooled_broker(3);
    let s = spec(&["/bin/true"], |_| {});
    assert_eq!(broker.run(&s).unwrap().exit_code, Some(0));
    eventually("three ready sandboxes", || {
        broker.pool_ready_pids().len() == 3
    });
    let waiting_before = broker.pool_ready_pids();
    let attack = spec(
        &[
            "/bin/sh",
            "-c",
            // Preflight: PID 1 is this sandbox's init and at most a handful
            // of processes are visible; otherwise refuse to attack.
            "n=$(ls /proc | grep -c '^[0-9]'); \
             if [ \"$n\" -gt 6 ] || ! tr '\\0' ' ' < /proc/1/cmdline | grep -q sandbox-init; then \
               echo preflight-failed; exit 3; fi; \
             sleep 100 & p=$!; kill -9 -1; wait $p; echo \"background=$?\"",
        ],
        |_| {},
    );
    let r = broker.run(&attack).unwrap();
    assert!(!r.stdout.text().contains("preflight-failed"), "{r:?}");
    // Control: the signal did kill what it could reach.
    assert!(r.stdout.text().contains("background=137"), "{r:?}");
    let stages: Vec<String> = r.timings.iter().map(|(s, _)| s.clone()).collect();
    assert!(stages.iter().any(|s| s == "pool_taken"), "{stages:?}");
    let still = broker
        .pool_ready_pids()
        .into_iter()
        .filter(|p| waiting_before.contains(p) && running(*p))
        .count();
    assert_eq!(still, 2, "the attack reached a waiting sandbox");
    let before = broker.pool_stats().unwrap();
    for _ in 0..2 {
        assert_eq!(broker.run(&s).unwrap().exit_code, Some(0));
    }
    assert_eq!(broker.pool_stats().unwrap().dead, before.dead);
}

/// Processes on the host whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
                && running(*pid)
        })
        .collect()
}

/// A pooled sandbox holds what a cold one holds, and its launch reports
/// only once nothing of it is left: the workload starts a `setsid` daemon
/// (control: the daemon did start and wrote its file), tries to write to
/// `/` and `/usr`, looks for a file planted in the host's `/tmp` and for
/// the pool's own root directories, and counts the processes it sees. When
/// `--repeat` returns (both launches pooled, the pool stocked before the
/// first), no process of either daemon is left on the host.
fn sbx_pool_a_pooled_sandbox_holds_and_leaves_nothing_behind(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let marker = format!("pool-daemon-{}-{}", std::process::id(), uid_of(who));
    let canary = tempfile::Builder::new()
        .prefix("airlock-itest-host-canary-")
        .tempfile()
        .unwrap();
    let script = format!(
        r#"W={wp}
t=$(cat /proc/sys/kernel/random/uuid)
setsid sh -c "echo started-$t >> {wp}/daemon; sleep 300; : {marker}" </dev/null >/dev/null 2>&1 &
i=0; while ! grep -q "started-$t" {wp}/daemon 2>/dev/null && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done
touch /x 2>/dev/null && echo WROTE-ROOT
touch /usr/x 2>/dev/null && echo WROTE-USR
test -e {canary} && echo SAW-HOST-TMP
ls -d /tmp/airlock-*-scratch 2>/dev/null && echo SAW-POOL-DIR
echo "n=$(ls /proc | grep -c '^[0-9]')"
echo done
"#,
        canary = path_str(canary.path()),
    );
    let summary = repeat(
        who,
        &[
            "--repeat",
            "2",
            "--pool",
            "1",
            "--pool-wait",
            "--writable",
            wp,
        ],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["pooled"], 2, "{summary}");
    let out = summary["last"]["stdout"].as_str().unwrap();
    assert!(out.contains("done"), "{summary}");
    for bad in ["WROTE-ROOT", "WROTE-USR", "SAW-HOST-TMP", "SAW-POOL-DIR"] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
    let n: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("n="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(n <= 8, "the sandbox sees {n} processes: {out}");
    // Control: both daemons started.
    let started = std::fs::read_to_string(w.path().join("daemon")).unwrap();
    assert_eq!(started.matches("started").count(), 2, "{started}");
    let left = host_processes_with(&marker);
    let about: Vec<String> = left
        .iter()
        .map(|p| {
            format!(
                "{p}: {} ns {:?} cmdline {:?}",
                std::fs::read_to_string(format!("/proc/{p}/status"))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.starts_with("PPid")
                        || l.starts_with("State")
                        || l.starts_with("NSpid"))
                    .collect::<Vec<_>>()
                    .join(", "),
                std::fs::read_link(format!("/proc/{p}/ns/pid")),
                String::from_utf8_lossy(
                    &std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default()
                )
            )
        })
        .collect();
    assert!(left.is_empty(), "{about:#?}");
}
both_users!(sbx_pool_a_pooled_sandbox_holds_and_leaves_nothing_behind);

/// Whether SIGKILL is pending for process `pid` (thread or process-wide).
fn sigkill_pending(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|mask| mask & (1 << (9 - 1)) != 0)
}

/// Children of `parent` that are sandbox inits.
fn sandbox_inits_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(parent)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("sandbox-init"))
        })
        .collect()
}

/// Processes whose command line is exactly `sleep MARK` (a workload; its
/// broker's command line only ends with those words).
fn sleepers_with(mark: &str) -> usize {
    let sleeper = format!("sleep\0{mark}\0");
    host_processes_with(&sleeper)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(sleeper.as_bytes()))
        })
        .count()
}

/// SBX-4: a broker killed with SIGKILL takes its sandboxes with it — a
/// cold one, one at the fallback level, a pooled one running a workload
/// and one waiting in the pool — also as root, whose inits change ids
/// (which clears the parent-death signal: they set it again). Control:
/// every workload and the waiting sandbox were running before the kill.
/// (A broker started later would also remove a dead broker's cgroups; run
/// alone, this test fails without the re-armed signal.)
fn sbx_4_a_broker_killed_with_sigkill_takes_its_sandboxes_with_it(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let marker = |n: u32| format!("{}.{}{n}", 9000 + uid_of(who) % 1000, std::process::id());
    let cases: Vec<(String, Vec<String>, bool)> = vec![
        (
            marker(1),
            vec![
                "sandbox".into(),
                "exec".into(),
                "--".into(),
                "sleep".into(),
                marker(1),
            ],
            false,
        ),
        (
            marker(2),
            vec![
                "sandbox".into(),
                "exec".into(),
                "--driver".into(),
                "landlock".into(),
                "--".into(),
                "sleep".into(),
                marker(2),
            ],
            false,
        ),
        (
            marker(3),
            vec![
                "sandbox".into(),
                "exec".into(),
                "--repeat".into(),
                "2".into(),
                "--pool".into(),
                "2".into(),
                "--pool-wait".into(),
                "--writable".into(),
                wp.into(),
                "--".into(),
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "test -e {wp}/first || {{ touch {wp}/first; exit 0; }}; exec sleep {}",
                    marker(3)
                ),
            ],
            true,
        ),
    ];
    for (mark, args, pooled) in cases {
        let mut child = airlock(who)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // With setpriv, the broker is setpriv's exec: the same process.
        let broker = child.id();
        let sleeper = format!("sleep\0{mark}\0");
        let sleepers = || sleepers_with(&mark);
        eventually("the workload to run", || sleepers() == 1);
        // The running launch's init is past its first act, arming its
        // parent-death signal. So is a waiting one that has made its
        // namespaces; a refill started an instant ago may not be yet, and
        // ends itself when it then finds the broker gone (`init::run`).
        let mut waiting = sandbox_inits_of(broker);
        let broker_userns = std::fs::read_link(format!("/proc/{broker}/ns/user")).unwrap();
        let armed = || -> Vec<u32> {
            sandbox_inits_of(broker)
                .into_iter()
                .filter(|p| {
                    std::fs::read_link(format!("/proc/{p}/ns/user"))
                        .is_ok_and(|ns| ns != broker_userns)
                })
                .collect()
        };
        if pooled {
            eventually("a sandbox waiting in the pool", || {
                // The running launch's init and at least one waiting.
                waiting = armed();
                waiting.len() >= 2
            });
        }
        assert!(!waiting.is_empty(), "no sandbox init under the broker");
        child.kill().unwrap();
        child.wait().unwrap();
        // The parent-death signal is sent while the broker exits, before
        // it can be reaped: by now every init is dead or has SIGKILL
        // pending. (Without the signal it would still be running, and only
        // a later broker's sweep of dead brokers' cgroups would end it.)
        for init in &waiting {
            assert!(
                !running(*init) || sigkill_pending(*init),
                "sandbox init {init} outlived its broker ({mark})"
            );
        }
        eventually("the sandbox to die with its broker", || {
            host_processes_with(&sleeper).is_empty() && waiting.iter().all(|p| !running(*p))
        });
    }
}
both_users!(sbx_4_a_broker_killed_with_sigkill_takes_its_sandboxes_with_it);

/// Egress from a pooled sandbox: its listener (created in a namespace built
/// before the launch) is handed to the launch's own proxy, which applies
/// the launch's policy: the allowed upstream answers through it, three
/// times in a row from pooled sandboxes. Control: the same pooled launches without
/// `--allow` are refused by the proxy.
fn sbx_pool_a_pooled_sandbox_reaches_only_what_its_launch_allows(who: Who) {
    let up = crate::suite::upstream::start();
    let allow = format!("http://127.0.0.1:{}", up.port);
    let url = format!("http://127.0.0.1:{}/hello", up.port);
    let fetch = crate::suite::egress::FETCH;
    let opts = ["--repeat", "3", "--pool", "1", "--pool-wait"];
    let allowed = repeat(
        who,
        &[&opts[..], &["--allow", &allow]].concat(),
        &["/usr/bin/python3", "-c", fetch, &url],
    );
    assert_eq!(allowed["failed"], 0, "{allowed}");
    assert_eq!(allowed["pooled"], 3, "{allowed}");
    assert_eq!(
        allowed["last"]["stdout"].as_str().unwrap().trim(),
        "200 - hello from upstream",
        "{allowed}"
    );
    let refused = repeat(
        who,
        &[&opts[..], &["--egress-policy", "/dev/null"]].concat(),
        &["/usr/bin/python3", "-c", fetch, &url],
    );
    assert_eq!(refused["pooled"], 3, "{refused}");
    assert!(
        refused["last"]["stdout"]
            .as_str()
            .unwrap()
            .starts_with("403 ip_literal_not_allowed"),
        "{refused}"
    );
}
both_users!(sbx_pool_a_pooled_sandbox_reaches_only_what_its_launch_allows);

/// `airlock up` stocks its pool for runs under the default worker limits
/// when it starts: sandboxes wait under the server before its first run,
/// so the first run (and a burst of them) starts pooled. Control: a server
/// started beside it with `AIRLOCK_SANDBOX_POOL=0` has none, once the
/// stocked one has its two.
#[test]
fn sbx_pool_airlock_up_stocks_its_pool_before_the_first_run() {
    use crate::suite::runs::{Env, Server};
    let (stocked_env, plain_env) = (Env::new(Who::Invoker), Env::new(Who::Invoker));
    let stocked = Server::start(&stocked_env, &[]);
    let plain = Server::start(&plain_env, &[("AIRLOCK_SANDBOX_POOL", "0")]);
    eventually("two sandboxes waiting under airlock up", || {
        sandbox_inits_of(stocked.pid()).len() >= 2
    });
    assert_eq!(sandbox_inits_of(plain.pid()), Vec::<u32>::new());
}

/// A pooled launch ends by its timeout and by cancellation exactly as a
/// cold one does (the broker reads a pooled launch's status on its own
/// thread until the sandbox is empty, and hands over to the timeout and
/// cancel path when it is not): a `sleep 30` with a 1 s timeout is reported
/// timed out, another one cancelled while it runs is reported cancelled,
/// and a third, left alone, exits 0. Control: all three took a pooled
/// sandbox (the pool's count), so this is the pooled path and not the cold
/// one the other tests cover.
#[test]
fn sbx_pool_a_pooled_launch_times_out_and_is_cancelled_like_a_cold_one() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let broker = pooled_broker(1);
    let limits = airlock_sandbox::Limits::default();
    broker.stock(&limits).unwrap();
    let ready = |b: &airlock_sandbox::Broker| {
        eventually("a pooled sandbox", || b.pool_ready_for(&limits) >= 1)
    };
    let pooled = |b: &airlock_sandbox::Broker| b.pool_stats().unwrap().pooled;

    ready(&broker);
    let before = pooled(&broker);
    let s = spec(&["/bin/sleep", "30"], |r| {
        r.timeout = Some(Duration::from_secs(1));
        r.grace = Some(Duration::from_millis(100));
    });
    let r = broker.run(&s).unwrap();
    assert!(r.timed_out && !r.cancelled, "{r:?}");
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(
        pooled(&broker),
        before + 1,
        "the timed-out launch was pooled"
    );

    ready(&broker);
    let cancel = Arc::new(AtomicBool::new(false));
    let s = spec(
        &["/bin/sh", "-c", "echo started; exec /bin/sleep 30"],
        |_| {},
    );
    let b = broker.clone();
    let flag = cancel.clone();
    let t = std::thread::spawn(move || {
        b.run_with(
            &s,
            airlock_sandbox::Hooks {
                cancel: Some(flag),
                ..Default::default()
            },
        )
    });
    eventually("the workload to run", || pooled(&broker) == before + 2);
    std::thread::sleep(Duration::from_millis(300));
    cancel.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = t.join().unwrap().unwrap();
    assert!(r.cancelled && !r.timed_out, "{r:?}");
    assert_ne!(r.exit_code, Some(0), "{r:?}");

    ready(&broker);
    let r = broker.run(&spec(&["/bin/true"], |_| {})).unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert!(!r.timed_out && !r.cancelled, "{r:?}");
    assert_eq!(pooled(&broker), before + 3);
}

/// The init arms its parent-death signal itself (the broker starts it with
/// posix_spawn, which runs none of its code in the child) and then checks
/// that the broker named on its command line is still its parent: named
/// wrongly, or not at all, it ends at once with the sandbox's failure code
/// and writes nothing on its status descriptor. Control: naming its real
/// parent, it goes on and reports on that descriptor that it has no spec.
#[test]
fn sbx_4_an_init_whose_broker_is_gone_ends_itself() {
    // `sh` execs the init with its stdout as the status descriptor (4), so
    // the init's parent is this test process.
    let init = |broker: &str| {
        std::process::Command::new("/bin/sh")
            .args(["-c", "exec \"$0\" __airlock-sandbox-init $1 $2 4>&1"])
            .arg(airlock_bin())
            .arg(broker)
            .arg(airlock_sandbox::INIT_ID)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for broker in ["1", "", "not-a-pid"] {
        let out = init(broker);
        assert_eq!(out.status.code(), Some(125), "{broker:?}");
        assert!(out.stdout.is_empty(), "{broker:?}: {out:?}");
    }
    let out = init(&std::process::id().to_string());
    assert_eq!(out.status.code(), Some(125));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("missing spec descriptor"), "{said}");
}

/// An init started by a broker of another build (an `airlock-sandbox-init`
/// replaced beside a running airlock) runs nothing: it reports a set-up
/// failure naming both builds on its status descriptor and ends with the
/// sandbox's failure code, whichever binary it is. Control: given this
/// build's id it goes on, to the missing spec.
#[test]
fn sbx_init_an_init_of_another_build_runs_nothing() {
    let small = airlock_bin().with_file_name(airlock_sandbox::INIT_BINARY);
    for init in [airlock_bin(), small] {
        let run = |id: &str| {
            std::process::Command::new("/bin/sh")
                .args(["-c", "exec \"$0\" __airlock-sandbox-init $1 \"$2\" 4>&1"])
                .arg(&init)
                .arg(std::process::id().to_string())
                .arg(id)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap()
        };
        for id in ["0.1.0-0000000000000000", ""] {
            let out = run(id);
            assert_eq!(out.status.code(), Some(125), "{init:?} {id:?}");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.contains("init_id"), "{init:?} {id:?}: {said}");
            assert!(said.contains(airlock_sandbox::INIT_ID), "{said}");
            assert!(!said.contains("missing spec"), "{said}");
        }
        let out = run(airlock_sandbox::INIT_ID);
        assert_eq!(out.status.code(), Some(125));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("missing spec descriptor"), "{init:?}: {said}");
    }
}

/// The small init is chosen only when it is this build's and no one but
/// the airlock binary's owner can change it or its directory; otherwise the
/// running binary stays the init, and the choice says why.
#[test]
fn sbx_init_the_small_init_is_used_only_when_it_is_this_builds_and_only_its_owner_can_change_it() {
    use airlock_sandbox::init_binary::{InitBinary, examine, examine_with};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join(airlock_sandbox::INIT_BINARY);
    let owner = std::fs::metadata(dir.path()).unwrap().uid();
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    // `ask`: also run it to ask about user namespaces, as a broker does
    // where they are granted per binary (not on this host, perhaps).
    let refused_when = |ask: bool, why: &str| {
        let got = examine_with(&path, owner, ask);
        assert!(
            matches!(&got, InitBinary::Refused { reason, .. } if reason.contains(why)),
            "{why}: {got:?}"
        );
        assert_eq!(got.path(), Path::new("/proc/self/exe"));
    };
    let refused = |why: &str| refused_when(false, why);
    assert_eq!(examine(&path, owner), InitBinary::Absent);
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &path).unwrap();
    mode(&path, 0o755);
    // Control: as built, it is used, asked or not.
    assert_eq!(examine(&path, owner), InitBinary::Small(path.clone()));
    assert_eq!(
        examine_with(&path, owner, true),
        InitBinary::Small(path.clone())
    );
    assert_eq!(examine(&path, owner).path(), path);
    mode(&path, 0o775);
    refused("it can be written by group or others");
    mode(&path, 0o644);
    refused("not an executable file");
    mode(&path, 0o755);
    let link = dir.path().join("elsewhere");
    std::fs::rename(&path, &link).unwrap();
    std::os::unix::fs::symlink(&link, &path).unwrap();
    refused("it is a symbolic link");
    std::fs::remove_file(&path).unwrap();
    std::fs::rename(&link, &path).unwrap();
    mode(dir.path(), 0o777);
    refused("its directory can be written by group or others");
    mode(dir.path(), 0o755);
    // Owned by someone else than root and the running binary's owner. As
    // root the file is given to uid 4242; otherwise it is the test user's,
    // and the running binary is said to be 4242's.
    let (file_uid, binary_owner) = if is_root() {
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        (4242, owner)
    } else {
        (owner, 4242)
    };
    let got = examine(&path, binary_owner);
    let why = format!("it belongs to uid {file_uid}, not root or the running binary's owner");
    assert!(
        matches!(&got, InitBinary::Refused { reason, .. } if *reason == why),
        "{got:?}"
    );
    // Control: to a binary of the file's owner, it is that owner's.
    assert_eq!(examine(&path, file_uid), InitBinary::Small(path.clone()));
    if is_root() {
        std::os::unix::fs::chown(&path, Some(owner), None).unwrap();
    }
    // Another program in its place: it does not hold this build's id,
    // and asked, it does not name it.
    std::fs::remove_file(&path).unwrap();
    std::fs::copy("/bin/true", &path).unwrap();
    mode(&path, 0o755);
    refused("it does not hold this build's id");
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size < 16 << 20, "{size}");
    // One that names this build but cannot make a user namespace (a host
    // whose AppArmor grants them to the airlock binary only); control: the
    // same answer with the namespace is taken.
    std::fs::remove_file(&path).unwrap();
    // A shell script in its place, holding the id (in a comment at least).
    let script = |body: &str| {
        let tmp = dir.path().join("script");
        let text = format!("#!/bin/sh\n# {}\n{body}\n", airlock_sandbox::INIT_ID);
        std::fs::write(&tmp, text).unwrap();
        mode(&tmp, 0o755);
        std::fs::rename(&tmp, &path).unwrap();
    };
    for (userns, used) in [("no-userns", false), ("userns", true)] {
        script(&format!("echo '{} {userns}'", airlock_sandbox::INIT_ID));
        if used {
            assert_eq!(
                examine_with(&path, owner, true),
                InitBinary::Small(path.clone())
            );
        } else {
            refused_when(true, "it cannot make a user namespace here");
            // Not asked, only its bytes count: they hold the id.
            assert_eq!(
                examine_with(&path, owner, false),
                InitBinary::Small(path.clone())
            );
        }
    }
    // One that closes its stdout and stays, and one that never answers:
    // refused, the second after the two seconds it is given.
    for (body, why) in [
        ("exec >&-; exec sleep 30", "it is build \"\""),
        ("exec sleep 30", "no answer within 2 s"),
    ] {
        script(body);
        refused_when(true, why);
    }
    // Larger than a small init: not read.
    std::fs::remove_file(&path).unwrap();
    let big = std::fs::File::create(&path).unwrap();
    big.set_len((16 << 20) + 1).unwrap();
    drop(big);
    mode(&path, 0o755);
    refused("it is larger than 16 MiB");
    // Control again: this build's init back in place is used.
    std::fs::remove_file(&path).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &path).unwrap();
    mode(&path, 0o755);
    assert_eq!(examine(&path, owner), InitBinary::Small(path.clone()));
}

/// The CLI starts the small init when it is beside the airlock binary, with
/// every guarantee the airlock binary as init gives, and the airlock binary
/// itself when the small one is absent or may be changed by others: PID 1
/// of the sandbox (the init's second process) shows which one in its
/// command line.
#[test]
fn sbx_init_the_cli_uses_the_small_init_beside_it_with_the_same_guarantees() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in(airlock_bin().parent().unwrap().parent().unwrap()).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("airlock");
    let init = dir.path().join(airlock_sandbox::INIT_BINARY);
    let place = |from: &Path, to: &Path| {
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).unwrap();
        }
    };
    place(&airlock_bin(), &bin);
    let launch = || {
        let out = std::process::Command::new(&bin)
            .args([
                "sandbox",
                "exec",
                "--json",
                "--",
                "/bin/sh",
                "-c",
                "tr '\\0' ' ' < /proc/1/cmdline",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let v: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(v["exit_code"], 0, "{v}");
        let pid1 = v["stdout"]
            .as_str()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        (pid1, guarantees(&v["containment"]))
    };
    // Control: no small init beside it, so the airlock binary is the init.
    let (pid1, without) = launch();
    assert_eq!(pid1, "/proc/self/exe");
    place(
        &airlock_bin().with_file_name(airlock_sandbox::INIT_BINARY),
        &init,
    );
    let (pid1, with) = launch();
    assert_eq!(Path::new(&pid1), init, "{pid1}");
    assert_eq!(with, without);
    assert!(with.iter().filter(|(_, on)| *on).count() >= 5, "{with:?}");
    // Writable by others: not used.
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (pid1, _) = launch();
    assert_eq!(pid1, "/proc/self/exe");
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// SBX-5: the sandbox init gets none of the broker's descriptors but the
/// ones made for it. The broker is started holding a file open on
/// descriptor 9 without close-on-exec, as a careless parent would leave it;
/// while a launch runs, no descriptor of its init (read in `/proc`) is that
/// file. Control: the broker itself holds it, so there was something to
/// leak (`posix_spawn` closes everything above the init's four descriptors;
/// the workload's own table is `sbx_5_workload_holds_only_stdio_descriptors`).
#[test]
fn sbx_5_the_init_holds_none_of_the_brokers_other_descriptors() {
    if !require_root("reading the descriptors of another user's process") {
        return;
    }
    let w = workdir(Who::Invoker);
    let secret = w
        .path()
        .join(format!("held-by-the-broker-{}", std::process::id()));
    std::fs::write(&secret, "not for the sandbox").unwrap();
    let mark = format!("9123.{}7", std::process::id());
    let mut broker = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "exec 9<\"$1\"; exec \"$0\" sandbox exec -- sleep \"$2\"",
        ])
        .arg(airlock_bin())
        .arg(&secret)
        .arg(&mark)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = broker.id();
    let holds = |p: u32| {
        std::fs::read_dir(format!("/proc/{p}/fd"))
            .map(|d| {
                d.flatten()
                    .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == secret))
            })
            .unwrap_or(false)
    };
    let workload = || sleepers_with(&mark) > 0;
    eventually("the workload to run", workload);
    let inits = sandbox_inits_of(pid);
    assert!(
        holds(pid),
        "control: the broker holds the file on descriptor 9"
    );
    assert!(!inits.is_empty(), "no sandbox init under the broker");
    for init in &inits {
        assert!(!holds(*init), "sandbox init {init} holds the broker's file");
    }
    broker.kill().unwrap();
    broker.wait().unwrap();
    eventually("the sandbox to end", || !workload());
}
