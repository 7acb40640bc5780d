//! The proxy server under bad input (NET-7): huge headers, slow clients,
//! floods, malformed requests and dead upstreams get clear answers, and a
//! sandbox that misbehaves does not stop the proxy serving another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::{MemoryLog, NullLog};
use airlock_egress::{Egress, ScriptedResolver};

fn egress(policy: &str) -> Egress {
    Egress::new(
        Policy::from_toml(policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        Arc::new(NullLog),
    )
    .unwrap()
}

fn listen(e: &Egress, name: &str) -> (airlock_egress::SandboxEgress, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let s = e
        .serve_sandbox(l, name, None, &format!("127.0.0.1:{port}"))
        .unwrap();
    (s, port)
}

/// Sends raw bytes and returns the status code of the answer (0 if the
/// connection closed without one).
fn status_of(port: u16, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.write_all(request);
    read_status(&mut s)
}

const POLICY: &str = "[limits]\nheader_read_timeout_ms = 300\nmax_requests_per_second = 5\nmax_concurrent_tunnels = 2\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [1, 2, 3]\n";

#[test]
fn net_7_huge_headers_get_431() {
    let e = egress(POLICY);
    let (_s, port) = listen(&e, "a");
    let big = format!(
        "GET http://x.example.org/ HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let (code, head) = status_of(port, big.as_bytes());
    assert_eq!(code, 431, "{head}");
    // Positive control: a normal request on the same proxy gets a decision.
    let (code, head) = status_of(
        port,
        b"GET http://x.example.org/ HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(code, 403, "{head}");
}

#[test]
fn net_7_malformed_requests_get_400() {
    let e = egress(POLICY);
    let (_s, port) = listen(&e, "a");
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT / HTTP/1.1\r\n\r\n",
        b"GET http://x/ HTTP/9.9\r\n\r\n",
    ] {
        let (code, head) = status_of(port, bad);
        assert!(
            (400..500).contains(&code) || code == 0,
            "{:?}: {head}",
            String::from_utf8_lossy(bad)
        );
        assert_ne!(code, 200);
    }
}

#[test]
fn net_7_slow_client_is_cut_and_others_are_served() {
    let e = egress(POLICY);
    let (_s, port) = listen(&e, "a");
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"GET http://x.example.org/ HTTP/1.1\r\nHo")
        .unwrap();
    // Another client is served while the slow one dawdles.
    let (code, _) = status_of(
        port,
        b"GET http://x.example.org/ HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(code, 403);
    // The slow one is cut after the header timeout (bounded wait, no timing assert).
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let n = slow.read(&mut buf).unwrap_or(0);
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(
        n == 0 || answer.contains(" 408 "),
        "slow client not cut: {answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn net_7_flood_gets_429_and_other_sandboxes_keep_working() {
    let log = Arc::new(MemoryLog::default());
    let e = Egress::new(
        Policy::from_toml(POLICY, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        log.clone(),
    )
    .unwrap();
    let (flooded, port_a) = listen(&e, "a");
    let (_calm, port_b) = listen(&e, "b");
    let mut codes = Vec::new();
    for _ in 0..30 {
        codes.push(status_of(
            port_a,
            b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: x\r\n\r\n",
        ));
    }
    let limited: Vec<_> = codes.iter().filter(|(c, _)| *c == 429).collect();
    assert!(!limited.is_empty(), "{codes:?}");
    assert!(
        limited[0].1.to_ascii_lowercase().contains("retry-after"),
        "{}",
        limited[0].1
    );
    // The other sandbox's listener is unaffected.
    let (code, head) = status_of(port_b, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(code, 403, "{head}");
    assert!(flooded.summary().denied >= 30);
    // Rate-limit refusals are logged like every other decision.
    let limited_lines = log
        .lines()
        .iter()
        .filter(|l| l["reason"] == "rate_limited")
        .count();
    assert_eq!(limited_lines, limited.len());
}

#[test]
fn net_7_tunnel_cap_and_dead_upstreams() {
    // A real upstream that accepts and holds connections open.
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_port = up.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in up.incoming().flatten() {
            held.push(s);
        }
    });
    // A port with nothing listening.
    let dead_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let policy = format!(
        "[limits]\nmax_concurrent_tunnels = 2\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{up_port}, {dead_port}]\n"
    );
    let log = Arc::new(MemoryLog::default());
    let e = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        log.clone(),
    )
    .unwrap();
    let (_s, port) = listen(&e, "a");
    let (code, head) = status_of(
        port,
        format!("CONNECT 127.0.0.1:{dead_port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert_eq!(code, 502, "{head}");
    assert!(head.contains("upstream_connect_failed"));
    let connect = format!("CONNECT 127.0.0.1:{up_port} HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(connect.as_bytes()).unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        open.push(s);
    }
    let (code, head) = status_of(port, connect.as_bytes());
    assert_eq!(code, 429, "third tunnel over the cap: {head}");
    assert!(head.contains("too_many_tunnels"));
    drop(open);
    // Every decision was logged as one JSON line with the fields NET-7 names.
    let lines = log.lines();
    let d = lines
        .iter()
        .find(|l| l["event"] == "egress_decision")
        .unwrap();
    for field in [
        "sandbox", "host", "port", "resolved", "rule", "decision", "reason",
    ] {
        assert!(d.get(field).is_some(), "{field} missing in {d}");
    }
}

/// AGT-6: while the halt flag (the workspace's emergency stop) is set,
/// every new request — CONNECT, plain HTTP, a channel — gets 403
/// `emergency_stop` and reaches no upstream; cleared, the same requests
/// get through again.
#[test]
fn agt_6_a_halted_proxy_refuses_every_new_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_port = up.local_addr().unwrap().port();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let hits = hits.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in up.incoming().flatten() {
                hits.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
    }
    let policy = format!("[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{up_port}]\n");
    let e = egress(&policy);
    let halt = Arc::new(AtomicBool::new(false));
    assert!(e.halt_when(halt.clone()));
    assert!(!e.halt_when(Arc::new(AtomicBool::new(false))), "set once");
    let (_s, port) = listen(&e, "a");
    let connect = format!("CONNECT 127.0.0.1:{up_port} HTTP/1.1\r\nHost: x\r\n\r\n");
    // Positive control: not halted, the tunnel opens.
    let (code, head) = status_of(port, connect.as_bytes());
    assert_eq!(code, 200, "{head}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while hits.load(Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    halt.store(true, Ordering::SeqCst);
    for req in [
        connect.clone(),
        format!("GET http://127.0.0.1:{up_port}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        "GET /channels/openai/v1/models HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
    ] {
        let (code, head) = status_of(port, req.as_bytes());
        assert_eq!(code, 403, "{req}: {head}");
        assert!(head.contains("emergency_stop"), "{head}");
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "nothing reached the upstream"
    );
    halt.store(false, Ordering::SeqCst);
    let (code, head) = status_of(port, connect.as_bytes());
    assert_eq!(code, 200, "resumed: {head}");
}

/// Reads one response head (and whatever body came with it) from `s`:
/// its status code, 0 when the connection closed without one.
fn read_status(s: &mut TcpStream) -> (u16, String) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head)
}

/// A plain request for a port the policy does not list: a served
/// connection answers it 403 (a decision), an over-the-cap one 429.
const DENIED_GET: &[u8] = b"GET http://127.0.0.1:2/ HTTP/1.1\r\nHost: 127.0.0.1:2\r\n\r\n";

/// Opens `n` connections one after the other, sends [`DENIED_GET`] on
/// each, and keeps them open; returns them with their answers' codes.
fn open_held(port: u16, n: usize) -> (Vec<TcpStream>, Vec<u16>) {
    let mut held = Vec::new();
    let mut codes = Vec::new();
    for _ in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(DENIED_GET).unwrap();
        let (code, head) = read_status(&mut s);
        if code == 429 {
            assert!(head.contains("too_many_connections"), "{head}");
            assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
        }
        codes.push(code);
        held.push(s);
    }
    (held, codes)
}

/// Issue 14 (bad input): a sandbox holding ten times its listener's
/// connection cap gets its excess answered 429 `too_many_connections`,
/// never more served connections than the cap, another sandbox is served
/// meanwhile, and once the connections close the listener serves again
/// at its full cap.
#[test]
fn net_7_ten_times_the_connection_cap_gets_429_and_recovers() {
    let policy = "[limits]\nmax_connections = 4\nmax_requests_per_second = 100000\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [1]\n";
    let log = Arc::new(MemoryLog::default());
    let e = Egress::new(
        Policy::from_toml(policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        log.clone(),
    )
    .unwrap();
    let (_flooded, port) = listen(&e, "a");
    let (_calm, other) = listen(&e, "b");

    let (held, codes) = open_held(port, 40);
    assert_eq!(codes.iter().filter(|c| **c == 403).count(), 4, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 429).count(), 36, "{codes:?}");
    // Refusals are decisions and are logged like every other.
    let refused_lines = log
        .lines()
        .iter()
        .filter(|l| l["reason"] == "too_many_connections")
        .count();
    assert_eq!(refused_lines, 36);
    // The other sandbox's listener has its own cap.
    let (code, head) = status_of(other, DENIED_GET);
    assert_eq!(code, 403, "{head}");

    // Recovery: once the held connections are closed, the places come back
    // (the proxy sees each close as its read ends; polled, not timed).
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (held, codes) = open_held(port, 4);
        if codes.iter().all(|c| *c == 403) {
            break;
        }
        drop(held);
        assert!(
            Instant::now() < deadline,
            "the cap never came back: {codes:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Control: the same flood under the default cap (256) is served whole,
    // so the 429s above came from the cap.
    let e = egress(
        "[limits]\nmax_requests_per_second = 100000\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [1]\n",
    );
    let (_s, port) = listen(&e, "c");
    let (_held, codes) = open_held(port, 40);
    assert!(codes.iter().all(|c| *c == 403), "{codes:?}");
}

/// Issue 14 (bad input): a burst of CONNECTs whose upstream dials are all
/// still in flight never opens more tunnels than the cap. The place is
/// taken before dialling; before, every request of the burst passed the
/// check while none had counted yet.
#[test]
fn net_7_a_burst_of_connects_never_dials_more_tunnels_than_the_cap() {
    // An upstream whose accept queue is full: a SYN to it is dropped, so a
    // dial hangs until the proxy's connect timeout.
    use rustix::net::{AddressFamily, SocketType, bind, listen as listen_fd, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap()).unwrap();
    listen_fd(&fd, 0).unwrap();
    let full = TcpListener::from(fd);
    let up_port = full.local_addr().unwrap().port();
    let _filler = TcpStream::connect(("127.0.0.1", up_port)).unwrap();

    let burst = |cap: usize| -> Vec<u16> {
        let policy = format!(
            "[limits]\nmax_concurrent_tunnels = {cap}\nconnect_timeout_ms = 1500\nmax_requests_per_second = 100000\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{up_port}]\n"
        );
        let e = egress(&policy);
        let (_s, port) = listen(&e, "a");
        let connect = format!("CONNECT 127.0.0.1:{up_port} HTTP/1.1\r\nHost: x\r\n\r\n");
        let threads: Vec<_> = (0..20)
            .map(|_| {
                let connect = connect.clone();
                std::thread::spawn(move || status_of(port, connect.as_bytes()).0)
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    };
    let codes = burst(2);
    assert_eq!(codes.iter().filter(|c| **c == 429).count(), 18, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 504).count(), 2, "{codes:?}");
    // Control: with room for all twenty, every dial is made (and times out).
    let codes = burst(20);
    assert!(codes.iter().all(|c| *c == 504), "{codes:?}");
}
