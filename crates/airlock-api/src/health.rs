//! Health (API-7) and the OpenAPI document (API-1).

use airlock_protocol::ErrorCode;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{ApiError, AppState};

/// `/readyz` when ready.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// Always `ready`.
    pub status: String,
}

/// Liveness: the process answers. No detail.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "alive", content_type = "text/plain", body = String)), security(()))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers and its schema is current.
#[utoipa::path(get, path = "/readyz", tag = "health", responses((status = 200, description = "ready", body = Ready), (status = 503, description = "not_ready", body = airlock_protocol::ErrorBody)), security(()))]
pub async fn readyz(State(s): State<AppState>) -> Response {
    if s.service.ready().await {
        Json(Ready {
            status: "ready".into(),
        })
        .into_response()
    } else {
        ApiError::new(
            ErrorCode::NotReady,
            "the database is unreachable or its schema is not current",
        )
        .into_response()
    }
}

/// The OpenAPI 3.1 document (API-1).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health", responses((status = 200, description = "this document (OpenAPI 3.1)", body = Object)), security(()))]
pub async fn openapi_json() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = DOC.get_or_init(|| crate::openapi_document().to_json().unwrap_or_default());
    ([(header::CONTENT_TYPE, "application/json")], text.clone()).into_response()
}
