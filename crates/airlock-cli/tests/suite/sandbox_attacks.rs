//! Attacks on the sandbox from inside the sandbox (SBX-3, SBX-4, SBX-5).
//! Each case has a positive control showing that the check can fail: the
//! same probe run with the `uncontained` driver finds what the sandbox hides.

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::both_users;
use crate::suite::support::*;

/// Scans what the workload can reach for the sentinel: its environment,
/// every /proc/*/environ and cmdline, and every readable file outside the
/// system runtime (where nothing was planted). Prints the places found.
const SENTINEL_SCAN: &str = r#"
import os, sys
needle = sys.argv[1][::-1].encode()  # reversed on the command line, so argv never matches
found = []
for k, v in os.environ.items():
    if needle in v.encode() or needle in k.encode():
        found.append("env:" + k)
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for f in ("environ", "cmdline"):
        try:
            if needle in open(f"/proc/{pid}/{f}", "rb").read():
                found.append(f"/proc/{pid}/{f}")
        except OSError:
            pass
skip = ("/proc", "/sys", "/usr", "/dev", "/bin", "/sbin", "/lib", "/lib64")
for root in sys.argv[2:]:
    if os.path.isfile(root):
        try:
            if needle in open(root, "rb").read():
                found.append(root)
        except OSError:
            pass
        continue
    for dirpath, dirs, files in os.walk(root):
        if dirpath.startswith(skip):
            dirs[:] = []
            continue
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                with open(p, "rb") as fh:
                    if needle in fh.read(1 << 20):
                        found.append(p)
            except OSError:
                pass
print("\n".join(found))
"#;

fn sbx_5_sentinel_credentials_are_found_nowhere(who: Who) {
    let planted_tmp = std::env::temp_dir().join(format!("airlock-sentinel-{}", std::process::id()));
    std::fs::write(&planted_tmp, SENTINEL).unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let planted_home =
        std::path::Path::new(&home).join(format!(".airlock-sentinel-{}", std::process::id()));
    let _ = std::fs::write(&planted_home, SENTINEL);
    let home_file = planted_home.to_str().unwrap();
    let reversed: String = SENTINEL.chars().rev().collect();
    let base = ["/usr/bin/python3", "-c", SENTINEL_SCAN, reversed.as_str()];

    // Inside: everything the workload can list, from the root down, plus the
    // exact paths planted on the host.
    let mut args = base.to_vec();
    args.extend(["/", planted_tmp.to_str().unwrap(), home_file]);
    let inside = exec(who, &[], &args);
    assert_eq!(inside.code, 0, "{inside:?}");
    assert_eq!(
        inside.stdout().trim(),
        "",
        "sentinel reachable inside the sandbox"
    );

    // Positive control: the same probe, uncontained, finds the planted values
    // (scanning only /tmp and the planted files: the host's / is large).
    let mut args = base.to_vec();
    args.extend(["/tmp", home_file]);
    let control = exec(who, &["--driver", "uncontained"], &args);
    let found = control.stdout();
    assert!(
        found.contains("/proc/"),
        "control must see the broker's environ: {found}"
    );
    if who == Who::Invoker {
        assert!(
            found.contains(planted_tmp.to_str().unwrap()),
            "control must see the /tmp file: {found}"
        );
    }
    let _ = std::fs::remove_file(&planted_tmp);
    let _ = std::fs::remove_file(&planted_home);
}
both_users!(sbx_5_sentinel_credentials_are_found_nowhere);

fn sbx_3_no_route_out_to_host_loopback_or_dns(who: Who) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let probe = r#"
import socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    print("tcp:connected")
except OSError as e:
    print("tcp:refused", e.errno)
try:
    socket.getaddrinfo("example.com", 443)
    print("dns:resolved")
except OSError:
    print("dns:failed")
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("8.8.8.8", 53))
    print("udp:sent")
except OSError as e:
    print("udp:failed", e.errno)
"#;
    let inside = exec(who, &[], &["/usr/bin/python3", "-c", probe, &port]);
    let out = inside.stdout();
    assert!(out.contains("tcp:refused"), "{out}");
    assert!(out.contains("dns:failed"), "{out}");
    assert!(out.contains("udp:failed"), "{out}");
    assert!(inside.guarantee("network_namespace"));

    // Positive control: uncontained reaches the host listener.
    listener.set_nonblocking(false).unwrap();
    let control = exec(
        who,
        &["--driver", "uncontained"],
        &["/usr/bin/python3", "-c", probe, &port],
    );
    assert!(
        control.stdout().contains("tcp:connected"),
        "{}",
        control.stdout()
    );
}
both_users!(sbx_3_no_route_out_to_host_loopback_or_dns);

fn sbx_3_writes_only_inside_writable_roots(who: Who) {
    let w = workdir(who);
    let ro = workdir(who);
    std::fs::write(ro.path().join("existing"), "orig").unwrap();
    let wp = path_str(w.path());
    let rop = path_str(ro.path());
    let script = format!(
        "echo ok > {wp}/inside && echo written; \
         for p in /usr/evil /etc/evil /evil /proc/evil {rop}/evil {rop}/existing; do \
           (echo x > $p) 2>/dev/null && echo LEAK:$p; done; \
         (echo 1 > /proc/sys/kernel/hostname) 2>/dev/null && echo LEAK:procsys; true"
    );
    let r = exec_sh(who, &["--writable", wp, "--readonly", rop], &script);
    assert!(
        r.stdout().contains("written"),
        "positive control: the writable root works: {r:?}"
    );
    assert!(!r.stdout().contains("LEAK"), "{}", r.stdout());
    assert_eq!(
        std::fs::read_to_string(w.path().join("inside")).unwrap(),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(ro.path().join("existing")).unwrap(),
        "orig"
    );
    assert!(!ro.path().join("evil").exists());
}
both_users!(sbx_3_writes_only_inside_writable_roots);

