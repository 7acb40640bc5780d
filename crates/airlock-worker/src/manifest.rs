//! `worker.toml`: the raw file shape (serde, `deny_unknown_fields`) and the
//! parsed, typed [`Manifest`] built from it (RUN-1).
//!
//! Parsing happens in two steps. serde turns the TOML into raw structs whose
//! fields are plain strings, numbers and options: that step rejects unknown
//! fields and wrong TOML types. Then [`parse`] checks every value and builds
//! the typed manifest, collecting every problem it finds rather than stopping
//! at the first, so an author sees them all at once. Enum-like fields
//! (`type`, `kind`, `runtime`, …) stay strings in the raw structs on purpose:
//! our own message ("unknown type \"integer\" (expected …)") is clearer than
//! serde's, and the field path is known exactly.
//!
//! Must not: touch the file system (the bundle module resolves the entry),
//! spawn anything, or know about runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{self, ManifestError, Problem};
use crate::names::{ChannelName, FieldName, SecretName, WorkerId};
use crate::schedule::{CronExpr, Timezone};

/// Largest `worker.toml` accepted, in bytes.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// At most this many inputs, and this many outputs.
pub const MAX_FIELDS: usize = 64;
/// At most this many `enum` choices per field.
pub const MAX_CHOICES: usize = 256;
/// At most this many triggers.
pub const MAX_TRIGGERS: usize = 32;
/// At most this many egress allow rules.
pub const MAX_ALLOW_RULES: usize = 64;
/// At most this many egress channels.
pub const MAX_CHANNELS: usize = 16;
/// At most this many declared secrets.
pub const MAX_SECRETS: usize = 32;
/// Largest `max_length` (characters) and `max_bytes` of a `json` field:
/// the whole input is capped at [`crate::MAX_INPUT_BYTES`] anyway.
pub const MAX_VALUE_BYTES: u64 = 1024 * 1024;
/// Largest `max_bytes` of a file input or output.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

const MAX_TITLE_CHARS: usize = 120;
const MAX_DESCRIPTION_CHARS: usize = 4000;
const MAX_FIELD_DESCRIPTION_CHARS: usize = 1000;
const MAX_PATH_BYTES: usize = 1024;

// ---------------------------------------------------------------------------
// The parsed manifest.

/// A parsed, validated `worker.toml`. Built only by [`Manifest::from_toml`]
/// (or [`crate::load_bundle`]), so every value in it passed its check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Manifest {
    pub id: WorkerId,
    pub title: String,
    pub description: String,
    #[serde(flatten)]
    pub kind: WorkerKind,
    /// The entry file, relative to the bundle folder.
    pub entry: RelPath,
    pub inputs: BTreeMap<FieldName, InputSpec>,
    pub outputs: BTreeMap<FieldName, OutputSpec>,
    pub limits: Limits,
    pub egress: Egress,
    pub secrets: Secrets,
    /// Never empty: a manifest without `[[triggers]]` gets one manual trigger.
    pub triggers: Vec<Trigger>,
    pub approvals: Approvals,
    /// May be retried automatically after a crash (DUR-2).
    pub idempotent: bool,
}

/// What kind of worker, with what only that kind has.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WorkerKind {
    /// The entry is run by `runtime` inside the sandbox.
    Script { runtime: Runtime },
    /// The entry is a Markdown prompt for the agent harness.
    Agent { agent: AgentSpec },
}

/// How a script worker's entry is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Python3,
    Node,
    Bash,
    Sh,
    /// The entry itself is executed.
    Native,
}

impl Runtime {
    const ALL: &[(&str, Runtime)] = &[
        ("python3", Runtime::Python3),
        ("node", Runtime::Node),
        ("bash", Runtime::Bash),
        ("sh", Runtime::Sh),
        ("native", Runtime::Native),
    ];

    /// The interpreter program, or `None` for `native`.
    pub fn interpreter(self) -> Option<&'static str> {
        match self {
            Runtime::Python3 => Some("python3"),
            Runtime::Node => Some("node"),
            Runtime::Bash => Some("bash"),
            Runtime::Sh => Some("sh"),
            Runtime::Native => None,
        }
    }
}

/// The `[agent]` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AgentSpec {
    /// The workspace's model profile the harness talks to (AGT-2): where
    /// the model is, which credential channel carries the key, the prices.
    pub model: String,
    pub tools: BTreeSet<Tool>,
    pub autonomy: Autonomy,
    pub budgets: Budgets,
    /// How long a person has to decide one of this agent's approval
    /// requests; then it expires and the model is told `approval_expired`.
    pub approval_ttl_s: u64,
    /// The most bytes of one tool's output the model is shown (head and
    /// tail); the whole output is kept as an artifact.
    pub tool_output_bytes: u64,
    /// The worker's policy rules (`[[agent.rules]]`), in file order: a
    /// `deny` binds at every autonomy level, an `allow` lets an action
    /// run without a person only under `auto-within-policy`, an `ask`
    /// always asks.
    pub rules: Vec<AgentRule>,
}

/// One `[[agent.rules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentRule {
    pub tool: Tool,
    pub verdict: RuleVerdict,
    pub matcher: RuleMatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleVerdict {
    Allow,
    Ask,
    Deny,
}

/// What a rule matches, beside its tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleMatch {
    /// Every call of the tool.
    Any,
    /// `run_command` whose argv (each segment of a shell `-c` script)
    /// starts with these words.
    ArgvPrefix(Vec<String>),
    /// File tools under this relative folder.
    PathPrefix(String),
    /// `http_request` to this host with one of these methods.
    Host { host: String, methods: Vec<String> },
}

/// At most this many `[[agent.rules]]`.
pub const MAX_AGENT_RULES: usize = 64;

/// An agent tool (AGT-3). Unknown tools are rejected (AGT-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    RunCommand,
    ReadFile,
    WriteFile,
    ListFiles,
    HttpRequest,
    RequestApproval,
    WriteOutput,
    Finish,
}

impl Tool {
    pub const ALL: &[(&str, Tool)] = &[
        ("run_command", Tool::RunCommand),
        ("read_file", Tool::ReadFile),
        ("write_file", Tool::WriteFile),
        ("list_files", Tool::ListFiles),
        ("http_request", Tool::HttpRequest),
        ("request_approval", Tool::RequestApproval),
        ("write_output", Tool::WriteOutput),
        ("finish", Tool::Finish),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("", |(n, _)| n)
    }
}

/// How much an agent may do without a human (AGT-4). Ordered from the most
/// supervised to the least; deny rules and budgets bind at every level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Autonomy {
    /// Only reads: every state-changing or outbound action is denied.
    ReadOnly,
    /// Every action but the run's own outputs waits for a person.
    AskAll,
    /// Reads run; every state-changing action waits for a person.
    AskWrites,
    /// Rules decide; an action no rule allows waits for a person.
    AutoWithinPolicy,
}

