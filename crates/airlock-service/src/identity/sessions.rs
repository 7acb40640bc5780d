//! Signing in and sessions (IAM-2, IAM-3): login with throttling and equal
//! work for unknown accounts, the second-factor step with rotation, the
//! session list, logout and logout-all.

use airlock_iam::{Permission, keys, password};
use airlock_protocol::identity::{
    Login, Revoked, SecondFactor, SessionIssued, SessionList, Via as ViaView, WhoAmI,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::AuditRecord;
use airlock_store::ThrottleKind;
use serde_json::json;

use super::{
    human, invalid, login_failed, membership_view, session_view, throttled, user_view,
    verify_password,
};
use crate::caller::{ClientInfo, Principal, Via};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// A new session: the token (for the front end's cookie, never shown
/// elsewhere) and what the client is told.
#[derive(Clone)]
pub struct IssuedSession {
    pub token: String,
    pub body: SessionIssued,
}

impl std::fmt::Debug for IssuedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedSession")
            .field("session", &self.body.session.id)
            .finish_non_exhaustive()
    }
}

/// A key acts on its user's sessions only with the `keys.own` scope.
fn may_manage_sessions(p: &Principal) -> Result<()> {
    match &p.via {
        Via::ApiKey { scopes, .. } if !scopes.contains(&Permission::KeysOwn) => {
            Err(Error::forbidden("this key lacks the keys.own scope"))
        }
        _ => Ok(()),
    }
}

impl Service {
    /// Issues a session: a fresh token and CSRF token. Any token the client
    /// arrived with is revoked (no fixation).
    async fn issue_session(
        &self,
        user_id: &str,
        mfa_pending: bool,
        client: &ClientInfo,
    ) -> Result<IssuedSession> {
        let now = self.now();
        if let Some(old) = &client.session_token
            && let Some(prev) = self
                .store
                .session_by_token_hash(&keys::token_hash(old))
                .await
                .svc()?
        {
            self.store
                .revoke_session(&prev.user_id, &prev.id, now)
                .await
                .svc()?;
        }
        let token = keys::new_token();
        let csrf = keys::new_token();
        let abs = i64::try_from(self.cfg.identity.absolute_timeout.as_millis()).unwrap_or(i64::MAX);
        let rec = self
            .store
            .create_session(
                user_id,
                &keys::token_hash(&token),
                &keys::token_hash(&csrf),
                mfa_pending,
                client.user_agent.as_deref(),
                client.ip.as_deref(),
                now,
                // A session that still owes its second factor lives minutes.
                now.saturating_add(if mfa_pending { abs.min(600_000) } else { abs }),
            )
            .await
            .svc()?;
        Ok(IssuedSession {
            token,
            body: SessionIssued {
                session: session_view(&rec, true),
                csrf_token: csrf,
                mfa_required: mfa_pending,
            },
        })
    }

    /// IAM-2: one generic failure, the same Argon2 work whether or not the
    /// account exists, throttled per account name and per client; every
    /// failure and throttle audited.
    pub async fn login(&self, client: &ClientInfo, b: &Login) -> Result<IssuedSession> {
        // Malformed attempts are refused before any lookup, and audited.
        let malformed = if b.password.chars().count() > password::MAX_PASSWORD_CHARS {
            Some("password too long")
        } else if b.username.chars().count() > 4 * password::MAX_USERNAME_BYTES {
            Some("username too long")
        } else {
            None
        };
        if let Some(why) = malformed {
            self.login_bad_request(client).await?;
            return Err(invalid(why));
        }
        let now = self.now();
        // Unknown and malformed names are throttled like real ones.
        let name = password::normalize_username(&b.username).ok();
        let account_key = format!("acct:{}", name.as_deref().unwrap_or(&b.username));
        let client_key = client.throttle_key();
        let retry = self
            .throttle_wait(
                &[
                    (ThrottleKind::Account, &account_key),
                    (ThrottleKind::Client, &client_key),
                ],
                now,
            )
            .await?;
        if let Some(retry) = retry {
            self.audit_system(
                AuditRecord::system("login.throttled", None)
                    .with_metadata(json!({"username": name, "client_ip": client.ip})),
            )
            .await?;
            return Err(throttled(retry));
        }
        let user = match &name {
            Some(n) => self.store.user_by_name(n).await.svc()?,
            None => None,
        };
        let ok = verify_password(
            user.as_ref().and_then(|u| u.password_hash.clone()),
            b.password.clone(),
        )
        .await?;
        let user = match user {
            Some(u) if ok && !u.disabled => u,
            _ => {
                self.throttle_failure(ThrottleKind::Account, &account_key, now)
                    .await?;
                self.throttle_failure(ThrottleKind::Client, &client_key, now)
                    .await?;
                self.audit_system(
                    AuditRecord::system("login.failed", None)
                        .with_metadata(json!({"username": name, "client_ip": client.ip})),
                )
                .await?;
                return Err(login_failed());
            }
        };
        self.throttle_success(ThrottleKind::Account, &account_key)
            .await?;
        let mfa = self.mfa_enabled(&user.id).await?;
        self.audit_system(
            AuditRecord::system(
                if mfa {
                    "login.password_ok"
                } else {
                    "login.succeeded"
                },
                None,
            )
            .with_actor(human(&user.id))
            .with_metadata(json!({"client_ip": client.ip})),
        )
        .await?;
        self.issue_session(&user.id, mfa, client).await
    }

