//! Worker routes (RUN-1, RUN-2): list, get, validate a manifest, reload.

use airlock_protocol::ErrorBody;
use airlock_protocol::workers::{Reloaded, ValidateManifest, Validation, WorkerDetail, WorkerList};
use axum::Json;
use axum::extract::{Path, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_workers))
        .routes(routes!(get_worker))
        .routes(routes!(validate_worker))
        .routes(routes!(reload_workers))
}

#[utoipa::path(get, path = "/v1/workers", tag = "workers", responses((status = 200, description = "workers visible to the workspace, and bundles that failed to load", body = WorkerList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_workers(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<WorkerList>, ApiError> {
    Ok(Json(s.service.list_workers(&c)?))
}

/// One worker as the caller's workspace sees it.
#[utoipa::path(get, path = "/v1/workers/{id}", tag = "workers", params(("id" = String, Path, description = "worker id")), responses((status = 200, description = "the worker and its manifest", body = WorkerDetail), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_worker(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<WorkerDetail>, ApiError> {
    Ok(Json(s.service.get_worker(&c, &id)?))
}

/// Checks a `worker.toml` without loading it: every problem, by field.
#[utoipa::path(post, path = "/v1/workers/validate", tag = "workers", request_body = ValidateManifest, responses((status = 200, description = "valid, or the problems by field", body = Validation), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn validate_worker(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<ValidateManifest>,
) -> Result<Json<Validation>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.validate_manifest(&c, &b.manifest)?))
}

/// Reloading the workers folder is for the workspace that owns it.
#[utoipa::path(post, path = "/v1/workers/reload", tag = "workers", responses((status = 200, description = "reloaded", body = Reloaded), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn reload_workers(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<Reloaded>, ApiError> {
    Ok(Json(s.service.reload_workers(&c)?))
}
