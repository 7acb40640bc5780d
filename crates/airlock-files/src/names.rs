//! The rule for every file name or relative path a user chooses (API-5): upload names, artifact
//! names in URLs, archive entries.
//!
//! [`validate_relative_path`] percent-decodes the input until it stops changing (at most three
//! rounds, so `%252e%252e%252f` is seen as `../`), then refuses anything that could name a place
//! outside the folder it is meant for, or that some filesystem or tool down the line would read
//! differently from how we do:
//!
//! - empty, longer than 1024 bytes, or a segment longer than 255 bytes;
//! - not valid UTF-8 after decoding (this covers overlong encodings such as `%c0%ae`);
//! - NUL, any control character (C0, DEL, C1) and the invisible bidirectional-formatting
//!   characters (which let `evil\u{202e}txt.exe` display as `evilexe.txt`);
//! - absolute paths: `/x`, `\x`, `//server`, a drive prefix `C:` (with or without a separator);
//! - backslashes anywhere, and the full-width / division / fraction slash look-alikes, which
//!   compatibility normalisation (NFKC) or a careless renderer turns into separators;
//! - `.` and `..` segments, empty segments (`a//b`) and a trailing `/`;
//! - a segment that is `.` or `..` once its dot look-alikes are folded: U+2024 ONE DOT LEADER,
//!   U+2025 TWO DOT LEADER, U+FE52 SMALL FULL STOP and U+FF0E FULLWIDTH FULL STOP all become `.`
//!   (or `..`) under NFKC. Our own code never normalises, but a consumer that does (some unzip
//!   tools, some web frameworks) would turn `‥/x` into `../x`, so such segments are refused.
//!   The same characters inside a longer segment (`a\u{2024}txt`) are ordinary and accepted;
//! - a segment ending in `.` or a space (Windows silently strips them, so `x.` and `x` collide);
//! - Windows device names (`CON`, `PRN`, `AUX`, `NUL`, `COM0`–`COM9`, `LPT0`–`LPT9`, the
//!   superscript-digit variants, `CONIN$`, `CONOUT$`), case-insensitively and with any
//!   extension (`nul.tar.gz` is the device on Windows).
//!
//! The accepted name is returned in its decoded form, which is what callers store and display.
//! Decoding until stable is deliberately lossy for names that really contain `%XX` text: a file
//! called `100%25.txt` (after the URL layer decoded it once) becomes `100%.txt`. That is the price
//! of never letting a layer that decodes once more than we did see a traversal.
//!
//! Pure functions, no I/O.

/// The longest accepted path, in bytes, after decoding.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest accepted path segment, in bytes (`NAME_MAX`).
pub const MAX_SEGMENT_BYTES: usize = 255;
/// How many rounds of percent-decoding are applied before the input must be stable.
pub const MAX_DECODE_ROUNDS: usize = 3;
/// Input longer than this is refused before any decoding work is done.
const MAX_RAW_BYTES: usize = 16 * 1024;

/// Why a name was refused. [`NameError::code`] is stable; the message is safe to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the name is empty")]
    Empty,
    #[error("the name is still percent-encoded after {MAX_DECODE_ROUNDS} rounds of decoding")]
    NestedEncoding,
    #[error("the name is not valid UTF-8")]
    InvalidUtf8,
    #[error("the name contains a control or invisible formatting character")]
    ControlChar,
    #[error("absolute paths are not allowed")]
    Absolute,
    #[error("backslashes are not allowed")]
    Backslash,
    #[error("the name contains a character that looks like a path separator")]
    ConfusableSeparator,
    #[error("`.` and `..` path segments are not allowed")]
    DotSegment,
    #[error("empty path segments are not allowed")]
    EmptySegment,
    #[error("a trailing `/` is not allowed")]
    TrailingSlash,
    #[error("a path segment is longer than {MAX_SEGMENT_BYTES} bytes")]
    SegmentTooLong,
    #[error("the name is longer than {MAX_PATH_BYTES} bytes")]
    TooLong,
    #[error("a path segment is a reserved device name")]
    Reserved,
    #[error("a path segment ends with a dot or a space")]
    TrailingDotOrSpace,
}

