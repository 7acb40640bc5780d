//! Checking run inputs against `[inputs]` and run results against
//! `[outputs]` (RUN-3).
//!
//! Inputs come from a caller (API, CLI, UI, MCP, a schedule, a webhook) and
//! are untrusted: every problem is an error, never a panic, and messages
//! never echo an unbounded caller-supplied value. Outputs come from the
//! sandbox and are just as untrusted; any mismatch is a `schema_violation`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::manifest::{FieldType, InputSpec, Manifest};
use crate::names::FieldName;

/// Largest run input, as compact JSON, in bytes.
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// The file scalar outputs are read from, in `/airlock/output/`.
pub const RESULT_FILE: &str = "result.json";

/// Why a run input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("input must be a JSON object, got {got}")]
    NotAnObject { got: &'static str },
    #[error("input is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("inputs.{name}: unknown input (declared: {declared})")]
    Unknown { name: String, declared: String },
    #[error("inputs.{name}: missing required input")]
    Missing { name: String },
    #[error("inputs.{name}: {message}")]
    Invalid { name: String, message: String },
}

impl InputError {
    /// Stable error code: always `invalid_input`.
    pub fn code(&self) -> &'static str {
        "invalid_input"
    }
}

/// The keys a file input's value may hold: `upload` (the upload's id,
/// required), and — once the service has resolved it — `name`, `size` and
/// `sha256`.
pub const FILE_VALUE_KEYS: [&str; 4] = ["upload", "name", "size", "sha256"];

/// The upload id a file input's value names, if the value has the shape
/// `{"upload": "<id>"}` (possibly with the resolved keys too).
pub fn file_upload_id(v: &Value) -> Option<&str> {
    v.as_object()?.get("upload")?.as_str()
}

