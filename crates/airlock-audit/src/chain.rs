//! The per-workspace audit hash chain (AUD-2) and its verifier (AUD-4).
//!
//! # The published algorithm (`airlock-audit-v1`)
//!
//! Every workspace has its own chain of events numbered `seq = 1, 2, 3, …` without gaps.
//!
//! 1. `event_bytes` = the RFC 8785 (JCS) canonical UTF-8 bytes of the event as a JSON object
//!    with exactly these members (absent optional values are `null`, never omitted):
//!    `workspace_id` (string), `seq` (integer), `at` (string, RFC 3339 UTC), `actor` (object:
//!    `{"kind":"human"|"agent"|"service","id":string}` or `{"kind":"system"}`), `event_type`
//!    (string), `target`, `request_id`, `run_id`, `action_id`, `decision`, `payload_hash`,
//!    `result` (each string or null), `metadata` (object).
//! 2. `prev_hash` of event 1 is 32 zero bytes ([`GENESIS`]); of event `n > 1` it is `hash` of
//!    event `n - 1`.
//! 3. `hash = SHA-256("airlock-audit-v1\n" || prev_hash || event_bytes)`, where
//!    `"airlock-audit-v1\n"` is the 17 ASCII bytes of the domain separator (ending in a line
//!    feed, 0x0a), `prev_hash` is the 32 raw bytes, and `||` is concatenation.
//! 4. Hashes are written as 64 lowercase hex digits outside this crate.
//!
//! The head of a chain is the `hash` of its last event (GENESIS for an empty chain). A signed
//! checkpoint `(workspace, seq, head)` kept outside the database pins the chain up to `seq`, so
//! that truncation, or a rewrite that recomputes every later hash, is detected too.
//!
//! # What verification reports
//!
//! [`Verifier`] reads one workspace's events in the order given (the store reads them by
//! `seq`) and stops at the first problem, which names the first bad sequence number
//! ([`ChainError::first_bad_seq`]). Per event, in this order: workspace, sequence number,
//! the event's own hash, its link to the previous event, the checkpoint. An attacker who edits
//! an event *and* recomputes its hash moves the break to the following event
//! ([`ChainError::PrevMismatch`] there); one who recomputes every later hash as well is caught
//! only by a checkpoint.
//!
//! A stored line can be pushed as it is ([`Verifier::push_line`]): its bytes are checked to be
//! the canonical form of an event and hashed directly, which reaches the same verdict as
//! parsing and canonicalising it again on every line airlock writes, and refuses the
//! non-canonical lines the slower path let through ([`crate::line`] gives the argument).
//!
//! This module is pure: no I/O, no clock; the caller supplies `at` and redacted metadata.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hex;
use crate::jcs::{self, JcsError};
use crate::line::{LineError, LineView};

/// The domain separator that starts every hashed message (version 1 of the algorithm).
pub const DOMAIN_SEPARATOR: &[u8] = b"airlock-audit-v1\n";

/// The `prev_hash` of the first event of every chain.
pub const GENESIS: [u8; 32] = [0; 32];

/// Who did it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Actor {
    Human(String),
    Agent(String),
    Service(String),
    System,
}

/// One security-relevant act (AUD-1). Every field is covered by the hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEvent {
    pub workspace_id: String,
    /// 1-based, per workspace, without gaps.
    pub seq: u64,
    /// RFC 3339, UTC; produced by the caller.
    pub at: String,
    pub actor: Actor,
    pub event_type: String,
    pub target: Option<String>,
    pub request_id: Option<String>,
    pub run_id: Option<String>,
    pub action_id: Option<String>,
    pub decision: Option<String>,
    pub payload_hash: Option<String>,
    pub result: Option<String>,
    /// A JSON object, already redacted by the caller. Numbers in it must be representable as
    /// IEEE-754 doubles (see [`crate::jcs`]).
    pub metadata: serde_json::Value,
}

/// The JSON member names of an [`AuditEvent`], in declaration order.
pub const EVENT_FIELDS: [&str; 13] = [
    "workspace_id",
    "seq",
    "at",
    "actor",
    "event_type",
    "target",
    "request_id",
    "run_id",
    "action_id",
    "decision",
    "payload_hash",
    "result",
    "metadata",
];

