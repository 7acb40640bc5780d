//! Prometheus metrics (API-7): the service's text (runs, queue, sandbox
//! launches, egress, quotas) plus this process's HTTP rate-limit
//! counters. For administrators of the workspace that owns the workers
//! folder at `/metrics`, and without authentication on a separate listener
//! when `airlock up --metrics-listen` asks for one.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use airlock_protocol::ErrorBody;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::auth::InWorkspace;
use crate::limits::Limits;
use crate::{ApiError, AppState};

/// The HTTP layer's own counters, appended to the service's text.
pub fn append_http_counters(out: &mut String, limits: &Limits) {
    let c = &limits.counters;
    let _ = writeln!(
        out,
        "# HELP airlock_rate_limited_total Requests refused with 429, by reason."
    );
    let _ = writeln!(out, "# TYPE airlock_rate_limited_total counter");
    for (reason, v) in [
        ("client", &c.rejected_client),
        ("auth_failures", &c.rejected_auth_failures),
        ("identity", &c.rejected_identity),
        ("streams", &c.rejected_streams),
    ] {
        let _ = writeln!(
            out,
            "airlock_rate_limited_total{{reason=\"{reason}\"}} {}",
            v.load(Relaxed)
        );
    }
}

/// The exposition text for a private listener (no caller).
pub async fn unauthenticated_text(s: &AppState) -> Result<String, ApiError> {
    let mut out = s.service.metrics_text().await?;
    append_http_counters(&mut out, &s.limits);
    Ok(out)
}

/// `/metrics` for administrators of the workers' workspace.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String), (status = "4XX", description = "error", body = ErrorBody), (status = "5XX", description = "internal error", body = ErrorBody)))]
pub async fn metrics(
    State(s): State<AppState>,
    InWorkspace(c): InWorkspace,
) -> Result<Response, ApiError> {
    let mut text = s.service.metrics(&c).await?;
    append_http_counters(&mut text, &s.limits);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
