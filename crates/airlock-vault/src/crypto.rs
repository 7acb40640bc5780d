//! The primitives, in one reviewed place: XChaCha20-Poly1305 with random 192-bit nonces, the
//! associated-data layouts, and HKDF-SHA256 / HMAC-SHA256 for the high-water-mark MAC key.
//!
//! Why XChaCha20-Poly1305: a 24-byte nonce can be drawn at random for every message with no
//! realistic collision risk (birthday bound ~2^96 messages), so no nonce state has to be kept
//! or recovered after a crash or a database restore, which a counter nonce would need.

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::error::VaultError;
use crate::fsutil::random_bytes;

/// Length of every symmetric key (KEK, data key, MAC key).
pub const KEY_LEN: usize = 32;
/// XChaCha20-Poly1305 nonce length.
pub const NONCE_LEN: usize = 24;
/// Poly1305 tag length (appended to every ciphertext).
pub const TAG_LEN: usize = 16;

/// Labels that separate the purposes of associated data and derived keys, so bytes made for one
/// purpose can never be taken for another.
const AAD_DATA_KEY: &[u8] = b"airlock-vault/v1/data-key";
const AAD_SECRET: &[u8] = b"airlock-vault/v1/secret";
const HKDF_SALT: &[u8] = b"airlock-vault/v1";
const HKDF_INFO_HWM: &[u8] = b"airlock-vault/v1/hwm-mac";
pub const HWM_MAC_LABEL: &[u8] = b"airlock-vault/v1/hwm";

/// A fresh random nonce. Every encryption in the vault draws its nonce here.
pub fn random_nonce() -> Result<[u8; NONCE_LEN], VaultError> {
    let mut nonce = [0u8; NONCE_LEN];
    random_bytes(&mut nonce)?;
    Ok(nonce)
}

/// A fresh random key.
pub fn random_key() -> Result<Zeroizing<[u8; KEY_LEN]>, VaultError> {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    random_bytes(key.as_mut())?;
    Ok(key)
}

fn cipher(key: &[u8; KEY_LEN]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&(*key).into())
}