/// Agent budgets (AGT-7); a run that reaches one ends with its own code.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Budgets {
    pub steps: u64,
    pub tool_calls: u64,
    pub tokens: u64,
    pub cost_usd: f64,
    pub wall_time_s: u64,
    pub egress_bytes: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            steps: table_default(BUDGET_TABLE, "steps"),
            tool_calls: table_default(BUDGET_TABLE, "tool_calls"),
            tokens: table_default(BUDGET_TABLE, "tokens"),
            cost_usd: COST_USD_RANGE.0,
            wall_time_s: table_default(BUDGET_TABLE, "wall_time_s"),
            egress_bytes: table_default(BUDGET_TABLE, "egress_bytes"),
        }
    }
}

/// The type of an input or output, with its type-specific constraints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum FieldType {
    String {
        /// Allowed values; empty means any.
        #[serde(rename = "enum", skip_serializing_if = "Vec::is_empty")]
        choices: Vec<String>,
        /// In characters (Unicode scalar values).
        #[serde(skip_serializing_if = "Option::is_none")]
        max_length: Option<u64>,
    },
    Number {
        #[serde(rename = "enum", skip_serializing_if = "Vec::is_empty")]
        choices: Vec<f64>,
        /// The smallest value allowed (inclusive).
        #[serde(skip_serializing_if = "Option::is_none")]
        minimum: Option<f64>,
        /// The largest value allowed (inclusive).
        #[serde(skip_serializing_if = "Option::is_none")]
        maximum: Option<f64>,
    },
    Boolean,
    /// Any JSON value.
    Json {
        /// Size of its compact JSON serialisation.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    File {
        #[serde(skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
}

impl FieldType {
    const NAMES: &str = "string, number, boolean, json or file";

    pub fn name(&self) -> &'static str {
        match self {
            FieldType::String { .. } => "string",
            FieldType::Number { .. } => "number",
            FieldType::Boolean => "boolean",
            FieldType::Json { .. } => "json",
            FieldType::File { .. } => "file",
        }
    }
}

/// One `[inputs.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InputSpec {
    #[serde(flatten)]
    pub ty: FieldType,
    pub required: bool,
    /// Already checked against the type; filled in when the input is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    pub description: String,
}

/// One `[outputs.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OutputSpec {
    #[serde(flatten)]
    pub ty: FieldType,
    pub required: bool,
    /// Where a file output is written, relative to `/airlock/output/`.
    /// `Some` exactly when `ty` is [`FieldType::File`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<RelPath>,
    pub description: String,
}

/// A relative path inside a folder: no leading `/`, no `.` or `..`
/// components, no empty components, no backslash or control characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct RelPath(String);

impl RelPath {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("must not be empty".into());
        }
        if s.len() > MAX_PATH_BYTES {
            return Err(format!("is longer than {MAX_PATH_BYTES} bytes"));
        }
        if s.starts_with('/') {
            return Err(format!(
                "{s:?} is an absolute path (expected a relative path)"
            ));
        }
        if s.chars().any(|c| c.is_control() || c == '\\') {
            return Err(format!("{s:?} contains a control character or a backslash"));
        }
        for part in s.split('/') {
            match part {
                ".." => return Err(format!("{s:?} contains a \"..\" component")),
                "." | "" => {
                    return Err(format!(
                        "{s:?} is not a plain relative path (empty or \".\" component)"
                    ));
                }
                _ => {}
            }
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `[limits]`, with defaults filled in. Each value is positive and at most
/// its maximum in [`LIMIT_TABLE`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Limits {
    /// Wall-clock timeout including start-up, in seconds.
    pub timeout_s: u64,
    pub memory_mb: u64,
    /// Processes and threads.
    pub pids: u64,
    /// CPU bandwidth in cores (fractions allowed).
    pub cpus: f64,
    /// Total bytes the run may leave in `/airlock/output/` (declared files
    /// and `result.json`).
    pub output_bytes: u64,
    /// Size of the sandbox's private `/tmp` (a tmpfs), in MiB. The output
    /// folder is on the host: `output_bytes` bounds each file written
    /// there and what is collected from it.
    pub disk_mb: u64,
    /// Most runs of this worker executing at once on one node (RUN-7);
    /// further runs wait in the queue.
    pub concurrency: u64,
}

/// Each integer limit: name, default, maximum. Security policy as data: one
/// reviewed place, mirrored in docs/workers.md.
pub const LIMIT_TABLE: &[(&str, u64, u64)] = &[
    ("timeout_s", 300, 86_400),
    ("memory_mb", 512, 65_536),
    ("pids", 256, 32_768),
    ("output_bytes", 10 << 20, 1 << 30),
    ("disk_mb", 1024, 65_536),
    ("concurrency", 4, 1024),
];
/// `cpus`: default, minimum, maximum.
pub const CPUS_RANGE: (f64, f64, f64) = (1.0, 0.01, 64.0);

/// Each integer budget: name, default, maximum.
pub const BUDGET_TABLE: &[(&str, u64, u64)] = &[
    ("steps", 50, 10_000),
    ("tool_calls", 100, 10_000),
    ("tokens", 200_000, 100_000_000),
    ("wall_time_s", 900, 86_400),
    ("egress_bytes", 10 << 20, 10 << 30),
];
/// `agent.approval_ttl_s`: default (an hour) and maximum (a week).
pub const AGENT_APPROVAL_TTL_S: (u64, u64) = (3_600, 604_800);
/// `agent.tool_output_bytes`: default and maximum.
pub const TOOL_OUTPUT_BYTES: (u64, u64) = (16 * 1024, 1 << 20);

/// Whether `name` can name a model profile.
pub fn is_profile_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// `cost_usd`: default, maximum (must be above zero).
pub const COST_USD_RANGE: (f64, f64) = (1.0, 1000.0);

fn table_default(table: &[(&str, u64, u64)], name: &str) -> u64 {
    table
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(1, |(_, d, _)| *d)
}

impl Default for Limits {
    fn default() -> Self {
        let d = |n| table_default(LIMIT_TABLE, n);
        Self {
            timeout_s: d("timeout_s"),
            memory_mb: d("memory_mb"),
            pids: d("pids"),
            cpus: CPUS_RANGE.0,
            output_bytes: d("output_bytes"),
            disk_mb: d("disk_mb"),
            concurrency: d("concurrency"),
        }
    }
}

/// `[egress]`: what the sandbox may reach through its proxy (NET-3, NET-6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Egress {
    pub allow: Vec<AllowRule>,
    pub channels: Vec<ChannelName>,
}

/// One egress allow rule in the `--allow` syntax: `HOST[:PORT]`,
/// `*.SUFFIX[:PORT]`, `http://HOST[:PORT]`, `IP[:PORT]` or a CIDR. Only the
/// syntax is checked here; the egress crate parses it strictly when the
/// run's policy is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct AllowRule(String);

