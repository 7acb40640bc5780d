//! Bounded capture of a workload's stdout and stderr (SBX-1).
//!
//! The reader always drains the pipe so the child never blocks on a full
//! pipe; bytes beyond the budget are counted and dropped.

use std::io::Read;

use serde::Serialize;

/// What was captured from one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Captured {
    #[serde(skip)]
    pub bytes: Vec<u8>,
    /// Bytes the workload wrote in total.
    pub total_bytes: u64,
    /// Bytes beyond the budget, counted and dropped.
    pub dropped_bytes: u64,
}

impl Captured {
    pub fn truncated(&self) -> bool {
        self.dropped_bytes > 0
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Which stream a live chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where live output chunks go. Bounded: when the receiver falls behind,
/// chunks are dropped from the live view (the captured buffer still has
/// them, up to its budget) rather than blocking the workload.
pub type LiveSink = std::sync::mpsc::SyncSender<(Stream, Vec<u8>)>;

/// Reads `r` to end of file, keeping at most `budget` bytes.
pub fn drain<R: Read>(r: R, budget: usize) -> Captured {
    drain_live(r, budget, None)
}

/// Like [`drain`], also sending each chunk (within the budget) to `live`.
pub fn drain_live<R: Read>(mut r: R, budget: usize, live: Option<(Stream, LiveSink)>) -> Captured {
    let mut out = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.total_bytes += n as u64;
                let room = budget.saturating_sub(out.bytes.len());
                let keep = room.min(n);
                out.bytes.extend_from_slice(&buf[..keep]);
                out.dropped_bytes += (n - keep) as u64;
                if keep > 0
                    && let Some((stream, tx)) = &live
                {
                    let _ = tx.try_send((*stream, buf[..keep].to_vec()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbx_1_bytes_beyond_budget_are_counted_and_dropped() {
        let data = vec![b'x'; 10_000];
        let c = drain(&data[..], 4096);
        assert_eq!(c.bytes.len(), 4096);
        assert_eq!(c.total_bytes, 10_000);
        assert_eq!(c.dropped_bytes, 10_000 - 4096);
        let small = drain(&b"hi"[..], 4096); // positive control
        assert_eq!(small.bytes, b"hi");
        assert!(!small.truncated());
    }
}
