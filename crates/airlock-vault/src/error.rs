//! The vault's typed errors.
//!
//! One enum for the vault's operations plus one for refused input, composed with `#[from]`.
//! Messages name paths, versions, workspaces and secret names, never a key or a value: every
//! variant is safe to log and to show an operator.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::secret::SecretName;

/// Input that does not parse into a vault type (a secret name, a value, a workspace id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A secret name that is not `^[A-Z][A-Z0-9_]{0,63}$` or is reserved for the platform.
    #[error("invalid secret name: {reason}")]
    SecretName { reason: &'static str },
    /// A secret value that is too large or contains a NUL byte.
    #[error("invalid secret value: {reason}")]
    SecretValue { reason: &'static str },
    /// A workspace id that is empty, too long or contains control characters.
    #[error("invalid workspace id: {reason}")]
    Workspace { reason: &'static str },
}

/// A key whose use is counted (KEY-2): a KEK version, or one workspace's data key version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyRef {
    /// A key encryption key version (file `kek-v<version>`).
    Kek { version: u32 },
    /// A workspace's data key version.
    DataKey { workspace: String, version: u32 },
}

impl fmt::Display for KeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyRef::Kek { version } => write!(f, "kek v{version}"),
            KeyRef::DataKey { workspace, version } => {
                write!(f, "data key v{version} of workspace {workspace}")
            }
        }
    }
}

/// Why `hwm.json` (the anti-rollback high-water marks, KEY-3) cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwmProblem {
    /// The file is gone although the key directory has been used.
    Missing,
    /// The MAC does not verify: the file was edited, or written with another key.
    BadMac,
    /// The MAC names a KEK version that is unknown or retired.
    UnusableKey { kek_version: u32 },
    /// The file does not parse, or its content violates the format.
    Malformed { reason: String },
}

impl fmt::Display for HwmProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HwmProblem::Missing => f.write_str("file is missing"),
            HwmProblem::BadMac => f.write_str("authentication failed (tampered or foreign file)"),
            HwmProblem::UnusableKey { kek_version } => {
                write!(
                    f,
                    "authenticated with kek v{kek_version}, which is unknown or retired"
                )
            }
            HwmProblem::Malformed { reason } => write!(f, "malformed: {reason}"),
        }
    }
}

/// One inconsistency between the store's secret records and the high-water marks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackFinding {
    /// A record older than (or replaying a version abandoned before) the high-water mark,
    /// or a record of a deleted secret.
    Stale {
        workspace: String,
        name: SecretName,
        stored: u64,
        expected: u64,
    },
    /// A secret the high-water marks know as live is absent from the store.
    Missing {
        workspace: String,
        name: SecretName,
        expected: u64,
    },
}

impl fmt::Display for RollbackFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackFinding::Stale {
                workspace,
                name,
                stored,
                expected,
            } => write!(
                f,
                "{workspace}/{name}: stored version {stored}, expected {expected}"
            ),
            RollbackFinding::Missing {
                workspace,
                name,
                expected,
            } => write!(
                f,
                "{workspace}/{name}: missing, expected version {expected}"
            ),
        }
    }
}

/// Everything a vault operation can refuse.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// Refused input.
    #[error(transparent)]
    Parse(#[from] ParseError),

    /// An I/O error on a file of the key directory.
    #[error("i/o error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },

    /// The key directory or one of its files is readable or writable by group or others.
    #[error("{path} has mode {mode:04o}, refusing anything looser than {allowed:04o}")]
    InsecurePermissions {
        path: PathBuf,
        mode: u32,
        allowed: u32,
    },

    /// The key directory or one of its files belongs to another user.
    #[error("{path} is owned by uid {owner}, expected uid {expected}")]
    WrongOwner {
        path: PathBuf,
        owner: u32,
        expected: u32,
    },

    /// A path of the key directory is a symlink, or not a directory / regular file.
    #[error("{path} is not a {expected}")]
    WrongFileType {
        path: PathBuf,
        expected: &'static str,
    },

    /// Another process (or another handle in this one) holds the key directory.
    #[error("key directory {path} is in use by another vault")]
    Locked { path: PathBuf },

    /// A KEK file whose length is not 32 bytes.
    #[error("{path} holds {found} bytes, a key encryption key is {expected}")]
    KekLength {
        path: PathBuf,
        found: u64,
        expected: usize,
    },

    /// `keyring.json` is missing, unreadable or inconsistent.
    #[error("keyring {path}: {reason}")]
    Keyring { path: PathBuf, reason: String },

    /// `hwm.json` cannot be trusted; see [`HwmProblem`].
    #[error("high-water marks {path}: {problem}")]
    Hwm { path: PathBuf, problem: HwmProblem },

    /// The vault was opened for recovery and no high-water marks are trusted until the operator
    /// runs `accept_restore`.
    #[error("high-water marks are untrusted: an operator must accept the store's state first")]
    HwmUntrusted,

    /// A KEK version the keyring does not know.
    #[error("kek v{version} is unknown")]
    UnknownKey { version: u32 },

    /// A KEK version that has been retired: data under it is refused, never returned garbled.
    #[error("kek v{version} is retired")]
    RetiredKey { version: u32 },

    /// Retiring the current KEK version (rotate first).
    #[error("kek v{version} is the current key and cannot be retired")]
    RetireCurrent { version: u32 },

    /// A key reached its operation limit; encryption under it is refused until it is rotated.
    #[error("{key} reached its limit of {limit} operations ({operations} used): rotate it")]
    KeyExhausted {
        key: KeyRef,
        operations: u64,
        limit: u64,
    },

    /// AEAD authentication failed: wrong key, wrong associated data or modified bytes.
    #[error("decryption failed: wrong key, wrong record binding or modified ciphertext")]
    DecryptionFailed,

    /// A record whose shape is impossible (e.g. a ciphertext shorter than the tag).
    #[error("malformed record: {reason}")]
    MalformedRecord { reason: &'static str },

    /// A data key used with a record of another workspace or data key version.
    #[error(
        "data key v{key_version} of workspace {key_workspace} does not match the record \
         (workspace {record_workspace}, data key v{record_version})"
    )]
    DataKeyMismatch {
        key_workspace: String,
        key_version: u32,
        record_workspace: String,
        record_version: u32,
    },

    /// A stored record older than the high-water mark: a restored row, or a replay.
    #[error(
        "secret {name} of workspace {workspace}: stored version {stored} is not the \
         expected version {expected} (rollback or replay)"
    )]
    Rollback {
        workspace: String,
        name: SecretName,
        stored: u64,
        expected: u64,
    },

    /// `check_startup` found records inconsistent with the high-water marks.
    #[error("the secrets store looks restored or edited: {}", list(findings))]
    RollbackDetected { findings: Vec<RollbackFinding> },

    /// `record_write` with a version not above the high-water mark.
    #[error(
        "secret {name} of workspace {workspace}: write of version {version} does not \
         exceed the high-water mark {current}"
    )]
    StaleWrite {
        workspace: String,
        name: SecretName,
        version: u64,
        current: u64,
    },

    /// The operating system's random number generator failed.
    #[error("random number generator failed: {0}")]
    Randomness(String),
}

fn list(findings: &[RollbackFinding]) -> String {
    let shown: Vec<String> = findings.iter().take(5).map(ToString::to_string).collect();
    let more = findings.len().saturating_sub(shown.len());
    if more == 0 {
        shown.join("; ")
    } else {
        format!("{}; and {more} more", shown.join("; "))
    }
}

impl VaultError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> VaultError {
        let path = path.into();
        move |source| VaultError::Io { path, source }
    }
}
