//! Identity routes (IAM-1 … IAM-7): bootstrap, sign-in and sessions, the
//! second factor, password reset, API keys, workspaces, members and roles.
//! Each parses, calls one service method, and sets or clears the session
//! cookie where a session begins or ends.

use airlock_protocol::ErrorBody;
use airlock_protocol::identity::{
    Bootstrap, Bootstrapped, CreateKey, CreateWorkspace, KeyCreated, KeyList, Login, MemberChanged,
    MemberList, PasswordReset, PutMember, Reauthenticate, RecoveryCodes, Revoked, RoleList,
    SecondFactor, SessionIssued, SessionList, TotpCode, TotpEnrolment, WhoAmI, WorkspaceCreated,
    WorkspaceList,
};
use airlock_service::IssuedSession;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Client, InWorkspace, PendingSession, SignedIn};
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(bootstrap))
        .routes(routes!(login, whoami, logout))
        .routes(routes!(login_mfa))
        .routes(routes!(list_sessions))
        .routes(routes!(revoke_all_sessions))
        .routes(routes!(revoke_session))
        .routes(routes!(mfa_enrol))
        .routes(routes!(mfa_confirm))
        .routes(routes!(password_reset))
        .routes(routes!(list_keys, create_key))
        .routes(routes!(revoke_key))
        .routes(routes!(list_workspaces, create_workspace))
        .routes(routes!(list_members))
        .routes(routes!(put_member, delete_member))
        .routes(routes!(list_roles))
}

/// The answer that starts a session: its cookie and the CSRF token.
fn with_cookie(s: &AppState, status: StatusCode, issued: IssuedSession) -> Response {
    let csrf = s.http.csrf_cookie(&issued.body.csrf_token);
    let mut r = (status, Json(issued.body)).into_response();
    for c in [s.http.session_cookie(&issued.token), csrf] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

/// IAM-1: creates the first owner with the one-time capability, once.
#[utoipa::path(post, path = "/v1/bootstrap", tag = "identity", request_body = Bootstrap, responses((status = 201, description = "the first owner", body = Bootstrapped), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)), security(()))]
pub async fn bootstrap(
    State(s): State<AppState>,
    Client(client): Client,
    b: JsonBody<Bootstrap>,
) -> Result<(StatusCode, Json<Bootstrapped>), ApiError> {
    let b = body(b)?;
    Ok((
        StatusCode::CREATED,
        Json(s.service.bootstrap(&client, &b).await?),
    ))
}

/// IAM-2: one generic failure, the same Argon2 work whether or not the
/// account exists, throttled per account name and per client.
#[utoipa::path(post, path = "/v1/session", tag = "identity", request_body = Login, responses((status = 201, description = "a session cookie and CSRF token", body = SessionIssued), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)), security(()))]
pub async fn login(
    State(s): State<AppState>,
    Client(client): Client,
    b: JsonBody<Login>,
) -> Result<Response, ApiError> {
    let b = match body(b) {
        Ok(b) => b,
        Err(e) => {
            // A login the server could not even read is audited too.
            s.service.login_bad_request(&client).await?;
            return Err(e);
        }
    };
    let issued = s.service.login(&client, &b).await?;
    Ok(with_cookie(&s, StatusCode::CREATED, issued))
}

/// The second factor: a TOTP code or a recovery code. Success rotates the
/// session.
#[utoipa::path(post, path = "/v1/session/mfa", tag = "identity", request_body = SecondFactor, responses((status = 200, description = "the rotated, full session", body = SessionIssued), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn login_mfa(
    State(s): State<AppState>,
    PendingSession(p): PendingSession,
    Client(client): Client,
    b: JsonBody<SecondFactor>,
) -> Result<Response, ApiError> {
    let b = body(b)?;
    let issued = s.service.login_mfa(&p, &client, &b).await?;
    Ok(with_cookie(&s, StatusCode::OK, issued))
}

/// The signed-in user and their workspaces. The CSRF token is only ever
/// returned at login.
#[utoipa::path(get, path = "/v1/session", tag = "identity", responses((status = 200, description = "the signed-in user and workspaces", body = WhoAmI), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn whoami(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
) -> Result<Json<WhoAmI>, ApiError> {
    Ok(Json(s.service.whoami(&p).await?))
}

/// Logout: the session ends server-side and the cookie is cleared.
#[utoipa::path(delete, path = "/v1/session", tag = "identity", responses((status = 204, description = "signed out"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn logout(
    State(s): State<AppState>,
    PendingSession(p): PendingSession,
) -> Result<Response, ApiError> {
    s.service.logout(&p).await?;
    let mut r = StatusCode::NO_CONTENT.into_response();
    for c in [s.http.clear_cookie(), s.http.clear_csrf_cookie()] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    Ok(r)
}

