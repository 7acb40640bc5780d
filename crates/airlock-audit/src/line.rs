//! Verifying a stored line as it is (AUD-4): the bytes in the database are hashed directly,
//! without parsing them into an event and canonicalising it again.
//!
//! # Why this is as strong as re-canonicalising
//!
//! A stored line is the export form of an event ([`crate::export`]): the RFC 8785 canonical
//! JSON of the event's thirteen members plus `hash` and `prev_hash`. [`LineView::parse`]
//! accepts a line only if it **is** canonical JSON of exactly that shape: the fifteen members
//! in canonical order with the types the event has, no whitespace, every string escaped the
//! one canonical way, every number spelled as [`crate::jcs::number_to_string`] spells it,
//! object keys in strictly increasing UTF-16 order (so none repeats), nesting within
//! [`crate::jcs::MAX_DEPTH`]. For such a line `L`:
//!
//! 1. `L == JCS(parse(L))`: the line is the canonical form of what it says, and one event has
//!    exactly one such line. (Canonical form is per member: each member's bytes depend only on
//!    its name and value, and members are joined in key order.)
//! 2. So `JCS(event)` is `L` with the two members `,"hash":"…"` and `,"prev_hash":"…"` cut
//!    out (neither is ever first, so each has its leading comma): removing members from a
//!    canonical object leaves the canonical object of the rest. That is what
//!    [`LineView::event_hash`] hashes, as three slices of `L`.
//! 3. The event the old path built (`from_json_line`, then `event_bytes`) is `parse(L)`
//!    without the two members, so both paths hash the same bytes and compare against the same
//!    `hash`, `prev_hash`, `seq` and workspace: they reach the same verdict on every
//!    canonical line (tested against each other: `tests/suite/line.rs`).
//!
//! A line that is **not** canonical is refused ([`LineError`]), even when it parses to an
//! event whose canonical hash matches (the old path accepted, for example, a line with extra
//! whitespace or `\u0041` for `A`). Airlock only ever stores canonical lines
//! ([`crate::export::to_json_line`]), so such a line was rewritten by someone else; refusing
//! it makes the chain cover the stored bytes themselves, not only a normalisation of them.
//! Everything the old path refused (repeated keys, unknown or missing members, wrong types,
//! an actor of the wrong shape, non-object metadata, integers a double cannot hold, too deep
//! nesting, invalid JSON) is refused here too, because none of it can be canonical JSON of an
//! event.
//!
//! Cost: one pass over the bytes (plain string bytes and hash digits eight at a time), and
//! SHA-256 over the line minus the two hash members. Nothing is allocated except to unescape
//! an object key (or a workspace id) that holds an escape, and to check the spelling of a
//! number that is not an integer of at most 15 digits (parsed and written again with
//! [`crate::jcs::number_to_string`], as the old path did).

use std::cmp::Ordering;
use std::ops::Range;

use sha2::{Digest, Sha256};

use crate::chain::DOMAIN_SEPARATOR;
use crate::jcs::{self, MAX_DEPTH};

/// Why a stored line is not the canonical form of an audit event. `offset` is the byte at
/// which reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line is not the canonical form of an audit event: {reason} at byte {offset}")]
pub struct LineError {
    pub reason: &'static str,
    pub offset: usize,
}

/// A stored line that is canonical JSON of an audit event, read without copying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineView<'a> {
    line: &'a str,
    /// The `workspace_id` string's contents as written (canonical escapes included).
    workspace_raw: Range<usize>,
    /// `,"hash":"<64 hex>"` and `,"prev_hash":"<64 hex>"`, the bytes not in `event_bytes`.
    hash_member: Range<usize>,
    prev_member: Range<usize>,
    pub seq: u64,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

