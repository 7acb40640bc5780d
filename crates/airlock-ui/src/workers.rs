//! Workers (UI-1): the catalog, a worker's page (inputs, outputs, the
//! secrets it needs present or missing, limits, egress, triggers, its
//! webhook address, recent runs) and the run form generated from its
//! manifest. The form only turns what was typed into the typed JSON the
//! manifest declares (a number field holds a number); whether the input
//! is acceptable is the service's call, and its answer is shown beside
//! the field it names, with everything typed kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_api::AppState;
use airlock_protocol::runs::ListRuns;
use airlock_protocol::workers::WorkerDetail;
use airlock_protocol::{Error, ErrorCode};
use airlock_service::{Operation, RunOptions};
use askama::Template;
use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::format;
use crate::page::{Chrome, Nav, UiError, render, render_status, see_other};
use crate::runs::RunRow;
use crate::session::{MAX_FORM_BYTES, Posted, PostedMultipart, Viewer, field, is_multipart};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/workers", get(catalog))
        .route("/workers/{id}", get(detail))
        .route(
            "/workers/{id}/run",
            get(run_page)
                .post(run)
                .layer(DefaultBodyLimit::max(RUN_FORM_LIMIT)),
        )
}

/// The largest run form body: one upload's worth and the form's text.
const RUN_FORM_LIMIT: usize = airlock_service::MAX_UPLOAD_BYTES + MAX_FORM_BYTES;

/// The prefix of a run form's input fields (`in.NAME`), so no declared
/// input can collide with the form's own fields.
const INPUT_PREFIX: &str = "in.";
/// The hidden field carrying the form's idempotency key.
const KEY_FIELD: &str = "_key";
/// How many runs a worker's page lists.
const RECENT_RUNS: usize = 10;
/// A string input without `max_length`, or with one above this, gets a
/// multi-line text area rather than a one-line box.
const ONE_LINE_MAX: u64 = 200;
/// Enums with at most this many choices are radio buttons, more a select.
const RADIO_MAX: usize = 4;

