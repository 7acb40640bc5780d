//! The server's structured log (OPS-1): one JSON object per line on stderr,
//! written by a background thread so that no request, run or proxied
//! connection waits for the terminal or the file behind stderr.
//!
//! Two kinds of line share the stream:
//! - `tracing` events of the service and the front ends (the access log
//!   `event = "request"`, the scheduler, the emergency stop, …), their
//!   fields at the top level;
//! - egress lines (NET-7): each sandbox proxy's decision and
//!   closed-connection lines, as the proxy built them (sandbox, run, host,
//!   port, resolved address, rule, decision, reason, bytes, duration), with
//!   `timestamp`, `level` and `target` added.
//!
//! Lines are queued and written in order; when the queue is full, the
//! writer is waited for (nothing is dropped). What is still queued when the
//! process is killed is lost; a clean exit drops the [`Guard`], which
//! writes the rest.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use airlock_egress::proxy::{Line, LogSink};
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// Keeps the writer thread; dropping it writes what is queued.
pub struct Guard(#[allow(dead_code)] Option<WorkerGuard>);

/// Lines the log queue holds before a writer waits for the writer thread.
const LOG_QUEUE_LINES: usize = 4096;

/// The process's log writer, once [`init`] ran.
static WRITER: OnceLock<NonBlocking> = OnceLock::new();

/// The same clock format as audit events: RFC 3339, UTC, milliseconds.
struct Rfc3339Ms;
impl FormatTime for Rfc3339Ms {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        w.write_str(&airlock_service::rfc3339(airlock_service::now_ms()))
    }
}

/// Installs the JSON subscriber on stderr at the level named by
/// `AIRLOCK_LOG` (`error`, `warn`, `info` (default), `debug`, `trace`,
/// `off`). A second call (or a subscriber installed already) keeps the
/// first.
pub fn init() -> Guard {
    let level = match std::env::var("AIRLOCK_LOG").as_deref() {
        Ok("error") => tracing::level_filters::LevelFilter::ERROR,
        Ok("warn") => tracing::level_filters::LevelFilter::WARN,
        Ok("debug") => tracing::level_filters::LevelFilter::DEBUG,
        Ok("trace") => tracing::level_filters::LevelFilter::TRACE,
        Ok("off") => tracing::level_filters::LevelFilter::OFF,
        Ok("info") | Err(_) => tracing::level_filters::LevelFilter::INFO,
        Ok(other) => {
            eprintln!(
                "airlock: warning: AIRLOCK_LOG={other:?} is not a level (error, warn, info, debug, trace, off); using info"
            );
            tracing::level_filters::LevelFilter::INFO
        }
    };
    if WRITER.get().is_some() {
        return Guard(None);
    }
    // The queue's slots are allocated and initialised up front: the
    // default of 128,000 lines kept 3.9 MiB resident in an idle server
    // (issue 14, goal 4). 4,096 lines are 128 KiB, more than a burst of
    // requests and egress decisions queues while the writer thread is
    // awake; past that, writers wait for it (nothing is dropped).
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .lossy(false)
        .thread_name("airlock-log")
        .finish(std::io::stderr());
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_timer(Rfc3339Ms)
        .with_max_level(level)
        .with_writer(writer.clone())
        .finish();
    if tracing::subscriber::set_global_default(subscriber).is_err() || WRITER.set(writer).is_err() {
        return Guard(None);
    }
    EGRESS_ON.get_or_init(|| level >= tracing::level_filters::LevelFilter::INFO);
    Guard(Some(guard))
}

/// Whether egress lines are written (they are `info`).
static EGRESS_ON: OnceLock<bool> = OnceLock::new();

/// Where sandbox proxies write their decision and connection lines: the
/// structured log once [`init`] ran (and its level lets `info` through),
/// otherwise nowhere.
pub fn egress_sink() -> Arc<dyn LogSink> {
    match WRITER.get() {
        Some(w) if EGRESS_ON.get().copied().unwrap_or(false) => {
            Arc::new(EgressLines(Mutex::new(w.clone())))
        }
        _ => Arc::new(airlock_egress::proxy::NullLog),
    }
}

/// Egress lines on the structured log.
struct EgressLines(Mutex<NonBlocking>);

impl std::fmt::Debug for EgressLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EgressLines")
    }
}

impl LogSink for EgressLines {
    fn line(&self, line: &Line<'_>) {
        // The proxy's line with the structured log's fields in front: the line is serialised
        // once, straight after them (it is always an object and never has these keys).
        let mut body = Vec::with_capacity(256);
        if line.write_json(&mut body).is_err() {
            return;
        }
        let Some(rest) = body.strip_prefix(b"{") else {
            return;
        };
        let mut out = Vec::with_capacity(body.len() + 96);
        out.extend_from_slice(b"{\"timestamp\":");
        if serde_json::to_writer(
            &mut out,
            &airlock_service::rfc3339(airlock_service::now_ms()),
        )
        .is_err()
        {
            return;
        }
        out.extend_from_slice(b",\"level\":\"INFO\",\"target\":\"airlock::egress\"");
        if rest != b"}" {
            out.push(b',');
        }
        out.extend_from_slice(rest);
        out.push(b'\n');
        // One write per line: the writer queues each write as a whole, so
        // lines from several threads never interleave.
        if let Ok(mut w) = self.0.lock() {
            let _ = w.write_all(&out);
        }
    }
}
