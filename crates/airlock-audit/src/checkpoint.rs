//! Signed checkpoints (AUD-4): a statement "workspace W's chain had `seq` events and head hash
//! H at time T", signed with an Ed25519 key kept outside the database, and kept outside the
//! database too. A chain checked against its newest checkpoint
//! ([`crate::Verifier::with_checkpoint`]) shows a cut tail ([`crate::ChainError::Truncated`])
//! and a rewrite with recomputed hashes ([`crate::ChainError::CheckpointMismatch`]), which the
//! chain alone cannot.
//!
//! # The signed bytes (`airlock-checkpoint-v1`)
//!
//! `message = "airlock-checkpoint-v1\n" || JCS({"at": T, "head": H, "seq": N, "workspace_id": W})`
//!
//! where the domain separator is the 22 ASCII bytes shown (ending in a line feed), `T` is the
//! RFC 3339 UTC time as a string, `H` the head hash as 64 lowercase hex digits, `N` the last
//! sequence number covered (an integer below 2^53; 0 for an empty chain, whose head is 32 zero
//! bytes), `W` the workspace id, and JCS is RFC 8785 ([`crate::jcs`]). The signature is
//! Ed25519 (RFC 8032, pure) over `message`.
//!
//! # The stored line
//!
//! One checkpoint per line of a JSON Lines file (the same line is appended to an audit
//! export): the RFC 8785 form of
//! `{"at", "head", "seq", "signature" (128 hex digits), "type": "checkpoint", "version": 1,
//! "workspace_id"}`. A line that does not parse is not a checkpoint (a torn write: the reader
//! skips it and says so); a line that parses but whose signature does not verify with the
//! public key is a forgery, which the reader reports as a failure.
//!
//! Pure: no I/O and no clock; signing takes the 32-byte seed, verifying the 32-byte public key.

use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use crate::hex;
use crate::jcs::{self, JcsError};

/// The domain separator that starts every signed checkpoint message (version 1).
pub const CHECKPOINT_DOMAIN: &[u8] = b"airlock-checkpoint-v1\n";

/// The `type` member that marks a checkpoint line (an event line has no `type`).
pub const CHECKPOINT_TYPE: &str = "checkpoint";

/// Largest sequence number a checkpoint can name: JCS numbers are IEEE-754 doubles.
pub const MAX_CHECKPOINT_SEQ: u64 = (1 << 53) - 1;

/// What a checkpoint states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub workspace_id: String,
    /// The last sequence number covered (0: an empty chain).
    pub seq: u64,
    /// The chain's hash at `seq` ([`crate::GENESIS`] for 0).
    pub head: [u8; 32],
    /// RFC 3339 UTC, from the caller's clock.
    pub at: String,
}

/// A checkpoint and its signature, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCheckpoint {
    pub checkpoint: Checkpoint,
    pub signature: [u8; 64],
}

/// Why a checkpoint cannot be made, read or trusted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckpointError {
    #[error("sequence number {0} is too large for a checkpoint")]
    SeqTooLarge(u64),
    #[error("checkpoint has no canonical form: {0}")]
    Canonical(#[from] JcsError),
    #[error("the signing key is not a valid ed25519 seed")]
    BadSeed,
    #[error("the public key is not 32 bytes of hex")]
    BadPublicKey,
    #[error("line is not a checkpoint: {0}")]
    Malformed(String),
    #[error("the signature of the checkpoint of {workspace_id} at seq {seq} does not verify")]
    BadSignature { workspace_id: String, seq: u64 },
}

#[derive(Serialize)]
struct Statement<'a> {
    at: &'a str,
    head: String,
    seq: u64,
    workspace_id: &'a str,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    at: String,
    head: String,
    seq: u64,
    signature: String,
    #[serde(rename = "type")]
    kind: String,
    version: u64,
    workspace_id: String,
}

impl Checkpoint {
    /// The bytes the signature covers (see the module documentation).
    pub fn message(&self) -> Result<Vec<u8>, CheckpointError> {
        if self.seq > MAX_CHECKPOINT_SEQ {
            return Err(CheckpointError::SeqTooLarge(self.seq));
        }
        let body = jcs::canonicalize_serialize(&Statement {
            at: &self.at,
            head: hex::encode(&self.head),
            seq: self.seq,
            workspace_id: &self.workspace_id,
        })?;
        let mut m = CHECKPOINT_DOMAIN.to_vec();
        m.extend_from_slice(&body);
        Ok(m)
    }

