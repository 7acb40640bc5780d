//! Why a work-directory operation failed, in words a model can be shown.
//!
//! A separate type from [`FileError`] on purpose: every `FileError` is a run's end (the executor
//! maps each one to a run error code), while these are tool results the agent loop hands back to
//! the model so it can correct itself. Messages name only the path relative to the work
//! directory, escaped and cut to a bounded length; never a host path.

use crate::FileError;
use crate::names::NameError;

/// The longest path text repeated in a message, in characters: a model that sends a 10 MiB
/// path must not get 10 MiB back.
pub(crate) const MAX_SHOWN_CHARS: usize = 200;

/// Why [`WorkDir`](super::WorkDir) refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum WorkDirError {
    /// Refused by the file layer's rules: a symbolic link, a FIFO, socket, device or mount
    /// point, a hard-linked file, a path nested too deeply, or an I/O failure.
    #[error(transparent)]
    File(#[from] FileError),
    /// The path is not acceptable ([`validate_work_path`](crate::names::validate_work_path)).
    #[error("{path}: {error}")]
    BadPath { path: String, error: NameError },
    /// Nothing has that name.
    #[error("{path}: no such file or directory")]
    NotFound { path: String },
    /// A file was expected and this is a directory.
    #[error("{path}: is a directory")]
    IsADirectory { path: String },
    /// A directory was expected (a listing, or a parent of the path) and this is a file.
    #[error("{path}: not a directory")]
    NotADirectory { path: String },
    /// A write would take the work directory over its byte or entry budget.
    #[error(
        "over the work directory's budget of {limit} {what}: at least {used} in use, {adding} more needed"
    )]
    OverBudget {
        /// `"bytes"` or `"entries"`.
        what: &'static str,
        used: u64,
        adding: u64,
        limit: u64,
    },
}

impl WorkDirError {
    /// A stable, machine-readable reason for tool results and the action journal.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::File(e) => match e {
                FileError::Symlink { .. } => "symlink",
                FileError::NotRegular { .. } => "not_regular",
                FileError::HardLink { .. } => "hard_link",
                FileError::TooManyFiles { .. } => "too_many_files",
                FileError::TooLarge { .. } => "too_large",
                FileError::TotalTooLarge { .. } => "total_too_large",
                FileError::TooDeep { .. } => "too_deep",
                FileError::BadName { .. } => "bad_path",
                FileError::Io { .. } => "io",
            },
            Self::BadPath { .. } => "bad_path",
            Self::NotFound { .. } => "not_found",
            Self::IsADirectory { .. } => "is_a_directory",
            Self::NotADirectory { .. } => "not_a_directory",
            Self::OverBudget { .. } => "over_budget",
        }
    }
}

/// Untrusted path text for a message: escaped (no control characters) and cut.
pub(crate) fn shown(raw: &str) -> String {
    let escaped = crate::name::escape(raw.as_bytes());
    match escaped.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((at, _)) => format!("{}…", &escaped[..at]),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agt_3_workdir_errors_have_distinct_reasons_and_bounded_paths() {
        let p = || "x".to_owned();
        let all = [
            WorkDirError::from(FileError::Symlink { path: p() }),
            WorkDirError::from(FileError::NotRegular {
                path: p(),
                kind: "fifo",
            }),
            WorkDirError::from(FileError::HardLink { path: p() }),
            WorkDirError::from(FileError::TooDeep { path: p() }),
            WorkDirError::from(FileError::io("x", "boom")),
            WorkDirError::BadPath {
                path: p(),
                error: NameError::DotSegment,
            },
            WorkDirError::NotFound { path: p() },
            WorkDirError::IsADirectory { path: p() },
            WorkDirError::NotADirectory { path: p() },
            WorkDirError::OverBudget {
                what: "bytes",
                used: 1,
                adding: 2,
                limit: 2,
            },
        ];
        let mut seen = std::collections::BTreeSet::new();
        for e in &all {
            assert!(seen.insert(e.reason()), "duplicate {}", e.reason());
            assert!(!e.to_string().ends_with('.'), "{e}");
        }
        let long = shown(&"\n".repeat(10_000));
        assert_eq!(long.chars().count(), MAX_SHOWN_CHARS + 1);
        assert!(long.starts_with("\\n\\n") && long.ends_with('…'));
    }
}
