//! Finding secret values in bytes, in every form a program prints them, and replacing each
//! occurrence with `[REDACTED]` (KEY-6, NET-6).
//!
//! Two users share this one implementation: the vault's `Redactor` (run logs, outputs, errors
//! and events, redacted as whole records) and the egress proxy (a channel's credential in the
//! response bodies it streams back into a sandbox). Both need the same list of encodings and the
//! same strength policy, so both live here, once.
//!
//! The forms of a value that are matched:
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
//! Which values are replaced where ([`strength`] decides, once, for every user):
//!
//! | value | replaced |
//! |---|---|
//! | strong: ≥ 8 bytes and ≥ 2.5 bits/byte Shannon entropy | everywhere, even inside a longer token (never leak) |
//! | weak: ≥ 4 bytes, not strong | only as a whole word (word characters: ASCII letters, digits, `_`, non-ASCII) |
//! | too short: < 4 bytes | nowhere: replacing `"a"` or `"on"` everywhere would destroy the text |
//!
//! Why strong values ignore word boundaries: a 20-character token printed glued to other text
//! (`token=abc…xyz123`, `Bearerabc…`) is still a leak, and a high-entropy string almost never
//! occurs by chance, so substring replacement costs nothing. Weak values are where blind
//! replacement would hurt, so they are replaced only where they stand alone.
//!
//! Streams ([`StreamRedactor`]) give byte for byte the output [`Patterns::redact`] gives for the
//! concatenation of the chunks, however the stream is cut: a value split across two chunks is
//! still found. To do that without buffering, a chunk's bytes are passed on at once except a
//! suffix that could still turn into a match once more bytes arrive (a proper prefix of some
//! form, or a weak value whose word boundary is not known yet). That suffix is never longer than
//! the longest form ([`Patterns::longest`]), so memory is bounded and text that cannot be part of
//! a secret (a server-sent event's closing blank line, say) is never held back.
//!
//! Not covered (documented limits): case-changed copies (except hex), other encodings (gzip,
//! encryption, rot13…), a value interleaved with other bytes.
//!
//! Must not: do I/O, print, or know where values come from (names, vaults, channels). The
//! patterns are copies of secrets: they are held in zeroizing buffers, and `Debug` shows only
//! their number.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use zeroize::Zeroizing;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[REDACTED]";
/// Values shorter than this are never replaced.
pub const MIN_REDACTED_LEN: usize = 4;
/// Shortest value that can be strong.
pub const STRONG_MIN_LEN: usize = 8;
/// Lowest Shannon entropy (bits per byte) of a strong value.
pub const STRONG_MIN_BITS_PER_BYTE: f64 = 2.5;

/// How well a value can be redacted (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strength {
    /// Shorter than [`MIN_REDACTED_LEN`]: never replaced.
    TooShort,
    /// Short or repetitive: replaced only as a whole word.
    Weak { bits_per_byte: f64 },
    /// Replaced everywhere, in every form.
    Strong,
}

/// The strength of `value`.
pub fn strength(value: &[u8]) -> Strength {
    if value.len() < MIN_REDACTED_LEN {
        return Strength::TooShort;
    }
    let bits_per_byte = shannon_entropy(value);
    if value.len() >= STRONG_MIN_LEN && bits_per_byte >= STRONG_MIN_BITS_PER_BYTE {
        Strength::Strong
    } else {
        Strength::Weak { bits_per_byte }
    }
}

struct Pattern {
    bytes: Zeroizing<Vec<u8>>,
    whole_word: bool,
}

/// Every form of a set of values, ready to be found in bytes.
pub struct Patterns {
    /// Longest first, so the longest form wins at a position.
    patterns: Vec<Pattern>,
    /// For each first byte, the indices of the patterns starting with it (longest first).
    by_first_byte: Vec<Vec<usize>>,
}

impl fmt::Debug for Patterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Patterns")
            .field("forms", &self.patterns.len())
            .finish()
    }
}

impl Default for Patterns {
    fn default() -> Self {
        Patterns::new(std::iter::empty())
    }
}

/// What can be said about a position of the text.
enum At {
    /// A form of this length starts here.
    Match(usize),
    /// No form starts here.
    Nothing,
    /// A form may start here, depending on bytes not seen yet.
    Undecided,
}

