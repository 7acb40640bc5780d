//! Worker bundles as callers see them (RUN-1, RUN-2): only the workspace
//! that owns the workers folder sees its bundles.

use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_protocol::workers::{
    LoadError, Problem, Reloaded, Validation, Worker, WorkerDetail, WorkerList,
};

use crate::caller::Caller;
use crate::error::Result;
use crate::service::Service;

/// The largest manifest text [`Service::validate_manifest`] reads, in
/// characters (as the document's `maxLength` counts).
pub const MAX_MANIFEST_CHARS: usize = 256 * 1024;

fn load_errors(errors: Vec<(std::path::PathBuf, String)>) -> Vec<LoadError> {
    errors
        .into_iter()
        .map(|(p, error)| LoadError {
            path: p.file_name().map(|n| n.to_string_lossy().into_owned()),
            error,
        })
        .collect()
}

fn view(b: &airlock_worker::Bundle) -> Worker {
    Worker {
        id: b.id.as_str().to_string(),
        manifest: serde_json::to_value(&b.manifest).unwrap_or(serde_json::Value::Null),
    }
}

impl Service {
    fn owns_workers(&self, c: &Caller) -> bool {
        c.workspace == self.cfg.workers_workspace
    }

    /// The workers the caller's workspace may see and run, and the bundles
    /// that failed to load.
    pub fn list_workers(&self, c: &Caller) -> Result<WorkerList> {
        c.require(Permission::WorkersRead)?;
        if !self.owns_workers(c) {
            return Ok(WorkerList {
                workers: Vec::new(),
                errors: Vec::new(),
            });
        }
        let workers = self
            .workers
            .read()
            .map(|w| w.bundles.values().map(view).collect())
            .unwrap_or_default();
        Ok(WorkerList {
            workers,
            errors: load_errors(self.worker_errors()),
        })
    }

    /// One worker; another workspace's is `not_found`.
    pub fn get_worker(&self, c: &Caller, id: &str) -> Result<WorkerDetail> {
        c.require(Permission::WorkersRead)?;
        let b = self
            .worker_in(&c.workspace, id)
            .ok_or_else(Error::not_found)?;
        Ok(WorkerDetail {
            worker: view(&b),
            input_schema: b.manifest.input_schema(),
        })
    }

    /// Checks a `worker.toml` without loading it: every problem, by field.
    pub fn validate_manifest(&self, c: &Caller, manifest: &str) -> Result<Validation> {
        c.require(Permission::WorkersRead)?;
        if manifest.chars().count() > MAX_MANIFEST_CHARS {
            return Err(Error::invalid_body(
                "a manifest is at most 262144 characters",
            ));
        }
        Ok(match airlock_worker::Manifest::from_toml(manifest) {
            Ok(_) => Validation {
                valid: true,
                problems: Vec::new(),
            },
            Err(e) => Validation {
                valid: false,
                problems: e
                    .problems()
                    .into_iter()
                    .map(|p| Problem {
                        field: p.field,
                        message: p.message,
                    })
                    .collect(),
            },
        })
    }

    /// Reloads the workers folder (its owning workspace only).
    pub fn reload_workers(&self, c: &Caller) -> Result<Reloaded> {
        c.require(Permission::WorkersWrite)?;
        if !self.owns_workers(c) {
            return Err(Error::not_found());
        }
        let (loaded, errors) = self.load_workers();
        Ok(Reloaded {
            loaded,
            errors: load_errors(errors),
        })
    }
}
