//! Why a bundle or manifest was refused.
//!
//! Every problem names the manifest field it is about (`inputs.count.type`,
//! `triggers[1].cron`), so `airlock worker validate` can print one line per
//! problem and an author can find the line to fix. TOML and serde errors do
//! not expose the key path they were raised at, only a byte span; we map the
//! span back to a key path by walking the spanned document.

use std::fmt;
use std::path::PathBuf;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One thing wrong with a manifest, at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `inputs.count.type` or `triggers[0].cron`;
    /// empty when the problem is about the document as a whole.
    pub field: String,
    pub message: String,
}

impl Problem {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Why a bundle (or a manifest text) was refused. A refused bundle is never
/// half-loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The bundle folder or its manifest could not be read.
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    /// The manifest is not TOML.
    #[error("worker.toml is not valid TOML (line {line}, column {column}): {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// The manifest is TOML but breaks the schema; one entry per problem
    /// found (at least one).
    #[error("{}", join(problems))]
    Invalid { problems: Vec<Problem> },
    /// Two bundles in one workers directory declare the same id.
    #[error("worker.id: {id:?} is already used by {}", first.display())]
    DuplicateId { id: String, first: PathBuf },
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ManifestError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Read { .. } => "bundle_unreadable",
            Self::Syntax { .. } => "manifest_syntax",
            Self::Invalid { .. } => "manifest_invalid",
            Self::DuplicateId { .. } => "duplicate_worker_id",
        }
    }

    /// The problems, one per line when printed by a front end.
    pub fn problems(&self) -> Vec<Problem> {
        match self {
            Self::Invalid { problems } => problems.clone(),
            Self::DuplicateId { .. } => vec![Problem::new("worker.id", self.to_string())],
            other => vec![Problem::new("", other.to_string())],
        }
    }

    pub(crate) fn one(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            problems: vec![Problem::new(field, message)],
        }
    }
}

/// Line and column (1-based, columns in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

/// A syntax error from the TOML parser.
pub(crate) fn syntax_error(text: &str, e: &toml::de::Error) -> ManifestError {
    let (line, column) = e
        .span()
        .map_or((1, 1), |span| line_column(text, span.start));
    ManifestError::Syntax {
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// A schema error from serde (unknown field, wrong type), with the key path
/// recovered from its span.
pub(crate) fn schema_error(doc: &Spanned<DeTable<'_>>, e: &toml::de::Error) -> Problem {
    let mut path = Vec::new();
    if let Some(span) = e.span() {
        find_path(doc.get_ref(), &span, &mut path);
    }
    let mut message = e.message().trim().to_string();
    // serde says "unknown field `x`, expected one of `a`, `b`"; the path
    // already ends at `x`, so say only what is allowed.
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        if path.last().map(String::as_str) != Some(name) {
            path.push(name.to_string());
        }
        let allowed = tail
            .trim_start_matches(',')
            .trim()
            .strip_prefix("expected one of ")
            .or_else(|| {
                tail.trim_start_matches(',')
                    .trim()
                    .strip_prefix("expected ")
            })
            .map(|list| list.replace('`', ""));
        message = match allowed {
            Some(list) => format!("unknown field (expected one of {list})"),
            None => "unknown field".into(),
        };
    }
    Problem::new(render_path(&path), plain_types(&message))
}

/// serde names Rust types ("expected i64", "expected struct RawInput");
/// authors write TOML.
fn plain_types(message: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        ("expected i64", "expected an integer"),
        ("expected f64", "expected a number"),
        ("expected a map", "expected a table"),
        ("expected a sequence", "expected an array"),
    ];
    let mut out = message.to_string();
    for (from, to) in WORDS {
        out = out.replace(from, to);
    }
    if let Some(at) = out.find("expected struct ") {
        out.truncate(at);
        out.push_str("expected a table");
    }
    out
}

fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if seg.starts_with('[') {
            out.push_str(seg);
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

fn contains(outer: &std::ops::Range<usize>, inner: &std::ops::Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// Descends to the deepest key whose key or value span covers `span`.
/// Table spans in the spanned document are not always the whole table
/// (a `[section]` header and its keys are not one range), so every child is
/// searched, not only those whose span covers the error.
fn find_path(table: &DeTable<'_>, span: &std::ops::Range<usize>, path: &mut Vec<String>) -> bool {
    for (key, value) in table.iter() {
        let key_hit = contains(&key.span(), span);
        path.push(key.get_ref().to_string());
        if descend(value, span, path) {
            return true;
        }
        if key_hit || contains(&value.span(), span) {
            return true;
        }
        path.pop();
    }
    false
}

fn descend(
    value: &Spanned<DeValue<'_>>,
    span: &std::ops::Range<usize>,
    path: &mut Vec<String>,
) -> bool {
    match value.get_ref() {
        DeValue::Table(t) => find_path(t, span, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(format!("[{i}]"));
                if descend(item, span, path) || contains(&item.span(), span) {
                    return true;
                }
                path.pop();
            }
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("", 5), (1, 1));
    }
}
