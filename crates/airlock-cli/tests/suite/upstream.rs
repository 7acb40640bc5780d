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
