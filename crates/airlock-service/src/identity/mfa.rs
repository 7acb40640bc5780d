//! The second factor (IAM-4): TOTP enrolment (re-authenticated, secret
//! sealed in the vault, shown once), confirmation with ten one-use
//! recovery codes, and code checks where each time step counts once.

use airlock_iam::{keys, totp};
use airlock_protocol::identity::{Reauthenticate, RecoveryCodes, TotpCode, TotpEnrolment};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::AuditRecord;

use super::{IDENTITY_VAULT, human, verify_password};
use crate::caller::Principal;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

fn totp_secret_name(user_id: &str) -> String {
    format!("TOTP_{}", user_id.to_uppercase())
}

fn mfa_not_pending(msg: &str) -> Error {
    Error::new(ErrorCode::MfaNotPending, msg)
}

impl Service {
    pub(crate) async fn mfa_enabled(&self, user_id: &str) -> Result<bool> {
        Ok(self
            .store
            .mfa(user_id)
            .await
            .svc()?
            .is_some_and(|m| m.confirmed_at.is_some()))
    }

    /// The user's TOTP secret, opened from the vault (an audited read).
    async fn totp_secret(&self, user_id: &str) -> Result<zeroize::Zeroizing<Vec<u8>>> {
        let (_, v) = self
            .secrets
            .read_for_run(IDENTITY_VAULT, &totp_secret_name(user_id), "mfa")
            .await
            .map_err(|e| Error::internal(format!("totp secret: {e}")))?;
        let text = crate::secrets::bytes(&v);
        std::str::from_utf8(&text)
            .ok()
            .and_then(totp::base32_decode)
            .map(zeroize::Zeroizing::new)
            .ok_or_else(|| Error::internal("stored TOTP secret is corrupt"))
    }

    /// Checks a TOTP code; the compare-and-set makes a step usable once
    /// even under a race.
    pub(crate) async fn verify_totp(&self, user_id: &str, code: &str, now: i64) -> Result<bool> {
        let Some(m) = self.store.mfa(user_id).await.svc()? else {
            return Ok(false);
        };
        if m.confirmed_at.is_none() {
            return Ok(false);
        }
        let secret = self.totp_secret(user_id).await?;
        let unix_s = u64::try_from(now / 1000).unwrap_or(0);
        let Some(step) = totp::verify(&secret, code, unix_s, m.last_step) else {
            return Ok(false);
        };
        self.store.mfa_use_step(user_id, step).await.svc()
    }

    /// Starts TOTP enrolment (the current password again): a new secret,
    /// sealed in the vault, shown once.
    pub async fn mfa_enrol(&self, p: &Principal, b: &Reauthenticate) -> Result<TotpEnrolment> {
        p.require_session()?;
        // Re-authentication: a stolen session alone cannot enrol a factor
        // and lock the real user out.
        if !verify_password(p.user.password_hash.clone(), b.password.clone()).await? {
            self.audit_system(
                AuditRecord::system("mfa.enrol_refused", None).with_actor(human(&p.user.id)),
            )
            .await?;
            return Err(Error::new(
                ErrorCode::ReauthenticationFailed,
                "the password is wrong",
            ));
        }
        if self.mfa_enabled(&p.user.id).await? {
            return Err(Error::new(
                ErrorCode::MfaEnabled,
                "TOTP is already enabled; an operator reset is needed to change it",
            ));
        }
        let secret = zeroize::Zeroizing::new(totp::new_secret());
        // Stored as base32 text: the vault holds the secret, the database
        // only ciphertext (IAM-4: secret encrypted at rest).
        self.secrets
            .set(
                IDENTITY_VAULT,
                &totp_secret_name(&p.user.id),
                totp::base32_encode(&secret).into_bytes(),
                &p.user.id,
            )
            .await
            .map_err(|e| Error::internal(format!("totp secret: {e}")))?;
        self.store.mfa_begin(&p.user.id, self.now()).await.svc()?;
        Ok(TotpEnrolment {
            secret: totp::base32_encode(&secret),
            otpauth_uri: totp::otpauth_uri("airlock", &p.user.username, &secret),
        })
    }

    /// Confirms enrolment with a first code; the ten recovery codes are
    /// returned once.
    pub async fn mfa_confirm(&self, p: &Principal, b: &TotpCode) -> Result<RecoveryCodes> {
        p.require_session()?;
        let now = self.now();
        let Some(m) = self.store.mfa(&p.user.id).await.svc()? else {
            return Err(mfa_not_pending("start enrolment first"));
        };
        if m.confirmed_at.is_some() {
            return Err(Error::new(ErrorCode::MfaEnabled, "TOTP is already enabled"));
        }
        let secret = self.totp_secret(&p.user.id).await?;
        let unix_s = u64::try_from(now / 1000).unwrap_or(0);
        let Some(step) = totp::verify(&secret, &b.code, unix_s, None) else {
            return Err(Error::new(
                ErrorCode::InvalidCode,
                "that code is not valid now",
            ));
        };
        let codes = keys::new_recovery_codes();
        let hashes: Vec<String> = codes
            .iter()
            .map(|c| keys::token_hash(&keys::normalize_recovery_code(c)))
            .collect();
        if !self
            .store
            .mfa_confirm(&p.user.id, step, &hashes, now)
            .await
            .svc()?
        {
            return Err(mfa_not_pending("start enrolment first"));
        }
        self.audit_system(AuditRecord::system("mfa.enabled", None).with_actor(human(&p.user.id)))
            .await?;
        Ok(RecoveryCodes {
            recovery_codes: codes,
        })
    }
}
