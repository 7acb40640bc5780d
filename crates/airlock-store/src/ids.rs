//! Identifiers and digests.

use std::io::Read;

use sha2::{Digest, Sha256};

/// `prefix_` + 32 hex characters from the kernel's CSPRNG.
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    // /dev/urandom never blocks once the pool is initialised; a read
    // failure would leave zeros, so fall back to mixing the time in.
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b.copy_from_slice(&Sha256::digest(t.to_le_bytes())[..16]);
    }
    format!("{prefix}_{}", hex(&b))
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
