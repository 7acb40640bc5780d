//! The agent harness (AGT-1, AGT-3, AGT-4, AGT-7; DUR-2 for agents): the
//! loop of an agent run, in the trusted process.
//!
//! ```text
//! claim ─▶ setup (profile → channel → model client; budgets; work dir; tools)
//!   │
//!   ▼
//! ┌──────────────────────────────────────────────────────────────────────┐
//! │ state = transcript (store) + action journal (store)                  │
//! │ for each call of the last response without a result:                 │
//! │   parse → Action ─▶ emergency stop? ─▶ budgets ─▶ policy ─▶ journal   │
//! │     (propose, decide: allow | deny | approval) ─▶ dispatch (ticket)   │
//! │     ─▶ tool ─▶ complete ─▶ tool_result persisted                     │
//! │   an approval pending → park (the run holds nothing; a decision       │
//! │   requeues it and this loop resumes from the store)                  │
//! │ budgets ─▶ validate transcript ─▶ model request ─▶ response persisted │
//! │   (before anything in it is acted on) ─▶ repeat                      │
//! └──────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Everything the loop knows is in the store, so a harness that died at
//! any point resumes exactly: a response is never requested twice once it
//! was persisted, a call answered once has its result, and a call whose
//! side effect may have started (`dispatched`) is never run again on its
//! own — recovery turns it into `outcome_unknown` and the run waits for a
//! person ([`crate::journal`]).
//!
//! The only way to a side effect is [`Service::dispatch_action`], whose
//! [`DispatchTicket`](crate::journal::DispatchTicket) every tool takes by
//! value ([`tools`]).
//!
//! Must not: contain SQL; hand the sandbox a credential; act on a model
//! response before it is persisted; retry a dispatched action.

mod http;
mod prompt;
mod run;
mod setup;
mod state;
mod tools;

pub(crate) use run::Ended;

/// Bumped when the policy's meaning changes; recorded in every decision
/// and approval payload.
pub(crate) const POLICY_VERSION: &str = "airlock-agent-policy-1";

/// Where the run's work directory appears inside each `run_command`
/// sandbox.
pub(crate) const WORK_DIR: &str = "/airlock/work";

/// The crash matrix's hook: when `AIRLOCK_TEST_CRASH_AT` names this point,
/// the process sends itself SIGKILL here — no destructor, flush or
/// shutdown runs, as in a power cut. The tests set it for one process of a
/// server and restart without it; nothing else sets it. Debug builds only:
/// in a release build (`debug_assertions` off) this is a no-op and the
/// variable is never read.
pub(crate) fn crash_point(name: &str) {
    if cfg!(debug_assertions)
        && std::env::var_os("AIRLOCK_TEST_CRASH_AT").is_some_and(|v| v == name)
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests;
