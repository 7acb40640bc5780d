//! `airlock up` as it is deployed: a real server with its real data and key
//! directories and environment, driven over HTTP. What a worker run under
//! it can reach, what dies with it, and what its files look like on disk.
//! Each scenario runs as root and as the unprivileged user.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::both_users;
use crate::suite::runs::{Env, Server, count_procs};
use crate::suite::support::*;

/// Searches what the process can reach for each needle (given reversed, so
/// no needle is ever in its input, command line or this source) in raw
/// form, and a `hex_` needle's bytes also as raw, upper-case hex and base64:
/// the environment, every readable `/proc/*/environ` and `cmdline`, and
/// every readable file under the roots (a root that is a file is read
/// directly). Prints and writes `{"found": ["name:place", …]}`.
const SCAN: &str = r#"
import base64, json, os, sys
spec = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "/airlock/input.json"))
needles = []
for name, rev in spec["needles"].items():
    fwd = rev[::-1]
    needles.append((name, fwd.encode()))
    if name.startswith("hex_"):
        raw = bytes.fromhex(fwd)
        needles += [(name, raw), (name, fwd.upper().encode()), (name, base64.b64encode(raw))]
found = set()
def look(where, data):
    for name, n in needles:
        if n in data:
            found.add(name + ":" + where)
for k, v in os.environ.items():
    look("env:" + k, (k + "=" + v).encode())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                look(f"/proc/{pid}/{f}", open(f"/proc/{pid}/{f}", "rb").read())
            except OSError:
                pass
skip = ("/proc", "/sys", "/usr", "/dev", "/bin", "/sbin", "/lib", "/lib64")
def read(p):
    try:
        with open(p, "rb") as fh:
            look(p, fh.read(64 << 20))
    except OSError:
        pass
for root in spec["roots"]:
    if os.path.isfile(root):
        read(root)
        continue
    for dirpath, dirs, files in os.walk(root):
        if dirpath != root and dirpath.startswith(skip) or dirpath in skip:
            dirs[:] = []
            continue
        for name in files:
            read(os.path.join(dirpath, name))
out = {"found": sorted(found)}
print(json.dumps(out))
if os.path.isdir("/airlock/output"):
    json.dump(out, open("/airlock/output/result.json", "w"))
"#;

fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

