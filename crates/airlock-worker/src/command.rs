//! A script worker's argv inside the sandbox (RUN-1).
//!
//! The argv is an array, never a shell string (SBX-1). The interpreter is a
//! bare program name: only the broker's resolver searches `PATH` (SBX-2).

use std::path::Path;

use crate::manifest::{Manifest, WorkerKind};

/// Why no command can be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("an agent worker has no command of its own: its harness runs each tool call")]
    AgentWorker,
    #[error(
        "the bundle directory in the sandbox must be an absolute UTF-8 path without . or .. components"
    )]
    BadBundleDir,
}

impl CommandError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AgentWorker => "agent_worker",
            Self::BadBundleDir => "invalid_bundle_dir",
        }
    }
}

impl Manifest {
    /// The argv that runs this worker, given where the sandbox mounts the
    /// bundle (read-only), e.g. `["python3", "/airlock/worker/main.py"]`, or
    /// `["/airlock/worker/bin/tool"]` for a `native` entry.
    pub fn command(&self, bundle_dir_in_sandbox: &Path) -> Result<Vec<String>, CommandError> {
        let WorkerKind::Script { runtime } = &self.kind else {
            return Err(CommandError::AgentWorker);
        };
        // Checked on the string: `Path::components` silently drops inner
        // `.` components, and the string is what ends up in the argv.
        let dir = bundle_dir_in_sandbox
            .to_str()
            .filter(|d| d.starts_with('/') && !d.split('/').any(|c| c == "." || c == ".."))
            .ok_or(CommandError::BadBundleDir)?;
        let entry = format!("{}/{}", dir.trim_end_matches('/'), self.entry.as_str());
        Ok(match runtime.interpreter() {
            Some(program) => vec![program.to_string(), entry],
            None => vec![entry],
        })
    }
}
