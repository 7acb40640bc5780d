//! The one error type of the file layer, with a stable reason code per variant.
//!
//! Paths inside errors are relative to the folder being read (or to the store root), never
//! absolute host paths, and they are escaped: a workload chooses its file names, and those names
//! must not be able to inject control characters into logs or run records.

/// Why reading an untrusted folder (or writing the store) failed.
///
/// The first violation aborts the whole operation; the caller records [`FileError::reason`] on
/// the run.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A symbolic link where a file or directory was expected.
    #[error("{path}: symbolic links are not allowed")]
    Symlink { path: String },
    /// A device, FIFO, socket, mount point or other non-regular entry.
    #[error("{path}: not a regular file or directory ({kind})")]
    NotRegular { path: String, kind: &'static str },
    /// A regular file with more than one hard link (it may be a link to a host file).
    #[error("{path}: file has more than one hard link")]
    HardLink { path: String },
    /// More entries (files and directories) than the budget allows.
    #[error("more than {limit} entries")]
    TooManyFiles { limit: usize },
    /// One file is larger than the per-file byte budget.
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: String, limit: u64 },
    /// All files together are larger than the total byte budget.
    #[error("outputs larger than {limit} bytes in total")]
    TotalTooLarge { limit: u64 },
    /// An entry nested deeper than the depth budget.
    #[error("{path}: nested too deeply")]
    TooDeep { path: String },
    /// A name that is not valid UTF-8, is empty, `.`, `..`, longer than 255 bytes, or contains
    /// `/` or NUL.
    #[error("{path}: invalid file name")]
    BadName { path: String },
    /// Any other I/O failure (including an entry that changed while it was being opened).
    #[error("{path}: {error}")]
    Io { path: String, error: String },
}

impl FileError {
    /// A stable, machine-readable reason code for run records and the API.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Symlink { .. } => "output_symlink",
            Self::NotRegular { .. } => "output_not_regular",
            Self::HardLink { .. } => "output_hard_link",
            Self::TooManyFiles { .. } => "output_too_many_files",
            Self::TooLarge { .. } => "output_too_large",
            Self::TotalTooLarge { .. } => "output_total_too_large",
            Self::TooDeep { .. } => "output_too_deep",
            Self::BadName { .. } => "output_bad_name",
            Self::Io { .. } => "output_io",
        }
    }

    pub(crate) fn io(path: &str, error: impl std::fmt::Display) -> Self {
        Self::Io {
            path: path.to_owned(),
            error: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_4_every_variant_has_a_distinct_stable_reason() {
        let p = || "x".to_owned();
        let all = [
            (FileError::Symlink { path: p() }, "output_symlink"),
            (
                FileError::NotRegular {
                    path: p(),
                    kind: "fifo",
                },
                "output_not_regular",
            ),
            (FileError::HardLink { path: p() }, "output_hard_link"),
            (
                FileError::TooManyFiles { limit: 1 },
                "output_too_many_files",
            ),
            (
                FileError::TooLarge {
                    path: p(),
                    limit: 1,
                },
                "output_too_large",
            ),
            (
                FileError::TotalTooLarge { limit: 1 },
                "output_total_too_large",
            ),
            (FileError::TooDeep { path: p() }, "output_too_deep"),
            (FileError::BadName { path: p() }, "output_bad_name"),
            (FileError::io("x", "boom"), "output_io"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (err, reason) in &all {
            assert_eq!(err.reason(), *reason, "{err:?}");
            assert!(seen.insert(*reason), "duplicate reason {reason}");
            let msg = err.to_string();
            assert!(!msg.ends_with('.'), "{msg}");
        }
    }
}
