//! Identity routes (IAM-1 … IAM-7): bootstrap, login and sessions, TOTP,
//! password reset, API keys, workspaces and members. Failures that could
//! tell an attacker whether an account exists all look the same.

use std::collections::BTreeSet;
use std::time::Duration;

use airlock_iam::{Permission, Role, keys, password, totp};
use airlock_store::{AuditRecord, DEFAULT_WORKSPACE, Membership, StoreError};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use zeroize::Zeroizing;

use crate::auth::{
    AnySession, Caller, IDENTITY_VAULT, Principal, SYSTEM_AUDIT, Via, session_token,
};
use crate::{ApiError, AppState};

type JsonBody<T> = Result<Json<T>, JsonRejection>;

fn body<T>(b: JsonBody<T>) -> Result<T, ApiError> {
    b.map(|Json(v)| v).map_err(ApiError::from)
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", msg)
}

fn login_failed() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "login_failed",
        "invalid username, password or code",
    )
}

fn throttled(retry_after_ms: i64) -> Response {
    let secs = (retry_after_ms.max(0) + 999) / 1000;
    let mut r = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many attempts; retry later",
    )
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

fn human(id: &str) -> airlock_audit::chain::Actor {
    airlock_audit::chain::Actor::Human(id.to_string())
}

/// Records an identity event. A refusal that cannot be audited is not
/// answered as a refusal: the caller gets the generic 500 (the same for
/// every account, so it reveals nothing).
async fn audit(s: &AppState, workspace: &str, rec: AuditRecord) -> Result<(), ApiError> {
    s.service.store().audit(workspace, rec).await?;
    Ok(())
}

/// Request metadata the login routes record.
#[derive(Debug, Clone)]
pub struct ClientMeta {
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub old_token: Option<String>,
}

impl FromRequestParts<AppState> for ClientMeta {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        Ok(ClientMeta {
            ip: s.auth.client_ip(parts).map(|i| i.to_string()),
            user_agent: parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.chars().take(200).collect()),
            old_token: session_token(&s.auth, &parts.headers),
        })
    }
}

impl ClientMeta {
    fn client_key(&self) -> String {
        format!("ip:{}", self.ip.as_deref().unwrap_or("unknown"))
    }
}

// ------------------------------------------------------------ password work

/// At most two Argon2id computations (19 MiB, ~25 ms each) at a time, on
/// the blocking pool: a flood of logins queues here instead of stalling
/// the async workers that serve every other request.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}

async fn verify_off_runtime(phc: Option<String>, pw: String) -> Result<bool, ApiError> {
    let _permit = HASHING.acquire().await.map_err(internal)?;
    tokio::task::spawn_blocking(move || password::verify_password(phc.as_deref(), &pw))
        .await
        .map_err(internal)
}

async fn hash_off_runtime(pw: String) -> Result<String, ApiError> {
    let _permit = HASHING.acquire().await.map_err(internal)?;
    tokio::task::spawn_blocking(move || password::hash_password(&pw))
        .await
        .map_err(internal)?
        .map_err(internal)
}

// ---------------------------------------------------------------- bootstrap

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BootstrapBody {
    token: String,
    username: String,
    password: String,
    #[serde(default)]
    workspace_name: Option<String>,
}

/// IAM-1: creates the first owner with the one-time capability, once.
#[utoipa::path(post, path = "/v1/bootstrap", tag = "identity", request_body = BootstrapBody, responses((status = 201, description = "the first owner", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)), security(()))]
pub async fn bootstrap(
    State(s): State<AppState>,
    meta: ClientMeta,
    b: JsonBody<BootstrapBody>,
) -> Result<Response, ApiError> {
    let b = body(b)?;
    let now = s.auth.now();
    if let Err(retry) = s.auth.clients.check(&meta.client_key(), now) {
        return Ok(throttled(retry));
    }
    let username = password::normalize_username(&b.username).map_err(|e| invalid(e.to_string()))?;
    password::validate_new_password(&b.password).map_err(|e| invalid(e.to_string()))?;
    let ws_name = b.workspace_name.unwrap_or_else(|| "default".into());
    if ws_name.is_empty() || ws_name.len() > 100 || ws_name.chars().any(char::is_control) {
        return Err(invalid(
            "workspace_name must be 1 to 100 printable characters",
        ));
    }
    let hash = hash_off_runtime(b.password.clone()).await?;
    let claimed = s
        .service
        .store()
        .bootstrap_claim(
            &keys::token_hash(&b.token),
            &username,
            &hash,
            DEFAULT_WORKSPACE,
            &ws_name,
            now,
        )
        .await?;
    let Some(user) = claimed else {
        s.auth.clients.failure(&meta.client_key(), now);
        audit(
            &s,
            SYSTEM_AUDIT,
            AuditRecord::system("bootstrap.refused", None)
                .with_metadata(json!({"client_ip": meta.ip})),
        )
        .await?;
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "bootstrap_refused",
            "bootstrap is closed or the capability is wrong",
        ));
    };
    if let Some(path) = &s.bootstrap_file {
        let _ = std::fs::remove_file(path);
    }
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("bootstrap.completed", None).with_actor(human(&user.id)),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"user": user, "workspace_id": DEFAULT_WORKSPACE})),
    )
        .into_response())
}

