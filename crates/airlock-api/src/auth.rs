//! Who is asking (IAM-3, IAM-5, IAM-6): every `/v1` request is made either
//! with an API key (`Authorization: Bearer alk_…`) or with a session cookie
//! (plus an `X-CSRF-Token` header on anything but GET/HEAD). Extractors turn
//! that into a [`Principal`] (a user) or a [`Caller`] (a user acting in one
//! workspace with a set of permissions). Deny by default: a handler that
//! takes neither is public, and only the health, bootstrap, login and
//! password-reset routes do.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use airlock_iam::throttle::{Throttle, ThrottleConfig};
use airlock_iam::{Clock, Permission, Role, keys};
use airlock_store::{AuditRecord, SessionRecord, User};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};

use crate::{ApiError, AppState};

/// The audit chain for instance-level identity events (logins, bootstrap,
/// resets): they belong to no single workspace.
pub const SYSTEM_AUDIT: &str = "ws_system";
/// The vault workspace that holds TOTP secrets (never a member workspace).
pub const IDENTITY_VAULT: &str = "ws_identity";
/// Header naming the workspace a session acts in (default: its first).
pub const WORKSPACE_HEADER: &str = "x-airlock-workspace";
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Identity settings of a server.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// A session unused this long ends.
    pub idle_timeout: Duration,
    /// A session ends this long after login, used or not.
    pub absolute_timeout: Duration,
    /// Cookies get `Secure` and the `__Host-` prefix, and responses HSTS:
    /// set when the server is reached over TLS (directly or through a
    /// terminating proxy).
    pub secure_cookies: bool,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpAddr>,
    pub account_throttle: ThrottleConfig,
    pub client_throttle: ThrottleConfig,
    /// Lifetime of an invitation's set-password token.
    pub invite_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(12 * 3600),
            absolute_timeout: Duration::from_secs(7 * 24 * 3600),
            secure_cookies: false,
            trusted_proxies: Vec::new(),
            account_throttle: ThrottleConfig::per_account(),
            client_throttle: ThrottleConfig::per_client(),
            invite_ttl: Duration::from_secs(72 * 3600),
        }
    }
}

/// Identity state shared by the handlers.
#[derive(Debug)]
pub struct Auth {
    pub cfg: AuthConfig,
    pub clock: Arc<dyn Clock>,
    pub accounts: Throttle,
    pub clients: Throttle,
}

impl Auth {
    pub fn new(cfg: AuthConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            accounts: Throttle::new(cfg.account_throttle),
            clients: Throttle::new(cfg.client_throttle),
            cfg,
            clock,
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn cookie_name(&self) -> &'static str {
        if self.cfg.secure_cookies {
            "__Host-airlock_session"
        } else {
            "airlock_session"
        }
    }

    /// `Set-Cookie` for a new session (IAM-3 attributes).
    pub fn session_cookie(&self, token: &str) -> String {
        let secure = if self.cfg.secure_cookies {
            "; Secure"
        } else {
            ""
        };
        format!(
            "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            self.cookie_name(),
            self.cfg.absolute_timeout.as_secs()
        )
    }

    /// `Set-Cookie` that clears the session cookie.
    pub fn clear_cookie(&self) -> String {
        let secure = if self.cfg.secure_cookies {
            "; Secure"
        } else {
            ""
        };
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}",
            self.cookie_name()
        )
    }

    /// The client address: the peer, or — only when the peer is a trusted
    /// proxy — the right-most `X-Forwarded-For` entry that is not itself a
    /// trusted proxy.
    pub fn client_ip(&self, parts: &Parts) -> Option<IpAddr> {
        // Canonical forms: an IPv4 peer on a dual-stack listener arrives as
        // `::ffff:a.b.c.d` and must match a trusted `a.b.c.d`.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_canonical())?;
        let trusted = |ip: &IpAddr| {
            self.cfg
                .trusted_proxies
                .iter()
                .any(|t| t.to_canonical() == *ip)
        };
        if !trusted(&peer) {
            return Some(peer);
        }
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in forwarded.iter().rev() {
            match hop.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
                Ok(ip) if trusted(&ip) => continue,
                Ok(ip) => return Some(ip),
                Err(_) => return Some(peer),
            }
        }
        Some(peer)
    }
}

/// How a request proved who it is.
#[derive(Debug, Clone)]
pub enum Via {
    Session {
        id: String,
    },
    ApiKey {
        id: String,
        workspace: String,
        scopes: BTreeSet<Permission>,
    },
}