impl AllowRule {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty rule".into());
        }
        if s.len() > 300 {
            return Err("rule is longer than 300 characters".into());
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{s:?} contains whitespace, a control or a non-ASCII character"
            ));
        }
        let rest = match s.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "{s:?}: scheme {scheme:?} is not allowed (HTTPS is the default; write only the host, or http://HOST for plain HTTP)"
                ));
            }
            None => s,
        };
        if let Some((ip, prefix)) = rest.split_once('/') {
            let ok = ip.parse::<std::net::IpAddr>().is_ok()
                && !prefix.is_empty()
                && prefix.len() <= 3
                && prefix.bytes().all(|b| b.is_ascii_digit());
            return if ok {
                Ok(Self(s.to_string()))
            } else {
                Err(format!(
                    "{s:?} is not HOST[:PORT] or a CIDR (paths are not allowed)"
                ))
            };
        }
        let host = match rest.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') && !host.contains(':') => {
                match port.parse::<u16>() {
                    Ok(p) if p > 0 && !port.starts_with('0') => host,
                    _ => return Err(format!("{s:?} has an invalid port {port:?}")),
                }
            }
            _ => rest,
        };
        if host.is_empty() {
            return Err(format!("{s:?} has no host"));
        }
        if host == "*" {
            return Err(format!(
                "{s:?} would allow every host; list hosts or suffixes"
            ));
        }
        if let Some(suffix) = host.strip_prefix("*.") {
            if !suffix.trim_end_matches('.').contains('.') {
                return Err(format!("{s:?} covers a whole top-level domain"));
            }
            if suffix.contains('*') {
                return Err(format!("{s:?}: \"*\" is only allowed as the first label"));
            }
        } else if host.contains('*') {
            return Err(format!(
                "{s:?}: \"*\" is only allowed as a leading \"*.\" label"
            ));
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `[secrets]` (KEY-5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Secrets {
    pub names: Vec<SecretName>,
    pub delivery: SecretDelivery,
}

/// How declared secrets reach a script.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretDelivery {
    /// `/run/secrets/<NAME>`, read-only tmpfs.
    #[default]
    File,
    /// Environment variables named like the secrets.
    Env,
}

/// One `[[triggers]]` entry (RUN-6).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Trigger {
    Manual,
    Schedule {
        cron: CronExpr,
        timezone: Timezone,
        /// Input for each fire, checked against the inputs at load except
        /// for missing required inputs: such a fire is skipped and logged.
        input: serde_json::Map<String, Value>,
    },
    Webhook {
        format: WebhookFormat,
    },
}

/// What starts a run, without the trigger's settings (RUN-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerKind {
    /// By hand: the CLI, the API, the UI, MCP, a stored plan.
    Manual,
    Schedule,
    Webhook,
}

impl Trigger {
    pub fn kind(&self) -> TriggerKind {
        match self {
            Trigger::Manual => TriggerKind::Manual,
            Trigger::Schedule { .. } => TriggerKind::Schedule,
            Trigger::Webhook { .. } => TriggerKind::Webhook,
        }
    }
}

impl Manifest {
    /// The declared inputs as a JSON Schema (2020-12) object: what a client
    /// (an MCP host, a generated form) may send as a run's `input`. The
    /// run is still checked by [`Manifest::check_input`] on
    /// the server; this only describes it. File inputs cannot be given
    /// inline, so they are left out of `properties` and named in the
    /// description.
    pub fn input_schema(&self) -> serde_json::Value {
        use serde_json::{Map, Value, json};
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut files = Vec::new();
        for (name, spec) in &self.inputs {
            let mut field = match &spec.ty {
                FieldType::String {
                    choices,
                    max_length,
                } => {
                    let mut f = json!({"type": "string"});
                    if !choices.is_empty() {
                        f["enum"] = json!(choices);
                    }
                    if let Some(m) = max_length {
                        f["maxLength"] = json!(m);
                    }
                    f
                }
                FieldType::Number {
                    choices,
                    minimum,
                    maximum,
                } => {
                    let mut f = json!({"type": "number"});
                    if !choices.is_empty() {
                        f["enum"] = json!(choices);
                    }
                    if let Some(m) = minimum {
                        f["minimum"] = json!(m);
                    }
                    if let Some(m) = maximum {
                        f["maximum"] = json!(m);
                    }
                    f
                }
                FieldType::Boolean => json!({"type": "boolean"}),
                FieldType::Json { max_bytes } => {
                    let mut f = json!({});
                    if let Some(m) = max_bytes {
                        f["description"] =
                            json!(format!("any JSON value, at most {m} bytes as compact JSON"));
                    }
                    f
                }
                FieldType::File { .. } => {
                    files.push(name.as_str().to_string());
                    continue;
                }
            };
            if let Value::Object(o) = &mut field {
                if !spec.description.is_empty() {
                    let d = match o.get("description").and_then(Value::as_str) {
                        Some(extra) => format!("{} ({extra})", spec.description),
                        None => spec.description.clone(),
                    };
                    o.insert("description".into(), Value::String(d));
                }
                if let Some(d) = &spec.default {
                    o.insert("default".into(), d.clone());
                }
            }
            if spec.required && spec.default.is_none() {
                required.push(name.as_str().to_string());
            }
            properties.insert(name.as_str().to_string(), field);
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
        if !files.is_empty() {
            schema["description"] = json!(format!(
                "file inputs ({}) cannot be given inline",
                files.join(", ")
            ));
        }
        schema
    }
}

impl Manifest {
    /// Whether a run may come from `kind`: the trigger list is complete,
    /// so a worker with only a webhook cannot be started by hand.
    pub fn declares_trigger(&self, kind: TriggerKind) -> bool {
        self.triggers.iter().any(|t| t.kind() == kind)
    }
}

/// Signature format of a webhook trigger (API-9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// Standard Webhooks.
    #[default]
    Standard,
    Github,
    Slack,
    Stripe,
}

/// `[approvals]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Approvals {
    /// Every run waits in `awaiting_approval` until a human approves it.
    pub required: bool,
    /// Shown to the approver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds a run's approval request stays decidable (and an approval
    /// usable); then it expires and the run ends `blocked`
    /// (`approval_expired`). `None`: [`APPROVAL_TTL_DEFAULT_S`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<u64>,
}

/// How long a run's approval request waits when `approvals.ttl_s` is not
/// set: a day, so a request nobody answers ends instead of hanging.
pub const APPROVAL_TTL_DEFAULT_S: u64 = 86_400;
/// The longest `approvals.ttl_s`: a week.
pub const APPROVAL_TTL_MAX_S: u64 = 7 * 86_400;

impl Approvals {
    /// The lifetime of this worker's run approvals, in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s.unwrap_or(APPROVAL_TTL_DEFAULT_S)
    }
}

/// A field that parses but that nothing enforces yet.
#[derive(Debug, Clone, Copy)]
pub struct Unenforced {
    /// The field path, as in a problem.
    pub field: &'static str,
    /// Whether `manifest` sets it to something that would need enforcing.
    pub set: fn(&Manifest) -> bool,
    /// Why it is refused, and what to do meanwhile.
    pub why: &'static str,
}

/// Fail closed on what is not enforced: a manifest that sets one of these
/// is refused at load, naming the field, rather than loaded and run as if
/// the field were honoured. Security policy as data, mirrored in
/// docs/workers.md. When the enforcement lands, its entry goes.
///
/// Empty today: `approvals.required`, the last entry, is enforced by the
/// run service (a run waits in `awaiting_approval` and executes only with
/// a consumed approval for exactly its payload).
/// Every `[agent]` field is enforced by the harness (model profile,
/// autonomy, tools, budgets, approval expiry, tool output bound).
pub const UNENFORCED: &[Unenforced] = &[];