// ------------------------------------------------------------------ sessions

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    username: String,
    password: String,
}

/// Issues a session: a fresh token and CSRF token, the cookie, and the
/// CSRF token in the body. Any token the client arrived with is revoked
/// (no fixation).
async fn issue_session(
    s: &AppState,
    user_id: &str,
    mfa_pending: bool,
    meta: &ClientMeta,
    status: StatusCode,
) -> Result<Response, ApiError> {
    let store = s.service.store();
    let now = s.auth.now();
    if let Some(old) = &meta.old_token
        && let Some(prev) = store.session_by_token_hash(&keys::token_hash(old)).await?
    {
        store.revoke_session(&prev.user_id, &prev.id, now).await?;
    }
    let token = keys::new_token();
    let csrf = keys::new_token();
    let abs = i64::try_from(s.auth.cfg.absolute_timeout.as_millis()).unwrap_or(i64::MAX);
    let rec = store
        .create_session(
            user_id,
            &keys::token_hash(&token),
            &keys::token_hash(&csrf),
            mfa_pending,
            meta.user_agent.as_deref(),
            meta.ip.as_deref(),
            now,
            // A session that still owes its second factor lives minutes.
            now.saturating_add(if mfa_pending { abs.min(600_000) } else { abs }),
        )
        .await?;
    let mut r = (
        status,
        Json(json!({
            "session": rec,
            "csrf_token": csrf,
            "mfa_required": mfa_pending,
        })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&s.auth.session_cookie(&token)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(r)
}

/// IAM-2: one generic failure, the same Argon2 work whether or not the
/// account exists, throttled per account name and per client.
#[utoipa::path(post, path = "/v1/session", tag = "identity", request_body = LoginBody, responses((status = 201, description = "a session cookie and CSRF token", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)), security(()))]
pub async fn login(
    State(s): State<AppState>,
    meta: ClientMeta,
    b: JsonBody<LoginBody>,
) -> Result<Response, ApiError> {
    // Malformed attempts are refused before any lookup, and audited.
    let refused = match body(b) {
        Err(e) => Err(e),
        Ok(b) if b.password.len() > password::MAX_PASSWORD_BYTES => {
            Err(invalid("password too long"))
        }
        Ok(b) if b.username.len() > password::MAX_USERNAME_BYTES * 4 => {
            Err(invalid("username too long"))
        }
        Ok(b) => Ok(b),
    };
    let b = match refused {
        Ok(b) => b,
        Err(e) => {
            audit(
                &s,
                SYSTEM_AUDIT,
                AuditRecord::system("login.bad_request", None)
                    .with_metadata(json!({"client_ip": meta.ip})),
            )
            .await?;
            return Err(e);
        }
    };
    let now = s.auth.now();
    // Unknown and malformed names are throttled like real ones.
    let name = password::normalize_username(&b.username).ok();
    let account_key = format!("acct:{}", name.as_deref().unwrap_or(&b.username));
    let client_key = meta.client_key();
    let retry = [
        s.auth.accounts.check(&account_key, now),
        s.auth.clients.check(&client_key, now),
    ]
    .into_iter()
    .filter_map(Result::err)
    .max();
    if let Some(retry) = retry {
        audit(
            &s,
            SYSTEM_AUDIT,
            AuditRecord::system("login.throttled", None)
                .with_metadata(json!({"username": name, "client_ip": meta.ip})),
        )
        .await?;
        return Ok(throttled(retry));
    }
    let store = s.service.store();
    let user = match &name {
        Some(n) => store.user_by_name(n).await?,
        None => None,
    };
    let ok = verify_off_runtime(
        user.as_ref().and_then(|u| u.password_hash.clone()),
        b.password.clone(),
    )
    .await?;
    let user = match user {
        Some(u) if ok && !u.disabled => u,
        _ => {
            s.auth.accounts.failure(&account_key, now);
            s.auth.clients.failure(&client_key, now);
            audit(
                &s,
                SYSTEM_AUDIT,
                AuditRecord::system("login.failed", None)
                    .with_metadata(json!({"username": name, "client_ip": meta.ip})),
            )
            .await?;
            return Err(login_failed());
        }
    };
    s.auth.accounts.success(&account_key);
    let mfa = store
        .mfa(&user.id)
        .await?
        .is_some_and(|m| m.confirmed_at.is_some());
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system(
            if mfa {
                "login.password_ok"
            } else {
                "login.succeeded"
            },
            None,
        )
        .with_actor(human(&user.id))
        .with_metadata(json!({"client_ip": meta.ip})),
    )
    .await?;
    issue_session(&s, &user.id, mfa, &meta, StatusCode::CREATED).await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MfaBody {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    recovery_code: Option<String>,
}

/// The second factor: a TOTP code (each step once) or a recovery code
/// (each once). Success rotates the session.
#[utoipa::path(post, path = "/v1/session/mfa", tag = "identity", request_body = MfaBody, responses((status = 200, description = "the rotated, full session", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn login_mfa(
    State(s): State<AppState>,
    sess: AnySession,
    meta: ClientMeta,
    b: JsonBody<MfaBody>,
) -> Result<Response, ApiError> {
    let b = body(b)?;
    if !sess.session.mfa_pending {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "mfa_not_pending",
            "this session has no second factor outstanding",
        ));
    }
    let now = s.auth.now();
    let key = format!("mfa:{}", sess.user.id);
    if let Err(retry) = s.auth.accounts.check(&key, now) {
        return Ok(throttled(retry));
    }
    let ok = match (&b.code, &b.recovery_code) {
        (Some(code), None) => verify_totp(&s, &sess.user.id, code, now).await?,
        (None, Some(rc)) => {
            let h = keys::token_hash(&keys::normalize_recovery_code(rc));
            s.service
                .store()
                .use_recovery_code(&sess.user.id, &h, now)
                .await?
        }
        _ => return Err(invalid("give exactly one of code, recovery_code")),
    };
    if !ok {
        s.auth.accounts.failure(&key, now);
        audit(
            &s,
            SYSTEM_AUDIT,
            AuditRecord::system("login.mfa_failed", None).with_actor(human(&sess.user.id)),
        )
        .await?;
        return Err(login_failed());
    }
    s.auth.accounts.success(&key);
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("login.succeeded", None)
            .with_actor(human(&sess.user.id))
            .with_metadata(json!({"mfa": if b.code.is_some() { "totp" } else { "recovery_code" }})),
    )
    .await?;
    // Rotation at step-up: the pending token dies, a new one is issued.
    let meta = ClientMeta {
        old_token: meta.old_token,
        ..meta
    };
    issue_session(&s, &sess.user.id, false, &meta, StatusCode::OK).await
}

