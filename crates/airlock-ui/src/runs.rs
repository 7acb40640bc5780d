//! Runs (UI-1): the list with filters and cursor paging (active rows
//! refresh), and a run's page: header, inputs, outputs, artifacts, the
//! live log over server-sent events, an agent run's actions and
//! approvals, the containment report and egress summary, cancel and
//! re-run.

use airlock_api::AppState;
use airlock_protocol::runs::Run;
use axum::Router;

use crate::format;

pub fn routes() -> Router<AppState> {
    Router::new()
}

/// One run as a row of a runs table.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub id: String,
    pub short_id: String,
    pub worker: String,
    pub state: &'static str,
    pub active: bool,
    pub trigger: String,
    pub actor: String,
    pub created: String,
    pub created_iso: String,
    pub duration: String,
    pub error: String,
}

impl RunRow {
    pub fn new(r: &Run, now: i64) -> Self {
        Self {
            short_id: format::clip(&r.id, 14),
            id: r.id.clone(),
            worker: r.worker_id.clone(),
            state: r.state.as_str(),
            active: !r.state.is_terminal(),
            trigger: r.trigger.clone(),
            actor: r.actor.clone(),
            created: format::time(r.created_at),
            created_iso: format::iso(r.created_at),
            duration: format::took(r.started_at, r.finished_at, now),
            error: r
                .error_code
                .clone()
                .map(|c| match &r.error_message {
                    Some(m) => format!("{c}: {}", format::clip(m, 160)),
                    None => c,
                })
                .unwrap_or_default(),
        }
    }
}
