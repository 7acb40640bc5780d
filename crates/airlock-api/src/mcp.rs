//! The HTTP side of the MCP front end (MCP-1): what `/mcp` is behind
//! before the MCP service (airlock-mcp, on rmcp) sees a request.
//!
//! - [`gate`]: only `Authorization: Bearer alk_…` counts (session cookies
//!   are ignored there, so a browser holding a session cannot be turned
//!   against it); the key is authenticated and rate-limited like any API
//!   request, and the [`Caller`] it resolves to travels in the request's
//!   extensions to the MCP handler. No key, or a key that does not
//!   authenticate: 401 with `WWW-Authenticate`. Answers are never cached
//!   (the tool list depends on the key).
//! - [`envelope`]: a body over the limit, not JSON, or not one JSON-RPC
//!   2.0 message gets a JSON-RPC error (the SDK answers those with a bare
//!   415), before anything else reads it.

use airlock_protocol::ErrorCode;
use airlock_service::{Caller, Credential};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::auth::{authenticate_credential, in_workspace};
use crate::{ApiError, AppState};

/// The largest `/mcp` body read (a tool call's arguments are bounded
/// again, lower, by the MCP handler).
pub const MAX_MCP_BODY_BYTES: usize = 2 << 20;

pub(crate) async fn gate(
    axum::extract::State(s): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let caller = match bearer {
        None => Err(ApiError::new(
            ErrorCode::Unauthenticated,
            "MCP needs an API key: Authorization: Bearer alk_…",
        )),
        Some(key) => caller(&s, &parts, key).await,
    };
    let mut r = match caller {
        Ok(c) => {
            parts.extensions.insert(c);
            next.run(axum::extract::Request::from_parts(parts, body))
                .await
        }
        Err(e) => {
            let unauthenticated = e.0.code == ErrorCode::Unauthenticated;
            let mut r = e.into_response();
            if unauthenticated {
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"airlock\""),
                );
            }
            r
        }
    };
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, private"),
    );
    r
}

async fn caller(s: &AppState, parts: &Parts, key: String) -> Result<Caller, ApiError> {
    let p = authenticate_credential(s, parts, Credential::ApiKey(key), false).await?;
    in_workspace(s, parts, p).await
}

/// A JSON-RPC error answer.
fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// Checks a POST body before the SDK reads it: at most
/// [`MAX_MCP_BODY_BYTES`], JSON, one JSON-RPC 2.0 message (a request, a
/// notification or a response; batches left MCP in 2025-06-18).
/// Anything else: parse error (-32700) or invalid request (-32600).
pub(crate) async fn envelope(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MCP_BODY_BYTES).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            Value::Null,
            -32600,
            &format!("a message is at most {MAX_MCP_BODY_BYTES} bytes"),
        );
    };
    let v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                &format!("parse error: {e}"),
            );
        }
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    let valid = v.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (v.get("method").is_some_and(Value::is_string)
            || v.get("result").is_some()
            || v.get("error").is_some());
    if !valid {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "invalid request: one JSON-RPC 2.0 message per POST",
        );
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}
