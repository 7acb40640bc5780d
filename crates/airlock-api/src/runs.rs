//! Run routes (RUN-4, RUN-5, API-6, API-8, DUR-3): create, list, get,
//! cancel, events over SSE, the log, artifacts, and plans.

use std::convert::Infallible;
use std::time::Duration;

use airlock_protocol::runs::{
    Cancelled, CreatePlan, CreateRun, ListRuns, PlanCreated, ResolveRun, RetryRun, Run, RunCreated,
    RunDetail, RunList, RunPlan, StreamEvent,
};
use airlock_protocol::{Error, ErrorBody, ErrorCode};
use airlock_service::{Followed, RunOptions};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, QueryOf, body, query};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_run))
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(cancel_run))
        .routes(routes!(retry_run))
        .routes(routes!(resolve_run))
        .routes(routes!(run_events))
        .routes(routes!(run_logs))
        .routes(routes!(create_plan))
        .routes(routes!(run_plan))
}

/// The `Idempotency-Key` header, if any (its rules are the service's).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        Some(v) => Ok(Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidIdempotencyKey,
                        "Idempotency-Key must be printable ASCII",
                    )
                })?
                .to_string(),
        )),
        None => Ok(None),
    }
}

#[utoipa::path(post, path = "/v1/workers/{id}/runs", tag = "runs", params(("id" = String, Path, description = "worker id"), ("Idempotency-Key" = Option<String>, Header, description = "same key and request return the original run (1 to 255 printable ASCII characters)", min_length = 1, max_length = 255, pattern = "^[ -~]{1,255}$")), request_body = CreateRun, responses((status = 201, description = "created", body = RunCreated), (status = 200, description = "the original run of this idempotency key", body = RunCreated), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn create_run(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: JsonBody<CreateRun>,
) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    let b = body(b)?;
    let opts = RunOptions {
        trigger: "api".into(),
        idempotency_key: idempotency_key(&headers)?,
    };
    let started = s.service.create_run(&c, &id, b.input, opts).await?;
    let status = if started.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(RunCreated { run: started.run })))
}

#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListRuns), responses((status = 200, description = "runs, newest first, with next_cursor", body = RunList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_runs(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    q: QueryOf<ListRuns>,
) -> Result<Json<RunList>, ApiError> {
    let q = query(q)?;
    Ok(Json(s.service.list_runs(&c, &q).await?))
}

#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "the run, its queue position and artifacts", body = RunDetail), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_run(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    Ok(Json(s.service.run_detail(&c, &id).await?))
}

#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "cancelled or cancelling (idempotent)", body = Cancelled), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn cancel_run(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<Cancelled>, ApiError> {
    Ok(Json(s.service.cancel_run(&c, &id).await?))
}

/// DUR-2: queue a run whose outcome is `unknown` again, for a new attempt.
#[utoipa::path(post, path = "/v1/runs/{id}/retry", tag = "runs", params(("id" = String, Path, description = "run id")), request_body = RetryRun, responses((status = 200, description = "the run, queued again", body = Run), (status = 409, description = "run_not_unknown: the run is not `unknown`", body = ErrorBody), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn retry_run(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    b: JsonBody<RetryRun>,
) -> Result<Json<Run>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.retry_run(&c, &id, &b).await?))
}

/// DUR-2: settle a run whose outcome is `unknown` as `succeeded` or
/// `failed`, with a reason.
#[utoipa::path(post, path = "/v1/runs/{id}/resolve", tag = "runs", params(("id" = String, Path, description = "run id")), request_body = ResolveRun, responses((status = 200, description = "the run, resolved", body = Run), (status = 409, description = "run_not_unknown: the run is not `unknown`", body = ErrorBody), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn resolve_run(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    b: JsonBody<ResolveRun>,
) -> Result<Json<Run>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.resolve_run(&c, &id, &b).await?))
}

