//! IAM-2: password hashing (Argon2id, OWASP minimum parameters), constant-work
//! verification that does not reveal whether an account exists, and username rules.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::IamError;

pub const ARGON2_M_KIB: u32 = 19_456;
pub const ARGON2_T: u32 = 2;
pub const ARGON2_P: u32 = 1;
/// A password is at most this many characters (and so at most four times
/// as many bytes, [`MAX_PASSWORD_BYTES`]).
pub const MAX_PASSWORD_CHARS: usize = 1024;
pub const MAX_PASSWORD_BYTES: usize = 4 * MAX_PASSWORD_CHARS;
pub const MIN_PASSWORD_CHARS: usize = 12;
pub const MAX_USERNAME_BYTES: usize = 64;

fn argon2() -> Result<Argon2<'static>, IamError> {
    let params = Params::new(ARGON2_M_KIB, ARGON2_T, ARGON2_P, None)
        .map_err(|e| IamError::Internal(format!("argon2 params: {e}")))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// Lower-cases and checks `^[a-z0-9][a-z0-9._-]{0,63}$` (after lowercasing ASCII; non-ASCII refused).
pub fn normalize_username(name: &str) -> Result<String, IamError> {
    if name.is_empty() {
        return Err(IamError::Invalid("username must not be empty".into()));
    }
    if name.len() > MAX_USERNAME_BYTES {
        return Err(IamError::Invalid(format!(
            "username must be at most {MAX_USERNAME_BYTES} characters"
        )));
    }
    let lower = name.to_ascii_lowercase();
    let allowed = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = lower.as_bytes();
    let first_ok = bytes.first().is_some_and(|&c| allowed(c));
    let rest_ok = bytes
        .iter()
        .all(|&c| allowed(c) || matches!(c, b'.' | b'_' | b'-'));
    if !first_ok || !rest_ok {
        return Err(IamError::Invalid(
            "username may contain only a-z, 0-9, '.', '_' and '-', and must start with a letter or digit"
                .into(),
        ));
    }
    Ok(lower)
}