/// The needle names in `found` (`name:place` entries).
fn names(found: &Value) -> std::collections::BTreeSet<String> {
    found
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| Some(v.as_str()?.split_once(':')?.0.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A number that appears in no other test's process command lines: the
/// test's pid and which user it runs as.
fn marker(who: Who, base: u32) -> String {
    sleep_marker(who, base)
}

/// SBX-5, KEY-1, KEY-5 under `airlock up`: a worker run by a real server
/// searches everything it can reach — its environment, every process's
/// environ and command line, every readable file, and the exact host paths
/// of the server's data directory, database, key directory and environ —
/// for credentials planted in the server's environment, its data directory
/// and its key directory, for the server's KEK and for a vault secret the
/// worker did not declare. It finds none of them. Positive controls: in the
/// same run it finds a value planted in its own bundle and the secret it
/// did declare (so the search reaches files and matches); and the same
/// search through the `uncontained` driver, as the same user, finds the
/// planted environment, files and KEK.
fn sbx_5_a_worker_under_airlock_up_reaches_no_credential(who: Who) {
    let env = Env::new(who);
    let tag = std::process::id();
    let env_needle = format!("env-credential-{tag}-4b1d");
    let data_needle = format!("data-dir-credential-{tag}-9e2c");
    let key_needle = format!("key-dir-credential-{tag}-77af");
    let vault_needle = format!("undeclared-vault-value-{tag}-c0de");
    let given_needle = format!("bundle-file-value-{tag}-5a5a");
    let given_secret = format!("declared-vault-value-{tag}-d00d");
    let dir = env.workers.join("scan");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("worker.toml"),
        "[worker]\nid = \"scan\"\ntitle = \"scan\"\nkind = \"script\"\nentry = \"scan.py\"\nruntime = \"python3\"\n\
         [inputs.needles]\ntype = \"json\"\nmax_bytes = 65536\n[inputs.roots]\ntype = \"json\"\nmax_bytes = 65536\n\
         [outputs.found]\ntype = \"json\"\n[secrets]\nnames = [\"GIVEN_SECRET\"]\n\
         [limits]\ntimeout_s = 300\nmemory_mb = 1024\n",
    )
    .unwrap();
    std::fs::write(dir.join("scan.py"), SCAN).unwrap();
    std::fs::write(dir.join("given.txt"), &given_needle).unwrap();

    let s = Server::start(
        &env,
        &[
            ("AIRLOCK_UP_SENTINEL", &env_needle),
            ("DATABASE_PASSWORD", &env_needle),
        ],
    );
    for (name, value) in [
        ("UNDECLARED", &vault_needle),
        ("GIVEN_SECRET", &given_secret),
    ] {
        let (c, v) = s.json(
            "PUT",
            &format!("/v1/secrets/{name}"),
            Some(&json!({ "value": value }).to_string()),
            &[],
        );
        assert_eq!(c, 200, "{v}");
    }
    let keys = env.data.join("keys");
    let planted_data = env.data.join("planted-credential");
    let planted_key = keys.join("planted-credential");
    for (path, value) in [(&planted_data, &data_needle), (&planted_key, &key_needle)] {
        std::fs::write(path, value).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        env.give(path);
    }
    let kek_hex: String = std::fs::read(keys.join("kek-v1"))
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let needles = json!({
        "sentinel": reversed(SENTINEL),
        "env": reversed(&env_needle),
        "data_file": reversed(&data_needle),
        "key_file": reversed(&key_needle),
        "vault_undeclared": reversed(&vault_needle),
        "hex_kek": reversed(&kek_hex),
        "given_file": reversed(&given_needle),
        "given_secret": reversed(&given_secret),
    });
    let p = |p: &Path| p.display().to_string();
    let host_paths = vec![
        p(&env.data),
        p(&env.data.join("airlock.db")),
        p(&env.data.join("airlock.db-wal")),
        p(&keys),
        p(&keys.join("kek-v1")),
        p(&planted_data),
        p(&planted_key),
        p(env.root()),
        format!("/proc/{}/environ", s.pid()),
    ];
    let mut inside_roots = vec!["/".to_string()];
    inside_roots.extend(host_paths.iter().cloned());
    let (c, v) = s.json(
        "POST",
        "/v1/workers/scan/runs",
        Some(&json!({"input": {"needles": needles, "roots": inside_roots}}).to_string()),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        s.wait_state(&id, &["succeeded", "failed", "blocked", "timed_out"]),
        "succeeded"
    );
    let (_, run) = s.json("GET", &format!("/v1/runs/{id}"), None, &[]);
    assert_eq!(run["run"]["containment"]["level"], "namespaces", "{run}");
    let found = &run["run"]["outputs"]["found"];
    let inside = names(found);
    // Positive control inside the run: what the worker was given is found.
    assert!(
        inside.contains("given_file") && inside.contains("given_secret"),
        "the scan must find what the worker was given: {found}"
    );
    assert_eq!(
        inside,
        ["given_file", "given_secret"]
            .map(String::from)
            .into_iter()
            .collect(),
        "a worker under airlock up reached a credential: {found}"
    );

    // Positive control outside: the same search, uncontained, as the same
    // user, over the planted places and the server's environ.
    let spec = env.root().join("control.json");
    std::fs::write(
        &spec,
        json!({"needles": needles, "roots": host_paths}).to_string(),
    )
    .unwrap();
    // The broker gets the server's environment sentinel too, so its own
    // /proc/PID/environ shows the search finds an environment it can read.
    let control = airlock(who)
        .env("AIRLOCK_UP_SENTINEL", &env_needle)
        .args(["sandbox", "exec", "--json", "--driver", "uncontained"])
        .args(["--timeout", "120", "--", "/usr/bin/python3", "-c", SCAN])
        .arg(&spec)
        .output()
        .unwrap();
    let exec: Value = serde_json::from_slice(&control.stdout).unwrap_or(Value::Null);
    let out: Value =
        serde_json::from_str(exec["stdout"].as_str().unwrap_or("").trim()).unwrap_or(Value::Null);
    let outside = names(&out["found"]);
    for name in ["sentinel", "env", "data_file", "key_file", "hex_kek"] {
        assert!(
            outside.contains(name),
            "control: uncontained must find {name}: {out} {exec}"
        );
    }
    assert!(
        !outside.contains("vault_undeclared"),
        "the undeclared secret is in clear on disk: {out}"
    );
}
both_users!(sbx_5_a_worker_under_airlock_up_reaches_no_credential);

/// SBX-4: a workload started over the API — a foreground process, a
/// background child and a double-forked `setsid` daemon — does not outlive
/// `kill -9` of the `airlock up` that started it. Control: all three were
/// running before the kill.
fn sbx_4_workloads_die_when_airlock_up_is_killed(who: Who) {
    let env = Env::new(who);
    // A duration nothing else on the machine sleeps for: the processes are
    // found by their command line in the host's /proc.
    let marker = marker(who, 8000);
    env.sh_worker(
        "long",
        "[limits]\ntimeout_s = 600\n",
        &format!(
            "sleep {marker} &\n( setsid sh -c 'sleep {marker} & sleep {marker}' & )\nsleep {marker}\n"
        ),
    );
    let mut s = Server::start(&env, &[]);
    let (c, v) = s.json("POST", "/v1/workers/long/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    let sleeper = format!("sleep {marker}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_procs(&sleeper) < 4 {
        assert!(
            Instant::now() < deadline,
            "control: the workload never had its four sleepers running ({} seen, run {})",
            count_procs(&sleeper),
            s.run_state(&id)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.kill9();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count_procs(&sleeper) > 0 {
        assert!(
            Instant::now() < deadline,
            "{} workload process(es) outlived kill -9 of airlock up",
            count_procs(&sleeper)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
both_users!(sbx_4_workloads_die_when_airlock_up_is_killed);

/// Every directory and regular file under `dir`, with its mode bits.
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let meta = std::fs::symlink_metadata(&d).unwrap();
        out.push((d.clone(), meta.permissions().mode() & 0o7777, true));
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else {
                out.push((p, meta.permissions().mode() & 0o7777, false));
            }
        }
    }
    out
}

/// Whether `path`'s group bits are an ACL mask whose only grants are to
/// named users of a sandbox id range (uid ≥ 1,000,000, never an account):
/// a root broker gives the sandbox uid access to a run's own files for the
/// length of the launch. Its owning group and every group still get nothing.
fn only_sandbox_acl(path: &Path) -> bool {
    // The binary ACL: a 4-byte version (2), then 8-byte entries
    // (tag u16, perm u16, id u32), little-endian; read with Python's
    // `os.getxattr` (the test crate has no `unsafe`).
    let Ok(out) = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import os,sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], 'system.posix_acl_access', follow_symlinks=False))",
        ])
        .arg(path)
        .output()
    else {
        return false;
    };
    if !out.status.success() {
        return false;
    }
    let buf = out.stdout;
    let n = buf.len();
    let entries = buf[..n].get(4..).unwrap_or(&[]);
    let mut named_sandbox_user = false;
    for e in entries.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        match tag {
            // USER_OBJ, MASK, OTHER (others are checked on the mode bits).
            0x01 | 0x10 | 0x20 => {}
            // A named user: only a sandbox uid may be one.
            0x02 if id >= 1_000_000 => named_sandbox_user = true,
            // GROUP_OBJ granting nothing.
            0x04 if perm == 0 => {}
            _ => return false,
        }
    }
    named_sandbox_user
}