fn sbx_5_host_processes_run_home_and_key_directory_are_invisible(who: Who) {
    let keys = workdir(who);
    std::fs::write(keys.path().join("kek"), SENTINEL).unwrap();
    let kp = path_str(keys.path());
    let script = format!(
        "ls /proc | grep -c '^[0-9]' ; for p in /run /var/run /root /home {kp} /var/run/docker.sock /run/dbus; do \
         [ -e $p ] && echo VISIBLE:$p; done; true"
    );
    let r = exec_sh(who, &[], &script);
    let mut lines = r.stdout().lines();
    let nprocs: usize = lines.next().unwrap_or("999").trim().parse().unwrap_or(999);
    assert!(nprocs <= 4, "sandbox sees {nprocs} processes");
    assert!(!r.stdout().contains("VISIBLE"), "{}", r.stdout());

    // Positive control: uncontained sees the host's processes and the key dir.
    let c = exec_sh(who, &["--driver", "uncontained"], &script);
    let n: usize = c
        .stdout()
        .lines()
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(n > 4, "control should see host processes");
    assert!(c.stdout().contains(&format!("VISIBLE:{kp}")));
}
both_users!(sbx_5_host_processes_run_home_and_key_directory_are_invisible);

/// Calls each refused operation through libc and prints `name:errno`.
const SYSCALL_PROBE: &str = r#"
import ctypes, os, fcntl, termios
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(f"{name}:{0 if r >= 0 else ctypes.get_errno()}")
call("ptrace", 101, 0, 0, 0, 0)                      # PTRACE_TRACEME
call("mount", 165, 0, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
params = ctypes.create_string_buffer(120)
call("io_uring_setup", 425, 4, ctypes.addressof(params))
call("unshare_user", 272, 0x10000000)                 # CLONE_NEWUSER
call("unshare_net", 272, 0x40000000)                  # CLONE_NEWNET
call("keyctl", 250, 0, 0, 0)
call("userfaultfd", 323, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("netlink_socket", 41, 16, 3, 0)                  # AF_NETLINK
try:
    fd = os.open("/dev/tty", os.O_RDWR)
except OSError:
    fd = 0
try:
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    print("tiocsti:0")
except OSError as e:
    print(f"tiocsti:{e.errno}")
"#;

fn probe_errnos(r: &Exec) -> std::collections::BTreeMap<String, i32> {
    r.stdout()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn sbx_3_dangerous_syscalls_are_refused_inside(who: Who) {
    let r = py(who, &[], SYSCALL_PROBE);
    let e = probe_errnos(&r);
    const EPERM: i32 = 1;
    for name in [
        "ptrace",
        "mount",
        "bpf",
        "io_uring_setup",
        "unshare_user",
        "unshare_net",
        "keyctl",
        "userfaultfd",
        "perf_event_open",
        "netlink_socket",
    ] {
        assert_eq!(e.get(name), Some(&EPERM), "{name} not refused: {e:?} {r:?}");
    }
    assert_ne!(e.get("tiocsti"), Some(&0), "TIOCSTI succeeded: {e:?}");

    // Positive control: uncontained, the same calls get past seccomp (their
    // errno is the kernel's own answer, not the filter's EPERM).
    let c = py(who, &["--driver", "uncontained"], SYSCALL_PROBE);
    let ce = probe_errnos(&c);
    assert_eq!(
        ce.get("ptrace"),
        Some(&0),
        "control: PTRACE_TRACEME works uncontained: {ce:?}"
    );
    assert_eq!(
        ce.get("netlink_socket"),
        Some(&0),
        "control: netlink socket works uncontained: {ce:?}"
    );
    assert_ne!(ce.get("unshare_user"), Some(&EPERM), "control: {ce:?}");
}
both_users!(sbx_3_dangerous_syscalls_are_refused_inside);

/// Preflight for destructive tests: the sandbox must isolate PIDs and apply
/// a process limit, proven in the same test before the attack runs.
fn preflight_pid_isolation_and_limits(who: Who, opts: &[&str]) {
    let r = exec_sh(who, opts, "echo $$; ls /proc | grep -c '^[0-9]'");
    assert!(
        r.guarantee("pid_namespace"),
        "preflight: no PID namespace: {r:?}"
    );
    let mut l = r.stdout().lines();
    let pid: u32 = l.next().unwrap_or("0").trim().parse().unwrap_or(0);
    assert!(
        pid <= 3,
        "preflight: shell pid {pid} is not inside a fresh PID namespace"
    );
    assert!(
        r.guarantee("pids_limit") || r.guarantee("rlimits"),
        "preflight: no process limit in force: {r:?}"
    );
}

fn sbx_4_fork_bomb_stops_at_the_pids_limit(who: Who) {
    let opts = ["--pids", "64", "--timeout", "20"];
    preflight_pid_isolation_and_limits(who, &opts);
    // kill(-1) inside a PID namespace only reaches the sandbox itself.
    let name = format!("bomb{}{}", std::process::id(), who == Who::Invoker);
    let r = exec_sh(
        who,
        &opts,
        &format!(
            "{name}() {{ {name} | {name} & }}; {name}; sleep 1; kill -9 -1 2>/dev/null; echo survived"
        ),
    );
    assert!(
        r.hit("pids") || r.code != 0 || r.stdout().contains("survived"),
        "{r:?}"
    );
    // The host stays responsive: a fresh process starts promptly.
    let t = Instant::now();
    let ok = std::process::Command::new("/bin/true").status().unwrap();
    assert!(ok.success());
    assert!(t.elapsed() < Duration::from_secs(10));
    // Nothing of the bomb is left.
    assert_eq!(count_processes_with(&name), 0);
}
both_users!(sbx_4_fork_bomb_stops_at_the_pids_limit);

fn sbx_3_memory_hog_is_killed_and_reported(who: Who) {
    let r = py(
        who,
        &["--memory", "64"],
        "x = bytearray(512 * 1024 * 1024); x[::4096] = b'y' * len(x[::4096]); print('survived')",
    );
    assert!(!r.stdout().contains("survived"), "{r:?}");
    assert_ne!(r.code, 0);
    if r.guarantee("memory_limit") {
        // A cgroup memory controller: the kernel's OOM kill is reported.
        assert!(r.hit("memory"), "cgroup OOM kill must be reported: {r:?}");
        assert_eq!(r.json["signal"], 9);
    } else {
        // No cgroup: RLIMIT_AS refused the allocation, and the report says
        // that this is an address-space cap, not a memory limit.
        assert!(r.guarantee("address_space_limit"), "{r:?}");
    }
    // Positive control: a small allocation under the same limit succeeds.
    let ok = py(
        who,
        &["--memory", "64"],
        "x = bytearray(8 * 1024 * 1024); print('fine')",
    );
    assert_eq!(ok.stdout().trim(), "fine", "{ok:?}");
}
both_users!(sbx_3_memory_hog_is_killed_and_reported);

fn sbx_4_double_forked_setsid_daemon_never_writes(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let daemon = format!(
        "(setsid sh -c 'sleep 2; echo alive > {wp}/daemon' >/dev/null 2>&1 &) ; echo started"
    );
    let r = exec_sh(who, &["--writable", wp], &daemon);
    assert!(r.stdout().contains("started"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !w.path().join("daemon").exists(),
        "daemon outlived the sandbox"
    );

    // Positive control: uncontained, the daemon survives and writes (the
    // pause lets it leave the process group that the broker kills on exit).
    let _ = exec_sh(
        who,
        &["--driver", "uncontained", "--writable", wp],
        &format!("{daemon}; sleep 1"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.path().join("daemon").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        w.path().join("daemon").exists(),
        "control daemon should have written"
    );
}
both_users!(sbx_4_double_forked_setsid_daemon_never_writes);

fn count_processes_with(marker: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let mut s = String::new();
            std::fs::File::open(e.path().join("cmdline"))
                .and_then(|mut f| f.read_to_string(&mut s))
                .is_ok()
                && s.replace('\0', " ").contains(marker)
        })
        .count()
}

fn sbx_4_timeout_kills_everything_and_is_reported(who: Who) {
    let marker = format!("{}.{}", 3000 + std::process::id() % 1000, 77);
    let r = exec_sh(
        who,
        &["--timeout", "1", "--grace", "1"],
        &format!("sleep {marker} & sleep {marker}; echo never"),
    );
    assert_eq!(r.json["timed_out"], true, "{r:?}");
    assert!(r.hit("timeout"));
    assert!(!r.stdout().contains("never"));
    assert!(r.code >= 128, "exit {}", r.code);
    assert_eq!(
        count_processes_with(&format!("sleep {marker}")),
        0,
        "processes left behind"
    );
    // Positive control: without the timeout the same command is still running.
    assert_eq!(
        exec_sh(who, &["--timeout", "5"], "echo quick").json["timed_out"],
        false
    );
}
both_users!(sbx_4_timeout_kills_everything_and_is_reported);

fn sbx_1_huge_stdout_is_truncated_without_deadlock(who: Who) {
    let r = exec_sh(
        who,
        &["--output-budget", "65536"],
        "head -c 104857600 /dev/zero; echo done >&2",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["stdout_bytes"], 104_857_600u64);
    assert_eq!(r.json["stdout_dropped"], 104_857_600u64 - 65536);
    assert!(r.hit("stdout"));
    assert_eq!(r.json["stderr"], "done\n");
}
both_users!(sbx_1_huge_stdout_is_truncated_without_deadlock);

fn sbx_3_fallback_level_denies_network_and_host_files(who: Who) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let sockdir = workdir(who);
    let sock_path = sockdir.path().join("host.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let _ = std::fs::set_permissions(
        &sock_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    );
    let probe = "import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3); print('tcp:connected')\nexcept OSError as e: print('tcp:denied', e.errno)\ntry:\n open('/etc/passwd').read(); print('passwd:read')\nexcept OSError: print('passwd:denied')\ntry:\n u = socket.socket(socket.AF_UNIX); u.connect(sys.argv[2]); print('unix:connected')\nexcept OSError as e: print('unix:denied', e.errno)\n";
    let sp = path_str(&sock_path);
    let r = exec(
        who,
        &["--driver", "landlock"],
        &["/usr/bin/python3", "-c", probe, &port, sp],
    );
    assert_eq!(r.level(), "landlock_seccomp", "{r:?}");
    assert!(r.stdout().contains("tcp:denied"), "{r:?}");
    assert!(r.stdout().contains("passwd:denied"), "{r:?}");
    assert!(
        r.stdout().contains("unix:denied"),
        "a host Unix socket must be unreachable: {r:?}"
    );
    assert!(r.guarantee("network_denied") && r.guarantee("landlock") && r.guarantee("seccomp"));
    assert!(!r.guarantee("pid_namespace"));
    // Positive control: uncontained connects and reads.
    let c = exec(
        who,
        &["--driver", "uncontained"],
        &["/usr/bin/python3", "-c", probe, &port, sp],
    );
    assert!(
        c.stdout().contains("tcp:connected") && c.stdout().contains("passwd:read"),
        "{c:?}"
    );
    assert!(c.stdout().contains("unix:connected"), "{c:?}");
}
both_users!(sbx_3_fallback_level_denies_network_and_host_files);

fn sbx_4_fallback_timeout_kills_daemons_that_ignore_sigterm(who: Who) {
    let marker = format!(
        "{}.{}",
        4000 + std::process::id() % 1000,
        u8::from(who == Who::Invoker)
    );
    let r = exec_sh(
        who,
        &["--driver", "landlock", "--timeout", "2", "--grace", "1"],
        &format!("trap '' TERM; setsid sleep {marker} & sleep 100"),
    );
    assert_eq!(r.json["timed_out"], true, "{r:?}");
    assert_eq!(r.level(), "landlock_seccomp");
    assert_eq!(
        count_processes_with(&format!("sleep {marker}")),
        0,
        "a daemon outlived the fallback sandbox"
    );
}
both_users!(sbx_4_fallback_timeout_kills_daemons_that_ignore_sigterm);

fn sbx_5_workload_holds_only_stdio_descriptors(who: Who) {
    let r = exec(
        who,
        &[],
        &[
            "/usr/bin/python3",
            "-c",
            "import os; print(sorted(os.listdir('/proc/self/fd')))",
        ],
    );
    // 0-2 plus the descriptor listdir itself holds open.
    assert_eq!(r.stdout().trim(), "['0', '1', '2', '3']", "{r:?}");
}
both_users!(sbx_5_workload_holds_only_stdio_descriptors);

fn sbx_3_proc_sys_is_read_only_mounted(who: Who) {
    let r = exec_sh(
        who,
        &[],
        "awk '$5 == \"/proc/sys\" { print $6 }' /proc/self/mountinfo",
    );
    assert!(
        r.stdout().trim().starts_with("ro"),
        "/proc/sys must be a read-only mount: {r:?}"
    );
    // Positive control: /proc itself is a separate, read-write mount.
    let c = exec_sh(
        who,
        &[],
        "awk '$5 == \"/proc\" { print $6 }' /proc/self/mountinfo",
    );
    assert!(c.stdout().trim().starts_with("rw"), "{c:?}");
}
both_users!(sbx_3_proc_sys_is_read_only_mounted);

/// Any file or directory under `dir` (not following links) with a set-uid
/// or set-gid bit.
fn setid_files(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        if m.permissions().mode() & 0o6000 != 0 {
            found.push(e.path().display().to_string());
        }
        if m.is_dir() {
            found.extend(setid_files(&e.path()));
        }
    }
    found
}

/// Plants set-uid and set-gid files every way a mode can be given.
const SETID_PLANT: &str = r#"
import os, shutil, stat, subprocess, sys
w = sys.argv[1]
shutil.copy("/usr/bin/id", w + "/x")
print("chmod", subprocess.run(["chmod", "6755", w + "/x"]).returncode)
for name, call in [
    ("open", lambda: os.close(os.open(w + "/y", os.O_CREAT | os.O_WRONLY, 0o6755))),
    ("mknod", lambda: os.mknod(w + "/z", 0o6755 | stat.S_IFREG)),
    ("mkdir", lambda: os.mkdir(w + "/d", 0o7777)),
    ("chmod_dir", lambda: os.chmod(w + "/d", 0o2777)),
    ("fchmod", lambda: os.chmod(w + "/x", 0o4755)),
]:
    try:
        call(); print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)
