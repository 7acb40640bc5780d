//! The thread that accepts a sandbox's listener (issue 14, `proxy/accept.rs`) ends with it: after
//! `SandboxEgress::shutdown`, and after the proxy is dropped without one, a new connection is
//! refused and no descriptor of the listening socket is left in this process. A connection
//! accepted before the stop is still served.
//!
//! How "no descriptor is left" is observed: the listening socket's inode is read from
//! `/proc/self/fd` before the proxy takes the listener, and every descriptor of this process is
//! then looked up for a link to that inode. The accepting thread owns that descriptor, so each
//! test first finds it (the positive control of the lookup).
//!
//! How "refused" is observed: each listener is bound to a loopback address of its own
//! (`127.A.B.C`, from this process's id and a counter), not to 127.0.0.1. A port freed by a
//! stopped listener may be handed to another process on the machine at once, but that
//! process binds its own address (127.0.0.1, say), so a connection to this listener's address
//! and port is still refused; only a socket bound to every address (0.0.0.0, or :: taking
//! IPv4 too) could answer it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::NullLog;
use airlock_egress::{Egress, SandboxEgress, ScriptedResolver};

const POLICY: &str = "[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [1]\n";

/// A plain request for a port the policy does not list: a served connection answers 403.
const DENIED_GET: &[u8] = b"GET http://127.0.0.1:2/ HTTP/1.1\r\nHost: 127.0.0.1:2\r\n\r\n";

fn egress() -> Egress {
    Egress::new(
        Policy::from_toml(POLICY, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        Arc::new(NullLog),
    )
    .unwrap()
}

/// The link target of a socket's descriptor (`socket:[inode]`).
fn socket_link(fd: i32) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// How many descriptors of this process are the socket `link`.
fn descriptors_of(link: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy() == link)
        .count()
}

/// A loopback address no other listener of this machine is likely to use: 127.A.B.C with A
/// and B from this process's id (A never 0, so never 127.0.0.x) and C a counter.
fn own_loopback() -> Ipv4Addr {
    use std::sync::atomic::{AtomicU8, Ordering};
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let pid = std::process::id();
    let c = NEXT.fetch_add(1, Ordering::Relaxed).max(1);
    Ipv4Addr::new(127, 1 + ((pid >> 8) % 254) as u8, pid as u8, c)
}

/// Serves a new listener; returns it with its address and its socket's link.
fn serve(e: &Egress, name: &str) -> (SandboxEgress, SocketAddr, String) {
    let l = TcpListener::bind((own_loopback(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let link = socket_link(l.as_raw_fd());
    let s = e.serve_sandbox(l, name, None, &addr.to_string()).unwrap();
    (s, addr, link)
}

/// The status code of the answer to [`DENIED_GET`] on `s` (0 if it closed without one).
fn ask(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(DENIED_GET).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn refused(addr: SocketAddr) -> bool {
    matches!(
        TcpStream::connect(addr),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused
    )
}

#[test]
fn shutdown_closes_the_listener_and_serves_what_it_accepted() {
    let e = egress();
    let (served, addr, link) = serve(&e, "a");
    // Controls: the listener is served, and the lookup finds its descriptor.
    let mut kept = TcpStream::connect(addr).unwrap();
    assert_eq!(ask(&mut kept), 403);
    assert_eq!(descriptors_of(&link), 1, "the accepting thread's");
    assert!(!refused(addr));

    served.shutdown();
    assert!(refused(addr), "a connection after the shutdown is refused");
    assert_eq!(descriptors_of(&link), 0, "the listening socket is closed");
    // A connection accepted before the stop is still served (keep-alive).
    assert_eq!(ask(&mut kept), 403);
}

#[test]
fn dropping_the_proxy_ends_every_accepting_thread() {
    let e = egress();
    let (stopped, addr_a, link_a) = serve(&e, "a");
    let (_running, addr_b, link_b) = serve(&e, "b");
    let (_also_running, addr_c, link_c) = serve(&e, "c");
    stopped.shutdown();
    // Controls: the listeners not shut down are served, and their descriptors are found.
    for addr in [addr_b, addr_c] {
        let mut s = TcpStream::connect(addr).unwrap();
        assert_eq!(ask(&mut s), 403);
    }
    assert_eq!(descriptors_of(&link_b), 1);
    assert_eq!(descriptors_of(&link_c), 1);

    drop(e);
    for (addr, link) in [(addr_a, &link_a), (addr_b, &link_b), (addr_c, &link_c)] {
        assert!(refused(addr), "{addr} still accepts");
        assert_eq!(descriptors_of(link), 0, "{link} is still open");
    }
}

#[test]
fn a_proxy_serves_new_listeners_after_others_were_shut_down() {
    let e = egress();
    for round in 0..20 {
        let (served, addr, _) = serve(&e, &format!("s{round}"));
        let mut s = TcpStream::connect(addr).unwrap();
        assert_eq!(ask(&mut s), 403, "round {round}");
        served.shutdown();
        assert!(refused(addr), "round {round}");
    }
}
