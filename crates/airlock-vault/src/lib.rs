//! The cryptographic core of airlock's secrets vault (KEY-1, KEY-2, KEY-3, KEY-6).
//!
//! - [`KeyDir`]: the key directory (mode 0700, files 0600, refused when looser): KEK versions
//!   `kek-v1`, `kek-v2`, …, `keyring.json` (current/retired versions, operation counters).
//! - [`Vault`]: envelope encryption — per-workspace data keys wrapped by the current KEK, secrets
//!   sealed with a data key, both XChaCha20-Poly1305 with associated data binding the record's
//!   identity — KEK rotation, rewrap and retirement, and the anti-rollback high-water marks
//!   (`hwm.json`, HMAC-authenticated).
//! - [`SecretName`], [`SecretValue`]: parsed names and values (KEY-4, KEY-5).
//! - [`Redactor`]: scrubs delivered values and their encodings from text (KEY-6).
//!
//! Architecture invariant: this crate contains no SQL and no database types. It returns plain
//! records ([`WrappedDataKey`], [`SealedSecret`]) for a store to persist and takes them back;
//! the only files it touches are in the key directory. It never prints, and a secret value or
//! key leaves it only through [`ExposeSecret::expose_secret`] on a [`SecretValue`].
//!
//! ```
//! use airlock_vault::{ExposeSecret, KeyDir, SecretName, SecretValue, Vault, VaultConfig};
//!
//! let dir = tempfile::tempdir()?;
//! let vault = Vault::new(KeyDir::open_or_create(dir.path().join("keys"))?, VaultConfig::default())?;
//!
//! let wrapped = vault.new_data_key("ws-1")?; // persisted by the store
//! let data_key = vault.unwrap_data_key(&wrapped)?;
//! let name = SecretName::parse("API_TOKEN")?;
//! let version = vault.next_version("ws-1", &name, None)?;
//! let sealed = vault.seal(&data_key, &name, version, &SecretValue::try_from("s3cr3t".to_owned())?)?;
//! vault.record_write("ws-1", &name, version)?; // after the store commits
//!
//! vault.check_read("ws-1", &name, sealed.version)?;
//! assert_eq!(vault.open(&data_key, &sealed)?.expose_secret(), b"s3cr3t");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod crypto;
mod envelope;
mod error;
mod fsutil;
mod hwm;
mod keydir;
mod redact;
mod secret;
mod vault;

pub use envelope::{DataKey, SealedSecret, WrappedDataKey};
pub use error::{HwmProblem, KeyRef, ParseError, RollbackFinding, VaultError};
pub use hwm::{HwmChange, HwmMark, RecordRef, StartupReport};
pub use keydir::{KekInfo, KekState, KeyDir};
pub use redact::{
    MIN_REDACTED_LEN, REDACTED, RedactionWarning, Redactor, STRONG_MIN_BITS_PER_BYTE,
    STRONG_MIN_LEN, WarningKind,
};
pub use secrecy::ExposeSecret;
pub use secret::{
    MAX_SECRET_NAME_LEN, MAX_SECRET_VALUE_LEN, MAX_WORKSPACE_ID_LEN, RESERVED_NAME_PREFIX,
    SecretName, SecretValue,
};
pub use vault::{DEFAULT_MAX_OPERATIONS_PER_KEY, Vault, VaultConfig};

/// Length of a key encryption key file, in bytes.
pub const KEK_LEN: usize = crypto::KEY_LEN;
/// Length of a nonce, in bytes.
pub const NONCE_LEN: usize = crypto::NONCE_LEN;
/// Length of the authentication tag that ends every ciphertext, in bytes.
pub const TAG_LEN: usize = crypto::TAG_LEN;