impl NameError {
    /// A stable, machine-readable reason.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::NestedEncoding => "nested_encoding",
            Self::InvalidUtf8 => "invalid_utf8",
            Self::ControlChar => "control_char",
            Self::Absolute => "absolute",
            Self::Backslash => "backslash",
            Self::ConfusableSeparator => "confusable_separator",
            Self::DotSegment => "dot_segment",
            Self::EmptySegment => "empty_segment",
            Self::TrailingSlash => "trailing_slash",
            Self::SegmentTooLong => "segment_too_long",
            Self::TooLong => "too_long",
            Self::Reserved => "reserved_name",
            Self::TrailingDotOrSpace => "trailing_dot_or_space",
        }
    }
}

/// Validates a user-supplied file name or relative path and returns its decoded form.
/// See the module documentation for the rule.
pub fn validate_relative_path(raw: &str) -> Result<String, NameError> {
    if raw.len() > MAX_RAW_BYTES {
        return Err(NameError::TooLong);
    }
    let decoded = decode_until_stable(raw.as_bytes())?;
    let name = String::from_utf8(decoded).map_err(|_| NameError::InvalidUtf8)?;
    check(&name, Rules::Portable)?;
    Ok(name)
}

/// Validates a relative path inside a run's work directory (the agent tools `read_file`,
/// `write_file`, `list_files`), a documented variant of [`validate_relative_path`].
///
/// The path is taken literally: no percent-decoding, because a model names files by their real
/// names (a work directory may hold `report%20v2.pdf`, saved by `curl -O`, and decoding would
/// make that file unreachable and name `report v2.pdf` instead). Nothing downstream decodes
/// these paths: the file layer opens them one component at a time beneath a directory
/// descriptor. Windows device names and segments ending in a dot or a space are accepted for
/// the same reason (`aux.c` and `con.h` are ordinary files on Linux); everything else of the
/// rule holds: no control or invisible formatting characters, nothing absolute, no backslash or
/// separator look-alike, no `.`/`..` segment (look-alikes included), no empty segment, no
/// trailing `/`, at most [`MAX_PATH_BYTES`] bytes and [`MAX_SEGMENT_BYTES`] per segment.
pub fn validate_work_path(raw: &str) -> Result<String, NameError> {
    check(raw, Rules::Literal)?;
    Ok(raw.to_owned())
}

/// Which variant of the rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// Names that may travel to other systems (uploads, archives, URLs).
    Portable,
    /// Paths that only ever name files in a Linux work directory.
    Literal,
}

/// Percent-decodes until the bytes stop changing; more than [`MAX_DECODE_ROUNDS`] changing
/// rounds is an error.
fn decode_until_stable(raw: &[u8]) -> Result<Vec<u8>, NameError> {
    let mut cur = raw.to_vec();
    let mut rounds = 0;
    loop {
        let next = percent_decode(&cur);
        if next == cur {
            return Ok(cur);
        }
        rounds += 1;
        if rounds > MAX_DECODE_ROUNDS {
            return Err(NameError::NestedEncoding);
        }
        cur = next;
    }
}

