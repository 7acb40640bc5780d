//! Orchestration (RUN-3 … RUN-7, DUR-1 … DUR-5): the run service that the
//! HTTP API, the CLI and (later) MCP share, and the executor that claims
//! queued runs and drives them through the sandbox.
//!
//! Pipeline of one run: create (input checked against the manifest) →
//! queue → claim with a lease and fencing token → stage `/airlock/input.json`
//! → sandbox with the manifest's limits and egress → live logs as events →
//! outputs collected through the bounded file layer → artifacts published
//! content-addressed → terminal state with error code, containment report
//! and egress summary, committed with its audit event.
//!
//! Must not: contain SQL (the store does), know HTTP, or spawn processes
//! other than through the broker.

mod executor;
pub mod metrics;
pub mod schedule_eval;
mod scheduler;
pub mod secrets;
mod service;

pub use airlock_store::RunErrorCode;
pub use scheduler::*;
pub use service::*;
