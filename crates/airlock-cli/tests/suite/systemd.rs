//! OPS-3: the systemd units of `deploy/systemd/` are checked, not just
//! written. `systemd-analyze verify` parses each one (it needs no systemd
//! as PID 1), and the settings that decide what the sandbox may do — the
//! user, the capability bounding, inheritable and ambient sets, no new
//! privileges — are reproduced with `setpriv` around the real `airlock
//! sandbox exec` and `airlock serve --role worker|web` processes.
//!
//! What `setpriv` cannot reproduce is left to the unit's comments and
//! docs/operations.md: `Delegate=` (the cgroup subtree systemd hands over)
//! and the mount-namespace settings of the web unit (`ProtectSystem=`,
//! `PrivateTmp=`, …), which need systemd itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::suite::roles::Node;
use crate::suite::runs::{Env, Server};
use crate::suite::support::*;

const UNITS: [&str; 3] = [
    "airlock.service",
    "airlock-web.service",
    "airlock-worker.service",
];

fn unit_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/systemd")
        .join(name)
}

/// The `[Service]` settings of a unit: each key with its values in order
/// (an empty assignment is kept as "").
fn service_settings(name: &str) -> HashMap<String, Vec<String>> {
    let text = std::fs::read_to_string(unit_path(name)).unwrap();
    let mut section = "";
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = if line == "[Service]" { "service" } else { "" };
            continue;
        }
        if section != "service" {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(k.trim().to_string())
                .or_default()
                .push(v.trim().to_string());
        }
    }
    out
}

fn one<'a>(s: &'a HashMap<String, Vec<String>>, key: &str) -> Option<&'a str> {
    s.get(key).and_then(|v| v.last()).map(String::as_str)
}

/// `systemd-analyze`, or `None` when it is missing and
/// `AIRLOCK_TEST_SKIP_SYSTEMD` allows that (scripts/test installs it).
fn systemd_analyze() -> Option<()> {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(());
    }
    assert!(
        std::env::var_os("AIRLOCK_TEST_SKIP_SYSTEMD").is_some(),
        "systemd-analyze is missing: run scripts/test (it installs Debian's systemd package), or set AIRLOCK_TEST_SKIP_SYSTEMD=1"
    );
    None
}