    /// Audits a login request the front end could not even parse.
    pub async fn login_bad_request(&self, client: &ClientInfo) -> Result<()> {
        self.audit_system(
            AuditRecord::system("login.bad_request", None)
                .with_metadata(json!({"client_ip": client.ip})),
        )
        .await
    }

    /// The second factor: a TOTP code (each step once) or a recovery code
    /// (each once). Success rotates the session.
    pub async fn login_mfa(
        &self,
        p: &Principal,
        client: &ClientInfo,
        b: &SecondFactor,
    ) -> Result<IssuedSession> {
        let Via::Session { mfa_pending, .. } = p.via else {
            return Err(Error::new(
                ErrorCode::SessionRequired,
                "this operation needs a signed-in session, not an API key",
            ));
        };
        if !mfa_pending {
            return Err(Error::new(
                ErrorCode::MfaNotPending,
                "this session has no second factor outstanding",
            ));
        }
        let now = self.now();
        let key = format!("mfa:{}", p.user.id);
        if let Some(retry) = self
            .throttle_wait(&[(ThrottleKind::Account, &key)], now)
            .await?
        {
            return Err(throttled(retry));
        }
        let ok = match (&b.code, &b.recovery_code) {
            (Some(code), None) => self.verify_totp(&p.user.id, code, now).await?,
            (None, Some(rc)) => {
                let h = keys::token_hash(&keys::normalize_recovery_code(rc));
                self.store
                    .use_recovery_code(&p.user.id, &h, now)
                    .await
                    .svc()?
            }
            _ => return Err(invalid("give exactly one of code, recovery_code")),
        };
        if !ok {
            self.throttle_failure(ThrottleKind::Account, &key, now)
                .await?;
            self.audit_system(
                AuditRecord::system("login.mfa_failed", None).with_actor(human(&p.user.id)),
            )
            .await?;
            return Err(login_failed());
        }
        self.throttle_success(ThrottleKind::Account, &key).await?;
        self.audit_system(
            AuditRecord::system("login.succeeded", None)
                .with_actor(human(&p.user.id))
                .with_metadata(
                    json!({"mfa": if b.code.is_some() { "totp" } else { "recovery_code" }}),
                ),
        )
        .await?;
        // Rotation at step-up: the pending token dies, a new one is issued.
        self.issue_session(&p.user.id, false, client).await
    }

    /// The signed-in user, how they authenticated and their workspaces (a
    /// key sees only its own workspace).
    pub async fn whoami(&self, p: &Principal) -> Result<WhoAmI> {
        let workspaces = match &p.via {
            Via::Session { .. } => self.store.memberships_of(&p.user.id).await.svc()?,
            Via::ApiKey { workspace, .. } => self
                .store
                .membership(workspace, &p.user.id)
                .await
                .svc()?
                .into_iter()
                .collect(),
        };
        let via = match &p.via {
            Via::Session { id, .. } => ViaView {
                session: Some(id.clone()),
                api_key: None,
            },
            Via::ApiKey { id, .. } => ViaView {
                session: None,
                api_key: Some(id.clone()),
            },
        };
        Ok(WhoAmI {
            user: user_view(&p.user),
            mfa_enabled: self.mfa_enabled(&p.user.id).await?,
            via,
            workspaces: workspaces.into_iter().map(membership_view).collect(),
        })
    }

    /// Logout: the current session ends server-side.
    pub async fn logout(&self, p: &Principal) -> Result<()> {
        let Some(id) = p.session_id() else {
            return Err(Error::new(
                ErrorCode::SessionRequired,
                "this operation needs a signed-in session, not an API key",
            ));
        };
        self.store
            .revoke_session(&p.user.id, id, self.now())
            .await
            .svc()?;
        self.audit_system(AuditRecord::system("logout", None).with_actor(human(&p.user.id)))
            .await
    }

    /// The user's active sessions, the current one marked.
    pub async fn list_sessions(&self, p: &Principal) -> Result<SessionList> {
        may_manage_sessions(p)?;
        let current = p.session_id();
        let sessions = self
            .store
            .list_sessions(&p.user.id, self.now())
            .await
            .svc()?
            .iter()
            .filter(|r| !r.mfa_pending)
            .map(|r| session_view(r, Some(r.id.as_str()) == current))
            .collect();
        Ok(SessionList { sessions })
    }

    /// Ends one of the user's sessions.
    pub async fn revoke_session(&self, p: &Principal, id: &str) -> Result<()> {
        may_manage_sessions(p)?;
        if !self
            .store
            .revoke_session(&p.user.id, id, self.now())
            .await
            .svc()?
        {
            return Err(Error::not_found());
        }
        self.audit_system(
            AuditRecord::system("session.revoked", None)
                .with_actor(human(&p.user.id))
                .with_metadata(json!({"session": id})),
        )
        .await
    }

    /// Logout-all: every other session of the user ends (the current one
    /// too when called with an API key).
    pub async fn revoke_all_sessions(&self, p: &Principal) -> Result<Revoked> {
        may_manage_sessions(p)?;
        let n = self
            .store
            .revoke_sessions_of(&p.user.id, p.session_id(), self.now())
            .await
            .svc()?;
        self.audit_system(
            AuditRecord::system("session.revoked_all", None)
                .with_actor(human(&p.user.id))
                .with_metadata(json!({"count": n})),
        )
        .await?;
        Ok(Revoked { revoked: n })
    }
}
