//! Shared fixtures: a vault over a fresh key directory in a temp dir.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use airlock_vault::{KeyDir, SecretName, SecretValue, Vault, VaultConfig, VaultError};
use tempfile::TempDir;

pub const WS: &str = "ws-1";

pub struct Fixture {
    pub dir: TempDir,
    pub vault: Option<Vault>,
    pub config: VaultConfig,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_config(VaultConfig::default())
    }

    pub fn with_config(config: VaultConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let vault = open(&keys(&dir), config.clone()).unwrap();
        Fixture {
            dir,
            vault: Some(vault),
            config,
        }
    }

    pub fn vault(&self) -> &Vault {
        self.vault.as_ref().unwrap()
    }

    pub fn keys(&self) -> PathBuf {
        keys(&self.dir)
    }

    /// Drops the vault (releasing the directory lock).
    pub fn close(&mut self) {
        self.vault = None;
    }

    /// Opens the key directory again, as a restart would.
    pub fn try_reopen(&mut self) -> Result<(), VaultError> {
        self.close();
        self.vault = Some(open(&self.keys(), self.config.clone())?);
        Ok(())
    }

    pub fn reopen(&mut self) {
        self.try_reopen().unwrap();
    }
}

pub fn keys(dir: &TempDir) -> PathBuf {
    dir.path().join("keys")
}

pub fn open(path: &Path, config: VaultConfig) -> Result<Vault, VaultError> {
    Vault::new(KeyDir::open_or_create(path)?, config)
}

pub fn name(s: &str) -> SecretName {
    SecretName::parse(s).unwrap()
}

pub fn value(s: &str) -> SecretValue {
    SecretValue::try_from(s.to_owned()).unwrap()
}

pub fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

pub fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

pub fn limit(max_operations_per_key: u64) -> VaultConfig {
    VaultConfig {
        max_operations_per_key,
    }
}
