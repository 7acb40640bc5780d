//! Lowercase hexadecimal for hashes, the only form hashes take outside this crate (export lines,
//! checkpoints, CLI output). Decoding is strict: exactly 64 lowercase hex digits, so that one
//! hash has exactly one spelling.

/// Not exactly 64 lowercase hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a hash: expected 64 lowercase hex digits")]
pub struct HexError;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Parses a 32-byte hash written as 64 lowercase hex digits.
pub fn decode_hash(s: &str) -> Result<[u8; 32], HexError> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return Err(HexError);
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Ok(out)
}

fn nibble(c: u8) -> Result<u8, HexError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(HexError),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_other_spellings() {
        let h: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(37));
        let s = encode(&h);
        assert_eq!(s.len(), 64);
        assert_eq!(decode_hash(&s), Ok(h));
        assert_eq!(encode(&[0x00, 0xff, 0x0a]), "00ff0a");
        for bad in [
            s.to_uppercase(),
            s[..62].to_string(),
            format!("{s}00"),
            format!("{}g", &s[..63]),
            String::new(),
        ] {
            assert_eq!(decode_hash(&bad), Err(HexError), "{bad}");
        }
    }
}