/// An event with its place in the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainedEvent {
    pub event: AuditEvent,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

impl ChainedEvent {
    pub fn hash_hex(&self) -> String {
        hex::encode(&self.hash)
    }

    pub fn prev_hash_hex(&self) -> String {
        hex::encode(&self.prev_hash)
    }

    /// The hash the event's contents and `prev_hash` call for (equal to `hash` unless edited).
    pub fn expected_hash(&self) -> Result<[u8; 32], JcsError> {
        Ok(link_hash(&self.prev_hash, &event_bytes(&self.event)?))
    }
}

/// The canonical bytes the chain hashes: JCS of the event serialised to JSON.
pub fn event_bytes(e: &AuditEvent) -> Result<Vec<u8>, JcsError> {
    jcs::canonicalize_serialize(e)
}

/// `SHA-256("airlock-audit-v1\n" || prev || event_bytes)`.
pub fn link_hash(prev: &[u8; 32], event_bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOMAIN_SEPARATOR);
    h.update(prev);
    h.update(event_bytes);
    h.finalize().into()
}

/// A broken chain, or an event that cannot join one. Each names the first bad sequence number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChainError {
    #[error("event {seq} was edited: its hash does not match its contents")]
    Edited { seq: u64 },
    #[error("event {expected_seq} is missing")]
    Missing { expected_seq: u64 },
    #[error("event {seq} is out of order")]
    OutOfOrder { seq: u64 },
    #[error("sequence number {seq} appears more than once")]
    Duplicate { seq: u64 },
    #[error("event {seq} does not link to the event before it")]
    PrevMismatch { seq: u64 },
    #[error("event {seq} belongs to another workspace")]
    WorkspaceMismatch { seq: u64 },
    #[error("chain ends at event {have} but a checkpoint covers event {checkpoint_seq}")]
    Truncated { have: u64, checkpoint_seq: u64 },
    #[error("event {seq} does not match the checkpoint's head hash")]
    CheckpointMismatch { seq: u64 },
    #[error("event {seq} has metadata that is not a json object")]
    MetadataNotObject { seq: u64 },
    #[error("event {seq} has no canonical form")]
    Canonical {
        seq: u64,
        #[source]
        source: JcsError,
    },
    /// A stored line ([`Verifier::push_line`]) that is not the canonical form of an event.
    /// `seq` is the sequence number due at that line: what the line claims is not trusted.
    #[error("event {seq} is not stored in canonical form")]
    Malformed {
        seq: u64,
        #[source]
        source: LineError,
    },
}

impl ChainError {
    /// The first sequence number at which the chain cannot be trusted.
    pub fn first_bad_seq(&self) -> u64 {
        match *self {
            Self::Edited { seq }
            | Self::OutOfOrder { seq }
            | Self::Duplicate { seq }
            | Self::PrevMismatch { seq }
            | Self::WorkspaceMismatch { seq }
            | Self::CheckpointMismatch { seq }
            | Self::MetadataNotObject { seq }
            | Self::Canonical { seq, .. }
            | Self::Malformed { seq, .. } => seq,
            Self::Missing { expected_seq } => expected_seq,
            Self::Truncated { have, .. } => have.saturating_add(1),
        }
    }
}

/// Chains `event` after `prev` (`None` for a workspace's first event): checks that it is in the
/// same workspace, that its `seq` follows on, and that its metadata is a JSON object, then
/// computes its hash.
pub fn append(prev: Option<&ChainedEvent>, event: AuditEvent) -> Result<ChainedEvent, ChainError> {
    let seq = event.seq;
    let prev_hash = match prev {
        None => {
            if seq != 1 {
                return Err(seq_error(seq, 1));
            }
            GENESIS
        }
        Some(p) => {
            if event.workspace_id != p.event.workspace_id {
                return Err(ChainError::WorkspaceMismatch { seq });
            }
            if seq <= p.event.seq {
                return Err(ChainError::OutOfOrder { seq });
            }
            // Cannot overflow: seq > p.event.seq.
            if seq != p.event.seq + 1 {
                return Err(ChainError::Missing {
                    expected_seq: p.event.seq + 1,
                });
            }
            p.hash
        }
    };
    if !event.metadata.is_object() {
        return Err(ChainError::MetadataNotObject { seq });
    }
    let bytes = event_bytes(&event).map_err(|source| ChainError::Canonical { seq, source })?;
    let hash = link_hash(&prev_hash, &bytes);
    Ok(ChainedEvent {
        event,
        prev_hash,
        hash,
    })
}

