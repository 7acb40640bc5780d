//! Worker bundles (RUN-1, RUN-2) as clients see them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A loaded worker and its manifest (the parsed `worker.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Worker {
    pub id: String,
    /// The manifest as JSON: `worker`, `inputs`, `outputs`, `limits`, `egress`, `secrets`,
    /// `triggers`, … (docs/workers.md).
    #[schema(value_type = Object)]
    pub manifest: Value,
}

/// A bundle that failed to load (it is skipped, never half-loaded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoadError {
    /// The bundle's folder name.
    pub path: Option<String>,
    pub error: String,
}

/// `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerList {
    pub workers: Vec<Worker>,
    pub errors: Vec<LoadError>,
}

/// `GET /v1/workers/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerDetail {
    pub worker: Worker,
    /// The declared inputs as a JSON Schema object (what `input` of a run
    /// may hold; file inputs cannot be given inline and are left out).
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

/// Body of `POST /v1/workers/validate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateManifest {
    /// The text of a `worker.toml` (at most 262,144 characters).
    #[schema(max_length = 262144)]
    pub manifest: String,
}

/// One problem of a manifest, by field path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Validation {
    pub valid: bool,
    pub problems: Vec<Problem>,
}

/// `POST /v1/workers/reload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Reloaded {
    pub loaded: Vec<String>,
    pub errors: Vec<LoadError>,
}
