//! The `airlock sandbox exec` command surface (SBX-6, SBX-7): exit codes,
//! the JSON object, containment requirements and bad input.

use crate::both_users;
use crate::suite::support::*;

fn sbx_7_json_has_every_documented_field(who: Who) {
    let r = exec_sh(who, &[], "echo out; echo err >&2; exit 3");
    assert_eq!(r.code, 3);
    for field in [
        "exit_code",
        "signal",
        "timed_out",
        "duration_ms",
        "stdout",
        "stderr",
        "containment",
        "egress",
    ] {
        assert!(r.json.get(field).is_some(), "missing {field}: {}", r.json);
    }
    assert_eq!(r.json["exit_code"], 3);
    assert_eq!(r.json["stdout"], "out\n");
    assert_eq!(r.json["stderr"], "err\n");
    assert_eq!(r.json["containment"]["driver"], "namespaces");
    assert_eq!(r.level(), "namespaces");
    for field in ["allowed", "denied", "bytes_up", "bytes_down"] {
        assert!(r.json["egress"].get(field).is_some(), "egress.{field}");
    }
    assert_eq!(r.json["executable"]["path"], "/usr/bin/dash");
    assert_eq!(
        r.json["executable"]["sha256"].as_str().map(str::len),
        Some(64)
    );
}
both_users!(sbx_7_json_has_every_documented_field);

fn sbx_7_signal_death_exits_128_plus_signal(who: Who) {
    let r = exec_sh(who, &[], "kill -9 $$");
    assert_eq!(r.code, 137);
    assert_eq!(r.json["signal"], 9);
    assert_eq!(r.json["exit_code"], serde_json::Value::Null);
}
both_users!(sbx_7_signal_death_exits_128_plus_signal);

fn sbx_6_full_containment_report_at_namespaces_level(who: Who) {
    let r = exec(who, &["--require-containment"], &["/bin/true"]);
    assert_eq!(r.code, 0, "{r:?}");
    for g in [
        "user_namespace",
        "mount_namespace",
        "pid_namespace",
        "network_namespace",
        "ipc_namespace",
        "uts_namespace",
        "private_root",
        "no_new_privs",
        "capabilities_dropped",
        "non_root_uid",
        "seccomp",
        "landlock",
        "rlimits",
        "unprivileged_host_uid",
        "no_setid_files",
        "per_user_limits",
    ] {
        assert!(
            r.guarantee(g),
            "{g} not in force: {}",
            r.json["containment"]
        );
    }
    // The report names the workload's host uid, which is never 0: the
    // invoking user's, or for a root invoker the sandbox id range's.
    let detail = r.json["containment"]["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "unprivileged_host_uid")
        .map(|g| g["detail"].as_str().unwrap_or("").to_string())
        .unwrap();
    let expected = if uid_of(who) == 0 {
        "host uid 2000000000".to_string()
    } else {
        format!("host uid {},", uid_of(who))
    };
    assert!(detail.contains(&expected), "{detail}");
}
both_users!(sbx_6_full_containment_report_at_namespaces_level);

/// A command that leaves a trace: it creates `trace` in the writable root `w` (made writable
/// for anyone: the fallback level runs a root invoker's command as uid 65534).
fn leave_trace(w: &tempfile::TempDir) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    sh(&format!("touch {}/trace", path_str(w.path())))
}

fn sbx_6_require_containment_blocks_weaker_levels(who: Who) {
    for driver in ["landlock", "uncontained"] {
        let w = workdir(who);
        let wp = path_str(w.path());
        let cmd = leave_trace(&w);
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let r = exec(
            who,
            &[
                "--require-containment",
                "--driver",
                driver,
                "--writable",
                wp,
            ],
            &cmd,
        );
        assert_eq!(r.code, 125, "{driver}: {r:?}");
        assert_eq!(
            r.json["error"]["code"], "containment_unavailable",
            "{driver}"
        );
        assert!(r.stderr.contains("containment_unavailable"));
        // Blocked before anything executes: the command left no trace.
        assert!(
            !w.path().join("trace").exists(),
            "{driver}: the command ran"
        );
        // Positive control: the same driver without the requirement runs it, and the trace
        // appears.
        let ok = exec(who, &["--driver", driver, "--writable", wp], &cmd);
        assert_eq!(ok.code, 0, "{driver}: {ok:?}");
        assert!(
            w.path().join("trace").exists(),
            "{driver}: control left no trace"
        );
    }
}
both_users!(sbx_6_require_containment_blocks_weaker_levels);

