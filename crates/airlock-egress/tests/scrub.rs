//! A channel's credential never reaches the sandbox through a response (NET-6): a real
//! upstream on loopback echoes the credential it received, in its headers and in its body, raw,
//! JSON-escaped, base64, percent-encoded and hex, whole and cut across chunks of a server-sent
//! event stream; the client of the proxy gets `[REDACTED]` in each place, and the events still
//! arrive one by one. Positive controls: the upstream really sent every form (it records what
//! it wrote), and the same echo through plain forwarding (no channel) arrives verbatim.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::MemoryLog;
use airlock_egress::{Egress, ScriptedResolver};
use base64::Engine;

/// A credential with characters every encoding changes (`/`, `+`, `"`, `\`, `=`).
const KEY: &str = r#"sk-Air/lock+K3y"Q\7w=9xT"#;

/// Every form the upstream echoes, by name.
fn forms() -> Vec<(&'static str, String)> {
    let json = serde_json::to_string(KEY).unwrap();
    let pct: String = KEY
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    vec![
        ("raw", KEY.to_string()),
        ("json", json[1..json.len() - 1].to_string()),
        (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(KEY),
        ),
        ("percent", pct),
        (
            "hex",
            KEY.bytes().map(|b| format!("{b:02x}")).collect::<String>(),
        ),
    ]
}

/// What the upstream received and what it wrote (body bytes, without chunk framing).
#[derive(Default)]
struct Record {
    heads: Vec<String>,
    sent: Vec<u8>,
}

/// The scripted upstream. `/v1/echo`: a JSON body (with `Content-Length`) echoing the escaped,
/// base64, percent and hex forms, and headers echoing the raw and base64 forms; `/v1/stream`: server-sent events, each form cut in two chunks, the second sent
/// only when the test says so (`go`); `/v1/gzip`: a body marked `Content-Encoding: gzip`.
fn upstream(go: mpsc::Receiver<()>) -> (u16, Arc<Mutex<Record>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let record = Arc::new(Mutex::new(Record::default()));
    let rec = record.clone();
    let go = Arc::new(Mutex::new(go));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let rec = rec.clone();
            let go = go.clone();
            std::thread::spawn(move || serve(stream, &rec, &go));
        }
    });
    (port, record)
}

