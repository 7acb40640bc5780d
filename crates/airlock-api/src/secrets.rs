//! Secret routes (KEY-4): metadata only, never a value.

use airlock_protocol::ErrorBody;
use airlock_protocol::secrets::{PutSecret, SecretList, SecretStored};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_secrets))
        .routes(routes!(put_secret, delete_secret))
}

#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", responses((status = 200, description = "metadata only", body = SecretList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_secrets(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<SecretList>, ApiError> {
    Ok(Json(s.service.list_secrets(&c).await?))
}

#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path, description = "secret name", pattern = "^[A-Z][A-Z0-9_]{0,63}$")), request_body = PutSecret, responses((status = 200, description = "stored", body = SecretStored), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn put_secret(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(name): Path<String>,
    b: JsonBody<PutSecret>,
) -> Result<Json<SecretStored>, ApiError> {
    let b = body(b)?;
    Ok(Json(
        s.service
            .put_secret(&c, &name, b.value.into_bytes())
            .await?,
    ))
}

#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path, description = "secret name", pattern = "^[A-Z][A-Z0-9_]{0,63}$")), responses((status = 204, description = "deleted"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn delete_secret(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.delete_secret(&c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
