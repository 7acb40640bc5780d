//! Authentication and the effective permissions of a caller (IAM-3,
//! IAM-5, IAM-6): an API key or a session token becomes a [`Principal`];
//! a principal acting in a workspace becomes a [`Caller`]. Membership and
//! role are read on every request (no cached grants), so removing a member
//! or changing a role takes effect at once, for keys as well.

use airlock_iam::{Permission, Role, keys};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, SessionRecord};

use crate::audit::SYSTEM_AUDIT;
use crate::caller::{Actor, Caller, Credential, Principal, Via};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

pub(crate) fn unauthenticated() -> Error {
    Error::new(ErrorCode::Unauthenticated, "sign in or present an API key")
}

fn human(id: &str) -> airlock_audit::chain::Actor {
    airlock_audit::chain::Actor::Human(id.to_string())
}

/// An authenticated principal and, for a session, its record.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub principal: Principal,
    pub session: Option<SessionRecord>,
}

impl Service {
    /// A live session found from its token; `None` when missing, revoked
    /// or expired (an expired one is revoked on the way, audited).
    pub(crate) async fn live_session(&self, token: &str) -> Result<Option<SessionRecord>> {
        if token.is_empty() || token.len() > 128 {
            return Ok(None);
        }
        let Some(s) = self
            .store
            .session_by_token_hash(&keys::token_hash(token))
            .await
            .svc()?
        else {
            return Ok(None);
        };
        let now = self.now();
        let idle = i64::try_from(self.cfg.identity.idle_timeout.as_millis()).unwrap_or(i64::MAX);
        if now >= s.expires_at || now.saturating_sub(s.last_seen_at) >= idle {
            self.store
                .revoke_session(&s.user_id, &s.id, now)
                .await
                .svc()?;
            self.audit(
                SYSTEM_AUDIT,
                AuditRecord::system("session.expired", None)
                    .with_actor(human(&s.user_id))
                    .with_metadata(serde_json::json!({"session": s.id})),
            )
            .await?;
            return Ok(None);
        }
        Ok(Some(s))
    }

    async fn principal_from_key(&self, token: &str) -> Result<Principal> {
        if !keys::api_key_checksum_ok(token) {
            return Err(unauthenticated());
        }
        let Some(k) = self
            .store
            .api_key_by_hash(&keys::token_hash(token))
            .await
            .svc()?
        else {
            return Err(unauthenticated());
        };
        let now = self.now();
        let refused = if k.revoked_at.is_some() {
            Some("revoked")
        } else if k.expires_at.is_some_and(|e| now >= e) {
            Some("expired")
        } else {
            None
        };
        if let Some(reason) = refused {
            self.audit(
                &k.workspace_id,
                AuditRecord::system("api_key.refused", None)
                    .with_actor(human(&k.user_id))
                    .with_result(reason)
                    .with_metadata(serde_json::json!({"key": k.id})),
            )
            .await?;
            return Err(unauthenticated());
        }
        let Some(user) = self.store.user_by_id(&k.user_id).await.svc()? else {
            return Err(unauthenticated());
        };
        if user.disabled {
            return Err(unauthenticated());
        }
        // Last use is kept to the minute: a write per request would make
        // every authenticated read a database write.
        if k.last_used_at
            .is_none_or(|t| now.saturating_sub(t) >= 60_000)
        {
            self.store.touch_api_key(&k.id, now).await.svc()?;
        }
        let scopes = k
            .scopes
            .iter()
            .filter_map(|s| Permission::parse(s))
            .collect();
        Ok(Principal {
            user,
            via: Via::ApiKey {
                id: k.id,
                workspace: k.workspace_id,
                scopes,
            },
        })
    }

    /// Authenticates a credential. A session that still owes its second
    /// factor is admitted only with `allow_pending` (the MFA step and
    /// logout); a cookie-authenticated change must carry the session's CSRF
    /// token.
    pub async fn authenticate(
        &self,
        cred: &Credential,
        allow_pending: bool,
    ) -> Result<Authenticated> {
        let (token, csrf, changes_state) = match cred {
            Credential::ApiKey(k) => {
                return Ok(Authenticated {
                    principal: self.principal_from_key(k).await?,
                    session: None,
                });
            }
            Credential::Session {
                token,
                csrf,
                changes_state,
            } => (token, csrf, *changes_state),
        };
        let Some(s) = self.live_session(token).await? else {
            return Err(unauthenticated());
        };
        if s.mfa_pending && !allow_pending {
            return Err(Error::new(
                ErrorCode::MfaRequired,
                "complete the second factor first",
            ));
        }
        if changes_state {
            let given = csrf.as_deref().unwrap_or("");
            let ok = !given.is_empty()
                && keys::ct_eq(keys::token_hash(given).as_bytes(), s.csrf_hash.as_bytes());
            if !ok {
                return Err(Error::new(
                    ErrorCode::CsrfFailed,
                    "missing or wrong X-CSRF-Token for a cookie-authenticated request",
                ));
            }
        }
        let now = self.now();
        if now.saturating_sub(s.last_seen_at) >= 1000 {
            self.store.touch_session(&s.id, now).await.svc()?;
        }
        let Some(user) = self.store.user_by_id(&s.user_id).await.svc()? else {
            return Err(unauthenticated());
        };
        if user.disabled {
            return Err(unauthenticated());
        }
        Ok(Authenticated {
            principal: Principal {
                user,
                via: Via::Session {
                    id: s.id.clone(),
                    mfa_pending: s.mfa_pending,
                },
            },
            session: Some(s),
        })
    }

    /// The principal acting in a workspace: the one it names, else (for a
    /// session) its first. Another workspace is the same `not_found` as a
    /// missing one; a key acts in its own workspace only.
    pub async fn caller(&self, principal: Principal, asked: Option<&str>) -> Result<Caller> {
        let (workspace, key_scopes) = match &principal.via {
            Via::ApiKey {
                workspace, scopes, ..
            } => {
                if asked.is_some_and(|a| a != workspace) {
                    return Err(Error::not_found());
                }
                (workspace.clone(), Some(scopes.clone()))
            }
            Via::Session { .. } => match asked {
                Some(w) => (w.to_string(), None),
                None => {
                    let first = self
                        .store
                        .memberships_of(&principal.user.id)
                        .await
                        .svc()?
                        .into_iter()
                        .next()
                        .ok_or_else(|| {
                            Error::new(
                                ErrorCode::NoWorkspace,
                                "you are not a member of any workspace",
                            )
                        })?;
                    (first.workspace_id, None)
                }
            },
        };
        let Some(m) = self
            .store
            .membership(&workspace, &principal.user.id)
            .await
            .svc()?
        else {
            return Err(match key_scopes {
                Some(_) => unauthenticated(),
                None => Error::not_found(),
            });
        };
        let role = Role::parse(&m.role)
            .ok_or_else(|| Error::internal(format!("unknown role {:?} in the store", m.role)))?;
        let mut perms = role.permissions();
        if let Some(scopes) = key_scopes {
            perms = perms.intersection(&scopes).copied().collect();
        }
        Ok(Caller {
            actor: Actor::User(principal),
            workspace,
            role,
            perms,
        })
    }
}