"#;

fn sbx_3_setuid_plant_leaves_no_privilege(who: Who) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let w = workdir(who);
    let wp = path_str(w.path());
    // A directory only its owner may enter, as in `mkdir -m700 W`.
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let r = exec(
        who,
        &["--writable", wp],
        &["/usr/bin/python3", "-c", SETID_PLANT, wp],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout().contains("chmod 1"),
        "chmod 6755 must fail: {r:?}"
    );
    assert!(r.guarantee("no_setid_files"), "{r:?}");
    assert_eq!(setid_files(w.path()), Vec::<String>::new(), "{r:?}");
    let x = std::fs::metadata(w.path().join("x")).unwrap();
    assert_ne!(x.uid(), 0, "the planted file must not be root-owned");
    assert_ne!(x.gid(), 0);
    if who == Who::Unprivileged {
        assert_eq!(x.uid(), uid_of(who));
    }
    // The writable root is usable: the workload created files in a
    // directory it does not own, and the directory's mode is unchanged.
    let mode = std::fs::metadata(w.path()).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "the access grant must be undone");

    // A local unprivileged user who reaches the file gets no privilege.
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    match test_user() {
        Some((user, _)) => {
            let ran = run_as(Who::Unprivileged, w.path().join("x"))
                .arg("-u")
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ran.stdout).trim(),
                user.to_string(),
                "{ran:?}"
            );
        }
        None => assert!(
            std::env::var_os(SKIP_UNPRIVILEGED).is_some(),
            "no unprivileged user to run the planted file as (set {SKIP_UNPRIVILEGED}=1 to skip)"
        ),
    }

    // Positive control: the same plant uncontained leaves a set-uid file
    // (owned by root when the invoker is root, which then hands out root).
    let c = workdir(who);
    let cp = path_str(c.path());
    let u = exec(
        who,
        &["--driver", "uncontained", "--writable", cp],
        &["/usr/bin/python3", "-c", SETID_PLANT, cp],
    );
    assert!(u.stdout().contains("chmod 0"), "{u:?}");
    assert!(!setid_files(c.path()).is_empty(), "control: {u:?}");
    if who == Who::Invoker && is_root() {
        let ran = run_as(Who::Unprivileged, c.path().join("x"))
            .arg("-u")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "0");
    }
    for f in ["x", "y", "z"] {
        let _ = std::fs::remove_file(c.path().join(f));
    }
}
both_users!(sbx_3_setuid_plant_leaves_no_privilege);

