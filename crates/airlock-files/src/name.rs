//! The name rule for one path component chosen by a workload, and safe display of such names.
//!
//! Pure functions, no I/O.

/// The longest name most Linux filesystems accept (`NAME_MAX`).
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Parses one path component: UTF-8, non-empty, not `.` or `..`, no `/` or NUL, at most 255 bytes.
pub(crate) fn parse_name(raw: &[u8]) -> Option<&str> {
    if raw.is_empty()
        || raw.len() > MAX_NAME_BYTES
        || raw == b"."
        || raw == b".."
        || raw.contains(&b'/')
        || raw.contains(&0)
    {
        return None;
    }
    std::str::from_utf8(raw).ok()
}

/// Renders untrusted bytes for an error message: lossy UTF-8 with control characters escaped.
pub(crate) fn display(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).escape_debug().to_string()
}

/// Renders a name chosen by a workload for a listing shown to a model or a person: valid UTF-8
/// stays readable, and everything that could inject text or hide it is escaped.
///
/// - `\` becomes `\\`, so the escapes below cannot be forged by a name that spells them;
/// - control characters (C0, DEL, C1), line and paragraph separators, the bidirectional
///   controls, zero-width and other invisible formatting characters (the Unicode tag block
///   used to smuggle hidden prompts included) become `\n`, `\t`, `\r` or `\u{..}`, as Rust's
///   `escape_debug` writes them;
/// - variation selectors become `\u{..}` too: they are invisible and can carry hidden data;
/// - each byte that is not part of valid UTF-8 becomes `\xNN`.
///
/// Unlike [`display`], this is injective: two different names never render the same, so a
/// listing cannot show one entry disguised as another.
pub(crate) fn escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        // `escape_debug` on the string (not per char) leaves combining marks inside a name
        // alone (`e\u{301}` stays readable) while escaping every non-printable character.
        let escaped = chunk.valid().escape_debug().to_string();
        let mut chars = escaped.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                if is_variation_selector(c) {
                    push_unicode(&mut out, c);
                } else {
                    out.push(c);
                }
                continue;
            }
            // Every backslash in `escape_debug` output starts an escape; quotes need none in a
            // listing, everything else is kept as written.
            match chars.next() {
                Some(q @ ('\'' | '"')) => out.push(q),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}')
}

fn push_unicode(out: &mut String, c: char) {
    out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
}

/// Joins a relative path prefix (already escaped or validated) and a component with `/`.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_4_name_rule_table() {
        let long_ok = "a".repeat(255);
        let long_bad = "a".repeat(256);
        let cases: &[(&[u8], bool)] = &[
            (b"result.json", true),
            (b"report final.txt", true),
            ("données.csv".as_bytes(), true),
            (b".hidden", true),
            (b"...", true),
            (long_ok.as_bytes(), true),
            (long_bad.as_bytes(), false),
            (b"", false),
            (b".", false),
            (b"..", false),
            (b"a/b", false),
            (b"/etc", false),
            (b"a\0b", false),
            (b"bad\xff", false),
            (b"\xc3", false),
        ];
        for (raw, ok) in cases {
            assert_eq!(parse_name(raw).is_some(), *ok, "{}", display(raw));
        }
    }

    #[test]
    fn agt_3_escaped_names_are_readable_injective_and_inert() {
        let cases: &[(&[u8], &str)] = &[
            (b"plain.txt", "plain.txt"),
            ("données.csv".as_bytes(), "données.csv"),
            ("cafe\u{301}".as_bytes(), "cafe\u{301}"),
            (b"it's \"quoted\"", "it's \"quoted\""),
            (b"a\nb", "a\\nb"),
            (b"a\\nb", "a\\\\nb"),
            (b"\x1b[31mred", "\\u{1b}[31mred"),
            (b"tab\there\r", "tab\\there\\r"),
            (b"bad\xff\xfe", "bad\\xff\\xfe"),
            (b"bad\\xff", "bad\\\\xff"),
            ("\u{fffd}".as_bytes(), "\u{fffd}"),
            ("evil\u{202e}txt".as_bytes(), "evil\\u{202e}txt"),
            ("line\u{2028}break".as_bytes(), "line\\u{2028}break"),
            ("zero\u{200b}width".as_bytes(), "zero\\u{200b}width"),
            ("tag\u{e0041}".as_bytes(), "tag\\u{e0041}"),
            ("vs\u{fe0f}".as_bytes(), "vs\\u{fe0f}"),
            ("\u{85}nel".as_bytes(), "\\u{85}nel"),
        ];
        let mut seen = std::collections::BTreeMap::new();
        for (raw, want) in cases {
            let got = escape(raw);
            assert_eq!(got, *want, "{raw:?}");
            assert!(!got.chars().any(char::is_control), "{got:?}");
            if let Some(other) = seen.insert(got.clone(), raw) {
                panic!("{raw:?} and {other:?} both render as {got:?}");
            }
        }
    }

    #[test]
    fn dur_4_displayed_names_cannot_inject_control_characters() {
        assert_eq!(display(b"a\nb\xff"), "a\\nb\u{fffd}");
    }
}
