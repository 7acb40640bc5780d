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
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod uploads;
pub mod webhook_verify;
pub mod webhooks;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use airlock_iam::Permission;
use airlock_service::{CreateRun, Service, ServiceError};
use airlock_store::RunState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Auth, Caller};
use crate::limits::{LimitConfig, Limits};

/// Shared state of the router.
#[derive(Clone, Debug)]
pub struct AppState {
    pub service: Arc<Service>,
    pub auth: Arc<Auth>,
    pub limits: Arc<Limits>,
    /// Where the bootstrap capability was written (removed once used).
    pub bootstrap_file: Option<std::path::PathBuf>,
}

impl AppState {
    /// State with the default limits ([`LimitConfig::default`]).
    pub fn new(service: Arc<Service>, auth: Auth) -> Self {
        Self::with_limits(service, auth, LimitConfig::default())
    }

    pub fn with_limits(service: Arc<Service>, auth: Auth, limits: LimitConfig) -> Self {
        Self {
            service,
            auth: Arc::new(auth),
            limits: Arc::new(Limits::new(limits)),
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
    retry_after: Option<Duration>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// 429 with `Retry-After`.
    pub fn too_many(code: &'static str, message: impl Into<String>, wait: Duration) -> Self {
        Self {
            retry_after: Some(wait),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, code, message)
        }
    }
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Never leak internals on 5xx.
        let message = if self.status.is_server_error() {
            "internal error".to_string()
        } else {
            self.message
        };
        let rid = limits::current_request_id();
        let mut r = (
            self.status,
            Json(json!({"error": {"code": self.code, "message": message, "request_id": rid}})),
        )
            .into_response();
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
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

/// A body that could not be read or parsed: 413 when too large, 415 for a
/// wrong content type, else 400; the message names the problem (a JSON
/// position or field), never anything internal.
impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> Self {
        let status = e.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_body",
        };
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        Self::new(status, code, e.body_text())
    }
}

impl From<airlock_store::StoreError> for ApiError {
    fn from(e: airlock_store::StoreError) -> Self {
        if matches!(e, airlock_store::StoreError::LastOwner) {
            return Self::new(
                StatusCode::CONFLICT,
                "last_owner",
                "a workspace keeps at least one owner",
            );
        }
        ServiceError::from(e).into()
    }
}

/// Hardening headers on every response, errors included (API-3), and one
/// error shape for every error: a 4xx/5xx that did not come from
/// [`ApiError`] (a path the router could not decode, a body over the
/// limit) is rewritten into it.
async fn harden(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut r = next.run(req).await;
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if (r.status().is_client_error() || r.status().is_server_error()) && !is_json {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::NOT_FOUND => "not_found",
            s if s.is_server_error() => "internal",
            _ => "invalid_request",
        };
        let message = status.canonical_reason().unwrap_or("error").to_lowercase();
        let retry = r.headers().get(header::RETRY_AFTER).cloned();
        r = ApiError::new(status, code, message).into_response();
        if let Some(v) = retry {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    hardening_headers(r.headers_mut());
    r
}

/// The routes and their OpenAPI description, built together so neither
/// can have a route the other lacks (API-1). Routes that need a path
/// wildcard are added by hand in [`app`] and described by their
/// `#[utoipa::path]` in [`openapi::ApiDoc`].
pub fn api_router() -> OpenApiRouter<AppState> {
    use utoipa::OpenApi;
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics::metrics))
        .routes(routes!(openapi_json))
        .routes(routes!(identity::bootstrap))
        .routes(routes!(identity::login, identity::whoami, identity::logout))
        .routes(routes!(identity::login_mfa))
        .routes(routes!(identity::list_sessions))
        .routes(routes!(identity::revoke_all_sessions))
        .routes(routes!(identity::revoke_session))
        .routes(routes!(identity::mfa_enrol))
        .routes(routes!(identity::mfa_confirm))
        .routes(routes!(identity::password_reset))
        .routes(routes!(identity::list_keys, identity::create_key))
        .routes(routes!(identity::revoke_key))
        .routes(routes!(
            identity::list_workspaces,
            identity::create_workspace
        ))
        .routes(routes!(identity::list_members))
        .routes(routes!(identity::put_member, identity::delete_member))
        .routes(routes!(identity::list_audit))
        .routes(routes!(list_workers))
        .routes(routes!(get_worker))
        .routes(routes!(validate_worker))
        .routes(routes!(reload_workers))
        .routes(routes!(run_logs))
        .routes(routes!(list_roles))
        .routes(routes!(verify_audit))
        .routes(routes!(export_audit))
        .routes(routes!(create_run))
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(cancel_run))
        .routes(routes!(run_events))
        .routes(routes!(create_plan))
        .routes(routes!(run_plan))
        .routes(routes!(list_secrets))
        .routes(routes!(put_secret, delete_secret))
        .merge(uploads::routes())
        .merge(webhooks::routes())
}