const MEMFD_HOG: &str = r#"
import os
fd = os.memfd_create("hog")
chunk = b"y" * (1 << 20)
for i in range(320):
    os.write(fd, chunk)
print("held", os.fstat(fd).st_size >> 20)
"#;

fn sbx_3_memfd_and_inodes_under_memory_64_are_bounded_or_reported(who: Who) {
    let opts = ["--memory", "64", "--pids", "64"];
    preflight_pid_isolation_and_limits(who, &opts);
    let r = py(who, &opts, MEMFD_HOG);
    let held = r.stdout().contains("held 320");
    if r.guarantee("memory_limit") {
        // In force: the memfd pages count, and the workload is stopped.
        assert!(!held, "memory_limit in force but 320 MiB held: {r:?}");
        assert!(r.hit("memory") || r.code != 0, "{r:?}");
    } else {
        // Not in force, with the reason; a caller that requires it is
        // refused before anything runs.
        let detail = r.json["containment"]["guarantees"].to_string();
        assert!(detail.contains("memfd"), "the reason names memfd: {detail}");
        let req = exec(
            who,
            &["--require-containment", "--memory", "64"],
            &["/bin/true"],
        );
        assert_eq!(req.code, 125, "{req:?}");
        assert!(
            req.json["error"]["missing"]
                .to_string()
                .contains("memory_limit")
        );
    }
    // Positive control: the probe does hold 320 MiB where nothing counts it.
    let c = py(who, &["--driver", "uncontained"], MEMFD_HOG);
    assert!(c.stdout().contains("held 320"), "{c:?}");

    // Inodes: 80,000 empty files in the private /tmp.
    let files = "import os\nn = 0\ntry:\n    while n < 80000:\n        open(f'{os.environ[\"D\"]}/f{n}', 'w').close(); n += 1\n    print('created', n)\nexcept OSError as e:\n    print('stopped', n, e.errno)\n";
    let r = exec(
        who,
        &opts,
        &["/usr/bin/env", "D=/tmp", "/usr/bin/python3", "-c", files],
    );
    assert!(!r.stdout().contains("created"), "{r:?}");
    // Refused at the tmpfs's inode cap (ENOSPC), or stopped by the memory
    // cgroup that counts the inodes' kernel memory.
    let refused = r.stdout().starts_with("stopped") && r.stdout().trim().ends_with(" 28");
    assert!(refused || r.hit("memory") || r.code != 0, "{r:?}");
    // Positive control: on the host's disk (uncontained, a work directory)
    // the same loop creates them all.
    let d = workdir(who);
    let dp = format!("D={}", path_str(d.path()));
    let c = exec(
        who,
        &["--driver", "uncontained", "--writable", path_str(d.path())],
        &["/usr/bin/env", &dp, "/usr/bin/python3", "-c", files],
    );
    assert_eq!(c.stdout().trim(), "created 80000", "{c:?}");
}
both_users!(sbx_3_memfd_and_inodes_under_memory_64_are_bounded_or_reported);

