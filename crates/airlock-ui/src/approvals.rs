//! Approvals (UI-1, AGT-5) and the emergency stop (AGT-6): the inbox of
//! pending requests with the history by state, one request in full (its
//! payload, the hash the decision binds to, what tainted the agent's
//! context, its decisions), approve and reject with a note; and the stop
//! and resume forms every page's header and banner carry.
//!
//! The approve form carries the `payload_hash` the person saw; the
//! service refuses the approval when it is not the request's, so what is
//! approved is exactly what was shown. Who may decide (and self-approval)
//! is the service's rule: the page only leaves out the buttons of someone
//! who may not decide.

use std::collections::HashMap;

use airlock_api::AppState;
use airlock_protocol::approvals::{
    Approval, ApprovalKind, ApprovalState, Approve, Grant, ListApprovals, MAX_NOTE_CHARS, Reject,
};
use airlock_protocol::emergency::StopRequest;
use airlock_protocol::{Error, ErrorCode};
use airlock_service::Operation;
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use crate::auth_pages::Empty;
use crate::format;
use crate::page::{Chrome, Nav, UiError, on_the_form, render, render_status, see_other};
use crate::session::{Posted, Viewer, field, referer_path, safe_next};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/approvals", get(inbox))
        .route("/approvals/{id}", get(detail))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/reject", post(reject))
        .route("/emergency/stop", post(stop))
        .route("/emergency/resume", post(resume))
}

/// One approval as a row of the inbox.
#[derive(Debug)]
struct ApprovalRow {
    id: String,
    worker: String,
    run_id: String,
    short_run: String,
    kind: &'static str,
    reason: String,
    requested_by: String,
    state: &'static str,
    created: String,
    expires: String,
    decided: String,
}

/// Usernames by user id, to show people by name (ids when the list
/// cannot be read).
pub(crate) async fn names(s: &AppState, v: &Viewer) -> HashMap<String, String> {
    match s.service.list_members(&v.caller).await {
        Ok(l) => l
            .members
            .into_iter()
            .map(|m| (m.user_id, m.username))
            .collect(),
        Err(_) => HashMap::new(),
    }
}

pub(crate) fn name_of(names: &HashMap<String, String>, id: &str) -> String {
    names.get(id).cloned().unwrap_or_else(|| id.to_string())
}

impl ApprovalRow {
    fn new(a: &Approval, names: &HashMap<String, String>) -> Self {
        Self {
            id: a.id.clone(),
            worker: a.worker_id.clone(),
            run_id: a.run_id.clone(),
            short_run: format::clip(&a.run_id, 14),
            kind: a.kind.as_str(),
            reason: format::clip(&format::strip_ansi(a.reason.as_deref().unwrap_or("")), 200),
            requested_by: name_of(names, &a.requested_by),
            state: a.state.as_str(),
            created: format::time(a.created_at),
            expires: format::time(a.expires_at),
            decided: match (&a.decided_by, a.decided_at) {
                (Some(by), Some(at)) => format!("{}, {}", name_of(names, by), format::time(at)),
                (Some(by), None) => name_of(names, by),
                _ => String::new(),
            },
        }
    }
}

