//! CONNECT tunnels on the wire (NET-3, NET-7): what a client sends right
//! behind its CONNECT head reaches the upstream first, bytes flow both
//! ways and half-closes pass through, the closed tunnel's line counts its
//! bytes, a tunnel quiet for its idle timeout is cut while a busy one is
//! not, and a tunnel is cut at its byte cap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::MemoryLog;
use airlock_egress::{Egress, SandboxEgress, ScriptedResolver};

/// An upstream that echoes every connection until its end of file, then
/// closes its side and reports how many bytes that connection received.
fn echo_upstream() -> (u16, mpsc::Receiver<usize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 8192];
                let mut total = 0;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            total += n;
                            if s.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = s.shutdown(Shutdown::Write);
                let _ = tx.send(total);
            });
        }
    });
    (port, rx)
}

struct Proxy {
    log: Arc<MemoryLog>,
    port: u16,
    _listener: SandboxEgress,
    _egress: Egress,
}

fn proxy(up_port: u16, limits: &str) -> Proxy {
    let policy =
        format!("[limits]\n{limits}\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{up_port}]\n");
    let log = Arc::new(MemoryLog::default());
    let egress = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        log.clone(),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let listener = egress
        .serve_sandbox(l, "t", None, &format!("127.0.0.1:{port}"))
        .unwrap();
    Proxy {
        log,
        port,
        _listener: listener,
        _egress: egress,
    }
}

/// Opens a tunnel, sending `early` in the same write as the CONNECT head;
/// returns the stream and whatever arrived after the `200` head.
fn open_tunnel(p: &Proxy, up_port: u16, early: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut first = format!("CONNECT 127.0.0.1:{up_port} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    first.extend_from_slice(early);
    s.write_all(&first).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
    };
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    (s, got.split_off(end))
}

fn read_exactly(s: &mut TcpStream, mut have: Vec<u8>, want: usize) -> Vec<u8> {
    let mut buf = [0u8; 8192];
    while have.len() < want {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {} of {want} bytes", have.len());
        have.extend_from_slice(&buf[..n]);
    }
    have
}

/// Reads until the proxy closes the stream; the bytes read, or `None` if it
/// stayed open for the whole read timeout.
fn read_to_close(s: &mut TcpStream) -> Option<usize> {
    let mut buf = [0u8; 8192];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(total),
            Err(_) => return None,
        }
    }
}

/// The tunnel's `egress_connection_closed` line, once written.
fn closed_line(p: &Proxy) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = p
            .log
            .lines()
            .into_iter()
            .find(|l| l["event"] == "egress_connection_closed")
        {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "no closed line: {:?}",
            p.log.lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_tunnel_relays_what_came_with_the_connect_head_then_both_ways_and_counts_it() {
    let (up_port, received) = echo_upstream();
    let p = proxy(up_port, "");
    // The first bytes of the tunnel travel in the same packet as the CONNECT head, as a
    // client that does not wait for the 200 sends them: the proxy has read them already.
    let (mut s, after_head) = open_tunnel(&p, up_port, b"early bytes");
    let echoed = read_exactly(&mut s, after_head, 11);
    assert_eq!(echoed, b"early bytes");
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let mut w = s.try_clone().unwrap();
        let big = big.clone();
        std::thread::spawn(move || w.write_all(&big).unwrap())
    };
    let back = read_exactly(&mut s, Vec::new(), big.len());
    writer.join().unwrap();
    assert_eq!(back, big, "every byte, in order");
    // A half-close reaches the upstream, whose close comes back.
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_close(&mut s), Some(0));
    assert_eq!(
        received.recv_timeout(Duration::from_secs(20)).unwrap(),
        11 + big.len()
    );
    let l = closed_line(&p);
    assert_eq!(l["bytes_up"], 11 + big.len(), "{l}");
    assert_eq!(l["bytes_down"], 11 + big.len(), "{l}");
    assert_eq!(l["sandbox"], "t");
    assert_eq!(l["host"], "127.0.0.1");
    assert_eq!(l["port"], up_port);
    assert_eq!(l["resolved_ip"], "127.0.0.1");
    assert_eq!(l["kind"], "connect");
}

#[test]
fn a_quiet_tunnel_is_cut_after_its_idle_timeout_and_a_busy_one_is_not() {
    let (up_port, _received) = echo_upstream();
    let p = proxy(up_port, "idle_timeout_ms = 1000");
    // Quiet: opened first and never used.
    let (mut quiet, _) = open_tunnel(&p, up_port, b"");
    // Busy, at the same time: something crosses every 100 ms for three idle timeouts.
    let (mut busy, after_head) = open_tunnel(&p, up_port, b"");
    assert!(after_head.is_empty());
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(3) {
        busy.write_all(b"ping").unwrap();
        assert_eq!(read_exactly(&mut busy, Vec::new(), 4), b"ping");
        rounds += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(rounds > 3);
    // The busy one still works; the quiet one was cut by the proxy (end of file, not our
    // read timeout).
    busy.write_all(b"pong").unwrap();
    assert_eq!(read_exactly(&mut busy, Vec::new(), 4), b"pong");
    assert_eq!(
        read_to_close(&mut quiet),
        Some(0),
        "a quiet tunnel is closed"
    );
}

#[test]
fn a_tunnel_is_cut_at_its_byte_cap() {
    let (up_port, received) = echo_upstream();
    let p = proxy(up_port, "max_bytes_per_connection = 10000");
    let (mut s, after_head) = open_tunnel(&p, up_port, b"");
    // Control: under the cap, bytes pass both ways.
    s.write_all(&[7u8; 4000]).unwrap();
    assert_eq!(read_exactly(&mut s, after_head, 4000), vec![7u8; 4000]);
    // Past it, the tunnel is cut: the upstream gets at most the cap, and the client sees the end.
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for _ in 0..10 {
            if w.write_all(&[9u8; 4000]).is_err() {
                break;
            }
        }
    });
    assert!(
        read_to_close(&mut s).is_some(),
        "the proxy closed the tunnel"
    );
    writer.join().unwrap();
    let got = received.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!((4000..=10_000).contains(&got), "upstream received {got}");
}
