//! Typed, allowlisted actions (AGT-3, AGT-4): the only things a model's
//! tool call can become. Parsing is strict and bounded: an unknown tool, an
//! unknown field, a wrong type, a shell string where argv is expected, or
//! arguments over the size limits are refused with a message the model can
//! read, never executed and never a panic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The largest raw argument text of one tool call.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;
/// The most argv elements of a command.
pub const MAX_ARGV: usize = 256;
/// The largest single argv element.
pub const MAX_ARG_BYTES: usize = 8 * 1024;
/// The largest file a `write_file` writes, and a request body.
pub const MAX_CONTENT_BYTES: usize = 512 * 1024;
/// The longest path or URL.
pub const MAX_PATH_CHARS: usize = 1024;
/// The most headers of an `http_request`.
pub const MAX_HEADERS: usize = 32;

/// What kind of thing an action does; decides its risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    RunCommand,
    ReadFile,
    WriteFile,
    ListFiles,
    HttpRequest,
    RequestApproval,
    WriteOutput,
    Finish,
}

impl ActionKind {
    pub const ALL: [ActionKind; 8] = [
        Self::RunCommand,
        Self::ReadFile,
        Self::WriteFile,
        Self::ListFiles,
        Self::HttpRequest,
        Self::RequestApproval,
        Self::WriteOutput,
        Self::Finish,
    ];

    /// The tool's name as the model sees it.
    pub fn name(self) -> &'static str {
        match self {
            Self::RunCommand => "run_command",
            Self::ReadFile => "read_file",
            Self::WriteFile => "write_file",
            Self::ListFiles => "list_files",
            Self::HttpRequest => "http_request",
            Self::RequestApproval => "request_approval",
            Self::WriteOutput => "write_output",
            Self::Finish => "finish",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What the tool does, for the model.
    pub fn description(self) -> &'static str {
        match self {
            Self::RunCommand => {
                "Run a program in a fresh sandbox over the run's work directory. `argv` is the program and its arguments as an array (no shell: use [\"sh\", \"-c\", \"...\"] only if you need one). No network except through the run's egress proxy."
            }
            Self::ReadFile => "Read a file of the run's work directory (a relative path).",
            Self::WriteFile => {
                "Write (create or replace) a file of the run's work directory (a relative path) with text content."
            }
            Self::ListFiles => "List the files under a folder of the run's work directory.",
            Self::HttpRequest => {
                "Send an HTTP request through the run's egress proxy (only allowlisted hosts and the worker's channels are reachable; a channel is http://127.0.0.1:3128/channels/<name>/<path>, and its credential is added by the proxy, never seen by you)."
            }
            Self::RequestApproval => {
                "Ask a person to approve something before you go on; say what and why."
            }
            Self::WriteOutput => "Set one of the run's declared outputs.",
            Self::Finish => {
                "End the run. `outputs` must match the worker's declared outputs (any set earlier with write_output are included)."
            }
        }
    }

    /// The JSON Schema of the tool's arguments, as the model sees it.
    pub fn parameters(self) -> Value {
        match self {
            Self::RunCommand => json!({
                "type": "object",
                "properties": {
                    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_ARGV},
                    "cwd": {"type": "string", "description": "relative to the work directory"},
                    "timeout_s": {"type": "integer", "minimum": 1}
                },
                "required": ["argv"],
                "additionalProperties": false
            }),
            Self::ReadFile => json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": false
            }),
            Self::WriteFile => json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            Self::ListFiles => json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "default: the work directory"}},
                "additionalProperties": false
            }),
            Self::HttpRequest => json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]},
                    "url": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"}
                },
                "required": ["method", "url"],
                "additionalProperties": false
            }),
            Self::RequestApproval => json!({
                "type": "object",
                "properties": {"reason": {"type": "string"}},
                "required": ["reason"],
                "additionalProperties": false
            }),
            Self::WriteOutput => json!({
                "type": "object",
                "properties": {"name": {"type": "string"}, "value": {}},
                "required": ["name", "value"],
                "additionalProperties": false
            }),
            Self::Finish => json!({
                "type": "object",
                "properties": {"outputs": {"type": "object"}, "summary": {"type": "string"}},
                "additionalProperties": false
            }),
        }
    }

    /// Changes something outside the run's own record (files, processes,
    /// other systems).
    pub fn changes_state(self) -> bool {
        matches!(self, Self::RunCommand | Self::WriteFile | Self::HttpRequest)
    }

    /// Reaches outside the sandbox's network namespace.
    pub fn is_outbound(self) -> bool {
        matches!(self, Self::HttpRequest | Self::RunCommand)
    }
}

