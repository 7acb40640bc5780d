//! Secrets (KEY-1 … KEY-6): the vault over the store. Values go in once
//! (write-only surfaces), come out only for a run that declared them, and
//! are redacted from everything the run leaves behind.

use airlock_store::Store;
use airlock_vault::{
    DataKey, ExposeSecret, RecordRef, SealedSecret, SecretName, SecretValue, Vault, VaultConfig,
    WrappedDataKey,
};
use std::path::Path;
use zeroize::Zeroizing;

/// Why a secrets operation failed; `code()` is stable.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    Invalid(String),
    #[error("secret {0} is a platform secret and can never be stored, declared or delivered")]
    Platform(String),
    #[error("secret {0} is declared but not set")]
    Missing(String),
    #[error("vault: {0}")]
    Vault(#[from] airlock_vault::VaultError),
    #[error("store: {0}")]
    Store(#[from] airlock_store::StoreError),
    #[error("corrupt record for {0}")]
    Corrupt(String),
}

impl SecretError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "secret_invalid",
            Self::Platform(_) => "secret_forbidden",
            Self::Missing(_) => "secret_missing",
            Self::Vault(airlock_vault::VaultError::Rollback { .. }) => "secret_rollback",
            Self::Vault(_) => "vault_error",
            Self::Store(_) => "store_error",
            Self::Corrupt(_) => "secret_corrupt",
        }
    }
}

/// Metadata of one secret (KEY-4: never a value).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub version: i64,
    pub updated_at: i64,
    pub last_used_at: Option<i64>,
    pub used_by: Vec<String>,
}

/// The vault bound to a store. The key directory is opened per operation
/// (the vault holds an exclusive lock on it while open), so several airlock
/// processes — `airlock up`, the CLI, more nodes on one host — can share it,
/// and every operation sees the current keyring and high-water marks.
#[derive(Clone)]
pub struct Secrets {
    key_dir: std::path::PathBuf,
    store: Store,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets")
    }
}

/// One vault operation at a time in this process. An async operation holds
/// the key directory's lock across awaits; a second one started meanwhile
/// would find it locked and spin. Between processes the directory's own
/// lock (with the bounded retry in `vault()`) still applies.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn name(s: &str) -> Result<SecretName, SecretError> {
    if airlock_worker::is_platform_secret(s) {
        return Err(SecretError::Platform(s.to_string()));
    }
    SecretName::parse(s).map_err(|e| SecretError::Invalid(e.to_string()))
}

impl Secrets {
    /// Opens (creating on first start) the key directory once to check it:
    /// one whose permissions are looser than 0700/0600 is refused.
    pub fn open(key_dir: &Path, store: Store) -> Result<Self, SecretError> {
        let s = Self {
            key_dir: key_dir.to_path_buf(),
            store,
        };
        drop(s.vault()?);
        Ok(s)
    }

