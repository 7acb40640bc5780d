//! The HTTP API (API-1, API-2 subset, API-6 SSE, API-7 health) with
//! identity and access (IAM-1 … IAM-7). A thin front end: every handler
//! parses its request into a service call and renders the outcome.
//!
//! Deny by default: every `/v1` handler except bootstrap, login and
//! password reset takes a [`auth::Caller`] or [`auth::Principal`], so an
//! unauthenticated request never reaches it; each then requires the
//! permission its action needs, and every store call carries the caller's
//! workspace, so another workspace's object is the same 404 as a missing one.

pub mod auth;
pub mod identity;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use airlock_iam::Permission;
use airlock_runs::{CreateRun, Service, ServiceError};
use airlock_store::RunState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{Auth, Caller};

/// Shared state of the router.
#[derive(Clone, Debug)]
pub struct AppState {
    pub service: Arc<Service>,
    pub auth: Arc<Auth>,
    /// Where the bootstrap capability was written (removed once used).
    pub bootstrap_file: Option<std::path::PathBuf>,
}

impl AppState {
    pub fn new(service: Arc<Service>, auth: Auth) -> Self {
        Self {
            service,
            auth: Arc::new(auth),
            bootstrap_file: None,
        }
    }
}

/// The one error shape: `{"error": {"code", "message", "request_id"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }
}

fn request_id() -> String {
    airlock_store::random_id("req")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Never leak internals on 5xx.
        let message = if self.status.is_server_error() {
            "internal error".to_string()
        } else {
            self.message
        };
        let rid = request_id();
        let mut r = (
            self.status,
            Json(json!({"error": {"code": self.code, "message": message, "request_id": rid}})),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&rid) {
            r.headers_mut().insert("x-request-id", v);
        }
        r
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = match &e {
            ServiceError::UnknownWorker(_) | ServiceError::NotFound => StatusCode::NOT_FOUND,
            ServiceError::Input(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ServiceError::Conflict => StatusCode::CONFLICT,
            ServiceError::Plan(_) => StatusCode::CONFLICT,
            ServiceError::Store(airlock_store::StoreError::Conflict) => StatusCode::CONFLICT,
            ServiceError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, e.code(), e.to_string())
    }
}

impl From<airlock_store::StoreError> for ApiError {
    fn from(e: airlock_store::StoreError) -> Self {
        ServiceError::from(e).into()
    }
}

/// Hardening headers on every response, errors included (API-3 subset).
async fn harden(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=(), interest-cohort=()"),
    );
    if !h.contains_key("x-request-id")
        && let Ok(v) = HeaderValue::from_str(&request_id())
    {
        h.insert("x-request-id", v);
    }
    r
}

/// The router; tests call it without a socket.
pub fn app(state: AppState) -> Router {
    let hsts = state.auth.cfg.secure_cookies;
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/v1/bootstrap", post(identity::bootstrap))
        .route(
            "/v1/session",
            post(identity::login)
                .get(identity::whoami)
                .delete(identity::logout),
        )
        .route("/v1/session/mfa", post(identity::login_mfa))
        .route("/v1/sessions", get(identity::list_sessions))
        .route(
            "/v1/sessions/revoke-all",
            post(identity::revoke_all_sessions),
        )
        .route("/v1/sessions/{id}", delete(identity::revoke_session))
        .route("/v1/mfa/totp", post(identity::mfa_enrol))
        .route("/v1/mfa/totp/confirm", post(identity::mfa_confirm))
        .route("/v1/password/reset", post(identity::password_reset))
        .route(
            "/v1/keys",
            get(identity::list_keys).post(identity::create_key),
        )
        .route("/v1/keys/{id}", delete(identity::revoke_key))
        .route(
            "/v1/workspaces",
            get(identity::list_workspaces).post(identity::create_workspace),
        )
        .route("/v1/members", get(identity::list_members))
        .route(
            "/v1/members/{username}",
            put(identity::put_member).delete(identity::delete_member),
        )
        .route("/v1/audit", get(identity::list_audit))
        .route("/v1/workers", get(list_workers))
        .route("/v1/workers/reload", post(reload_workers))
        .route("/v1/workers/{id}/runs", post(create_run))
        .route("/v1/runs", get(list_runs))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/cancel", post(cancel_run))
        .route("/v1/runs/{id}/events", get(run_events))
        .route("/v1/runs/{id}/artifacts/{*name}", get(artifact))
        .route("/v1/plans", post(create_plan))
        .route("/v1/plans/run", post(run_plan))
        .route("/v1/secrets", get(list_secrets))
        .route(
            "/v1/secrets/{name}",
            axum::routing::put(put_secret).delete(delete_secret),
        )
        .fallback(|| async { ApiError::not_found() })
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
        .layer(axum::middleware::from_fn(harden))
        .layer(axum::middleware::from_fn(move |req, next| {
            hsts_layer(hsts, req, next)
        }))
        .with_state(state)
}

