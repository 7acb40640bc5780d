//! The upstream connection pool (issue 14): a decided plain-HTTP or channel
//! request may go on an idle connection its own listener opened for the
//! same route and checked address, and on no other. Each test first shows
//! that reuse happens (its positive control: otherwise "not reused" would
//! prove nothing), then that the boundary holds: sandboxes (listeners),
//! channels, destination decisions, credentials; and that every request is
//! still decided and logged.
//!
//! The upstream records, for each request, the connection it came on (the
//! proxy's address for it) and its head. Requests are sent one after the
//! other and each response is read whole before the next request, so which
//! connection a request finds idle does not depend on timing: the proxy
//! gives a connection back before the client can see the end of its
//! response.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::{LogSink, MemoryLog};
use airlock_egress::{Egress, SandboxEgress, ScriptedResolver};

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// The proxy's end of the connection it came on.
    conn: SocketAddr,
    /// The upstream address it reached.
    at: SocketAddr,
    head: String,
}

impl Seen {
    fn authorization(&self) -> Option<String> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix("authorization: ").map(str::to_string))
    }
}

/// A keep-alive HTTP/1.1 upstream on one or more loopback listeners.
#[derive(Clone)]
struct Upstream {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    fn start(listeners: Vec<TcpListener>) -> Self {
        let up = Self {
            seen: Arc::default(),
        };
        for l in listeners {
            let seen = up.seen.clone();
            std::thread::spawn(move || {
                let at = l.local_addr().unwrap();
                for s in l.incoming() {
                    let Ok(s) = s else { return };
                    let seen = seen.clone();
                    std::thread::spawn(move || serve(s, at, &seen));
                }
            });
        }
        up
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// For each request in order, the number of the connection it came on,
    /// connections numbered from 0 in the order they first appear.
    fn connections(&self) -> Vec<usize> {
        let mut numbers: HashMap<SocketAddr, usize> = HashMap::new();
        self.seen()
            .iter()
            .map(|s| {
                let next = numbers.len();
                *numbers.entry(s.conn).or_insert(next)
            })
            .collect()
    }
}

fn serve(s: TcpStream, at: SocketAddr, seen: &Mutex<Vec<Seen>>) {
    let conn = s.peer_addr().unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        seen.lock().unwrap().push(Seen { conn, at, head });
        if w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

fn loopback_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// A keep-alive client connection to a proxy listener.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn new(proxy: &Listener) -> Self {
        let s = TcpStream::connect(proxy.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Self {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    /// Sends `GET target` and reads the whole response; answers its status.
    fn get(&mut self, target: &str, host: &str) -> u16 {
        write!(self.w, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut status = String::new();
        self.r.read_line(&mut status).unwrap();
        let (mut length, mut chunked) = (0, false);
        loop {
            let mut line = String::new();
            self.r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let line = line.to_ascii_lowercase();
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            chunked |= line.starts_with("transfer-encoding:") && line.contains("chunked");
        }
        if chunked {
            // A channel's response (its length changes when scrubbed): chunks, then the end.
            loop {
                let mut size = String::new();
                self.r.read_line(&mut size).unwrap();
                let size = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.r.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
            }
        } else {
            let mut body = vec![0; length];
            self.r.read_exact(&mut body).unwrap();
        }
        status.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

struct Listener {
    _served: SandboxEgress,
    addr: SocketAddr,
}

/// One proxy runtime (one policy) and its key files.
struct Proxy {
    egress: Egress,
    _keys: Vec<tempfile::NamedTempFile>,
}

impl Proxy {
    /// A proxy whose policy is `policy` with `{key:N}` replaced by the path
    /// of a file holding `keys[N]`.
    fn new(policy: &str, keys: &[&str], resolver: ScriptedResolver, log: Arc<dyn LogSink>) -> Self {
        let mut policy = policy.to_string();
        let mut files = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(k.as_bytes()).unwrap();
            policy = policy.replace(&format!("{{key:{i}}}"), &f.path().display().to_string());
            files.push(f);
        }
        let egress = Egress::new(
            Policy::from_toml(&policy, &EnvAndFiles),
            Arc::new(resolver),
            log,
        )
        .unwrap();
        Self {
            egress,
            _keys: files,
        }
    }

    /// A new sandbox listener.
    fn listen(&self, name: &str) -> Listener {
        let l = loopback_listener();
        let addr = l.local_addr().unwrap();
        let served = self
            .egress
            .serve_sandbox(l, name, None, &addr.to_string())
            .unwrap();
        Listener {
            _served: served,
            addr,
        }
    }
}

const KEY_A: &str = "sk-pool-sandbox-a-0123456789abcdef";
const KEY_B: &str = "sk-pool-sandbox-b-fedcba9876543210";

fn plain_policy(port: u16) -> String {
    format!("[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{port}]\nhttp = true\n")
}

fn channel(name: &str, port: u16, key: usize) -> String {
    format!(
        "[channels.{name}]\nupstream = \"http://127.0.0.1:{port}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{file:{{key:{key}}}}}\"\nmethods = [\"GET\"]\npaths = [\"/v1/\"]\n\
         insecure_upstream_for_tests = true\n"
    )
}

#[test]
fn pool_reuses_a_connection_within_a_listener_and_never_across_listeners() {
    let l = loopback_listener();
    let up_addr = l.local_addr().unwrap();
    let up = Upstream::start(vec![l]);
    let proxy = Proxy::new(
        &plain_policy(up_addr.port()),
        &[],
        ScriptedResolver::new(),
        Arc::new(MemoryLog::default()),
    );
    let (a, b) = (proxy.listen("a"), proxy.listen("b"));
    let url = format!("http://{up_addr}/");
    let host = up_addr.to_string();
    let mut client_a = Client::new(&a);
    assert_eq!(client_a.get(&url, &host), 200);
    assert_eq!(client_a.get(&url, &host), 200);
    let mut client_b = Client::new(&b);
    assert_eq!(client_b.get(&url, &host), 200);
    // The pool belongs to the listener, not to the client's connection.
    assert_eq!(Client::new(&a).get(&url, &host), 200);
    assert_eq!(client_b.get(&url, &host), 200);
    assert_eq!(up.connections(), vec![0, 0, 1, 0, 1]);
}

#[test]
fn pool_never_reuses_a_connection_across_channels_or_between_a_channel_and_plain_http() {
    let l = loopback_listener();
    let up_addr = l.local_addr().unwrap();
    let up = Upstream::start(vec![l]);
    let port = up_addr.port();
    let policy = format!(
        "{}{}{}",
        plain_policy(port),
        channel("one", port, 0),
        channel("two", port, 1)
    );
    let proxy = Proxy::new(
        &policy,
        &[KEY_A, KEY_B],
        ScriptedResolver::new(),
        Arc::new(MemoryLog::default()),
    );
    let sandbox = proxy.listen("s");
    let me = sandbox.addr.to_string();
    let mut c = Client::new(&sandbox);
    for target in [
        "/channels/one/v1/x",
        "/channels/one/v1/x",
        "/channels/two/v1/x",
        "/channels/two/v1/x",
    ] {
        assert_eq!(c.get(target, &me), 200, "{target}");
    }
    let url = format!("http://{up_addr}/v1/x");
    assert_eq!(c.get(&url, &up_addr.to_string()), 200);
    assert_eq!(c.get(&url, &up_addr.to_string()), 200);
    assert_eq!(up.connections(), vec![0, 0, 1, 1, 2, 2]);
    let credentials: Vec<Option<String>> = up.seen().iter().map(Seen::authorization).collect();
    let a = Some(format!("bearer {}", KEY_A.to_ascii_lowercase()));
    let b = Some(format!("bearer {}", KEY_B.to_ascii_lowercase()));
    assert_eq!(
        credentials,
        vec![a.clone(), a, b.clone(), b, None, None],
        "each channel's credential on its own connection, none on plain HTTP's"
    );
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn pool_never_reuses_a_connection_across_destination_decisions() {
    // One upstream port on 127.0.0.2 and 127.0.0.3; names that resolve to them.
    let (two, three) = loop {
        let two = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = two.local_addr().unwrap().port();
        if let Ok(three) = TcpListener::bind(("127.0.0.3", port)) {
            break (two, three);
        }
    };
    let port = two.local_addr().unwrap().port();
    let up = Upstream::start(vec![two, three]);
    let policy = format!(
        "[[allow]]\nhost = \"a.example.org\"\nports = [{port}]\nhttp = true\n\
         [[allow]]\nhost = \"b.example.org\"\nports = [{port}]\nhttp = true\n\
         [[allow]]\nhost = \"moving.example.org\"\nports = [{port}]\nhttp = true\n\
         [[allow]]\ncidr = \"127.0.0.0/8\"\nports = [{port}]\nhttp = true\n"
    );
    // `moving` resolves to .2, then to .3: the second decision checked only .3.
    let resolver = ScriptedResolver::new()
        .answer("a.example.org", Ok(vec![ip("127.0.0.2")]))
        .answer("a.example.org", Ok(vec![ip("127.0.0.2")]))
        .answer("b.example.org", Ok(vec![ip("127.0.0.2")]))
        .answer("b.example.org", Ok(vec![ip("127.0.0.2")]))
        .answer("moving.example.org", Ok(vec![ip("127.0.0.2")]))
        .answer("moving.example.org", Ok(vec![ip("127.0.0.3")]));
    let proxy = Proxy::new(&policy, &[], resolver, Arc::new(MemoryLog::default()));
    let sandbox = proxy.listen("s");
    let mut c = Client::new(&sandbox);
    let get = |c: &mut Client, authority: &str| c.get(&format!("http://{authority}/"), authority);
    for authority in [
        format!("a.example.org:{port}"),
        format!("a.example.org:{port}"),
        format!("b.example.org:{port}"),
        format!("b.example.org:{port}"),
        format!("127.0.0.2:{port}"),
        format!("127.0.0.2:{port}"),
        format!("moving.example.org:{port}"),
        format!("moving.example.org:{port}"),
    ] {
        assert_eq!(get(&mut c, &authority), 200, "{authority}");
    }
    assert_eq!(up.connections(), vec![0, 0, 1, 1, 2, 2, 3, 4]);
    let reached: Vec<IpAddr> = up.seen().iter().map(|s| s.at.ip()).collect();
    assert_eq!(reached[6..], [ip("127.0.0.2"), ip("127.0.0.3")]);
}

#[test]
fn pool_every_request_is_still_decided_and_logged_and_the_stop_still_refuses() {
    let l = loopback_listener();
    let up_addr = l.local_addr().unwrap();
    let up = Upstream::start(vec![l]);
    let log = Arc::new(MemoryLog::default());
    let proxy = Proxy::new(
        &plain_policy(up_addr.port()),
        &[],
        ScriptedResolver::new(),
        log.clone(),
    );
    let halt = Arc::new(AtomicBool::new(false));
    assert!(proxy.egress.halt_when(halt.clone()));
    let sandbox = proxy.listen("s");
    let (url, host) = (format!("http://{up_addr}/"), up_addr.to_string());
    let mut c = Client::new(&sandbox);
    for _ in 0..3 {
        assert_eq!(c.get(&url, &host), 200);
    }
    halt.store(true, Ordering::SeqCst);
    assert_eq!(c.get(&url, &host), 403);
    assert_eq!(
        up.connections(),
        vec![0, 0, 0],
        "the stopped request went nowhere"
    );
    let lines = log.lines();
    let of = |event: &str| -> Vec<serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["event"] == event)
            .cloned()
            .collect()
    };
    let decisions: Vec<(String, String)> = of("egress_decision")
        .iter()
        .map(|d| {
            (
                d["decision"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let allow = ("allow".to_string(), "allowed".to_string());
    assert_eq!(
        decisions,
        vec![
            allow.clone(),
            allow.clone(),
            allow,
            ("deny".to_string(), "emergency_stop".to_string())
        ]
    );
    let reused: Vec<bool> = of("egress_response")
        .iter()
        .map(|r| r["reused_connection"].as_bool().unwrap())
        .collect();
    assert_eq!(reused, vec![false, true, true]);
}

#[test]
fn pool_never_sends_one_sandboxs_credential_on_another_sandboxs_connection() {
    let l = loopback_listener();
    let up_addr = l.local_addr().unwrap();
    let up = Upstream::start(vec![l]);
    let port = up_addr.port();
    // Two runtimes, as two launches with their own policies: the same channel name and
    // upstream, different credentials. The first serves two sandboxes.
    let first = Proxy::new(
        &channel("model", port, 0),
        &[KEY_A],
        ScriptedResolver::new(),
        Arc::new(MemoryLog::default()),
    );
    let second = Proxy::new(
        &channel("model", port, 0),
        &[KEY_B],
        ScriptedResolver::new(),
        Arc::new(MemoryLog::default()),
    );
    let sandboxes = [first.listen("a1"), first.listen("a2"), second.listen("b")];
    let mut clients: Vec<Client> = sandboxes.iter().map(Client::new).collect();
    for _ in 0..2 {
        for (c, s) in clients.iter_mut().zip(&sandboxes) {
            assert_eq!(c.get("/channels/model/v1/x", &s.addr.to_string()), 200);
        }
    }
    assert_eq!(up.connections(), vec![0, 1, 2, 0, 1, 2]);
    let a = Some(format!("bearer {}", KEY_A.to_ascii_lowercase()));
    let b = Some(format!("bearer {}", KEY_B.to_ascii_lowercase()));
    let credentials: Vec<Option<String>> = up.seen().iter().map(Seen::authorization).collect();
    assert_eq!(
        credentials,
        vec![a.clone(), a.clone(), b.clone(), a.clone(), a, b]
    );
}

#[test]
fn pool_a_connection_the_upstream_closes_is_not_reused() {
    // An upstream that answers `Connection: close` and closes: every request gets a new
    // connection and an answer (never a 502 from a stale one).
    let l = loopback_listener();
    let up_addr = l.local_addr().unwrap();
    let count = Arc::new(Mutex::new(Vec::new()));
    let seen = count.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            seen.lock().unwrap().push(s.peer_addr().unwrap());
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let proxy = Proxy::new(
        &plain_policy(up_addr.port()),
        &[],
        ScriptedResolver::new(),
        Arc::new(MemoryLog::default()),
    );
    let sandbox = proxy.listen("s");
    let mut c = Client::new(&sandbox);
    for _ in 0..3 {
        assert_eq!(
            c.get(&format!("http://{up_addr}/"), &up_addr.to_string()),
            200
        );
    }
    let conns = count.lock().unwrap().clone();
    assert_eq!(conns.len(), 3);
    assert!(conns[0] != conns[1] && conns[1] != conns[2] && conns[0] != conns[2]);
}
