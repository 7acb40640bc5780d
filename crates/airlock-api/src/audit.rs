//! Audit routes (AUD-1, AUD-2): pages, verification, JSON Lines export.

use airlock_protocol::ErrorBody;
use airlock_protocol::audit::{AuditPage, AuditVerification, ListAudit};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, QueryOf, query};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_audit))
        .routes(routes!(verify_audit))
        .routes(routes!(export_audit))
}

/// The workspace's audit events, a page at a time in sequence order;
/// `GET /v1/audit/verify` checks the whole chain.
#[utoipa::path(get, path = "/v1/audit", tag = "audit", params(ListAudit), responses((status = 200, description = "a page of audit events and the cursor of the next", body = AuditPage), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_audit(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    q: QueryOf<ListAudit>,
) -> Result<Json<AuditPage>, ApiError> {
    let q = query(q)?;
    Ok(Json(s.service.list_audit(&c, &q).await?))
}

/// Verifies the workspace's chain against its newest signed checkpoint:
/// the count and head hash, or the first bad sequence number; which
/// checkpoint was used, or a warning that there is none.
#[utoipa::path(get, path = "/v1/audit/verify", tag = "audit", responses((status = 200, description = "verification result", body = AuditVerification), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn verify_audit(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<AuditVerification>, ApiError> {
    Ok(Json(s.service.verify_audit(&c).await?))
}

/// The workspace's chain as JSON Lines, then its signed checkpoints (lines
/// of `"type":"checkpoint"`), verifiable elsewhere with `verify_export.py`.
#[utoipa::path(get, path = "/v1/audit/export", tag = "audit", responses((status = 200, description = "JSON Lines: one event per line, then the signed checkpoints", content_type = "application/x-ndjson", body = String), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn export_audit(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Response, ApiError> {
    let text = s.service.export_audit(&c).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"audit.jsonl\"",
            ),
        ],
        text,
    )
        .into_response())
}