/// HSTS only when the server is reached over TLS (API-3).
async fn hsts_layer(
    on: bool,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut r = next.run(req).await;
    if on {
        r.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=63072000; includeSubDomains"),
        );
    }
    r
}

async fn readyz(State(s): State<AppState>) -> Response {
    match s.service.store().ready().await {
        Ok(true) => (StatusCode::OK, "ready").into_response(),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response(),
    }
}

async fn list_workers(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersRead)?;
    if s.service.list_workers_in(&c.workspace).is_empty() {
        return Ok(Json(json!({"workers": [], "errors": []})));
    }
    let errors: Vec<_> = s
        .service
        .worker_errors()
        .into_iter()
        .map(|(p, e)| json!({"path": p.file_name().map(|n| n.to_string_lossy().into_owned()), "error": e}))
        .collect();
    Ok(Json(
        json!({"workers": s.service.list_workers_in(&c.workspace), "errors": errors}),
    ))
}

/// Reloading the workers folder is for the workspace that owns it.
async fn reload_workers(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersWrite)?;
    if c.workspace != s.service.config().workers_workspace {
        return Err(ApiError::not_found());
    }
    let (ids, errors) = s.service.reload();
    let errors: Vec<_> = errors.into_iter().map(|(p, e)| json!({"path": p.file_name().map(|n| n.to_string_lossy().into_owned()), "error": e})).collect();
    Ok(Json(json!({"loaded": ids, "errors": errors})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    input: serde_json::Value,
}

async fn create_run(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text()))?;
    let key = match headers.get("idempotency-key") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_idempotency_key",
                        "Idempotency-Key must be ASCII",
                    )
                })?
                .to_string(),
        ),
        None => None,
    };
    let input = if body.input.is_null() {
        json!({})
    } else {
        body.input
    };
    let created = s
        .service
        .create_run(CreateRun {
            workspace: c.workspace.clone(),
            worker_id: id,
            input,
            trigger: "api".into(),
            actor: c.actor().to_string(),
            idempotency_key: key,
        })
        .await?;
    let status = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"run": created.run}))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

async fn list_runs(
    State(s): State<AppState>,
    c: Caller,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::RunsRead)?;
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let state = match q.state.as_deref() {
        Some(st) => Some(RunState::parse(st).ok_or_else(|| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", "unknown state")
        })?),
        None => None,
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            "limit must be between 1 and 500",
        ));
    }
    let runs = s
        .service
        .store()
        .list_runs(&c.workspace, state, limit, q.cursor.as_deref())
        .await?;
    let next = if i64::try_from(runs.len()).unwrap_or(0) == limit {
        runs.last().map(|r| r.id.clone())
    } else {
        None
    };
    Ok(Json(json!({"runs": runs, "next_cursor": next})))
}

async fn get_run(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::RunsRead)?;
    let run = s.service.get(&c.workspace, &id).await?;
    let position = s.service.store().queue_position(&c.workspace, &id).await?;
    let artifacts = s.service.store().artifacts(&c.workspace, &id).await?;
    Ok(Json(
        json!({"run": run, "queue_position": position, "artifacts": artifacts}),
    ))
}

async fn cancel_run(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::RunsCancel)?;
    let state = s.service.cancel(&c.workspace, &id, c.actor()).await?;
    Ok(Json(json!({"id": id, "state": state})))
}