    /// The vault, waiting briefly while another process holds the key
    /// directory.
    pub fn vault(&self) -> Result<Vault, SecretError> {
        let mut wait = std::time::Duration::from_millis(2);
        for _ in 0..12 {
            let opened = airlock_vault::KeyDir::open_or_create(&self.key_dir)
                .and_then(|k| Vault::new(k, VaultConfig::default()));
            match opened {
                Err(airlock_vault::VaultError::Locked { .. }) => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(std::time::Duration::from_millis(250));
                }
                other => return Ok(other?),
            }
        }
        Ok(airlock_vault::KeyDir::open_or_create(&self.key_dir)
            .and_then(|k| Vault::new(k, VaultConfig::default()))?)
    }

    /// Installs a new KEK version (KEY-2).
    pub fn rotate(&self) -> Result<u32, SecretError> {
        Ok(self.vault()?.rotate()?)
    }

    /// Retires a KEK version: data still under it then fails with a typed
    /// error (rewrap first).
    pub fn retire(&self, version: u32) -> Result<(), SecretError> {
        Ok(self.vault()?.retire(version)?)
    }

    pub fn current_kek_version(&self) -> Result<u32, SecretError> {
        Ok(self.vault()?.current_kek_version())
    }

    async fn data_key(&self, vault: &Vault, workspace: &str) -> Result<DataKey, SecretError> {
        let wrapped = match self.store.data_key(workspace).await? {
            Some((_, json)) => serde_json::from_str::<WrappedDataKey>(&json)
                .map_err(|_| SecretError::Corrupt("data key".into()))?,
            None => {
                let w = vault.new_data_key(workspace)?;
                let json = serde_json::to_string(&w)
                    .map_err(|_| SecretError::Corrupt("data key".into()))?;
                self.store
                    .put_data_key(workspace, i64::from(w.version), &json)
                    .await?;
                w
            }
        };
        Ok(vault.unwrap_data_key(&wrapped)?)
    }

    /// Stores a new version of a secret (value from stdin or a request body,
    /// never argv). The database commits first, then the high-water mark,
    /// so a crash between them leaves the record ahead of the mark (allowed)
    /// rather than behind it.
    pub async fn set(
        &self,
        workspace: &str,
        secret: &str,
        value: Vec<u8>,
        actor: &str,
    ) -> Result<u64, SecretError> {
        let _turn = TURN.lock().await;
        let name = name(secret)?;
        if value.is_empty() {
            return Err(SecretError::Invalid(
                "a secret value may not be empty".into(),
            ));
        }
        let value = SecretValue::parse(value).map_err(|e| SecretError::Invalid(e.to_string()))?;
        let vault = self.vault()?;
        let stored = self
            .store
            .get_secret(workspace, name.as_str())
            .await?
            .map(|(v, _)| u64::try_from(v).unwrap_or(0));
        let version = vault.next_version(workspace, &name, stored)?;
        let dk = self.data_key(&vault, workspace).await?;
        let sealed = vault.seal(&dk, &name, version, &value)?;
        let json =
            serde_json::to_string(&sealed).map_err(|_| SecretError::Corrupt(secret.into()))?;
        self.store
            .put_secret(
                workspace,
                name.as_str(),
                i64::try_from(version).unwrap_or(i64::MAX),
                &json,
                actor,
            )
            .await?;
        vault.record_write(workspace, &name, version)?;
        Ok(version)
    }

    /// Reads a secret for a run (audited), refusing rolled-back records.
    pub async fn read_for_run(
        &self,
        workspace: &str,
        secret: &str,
        run_id: &str,
    ) -> Result<(SecretName, SecretValue), SecretError> {
        let _turn = TURN.lock().await;
        let name = name(secret)?;
        let Some((version, json)) = self.store.get_secret(workspace, name.as_str()).await? else {
            return Err(SecretError::Missing(secret.to_string()));
        };
        let vault = self.vault()?;
        vault.check_read(workspace, &name, u64::try_from(version).unwrap_or(0))?;
        let sealed: SealedSecret =
            serde_json::from_str(&json).map_err(|_| SecretError::Corrupt(secret.into()))?;
        // The data key that sealed this record, by its version.
        let wrapped = self
            .store
            .data_key_version(workspace, i64::from(sealed.data_key_version))
            .await?
            .ok_or_else(|| SecretError::Corrupt(format!("{secret}: its data key is missing")))?;
        let wrapped: WrappedDataKey =
            serde_json::from_str(&wrapped).map_err(|_| SecretError::Corrupt("data key".into()))?;
        let dk = vault.unwrap_data_key(&wrapped)?;
        let value = vault.open(&dk, &sealed)?;
        self.store
            .secret_read(workspace, name.as_str(), run_id)
            .await?;
        Ok((name, value))
    }

    pub async fn remove(
        &self,
        workspace: &str,
        secret: &str,
        actor: &str,
    ) -> Result<bool, SecretError> {
        let _turn = TURN.lock().await;
        let name = name(secret)?;
        let vault = self.vault()?;
        let stored = self.store.get_secret(workspace, name.as_str()).await?;
        let removed = self
            .store
            .delete_secret(workspace, name.as_str(), actor)
            .await?;
        if let Some((v, _)) = stored {
            vault.record_delete(workspace, &name, u64::try_from(v).unwrap_or(0))?;
        }
        Ok(removed)
    }

    /// Metadata only, with the workers that declare each secret.
    pub async fn list(
        &self,
        workspace: &str,
        declared: &[(String, Vec<String>)],
    ) -> Result<Vec<SecretInfo>, SecretError> {
        let used_by = |name: &str| -> Vec<String> {
            declared
                .iter()
                .filter(|(_, n)| n.iter().any(|x| x == name))
                .map(|(w, _)| w.clone())
                .collect()
        };
        let mut list: Vec<SecretInfo> = self
            .store
            .list_secrets(workspace)
            .await?
            .into_iter()
            .map(|(name, version, updated_at, last_used_at)| SecretInfo {
                used_by: used_by(&name),
                name,
                version,
                updated_at,
                last_used_at,
            })
            .collect();
        // A name a worker declares that is not set yet is listed too, as
        // version 0, so a person sees what is missing before a run is
        // blocked for it.
        let mut missing: Vec<&str> = declared
            .iter()
            .flat_map(|(_, names)| names.iter().map(String::as_str))
            .filter(|n| !list.iter().any(|s| s.name == *n))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for name in missing {
            list.push(SecretInfo {
                name: name.to_string(),
                version: 0,
                updated_at: 0,
                last_used_at: None,
                used_by: used_by(name),
            });
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }

    /// Start-up check (KEY-3): a restored older database is refused.
    pub async fn startup_check(&self) -> Result<airlock_vault::StartupReport, SecretError> {
        let _turn = TURN.lock().await;
        let mut refs = Vec::new();
        for (ws, n, v, _) in self.store.all_secrets().await? {
            if let Ok(name) = SecretName::parse(&n) {
                refs.push(RecordRef::new(ws, name, u64::try_from(v).unwrap_or(0)));
            }
        }
        Ok(self.vault()?.check_startup(&refs)?)
    }

    /// The operator's recovery for a legitimately restored backup.
    pub async fn accept_restore(&self) -> Result<usize, SecretError> {
        let _turn = TURN.lock().await;
        let mut refs = Vec::new();
        for (ws, n, v, _) in self.store.all_secrets().await? {
            if let Ok(name) = SecretName::parse(&n) {
                refs.push(RecordRef::new(ws, name, u64::try_from(v).unwrap_or(0)));
            }
        }
        let changes = self.vault()?.accept_restore(&refs)?;
        self.store
            .audit(
                airlock_store::DEFAULT_WORKSPACE,
                airlock_store::AuditRecord::system("vault.restore_accepted", None).with_metadata(
                    serde_json::json!({"records": refs.len(), "changes": changes.len()}),
                ),
            )
            .await?;
        Ok(changes.len())
    }

    /// Rewraps every data key under the newest KEK (idempotent per record,
    /// so an interrupted run can simply be repeated). Returns `(done, total)`.
    pub async fn rewrap_all(
        &self,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<(usize, usize), SecretError> {
        let _turn = TURN.lock().await;
        let keys = self.store.all_data_keys().await?;
        let total = keys.len();
        let vault = self.vault()?;
        for (i, (ws, version, json)) in keys.into_iter().enumerate() {
            let w: WrappedDataKey =
                serde_json::from_str(&json).map_err(|_| SecretError::Corrupt("data key".into()))?;
            let nw = vault.rewrap(&w)?;
            let nj =
                serde_json::to_string(&nw).map_err(|_| SecretError::Corrupt("data key".into()))?;
            self.store.put_data_key(&ws, version, &nj).await?;
            progress(i + 1, total);
        }
        Ok((total, total))
    }
}

/// Redacts every delivered value from text (KEY-6).
pub fn redactor<'a>(
    values: impl IntoIterator<Item = (&'a SecretName, &'a SecretValue)>,
) -> airlock_vault::Redactor {
    airlock_vault::Redactor::new(values)
}

