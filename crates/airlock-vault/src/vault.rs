//! The vault: envelope encryption (KEY-1), KEK rotation (KEY-2) and anti-rollback (KEY-3) over
//! one key directory.
//!
//! How a store uses it (the store owns the rows; the vault owns keys and high-water marks):
//!
//! - workspace key: `new_data_key(ws)` → persist the [`WrappedDataKey`]; to use it,
//!   `unwrap_data_key(&row)`. Rotating a data key is `new_data_key` again (the old one keeps
//!   decrypting the secrets sealed under it).
//! - write: `v = next_version(ws, name, current_row_version)`, `seal(&dk, name, v, value)`,
//!   commit the row, then `record_write(ws, name, v)`.
//! - read: `check_read(ws, name, row.version)` then `open(&dk, &row)`.
//! - delete: delete the row, then `record_delete(ws, name, row.version)`.
//! - start-up: `check_startup(&all_rows)`; a [`VaultError::RollbackDetected`] stops the server
//!   until an operator either fixes the store or runs `accept_restore`.
//! - KEK rotation: `rotate()`, then `rewrap(&row)` for every wrapped data key (idempotent, so
//!   the job can be resumed anywhere), then `retire(old)`.
//!
//! Why the mark is raised after the commit: raising it first would make a crash between the two
//! look like a rollback of that secret; raising it after leaves a crash window in which the
//! mark lags by one write, which `check_startup` reports as [`StartupReport::ahead`].
//!
//! What this module must not do: hold SQL, print, or hand out key material (only
//! [`DataKey`], which never leaves this crate's control as bytes).

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use secrecy::{ExposeSecret, SecretBox};

use crate::crypto::{self, KEY_LEN, TAG_LEN};
use crate::envelope::{DataKey, SealedSecret, WrappedDataKey};
use crate::error::{KeyRef, VaultError};
use crate::hwm::{self, HwmChange, HwmMark, Marks, RecordRef, StartupReport};
use crate::keydir::{KekInfo, KeyDir};
use crate::secret::{SecretName, SecretValue, check_workspace};

/// Tunables of a vault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultConfig {
    /// Encryptions allowed under one key (a KEK wrapping data keys, or a data key sealing
    /// secrets) before it must be rotated. XChaCha20-Poly1305 with random nonces is safe far
    /// beyond the default; the limit exists to force rotation as a hygiene policy.
    pub max_operations_per_key: u64,
}

/// Default of [`VaultConfig::max_operations_per_key`]: 2^32.
pub const DEFAULT_MAX_OPERATIONS_PER_KEY: u64 = 1 << 32;

impl Default for VaultConfig {
    fn default() -> Self {
        VaultConfig {
            max_operations_per_key: DEFAULT_MAX_OPERATIONS_PER_KEY,
        }
    }
}

/// The secrets vault over one key directory. `Send + Sync`: share it behind an `Arc`.
pub struct Vault {
    inner: Mutex<Inner>,
}

struct Inner {
    keydir: KeyDir,
    /// `None` while untrusted (opened with [`Vault::recover`] over a missing or bad file).
    hwm: Option<Marks>,
    /// KEK version `hwm.json` is authenticated with.
    hwm_kek: u32,
    config: VaultConfig,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Vault")
            .field("keydir", &inner.keydir)
            .field("hwm_trusted", &inner.hwm.is_some())
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// Opens the vault over a key directory. Refuses a missing (once the directory has been
    /// used), tampered or unauthenticated `hwm.json`.
    pub fn new(keydir: KeyDir, config: VaultConfig) -> Result<Vault, VaultError> {
        Self::open_with(keydir, config, false)
    }

    /// Operator recovery: opens the vault even when `hwm.json` is missing or fails
    /// authentication. Until [`Vault::accept_restore`] runs, every anti-rollback call fails with
    /// [`VaultError::HwmUntrusted`]. Meant for an explicit, audited operator command only.
    pub fn recover(keydir: KeyDir, config: VaultConfig) -> Result<Vault, VaultError> {
        Self::open_with(keydir, config, true)
    }