/// Encrypts `plaintext`; returns ciphertext || tag.
pub fn seal(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<Vec<u8>, VaultError> {
    // The buffer holds plaintext until encryption succeeds: zeroize it on every path.
    let mut buffer = Zeroizing::new(Vec::with_capacity(plaintext.len() + TAG_LEN));
    buffer.extend_from_slice(plaintext);
    cipher(key)
        .encrypt_in_place(&(*nonce).into(), aad, &mut *buffer)
        .map_err(|_| VaultError::MalformedRecord {
            reason: "plaintext too long for the cipher",
        })?;
    Ok(std::mem::take(&mut *buffer))
}

/// Decrypts ciphertext || tag. A ciphertext shorter than the tag is malformed; any other failure
/// is an authentication failure.
pub fn open(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    ciphertext: &[u8],
) -> Result<Zeroizing<Vec<u8>>, VaultError> {
    if ciphertext.len() < TAG_LEN {
        return Err(VaultError::MalformedRecord {
            reason: "ciphertext shorter than the authentication tag (truncated)",
        });
    }
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    cipher(key)
        .decrypt_in_place(&(*nonce).into(), aad, &mut *buffer)
        .map_err(|_| VaultError::DecryptionFailed)?;
    Ok(buffer)
}

/// Associated data, built field by field: a purpose label, then each field length-prefixed
/// (strings) or fixed-width big-endian (integers). Length prefixes make the encoding injective:
/// no two different field tuples produce the same bytes (`("ab","c")` vs `("a","bc")`).
struct Aad(Vec<u8>);

impl Aad {
    fn new(label: &[u8]) -> Self {
        let mut aad = Aad(Vec::with_capacity(128));
        aad.bytes(label);
        aad
    }
    fn bytes(&mut self, field: &[u8]) {
        // Fields are bounded far below 4 GiB (workspace ≤ 128, name ≤ 64 bytes).
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0.extend_from_slice(field);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
}

/// AAD of a wrapped data key: label, workspace, data key version, KEK version.
pub fn data_key_aad(workspace: &str, version: u32, kek_version: u32) -> Vec<u8> {
    let mut aad = Aad::new(AAD_DATA_KEY);
    aad.bytes(workspace.as_bytes());
    aad.u32(version);
    aad.u32(kek_version);
    aad.0
}

/// AAD of a sealed secret: label, workspace, secret name, secret version, data key version.
pub fn secret_aad(workspace: &str, name: &str, version: u64, data_key_version: u32) -> Vec<u8> {
    let mut aad = Aad::new(AAD_SECRET);
    aad.bytes(workspace.as_bytes());
    aad.bytes(name.as_bytes());
    aad.u64(version);
    aad.u32(data_key_version);
    aad.0
}

/// The key that authenticates `hwm.json`, derived from a KEK so the file needs no key of its own
/// and a KEK rotation re-keys it.
pub fn hwm_mac_key(kek: &[u8; KEY_LEN]) -> Zeroizing<[u8; KEY_LEN]> {
    let mut okm = Zeroizing::new([0u8; KEY_LEN]);
    // Expanding 32 bytes from SHA-256 cannot exceed HKDF's 255 × 32 byte limit.
    if Hkdf::<Sha256>::new(Some(HKDF_SALT), kek)
        .expand(HKDF_INFO_HWM, okm.as_mut())
        .is_err()
    {
        unreachable!("hkdf-sha256 expands 32 bytes");
    }
    okm
}

fn hmac(key: &[u8; KEY_LEN], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail here.
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("hmac accepts any key length"),
    };
    for part in parts {
        mac.update(part);
    }
    mac
}

/// HMAC-SHA256 over the concatenation of `parts`.
pub fn mac(key: &[u8; KEY_LEN], parts: &[&[u8]]) -> [u8; 32] {
    hmac(key, parts).finalize().into_bytes().into()
}

/// Constant-time verification of [`mac`].
pub fn verify_mac(key: &[u8; KEY_LEN], parts: &[&[u8]], tag: &[u8]) -> bool {
    hmac(key, parts).verify_slice(tag).is_ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Every encryption in the vault (secret seal, data key wrap) takes its nonce from
    /// `random_nonce`; a million draws through it never repeat.
    #[test]
    fn key_1_nonces_are_unique_over_a_million_draws() {
        const N: usize = 1_000_000;
        let mut seen = HashSet::with_capacity(N);
        for i in 0..N {
            assert!(seen.insert(random_nonce().unwrap()), "repeat at draw {i}");
        }
        assert_eq!(seen.len(), N);
        // Control: the set catches a repeat.
        let any = *seen.iter().next().unwrap();
        assert!(!seen.insert(any));
    }

    #[test]
    fn key_1_seal_and_open_round_trip_and_refuse_other_associated_data() {
        let key = random_key().unwrap();
        let nonce = random_nonce().unwrap();
        let sealed = seal(&key, &nonce, b"aad", b"plaintext").unwrap();
        assert_eq!(
            &**open(&key, &nonce, b"aad", &sealed).unwrap(),
            b"plaintext"
        );
        assert!(matches!(
            open(&key, &nonce, b"aae", &sealed),
            Err(VaultError::DecryptionFailed)
        ));
    }

    #[test]
    fn key_3_hwm_mac_key_is_derived_per_kek_and_differs_from_it() {
        let a = random_key().unwrap();
        let b = random_key().unwrap();
        assert_ne!(*hwm_mac_key(&a), *a);
        assert_ne!(*hwm_mac_key(&a), *hwm_mac_key(&b));
        assert_eq!(*hwm_mac_key(&a), *hwm_mac_key(&a));
        let tag = mac(&hwm_mac_key(&a), &[b"x", b"y"]);
        assert!(verify_mac(&hwm_mac_key(&a), &[b"xy"], &tag));
        assert!(!verify_mac(&hwm_mac_key(&b), &[b"xy"], &tag));
    }
}
