//! Media-type sniffing from content.
//!
//! Content decides; the file name only refines a type the content already established as text
//! (`.csv`, `.md`) or confirms a JSON scalar in a `.json` file. A name can never claim an active
//! type: there is no `text/html` or `image/svg+xml` here, so a workload cannot get the UI to
//! render markup it wrote. Anything unrecognised is `application/octet-stream`.

/// How many leading bytes the collector keeps for [`sniff`].
pub const SNIFF_LEN: usize = 8192;

/// Magic numbers, checked in order, first match wins (also the upload
/// route's table: one list of what content can claim to be).
pub const MAGIC: &[(&[u8], &str)] = &[
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"PK\x05\x06", "application/zip"),
    (b"PK\x07\x08", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
];

/// Names the media type of a file from its first bytes (up to [`SNIFF_LEN`]) and its name.
pub fn sniff(bytes_prefix: &[u8], name: &str) -> &'static str {
    if let Some((_, media)) = MAGIC.iter().find(|(m, _)| bytes_prefix.starts_with(m)) {
        return media;
    }
    if !is_text(bytes_prefix) {
        return "application/octet-stream";
    }
    let first = bytes_prefix.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{' | b'[')) {
        return "application/json";
    }
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("json") if serde_json::from_slice::<serde::de::IgnoredAny>(bytes_prefix).is_ok() => {
            "application/json"
        }
        Some("csv") => "text/csv",
        Some("md" | "markdown") => "text/markdown",
        _ => "text/plain",
    }
}

/// UTF-8 without NUL. The prefix may cut a multi-byte character at its end; that is tolerated.
fn is_text(bytes: &[u8]) -> bool {
    if bytes.contains(&0) {
        return false;
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        // `error_len() == None`: an incomplete sequence at the very end, i.e. a cut character.
        Err(e) => e.error_len().is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_5_sniff_table() {
        let cut = "é".as_bytes();
        let mut cut_text = b"caf".to_vec();
        cut_text.push(cut[0]);
        let cases: &[(&[u8], &str, &str)] = &[
            (b"\x89PNG\r\n\x1a\n\0\0", "x.txt", "image/png"),
            (b"\xff\xd8\xff\xe0", "x", "image/jpeg"),
            (b"GIF89a...", "x", "image/gif"),
            (b"%PDF-1.7\n", "x", "application/pdf"),
            (b"PK\x03\x04rest", "x.docx", "application/zip"),
            (b"\x1f\x8b\x08\0", "x", "application/gzip"),
            (b"{\"a\": 1}", "result.json", "application/json"),
            (b"  \n[1, 2", "partial", "application/json"),
            (b"42", "n.json", "application/json"),
            (b"42", "n.txt", "text/plain"),
            (b"not json", "x.json", "text/plain"),
            (b"a,b\n1,2\n", "t.CSV", "text/csv"),
            (b"# Title\n", "README.md", "text/markdown"),
            (b"<html><script>", "page.html", "text/plain"),
            (b"<svg onload=x>", "i.svg", "text/plain"),
            (b"", "empty", "text/plain"),
            (&cut_text, "cut.txt", "text/plain"),
            (b"text\0with nul", "x.txt", "application/octet-stream"),
            (
                b"\xff\xfe bad utf8 in the middle \xff ok",
                "x",
                "application/octet-stream",
            ),
            (
                b"\x7fELF\x02\x01\x01\0",
                "run.sh",
                "application/octet-stream",
            ),
        ];
        for (bytes, name, want) in cases {
            assert_eq!(sniff(bytes, name), *want, "{name}: {bytes:?}");
        }
    }
}