/// API-6: live events over SSE, resumable with `Last-Event-ID`.
async fn run_events(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsRead)?;
    s.service.get(&c.workspace, &id).await?;
    let ws = c.workspace.clone();
    let after: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let svc = s.service.clone();
    let stream = futures_util::stream::unfold(
        (svc, ws, id, after, false),
        |(svc, ws, id, after, done)| async move {
            if done {
                return None;
            }
            loop {
                let events = svc
                    .store()
                    .events(&ws, &id, after, 100)
                    .await
                    .unwrap_or_default();
                if !events.is_empty() {
                    let last = events.last().map_or(after, |e| e.seq);
                    let batch: Vec<Result<Event, Infallible>> = events
                        .into_iter()
                        .map(|e| {
                            Ok(Event::default()
                                .id(e.seq.to_string())
                                .event(e.kind.clone())
                                .data(e.data.to_string()))
                        })
                        .collect();
                    return Some((
                        futures_util::stream::iter(batch),
                        (svc, ws, id, last, false),
                    ));
                }
                let terminal = svc
                    .get(&ws, &id)
                    .await
                    .map(|r| r.state.is_terminal())
                    .unwrap_or(true);
                if terminal {
                    let end = vec![Ok(Event::default().event("end").data("{}"))];
                    return Some((futures_util::stream::iter(end), (svc, ws, id, after, true)));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    );
    use futures_util::StreamExt;
    let flat = stream.flatten();
    Ok(Sse::new(flat)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn artifact(
    State(s): State<AppState>,
    c: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsRead)?;
    let list = s.service.store().artifacts(&c.workspace, &id).await?;
    let a = list
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(ApiError::not_found)?;
    let path = s
        .service
        .artifacts()
        .path(&a.digest)
        .ok_or_else(ApiError::not_found)?;
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|_| ApiError::not_found())?;
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file));
    let mut r = Response::new(body);
    let h = r.headers_mut();
    // Served as an attachment with its sniffed type: never rendered inline.
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(a.media_type.as_str())
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    let safe: String = a
        .name
        .rsplit('/')
        .next()
        .unwrap_or("artifact")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{safe}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("sha-256={}", a.digest)) {
        h.insert("x-airlock-digest", v);
    }
    Ok(r)
}

fn secret_error(e: airlock_runs::secrets::SecretError) -> ApiError {
    use airlock_runs::secrets::SecretError as E;
    let status = match &e {
        E::Invalid(_) | E::Platform(_) => StatusCode::UNPROCESSABLE_ENTITY,
        E::Missing(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.code(), e.to_string())
}

/// KEY-4: metadata only, never a value.
async fn list_secrets(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::SecretsList)?;
    let declared = if c.workspace == s.service.config().workers_workspace {
        s.service.declared_secrets()
    } else {
        Vec::new()
    };
    let list = s
        .service
        .secrets()
        .list(&c.workspace, &declared)
        .await
        .map_err(secret_error)?;
    Ok(Json(json!({"secrets": list})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretBody {
    value: String,
}

async fn put_secret(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
    body: Result<Json<SecretBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::SecretsWrite)?;
    let Json(body) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text()))?;
    let version = s
        .service
        .secrets()
        .set(&c.workspace, &name, body.value.into_bytes(), c.actor())
        .await
        .map_err(secret_error)?;
    Ok(Json(json!({"name": name, "version": version})))
}

async fn delete_secret(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.require(Permission::SecretsWrite)?;
    match s
        .service
        .secrets()
        .remove(&c.workspace, &name, c.actor())
        .await
        .map_err(secret_error)?
    {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::not_found()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    worker: String,
    #[serde(default)]
    input: serde_json::Value,
    #[serde(default)]
    ttl_s: Option<u64>,
}

/// DUR-3: an opaque, single-use, expiring token for a stored plan.
async fn create_plan(
    State(s): State<AppState>,
    c: Caller,
    body: Result<Json<PlanBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text()))?;
    let input = if body.input.is_null() {
        json!({})
    } else {
        body.input
    };
    let ttl = Duration::from_secs(body.ttl_s.unwrap_or(900).clamp(1, 7 * 86_400));
    let (token, plan) = s
        .service
        .plan(&c.workspace, &body.worker, &input, ttl)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"token": token, "plan": plan})),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunPlanBody {
    token: String,
}

async fn run_plan(
    State(s): State<AppState>,
    c: Caller,
    body: Result<Json<RunPlanBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) =
        body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text()))?;
    let created = s
        .service
        .run_plan(&c.workspace, &body.token, c.actor())
        .await?;
    Ok((StatusCode::CREATED, Json(json!({"run": created.run}))).into_response())
}
