//! Prometheus metrics (API-7): run counts by state and queue depth from the
//! database; run outcomes and durations, sandbox launches and egress
//! decisions from the executor's counters; rate-limit rejections from the
//! limiters. Served to administrators of the workspace that owns the
//! workers folder at `/metrics`, and without authentication on a separate
//! listener when `airlock up --metrics-listen` asks for one.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use airlock_iam::Permission;
use airlock_service::metrics::{COUNTERS, DURATION_BUCKETS, TERMINAL};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::{ApiError, AppState};

/// The exposition text.
pub async fn render(s: &AppState) -> Result<String, ApiError> {
    let mut out = String::new();
    let by_state = s.service.store().count_by_state().await?;
    let _ = writeln!(out, "# HELP airlock_service Runs in the database by state.");
    let _ = writeln!(out, "# TYPE airlock_service gauge");
    let mut queued = 0;
    for (state, n) in &by_state {
        if state == "queued" {
            queued = *n;
        }
        let _ = writeln!(out, "airlock_service{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP airlock_queue_depth Runs waiting to start.");
    let _ = writeln!(out, "# TYPE airlock_queue_depth gauge");
    let _ = writeln!(out, "airlock_queue_depth {queued}");
    let _ = writeln!(
        out,
        "# HELP airlock_service_finished_total Runs this process finished, by state."
    );
    let _ = writeln!(out, "# TYPE airlock_service_finished_total counter");
    for (i, st) in TERMINAL.iter().enumerate() {
        let _ = writeln!(
            out,
            "airlock_service_finished_total{{state=\"{}\"}} {}",
            st.as_str(),
            COUNTERS.finished[i].load(Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP airlock_run_duration_seconds Wall time of runs this process executed."
    );
    let _ = writeln!(out, "# TYPE airlock_run_duration_seconds histogram");
    for (i, le) in DURATION_BUCKETS.iter().enumerate() {
        let _ = writeln!(
            out,
            "airlock_run_duration_seconds_bucket{{le=\"{le}\"}} {}",
            COUNTERS.duration_buckets[i].load(Relaxed)
        );
    }
    let count = COUNTERS.duration_buckets[10].load(Relaxed);
    let _ = writeln!(
        out,
        "airlock_run_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "airlock_run_duration_seconds_sum {}",
        COUNTERS.duration_ms_sum.load(Relaxed) as f64 / 1000.0
    );
    let _ = writeln!(out, "airlock_run_duration_seconds_count {count}");
    let _ = writeln!(
        out,
        "# HELP airlock_sandbox_launches_total Sandboxes started by this process."
    );
    let _ = writeln!(out, "# TYPE airlock_sandbox_launches_total counter");
    let _ = writeln!(
        out,
        "airlock_sandbox_launches_total {}",
        COUNTERS.sandbox_launches.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP airlock_egress_decisions_total Egress proxy decisions of finished runs."
    );
    let _ = writeln!(out, "# TYPE airlock_egress_decisions_total counter");
    let _ = writeln!(
        out,
        "airlock_egress_decisions_total{{decision=\"allow\"}} {}",
        COUNTERS.egress_allowed.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "airlock_egress_decisions_total{{decision=\"deny\"}} {}",
        COUNTERS.egress_denied.load(Relaxed)
    );
    let c = &s.limits.counters;
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
        ("quota", &c.rejected_quota),
    ] {
        let _ = writeln!(
            out,
            "airlock_rate_limited_total{{reason=\"{reason}\"}} {}",
            v.load(Relaxed)
        );
    }
    Ok(out)
}

/// `/metrics` for administrators of the workers' workspace.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String), (status = "4XX", description = "error", body = crate::openapi::ErrorBody), (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)))]
pub async fn metrics(State(s): State<AppState>, c: Caller) -> Result<Response, ApiError> {
    c.require(Permission::WorkspaceManage)?;
    if c.workspace != s.service.config().workers_workspace {
        return Err(ApiError::not_found());
    }
    let text = render(&s).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
