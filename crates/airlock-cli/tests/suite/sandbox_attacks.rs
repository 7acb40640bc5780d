//! Attacks on the sandbox from inside the sandbox (SBX-3, SBX-4, SBX-5).
//! Each case has a positive control showing that the check can fail: the
//! same probe run with the `uncontained` driver finds what the sandbox hides.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::both_users;
use crate::suite::support::*;
use crate::suite::upstream;

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

/// A name unique to this test process and user kind.
fn tag(who: Who) -> String {
    format!("{}-{}", std::process::id(), u8::from(who == Who::Invoker))
}

/// Files and directories planted on the host for one test, removed when it ends, pass or
/// fail. Planting must succeed: a control cannot find what was never written.
#[derive(Default)]
struct Planted(Vec<PathBuf>);

impl Planted {
    /// A file holding `content`, mode 0600, owned by `who`.
    fn file(&mut self, who: Who, path: &Path, content: &str) {
        std::fs::write(path, content).unwrap_or_else(|e| panic!("plant {}: {e}", path.display()));
        self.0.push(path.to_path_buf());
        own(who, path, 0o600);
    }

    /// A directory, mode 0700, owned by `who`.
    fn dir(&mut self, who: Who, path: &Path) {
        std::fs::create_dir_all(path).unwrap_or_else(|e| panic!("plant {}: {e}", path.display()));
        self.0.push(path.to_path_buf());
        own(who, path, 0o700);
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
        }
    }
}

fn own(who: Who, path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let (Who::Unprivileged, Some((uid, gid))) = (who, test_user()) {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

fn sbx_5_sentinel_credentials_are_found_nowhere(who: Who) {
    let tag = tag(who);
    let mut planted = Planted::default();
    let tmp_file = std::env::temp_dir().join(format!("airlock-sentinel-{tag}"));
    planted.file(who, &tmp_file, SENTINEL);
    // The invoking user's home: root's own for the invoker; for the test user, one made for
    // it outside /tmp (where homes live), which airlock is told about through HOME.
    let home = match who {
        Who::Invoker => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())),
        Who::Unprivileged => {
            let h = PathBuf::from(format!("/home/airlock-itest-home-{tag}"));
            planted.dir(who, &h);
            h
        }
    };
    let home_file = home.join(format!(".airlock-sentinel-{tag}"));
    planted.file(who, &home_file, SENTINEL);
    let with_home = || {
        let mut c = airlock(who);
        c.env("HOME", &home);
        c
    };
    let reversed: String = SENTINEL.chars().rev().collect();
    let base = ["/usr/bin/python3", "-c", SENTINEL_SCAN, reversed.as_str()];
    let (tmp_str, home_str) = (path_str(&tmp_file), path_str(&home_file));

    // Inside: everything the workload can list, from the root down, plus the
    // exact paths planted on the host.
    let mut args = base.to_vec();
    args.extend(["/", tmp_str, home_str]);
    let inside = exec_from(with_home(), &[], &args);
    assert_eq!(inside.code, 0, "{inside:?}");
    assert_eq!(
        inside.stdout().trim(),
        "",
        "sentinel reachable inside the sandbox"
    );

    // Positive control: the same probe, uncontained, finds the broker's environment and
    // both planted files (given by path: the host's / and /tmp are large).
    let mut args = base.to_vec();
    args.extend([tmp_str, home_str]);
    let control = exec_from(with_home(), &["--driver", "uncontained"], &args);
    let found: Vec<&str> = control.stdout().lines().collect();
    assert!(
        found.iter().any(|f| f.starts_with("/proc/")),
        "control must see the broker's environ: {found:?}"
    );
    for planted in [tmp_str, home_str] {
        assert!(
            found.contains(&planted),
            "control must find {planted}: {found:?}"
        );
    }
}
both_users!(sbx_5_sentinel_credentials_are_found_nowhere);