/// One round of `%XX` decoding (either hex case). A `%` not followed by two hex digits is kept
/// as it is; `+` is not a space here.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).and_then(|b| hex_val(*b)),
                bytes.get(i + 2).and_then(|b| hex_val(*b)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Invisible characters that reorder or hide text: LRM/RLM, the bidi embeddings and overrides,
/// the bidi isolates, and the byte-order mark / zero-width no-break space.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Characters that are, or normalise or render like, a path separator.
fn is_separator_lookalike(c: char) -> bool {
    matches!(
        c,
        '\u{2044}' // FRACTION SLASH
            | '\u{2215}' // DIVISION SLASH
            | '\u{29f5}' // REVERSE SOLIDUS OPERATOR
            | '\u{29f8}' // BIG SOLIDUS
            | '\u{29f9}' // BIG REVERSE SOLIDUS
            | '\u{fe68}' // SMALL REVERSE SOLIDUS (NFKC: `\`)
            | '\u{ff0f}' // FULLWIDTH SOLIDUS (NFKC: `/`)
            | '\u{ff3c}' // FULLWIDTH REVERSE SOLIDUS (NFKC: `\`)
    )
}

/// The segment with its dot look-alikes replaced by what NFKC makes of them.
fn fold_dots(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for c in segment.chars() {
        match c {
            '\u{2024}' | '\u{fe52}' | '\u{ff0e}' => out.push('.'),
            '\u{2025}' => out.push_str(".."),
            '\u{2026}' => out.push_str("..."),
            _ => out.push(c),
        }
    }
    out
}

const RESERVED: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "COM0", "COM1", "COM2", "COM3", "COM4",
    "COM5", "COM6", "COM7", "COM8", "COM9", "COM¹", "COM²", "COM³", "LPT0", "LPT1", "LPT2", "LPT3",
    "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9", "LPT¹", "LPT²", "LPT³",
];

/// Windows treats `CON`, `con.txt` and `CON .txt` alike: compare the part before the first dot,
/// without trailing spaces, case-insensitively.
fn is_reserved(segment: &str) -> bool {
    let base = segment
        .split('.')
        .next()
        .unwrap_or("")
        .trim_end_matches(' ');
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(base))
}

fn check(name: &str, rules: Rules) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_PATH_BYTES {
        return Err(NameError::TooLong);
    }
    if name
        .chars()
        .any(|c| c.is_control() || is_invisible_format(c))
    {
        return Err(NameError::ControlChar);
    }
    let b = name.as_bytes();
    let drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
    if b[0] == b'/' || b[0] == b'\\' || drive {
        return Err(NameError::Absolute);
    }
    if name.contains('\\') {
        return Err(NameError::Backslash);
    }
    if name.chars().any(is_separator_lookalike) {
        return Err(NameError::ConfusableSeparator);
    }
    if name.ends_with('/') {
        return Err(NameError::TrailingSlash);
    }
    for segment in name.split('/') {
        check_segment(segment, rules)?;
    }
    Ok(())
}