// ---------------------------------------------------------------------------
// The raw file shape.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    worker: Option<RawWorker>,
    agent: Option<RawAgent>,
    #[serde(default)]
    inputs: BTreeMap<String, RawInput>,
    #[serde(default)]
    outputs: BTreeMap<String, RawOutput>,
    limits: Option<RawLimits>,
    egress: Option<RawEgress>,
    secrets: Option<RawSecrets>,
    triggers: Option<Vec<RawTrigger>>,
    approvals: Option<RawApprovals>,
    idempotent: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    id: Option<String>,
    title: Option<String>,
    description: Option<String>,
    kind: Option<String>,
    entry: Option<String>,
    runtime: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    model: Option<String>,
    tools: Option<Vec<String>>,
    autonomy: Option<String>,
    budgets: Option<RawBudgets>,
    approval_ttl_s: Option<i64>,
    tool_output_bytes: Option<i64>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    tool: Option<String>,
    verdict: Option<String>,
    argv_prefix: Option<Vec<String>>,
    path_prefix: Option<String>,
    host: Option<String>,
    methods: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudgets {
    steps: Option<i64>,
    tool_calls: Option<i64>,
    tokens: Option<i64>,
    cost_usd: Option<f64>,
    wall_time_s: Option<i64>,
    egress_bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    #[serde(rename = "type")]
    ty: Option<String>,
    required: Option<bool>,
    default: Option<toml::Value>,
    #[serde(rename = "enum")]
    choices: Option<Vec<toml::Value>>,
    max_length: Option<i64>,
    max_bytes: Option<i64>,
    minimum: Option<toml::Value>,
    maximum: Option<toml::Value>,
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    #[serde(rename = "type")]
    ty: Option<String>,
    required: Option<bool>,
    #[serde(rename = "enum")]
    choices: Option<Vec<toml::Value>>,
    max_length: Option<i64>,
    max_bytes: Option<i64>,
    minimum: Option<toml::Value>,
    maximum: Option<toml::Value>,
    description: Option<String>,
    path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout_s: Option<i64>,
    memory_mb: Option<i64>,
    pids: Option<i64>,
    cpus: Option<f64>,
    output_bytes: Option<i64>,
    disk_mb: Option<i64>,
    concurrency: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    channels: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    #[serde(default)]
    names: Vec<String>,
    delivery: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrigger {
    kind: Option<String>,
    cron: Option<String>,
    timezone: Option<String>,
    input: Option<toml::Table>,
    format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprovals {
    required: Option<bool>,
    reason: Option<String>,
    ttl_s: Option<i64>,
}

// ---------------------------------------------------------------------------
// Parsing.

impl Manifest {
    /// Parses and validates a manifest text. Checks everything that does not
    /// need the file system; [`crate::load_bundle`] adds the folder name,
    /// the entry file and the agent prompt.
    pub fn from_toml(text: &str) -> Result<Manifest, ManifestError> {
        if text.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::one(
                "",
                format!("worker.toml is larger than {MAX_MANIFEST_BYTES} bytes"),
            ));
        }
        let doc = toml::de::DeTable::parse(text).map_err(|e| error::syntax_error(text, &e))?;
        let raw: RawManifest = toml::from_str(text).map_err(|e| ManifestError::Invalid {
            problems: vec![error::schema_error(&doc, &e)],
        })?;
        let mut cx = Cx::default();
        let manifest = parse(&mut cx, raw);
        if let Some(m) = &manifest {
            for u in UNENFORCED.iter().filter(|u| (u.set)(m)) {
                cx.bad(u.field, u.why);
            }
        }
        match manifest {
            Some(m) if cx.problems.is_empty() => Ok(m),
            _ => {
                if cx.problems.is_empty() {
                    cx.bad("", "manifest could not be parsed");
                }
                Err(ManifestError::Invalid {
                    problems: cx.problems,
                })
            }
        }
    }

    /// Whether this is an agent worker.
    pub fn agent(&self) -> Option<&AgentSpec> {
        match &self.kind {
            WorkerKind::Agent { agent } => Some(agent),
            WorkerKind::Script { .. } => None,
        }
    }
}

/// Problems found so far.
#[derive(Default)]
struct Cx {
    problems: Vec<Problem>,
}

impl Cx {
    fn bad(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(field, message));
    }

    fn required<T>(&mut self, value: Option<T>, field: &str) -> Option<T> {
        if value.is_none() {
            self.bad(field, "missing required field");
        }
        value
    }

    /// Text: no control characters other than newline and tab (and none at
    /// all when `one_line`), at most `max` characters.
    fn text(&mut self, field: &str, s: String, max: usize, one_line: bool) -> Option<String> {
        if s.chars().count() > max {
            self.bad(field, format!("longer than {max} characters"));
            return None;
        }
        let bad_char = |c: char| c.is_control() && (one_line || !matches!(c, '\n' | '\t'));
        if s.chars().any(bad_char) {
            self.bad(field, "contains a control character");
            return None;
        }
        Some(s)
    }

    /// An integer within `1..=max`.
    fn positive(&mut self, field: &str, v: i64, max: u64) -> Option<u64> {
        match u64::try_from(v) {
            Ok(n) if n >= 1 && n <= max => Some(n),
            _ => {
                self.bad(field, format!("{v} is out of range (expected 1 to {max})"));
                None
            }
        }
    }

    /// One of `choices`, or a message listing them.
    fn one_of<T: Copy>(
        &mut self,
        field: &str,
        what: &str,
        s: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        match choices.iter().find(|(n, _)| *n == s) {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                self.bad(
                    field,
                    format!("unknown {what} {s:?} (expected {})", or_list(&names)),
                );
                None
            }
        }
    }
}