fn sbx_3_symlink_left_by_one_run_cannot_redirect_the_next(who: Who) {
    let w = workdir(who);
    let elsewhere = workdir(who);
    let wp = path_str(w.path());
    let out = format!("{wp}/out");
    let r = exec_sh(
        who,
        &["--writable", wp],
        &format!("ln -s {} {out}", path_str(elsewhere.path())),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let next = airlock(who)
        .args(["sandbox", "exec", "--writable", &out, "--", "sh", "-c"])
        .arg(format!("echo pwned > {out}/f; pwd"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert_eq!(next.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(stderr.contains(&out), "the error names the link: {stderr}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    // A link higher up in the path is refused the same way.
    let via = format!("{}/sub", out);
    std::fs::create_dir(elsewhere.path().join("sub")).unwrap();
    let (code, stderr) = {
        let o = airlock(who)
            .args(["sandbox", "exec", "--readonly", &via, "--", "true"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stderr.contains(&format!("{out:?}")), "{stderr}");

    // Positive control: a real directory at the same path works.
    std::fs::remove_file(&out).unwrap();
    std::fs::create_dir(&out).unwrap();
    if let Some((uid, gid)) = test_user().filter(|_| who == Who::Unprivileged) {
        std::os::unix::fs::chown(&out, Some(uid), Some(gid)).unwrap();
    }
    let ok = exec_sh(who, &["--writable", &out], &format!("echo ok > {out}/f"));
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(std::fs::read_to_string(format!("{out}/f")).unwrap(), "ok\n");
}
both_users!(sbx_3_symlink_left_by_one_run_cannot_redirect_the_next);

/// Starts `sandbox exec` with `--egress-log FIFO` and returns once it has
/// parsed its request: the command opens the log (and blocks on the FIFO
/// until this side opens it for reading) only after the spec is parsed.
/// Returns the child and a reader thread that drains the log.
fn exec_paused_after_parse(
    who: Who,
    fifo: &std::path::Path,
    opts: &[&str],
    script: &str,
) -> (
    std::process::Child,
    std::thread::JoinHandle<()>,
    std::fs::File,
) {
    let child = airlock(who)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--allow",
            "example.com",
            "--egress-log",
        ])
        .arg(fifo)
        .args(opts)
        .args(["--", "/bin/sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Blocks until the command opens the FIFO for writing.
    let reader = std::fs::File::open(fifo).unwrap();
    let mut drain = reader.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = drain.read_to_end(&mut sink);
    });
    (child, t, reader)
}

fn sbx_3_root_swapped_after_parsing_is_refused_at_bind_time(who: Who) {
    let base = workdir(who);
    let elsewhere = workdir(who);
    let fifo = base.path().join("log.fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    if let Some((uid, gid)) = test_user().filter(|_| who == Who::Unprivileged) {
        std::os::unix::fs::chown(&fifo, Some(uid), Some(gid)).unwrap();
    }
    let root = base.path().join("root");
    let moved = base.path().join("root.orig");
    let rp = path_str(&root).to_string();
    for swap in ["symlink", "directory", "none"] {
        std::fs::create_dir(&root).unwrap();
        if let Some((uid, gid)) = test_user().filter(|_| who == Who::Unprivileged) {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid)).unwrap();
        }
        let (child, drain, _reader) = exec_paused_after_parse(
            who,
            &fifo,
            &["--writable", &rp],
            &format!("echo written > {rp}/f"),
        );
        // The spec is parsed and pinned now; swap the root under it.
        match swap {
            "symlink" => {
                std::fs::rename(&root, &moved).unwrap();
                std::os::unix::fs::symlink(elsewhere.path(), &root).unwrap();
            }
            "directory" => {
                std::fs::rename(&root, &moved).unwrap();
                std::fs::create_dir(&root).unwrap();
            }
            _ => {}
        }
        let out = child.wait_with_output().unwrap();
        drain.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if swap == "none" {
            // Positive control: unswapped, the same launch writes its root.
            assert_eq!(out.status.code(), Some(0), "{stdout}");
            assert_eq!(
                std::fs::read_to_string(root.join("f")).unwrap(),
                "written\n"
            );
            std::fs::remove_dir_all(&root).unwrap();
        } else {
            assert_eq!(out.status.code(), Some(125), "{swap}: {stdout}");
            // Caught by the init as it binds (or, for a root broker, one
            // step earlier, when it grants the sandbox uid access).
            assert!(
                stdout.contains("open root") || stdout.contains("writable root access"),
                "{swap}: {stdout}"
            );
            assert_eq!(
                std::fs::read_dir(elsewhere.path()).unwrap().count(),
                0,
                "{swap}: the swapped-in target was written"
            );
            assert!(!moved.join("f").exists());
            let _ = std::fs::remove_file(&root);
            let _ = std::fs::remove_dir(&root);
            std::fs::remove_dir_all(&moved).unwrap();
        }
    }
}
both_users!(sbx_3_root_swapped_after_parsing_is_refused_at_bind_time);

/// Adds a `user` key described `desc` to the keyring of `who`'s uid, runs
/// `f` while the key exists, then invalidates it.
fn with_host_key(who: Who, desc: &str, f: impl FnOnce()) {
    use std::io::{BufRead, Write};
    let script = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
k = libc.syscall(248, b"user", sys.argv[1].encode(), b"sentinel-payload", 16, ctypes.c_int(-4))
print(k, flush=True)
sys.stdin.readline()
libc.syscall(250, 21, k)  # KEYCTL_INVALIDATE
"#;
    let mut child = run_as(who, "/usr/bin/python3")
        .args(["-c", script, desc])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let id: i64 = line.trim().parse().unwrap_or(-1);
    assert!(id > 0, "add_key failed: {line:?}");
    f();
    let _ = child.stdin.take().unwrap().write_all(b"done\n");
    let _ = child.wait();
}

fn sbx_5_proc_keys_do_not_show_host_keys(who: Who) {
    let desc = format!(
        "airlock-sentinel-key-{}-{}",
        std::process::id(),
        who == Who::Invoker
    );
    with_host_key(who, &desc, || {
        let r = exec_sh(who, &[], "cat /proc/keys /proc/key-users; echo end");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.stdout(), "end\n", "both files are empty inside: {r:?}");
        // Positive control: the host's /proc/keys shows the sentinel to
        // the same user.
        let c = exec_sh(who, &["--driver", "uncontained"], "cat /proc/keys");
        assert!(c.stdout().contains(&desc), "{c:?}");
    });
}
both_users!(sbx_5_proc_keys_do_not_show_host_keys);

const SOCKETPAIR_PROBE: &str = r#"
import socket
for name, fam, typ in [("netlink", socket.AF_NETLINK, socket.SOCK_RAW), ("vsock", 40, socket.SOCK_STREAM), ("unix", socket.AF_UNIX, socket.SOCK_STREAM)]:
    try:
        a, b = socket.socketpair(fam, typ, 0)
        print(name, 0)
    except OSError as e:
        print(name, e.errno)
"#;

fn sbx_3_socketpair_netlink_is_refused_before_creation(who: Who) {
    let r = py(who, &[], SOCKETPAIR_PROBE);
    let e = probe_errnos_space(&r);
    // EPERM from the filter, before any socket exists.
    assert_eq!(e.get("netlink"), Some(&1), "{r:?}");
    assert_eq!(e.get("vsock"), Some(&1), "{r:?}");
    assert_eq!(e.get("unix"), Some(&0), "AF_UNIX pairs still work: {r:?}");
    // Positive control: uncontained, the kernel creates the socket and only
    // then refuses the pair (EOPNOTSUPP).
    let c = py(who, &["--driver", "uncontained"], SOCKETPAIR_PROBE);
    let ce = probe_errnos_space(&c);
    assert_eq!(ce.get("netlink"), Some(&95), "{c:?}");
}
both_users!(sbx_3_socketpair_netlink_is_refused_before_creation);

fn probe_errnos_space(r: &Exec) -> std::collections::BTreeMap<String, i32> {
    r.stdout()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Takes every inotify instance it can, says so in `$W/ready`, and holds
/// them until `$W/go` exists.
const INOTIFY_HOG: &str = r#"
import ctypes, os, sys, time
w = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
with open(w + "/ready.tmp", "w") as f:
    f.write(str(len(fds)))
os.rename(w + "/ready.tmp", w + "/ready")
deadline = time.monotonic() + 60
while not os.path.exists(w + "/go") and time.monotonic() < deadline:
    time.sleep(0.02)
print(len(fds))
"#;

const INOTIFY_ONE: &str = "import ctypes; libc = ctypes.CDLL(None, use_errno=True); fd = libc.inotify_init1(0); print(0 if fd >= 0 else ctypes.get_errno())";

/// Runs the hog with `opts` and returns (instances it took, the errno of
/// `who`'s own `inotify_init1` while the hog held them).
fn inotify_while_hogged(who: Who, opts: &[&str]) -> (String, String) {
    let w = workdir(who);
    let wp = path_str(w.path()).to_string();
    let mut args: Vec<String> = vec![
        "sandbox".into(),
        "exec".into(),
        "--json".into(),
        "--writable".into(),
        wp.clone(),
    ];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.extend([
        "--".into(),
        "/usr/bin/python3".into(),
        "-c".into(),
        INOTIFY_HOG.into(),
        wp.clone(),
    ]);
    let child = airlock(who)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !w.path().join("ready").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(w.path().join("ready").exists(), "the hog never got ready");
    let mine = run_as(who, "/usr/bin/python3")
        .args(["-c", INOTIFY_ONE])
        .output()
        .unwrap();
    std::fs::write(w.path().join("go"), "").unwrap();
    let _ = child.wait_with_output().unwrap();
    (
        std::fs::read_to_string(w.path().join("ready")).unwrap(),
        String::from_utf8_lossy(&mine.stdout).trim().to_string(),
    )
}

fn sbx_3_inotify_exhaustion_is_confined(who: Who) {
    preflight_pid_isolation_and_limits(who, &[]);
    let (took, mine) = inotify_while_hogged(who, &[]);
    assert_eq!(
        mine, "0",
        "the invoker's inotify_init1 must still work (sandbox took {took})"
    );
    let took: u32 = took.parse().unwrap();
    assert!(took > 0 && took <= 16, "capped share: {took}");
    // Positive control: uncontained, the same hog takes every instance of
    // the user, and the user's own call fails with EMFILE.
    let (took, mine) = inotify_while_hogged(who, &["--driver", "uncontained"]);
    assert_eq!(mine, "24", "control: uncontained took {took}");
}
both_users!(sbx_3_inotify_exhaustion_is_confined);

fn sbx_3_writable_root_budget_is_enforced_and_committed(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    std::fs::write(w.path().join("old"), "old").unwrap();
    std::fs::write(w.path().join("doomed"), "x").unwrap();
    if let Some((uid, gid)) = test_user().filter(|_| who == Who::Unprivileged) {
        for f in ["old", "doomed"] {
            std::os::unix::fs::chown(w.path().join(f), Some(uid), Some(gid)).unwrap();
        }
    }
    let script = format!(
        "cd {wp} && df -k . | tail -1 && echo small > small && rm doomed && mkdir -p sub && echo deep > sub/deep \
         && (head -c 8388608 /dev/zero > big; echo big $?)"
    );
    let r = exec_sh(who, &["--disk", "4", "--writable", wp], &script);
    assert!(r.guarantee("disk_budget"), "{r:?}");
    assert!(
        r.stdout().contains("big 1"),
        "8 MiB must not fit in 4: {r:?}"
    );
    assert!(
        r.json["stderr"].to_string().contains("No space left"),
        "{r:?}"
    );
    assert!(r.hit("disk"), "{r:?}");
    // The sandbox sees the budget, not the host file system's free space.
    let size_k: u64 = r
        .stdout()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(size_k <= 4096, "{r:?}");
    // What fit is on the host after the run, the deletion too.
    assert_eq!(
        std::fs::read_to_string(w.path().join("small")).unwrap(),
        "small\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.path().join("sub/deep")).unwrap(),
        "deep\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.path().join("old")).unwrap(),
        "old"
    );
    assert!(!w.path().join("doomed").exists());
    assert!(std::fs::metadata(w.path().join("big")).unwrap().len() < 4 << 20);
    // A required budget that cannot be set (no mount namespace at the
    // fallback level) refuses the launch.
    let req = exec(
        who,
        &[
            "--require-containment",
            "--disk",
            "4",
            "--driver",
            "landlock",
        ],
        &["/bin/true"],
    );
    assert_eq!(req.code, 125, "{req:?}");

    // Positive control: without --disk the same write succeeds.
    let c = exec_sh(
        who,
        &["--writable", wp],
        &format!("head -c 8388608 /dev/zero > {wp}/big2; echo big $?"),
    );
    assert!(c.stdout().contains("big 0"), "{c:?}");
    assert_eq!(
        std::fs::metadata(w.path().join("big2")).unwrap().len(),
        8 << 20
    );
}
both_users!(sbx_3_writable_root_budget_is_enforced_and_committed);

fn sbx_3_unix_socket_in_a_readonly_root_is_refused(who: Who) {
    use std::os::unix::fs::PermissionsExt;
    let ro = workdir(who);
    std::fs::create_dir(ro.path().join("run")).unwrap();
    let sock = ro.path().join("run/daemon.sock");
    // Root-owned when the tests run as root, reachable by anyone.
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let probe = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1]); print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n";
    let rp = path_str(ro.path());
    let sp = path_str(&sock);
    let o = airlock(who)
        .args([
            "sandbox",
            "exec",
            "--readonly",
            rp,
            "--",
            "/usr/bin/python3",
            "-c",
            probe,
            sp,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("Unix socket") && stderr.contains(sp),
        "{stderr}"
    );
    // Positive controls: uncontained, the probe connects (and the peer sees
    // the invoker's credentials); without the socket the root is accepted.
    listener.set_nonblocking(true).unwrap();
    let c = exec(
        who,
        &["--driver", "uncontained"],
        &["/usr/bin/python3", "-c", probe, sp],
    );
    assert_eq!(c.stdout().trim(), "connected", "{c:?}");
    drop(listener);
    std::fs::remove_file(&sock).unwrap();
    let ok = exec(who, &["--readonly", rp], &["/bin/true"]);
    assert_eq!(ok.code, 0, "{ok:?}");
}
both_users!(sbx_3_unix_socket_in_a_readonly_root_is_refused);

/// The cgroup directories named after broker `pid`, in every hierarchy
/// this test process belongs to.
fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut found = Vec::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if !right.starts_with("cgroup") {
            continue;
        }
        let f: Vec<&str> = left.split(' ').collect();
        let (root, point) = (f[3], f[4]);
        for l in own.lines() {
            let path = l.splitn(3, ':').nth(2).unwrap_or("");
            let rel = path
                .strip_prefix(root)
                .unwrap_or(path)
                .trim_start_matches('/');
            let dir = std::path::Path::new(point).join(rel);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    let n = e.file_name().to_string_lossy().into_owned();
                    if n.starts_with(&format!("airlock-{pid}-")) && !found.contains(&e.path()) {
                        found.push(e.path());
                    }
                }
            }
        }
    }
    found
}

