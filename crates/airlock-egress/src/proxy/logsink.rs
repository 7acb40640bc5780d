//! Where a proxy's decision and connection lines go (NET-7), and the
//! lines themselves.

use std::io::Write;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::authority::Ipv4Text;
use crate::decide::Decision;

/// Where decision and connection lines go.
pub trait LogSink: Send + Sync + std::fmt::Debug {
    fn line(&self, line: &Line<'_>);
}

/// One decision or connection line of a listener: the event and the
/// sandbox (and run) it belongs to.
///
/// The frequent lines (a decision, a forwarded response, a closed tunnel)
/// are typed and serialised field by field straight into the sink's
/// buffer: no `serde_json::Value` tree per request. Their keys come out in
/// the order a `serde_json::Value` object prints them (sorted), so a line
/// reads exactly as it did when it was built as a `Value`
/// (`typed_lines_print_as_their_value_did`). Rare lines (refusals before
/// a decision, channels) are still built as a `Value`.
#[derive(Debug)]
pub struct Line<'a> {
    pub(crate) sandbox: &'a str,
    pub(crate) run: Option<&'a str>,
    pub(crate) event: Event<'a>,
}

#[derive(Debug)]
pub(crate) enum Event<'a> {
    /// `egress_decision` for a CONNECT or a plain request.
    Decision { kind: &'a str, d: &'a Decision },
    /// `egress_response` of a forwarded request.
    Response {
        host: &'a str,
        resolved_ip: IpAddr,
        status: u16,
        duration_ms: u64,
        reused_connection: bool,
    },
    /// `egress_connection_closed` of a tunnel.
    Closed {
        host: Option<&'a str>,
        port: u16,
        resolved_ip: IpAddr,
        bytes_up: u64,
        bytes_down: u64,
        duration_ms: u64,
    },
    /// Anything else, as an object (the sandbox and run are added to it).
    Value(serde_json::Value),
}

