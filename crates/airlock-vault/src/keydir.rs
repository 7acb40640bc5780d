//! The key directory (KEY-1, KEY-2): KEK files, the keyring and the per-key operation counters.
//!
//! Layout (directory mode 0700, every file 0600, all owned by the vault's user):
//!
//! ```text
//! <dir>/lock           empty; flock'ed exclusively while a vault holds the directory
//! <dir>/kek-v1 …       32 random bytes each, one file per KEK version
//! <dir>/keyring.json   which versions exist, which are retired, which is current,
//!                      operation counters (KEKs and data keys)
//! <dir>/hwm.json       anti-rollback high-water marks (see `hwm`)
//! ```
//!
//! The directory is refused, never repaired, when a mode is looser, an owner differs, a path is
//! a symlink or a KEK file has the wrong length: a key directory someone else could read must be
//! looked at by an operator.
//!
//! `keyring.json` is not authenticated: anyone who can write it can read the KEKs next to it, so
//! a MAC would protect nothing. It is checked for consistency instead.
//!
//! What this module must not do: know about secrets, workspaces' data or the database.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::libc;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::crypto::{KEY_LEN, random_key};
use crate::error::{KeyRef, VaultError};
use crate::fsutil;

pub(crate) const KEYRING_FILE: &str = "keyring.json";
const LOCK_FILE: &str = "lock";
const KEYRING_FORMAT: u32 = 1;
/// Largest keyring accepted (a sanity bound against a runaway file).
const KEYRING_MAX_LEN: u64 = 16 * 1024 * 1024;

/// Whether a KEK version may still be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KekState {
    /// Decrypts (and encrypts, if current).
    Active,
    /// Refused: data under it fails with [`VaultError::RetiredKey`].
    Retired,
}

