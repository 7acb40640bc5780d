//! Model profile routes (AGT-2, API-2): a workspace's routing metadata for
//! its agents' models. No credential is ever accepted or returned: a
//! profile names a channel of the operator's egress policy.

use airlock_protocol::ErrorBody;
use airlock_protocol::models::{ModelProfile, ModelProfileList, PutModelProfile};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_profiles))
        .routes(routes!(get_profile, put_profile, delete_profile))
}

#[utoipa::path(get, path = "/v1/model-profiles", tag = "models", responses((status = 200, description = "the workspace's model profiles", body = ModelProfileList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_profiles(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<ModelProfileList>, ApiError> {
    Ok(Json(s.service.list_model_profiles(&c).await?))
}

#[utoipa::path(get, path = "/v1/model-profiles/{name}", tag = "models", params(("name" = String, Path, description = "profile name", pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")), responses((status = 200, description = "the profile", body = ModelProfile), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_profile(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(name): Path<String>,
) -> Result<Json<ModelProfile>, ApiError> {
    Ok(Json(s.service.get_model_profile(&c, &name).await?))
}

/// Creates or replaces a profile (validated; `agents.manage`).
#[utoipa::path(put, path = "/v1/model-profiles/{name}", tag = "models", params(("name" = String, Path, description = "profile name", pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")), request_body = PutModelProfile, responses((status = 200, description = "stored", body = ModelProfile), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn put_profile(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(name): Path<String>,
    b: JsonBody<PutModelProfile>,
) -> Result<Json<ModelProfile>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.put_model_profile(&c, &name, &b).await?))
}

#[utoipa::path(delete, path = "/v1/model-profiles/{name}", tag = "models", params(("name" = String, Path, description = "profile name", pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")), responses((status = 204, description = "deleted"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn delete_profile(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.delete_model_profile(&c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
