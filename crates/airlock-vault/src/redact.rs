//! Redaction of delivered secret values from logs, outputs, errors and events (KEY-6).
//!
//! A [`Redactor`] is built from the values delivered to one run and replaces every occurrence
//! of each value, and of the forms it takes when a program prints it, with `[REDACTED]`:
//!
//! - the raw bytes;
//! - JSON string escapes (`serde_json`/JavaScript, Python's `ensure_ascii` with lower- and
//!   upper-case `\uXXXX`, PHP's `\/`, Go's HTML-safe `\u003c`), and JSON escaped twice (a JSON
//!   document embedded in a JSON string);
//! - URL percent-encoding (upper- and lower-case hex, `+` for spaces);
//! - standard and URL-safe base64, with and without padding;
//! - for strong values only: lower/upper-case hex, and base64 of the value *inside a longer
//!   base64 stream* (e.g. `Authorization: Basic base64(user:secret)`) at each of the three byte
//!   alignments. Only the characters that depend on the value alone are matched; the at most
//!   two boundary characters that mix with neighbouring bytes are left, which reveals at most a
//!   few bits.
//!
//! Which values are replaced where (the policy, decided here once):
//!
//! | value | replaced | warning |
//! |---|---|---|
//! | strong: ≥ 8 bytes and ≥ 2.5 bits/byte Shannon entropy | everywhere, even inside a longer token (never leak) | none |
//! | weak: ≥ 4 bytes, not strong | only as a whole word (word characters: ASCII letters, digits, `_`, non-ASCII) | [`WarningKind::LowEntropy`] |
//! | trivial: < 4 bytes | nowhere: replacing `"a"` or `"on"` everywhere would destroy the log | [`WarningKind::TooShort`] |
//!
//! Why strong values ignore word boundaries: a 20-character token printed glued to other text
//! (`token=abc…xyz123`, `Bearerabc…`) is still a leak, and a high-entropy string almost never
//! occurs by chance, so substring replacement costs nothing. Weak values are where blind
//! replacement would hurt, so they are replaced only where they stand alone and the operator is
//! told to choose a better value.
//!
//! Not covered (documented limits): case-changed copies (except hex), other encodings
//! (gzip, encryption, rot13…), values split across two redaction calls. Callers redact whole
//! records, not arbitrary chunks of a stream.
//!
//! The patterns are copies of secrets: they are held in zeroizing buffers and `Debug` shows
//! only their number.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use secrecy::ExposeSecret;
use zeroize::Zeroizing;

use crate::secret::{SecretName, SecretValue};

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[REDACTED]";
/// Values shorter than this are never replaced (only warned about).
pub const MIN_REDACTED_LEN: usize = 4;
/// Shortest value that can be strong.
pub const STRONG_MIN_LEN: usize = 8;
/// Lowest Shannon entropy (bits per byte) of a strong value.
pub const STRONG_MIN_BITS_PER_BYTE: f64 = 2.5;

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

struct Pattern {
    bytes: Zeroizing<Vec<u8>>,
    whole_word: bool,
}

/// Replaces delivered secret values (and their encodings) with `[REDACTED]`.
pub struct Redactor {
    /// Longest first, so the longest form wins at a position.
    patterns: Vec<Pattern>,
    /// For each first byte, the indices of the patterns starting with it (longest first).
    by_first_byte: Vec<Vec<usize>>,
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
        let mut patterns: Vec<Pattern> = Vec::new();
        let mut warnings = Vec::new();
        for (name, value) in secrets {
            let bytes = value.expose_secret();
            if bytes.len() < MIN_REDACTED_LEN {
                warnings.push(RedactionWarning {
                    name: name.clone(),
                    kind: WarningKind::TooShort {
                        length: bytes.len(),
                    },
                });
                continue;
            }
            let bits_per_byte = shannon_entropy(bytes);
            let strong = bytes.len() >= STRONG_MIN_LEN && bits_per_byte >= STRONG_MIN_BITS_PER_BYTE;
            if !strong {
                warnings.push(RedactionWarning {
                    name: name.clone(),
                    kind: WarningKind::LowEntropy {
                        length: bytes.len(),
                        bits_per_byte,
                    },
                });
            }
            for form in forms(bytes, strong) {
                add_pattern(&mut patterns, form, !strong);
            }
        }
        patterns.sort_by_key(|p| std::cmp::Reverse(p.bytes.len()));
        let mut by_first_byte = vec![Vec::new(); 256];
        for (i, pattern) in patterns.iter().enumerate() {
            if let Some(&first) = pattern.bytes.first() {
                by_first_byte[usize::from(first)].push(i);
            }
        }
        Redactor {
            patterns,
            by_first_byte,
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
        let mut out = Vec::with_capacity(input.len());
        let mut copied = 0;
        let mut i = 0;
        while i < input.len() {
            match self.match_at(input, i) {
                Some(len) => {
                    out.extend_from_slice(&input[copied..i]);
                    out.extend_from_slice(REDACTED.as_bytes());
                    i += len;
                    copied = i;
                }
                None => i += 1,
            }
        }
        out.extend_from_slice(&input[copied..]);
        out
    }

