//! IAM-3 (sessions, CSRF), IAM-1 and IAM-4 (bootstrap and reset capabilities, recovery
//! codes) and IAM-5 (API keys): generation from the OS CSPRNG, hashing for storage, constant-time comparison.
//! Only [`token_hash`] of a token is ever stored.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::os_random;

pub const API_KEY_PREFIX: &str = "alk_";
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const KEY_RANDOM_CHARS: usize = 40;
const KEY_CHECK_CHARS: usize = 6;
const API_KEY_LEN: usize = 4 + KEY_RANDOM_CHARS + KEY_CHECK_CHARS;
const BASE32_LOWER: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

fn base62_checksum(body: &[u8]) -> [u8; KEY_CHECK_CHARS] {
    let mut n = crc32(body);
    let mut out = [b'0'; KEY_CHECK_CHARS];
    for slot in out.iter_mut().rev() {
        *slot = BASE62[(n % 62) as usize];
        n /= 62;
    }
    out
}

/// "alk_" + 40 base62 chars from the OS CSPRNG (≥238 bits) + 6 base62 chars encoding CRC32 of
/// those 40 chars (zero-padded), total 50 chars.
pub fn new_api_key() -> String {
    let mut body = Vec::with_capacity(KEY_RANDOM_CHARS);
    let mut buf = [0u8; 64];
    while body.len() < KEY_RANDOM_CHARS {
        os_random(&mut buf);
        // Rejection sampling: 248 = 4 × 62, so accepted bytes are uniform mod 62.
        body.extend(
            buf.iter()
                .filter(|&&b| b < 248)
                .map(|&b| BASE62[usize::from(b % 62)])
                .take(KEY_RANDOM_CHARS - body.len()),
        );
    }
    let check = base62_checksum(&body);
    let mut key = String::with_capacity(API_KEY_LEN);
    key.push_str(API_KEY_PREFIX);
    key.extend(body.iter().chain(check.iter()).map(|&b| char::from(b)));
    key
}

/// Well-formed (prefix, length, alphabet) and checksum matches. Lets scanners and the server
/// reject typos/garbage without a DB lookup.
pub fn api_key_checksum_ok(key: &str) -> bool {
    let Some(rest) = key.strip_prefix(API_KEY_PREFIX) else {
        return false;
    };
    let rest = rest.as_bytes();
    if rest.len() != KEY_RANDOM_CHARS + KEY_CHECK_CHARS
        || !rest.iter().all(u8::is_ascii_alphanumeric)
    {
        return false;
    }
    let (body, check) = rest.split_at(KEY_RANDOM_CHARS);
    base62_checksum(body) == check
}

/// First 12 chars (e.g. "alk_3fA9zQ1x") — a display prefix that is safe to store and show.
pub fn api_key_display_prefix(key: &str) -> String {
    key.chars().take(12).collect()
}

/// 32 random bytes, base64url without padding (43 chars) — session tokens, CSRF tokens.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    os_random(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

/// prefix + "_" + new_token() — used for bootstrap ("alb") and password reset ("alr") capabilities.
pub fn new_prefixed_token(prefix: &str) -> String {
    format!("{prefix}_{}", new_token())
}

/// SHA-256 hex of the token's bytes (what the database stores).
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Constant-time equality (the length itself is not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Ten one-use recovery codes, each "xxxxx-xxxxx" from the lowercase RFC 4648 base32 alphabet
/// (50 bits each).
pub fn new_recovery_codes() -> Vec<String> {
    let mut codes: Vec<String> = Vec::with_capacity(10);
    while codes.len() < 10 {
        let mut b = [0u8; 8];
        os_random(&mut b);
        let mut n = u64::from_le_bytes(b);
        let mut code = String::with_capacity(11);
        for i in 0..10 {
            if i == 5 {
                code.push('-');
            }
            code.push(char::from(BASE32_LOWER[(n & 31) as usize]));
            n >>= 5;
        }
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    codes
}

/// Lower-cases, strips whitespace and dashes, so "ABCDE FGHIJ" == "abcde-fghij"; hash with
/// `token_hash(normalized)`.
pub fn normalize_recovery_code(code: &str) -> String {
    code.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn api_keys_are_well_formed_and_checksummed() {
        let k = new_api_key();
        assert!(k.starts_with("alk_"), "{k}");
        assert_eq!(k.len(), 50);
        assert!(k[4..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert!(api_key_checksum_ok(&k), "positive control");
        assert_ne!(k, new_api_key());
        assert_eq!(api_key_display_prefix(&k), k[..12]);
        assert_eq!(api_key_display_prefix("alk_"), "alk_");

        for i in 4..k.len() {
            for repl in [b'0', b'z', b'Q'] {
                let mut bad = k.clone().into_bytes();
                if bad[i] == repl {
                    continue;
                }
                bad[i] = repl;
                let bad = String::from_utf8(bad).unwrap();
                assert!(!api_key_checksum_ok(&bad), "flip at {i}: {bad}");
            }
        }
        assert!(!api_key_checksum_ok(&k[..49]));
        assert!(!api_key_checksum_ok(&format!("{k}0")));
        assert!(!api_key_checksum_ok(&k.replacen("alk_", "alx_", 1)));
        assert!(!api_key_checksum_ok(&k.replacen("alk_", "ALK_", 1)));
        assert!(!api_key_checksum_ok(""));
        assert!(!api_key_checksum_ok(&format!("alk_{}", "é".repeat(23))));
    }

    #[test]
    fn tokens() {
        let t = new_token();
        assert_eq!(t.len(), 43);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_ne!(t, new_token());
        let r = new_prefixed_token("alr");
        assert!(r.starts_with("alr_") && r.len() == 47, "{r}");
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn recovery_codes() {
        let codes = new_recovery_codes();
        assert_eq!(codes.len(), 10);
        let distinct: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(distinct.len(), 10);
        for c in &codes {
            assert_eq!(c.len(), 11, "{c}");
            assert_eq!(&c[5..6], "-");
            assert!(
                c.bytes()
                    .enumerate()
                    .all(|(i, b)| i == 5 || BASE32_LOWER.contains(&b))
            );
            assert_eq!(
                normalize_recovery_code(&c.to_uppercase()),
                c.replace('-', "")
            );
        }
        assert_eq!(
            normalize_recovery_code("ABCDE FGHIJ"),
            normalize_recovery_code("abcde-fghij")
        );
        assert_eq!(normalize_recovery_code(" Ab-cD\te "), "abcde");
    }
}