/// Tries every way out to listeners on the host's loopback: a TCP connect and a direct HTTP
/// request (no proxy) to argv[1], a DNS lookup through the system resolver, a DNS query and a
/// UDP datagram to the DNS server on argv[2], a datagram to a public address. One line each.
const NETWORK_PROBE: &str = r#"
import socket, struct, sys, urllib.request
tcp_port, dns_port = int(sys.argv[1]), int(sys.argv[2])
def out(*a):
    print(*a, flush=True)
try:
    socket.create_connection(("127.0.0.1", tcp_port), timeout=5).close()
    out("tcp:connected")
except OSError as e:
    out("tcp:refused", e.errno)
try:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out("http_direct:", direct.open(f"http://127.0.0.1:{tcp_port}/direct", timeout=5).status)
except Exception as e:
    out("http_direct:failed", type(e).__name__)
try:
    socket.getaddrinfo("example.com", 443)
    out("dns_system:resolved")
except OSError:
    out("dns_system:failed")
query = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\x07airlock\x04test\x00" + struct.pack(">HH", 1, 1)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect(("127.0.0.1", dns_port))
    s.send(query)
    out("dns_host:answered", socket.inet_ntoa(s.recv(512)[-4:]))
except OSError as e:
    out("dns_host:failed", e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"airlock-udp-probe", ("127.0.0.1", dns_port))
    out("udp_host:sent")