/// `systemd-analyze verify` of `text` saved as `dir/name`: exit code and
/// everything it printed.
fn analyze(dir: &Path, name: &str, text: &str) -> (i32, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("SYSTEMD_LOG_LEVEL", "warning")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Every unit passes `systemd-analyze verify` without a single warning,
/// with `ExecStart=` pointing at the built binary (verify checks that the
/// program exists; nothing else is changed). Controls: a misspelt value
/// is reported (verify exits 0 but prints it, so the test requires empty
/// output), and the unit as shipped fails while /usr/local/bin/airlock
/// does not exist on this machine.
#[test]
fn ops_3_systemd_units_pass_systemd_analyze_verify() {
    if systemd_analyze().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = airlock_bin();
    let bin = bin.to_str().unwrap();
    for name in UNITS {
        let text = std::fs::read_to_string(unit_path(name)).unwrap();
        assert!(text.contains("ExecStart=/usr/local/bin/airlock "), "{name}");
        let here = text.replace("/usr/local/bin/airlock", bin);
        let (code, out) = analyze(dir.path(), name, &here);
        assert_eq!((code, out.as_str()), (0, ""), "{name}");
        // Control: one misspelt value is seen.
        let typo = here.replace("NoNewPrivileges=yes", "NoNewPrivileges=yess");
        let (_, out) = analyze(dir.path(), name, &typo);
        assert!(out.contains("yess"), "{name}: {out}");
        if !Path::new("/usr/local/bin/airlock").exists() {
            let (code, out) = analyze(dir.path(), name, &text);
            assert_ne!(code, 0, "{name}: {out}");
            assert!(out.contains("/usr/local/bin/airlock"), "{name}: {out}");
        }
    }
}

/// The settings systemd would apply that bear on the sandbox, read from
/// the unit, as `setpriv` options: `User=` (the test user stands in for
/// `airlock`), `CapabilityBoundingSet=`, `AmbientCapabilities=` (the
/// inheritable set follows it, as systemd does), `NoNewPrivileges=`.
/// `root`: the root mode of docs/operations.md (`User=`/`Group=` dropped
/// in a drop-in, nothing else changed).
fn setpriv_args(unit: &HashMap<String, Vec<String>>, root: bool) -> Vec<String> {
    let mut args = Vec::new();
    if !root && one(unit, "User").is_some() {
        let (uid, gid) = test_user().expect("the test user");
        args.push(format!("--reuid={uid}"));
        args.push(format!("--regid={gid}"));
        args.push("--clear-groups".to_string());
    }
    if let Some(caps) = unit.get("CapabilityBoundingSet") {
        // systemd: an empty assignment resets, later ones add up.
        let mut set = vec!["-all".to_string()];
        for v in caps {
            for c in v.split_whitespace() {
                set.push(format!(
                    "+{}",
                    c.to_ascii_lowercase().trim_start_matches("cap_")
                ));
            }
        }
        args.push(format!("--bounding-set={}", set.join(",")));
    }
    let ambient: Vec<String> = unit
        .get("AmbientCapabilities")
        .into_iter()
        .flatten()
        .flat_map(|v| v.split_whitespace().map(str::to_string))
        .collect();
    let ambient = if ambient.is_empty() {
        "-all".to_string()
    } else {
        std::iter::once("-all".to_string())
            .chain(
                ambient
                    .iter()
                    .map(|c| format!("+{}", c.to_ascii_lowercase().trim_start_matches("cap_"))),
            )
            .collect::<Vec<_>>()
            .join(",")
    };
    args.push(format!("--inh-caps={ambient}"));
    args.push(format!("--ambient-caps={ambient}"));
    if one(unit, "NoNewPrivileges") == Some("yes") {
        args.push("--no-new-privs".to_string());
    }
    args
}

/// A field of `/proc/self/status` as `setpriv ARGS` leaves it.
fn status_under(args: &[String]) -> HashMap<String, String> {
    let out = Command::new("setpriv")
        .args(args)
        .args(["--", "cat", "/proc/self/status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `airlock sandbox exec --json` under `setpriv ARGS`.
fn exec_under(args: &[String], script: &str) -> Exec {
    let mut c = Command::new("setpriv");
    c.args(args)
        .arg("--")
        .arg(airlock_bin())
        .env("LD_PRELOAD", "")
        .current_dir("/");
    let cmd = sh(script);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    exec_from(c, &[], &refs)
}

/// The sandbox-relevant settings of the three units are what
/// docs/operations.md says, and reproduced with `setpriv` they run the
/// real sandbox:
/// - the worker and `up` units (`User=airlock`, no capability, no ambient
///   set, `NoNewPrivileges=yes`, `Delegate=yes`, none of the systemd
///   namespacing options that would break the broker's own mounts): `sandbox
///   exec` runs at the `namespaces` level, and `serve --role worker` under
///   them executes a run a web node queued (SQLite, one data directory);
/// - the web unit (empty `CapabilityBoundingSet=`, the same user and no new
///   privileges): `serve --role web` starts and answers;
/// - root mode (the worker unit without `User=`/`Group=`): `sandbox exec`
///   runs at the `namespaces` level with its workload not root on the
///   host, and `serve --role worker` executes a run.
///
/// Controls: `setpriv` really applies each set (`/proc/self/status` shows
/// the uid, `NoNewPrivs: 1`, empty effective and ambient sets, the web
/// unit's empty bounding set); in root mode with any one of the
/// capabilities the broker cannot do without (`CAP_SYS_ADMIN`,
/// `CAP_SETUID`, `CAP_SETGID`, `CAP_CHOWN`) dropped from the bounding set,
/// the sandbox fails with `sandbox_setup_failed` naming the step.
#[test]
fn ops_3_systemd_unit_capabilities_run_the_sandbox() {
    if !require_root("setpriv --reuid and capability bounding") || !require_test_user() {
        return;
    }
    let (uid, _) = test_user().unwrap();
    let web = service_settings("airlock-web.service");
    let worker = service_settings("airlock-worker.service");
    let up = service_settings("airlock.service");
    // What the units say.
    for (name, u) in [("worker", &worker), ("up", &up)] {
        assert_eq!(one(u, "User"), Some("airlock"), "{name}");
        assert_eq!(one(u, "NoNewPrivileges"), Some("yes"), "{name}");
        assert_eq!(one(u, "Delegate"), Some("yes"), "{name}");
        assert_eq!(one(u, "KillMode"), Some("mixed"), "{name}");
        for k in [
            "CapabilityBoundingSet",
            "AmbientCapabilities",
            "ProtectSystem",
            "ProtectHome",
            "PrivateDevices",
            "PrivateUsers",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectControlGroups",
            "RestrictNamespaces",
            "SystemCallFilter",
        ] {
            assert!(!u.contains_key(k), "{name} sets {k}");
        }
        assert_eq!(
            setpriv_args(u, false),
            setpriv_args(&worker, false),
            "{name}: the same sandbox settings as the worker unit"
        );
    }
    assert_eq!(one(&web, "User"), Some("airlock"));
    assert_eq!(one(&web, "NoNewPrivileges"), Some("yes"));
    assert_eq!(web.get("CapabilityBoundingSet"), Some(&vec![String::new()]));
    assert!(!web.contains_key("Delegate"));

    // Control: setpriv applies what the units say.
    let worker_args = setpriv_args(&worker, false);
    let st = status_under(&worker_args);
    assert_eq!(
        st["Uid"].split_whitespace().next(),
        Some(uid.to_string().as_str())
    );
    assert_eq!(st["NoNewPrivs"], "1");
    assert_eq!(st["CapEff"], "0000000000000000");
    assert_eq!(st["CapAmb"], "0000000000000000");
    let web_args = setpriv_args(&web, false);
    assert_eq!(status_under(&web_args)["CapBnd"], "0000000000000000");
    let root_args = setpriv_args(&worker, true);
    let st = status_under(&root_args);
    assert_eq!(st["Uid"].split_whitespace().next(), Some("0"));
    assert_eq!(st["NoNewPrivs"], "1");
    assert_ne!(st["CapBnd"], "0000000000000000");

    // The worker unit: the unprivileged sandbox under no new privileges.
    let e = exec_under(&worker_args, "grep NoNewPrivs /proc/self/status; echo ran");
    assert_eq!(e.code, 0, "{:?} {}", e.json, e.stderr);
    assert_eq!(e.level(), "namespaces", "{:?}", e.json);
    assert!(e.stdout().contains("ran"), "{:?}", e.json);

    // Root mode: full bounding set, no new privileges.
    let e = exec_under(&root_args, "cat /proc/self/uid_map; echo ran");
    assert_eq!(e.code, 0, "{:?} {}", e.json, e.stderr);
    assert_eq!(e.level(), "namespaces", "{:?}", e.json);
    let host_uid = e
        .stdout()
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    assert!(
        !host_uid.is_empty() && host_uid != "0",
        "the workload is not root on the host: {:?}",
        e.json
    );
    // Control: each of the capabilities the root broker cannot do
    // without, dropped from the bounding set alone: the sandbox does not
    // start, and says at which step.
    for cap in ["sys_admin", "setuid", "setgid", "chown"] {
        let mut less = root_args.clone();
        less.insert(0, format!("--bounding-set=-{cap}"));
        let e = exec_under(&less, "echo ran");
        let said = format!("{} {}", e.json, e.stderr);
        assert_ne!(e.code, 0, "without {cap}: {said}");
        assert!(!e.stdout().contains("ran"), "without {cap}: {said}");
        assert_eq!(
            e.json["error"]["code"], "sandbox_setup_failed",
            "without {cap}: {said}"
        );
        assert!(
            said.contains("Operation not permitted"),
            "without {cap}, a clear error: {said}"
        );
    }

    // `serve --role web` under the web unit's set, `serve --role worker`
    // under the worker unit's, on one SQLite data directory: a run queued
    // on the web node is executed by the worker.
    let env = Env::new(Who::Unprivileged);
    env.sh_worker(
        "unitcheck",
        "[outputs.nnp]\ntype = \"string\"\n",
        "printf '{\"nnp\": \"%s\"}' \"$(grep NoNewPrivs /proc/self/status | tr -d '\\t ')\" > /airlock/output/result.json\n",
    );
    env.set_setpriv(Some(web_args));
    let web_node = Server::start_with(&env, &["serve", "--role", "web"], &[]);
    env.set_setpriv(Some(worker_args));
    let url = format!("sqlite://{}", env.data.join("airlock.db").display());
    let node = Node::worker_with(&env, &url, 0, &[]);
    let (c, v) = web_node.json("POST", "/v1/workers/unitcheck/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let state = loop {
        let s = web_node.run_state(&id);
        if !["queued", "running"].contains(&s.as_str()) {
            break s;
        }
        assert!(Instant::now() < deadline, "{}", node.text());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(state, "succeeded", "{}", node.text());
    let (_, v) = web_node.json("GET", &format!("/v1/runs/{id}"), None, &[]);
    assert_eq!(v["run"]["outputs"]["nnp"], "NoNewPrivs:1", "{v}");
    let st = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
    assert!(st.contains("NoNewPrivs:\t1"), "{st}");
    drop(node);
    drop(web_node);

    // Root mode: `serve --role worker` as root under the worker unit's
    // settings less `User=`/`Group=`.
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "unitcheck",
        "[outputs.nnp]\ntype = \"string\"\n",
        "printf '{\"nnp\": \"%s\"}' \"$(grep NoNewPrivs /proc/self/status | tr -d '\\t ')\" > /airlock/output/result.json\n",
    );
    let web_node = Server::start_with(&env, &["serve", "--role", "web"], &[]);
    env.set_setpriv(Some(root_args));
    let url = format!("sqlite://{}", env.data.join("airlock.db").display());
    let node = Node::worker_with(&env, &url, 0, &[]);
    let (c, v) = web_node.json("POST", "/v1/workers/unitcheck/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        web_node.wait_state(&id, &["succeeded", "failed", "blocked"]),
        "succeeded",
        "{}",
        node.text()
    );
    let (_, v) = web_node.json("GET", &format!("/v1/runs/{id}"), None, &[]);
    assert_eq!(v["run"]["outputs"]["nnp"], "NoNewPrivs:1", "{v}");
}