fn sbx_6_require_containment_blocks_unapplied_limits(who: Who) {
    // As an unprivileged user no cgroup is writable, so a CPU limit cannot be
    // applied and must block; as root it applies and the command runs.
    let w = workdir(who);
    let wp = path_str(w.path());
    let cmd = leave_trace(&w);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let r = exec(
        who,
        &["--require-containment", "--cpus", "0.5", "--writable", wp],
        &cmd,
    );
    let applied = r.guarantee("cpu_limit");
    let traced = w.path().join("trace").exists();
    if who == Who::Unprivileged || !is_root() {
        assert_eq!(r.code, 125, "{r:?}");
        assert!(
            r.json["error"]["missing"].to_string().contains("cpu_limit"),
            "{r:?}"
        );
        assert!(!traced, "blocked, yet the command ran");
        // Positive control: without the requirement the same command runs (the limit is
        // reported as not in force) and leaves its trace.
        let ok = exec(who, &["--cpus", "0.5", "--writable", wp], &cmd);
        assert_eq!(ok.code, 0, "{ok:?}");
        assert!(!ok.guarantee("cpu_limit"), "{ok:?}");
        assert!(w.path().join("trace").exists(), "control left no trace");
    } else {
        // As root a CPU cgroup is writable: the limit applies and the command runs.
        assert!(applied, "as root the CPU limit must apply: {r:?}");
        assert_eq!(r.code, 0, "{r:?}");
        assert!(traced, "{r:?}");
    }
}
both_users!(sbx_6_require_containment_blocks_unapplied_limits);

fn sbx_6_uncontained_driver_is_labelled(who: Who) {
    let r = exec(who, &["--driver", "uncontained"], &["/bin/true"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.json["containment"]["driver"], "uncontained");
    assert_eq!(r.level(), "uncontained");
    assert!(r.stderr.contains("WITHOUT any sandbox"));
}
both_users!(sbx_6_uncontained_driver_is_labelled);

fn sbx_5_environment_is_the_allowlist_plus_declared(who: Who) {
    let r = exec(who, &["--env", "GREETING=hello"], &["/usr/bin/env"]);
    let mut names: Vec<&str> = r
        .stdout()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    names.sort_unstable();
    names.retain(|n| *n != "TZ");
    assert_eq!(
        names,
        ["GREETING", "HOME", "LANG", "PATH", "TMPDIR"],
        "{}",
        r.stdout()
    );
    assert!(r.stdout().contains("GREETING=hello"));
}
both_users!(sbx_5_environment_is_the_allowlist_plus_declared);

/// `airlock ARGS` (no --json) as `who`: (exit code, stderr).
fn raw(who: Who, args: &[&str]) -> (i32, String) {
    let out = airlock(who).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sbx_7_bad_input_is_one_clear_line_and_exit_125(who: Who) {
    let w = workdir(who);
    let other = workdir(who);
    let wp = path_str(w.path());
    let op = path_str(other.path());
    let data = w.path().join("data.txt");
    std::fs::write(&data, "not a program").unwrap();
    let data = path_str(&data);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["sandbox", "exec", "--frobnicate", "--", "true"],
            "unexpected argument",
        ),
        (vec!["sandbox", "exec"], "required"),
        (
            vec!["sandbox", "exec", "--", "/no/such/binary"],
            "command not found",
        ),
        (
            vec!["sandbox", "exec", "--", "no-such-command-xyz"],
            "command not found",
        ),
        (
            vec![
                "sandbox",
                "exec",
                "--writable",
                wp,
                "--cwd",
                op,
                "--",
                "true",
            ],
            "outside the writable",
        ),
        (
            vec!["sandbox", "exec", "--env", "LD_PRELOAD=/x.so", "--", "true"],
            "denylist",
        ),
        (
            vec!["sandbox", "exec", "--env", "PYTHONPATH=/x", "--", "true"],
            "denylist",
        ),
        (
            vec!["sandbox", "exec", "--env", "NOEQUALS", "--", "true"],
            "NAME=VALUE",
        ),
        (
            vec!["sandbox", "exec", "--writable", "/", "--", "true"],
            "system directory",
        ),
        (
            vec!["sandbox", "exec", "--timeout", "0", "--", "true"],
            "timeout",
        ),
        (
            vec!["sandbox", "exec", "--allow", "*", "--", "true"],
            "every host",
        ),
        (
            vec!["sandbox", "exec", "--allow", "*.com", "--", "true"],
            "top-level domain",
        ),
        (
            vec!["sandbox", "exec", "--channel", "openai", "--", "true"],
            "not configured",
        ),
        (
            vec!["sandbox", "exec", "--", data],
            "not a regular executable",
        ),
    ];
    for (args, needle) in cases {
        let (code, stderr) = raw(who, &args);
        assert_eq!(code, 125, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line expected: {stderr}"
        );
    }
    // Positive control: a good invocation exits 0.
    assert_eq!(raw(who, &["sandbox", "exec", "--", "true"]).0, 0);
}
both_users!(sbx_7_bad_input_is_one_clear_line_and_exit_125);

fn sbx_7_python_and_node_run_inside(who: Who) {
    let r = py(
        who,
        &[],
        "import json, ssl, sqlite3; print(json.dumps({'ok': 1}))",
    );
    assert_eq!(r.stdout().trim(), "{\"ok\": 1}", "{r:?}");
    let n = exec(
        who,
        &[],
        &["node", "-e", "console.log(JSON.stringify({ok: 2}))"],
    );
    assert_eq!(n.stdout().trim(), "{\"ok\":2}", "{n:?}");
}
both_users!(sbx_7_python_and_node_run_inside);