    fn open_with(
        keydir: KeyDir,
        config: VaultConfig,
        recovering: bool,
    ) -> Result<Vault, VaultError> {
        let dir = keydir.path().to_path_buf();
        let current = keydir.current_version();
        let loaded = match hwm::load(&dir, &keydir) {
            Ok(loaded) => loaded,
            Err(VaultError::Hwm { .. }) if recovering => None,
            Err(e) => return Err(e),
        };
        let (hwm, hwm_kek) = match loaded {
            Some((marks, version)) => (Some(marks), version),
            // A key directory that never wrapped anything has nothing to protect yet (this is
            // also the crash window between creating the keyring and the first hwm.json).
            None if keydir.created() || keydir.never_used() => (Some(Marks::default()), 0),
            None if recovering => (None, current),
            None => {
                return Err(VaultError::Hwm {
                    path: dir.join(hwm::HWM_FILE),
                    problem: crate::error::HwmProblem::Missing,
                });
            }
        };
        let mut inner = Inner {
            keydir,
            hwm,
            hwm_kek,
            config,
        };
        // Re-key the marks under the current KEK (first start, or a rotation interrupted
        // between the keyring and hwm.json).
        if inner.hwm.is_some() && inner.hwm_kek != current {
            inner.store_hwm_under_current()?;
        }
        Ok(Vault {
            inner: Mutex::new(inner),
        })
    }

    // Every mutation persists to disk first and only then replaces in-memory state, so a panic
    // while the lock is held cannot leave memory half-updated: a poisoned lock is safe to reuse.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key directory's path.
    pub fn path(&self) -> PathBuf {
        self.lock().keydir.path().to_path_buf()
    }

    /// The KEK version new data keys are wrapped with.
    pub fn current_kek_version(&self) -> u32 {
        self.lock().keydir.current_version()
    }

    /// Every KEK version, oldest first.
    pub fn keks(&self) -> Vec<KekInfo> {
        self.lock().keydir.keks()
    }

    /// Whether the current KEK reached its operation limit; wrapping is refused until
    /// [`Vault::rotate`].
    pub fn needs_rotation(&self) -> bool {
        let inner = self.lock();
        let current = KeyRef::Kek {
            version: inner.keydir.current_version(),
        };
        inner.keydir.operations(&current) >= inner.config.max_operations_per_key
    }

    /// Whether `data_key` reached its operation limit; sealing with it is refused until the
    /// workspace gets a new data key ([`Vault::new_data_key`]).
    pub fn data_key_needs_rotation(&self, data_key: &DataKey) -> bool {
        let inner = self.lock();
        inner.keydir.operations(&data_key_ref(data_key)) >= inner.config.max_operations_per_key
    }

    /// Installs a new KEK version and makes it current (`airlock keys rotate`). Older versions
    /// keep decrypting until retired. Returns the new version.
    pub fn rotate(&self) -> Result<u32, VaultError> {
        let mut inner = self.lock();
        let version = inner.keydir.rotate()?;
        if inner.hwm.is_some() {
            inner.store_hwm_under_current()?;
        }
        Ok(version)
    }

    /// Retires a KEK version: data keys still wrapped under it fail with
    /// [`VaultError::RetiredKey`]. Run [`Vault::rewrap`] over every data key first. The
    /// current version cannot be retired. Idempotent.
    pub fn retire(&self, version: u32) -> Result<(), VaultError> {
        let mut inner = self.lock();
        if inner.hwm.is_some() && inner.hwm_kek == version {
            inner.store_hwm_under_current()?;
        }
        inner.keydir.retire(version)
    }

    /// Generates a new data key for `workspace` (its next version), wrapped under the current
    /// KEK. Also the way to rotate a workspace's data key.
    pub fn new_data_key(&self, workspace: &str) -> Result<WrappedDataKey, VaultError> {
        check_workspace(workspace)?;
        let mut inner = self.lock();
        let kek_version = inner.keydir.current_version();
        let limit = inner.config.max_operations_per_key;
        inner.keydir.charge(
            &KeyRef::Kek {
                version: kek_version,
            },
            limit,
        )?;
        let version = inner.keydir.register_data_key(workspace)?;
        let key = crypto::random_key()?;
        inner.wrap(workspace, version, &key)
    }

    /// Unwraps a stored data key. Fails typed: [`VaultError::RetiredKey`] or
    /// [`VaultError::UnknownKey`] for its KEK version, [`VaultError::MalformedRecord`] for a
    /// wrong length, [`VaultError::DecryptionFailed`] for anything edited.
    pub fn unwrap_data_key(&self, wrapped: &WrappedDataKey) -> Result<DataKey, VaultError> {
        check_workspace(&wrapped.workspace)?;
        self.lock().unwrap(wrapped)
    }