/// The error for an event numbered `seq` where `expected` was due (`seq != expected`), for
/// the first event of a chain.
fn seq_error(seq: u64, expected: u64) -> ChainError {
    if seq > expected {
        ChainError::Missing {
            expected_seq: expected,
        }
    } else {
        ChainError::OutOfOrder { seq }
    }
}

/// The part of checking a stored line that does not depend on the lines before it: reading
/// it ([`LineView::parse`]) and hashing it ([`LineView::event_hash`]). Each line's hash
/// covers its own stored `prev_hash`, so lines can be prepared in any order or on several
/// threads; [`Verifier::push_prepared`] then checks the links and sequence in order.
#[derive(Debug, Clone)]
pub struct PreparedLine<'a>(Result<(LineView<'a>, [u8; 32]), LineError>);

impl<'a> PreparedLine<'a> {
    /// Reads and hashes `line` (the hash of a line that is not canonical is not computed).
    pub fn prepare(line: &'a str) -> Self {
        Self(LineView::parse(line).map(|view| {
            let hash = view.event_hash();
            (view, hash)
        }))
    }
}

/// [`PreparedLine::prepare`] over `lines` on up to `threads` threads at the same time (the
/// calling thread is one), in the order of `lines`, exactly as if prepared one by one
/// ([`map_in_runs`]).
pub fn prepare_lines<'a>(lines: &[&'a str], threads: usize) -> InRuns<PreparedLine<'a>> {
    map_in_runs(lines, threads, |l| PreparedLine::prepare(l))
}

/// The results of [`map_in_runs`], in the order of the items they were made from, kept in the
/// runs they were made in: joining the runs into one vector would move every result once
/// more (a prepared line is about 180 bytes, a third of the line it was made from).
#[derive(Debug, Clone)]
pub struct InRuns<U> {
    runs: Vec<Vec<U>>,
}

impl<U> InRuns<U> {
    pub fn len(&self) -> usize {
        self.runs.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.iter().all(Vec::is_empty)
    }

    /// The results, in the order of the items.
    pub fn iter(&self) -> std::iter::Flatten<std::slice::Iter<'_, Vec<U>>> {
        self.runs.iter().flatten()
    }
}

impl<'r, U> IntoIterator for &'r InRuns<U> {
    type Item = &'r U;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'r, Vec<U>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// `f` applied to each of `items` on up to `threads` threads at the same time (the calling
/// thread is one); the results are in the order of `items`, exactly as if mapped one by one.
///
/// The items are handed out in short runs, each to whichever thread is free, rather than in
/// one equal share per thread: `audit verify` runs a reading thread beside these, so on a
/// machine with as many cores as threads one of them is often set back, and with equal shares
/// the others would wait for it at the end of every page.
pub fn map_in_runs<T: Sync, U: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> U + Sync,
) -> InRuns<U> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return InRuns {
            runs: vec![items.iter().map(&f).collect()],
        };
    }
    // Runs of at most 64 items, at least four per thread where there are items enough.
    let run = (items.len() / (threads * 4)).clamp(1, 64);
    let runs: Vec<&[T]> = items.chunks(run).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<U>)> = Vec::new();
        // Each index is taken by exactly one thread (`fetch_add`), so every run is mapped
        // once; the order is restored below from the indices.
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(run) = runs.get(i) else { break };
            done.push((i, run.iter().map(&f).collect()));
        }
        done
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut parts = work();
        for h in others {
            match h.join() {
                Ok(v) => parts.extend(v),
                // Mapping does not panic (no panics on input); if it ever did, the panic is
                // passed on rather than an item silently skipped.
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        // Only the runs' headers move here, not their results.
        parts.sort_unstable_by_key(|(i, _)| *i);
        InRuns {
            runs: parts.into_iter().map(|(_, run)| run).collect(),
        }
    })
}