fn totp_secret_name(user_id: &str) -> String {
    format!("TOTP_{}", user_id.to_uppercase())
}

/// The user's TOTP secret, out of the vault for one verification; wiped when
/// dropped.
async fn totp_secret(s: &AppState, user_id: &str) -> Result<Zeroizing<Vec<u8>>, ApiError> {
    let (_, v) = s
        .service
        .secrets()
        .read_for_run(IDENTITY_VAULT, &totp_secret_name(user_id), "mfa")
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let text = airlock_service::secrets::bytes(&v);
    std::str::from_utf8(&text)
        .ok()
        .and_then(totp::base32_decode)
        .map(Zeroizing::new)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "stored TOTP secret is corrupt",
            )
        })
}

async fn verify_totp(s: &AppState, user_id: &str, code: &str, now: i64) -> Result<bool, ApiError> {
    let store = s.service.store();
    let Some(m) = store.mfa(user_id).await? else {
        return Ok(false);
    };
    if m.confirmed_at.is_none() {
        return Ok(false);
    }
    let secret = totp_secret(s, user_id).await?;
    let unix_s = u64::try_from(now / 1000).unwrap_or(0);
    let Some(step) = totp::verify(&secret, code, unix_s, m.last_step) else {
        return Ok(false);
    };
    // The compare-and-set makes a step usable once even under a race.
    Ok(store.mfa_use_step(user_id, step).await?)
}

