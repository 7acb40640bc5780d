//! The workspace's settings page (DUR-7): how long each kind of material
//! is kept, what a pass would remove now (a dry run) and a pass on demand,
//! and deleting the workspace. Each form calls one service method; the
//! service checks `workspace.manage` (retention) and `workspace.delete`
//! (deletion, the name typed again) whatever the page offered.

use airlock_api::AppState;
use airlock_protocol::retention::{Retention, RetentionApplied};
use airlock_protocol::{Error, ErrorCode};
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use crate::approvals::{ConfirmPage, confirmed};
use crate::auth_pages::Empty;
use crate::page::{Chrome, Nav, UiError, on_the_form, render, render_status, see_other};
use crate::session::{Posted, Viewer, field};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/settings", get(settings).post(save_retention))
        .route("/settings/retention/apply", post(apply_retention))
        .route("/settings/delete", post(delete_workspace))
}

/// The kinds of material, in the order of the form: (field, label, help).
const KINDS: [(&str, &str, &str); 5] = [
    (
        "runs_days",
        "Runs",
        "Runs that ended this many days ago, with their logs, artifact records, transcript, actions and approvals. Runs whose outcome is unknown are kept until a person settles them.",
    ),
    (
        "logs_days",
        "Log lines",
        "The log lines of runs that ended this many days ago (the runs stay).",
    ),
    (
        "artifacts_days",
        "Artifact records",
        "The artifact records of runs that ended this many days ago; their bytes are freed by the operator's garbage collection (airlock gc).",
    ),
    (
        "uploads_days",
        "Uploads",
        "Uploads made this many days ago that no unfinished run uses.",
    ),
    (
        "fires_days",
        "Schedule fires",
        "Schedule fires made this many days ago (each schedule's newest stays).",
    ),
];

/// One field of the retention form.
#[derive(Debug)]
struct KindRow {
    field: &'static str,
    label: &'static str,
    help: &'static str,
    /// The days as typed or stored; empty keeps the material for ever.
    value: String,
}

