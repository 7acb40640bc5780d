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
    // Eight digits at a time (`hex8`): `audit verify` decodes every row's
    // hash column, and digit by digit this was a tenth of its samples.
    let mut out = [0u8; 32];
    for (four, eight) in out.chunks_exact_mut(4).zip(s.chunks_exact(8)) {
        let word = <[u8; 8]>::try_from(eight).map_err(|_| HexError)?;
        four.copy_from_slice(&crate::line::hex8(u64::from_le_bytes(word)).ok_or(HexError)?);
    }
    Ok(out)
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

    /// Digit by digit, as `decode_hash` was written before it took eight at
    /// a time: the reference it must agree with.
    fn naive(s: &str) -> Result<[u8; 32], HexError> {
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(HexError),
        };
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

    #[test]
    fn decoding_eight_digits_at_a_time_agrees_with_digit_by_digit() {
        let h: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(101));
        let good = encode(&h);
        let mut accepted = 0;
        // Every byte value at every position of a valid hash (ASCII only:
        // the input is a `str`).
        for pos in 0..64 {
            for b in 0..0x80u8 {
                let mut s = good.clone().into_bytes();
                s[pos] = b;
                let s = String::from_utf8(s).unwrap_or_default();
                assert_eq!(decode_hash(&s), naive(&s), "{s}");
                accepted += usize::from(decode_hash(&s).is_ok());
            }
        }
        // Control: both accept exactly the 16 digits at each position.
        assert_eq!(accepted, 64 * 16);
        let two_bytes = format!("{}é", &good[..62]);
        assert_eq!(decode_hash(&two_bytes), Err(HexError));
    }
}
