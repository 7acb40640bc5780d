//! Secrets as callers manage them (KEY-4): write-only values, metadata
//! lists, deletion; and the operator's key maintenance (KEY-2, KEY-3).
//! The vault mechanics are in [`crate::secrets`].

use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_protocol::secrets::{MAX_SECRET_BYTES, SecretInfo, SecretList, SecretStored};

use crate::caller::{Actor, Caller};
use crate::error::Result;
use crate::service::Service;

/// How a key maintenance step went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrapped {
    pub data_keys: usize,
    pub kek_version: u32,
}

impl Service {
    /// Metadata of the workspace's secrets (never a value), with the
    /// workers that declare each, including declared ones not yet set.
    pub async fn list_secrets(&self, c: &Caller) -> Result<SecretList> {
        c.require(Permission::SecretsList)?;
        let declared = if c.workspace == self.cfg.workers_workspace {
            self.declared_secrets()
        } else {
            Vec::new()
        };
        let secrets = self
            .secrets
            .list(&c.workspace, &declared)
            .await?
            .into_iter()
            .map(|s| SecretInfo {
                name: s.name,
                version: s.version,
                updated_at: s.updated_at,
                last_used_at: s.last_used_at,
                used_by: s.used_by,
            })
            .collect();
        Ok(SecretList { secrets })
    }

    /// Stores a new version of a secret; the value is never shown again.
    pub async fn put_secret(&self, c: &Caller, name: &str, value: Vec<u8>) -> Result<SecretStored> {
        c.require(Permission::SecretsWrite)?;
        if value.len() > MAX_SECRET_BYTES {
            return Err(Error::new(
                airlock_protocol::ErrorCode::SecretInvalid,
                format!("a secret value is at most {MAX_SECRET_BYTES} bytes"),
            ));
        }
        let version = self
            .secrets
            .set(&c.workspace, name, value, c.actor_id())
            .await?;
        Ok(SecretStored {
            name: name.to_string(),
            version: i64::try_from(version).unwrap_or(i64::MAX),
        })
    }

    /// Deletes a secret; `not_found` when there is none.
    pub async fn delete_secret(&self, c: &Caller, name: &str) -> Result<()> {
        c.require(Permission::SecretsWrite)?;
        if self
            .secrets
            .remove(&c.workspace, name, c.actor_id())
            .await?
        {
            Ok(())
        } else {
            Err(Error::not_found())
        }
    }

    fn operator_only(c: &Caller) -> Result<()> {
        match c.actor {
            Actor::Operator => Ok(()),
            Actor::User(_) => Err(Error::forbidden(
                "key maintenance is done by the operator on the server",
            )),
        }
    }

    /// KEY-2: installs a new KEK version; old data stays readable.
    pub fn rotate_kek(&self, c: &Caller) -> Result<u32> {
        Self::operator_only(c)?;
        Ok(self.secrets.rotate()?)
    }

    /// KEY-2: moves every data key to the newest KEK version (resumable).
    pub async fn rewrap_data_keys(
        &self,
        c: &Caller,
        progress: impl FnMut(usize, usize),
    ) -> Result<Rewrapped> {
        Self::operator_only(c)?;
        let (done, _) = self.secrets.rewrap_all(progress).await?;
        Ok(Rewrapped {
            data_keys: done,
            kek_version: self.secrets.current_kek_version()?,
        })
    }

    /// KEY-2: retires a KEK version (data still under it then fails).
    pub fn retire_kek(&self, c: &Caller, version: u32) -> Result<()> {
        Self::operator_only(c)?;
        Ok(self.secrets.retire(version)?)
    }

    /// KEY-3: accepts a legitimately restored backup (audited); returns
    /// how many high-water marks changed.
    pub async fn accept_restore(&self, c: &Caller) -> Result<usize> {
        Self::operator_only(c)?;
        Ok(self.secrets.accept_restore().await?)
    }

    /// KEY-3: refuses to serve a database older than the key directory's
    /// high-water marks.
    pub async fn startup_check(&self) -> Result<airlock_vault::StartupReport> {
        Ok(self.secrets.startup_check().await?)
    }
}
