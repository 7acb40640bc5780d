//! Identity (IAM-1 … IAM-7): bootstrap of the first owner, sign-in with
//! the second factor, sessions, password reset, API keys, workspaces,
//! members and roles. Failures that could tell an attacker whether an
//! account exists all look the same, cost the same Argon2 work, and are
//! throttled alike; a refusal that cannot be audited is answered as an
//! internal error (the same for every account), never silently.

mod bootstrap;
mod keys;
mod members;
mod mfa;
mod reset;
mod sessions;
mod throttle;

use airlock_iam::password;
use airlock_protocol::identity::{Membership, Session, User};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::AuditRecord;

pub use bootstrap::BOOTSTRAP_FILE;
pub use reset::MAX_RESET_TTL;
pub use sessions::IssuedSession;

use crate::audit::SYSTEM_AUDIT;
use crate::error::Result;
use crate::service::Service;

/// The vault workspace that holds TOTP secrets (never a member workspace).
pub const IDENTITY_VAULT: &str = "ws_identity";

/// At most two Argon2id computations (19 MiB, ~25 ms each) at a time, on
/// the blocking pool: a flood of logins queues here instead of stalling
/// the async workers that serve every other request.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

async fn verify_password(phc: Option<String>, pw: String) -> Result<bool> {
    let _permit = HASHING.acquire().await.map_err(Error::internal)?;
    tokio::task::spawn_blocking(move || password::verify_password(phc.as_deref(), &pw))
        .await
        .map_err(Error::internal)
}

async fn hash_password(pw: String) -> Result<String> {
    let _permit = HASHING.acquire().await.map_err(Error::internal)?;
    tokio::task::spawn_blocking(move || password::hash_password(&pw))
        .await
        .map_err(Error::internal)?
        .map_err(Error::internal)
}

fn human(id: &str) -> airlock_audit::chain::Actor {
    airlock_audit::chain::Actor::Human(id.to_string())
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::invalid_body(msg)
}

fn login_failed() -> Error {
    Error::new(ErrorCode::LoginFailed, "invalid username, password or code")
}

fn throttled(retry_after_ms: i64) -> Error {
    let ms = u64::try_from(retry_after_ms.max(1000)).unwrap_or(1000);
    Error::limited(
        ErrorCode::RateLimited,
        "too many attempts; retry later",
        std::time::Duration::from_millis(ms),
    )
}

/// A printable name of 1 to `max` characters (workspaces, keys).
fn printable_name(name: &str, max: usize, field: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > max || name.chars().any(char::is_control) {
        return Err(invalid(format!(
            "{field} must be 1 to {max} printable characters"
        )));
    }
    Ok(name.to_string())
}

/// A new password: 12 to 1024 characters.
fn new_password(pw: &str) -> Result<()> {
    password::validate_new_password(pw).map_err(|e| invalid(e.to_string()))
}

fn user_view(u: &airlock_store::User) -> User {
    User {
        id: u.id.clone(),
        username: u.username.clone(),
        created_at: u.created_at,
        disabled: u.disabled,
    }
}

fn membership_view(m: airlock_store::Membership) -> Membership {
    Membership {
        workspace_id: m.workspace_id,
        workspace_name: m.workspace_name,
        user_id: m.user_id,
        username: m.username,
        role: m.role,
        created_at: m.created_at,
    }
}

fn session_view(s: &airlock_store::SessionRecord, current: bool) -> Session {
    Session {
        id: s.id.clone(),
        user_id: s.user_id.clone(),
        mfa_pending: s.mfa_pending,
        user_agent: s.user_agent.clone(),
        client_ip: s.client_ip.clone(),
        created_at: s.created_at,
        last_seen_at: s.last_seen_at,
        expires_at: s.expires_at,
        current,
    }
}

impl Service {
    /// Records an instance-level identity event.
    async fn audit_system(&self, rec: AuditRecord) -> Result<()> {
        self.audit(SYSTEM_AUDIT, rec).await
    }
}