impl Line<'_> {
    /// The line as a JSON value (tests and sinks that add fields).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl Line<'_> {
    /// Appends the line as JSON to `out`, the same bytes as serialising it: the frequent
    /// lines with their keys and fixed values copied as they are, only the values that vary
    /// serialised (and escaped). On an error, `out` may hold part of the line.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        fn val<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> serde_json::Result<()> {
            serde_json::to_writer(&mut *out, v)
        }
        // An address as serde writes it (its `Display` text, quoted), without the formatting
        // machinery for IPv4: two of a plain request's log fields are addresses.
        fn ip_val(out: &mut Vec<u8>, ip: &IpAddr) -> serde_json::Result<()> {
            match ip {
                IpAddr::V4(v4) => {
                    out.push(b'"');
                    out.extend_from_slice(Ipv4Text::new(*v4).as_str().as_bytes());
                    out.push(b'"');
                    Ok(())
                }
                IpAddr::V6(_) => val(out, ip),
            }
        }
        let run_and_sandbox = |out: &mut Vec<u8>| {
            if let Some(r) = self.run {
                out.extend_from_slice(br#","run":"#);
                val(out, r)?;
            }
            out.extend_from_slice(br#","sandbox":"#);
            val(out, self.sandbox)
        };
        match &self.event {
            Event::Decision { kind, d } => {
                out.extend_from_slice(if d.allow {
                    br#"{"decision":"allow","event":"egress_decision","host":"#
                } else {
                    br#"{"decision":"deny","event":"egress_decision","host":"#
                });
                val(out, &d.host)?;
                out.extend_from_slice(br#","kind":"#);
                val(out, kind)?;
                out.extend_from_slice(br#","port":"#);
                val(out, &d.port)?;
                out.extend_from_slice(br#","reason":"#);
                val(out, d.reason)?;
                out.extend_from_slice(br#","resolved":["#);
                for (i, ip) in d.resolved.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    ip_val(out, ip)?;
                }
                out.push(b']');
                out.extend_from_slice(br#","rule":"#);
                val(out, &d.rule)?;
                run_and_sandbox(out)?;
            }
            Event::Response {
                host,
                resolved_ip,
                status,
                duration_ms,
                reused_connection,
            } => {
                out.extend_from_slice(br#"{"duration_ms":"#);
                val(out, duration_ms)?;
                out.extend_from_slice(br#","event":"egress_response","host":"#);
                val(out, host)?;
                out.extend_from_slice(br#","resolved_ip":"#);
                ip_val(out, resolved_ip)?;
                out.extend_from_slice(if *reused_connection {
                    br#","reused_connection":true"#
                } else {
                    br#","reused_connection":false"#
                });
                run_and_sandbox(out)?;
                out.extend_from_slice(br#","status":"#);
                val(out, status)?;
            }
            Event::Closed {
                host,
                port,
                resolved_ip,
                bytes_up,
                bytes_down,
                duration_ms,
            } => {
                out.extend_from_slice(br#"{"bytes_down":"#);
                val(out, bytes_down)?;
                out.extend_from_slice(br#","bytes_up":"#);
                val(out, bytes_up)?;
                out.extend_from_slice(br#","duration_ms":"#);
                val(out, duration_ms)?;
                out.extend_from_slice(br#","event":"egress_connection_closed","host":"#);
                val(out, host)?;
                out.extend_from_slice(br#","kind":"connect","port":"#);
                val(out, port)?;
                out.extend_from_slice(br#","resolved_ip":"#);
                ip_val(out, resolved_ip)?;
                run_and_sandbox(out)?;
            }
            Event::Value(_) => return val(out, self),
        }
        out.push(b'}');
        Ok(())
    }
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Keys in sorted order (what a `Value` object prints), `run` only when there is one.
        let run = |m: &mut S::SerializeMap| match self.run {
            Some(r) => m.serialize_entry("run", r),
            None => Ok(()),
        };
        match &self.event {
            Event::Decision { kind, d } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("decision", if d.allow { "allow" } else { "deny" })?;
                m.serialize_entry("event", "egress_decision")?;
                m.serialize_entry("host", &d.host)?;
                m.serialize_entry("kind", kind)?;
                m.serialize_entry("port", &d.port)?;
                m.serialize_entry("reason", d.reason)?;
                m.serialize_entry("resolved", &d.resolved)?;
                m.serialize_entry("rule", &d.rule)?;
                run(&mut m)?;
                m.serialize_entry("sandbox", self.sandbox)?;
                m.end()
            }
            Event::Response {
                host,
                resolved_ip,
                status,
                duration_ms,
                reused_connection,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("duration_ms", duration_ms)?;
                m.serialize_entry("event", "egress_response")?;
                m.serialize_entry("host", host)?;
                m.serialize_entry("resolved_ip", resolved_ip)?;
                m.serialize_entry("reused_connection", reused_connection)?;
                run(&mut m)?;
                m.serialize_entry("sandbox", self.sandbox)?;
                m.serialize_entry("status", status)?;
                m.end()
            }
            Event::Closed {
                host,
                port,
                resolved_ip,
                bytes_up,
                bytes_down,
                duration_ms,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("bytes_down", bytes_down)?;
                m.serialize_entry("bytes_up", bytes_up)?;
                m.serialize_entry("duration_ms", duration_ms)?;
                m.serialize_entry("event", "egress_connection_closed")?;
                m.serialize_entry("host", host)?;
                m.serialize_entry("kind", "connect")?;
                m.serialize_entry("port", port)?;
                m.serialize_entry("resolved_ip", resolved_ip)?;
                run(&mut m)?;
                m.serialize_entry("sandbox", self.sandbox)?;
                m.end()
            }
            Event::Value(v) => {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.insert("sandbox".into(), self.sandbox.into());
                    if let Some(r) = self.run {
                        o.insert("run".into(), r.into());
                    }
                }
                v.serialize(s)
            }
        }
    }
}

/// Discards lines.
#[derive(Debug, Default)]
pub struct NullLog;
impl LogSink for NullLog {
    fn line(&self, _: &Line<'_>) {}
}

/// Keeps lines in memory (tests, and the `egress` field of results).
#[derive(Debug, Default)]
pub struct MemoryLog(Mutex<Vec<serde_json::Value>>);
impl MemoryLog {
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}
impl LogSink for MemoryLog {
    fn line(&self, line: &Line<'_>) {
        let v = line.to_value();
        if let Ok(mut l) = self.0.lock() {
            l.push(v);
        }
    }
}

/// Writes one JSON line per event to a writer (a file, stdout, stderr).
///
/// [`WriterLog::new`] writes each line before [`LogSink::line`] returns,
/// with one `write` of the whole line. [`WriterLog::buffered`] appends
/// lines to a buffer that a thread of its own writes out every
/// [`WRITE_EVERY`] (or at once when it holds [`BUFFER_BYTES`]): a busy proxy
/// then pays a copy per line instead of a system call and a thread
/// wake-up. When the buffer is full the proxy waits for the writer (no
/// line is dropped); dropping the log writes the rest.
pub struct WriterLog(Sink);

enum Sink {
    Direct(Mutex<Box<dyn Write + Send>>),
    Buffered {
        shared: Arc<Batch>,
        writer: Option<std::thread::JoinHandle<()>>,
    },
}

/// How long a line may wait in a buffered log before it is written.
pub const WRITE_EVERY: Duration = Duration::from_millis(50);
/// What a buffered log holds before writers wait.
pub const BUFFER_BYTES: usize = 1 << 20;

/// The buffer between the proxy's threads and the writer thread.
struct Batch {
    state: Mutex<BatchState>,
    /// The buffer is full, or the log is closing: write now.
    full: Condvar,
    /// The writer took the buffer: there is room again.
    room: Condvar,
}

#[derive(Default)]
struct BatchState {
    buf: Vec<u8>,
    closed: bool,
}

impl WriterLog {
    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self(Sink::Direct(Mutex::new(w)))
    }

    /// A log written by a thread of its own (see the type's docs); when
    /// the thread cannot be started, lines are written directly.
    pub fn buffered(w: Box<dyn Write + Send>) -> Self {
        let shared = Arc::new(Batch {
            state: Mutex::new(BatchState::default()),
            full: Condvar::new(),
            room: Condvar::new(),
        });
        // The writer goes to the thread through a slot, so that a failed
        // spawn leaves it here.
        let slot = Arc::new(Mutex::new(Some(w)));
        let (theirs, their_slot) = (shared.clone(), slot.clone());
        let spawned = std::thread::Builder::new()
            .name("egress-log".into())
            .spawn(move || {
                if let Some(w) = their_slot.lock().ok().and_then(|mut s| s.take()) {
                    write_batches(&theirs, w);
                }
            });
        match spawned {
            Ok(handle) => Self(Sink::Buffered {
                shared,
                writer: Some(handle),
            }),
            Err(_) => match slot.lock().ok().and_then(|mut s| s.take()) {
                Some(w) => Self::new(w),
                None => Self::new(Box::new(std::io::sink())),
            },
        }
    }
}

/// The writer thread: takes the whole buffer every [`WRITE_EVERY`] (sooner
/// when it fills) and writes it with the lock released; ends, after a last
/// write, once the log is closed.
fn write_batches(b: &Batch, mut w: Box<dyn Write + Send>) {
    let mut spare = Vec::new();
    loop {
        let Ok(mut st) = b.state.lock() else { return };
        if st.buf.len() < BUFFER_BYTES && !st.closed {
            st = match b.full.wait_timeout(st, WRITE_EVERY) {
                Ok((st, _)) => st,
                Err(_) => return,
            };
        }
        std::mem::swap(&mut st.buf, &mut spare);
        let closed = st.closed;
        drop(st);
        b.room.notify_all();
        if !spare.is_empty() {
            let _ = w.write_all(&spare);
            let _ = w.flush();
            spare.clear();
            // A burst's buffer is not kept for ever.
            spare.shrink_to(BUFFER_BYTES);
        }
        if closed {
            return;
        }
    }
}

impl Drop for WriterLog {
    fn drop(&mut self) {
        if let Sink::Buffered { shared, writer } = &mut self.0 {
            if let Ok(mut st) = shared.state.lock() {
                st.closed = true;
            }
            shared.full.notify_all();
            if let Some(h) = writer.take() {
                let _ = h.join();
            }
        }
    }
}

impl std::fmt::Debug for WriterLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterLog")
    }
}

impl LogSink for WriterLog {
    fn line(&self, v: &Line<'_>) {
        match &self.0 {
            Sink::Direct(w) => {
                // The whole line first: one write, never one per JSON token.
                let mut line = Vec::with_capacity(256);
                if v.write_json(&mut line).is_err() {
                    return;
                }
                line.push(b'\n');
                if let Ok(mut w) = w.lock() {
                    let _ = w.write_all(&line);
                    let _ = w.flush();
                }
            }
            Sink::Buffered { shared, .. } => {
                let Ok(mut st) = shared.state.lock() else {
                    return;
                };
                while st.buf.len() >= BUFFER_BYTES && !st.closed {
                    shared.full.notify_one();
                    st = match shared.room.wait(st) {
                        Ok(st) => st,
                        Err(_) => return,
                    };
                }
                // Serialised straight into the buffer: no allocation per
                // line once the buffer has grown.
                let start = st.buf.len();
                if v.write_json(&mut st.buf).is_ok() {
                    st.buf.push(b'\n');
                } else {
                    // Never half a line.
                    st.buf.truncate(start);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value_line(v: serde_json::Value) -> Line<'static> {
        Line {
            sandbox: "s",
            run: None,
            event: Event::Value(v),
        }
    }

    /// A writer whose bytes the test reads back, counting its writes.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<(Vec<u8>, usize)>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut g = self.0.lock().unwrap();
            g.0.extend_from_slice(buf);
            g.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The typed lines print exactly as the `serde_json::Value` objects they replace did (the
    /// same keys, values and order), with and without a run, for an allowed and a denied
    /// decision, a response and a closed tunnel.
    #[test]
    fn typed_lines_print_as_their_value_did() {
        let allowed = Decision {
            allow: true,
            reason: "allowed",
            host: Some("api.example.org".into()),
            port: Some(443),
            rule: Some("*.example.org".into()),
            resolved: vec![
                "93.184.216.34".parse().unwrap(),
                "2001:db8::1".parse().unwrap(),
            ],
        };
        let denied = Decision {
            allow: false,
            reason: "no_matching_rule",
            host: None,
            port: None,
            rule: None,
            resolved: Vec::new(),
        };
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        for run in [None, Some("run-1")] {
            let with = |mut v: serde_json::Value| {
                v["sandbox"] = json!("sb \"quoted\"");
                if let Some(r) = run {
                    v["run"] = json!(r);
                }
                v
            };
            let cases: Vec<(Event<'_>, serde_json::Value)> = vec![
                (
                    Event::Decision {
                        kind: "connect",
                        d: &allowed,
                    },
                    json!({"event": "egress_decision", "kind": "connect", "host": allowed.host,
                        "port": allowed.port, "resolved": allowed.resolved, "rule": allowed.rule,
                        "decision": "allow", "reason": "allowed"}),
                ),
                (
                    Event::Decision {
                        kind: "http",
                        d: &denied,
                    },
                    json!({"event": "egress_decision", "kind": "http", "host": denied.host,
                        "port": denied.port, "resolved": denied.resolved, "rule": denied.rule,
                        "decision": "deny", "reason": "no_matching_rule"}),
                ),
                (
                    Event::Response {
                        host: "api.example.org:8080",
                        resolved_ip: ip,
                        status: 503,
                        duration_ms: 12,
                        reused_connection: true,
                    },
                    json!({"event": "egress_response", "host": "api.example.org:8080",
                        "resolved_ip": ip, "status": 503, "duration_ms": 12,
                        "reused_connection": true}),
                ),
                (
                    Event::Closed {
                        host: Some("api.example.org"),
                        port: 443,
                        resolved_ip: ip,
                        bytes_up: 1 << 40,
                        bytes_down: 7,
                        duration_ms: 0,
                    },
                    json!({"event": "egress_connection_closed", "kind": "connect",
                        "host": "api.example.org", "port": 443, "resolved_ip": ip,
                        "bytes_up": 1u64 << 40, "bytes_down": 7, "duration_ms": 0}),
                ),
                (
                    Event::Value(json!({"event": "egress_decision", "decision": "deny"})),
                    json!({"event": "egress_decision", "decision": "deny"}),
                ),
            ];
            for (event, old) in cases {
                let line = Line {
                    sandbox: "sb \"quoted\"",
                    run,
                    event,
                };
                let old = with(old);
                assert_eq!(serde_json::to_string(&line).unwrap(), old.to_string());
                let mut written = Vec::new();
                line.write_json(&mut written).unwrap();
                assert_eq!(String::from_utf8(written).unwrap(), old.to_string());
                assert_eq!(line.to_value(), old);
            }
        }
    }

    /// Lines from many threads reach a buffered log whole, each thread's in
    /// its order, none lost, once the log is dropped — also when they
    /// overflow the buffer many times (the writers wait for room); the
    /// direct log writes each line with exactly one write (not one per JSON
    /// token). How many writes a batch saves depends on timing and is
    /// measured, not tested.
    #[test]
    fn a_buffered_log_writes_every_line_whole_and_in_order() {
        let out = Shared::default();
        let log = Arc::new(WriterLog::buffered(Box::new(out.clone())));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        log.line(&value_line(
                            json!({"t": t, "i": i, "pad": "x".repeat(i % 500)}),
                        ));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(Arc::into_inner(log).expect("the only reference"));
        let (bytes, _) = out.0.lock().unwrap().clone();
        assert!(bytes.len() > 4 * BUFFER_BYTES, "the buffer overflowed");
        let text = String::from_utf8(bytes).unwrap();
        let mut next = [0u64; 4];
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let t = v["t"].as_u64().unwrap() as usize;
            assert_eq!(v["i"].as_u64().unwrap(), next[t], "thread {t} out of order");
            next[t] += 1;
        }
        assert_eq!(next, [5_000; 4], "lines lost");

        let out = Shared::default();
        let log = WriterLog::new(Box::new(out.clone()));
        for i in 0..10 {
            log.line(&value_line(json!({"i": i, "nested": {"a": [1, 2, 3]}})));
        }
        assert_eq!(out.0.lock().unwrap().1, 10, "one write per line");
    }
}