/// Checks the shape of a file input's value: `{"upload": "<upload id>"}`,
/// optionally with `name` (a string), `size` (a non-negative integer) and
/// `sha256` (64 lowercase hex digits). Whether the upload exists, belongs to
/// the caller and fits `max_bytes` is the service's to check.
fn check_file_value(v: &Value) -> Result<(), String> {
    const SHAPE: &str = "a file input is given as {\"upload\": \"<upload id>\"}";
    let Value::Object(m) = v else {
        return Err(format!("{SHAPE}, got {}", json_type(v)));
    };
    if let Some(k) = m.keys().find(|k| !FILE_VALUE_KEYS.contains(&k.as_str())) {
        return Err(format!("{SHAPE}; unknown key {:?}", shown(k)));
    }
    let Some(id) = m.get("upload") else {
        return Err(format!("{SHAPE}; the \"upload\" key is missing"));
    };
    let Value::String(id) = id else {
        return Err(format!(
            "{SHAPE}; \"upload\" must be a string, got {}",
            json_type(id)
        ));
    };
    let plausible = id.len() <= 64
        && id.starts_with("upl_")
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !plausible {
        return Err(format!("{:?} is not an upload id", shown(id)));
    }
    if m.get("name").is_some_and(|n| !n.is_string()) {
        return Err("\"name\" must be a string".into());
    }
    if m.get("size").is_some_and(|n| n.as_u64().is_none()) {
        return Err("\"size\" must be a non-negative integer".into());
    }
    if m.get("sha256").is_some_and(|d| {
        !d.as_str().is_some_and(|d| {
            d.len() == 64
                && d.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    }) {
        return Err("\"sha256\" must be 64 lowercase hex digits".into());
    }
    Ok(())
}

/// Why a run's outputs do not match the declared schema. Every variant has
/// the code `schema_violation` and fails the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("result.json must contain a JSON object, got {got}")]
    NotAnObject { got: &'static str },
    #[error("outputs.{name}: result.json has an undeclared output")]
    Undeclared { name: String },
    #[error("outputs.{name}: missing required output")]
    Missing { name: String },
    #[error("outputs.{name}: missing required output file {path:?}")]
    FileMissing { name: String, path: String },
    #[error("outputs.{name}: {message}")]
    Invalid { name: String, message: String },
}

impl OutputError {
    /// Stable error code: always `schema_violation` (RUN-3).
    pub fn code(&self) -> &'static str {
        "schema_violation"
    }

    /// The output concerned, if the error is about one.
    pub fn output(&self) -> Option<&str> {
        match self {
            Self::NotAnObject { .. } => None,
            Self::Undeclared { name }
            | Self::Missing { name }
            | Self::FileMissing { name, .. }
            | Self::Invalid { name, .. } => Some(name),
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A caller-supplied name, shortened for messages.
fn shown(name: &str) -> String {
    let mut s: String = name.chars().take(64).collect();
    if s.len() < name.len() {
        s.push('…');
    }
    s
}

/// Checks one value against a (non-file) type: kind, enum, size caps. The
/// message names no field; callers add it.
pub(crate) fn check_value(ty: &FieldType, v: &Value) -> Result<(), String> {
    match ty {
        FieldType::String {
            choices,
            max_length,
        } => {
            let Value::String(s) = v else {
                return Err(format!("expected a string, got {}", json_type(v)));
            };
            if !choices.is_empty() && !choices.iter().any(|c| c == s) {
                return Err(format!(
                    "{:?} is not one of {}",
                    shown(s),
                    choices
                        .iter()
                        .map(|c| format!("{c:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if let Some(max) = max_length {
                let len = s.chars().count() as u64;
                if len > *max {
                    return Err(format!("longer than {max} characters ({len})"));
                }
            }
            Ok(())
        }
        FieldType::Number {
            choices,
            minimum,
            maximum,
        } => {
            let Some(n) = v.as_f64() else {
                return Err(format!("expected a number, got {}", json_type(v)));
            };
            if let Some(lo) = minimum
                && n < *lo
            {
                return Err(format!("{n} is below the minimum {lo}"));
            }
            if let Some(hi) = maximum
                && n > *hi
            {
                return Err(format!("{n} is above the maximum {hi}"));
            }
            if !choices.is_empty() && !choices.contains(&n) {
                return Err(format!(
                    "{n} is not one of {}",
                    choices
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Ok(())
        }
        FieldType::Boolean => match v {
            Value::Bool(_) => Ok(()),
            _ => Err(format!("expected a boolean, got {}", json_type(v))),
        },
        FieldType::Json { max_bytes } => {
            if let Some(max) = max_bytes {
                let len = serde_json::to_vec(v).map_or(u64::MAX, |b| b.len() as u64);
                if len > *max {
                    return Err(format!("larger than {max} bytes as JSON ({len})"));
                }
            }
            Ok(())
        }
        FieldType::File { .. } => Err("file values cannot be given inline".into()),
    }
}

impl Manifest {
    /// Checks a run input and returns it normalised: a JSON object with
    /// every declared input that was given or has a default. An explicit
    /// `null` counts as "not given".
    pub fn check_input(&self, input: &Value) -> Result<Value, InputError> {
        check_input_map(&self.inputs, input, false).map(Value::Object)
    }

    /// Checks a run's result against the declared outputs. `result` is the
    /// parsed `/airlock/output/result.json` (`Value::Null` when the script
    /// wrote none); `present_files` are the paths, relative to
    /// `/airlock/output/`, of the regular files the run left there.
    /// Undeclared files are allowed (they are kept as plain artifacts);
    /// undeclared keys in `result.json` are not.
    pub fn check_outputs(
        &self,
        result: &Value,
        present_files: &[String],
    ) -> Result<(), OutputError> {
        let empty = Map::new();
        let map = match result {
            Value::Object(m) => m,
            Value::Null => &empty,
            other => {
                return Err(OutputError::NotAnObject {
                    got: json_type(other),
                });
            }
        };
        for (key, value) in map {
            let Some(spec) = self.outputs.iter().find(|(n, _)| n.as_str() == key) else {
                return Err(OutputError::Undeclared { name: shown(key) });
            };
            let spec = spec.1;
            if let Some(path) = &spec.path {
                return Err(OutputError::Invalid {
                    name: key.clone(),
                    message: format!(
                        "is a file output; write it to /airlock/output/{path}, not to result.json"
                    ),
                });
            }
            if value.is_null() {
                continue;
            }
            check_value(&spec.ty, value).map_err(|message| OutputError::Invalid {
                name: key.clone(),
                message,
            })?;
        }
        for (name, spec) in &self.outputs {
            match &spec.path {
                Some(path) => {
                    if spec.required && !present_files.iter().any(|f| f == path.as_str()) {
                        return Err(OutputError::FileMissing {
                            name: name.to_string(),
                            path: path.to_string(),
                        });
                    }
                }
                None => {
                    let given = map.get(name.as_str()).is_some_and(|v| !v.is_null());
                    if spec.required && !given {
                        return Err(OutputError::Missing {
                            name: name.to_string(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// Checks each declared file output that is present against its
    /// `max_bytes`. `files` are the `(path relative to /airlock/output/,
    /// size in bytes)` of the regular files the run left there.
    pub fn check_output_sizes(&self, files: &[(String, u64)]) -> Result<(), OutputError> {
        for (name, spec) in &self.outputs {
            let (
                Some(path),
                FieldType::File {
                    max_bytes: Some(max),
                },
            ) = (&spec.path, &spec.ty)
            else {
                continue;
            };
            if let Some((_, size)) = files.iter().find(|(f, _)| f == path.as_str())
                && size > max
            {
                return Err(OutputError::Invalid {
                    name: name.to_string(),
                    message: format!(
                        "file {:?} is {size} bytes, more than its max_bytes {max}",
                        path.as_str()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A schedule's fixed input: checked like a run input, except that a
/// missing required input is allowed (that fire is skipped and logged,
/// RUN-6).
pub(crate) fn check_schedule_input(
    inputs: &BTreeMap<FieldName, InputSpec>,
    input: &Map<String, Value>,
) -> Result<(), InputError> {
    check_input_map(inputs, &Value::Object(input.clone()), true).map(|_| ())
}

fn check_input_map(
    inputs: &BTreeMap<FieldName, InputSpec>,
    input: &Value,
    allow_missing: bool,
) -> Result<Map<String, Value>, InputError> {
    let Value::Object(given) = input else {
        return Err(InputError::NotAnObject {
            got: json_type(input),
        });
    };
    let size = serde_json::to_vec(input).map_or(usize::MAX, |b| b.len());
    if size > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            limit: MAX_INPUT_BYTES,
        });
    }
    if let Some(unknown) = given
        .keys()
        .find(|k| !inputs.keys().any(|n| n.as_str() == k.as_str()))
    {
        let declared: Vec<&str> = inputs.keys().map(FieldName::as_str).collect();
        return Err(InputError::Unknown {
            name: shown(unknown),
            declared: if declared.is_empty() {
                "none".into()
            } else {
                declared.join(", ")
            },
        });
    }
    let mut out = Map::new();
    for (name, spec) in inputs {
        match given.get(name.as_str()).filter(|v| !v.is_null()) {
            Some(v) if matches!(spec.ty, FieldType::File { .. }) => {
                check_file_value(v).map_err(|message| InputError::Invalid {
                    name: name.to_string(),
                    message,
                })?;
                out.insert(name.to_string(), v.clone());
            }
            Some(v) => {
                check_value(&spec.ty, v).map_err(|message| InputError::Invalid {
                    name: name.to_string(),
                    message,
                })?;
                out.insert(name.to_string(), v.clone());
            }
            None => {
                if let Some(d) = &spec.default {
                    out.insert(name.to_string(), d.clone());
                } else if spec.required && !allow_missing {
                    return Err(InputError::Missing {
                        name: name.to_string(),
                    });
                }
            }
        }
    }
    Ok(out)
}