    /// Moves a wrapped data key to the current KEK version. A record already there is returned
    /// unchanged, so a rewrap job can be re-run or resumed over all records.
    pub fn rewrap(&self, wrapped: &WrappedDataKey) -> Result<WrappedDataKey, VaultError> {
        check_workspace(&wrapped.workspace)?;
        let mut inner = self.lock();
        let current = inner.keydir.current_version();
        if wrapped.kek_version == current {
            return Ok(wrapped.clone());
        }
        let data_key = inner.unwrap(wrapped)?;
        let limit = inner.config.max_operations_per_key;
        inner
            .keydir
            .charge(&KeyRef::Kek { version: current }, limit)?;
        inner.wrap(&wrapped.workspace, wrapped.version, data_key.bytes())
    }

    /// Encrypts a secret value under a workspace data key, binding workspace, name, version and
    /// data key version into the associated data. `version` comes from
    /// [`Vault::next_version`].
    pub fn seal(
        &self,
        data_key: &DataKey,
        name: &SecretName,
        version: u64,
        value: &SecretValue,
    ) -> Result<SealedSecret, VaultError> {
        {
            let mut inner = self.lock();
            let limit = inner.config.max_operations_per_key;
            inner.keydir.charge(&data_key_ref(data_key), limit)?;
        }
        let nonce = crypto::random_nonce()?;
        let aad = crypto::secret_aad(
            &data_key.workspace,
            name.as_str(),
            version,
            data_key.version,
        );
        let ciphertext = crypto::seal(data_key.bytes(), &nonce, &aad, value.expose_secret())?;
        Ok(SealedSecret {
            workspace: data_key.workspace.clone(),
            name: name.clone(),
            version,
            data_key_version: data_key.version,
            nonce,
            ciphertext,
        })
    }

    /// Decrypts a sealed secret. Any change to the record (another name, workspace, version or
    /// data key version; a flipped or missing byte) fails typed, never returns garbage. Does
    /// not check the high-water mark: call [`Vault::check_read`] too.
    pub fn open(
        &self,
        data_key: &DataKey,
        sealed: &SealedSecret,
    ) -> Result<SecretValue, VaultError> {
        if data_key.workspace != sealed.workspace || data_key.version != sealed.data_key_version {
            return Err(VaultError::DataKeyMismatch {
                key_workspace: data_key.workspace.clone(),
                key_version: data_key.version,
                record_workspace: sealed.workspace.clone(),
                record_version: sealed.data_key_version,
            });
        }
        let aad = crypto::secret_aad(
            &sealed.workspace,
            sealed.name.as_str(),
            sealed.version,
            sealed.data_key_version,
        );
        let mut plaintext =
            crypto::open(data_key.bytes(), &sealed.nonce, &aad, &sealed.ciphertext)?;
        SecretValue::parse(std::mem::take(&mut *plaintext)).map_err(|_| {
            VaultError::MalformedRecord {
                reason: "decrypted value breaks the value rules",
            }
        })
    }

    /// The version the next write of a secret must use: above every version handed out before
    /// (including deleted and abandoned ones) and above `stored`, the store's current row.
    pub fn next_version(
        &self,
        workspace: &str,
        name: &SecretName,
        stored: Option<u64>,
    ) -> Result<u64, VaultError> {
        check_workspace(workspace)?;
        let inner = self.lock();
        Ok(inner.marks()?.next_version(workspace, name, stored))
    }

    /// Raises the high-water mark after the store committed `version`. Returns the global
    /// change counter (the store may keep it with the row for its audit trail).
    pub fn record_write(
        &self,
        workspace: &str,
        name: &SecretName,
        version: u64,
    ) -> Result<u64, VaultError> {
        check_workspace(workspace)?;
        let mut inner = self.lock();
        let next = inner.marks()?.with_write(workspace, name, version)?;
        inner.replace_hwm(next)
    }

    /// Marks a secret deleted (a tombstone at the highest version seen) after the store deleted
    /// the row at `version`. A later re-insert of the old bytes is refused; a re-creation gets
    /// a higher version from [`Vault::next_version`]. Returns the global change counter.
    pub fn record_delete(
        &self,
        workspace: &str,
        name: &SecretName,
        version: u64,
    ) -> Result<u64, VaultError> {
        check_workspace(workspace)?;
        let mut inner = self.lock();
        let next = inner.marks()?.with_delete(workspace, name, version);
        inner.replace_hwm(next)
    }