/// A copy of a value's bytes, wiped when dropped: plaintext that leaves the
/// vault's types is never held in a plain buffer.
pub fn bytes(v: &SecretValue) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(v.expose_secret().to_vec())
}

/// A value's bytes for a secret file in the sandbox (moved straight into a
/// type that wipes them on drop).
pub fn secret_bytes(v: &SecretValue) -> airlock_sandbox::SecretBytes {
    airlock_sandbox::SecretBytes::new(v.expose_secret().to_vec())
}

/// A value as UTF-8 text, wiped when dropped; `None` when it is not UTF-8.
pub fn text(v: &SecretValue) -> Option<Zeroizing<String>> {
    std::str::from_utf8(v.expose_secret())
        .ok()
        .map(|t| Zeroizing::new(t.to_owned()))
}

/// Names referenced as `${secret:NAME}` in an egress policy's text.
pub fn channel_secret_names(policy_text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = policy_text;
    while let Some(i) = rest.find("${secret:") {
        rest = &rest[i + 9..];
        if let Some(end) = rest.find('}') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        } else {
            break;
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A policy secret source: `${secret:NAME}` from the vault (values read
/// beforehand, audited), everything else from the environment and files.
pub struct VaultSource {
    values: std::collections::HashMap<String, Zeroizing<String>>,
}

impl std::fmt::Debug for VaultSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaultSource([REDACTED])")
    }
}

impl airlock_egress::policy::SecretSource for VaultSource {
    fn get(&self, reference: &str) -> Option<String> {
        match reference.strip_prefix("secret:") {
            // The egress crate's interface takes an owned `String`: that
            // copy is the policy's to keep (it becomes the channel header).
            Some(name) => self.values.get(name).map(|v| v.to_string()),
            None => airlock_egress::policy::EnvAndFiles.get(reference),
        }
    }
}

impl Secrets {
    /// Reads the channel credentials an egress policy references from the
    /// vault (KEY-5: on the trusted side, for the proxy only).
    pub async fn channel_source(
        &self,
        workspace: &str,
        policy_text: &str,
        run_id: &str,
    ) -> Result<VaultSource, SecretError> {
        let mut values = std::collections::HashMap::new();
        for n in channel_secret_names(policy_text) {
            let (_, v) = self.read_for_run(workspace, &n, run_id).await?;
            let value =
                text(&v).ok_or_else(|| SecretError::Invalid(format!("{n} is not UTF-8")))?;
            values.insert(n, value);
        }
        Ok(VaultSource { values })
    }

    /// Like [`Secrets::channel_source`], but a secret that is not set is
    /// left out (its channel then fails to parse, naming itself) instead
    /// of failing the whole source: the agent harness reports a missing
    /// model credential as `provider_credentials_missing`.
    pub async fn channel_source_available(
        &self,
        workspace: &str,
        policy_text: &str,
        run_id: &str,
    ) -> Result<VaultSource, SecretError> {
        let mut values = std::collections::HashMap::new();
        for n in channel_secret_names(policy_text) {
            let v = match self.read_for_run(workspace, &n, run_id).await {
                Ok((_, v)) => v,
                Err(SecretError::Missing(_)) => continue,
                Err(e) => return Err(e),
            };
            let value =
                text(&v).ok_or_else(|| SecretError::Invalid(format!("{n} is not UTF-8")))?;
            values.insert(n, value);
        }
        Ok(VaultSource { values })
    }
}