/// `a, b or c`.
fn or_list(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn parse(cx: &mut Cx, raw: RawManifest) -> Option<Manifest> {
    let Some(worker) = raw.worker else {
        cx.bad("worker", "missing required section");
        return None;
    };
    let id = cx
        .required(worker.id, "worker.id")
        .and_then(|s| match WorkerId::parse(&s) {
            Ok(id) => Some(id),
            Err(e) => {
                cx.bad("worker.id", e.to_string());
                None
            }
        });
    let title = cx.required(worker.title, "worker.title").and_then(|s| {
        if s.trim().is_empty() {
            cx.bad("worker.title", "must not be empty");
            return None;
        }
        cx.text("worker.title", s, MAX_TITLE_CHARS, true)
    });
    let description = cx.text(
        "worker.description",
        worker.description.unwrap_or_default(),
        MAX_DESCRIPTION_CHARS,
        false,
    );
    let is_agent = cx.required(worker.kind, "worker.kind").and_then(|k| {
        cx.one_of(
            "worker.kind",
            "kind",
            &k,
            &[("script", false), ("agent", true)],
        )
    });
    let entry = cx
        .required(worker.entry, "worker.entry")
        .and_then(|s| match RelPath::parse(&s) {
            Ok(p) => Some(p),
            Err(e) => {
                cx.bad("worker.entry", e);
                None
            }
        });

    let kind = match is_agent {
        Some(false) => {
            if raw.agent.is_some() {
                cx.bad("agent", "only allowed when worker.kind = \"agent\"");
            }
            cx.required(worker.runtime, "worker.runtime")
                .and_then(|r| cx.one_of("worker.runtime", "runtime", &r, Runtime::ALL))
                .map(|runtime| WorkerKind::Script { runtime })
        }
        Some(true) => {
            if worker.runtime.is_some() {
                cx.bad("worker.runtime", "only allowed for script workers");
            }
            if let Some(e) = &entry
                && !matches!(e.file_name(), "AGENT.md" | "SKILL.md")
            {
                cx.bad(
                    "worker.entry",
                    format!(
                        "an agent's entry must be AGENT.md or SKILL.md, not {:?}",
                        e.as_str()
                    ),
                );
            }
            match raw.agent {
                Some(a) => parse_agent(cx, a).map(|agent| WorkerKind::Agent { agent }),
                None => {
                    cx.bad("agent", "missing required section for an agent worker");
                    None
                }
            }
        }
        None => None,
    };

    let inputs = parse_inputs(cx, raw.inputs);
    let outputs = parse_outputs(cx, raw.outputs);
    let limits = parse_limits(cx, raw.limits.unwrap_or_default());
    let egress = parse_egress(cx, raw.egress.unwrap_or_default());
    let secrets = parse_secrets(cx, raw.secrets.unwrap_or_default(), is_agent == Some(true));
    let triggers = parse_triggers(cx, raw.triggers, &inputs);
    let approvals = parse_approvals(cx, raw.approvals.unwrap_or_default());

    Some(Manifest {
        id: id?,
        title: title?,
        description: description?,
        kind: kind?,
        entry: entry?,
        inputs,
        outputs,
        limits: limits?,
        egress,
        secrets,
        triggers,
        approvals: approvals?,
        idempotent: raw.idempotent.unwrap_or(false),
    })
}

fn parse_rule(cx: &mut Cx, field: &str, r: RawRule) -> Option<AgentRule> {
    let tool = cx
        .required(r.tool, &format!("{field}.tool"))
        .and_then(|t| cx.one_of(&format!("{field}.tool"), "tool", &t, Tool::ALL));
    let verdict = cx
        .required(r.verdict, &format!("{field}.verdict"))
        .and_then(|v| {
            cx.one_of(
                &format!("{field}.verdict"),
                "verdict",
                &v,
                &[
                    ("allow", RuleVerdict::Allow),
                    ("ask", RuleVerdict::Ask),
                    ("deny", RuleVerdict::Deny),
                ],
            )
        });
    let (tool, verdict) = (tool?, verdict?);
    let given = usize::from(r.argv_prefix.is_some())
        + usize::from(r.path_prefix.is_some())
        + usize::from(r.host.is_some());
    if given > 1 {
        cx.bad(field, "at most one of argv_prefix, path_prefix and host");
        return None;
    }
    if r.methods.is_some() && r.host.is_none() {
        cx.bad(format!("{field}.methods"), "goes with host");
        return None;
    }
    let matcher = if let Some(prefix) = r.argv_prefix {
        if tool != Tool::RunCommand {
            cx.bad(format!("{field}.argv_prefix"), "is for run_command rules");
            return None;
        }
        // An allow rule must be narrow (no interpreter, no -c/-e form);
        // a deny or ask rule may name anything.
        let check = if verdict == RuleVerdict::Allow {
            airlock_agent::grant_rules::check_prefix(&prefix).map_err(|e| e.to_string())
        } else if prefix.is_empty() || prefix.iter().any(String::is_empty) {
            Err("must be one or more non-empty words".to_string())
        } else {
            Ok(())
        };
        if let Err(e) = check {
            cx.bad(format!("{field}.argv_prefix"), e);
            return None;
        }
        RuleMatch::ArgvPrefix(prefix)
    } else if let Some(prefix) = r.path_prefix {
        if !matches!(tool, Tool::ReadFile | Tool::WriteFile | Tool::ListFiles) {
            cx.bad(
                format!("{field}.path_prefix"),
                "is for read_file, write_file and list_files rules",
            );
            return None;
        }
        let clean = !prefix.is_empty()
            && !prefix.starts_with('/')
            && prefix.len() <= 1024
            && !prefix.chars().any(char::is_control)
            && prefix.split('/').all(|c| c != ".." && c != ".");
        if !clean {
            cx.bad(
                format!("{field}.path_prefix"),
                "must be a relative folder without . or .. components",
            );
            return None;
        }
        RuleMatch::PathPrefix(prefix.trim_end_matches('/').to_string())
    } else if let Some(host) = r.host {
        if tool != Tool::HttpRequest {
            cx.bad(format!("{field}.host"), "is for http_request rules");
            return None;
        }
        let ok = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !ok {
            cx.bad(
                format!("{field}.host"),
                "must be a host name in lower case (letters, digits, '.', '-')",
            );
            return None;
        }
        let methods = r
            .methods
            .unwrap_or_else(|| vec!["GET".into(), "HEAD".into()]);
        if methods.is_empty()
            || methods.iter().any(|m| {
                !matches!(
                    m.as_str(),
                    "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE"
                )
            })
        {
            cx.bad(
                format!("{field}.methods"),
                "one or more of GET, HEAD, POST, PUT, PATCH, DELETE",
            );
            return None;
        }
        RuleMatch::Host { host, methods }
    } else {
        RuleMatch::Any
    };
    Some(AgentRule {
        tool,
        verdict,
        matcher,
    })
}

fn parse_agent(cx: &mut Cx, a: RawAgent) -> Option<AgentSpec> {
    let model = cx.required(a.model, "agent.model").and_then(|m| {
        if is_profile_name(&m) {
            Some(m)
        } else {
            cx.bad(
                "agent.model",
                "must name a model profile of the workspace: 1 to 64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
            );
            None
        }
    });
    let tools = cx.required(a.tools, "agent.tools").map(|list| {
        let mut tools = BTreeSet::new();
        for (i, t) in list.iter().enumerate() {
            let field = format!("agent.tools[{i}]");
            if let Some(tool) = cx.one_of(&field, "tool", t, Tool::ALL)
                && !tools.insert(tool)
            {
                cx.bad(field, format!("tool {t:?} is listed twice"));
            }
        }
        tools
    });
    let autonomy = cx.required(a.autonomy, "agent.autonomy").and_then(|s| {
        cx.one_of(
            "agent.autonomy",
            "autonomy",
            &s,
            &[
                ("read-only", Autonomy::ReadOnly),
                ("ask-all", Autonomy::AskAll),
                ("ask-writes", Autonomy::AskWrites),
                ("auto-within-policy", Autonomy::AutoWithinPolicy),
            ],
        )
    });
    let b = a.budgets.unwrap_or_default();
    let mut budget = |name: &str, v: Option<i64>| -> Option<u64> {
        let (_, default, max) = BUDGET_TABLE.iter().find(|(n, _, _)| *n == name)?;
        match v {
            None => Some(*default),
            Some(v) => cx.positive(&format!("agent.budgets.{name}"), v, *max),
        }
    };
    let steps = budget("steps", b.steps);
    let tool_calls = budget("tool_calls", b.tool_calls);
    let tokens = budget("tokens", b.tokens);
    let wall_time_s = budget("wall_time_s", b.wall_time_s);
    let egress_bytes = budget("egress_bytes", b.egress_bytes);
    let cost_usd = match b.cost_usd {
        None => Some(COST_USD_RANGE.0),
        Some(c) if c > 0.0 && c <= COST_USD_RANGE.1 => Some(c),
        Some(c) => {
            cx.bad(
                "agent.budgets.cost_usd",
                format!(
                    "{c} is out of range (expected more than 0 and at most {})",
                    COST_USD_RANGE.1
                ),
            );
            None
        }
    };
    let approval_ttl_s = match a.approval_ttl_s {
        None => Some(AGENT_APPROVAL_TTL_S.0),
        Some(v) => cx.positive("agent.approval_ttl_s", v, AGENT_APPROVAL_TTL_S.1),
    };
    let tool_output_bytes = match a.tool_output_bytes {
        None => Some(TOOL_OUTPUT_BYTES.0),
        Some(v) => cx.positive("agent.tool_output_bytes", v, TOOL_OUTPUT_BYTES.1),
    };
    let mut rules = Vec::new();
    if a.rules.len() > MAX_AGENT_RULES {
        cx.bad("agent.rules", format!("at most {MAX_AGENT_RULES} rules"));
    }
    for (i, r) in a.rules.into_iter().take(MAX_AGENT_RULES).enumerate() {
        if let Some(rule) = parse_rule(cx, &format!("agent.rules[{i}]"), r) {
            rules.push(rule);
        }
    }
    Some(AgentSpec {
        rules,
        model: model?,
        tools: tools?,
        autonomy: autonomy?,
        approval_ttl_s: approval_ttl_s?,
        tool_output_bytes: tool_output_bytes?,
        budgets: Budgets {
            steps: steps?,
            tool_calls: tool_calls?,
            tokens: tokens?,
            cost_usd: cost_usd?,
            wall_time_s: wall_time_s?,
            egress_bytes: egress_bytes?,
        },
    })
}

/// The fields inputs and outputs share.
struct RawCommon {
    ty: Option<String>,
    choices: Option<Vec<toml::Value>>,
    max_length: Option<i64>,
    max_bytes: Option<i64>,
    minimum: Option<toml::Value>,
    maximum: Option<toml::Value>,
    description: Option<String>,
}

fn parse_field_name(cx: &mut Cx, section: &str, name: &str) -> Option<FieldName> {
    match FieldName::parse(name) {
        Ok(n) => Some(n),
        Err(e) => {
            cx.bad(format!("{section}.{name}"), e.to_string());
            None
        }
    }
}

fn parse_field_type(cx: &mut Cx, path: &str, raw: RawCommon) -> Option<(FieldType, String)> {
    let description = cx.text(
        &format!("{path}.description"),
        raw.description.unwrap_or_default(),
        MAX_FIELD_DESCRIPTION_CHARS,
        false,
    );
    let ty_field = format!("{path}.type");
    let ty = cx.required(raw.ty, &ty_field)?;
    let ty = match ty.as_str() {
        "string" | "number" | "boolean" | "json" | "file" => ty,
        other => {
            cx.bad(
                ty_field,
                format!("unknown type {other:?} (expected {})", FieldType::NAMES),
            );
            return None;
        }
    };
    let only = |cx: &mut Cx, what: &str, present: bool, allowed: &[&str]| {
        if present && !allowed.contains(&ty.as_str()) {
            cx.bad(
                format!("{path}.{what}"),
                format!(
                    "only allowed for type {} (this field is {ty})",
                    or_list(allowed)
                ),
            );
        }
    };
    only(cx, "enum", raw.choices.is_some(), &["string", "number"]);
    only(cx, "max_length", raw.max_length.is_some(), &["string"]);
    only(cx, "max_bytes", raw.max_bytes.is_some(), &["json", "file"]);
    only(cx, "minimum", raw.minimum.is_some(), &["number"]);
    only(cx, "maximum", raw.maximum.is_some(), &["number"]);
    let bound = |cx: &mut Cx, what: &str, v: Option<&toml::Value>| {
        let v = v?;
        let n = toml_number(v);
        if n.is_none() {
            cx.bad(
                format!("{path}.{what}"),
                format!("expected a finite number, got {}", toml_type(v)),
            );
        }
        n
    };
    let minimum = bound(cx, "minimum", raw.minimum.as_ref());
    let maximum = bound(cx, "maximum", raw.maximum.as_ref());
    if let (Some(lo), Some(hi)) = (minimum, maximum)
        && lo > hi
    {
        cx.bad(
            format!("{path}.minimum"),
            format!("{lo} is above maximum {hi}"),
        );
    }

    let max_length = raw
        .max_length
        .and_then(|v| cx.positive(&format!("{path}.max_length"), v, MAX_VALUE_BYTES));
    let byte_cap = if ty == "file" {
        MAX_FILE_BYTES
    } else {
        MAX_VALUE_BYTES
    };
    let max_bytes = raw
        .max_bytes
        .and_then(|v| cx.positive(&format!("{path}.max_bytes"), v, byte_cap));

    let enum_field = format!("{path}.enum");
    if raw_choices_bad(cx, &enum_field, raw.choices.as_deref()) {
        return None;
    }
    let choices = raw.choices.unwrap_or_default();
    let parsed = match ty.as_str() {
        "string" => {
            let mut out = Vec::new();
            for (i, c) in choices.iter().enumerate() {
                match c.as_str() {
                    Some(s) if out.iter().any(|o: &String| o == s) => {
                        cx.bad(
                            format!("{enum_field}[{i}]"),
                            format!("{s:?} is listed twice"),
                        );
                    }
                    Some(s) => {
                        if let Some(max) = max_length
                            && s.chars().count() as u64 > max
                        {
                            cx.bad(
                                format!("{enum_field}[{i}]"),
                                format!("{s:?} is longer than max_length {max}"),
                            );
                        }
                        out.push(s.to_string());
                    }
                    None => cx.bad(
                        format!("{enum_field}[{i}]"),
                        format!("expected a string, got {}", toml_type(c)),
                    ),
                }
            }
            FieldType::String {
                choices: out,
                max_length,
            }
        }
        "number" => {
            let mut out = Vec::new();
            for (i, c) in choices.iter().enumerate() {
                match toml_number(c) {
                    Some(n) if out.contains(&n) => {
                        cx.bad(format!("{enum_field}[{i}]"), format!("{n} is listed twice"));
                    }
                    Some(n)
                        if minimum.is_some_and(|lo| n < lo) || maximum.is_some_and(|hi| n > hi) =>
                    {
                        cx.bad(
                            format!("{enum_field}[{i}]"),
                            format!("{n} is outside minimum and maximum"),
                        );
                    }
                    Some(n) => out.push(n),
                    None => cx.bad(
                        format!("{enum_field}[{i}]"),
                        format!("expected a finite number, got {}", toml_type(c)),
                    ),
                }
            }
            FieldType::Number {
                choices: out,
                minimum,
                maximum,
            }
        }
        "boolean" => FieldType::Boolean,
        "json" => FieldType::Json { max_bytes },
        _ => FieldType::File { max_bytes },
    };
    Some((parsed, description?))
}

/// `enum = []` and oversized lists are refused before looking at items.
fn raw_choices_bad(cx: &mut Cx, field: &str, choices: Option<&[toml::Value]>) -> bool {
    let Some(choices) = choices else {
        return false;
    };
    if choices.is_empty() {
        cx.bad(
            field,
            "must list at least one value (omit enum to allow any)",
        );
        return true;
    }
    if choices.len() > MAX_CHOICES {
        cx.bad(field, format!("more than {MAX_CHOICES} choices"));
        return true;
    }
    false
}

fn toml_type(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) | toml::Value::Float(_) => "a number",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

fn toml_number(v: &toml::Value) -> Option<f64> {
    match v {
        // Integers above 2^53 lose precision as f64; such values make no sense
        // as enum choices, and JSON numbers are f64 on most clients anyway.
        #[allow(clippy::cast_precision_loss)]
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    }
}

/// TOML → JSON. Datetimes and non-finite floats have no JSON form.
pub(crate) fn toml_to_json(v: &toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a finite number"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(_) => return Err("datetimes are not supported; use a string".into()),
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .map(toml_to_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), toml_to_json(v)?)))
                .collect::<Result<serde_json::Map<_, _>, String>>()?,
        ),
    })
}