    /// Length of the longest pattern that matches at `at`, honouring word boundaries.
    fn match_at(&self, text: &[u8], at: usize) -> Option<usize> {
        let rest = &text[at..];
        let first = usize::from(*rest.first()?);
        self.by_first_byte[first].iter().find_map(|&i| {
            let pattern = &self.patterns[i];
            let bytes: &[u8] = &pattern.bytes;
            let matched = rest.starts_with(bytes)
                && (!pattern.whole_word || whole_word(text, at, at + bytes.len(), bytes));
            matched.then_some(bytes.len())
        })
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// `\b` semantics: a boundary is needed only where the pattern's own edge is a word byte.
fn whole_word(text: &[u8], start: usize, end: usize, pattern: &[u8]) -> bool {
    let (Some(&first), Some(&last)) = (pattern.first(), pattern.last()) else {
        return false;
    };
    let left = start == 0 || !is_word_byte(first) || !is_word_byte(text[start - 1]);
    let right = end == text.len() || !is_word_byte(last) || !is_word_byte(text[end]);
    left && right
}

fn add_pattern(patterns: &mut Vec<Pattern>, bytes: Zeroizing<Vec<u8>>, whole_word: bool) {
    if bytes.is_empty() {
        return;
    }
    match patterns.iter_mut().find(|p| *p.bytes == *bytes) {
        // The same bytes from a strong and a weak value: the stricter (anywhere) rule wins.
        Some(existing) => existing.whole_word &= whole_word,
        None => patterns.push(Pattern { bytes, whole_word }),
    }
}

/// Shannon entropy of the byte distribution, in bits per byte.
fn shannon_entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    let total = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / total;
            -p * p.log2()
        })
        .sum()
}

/// Every form of `value` to redact.
fn forms(value: &[u8], strong: bool) -> Vec<Zeroizing<Vec<u8>>> {
    let mut out: Vec<Zeroizing<Vec<u8>>> = vec![Zeroizing::new(value.to_vec())];
    let mut text = |s: Zeroizing<String>| out.push(Zeroizing::new(s.as_bytes().to_vec()));
    if let Ok(s) = std::str::from_utf8(value) {
        for style in JSON_STYLES {
            let escaped = json_escape(s, &style);
            text(json_escape(&escaped, &JsonStyle::PLAIN));
            text(escaped);
        }
        text(percent_encode(value, false, false));
        text(percent_encode(value, true, false));
        text(percent_encode(value, false, true));
    }
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        text(Zeroizing::new(engine.encode(value)));
    }
    if strong {
        text(hex(value, false));
        text(hex(value, true));
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            for offset in 0..3 {
                text(base64_inner(engine, value, offset));
            }
        }
    }
    out
}

/// The base64 characters that depend only on `value` when it starts `offset` bytes (mod 3)
/// into a longer base64-encoded stream.
fn base64_inner(
    engine: &base64::engine::GeneralPurpose,
    value: &[u8],
    offset: usize,
) -> Zeroizing<String> {
    let mut input = Zeroizing::new(vec![0u8; offset]);
    input.extend_from_slice(value);
    let encoded = Zeroizing::new(engine.encode(&*input));
    // Character i carries bits [6i, 6i + 6); the value's bits are [8·offset, 8·(offset + len)).
    let start = (8 * offset).div_ceil(6);
    let end = (8 * (offset + value.len())) / 6;
    // Too short a fragment could match by chance; strong values give ≥ 9 characters.
    if end <= start || end - start < 8 {
        return Zeroizing::new(String::new());
    }
    Zeroizing::new(encoded.get(start..end).unwrap_or_default().to_owned())
}

struct JsonStyle {
    /// Escape every non-ASCII character as `\uXXXX` (surrogate pairs beyond the BMP).
    ascii: bool,
    upper_hex: bool,
    /// PHP: `/` as `\/`.
    slash: bool,
    /// Go: `<`, `>`, `&`, U+2028 and U+2029 as `\u003c` …
    html: bool,
}

impl JsonStyle {
    const PLAIN: JsonStyle = JsonStyle {
        ascii: false,
        upper_hex: false,
        slash: false,
        html: false,
    };
}

const JSON_STYLES: [JsonStyle; 5] = [
    JsonStyle::PLAIN,
    JsonStyle {
        ascii: true,
        upper_hex: false,
        slash: false,
        html: false,
    },
    JsonStyle {
        ascii: true,
        upper_hex: true,
        slash: false,
        html: false,
    },
    JsonStyle {
        ascii: true,
        upper_hex: false,
        slash: true,
        html: false,
    },
    JsonStyle {
        ascii: false,
        upper_hex: false,
        slash: false,
        html: true,
    },
];

/// The body of a JSON string literal holding `s` (without the quotes).
fn json_escape(s: &str, style: &JsonStyle) -> Zeroizing<String> {
    use std::fmt::Write;
    let mut out = Zeroizing::new(String::with_capacity(s.len() + 8));
    let unicode = |out: &mut String, unit: u16| {
        // Writing to a String cannot fail.
        let _ = if style.upper_hex {
            write!(out, "\\u{unit:04X}")
        } else {
            write!(out, "\\u{unit:04x}")
        };
    };
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '/' if style.slash => out.push_str("\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if style.html => {
                unicode(&mut out, c as u16);
            }
            c if (c as u32) < 0x20 => unicode(&mut out, c as u16),
            c if style.ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    unicode(&mut out, *unit);
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn percent_encode(value: &[u8], lower: bool, plus_for_space: bool) -> Zeroizing<String> {
    use std::fmt::Write;
    let mut out = Zeroizing::new(String::with_capacity(value.len() * 3));
    for &b in value {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            b' ' if plus_for_space => out.push('+'),
            // Writing to a String cannot fail.
            _ if lower => {
                let _ = write!(out, "%{b:02x}");
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

fn hex(value: &[u8], upper: bool) -> Zeroizing<String> {
    use std::fmt::Write;
    let mut out = Zeroizing::new(String::with_capacity(value.len() * 2));
    for b in value {
        // Writing to a String cannot fail.
        let _ = if upper {
            write!(out, "{b:02X}")
        } else {
            write!(out, "{b:02x}")
        };
    }
    out
}
