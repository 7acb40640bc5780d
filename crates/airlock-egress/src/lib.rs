//! The egress proxy (NET-1 … NET-9): the only way out of a sandbox.
//!
//! Default deny, fail closed. Each sandbox gets its own listener (created
//! inside the sandbox's network namespace and handed to this process), so a
//! sandbox is identified by the listener it reached, never by anything it
//! sends. Requests pass [`decide`]: strict authority parsing, special-use
//! names, the policy's rules, the proxy's own resolution and classification
//! of every answer; the proxy then connects to a checked address only.
//! Credential channels add a secret on this side; the sandbox only ever
//! holds a channel's name.
//!
//! Must not: read secrets from anywhere the sandbox can write, follow
//! redirects, log credential values, or resolve a name twice per request.

pub mod authority;
pub mod classify;
pub mod client;
pub mod decide;
pub mod policy;
pub mod proxy;
pub mod resolve;

pub use decide::{Decision, Mode};
pub use policy::{Policy, PolicyError};
pub use proxy::{Egress, EgressSummary, SandboxEgress};
pub use resolve::{Resolve, ResolveError, ScriptedResolver, SystemResolver};
