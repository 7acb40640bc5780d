//! Webhook routes (API-9): the rotation of an endpoint's signing secret,
//! and the public, signed endpoint itself (the signature over the raw
//! body is its authentication; everything about it is in the service).

use airlock_protocol::webhooks::{Accepted, RotateSecret, RotatedSecret};
use airlock_protocol::{ErrorBody, ErrorCode};
use airlock_service::webhook_verify::Headers;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(rotate_secret))
        .routes(routes!(receive))
}

/// Rotates the signing secret of a worker's webhook endpoint (API-9).
#[utoipa::path(
    post,
    path = "/v1/workers/{id}/webhook/secret",
    tag = "webhooks",
    params(("id" = String, Path, description = "worker id")),
    request_body(content = Option<RotateSecret>, content_type = "application/json", description = "optional: import a secret issued by the sender; omit the body to have one generated"),
    responses(
        (status = 201, description = "the new secret, shown this once", body = RotatedSecret),
        (status = 404, description = "no such worker in this workspace", body = ErrorBody),
        (status = 409, description = "the worker declares no webhook trigger", body = ErrorBody),
        (status = "4XX", description = "error", body = ErrorBody),
        (status = "5XX", description = "internal error", body = ErrorBody)
    )
)]
async fn rotate_secret(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<RotatedSecret>), ApiError> {
    // An empty body (or `null`) means "generate one".
    let req: RotateSecret = if body.iter().all(u8::is_ascii_whitespace) {
        RotateSecret::default()
    } else {
        serde_json::from_slice::<Option<RotateSecret>>(&body)
            .map_err(|e| ApiError::new(ErrorCode::InvalidBody, e.to_string()))?
            .unwrap_or_default()
    };
    Ok((
        StatusCode::CREATED,
        Json(s.service.rotate_webhook_secret(&c, &id, &req).await?),
    ))
}

/// Receives a signed delivery and starts a run of the worker with the body
/// (a JSON object) as its input (API-9, RUN-6).
#[utoipa::path(
    post,
    path = "/v1/hooks/{workspace}/{worker}",
    tag = "webhooks",
    params(
        ("workspace" = String, Path, description = "workspace id"),
        ("worker" = String, Path, description = "worker id")
    ),
    request_body(content = Object, content_type = "application/json", description = "the signed body, verified byte for byte; at most 1 MiB"),
    responses(
        (status = 202, description = "verified; the run is queued", body = Accepted),
        (status = 401, description = "refused: bad, stale or replayed signature, or no such endpoint (never more detail)", body = ErrorBody),
        (status = 413, description = "body larger than 1 MiB", body = ErrorBody),
        (status = 422, description = "verified, but the body is not valid input for the worker; nothing was created", body = ErrorBody),
        (status = 429, description = "rate limited or the workspace's daily run quota is used up", body = ErrorBody),
        (status = "5XX", description = "internal error", body = ErrorBody)
    ),
    security(())
)]
async fn receive(
    State(s): State<AppState>,
    Path((workspace, worker)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let raw = axum::body::to_bytes(body, airlock_service::MAX_WEBHOOK_BODY)
        .await
        .map_err(|_| ApiError::new(ErrorCode::BodyTooLarge, "the body is larger than 1 MiB"))?;
    let mut h = Headers::new();
    for (name, value) in &headers {
        h.append(name.as_str(), value.as_bytes());
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(
            s.service
                .receive_webhook(&workspace, &worker, &h, &raw)
                .await?,
        ),
    ))
}