impl<'a> LineView<'a> {
    /// Reads `line`, refusing anything that is not canonical JSON of an audit event.
    pub fn parse(line: &'a str) -> Result<Self, LineError> {
        let mut r = Reader {
            s: line,
            b: line.as_bytes(),
            pos: 0,
        };
        r.lit(b"{\"action_id\":")?;
        r.opt_string()?;
        r.lit(b",\"actor\":")?;
        r.actor()?;
        r.lit(b",\"at\":")?;
        r.string()?;
        r.lit(b",\"decision\":")?;
        r.opt_string()?;
        r.lit(b",\"event_type\":")?;
        r.string()?;
        let hash_start = r.pos;
        r.lit(b",\"hash\":")?;
        let hash = r.hash()?;
        let hash_member = hash_start..r.pos;
        r.lit(b",\"metadata\":")?;
        r.object(2)?;
        r.lit(b",\"payload_hash\":")?;
        r.opt_string()?;
        let prev_start = r.pos;
        r.lit(b",\"prev_hash\":")?;
        let prev_hash = r.hash()?;
        let prev_member = prev_start..r.pos;
        r.lit(b",\"request_id\":")?;
        r.opt_string()?;
        r.lit(b",\"result\":")?;
        r.opt_string()?;
        r.lit(b",\"run_id\":")?;
        r.opt_string()?;
        r.lit(b",\"seq\":")?;
        let seq = r.seq()?;
        r.lit(b",\"target\":")?;
        r.opt_string()?;
        r.lit(b",\"workspace_id\":")?;
        let workspace_raw = r.string()?;
        r.lit(b"}")?;
        if r.pos != line.len() {
            return Err(r.err("bytes after the event"));
        }
        Ok(Self {
            line,
            workspace_raw,
            hash_member,
            prev_member,
            seq,
            prev_hash,
            hash,
        })
    }

    /// The canonical event bytes, in the three pieces the line holds them in: the line
    /// without its `hash` and `prev_hash` members.
    pub fn event_bytes_parts(&self) -> [&'a [u8]; 3] {
        let b = self.line.as_bytes();
        [
            b.get(..self.hash_member.start).unwrap_or_default(),
            b.get(self.hash_member.end..self.prev_member.start)
                .unwrap_or_default(),
            b.get(self.prev_member.end..).unwrap_or_default(),
        ]
    }

    /// `SHA-256("airlock-audit-v1\n" || prev_hash || event_bytes)`, over the stored bytes.
    pub fn event_hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(DOMAIN_SEPARATOR);
        h.update(self.prev_hash);
        for part in self.event_bytes_parts() {
            h.update(part);
        }
        h.finalize().into()
    }

    /// Whether the event belongs to `workspace_id`.
    pub fn workspace_is(&self, workspace_id: &str) -> bool {
        let raw = self.workspace_raw();
        if raw.contains('\\') {
            unescape(raw) == workspace_id
        } else {
            raw == workspace_id
        }
    }

    /// The event's `workspace_id`.
    pub fn workspace_id(&self) -> String {
        unescape(self.workspace_raw())
    }

    fn workspace_raw(&self) -> &'a str {
        self.line
            .get(self.workspace_raw.clone())
            .unwrap_or_default()
    }
}

/// The contents of a canonical JSON string (between the quotes) with its escapes undone.
/// Only the escapes [`Reader::string`] admits occur.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('f') => out.push('\u{c}'),
            Some('r') => out.push('\r'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16).unwrap_or(0xfffd);
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other), // `"` and `\`
            None => {}
        }
    }
    out
}

/// Orders two canonical JSON string contents by their decoded UTF-16 code units (RFC 8785
/// section 3.2.3), without allocating in the common case.
fn cmp_keys(a: &str, b: &str) -> Ordering {
    if a.contains('\\') || b.contains('\\') {
        jcs::cmp_utf16(&unescape(a), &unescape(b))
    } else if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        jcs::cmp_utf16(a, b)
    }
}

