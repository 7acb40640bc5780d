//! The service layer: the one door. Everything a front end (HTTP API, CLI,
//! MCP, web UI) may do is a method of [`Service`] that takes a
//! transport-free [`Caller`] and answers a type of [`airlock_protocol`] or
//! its one [`Error`]. Authentication, permissions, identity rules, quotas,
//! idempotency, webhook delivery, uploads, audit verification and run
//! events all live here, once; the store is reachable from here only.
//!
//! Below the door, the executor claims queued runs and drives each one
//! through the sandbox; the scheduler fires cron triggers; the reaper
//! settles runs whose executor disappeared, turns actions dispatched by a
//! dead executor into `outcome_unknown` and expires approval requests
//! nobody decided. The action journal ([`journal`]) is the durable control
//! plane of the agent harness; approvals and the emergency stop gate what
//! it and the executor may start.
//!
//! Must not: contain SQL (the store does), know HTTP (no status codes,
//! headers or cookies), print, or spawn processes other than through the
//! broker.

mod agent;
mod approvals;
mod audit;
mod auth;
mod blobs;
pub mod caller;
mod checkpoints;
mod config;
mod emergency;
mod error;
mod events;
mod executor;
mod export;
mod identity;
pub mod journal;
mod keyfile;
mod maintenance;
pub mod metrics;
mod model_profiles;
mod recover;
mod retention;
mod runs;
pub mod schedule_eval;
mod scheduler;
mod secret_ops;
pub(crate) mod secrets;
mod service;
mod uploads;
pub mod webhook_verify;
mod webhooks;
mod workers;

pub use airlock_protocol::{Error, ErrorCode};
pub use airlock_store::DEFAULT_WORKSPACE;
pub use airlock_store::RunErrorCode;
pub use airlock_store::{ActionEnd, CANCEL_BY_EMERGENCY_STOP};
pub use airlock_store::{now_ms, rfc3339};
pub use audit::{AuditLog, SYSTEM_AUDIT, verify_lines};
pub use auth::Authenticated;
pub use blobs::{BlobError, BlobStore, S3Location};
pub use caller::{Actor, Caller, ClientInfo, Credential, OPERATOR, Operation, Principal, Via};
pub use checkpoints::{CHECKPOINTS_DIR, Checkpoints, SIGNING_KEY_FILE};
pub use config::{Config, DEFAULT_DRAIN_GRACE, IdentityConfig, Quotas};
pub use error::Result;
pub use events::{EventFollower, Followed, MAX_LOG_BYTES};
pub use export::{ExportOutcome, ExportedFile};
pub use identity::*;
pub use journal::{Decided, DispatchTicket, Verdict};
pub use maintenance::{
    DEFAULT_RECOVERY_WINDOW, EntryState, Finding, GcEntry, GcManifest, GcOutcome, Level,
    Maintenance, Severity, TRASH_DIR, ValidateReport,
};
pub use recover::{QUARANTINE_DIR, Quarantined, RecoverOutcome};
pub use runs::{RunOptions, RunStarted};
pub use scheduler::*;
pub use secret_ops::Rewrapped;
pub use service::{
    DatabaseReport, Service, Workers, inspect_database, migrate_database, postgres_runtime_grants,
};
pub use uploads::*;
pub use webhooks::*;
pub use workers::MAX_MANIFEST_CHARS;

/// A fresh request id (`req_…`) for a front end's logs and error bodies.
pub fn new_request_id() -> String {
    airlock_store::random_id("req")
}
