//! Who is asking, as HTTP carries it (IAM-3, IAM-5): an API key
//! (`Authorization: Bearer alk_…`) or a session cookie (plus an
//! `X-CSRF-Token` header on anything but GET/HEAD). The extractors here
//! only read headers into a [`Credential`] and hand it to the service,
//! which authenticates it and resolves the workspace and permissions; then
//! the identity's rate-limit bucket is checked (a per-process HTTP limit).
//!
//! Deny by default: a handler that takes none of [`InWorkspace`],
//! [`SignedIn`] or [`PendingSession`] is public, and only health,
//! bootstrap, login, password reset and signed webhooks are.

use std::net::{IpAddr, SocketAddr};

use airlock_protocol::{Error, ErrorCode};
use airlock_service::{Caller, ClientInfo, Credential, Principal};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};

use crate::{ApiError, AppState};

/// Header naming the workspace a session acts in (default: its first).
pub const WORKSPACE_HEADER: &str = "x-airlock-workspace";
pub const CSRF_HEADER: &str = "x-csrf-token";

/// HTTP-only identity settings.
#[derive(Debug, Clone, Default)]
pub struct HttpConfig {
    /// Cookies get `Secure` and the `__Host-` prefix, and responses HSTS:
    /// set when the server is reached over TLS (directly or through a
    /// terminating proxy).
    pub secure_cookies: bool,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpAddr>,
    /// The session cookie's `Max-Age` (the service's absolute timeout).
    pub cookie_max_age: std::time::Duration,
}

impl HttpConfig {
    pub fn cookie_name(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-airlock_session"
        } else {
            "airlock_session"
        }
    }

    fn secure_attr(&self) -> &'static str {
        if self.secure_cookies { "; Secure" } else { "" }
    }

    /// `Set-Cookie` for a new session (IAM-3 attributes).
    pub fn session_cookie(&self, token: &str) -> String {
        format!(
            "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.cookie_name(),
            self.cookie_max_age.as_secs(),
            self.secure_attr()
        )
    }

    /// The name of the cookie that carries a session's CSRF token to the
    /// web interface, which writes it into its forms (UI-2). It is
    /// `HttpOnly` and `SameSite=Strict` like the session cookie: another
    /// site can neither read it nor send it, and the service still checks
    /// the token each form brings against the session's stored hash.
    pub fn csrf_cookie_name(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-airlock_csrf"
        } else {
            "airlock_csrf"
        }
    }

    /// `Set-Cookie` for a new session's CSRF token.
    pub fn csrf_cookie(&self, token: &str) -> String {
        format!(
            "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.csrf_cookie_name(),
            self.cookie_max_age.as_secs(),
            self.secure_attr()
        )
    }

    /// `Set-Cookie` that clears the CSRF cookie.
    pub fn clear_csrf_cookie(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            self.csrf_cookie_name(),
            self.secure_attr()
        )
    }

    /// The CSRF token from its cookie, if any (bounded like the session's).
    pub fn csrf_token(&self, headers: &HeaderMap) -> Option<String> {
        cookie(headers, self.csrf_cookie_name())
    }

    /// `Set-Cookie` that clears the session cookie.
    pub fn clear_cookie(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            self.cookie_name(),
            self.secure_attr()
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
        let trusted = |ip: &IpAddr| self.trusted_proxies.iter().any(|t| t.to_canonical() == *ip);
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

    /// The session token from the cookie header, if any. Garbage is
    /// ignored (it simply authenticates nobody).
    pub fn session_token(&self, headers: &HeaderMap) -> Option<String> {
        cookie(headers, self.cookie_name())
    }
}

/// The value of cookie `want` (at most 128 bytes; garbage reads as none).
pub fn cookie(headers: &HeaderMap, want: &str) -> Option<String> {
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

fn unauthenticated() -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, "sign in or present an API key")
}

/// The credential a request presents: a bearer key wins over a cookie.
fn credential(s: &AppState, parts: &Parts) -> Result<Credential, ApiError> {
    if let Some(v) = parts.headers.get(header::AUTHORIZATION) {
        let v = v.to_str().map_err(|_| unauthenticated())?;
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .ok_or_else(unauthenticated)?;
        return Ok(Credential::ApiKey(token.trim().to_string()));
    }
    let token = s
        .http
        .session_token(&parts.headers)
        .ok_or_else(unauthenticated)?;
    Ok(Credential::Session {
        token,
        csrf: parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        changes_state: !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS),
    })
}

/// Authenticates a request through the service, then applies the
/// identity's own per-process rate-limit bucket (API-4).
async fn authenticate(
    s: &AppState,
    parts: &Parts,
    allow_pending: bool,
) -> Result<Principal, ApiError> {
    let cred = credential(s, parts)?;
    authenticate_credential(s, parts, cred, allow_pending).await
}

/// [`authenticate`] with a credential the caller read (MCP reads only a
/// bearer key; the web interface takes the CSRF token from a form field).
pub async fn authenticate_credential(
    s: &AppState,
    parts: &Parts,
    cred: Credential,
    allow_pending: bool,
) -> Result<Principal, ApiError> {
    let p = s
        .service
        .authenticate(&cred, allow_pending)
        .await?
        .principal;
    if let Err(wait) = s.limits.check_identity(p.credential_id(), &parts.method) {
        return Err(ApiError(Error::limited(
            ErrorCode::RateLimited,
            "too many requests for this key or session",
            wait,
        )));
    }
    Ok(p)
}

/// An authenticated user (a key, or a session that completed its second
/// factor).
#[derive(Debug, Clone)]
pub struct SignedIn(pub Principal);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        Ok(Self(authenticate(s, parts, false).await?))
    }
}

/// A signed-in session that may still owe its second factor (the MFA step
/// and logout take it).
#[derive(Debug, Clone)]
pub struct PendingSession(pub Principal);

impl FromRequestParts<AppState> for PendingSession {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        let p = authenticate(s, parts, true).await?;
        p.require_session()?;
        Ok(Self(p))
    }
}

/// A user acting in a workspace: the one `X-Airlock-Workspace` names, else
/// the key's (or the session's first).
#[derive(Debug, Clone)]
pub struct InWorkspace(pub Caller);

impl FromRequestParts<AppState> for InWorkspace {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        let p = authenticate(s, parts, false).await?;
        Ok(Self(in_workspace(s, parts, p).await?))
    }
}

/// The caller `p` is in the workspace the request names
/// (`X-Airlock-Workspace`), else the key's (or the session's first).
pub(crate) async fn in_workspace(
    s: &AppState,
    parts: &Parts,
    p: Principal,
) -> Result<Caller, ApiError> {
    let asked = match parts.headers.get(WORKSPACE_HEADER) {
        Some(v) => Some(v.to_str().map_err(|_| ApiError::not_found())?.to_string()),
        None => None,
    };
    Ok(s.service.caller(p, asked.as_deref()).await?)
}

/// What the request tells about its client: address, user agent, and the
/// session token it already holds.
#[derive(Debug, Clone)]
pub struct Client(pub ClientInfo);

impl FromRequestParts<AppState> for Client {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        Ok(Self(ClientInfo {
            ip: s.http.client_ip(parts).map(|i| i.to_string()),
            user_agent: parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.chars().take(200).collect()),
            session_token: s.http.session_token(&parts.headers),
        }))
    }
}
