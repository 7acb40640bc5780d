//! The agent pipeline's pure core (AGT-3, AGT-4, AGT-7): what a model's
//! tool call may become, and whether it may happen.
//!
//! ```text
//! tool call ──parse──▶ Action ──policy──▶ Decision (Allow < RequireApproval < Deny)
//!                        │                       ▲
//!                        └─ canonical payload ─┐ │ autonomy, risk class, taint,
//!                           + SHA-256 (RFC 8785)│ │ rules, the caller's grants
//!                                               ▼ │
//!                                        approvals bind to this hash
//! ```
//!
//! - [`action`]: the typed, allowlisted actions and the strict parse of a
//!   tool call's arguments into one (sizes bounded, unknown fields
//!   refused, argv never a shell string); the JSON Schemas the model sees.
//! - [`policy`]: decisions are values; the strictest wins; no rule matched
//!   means approval; untrusted content in the context (taint) makes every
//!   state-changing or outbound action need approval unless a rule allows
//!   it explicitly.
//! - [`budget`]: what a run may spend, and which limit ends it.
//! - [`output`]: tool output bounded for the model (head and tail with an
//!   explicit omission marker).
//!
//! Must not: do I/O, know the store, the sandbox or HTTP. The harness in
//! `airlock-service` runs the loop and executes what this crate allows.

pub mod action;
pub mod budget;
pub mod grant_rules;
pub mod output;
pub mod policy;

pub use action::{Action, ActionError, ActionKind};
pub use budget::{Budget, BudgetExceeded, Budgets, Next, Spent};
pub use output::bounded;
pub use policy::{Autonomy, Decision, Policy, Rule, Verdict};