except OSError as e:
    out("udp_host:failed", e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
    out("udp_public:sent")
except OSError as e:
    out("udp_public:failed", e.errno)
"#;

/// SBX-3/NET-1: with `opts` (none, or an egress rule) nothing the workload sends reaches a
/// listener on the host's loopback, TCP, DNS or UDP, and a public address is unroutable.
/// Positive control: the same probe uncontained reaches every host listener (the TCP upstream
/// records the request, the DNS server answers and records the query and the datagram).
pub(crate) fn no_route_out(who: Who, opts: &[&str]) {
    let up = upstream::start();
    let dns = upstream::dns();
    let (tcp, udp) = (up.port.to_string(), dns.port.to_string());
    let args = ["/usr/bin/python3", "-c", NETWORK_PROBE, &tcp, &udp];

    let inside = exec(who, opts, &args);
    let out = inside.stdout();
    for line in [
        "tcp:refused",
        "http_direct:failed",
        "dns_system:failed",
        "dns_host:failed",
        "udp_public:failed 101", // ENETUNREACH: no route at all
    ] {
        assert!(out.contains(line), "{line}: {inside:?}");
    }
    assert!(inside.guarantee("network_namespace"), "{inside:?}");

    // Positive control: uncontained, the same probe reaches the host's listeners.
    let control = exec(who, &["--driver", "uncontained"], &args);
    let c = control.stdout();
    assert!(c.contains("tcp:connected"), "{control:?}");
    assert!(c.contains("http_direct: 200"), "{control:?}");
    assert!(
        c.contains(&format!("dns_host:answered {}", upstream::DNS_ANSWER)),
        "{control:?}"
    );
    // Everything the sandbox sent went first: had any of it reached the host, it would be
    // recorded before the control's query and datagram, which are all there is.
    let got = dns.wait_for(2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        &got[0][..2],
        &[0x42, 0x42],
        "the control's query comes first"
    );
    assert_eq!(got[1], b"airlock-udp-probe");
    let direct: Vec<_> = up
        .requests()
        .into_iter()
        .filter(|r| r.path == "/direct")
        .collect();
    assert_eq!(
        direct.len(),
        1,
        "only the control reached the upstream: {direct:?}"
    );
}

fn sbx_3_no_route_out_to_host_loopback_or_dns(who: Who) {
    no_route_out(who, &[]);
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

/// Sets up, in the private mount namespace it runs in, a fresh tmpfs on /run (so on /var/run
/// too) with listening Unix sockets at Docker's and D-Bus's well-known paths, held by a
/// background process; then runs "$@" and stops that process. The host may run neither
/// daemon; the test needs real sockets there, without touching the host's /run.
const DAEMON_SOCKETS: &str = r#"set -e
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/dbus
holder=$(python3 -c '
import os, signal, socket
socks = []
for path in ("/run/docker.sock", "/run/dbus/system_bus_socket"):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    os.chmod(path, 0o666)
    s.listen(8)
    socks.append(s)
pid = os.fork()
if pid:
    print(pid)
else:
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.pause()
')
set +e
"$@"
status=$?
kill "$holder"
exit $status
"#;

/// `airlock sandbox exec --json OPTS -- CMD` as `who`, inside a private mount namespace set up
/// by [`DAEMON_SOCKETS`].
fn exec_with_daemon_sockets(who: Who, opts: &[&str], cmd: &[&str]) -> Exec {
    let base = airlock(who);
    let mut c = std::process::Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(DAEMON_SOCKETS)
        .arg("sh")
        .arg(base.get_program())
        .args(base.get_args())
        .current_dir("/");
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    exec_from(c, opts, cmd)
}

/// Prints the number of processes it sees, then for each path given: `VISIBLE:` when it
/// exists, `CONNECTED:` when it is a Unix socket that accepts a connection, `READ:` when it is
/// a directory whose `kek-v1` can be read.
const VISIBILITY_PROBE: &str = r#"
import os, socket, sys
print("procs", sum(1 for p in os.listdir("/proc") if p.isdigit()))
for p in sys.argv[1:]:
    if os.path.lexists(p):
        print("VISIBLE:" + p)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(p)
        print("CONNECTED:" + p)
    except OSError:
        pass
    try:
        if open(os.path.join(p, "kek-v1")).read():
            print("READ:" + p)
    except OSError:
        pass
"#;

fn sbx_5_host_processes_run_home_and_key_directory_are_invisible(who: Who) {
    if !require_root("a private mount namespace for the Docker and D-Bus sockets") {
        return;
    }
    // Key directories where deployments put them, none under /tmp (the sandbox's /tmp is
    // private anyway): the state directories, /etc, a home, and root's own home.
    let tag = tag(who);
    let mut planted = Planted::default();
    let mut key_dirs: Vec<PathBuf> = ["/var/lib", "/srv", "/opt", "/etc", "/home"]
        .iter()
        .map(|base| Path::new(base).join(format!("airlock-itest-keys-{tag}")))
        .collect();
    if who == Who::Invoker {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        key_dirs.push(Path::new(&home).join(format!(".airlock-itest-keys-{tag}")));
    }
    for d in &key_dirs {
        planted.dir(who, d);
        planted.file(who, &d.join("kek-v1"), SENTINEL);
    }
    let sockets = [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/dbus/system_bus_socket",
    ];
    let mut paths: Vec<&str> = vec!["/run", "/var/run", "/root", "/home"];
    paths.extend(sockets);
    paths.extend(key_dirs.iter().map(|d| path_str(d)));
    let mut args = vec!["/usr/bin/python3", "-c", VISIBILITY_PROBE];
    args.extend(&paths);

    let r = exec_with_daemon_sockets(who, &[], &args);
    let out = r.stdout();
    let nprocs: usize = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("procs "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(999);
    assert!(nprocs <= 4, "sandbox sees {nprocs} processes: {r:?}");
    for leak in ["VISIBLE:", "CONNECTED:", "READ:"] {
        assert!(!out.contains(leak), "{out}");
    }

    // Positive control: uncontained, in the same set-up, sees the host's processes, every
    // path, connects to both daemons' sockets and reads every key directory.
    let c = exec_with_daemon_sockets(who, &["--driver", "uncontained"], &args);
    let seen = c.stdout();
    let n: usize = seen
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("procs "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(n > 4, "control should see host processes: {c:?}");
    for p in &paths {
        assert!(
            seen.contains(&format!("VISIBLE:{p}\n")),
            "control: {p}: {seen}"
        );
    }
    for s in sockets {
        assert!(
            seen.contains(&format!("CONNECTED:{s}\n")),
            "control: {s}: {seen}"
        );
    }
    for d in &key_dirs {
        assert!(
            seen.contains(&format!("READ:{}\n", d.display())),
            "control: {}: {seen}",
            d.display()
        );
    }
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
    // The filter refuses TIOCSTI by its request number, whatever the descriptor (here not a
    // terminal: the kernel itself would say ENOTTY, as in the control).
    assert_eq!(
        e.get("tiocsti"),
        Some(&EPERM),
        "TIOCSTI not refused by the filter: {e:?}"
    );

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
    assert_eq!(
        ce.get("tiocsti"),
        Some(&25),
        "control: ENOTTY uncontained: {ce:?}"
    );
}
both_users!(sbx_3_dangerous_syscalls_are_refused_inside);

/// Waits on a Unix socket at argv[1] for a terminal descriptor, makes it its controlling
/// terminal (the workload is a session leader), then tries to push a byte into the terminal's
/// input with TIOCSTI. Prints `isatty`, `ctty` and `tiocsti` with an errno (0 for success).
const TIOCSTI_PROBE: &str = r#"
import fcntl, os, socket, sys, termios
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(1)
conn, _ = srv.accept()
_, fds, _, _ = socket.recv_fds(conn, 16, 1)
tty = fds[0]
print("isatty:", os.isatty(tty))
try:
    fcntl.ioctl(tty, termios.TIOCSCTTY, 0)
    print("ctty:0")
except OSError as e:
    print(f"ctty:{e.errno}")
try:
    fcntl.ioctl(tty, termios.TIOCSTI, b"x")
    print("tiocsti:0")
except OSError as e:
    print(f"tiocsti:{e.errno}")
"#;

/// Runs [`TIOCSTI_PROBE`] as `who` with `opts`, hands it a real terminal (the slave side of a
/// fresh pseudo-terminal, in raw mode) and returns its output and whatever was pushed into the
/// terminal's input.
fn tiocsti_on_a_real_terminal(who: Who, opts: &[&str]) -> (Exec, Vec<u8>) {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd;
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut mode = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
    nix::sys::termios::cfmakeraw(&mut mode);
    nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &mode).unwrap();
    let w = workdir(who);
    let sock = w.path().join("tty.sock");
    let child = airlock(who)
        .args([
            "sandbox",
            "exec",
            "--json",
            "--writable",
            path_str(w.path()),
        ])
        .args(opts)
        .args([
            "--",
            "/usr/bin/python3",
            "-c",
            TIOCSTI_PROBE,
            path_str(&sock),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The workload creates the socket in its writable root; connect once it listens.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the probe never listened on {}: {e}", sock.display()),
        }
    };
    let fds = [pty.slave.as_raw_fd()];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[std::io::IoSlice::new(b"t")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let r = Exec {
        json,
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    // Whatever TIOCSTI pushed is waiting in the terminal's input (raw mode: no line needed).
    nix::fcntl::fcntl(
        &pty.slave,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut pushed = vec![0u8; 64];
    let n = nix::unistd::read(&pty.slave, &mut pushed).unwrap_or(0);
    pushed.truncate(n);
    (r, pushed)
}

fn sbx_3_tiocsti_into_a_real_terminal_is_refused(who: Who) {
    let (r, pushed) = tiocsti_on_a_real_terminal(who, &[]);
    let e = probe_errnos(&r);
    // The workload really holds a terminal, as its controlling terminal: without the filter
    // the kernel would accept TIOCSTI (see the control).
    assert!(r.stdout().contains("isatty: True"), "{r:?}");
    assert_eq!(e.get("ctty"), Some(&0), "{r:?}");
    assert_eq!(
        e.get("tiocsti"),
        Some(&1),
        "TIOCSTI not refused by the filter: {r:?}"
    );
    assert!(
        pushed.is_empty(),
        "bytes pushed into the terminal: {pushed:?}"
    );

    // Positive control: uncontained, the same descriptor accepts TIOCSTI and the byte lands
    // in the terminal's input.
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
    assert!(
        legacy.trim() != "0" || is_root() && who == Who::Invoker,
        "this host disables TIOCSTI for unprivileged callers (dev.tty.legacy_tiocsti = 0): \
         the control cannot show the check failing"
    );
    let (c, pushed) = tiocsti_on_a_real_terminal(who, &["--driver", "uncontained"]);
    assert_eq!(probe_errnos(&c).get("tiocsti"), Some(&0), "control: {c:?}");
    assert_eq!(
        pushed, b"x",
        "control: the byte should be in the terminal's input"
    );
}
both_users!(sbx_3_tiocsti_into_a_real_terminal_is_refused);

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
    // RLIMIT_NPROC never applies to host uid 0 (the kernel exempts root's user), which is
    // what the workload is under a root broker: then only the pids cgroup limits processes.
    let limited = if is_root() && who == Who::Invoker {
        r.guarantee("pids_limit")
    } else {
        r.guarantee("pids_limit") || r.guarantee("rlimits")
    };
    assert!(limited, "preflight: no process limit in force: {r:?}");
}

/// Forks up to argv[1] children that wait on a pipe (so all are alive at once), stopping at
/// the first refused fork; prints how many were made and that fork's errno (0: none refused).
const FORK_COUNT: &str = r#"
import os, sys
want, made, err = int(sys.argv[1]), 0, 0
r, w = os.pipe()
while made < want:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    made += 1
os.close(w)
print(made, err)
"#;

fn fork_count(r: &Exec) -> (u32, i32) {
    let mut it = r
        .stdout()
        .split_whitespace()
        .map(|v| v.parse::<i64>().unwrap_or(-1));
    match (it.next(), it.next()) {
        (Some(made), Some(err)) => (made as u32, err as i32),
        _ => panic!("fork counter printed nothing: {r:?}"),
    }
}

fn sbx_4_fork_bomb_stops_at_the_pids_limit(who: Who) {
    let opts = ["--pids", "64", "--timeout", "20"];
    preflight_pid_isolation_and_limits(who, &opts);
    // As root the limit is a pids cgroup, which also reports hits; as an unprivileged user
    // it is RLIMIT_NPROC, which refuses forks the same way but reports nothing.
    let by_cgroup = who == Who::Invoker && is_root();
    // kill(-1) inside a PID namespace only reaches the sandbox itself.
    let name = format!("bomb{}{}", std::process::id(), who == Who::Invoker);
    let r = exec_sh(
        who,
        &opts,
        &format!(
            "{name}() {{ {name} | {name} & }}; {name}; sleep 1; kill -9 -1 2>/dev/null; echo survived"
        ),
    );
    // The limit was hit, not merely some outcome: forks were refused (the shell says so).
    let stderr = r.json["stderr"].as_str().unwrap_or("");
    assert!(stderr.contains("Cannot fork"), "no fork was refused: {r:?}");
    if by_cgroup {
        assert!(
            r.guarantee("pids_limit"),
            "as root the pids cgroup must apply: {r:?}"
        );
        assert!(r.hit("pids"), "the pids cgroup must report the hit: {r:?}");
    }
    // The host stays responsive: a fresh process starts promptly.
    let t = Instant::now();
    let ok = std::process::Command::new("/bin/true").status().unwrap();
    assert!(ok.success());
    assert!(t.elapsed() < Duration::from_secs(10));
    // Nothing of the bomb is left.
    assert_eq!(count_processes_with(&name), 0);

    // Counted: under the limit of 64 a fork is refused with EAGAIN before 64 exist.
    let counted = exec(who, &opts, &["/usr/bin/python3", "-c", FORK_COUNT, "200"]);
    let (made, err) = fork_count(&counted);
    assert!(
        made < 64 && err == 11,
        "made {made}, errno {err}: {counted:?}"
    );
    if by_cgroup {
        assert!(counted.hit("pids"), "{counted:?}");
    }
    // Positive control: with room for them, the same probe makes 100 children, nothing
    // refused and nothing reported.
    let control = exec(
        who,
        &["--pids", "256", "--timeout", "20"],
        &["/usr/bin/python3", "-c", FORK_COUNT, "100"],
    );
    assert_eq!(fork_count(&control), (100, 0), "{control:?}");
    assert!(!control.hit("pids"), "{control:?}");
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

/// Prints the mount options of each /proc entry named in argv, then tries writes that would
/// be harmless even if they got through: `h` to /proc/sysrq-trigger (the kernel logs its help
/// text; where the kernel has the file) and the current value back to kernel.core_pattern and
/// to the default IRQ affinity. `write PATH ERRNO` (0: written) or `write PATH absent`.
const PROC_WRITE_PROBE: &str = r#"
import os, sys
mounts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    mounts[f[4]] = f[5]
for e in sys.argv[1:]:
    print("mount", e, mounts.get("/proc/" + e, "none"))
def write(path, data=None):
    try:
        if data is None:
            data = open(path, "rb").read()
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        print("write", path, 0)
    except FileNotFoundError:
        print("write", path, "absent")
    except OSError as e:
        print("write", path, e.errno)
write("/proc/sysrq-trigger", b"h")
write("/proc/sys/kernel/core_pattern")
write("/proc/irq/default_smp_affinity")
"#;

const PROC_WRITES: [&str; 3] = [
    "/proc/sysrq-trigger",
    "/proc/sys/kernel/core_pattern",
    "/proc/irq/default_smp_affinity",
];

fn sbx_3_proc_sys_and_trigger_files_refuse_writes(who: Who) {
    // Writes under /proc/sys run only once isolation and limits are proven (even harmless ones).
    preflight_pid_isolation_and_limits(who, &[]);
    let entries: Vec<&str> = airlock_sandbox::init::PROC_READ_ONLY
        .iter()
        .copied()
        .filter(|e| Path::new("/proc").join(e).exists())
        .collect();
    assert!(
        entries.contains(&"sys") && entries.contains(&"irq"),
        "{entries:?}"
    );
    let mut args = vec!["/usr/bin/python3", "-c", PROC_WRITE_PROBE];
    args.extend(&entries);
    let r = exec(who, &[], &args);
    let out = r.stdout();
    for e in &entries {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("mount {e} ")))
            .unwrap_or("");
        assert!(
            line.ends_with(" ro") || line.contains(" ro,"),
            "/proc/{e} is not a read-only mount: {line:?} in {r:?}"
        );
    }
    let write_result = |out: &str, path: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("write {path} ")))
            .unwrap_or("missing")
            .to_string()
    };
    let as_root = is_root() && who == Who::Invoker;
    for path in PROC_WRITES {
        let got = write_result(out, path);
        if !Path::new(path).exists() {
            // This kernel has no such file (no CONFIG_MAGIC_SYSRQ, say): nothing to attack.
            assert_eq!(got, "absent", "{path}: {r:?}");
            eprintln!("{path} does not exist on this host; its write is not exercised");
        } else if as_root {
            // Host uid 0 passes the permission check; the read-only mount is what refuses
            // (EROFS; Landlock, behind it, would say EACCES).
            assert_eq!(got, "30", "{path}: {r:?}");
        } else {
            // The permission check (EACCES) comes before the mount's (EROFS).
            assert!(got == "13" || got == "30", "{path}: {r:?}");
        }
    }
    // Control: /proc itself is a separate, read-write mount.
    let c = exec_sh(
        who,
        &[],
        "awk '$5 == \"/proc\" { print $6 }' /proc/self/mountinfo",
    );
    assert!(c.stdout().trim().starts_with("rw"), "{c:?}");
    // Positive control (root, whose host uid passes the permission check): outside the
    // sandbox the same writes go through, so only the mounts stop them inside.
    if as_root {
        let c = exec(who, &["--driver", "uncontained"], &args);
        for path in PROC_WRITES.iter().filter(|p| Path::new(p).exists()) {
            assert_eq!(
                write_result(c.stdout(), path),
                "0",
                "control: {path}: {c:?}"
            );
        }
    }
}
both_users!(sbx_3_proc_sys_and_trigger_files_refuse_writes);

/// Runs `tool ARG` through the broker in this process (the airlock binary as the sandbox's
/// init), with the tool's directory bound read-only, calling `between` after the broker's
/// own identity check and the spawn, before the sandbox starts the workload.
fn launch_with(
    tool: &Path,
    driver: airlock_sandbox::DriverChoice,
    between: &mut dyn FnMut(),
) -> Result<airlock_sandbox::RunResult, airlock_sandbox::LaunchError> {
    let dir = tool.parent().unwrap().to_path_buf();
    let spec = airlock_sandbox::SandboxSpec::parse(airlock_sandbox::SandboxRequest {
        argv: vec![path_str(tool).to_string(), "original".to_string()],
        readonly: vec![dir.clone()],
        cwd: Some(dir),
        timeout: Some(Duration::from_secs(20)),
        driver,
        ..Default::default()
    })
    .unwrap();
    airlock_sandbox::Broker::with_init_exe(airlock_bin()).run_with_before_start(
        &spec,
        airlock_sandbox::Hooks::default(),
        between,
    )
}

/// SBX-2 inside the sandbox: the executable is swapped (renamed over) after the broker has
/// checked it and spawned the sandbox, before the sandbox execs it; the sandbox's own re-check
/// refuses the launch, for a script (executed by path) and for an ELF binary (executed
/// through the hashed descriptor). Controls: the same launch without the swap runs the
/// original, and the swap did happen after the broker's check (the hook runs only once the
/// broker's own check passed and the sandbox was spawned).
#[test]
fn sbx_2_an_executable_swapped_after_the_brokers_check_is_refused_inside() {
    use airlock_sandbox::{DriverChoice, LaunchError, exe::ExeError};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("airlock-itest-swap-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = dir.path().join("tool");
    let evil = dir.path().join("evil");
    /// An executable: a script's text, or a copy of a system binary.
    #[derive(Clone, Copy)]
    enum Program {
        Script(&'static str),
        CopyOf(&'static str),
    }
    let install = |path: &Path, program: Program| {
        match program {
            Program::Script(text) => std::fs::write(path, text).unwrap(),
            Program::CopyOf(binary) => {
                std::fs::copy(binary, path).unwrap();
            }
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // (what, the original, what is swapped in)
    let cases = [
        (
            "script",
            Program::Script("#!/bin/sh\necho \"$1\"\n"),
            Program::Script("#!/bin/sh\necho EVIL\n"),
        ),
        (
            "ELF",
            Program::CopyOf("/bin/echo"),
            Program::CopyOf("/bin/uname"),
        ),
    ];
    for (what, original, swapped_in) in cases {
        install(&tool, original);
        // Control: without a swap the original runs.
        let ok = launch_with(&tool, DriverChoice::Namespaces, &mut || {}).unwrap();
        assert_eq!(ok.stdout.text(), "original\n", "{what}");

        install(&evil, swapped_in);
        let mut swapped = false;
        let refused = launch_with(&tool, DriverChoice::Namespaces, &mut || {
            std::fs::rename(&evil, &tool).unwrap();
            swapped = true;
        });
        assert!(
            swapped,
            "{what}: the broker refused before the window: {refused:?}"
        );
        assert!(
            matches!(refused, Err(LaunchError::Executable(ExeError::Changed(_)))),
            "{what}: {refused:?}"
        );
    }
}

/// SBX-2: an ELF binary runs from the descriptor that was hashed: the kernel names a program
/// executed through a descriptor `/dev/fd/N` in its auxiliary vector (AT_EXECFN), and names
/// the path otherwise. Control: uncontained executes by path.
fn sbx_2_elf_binaries_are_executed_through_the_hashed_descriptor(who: Who) {
    let probe = "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.getauxval.restype = ctypes.c_char_p\nlibc.getauxval.argtypes = [ctypes.c_ulong]\nprint(libc.getauxval(31).decode())";
    let r = py(who, &[], probe);
    assert!(r.stdout().starts_with("/dev/fd/"), "{r:?}");
    assert_eq!(
        r.json["executable"]["sha256"].as_str().map(str::len),
        Some(64)
    );
    let c = py(who, &["--driver", "uncontained"], probe);
    assert_eq!(
        c.stdout().trim(),
        c.json["executable"]["path"].as_str().unwrap_or("?"),
        "control: {c:?}"
    );
}
both_users!(sbx_2_elf_binaries_are_executed_through_the_hashed_descriptor);