/// An authenticated user.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: User,
    pub via: Via,
}

/// A user acting in one workspace.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub workspace: String,
    pub role: Role,
    /// Effective permissions: the role's, narrowed by an API key's scopes.
    pub perms: BTreeSet<Permission>,
}

impl Caller {
    /// 403 unless the caller holds `p` in this workspace.
    pub fn require(&self, p: Permission) -> Result<(), ApiError> {
        if self.perms.contains(&p) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this action needs the {} permission", p.as_str()),
            ))
        }
    }

    /// The actor recorded on runs and audit events: the user's id.
    pub fn actor(&self) -> &str {
        &self.principal.user.id
    }

    pub fn audit_actor(&self) -> airlock_audit::chain::Actor {
        airlock_audit::chain::Actor::Human(self.principal.user.id.clone())
    }
}

pub fn unauthenticated() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "sign in or present an API key",
    )
}

fn store_error(e: airlock_store::StoreError) -> ApiError {
    ApiError::from(e)
}

/// The session token from the cookie header, if any. Garbage is ignored
/// (it simply authenticates nobody).
pub fn session_token(auth: &Auth, headers: &HeaderMap) -> Option<String> {
    let want = auth.cookie_name();
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == want)
        .map(|(_, v)| v.to_string())
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

fn bearer(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| unauthenticated())?;
    let token = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .ok_or_else(unauthenticated)?;
    Ok(Some(token.trim().to_string()))
}

/// A live session found from its token; `None` when missing, revoked or
/// expired (an expired one is revoked on the way).
pub async fn live_session(
    state: &AppState,
    token: &str,
) -> Result<Option<SessionRecord>, ApiError> {
    let store = state.service.store();
    let Some(s) = store
        .session_by_token_hash(&keys::token_hash(token))
        .await
        .map_err(store_error)?
    else {
        return Ok(None);
    };
    let now = state.auth.now();
    let idle = i64::try_from(state.auth.cfg.idle_timeout.as_millis()).unwrap_or(i64::MAX);
    if now >= s.expires_at || now.saturating_sub(s.last_seen_at) >= idle {
        store
            .revoke_session(&s.user_id, &s.id, now)
            .await
            .map_err(store_error)?;
        let _ = store
            .audit(
                SYSTEM_AUDIT,
                AuditRecord::system("session.expired", None)
                    .with_actor(airlock_audit::chain::Actor::Human(s.user_id.clone()))
                    .with_metadata(serde_json::json!({"session": s.id})),
            )
            .await;
        return Ok(None);
    }
    Ok(Some(s))
}

/// Checks the CSRF token of a cookie-authenticated, state-changing request.
pub fn check_csrf(method: &Method, headers: &HeaderMap, s: &SessionRecord) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let given = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ok = !given.is_empty()
        && keys::ct_eq(keys::token_hash(given).as_bytes(), s.csrf_hash.as_bytes());
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_failed",
            "missing or wrong X-CSRF-Token for a cookie-authenticated request",
        ))
    }
}

