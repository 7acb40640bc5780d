//! The pure core of airlock's tamper-evident audit log (AUD-1, AUD-2, AUD-4).
//!
//! - [`jcs`]: RFC 8785 JSON Canonicalization Scheme, the canonical bytes an event is hashed over.
//! - [`chain`]: the audit event type, the per-workspace hash chain (the published algorithm),
//!   appending and verifying.
//! - [`export`]: JSON Lines export and import; `verify_export.py` next to this crate's manifest
//!   verifies an export with nothing but the Python 3 standard library (and `cryptography` for
//!   checkpoint signatures).
//! - [`line`]: a stored (or exported) line verified as it is: its bytes are checked to be the
//!   canonical form of an event and hashed directly ([`Verifier::push_line`]).
//! - [`checkpoint`]: signed checkpoints (`airlock-checkpoint-v1`): the signed bytes, Ed25519
//!   signing and verification, the stored line, reading a file of them.
//! - [`hex`]: lowercase hex for hashes.
//!
//! Architecture invariant: this crate does no I/O, keeps no clock and knows nothing of a
//! database. Times, ids and redacted metadata come from the caller; storing the chain (and
//! refusing updates and deletes, AUD-3), the signing key and the checkpoint files (AUD-4) live in
//! other crates; signing and checking a checkpoint's signature are pure and live here.
//! Nothing here panics on input: every malformed or tampered event is an error value.
//!
//! ```
//! use airlock_audit::{Actor, AuditEvent, ChainError, append, verify, verify_against};
//!
//! let event = |seq| AuditEvent {
//!     workspace_id: "ws-1".into(),
//!     seq,
//!     at: "2026-01-02T03:04:05Z".into(),
//!     actor: Actor::System,
//!     event_type: "config.changed".into(),
//!     target: None,
//!     request_id: None,
//!     run_id: None,
//!     action_id: None,
//!     decision: None,
//!     payload_hash: None,
//!     result: Some("ok".into()),
//!     metadata: serde_json::json!({"key": "max_runs", "value": 4}),
//! };
//! let first = append(None, event(1))?;
//! let second = append(Some(&first), event(2))?;
//! let mut chain = vec![first, second];
//! let summary = verify(&chain)?;
//! assert_eq!((summary.count, summary.head), (2, chain[1].hash));
//!
//! chain[0].event.metadata["value"] = serde_json::json!(400);
//! assert_eq!(verify(&chain), Err(ChainError::Edited { seq: 1 }));
//!
//! // Truncation shows only against a checkpoint kept outside the database.
//! chain.truncate(0);
//! assert!(verify(&chain).is_ok());
//! assert_eq!(
//!     verify_against(&chain, Some((2, summary.head))).map_err(|e| e.first_bad_seq()),
//!     Err(1)
//! );
//! # Ok::<(), ChainError>(())
//! ```

pub mod chain;
pub mod checkpoint;
pub mod export;
pub mod hex;
pub mod jcs;
pub mod line;

pub use chain::{
    Actor, AuditEvent, ChainError, ChainedEvent, GENESIS, InRuns, PreparedLine, Verifier,
    VerifySummary, append, event_bytes, link_hash, map_in_runs, prepare_lines, verify,
    verify_against,
};
pub use checkpoint::{Checkpoint, CheckpointError, CheckpointFile, SignedCheckpoint};
pub use export::{ExportError, from_json_line, to_json_line};
pub use jcs::{JcsError, canonicalize};
pub use line::{LineError, LineView};