/// The signed-in user, their workspaces and (for the browser) a CSRF token
/// is not repeated here: it is only returned at login.
#[utoipa::path(get, path = "/v1/session", tag = "identity", responses((status = 200, description = "the signed-in user and workspaces", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn whoami(
    State(s): State<AppState>,
    p: Principal,
) -> Result<Json<serde_json::Value>, ApiError> {
    let store = s.service.store();
    let workspaces: Vec<Membership> = match &p.via {
        Via::Session { .. } => store.memberships_of(&p.user.id).await?,
        Via::ApiKey { workspace, .. } => store
            .membership(workspace, &p.user.id)
            .await?
            .into_iter()
            .collect(),
    };
    let mfa = store
        .mfa(&p.user.id)
        .await?
        .is_some_and(|m| m.confirmed_at.is_some());
    let via = match &p.via {
        Via::Session { id } => json!({"session": id}),
        Via::ApiKey { id, .. } => json!({"api_key": id}),
    };
    Ok(Json(json!({
        "user": p.user,
        "mfa_enabled": mfa,
        "via": via,
        "workspaces": workspaces,
    })))
}

/// Logout: the current session ends server-side and the cookie is cleared.
#[utoipa::path(delete, path = "/v1/session", tag = "identity", responses((status = 204, description = "signed out"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn logout(State(s): State<AppState>, sess: AnySession) -> Result<Response, ApiError> {
    let now = s.auth.now();
    s.service
        .store()
        .revoke_session(&sess.user.id, &sess.session.id, now)
        .await?;
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("logout", None).with_actor(human(&sess.user.id)),
    )
    .await?;
    let mut r = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&s.auth.clear_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(r)
}

/// A key acts on its user's sessions only with the `keys.own` scope.
fn may_manage_sessions(p: &Principal) -> Result<(), ApiError> {
    match &p.via {
        Via::ApiKey { scopes, .. } if !scopes.contains(&Permission::KeysOwn) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this key lacks the keys.own scope",
        )),
        _ => Ok(()),
    }
}

fn session_id(p: &Principal) -> Option<&str> {
    match &p.via {
        Via::Session { id } => Some(id),
        Via::ApiKey { .. } => None,
    }
}

