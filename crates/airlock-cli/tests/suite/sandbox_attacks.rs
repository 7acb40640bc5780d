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
    assert!(r.guarantee("memory_limit"), "{r:?}");
    if r.json["containment"]["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| {
            g["name"] == "memory_limit" && g["detail"].as_str().unwrap_or("").contains("via cgroup")
        })
    {
        assert!(r.hit("memory"), "cgroup OOM kill must be reported: {r:?}");
        assert_eq!(r.json["signal"], 9);
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