/// The entries of `dir` that group or others may use.
fn loose(dir: &Path) -> Vec<String> {
    modes(dir)
        .into_iter()
        .filter(|(p, mode, _)| mode & 0o007 != 0 || (mode & 0o070 != 0 && !only_sandbox_acl(p)))
        .map(|(p, mode, _)| format!("{} {mode:o}", p.display()))
        .collect()
}

/// The data directory is the airlock user's alone: `data/` is 0700, the
/// database, its WAL and shared-memory files are 0600, and nothing below
/// it — artifacts, run staging (checked while a run is in flight), keys —
/// is open to group or others. Positive control: a data directory an older
/// version left 0755 with a 0644 database is seen as loose before the
/// server starts, and is private after.
fn data_directory_is_0700_and_its_files_0600(who: Who) {
    let env = Env::new(who);
    // What an older version left behind.
    std::fs::create_dir_all(env.data.join("runs")).unwrap();
    std::fs::write(env.data.join("airlock.db"), b"").unwrap();
    for (p, mode) in [
        (env.data.clone(), 0o755),
        (env.data.join("runs"), 0o755),
        (env.data.join("airlock.db"), 0o644),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        env.give(&p);
    }
    assert_eq!(
        loose(&env.data).len(),
        3,
        "control: the check sees loose modes"
    );

    // The waiting run writes nothing: files a workload creates in its
    // output folder carry the workload's own modes (inside 0700 folders).
    let sleeper = format!("sleep {}", marker(who, 5000));
    env.sh_worker(
        "publish",
        "[inputs.wait]\ntype = \"boolean\"\ndefault = false\n[limits]\ntimeout_s = 600\n",
        &format!(
            "if grep -q true /airlock/input.json; then exec {sleeper}; fi\n\
             echo report > /airlock/output/report.txt\necho '{{}}' > /airlock/output/result.json\n"
        ),
    );
    let s = Server::start(&env, &[]);
    let (c, v) = s.json("POST", "/v1/workers/publish/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(s.wait_state(&id, &["succeeded", "failed"]), "succeeded");
    // A run in flight: its staging folder exists under runs/.
    let (c, v) = s.json(
        "POST",
        "/v1/workers/publish/runs",
        Some(r#"{"input": {"wait": true}}"#),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let waiting = v["run"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_procs(&sleeper) == 0 {
        assert!(Instant::now() < deadline, "the waiting run never started");
        std::thread::sleep(Duration::from_millis(50));
    }

    let all = modes(&env.data);
    let mode_of = |name: &str| {
        all.iter()
            .find(|(p, _, _)| *p == env.data.join(name))
            .map(|(_, m, _)| *m)
    };
    assert_eq!(
        std::fs::metadata(&env.data).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for f in ["airlock.db", "airlock.db-wal", "airlock.db-shm"] {
        assert_eq!(mode_of(f), Some(0o600), "{f}: {all:?}");
    }
    assert!(
        all.iter().any(|(p, _, dir)| *dir
            && p.starts_with(env.data.join("runs"))
            && *p != env.data.join("runs")),
        "a run's staging folder was checked: {all:?}"
    );
    assert!(
        all.iter()
            .any(|(p, _, dir)| !*dir && p.starts_with(env.data.join("artifacts"))),
        "an artifact was checked: {all:?}"
    );
    assert_eq!(
        loose(&env.data),
        Vec::<String>::new(),
        "open to group or others"
    );
    let (_, r) = s.json("POST", &format!("/v1/runs/{waiting}/cancel"), None, &[]);
    assert!(r["state"] == "running" || r["state"] == "cancelled", "{r}");
    assert_eq!(s.wait_state(&waiting, &["cancelled"]), "cancelled");
}
both_users!(data_directory_is_0700_and_its_files_0600);

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// An idle server gives back what a login burst took: each login hashes
/// with Argon2 (19 MiB of blocks), and glibc's malloc, left to itself,
/// keeps freed blocks that size in per-thread arenas — measured by hand
/// without the fix (`return_large_blocks_to_the_system`): 140 MiB after
/// 20 sequential logins, 374 MiB after bursts of four. A resident-size
/// bound, not a timing: the memory is unmapped when each hash ends.
/// Positive control (run by hand): with the call removed from `main`,
/// this test fails.
#[test]
fn an_idle_server_returns_the_memory_of_a_login_burst() {
    let env = crate::suite::runs::Env::new(Who::Invoker);
    let s = crate::suite::runs::Server::start(&env, &[]);
    let before = rss_kib(s.pid());
    assert!(before > 0, "no VmRSS for the server");
    for _ in 0..6 {
        assert_eq!(s.login("owner", crate::suite::runs::OWNER_PASSWORD).0, 201);
    }
    for _ in 0..3 {
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    assert_eq!(s.login("owner", crate::suite::runs::OWNER_PASSWORD).0, 201);
                });
            }
        });
    }
    let after = rss_kib(s.pid());
    assert!(
        after < before + 24 * 1024,
        "the server kept {} MiB after 18 logins (from {} MiB)",
        (after.saturating_sub(before)) / 1024,
        before / 1024
    );
}
