//! Runs (UI-1): the list with filters and cursor paging (active rows
//! refresh), and a run's page: header, inputs, outputs, artifacts, the
//! live log over server-sent events, an agent run's actions and
//! approvals, the containment report and egress summary, cancel and
//! re-run.
//!
//! The log on a page is capped at [`LOG_CAP`] lines (the last ones; the
//! full log is a download), so a run with a huge log stays a page a
//! browser can show.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use airlock_api::AppState;
use airlock_protocol::approvals::ListApprovals;
use airlock_protocol::runs::{
    ListRuns, ResolveRun, RetryRun, Run, RunEvent, RunResolution, RunState,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::{Followed, Operation};
use askama::Template;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use crate::format;
use crate::page::{Chrome, Nav, UiError, render, render_status, see_other};
use crate::session::{Posted, Viewer, field};

/// The most log lines a page holds (the browser keeps to it too).
pub const LOG_CAP: usize = 5000;
/// The runs of one page of the list.
const PAGE: i64 = 50;
/// The triggers the filter suggests.
const TRIGGERS: [&str; 6] = ["api", "cli", "plan", "schedule", "webhook", "mcp"];

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/runs", get(list))
        .route("/ui/runs/rows", get(rows_fragment))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/stream", get(stream))
        .route("/runs/{id}/log.txt", get(log_txt))
        .route("/runs/{id}/artifacts/{*name}", get(artifact))
        .route("/runs/{id}/cancel", post(cancel))
        .route("/runs/{id}/retry", post(retry))
        .route("/runs/{id}/resolve", post(resolve))
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
    /// Every row's actor by name, where it is a member's id.
    pub fn name_actors(rows: &mut [RunRow], names: &std::collections::HashMap<String, String>) {
        for r in rows {
            r.actor = crate::page::name_of(names, &r.actor);
        }
    }

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

// ---------------------------------------------------------------- the list

/// The list's filters as typed (kept in the form and in every link).
#[derive(Debug, Clone, Default)]
struct Filters {
    state: String,
    worker: String,
    trigger: String,
    since: String,
    until: String,
    id: String,
    cursor: String,
}

impl Filters {
    fn parse(raw: Option<&str>) -> Self {
        let fields: Vec<(String, String)> = form_urlencoded::parse(raw.unwrap_or("").as_bytes())
            .into_owned()
            .collect();
        let f = |n: &str| {
            field(&fields, n)
                .map(|v| format::clip(v.trim(), 200))
                .unwrap_or_default()
        };
        Self {
            state: f("state"),
            worker: f("worker"),
            trigger: f("trigger"),
            since: f("since"),
            until: f("until"),
            id: f("id"),
            cursor: f("cursor"),
        }
    }

    /// The query string of the filters (never the id), with `cursor`.
    fn query(&self, cursor: Option<&str>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("state", self.state.as_str()),
            ("worker", &self.worker),
            ("trigger", &self.trigger),
            ("since", &self.since),
            ("until", &self.until),
            ("cursor", cursor.unwrap_or("")),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.finish()
    }

    /// The service's query, or what is wrong with a filter.
    fn to_list(&self) -> Result<ListRuns, String> {
        let state = match self.state.as_str() {
            "" => None,
            s => Some(RunState::parse(s).ok_or_else(|| format!("unknown state {s:?}"))?),
        };
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Ok(ListRuns {
            state,
            worker: opt(&self.worker),
            trigger: opt(&self.trigger),
            since: local_ms(&self.since, "From")?,
            until: local_ms(&self.until, "Until")?,
            limit: Some(PAGE),
            cursor: opt(&self.cursor),
        })
    }
}

/// A `datetime-local` value read as UTC, in Unix milliseconds.
fn local_ms(s: &str, label: &str) -> Result<Option<i64>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let bad = || format!("{label}: not a date and time (YYYY-MM-DDTHH:MM, UTC)");
    let dt: jiff::civil::DateTime = s.parse().map_err(|_| bad())?;
    let ms = jiff::tz::TimeZone::UTC
        .to_timestamp(dt)
        .map_err(|_| bad())?
        .as_millisecond();
    if ms < 0 {
        return Err(format!("{label}: before 1970"));
    }
    Ok(Some(ms))
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    chrome: Chrome,
    f: Filters,
    states: Vec<&'static str>,
    triggers: Vec<&'static str>,
    workers: Vec<String>,
    rows: Vec<RunRow>,
    empty: &'static str,
    error: String,
    /// The fragment URL that refreshes the rows.
    refresh: String,
    /// The next page, with the filters.
    next: Option<String>,
    /// The first page, when this is not it.
    first: Option<String>,
}

