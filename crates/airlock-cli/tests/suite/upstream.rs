//! A scripted upstream: a real HTTP/1.1 server on loopback that records
//! what it receives and answers like the services the tests pretend to be
//! (including the OpenAI Chat Completions wire format).
#![allow(dead_code, clippy::never_loop)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

const CHAT: &str = r#"{"id":"chatcmpl-airlock","object":"chat.completion","created":1700000000,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"hello from the scripted model"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;

pub fn start() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen2.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or("").to_string();
                    let path = parts.next().unwrap_or("").to_string();
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end().to_string();
                        if h.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            headers.push((k.trim().to_string(), v.trim().to_string()));
                        }
                    }
                    let len: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0u8; len];
                    let _ = reader.read_exact(&mut body);
                    let seen_req = Seen {
                        method: method.clone(),
                        path: path.clone(),
                        headers: headers.clone(),
                        body: String::from_utf8_lossy(&body).into_owned(),
                    };
                    let auth = seen_req.header("authorization").unwrap_or("").to_string();
                    seen.lock().unwrap().push(seen_req);
                    let (status, ctype, extra, body): (&str, &str, String, String) =
                        match path.as_str() {
                            p if p.ends_with("/chat/completions") => (
                                "200 OK",
                                "application/json",
                                String::new(),
                                CHAT.to_string(),
                            ),
                            "/redirect" => (
                                "302 Found",
                                "text/plain",
                                "Location: http://elsewhere.example.org/\r\n".into(),
                                "moved".into(),
                            ),
                            // An error that quotes the key, as some providers do, in the
                            // forms a JSON body, a base64 field and a URL carry it.
                            "/v1/echo" => (
                                "401 Unauthorized",
                                "application/json",
                                String::new(),
                                echo_body(&auth),
                            ),
                            "/events" => (
                                "200 OK",
                                "text/event-stream",
                                String::new(),
                                "data: one\n\ndata: two\n\ndata: three\n\n".into(),
                            ),
                            _ => (
                                "200 OK",
                                "text/plain",
                                String::new(),
                                "hello from upstream".into(),
                            ),
                        };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nX-Echo-Auth: {auth}\r\n{extra}Connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(resp.as_bytes());
                    return;
                }
            });
        }
    });
    Upstream { port, seen }
}

/// A tiny DNS server on the host's loopback (UDP): answers every query with 192.0.2.53 and
/// records every datagram it receives, in order.
pub struct Dns {
    pub port: u16,
    pub datagrams: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// The address the scripted DNS server answers.
pub const DNS_ANSWER: &str = "192.0.2.53";

impl Dns {
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.datagrams.lock().unwrap().clone()
    }

    /// Waits (boundedly) until `n` datagrams have arrived: delivery on loopback is immediate,
    /// but the server's thread records them on its own schedule.
    pub fn wait_for(&self, n: usize) -> Vec<Vec<u8>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.received().len() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.received()
    }
}

pub fn dns() -> Dns {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let datagrams = Arc::new(Mutex::new(Vec::new()));
    let seen = datagrams.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let q = buf[..n].to_vec();
            seen.lock().unwrap().push(q.clone());
            // A query: header (12 bytes, one question), then the question; answer with one A.
            if n < 17 || q[4..6] != [0, 1] {
                continue;
            }
            let mut a = Vec::with_capacity(n + 16);
            a.extend_from_slice(&q[..2]);
            a.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            a.extend_from_slice(&q[12..]);
            a.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            a.extend(DNS_ANSWER.split('.').map(|o| o.parse::<u8>().unwrap()));
            let _ = socket.send_to(&a, from);
        }
    });
    Dns { port, datagrams }
}

/// A JSON error body quoting `auth` JSON-escaped, base64-encoded and percent-encoded.
pub fn echo_body(auth: &str) -> String {
    use base64::Engine;
    let pct: String = auth
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    serde_json::json!({"error": {
        "message": format!("Incorrect API key provided: {auth}"),
        "key_b64": base64::engine::general_purpose::STANDARD.encode(auth),
        "retry_url": format!("https://example.org/retry?key={pct}"),
    }})
    .to_string()
}