/// Eight lowercase hex digits (loaded little-endian, the first digit in the lowest byte) →
/// the four bytes they spell, or `None` if any byte is not `0-9` or `a-f`. Eight at a time
/// because the two hashes are a fifth of a line; tested against a digit-by-digit decoder
/// below, and [`crate::hex::decode_hash`] uses it too.
pub(crate) fn hex8(w: u64) -> Option<[u8; 4]> {
    if w & HIGHS != 0 {
        return None;
    }
    // Every byte is below 0x80, so these sums stay within their bytes. High bit set iff the
    // byte is >= lo, respectively <= hi.
    let at_least = |lo: u8| w + ONES * u64::from(0x80 - lo);
    let at_most = |hi: u8| !(w + ONES * u64::from(0x7f - hi));
    let digit = at_least(b'0') & at_most(b'9') & HIGHS;
    let letter = at_least(b'a') & at_most(b'f') & HIGHS;
    if digit | letter != HIGHS {
        return None;
    }
    // '0'..'9' → 0..9 by the low nibble; 'a'..'f' → 1..6 by the low nibble, plus 9.
    let v = (w & (ONES * 0x0f)) + (letter >> 7) * 9;
    // Each 16-bit lane: first digit << 4 | second digit.
    let lanes = ((v & 0x00ff_00ff_00ff_00ff) << 4) | ((v >> 8) & 0x00ff_00ff_00ff_00ff);
    let b = lanes.to_le_bytes();
    Some([b[0], b[2], b[4], b[6]])
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of every byte of `w` (little-endian: byte `i` is bits `8i..8i+8`) that is `"`,
/// `\` or below 0x20, the bytes a canonical string cannot hold unescaped, and possibly of
/// some bytes above the first such byte. Exact where it matters: the mask is zero exactly
/// when there is no such byte, and its lowest set bit is in the first such byte (a borrow
/// only travels upwards, from a byte that is flagged anyway). Tested exhaustively below.
fn special_mask(w: u64) -> u64 {
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = zero_in(w ^ (ONES * u64::from(b'"')));
    let backslash = zero_in(w ^ (ONES * u64::from(b'\\')));
    // A byte below 0x20: subtracting 0x20 borrows into its high bit while its own high bit
    // is clear.
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    quote | backslash | control
}

struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn err(&self, reason: &'static str) -> LineError {
        LineError {
            reason,
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    /// Exactly the bytes `want` (an array, so that the comparison is inlined).
    fn lit<const N: usize>(&mut self, want: &[u8; N]) -> Result<(), LineError> {
        let here = self
            .b
            .get(self.pos..self.pos + N)
            .and_then(|s| <&[u8; N]>::try_from(s).ok());
        if here == Some(want) {
            self.pos += want.len();
            Ok(())
        } else {
            Err(self.err("not the expected member"))
        }
    }

    /// A string; returns the range of its contents (between the quotes).
    fn string(&mut self) -> Result<Range<usize>, LineError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string"));
        }
        self.pos += 1;
        let start = self.pos;
        loop {
            // Plain bytes eight at a time, up to the first byte that needs a look.
            while let Some(word) = self
                .b
                .get(self.pos..self.pos + 8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
            {
                let mask = special_mask(u64::from_le_bytes(word));
                if mask != 0 {
                    // The lowest flagged byte is the first special one (see special_mask).
                    self.pos += (mask.trailing_zeros() / 8) as usize;
                    break;
                }
                self.pos += 8;
            }
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    let contents = start..self.pos;
                    self.pos += 1;
                    return Ok(contents);
                }
                Some(b'\\') => self.escape()?,
                Some(0x00..=0x1f) => return Err(self.err("unescaped control character")),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// One escape, at a backslash: only the spellings RFC 8785 writes.
    fn escape(&mut self) -> Result<(), LineError> {
        self.pos += 1;
        match self.peek() {
            Some(b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r') => {
                self.pos += 1;
                Ok(())
            }
            Some(b'u') => {
                let code = match self.b.get(self.pos + 1..self.pos + 5) {
                    Some([b'0', b'0', hi @ (b'0' | b'1'), lo]) => {
                        let lo = match lo {
                            b'0'..=b'9' => lo - b'0',
                            b'a'..=b'f' => lo - b'a' + 10,
                            _ => return Err(self.err("escape is not canonical")),
                        };
                        ((hi - b'0') << 4) | lo
                    }
                    _ => return Err(self.err("escape is not canonical")),
                };
                // Those with a short form must use it.
                if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                    return Err(self.err("escape is not canonical"));
                }
                self.pos += 5;
                Ok(())
            }
            _ => Err(self.err("escape is not canonical")),
        }
    }

    fn opt_string(&mut self) -> Result<(), LineError> {
        if self.peek() == Some(b'n') {
            self.lit(b"null")
        } else {
            self.string().map(drop)
        }
    }

    /// `{"id":"…","kind":"agent"|"human"|"service"}` or `{"kind":"system"}`.
    fn actor(&mut self) -> Result<(), LineError> {
        if self.lit(b"{\"kind\":\"system\"}").is_ok() {
            return Ok(());
        }
        self.lit(b"{\"id\":")?;
        self.string()?;
        self.lit(b",\"kind\":")?;
        let kind = self.string()?;
        match self.b.get(kind) {
            Some(b"agent" | b"human" | b"service") => self.lit(b"}"),
            _ => Err(self.err("not an actor")),
        }
    }

    /// A hash: a string of exactly 64 lowercase hex digits (the one spelling
    /// [`crate::hex::decode_hash`] accepts).
    fn hash(&mut self) -> Result<[u8; 32], LineError> {
        let digits = match self.b.get(self.pos..self.pos + 66) {
            Some([b'"', digits @ .., b'"']) => digits,
            _ => return Err(self.err("not a hash")),
        };
        let mut out = [0u8; 32];
        for (four, eight) in out.chunks_exact_mut(4).zip(digits.chunks_exact(8)) {
            let word = <[u8; 8]>::try_from(eight).map_err(|_| self.err("not a hash"))?;
            let bytes = hex8(u64::from_le_bytes(word)).ok_or_else(|| self.err("not a hash"))?;
            four.copy_from_slice(&bytes);
        }
        self.pos += 66;
        Ok(out)
    }

    /// `seq`: a canonical non-negative integer that fits in a `u64`.
    fn seq(&mut self) -> Result<u64, LineError> {
        let start = self.pos;
        let token = self.number()?;
        let text = self.b.get(token).unwrap_or_default();
        let mut n: u64 = 0;
        for &d in text {
            if !d.is_ascii_digit() {
                self.pos = start;
                return Err(self.err("seq is not an unsigned integer"));
            }
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d - b'0')))
                .ok_or_else(|| self.err("seq is not an unsigned integer"))?;
        }
        Ok(n)
    }

    fn value(&mut self, depth: usize) -> Result<(), LineError> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'n') => self.lit(b"null"),
            Some(b't') => self.lit(b"true"),
            Some(b'f') => self.lit(b"false"),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            _ => Err(self.err("expected a json value")),
        }
    }

    /// An object nested `depth` containers deep (the event itself is 1): keys in strictly
    /// increasing UTF-16 order, so none repeats.
    fn object(&mut self, depth: usize) -> Result<(), LineError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        if self.peek() != Some(b'{') {
            return Err(self.err("expected an object"));
        }
        self.pos += 1;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        let mut prev: Option<Range<usize>> = None;
        loop {
            let key = self.string()?;
            if let Some(prev) = prev {
                // Both ranges lie between quotes, so on character boundaries.
                let text = |r: Range<usize>| self.s.get(r).unwrap_or_default();
                if cmp_keys(text(prev), text(key.clone())) != Ordering::Less {
                    return Err(self.err("object keys out of order or repeated"));
                }
            }
            prev = Some(key);
            self.lit(b":")?;
            self.value(depth + 1)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), LineError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        self.pos += 1; // `[`, checked by the caller
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.value(depth + 1)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    /// A number spelled exactly as [`jcs::number_to_string`] spells its value; returns the
    /// token's range.
    fn number(&mut self) -> Result<Range<usize>, LineError> {
        let start = self.pos;
        let digits = |r: &mut Self| {
            let from = r.pos;
            while r.peek().is_some_and(|c| c.is_ascii_digit()) {
                r.pos += 1;
            }
            r.pos - from
        };
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        let int_digits = digits(self);
        if int_digits == 0 || (int_digits > 1 && self.b.get(int_start) == Some(&b'0')) {
            return Err(self.err("not a json number"));
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            integer = false;
            if digits(self) == 0 {
                return Err(self.err("not a json number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            integer = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("not a json number"));
            }
        }
        let token = start..self.pos;
        // Integers of up to 15 digits are below 2^53: their canonical form is their decimal,
        // except `-0` (written `0`).
        let zero = int_digits == 1 && self.b.get(int_start) == Some(&b'0');
        if integer && int_digits <= 15 && !(negative && zero) {
            return Ok(token);
        }
        let text = self.s.get(token.clone()).unwrap_or_default();
        let canonical = serde_json::from_str::<serde_json::Number>(text)
            .ok()
            .and_then(|n| jcs::number_to_string(&n).ok());
        if canonical.as_deref() == Some(text) {
            Ok(token)
        } else {
            Err(LineError {
                reason: "number is not in canonical form",
                offset: start,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special(b: u8) -> bool {
        b == b'"' || b == b'\\' || b < 0x20
    }

    /// The mask is zero exactly when no byte is special, and its lowest set bit is the high
    /// bit of the first special byte.
    fn check(w: [u8; 8]) {
        let mask = special_mask(u64::from_le_bytes(w));
        match w.iter().position(|&b| special(b)) {
            None => assert_eq!(mask, 0, "{w:x?}"),
            Some(i) => assert_eq!(mask.trailing_zeros() as usize, 8 * i + 7, "{w:x?}"),
        }
    }

    #[test]
    fn special_mask_finds_the_first_special_byte_exactly() {
        for filler in [
            b'a', 0x7f, 0x80, 0xff, b' ', b'!', b'#', b'[', b']', 0x00, b'"',
        ] {
            for pos in 0..8 {
                for b in 0..=255u8 {
                    let mut w = [filler; 8];
                    w[pos] = b;
                    check(w);
                }
            }
        }
        // Every pair of bytes, where a borrow from one byte could disturb the next.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for at in [0usize, 3, 6] {
                    let mut w = [b'x'; 8];
                    w[at] = a;
                    w[at + 1] = b;
                    check(w);
                }
            }
        }
    }

    #[test]
    fn hex8_accepts_exactly_lowercase_hex_and_decodes_it() {
        let table = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let naive = |w: [u8; 8]| -> Option<[u8; 4]> {
            let mut out = [0u8; 4];
            for (i, o) in out.iter_mut().enumerate() {
                *o = (table(w[2 * i])? << 4) | table(w[2 * i + 1])?;
            }
            Some(out)
        };
        for filler in [b'0', b'9', b'a', b'f', b'7', b'c'] {
            for pos in 0..8 {
                for b in 0..=255u8 {
                    let mut w = [filler; 8];
                    w[pos] = b;
                    assert_eq!(hex8(u64::from_le_bytes(w)), naive(w), "{w:x?}");
                }
            }
        }
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let digits = *b"0123456789abcdef";
            let w: [u8; 8] = core::array::from_fn(|i| digits[((x >> (4 * i)) & 0xf) as usize]);
            assert_eq!(hex8(u64::from_le_bytes(w)), naive(w), "{w:x?}");
        }
    }

    #[test]
    fn unescape_undoes_every_canonical_escape() {
        assert_eq!(
            unescape(r#"a\"b\\c\b\t\n\f\r\u0001\u001fé"#),
            "a\"b\\c\u{8}\t\n\u{c}\r\u{1}\u{1f}é"
        );
    }

    #[test]
    fn keys_compare_by_utf16_code_units() {
        assert_eq!(cmp_keys("a", "b"), Ordering::Less);
        // U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16, after it in UTF-8.
        assert_eq!(cmp_keys("\u{1f600}", "\u{fb33}"), Ordering::Less);
        assert_eq!(cmp_keys(r"\r", "\u{20ac}"), Ordering::Less);
        assert_eq!(cmp_keys(r"\u0001", r"\b"), Ordering::Less);
        assert_eq!(cmp_keys("n", "n"), Ordering::Equal);
    }
}
