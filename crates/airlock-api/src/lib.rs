//! The HTTP front end (API-1 … API-9). Thin by rule: every handler parses
//! its request into the protocol's types, calls one method of
//! [`airlock_service::Service`] with the [`Caller`] its extractor
//! authenticated, and shapes the answer. Rules, permissions, quotas and
//! data access are in the service; this crate knows only HTTP: routes,
//! status codes, headers, cookies, bodies, SSE, per-process rate limits and
//! the OpenAPI document.
//!
//! Deny by default: every `/v1` handler except bootstrap, login, password
//! reset and signed webhooks takes an authenticating extractor
//! ([`auth::InWorkspace`], [`auth::SignedIn`] or [`auth::PendingSession`]),
//! so an unauthenticated request never reaches it.
//!
//! [`Caller`]: airlock_service::Caller

mod approvals;
mod audit;
pub mod auth;
mod emergency;
mod health;
mod identity;
pub mod limits;
pub mod mcp;
pub mod metrics;
mod models;
pub mod openapi;
mod retention;
mod runs;
mod secrets;
mod uploads;
mod webhooks;
mod workers;

use std::sync::Arc;

use airlock_protocol::{Error, ErrorBody, ErrorCode, ErrorDetail};
use airlock_service::Service;
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::HttpConfig;
use crate::limits::{LimitConfig, Limits};
pub use crate::runs::artifact_download;

/// Shared state of the router.
#[derive(Clone, Debug)]
pub struct AppState {
    pub service: Arc<Service>,
    pub http: Arc<HttpConfig>,
    pub limits: Arc<Limits>,
}

impl AppState {
    /// State with the default limits ([`LimitConfig::default`]).
    pub fn new(service: Arc<Service>, http: HttpConfig) -> Self {
        Self::with_limits(service, http, LimitConfig::default())
    }

    pub fn with_limits(service: Arc<Service>, http: HttpConfig, limits: LimitConfig) -> Self {
        Self {
            service,
            http: Arc::new(http),
            limits: Arc::new(Limits::new(limits)),
        }
    }
}

/// The HTTP status of each error code: the one place codes become
/// statuses.
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::Unauthenticated | C::MfaRequired | C::LoginFailed => StatusCode::UNAUTHORIZED,
        C::SessionRequired
        | C::CsrfFailed
        | C::Forbidden
        | C::NoWorkspace
        | C::ReauthenticationFailed
        | C::BootstrapRefused
        | C::ResetRefused
        | C::SecretForbidden
        | C::LinkInvalid
        | C::LinkExpired
        | C::SelfApproval => StatusCode::FORBIDDEN,
        C::NotFound | C::NoRoute | C::NoSuchUser | C::UnknownWorker | C::SecretMissing => {
            StatusCode::NOT_FOUND
        }
        C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::InvalidRequest
        | C::InvalidBody
        | C::InvalidQuery
        | C::InvalidIdempotencyKey
        | C::InvalidName => StatusCode::BAD_REQUEST,
        C::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::UnsupportedMediaType | C::MediaTypeRequired | C::MediaTypeMismatch => {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        }
        C::Conflict
        | C::MfaNotPending
        | C::MfaEnabled
        | C::LastOwner
        | C::WorkspaceBusy
        | C::IdempotencyConflict
        | C::PlanRefused
        | C::NoWebhookTrigger
        | C::TriggerNotDeclared
        | C::RunNotUnknown
        | C::ApprovalNotPending
        | C::ApprovalExpired
        | C::ApprovalHashMismatch
        | C::EmergencyStopped => StatusCode::CONFLICT,
        C::RateLimited | C::QuotaExceeded | C::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
        C::InvalidCode
        | C::InputInvalid
        | C::SecretInvalid
        | C::InvalidSecret
        | C::BadArchive
        | C::RuleRefused
        | C::ModelProfileInvalid => StatusCode::UNPROCESSABLE_ENTITY,
        C::NotReady | C::BlobStoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        C::SecretRollback | C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error on its way out: the one shape `{"error": {"code", "message",
/// "request_id"}}`, `Retry-After` for limits, and never internal detail on
/// a 5xx.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(Error::new(code, message))
    }

    pub fn not_found() -> Self {
        Self(Error::not_found())
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.code);
        // A server failure's detail stays in the log (`public_message`).
        let message = self.0.public_message().to_string();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.0.code,
                message,
                request_id: limits::current_request_id(),
            },
        };
        let mut r = (status, axum::Json(body)).into_response();
        if let Some(wait) = self.0.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// A body that could not be read or parsed: 413 when too large, 415 for a
/// wrong content type, else 400; the message names the problem (a JSON
/// position or field), never anything internal.
impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> Self {
        let code = match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::BodyTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            _ => ErrorCode::InvalidBody,
        };
        Self::new(code, e.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> Self {
        Self::new(ErrorCode::InvalidQuery, e.body_text())
    }
}

/// A JSON body or its rejection.
pub(crate) type JsonBody<T> = Result<axum::Json<T>, axum::extract::rejection::JsonRejection>;