async fn principal_from_key(state: &AppState, token: &str) -> Result<Principal, ApiError> {
    if !keys::api_key_checksum_ok(token) {
        return Err(unauthenticated());
    }
    let store = state.service.store();
    let Some(k) = store
        .api_key_by_hash(&keys::token_hash(token))
        .await
        .map_err(store_error)?
    else {
        return Err(unauthenticated());
    };
    let now = state.auth.now();
    let refused = if k.revoked_at.is_some() {
        Some("revoked")
    } else if k.expires_at.is_some_and(|e| now >= e) {
        Some("expired")
    } else {
        None
    };
    if let Some(reason) = refused {
        let _ = store
            .audit(
                &k.workspace_id,
                AuditRecord::system("api_key.refused", None)
                    .with_actor(airlock_audit::chain::Actor::Human(k.user_id.clone()))
                    .with_result(reason)
                    .with_metadata(serde_json::json!({"key": k.id})),
            )
            .await;
        return Err(unauthenticated());
    }
    let Some(user) = store.user_by_id(&k.user_id).await.map_err(store_error)? else {
        return Err(unauthenticated());
    };
    if user.disabled {
        return Err(unauthenticated());
    }
    // Last use is kept to the minute: a write per request would make every
    // authenticated read a database write.
    if k.last_used_at
        .is_none_or(|t| now.saturating_sub(t) >= 60_000)
    {
        store.touch_api_key(&k.id, now).await.map_err(store_error)?;
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

/// Authenticates a request. `allow_pending` admits a session that still
/// owes its second factor (only the MFA step and logout take that).
pub async fn authenticate(
    state: &AppState,
    parts: &Parts,
    allow_pending: bool,
) -> Result<(Principal, Option<SessionRecord>), ApiError> {
    let (p, s) = authenticate_inner(state, parts, allow_pending).await?;
    // API-4: the identity's own bucket, per route class.
    let identity = match &p.via {
        Via::ApiKey { id, .. } | Via::Session { id } => id.as_str(),
    };
    if let Err(wait) = state.limits.check_identity(identity, &parts.method) {
        return Err(ApiError::too_many(
            "rate_limited",
            "too many requests for this key or session",
            wait,
        ));
    }
    Ok((p, s))
}

async fn authenticate_inner(
    state: &AppState,
    parts: &Parts,
    allow_pending: bool,
) -> Result<(Principal, Option<SessionRecord>), ApiError> {
    if let Some(token) = bearer(&parts.headers)? {
        return Ok((principal_from_key(state, &token).await?, None));
    }
    let Some(token) = session_token(&state.auth, &parts.headers) else {
        return Err(unauthenticated());
    };
    let Some(s) = live_session(state, &token).await? else {
        return Err(unauthenticated());
    };
    if s.mfa_pending && !allow_pending {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "mfa_required",
            "complete the second factor first",
        ));
    }
    check_csrf(&parts.method, &parts.headers, &s)?;
    let store = state.service.store();
    let now = state.auth.now();
    if now.saturating_sub(s.last_seen_at) >= 1000 {
        store.touch_session(&s.id, now).await.map_err(store_error)?;
    }
    let Some(user) = store.user_by_id(&s.user_id).await.map_err(store_error)? else {
        return Err(unauthenticated());
    };
    if user.disabled {
        return Err(unauthenticated());
    }
    Ok((
        Principal {
            user,
            via: Via::Session { id: s.id.clone() },
        },
        Some(s),
    ))
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(authenticate(state, parts, false).await?.0)
    }
}

/// A session that may still owe its second factor.
#[derive(Debug, Clone)]
pub struct AnySession {
    pub user: User,
    pub session: SessionRecord,
}

impl FromRequestParts<AppState> for AnySession {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let (p, s) = authenticate(state, parts, true).await?;
        match s {
            Some(session) => Ok(AnySession {
                user: p.user,
                session,
            }),
            None => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "session_required",
                "this route needs a signed-in session, not an API key",
            )),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = Principal::from_request_parts(parts, state).await?;
        let asked = match parts.headers.get(WORKSPACE_HEADER) {
            Some(v) => Some(v.to_str().map_err(|_| ApiError::not_found())?.to_string()),
            None => None,
        };
        let store = state.service.store();
        let (workspace, key_scopes) = match &principal.via {
            Via::ApiKey {
                workspace, scopes, ..
            } => {
                // A key acts in its own workspace only.
                if asked.as_deref().is_some_and(|a| a != workspace) {
                    return Err(ApiError::not_found());
                }
                (workspace.clone(), Some(scopes.clone()))
            }
            Via::Session { .. } => match asked {
                Some(w) => (w, None),
                None => {
                    let first = store
                        .memberships_of(&principal.user.id)
                        .await
                        .map_err(store_error)?
                        .into_iter()
                        .next()
                        .ok_or_else(|| {
                            ApiError::new(
                                StatusCode::FORBIDDEN,
                                "no_workspace",
                                "you are not a member of any workspace",
                            )
                        })?;
                    (first.workspace_id, None)
                }
            },
        };
        // Membership is read on every request: removing a member or
        // changing a role takes effect at once, for keys as well.
        let Some(m) = store
            .membership(&workspace, &principal.user.id)
            .await
            .map_err(store_error)?
        else {
            return Err(match key_scopes {
                Some(_) => unauthenticated(),
                None => ApiError::not_found(),
            });
        };
        let role = Role::parse(&m.role).ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "bad role")
        })?;
        let mut perms = role.permissions();
        if let Some(scopes) = key_scopes {
            perms = perms.intersection(&scopes).copied().collect();
        }
        Ok(Caller {
            principal,
            workspace,
            role,
            perms,
        })
    }
}