/// The OpenAPI document of this build.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = api_router().split_for_parts();
    add_hand_routes(&mut doc);
    doc
}

/// Describes the routes registered by hand (path wildcards).
fn add_hand_routes(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::Path as _;
    let item = utoipa::openapi::PathItem::new(
        utoipa::openapi::HttpMethod::Get,
        __path_artifact::operation(),
    );
    doc.paths.paths.insert(__path_artifact::path(), item);
}

/// The router; tests call it without a socket.
pub fn app(state: AppState) -> Router {
    let hsts = state.auth.cfg.secure_cookies;
    let (router, _) = api_router().split_for_parts();
    router
        .route(
            "/v1/runs/{id}/artifacts/{*name}",
            axum::routing::get(artifact),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
        .layer(axum::middleware::from_fn(harden))
        .layer(axum::middleware::from_fn(move |req, next| {
            hsts_layer(hsts, req, next)
        }))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::guard,
        ))
        .with_state(state)
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "alive", body = String)), security(()))]
async fn healthz() -> &'static str {
    "ok"
}

/// The OpenAPI 3.1 document (API-1).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health", responses((status = 200, description = "this document", body = Object)), security(()))]
async fn openapi_json() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = DOC.get_or_init(|| openapi_document().to_json().unwrap_or_default());
    ([(header::CONTENT_TYPE, "application/json")], text.clone()).into_response()
}

/// The API-3 headers (idempotent; also applied to answers the limiter
/// gives before any handler runs).
pub(crate) fn hardening_headers(h: &mut HeaderMap) {
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
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert("cache-control", HeaderValue::from_static("no-store"));
    }
    h.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=(), interest-cohort=()"),
    );
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

#[utoipa::path(get, path = "/readyz", tag = "health", responses((status = 200, description = "database reachable and schema current", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)), security(()))]
async fn readyz(State(s): State<AppState>) -> Response {
    match s.service.store().ready().await {
        Ok(true) => Json(json!({"status": "ready"})).into_response(),
        _ => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the database is unreachable or its schema is not current",
        )
        .into_response(),
    }
}

/// API-4: one unit of the creator's and the workspace's daily run quota,
/// durable in the database. Returns what to give back if creation fails.
async fn take_run_quota(s: &AppState, c: &Caller) -> Result<Vec<(String, i64)>, ApiError> {
    let cfg = &s.limits.cfg;
    take_quotas(
        s,
        &[
            (format!("user:{}", c.actor()), cfg.runs_per_user_per_day),
            (
                format!("ws:{}", c.workspace),
                cfg.runs_per_workspace_per_day,
            ),
        ],
    )
    .await
}

/// Takes one unit of each `(subject, daily limit)` or none of them: 429
/// `quota_exceeded` with `Retry-After` (the end of the UTC day) when any
/// is used up.
pub(crate) async fn take_quotas(
    s: &AppState,
    subjects: &[(String, i64)],
) -> Result<Vec<(String, i64)>, ApiError> {
    let now = s.auth.now();
    let day = now - now.rem_euclid(86_400_000);
    let store = s.service.store();
    let mut taken: Vec<(String, i64)> = Vec::new();
    for (subject, limit) in subjects {
        if *limit == i64::MAX {
            continue;
        }
        if !store.take_quota(subject, day, *limit).await? {
            for (sub, d) in &taken {
                store.give_back_quota(sub, *d).await?;
            }
            s.limits
                .counters
                .rejected_quota
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let wait = u64::try_from(day + 86_400_000 - now).unwrap_or(1);
            return Err(ApiError::too_many(
                "quota_exceeded",
                "the daily run quota is used up",
                Duration::from_millis(wait),
            ));
        }
        taken.push((subject.clone(), day));
    }
    Ok(taken)
}

pub(crate) async fn give_back(s: &AppState, taken: Vec<(String, i64)>) {
    for (sub, d) in taken {
        let _ = s.service.store().give_back_quota(&sub, d).await;
    }
}

#[utoipa::path(get, path = "/v1/workers", tag = "workers", responses((status = 200, description = "workers visible to the workspace", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

/// One worker as the caller's workspace sees it.
#[utoipa::path(get, path = "/v1/workers/{id}", tag = "workers", params(("id" = String, Path, description = "worker id")), responses((status = 200, description = "the worker and its manifest", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn get_worker(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersRead)?;
    let w = s
        .service
        .list_workers_in(&c.workspace)
        .into_iter()
        .find(|w| w.id == id)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(json!({"worker": w})))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ValidateBody {
    /// The text of a `worker.toml`.
    manifest: String,
}