/// Length rules for a NEW password (12 to 1024 characters); the message
/// says which rule. Characters, not bytes, so the rule reads the same to a
/// person, a client checking a JSON Schema `maxLength`, and the server.
pub fn validate_new_password(pw: &str) -> Result<(), IamError> {
    let n = pw.chars().count();
    if n < MIN_PASSWORD_CHARS {
        return Err(IamError::Invalid(format!(
            "password must be at least {MIN_PASSWORD_CHARS} characters"
        )));
    }
    if n > MAX_PASSWORD_CHARS {
        return Err(IamError::Invalid(format!(
            "password must be at most {MAX_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

/// Argon2id m=19456 KiB, t=2, p=1, random 16-byte salt, PHC string.
/// Refuses passwords over [`MAX_PASSWORD_BYTES`] (they could never verify).
pub fn hash_password(pw: &str) -> Result<String, IamError> {
    if pw.len() > MAX_PASSWORD_BYTES {
        return Err(IamError::Invalid(format!(
            "password must be at most {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    let mut salt = [0u8; 16];
    crate::os_random(&mut salt);
    hash_with_salt(pw.as_bytes(), &salt)
}

fn hash_with_salt(pw: &[u8], salt: &[u8]) -> Result<String, IamError> {
    let salt =
        SaltString::encode_b64(salt).map_err(|e| IamError::Internal(format!("salt: {e}")))?;
    argon2()?
        .hash_password(pw, &salt)
        .map(|h| h.to_string())
        .map_err(|e| IamError::Internal(format!("argon2: {e}")))
}

/// A hash with the production parameters that no real password is checked against; verifying
/// against it costs exactly what a real verification costs.
fn dummy_hash() -> Option<&'static str> {
    static DUMMY: OnceLock<Option<String>> = OnceLock::new();
    DUMMY
        .get_or_init(|| hash_with_salt(b"airlock-dummy-password", b"airlock-dummy-16").ok())
        .as_deref()
}

fn dummy_work(pw: &[u8]) {
    let pw = &pw[..pw.len().min(MAX_PASSWORD_BYTES)];
    match (
        dummy_hash().and_then(|h| PasswordHash::new(h).ok()),
        argon2(),
    ) {
        (Some(h), Ok(a)) => {
            let _ = a.verify_password(pw, &h);
        }
        (_, Ok(a)) => {
            let mut out = [0u8; 32];
            let _ = a.hash_password_into(pw, b"airlock-dummy-16", &mut out);
        }
        (_, Err(_)) => {}
    }
}

/// Constant-work verify: with `None` (unknown account), an unparsable hash, or a password longer
/// than [`MAX_PASSWORD_BYTES`], does the same Argon2 work against a process-wide dummy hash and
/// returns false.
pub fn verify_password(phc: Option<&str>, pw: &str) -> bool {
    let parsed = phc.and_then(|s| PasswordHash::new(s).ok());
    match (parsed, argon2()) {
        (Some(h), Ok(a)) if pw.len() <= MAX_PASSWORD_BYTES => {
            a.verify_password(pw.as_bytes(), &h).is_ok()
        }
        _ => {
            dummy_work(pw.as_bytes());
            false
        }
    }
}

/// (m_kib, t, p) read back from a PHC string, for tests and audits.
pub fn params_of(phc: &str) -> Option<(u32, u32, u32)> {
    let h = PasswordHash::new(phc).ok()?;
    let p = Params::try_from(&h).ok()?;
    Some((p.m_cost(), p.t_cost(), p.p_cost()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_uses_spec_params_and_verifies() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert_eq!(params_of(&h), Some((19_456, 2, 1)));
        assert!(verify_password(Some(&h), "correct horse battery"));
        assert!(!verify_password(Some(&h), "correct horse batterx"));
        assert_ne!(h, hash_password("correct horse battery").unwrap(), "salted");
    }

    #[test]
    fn unknown_garbage_and_overlong_never_verify() {
        assert!(!verify_password(None, "anything at all"));
        assert!(!verify_password(
            Some("not a phc string"),
            "anything at all"
        ));
        assert!(!verify_password(Some(""), ""));
        let long = "a".repeat(MAX_PASSWORD_BYTES + 1);
        assert!(hash_password(&long).is_err());
        let max = "a".repeat(MAX_PASSWORD_BYTES);
        let h = hash_password(&max).unwrap();
        assert!(verify_password(Some(&h), &max));
        assert!(
            !verify_password(Some(&h), &long),
            "overlong must not match its prefix"
        );
        assert_eq!(params_of("garbage"), None);
    }

    #[test]
    fn new_password_length_rules() {
        assert!(validate_new_password("short").is_err());
        assert!(validate_new_password("elevenchars").is_err());
        assert!(validate_new_password("twelve chars").is_ok());
        assert!(
            validate_new_password("ééééééééééé").is_err(),
            "11 chars, 22 bytes"
        );
        // Characters, not bytes: 1024 two-byte characters pass, 1025 do not.
        assert!(validate_new_password(&"é".repeat(1024)).is_ok());
        assert!(hash_password(&"😀".repeat(1024)).is_ok(), "4096 bytes hash");
        let e = validate_new_password(&"é".repeat(1025))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most"), "{e}");
        let e = validate_new_password("x").unwrap_err().to_string();
        assert!(e.contains("at least"), "{e}");
    }

    #[test]
    fn usernames() {
        assert_eq!(normalize_username("Alice.Smith").unwrap(), "alice.smith");
        assert_eq!(normalize_username("a").unwrap(), "a");
        assert_eq!(normalize_username("0_b-c").unwrap(), "0_b-c");
        assert_eq!(normalize_username(&"a".repeat(64)).unwrap(), "a".repeat(64));
        for bad in [
            "", "../x", ".x", "-x", "_x", "a b", "a/b", "é", "аdmin", "a@b", "a\0",
        ] {
            assert!(normalize_username(bad).is_err(), "{bad:?}");
        }
        assert!(normalize_username(&"a".repeat(65)).is_err());
    }
}
