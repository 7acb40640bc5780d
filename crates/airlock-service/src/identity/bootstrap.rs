//! IAM-1: the first owner is created once, with a one-time capability the
//! operator reads from a file in the key directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use airlock_iam::{keys, password};
use airlock_protocol::identity::{Bootstrap, Bootstrapped};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::ThrottleKind;
use airlock_store::{AuditRecord, BootstrapState, DEFAULT_WORKSPACE};
use serde_json::json;

use super::{hash_password, human, invalid, new_password, printable_name, throttled, user_view};
use crate::caller::ClientInfo;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The capability's file in the key directory (0600; removed once used).
pub const BOOTSTRAP_FILE: &str = "bootstrap.token";

impl Service {
    /// While no owner exists, writes a fresh one-time capability to the key
    /// directory (0600) and returns its path; `None` once bootstrap is
    /// closed. Called at every start of a server.
    pub async fn prepare_bootstrap(&self) -> Result<Option<PathBuf>> {
        if self.store.bootstrap_state().await.svc()? == BootstrapState::Closed {
            return Ok(None);
        }
        let token = keys::new_prefixed_token("alb");
        let dir = &self.cfg.key_dir;
        let io = |e: std::io::Error| Error::internal(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(BOOTSTRAP_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        f.write_all(format!("{token}\n").as_bytes()).map_err(io)?;
        let state = self
            .store
            .bootstrap_begin(&keys::token_hash(&token), self.now())
            .await
            .svc()?;
        if state == BootstrapState::Closed {
            // Lost a race with a bootstrap that just completed.
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        Ok(Some(path))
    }

    /// IAM-1: creates the first owner with the one-time capability, once.
    pub async fn bootstrap(&self, client: &ClientInfo, b: &Bootstrap) -> Result<Bootstrapped> {
        let now = self.now();
        if let Some(retry) = self
            .throttle_wait(&[(ThrottleKind::Client, &client.throttle_key())], now)
            .await?
        {
            return Err(throttled(retry));
        }
        let username =
            password::normalize_username(&b.username).map_err(|e| invalid(e.to_string()))?;
        new_password(&b.password)?;
        let ws_name = match &b.workspace_name {
            Some(n) => printable_name(n, 100, "workspace_name")?,
            None => "default".to_string(),
        };
        let hash = hash_password(b.password.clone()).await?;
        let claimed = self
            .store
            .bootstrap_claim(
                &keys::token_hash(&b.token),
                &username,
                &hash,
                DEFAULT_WORKSPACE,
                &ws_name,
                now,
            )
            .await
            .svc()?;
        let Some(user) = claimed else {
            self.throttle_failure(ThrottleKind::Client, &client.throttle_key(), now)
                .await?;
            self.audit_system(
                AuditRecord::system("bootstrap.refused", None)
                    .with_metadata(json!({"client_ip": client.ip})),
            )
            .await?;
            return Err(Error::new(
                ErrorCode::BootstrapRefused,
                "bootstrap is closed or the capability is wrong",
            ));
        };
        // The capability is spent: its file goes too.
        let _ = std::fs::remove_file(self.cfg.key_dir.join(BOOTSTRAP_FILE));
        self.audit_system(
            AuditRecord::system("bootstrap.completed", None).with_actor(human(&user.id)),
        )
        .await?;
        Ok(Bootstrapped {
            user: user_view(&user),
            workspace_id: DEFAULT_WORKSPACE.to_string(),
        })
    }
}