fn parse_inputs(cx: &mut Cx, raw: BTreeMap<String, RawInput>) -> BTreeMap<FieldName, InputSpec> {
    if raw.len() > MAX_FIELDS {
        cx.bad("inputs", format!("more than {MAX_FIELDS} inputs"));
        return BTreeMap::new();
    }
    let mut out = BTreeMap::new();
    for (name, r) in raw {
        let path = format!("inputs.{name}");
        let field_name = parse_field_name(cx, "inputs", &name);
        let common = RawCommon {
            ty: r.ty,
            choices: r.choices,
            max_length: r.max_length,
            max_bytes: r.max_bytes,
            minimum: r.minimum,
            maximum: r.maximum,
            description: r.description,
        };
        let Some((ty, description)) = parse_field_type(cx, &path, common) else {
            continue;
        };
        let default = match &r.default {
            None => None,
            Some(_) if matches!(ty, FieldType::File { .. }) => {
                cx.bad(
                    format!("{path}.default"),
                    "file inputs cannot have a default",
                );
                continue;
            }
            Some(v) => match toml_to_json(v) {
                Ok(json) => match crate::values::check_value(&ty, &json) {
                    Ok(()) => Some(json),
                    Err(e) => {
                        cx.bad(format!("{path}.default"), e);
                        continue;
                    }
                },
                Err(e) => {
                    cx.bad(format!("{path}.default"), e);
                    continue;
                }
            },
        };
        let required = match (r.required, &default) {
            (Some(true), Some(_)) => {
                cx.bad(
                    format!("{path}.required"),
                    "a required input cannot have a default (remove one of them)",
                );
                continue;
            }
            (Some(req), _) => req,
            (None, d) => d.is_none(),
        };
        if let Some(field_name) = field_name {
            out.insert(
                field_name,
                InputSpec {
                    ty,
                    required,
                    default,
                    description,
                },
            );
        }
    }
    out
}