/// One typed action. `RunCommand` is the only kind that starts a process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
pub enum Action {
    RunCommand {
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_s: Option<u64>,
    },
    ReadFile {
        path: String,
    },
    WriteFile {
        path: String,
        /// Kept out of the payload; its SHA-256 is in it.
        #[serde(skip)]
        content: String,
        content_sha256: String,
        content_bytes: u64,
    },
    ListFiles {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    HttpRequest {
        method: String,
        url: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        #[serde(skip)]
        body: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body_sha256: Option<String>,
    },
    RequestApproval {
        reason: String,
    },
    WriteOutput {
        name: String,
        value: Value,
    },
    Finish {
        #[serde(default)]
        outputs: serde_json::Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
}

/// Why a tool call did not become an action; the message goes back to the
/// model as an error result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("tool {0} is not enabled for this agent")]
    NotEnabled(&'static str),
    #[error("the arguments are {0} bytes; at most {MAX_ARGUMENT_BYTES} are accepted")]
    TooLarge(usize),
    #[error("the arguments are not valid JSON: {0}")]
    NotJson(String),
    #[error("invalid arguments for {tool}: {message}")]
    Invalid { tool: &'static str, message: String },
}

fn invalid(tool: ActionKind, message: impl Into<String>) -> ActionError {
    ActionError::Invalid {
        tool: tool.name(),
        message: message.into(),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A relative path inside the work directory: no absolute path, no `..`,
/// no NUL or control character, bounded. (The file layer checks again when
/// it opens, without following links.)
fn relative_path(kind: ActionKind, field: &str, p: &str) -> Result<String, ActionError> {
    if p.is_empty() || p.chars().count() > MAX_PATH_CHARS {
        return Err(invalid(
            kind,
            format!("{field} must be 1 to {MAX_PATH_CHARS} characters"),
        ));
    }
    if p.starts_with('/') || p.chars().any(char::is_control) || p.contains('\\') {
        return Err(invalid(
            kind,
            format!("{field} must be a relative path inside the work directory"),
        ));
    }
    if p.split('/').any(|seg| seg == "..") {
        return Err(invalid(kind, format!("{field} may not contain `..`")));
    }
    Ok(p.trim_start_matches("./").to_string())
}

/// Header names the proxy adds or that carry credentials: never set by the
/// agent (a channel adds its credential on the trusted side).
const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
    "connection",
    "transfer-encoding",
    "content-length",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCommandArgs {
    argv: Value,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    timeout_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionalPathArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteFileArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpArgs {
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonArgs {
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputArgs {
    name: String,
    value: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishArgs {
    #[serde(default)]
    outputs: serde_json::Map<String, Value>,
    #[serde(default)]
    summary: Option<String>,
}

fn args<T: serde::de::DeserializeOwned>(kind: ActionKind, v: Value) -> Result<T, ActionError> {
    // `null` and a missing argument object mean "no arguments".
    let v = if v.is_null() { json!({}) } else { v };
    serde_json::from_value(v).map_err(|e| invalid(kind, e.to_string()))
}

impl Action {
    /// Parses a tool call (`name`, raw JSON argument text) into an action,
    /// if `enabled` contains its kind.
    pub fn parse(
        name: &str,
        arguments: &str,
        enabled: &dyn Fn(ActionKind) -> bool,
    ) -> Result<Action, ActionError> {
        let kind = ActionKind::parse(name)
            .ok_or_else(|| ActionError::UnknownTool(name.chars().take(64).collect()))?;
        if !enabled(kind) {
            return Err(ActionError::NotEnabled(kind.name()));
        }
        if arguments.len() > MAX_ARGUMENT_BYTES {
            return Err(ActionError::TooLarge(arguments.len()));
        }
        let v: Value = if arguments.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(arguments).map_err(|e| ActionError::NotJson(e.to_string()))?
        };
        Self::from_value(kind, v)
    }

    fn from_value(kind: ActionKind, v: Value) -> Result<Action, ActionError> {
        Ok(match kind {
            ActionKind::RunCommand => {
                let a: RunCommandArgs = args(kind, v)?;
                let argv = match a.argv {
                    Value::Array(items) => items
                        .into_iter()
                        .map(|i| match i {
                            Value::String(s) => Ok(s),
                            other => Err(invalid(
                                kind,
                                format!("argv items must be strings, not {other}"),
                            )),
                        })
                        .collect::<Result<Vec<String>, _>>()?,
                    Value::String(_) => {
                        return Err(invalid(
                            kind,
                            "argv must be an array of strings, not a shell string (use [\"sh\", \"-c\", \"...\"] if you need a shell)",
                        ));
                    }
                    _ => return Err(invalid(kind, "argv must be an array of strings")),
                };
                if argv.is_empty() || argv.len() > MAX_ARGV {
                    return Err(invalid(
                        kind,
                        format!("argv must have 1 to {MAX_ARGV} items"),
                    ));
                }
                if argv
                    .iter()
                    .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0'))
                {
                    return Err(invalid(
                        kind,
                        format!("each argument is at most {MAX_ARG_BYTES} bytes, without NUL"),
                    ));
                }
                if argv[0].is_empty() {
                    return Err(invalid(kind, "argv[0] is empty"));
                }
                let cwd = a.cwd.map(|c| relative_path(kind, "cwd", &c)).transpose()?;
                if a.timeout_s == Some(0) {
                    return Err(invalid(kind, "timeout_s must be at least 1"));
                }
                Action::RunCommand {
                    argv,
                    cwd,
                    timeout_s: a.timeout_s,
                }
            }
            ActionKind::ReadFile => {
                let a: PathArgs = args(kind, v)?;
                Action::ReadFile {
                    path: relative_path(kind, "path", &a.path)?,
                }
            }
            ActionKind::WriteFile => {
                let a: WriteFileArgs = args(kind, v)?;
                if a.content.len() > MAX_CONTENT_BYTES {
                    return Err(invalid(
                        kind,
                        format!("content is at most {MAX_CONTENT_BYTES} bytes"),
                    ));
                }
                Action::WriteFile {
                    path: relative_path(kind, "path", &a.path)?,
                    content_sha256: sha256_hex(a.content.as_bytes()),
                    content_bytes: a.content.len() as u64,
                    content: a.content,
                }
            }
            ActionKind::ListFiles => {
                let a: OptionalPathArgs = args(kind, v)?;
                Action::ListFiles {
                    path: a
                        .path
                        .filter(|p| !p.is_empty() && p != ".")
                        .map(|p| relative_path(kind, "path", &p))
                        .transpose()?,
                }
            }
            ActionKind::HttpRequest => {
                let a: HttpArgs = args(kind, v)?;
                let method = a.method.to_ascii_uppercase();
                if !["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
                    return Err(invalid(
                        kind,
                        format!("method {:?} is not allowed", a.method),
                    ));
                }
                if a.url.chars().count() > MAX_PATH_CHARS
                    || !(a.url.starts_with("https://") || a.url.starts_with("http://"))
                    || a.url.chars().any(|c| c.is_control() || c.is_whitespace())
                {
                    return Err(invalid(
                        kind,
                        "url must be an http(s) URL without spaces, at most 1024 characters",
                    ));
                }
                if a.headers.len() > MAX_HEADERS {
                    return Err(invalid(kind, format!("at most {MAX_HEADERS} headers")));
                }
                let mut headers = BTreeMap::new();
                for (k, v) in a.headers {
                    let lk = k.to_ascii_lowercase();
                    if FORBIDDEN_HEADERS.contains(&lk.as_str()) || lk.starts_with("proxy-") {
                        return Err(invalid(
                            kind,
                            format!("header {k:?} may not be set by the agent"),
                        ));
                    }
                    if !lk.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        || v.chars().any(|c| c.is_control())
                        || v.len() > MAX_ARG_BYTES
                    {
                        return Err(invalid(kind, format!("header {k:?} is malformed")));
                    }
                    headers.insert(lk, v);
                }
                if a.body.as_ref().is_some_and(|b| b.len() > MAX_CONTENT_BYTES) {
                    return Err(invalid(
                        kind,
                        format!("body is at most {MAX_CONTENT_BYTES} bytes"),
                    ));
                }
                Action::HttpRequest {
                    method,
                    url: a.url,
                    headers,
                    body_sha256: a.body.as_ref().map(|b| sha256_hex(b.as_bytes())),
                    body: a.body,
                }
            }
            ActionKind::RequestApproval => {
                let a: ReasonArgs = args(kind, v)?;
                if a.reason.trim().is_empty() || a.reason.chars().count() > 4000 {
                    return Err(invalid(kind, "reason must be 1 to 4000 characters"));
                }
                Action::RequestApproval { reason: a.reason }
            }
            ActionKind::WriteOutput => {
                let a: OutputArgs = args(kind, v)?;
                if a.name.is_empty() || a.name.len() > 64 {
                    return Err(invalid(kind, "name must be 1 to 64 characters"));
                }
                Action::WriteOutput {
                    name: a.name,
                    value: a.value,
                }
            }
            ActionKind::Finish => {
                let a: FinishArgs = args(kind, v)?;
                Action::Finish {
                    outputs: a.outputs,
                    summary: a.summary,
                }
            }
        })
    }

    pub fn kind(&self) -> ActionKind {
        match self {
            Self::RunCommand { .. } => ActionKind::RunCommand,
            Self::ReadFile { .. } => ActionKind::ReadFile,
            Self::WriteFile { .. } => ActionKind::WriteFile,
            Self::ListFiles { .. } => ActionKind::ListFiles,
            Self::HttpRequest { .. } => ActionKind::HttpRequest,
            Self::RequestApproval { .. } => ActionKind::RequestApproval,
            Self::WriteOutput { .. } => ActionKind::WriteOutput,
            Self::Finish { .. } => ActionKind::Finish,
        }
    }

    /// Whether this action changes state (a `GET`/`HEAD` request does not).
    pub fn changes_state(&self) -> bool {
        match self {
            Self::HttpRequest { method, .. } => !matches!(method.as_str(), "GET" | "HEAD"),
            other => other.kind().changes_state(),
        }
    }

    /// What an approval binds to: the action as data (large contents by
    /// their SHA-256), to be canonicalised (RFC 8785) and hashed with the
    /// run's context by the pipeline.
    pub fn payload(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The SHA-256 (hex) of the RFC 8785 canonical form of `v`.
pub fn payload_hash(v: &Value) -> Result<String, airlock_audit::JcsError> {
    Ok(sha256_hex(&airlock_audit::canonicalize(v)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn all(_: ActionKind) -> bool {
        true
    }

    fn parse(name: &str, args: &str) -> Result<Action, ActionError> {
        Action::parse(name, args, &all)
    }

    #[test]
    fn agt_3_each_tool_parses_its_arguments() {
        assert_eq!(
            parse("run_command", r#"{"argv": ["ls", "-l"], "cwd": "src"}"#).unwrap(),
            Action::RunCommand {
                argv: vec!["ls".into(), "-l".into()],
                cwd: Some("src".into()),
                timeout_s: None
            }
        );
        assert!(matches!(
            parse("read_file", r#"{"path": "a.txt"}"#),
            Ok(Action::ReadFile { .. })
        ));
        assert!(matches!(
            parse("list_files", ""),
            Ok(Action::ListFiles { path: None })
        ));
        let w = parse("write_file", r#"{"path": "b.txt", "content": "hi"}"#).unwrap();
        let Action::WriteFile {
            content_sha256,
            content_bytes,
            ..
        } = &w
        else {
            panic!("{w:?}")
        };
        assert_eq!(*content_bytes, 2);
        assert_eq!(content_sha256.len(), 64);
        let h = parse(
            "http_request",
            r#"{"method": "get", "url": "https://example.com/x"}"#,
        )
        .unwrap();
        assert!(!h.changes_state(), "GET changes nothing");
        let p = parse(
            "http_request",
            r#"{"method": "POST", "url": "https://example.com/x", "body": "a"}"#,
        )
        .unwrap();
        assert!(p.changes_state());
        assert!(matches!(
            parse("finish", r#"{"outputs": {"a": 1}}"#),
            Ok(Action::Finish { .. })
        ));
    }

    #[test]
    fn agt_4_bad_arguments_are_refused_with_a_message_never_executed() {
        let cases: &[(&str, &str, &str)] = &[
            ("delete_everything", "{}", "unknown tool"),
            ("run_command", "not json", "not valid JSON"),
            (
                "run_command",
                r#"{"argv": "rm -rf /"}"#,
                "not a shell string",
            ),
            ("run_command", r#"{"argv": []}"#, "1 to"),
            ("run_command", r#"{"argv": [1, 2]}"#, "must be strings"),
            (
                "run_command",
                r#"{"argv": ["ls"], "sudo": true}"#,
                "unknown field",
            ),
            (
                "run_command",
                r#"{"argv": ["ls"], "cwd": "/etc"}"#,
                "relative path",
            ),
            (
                "run_command",
                r#"{"argv": ["ls"], "cwd": "a/../.."}"#,
                "`..`",
            ),
            ("read_file", r#"{"path": "../../etc/shadow"}"#, "`..`"),
            ("read_file", r#"{"path": 7}"#, "invalid type"),
            (
                "http_request",
                r#"{"method": "TRACE", "url": "https://x"}"#,
                "not allowed",
            ),
            (
                "http_request",
                r#"{"method": "GET", "url": "file:///etc/passwd"}"#,
                "http(s) URL",
            ),
            (
                "http_request",
                r#"{"method": "GET", "url": "https://x", "headers": {"Authorization": "Bearer k"}}"#,
                "may not be set",
            ),
            ("request_approval", r#"{"reason": ""}"#, "1 to 4000"),
        ];
        for (tool, args, want) in cases {
            let e = parse(tool, args).unwrap_err().to_string();
            assert!(e.contains(want), "{tool} {args}: {e}");
        }
        // 10 MiB of arguments: refused before parsing.
        let big = format!(r#"{{"argv": ["{}"]}}"#, "a".repeat(10 << 20));
        assert!(matches!(
            parse("run_command", &big),
            Err(ActionError::TooLarge(_))
        ));
        // A tool that exists but is not enabled.
        let none = |_: ActionKind| false;
        assert_eq!(
            Action::parse("read_file", r#"{"path": "a"}"#, &none),
            Err(ActionError::NotEnabled("read_file"))
        );
        // Positive control: the same calls, well-formed, parse.
        assert!(parse("run_command", r#"{"argv": ["ls"]}"#).is_ok());
        assert!(parse("read_file", r#"{"path": "a"}"#).is_ok());
    }

    #[test]
    fn agt_5_payload_hash_ignores_key_order_and_binds_every_field() {
        let a = parse("run_command", r#"{"argv": ["git", "push"], "cwd": "repo"}"#).unwrap();
        let b = parse("run_command", r#"{"cwd": "repo", "argv": ["git", "push"]}"#).unwrap();
        let c = parse(
            "run_command",
            r#"{"argv": ["git", "push", "-f"], "cwd": "repo"}"#,
        )
        .unwrap();
        let h = |a: &Action| payload_hash(&a.payload()).unwrap();
        assert_eq!(h(&a), h(&b), "key order only: same payload");
        assert_ne!(h(&a), h(&c), "one argument more: another payload");
        // A write is bound to its content through the content's digest.
        let w1 = parse("write_file", r#"{"path": "f", "content": "one"}"#).unwrap();
        let w2 = parse("write_file", r#"{"path": "f", "content": "two"}"#).unwrap();
        assert_ne!(h(&w1), h(&w2));
        assert!(
            !w1.payload().to_string().contains("one"),
            "content is not in the payload"
        );
    }
}