fn serve(stream: TcpStream, rec: &Mutex<Record>, go: &Mutex<mpsc::Receiver<()>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
    let auth = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        })
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    rec.lock().unwrap().heads.push(head);
    let mut out = stream;
    let sent = |bytes: &[u8]| rec.lock().unwrap().sent.extend_from_slice(bytes);
    let forms = forms();
    let form = |name: &str| forms.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    match path.as_str() {
        p if p.ends_with("/v1/echo") => {
            let body = format!(
                r#"{{"error": {{"message": "Incorrect API key provided: {json}", "json": "{json}", "base64": "{b64}", "percent": "{pct}", "hex": "{hex}"}}}}"#,
                json = form("json"),
                b64 = form("base64"),
                pct = form("percent"),
                hex = form("hex"),
            );
            let head = format!(
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nX-Echo-Auth: {auth}\r\nX-Echo-B64: {}\r\nConnection: close\r\n\r\n",
                body.len(),
                form("base64"),
            );
            sent(head.as_bytes());
            sent(body.as_bytes());
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(body.as_bytes());
        }
        "/v1/stream" => {
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
            let mut chunk = |data: &[u8]| {
                sent(data);
                let _ = write!(out, "{:x}\r\n", data.len());
                let _ = out.write_all(data);
                let _ = out.write_all(b"\r\n");
                let _ = out.flush();
            };
            let wait = || go.lock().unwrap().recv().unwrap();
            chunk(b"data: {\"n\": 1}\n\n");
            wait();
            for (name, value) in &forms {
                let half = value.len() / 2;
                chunk(
                    format!("data: {{\"form\": \"{name}\", \"v\": \"{}", &value[..half]).as_bytes(),
                );
                wait();
                chunk(format!("{}\"}}\n\n", &value[half..]).as_bytes());
            }
            chunk(b"data: [DONE]\n\n");
            let _ = out.write_all(b"0\r\n\r\n");
        }
        "/v1/gzip" => {
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd");
        }
        _ => {
            let _ = out.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

struct Proxy {
    _egress: Egress,
    _served: airlock_egress::SandboxEgress,
    port: u16,
    log: Arc<MemoryLog>,
    _key_file: tempfile::NamedTempFile,
}

fn proxy(upstream_port: u16) -> Proxy {
    let mut key_file = tempfile::NamedTempFile::new().unwrap();
    key_file.write_all(KEY.as_bytes()).unwrap();
    let policy = format!(
        "[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{upstream_port}]\nhttp = true\n\
         [channels.model]\nupstream = \"http://127.0.0.1:{upstream_port}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{file:{}}}\"\nmethods = [\"GET\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n",
        key_file.path().display()
    );
    let log = Arc::new(MemoryLog::default());
    let egress = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        Arc::new(ScriptedResolver::new()),
        log.clone(),
    )
    .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let served = egress
        .serve_sandbox(l, "scrub", None, &format!("127.0.0.1:{port}"))
        .unwrap();
    Proxy {
        _egress: egress,
        _served: served,
        port,
        log,
        _key_file: key_file,
    }
}

/// A client of the proxy reading one response: its head, then its body as it arrives.
struct Client {
    reader: BufReader<TcpStream>,
    head: String,
    chunked: bool,
    body: Vec<u8>,
    done: bool,
}

impl Client {
    fn get(proxy_port: u16, target: &str) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
        // A bound on a hang (a proxy that buffered would never answer), not a timing check.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut w = stream.try_clone().unwrap();
        write!(
            w,
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{proxy_port}\r\nAuthorization: Bearer made-up-in-the-sandbox\r\nAccept-Encoding: gzip, br\r\nRange: bytes=0-7\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "no answer: {head}"
            );
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        Self {
            reader,
            head,
            chunked,
            body: Vec::new(),
            done: false,
        }
    }

    fn status(&self) -> u16 {
        self.head
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// Reads one more piece of the body; false at its end.
    fn read_some(&mut self) -> bool {
        if self.done {
            return false;
        }
        if !self.chunked {
            let mut buf = [0u8; 4096];
            let n = self.reader.read(&mut buf).unwrap();
            self.body.extend_from_slice(&buf[..n]);
            self.done = n == 0;
            return n > 0;
        }
        let mut size = String::new();
        self.reader.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut data = vec![0u8; n + 2];
        self.reader.read_exact(&mut data).unwrap();
        self.body.extend_from_slice(&data[..n]);
        if n == 0 {
            self.done = true;
        }
        n > 0
    }

    /// Reads until the body received so far contains `needle` (from `from` on).
    fn read_until(&mut self, needle: &[u8], from: usize) {
        while !self.body[from..].windows(needle.len()).any(|w| w == needle) {
            assert!(
                self.read_some(),
                "body ended before {:?}: {}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&self.body)
            );
        }
    }

    fn read_to_end(&mut self) -> String {
        while self.read_some() {}
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn assert_no_form(text: &str, place: &str) {
    for (name, value) in forms() {
        assert!(!text.contains(&value), "{name} form in {place}: {text}");
    }
}

#[test]
fn net_6_credential_echoed_in_a_response_body_is_scrubbed_in_every_form() {
    let (_go_tx, go_rx) = mpsc::channel();
    let (up_port, record) = upstream(go_rx);
    let proxy = proxy(up_port);

    let mut c = Client::get(proxy.port, "/channels/model/v1/echo");
    let body = c.read_to_end();
    assert_eq!(c.status(), 401, "{}", c.head);
    assert_no_form(&c.head, "the response head");
    assert_no_form(&body, "the response body");
    assert_eq!(
        c.header("x-echo-auth").as_deref(),
        Some("Bearer [REDACTED]")
    );
    assert_eq!(c.header("x-echo-b64").as_deref(), Some("[REDACTED]"));
    // The length changed, so the proxy does not repeat the upstream's Content-Length.
    assert_eq!(c.header("content-length"), None, "{}", c.head);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["error"]["message"],
        "Incorrect API key provided: [REDACTED]"
    );
    for field in ["json", "base64", "percent", "hex"] {
        assert_eq!(v["error"][field], "[REDACTED]", "{field}: {body}");
    }

    // Positive control: the upstream received the credential and echoed every form of it.
    let rec = record.lock().unwrap();
    let head = rec.heads[0].to_ascii_lowercase();
    assert!(
        rec.heads[0].contains(&format!("Bearer {KEY}")),
        "{}",
        rec.heads[0]
    );
    // The body was asked for as written and whole.
    assert!(head.contains("accept-encoding: identity"), "{head}");
    assert!(!head.contains("range:"), "{head}");
    let sent = String::from_utf8_lossy(&rec.sent).into_owned();
    for (name, value) in forms() {
        assert!(
            sent.contains(&value),
            "control: upstream sent no {name} form"
        );
    }
    drop(rec);
    let scrubbed: Vec<_> = proxy
        .log
        .lines()
        .into_iter()
        .filter(|l| l["event"] == "egress_credential_scrubbed")
        .collect();
    assert_eq!(scrubbed.len(), 1, "{scrubbed:?}");
    assert_eq!(scrubbed[0]["channel"], "model");
    assert!(scrubbed[0]["replaced"].as_u64().unwrap() >= 5);

    // Positive control: the same echo through plain forwarding (no channel, so nothing to
    // scrub) reaches the client verbatim, so the checks above can fail.
    let mut plain = Client::get(proxy.port, &format!("http://127.0.0.1:{up_port}/v1/echo"));
    let plain_body = plain.read_to_end();
    assert_eq!(plain.status(), 401);
    assert!(plain_body.contains(&forms()[2].1), "{plain_body}");
    assert!(plain_body.contains(&forms()[3].1), "{plain_body}");
}

#[test]
fn net_6_credential_cut_across_sse_chunks_is_scrubbed_and_events_stay_unbuffered() {
    let (go, go_rx) = mpsc::channel();
    let (up_port, record) = upstream(go_rx);
    let proxy = proxy(up_port);
    let mut c = Client::get(proxy.port, "/channels/model/v1/stream");
    assert_eq!(c.status(), 200, "{}", c.head);
    assert!(c.chunked, "{}", c.head);
    // The first event arrives while the upstream is still waiting: nothing is buffered.
    c.read_until(b"data: {\"n\": 1}\n\n", 0);
    go.send(()).unwrap();
    for (name, _) in forms() {
        // Everything up to the start of the credential arrives; its first half (sent, and
        // alone at the proxy until the upstream sends the rest) does not.
        let prefix = format!("data: {{\"form\": \"{name}\", \"v\": \"");
        let from = c.body.len();
        c.read_until(prefix.as_bytes(), from);
        assert!(
            c.body.ends_with(prefix.as_bytes()),
            "part of the {name} form passed: {}",
            String::from_utf8_lossy(&c.body)
        );
        go.send(()).unwrap();
    }
    let body = c.read_to_end();
    assert_no_form(&body, "the event stream");
    for (name, _) in forms() {
        let event = format!("data: {{\"form\": \"{name}\", \"v\": \"[REDACTED]\"}}\n\n");
        assert!(body.contains(&event), "{name}: {body}");
    }
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");

    // Positive control: the upstream sent every form, each cut in two chunks.
    let sent = String::from_utf8_lossy(&record.lock().unwrap().sent).into_owned();
    for (name, value) in forms() {
        assert!(
            sent.contains(&value),
            "control: upstream sent no {name} form"
        );
    }
    let scrubbed = proxy
        .log
        .lines()
        .into_iter()
        .find(|l| l["event"] == "egress_credential_scrubbed")
        .unwrap();
    assert_eq!(scrubbed["replaced"], forms().len() as u64);
}

#[test]
fn net_6_an_encoded_channel_response_is_refused_not_passed_unscanned() {
    let (_go, go_rx) = mpsc::channel();
    let (up_port, _record) = upstream(go_rx);
    let proxy = proxy(up_port);
    let mut c = Client::get(proxy.port, "/channels/model/v1/gzip");
    let body = c.read_to_end();
    assert_eq!(c.status(), 502, "{}", c.head);
    assert_eq!(
        c.header("x-airlock-reason").as_deref(),
        Some("upstream_encoded_response")
    );
    assert!(!body.contains("abcd"));
    // Control: an identity-encoded answer from the same upstream passes (scrubbed).
    let mut ok = Client::get(proxy.port, "/channels/model/v1/echo");
    ok.read_to_end();
    assert_eq!(ok.status(), 401);
}

#[test]
fn net_6_a_credential_too_short_to_scrub_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "abc").unwrap();
    let policy = |file: &std::path::Path| {
        format!(
            "[channels.model]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{file:{}}}\"\n",
            file.display()
        )
    };
    let err = Policy::from_toml(&policy(&short), &EnvAndFiles).unwrap_err();
    assert!(err.to_string().contains("too short to scrub"), "{err}");
    // Control: a four-byte credential loads.
    std::fs::write(&short, "abcd").unwrap();
    Policy::from_toml(&policy(&short), &EnvAndFiles).unwrap();
}