#[utoipa::path(get, path = "/v1/sessions", tag = "identity", responses((status = 200, description = "active sessions", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn list_sessions(
    State(s): State<AppState>,
    p: Principal,
) -> Result<Json<serde_json::Value>, ApiError> {
    may_manage_sessions(&p)?;
    let now = s.auth.now();
    let current = session_id(&p);
    let list: Vec<_> = s
        .service
        .store()
        .list_sessions(&p.user.id, now)
        .await?
        .into_iter()
        .filter(|r| !r.mfa_pending)
        .map(|r| {
            let cur = Some(r.id.as_str()) == current;
            let mut v = serde_json::to_value(&r).unwrap_or_default();
            v["current"] = json!(cur);
            v
        })
        .collect();
    Ok(Json(json!({"sessions": list})))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "identity", params(("id" = String, Path, description = "session id")), responses((status = 204, description = "revoked"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn revoke_session(
    State(s): State<AppState>,
    p: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    may_manage_sessions(&p)?;
    let now = s.auth.now();
    if !s
        .service
        .store()
        .revoke_session(&p.user.id, &id, now)
        .await?
    {
        return Err(ApiError::not_found());
    }
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("session.revoked", None)
            .with_actor(human(&p.user.id))
            .with_metadata(json!({"session": id})),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Logout-all: every other session of the user ends (the current one too
/// when called with an API key).
#[utoipa::path(post, path = "/v1/sessions/revoke-all", tag = "identity", responses((status = 200, description = "how many were revoked", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn revoke_all_sessions(
    State(s): State<AppState>,
    p: Principal,
) -> Result<Json<serde_json::Value>, ApiError> {
    may_manage_sessions(&p)?;
    let now = s.auth.now();
    let n = s
        .service
        .store()
        .revoke_sessions_of(&p.user.id, session_id(&p), now)
        .await?;
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("session.revoked_all", None)
            .with_actor(human(&p.user.id))
            .with_metadata(json!({"count": n})),
    )
    .await?;
    Ok(Json(json!({"revoked": n})))
}

// ----------------------------------------------------------------------- MFA

fn session_only(p: &Principal) -> Result<(), ApiError> {
    match p.via {
        Via::Session { .. } => Ok(()),
        Via::ApiKey { .. } => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "session_required",
            "this route needs a signed-in session, not an API key",
        )),
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordBody {
    password: String,
}

/// Starts TOTP enrolment (the current password again): a new secret,
/// sealed in the vault, shown once.
#[utoipa::path(post, path = "/v1/mfa/totp", tag = "identity", request_body = PasswordBody, responses((status = 201, description = "a new TOTP secret, shown once", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn mfa_enrol(
    State(s): State<AppState>,
    p: Principal,
    b: JsonBody<PasswordBody>,
) -> Result<Response, ApiError> {
    session_only(&p)?;
    let b = body(b)?;
    // Re-authentication: a stolen session alone cannot enrol a factor and
    // lock the real user out.
    if !verify_off_runtime(p.user.password_hash.clone(), b.password.clone()).await? {
        audit(
            &s,
            SYSTEM_AUDIT,
            AuditRecord::system("mfa.enrol_refused", None).with_actor(human(&p.user.id)),
        )
        .await?;
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "reauthentication_failed",
            "the password is wrong",
        ));
    }
    let store = s.service.store();
    if store
        .mfa(&p.user.id)
        .await?
        .is_some_and(|m| m.confirmed_at.is_some())
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "mfa_enabled",
            "TOTP is already enabled; an operator reset is needed to change it",
        ));
    }
    let secret = Zeroizing::new(totp::new_secret());
    // Stored as base32 text: the vault holds the secret, the database only
    // ciphertext (IAM-4: secret encrypted at rest).
    s.service
        .secrets()
        .set(
            IDENTITY_VAULT,
            &totp_secret_name(&p.user.id),
            totp::base32_encode(&secret).into_bytes(),
            &p.user.id,
        )
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    store.mfa_begin(&p.user.id, s.auth.now()).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "secret": totp::base32_encode(&secret),
            "otpauth_uri": totp::otpauth_uri("airlock", &p.user.username, &secret),
        })),
    )
        .into_response())
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeBody {
    code: String,
}

/// Confirms enrolment with a first code; returns the ten recovery codes,
/// once.
#[utoipa::path(post, path = "/v1/mfa/totp/confirm", tag = "identity", request_body = CodeBody, responses((status = 200, description = "ten recovery codes, shown once", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn mfa_confirm(
    State(s): State<AppState>,
    p: Principal,
    b: JsonBody<CodeBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    session_only(&p)?;
    let b = body(b)?;
    let store = s.service.store();
    let now = s.auth.now();
    let Some(m) = store.mfa(&p.user.id).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "mfa_not_pending",
            "start enrolment first",
        ));
    };
    if m.confirmed_at.is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "mfa_enabled",
            "TOTP is already enabled",
        ));
    }
    let secret = totp_secret(&s, &p.user.id).await?;
    let unix_s = u64::try_from(now / 1000).unwrap_or(0);
    let Some(step) = totp::verify(&secret, &b.code, unix_s, None) else {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_code",
            "that code is not valid now",
        ));
    };
    let codes = keys::new_recovery_codes();
    let hashes: Vec<String> = codes
        .iter()
        .map(|c| keys::token_hash(&keys::normalize_recovery_code(c)))
        .collect();
    if !store.mfa_confirm(&p.user.id, step, &hashes, now).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "mfa_not_pending",
            "start enrolment first",
        ));
    }
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("mfa.enabled", None).with_actor(human(&p.user.id)),
    )
    .await?;
    Ok(Json(json!({"recovery_codes": codes})))
}

// ------------------------------------------------------------ password reset

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetBody {
    token: String,
    new_password: String,
}

