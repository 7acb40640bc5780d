//! Emergency stop routes (AGT-6, API-2) for the caller's workspace: its
//! state, stop and resume. Resuming restarts nothing.

use airlock_protocol::ErrorBody;
use airlock_protocol::emergency::{EmergencyState, StopRequest, Stopped};
use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, body};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(emergency_state, emergency_stop))
        .routes(routes!(emergency_resume))
}

#[utoipa::path(get, path = "/v1/emergency-stop", tag = "emergency", responses((status = 200, description = "whether the workspace is stopped", body = EmergencyState), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn emergency_state(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<EmergencyState>, ApiError> {
    Ok(Json(s.service.emergency_state(&c).await?))
}

/// Stops the workspace: queued and waiting runs end `cancelled`
/// (`emergency_stop`), running sandboxes are killed, approvals cancelled,
/// undispatched agent actions aborted, new egress refused. Idempotent.
#[utoipa::path(post, path = "/v1/emergency-stop", tag = "emergency", request_body = StopRequest, responses((status = 200, description = "stopped", body = Stopped), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn emergency_stop(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<StopRequest>,
) -> Result<Json<Stopped>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.emergency_stop(&c, &b).await?))
}

/// Clears the stop. Nothing that it ended is started again.
#[utoipa::path(post, path = "/v1/emergency-stop/resume", tag = "emergency", responses((status = 200, description = "resumed (or was not stopped)", body = EmergencyState), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn emergency_resume(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<EmergencyState>, ApiError> {
    Ok(Json(s.service.emergency_resume(&c).await?))
}