fn parse_outputs(cx: &mut Cx, raw: BTreeMap<String, RawOutput>) -> BTreeMap<FieldName, OutputSpec> {
    if raw.len() > MAX_FIELDS {
        cx.bad("outputs", format!("more than {MAX_FIELDS} outputs"));
        return BTreeMap::new();
    }
    let mut out = BTreeMap::new();
    let mut paths: BTreeMap<RelPath, String> = BTreeMap::new();
    for (name, r) in raw {
        let path = format!("outputs.{name}");
        let field_name = parse_field_name(cx, "outputs", &name);
        let common = RawCommon {
            ty: r.ty,
            choices: r.choices,
            max_length: r.max_length,
            max_bytes: r.max_bytes,
            minimum: r.minimum,
            maximum: r.maximum,
            description: r.description,
        };
        let Some((ty, description)) = parse_field_type(cx, &path, common) else {
            continue;
        };
        let file_path = match (&ty, r.path) {
            (FieldType::File { .. }, None) => {
                cx.bad(
                    format!("{path}.path"),
                    "missing required field (file outputs need a path relative to /airlock/output/)",
                );
                continue;
            }
            (FieldType::File { .. }, Some(p)) => match RelPath::parse(&p) {
                Ok(rel) if rel.as_str() == crate::RESULT_FILE => {
                    cx.bad(
                        format!("{path}.path"),
                        "result.json is reserved for scalar outputs",
                    );
                    continue;
                }
                Ok(rel) => {
                    if let Some(other) = paths.insert(rel.clone(), name.clone()) {
                        cx.bad(
                            format!("{path}.path"),
                            format!("{:?} is also the path of outputs.{other}", rel.as_str()),
                        );
                        continue;
                    }
                    Some(rel)
                }
                Err(e) => {
                    cx.bad(format!("{path}.path"), e);
                    continue;
                }
            },
            (_, Some(_)) => {
                cx.bad(format!("{path}.path"), "only allowed for type file");
                continue;
            }
            (_, None) => None,
        };
        if let Some(field_name) = field_name {
            out.insert(
                field_name,
                OutputSpec {
                    ty,
                    // Declared outputs are promised by the worker unless
                    // marked optional.
                    required: r.required.unwrap_or(true),
                    path: file_path,
                    description,
                },
            );
        }
    }
    out
}

fn parse_limits(cx: &mut Cx, raw: RawLimits) -> Option<Limits> {
    let d = Limits::default();
    let mut ok = true;
    let mut get = |name: &str, v: Option<i64>, default: u64| -> u64 {
        let max = LIMIT_TABLE
            .iter()
            .find(|(n, _, _)| *n == name)
            .map_or(default, |(_, _, m)| *m);
        match v {
            None => default,
            Some(v) => cx
                .positive(&format!("limits.{name}"), v, max)
                .unwrap_or_else(|| {
                    ok = false;
                    default
                }),
        }
    };
    let limits = Limits {
        timeout_s: get("timeout_s", raw.timeout_s, d.timeout_s),
        memory_mb: get("memory_mb", raw.memory_mb, d.memory_mb),
        pids: get("pids", raw.pids, d.pids),
        output_bytes: get("output_bytes", raw.output_bytes, d.output_bytes),
        disk_mb: get("disk_mb", raw.disk_mb, d.disk_mb),
        concurrency: get("concurrency", raw.concurrency, d.concurrency),
        cpus: match raw.cpus {
            None => d.cpus,
            Some(c) if (CPUS_RANGE.1..=CPUS_RANGE.2).contains(&c) => c,
            Some(c) => {
                cx.bad(
                    "limits.cpus",
                    format!(
                        "{c} is out of range (expected {} to {})",
                        CPUS_RANGE.1, CPUS_RANGE.2
                    ),
                );
                ok = false;
                d.cpus
            }
        },
    };
    ok.then_some(limits)
}