/// Consumes a single-use, expiring reset (or invitation) token: sets the
/// password, clears TOTP and ends every session of that user.
#[utoipa::path(post, path = "/v1/password/reset", tag = "identity", request_body = ResetBody, responses((status = 204, description = "password set"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)), security(()))]
pub async fn password_reset(
    State(s): State<AppState>,
    meta: ClientMeta,
    b: JsonBody<ResetBody>,
) -> Result<Response, ApiError> {
    let b = body(b)?;
    let now = s.auth.now();
    if let Err(retry) = s.auth.clients.check(&meta.client_key(), now) {
        return Ok(throttled(retry));
    }
    password::validate_new_password(&b.new_password).map_err(|e| invalid(e.to_string()))?;
    let hash = hash_off_runtime(b.new_password.clone()).await?;
    let store = s.service.store();
    let Some(user_id) = store
        .consume_reset_token(&keys::token_hash(&b.token), now)
        .await?
    else {
        s.auth.clients.failure(&meta.client_key(), now);
        audit(
            &s,
            SYSTEM_AUDIT,
            AuditRecord::system("password.reset_refused", None)
                .with_metadata(json!({"client_ip": meta.ip})),
        )
        .await?;
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "reset_refused",
            "the reset token is unknown, used or expired",
        ));
    };
    store.set_password(&user_id, &hash).await?;
    store.mfa_remove(&user_id).await?;
    store.revoke_sessions_of(&user_id, None, now).await?;
    // After a compromise the attacker's keys must die with the password.
    store.revoke_api_keys_of(&user_id, now).await?;
    audit(
        &s,
        SYSTEM_AUDIT,
        AuditRecord::system("password.reset", None).with_actor(human(&user_id)),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ------------------------------------------------------------------ API keys

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    name: String,
    #[serde(default)]
    scopes: Option<Vec<String>>,
    #[serde(default)]
    expires_in_s: Option<u64>,
}

const MAX_KEY_LIFETIME: Duration = Duration::from_secs(366 * 86_400);
const DEFAULT_KEY_LIFETIME: Duration = Duration::from_secs(90 * 86_400);

/// IAM-5: a key is minted by a signed-in user, scoped to at most what that
/// user holds now, and shown once.
#[utoipa::path(post, path = "/v1/keys", tag = "identity", request_body = KeyBody, responses((status = 201, description = "the key, shown once", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn create_key(
    State(s): State<AppState>,
    c: Caller,
    b: JsonBody<KeyBody>,
) -> Result<Response, ApiError> {
    c.require(Permission::KeysOwn)?;
    session_only(&c.principal)?;
    let b = body(b)?;
    let name = b.name.trim();
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(invalid("name must be 1 to 64 printable characters"));
    }
    let scopes: BTreeSet<Permission> = match b.scopes {
        None => c.perms.clone(),
        Some(list) => {
            let mut set = BTreeSet::new();
            for s in list {
                let p = Permission::parse(&s)
                    .ok_or_else(|| invalid(format!("unknown permission {s:?}")))?;
                set.insert(p);
            }
            set
        }
    };
    if let Some(p) = scopes.iter().find(|p| !c.perms.contains(p)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("you do not hold {} and cannot give it to a key", p.as_str()),
        ));
    }
    let life = b
        .expires_in_s
        .map_or(DEFAULT_KEY_LIFETIME, Duration::from_secs);
    if life.is_zero() || life > MAX_KEY_LIFETIME {
        return Err(invalid("expires_in_s must be between 1 and 31622400"));
    }
    let now = s.auth.now();
    let expires_at = now.saturating_add(i64::try_from(life.as_millis()).unwrap_or(i64::MAX));
    let key = keys::new_api_key();
    let scope_names: Vec<String> = scopes.iter().map(|p| p.as_str().to_string()).collect();
    let rec = s
        .service
        .store()
        .create_api_key(
            &c.workspace,
            c.actor(),
            name,
            &keys::api_key_display_prefix(&key),
            &keys::token_hash(&key),
            &scope_names,
            Some(expires_at),
            now,
            AuditRecord::system("api_key.created", None)
                .with_actor(c.audit_actor())
                .with_metadata(json!({"name": name, "scopes": scope_names})),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"key": key, "api_key": rec})),
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/keys", tag = "identity", responses((status = 200, description = "your keys in this workspace", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn list_keys(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::KeysOwn)?;
    let list = s
        .service
        .store()
        .list_api_keys(&c.workspace, c.actor())
        .await?;
    Ok(Json(json!({"api_keys": list})))
}

