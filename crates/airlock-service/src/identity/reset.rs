//! Single-use, expiring password reset (IAM-4): issued by the operator,
//! or as an invitation's set-password token; consuming one sets the
//! password, clears TOTP and ends every session and key of the user.

use std::time::Duration;

use airlock_iam::{keys, password};
use airlock_protocol::identity::PasswordReset;
use airlock_protocol::{Error, ErrorCode};
use airlock_store::AuditRecord;
use airlock_store::ThrottleKind;
use serde_json::json;

use super::{hash_password, human, new_password, throttled};
use crate::caller::{Actor, Caller, ClientInfo, OPERATOR};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The longest an operator's reset token may live.
pub const MAX_RESET_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl Service {
    /// Creates a single-use set-password token for `user_id`, valid `ttl`.
    pub(crate) async fn issue_reset_token(&self, user_id: &str, ttl: Duration) -> Result<String> {
        let now = self.now();
        let token = keys::new_prefixed_token("alr");
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.store
            .create_reset_token(
                user_id,
                &keys::token_hash(&token),
                now,
                now.saturating_add(ttl),
            )
            .await
            .svc()?;
        Ok(token)
    }

    /// The operator's reset of a lost password or second factor: a
    /// single-use token for `POST /v1/password/reset`, audited.
    pub async fn operator_reset_password(
        &self,
        c: &Caller,
        username: &str,
        ttl: Duration,
    ) -> Result<String> {
        if !matches!(c.actor, Actor::Operator) {
            return Err(Error::forbidden(
                "password resets are issued by the operator on the server",
            ));
        }
        let name = password::normalize_username(username)
            .map_err(|e| Error::invalid_body(e.to_string()))?;
        let user = self
            .store
            .user_by_name(&name)
            .await
            .svc()?
            .ok_or_else(|| Error::new(ErrorCode::NoSuchUser, format!("no user {name:?}")))?;
        let ttl = ttl.clamp(Duration::from_secs(60), MAX_RESET_TTL);
        let token = self.issue_reset_token(&user.id, ttl).await?;
        self.audit_system(
            AuditRecord::system("password.reset_issued", None)
                .with_actor(airlock_audit::chain::Actor::Service(OPERATOR.into()))
                .with_metadata(json!({"user": user.id, "ttl_minutes": ttl.as_secs() / 60})),
        )
        .await?;
        Ok(token)
    }

    /// Consumes a reset (or invitation) token: sets the password, clears
    /// TOTP, ends every session and revokes every key of that user.
    pub async fn password_reset(&self, client: &ClientInfo, b: &PasswordReset) -> Result<()> {
        let now = self.now();
        if let Some(retry) = self
            .throttle_wait(&[(ThrottleKind::Client, &client.throttle_key())], now)
            .await?
        {
            return Err(throttled(retry));
        }
        new_password(&b.new_password)?;
        let hash = hash_password(b.new_password.clone()).await?;
        let Some(user_id) = self
            .store
            .consume_reset_token(&keys::token_hash(&b.token), now)
            .await
            .svc()?
        else {
            self.throttle_failure(ThrottleKind::Client, &client.throttle_key(), now)
                .await?;
            self.audit_system(
                AuditRecord::system("password.reset_refused", None)
                    .with_metadata(json!({"client_ip": client.ip})),
            )
            .await?;
            return Err(Error::new(
                ErrorCode::ResetRefused,
                "the reset token is unknown, used or expired",
            ));
        };
        self.store.set_password(&user_id, &hash).await.svc()?;
        self.store.mfa_remove(&user_id).await.svc()?;
        self.store
            .revoke_sessions_of(&user_id, None, now)
            .await
            .svc()?;
        // After a compromise the attacker's keys must die with the password.
        self.store.revoke_api_keys_of(&user_id, now).await.svc()?;
        self.audit_system(AuditRecord::system("password.reset", None).with_actor(human(&user_id)))
            .await
    }
}