fn check_segment(segment: &str, rules: Rules) -> Result<(), NameError> {
    if segment.is_empty() {
        return Err(NameError::EmptySegment);
    }
    let folded = fold_dots(segment);
    if folded == "." || folded == ".." {
        return Err(NameError::DotSegment);
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(NameError::SegmentTooLong);
    }
    if rules == Rules::Literal {
        return Ok(());
    }
    if folded.ends_with('.') || segment.ends_with(' ') {
        return Err(NameError::TrailingDotOrSpace);
    }
    if is_reserved(segment) {
        return Err(NameError::Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use NameError as E;

    #[test]
    fn api_5_relative_path_table() {
        let long_segment = "a".repeat(256);
        let max_segment = "a".repeat(255);
        let long_path = vec!["a".repeat(200); 6].join("/"); // 1205 bytes
        let max_path = format!("{}/{}", "a".repeat(255), vec!["b".repeat(255); 3].join("/")); // 1023
        let cases: Vec<(&str, Result<&str, NameError>)> = vec![
            // Good names.
            ("report.txt", Ok("report.txt")),
            ("a/b/c.json", Ok("a/b/c.json")),
            ("ünïcode.txt", Ok("ünïcode.txt")),
            ("report%20final.txt", Ok("report final.txt")),
            ("100%.txt", Ok("100%.txt")),
            ("%zz.txt", Ok("%zz.txt")),
            (".hidden", Ok(".hidden")),
            ("a..b", Ok("a..b")),
            ("a+b.txt", Ok("a+b.txt")),
            ("10:30 notes.txt", Ok("10:30 notes.txt")),
            ("console.log", Ok("console.log")),
            ("a\u{2024}txt", Ok("a\u{2024}txt")),
            (&max_segment, Ok(&max_segment)),
            (&max_path, Ok(&max_path)),
            // Traversal, every encoding.
            ("..", Err(E::DotSegment)),
            (".", Err(E::DotSegment)),
            ("../x", Err(E::DotSegment)),
            ("..%2fx", Err(E::DotSegment)),
            ("..%2Fx", Err(E::DotSegment)),
            ("%2e%2e/x", Err(E::DotSegment)),
            ("%2E%2E%2Fx", Err(E::DotSegment)),
            ("%252e%252e%252fx", Err(E::DotSegment)),
            ("%25252e%25252e%25252fx", Err(E::DotSegment)),
            ("%2525252e%2525252e%2525252fx", Err(E::NestedEncoding)),
            ("a/../../b", Err(E::DotSegment)),
            ("a/./b", Err(E::DotSegment)),
            ("a/..", Err(E::DotSegment)),
            ("....//", Err(E::TrailingSlash)),
            ("....//x", Err(E::TrailingDotOrSpace)),
            ("a//x", Err(E::EmptySegment)),
            ("....", Err(E::TrailingDotOrSpace)),
            ("%c0%ae%c0%ae/x", Err(E::InvalidUtf8)),
            ("%c0%af", Err(E::InvalidUtf8)),
            ("%e0%80%ae", Err(E::InvalidUtf8)),
            ("%ff.txt", Err(E::InvalidUtf8)),
            // Backslashes and Windows forms.
            ("..%5cx", Err(E::Backslash)),
            ("..%5Cx", Err(E::Backslash)),
            ("%5c", Err(E::Absolute)),
            ("a\\b", Err(E::Backslash)),
            ("a\\..\\b", Err(E::Backslash)),
            ("C:\\x", Err(E::Absolute)),
            ("C:/x", Err(E::Absolute)),
            ("c:x", Err(E::Absolute)),
            ("\\x", Err(E::Absolute)),
            ("\\\\server\\share", Err(E::Absolute)),
            // Absolute.
            ("/etc/passwd", Err(E::Absolute)),
            ("%2fetc", Err(E::Absolute)),
            ("%252fetc", Err(E::Absolute)),
            ("//server/share", Err(E::Absolute)),
            // NUL and control characters.
            ("x%00.txt", Err(E::ControlChar)),
            ("x\0y", Err(E::ControlChar)),
            ("x%0a.txt", Err(E::ControlChar)),
            ("x\r\n", Err(E::ControlChar)),
            ("x\u{7f}", Err(E::ControlChar)),
            ("x\u{85}", Err(E::ControlChar)),
            ("evil\u{202e}txt.exe", Err(E::ControlChar)),
            ("%e2%80%ae.txt", Err(E::ControlChar)),
            // Shape.
            ("", Err(E::Empty)),
            ("%", Ok("%")),
            ("a//b", Err(E::EmptySegment)),
            ("a/", Err(E::TrailingSlash)),
            ("a%2f", Err(E::TrailingSlash)),
            (&long_segment, Err(E::SegmentTooLong)),
            (&long_path, Err(E::TooLong)),
            ("x. ", Err(E::TrailingDotOrSpace)),
            ("x.", Err(E::TrailingDotOrSpace)),
            ("dir /x", Err(E::TrailingDotOrSpace)),
            // Look-alikes (documented choice: refused).
            ("\u{2024}\u{2024}/", Err(E::TrailingSlash)),
            ("\u{2024}\u{2024}/x", Err(E::DotSegment)),
            ("\u{2025}/x", Err(E::DotSegment)),
            ("%e2%80%a5/x", Err(E::DotSegment)),
            ("\u{ff0e}\u{ff0e}/x", Err(E::DotSegment)),
            ("..\u{ff0f}x", Err(E::ConfusableSeparator)),
            ("a\u{2215}b", Err(E::ConfusableSeparator)),
            // Windows device names.
            ("CON", Err(E::Reserved)),
            ("nul", Err(E::Reserved)),
            ("a/NUL.txt", Err(E::Reserved)),
            ("com1.tar.gz", Err(E::Reserved)),
            ("LPT9", Err(E::Reserved)),
            ("aux .txt", Err(E::Reserved)),
            ("COM¹", Err(E::Reserved)),
        ];
        assert!(cases.len() >= 40, "{}", cases.len());
        for (raw, want) in &cases {
            let got = validate_relative_path(raw);
            assert_eq!(
                got.as_deref().map_err(|e| *e),
                want.map(|s| s),
                "{}",
                raw.escape_debug()
            );
        }
    }

    #[test]
    fn agt_3_work_path_table() {
        let long_path = vec!["a".repeat(200); 6].join("/");
        let cases: Vec<(&str, Result<&str, NameError>)> = vec![
            // Literal: nothing is decoded, so a `%XX` name names itself and cannot hide a
            // traversal from a layer that decodes (nothing downstream does).
            ("report%20v2.pdf", Ok("report%20v2.pdf")),
            ("%2e%2e/x", Ok("%2e%2e/x")),
            ("..%2fx", Ok("..%2fx")),
            ("src/main.rs", Ok("src/main.rs")),
            // Ordinary Linux names that the portable rule refuses.
            ("aux.c", Ok("aux.c")),
            ("include/con.h", Ok("include/con.h")),
            ("Makefile.", Ok("Makefile.")),
            ("trailing ", Ok("trailing ")),
            // Everything else of the rule still holds.
            ("..", Err(E::DotSegment)),
            (".", Err(E::DotSegment)),
            ("a/../b", Err(E::DotSegment)),
            ("./a", Err(E::DotSegment)),
            ("\u{2025}/x", Err(E::DotSegment)),
            ("/etc/passwd", Err(E::Absolute)),
            ("C:x", Err(E::Absolute)),
            ("a\\b", Err(E::Backslash)),
            ("a\u{ff0f}b", Err(E::ConfusableSeparator)),
            ("a//b", Err(E::EmptySegment)),
            ("a/", Err(E::TrailingSlash)),
            ("", Err(E::Empty)),
            ("a\nb", Err(E::ControlChar)),
            ("x\u{1b}[31m", Err(E::ControlChar)),
            ("evil\u{202e}txt", Err(E::ControlChar)),
            ("nul\0", Err(E::ControlChar)),
            (&long_path, Err(E::TooLong)),
        ];
        for (raw, want) in &cases {
            let got = validate_work_path(raw);
            assert_eq!(
                got.as_deref().map_err(|e| *e),
                want.map(|s| s),
                "{}",
                raw.escape_debug()
            );
        }
    }

    #[test]
    fn api_5_every_error_has_a_distinct_code() {
        let all = [
            E::Empty,
            E::NestedEncoding,
            E::InvalidUtf8,
            E::ControlChar,
            E::Absolute,
            E::Backslash,
            E::ConfusableSeparator,
            E::DotSegment,
            E::EmptySegment,
            E::TrailingSlash,
            E::SegmentTooLong,
            E::TooLong,
            E::Reserved,
            E::TrailingDotOrSpace,
        ];
        let codes: std::collections::BTreeSet<_> = all.iter().map(NameError::code).collect();
        assert_eq!(codes.len(), all.len());
    }

    #[test]
    fn api_5_huge_input_is_refused_without_decoding() {
        let raw = "%41".repeat(10_000);
        assert_eq!(validate_relative_path(&raw), Err(E::TooLong));
    }
}