#[utoipa::path(get, path = "/v1/sessions", tag = "identity", responses((status = 200, description = "active sessions", body = SessionList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn list_sessions(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
) -> Result<Json<SessionList>, ApiError> {
    Ok(Json(s.service.list_sessions(&p).await?))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "identity", params(("id" = String, Path, description = "session id")), responses((status = 204, description = "revoked"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn revoke_session(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.revoke_session(&p, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Logout-all: every other session of the user ends (the current one too
/// when called with an API key).
#[utoipa::path(post, path = "/v1/sessions/revoke-all", tag = "identity", responses((status = 200, description = "how many were revoked", body = Revoked), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn revoke_all_sessions(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
) -> Result<Json<Revoked>, ApiError> {
    Ok(Json(s.service.revoke_all_sessions(&p).await?))
}

/// Starts TOTP enrolment (the current password again): a new secret,
/// shown once.
#[utoipa::path(post, path = "/v1/mfa/totp", tag = "identity", request_body = Reauthenticate, responses((status = 201, description = "a new TOTP secret, shown once", body = TotpEnrolment), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn mfa_enrol(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
    b: JsonBody<Reauthenticate>,
) -> Result<(StatusCode, Json<TotpEnrolment>), ApiError> {
    let b = body(b)?;
    Ok((
        StatusCode::CREATED,
        Json(s.service.mfa_enrol(&p, &b).await?),
    ))
}

/// Confirms enrolment with a first code; returns the ten recovery codes,
/// once.
#[utoipa::path(post, path = "/v1/mfa/totp/confirm", tag = "identity", request_body = TotpCode, responses((status = 200, description = "ten recovery codes, shown once", body = RecoveryCodes), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn mfa_confirm(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
    b: JsonBody<TotpCode>,
) -> Result<Json<RecoveryCodes>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.mfa_confirm(&p, &b).await?))
}

/// Consumes a single-use, expiring reset (or invitation) token: sets the
/// password, clears TOTP and ends every session and key of that user.
#[utoipa::path(post, path = "/v1/password/reset", tag = "identity", request_body = PasswordReset, responses((status = 204, description = "password set"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)), security(()))]
pub async fn password_reset(
    State(s): State<AppState>,
    Client(client): Client,
    b: JsonBody<PasswordReset>,
) -> Result<StatusCode, ApiError> {
    let b = body(b)?;
    s.service.password_reset(&client, &b).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// IAM-5: a key is minted by a signed-in user, scoped to at most what that
/// user holds now, and shown once.
#[utoipa::path(post, path = "/v1/keys", tag = "identity", request_body = CreateKey, responses((status = 201, description = "the key, shown once", body = KeyCreated), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn create_key(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<CreateKey>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let b = body(b)?;
    Ok((
        StatusCode::CREATED,
        Json(s.service.create_key(&c, &b).await?),
    ))
}

#[utoipa::path(get, path = "/v1/keys", tag = "identity", responses((status = 200, description = "your keys in this workspace", body = KeyList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn list_keys(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<KeyList>, ApiError> {
    Ok(Json(s.service.list_keys(&c).await?))
}

#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "identity", params(("id" = String, Path, description = "key id")), responses((status = 204, description = "revoked"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn revoke_key(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.revoke_key(&c, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new workspace, owned by the signed-in user who creates it.
#[utoipa::path(post, path = "/v1/workspaces", tag = "identity", request_body = CreateWorkspace, responses((status = 201, description = "the new workspace", body = WorkspaceCreated), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn create_workspace(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
    b: JsonBody<CreateWorkspace>,
) -> Result<(StatusCode, Json<WorkspaceCreated>), ApiError> {
    let b = body(b)?;
    Ok((
        StatusCode::CREATED,
        Json(s.service.create_workspace(&p, &b.name).await?),
    ))
}

#[utoipa::path(get, path = "/v1/workspaces", tag = "identity", responses((status = 200, description = "your workspaces", body = WorkspaceList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn list_workspaces(
    State(s): State<AppState>,
    SignedIn(p): SignedIn,
) -> Result<Json<WorkspaceList>, ApiError> {
    Ok(Json(s.service.list_workspaces(&p).await?))
}

#[utoipa::path(get, path = "/v1/members", tag = "identity", responses((status = 200, description = "members", body = MemberList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn list_members(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<MemberList>, ApiError> {
    Ok(Json(s.service.list_members(&c).await?))
}

/// Adds a member or changes a role. An unknown username becomes an
/// account with a single-use set-password token, returned once (only in
/// the instance's own workspace).
#[utoipa::path(put, path = "/v1/members/{username}", tag = "identity", params(("username" = String, Path, description = "username (case-insensitive)", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")), request_body = PutMember, responses((status = 200, description = "role changed", body = MemberChanged), (status = 201, description = "added", body = MemberChanged), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn put_member(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(username): Path<String>,
    b: JsonBody<PutMember>,
) -> Result<(StatusCode, Json<MemberChanged>), ApiError> {
    let b = body(b)?;
    let (changed, added) = s.service.put_member(&c, &username, &b).await?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(changed)))
}

#[utoipa::path(delete, path = "/v1/members/{username}", tag = "identity", params(("username" = String, Path, description = "username (case-insensitive)", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")), responses((status = 204, description = "removed"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn delete_member(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(username): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.delete_member(&c, &username).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The role table (IAM-7), from the data the server enforces.
#[utoipa::path(get, path = "/v1/roles", tag = "identity", responses((status = 200, description = "roles and their permissions", body = RoleList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn list_roles(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<RoleList>, ApiError> {
    Ok(Json(s.service.list_roles(&c)?))
}