    /// Signs with the 32-byte Ed25519 seed.
    pub fn sign(self, seed: &[u8; 32]) -> Result<SignedCheckpoint, CheckpointError> {
        let pair =
            Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| CheckpointError::BadSeed)?;
        let sig = pair.sign(&self.message()?);
        let signature: [u8; 64] = sig
            .as_ref()
            .try_into()
            .map_err(|_| CheckpointError::BadSeed)?;
        Ok(SignedCheckpoint {
            checkpoint: self,
            signature,
        })
    }
}

/// The public key of a 32-byte Ed25519 seed.
pub fn public_key(seed: &[u8; 32]) -> Result<[u8; 32], CheckpointError> {
    let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| CheckpointError::BadSeed)?;
    pair.public_key()
        .as_ref()
        .try_into()
        .map_err(|_| CheckpointError::BadSeed)
}

/// A public key written as 64 hex digits (what `airlock audit public-key` prints).
pub fn parse_public_key(s: &str) -> Result<[u8; 32], CheckpointError> {
    hex::decode_hash(s.trim()).map_err(|_| CheckpointError::BadPublicKey)
}

impl SignedCheckpoint {
    /// Checks the signature with `public_key`.
    pub fn verify(&self, public_key: &[u8; 32]) -> Result<(), CheckpointError> {
        let bad = || CheckpointError::BadSignature {
            workspace_id: self.checkpoint.workspace_id.clone(),
            seq: self.checkpoint.seq,
        };
        let message = self.checkpoint.message().map_err(|_| bad())?;
        UnparsedPublicKey::new(&ED25519, public_key)
            .verify(&message, &self.signature)
            .map_err(|_| bad())
    }

    /// The stored line (canonical JSON, no line feed).
    pub fn to_line(&self) -> Result<String, CheckpointError> {
        let c = &self.checkpoint;
        if c.seq > MAX_CHECKPOINT_SEQ {
            return Err(CheckpointError::SeqTooLarge(c.seq));
        }
        let bytes = jcs::canonicalize_serialize(&Line {
            at: c.at.clone(),
            head: hex::encode(&c.head),
            seq: c.seq,
            signature: hex::encode(&self.signature),
            kind: CHECKPOINT_TYPE.to_string(),
            version: 1,
            workspace_id: c.workspace_id.clone(),
        })?;
        String::from_utf8(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))
    }

    /// Parses a stored line (its signature is not checked here).
    pub fn from_line(line: &str) -> Result<Self, CheckpointError> {
        let malformed = |m: &str| CheckpointError::Malformed(m.to_string());
        let l: Line = serde_json::from_str(line).map_err(|e| malformed(&e.to_string()))?;
        if l.kind != CHECKPOINT_TYPE || l.version != 1 {
            return Err(malformed("not a version 1 checkpoint"));
        }
        if l.seq > MAX_CHECKPOINT_SEQ {
            return Err(CheckpointError::SeqTooLarge(l.seq));
        }
        let head = hex::decode_hash(&l.head).map_err(|_| malformed("head is not a hash"))?;
        let signature = decode_signature(&l.signature).ok_or_else(|| malformed("bad signature"))?;
        Ok(Self {
            checkpoint: Checkpoint {
                workspace_id: l.workspace_id,
                seq: l.seq,
                head,
                at: l.at,
            },
            signature,
        })
    }
}

/// 128 lowercase hex digits → 64 bytes.
fn decode_signature(s: &str) -> Option<[u8; 64]> {
    if s.len() != 128 {
        return None;
    }
    let (a, b) = s.split_at(64);
    let (a, b) = (hex::decode_hash(a).ok()?, hex::decode_hash(b).ok()?);
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&a);
    out[32..].copy_from_slice(&b);
    Some(out)
}

/// What reading a file of checkpoint lines found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointFile {
    /// The newest checkpoint whose signature verified: the highest `seq`, the last such line
    /// on a tie.
    pub newest: Option<SignedCheckpoint>,
    /// How many valid checkpoints the file holds.
    pub valid: usize,
    /// Every valid checkpoint's `(seq, head)`, in file order: a chain checked against all
    /// of them has a rewrite named at the first checkpoint it changed.
    pub all: Vec<(u64, [u8; 32])>,
    /// Lines that are not checkpoints (1-based line numbers): torn writes, skipped.
    pub skipped: Vec<usize>,
}