/// Checks a `worker.toml` without loading it: every problem, by field.
#[utoipa::path(post, path = "/v1/workers/validate", tag = "workers", request_body = ValidateBody, responses((status = 200, description = "valid, or the problems by field", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn validate_worker(
    c: Caller,
    body: Result<Json<ValidateBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersRead)?;
    let Json(body) = body.map_err(ApiError::from)?;
    if body.manifest.len() > 256 * 1024 {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "a manifest is at most 256 KiB",
        ));
    }
    Ok(Json(
        match airlock_worker::Manifest::from_toml(&body.manifest) {
            Ok(_) => json!({"valid": true, "problems": []}),
            Err(e) => {
                let problems: Vec<_> = e
                    .problems()
                    .into_iter()
                    .map(|p| json!({"field": p.field, "message": p.message}))
                    .collect();
                json!({"valid": false, "problems": problems})
            }
        },
    ))
}

/// A run's log as text (the `log` events, in order; redacted).
#[utoipa::path(get, path = "/v1/runs/{id}/logs", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "the log", content_type = "text/plain", body = String), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn run_logs(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsRead)?;
    s.service.get(&c.workspace, &id).await?;
    let mut text = String::new();
    let mut after = 0;
    loop {
        let events = s
            .service
            .store()
            .events(&c.workspace, &id, after, 500)
            .await?;
        let Some(last) = events.last().map(|e| e.seq) else {
            break;
        };
        for e in events.iter().filter(|e| e.kind == "log") {
            text.push_str(e.data["text"].as_str().unwrap_or(""));
        }
        after = last;
        if text.len() > 16 << 20 {
            break;
        }
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// The role table (IAM-7), from the data the server enforces.
#[utoipa::path(get, path = "/v1/roles", tag = "identity", responses((status = 200, description = "roles and their permissions", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn list_roles(c: Caller) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::WorkersRead)?;
    let roles: Vec<_> = airlock_iam::Role::ALL
        .iter()
        .map(|r| {
            let perms: Vec<&str> = r.permissions().iter().map(|p| p.as_str()).collect();
            json!({"role": r.as_str(), "permissions": perms})
        })
        .collect();
    Ok(Json(json!({"roles": roles, "yours": c.role.as_str()})))
}

/// Verifies the workspace's audit chain (AUD-2): the count, the head hash,
/// or the first bad sequence number.
#[utoipa::path(get, path = "/v1/audit/verify", tag = "audit", responses((status = 200, description = "verification result", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn verify_audit(
    State(s): State<AppState>,
    c: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::AuditRead)?;
    let lines = s.service.store().audit_lines(&c.workspace).await?;
    let mut v = airlock_audit::chain::Verifier::new().for_workspace(c.workspace.as_str());
    for (i, l) in lines.iter().enumerate() {
        let bad = match airlock_audit::from_json_line(l) {
            Ok(e) => v.push(&e).err().map(|e| e.first_bad_seq()),
            Err(_) => Some(u64::try_from(i + 1).unwrap_or(u64::MAX)),
        };
        if let Some(seq) = bad {
            return Ok(Json(json!({"ok": false, "first_bad_seq": seq})));
        }
    }
    Ok(Json(match v.finish() {
        Ok(sum) => json!({"ok": true, "events": sum.count, "head": airlock_store::hex(&sum.head)}),
        Err(e) => json!({"ok": false, "first_bad_seq": e.first_bad_seq()}),
    }))
}

/// The workspace's audit chain as JSON Lines, verifiable elsewhere with
/// `verify_export.py` (AUD-3).
#[utoipa::path(get, path = "/v1/audit/export", tag = "audit", responses((status = 200, description = "JSON Lines, one event per line", content_type = "application/x-ndjson", body = String), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn export_audit(State(s): State<AppState>, c: Caller) -> Result<Response, ApiError> {
    c.require(Permission::AuditExport)?;
    let lines = s.service.store().audit_lines(&c.workspace).await?;
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"audit.jsonl\"",
            ),
        ],
        out,
    )
        .into_response())
}

/// Reloading the workers folder is for the workspace that owns it.
#[utoipa::path(post, path = "/v1/workers/reload", tag = "workers", responses((status = 200, description = "reloaded", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    #[schema(value_type = Object)]
    input: serde_json::Value,
}