/// `airlock ARGS` as `who` with stdout and stderr on a real pseudo-terminal (the operator's
/// terminal, as far as airlock can tell): everything the terminal received.
fn on_a_terminal(who: Who, args: &[&str]) -> Vec<u8> {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut child = airlock(who)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap())
        .spawn()
        .unwrap();
    // Only airlock holds the terminal now: reading ends (EIO) when it exits.
    drop(slave);
    let mut master = std::fs::File::from(pty.master);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => panic!("reading the terminal: {e}"),
        }
    }
    assert!(child.wait().unwrap().success());
    seen
}

/// Writes a window title, a clipboard write (OSC 52), a device status query and a line
/// overwrite to stdout and stderr, then some UTF-8 text.
const TERMINAL_ATTACK: &str = r"printf '\033]0;pwned\007\033]52;c;ZWNobyBoaQ==\007\033[6n'; printf 'safe\rEVIL\033]0;err\007' >&2; printf 'h\303\251llo\tworld\n'";

fn sbx_7_plain_output_on_a_terminal_shows_control_bytes_as_escapes(who: Who) {
    let shown = on_a_terminal(
        who,
        &["sandbox", "exec", "--", "/bin/sh", "-c", TERMINAL_ATTACK],
    );
    let text = String::from_utf8_lossy(&shown);
    assert!(
        !shown.contains(&0x1b),
        "an escape sequence reached the terminal: {text:?}"
    );
    assert!(!shown.contains(&0x07), "{text:?}");
    for visible in [
        "\\x1b]0;pwned\\x07",
        "\\x1b]52;c;ZWNobyBoaQ==\\x07",
        "\\x1b[6n",
        "safe\\x0dEVIL",
        "\\x1b]0;err\\x07",
    ] {
        assert!(text.contains(visible), "{visible} not shown: {text:?}");
    }
    // Text stays readable (the terminal itself turns \n into \r\n).
    assert!(text.contains("héllo\tworld\r\n"), "{text:?}");

    // Positive control: with --raw the same bytes reach the terminal as written.
    let raw = on_a_terminal(
        who,
        &[
            "sandbox",
            "exec",
            "--raw",
            "--",
            "/bin/sh",
            "-c",
            TERMINAL_ATTACK,
        ],
    );
    let needle = b"\x1b]52;c;ZWNobyBoaQ==\x07";
    assert!(
        raw.windows(needle.len()).any(|w| w == needle),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    // Control: a pipe is not a terminal and gets the bytes as written, too.
    let piped = airlock(who)
        .args(["sandbox", "exec", "--", "/bin/sh", "-c", TERMINAL_ATTACK])
        .output()
        .unwrap();
    assert!(piped.stdout.windows(needle.len()).any(|w| w == needle));
}
both_users!(sbx_7_plain_output_on_a_terminal_shows_control_bytes_as_escapes);

fn sbx_3_bad_sandbox_id_range_is_a_clear_error_at_start(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let marker = format!("{wp}/ran");
    let run = |range: &str| {
        raw(
            who,
            &[
                "sandbox",
                "exec",
                "--subid-range",
                range,
                "--writable",
                wp,
                "--",
                "/usr/bin/touch",
                &marker,
            ],
        )
    };
    // Malformed: refused whoever runs airlock.
    for range in ["abc:1", "1:2:3", "Bob"] {
        let (code, stderr) = run(range);
        assert_eq!(code, 125, "{range}: {stderr}");
        assert!(stderr.contains("FIRST:COUNT"), "{range}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    let root = uid_of(who) == 0;
    for (range, needle) in [
        ("0:65536", "must start at 65536"),
        ("4294967295:1", "end below"),
        ("no-such-user-xyz", "has no entry in /etc/subuid"),
    ] {
        let (code, stderr) = run(range);
        if root {
            // As root the range decides the workload's host uid: a bad one
            // is one clear line naming the fix, and nothing runs (never a
            // fall back to uid 0).
            assert_eq!(code, 125, "{range}: {stderr}");
            assert!(stderr.contains(needle), "{range}: {stderr}");
            assert!(stderr.contains("--subid-range"), "{range}: {stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
            assert!(!std::path::Path::new(&marker).exists(), "{range}");
        } else {
            // An unprivileged invoker's workload is always its own uid.
            assert_eq!(code, 0, "{range}: {stderr}");
            let _ = std::fs::remove_file(&marker);
        }
    }
    // Positive control: a free explicit range is used, named in the report
    // and owns what the workload creates.
    let r = exec(
        who,
        &["--subid-range", "3000000000:65536", "--writable", wp],
        &["/usr/bin/touch", &marker],
    );
    assert_eq!(r.code, 0, "{r:?}");
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&marker).unwrap().uid();
    if root {
        assert_eq!(owner, 3_000_000_000);
        assert!(
            r.json["containment"]
                .to_string()
                .contains("host uid 3000000000"),
            "{r:?}"
        );
    } else {
        assert_eq!(owner, uid_of(who));
    }
}
both_users!(sbx_3_bad_sandbox_id_range_is_a_clear_error_at_start);