#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "identity", params(("id" = String, Path, description = "key id")), responses((status = 204, description = "revoked"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn revoke_key(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.require(Permission::KeysOwn)?;
    let now = s.auth.now();
    let done = s
        .service
        .store()
        .revoke_api_key(
            &c.workspace,
            c.actor(),
            &id,
            now,
            AuditRecord::system("api_key.revoked", None)
                .with_actor(c.audit_actor())
                .with_metadata(json!({"key": id})),
        )
        .await?;
    if done {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}

// --------------------------------------------------------- workspaces, members

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceBody {
    name: String,
}

/// A new workspace, owned by the signed-in user who creates it.
#[utoipa::path(post, path = "/v1/workspaces", tag = "identity", request_body = WorkspaceBody, responses((status = 201, description = "the new workspace", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn create_workspace(
    State(s): State<AppState>,
    p: Principal,
    b: JsonBody<WorkspaceBody>,
) -> Result<Response, ApiError> {
    session_only(&p)?;
    let b = body(b)?;
    let name = b.name.trim();
    if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(invalid("name must be 1 to 100 printable characters"));
    }
    let id = s
        .service
        .store()
        .create_workspace(name, &p.user.id, s.auth.now())
        .await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id, "name": name}))).into_response())
}

#[utoipa::path(get, path = "/v1/workspaces", tag = "identity", responses((status = 200, description = "your workspaces", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn list_workspaces(
    State(s): State<AppState>,
    p: Principal,
) -> Result<Json<serde_json::Value>, ApiError> {
    let list: Vec<Membership> = match &p.via {
        Via::Session { .. } => s.service.store().memberships_of(&p.user.id).await?,
        Via::ApiKey { workspace, .. } => s
            .service
            .store()
            .membership(workspace, &p.user.id)
            .await?
            .into_iter()
            .collect(),
    };
    Ok(Json(json!({"workspaces": list})))
}

#[utoipa::path(get, path = "/v1/members", tag = "identity", responses((status = 200, description = "members", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn list_members(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersRead)?;
    let list = s.service.store().list_members(&c.workspace).await?;
    Ok(Json(json!({"members": list})))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberBody {
    role: String,
}

/// The caller may hand out a role only if they hold every permission in it
/// (IAM-7), and may change or remove only members whose role they could
/// have granted.
fn may_grant(c: &Caller, role: Role) -> Result<(), ApiError> {
    if role.permissions().is_subset(&c.perms) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the {} role holds permissions you lack", role.as_str()),
        ))
    }
}

async fn not_last_owner(
    s: &AppState,
    ws: &str,
    old: Role,
    new: Option<Role>,
) -> Result<(), ApiError> {
    if old == Role::Owner && new != Some(Role::Owner) {
        let owners = s
            .service
            .store()
            .count_role(ws, Role::Owner.as_str())
            .await?;
        if owners <= 1 {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "last_owner",
                "a workspace keeps at least one owner",
            ));
        }
    }
    Ok(())
}