/// A verified chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifySummary {
    /// Events verified, which is also the last sequence number.
    pub count: u64,
    /// The hash of the last event (GENESIS for an empty chain).
    pub head: [u8; 32],
}

/// Verifies one workspace's chain, given in `seq` order from event 1.
pub fn verify<'a>(
    events: impl IntoIterator<Item = &'a ChainedEvent>,
) -> Result<VerifySummary, ChainError> {
    verify_against(events, None)
}

/// [`verify`], and also checks the chain against a checkpoint `(seq, head hash)` kept outside
/// the database: the chain must reach `seq` and its hash there must be `head`.
pub fn verify_against<'a>(
    events: impl IntoIterator<Item = &'a ChainedEvent>,
    checkpoint: Option<(u64, [u8; 32])>,
) -> Result<VerifySummary, ChainError> {
    let mut v = Verifier::new();
    if let Some((seq, head)) = checkpoint {
        v = v.with_checkpoint(seq, head);
    }
    for e in events {
        v.push(e)?;
    }
    v.finish()
}

/// Streaming verification, for chains read row by row: [`push`](Self::push) each event in
/// `seq` order, then [`finish`](Self::finish). `push` fails as soon as the chain is known to be
/// bad; `finish` gives the verdict.
#[derive(Debug, Clone)]
pub struct Verifier {
    workspace_id: Option<String>,
    /// Checkpoints by sequence number: the chain must have each hash at
    /// its number, and reach the highest.
    checkpoints: std::collections::BTreeMap<u64, [u8; 32]>,
    count: u64,
    head: [u8; 32],
    /// Set once an event arrived early: the number that should have come. Reading on decides
    /// whether it was deleted (never comes) or moved (comes later).
    gap_at: Option<u64>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    /// Takes the workspace from the first event.
    pub fn new() -> Self {
        Self {
            workspace_id: None,
            checkpoints: std::collections::BTreeMap::new(),
            count: 0,
            head: GENESIS,
            gap_at: None,
        }
    }

    /// Every event must belong to `workspace_id` (recommended: otherwise a wrong first event
    /// makes the rest look foreign).
    pub fn for_workspace(mut self, workspace_id: impl Into<String>) -> Self {
        self.workspace_id = Some(workspace_id.into());
        self
    }

    /// Starts after an event already trusted (a verified checkpoint's `seq` and `head`): the
    /// next event pushed must be `seq + 1` and link to `head`. What making the next
    /// checkpoint needs: only the events since the last one are read, not the whole chain.
    pub fn resume_after(mut self, seq: u64, head: [u8; 32]) -> Self {
        self.count = seq;
        self.head = head;
        self
    }

    /// The chain must reach `seq` and have hash `head` there. May be given several times
    /// (every checkpoint of a file): the chain must then match each, and a rewrite is named
    /// at the first checkpoint it changed.
    pub fn with_checkpoint(mut self, seq: u64, head: [u8; 32]) -> Self {
        self.checkpoints.insert(seq, head);
        self
    }

    /// Checks the next event.
    pub fn push(&mut self, e: &ChainedEvent) -> Result<(), ChainError> {
        let seq = e.event.seq;
        self.step(
            seq,
            |ws| ws == e.event.workspace_id,
            || e.event.workspace_id.clone(),
            || {
                e.expected_hash()
                    .map_err(|source| ChainError::Canonical { seq, source })
            },
            e.hash,
            e.prev_hash,
        )
    }