impl Patterns {
    /// The forms of `values` (each according to its [`strength`]; too short values add none).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut patterns: Vec<Pattern> = Vec::new();
        for value in values {
            let strong = match strength(value) {
                Strength::TooShort => continue,
                Strength::Weak { .. } => false,
                Strength::Strong => true,
            };
            for form in forms(value, strong) {
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
        Patterns {
            patterns,
            by_first_byte,
        }
    }

    /// Whether nothing would ever be replaced.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Number of forms.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    /// Length of the longest form: the most a stream ever holds back.
    pub fn longest(&self) -> usize {
        self.patterns.first().map_or(0, |p| p.bytes.len())
    }

    /// `input` with every form replaced by [`REDACTED`].
    pub fn redact(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        self.scan(input, None, true, &mut out);
        out
    }

    /// Copies `text` to `out` with forms replaced, from its start up to the first position that
    /// cannot be decided yet (every position when `at_end`); returns how far it got and how many
    /// forms it replaced. `before` is the byte that preceded `text` in the stream, for word
    /// boundaries.
    fn scan(
        &self,
        text: &[u8],
        before: Option<u8>,
        at_end: bool,
        out: &mut Vec<u8>,
    ) -> (usize, u64) {
        let mut copied = 0;
        let mut i = 0;
        let mut replaced = 0;
        while i < text.len() {
            match self.at(text, i, before, at_end) {
                At::Match(len) => {
                    out.extend_from_slice(&text[copied..i]);
                    out.extend_from_slice(REDACTED.as_bytes());
                    i += len;
                    copied = i;
                    replaced += 1;
                }
                At::Nothing => i += 1,
                At::Undecided => break,
            }
        }
        out.extend_from_slice(&text[copied..i]);
        (i, replaced)
    }

    /// The longest form that starts at `at`, honouring word boundaries.
    fn at(&self, text: &[u8], at: usize, before: Option<u8>, at_end: bool) -> At {
        let rest = &text[at..];
        let Some(&first) = rest.first() else {
            return At::Nothing;
        };
        let previous = if at == 0 { before } else { Some(text[at - 1]) };
        for &i in &self.by_first_byte[usize::from(first)] {
            let pattern = &self.patterns[i];
            let bytes: &[u8] = &pattern.bytes;
            // `\b` semantics: a boundary is needed only where the form's own edge is a word byte.
            if pattern.whole_word && is_word_byte(first) && previous.is_some_and(is_word_byte) {
                continue;
            }
            if rest.len() < bytes.len() {
                if !at_end && bytes.starts_with(rest) {
                    return At::Undecided;
                }
                continue;
            }
            if !rest.starts_with(bytes) {
                continue;
            }
            let last = bytes[bytes.len() - 1];
            if !pattern.whole_word || !is_word_byte(last) {
                return At::Match(bytes.len());
            }
            match rest.get(bytes.len()) {
                Some(&next) if is_word_byte(next) => continue,
                Some(_) => return At::Match(bytes.len()),
                None if at_end => return At::Match(bytes.len()),
                None => return At::Undecided,
            }
        }
        At::Nothing
    }
}

/// Redacts a stream chunk by chunk (see the module header): the output, concatenated, is what
/// [`Patterns::redact`] gives for the whole stream.
pub struct StreamRedactor {
    patterns: Arc<Patterns>,
    /// Bytes received but not yet decided (at most [`Patterns::longest`] after each push).
    pending: Zeroizing<Vec<u8>>,
    /// The last byte passed on, for word boundaries.
    before: Option<u8>,
    replaced: u64,
}

impl fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamRedactor")
            .field("patterns", &self.patterns)
            .field("held", &self.pending.len())
            .field("replaced", &self.replaced)
            .finish()
    }
}

impl StreamRedactor {
    pub fn new(patterns: Arc<Patterns>) -> Self {
        Self {
            patterns,
            pending: Zeroizing::new(Vec::new()),
            before: None,
            replaced: 0,
        }
    }

