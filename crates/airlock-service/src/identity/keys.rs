//! API keys (IAM-5): minted by a signed-in user, scoped to at most what
//! that user holds now, shown once, stored hashed, revocable.

use std::collections::BTreeSet;
use std::time::Duration;

use airlock_iam::{Permission, keys};
use airlock_protocol::Error;
use airlock_protocol::identity::{ApiKey, CreateKey, KeyCreated, KeyList};
use airlock_store::AuditRecord;
use serde_json::json;

use super::{invalid, printable_name};
use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

const MAX_KEY_LIFETIME: Duration = Duration::from_secs(366 * 86_400);
const DEFAULT_KEY_LIFETIME: Duration = Duration::from_secs(90 * 86_400);

fn key_view(k: airlock_store::ApiKeyRecord) -> ApiKey {
    ApiKey {
        id: k.id,
        workspace_id: k.workspace_id,
        user_id: k.user_id,
        name: k.name,
        prefix: k.prefix,
        scopes: k.scopes,
        created_at: k.created_at,
        expires_at: k.expires_at,
        revoked_at: k.revoked_at,
        last_used_at: k.last_used_at,
    }
}

impl Service {
    /// Mints a key in the caller's workspace (a key cannot mint keys).
    pub async fn create_key(&self, c: &Caller, b: &CreateKey) -> Result<KeyCreated> {
        c.require(Permission::KeysOwn)?;
        c.require_session()?;
        let name = printable_name(&b.name, 64, "name")?;
        let scopes: BTreeSet<Permission> = match &b.scopes {
            // `approvals.decide` only when asked for by name: a key is
            // usually an automation's (a script, an MCP host), and a
            // decision should be a person's deliberate grant.
            None => c
                .perms
                .iter()
                .copied()
                .filter(|p| *p != Permission::ApprovalsDecide)
                .collect(),
            Some(list) => {
                let mut set = BTreeSet::new();
                for s in list {
                    let p = Permission::parse(s)
                        .ok_or_else(|| invalid(format!("unknown permission {s:?}")))?;
                    set.insert(p);
                }
                set
            }
        };
        if let Some(p) = scopes.iter().find(|p| !c.perms.contains(p)) {
            return Err(Error::forbidden(format!(
                "you do not hold {} and cannot give it to a key",
                p.as_str()
            )));
        }
        let life = b
            .expires_in_s
            .map_or(DEFAULT_KEY_LIFETIME, Duration::from_secs);
        if life.is_zero() || life > MAX_KEY_LIFETIME {
            return Err(invalid(format!(
                "expires_in_s must be between 1 and {}",
                MAX_KEY_LIFETIME.as_secs()
            )));
        }
        let now = self.now();
        let expires_at = now.saturating_add(i64::try_from(life.as_millis()).unwrap_or(i64::MAX));
        let key = keys::new_api_key();
        let scope_names: Vec<String> = scopes.iter().map(|p| p.as_str().to_string()).collect();
        let rec = self
            .store
            .create_api_key(
                &c.workspace,
                c.actor_id(),
                &name,
                &keys::api_key_display_prefix(&key),
                &keys::token_hash(&key),
                &scope_names,
                Some(expires_at),
                now,
                AuditRecord::system("api_key.created", None)
                    .with_actor(c.audit_actor())
                    .with_metadata(json!({"name": name, "scopes": scope_names})),
            )
            .await
            .svc()?;
        Ok(KeyCreated {
            key,
            api_key: key_view(rec),
        })
    }

    /// The caller's own keys in this workspace.
    pub async fn list_keys(&self, c: &Caller) -> Result<KeyList> {
        c.require(Permission::KeysOwn)?;
        let api_keys = self
            .store
            .list_api_keys(&c.workspace, c.actor_id())
            .await
            .svc()?
            .into_iter()
            .map(key_view)
            .collect();
        Ok(KeyList { api_keys })
    }

    /// Revokes one of the caller's keys; another's is `not_found`.
    pub async fn revoke_key(&self, c: &Caller, id: &str) -> Result<()> {
        c.require(Permission::KeysOwn)?;
        let done = self
            .store
            .revoke_api_key(
                &c.workspace,
                c.actor_id(),
                id,
                self.now(),
                AuditRecord::system("api_key.revoked", None)
                    .with_actor(c.audit_actor())
                    .with_metadata(json!({"key": id})),
            )
            .await
            .svc()?;
        if done {
            Ok(())
        } else {
            Err(Error::not_found())
        }
    }
}
