//! IAM-4 second factor: RFC 6238 TOTP (HMAC-SHA1/256/512, dynamic truncation per RFC 4226),
//! verified within ±1 step, each step accepted at most once.

use hmac::{Hmac, KeyInit, Mac};

use crate::keys::ct_eq;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

pub const STEP_S: u64 = 30;
pub const DIGITS: u32 = 6;

fn mac<M: Mac + KeyInit>(key: &[u8], msg: &[u8]) -> Vec<u8> {
    match <M as KeyInit>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(msg);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(), // unreachable: HMAC accepts keys of any length
    }
}

fn hotp(secret: &[u8], alg: Algorithm, digits: u32, counter: u64) -> String {
    let msg = counter.to_be_bytes();
    let h = match alg {
        Algorithm::Sha1 => mac::<Hmac<sha1::Sha1>>(secret, &msg),
        Algorithm::Sha256 => mac::<Hmac<sha2::Sha256>>(secret, &msg),
        Algorithm::Sha512 => mac::<Hmac<sha2::Sha512>>(secret, &msg),
    };
    let offset = h.last().map_or(0, |b| usize::from(b & 0x0f));
    let bin = match h.get(offset..offset + 4) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a & 0x7f, b, c, d]),
        _ => 0,
    };
    // A 31-bit value has at most 10 digits; more would only be zero padding.
    let digits = digits.clamp(1, 10);
    let code = u64::from(bin) % 10u64.pow(digits);
    format!("{code:0width$}", width = digits as usize)
}

/// The code for `unix_s` (counter = unix_s / step_s; a zero `step_s` is treated as 1).
pub fn code_at(secret: &[u8], alg: Algorithm, digits: u32, step_s: u64, unix_s: u64) -> String {
    hotp(secret, alg, digits, unix_s / step_s.max(1))
}

/// Checks a 6-digit SHA-1 30 s code at `unix_s` within ±1 step. Returns the matched step counter
/// (unix_s/30 + offset) only if it is strictly greater than `last_used_step` (each step accepted
/// once). Non-digit or wrong-length input → None. Codes are compared in constant time.
pub fn verify(secret: &[u8], code: &str, unix_s: u64, last_used_step: Option<i64>) -> Option<i64> {
    if code.len() != DIGITS as usize || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let now = i64::try_from(unix_s / STEP_S).ok()?;
    let mut matched = None;
    for step in [now - 1, now, now + 1] {
        let Ok(counter) = u64::try_from(step) else {
            continue;
        };
        let expected = hotp(secret, Algorithm::Sha1, DIGITS, counter);
        let fresh = last_used_step.is_none_or(|last| step > last);
        if ct_eq(expected.as_bytes(), code.as_bytes()) && fresh {
            matched = Some(step);
        }
    }
    matched
}

/// 20 random bytes (160 bits, the RFC 4226 recommended length for SHA-1).
pub fn new_secret() -> Vec<u8> {
    let mut s = vec![0u8; 20];
    crate::os_random(&mut s);
    s
}

/// RFC 4648 base32, upper-case, no padding.
pub fn base32_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut buf, mut bits) = (0u32, 0u32);
    for &b in bytes {
        buf = (buf << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buf >> bits) & 31) as usize]));
        }
        buf &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buf << (5 - bits)) & 31) as usize]));
    }
    out
}