#[utoipa::path(post, path = "/v1/workers/{id}/runs", tag = "runs", params(("id" = String, Path, description = "worker id"), ("Idempotency-Key" = Option<String>, Header, description = "same key and request return the original run")), request_body = CreateBody, responses((status = 201, description = "created (200: the original run of this idempotency key)", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn create_run(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) = body.map_err(ApiError::from)?;
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
    // A retry of an idempotent request is answered (or refused as a
    // conflict) without spending quota: it creates nothing.
    let replay = match &key {
        Some(k) => {
            s.service
                .store()
                .idempotency_key_used(&c.workspace, c.actor(), k)
                .await?
        }
        None => false,
    };
    let taken = if replay {
        Vec::new()
    } else {
        take_run_quota(&s, &c).await?
    };
    let created = match s
        .service
        .create_run(CreateRun {
            workspace: c.workspace.clone(),
            worker_id: id,
            input,
            trigger: "api".into(),
            actor: c.actor().to_string(),
            idempotency_key: key,
        })
        .await
    {
        Ok(created) => {
            if !created.created {
                // An idempotent replay created nothing.
                give_back(&s, taken).await;
            }
            created
        }
        Err(e) => {
            give_back(&s, taken).await;
            return Err(e.into());
        }
    };
    let status = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"run": created.run}))).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListQuery), responses((status = 200, description = "runs, newest first, with next_cursor", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "the run, its queue position and artifacts", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "cancelled or cancelling (idempotent)", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs", params(("id" = String, Path, description = "run id"), ("Last-Event-ID" = Option<String>, Header, description = "resume after this event")), responses((status = 200, description = "server-sent events", content_type = "text/event-stream", body = String), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn run_events(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsRead)?;
    s.service.get(&c.workspace, &id).await?;
    // API-6: a per-user cap on concurrent streams; the slot travels with
    // the stream and is freed when the client goes away.
    let slot = s.limits.open_stream(c.actor()).ok_or_else(|| {
        ApiError::too_many(
            "too_many_streams",
            "too many open event streams for this user",
            Duration::from_secs(5),
        )
    })?;
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
    // The closure owns the stream slot: it is dropped with the stream.
    let flat = stream.flatten().map(move |e| {
        let _held = &slot;
        e
    });
    Ok(Sse::new(flat)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

#[utoipa::path(get, path = "/v1/runs/{id}/artifacts/{name}", tag = "runs", params(("id" = String, Path, description = "run id"), ("name" = String, Path, description = "artifact name (may contain /)")), responses((status = 200, description = "the artifact, as an attachment", content_type = "application/octet-stream", body = Vec<u8>), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

fn secret_error(e: airlock_service::secrets::SecretError) -> ApiError {
    use airlock_service::secrets::SecretError as E;
    let status = match &e {
        E::Invalid(_) | E::Platform(_) => StatusCode::UNPROCESSABLE_ENTITY,
        E::Missing(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.code(), e.to_string())
}

/// KEY-4: metadata only, never a value.
#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", responses((status = 200, description = "metadata only", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SecretBody {
    value: String,
}

#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path, description = "secret name")), request_body = SecretBody, responses((status = 200, description = "stored", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn put_secret(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
    body: Result<Json<SecretBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    c.require(Permission::SecretsWrite)?;
    let Json(body) = body.map_err(ApiError::from)?;
    let version = s
        .service
        .secrets()
        .set(&c.workspace, &name, body.value.into_bytes(), c.actor())
        .await
        .map_err(secret_error)?;
    Ok(Json(json!({"name": name, "version": version})))
}

#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path, description = "secret name")), responses((status = 204, description = "deleted"), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    worker: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    input: serde_json::Value,
    #[serde(default)]
    ttl_s: Option<u64>,
}

/// DUR-3: an opaque, single-use, expiring token for a stored plan.
#[utoipa::path(post, path = "/v1/plans", tag = "runs", request_body = PlanBody, responses((status = 201, description = "a single-use plan token", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn create_plan(
    State(s): State<AppState>,
    c: Caller,
    body: Result<Json<PlanBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) = body.map_err(ApiError::from)?;
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

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RunPlanBody {
    token: String,
}

#[utoipa::path(post, path = "/v1/plans/run", tag = "runs", request_body = RunPlanBody, responses((status = 201, description = "the run of that plan", body = Object), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
async fn run_plan(
    State(s): State<AppState>,
    c: Caller,
    body: Result<Json<RunPlanBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    c.require(Permission::RunsCreate)?;
    let Json(body) = body.map_err(ApiError::from)?;
    let taken = take_run_quota(&s, &c).await?;
    let created = match s
        .service
        .run_plan(&c.workspace, &body.token, c.actor())
        .await
    {
        Ok(created) => created,
        Err(e) => {
            give_back(&s, taken).await;
            return Err(e.into());
        }
    };
    Ok((StatusCode::CREATED, Json(json!({"run": created.run}))).into_response())
}