fn sbx_4_no_cgroup_directory_is_left_after_kill_9_and_a_restart(who: Who) {
    let w = workdir(who);
    let wp = path_str(w.path());
    let mut broker = airlock(who)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--memory",
            "256",
            "--writable",
            wp,
            "--",
            "/bin/sh",
            "-c",
        ])
        .arg(format!("touch {wp}/started; sleep 120"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = broker.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !w.path().join("started").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        w.path().join("started").exists(),
        "the workload never started"
    );
    // Positive control: the running broker had its groups (where cgroups
    // are writable; an unprivileged invoker on a host without delegation
    // has none, and the report below says so). Whether they are still
    // there right after the kill is not checked: a broker starting
    // concurrently (another test) may already have removed them.
    let groups = cgroups_of(pid);
    broker.kill().unwrap(); // SIGKILL
    let _ = broker.wait();
    // The restart: a new broker's first launch.
    let report = exec(who, &["--memory", "256"], &["/bin/true"]);
    assert_eq!(report.code, 0, "{report:?}");
    if report.guarantee("cgroup_kill") {
        assert!(!groups.is_empty(), "a cgroup was reported but none found");
    } else {
        assert!(groups.is_empty(), "{groups:?}");
    }
    let left: Vec<_> = groups.iter().filter(|g| g.exists()).collect();
    assert!(left.is_empty(), "left behind after a restart: {left:?}");
    assert!(cgroups_of(pid).is_empty());
    // The sandbox itself died with its broker.
    let marker = format!("touch {wp}/started");
    let deadline = Instant::now() + Duration::from_secs(10);
    while count_processes_with(&marker) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(count_processes_with(&marker), 0);
}
both_users!(sbx_4_no_cgroup_directory_is_left_after_kill_9_and_a_restart);