// ---------------------------------------------------------------------------
// The manifest as the service shows it (`Worker::manifest`, the JSON form
// of `airlock_worker::Manifest`), read leniently: a field this page does
// not know is ignored, a missing one is empty.

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ManifestView {
    title: String,
    description: String,
    kind: String,
    runtime: Option<String>,
    agent: Option<AgentView>,
    inputs: BTreeMap<String, FieldView>,
    outputs: BTreeMap<String, FieldView>,
    limits: Map<String, Value>,
    egress: EgressView,
    secrets: SecretsView,
    triggers: Vec<TriggerView>,
    approvals: ApprovalsView,
    idempotent: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AgentView {
    model: String,
    tools: Vec<String>,
    autonomy: String,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
struct FieldView {
    #[serde(rename = "type")]
    ty: String,
    #[serde(rename = "enum")]
    choices: Vec<Value>,
    max_length: Option<u64>,
    max_bytes: Option<u64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    required: bool,
    default: Option<Value>,
    description: String,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EgressView {
    allow: Vec<String>,
    channels: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SecretsView {
    names: Vec<String>,
    delivery: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TriggerView {
    kind: String,
    cron: Option<String>,
    timezone: Option<String>,
    format: Option<String>,
    input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ApprovalsView {
    required: bool,
    reason: Option<String>,
}

fn manifest_of(d: &WorkerDetail) -> ManifestView {
    serde_json::from_value(d.worker.manifest.clone()).unwrap_or_default()
}

impl ManifestView {
    fn manual(&self) -> bool {
        self.triggers.iter().any(|t| t.kind == "manual")
    }
}

/// What a field's type and constraints say, in words: `string, at most
/// 100 characters, one of a, b`.
fn type_words(f: &FieldView) -> String {
    let mut parts = vec![f.ty.clone()];
    if let Some(m) = f.max_length {
        parts.push(format!("at most {m} characters"));
    }
    if let Some(m) = f.max_bytes {
        parts.push(format!(
            "at most {}",
            format::size(i64::try_from(m).unwrap_or(i64::MAX))
        ));
    }
    match (f.minimum, f.maximum) {
        (Some(lo), Some(hi)) => parts.push(format!("{lo} to {hi}")),
        (Some(lo), None) => parts.push(format!("at least {lo}")),
        (None, Some(hi)) => parts.push(format!("at most {hi}")),
        (None, None) => {}
    }
    if !f.choices.is_empty() {
        let c: Vec<String> = f.choices.iter().map(format::scalar).collect();
        parts.push(format!("one of {}", format::clip(&c.join(", "), 300)));
    }
    format::strip_ansi(&parts.join(", "))
}

// ---------------------------------------------------------------------------
// The catalog.

#[derive(Debug)]
struct WorkerCard {
    id: String,
    title: String,
    description: String,
    kind: String,
    triggers: String,
    approval: bool,
    inputs: usize,
    /// Started by hand (the catalog links its run form).
    manual: bool,
}

#[derive(Debug)]
struct LoadErrorRow {
    path: String,
    error: String,
}

#[derive(Template)]
#[template(path = "workers.html")]
struct CatalogPage {
    chrome: Chrome,
    workers: Vec<WorkerCard>,
    errors: Vec<LoadErrorRow>,
    may_start: bool,
}

fn trigger_words(m: &ManifestView) -> String {
    let kinds: Vec<&str> = m.triggers.iter().map(|t| t.kind.as_str()).collect();
    kinds.join(", ")
}

async fn catalog(State(s): State<AppState>, v: Viewer) -> Result<Response, UiError> {
    let list = s.service.list_workers(&v.caller)?;
    let mut workers: Vec<WorkerCard> = list
        .workers
        .iter()
        .map(|w| {
            let m: ManifestView = serde_json::from_value(w.manifest.clone()).unwrap_or_default();
            WorkerCard {
                id: w.id.clone(),
                title: format::strip_ansi(&m.title),
                description: format::clip(&format::strip_ansi(&m.description), 300),
                kind: m.kind.clone(),
                triggers: trigger_words(&m),
                approval: m.approvals.required,
                inputs: m.inputs.len(),
                manual: m.manual(),
            }
        })
        .collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    let errors = list
        .errors
        .into_iter()
        .map(|e| LoadErrorRow {
            path: format::strip_ansi(&e.path.unwrap_or_else(|| "(unnamed)".into())),
            error: format::clip(&format::strip_ansi(&e.error), 2000),
        })
        .collect();
    Ok(render(&CatalogPage {
        chrome: Chrome::load(&s, &v, Nav::Workers, "Workers").await,
        workers,
        errors,
        may_start: v.caller.may(Operation::StartRuns),
    }))
}

// ---------------------------------------------------------------------------
// The run form.

/// One choice of an enum field.
#[derive(Debug, Clone)]
struct Choice {
    /// Sent back exactly as declared.
    value: String,
    /// What a person reads: the value without terminal escapes.
    label: String,
    selected: bool,
}

/// One generated form control.
#[derive(Debug, Clone)]
struct FormField {
    /// The declared input name (shown as the label).
    name: String,
    /// The form field's name (`in.NAME`).
    field: String,
    /// The element id (`in-NAME`).
    id: String,
    /// `text`, `textarea`, `number`, `select`, `radios`, `checkbox`,
    /// `json` or `file`.
    widget: &'static str,
    required: bool,
    max_length: Option<u64>,
    /// A number's bounds, as the `min` and `max` attributes.
    min: String,
    max: String,
    choices: Vec<Choice>,
    /// What the control holds (text controls).
    value: String,
    /// A checkbox's state.
    checked: bool,
    description: String,
    type_words: String,
    default: String,
    error: String,
}

impl FormField {
    fn help_id(&self) -> String {
        format!("{}-help", self.id)
    }

    fn error_id(&self) -> String {
        format!("{}-error", self.id)
    }

    /// The `aria-describedby` value: help text, then the error.
    fn described_by(&self) -> String {
        let mut ids = vec![self.help_id()];
        if !self.error.is_empty() {
            ids.push(self.error_id());
        }
        ids.join(" ")
    }
}

/// A value as the text a form control holds. Numbers read the same
/// whichever way they were stored (`2`, not `2.0`), so an enum choice and
/// a run's input compare equal.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Number(n) => match n.as_f64() {
            // Whole numbers well inside f64's exact range print without
            // a fraction; the cast cannot truncate them.
            #[allow(clippy::cast_possible_truncation)]
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => (f as i64).to_string(),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The form's controls, from the manifest, holding `values` (what was
/// typed or the run being re-run; a missing value gets the default).
fn form_fields(m: &ManifestView, values: &Values) -> Vec<FormField> {
    m.inputs
        .iter()
        .map(|(name, f)| {
            let widget = match f.ty.as_str() {
                "string" | "number" if !f.choices.is_empty() => {
                    if f.choices.len() <= RADIO_MAX && (f.required || f.default.is_some()) {
                        "radios"
                    } else {
                        "select"
                    }
                }
                "string" if f.max_length.is_some_and(|m| m <= ONE_LINE_MAX) => "text",
                "string" => "textarea",
                "number" => "number",
                "boolean" => "checkbox",
                "file" => "file",
                _ => "json",
            };
            let shown = |v: &Value| {
                if f.ty == "json" {
                    format::json(v)
                } else {
                    as_text(v)
                }
            };
            let (value, checked) = match values {
                Values::Fresh => (
                    f.default.as_ref().map(shown).unwrap_or_default(),
                    f.default.as_ref().and_then(Value::as_bool).unwrap_or(false),
                ),
                Values::Run(map) => (
                    map.get(name).map(shown).unwrap_or_default(),
                    map.get(name).and_then(Value::as_bool).unwrap_or(false),
                ),
                Values::Sent(raw) => (
                    raw.get(name).cloned().unwrap_or_default(),
                    raw.get(name).is_some_and(|t| t != "false"),
                ),
            };
            let choices = f
                .choices
                .iter()
                .map(|c| {
                    let v = as_text(c);
                    Choice {
                        selected: v == value,
                        label: format::strip_ansi(&v),
                        value: v,
                    }
                })
                .collect();
            FormField {
                name: name.clone(),
                field: format!("{INPUT_PREFIX}{name}"),
                id: format!("in-{name}"),
                widget,
                required: f.required && f.default.is_none(),
                max_length: f.max_length,
                min: f.minimum.map(|n| n.to_string()).unwrap_or_default(),
                max: f.maximum.map(|n| n.to_string()).unwrap_or_default(),
                choices,
                value,
                checked,
                description: format::strip_ansi(&f.description),
                type_words: type_words(f),
                default: format::strip_ansi(&f.default.as_ref().map(as_text).unwrap_or_default()),
                error: String::new(),
            }
        })
        .collect()
}

/// What a form's controls hold.
enum Values {
    /// Defaults (a new form).
    Fresh,
    /// A run's input (edit and re-run).
    Run(Map<String, Value>),
    /// What was typed, by input name (a form sent back with errors).
    Sent(BTreeMap<String, String>),
}

/// The run form as a template sees it.
#[derive(Debug)]
struct RunForm {
    worker: String,
    fields: Vec<FormField>,
    /// The idempotency key of this rendering of the form.
    key: String,
    /// An error about the whole form.
    error: String,
    /// The run this form was prefilled from.
    from: String,
}

static KEYS: AtomicU64 = AtomicU64::new(0);

/// A fresh idempotency key for one rendering of a form: a reload or a
/// second press of its button sends the same key, so one run is created.
fn new_key(v: &Viewer, worker: &str) -> String {
    let n = KEYS.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = Sha256::new();
    h.update(
        format!(
            "{}\n{worker}\n{t}\n{n}\n{}",
            v.caller.workspace,
            std::process::id()
        )
        .as_bytes(),
    );
    let hex: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("ui-{hex}")
}

/// A key a form sent back, if it looks like one this page made.
fn sent_key(fields: &[(String, String)]) -> Option<String> {
    field(fields, KEY_FIELD)
        .filter(|k| {
            k.len() <= 64
                && k.starts_with("ui-")
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        .map(str::to_string)
}

impl RunForm {
    /// Whether the form sends files (`multipart/form-data`).
    fn multipart(&self) -> bool {
        self.fields.iter().any(|f| f.widget == "file")
    }
}

fn new_form(worker: &str, fields: Vec<FormField>, key: String, from: String) -> RunForm {
    RunForm {
        worker: worker.to_string(),
        fields,
        key,
        error: String::new(),
        from,
    }
}

// ---------------------------------------------------------------------------
// A worker's page.

#[derive(Debug)]
struct IoRow {
    name: String,
    type_words: String,
    required: String,
    default: String,
    description: String,
}

#[derive(Debug)]
struct SecretRow {
    name: String,
    /// `present`, `missing` or `unknown`.
    status: &'static str,
}

#[derive(Debug)]
struct TriggerRow {
    kind: String,
    detail: String,
}

#[derive(Template)]
#[template(path = "worker.html")]
struct WorkerPage {
    chrome: Chrome,
    id: String,
    title: String,
    description: String,
    kind: String,
    runtime: String,
    agent: String,
    idempotent: bool,
    approval: bool,
    approval_reason: String,
    inputs: Vec<IoRow>,
    outputs: Vec<IoRow>,
    secrets: Vec<SecretRow>,
    secret_delivery: String,
    limits: Vec<(String, String)>,
    allow: Vec<String>,
    channels: Vec<String>,
    triggers: Vec<TriggerRow>,
    webhook: String,
    may_read_runs: bool,
    runs: Vec<RunRow>,
    manual: bool,
    may_start: bool,
    form: RunForm,
}

fn io_rows(fields: &BTreeMap<String, FieldView>, inputs: bool) -> Vec<IoRow> {
    fields
        .iter()
        .map(|(name, f)| IoRow {
            name: name.clone(),
            type_words: match (&f.path, inputs) {
                (Some(p), false) => format!("{}, written to {}", type_words(f), p),
                _ => type_words(f),
            },
            required: if inputs && f.default.is_some() {
                "no (has a default)".into()
            } else if f.required {
                "yes".into()
            } else {
                "no".into()
            },
            default: format::strip_ansi(&f.default.as_ref().map(as_text).unwrap_or_default()),
            description: format::strip_ansi(&f.description),
        })
        .collect()
}

/// The limits in words, in the manifest's order of importance.
fn limit_rows(limits: &Map<String, Value>) -> Vec<(String, String)> {
    let named = [
        ("timeout_s", "Time limit"),
        ("memory_mb", "Memory"),
        ("cpus", "CPUs"),
        ("pids", "Processes"),
        ("disk_mb", "Scratch disk"),
        ("output_bytes", "Output"),
        ("concurrency", "Runs at once"),
    ];
    named
        .iter()
        .filter_map(|(k, label)| {
            let v = limits.get(*k)?;
            let n = v.as_i64();
            let text = match (*k, n) {
                ("timeout_s", Some(n)) => format::duration(n.saturating_mul(1000)),
                ("memory_mb" | "disk_mb", Some(n)) => format!("{n} MiB"),
                ("output_bytes", Some(n)) => format::size(n),
                _ => format::scalar(v),
            };
            Some((label.to_string(), text))
        })
        .collect()
}

async fn secret_rows(s: &AppState, v: &Viewer, names: &[String]) -> Vec<SecretRow> {
    let known = if v.caller.may(Operation::ListSecrets) {
        s.service.list_secrets(&v.caller).await.ok()
    } else {
        None
    };
    names
        .iter()
        .map(|n| SecretRow {
            name: n.clone(),
            status: match &known {
                None => "unknown",
                Some(l) if l.secrets.iter().any(|x| &x.name == n && x.version > 0) => "present",
                Some(_) => "missing",
            },
        })
        .collect()
}

/// The worker's latest runs.
async fn recent_runs(s: &AppState, v: &Viewer, worker: &str) -> Result<Vec<RunRow>, UiError> {
    let q = ListRuns {
        worker: Some(worker.to_string()),
        limit: Some(RECENT_RUNS as i64),
        ..Default::default()
    };
    let now = s.service.now();
    let l = s.service.list_runs(&v.caller, &q).await?;
    Ok(l.runs.iter().map(|r| RunRow::new(r, now)).collect())
}

async fn detail(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let d = s.service.get_worker(&v.caller, &id)?;
    let key = new_key(&v, &id);
    let m = manifest_of(&d);
    let form = new_form(&id, form_fields(&m, &Values::Fresh), key, String::new());
    Ok(render(&worker_page(&s, &v, &d, m, form).await?))
}

async fn worker_page(
    s: &AppState,
    v: &Viewer,
    d: &WorkerDetail,
    m: ManifestView,
    form: RunForm,
) -> Result<WorkerPage, UiError> {
    let id = d.worker.id.clone();
    let may_read_runs = v.caller.may(Operation::ReadRuns);
    let runs = if may_read_runs {
        recent_runs(s, v, &id).await?
    } else {
        Vec::new()
    };
    let webhook = if m.triggers.iter().any(|t| t.kind == "webhook") {
        format!("/v1/hooks/{}/{}", v.caller.workspace, id)
    } else {
        String::new()
    };
    let triggers = m
        .triggers
        .iter()
        .map(|t| TriggerRow {
            kind: t.kind.clone(),
            detail: match t.kind.as_str() {
                "schedule" => {
                    let mut d = format!(
                        "{} ({})",
                        t.cron.clone().unwrap_or_default(),
                        t.timezone.clone().unwrap_or_else(|| "UTC".into())
                    );
                    if let Some(i) = t
                        .input
                        .as_ref()
                        .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    {
                        d.push_str(&format!(", input {}", format::clip(&i.to_string(), 300)));
                    }
                    d
                }
                "webhook" => format!(
                    "{} signatures",
                    t.format.clone().unwrap_or_else(|| "standard".into())
                ),
                "manual" => "by hand: this page, the CLI, the API, MCP".into(),
                _ => String::new(),
            },
        })
        .collect();
    let agent = m
        .agent
        .as_ref()
        .map(|a| {
            format!(
                "model profile {}, autonomy {}, tools {}",
                a.model,
                a.autonomy,
                a.tools.join(", ")
            )
        })
        .unwrap_or_default();
    let secrets = secret_rows(s, v, &m.secrets.names).await;
    Ok(WorkerPage {
        chrome: Chrome::load(s, v, Nav::Workers, format::strip_ansi(&m.title)).await,
        title: format::strip_ansi(&m.title),
        description: format::strip_ansi(&m.description),
        kind: m.kind.clone(),
        runtime: m.runtime.clone().unwrap_or_default(),
        agent,
        idempotent: m.idempotent,
        approval: m.approvals.required,
        approval_reason: format::strip_ansi(&m.approvals.reason.clone().unwrap_or_default()),
        inputs: io_rows(&m.inputs, true),
        outputs: io_rows(&m.outputs, false),
        secrets,
        secret_delivery: m.secrets.delivery.clone(),
        limits: limit_rows(&m.limits),
        allow: m.egress.allow.clone(),
        channels: m.egress.channels.clone(),
        triggers,
        webhook,
        may_read_runs,
        runs,
        manual: m.manual(),
        may_start: v.caller.may(Operation::StartRuns),
        form,
        id,
    })
}

// ---------------------------------------------------------------------------
// The run form's own page, and sending it.

#[derive(Template)]
#[template(path = "run_form.html")]
struct RunFormPage {
    chrome: Chrome,
    id: String,
    title: String,
    manual: bool,
    may_start: bool,
    form: RunForm,
}

#[derive(Debug, Deserialize)]
struct FromQuery {
    #[serde(default)]
    from: Option<String>,
}

async fn run_page(
    State(s): State<AppState>,
    v: Viewer,
    Path(id): Path<String>,
    Query(q): Query<FromQuery>,
) -> Result<Response, UiError> {
    let d = s.service.get_worker(&v.caller, &id)?;
    let m = manifest_of(&d);
    let (values, from) = match q.from.as_deref().filter(|f| !f.is_empty()) {
        Some(run_id) => {
            let run = s.service.get_run(&v.caller, run_id).await?;
            // A run of another worker is not this form's to copy.
            if run.worker_id != id {
                return Err(UiError::Page(Error::not_found()));
            }
            let input = run.input.as_object().cloned().unwrap_or_default();
            (Values::Run(input), run.id)
        }
        None => (Values::Fresh, String::new()),
    };
    let form = new_form(&id, form_fields(&m, &values), new_key(&v, &id), from);
    Ok(render(&run_form_page(&s, &v, &id, &m, form).await))
}

async fn run_form_page(
    s: &AppState,
    v: &Viewer,
    id: &str,
    m: &ManifestView,
    form: RunForm,
) -> RunFormPage {
    let title = format::strip_ansi(&m.title);
    RunFormPage {
        chrome: Chrome::load(s, v, Nav::Workers, format!("Run {title}")).await,
        id: id.to_string(),
        title,
        manual: m.manual(),
        may_start: v.caller.may(Operation::StartRuns),
        form,
    }
}

/// Turns what was typed into the input the manifest declares: numbers as
/// numbers, a checkbox as a boolean (an unchecked box sends nothing),
/// JSON parsed; an empty optional field is left out (its default
/// applies). Returns the input, or the errors by input name.
fn typed_input(
    m: &ManifestView,
    raw: &BTreeMap<String, String>,
) -> Result<Map<String, Value>, BTreeMap<String, String>> {
    let mut input = Map::new();
    let mut errors = BTreeMap::new();
    for (name, f) in &m.inputs {
        let text = raw.get(name).map(String::as_str);
        match f.ty.as_str() {
            "boolean" => {
                let on = matches!(text, Some("true" | "on" | "yes"));
                if text.is_some_and(|t| !matches!(t, "true" | "on" | "yes" | "false")) {
                    errors.insert(name.clone(), "expected a checkbox value".into());
                }
                input.insert(name.clone(), Value::Bool(on));
            }
            // Files arrive separately (multipart), see `run`.
            "file" => {}
            _ => {
                let Some(t) = text.filter(|t| !t.trim().is_empty()) else {
                    continue;
                };
                match f.ty.as_str() {
                    "number" => match parse_number(t) {
                        Some(n) => {
                            input.insert(name.clone(), n);
                        }
                        None => {
                            errors
                                .insert(name.clone(), "expected a number, such as 3 or 2.5".into());
                        }
                    },
                    "json" => match serde_json::from_str::<Value>(t) {
                        Ok(v) => {
                            input.insert(name.clone(), v);
                        }
                        Err(e) => {
                            errors.insert(
                                name.clone(),
                                format!("not valid JSON: {}", format::clip(&e.to_string(), 200)),
                            );
                        }
                    },
                    _ => {
                        input.insert(name.clone(), Value::String(t.to_string()));
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(input)
    } else {
        Err(errors)
    }
}

/// A finite number as JSON, integers kept integral (`2`, not `2.0`).
fn parse_number(t: &str) -> Option<Value> {
    let t = t.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::from(i));
    }
    let f = t.parse::<f64>().ok().filter(|f| f.is_finite())?;
    serde_json::Number::from_f64(f).map(Value::Number)
}

/// The input a service error names (`input rejected: inputs.NAME: …`),
/// with the rest of its message.
fn field_of_error(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("input rejected: ").unwrap_or(message);
    let rest = rest.strip_prefix("inputs.")?;
    rest.split_once(": ")
}

/// A file chosen in the run form, read within its input's limit.
struct SentFile {
    /// The file's name as the browser sent it.
    file_name: String,
    content_type: Option<String>,
    bytes: Vec<u8>,
}

/// The rest of a multipart run form: text fields (at most
/// [`MAX_FORM_BYTES`] in all) and, for each declared file input, the file
/// (at most the input's `max_bytes` and the upload limit; a larger one is
/// an error on its field, and is not kept). No file chosen is no file.
async fn read_multipart(
    m: &ManifestView,
    mut rest: axum::extract::Multipart,
) -> Result<
    (
        Vec<(String, String)>,
        BTreeMap<String, SentFile>,
        BTreeMap<String, String>,
    ),
    UiError,
> {
    let bad = |e: String| {
        UiError::Page(Error::new(
            ErrorCode::InvalidRequest,
            format!("the form is not as expected: {e}"),
        ))
    };
    let mut fields = Vec::new();
    let mut files = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut text_bytes = 0usize;
    while let Some(mut f) = rest.next_field().await.map_err(|e| bad(e.to_string()))? {
        let name = f.name().unwrap_or_default().to_string();
        let file_input = name
            .strip_prefix(INPUT_PREFIX)
            .and_then(|n| m.inputs.get_key_value(n))
            .filter(|(_, fv)| fv.ty == "file")
            .map(|(n, fv)| (n.clone(), fv.max_bytes));
        match file_input {
            Some((input, max)) => {
                let limit = max
                    .unwrap_or(airlock_service::MAX_UPLOAD_BYTES as u64)
                    .min(airlock_service::MAX_UPLOAD_BYTES as u64);
                let file_name = f.file_name().unwrap_or_default().to_string();
                let content_type = f.content_type().map(str::to_string);
                let mut bytes = Vec::new();
                let mut over = false;
                while let Some(chunk) = f.chunk().await.map_err(|e| bad(e.to_string()))? {
                    if over {
                        continue;
                    }
                    if (bytes.len() + chunk.len()) as u64 > limit {
                        over = true;
                        bytes = Vec::new();
                        continue;
                    }
                    bytes.extend_from_slice(&chunk);
                }
                if over {
                    errors.insert(
                        input,
                        format!("the file is larger than this input's limit of {limit} bytes"),
                    );
                } else if !(file_name.is_empty() && bytes.is_empty()) {
                    files.insert(
                        input,
                        SentFile {
                            file_name,
                            content_type,
                            bytes,
                        },
                    );
                }
            }
            None => {
                let mut value = Vec::new();
                while let Some(chunk) = f.chunk().await.map_err(|e| bad(e.to_string()))? {
                    text_bytes += chunk.len();
                    if text_bytes > MAX_FORM_BYTES {
                        return Err(UiError::Page(Error::new(
                            ErrorCode::BodyTooLarge,
                            format!("the form is larger than {} KiB", MAX_FORM_BYTES / 1024),
                        )));
                    }
                    value.extend_from_slice(&chunk);
                }
                let value = String::from_utf8(value)
                    .map_err(|_| bad(format!("field {name:?} is not UTF-8")))?;
                fields.push((name, value));
            }
        }
    }
    Ok((fields, files, errors))
}

/// A file name as the upload API takes it: still percent-encoded (every
/// decoding and check is the service's), so a `%` in a real name survives.
fn encoded_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Starts a run from the run form: urlencoded, or `multipart/form-data`
/// when the worker has a file input. Each chosen file becomes an upload
/// (the service's `create_upload`, as `POST /v1/uploads`), given to the
/// run as `{"upload": id}`; the service decides whether it may be used.
async fn run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, UiError> {
    let (v, fields, files, file_errors) = if is_multipart(req.headers()) {
        let p = PostedMultipart::from_request(req, &s).await?;
        let d = s.service.get_worker(&p.viewer.caller, &id)?;
        let m = manifest_of(&d);
        let (fields, files, errors) = read_multipart(&m, p.rest).await?;
        (p.viewer, fields, files, errors)
    } else {
        let p = Posted::<crate::auth_pages::Empty>::from_request(req, &s).await?;
        (p.viewer, p.fields, BTreeMap::new(), BTreeMap::new())
    };
    let v = &v;
    let d = s.service.get_worker(&v.caller, &id)?;
    let m = manifest_of(&d);
    let raw: BTreeMap<String, String> = fields
        .iter()
        .filter_map(|(k, val)| {
            k.strip_prefix(INPUT_PREFIX)
                .filter(|n| m.inputs.contains_key(*n))
                .map(|n| (n.to_string(), val.clone()))
        })
        .collect();
    let key = sent_key(&fields);
    // Only shown again as a link to the run: kept only if it looks like an id.
    let from = field(&fields, "_from")
        .filter(|f| f.len() <= 64 && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or("")
        .to_string();
    let again = |errors: BTreeMap<String, String>, error: String, key: String| {
        let mut fields = form_fields(&m, &Values::Sent(raw.clone()));
        for f in &mut fields {
            if let Some(e) = errors.get(&f.name) {
                f.error = format::strip_ansi(e);
            }
        }
        let mut form = new_form(&id, fields, key, from.clone());
        form.error = error;
        form
    };
    let typed = match typed_input(&m, &raw) {
        Ok(i) if file_errors.is_empty() => Ok(i),
        Ok(_) => Err(file_errors),
        Err(mut errors) => {
            errors.extend(file_errors);
            Err(errors)
        }
    };
    let mut input = match typed {
        Ok(i) => i,
        Err(errors) => {
            let form = again(
                errors,
                "Some fields need fixing; nothing was started.".into(),
                key.unwrap_or_else(|| new_key(v, &id)),
            );
            return Ok(render_status(
                StatusCode::BAD_REQUEST,
                &run_form_page(&s, v, &id, &m, form).await,
            ));
        }
    };
    // Each chosen file becomes the caller's upload, named in the input.
    for (name, f) in files {
        let raw_name = if f.file_name.is_empty() {
            name.clone()
        } else {
            encoded_name(&f.file_name)
        };
        let declared = f
            .content_type
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or("application/octet-stream");
        match s
            .service
            .create_upload(&v.caller, &raw_name, Some(declared), f.bytes)
            .await
        {
            Ok(up) => {
                input.insert(name, serde_json::json!({"upload": up.upload.id}));
            }
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::InvalidName
                        | ErrorCode::MediaTypeRequired
                        | ErrorCode::MediaTypeMismatch
                        | ErrorCode::BadArchive
                        | ErrorCode::BodyTooLarge
                ) =>
            {
                let form = again(
                    BTreeMap::from([(name, format!("the file was refused: {}", e.message))]),
                    "Some fields need fixing; nothing was started.".into(),
                    key.unwrap_or_else(|| new_key(v, &id)),
                );
                return Ok(render_status(
                    StatusCode::BAD_REQUEST,
                    &run_form_page(&s, v, &id, &m, form).await,
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let opts = RunOptions {
        trigger: "ui".into(),
        idempotency_key: key.clone(),
    };
    match s
        .service
        .create_run(&v.caller, &id, Value::Object(input), opts)
        .await
    {
        Ok(started) => Ok(see_other(&format!("/runs/{}", started.run.id))),
        Err(e) if e.code == ErrorCode::InputInvalid => {
            let mut errors = BTreeMap::new();
            let mut top = "Some fields need fixing; nothing was started.".to_string();
            match field_of_error(&e.message) {
                Some((name, msg)) if m.inputs.contains_key(name) => {
                    errors.insert(name.to_string(), msg.to_string());
                }
                _ => top = format!("Nothing was started: {}", e.message),
            }
            let form = again(errors, top, key.unwrap_or_else(|| new_key(v, &id)));
            Ok(render_status(
                StatusCode::BAD_REQUEST,
                &run_form_page(&s, v, &id, &m, form).await,
            ))
        }
        Err(e) if e.code == ErrorCode::IdempotencyConflict => {
            // The same form was sent before with other values (and that
            // run was created): a fresh key lets this one start anew.
            let form = again(
                BTreeMap::new(),
                "This form was already sent with other values, and that run started. \
                 Nothing more was started; send it again to start another run with these values."
                    .into(),
                new_key(v, &id),
            );
            Ok(render_status(
                StatusCode::CONFLICT,
                &run_form_page(&s, v, &id, &m, form).await,
            ))
        }
        Err(e)
            if crate::page::on_the_form(&e)
                && !matches!(
                    airlock_api::status_of(e.code),
                    StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
                ) =>
        {
            let status = airlock_api::status_of(e.code);
            let form = again(
                BTreeMap::new(),
                format!("Nothing was started: {}", e.message),
                key.unwrap_or_else(|| new_key(v, &id)),
            );
            Ok(render_status(
                status,
                &run_form_page(&s, v, &id, &m, form).await,
            ))
        }
        Err(e) => Err(e.into()),
    }
}
