//! Parsed secret names and values (KEY-4, KEY-5).
//!
//! A [`SecretName`] or [`SecretValue`] can only be built by parsing, so every function that
//! takes one can rely on the rules below. A value is never printed, serialized or compared
//! through a trait: the only way to its bytes is [`ExposeSecret::expose_secret`], which a
//! reviewer can grep for.

use std::fmt;
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretBox};
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use crate::error::ParseError;

/// Longest secret name, in bytes (`^[A-Z][A-Z0-9_]{0,63}$`).
pub const MAX_SECRET_NAME_LEN: usize = 64;
/// Names with this prefix belong to the platform and can never be stored or delivered (KEY-5).
pub const RESERVED_NAME_PREFIX: &str = "AIRLOCK_";
/// Largest secret value, in bytes (KEY-4).
pub const MAX_SECRET_VALUE_LEN: usize = 32 * 1024;
/// Longest workspace id, in bytes.
pub const MAX_WORKSPACE_ID_LEN: usize = 128;

/// A secret's name: `^[A-Z][A-Z0-9_]{0,63}$`, not starting with `AIRLOCK_`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SecretName(String);

impl SecretName {
    /// Parses a name; see the type's documentation for the rules.
    pub fn parse(name: &str) -> Result<Self, ParseError> {
        let refuse = |reason| Err(ParseError::SecretName { reason });
        let bytes = name.as_bytes();
        match bytes.first() {
            None => return refuse("empty"),
            Some(b'A'..=b'Z') => {}
            Some(_) => return refuse("must start with an upper-case letter A-Z"),
        }
        if bytes.len() > MAX_SECRET_NAME_LEN {
            return refuse("longer than 64 characters");
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
        {
            return refuse("only A-Z, 0-9 and _ are allowed");
        }
        if name.starts_with(RESERVED_NAME_PREFIX) {
            return refuse("names starting with AIRLOCK_ are reserved for the platform");
        }
        Ok(SecretName(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SecretName {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SecretName::parse(s)
    }
}

impl TryFrom<String> for SecretName {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        SecretName::parse(&s)
    }
}

impl From<SecretName> for String {
    fn from(name: SecretName) -> String {
        name.0
    }
}

impl AsRef<str> for SecretName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// Names are metadata, not secrets: Debug shows them.
impl fmt::Debug for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretName({})", self.0)
    }
}

/// A secret's value: at most 32 KiB, no NUL byte (it must survive delivery as a file or an
/// environment variable). Zeroized on drop; `Debug` prints `[REDACTED]`; no `Display`,
/// `Serialize`, `Clone` or `PartialEq`.
pub struct SecretValue(SecretBox<[u8]>);

impl SecretValue {
    /// Parses a value, taking ownership so no copy of the plaintext stays with the caller.
    /// A refused value is zeroized before the error is returned.
    pub fn parse(mut bytes: Vec<u8>) -> Result<Self, ParseError> {
        let reason = if bytes.len() > MAX_SECRET_VALUE_LEN {
            Some("larger than 32 KiB")
        } else if bytes.contains(&0) {
            Some("contains a NUL byte")
        } else {
            None
        };
        if let Some(reason) = reason {
            bytes.zeroize();
            return Err(ParseError::SecretValue { reason });
        }
        // Copy into an exact-size allocation and wipe the original ourselves: `into_boxed_slice`
        // could reallocate and free the old buffer without zeroizing it.
        let boxed: Box<[u8]> = bytes.as_slice().into();
        bytes.zeroize();
        Ok(SecretValue(SecretBox::new(boxed)))
    }

    /// Length in bytes (metadata; the length of a value is not treated as secret).
    pub fn len(&self) -> usize {
        self.0.expose_secret().len()
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ExposeSecret<[u8]> for SecretValue {
    fn expose_secret(&self) -> &[u8] {
        self.0.expose_secret()
    }
}

impl TryFrom<Vec<u8>> for SecretValue {
    type Error = ParseError;
    fn try_from(bytes: Vec<u8>) -> Result<Self, Self::Error> {
        SecretValue::parse(bytes)
    }
}

impl TryFrom<String> for SecretValue {
    type Error = ParseError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        SecretValue::parse(text.into_bytes())
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue([REDACTED])")
    }
}

/// Checks a workspace id used in associated data and in the high-water marks. The id belongs
/// to the store's domain, so the vault takes `&str` and only refuses what it cannot bind
/// unambiguously or show safely (AAD fields are length-prefixed, so any other text is fine).
pub(crate) fn check_workspace(workspace: &str) -> Result<(), ParseError> {
    let refuse = |reason| Err(ParseError::Workspace { reason });
    if workspace.is_empty() {
        return refuse("empty");
    }
    if workspace.len() > MAX_WORKSPACE_ID_LEN {
        return refuse("longer than 128 bytes");
    }
    if workspace.chars().any(char::is_control) {
        return refuse("contains a control character");
    }
    Ok(())
}
