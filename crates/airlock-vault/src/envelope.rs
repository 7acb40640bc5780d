//! Envelope records (KEY-1): a workspace's data key wrapped by a KEK, and a secret sealed with a
//! data key. Both are plain data for the store to persist (serde, base64 for bytes in JSON);
//! the operations that make and open them live on [`crate::Vault`].
//!
//! Every field a record carries is either bound into its AEAD associated data (workspace,
//! versions, name) or is the nonce/ciphertext itself, so editing any of them makes decryption
//! fail; the fields are public because tampering with them gains nothing.

use std::fmt;

use secrecy::{ExposeSecret, SecretBox};
use serde::{Deserialize, Serialize};

use crate::crypto::{KEY_LEN, NONCE_LEN};
use crate::secret::SecretName;

/// A workspace's data key wrapped under a KEK version; what the store persists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrappedDataKey {
    pub workspace: String,
    /// Data key version within the workspace (1, 2, …).
    pub version: u32,
    /// KEK version that wraps it.
    pub kek_version: u32,
    #[serde(with = "b64_nonce")]
    pub nonce: [u8; NONCE_LEN],
    /// Encrypted key followed by the 16-byte tag.
    #[serde(with = "b64_bytes")]
    pub ciphertext: Vec<u8>,
}

/// An unwrapped data key. Zeroized on drop; `Debug` shows only its identity.
pub struct DataKey {
    pub(crate) workspace: String,
    pub(crate) version: u32,
    pub(crate) kek_version: u32,
    pub(crate) key: SecretBox<[u8; KEY_LEN]>,
}

impl DataKey {
    /// The workspace the key belongs to.
    pub fn workspace(&self) -> &str {
        &self.workspace
    }
    /// The data key version.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// The KEK version it was unwrapped with.
    pub fn kek_version(&self) -> u32 {
        self.kek_version
    }
    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        self.key.expose_secret()
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataKey")
            .field("workspace", &self.workspace)
            .field("version", &self.version)
            .field("kek_version", &self.kek_version)
            .field("key", &"[REDACTED]")
            .finish()
    }
}

/// A secret value encrypted with a workspace's data key; what the store persists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedSecret {
    pub workspace: String,
    pub name: SecretName,
    /// The secret's version, bumped by every write (KEY-3).
    pub version: u64,
    /// Version of the workspace data key that sealed it.
    pub data_key_version: u32,
    #[serde(with = "b64_nonce")]
    pub nonce: [u8; NONCE_LEN],
    /// Encrypted value followed by the 16-byte tag.
    #[serde(with = "b64_bytes")]
    pub ciphertext: Vec<u8>,
}

mod b64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

mod b64_nonce {
    use serde::{Deserializer, Serializer};

    use crate::crypto::NONCE_LEN;

    pub fn serialize<S: Serializer>(nonce: &[u8; NONCE_LEN], s: S) -> Result<S::Ok, S::Error> {
        super::b64_bytes::serialize(nonce, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; NONCE_LEN], D::Error> {
        let bytes = super::b64_bytes::deserialize(d)?;
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| serde::de::Error::invalid_length(bytes.len(), &"a 24-byte nonce"))
    }
}