    /// Checks the next event as it is stored: a line in the export form
    /// ([`crate::export`]), hashed as it is ([`LineView`]: this is as strong as parsing it and
    /// canonicalising it again, and refuses every line that is not canonical). Returns the
    /// line's `seq` and `hash` once it has joined the chain, for a caller that also keeps
    /// them elsewhere (a database's key columns) and must check that they agree; `None` for
    /// a line read after a gap, whose verdict [`finish`](Self::finish) gives.
    pub fn push_line(&mut self, line: &str) -> Result<Option<(u64, [u8; 32])>, ChainError> {
        self.push_prepared(&PreparedLine::prepare(line))
    }

    /// [`push_line`](Self::push_line) for a line already read and hashed by
    /// [`PreparedLine::prepare`] (possibly on another thread): the same checks in the same
    /// order, so the same verdict.
    pub fn push_prepared(
        &mut self,
        p: &PreparedLine<'_>,
    ) -> Result<Option<(u64, [u8; 32])>, ChainError> {
        let (view, event_hash) = match &p.0 {
            Ok(ok) => ok,
            Err(source) => {
                return Err(match self.gap_at {
                    // Already broken earlier than this line.
                    Some(expected_seq) => ChainError::Missing { expected_seq },
                    None => ChainError::Malformed {
                        seq: self.count.saturating_add(1),
                        source: source.clone(),
                    },
                });
            }
        };
        self.step(
            view.seq,
            |ws| view.workspace_is(ws),
            || view.workspace_id(),
            || Ok(*event_hash),
            view.hash,
            view.prev_hash,
        )?;
        Ok((self.gap_at.is_none()).then_some((view.seq, view.hash)))
    }

    /// The checks of [`push`](Self::push) for an event however it was read, in the published
    /// order: workspace, sequence number, the event's own hash (computed only if the
    /// sequence number is the one due), its link, the checkpoint.
    fn step(
        &mut self,
        seq: u64,
        in_workspace: impl FnOnce(&str) -> bool,
        workspace: impl FnOnce() -> String,
        recompute: impl FnOnce() -> Result<[u8; 32], ChainError>,
        hash: [u8; 32],
        prev_hash: [u8; 32],
    ) -> Result<(), ChainError> {
        if let Some(missing) = self.gap_at {
            // Already broken; only find out whether the missing event turns up.
            return if seq == missing {
                Err(ChainError::OutOfOrder { seq: missing })
            } else {
                Ok(())
            };
        }
        match &self.workspace_id {
            Some(ws) if !in_workspace(ws) => {
                return Err(ChainError::WorkspaceMismatch { seq });
            }
            Some(_) => {}
            None => self.workspace_id = Some(workspace()),
        }
        let expected = self.count.saturating_add(1);
        if seq > expected {
            self.gap_at = Some(expected);
            return Ok(());
        }
        if seq < expected {
            return Err(if seq == 0 {
                ChainError::OutOfOrder { seq }
            } else {
                // 1..expected have each been seen once already.
                ChainError::Duplicate { seq }
            });
        }
        if recompute()? != hash {
            return Err(ChainError::Edited { seq });
        }
        if prev_hash != self.head {
            return Err(ChainError::PrevMismatch { seq });
        }
        if self
            .checkpoints
            .get(&seq)
            .is_some_and(|cp_head| *cp_head != hash)
        {
            return Err(ChainError::CheckpointMismatch { seq });
        }
        self.count = seq;
        self.head = hash;
        Ok(())
    }

    /// The verdict on everything pushed.
    pub fn finish(self) -> Result<VerifySummary, ChainError> {
        if let Some(expected_seq) = self.gap_at {
            return Err(ChainError::Missing { expected_seq });
        }
        if let Some((&cp_seq, &cp_head)) = self.checkpoints.last_key_value() {
            if self.count < cp_seq {
                return Err(ChainError::Truncated {
                    have: self.count,
                    checkpoint_seq: cp_seq,
                });
            }
            if cp_seq == 0 && cp_head != GENESIS {
                return Err(ChainError::CheckpointMismatch { seq: 0 });
            }
        }
        if self.checkpoints.get(&0).is_some_and(|h| *h != GENESIS) {
            return Err(ChainError::CheckpointMismatch { seq: 0 });
        }
        Ok(VerifySummary {
            count: self.count,
            head: self.head,
        })
    }
}