    /// Refuses a stored record older than the high-water mark ([`VaultError::Rollback`]): a
    /// restored row, a replayed version, or a deleted secret coming back. A record the marks
    /// never saw, or one ahead of its mark (see [`StartupReport::ahead`]), passes.
    pub fn check_read(
        &self,
        workspace: &str,
        name: &SecretName,
        stored: u64,
    ) -> Result<(), VaultError> {
        check_workspace(workspace)?;
        let inner = self.lock();
        match inner.marks()?.refusal(workspace, name, stored) {
            None => Ok(()),
            Some(expected) => Err(VaultError::Rollback {
                workspace: workspace.to_owned(),
                name: name.clone(),
                stored,
                expected,
            }),
        }
    }

    /// Compares every secret record of the store with the high-water marks at start-up.
    /// Fails with [`VaultError::RollbackDetected`] when a record is older than its mark, a
    /// deleted secret is back, or a secret the marks know as live is missing (a restored old
    /// database). Reports, without failing, records that are ahead or unknown.
    pub fn check_startup(&self, records: &[RecordRef]) -> Result<StartupReport, VaultError> {
        for record in records {
            check_workspace(&record.workspace)?;
        }
        let inner = self.lock();
        let (findings, report) = inner.marks()?.startup(records);
        if findings.is_empty() {
            Ok(report)
        } else {
            Err(VaultError::RollbackDetected { findings })
        }
    }

    /// Operator recovery for a legitimately restored backup: rewrites the high-water marks so
    /// that `records` (the store as it now is) pass. Secrets absent from `records` become
    /// tombstones and versions the abandoned timeline reached stay refused, so nothing newer
    /// than the backup can be replayed afterwards. Also the way out of [`Vault::recover`].
    ///
    /// This must only ever run from an explicit operator command (e.g.
    /// `airlock keys accept-restore`), never automatically; the caller audits the returned
    /// changes.
    pub fn accept_restore(&self, records: &[RecordRef]) -> Result<Vec<HwmChange>, VaultError> {
        for record in records {
            check_workspace(&record.workspace)?;
        }
        let mut inner = self.lock();
        let base = inner.hwm.clone().unwrap_or_default();
        let (next, changes) = base.restored(records);
        let dir = inner.keydir.path().to_path_buf();
        let current = inner.keydir.current_version();
        hwm::store(&dir, &next, &inner.keydir, current)?;
        inner.hwm = Some(next);
        inner.hwm_kek = current;
        Ok(changes)
    }

    /// The high-water mark of one secret, if the vault has seen it.
    pub fn high_water_mark(
        &self,
        workspace: &str,
        name: &SecretName,
    ) -> Result<Option<HwmMark>, VaultError> {
        let inner = self.lock();
        Ok(inner.marks()?.mark(workspace, name))
    }

    /// The global change counter of the high-water marks.
    pub fn hwm_counter(&self) -> Result<u64, VaultError> {
        Ok(self.lock().marks()?.counter())
    }
}

fn data_key_ref(data_key: &DataKey) -> KeyRef {
    KeyRef::DataKey {
        workspace: data_key.workspace.clone(),
        version: data_key.version,
    }
}

impl Inner {
    fn marks(&self) -> Result<&Marks, VaultError> {
        self.hwm.as_ref().ok_or(VaultError::HwmUntrusted)
    }

    /// Persists `next` under the current KEK, then adopts it.
    fn replace_hwm(&mut self, next: Marks) -> Result<u64, VaultError> {
        let dir = self.keydir.path().to_path_buf();
        let current = self.keydir.current_version();
        hwm::store(&dir, &next, &self.keydir, current)?;
        let counter = next.counter();
        self.hwm = Some(next);
        self.hwm_kek = current;
        Ok(counter)
    }

    fn store_hwm_under_current(&mut self) -> Result<(), VaultError> {
        let next = self.hwm.clone().unwrap_or_default();
        self.replace_hwm(next).map(|_| ())
    }

