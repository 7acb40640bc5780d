//! Approval routes (AGT-5, API-2): the inbox, one request in full with its
//! hash, approve and reject, the standing rules and the workspace's
//! approval settings; and the action journal of a run (list, settle).
//! Who may decide is the service's rule; this module only speaks HTTP.

use airlock_protocol::ErrorBody;
use airlock_protocol::actions::{Action, ActionList, SettleAction};
use airlock_protocol::approvals::{
    Approval, ApprovalList, ApprovalSettings, Approve, ListApprovals, PutApprovalSettings, Reject,
    RuleList,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::InWorkspace;
use crate::{ApiError, AppState, JsonBody, QueryOf, body, query};

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(get_approval))
        .routes(routes!(approve))
        .routes(routes!(reject))
        .routes(routes!(list_rules))
        .routes(routes!(revoke_rule))
        .routes(routes!(get_settings, put_settings))
        .routes(routes!(list_actions))
        .routes(routes!(settle_action))
}

#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ListApprovals), responses((status = 200, description = "approval requests, newest first, with next_cursor", body = ApprovalList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_approvals(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    q: QueryOf<ListApprovals>,
) -> Result<Json<ApprovalList>, ApiError> {
    let q = query(q)?;
    Ok(Json(s.service.list_approvals(&c, &q).await?))
}

#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals", params(("id" = String, Path, description = "approval id")), responses((status = 200, description = "the request, its payload in full with its hash", body = Approval), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_approval(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<Approval>, ApiError> {
    Ok(Json(s.service.get_approval(&c, &id).await?))
}

#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals", params(("id" = String, Path, description = "approval id")), request_body = Approve, responses((status = 200, description = "approved", body = Approval), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn approve(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    b: JsonBody<Approve>,
) -> Result<Json<Approval>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.approve(&c, &id, &b).await?))
}

#[utoipa::path(post, path = "/v1/approvals/{id}/reject", tag = "approvals", params(("id" = String, Path, description = "approval id")), request_body = Reject, responses((status = 200, description = "rejected", body = Approval), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn reject(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
    b: JsonBody<Reject>,
) -> Result<Json<Approval>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.reject(&c, &id, &b).await?))
}

#[utoipa::path(get, path = "/v1/approval-rules", tag = "approvals", responses((status = 200, description = "the workspace's standing rules, revoked ones included", body = RuleList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_rules(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<RuleList>, ApiError> {
    Ok(Json(s.service.list_approval_rules(&c).await?))
}

#[utoipa::path(post, path = "/v1/approval-rules/{id}/revoke", tag = "approvals", params(("id" = String, Path, description = "rule id")), responses((status = 204, description = "revoked"), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn revoke_rule(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.service.revoke_approval_rule(&c, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/approval-settings", tag = "approvals", responses((status = 200, description = "the workspace's approval settings", body = ApprovalSettings), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn get_settings(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Json<ApprovalSettings>, ApiError> {
    Ok(Json(s.service.approval_settings(&c).await?))
}

#[utoipa::path(put, path = "/v1/approval-settings", tag = "approvals", request_body = PutApprovalSettings, responses((status = 200, description = "stored", body = ApprovalSettings), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn put_settings(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    b: JsonBody<PutApprovalSettings>,
) -> Result<Json<ApprovalSettings>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.put_approval_settings(&c, &b).await?))
}

#[utoipa::path(get, path = "/v1/runs/{id}/actions", tag = "runs", params(("id" = String, Path, description = "run id")), responses((status = 200, description = "the run's actions (tool calls), in order", body = ActionList), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn list_actions(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path(id): Path<String>,
) -> Result<Json<ActionList>, ApiError> {
    Ok(Json(s.service.list_actions(&c, &id).await?))
}

/// A person settles an action whose outcome is unknown (DUR-2).
#[utoipa::path(post, path = "/v1/runs/{id}/actions/{action}/settle", tag = "runs", params(("id" = String, Path, description = "run id"), ("action" = String, Path, description = "action id")), request_body = SettleAction, responses((status = 200, description = "settled", body = Action), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
async fn settle_action(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
    Path((id, action)): Path<(String, String)>,
    b: JsonBody<SettleAction>,
) -> Result<Json<Action>, ApiError> {
    let b = body(b)?;
    Ok(Json(s.service.settle_action(&c, &id, &action, &b).await?))
}