/// A tab of the inbox.
#[derive(Debug)]
struct Tab {
    href: String,
    label: &'static str,
    current: bool,
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct InboxPage {
    chrome: Chrome,
    tabs: Vec<Tab>,
    state: &'static str,
    rows: Vec<ApprovalRow>,
    next: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InboxQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

fn bad_query(msg: impl Into<String>) -> UiError {
    UiError::Page(Error::new(ErrorCode::InvalidQuery, msg))
}

async fn inbox(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<InboxQuery>,
) -> Result<Response, UiError> {
    let state = match q.state.as_deref() {
        None | Some("") => ApprovalState::Pending,
        Some(x) => ApprovalState::parse(x).ok_or_else(|| {
            bad_query(format!(
                "state must be one of {}",
                ApprovalState::ALL.map(|s| s.as_str()).join(", ")
            ))
        })?,
    };
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let l = s
        .service
        .list_approvals(
            &v.caller,
            &ListApprovals {
                state: Some(state),
                cursor,
                limit: Some(50),
                ..Default::default()
            },
        )
        .await?;
    let tabs = ApprovalState::ALL
        .iter()
        .map(|st| Tab {
            href: format!("/approvals?state={}", st.as_str()),
            label: st.as_str(),
            current: *st == state,
        })
        .collect();
    let next = l.next_cursor.map(|c| {
        format!(
            "/approvals?state={}&cursor={}",
            state.as_str(),
            form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()
        )
    });
    Ok(render(&InboxPage {
        chrome: Chrome::load(&s, &v, Nav::Approvals, "Approvals").await,
        tabs,
        state: state.as_str(),
        rows: {
            let names = names(&s, &v).await;
            l.approvals
                .iter()
                .map(|a| ApprovalRow::new(a, &names))
                .collect()
        },
        next,
    }))
}

/// An action of the approval's run, as the detail page lists it.
#[derive(Debug)]
struct ActionRow {
    seq: i64,
    kind: String,
    state: &'static str,
    /// This approval is for this action.
    this: bool,
    verdict: String,
    tainted_by: Vec<String>,
}

#[derive(Template)]
#[template(path = "approval.html")]
struct DetailPage {
    chrome: Chrome,
    a: ApprovalRow,
    payload: String,
    hash: String,
    run_actor: String,
    full_reason: String,
    action_id: String,
    /// The content that tainted the agent's context when it asked (from
    /// the policy's decision on the action).
    tainted_by: Vec<String>,
    actions: Vec<ActionRow>,
    pending: bool,
    may_decide: bool,
    /// A standing grant can be offered (an agent action).
    grants: bool,
    note_max: usize,
    decided_at: String,
    decided_by: String,
    decision_note: String,
    grant: String,
    consumed: String,
    /// What went wrong with the decision just sent, and what was typed.
    error: String,
    note: String,
}

fn taint_of(decision: Option<&serde_json::Value>) -> Vec<String> {
    decision
        .and_then(|d| d["detail"]["tainted_by"].as_array())
        .map(|l| {
            l.iter()
                .map(|t| format::clip(&format::strip_ansi(&format::scalar(t)), 300))
                .collect()
        })
        .unwrap_or_default()
}

/// The policy's verdict on an action and its reasons, as one line.
fn verdict_of(decision: Option<&serde_json::Value>) -> String {
    let Some(d) = decision else {
        return String::new();
    };
    let verdict = d.get("verdict").map(format::scalar).unwrap_or_default();
    let reasons: Vec<String> = d["detail"]["reasons"]
        .as_array()
        .map(|l| l.iter().map(format::scalar).collect())
        .unwrap_or_default();
    let line = if reasons.is_empty() {
        verdict
    } else {
        format!("{verdict}: {}", reasons.join("; "))
    };
    format::clip(&format::strip_ansi(&line), 300)
}

async fn detail_page(
    s: &AppState,
    v: &Viewer,
    id: &str,
    error: String,
    note: String,
) -> Result<DetailPage, UiError> {
    let a = s.service.get_approval(&v.caller, id).await?;
    let mut actions = Vec::new();
    let mut tainted_by = Vec::new();
    if a.kind == ApprovalKind::Action {
        // The run's journal (what the agent did before asking); a run the
        // person cannot read leaves it out, never an error.
        if let Ok(l) = s.service.list_actions(&v.caller, &a.run_id).await {
            for act in l.actions {
                let this = a.action_id.as_deref() == Some(act.id.as_str());
                let taint = taint_of(act.decision.as_ref());
                if this {
                    tainted_by = taint.clone();
                }
                actions.push(ActionRow {
                    seq: act.seq,
                    kind: format::strip_ansi(&act.kind),
                    state: act.state.as_str(),
                    this,
                    verdict: verdict_of(act.decision.as_ref()),
                    tainted_by: taint,
                });
            }
        }
    }
    let title = format!("Approval {}", format::clip(&a.id, 24));
    let names = names(s, v).await;
    Ok(DetailPage {
        chrome: Chrome::load(s, v, Nav::Approvals, title).await,
        payload: format::strip_ansi(&format::json(&a.payload)),
        hash: a.payload_hash.clone(),
        run_actor: name_of(&names, &a.run_actor),
        full_reason: format::strip_ansi(a.reason.as_deref().unwrap_or("")),
        action_id: a.action_id.clone().unwrap_or_default(),
        tainted_by,
        actions,
        pending: a.state == ApprovalState::Pending,
        may_decide: v.caller.may(Operation::DecideApprovals),
        grants: a.kind == ApprovalKind::Action,
        note_max: MAX_NOTE_CHARS,
        decided_at: format::time_opt(a.decided_at),
        decided_by: a
            .decided_by
            .as_deref()
            .map(|b| name_of(&names, b))
            .unwrap_or_default(),
        decision_note: a.note.clone().unwrap_or_default(),
        grant: a.grant.map(|g| g.as_str().to_string()).unwrap_or_default(),
        consumed: a.consumed_at.map(format::time).unwrap_or_default(),
        a: ApprovalRow::new(&a, &names),
        error,
        note,
    })
}

#[derive(Debug, Deserialize)]
struct DoneQuery {
    #[serde(default)]
    done: Option<String>,
}

async fn detail(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
    Query(q): Query<DoneQuery>,
) -> Result<Response, UiError> {
    let mut page = detail_page(&s, &v, &id, String::new(), String::new()).await?;
    let notice = match q.done.as_deref() {
        Some("approved") => "Approved.",
        Some("rejected") => "Rejected.",
        _ => "",
    };
    page.chrome = page.chrome.with_notice(notice);
    Ok(render(&page))
}

/// The note as the service takes it (empty is none).
fn note_of(fields: &[(String, String)]) -> Option<String> {
    field(fields, "note")
        .map(|n| n.replace("\r\n", "\n"))
        .filter(|n| !n.trim().is_empty())
}

/// The outcome of a decision: back to the request (now decided), or the
/// request again with the refusal beside the form and the note kept.
async fn decided(
    s: &AppState,
    v: &Viewer,
    id: &str,
    note: Option<String>,
    r: Result<Approval, Error>,
) -> Result<Response, UiError> {
    match r {
        Ok(a) => Ok(see_other(&format!(
            "/approvals/{}?done={}",
            form_urlencoded::byte_serialize(a.id.as_bytes()).collect::<String>(),
            a.state.as_str()
        ))),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::NotFound => {
            let status = airlock_api::status_of(e.code);
            let msg = refusal_message(&e);
            let page = detail_page(s, v, id, msg, note.unwrap_or_default()).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

/// A refusal as a person reads it, with what to do next.
fn refusal_message(e: &Error) -> String {
    match e.code {
        ErrorCode::ApprovalExpired => {
            "This request expired before the decision arrived; nothing was approved.".into()
        }
        ErrorCode::ApprovalNotPending => format!(
            "This request was already decided or ended ({}); your decision was not recorded.",
            e.message
        ),
        ErrorCode::ApprovalHashMismatch => "The payload changed since this page was loaded; \
             nothing was approved. Review the payload below and decide again."
            .into(),
        ErrorCode::SelfApproval => format!("Self-approval refused: {}.", e.message),
        ErrorCode::Forbidden => format!("Not allowed: {}.", e.message),
        _ => e.message.clone(),
    }
}

async fn approve(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let note = note_of(&p.fields);
    let grant = match field(&p.fields, "grant").unwrap_or("once") {
        "" => Grant::Once,
        g => match Grant::parse(g) {
            Some(Grant::ArgvPrefix) | None => {
                let e = Error::invalid_body("grant must be once or payload");
                return decided(&s, v, &id, note, Err(e)).await;
            }
            Some(g) => g,
        },
    };
    // The hash the person reviewed: the form always carries it, so a
    // decision can never be about another payload than the one shown.
    let Some(hash) = field(&p.fields, "payload_hash").filter(|h| !h.is_empty()) else {
        let e = Error::invalid_body(
            "payload_hash is missing: reload the page and review the payload before approving",
        );
        return decided(&s, v, &id, note, Err(e)).await;
    };
    let b = Approve {
        grant: Some(grant),
        argv_prefix: None,
        payload_hash: Some(hash.to_string()),
        note: note.clone(),
    };
    let r = s.service.approve(&v.caller, &id, &b).await;
    decided(&s, v, &id, note, r).await
}

async fn reject(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let note = note_of(&p.fields);
    let r = s
        .service
        .reject(&v.caller, &id, &Reject { note: note.clone() })
        .await;
    decided(&s, v, &id, note, r).await
}

/// A page asking to confirm a dangerous form (without JavaScript, or when
/// a form arrives without `confirm=yes`).
#[derive(Template)]
#[template(path = "confirm.html")]
#[derive(Debug)]
pub struct ConfirmPage {
    pub chrome: Chrome,
    pub heading: String,
    pub message: String,
    pub action: String,
    /// Hidden fields sent again: (name, value).
    pub hidden: Vec<(String, String)>,
    /// A free-text field the person may fill in: (name, label, value, max).
    pub text: Option<(String, String, String, usize)>,
    pub button: String,
    pub danger: bool,
    pub back: String,
    pub error: String,
}

/// Whether a dangerous form was confirmed.
pub fn confirmed(fields: &[(String, String)]) -> bool {
    field(fields, "confirm") == Some("yes")
}

/// Where to go back to after a header form: the form's `next`, else the
/// page it was sent from, else the overview.
fn back_to(fields: &[(String, String)], headers: &axum::http::HeaderMap) -> String {
    field(fields, "next")
        .and_then(safe_next)
        .map(str::to_string)
        .or_else(|| referer_path(headers))
        .filter(|p| !p.starts_with("/emergency/"))
        .unwrap_or_else(|| "/".into())
}

const MAX_REASON: usize = 1000;

async fn stop_confirm(
    s: &AppState,
    v: &Viewer,
    back: String,
    reason: String,
    error: String,
) -> ConfirmPage {
    ConfirmPage {
        chrome: Chrome::load(s, v, Nav::None, "Emergency stop").await,
        heading: "Stop everything in this workspace?".into(),
        message: "Running sandboxes are killed at once, queued and waiting runs are cancelled, \
                  open approvals can no longer be used, and nothing starts or connects out \
                  until someone resumes."
            .into(),
        action: "/emergency/stop".into(),
        hidden: vec![
            ("next".into(), back.clone()),
            ("confirm".into(), "yes".into()),
        ],
        text: Some((
            "reason".into(),
            "Reason (optional)".into(),
            reason,
            MAX_REASON,
        )),
        button: "Stop everything".into(),
        danger: true,
        back,
        error,
    }
}

async fn stop(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let back = back_to(&p.fields, &headers);
    let reason = field(&p.fields, "reason").unwrap_or("").trim().to_string();
    if !confirmed(&p.fields) {
        return Ok(render(
            &stop_confirm(&s, v, back, reason, String::new()).await,
        ));
    }
    let b = StopRequest {
        reason: (!reason.is_empty()).then(|| reason.clone()),
    };
    match s.service.emergency_stop(&v.caller, &b).await {
        Ok(_) => Ok(see_other(&back)),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::Forbidden => Ok(render_status(
            airlock_api::status_of(e.code),
            &stop_confirm(&s, v, back, reason, e.message).await,
        )),
        Err(e) => Err(e.into()),
    }
}

async fn resume(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let back = back_to(&p.fields, &headers);
    if !confirmed(&p.fields) {
        return Ok(render(&ConfirmPage {
            chrome: Chrome::load(&s, v, Nav::None, "Resume").await,
            heading: "Resume this workspace?".into(),
            message: "Runs can start and connect out again. Nothing that was stopped restarts \
                      by itself."
                .into(),
            action: "/emergency/resume".into(),
            hidden: vec![
                ("next".into(), back.clone()),
                ("confirm".into(), "yes".into()),
            ],
            text: None,
            button: "Resume".into(),
            danger: false,
            back,
            error: String::new(),
        }));
    }
    s.service.emergency_resume(&v.caller).await?;
    Ok(see_other(&back))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_actions_decision_reads_as_verdict_reasons_and_taint() {
        let d = json!({
            "verdict": "require_approval",
            "detail": {
                "reasons": ["sends data out", "context tainted"],
                "tainted_by": ["the contents of file page.html", "\u{1b}[31mred"],
            }
        });
        assert_eq!(
            verdict_of(Some(&d)),
            "require_approval: sends data out; context tainted"
        );
        assert_eq!(
            taint_of(Some(&d)),
            vec!["the contents of file page.html".to_string(), "red".into()]
        );
        assert_eq!(verdict_of(None), "");
        assert!(taint_of(Some(&json!({"verdict": "allow"}))).is_empty());
    }
}