    /// Wraps `key` as data key `version` of `workspace` under the current KEK (already charged).
    fn wrap(
        &self,
        workspace: &str,
        version: u32,
        key: &[u8; KEY_LEN],
    ) -> Result<WrappedDataKey, VaultError> {
        let kek_version = self.keydir.current_version();
        let kek = self.keydir.kek(kek_version)?;
        let nonce = crypto::random_nonce()?;
        let aad = crypto::data_key_aad(workspace, version, kek_version);
        let ciphertext = crypto::seal(kek.bytes(), &nonce, &aad, key)?;
        Ok(WrappedDataKey {
            workspace: workspace.to_owned(),
            version,
            kek_version,
            nonce,
            ciphertext,
        })
    }

    fn unwrap(&self, wrapped: &WrappedDataKey) -> Result<DataKey, VaultError> {
        let kek = self.keydir.kek(wrapped.kek_version)?;
        if wrapped.ciphertext.len() != KEY_LEN + TAG_LEN {
            return Err(VaultError::MalformedRecord {
                reason: "wrapped data key is not 48 bytes (truncated or padded)",
            });
        }
        let aad = crypto::data_key_aad(&wrapped.workspace, wrapped.version, wrapped.kek_version);
        let plaintext = crypto::open(kek.bytes(), &wrapped.nonce, &aad, &wrapped.ciphertext)?;
        let mut key = Box::new([0u8; KEY_LEN]);
        key.copy_from_slice(&plaintext);
        Ok(DataKey {
            workspace: wrapped.workspace.clone(),
            version: wrapped.version,
            kek_version: wrapped.kek_version,
            key: SecretBox::new(key),
        })
    }
}

#[cfg(test)]
mod tests {
    //! What only the crate can test: the AEAD itself refuses another workspace even when the
    //! key bytes are the same (the integration tests can only use another workspace's key).

    use super::*;

    fn vault() -> (tempfile::TempDir, Vault) {
        let dir = tempfile::tempdir().unwrap();
        let keydir = KeyDir::open_or_create(dir.path().join("keys")).unwrap();
        (dir, Vault::new(keydir, VaultConfig::default()).unwrap())
    }

    fn relabelled(key: &DataKey, workspace: &str) -> DataKey {
        DataKey {
            workspace: workspace.to_owned(),
            version: key.version,
            kek_version: key.kek_version,
            key: SecretBox::new(Box::new(*key.bytes())),
        }
    }

    #[test]
    fn key_1_workspace_is_bound_into_the_aead_not_only_checked() {
        let (_dir, vault) = vault();
        let dk = vault
            .unwrap_data_key(&vault.new_data_key("ws-a").unwrap())
            .unwrap();
        let name = SecretName::parse("TOKEN").unwrap();
        let value = SecretValue::try_from("v".to_owned()).unwrap();
        let sealed = vault.seal(&dk, &name, 1, &value).unwrap();

        // Same key bytes, other workspace label on both the key and the record.
        let same_bytes = relabelled(&dk, "ws-b");
        let mut copy = sealed.clone();
        copy.workspace = "ws-b".into();
        assert!(matches!(
            vault.open(&same_bytes, &copy),
            Err(VaultError::DecryptionFailed)
        ));
        // Control: relabelled back, it opens.
        assert!(vault.open(&relabelled(&dk, "ws-a"), &sealed).is_ok());
    }

    #[test]
    fn key_1_associated_data_is_injective_across_field_boundaries() {
        assert_ne!(
            crypto::secret_aad("ab", "C", 1, 1),
            crypto::secret_aad("a", "BC", 1, 1)
        );
        assert_ne!(
            crypto::secret_aad("w", "A", 1, 2),
            crypto::secret_aad("w", "A", 2, 1)
        );
        assert_ne!(
            crypto::data_key_aad("w", 1, 2),
            crypto::data_key_aad("w", 2, 1)
        );
        // Different purposes never share associated data.
        assert_ne!(
            crypto::data_key_aad("w", 1, 1)[..8],
            crypto::secret_aad("w", "A", 1, 1)[..8]
        );
    }

    #[test]
    fn key_1_debug_of_a_data_key_contains_no_key_bytes() {
        let (_dir, vault) = vault();
        let dk = vault
            .unwrap_data_key(&vault.new_data_key("ws-a").unwrap())
            .unwrap();
        let shown = format!("{dk:?}{dk:#?}");
        let bytes = dk.bytes();
        let decimal = format!("{:?}", &bytes[..4]);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&decimal[1..decimal.len() - 1]), "{shown}");
        assert!(!shown.contains(&hex[..8]), "{shown}");
        assert!(shown.contains("[REDACTED]"));
    }
}