/// What a dry run or a pass removed, by kind: (label, count).
#[derive(Debug)]
struct Counts {
    dry_run: bool,
    rows: Vec<(&'static str, u64)>,
}

impl Counts {
    fn of(a: &RetentionApplied) -> Self {
        let r = a.removed;
        Self {
            dry_run: a.dry_run,
            rows: vec![
                ("Runs", r.runs),
                ("Log lines", r.log_events),
                ("Artifact records", r.artifacts),
                ("Uploads", r.uploads),
                ("Schedule fires", r.fires),
            ],
        }
    }
}

#[derive(Template)]
#[template(path = "workspace.html")]
struct SettingsPage {
    chrome: Chrome,
    kinds: Vec<KindRow>,
    /// Every kind is kept for ever.
    keeps_all: bool,
    counts: Option<Counts>,
    may_delete: bool,
    /// The workspace's name, which the delete form asks for again.
    name: String,
    error: String,
    delete_error: String,
}

fn days_of(r: &Retention, field: &str) -> Option<u64> {
    match field {
        "runs_days" => r.runs_days,
        "logs_days" => r.logs_days,
        "artifacts_days" => r.artifacts_days,
        "uploads_days" => r.uploads_days,
        "fires_days" => r.fires_days,
        _ => None,
    }
}

fn rows_of(values: impl Fn(&str) -> String) -> Vec<KindRow> {
    KINDS
        .iter()
        .map(|&(field, label, help)| KindRow {
            field,
            label,
            help,
            value: values(field),
        })
        .collect()
}

async fn settings_page(
    s: &AppState,
    v: &Viewer,
    kinds: Option<Vec<KindRow>>,
    error: String,
) -> Result<SettingsPage, UiError> {
    let r = s.service.get_retention(&v.caller).await?;
    let chrome = Chrome::load(s, v, Nav::Workspace, "Workspace").await;
    let kinds = kinds
        .unwrap_or_else(|| rows_of(|f| days_of(&r, f).map(|d| d.to_string()).unwrap_or_default()));
    Ok(SettingsPage {
        keeps_all: r == Retention::default(),
        name: chrome.workspace.clone(),
        chrome,
        kinds,
        counts: None,
        may_delete: s.service.may_delete_workspace(&v.caller),
        error,
        delete_error: String::new(),
    })
}

#[derive(Debug, Deserialize)]
struct SettingsQuery {
    #[serde(default)]
    done: Option<String>,
    /// `1`: show what a pass would remove now.
    #[serde(default)]
    preview: Option<String>,
}

async fn settings(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<SettingsQuery>,
) -> Result<Response, UiError> {
    let mut p = settings_page(&s, &v, None, String::new()).await?;
    if q.preview.as_deref() == Some("1") {
        let a = s.service.apply_retention(&v.caller, true).await?;
        p.counts = Some(Counts::of(&a));
    }
    let notice = match q.done.as_deref() {
        Some("saved") => "Retention saved. The next pass (hourly, or “Apply now”) follows it.",
        _ => "",
    };
    p.chrome = p.chrome.with_notice(notice);
    Ok(render(&p))
}

/// Reads the form's days: an empty field keeps that material for ever; the
/// service checks the range.
fn parse_days(fields: &[(String, String)]) -> Result<Retention, String> {
    let mut r = Retention::default();
    for (name, label, _) in KINDS {
        let raw = field(fields, name).unwrap_or("").trim();
        let days = if raw.is_empty() {
            None
        } else {
            Some(raw.parse::<u64>().map_err(|_| {
                format!("{label}: a whole number of days, or empty to keep for ever.")
            })?)
        };
        match name {
            "runs_days" => r.runs_days = days,
            "logs_days" => r.logs_days = days,
            "artifacts_days" => r.artifacts_days = days,
            "uploads_days" => r.uploads_days = days,
            _ => r.fires_days = days,
        }
    }
    Ok(r)
}

async fn save_retention(State(s): State<AppState>, p: Posted<Empty>) -> Result<Response, UiError> {
    let v = &p.viewer;
    let typed = || rows_of(|f| crate::format::clip(field(&p.fields, f).unwrap_or("").trim(), 12));
    let r = match parse_days(&p.fields) {
        Ok(r) => s.service.set_retention(&v.caller, &r).await,
        Err(msg) => Err(Error::invalid_body(msg)),
    };
    match r {
        Ok(_) => Ok(see_other("/settings?done=saved")),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::Forbidden => {
            let status = airlock_api::status_of(e.code);
            let page = settings_page(&s, v, Some(typed()), e.message).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

/// A retention pass now, after a confirmation.
async fn apply_retention(State(s): State<AppState>, p: Posted<Empty>) -> Result<Response, UiError> {
    let v = &p.viewer;
    if !confirmed(&p.fields) {
        let heading = "Apply retention now?".to_string();
        return Ok(render(&ConfirmPage {
            chrome: Chrome::load(&s, v, Nav::Workspace, heading.clone()).await,
            heading,
            message: "Everything older than the settings allow is removed now, for good. \
                      “Preview” on the settings page shows how much that is."
                .into(),
            action: "/settings/retention/apply".into(),
            hidden: vec![("confirm".into(), "yes".into())],
            text: None,
            button: "Apply now".into(),
            danger: true,
            back: "/settings".into(),
            error: String::new(),
        }));
    }
    let a = s.service.apply_retention(&v.caller, false).await?;
    let mut page = settings_page(&s, v, None, String::new()).await?;
    page.counts = Some(Counts::of(&a));
    page.chrome = page.chrome.with_notice("Retention applied.");
    Ok(render(&page))
}

/// Deletes the workspace: the name typed again is the confirmation (the
/// service compares it). Afterwards the person lands in another of their
/// workspaces.
async fn delete_workspace(
    State(s): State<AppState>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let typed = field(&p.fields, "confirm").unwrap_or("");
    let id = v.caller.workspace.clone();
    match s.service.delete_workspace(&v.caller, &id, typed).await {
        Ok(_) => Ok(see_other("/?done=workspace-deleted")),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::Forbidden => {
            let status = airlock_api::status_of(e.code);
            let mut page = settings_page(&s, v, None, String::new()).await?;
            page.delete_error = e.message;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}
