//! `/`: what needs a person now — runs in flight, approvals waiting,
//! failures of the last day.

use airlock_api::AppState;
use airlock_protocol::approvals::{ApprovalState, ListApprovals};
use airlock_protocol::runs::{ListRuns, RunState};
use airlock_service::Operation;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;

use crate::format;
use crate::page::{Chrome, Nav, UiError, render};
use crate::runs::RunRow;
use crate::session::Viewer;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/ui/overview/active", get(active_fragment))
}

/// A pending approval as the overview lists it.
#[derive(Debug)]
pub struct PendingRow {
    pub id: String,
    pub worker: String,
    pub run_id: String,
    pub kind: String,
    pub reason: String,
    pub expires: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    chrome: Chrome,
    may_runs: bool,
    active: Vec<RunRow>,
    pending: Vec<PendingRow>,
    failures: Vec<RunRow>,
}

#[derive(Template)]
#[template(path = "run_rows.html")]
struct RunRows {
    rows: Vec<RunRow>,
    empty: &'static str,
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

async fn runs_in(
    s: &AppState,
    v: &Viewer,
    states: &[RunState],
    limit: i64,
) -> Result<Vec<RunRow>, UiError> {
    let now = s.service.now();
    let mut rows = Vec::new();
    for st in states {
        let q = ListRuns {
            state: Some(*st),
            limit: Some(limit),
            ..Default::default()
        };
        let l = s.service.list_runs(&v.caller, &q).await?;
        rows.extend(l.runs.iter().map(|r| RunRow::new(r, now)));
    }
    rows.sort_by(|a, b| b.created_iso.cmp(&a.created_iso));
    RunRow::name_actors(&mut rows, &crate::page::names(s, v).await);
    Ok(rows)
}

async fn active_rows(s: &AppState, v: &Viewer) -> Result<Vec<RunRow>, UiError> {
    let states = [
        RunState::Running,
        RunState::AwaitingApproval,
        RunState::Queued,
    ];
    runs_in(s, v, &states, 20).await
}

#[derive(Debug, serde::Deserialize)]
struct OverviewQuery {
    #[serde(default)]
    done: Option<String>,
}

async fn overview(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<OverviewQuery>,
) -> Result<Response, UiError> {
    let may_runs = v.caller.may(Operation::ReadRuns);
    let (mut active, mut pending, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    if may_runs {
        active = active_rows(&s, &v).await?;
        let since = s.service.now() - DAY_MS;
        let failed = [
            RunState::Failed,
            RunState::TimedOut,
            RunState::Blocked,
            RunState::Unknown,
        ];
        failures = runs_in(&s, &v, &failed, 20).await?;
        let keep = format::iso(since);
        failures.retain(|r| r.created_iso >= keep);
        let q = ListApprovals {
            state: Some(ApprovalState::Pending),
            limit: Some(20),
            ..Default::default()
        };
        pending = s
            .service
            .list_approvals(&v.caller, &q)
            .await?
            .approvals
            .into_iter()
            .map(|a| PendingRow {
                kind: format!("{:?}", a.kind).to_lowercase(),
                reason: format::clip(&a.reason.unwrap_or_default(), 200),
                expires: format::time(a.expires_at),
                id: a.id,
                worker: a.worker_id,
                run_id: a.run_id,
            })
            .collect();
    }
    Ok(render(&OverviewPage {
        chrome: Chrome::load(&s, &v, Nav::Overview, "Overview")
            .await
            .with_notice(match q.done.as_deref() {
                Some("workspace-deleted") => {
                    "The workspace was deleted. This is another of your workspaces."
                }
                _ => "",
            }),
        may_runs,
        active,
        pending,
        failures,
    }))
}

/// The active runs table alone (what `app.js` refreshes).
async fn active_fragment(State(s): State<AppState>, v: Viewer) -> Result<Response, UiError> {
    Ok(render(&RunRows {
        rows: active_rows(&s, &v).await?,
        empty: "Nothing is running or waiting.",
    }))
}