/// The body of a [`JsonBody`], or the 4xx that explains why not.
pub(crate) fn body<T>(b: JsonBody<T>) -> Result<T, ApiError> {
    b.map(|axum::Json(v)| v).map_err(ApiError::from)
}

/// A query or its rejection.
pub(crate) type QueryOf<T> =
    Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>;

pub(crate) fn query<T>(q: QueryOf<T>) -> Result<T, ApiError> {
    q.map(|axum::extract::Query(v)| v).map_err(ApiError::from)
}

/// Hardening headers on every response, errors included (API-3), and one
/// error shape for every error: a 4xx/5xx that did not come from
/// [`ApiError`] (a path the router could not decode, a body over the
/// limit) is rewritten into it.
async fn harden(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut r = next.run(req).await;
    // A JSON error is the API's own; an HTML page is the web interface's
    // (which shapes its errors as pages). Anything else (an extractor's
    // plain-text rejection) becomes the one error shape.
    let is_json = r.headers().get(header::CONTENT_TYPE).is_some_and(|v| {
        v.as_bytes().starts_with(b"application/json") || v.as_bytes().starts_with(b"text/html")
    });
    if (r.status().is_client_error() || r.status().is_server_error()) && !is_json {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::BodyTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
            s if s.is_server_error() => ErrorCode::Internal,
            _ => ErrorCode::InvalidRequest,
        };
        let message = status.canonical_reason().unwrap_or("error").to_lowercase();
        let retry = r.headers().get(header::RETRY_AFTER).cloned();
        r = ApiError::new(code, message).into_response();
        // Keep the original status (a 4xx the table maps elsewhere).
        *r.status_mut() = status;
        if let Some(v) = retry {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    hardening_headers(r.headers_mut());
    r
}

/// The routes and their OpenAPI description, built together so neither
/// can have a route the other lacks (API-1). Routes that need a path
/// wildcard are added by hand in [`app`] and described in
/// [`add_hand_routes`].
pub fn api_router() -> OpenApiRouter<AppState> {
    use utoipa::OpenApi;
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::metrics))
        .routes(routes!(health::openapi_json))
        .merge(identity::routes())
        .merge(workers::routes())
        .merge(runs::routes())
        .merge(secrets::routes())
        .merge(audit::routes())
        .merge(approvals::routes())
        .merge(emergency::routes())
        .merge(models::routes())
        .merge(retention::routes())
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
    let (path, item) = runs::artifact_path_item();
    doc.paths.paths.insert(path, item);
}

/// The router; tests call it without a socket.
pub fn app(state: AppState) -> Router {
    app_with_fronts(state, Fronts::default())
}

/// The front ends mounted beside `/v1`, each behind the same limits,
/// hardening headers and request ids.
#[derive(Debug, Default)]
pub struct Fronts {
    /// The MCP streamable HTTP service, wrapped in a router, at `/mcp`.
    pub mcp: Option<Router>,
    /// The web interface's routes (`/`, its pages and `/static/…`). Its
    /// pages set their own `Content-Security-Policy`, which
    /// [`hardening_headers`] keeps.
    pub ui: Option<Router<AppState>>,
}

/// [`app_with_fronts`] with MCP only.
pub fn app_with_mcp(state: AppState, mcp: Option<Router>) -> Router {
    app_with_fronts(state, Fronts { mcp, ui: None })
}

/// The router with the other front ends: MCP at `/mcp` (MCP-1), reached
/// only through [`mcp::envelope`] and [`mcp::gate`], and the web
/// interface (UI-1), inside the same limits and hardening as every other
/// route.
pub fn app_with_fronts(state: AppState, fronts: Fronts) -> Router {
    let hsts = state.http.secure_cookies;
    let (mut router, _) = api_router().split_for_parts();
    if let Some(ui) = fronts.ui {
        router = router.merge(ui);
    }
    if let Some(m) = fronts.mcp {
        router = router.nest_service(
            "/mcp",
            m.layer(axum::middleware::from_fn_with_state(
                state.clone(),
                mcp::gate,
            ))
            .layer(axum::middleware::from_fn(mcp::envelope)),
        );
    }
    router
        .route(
            "/v1/runs/{id}/artifacts/{*name}",
            axum::routing::get(runs::artifact),
        )
        .fallback(|| async { ApiError::new(ErrorCode::NoRoute, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
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

/// The API-3 headers (idempotent; also applied to answers the limiter
/// gives before any handler runs).
pub(crate) fn hardening_headers(h: &mut HeaderMap) {
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    // The web interface's pages say `same-origin` (its forms come back
    // to the page they were on); everything else sends no referrer.
    if !h.contains_key(header::REFERRER_POLICY) {
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    // The web interface's pages bring their own policy (as strict: no
    // inline script or style, no framing); everything else gets none.
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; sandbox"),
        );
    }
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

/// The README's table of error codes: code, HTTP status, meaning. Generated
/// from [`ErrorCode::ALL`] and [`status_of`] so the documentation cannot
/// drift from what the server sends (a test compares the two).
pub fn error_code_table() -> String {
    let mut out = String::from("| code | HTTP | meaning |\n|---|---|---|\n");
    for c in ErrorCode::ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.as_str(),
            status_of(*c).as_u16(),
            c.description()
        ));
    }
    out
}