    /// The redacted bytes that can be passed on now that `chunk` arrived.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.pending.is_empty() && self.patterns.is_empty() {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let (done, replaced) = self
            .patterns
            .scan(&self.pending, self.before, false, &mut out);
        self.replaced += replaced;
        if done > 0 {
            self.before = Some(self.pending[done - 1]);
            self.pending.drain(..done);
        }
        out
    }

    /// The rest, once the stream has ended.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pending.len());
        let (_, replaced) = self
            .patterns
            .scan(&self.pending, self.before, true, &mut out);
        self.replaced += replaced;
        self.before = self.pending.last().copied().or(self.before);
        self.pending.clear();
        out
    }

    /// Bytes received and not passed on yet.
    pub fn held(&self) -> usize {
        self.pending.len()
    }

    /// How many forms were replaced so far.
    pub fn replaced(&self) -> u64 {
        self.replaced
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STRONG: &[u8] = b"sk-Xq7#Lm2$Vb9!Tz4";
    const WEAK: &[u8] = b"passpass";

    fn patterns() -> Arc<Patterns> {
        Arc::new(Patterns::new([STRONG, WEAK]))
    }

    fn streamed(p: &Arc<Patterns>, chunks: &[&[u8]]) -> (Vec<u8>, usize) {
        let mut s = StreamRedactor::new(p.clone());
        let mut out = Vec::new();
        let mut most_held = 0;
        for c in chunks {
            out.extend(s.push(c));
            most_held = most_held.max(s.held());
        }
        out.extend(s.finish());
        (out, most_held)
    }

    #[test]
    fn key_6_strength_follows_the_table() {
        assert_eq!(strength(b"abc"), Strength::TooShort);
        assert!(matches!(strength(b"aaaaaaaaaaaa"), Strength::Weak { .. }));
        assert!(matches!(strength(b"Tq8vN3p"), Strength::Weak { .. }));
        assert_eq!(strength(STRONG), Strength::Strong);
    }

    #[test]
    fn net_6_a_value_split_across_chunks_is_found_at_every_cut() {
        let p = patterns();
        let text = [b"data: {\"echo\": \"".as_slice(), STRONG, b"\"}\n\n"].concat();
        let whole = p.redact(&text);
        assert_eq!(whole, b"data: {\"echo\": \"[REDACTED]\"}\n\n");
        for cut in 0..=text.len() {
            let (out, _) = streamed(&p, &[&text[..cut], &text[cut..]]);
            assert_eq!(out, whole, "cut at {cut}");
        }
        // Control: without the value's patterns the echo passes unchanged.
        let (out, _) = streamed(&Arc::new(Patterns::default()), &[&text[..20], &text[20..]]);
        assert_eq!(out, text);
    }

    #[test]
    fn net_6_only_a_possible_start_of_a_value_is_held_back() {
        let p = patterns();
        let mut s = StreamRedactor::new(p.clone());
        // An event that cannot be part of a value leaves at once, whole.
        assert_eq!(s.push(b"data: one\n\n"), b"data: one\n\n");
        assert_eq!(s.held(), 0);
        // The first half of the value is held, nothing before it is.
        assert_eq!(s.push(b"data: sk-Xq7#L"), b"data: ");
        assert_eq!(s.held(), 8);
        assert_eq!(s.push(b"m2$Vb9!Tz4\n\n"), b"[REDACTED]\n\n");
        assert_eq!((s.held(), s.replaced()), (0, 1));
        // A near miss is released as soon as it stops looking like the value.
        assert_eq!(s.push(b"sk-Xq7#"), b"");
        assert_eq!(s.push(b"Q"), b"sk-Xq7#Q");
        // A weak value at the end of a chunk waits for its word boundary.
        assert_eq!(s.push(b" passpass"), b" ");
        assert_eq!(s.push(b"x"), b"passpassx");
        assert_eq!(s.push(b" passpass"), b" ");
        assert_eq!(s.finish(), b"[REDACTED]");
        assert_eq!(s.replaced(), 2);
    }

    #[test]
    fn net_6_every_encoding_is_found_split_anywhere() {
        let p = patterns();
        let b64 = STANDARD.encode(STRONG);
        let pct = percent_encode(STRONG, false, false);
        let hx = hex(STRONG, false);
        let json = json_escape(std::str::from_utf8(STRONG).unwrap(), &JSON_STYLES[1]);
        for form in [
            b64.as_bytes(),
            pct.as_bytes(),
            hx.as_bytes(),
            json.as_bytes(),
        ] {
            let text = [b"x=".as_slice(), form, b";"].concat();
            for cut in 0..=text.len() {
                let (out, held) = streamed(&p, &[&text[..cut], &text[cut..]]);
                assert_eq!(
                    out,
                    b"x=[REDACTED];",
                    "{} cut at {cut}",
                    String::from_utf8_lossy(form)
                );
                assert!(held <= p.longest());
            }
        }
    }

    proptest! {
        #[test]
        fn net_6_streaming_equals_whole_redaction(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just(STRONG.to_vec()),
                    Just(WEAK.to_vec()),
                    Just(STANDARD.encode(STRONG).into_bytes()),
                    Just(percent_encode(STRONG, true, false).as_bytes().to_vec()),
                    Just(b"sk-Xq7".to_vec()),
                    Just(b"passpas".to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..12),
                    "[a-z _\n]{0,6}".prop_map(String::into_bytes),
                ],
                0..12,
            ),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let p = patterns();
            let text = pieces.concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for c in cuts {
                chunks.push(&text[last..c]);
                last = c;
            }
            chunks.push(&text[last..]);
            let (out, held) = streamed(&p, &chunks);
            prop_assert_eq!(out, p.redact(&text));
            prop_assert!(held <= p.longest());
        }
    }
}