/// API-6: live events over SSE, resumable with `Last-Event-ID`; each
/// event's `data` is a run event's `data` and its `event` the kind; an
/// `end` event closes the stream when the run is over.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs", params(("id" = String, Path, description = "run id"), ("Last-Event-ID" = Option<String>, Header, description = "resume after this event")), responses((status = 200, description = "server-sent events", content_type = "text/event-stream", body = StreamEvent), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn run_events(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let follower = s.service.follow_events(&c, &id, after).await?;
    // API-6: a per-user cap on concurrent streams (per process); the slot
    // travels with the stream and is freed when the client goes away.
    let slot = s.limits.open_stream(c.actor_id()).ok_or_else(|| {
        ApiError(Error::limited(
            ErrorCode::TooManyStreams,
            "too many open event streams for this user",
            Duration::from_secs(5),
        ))
    })?;
    let stream = futures_util::stream::unfold((follower, slot), |(mut f, slot)| async move {
        let batch: Vec<Result<Event, Infallible>> = match f.next().await? {
            Ok(Followed::Events(events)) => events
                .into_iter()
                .map(|e| {
                    Ok(Event::default()
                        .id(e.seq.to_string())
                        .event(e.kind)
                        .data(e.data.to_string()))
                })
                .collect(),
            Ok(Followed::End) => vec![Ok(Event::default().event("end").data("{}"))],
            // The client reconnects with Last-Event-ID and resumes.
            Err(_) => Vec::new(),
        };
        Some((futures_util::stream::iter(batch), (f, slot)))
    });
    use futures_util::StreamExt;
    Ok(Sse::new(stream.flatten())
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// A run's log as text (the `log` events, in order; redacted).
#[utoipa::path(get, path = "/v1/runs/{id}/logs", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "the log", content_type = "text/plain", body = String), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn run_logs(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let text = s.service.run_log(&c, &id).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// Media types a browser could render as a document (and run script in):
/// never served as such on this origin.
const ACTIVE_TYPES: &[&str] = &[
    "text/html",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/xml",
    "application/xml",
    "text/javascript",
    "application/javascript",
];

#[utoipa::path(get, path = "/v1/runs/{id}/artifacts/{name}", tag = "runs", params(("id" = String, Path, description = "run id"), ("name" = String, Path, description = "artifact name (may contain /)")), responses((status = 200, description = "the artifact, as an attachment", content_type = "application/octet-stream", body = Vec<u8>), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub(crate) async fn artifact(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    artifact_download(&s, &c, &id, &name).await
}

/// An artifact as every front end serves it (the API here, the web
/// interface through this function): the service's `artifact` (permission,
/// workspace, path checks), streamed as an attachment with its sniffed
/// type, never rendered: an active type (HTML, SVG, XML, script) is sent
/// as inert text, and the hardening headers add `nosniff` and a `sandbox`
/// CSP that disarms anything a browser renders anyway.
pub async fn artifact_download(
    s: &AppState,
    c: &airlock_service::Caller,
    id: &str,
    name: &str,
) -> Result<Response, ApiError> {
    let (a, path) = s.service.artifact(c, id, name).await?;
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|_| ApiError::not_found())?;
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file));
    let mut r = Response::new(body);
    let h = r.headers_mut();
    let essence = a
        .media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let media = if ACTIVE_TYPES.contains(&essence.as_str()) {
        "text/plain; charset=utf-8"
    } else {
        a.media_type.as_str()
    };
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(media)
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
    // No empty or hidden file name.
    let safe = if safe.is_empty() || safe.starts_with('.') {
        format!("artifact{safe}")
    } else {
        safe
    };
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{safe}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("sha-256={}", a.digest)) {
        h.insert("x-airlock-digest", v);
    }
    Ok(r)
}

/// The OpenAPI path item of [`artifact`] (its route has a wildcard, so it
/// is registered by hand).
pub(crate) fn artifact_path_item() -> (String, utoipa::openapi::PathItem) {
    use utoipa::Path as _;
    (
        __path_artifact::path(),
        utoipa::openapi::PathItem::new(
            utoipa::openapi::HttpMethod::Get,
            __path_artifact::operation(),
        ),
    )
}

/// DUR-3: an opaque, single-use, expiring token for a stored plan.
#[utoipa::path(post, path = "/v1/plans", tag = "runs", request_body = CreatePlan, responses((status = 201, description = "a single-use plan token", body = PlanCreated), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn create_plan(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<CreatePlan>,
) -> Result<(StatusCode, Json<PlanCreated>), ApiError> {
    let b = body(b)?;
    Ok((
        StatusCode::CREATED,
        Json(s.service.create_plan(&c, &b).await?),
    ))
}

#[utoipa::path(post, path = "/v1/plans/run", tag = "runs", request_body = RunPlan, responses((status = 201, description = "the run of that plan", body = RunCreated), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn run_plan(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<RunPlan>,
) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    let b = body(b)?;
    let run = s.service.run_plan(&c, &b.token).await?;
    Ok((StatusCode::CREATED, Json(RunCreated { run })))
}
