//! Where a proxy's decision and connection lines go (NET-7).

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Where decision and connection lines go.
pub trait LogSink: Send + Sync + std::fmt::Debug {
    fn line(&self, v: serde_json::Value);
}

/// Discards lines.
#[derive(Debug, Default)]
pub struct NullLog;
impl LogSink for NullLog {
    fn line(&self, _: serde_json::Value) {}
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
    fn line(&self, v: serde_json::Value) {
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
    fn line(&self, v: serde_json::Value) {
        match &self.0 {
            Sink::Direct(w) => {
                // The whole line first: one write, never one per JSON token.
                let mut line = v.to_string().into_bytes();
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
                if serde_json::to_writer(&mut st.buf, &v).is_ok() {
                    st.buf.push(b'\n');
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
                        log.line(json!({"t": t, "i": i, "pad": "x".repeat(i % 500)}));
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
            log.line(json!({"i": i, "nested": {"a": [1, 2, 3]}}));
        }
        assert_eq!(out.0.lock().unwrap().1, 10, "one write per line");
    }
}
