//! The store (DUR-1, DUR-3, API-8, AUD-1 … AUD-3): runs and their events,
//! artifacts, idempotency keys, plans, the audit chain, vault records,
//! identity (users, memberships, sessions, API keys, MFA), approvals and
//! their rules, the action journal of agent runs and the emergency stop
//! (AGT-5, AGT-6, DUR-2), behind one type
//! with two backends — embedded SQLite (WAL) and PostgreSQL — and one
//! conformance suite (`tests/conformance/`) that runs against both.
//!
//! Only this crate contains SQL. Every owned row carries a workspace id and
//! every query that reads owned rows filters by it. A state change and its
//! audit event commit in one transaction. Writes by an executor carry its
//! fencing token; a stale token is refused here, in the `WHERE` clause.
//!
//! Portability: queries use `$N` placeholders (PostgreSQL's, which SQLite
//! also accepts), timestamps are Unix milliseconds, JSON is stored as text.
//! Where the backends differ (claiming with `FOR UPDATE SKIP LOCKED`,
//! per-workspace audit serialisation, migrations) the code says so.

mod actions;
mod agents;
mod approvals;
mod audit;
mod deletion;
mod emergency;
mod execution;
mod identity;
mod ids;
mod leader;
mod maintenance;
mod plans;
mod quotas;
mod retention;
mod run_error;
mod runs;
mod schedules;
mod secrets;
mod settle;
mod sqlite_audit;
mod sqlite_files;
mod store;
mod throttles;
mod uploads;
mod webhooks;

pub use actions::{ActionEnd, ActionRefusal, Proposed};
pub use agents::{AgentItem, ItemRefusal, StoredProfile};
pub use approvals::{ApprovalRefusal, Decision, MAX_PAYLOAD_BYTES, NewApproval, canonical_payload};
pub use audit::{AuditPages, AuditRow, AuditRowRef, AuditRowsPage};
pub use deletion::{EXPORT_WITHHELD, WORKSPACE_TABLES, WorkspaceDeletion, WorkspaceRow};
pub use emergency::{CANCEL_BY_EMERGENCY_STOP, CANCEL_BY_REQUEST, StopOutcome};
pub use execution::*;
pub use identity::*;
pub use ids::{hex, random_id, sha256_hex};
pub use leader::{SCHEDULER_APP_PREFIX, SCHEDULER_LOCK_KEY, SchedulerLock};
pub use maintenance::BlobRef;
pub use plans::*;
pub use retention::{RetentionRemoved, RetentionSettings};
pub use run_error::{RunErrorCode, markdown_table as run_error_table};
pub use runs::*;
pub use schedules::*;
pub use settle::{Resolution, Settled};
pub use store::*;
pub use throttles::ThrottleKind;
pub use uploads::*;
pub use webhooks::*;
