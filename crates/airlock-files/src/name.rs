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
    fn dur_4_displayed_names_cannot_inject_control_characters() {
        assert_eq!(display(b"a\nb\xff"), "a\\nb\u{fffd}");
    }
}