fn parse_egress(cx: &mut Cx, raw: RawEgress) -> Egress {
    let mut egress = Egress::default();
    if raw.allow.len() > MAX_ALLOW_RULES {
        cx.bad("egress.allow", format!("more than {MAX_ALLOW_RULES} rules"));
    } else {
        for (i, rule) in raw.allow.iter().enumerate() {
            let field = format!("egress.allow[{i}]");
            match AllowRule::parse(rule) {
                Ok(r) if egress.allow.contains(&r) => {
                    cx.bad(field, format!("{rule:?} is listed twice"));
                }
                Ok(r) => egress.allow.push(r),
                Err(e) => cx.bad(field, e),
            }
        }
    }
    if raw.channels.len() > MAX_CHANNELS {
        cx.bad(
            "egress.channels",
            format!("more than {MAX_CHANNELS} channels"),
        );
    } else {
        for (i, c) in raw.channels.iter().enumerate() {
            let field = format!("egress.channels[{i}]");
            match ChannelName::parse(c) {
                Ok(c) if egress.channels.contains(&c) => {
                    cx.bad(field, format!("{:?} is listed twice", c.as_str()));
                }
                Ok(c) => egress.channels.push(c),
                Err(e) => cx.bad(field, e.to_string()),
            }
        }
    }
    egress
}

fn parse_secrets(cx: &mut Cx, raw: RawSecrets, is_agent: bool) -> Secrets {
    let mut secrets = Secrets::default();
    if is_agent && !raw.names.is_empty() {
        cx.bad(
            "secrets.names",
            "agent workers never receive secrets (KEY-5); give the agent a channel instead",
        );
    }
    if raw.names.len() > MAX_SECRETS {
        cx.bad("secrets.names", format!("more than {MAX_SECRETS} secrets"));
    } else {
        for (i, n) in raw.names.iter().enumerate() {
            let field = format!("secrets.names[{i}]");
            match SecretName::parse(n) {
                Ok(s) if secrets.names.contains(&s) => {
                    cx.bad(field, format!("{n:?} is listed twice"));
                }
                Ok(s) => secrets.names.push(s),
                Err(e) => cx.bad(field, e.to_string()),
            }
        }
    }
    if let Some(d) = raw.delivery {
        let choices = [("file", SecretDelivery::File), ("env", SecretDelivery::Env)];
        if let Some(d) = cx.one_of("secrets.delivery", "delivery", &d, &choices) {
            secrets.delivery = d;
        }
    }
    secrets
}

fn parse_triggers(
    cx: &mut Cx,
    raw: Option<Vec<RawTrigger>>,
    inputs: &BTreeMap<FieldName, InputSpec>,
) -> Vec<Trigger> {
    let Some(raw) = raw else {
        return vec![Trigger::Manual];
    };
    if raw.len() > MAX_TRIGGERS {
        cx.bad("triggers", format!("more than {MAX_TRIGGERS} triggers"));
        return Vec::new();
    }
    if raw.is_empty() {
        cx.bad(
            "triggers",
            "empty list (omit [[triggers]] for a manual-only worker)",
        );
    }
    let mut out = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let p = format!("triggers[{i}]");
        let Some(kind) = cx.required(t.kind, &format!("{p}.kind")) else {
            continue;
        };
        let Some(kind) = cx.one_of(
            &format!("{p}.kind"),
            "trigger kind",
            &kind,
            &[("manual", 0), ("schedule", 1), ("webhook", 2)],
        ) else {
            continue;
        };
        let not_here = |cx: &mut Cx, field: &str, present: bool, only: &str| {
            if present {
                cx.bad(
                    format!("{p}.{field}"),
                    format!("only allowed for {only} triggers"),
                );
            }
        };
        if kind != 1 {
            not_here(cx, "cron", t.cron.is_some(), "schedule");
            not_here(cx, "timezone", t.timezone.is_some(), "schedule");
            not_here(cx, "input", t.input.is_some(), "schedule");
        }
        if kind != 2 {
            not_here(cx, "format", t.format.is_some(), "webhook");
        }
        let trigger = match kind {
            0 => {
                if out.contains(&Trigger::Manual) {
                    cx.bad(format!("{p}.kind"), "a manual trigger is already declared");
                    continue;
                }
                Trigger::Manual
            }
            1 => {
                let cron = cx.required(t.cron, &format!("{p}.cron")).and_then(|c| {
                    match CronExpr::parse(&c) {
                        Ok(c) => Some(c),
                        Err(e) => {
                            cx.bad(format!("{p}.cron"), e);
                            None
                        }
                    }
                });
                let timezone = cx
                    .required(t.timezone, &format!("{p}.timezone"))
                    .and_then(|z| match Timezone::parse(&z) {
                        Ok(z) => Some(z),
                        Err(e) => {
                            cx.bad(format!("{p}.timezone"), e);
                            None
                        }
                    });
                let input = match toml_to_json(&toml::Value::Table(t.input.unwrap_or_default())) {
                    Ok(Value::Object(map)) => {
                        match crate::values::check_schedule_input(inputs, &map) {
                            Ok(()) => Some(map),
                            Err(e) => {
                                cx.bad(format!("{p}.input"), e.to_string());
                                None
                            }
                        }
                    }
                    Ok(_) => None,
                    Err(e) => {
                        cx.bad(format!("{p}.input"), e);
                        None
                    }
                };
                let (Some(cron), Some(timezone), Some(input)) = (cron, timezone, input) else {
                    continue;
                };
                Trigger::Schedule {
                    cron,
                    timezone,
                    input,
                }
            }
            _ => {
                if out.iter().any(|t| matches!(t, Trigger::Webhook { .. })) {
                    cx.bad(
                        format!("{p}.kind"),
                        "a webhook trigger is already declared (one endpoint per worker)",
                    );
                    continue;
                }
                let format = match t.format {
                    None => WebhookFormat::default(),
                    Some(f) => {
                        let Some(f) = cx.one_of(
                            &format!("{p}.format"),
                            "webhook format",
                            &f,
                            &[
                                ("standard", WebhookFormat::Standard),
                                ("github", WebhookFormat::Github),
                                ("slack", WebhookFormat::Slack),
                                ("stripe", WebhookFormat::Stripe),
                            ],
                        ) else {
                            continue;
                        };
                        f
                    }
                };
                Trigger::Webhook { format }
            }
        };
        out.push(trigger);
    }
    out
}

fn parse_approvals(cx: &mut Cx, raw: RawApprovals) -> Option<Approvals> {
    let required = raw.required.unwrap_or(false);
    let reason = match raw.reason {
        None => None,
        Some(_) if !required => {
            cx.bad(
                "approvals.reason",
                "only allowed when approvals.required = true",
            );
            return None;
        }
        Some(r) => Some(cx.text("approvals.reason", r, MAX_FIELD_DESCRIPTION_CHARS, false)?),
    };
    let ttl_s = match raw.ttl_s {
        None => None,
        Some(_) if !required => {
            cx.bad(
                "approvals.ttl_s",
                "only allowed when approvals.required = true",
            );
            return None;
        }
        Some(v) => Some(cx.positive("approvals.ttl_s", v, APPROVAL_TTL_MAX_S)?),
    };
    Some(Approvals {
        required,
        reason,
        ttl_s,
    })
}
