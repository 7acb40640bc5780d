//! Tool output as the model sees it (AGT-3): bounded, with what was left
//! out said plainly. The whole output is kept as an artifact by digest; the
//! model gets the head and the tail, which is where commands put what
//! matters (what ran, and how it ended).

/// `bytes` as text of at most about `max` bytes: all of it when it fits,
/// otherwise its head and tail around a line
/// `[… omitted N of M bytes …]`. Invalid UTF-8 is replaced, and a cut
/// never splits a character.
pub fn bounded(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let head_len = floor_char(bytes, max / 2);
    let tail_start = ceil_char(bytes, bytes.len() - (max - max / 2));
    let omitted = tail_start - head_len;
    format!(
        "{}\n[… omitted {omitted} of {} bytes …]\n{}",
        String::from_utf8_lossy(&bytes[..head_len]),
        bytes.len(),
        String::from_utf8_lossy(&bytes[tail_start..]),
    )
}

/// The largest index ≤ `i` that does not split a UTF-8 sequence.
fn floor_char(bytes: &[u8], mut i: usize) -> usize {
    while i > 0 && i < bytes.len() && is_continuation(bytes[i]) {
        i -= 1;
    }
    i
}

/// The smallest index ≥ `i` that does not split a UTF-8 sequence.
fn ceil_char(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && is_continuation(bytes[i]) {
        i += 1;
    }
    i
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn agt_3_short_output_is_whole() {
        assert_eq!(bounded(b"hello\n", 100), "hello\n");
        assert_eq!(bounded(b"", 0), "");
    }

    #[test]
    fn agt_3_long_output_keeps_head_and_tail_and_says_what_was_omitted() {
        let mut out = b"HEAD".to_vec();
        out.extend(std::iter::repeat_n(b'x', 10_000));
        out.extend(b"TAIL");
        let got = bounded(&out, 100);
        assert!(got.starts_with("HEAD"), "{got}");
        assert!(got.ends_with("TAIL"), "{got}");
        assert!(got.contains("[… omitted 9908 of 10008 bytes …]"), "{got}");
        assert!(got.len() < 150);
    }

    #[test]
    fn agt_3_cuts_never_split_characters() {
        let text = "é".repeat(1_000); // two bytes each
        for max in [1, 2, 3, 51, 100, 101] {
            let got = bounded(text.as_bytes(), max);
            assert!(!got.contains('\u{fffd}'), "max {max}: {got}");
        }
        assert_eq!(bounded(&[0xff, 0xfe], 10), "\u{fffd}\u{fffd}");
    }
}
