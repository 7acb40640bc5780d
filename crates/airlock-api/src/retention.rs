//! Retention routes (DUR-7, API-2) for the caller's workspace: its
//! settings, what a pass would remove now, and a pass; and deleting the
//! workspace. Removing is
//! `workspace.manage`; the bytes of what no record names any more are left
//! to `airlock gc`.

use airlock_protocol::ErrorBody;
use airlock_protocol::retention::{DeleteWorkspace, Retention, RetentionApplied, WorkspaceDeleted};
use axum::Json;
use axum::extract::{Path, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_retention, put_retention))
        .routes(routes!(preview_retention))
        .routes(routes!(apply_retention))
        .routes(routes!(delete_workspace))
}

#[utoipa::path(get, path = "/v1/retention", tag = "retention", responses((status = 200, description = "the workspace's retention (absent fields: kept for ever)", body = Retention), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_retention(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<Retention>, ApiError> {
    Ok(Json(s.service.get_retention(&c).await?))
}

/// Replaces the workspace's retention (days, 1 to 36500, per kind of
/// material; an absent field keeps it for ever). Removes nothing by itself.
#[utoipa::path(put, path = "/v1/retention", tag = "retention", request_body = Retention, responses((status = 200, description = "stored", body = Retention), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn put_retention(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<Retention>,
) -> Result<Json<Retention>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.set_retention(&c, &b).await?))
}

/// What a pass would remove now (removes nothing).
#[utoipa::path(get, path = "/v1/retention/preview", tag = "retention", responses((status = 200, description = "what a pass would remove now", body = RetentionApplied), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn preview_retention(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<RetentionApplied>, ApiError> {
    Ok(Json(s.service.apply_retention(&c, true).await?))
}

/// Removes now what the workspace's retention lets go of; each removal is
/// an audit event (`retention.applied`).
#[utoipa::path(post, path = "/v1/retention/apply", tag = "retention", responses((status = 200, description = "what was removed", body = RetentionApplied), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn apply_retention(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<RetentionApplied>, ApiError> {
    Ok(Json(s.service.apply_retention(&c, false).await?))
}

/// Deletes the caller's workspace (`workspace.delete`) with everything it
/// owns; its audit chain stays. `confirm` is the workspace's name.
#[utoipa::path(post, path = "/v1/workspaces/{id}/delete", tag = "retention", params(("id" = String, Path, description = "the workspace (the caller's)", max_length = 64)), request_body = DeleteWorkspace, responses((status = 200, description = "deleted", body = WorkspaceDeleted), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn delete_workspace(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    b: JsonBody<DeleteWorkspace>,
) -> Result<Json<WorkspaceDeleted>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.delete_workspace(&c, &id, &b.confirm).await?))
}