#[derive(Template)]
#[template(path = "run_rows.html")]
struct RunRows {
    rows: Vec<RunRow>,
    empty: &'static str,
}

const EMPTY: &str = "No run matches.";

/// A run id as one may type it (ids are letters, digits, `_` and `-`).
fn id_like(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

async fn list(
    State(s): State<AppState>,
    v: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, UiError> {
    let f = Filters::parse(raw.as_deref());
    let mut error = String::new();
    let mut status = StatusCode::OK;
    // An exact run id: straight to its page.
    if !f.id.is_empty() {
        if id_like(&f.id) {
            match s.service.get_run(&v.caller, &f.id).await {
                Ok(r) => return Ok(see_other(&format!("/runs/{}", r.id))),
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        error = format!("No run has the id {:?} in this workspace.", f.id);
        status = StatusCode::NOT_FOUND;
    }
    let mut rows = Vec::new();
    let mut next = None;
    match f.to_list() {
        Ok(q) => match s.service.list_runs(&v.caller, &q).await {
            Ok(l) => {
                let now = s.service.now();
                rows = l.runs.iter().map(|r| RunRow::new(r, now)).collect();
                RunRow::name_actors(&mut rows, &crate::page::names(&s, &v).await);
                next = l
                    .next_cursor
                    .map(|c| format!("/runs?{}", f.query(Some(&c))));
            }
            Err(e) if crate::page::on_the_form(&e) && e.code != ErrorCode::Forbidden => {
                error = e.message;
                status = StatusCode::BAD_REQUEST;
            }
            Err(e) => return Err(e.into()),
        },
        Err(e) => {
            error = e;
            status = StatusCode::BAD_REQUEST;
        }
    }
    let workers = match s.service.list_workers(&v.caller) {
        Ok(l) => l.workers.into_iter().map(|w| w.id).collect(),
        Err(_) => Vec::new(),
    };
    let cursor = (!f.cursor.is_empty()).then_some(f.cursor.as_str());
    let refresh = format!("/ui/runs/rows?{}", f.query(cursor));
    let first = cursor.map(|_| match f.query(None) {
        q if q.is_empty() => "/runs".to_string(),
        q => format!("/runs?{q}"),
    });
    let page = RunsPage {
        chrome: Chrome::load(&s, &v, Nav::Runs, "Runs").await,
        f,
        states: RunState::ALL.iter().map(|s| s.as_str()).collect(),
        triggers: TRIGGERS.to_vec(),
        workers,
        rows,
        empty: EMPTY,
        error,
        refresh,
        next,
        first,
    };
    Ok(render_status(status, &page))
}

/// The rows of the list alone, for `app.js` to refresh.
async fn rows_fragment(
    State(s): State<AppState>,
    v: Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, UiError> {
    let f = Filters::parse(raw.as_deref());
    let q = f
        .to_list()
        .map_err(|e| UiError::Page(Error::invalid_query(e)))?;
    let l = s.service.list_runs(&v.caller, &q).await?;
    let now = s.service.now();
    let mut rows: Vec<RunRow> = l.runs.iter().map(|r| RunRow::new(r, now)).collect();
    RunRow::name_actors(&mut rows, &crate::page::names(&s, &v).await);
    Ok(render(&RunRows { rows, empty: EMPTY }))
}

// ------------------------------------------------------------ a run's page

/// One line of the log as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// `stdout`, `stderr` or `meta`.
    pub s: &'static str,
    pub t: String,
}

/// The lines of one event: a log chunk split into lines (escapes
/// removed), a line about a warning, an artifact or a state change.
pub fn event_lines(e: &RunEvent) -> Vec<LogLine> {
    let text = |k: &str| e.data[k].as_str().unwrap_or("").to_string();
    match e.kind.as_str() {
        "log" => {
            let s = if e.data["stream"] == "stderr" {
                "stderr"
            } else {
                "stdout"
            };
            let clean = format::strip_ansi(&text("text"));
            let body = clean.strip_suffix('\n').unwrap_or(&clean);
            body.split('\n')
                .map(|t| LogLine {
                    s,
                    t: t.to_string(),
                })
                .collect()
        }
        "warning" => vec![meta(format!(
            "warning: {} {}",
            text("warning"),
            text("detail")
        ))],
        "artifact" => vec![meta(format!(
            "artifact: {} ({})",
            text("name"),
            format::size(e.data["size"].as_i64().unwrap_or(0))
        ))],
        "status" | "finish" => vec![meta(format!("state: {}", text("state")))],
        _ => Vec::new(),
    }
}

fn meta(t: String) -> LogLine {
    LogLine {
        s: "meta",
        t: format::strip_ansi(&t),
    }
}

/// A scalar output, or one rendered as Markdown, or as JSON.
#[derive(Debug)]
pub struct OutputView {
    pub name: String,
    pub text: String,
    /// Safe HTML from [`format::markdown`] (empty when not Markdown).
    pub html: String,
    /// Shown as JSON in a `<pre>`.
    pub block: bool,
}

/// Whether a string output reads as Markdown: several lines with a
/// heading, a list, a quote, a fence or a table among them.
pub fn looks_like_markdown(s: &str) -> bool {
    s.contains('\n')
        && s.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with('#')
                || l.starts_with("- ")
                || l.starts_with("* ")
                || l.starts_with("> ")
                || l.starts_with("```")
                || l.starts_with('|')
                || l.split_once(". ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

fn outputs_of(v: Option<&Value>) -> Vec<OutputView> {
    let Some(Value::Object(m)) = v else {
        return Vec::new();
    };
    m.iter()
        .map(|(k, v)| {
            let name = k.clone();
            match v {
                Value::String(s) if looks_like_markdown(s) => OutputView {
                    name,
                    text: String::new(),
                    html: format::markdown(s),
                    block: false,
                },
                Value::Object(_) | Value::Array(_) => OutputView {
                    name,
                    text: format::json(v),
                    html: String::new(),
                    block: true,
                },
                _ => OutputView {
                    name,
                    text: format::scalar(v),
                    html: String::new(),
                    block: false,
                },
            }
        })
        .collect()
}

#[derive(Debug)]
pub struct ArtifactView {
    pub name: String,
    pub href: String,
    pub size: String,
    pub media_type: String,
    pub digest: String,
}

#[derive(Debug)]
pub struct ActionView {
    pub seq: i64,
    pub tool: String,
    pub state: &'static str,
    pub decision: String,
    pub payload: String,
    pub approval: String,
    pub at: String,
}

#[derive(Debug)]
pub struct ApprovalView {
    pub id: String,
    pub kind: String,
    pub state: &'static str,
    pub decided_by: String,
    pub created: String,
}

#[derive(Debug)]
pub struct GuaranteeView {
    pub name: String,
    pub held: bool,
    pub detail: String,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    chrome: Chrome,
    run: Run,
    /// Who started it, by name where it is a member.
    actor: String,
    short: String,
    terminal: bool,
    created: String,
    started: String,
    finished: String,
    duration: String,
    queue_position: Option<i64>,
    exit: String,
    input: String,
    outputs: Vec<OutputView>,
    artifacts: Vec<ArtifactView>,
    lines: Vec<LogLine>,
    /// Earlier lines are not on the page.
    omitted: bool,
    /// The SSE URL, for a run not over yet (empty otherwise).
    stream: String,
    cap: usize,
    actions: Vec<ActionView>,
    approvals: Vec<ApprovalView>,
    containment_driver: String,
    containment_level: String,
    guarantees: Vec<GuaranteeView>,
    egress: Vec<(String, String)>,
    may_cancel: bool,
    /// An `unknown` run a person may settle (DUR-2): retry or resolve.
    may_settle: bool,
    may_rerun: bool,
    curl: String,
    cli: String,
}

/// A path segment (or several, `/` kept) percent-encoded.
fn path_escape(p: &str) -> String {
    p.split('/')
        .map(|seg| {
            form_urlencoded::byte_serialize(seg.as_bytes())
                .collect::<String>()
                .replace('+', "%20")
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `s` as one word for a POSIX shell: in single quotes, each `'` closed,
/// escaped and reopened.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The host this page was asked for, if it is a plain host name.
fn request_host(h: &HeaderMap) -> String {
    h.get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 255
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .unwrap_or("127.0.0.1:8000")
        .to_string()
}

/// The curl and CLI commands that start the same worker with the same input.
fn commands(s: &AppState, headers: &HeaderMap, run: &Run) -> (String, String) {
    let scheme = if s.http.secure_cookies {
        "https"
    } else {
        "http"
    };
    let input = serde_json::to_string(&run.input).unwrap_or_else(|_| "{}".into());
    let body = serde_json::json!({ "input": run.input }).to_string();
    let curl = format!(
        "curl -X POST {} \\\n  -H \"Authorization: Bearer $AIRLOCK_API_KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -H {} \\\n  -d {}",
        shell_quote(&format!(
            "{scheme}://{}/v1/workers/{}/runs",
            request_host(headers),
            run.worker_id
        )),
        shell_quote(&format!("Idempotency-Key: rerun-of-{}", run.id)),
        shell_quote(&body)
    );
    let cli = format!(
        "airlock run --remote {} --input {}",
        shell_quote(&run.worker_id),
        shell_quote(&input)
    );
    (curl, cli)
}

/// The sequence number of the first event of run `id` after `after`.
async fn first_after(
    s: &AppState,
    v: &Viewer,
    id: &str,
    after: i64,
) -> Result<Option<i64>, UiError> {
    let page = s.service.run_events(&v.caller, id, after, 1).await?;
    Ok(page.events.first().map(|e| e.seq))
}

/// Events read a window at a time, going back from the end.
const WINDOW: i64 = 500;

/// The last [`LOG_CAP`] lines of a run's events, whether earlier lines
/// were left out, and the last event's sequence number. Reads from the
/// end: the last event is found by bisection (sequence numbers increase),
/// then windows of events are read backwards until the cap is reached,
/// so a run with a huge log costs about as much as one with
/// [`LOG_CAP`] lines.
async fn log_tail(
    s: &AppState,
    v: &Viewer,
    id: &str,
) -> Result<(Vec<LogLine>, bool, i64), UiError> {
    if first_after(s, v, id, 0).await?.is_none() {
        return Ok((Vec::new(), false, 0));
    }
    // Invariant: an event after `lo`, none after `hi`.
    let (mut lo, mut hi) = (0i64, WINDOW);
    while first_after(s, v, id, hi).await?.is_some() {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if first_after(s, v, id, mid).await?.is_some() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let last = first_after(s, v, id, lo).await?.unwrap_or(lo);
    let mut windows: Vec<Vec<LogLine>> = Vec::new();
    let (mut count, mut end) = (0usize, last);
    while end > 0 && count < LOG_CAP {
        let start = (end - WINDOW).max(0);
        let page = s.service.run_events(&v.caller, id, start, WINDOW).await?;
        let lines: Vec<LogLine> = page
            .events
            .iter()
            .filter(|e| e.seq <= end)
            .flat_map(event_lines)
            .collect();
        count += lines.len();
        windows.push(lines);
        end = start;
    }
    let mut lines: VecDeque<LogLine> = windows.into_iter().rev().flatten().collect();
    let omitted = end > 0 || lines.len() > LOG_CAP;
    while lines.len() > LOG_CAP {
        lines.pop_front();
    }
    Ok((lines.into(), omitted, last))
}

fn scalar_str(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => format::scalar(other),
    }
}

async fn run_page(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let detail = s.service.run_detail(&v.caller, &id).await?;
    let run = detail.run;
    let now = s.service.now();
    let (lines, omitted, last_seq) = log_tail(&s, &v, &run.id).await?;
    // Re-read: the run may have ended while its log was read.
    let terminal = run.state.is_terminal();
    let stream = if terminal {
        String::new()
    } else {
        format!("/runs/{}/stream?after={last_seq}", run.id)
    };
    let actions = s
        .service
        .list_actions(&v.caller, &run.id)
        .await?
        .actions
        .into_iter()
        .map(|a| ActionView {
            seq: a.seq,
            tool: a.kind,
            state: a.state.as_str(),
            decision: a
                .decision
                .as_ref()
                .map(|d| match d {
                    Value::Object(m) => m
                        .iter()
                        .filter(|(_, v)| !v.is_object() && !v.is_array())
                        .map(|(k, v)| format!("{k}: {}", scalar_str(v)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    other => scalar_str(other),
                })
                .map(|d| format::clip(&format::strip_ansi(&d), 300))
                .unwrap_or_default(),
            payload: format::clip(&format::strip_ansi(&a.payload.to_string()), 300),
            approval: a.approval_id.unwrap_or_default(),
            at: format::time(a.created_at),
        })
        .collect();
    let q = ListApprovals {
        run: Some(run.id.clone()),
        limit: Some(100),
        ..Default::default()
    };
    let approvals = s.service.list_approvals(&v.caller, &q).await?.approvals;
    // People by name: who started the run, who decided its approvals.
    let names = crate::page::names(&s, &v).await;
    let approvals = approvals
        .into_iter()
        .map(|a| ApprovalView {
            kind: format!("{:?}", a.kind).to_lowercase(),
            state: a.state.as_str(),
            decided_by: a
                .decided_by
                .as_deref()
                .map(|b| crate::page::name_of(&names, b))
                .unwrap_or_default(),
            created: format::time(a.created_at),
            id: a.id,
        })
        .collect();
    let c = run.containment.clone().unwrap_or(Value::Null);
    let guarantees = c["guarantees"]
        .as_array()
        .map(|g| {
            g.iter()
                .map(|g| GuaranteeView {
                    name: scalar_str(&g["name"]),
                    held: g["in_force"].as_bool().unwrap_or(false),
                    detail: scalar_str(&g["detail"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let egress = match &run.egress {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                let shown = match (k.starts_with("bytes"), v.as_i64()) {
                    (true, Some(b)) => format::size(b),
                    _ => scalar_str(v),
                };
                (k.replace('_', " "), shown)
            })
            .collect(),
        _ => Vec::new(),
    };
    let exit = match (run.exit_code, run.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => "—".into(),
    };
    let artifacts = detail
        .artifacts
        .iter()
        .map(|a| ArtifactView {
            href: format!("/runs/{}/artifacts/{}", run.id, path_escape(&a.name)),
            name: a.name.clone(),
            size: format::size(a.size),
            media_type: a.media_type.clone(),
            digest: a.digest.clone(),
        })
        .collect();
    let (curl, cli) = commands(&s, &headers, &run);
    let actor = crate::page::name_of(&names, &run.actor);
    let page = RunPage {
        actor,
        chrome: Chrome::load(
            &s,
            &v,
            Nav::Runs,
            format!("Run {}", format::clip(&run.id, 14)),
        )
        .await,
        short: format::clip(&run.id, 14),
        terminal,
        created: format::time(run.created_at),
        started: format::time_opt(run.started_at),
        finished: format::time_opt(run.finished_at),
        duration: format::took(run.started_at, run.finished_at, now),
        queue_position: detail.queue_position,
        exit,
        input: format::json(&run.input),
        outputs: outputs_of(run.outputs.as_ref()),
        artifacts,
        lines,
        omitted,
        stream,
        cap: LOG_CAP,
        actions,
        approvals,
        containment_driver: scalar_str(&c["driver"]),
        containment_level: scalar_str(&c["level"]),
        guarantees,
        egress,
        may_cancel: v.caller.may(Operation::CancelRuns) && !terminal,
        may_settle: v.caller.may(Operation::CancelRuns) && run.state == RunState::Unknown,
        may_rerun: v.caller.may(Operation::StartRuns),
        curl,
        cli,
        run,
    };
    Ok(render(&page))
}

// ------------------------------------------------------- log, stream, files

/// The full log as a text download.
async fn log_txt(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let text = s.service.run_log(&v.caller, &id).await?;
    let mut r = format::strip_ansi(&text).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    let safe: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{safe}.log\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

/// The live log (server-sent events): `line` `{s, t}` per line, `state`
/// `{state}` on a change, `end` when the run is over; `id` is the run
/// event's sequence number, so a reconnecting browser resumes after the
/// last one it saw (`Last-Event-ID`, else `?after=`).
async fn stream(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let fields: Vec<(String, String)> = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let after: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or_else(|| field(&fields, "after"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
        .max(0);
    let follower = s.service.follow_events(&v.caller, &id, after).await?;
    // The API's per-user cap on open streams applies to pages too.
    let slot = s.limits.open_stream(v.caller.actor_id()).ok_or_else(|| {
        UiError::Page(Error::limited(
            ErrorCode::TooManyStreams,
            "too many open event streams for this user",
            Duration::from_secs(5),
        ))
    })?;
    let stream = futures_util::stream::unfold((follower, slot), |(mut f, slot)| async move {
        let batch: Vec<Result<Event, Infallible>> = match f.next().await? {
            Ok(Followed::Events(events)) => events.iter().flat_map(sse_events).map(Ok).collect(),
            Ok(Followed::End) => vec![Ok(Event::default().event("end").data("{}"))],
            // The browser reconnects with Last-Event-ID and resumes.
            Err(_) => Vec::new(),
        };
        Some((futures_util::stream::iter(batch), (f, slot)))
    });
    use futures_util::StreamExt;
    let mut r = Sse::new(stream.flatten())
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// The server-sent events of one run event.
fn sse_events(e: &RunEvent) -> Vec<Event> {
    let id = e.seq.to_string();
    let mut out: Vec<Event> = Vec::new();
    if (e.kind == "status" || e.kind == "finish")
        && let Some(st) = e.data["state"].as_str().and_then(RunState::parse)
    {
        out.push(
            Event::default()
                .event("state")
                .data(serde_json::json!({ "state": st.as_str() }).to_string()),
        );
    }
    for l in event_lines(e) {
        out.push(
            Event::default()
                .event("line")
                .data(serde_json::json!({ "s": l.s, "t": l.t }).to_string()),
        );
    }
    // The id goes on the batch's last event: resuming after it skips the
    // whole run event, never half of it.
    if let Some(last) = out.pop() {
        out.push(last.id(id));
    }
    out
}

/// An artifact as a download: the API's one way of serving it (an
/// attachment, an inert type, `nosniff`, a `sandbox` CSP).
async fn artifact(
    State(s): State<AppState>,
    v: Viewer,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    Ok(airlock_api::artifact_download(&s, &v.caller, &id, &name).await?)
}

// ------------------------------------------------------------------ cancel

#[derive(Template)]
#[template(path = "run_cancel.html")]
struct CancelConfirm {
    chrome: Chrome,
    id: String,
    worker: String,
}

#[derive(Debug, serde::Deserialize)]
struct CancelForm {
    #[serde(default)]
    confirm: String,
}

/// Cancel a run (the service decides who may); without `confirm=yes`, a
/// page that asks first (nothing is cancelled).
async fn cancel(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<CancelForm>,
) -> Result<Response, UiError> {
    let v = p.viewer;
    // Asked first when the person may cancel; otherwise straight to the
    // service, which refuses (and nothing changes).
    if p.form.confirm != "yes" && v.caller.may(Operation::CancelRuns) {
        let run = s.service.get_run(&v.caller, &id).await?;
        let page = CancelConfirm {
            chrome: Chrome::load(&s, &v, Nav::Runs, "Cancel this run?").await,
            id: run.id,
            worker: run.worker_id,
        };
        return Ok(render(&page));
    }
    let c = s.service.cancel_run(&v.caller, &id).await?;
    Ok(see_other(&format!("/runs/{}", c.id)))
}

// ------------------------------------------------------------ settle (DUR-2)

#[derive(Debug, serde::Deserialize)]
struct RetryForm {
    #[serde(default)]
    reason: String,
}

/// Retry an `unknown` run (the service decides who may, and refuses any
/// other state): back to the run's page.
async fn retry(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<RetryForm>,
) -> Result<Response, UiError> {
    let reason = p.form.reason.trim();
    let b = RetryRun {
        reason: (!reason.is_empty()).then(|| reason.to_string()),
    };
    let run = s.service.retry_run(&p.viewer.caller, &id, &b).await?;
    Ok(see_other(&format!("/runs/{}", run.id)))
}

#[derive(Debug, serde::Deserialize)]
struct ResolveForm {
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    reason: String,
}

/// Resolve an `unknown` run as succeeded or failed, with a reason.
async fn resolve(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<ResolveForm>,
) -> Result<Response, UiError> {
    let outcome = match p.form.outcome.as_str() {
        "succeeded" => RunResolution::Succeeded,
        "failed" => RunResolution::Failed,
        _ => return Err(Error::invalid_body("outcome is succeeded or failed").into()),
    };
    let b = ResolveRun {
        outcome,
        reason: p.form.reason.trim().to_string(),
    };
    let run = s.service.resolve_run(&p.viewer.caller, &id, &b).await?;
    Ok(see_other(&format!("/runs/{}", run.id)))
}
