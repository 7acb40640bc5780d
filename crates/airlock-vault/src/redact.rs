//! Redaction of delivered secret values from logs, outputs, errors and events (KEY-6).
//!
//! A [`Redactor`] is built from the values delivered to one run and replaces every occurrence
//! of each value, and of the forms it takes when a program prints it (raw, JSON-escaped,
//! percent-encoded, hex, base64, base64 inside a longer stream), with `[REDACTED]`. The forms,
//! the matching and the strength policy live in `airlock-redact`, shared with the egress proxy;
//! this module adds what the vault knows: which named secret a value is, and the warnings the
//! operator gets for values that cannot be redacted everywhere:
//!
//! | value | replaced | warning |
//! |---|---|---|
//! | strong: ≥ 8 bytes and ≥ 2.5 bits/byte Shannon entropy | everywhere, even inside a longer token (never leak) | none |
//! | weak: ≥ 4 bytes, not strong | only as a whole word (word characters: ASCII letters, digits, `_`, non-ASCII) | [`WarningKind::LowEntropy`] |
//! | trivial: < 4 bytes | nowhere: replacing `"a"` or `"on"` everywhere would destroy the log | [`WarningKind::TooShort`] |
//!
//! Not covered (documented limits): case-changed copies (except hex), other encodings
//! (gzip, encryption, rot13…), values split across two redaction calls. Callers redact whole
//! records, not arbitrary chunks of a stream (streams use `airlock_redact::StreamRedactor`).

use std::fmt;

use airlock_redact::{Patterns, Strength};
use secrecy::ExposeSecret;

use crate::secret::{SecretName, SecretValue};

pub use airlock_redact::{MIN_REDACTED_LEN, REDACTED, STRONG_MIN_BITS_PER_BYTE, STRONG_MIN_LEN};

/// A delivered value the redactor cannot fully protect; for the operator.
#[derive(Debug, Clone, PartialEq)]
pub struct RedactionWarning {
    pub name: SecretName,
    pub kind: WarningKind,
}

/// Why a value is not redacted everywhere.
#[derive(Debug, Clone, PartialEq)]
pub enum WarningKind {
    /// Shorter than [`MIN_REDACTED_LEN`]: not redacted at all.
    TooShort { length: usize },
    /// Short or repetitive: redacted only where it stands as a whole word.
    LowEntropy { length: usize, bits_per_byte: f64 },
}

impl fmt::Display for RedactionWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            WarningKind::TooShort { length } => write!(
                f,
                "secret {}: its value is {length} bytes long, too short to redact; \
                 it may appear in logs",
                self.name
            ),
            WarningKind::LowEntropy {
                length,
                bits_per_byte,
            } => write!(
                f,
                "secret {}: its value ({length} bytes, {bits_per_byte:.2} bits/byte) is too \
                 guessable to redact everywhere; it is redacted only as a whole word",
                self.name
            ),
        }
    }
}

/// Replaces delivered secret values (and their encodings) with `[REDACTED]`.
pub struct Redactor {
    patterns: Patterns,
    warnings: Vec<RedactionWarning>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns.len())
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new(std::iter::empty())
    }
}

impl Redactor {
    /// A redactor for the given delivered secrets.
    pub fn new<'a>(secrets: impl IntoIterator<Item = (&'a SecretName, &'a SecretValue)>) -> Self {
        let mut values: Vec<&'a [u8]> = Vec::new();
        let mut warnings = Vec::new();
        for (name, value) in secrets {
            let bytes = value.expose_secret();
            let kind = match airlock_redact::strength(bytes) {
                Strength::Strong => None,
                Strength::TooShort => Some(WarningKind::TooShort {
                    length: bytes.len(),
                }),
                Strength::Weak { bits_per_byte } => Some(WarningKind::LowEntropy {
                    length: bytes.len(),
                    bits_per_byte,
                }),
            };
            if let Some(kind) = kind {
                warnings.push(RedactionWarning {
                    name: name.clone(),
                    kind,
                });
            }
            values.push(bytes);
        }
        Redactor {
            patterns: Patterns::new(values),
            warnings,
        }
    }

    /// Values that are not redacted everywhere, for the operator.
    pub fn warnings(&self) -> &[RedactionWarning] {
        &self.warnings
    }

    /// Whether nothing would ever be replaced.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Redacts text. Invalid UTF-8 produced by cutting out a non-UTF-8 value is replaced with
    /// U+FFFD.
    pub fn redact(&self, text: &str) -> String {
        if self.patterns.is_empty() {
            return text.to_owned();
        }
        String::from_utf8_lossy(&self.redact_bytes(text.as_bytes())).into_owned()
    }

    /// Redacts arbitrary bytes (binary-ish logs).
    pub fn redact_bytes(&self, input: &[u8]) -> Vec<u8> {
        self.patterns.redact(input)
    }
}