/// RFC 4648 base32 (upper or lower case, padding and spaces ignored);
/// `None` on any other character.
pub fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut buf, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a',
            b'2'..=b'7' => c - b'2' + 26,
            b'=' | b' ' => continue,
            _ => return None,
        };
        buf = (buf << 5) | u32::from(v);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((buf >> bits) & 0xff).ok()?);
        }
        buf &= (1 << bits) - 1;
    }
    Some(out)
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `otpauth://totp/Issuer:account?secret=...&issuer=...&algorithm=SHA1&digits=6&period=30`
pub fn otpauth_uri(issuer: &str, account: &str, secret: &[u8]) -> String {
    let issuer = percent_encode(issuer);
    format!(
        "otpauth://totp/{issuer}:{}?secret={}&issuer={issuer}&algorithm=SHA1&digits={DIGITS}&period={STEP_S}",
        percent_encode(account),
        base32_encode(secret),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_round_trips_and_refuses_garbage() {
        for n in 0..40u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base32_decode(&base32_encode(&bytes)).unwrap(), bytes);
        }
        assert!(base32_decode("AB1C").is_none());
        assert!(base32_decode("AB!C").is_none());
    }

    const SEED20: &[u8] = b"12345678901234567890";
    const SEED32: &[u8] = b"12345678901234567890123456789012";
    const SEED64: &[u8] = b"1234567890123456789012345678901234567890123456789012345678901234";

    #[test]
    fn rfc6238_appendix_b_vectors() {
        let vectors: [(u64, &str, &str, &str); 6] = [
            (59, "94287082", "46119246", "90693936"),
            (1_111_111_109, "07081804", "68084774", "25091201"),
            (1_111_111_111, "14050471", "67062674", "99943326"),
            (1_234_567_890, "89005924", "91819424", "93441116"),
            (2_000_000_000, "69279037", "90698825", "38618901"),
            (20_000_000_000, "65353130", "77737706", "47863826"),
        ];
        for (t, s1, s256, s512) in vectors {
            assert_eq!(code_at(SEED20, Algorithm::Sha1, 8, 30, t), s1, "sha1 @{t}");
            assert_eq!(
                code_at(SEED32, Algorithm::Sha256, 8, 30, t),
                s256,
                "sha256 @{t}"
            );
            assert_eq!(
                code_at(SEED64, Algorithm::Sha512, 8, 30, t),
                s512,
                "sha512 @{t}"
            );
        }
        assert_eq!(code_at(SEED20, Algorithm::Sha1, 6, 30, 59), "287082");
    }

    #[test]
    fn verify_window_and_replay() {
        let t = 1_111_111_111u64;
        let now = (t / 30) as i64;
        let at = |step: i64| code_at(SEED20, Algorithm::Sha1, 6, 30, step as u64 * 30);
        for d in [-1, 0, 1] {
            assert_eq!(
                verify(SEED20, &at(now + d), t, None),
                Some(now + d),
                "offset {d}"
            );
        }
        for d in [-2, 2] {
            assert_eq!(verify(SEED20, &at(now + d), t, None), None, "offset {d}");
        }
        let step = verify(SEED20, &at(now), t, None).unwrap();
        assert_eq!(verify(SEED20, &at(now), t, Some(step)), None, "replay");
        assert_eq!(verify(SEED20, &at(now - 1), t, Some(now - 1)), None);
        assert_eq!(
            verify(SEED20, &at(now), t, Some(now + 1)),
            None,
            "older than last used"
        );
        assert_eq!(verify(SEED20, &at(now + 1), t, Some(now)), Some(now + 1));
        for bad in ["12345", "abcdef", "1234567", "", "12 456", "١٢٣٤٥٦"] {
            assert_eq!(verify(SEED20, bad, t, None), None, "{bad:?}");
        }
        // Near the epoch the previous step does not exist; must not panic.
        assert_eq!(verify(SEED20, &at(0), 5, None), Some(0));
    }

    #[test]
    fn secrets_and_uri() {
        assert_eq!(new_secret().len(), 20);
        assert_ne!(new_secret(), new_secret());
        assert_eq!(base32_encode(b""), "");
        assert_eq!(base32_encode(b"f"), "MY");
        assert_eq!(base32_encode(b"foobar"), "MZXW6YTBOI");
        assert_eq!(base32_encode(SEED20), "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
        assert_eq!(
            otpauth_uri("Air Lock", "bob@example.com", SEED20),
            "otpauth://totp/Air%20Lock:bob%40example.com?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\
             &issuer=Air%20Lock&algorithm=SHA1&digits=6&period=30"
        );
    }
}
