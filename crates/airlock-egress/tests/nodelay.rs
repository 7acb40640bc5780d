//! `TCP_NODELAY` on every socket the proxy relays through (issue 14): the
//! accepted socket of a sandbox's listener and the upstream socket, for a
//! CONNECT tunnel, a plain request and a channel, and the control process's
//! outbound client.
//!
//! How the sockets are observed: the proxy runs in this process, so the test
//! finds the proxy's own descriptor by its two ends (local and peer address)
//! among this process's descriptors, takes a duplicate of it
//! (`pidfd_getfd` on our own pid) and reads `TCP_NODELAY` with
//! `getsockopt`. A duplicate shares the socket, so the value read is the one
//! the proxy's socket has. Reading the option on the test's end of a
//! connection would say nothing: it is a per-socket setting, one on each side.
//! Each test also reads the test's own ends, which never set it, and expects
//! `false`: the lookup can tell the two apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use airlock_egress::client::{ClientOptions, OutboundClient};
use airlock_egress::policy::{Cidr, EnvAndFiles, Policy};
use airlock_egress::proxy::NullLog;
use airlock_egress::{Egress, SandboxEgress, ScriptedResolver};
use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

/// `TCP_NODELAY` of the socket of this process whose ends are `local` and
/// `peer` (exactly one such socket must exist).
fn nodelay_of(local: SocketAddr, peer: SocketAddr) -> bool {
    let me = pidfd_open(getpid(), PidfdFlags::empty()).unwrap();
    // The numbers first: the duplicates taken below get numbers of their own.
    let numbers: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut found = Vec::new();
    for n in numbers {
        let Ok(fd) = pidfd_getfd(&me, n, PidfdGetfdFlags::empty()) else {
            continue; // closed meanwhile (the directory's own descriptor)
        };
        // Not a TCP socket: getsockname or getpeername fails.
        let s = TcpStream::from(fd);
        if s.local_addr().ok() == Some(local) && s.peer_addr().ok() == Some(peer) {
            found.push(s.nodelay().unwrap());
        }
    }
    assert_eq!(
        found.len(),
        1,
        "one socket from {local} to {peer} in this process"
    );
    found[0]
}

struct Proxy {
    _egress: Egress,
    _served: SandboxEgress,
    addr: SocketAddr,
    _key_file: tempfile::NamedTempFile,
}

const KEY: &str = "sk-nodelay-test-0123456789abcdefghij";

/// A proxy allowing plain HTTP and CONNECT to `upstream`, with a channel
/// `model` to it.
fn proxy(upstream: SocketAddr) -> Proxy {
    let mut key_file = tempfile::NamedTempFile::new().unwrap();
    key_file.write_all(KEY.as_bytes()).unwrap();
    let port = upstream.port();
    let policy = format!(
        "[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{port}]\nhttp = true\n\
         [channels.model]\nupstream = \"http://127.0.0.1:{port}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{file:{}}}\"\nmethods = [\"GET\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n",
        key_file.path().display()
    );
    let egress = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        Arc::new(NullLog),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let served = egress
        .serve_sandbox(l, "nodelay", None, &addr.to_string())
        .unwrap();
    Proxy {
        _egress: egress,
        _served: served,
        addr,
        _key_file: key_file,
    }
}

/// Reads up to the end of an HTTP head.
fn read_head(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "head cut: {head:?}");
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// What the test reads on the four sockets of one proxied connection.
#[derive(Debug, PartialEq, Eq)]
struct Sides {
    proxy_accepted: bool,
    proxy_upstream: bool,
    test_client: bool,
    test_upstream: bool,
}

const BOTH_PROXY_SIDES: Sides = Sides {
    proxy_accepted: true,
    proxy_upstream: true,
    test_client: false,
    test_upstream: false,
};

/// Sends `request` through the proxy and, while the upstream holds the
/// request unanswered (both of the proxy's sockets open), reads the option
/// on every socket of the connection; then answers and checks the status.
fn through_proxy(request: impl FnOnce(SocketAddr, SocketAddr) -> String) -> Sides {
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = up.local_addr().unwrap();
    let proxy = proxy(up_addr);
    let mut client = TcpStream::connect(proxy.addr).unwrap();
    let request = request(proxy.addr, up_addr);
    client.write_all(request.as_bytes()).unwrap();
    let tunnel = request.starts_with("CONNECT");
    if tunnel {
        let head = read_head(&mut client);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let (mut server, proxy_out) = up.accept().unwrap();
    if tunnel {
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
    }
    let head = read_head(&mut server);
    assert!(head.starts_with("GET /"), "{head}");
    let sides = Sides {
        proxy_accepted: nodelay_of(proxy.addr, client.local_addr().unwrap()),
        proxy_upstream: nodelay_of(proxy_out, up_addr),
        test_client: nodelay_of(client.local_addr().unwrap(), proxy.addr),
        test_upstream: nodelay_of(up_addr, proxy_out),
    };
    server
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        .unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    sides
}

#[test]
fn connect_tunnel_sets_nodelay_on_both_of_the_proxys_sockets() {
    let sides = through_proxy(|_, up| format!("CONNECT {up} HTTP/1.1\r\nHost: {up}\r\n\r\n"));
    assert_eq!(sides, BOTH_PROXY_SIDES);
}

#[test]
fn plain_request_sets_nodelay_on_both_of_the_proxys_sockets() {
    let sides = through_proxy(|_, up| format!("GET http://{up}/x HTTP/1.1\r\nHost: {up}\r\n\r\n"));
    assert_eq!(sides, BOTH_PROXY_SIDES);
}

#[test]
fn channel_request_sets_nodelay_on_both_of_the_proxys_sockets() {
    let sides = through_proxy(|proxy, _| {
        format!("GET /channels/model/v1/x HTTP/1.1\r\nHost: {proxy}\r\n\r\n")
    });
    assert_eq!(sides, BOTH_PROXY_SIDES);
}

#[test]
fn outbound_client_sets_nodelay_on_its_socket() {
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = up.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, client_addr) = up.accept().unwrap();
        read_head(&mut s);
        let read = (
            nodelay_of(client_addr, up_addr),
            nodelay_of(up_addr, client_addr),
        );
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        read
    });
    let client = OutboundClient::new(
        Arc::new(ScriptedResolver::new()),
        ClientOptions {
            allow_plain_http: true,
            allowed_private: vec![Cidr::parse("127.0.0.1/32").unwrap()],
            ..ClientOptions::default()
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resp = rt
        .block_on(client.send(
            http::Method::GET,
            &format!("http://{up_addr}/"),
            http::HeaderMap::new(),
            bytes::Bytes::new(),
        ))
        .unwrap();
    assert_eq!(resp.status, 200);
    // (the client's socket, the test upstream's socket)
    assert_eq!(server.join().unwrap(), (true, false));
}