/// Reads a file of checkpoint lines for `workspace`, checking each signature with
/// `public_key`. A line that does not parse is skipped (see [`CheckpointFile::skipped`]); a
/// checkpoint of another workspace, or one whose signature does not verify, is an error
/// naming it: someone wrote it who should not have.
pub fn read_checkpoints(
    text: &str,
    workspace: &str,
    public_key: &[u8; 32],
) -> Result<CheckpointFile, (usize, CheckpointError)> {
    let mut out = CheckpointFile::default();
    for (i, line) in text.split('\n').enumerate() {
        let line_no = i + 1;
        if line.is_empty() {
            continue;
        }
        let Ok(cp) = SignedCheckpoint::from_line(line) else {
            out.skipped.push(line_no);
            continue;
        };
        cp.verify(public_key).map_err(|e| (line_no, e))?;
        if cp.checkpoint.workspace_id != workspace {
            return Err((
                line_no,
                CheckpointError::Malformed(format!(
                    "a checkpoint of workspace {} among {workspace}'s",
                    cp.checkpoint.workspace_id
                )),
            ));
        }
        out.valid += 1;
        out.all.push((cp.checkpoint.seq, cp.checkpoint.head));
        if out
            .newest
            .as_ref()
            .is_none_or(|n| cp.checkpoint.seq >= n.checkpoint.seq)
        {
            out.newest = Some(cp);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SEED: [u8; 32] = [7; 32];

    fn cp(seq: u64) -> Checkpoint {
        Checkpoint {
            workspace_id: "ws_a".into(),
            seq,
            head: [seq as u8; 32],
            at: "2026-12-04T11:00:00Z".into(),
        }
    }

    #[test]
    fn aud_4_checkpoint_message_is_versioned_canonical_json() {
        let m = cp(3).message().unwrap();
        let expected = format!(
            "airlock-checkpoint-v1\n{{\"at\":\"2026-12-04T11:00:00Z\",\"head\":\"{}\",\"seq\":3,\"workspace_id\":\"ws_a\"}}",
            "03".repeat(32)
        );
        assert_eq!(String::from_utf8(m).unwrap(), expected);
        assert!(matches!(
            cp(MAX_CHECKPOINT_SEQ + 1).message(),
            Err(CheckpointError::SeqTooLarge(_))
        ));
    }

    #[test]
    fn aud_4_a_signed_checkpoint_round_trips_and_verifies() {
        let pk = public_key(&SEED).unwrap();
        let s = cp(5).sign(&SEED).unwrap();
        s.verify(&pk).unwrap();
        let line = s.to_line().unwrap();
        assert!(line.contains("\"type\":\"checkpoint\""));
        assert_eq!(SignedCheckpoint::from_line(&line).unwrap(), s);
        // RFC 8032 test vector 1: the seed of zeros' public key is fixed.
        assert_eq!(
            hex::encode(&public_key(&[0; 32]).unwrap()),
            "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
        );
    }

    #[test]
    fn aud_4_any_change_or_another_key_breaks_the_signature() {
        let pk = public_key(&SEED).unwrap();
        let good = cp(5).sign(&SEED).unwrap();
        // Control: the untouched checkpoint verifies.
        assert!(good.verify(&pk).is_ok());
        let mut changes = Vec::new();
        for f in 0..4 {
            let mut c = good.clone();
            match f {
                0 => c.checkpoint.seq = 6,
                1 => c.checkpoint.head[0] ^= 1,
                2 => c.checkpoint.at = "2026-12-04T11:00:01Z".into(),
                _ => c.checkpoint.workspace_id = "ws_b".into(),
            }
            changes.push(c);
        }
        let mut flipped = good.clone();
        flipped.signature[10] ^= 1;
        changes.push(flipped);
        changes.push(cp(5).sign(&[8; 32]).unwrap());
        for c in changes {
            assert!(
                matches!(c.verify(&pk), Err(CheckpointError::BadSignature { .. })),
                "{c:?}"
            );
        }
    }

    #[test]
    fn aud_4_reading_skips_torn_lines_refuses_forgeries_and_picks_the_newest() {
        let pk = public_key(&SEED).unwrap();
        let l = |seq| cp(seq).sign(&SEED).unwrap().to_line().unwrap();
        let torn = &l(9)[..40];
        let text = format!("{}\n{}\n{torn}\n{}\n{torn}", l(2), l(7), l(4));
        let f = read_checkpoints(&text, "ws_a", &pk).unwrap();
        assert_eq!(f.newest.unwrap().checkpoint.seq, 7);
        assert_eq!((f.valid, f.skipped), (3, vec![3, 5]));
        // A forged line (another key) is an error naming its line.
        let forged = cp(8).sign(&[9; 32]).unwrap().to_line().unwrap();
        let text = format!("{}\n{forged}\n", l(2));
        assert!(matches!(
            read_checkpoints(&text, "ws_a", &pk),
            Err((2, CheckpointError::BadSignature { seq: 8, .. }))
        ));
        // Another workspace's checkpoint in this file is refused too.
        assert!(read_checkpoints(&l(2), "ws_b", &pk).is_err());
        // An empty file has no checkpoint.
        assert_eq!(read_checkpoints("", "ws_a", &pk).unwrap().newest, None);
    }
}