/// Adds a member or changes a role. An unknown username becomes an
/// account without a password plus a single-use set-password token,
/// returned once, for the administrator to hand over.
#[utoipa::path(put, path = "/v1/members/{username}", tag = "identity", params(("username" = String, Path, description = "username")), request_body = MemberBody, responses((status = 200, description = "role changed (201: added)", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn put_member(
    State(s): State<AppState>,
    c: Caller,
    Path(username): Path<String>,
    b: JsonBody<MemberBody>,
) -> Result<Response, ApiError> {
    c.require(Permission::MembersManage)?;
    let b = body(b)?;
    let role = Role::parse(&b.role).ok_or_else(|| invalid(format!("unknown role {:?}", b.role)))?;
    may_grant(&c, role)?;
    let username = password::normalize_username(&username).map_err(|e| invalid(e.to_string()))?;
    let store = s.service.store();
    let now = s.auth.now();
    let (user, setup_token) = match store.user_by_name(&username).await? {
        Some(u) => (u, None),
        None => {
            // Accounts are instance-wide, so only the instance's
            // administrators (members.manage in the workspace created at
            // bootstrap) create them. Otherwise the owner of any workspace
            // could create "carol", set her password with the setup token,
            // and wait for the real owner to add "carol" elsewhere.
            if c.workspace != s.service.config().workers_workspace {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "no_such_user",
                    "no such user; accounts are created by the instance's administrators",
                ));
            }
            let u = match store.create_user(&username, None, now).await {
                Ok(u) => u,
                Err(StoreError::Conflict) => {
                    // Lost a race with another invitation: the account
                    // exists now and is not this caller's to set up.
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "conflict",
                        "that account was just created; retry",
                    ));
                }
                Err(e) => return Err(e.into()),
            };
            let token = keys::new_prefixed_token("alr");
            let ttl = i64::try_from(s.auth.cfg.invite_ttl.as_millis()).unwrap_or(i64::MAX);
            store
                .create_reset_token(
                    &u.id,
                    &keys::token_hash(&token),
                    now,
                    now.saturating_add(ttl),
                )
                .await?;
            (u, Some(token))
        }
    };
    let existing = store.membership(&c.workspace, &user.id).await?;
    if let Some(m) = &existing {
        let old = Role::parse(&m.role).unwrap_or(Role::Owner);
        may_grant(&c, old)?;
        not_last_owner(&s, &c.workspace, old, Some(role)).await?;
    }
    store
        .set_member(
            &c.workspace,
            &user.id,
            role.as_str(),
            now,
            AuditRecord::system(
                if existing.is_some() {
                    "member.role_changed"
                } else {
                    "member.added"
                },
                None,
            )
            .with_actor(c.audit_actor())
            .with_metadata(json!({
                "user": user.id,
                "role": role.as_str(),
                "previous": existing.as_ref().map(|m| m.role.clone()),
            })),
        )
        .await?;
    let status = if existing.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(json!({
            "member": {"user_id": user.id, "username": user.username, "role": role.as_str()},
            "setup_token": setup_token,
        })),
    )
        .into_response())
}

#[utoipa::path(delete, path = "/v1/members/{username}", tag = "identity", params(("username" = String, Path, description = "username")), responses((status = 204, description = "removed"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn delete_member(
    State(s): State<AppState>,
    c: Caller,
    Path(username): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.require(Permission::MembersManage)?;
    let store = s.service.store();
    let Ok(username) = password::normalize_username(&username) else {
        return Err(ApiError::not_found());
    };
    let Some(user) = store.user_by_name(&username).await? else {
        return Err(ApiError::not_found());
    };
    let Some(m) = store.membership(&c.workspace, &user.id).await? else {
        return Err(ApiError::not_found());
    };
    let old = Role::parse(&m.role).unwrap_or(Role::Owner);
    may_grant(&c, old)?;
    not_last_owner(&s, &c.workspace, old, None).await?;
    let now = s.auth.now();
    store
        .remove_member(
            &c.workspace,
            &user.id,
            now,
            AuditRecord::system("member.removed", None)
                .with_actor(c.audit_actor())
                .with_metadata(json!({"user": user.id, "role": m.role})),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// --------------------------------------------------------------------- audit

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Events after this sequence number (the previous page's `next_cursor`).
    after: Option<i64>,
    /// Page size, 1 to 500 (default 100).
    limit: Option<i64>,
}

/// The workspace's audit events (AUD-1), a page at a time in sequence
/// order; `GET /v1/audit/verify` checks the whole chain.
#[utoipa::path(get, path = "/v1/audit", tag = "audit", params(AuditQuery), responses((status = 200, description = "a page of audit events and the cursor of the next", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn list_audit(
    State(s): State<AppState>,
    c: Caller,
    q: Result<axum::extract::Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::AuditRead)?;
    let axum::extract::Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            "limit must be between 1 and 500",
        ));
    }
    let after = q.after.unwrap_or(0).max(0);
    let lines = s
        .service
        .store()
        .audit_page(&c.workspace, after, limit)
        .await?;
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_default())
        .collect();
    let next = if i64::try_from(events.len()).unwrap_or(0) == limit {
        events.last().and_then(|e| e["seq"].as_i64())
    } else {
        None
    };
    Ok(Json(json!({"events": events, "next_cursor": next})))
}
