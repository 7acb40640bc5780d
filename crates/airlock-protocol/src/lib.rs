//! The typed protocol of airlock: what every front end (HTTP API, CLI in
//! remote mode, MCP, web UI) sends and receives. Each operation of the
//! service layer takes one of these requests and answers one of these
//! responses or an [`Error`] with a code from [`ErrorCode`].
//!
//! Types only: no I/O, no HTTP (status codes belong to the API crate), no
//! rules. The constraints the server enforces are written on the types
//! (`#[schema(...)]`) so the OpenAPI document states them and clients can
//! check before sending; the service checks them again.
//!
//! Field names and shapes are the wire format: renaming one is a breaking
//! change for clients.

pub mod audit;
pub mod error;
pub mod identity;
pub mod runs;
pub mod secrets;
pub mod uploads;
pub mod webhooks;
pub mod workers;

pub use error::{Error, ErrorBody, ErrorCode, ErrorDetail};
pub use runs::RunState;

/// Largest page of any list operation.
pub const MAX_PAGE: i64 = 500;