/// One KEK version as the keyring describes it (no key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KekInfo {
    pub version: u32,
    pub state: KekState,
    pub current: bool,
    /// Operations counted against this version (persisted conservatively, see `Usage`).
    pub operations: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyringFile {
    format: u32,
    current: u32,
    keks: Vec<KekEntry>,
    #[serde(default)]
    data_keys: Vec<DataKeyEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KekEntry {
    version: u32,
    state: KekState,
    /// Operations reserved on disk (≥ operations performed).
    operations: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DataKeyEntry {
    workspace: String,
    version: u32,
    operations: u64,
}

/// A loaded KEK: 32 bytes, zeroized on drop.
pub(crate) struct Kek(Zeroizing<[u8; KEY_LEN]>);

impl Kek {
    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

/// The opened key directory: holds the lock, the keyring and the active KEKs.
pub struct KeyDir {
    path: PathBuf,
    _lock: Flock<File>,
    keyring: KeyringFile,
    keks: BTreeMap<u32, Kek>,
    /// Operations performed in this process, per key; the keyring holds what is reserved.
    used: BTreeMap<KeyRef, u64>,
    created: bool,
}

impl std::fmt::Debug for KeyDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyDir")
            .field("path", &self.path)
            .field("current", &self.keyring.current)
            .field("keks", &self.keks.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn kek_file_name(version: u32) -> String {
    format!("kek-v{version}")
}

impl KeyDir {
    /// Opens the key directory, creating it (mode 0700) with a first KEK (`kek-v1`, 0600) on
    /// first start. Refuses a directory or file with looser modes or another owner, symlinks, a
    /// KEK file of the wrong length, an inconsistent keyring, or a directory held by another
    /// vault.
    pub fn open_or_create(path: impl AsRef<Path>) -> Result<KeyDir, VaultError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fsutil::create_dir(&path)?,
            Err(e) => return Err(VaultError::io(&path)(e)),
        }
        fsutil::check_dir(&path)?;
        let lock = lock_dir(&path)?;
        fsutil::remove_stale_temps(&path)?;

        let keyring_path = path.join(KEYRING_FILE);
        let (keyring, created) = match fsutil::read_checked(&keyring_path, KEYRING_MAX_LEN)? {
            Some(bytes) => (parse_keyring(&keyring_path, &bytes)?, false),
            None => (initialize(&path)?, true),
        };
        let mut keks = BTreeMap::new();
        for entry in &keyring.keks {
            let file = path.join(kek_file_name(entry.version));
            match entry.state {
                KekState::Active => {
                    keks.insert(entry.version, read_kek(&file)?);
                }
                // A retired KEK file may be kept or deleted by the operator; if kept, it is
                // still key material and must not be readable by others.
                KekState::Retired => {
                    fsutil::check_file(&file)?;
                }
            }
        }
        Ok(KeyDir {
            path,
            _lock: lock,
            keyring,
            keks,
            used: BTreeMap::new(),
            created,
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The KEK version new data keys are wrapped with.
    pub fn current_version(&self) -> u32 {
        self.keyring.current
    }

    /// Every KEK version the keyring knows, oldest first.
    pub fn keks(&self) -> Vec<KekInfo> {
        self.keyring
            .keks
            .iter()
            .map(|e| KekInfo {
                version: e.version,
                state: e.state,
                current: e.version == self.keyring.current,
                operations: self.operations(&KeyRef::Kek { version: e.version }),
            })
            .collect()
    }

    /// Whether this call created the directory's keyring (first start).
    pub(crate) fn created(&self) -> bool {
        self.created
    }

    /// Whether nothing was ever wrapped under any KEK (no data key, no counted operation).
    pub(crate) fn never_used(&self) -> bool {
        self.keyring.data_keys.is_empty() && self.keyring.keks.iter().all(|e| e.operations == 0)
    }

    /// The usable KEK of `version`, or the typed reason it is not usable.
    pub(crate) fn kek(&self, version: u32) -> Result<&Kek, VaultError> {
        match self.keyring.keks.iter().find(|e| e.version == version) {
            None => Err(VaultError::UnknownKey { version }),
            Some(e) if e.state == KekState::Retired => Err(VaultError::RetiredKey { version }),
            Some(_) => self
                .keks
                .get(&version)
                .ok_or(VaultError::UnknownKey { version }),
        }
    }

    /// Installs a new KEK version and makes it current. The key file is written (atomically)
    /// before the keyring names it, so a crash leaves at worst an unreferenced file that the next
    /// rotation overwrites.
    pub(crate) fn rotate(&mut self) -> Result<u32, VaultError> {
        let version = self
            .keyring
            .keks
            .iter()
            .map(|e| e.version)
            .max()
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| self.keyring_error("kek versions exhausted"))?;
        let key = random_key()?;
        fsutil::write_atomic(&self.path, &kek_file_name(version), key.as_ref())?;
        let mut next = self.keyring.clone();
        next.keks.push(KekEntry {
            version,
            state: KekState::Active,
            operations: 0,
        });
        next.current = version;
        self.persist(next)?;
        self.keks.insert(version, Kek(key));
        Ok(version)
    }

    /// Marks a KEK version retired and drops it from memory. The file is left for the operator
    /// to archive or delete. Idempotent.
    pub(crate) fn retire(&mut self, version: u32) -> Result<(), VaultError> {
        if version == self.keyring.current {
            return Err(VaultError::RetireCurrent { version });
        }
        let mut next = self.keyring.clone();
        match next.keks.iter_mut().find(|e| e.version == version) {
            None => return Err(VaultError::UnknownKey { version }),
            Some(e) if e.state == KekState::Retired => return Ok(()),
            Some(e) => e.state = KekState::Retired,
        }
        self.persist(next)?;
        self.keks.remove(&version);
        Ok(())
    }

    /// The next data key version for `workspace` (one above every version the keyring has seen),
    /// registered now so it is never handed out twice.
    pub(crate) fn register_data_key(&mut self, workspace: &str) -> Result<u32, VaultError> {
        let version = self
            .keyring
            .data_keys
            .iter()
            .filter(|e| e.workspace == workspace)
            .map(|e| e.version)
            .max()
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| self.keyring_error("data key versions exhausted"))?;
        let mut next = self.keyring.clone();
        next.data_keys.push(DataKeyEntry {
            workspace: workspace.to_owned(),
            version,
            operations: 0,
        });
        self.persist(next)?;
        Ok(version)
    }

    /// Operations counted against `key` so far.
    pub(crate) fn operations(&self, key: &KeyRef) -> u64 {
        self.used
            .get(key)
            .copied()
            .unwrap_or_else(|| self.reserved(key))
    }

    /// Counts one operation against `key`, refusing once `limit` is reached.
    ///
    /// Why counts are reserved in blocks: persisting every operation would cost an fsync per
    /// encryption. Instead the keyring holds a reservation (≥ operations performed) raised a
    /// block at a time; after a crash or restart the count resumes from the reservation, so it
    /// can only over-count. A block is at most 1/64 of the limit, so a restart wastes little.
    pub(crate) fn charge(&mut self, key: &KeyRef, limit: u64) -> Result<(), VaultError> {
        let used = self.operations(key);
        if used >= limit {
            return Err(VaultError::KeyExhausted {
                key: key.clone(),
                operations: used,
                limit,
            });
        }
        if used >= self.reserved(key) {
            let block = (limit / 64).clamp(1, 1024);
            let reserve = used.saturating_add(block).min(limit);
            let mut next = self.keyring.clone();
            match key {
                KeyRef::Kek { version } => {
                    let entry = next
                        .keks
                        .iter_mut()
                        .find(|e| e.version == *version)
                        .ok_or(VaultError::UnknownKey { version: *version })?;
                    entry.operations = reserve;
                }
                KeyRef::DataKey { workspace, version } => {
                    match next
                        .data_keys
                        .iter_mut()
                        .find(|e| e.workspace == *workspace && e.version == *version)
                    {
                        Some(entry) => entry.operations = reserve,
                        // A data key made before this key directory's keyring (e.g. a store
                        // restored onto new hardware): start counting it now.
                        None => next.data_keys.push(DataKeyEntry {
                            workspace: workspace.clone(),
                            version: *version,
                            operations: reserve,
                        }),
                    }
                }
            }
            self.persist(next)?;
        }
        self.used.insert(key.clone(), used + 1);
        Ok(())
    }

    fn reserved(&self, key: &KeyRef) -> u64 {
        match key {
            KeyRef::Kek { version } => self
                .keyring
                .keks
                .iter()
                .find(|e| e.version == *version)
                .map_or(0, |e| e.operations),
            KeyRef::DataKey { workspace, version } => self
                .keyring
                .data_keys
                .iter()
                .find(|e| e.workspace == *workspace && e.version == *version)
                .map_or(0, |e| e.operations),
        }
    }

    /// Writes `next` to disk, then adopts it: memory never runs ahead of the file.
    fn persist(&mut self, next: KeyringFile) -> Result<(), VaultError> {
        write_keyring(&self.path, &next)?;
        self.keyring = next;
        Ok(())
    }

    fn keyring_error(&self, reason: &str) -> VaultError {
        VaultError::Keyring {
            path: self.path.join(KEYRING_FILE),
            reason: reason.to_owned(),
        }
    }
}

fn lock_dir(dir: &Path) -> Result<Flock<File>, VaultError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(fsutil::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(VaultError::io(&path))?;
    file.set_permissions(std::fs::Permissions::from_mode(fsutil::FILE_MODE))
        .map_err(VaultError::io(&path))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == nix::errno::Errno::EWOULDBLOCK {
            VaultError::Locked {
                path: dir.to_path_buf(),
            }
        } else {
            VaultError::io(&path)(std::io::Error::from(errno))
        }
    })
}

/// First start: `kek-v1`, then the keyring. Refuses to run over existing KEK files, which would
/// mean the keyring was lost: regenerating would orphan every wrapped data key.
fn initialize(dir: &Path) -> Result<KeyringFile, VaultError> {
    for entry in std::fs::read_dir(dir).map_err(VaultError::io(dir))? {
        let entry = entry.map_err(VaultError::io(dir))?;
        if entry.file_name().to_string_lossy().starts_with("kek-v") {
            return Err(VaultError::Keyring {
                path: dir.join(KEYRING_FILE),
                reason: format!(
                    "missing while {} exists; restore the keyring from backup \
                     (refusing to generate new keys over existing ones)",
                    entry.path().display()
                ),
            });
        }
    }
    let key = random_key()?;
    fsutil::write_atomic(dir, &kek_file_name(1), key.as_ref())?;
    let keyring = KeyringFile {
        format: KEYRING_FORMAT,
        current: 1,
        keks: vec![KekEntry {
            version: 1,
            state: KekState::Active,
            operations: 0,
        }],
        data_keys: Vec::new(),
    };
    write_keyring(dir, &keyring)?;
    Ok(keyring)
}

fn write_keyring(dir: &Path, keyring: &KeyringFile) -> Result<(), VaultError> {
    let bytes = serde_json::to_vec_pretty(keyring).map_err(|e| VaultError::Keyring {
        path: dir.join(KEYRING_FILE),
        reason: e.to_string(),
    })?;
    fsutil::write_atomic(dir, KEYRING_FILE, &bytes)
}

fn parse_keyring(path: &Path, bytes: &[u8]) -> Result<KeyringFile, VaultError> {
    let refuse = |reason: String| VaultError::Keyring {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() as u64 > KEYRING_MAX_LEN {
        return Err(refuse("file too large".into()));
    }
    let keyring: KeyringFile = serde_json::from_slice(bytes).map_err(|e| refuse(e.to_string()))?;
    if keyring.format != KEYRING_FORMAT {
        return Err(refuse(format!("unsupported format {}", keyring.format)));
    }
    let mut seen = std::collections::BTreeSet::new();
    for entry in &keyring.keks {
        if entry.version == 0 || !seen.insert(entry.version) {
            return Err(refuse(format!(
                "kek version {} invalid or repeated",
                entry.version
            )));
        }
    }
    match keyring.keks.iter().find(|e| e.version == keyring.current) {
        Some(e) if e.state == KekState::Active => {}
        Some(_) => {
            return Err(refuse(format!(
                "current kek v{} is retired",
                keyring.current
            )));
        }
        None => {
            return Err(refuse(format!(
                "current kek v{} is not listed",
                keyring.current
            )));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for entry in &keyring.data_keys {
        if !seen.insert((entry.workspace.as_str(), entry.version)) {
            return Err(refuse(format!(
                "data key v{} of {} repeated",
                entry.version, entry.workspace
            )));
        }
    }
    Ok(keyring)
}

fn read_kek(path: &Path) -> Result<Kek, VaultError> {
    let bytes = fsutil::read_checked(path, KEY_LEN as u64)?.ok_or_else(|| VaultError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "kek file listed as active in the keyring is missing",
        ),
    })?;
    if bytes.len() != KEY_LEN {
        // `bytes` stops one past the limit; report the file's real size.
        let found = std::fs::symlink_metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(VaultError::KekLength {
            path: path.to_path_buf(),
            found,
            expected: KEY_LEN,
        });
    }
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    key.copy_from_slice(&bytes);
    Ok(Kek(key))
}
