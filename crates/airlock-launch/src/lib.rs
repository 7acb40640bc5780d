//! The launch seam: one way to start a sandbox together with its egress
//! proxy, behind the [`Launcher`] trait.
//!
//! A [`Launch`] is plain data: the sandbox request (argv, roots and mounts,
//! working directory, environment, secret files, limits, timeout, driver),
//! the platform's own variables, and — only when the sandbox may reach the
//! network — an [`EgressPlan`] (a validated policy, the channels the sandbox
//! is given, where decision lines go). [`Controls`] carry what is not data:
//! the cancel flag and the live output sink. The answer is the broker's
//! [`RunResult`] with the proxy's [`EgressSummary`], or a [`LaunchFailure`]
//! that says which part refused.
//!
//! Two implementations:
//! - [`SandboxLauncher`] starts the proxy first (so a workload that was
//!   promised egress never runs without one), runs the request through the
//!   broker, serves the listener the sandbox hands over, and shuts the proxy
//!   down when the workload ends.
//! - [`RecordingLauncher`] starts nothing: it checks each request the same
//!   way, records it and answers from a script, so orchestration above it
//!   (the executor's stages, `airlock sandbox exec`, agent tool calls) is
//!   tested without namespaces — as youki tests its spawn plan through a
//!   recording `Syscall`.
//!
//! Callers: the executor (one launch per script run), `airlock sandbox
//! exec`, and next the agent harness (many launches per run in one work
//! directory, each with the worker's limits and egress).
//!
//! Must not: read configuration, secrets or the database; know runs,
//! workers, manifests or HTTP; print. The sandbox crate knows nothing of
//! egress and the egress crate nothing of sandboxes beyond a listener: this
//! crate is where the two meet, and the only one.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub use airlock_egress::EgressSummary;
pub use airlock_egress::proxy::LogSink;
pub use airlock_egress::{Policy, PolicyError, Resolve};
pub use airlock_sandbox::output::LiveSink;
pub use airlock_sandbox::{LaunchError, RunResult, SandboxRequest, SandboxSpec, SpecError};

mod real;
mod recording;

pub use real::{SandboxLauncher, start_proxy};
pub use recording::{RecordingLauncher, fake_result};

/// Starts sandboxes. Blocking: a launch returns when the workload has ended
/// (call it from a blocking thread in async code).
pub trait Launcher: Send + Sync + std::fmt::Debug {
    fn launch(&self, launch: Launch, controls: Controls) -> Result<Launched, LaunchFailure>;

    /// The host `(uid, gid)` its workloads run as when that is not this
    /// process's own (a root broker's sandbox ids): files the platform
    /// writes into a workload's writable root are given to it, so that the
    /// workload can change them. `None`: the process's own ids (or unknown;
    /// a launch that cannot resolve them fails on its own).
    fn workload_owner(&self) -> Option<(u32, u32)> {
        None
    }
}

/// One sandbox to start, as plain data.
#[derive(Debug)]
pub struct Launch {
    /// What runs and under which limits. Its `egress` flag is ignored: the
    /// launcher sets it from [`Launch::egress`], so the two cannot disagree.
    pub sandbox: SandboxRequest,
    /// Variables the platform sets (`AIRLOCK_RUN_ID`, …): names under
    /// `AIRLOCK_` only. Channel URLs are added by the launcher.
    pub platform_env: Vec<(String, String)>,
    /// `None`: the sandbox has no network at all.
    pub egress: Option<EgressPlan>,
    /// Names the sandbox in the proxy's decision lines.
    pub label: String,
    /// The run the sandbox belongs to, in the proxy's decision lines.
    pub run: Option<String>,
}

/// The egress a sandbox gets (NET-1): its own proxy with this policy.
pub struct EgressPlan {
    /// An `Err` policy is "deny everything" (NET-2): the proxy refuses
    /// every request with `no_policy`.
    pub policy: Result<Policy, PolicyError>,
    /// The credential channels the sandbox may use. Each must be in the
    /// policy; every other channel of the policy is removed for this
    /// sandbox, so listing is what grants.
    pub channels: Vec<String>,
    /// Where decision and connection lines go.
    pub log: Arc<dyn LogSink>,
    /// `None`: the system resolver (or, when it cannot be set up, one that
    /// denies every name, reported as [`Notice::ResolverUnavailable`]).
    pub resolver: Option<Arc<dyn Resolve>>,
    /// While set, the proxy refuses every new request (`emergency_stop`):
    /// the workspace's emergency stop, read on each request (AGT-6).
    pub halt: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for EgressPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Policy`'s Debug redacts credentials.
        f.debug_struct("EgressPlan")
            .field("policy", &self.policy)
            .field("channels", &self.channels)
            .field("resolver", &self.resolver)
            .finish_non_exhaustive()
    }
}

/// What is not data about a launch.
#[derive(Debug, Default, Clone)]
pub struct Controls {
    /// Set to stop the workload (same kill sequence as a timeout, reported
    /// as cancelled). The launcher only reads it.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Set together with `cancel` to kill at once, without the grace
    /// period (the emergency stop). The launcher only reads it.
    pub kill: Option<Arc<AtomicBool>>,
    /// Live stdout/stderr chunks (bounded; a slow reader loses chunks from
    /// the live view, never from the captured result).
    pub live_output: Option<LiveSink>,
}

/// A workload that ran (whatever its exit status).
#[derive(Debug)]
pub struct Launched {
    pub result: RunResult,
    /// The proxy's totals; `None` when the sandbox had no egress.
    pub egress: Option<EgressSummary>,
    /// What the caller should record: degraded but still closed.
    pub notices: Vec<Notice>,
}

/// Something that went worse than planned without opening anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The system resolver could not be set up: every name is denied
    /// (`dns_error`); address rules and the policy's `hosts` map still work.
    ResolverUnavailable(String),
}

impl Notice {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ResolverUnavailable(_) => "resolver_unavailable",
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ResolverUnavailable(e) => write!(
                f,
                "the egress proxy's resolver could not be set up ({e}); every name is denied"
            ),
        }
    }
}

/// Why a launch did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum LaunchFailure {
    /// The request is invalid; nothing started.
    #[error(transparent)]
    Request(#[from] SpecError),
    /// A channel was asked for that the policy does not configure; nothing
    /// started.
    #[error("channel {0:?} is not configured in the egress policy")]
    ChannelNotConfigured(String),
    /// The proxy could not be started (nothing started) or could not serve
    /// the sandbox's listener (the workload had no network; its result is
    /// discarded).
    #[error("the egress proxy is unavailable: {0}")]
    EgressUnavailable(String),
    /// The broker refused or the sandbox could not start.
    #[error(transparent)]
    Sandbox(#[from] LaunchError),
}

impl LaunchFailure {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Request(_) => "invalid_request",
            Self::ChannelNotConfigured(_) => "channel_not_configured",
            Self::EgressUnavailable(_) => "egress_unavailable",
            Self::Sandbox(e) => e.reason(),
        }
    }
}

/// The variable and URL at which a sandbox finds channel `name`.
pub fn channel_env(name: &str) -> (String, String) {
    (
        format!("AIRLOCK_CHANNEL_{}_URL", name.to_ascii_uppercase()),
        format!(
            "http://{}{}{name}",
            airlock_egress::proxy::SANDBOX_PROXY_ADDR,
            airlock_egress::proxy::CHANNEL_PREFIX
        ),
    )
}

impl Launch {
    /// A launch without network, platform variables or labels.
    pub fn offline(sandbox: SandboxRequest) -> Self {
        Self {
            sandbox,
            platform_env: Vec::new(),
            egress: None,
            label: String::new(),
            run: None,
        }
    }

    /// Checks the request as a launch would, without starting anything:
    /// the sandbox request parses and every channel asked for is in the
    /// policy.
    pub fn check(&self) -> Result<(), LaunchFailure> {
        if let Some(plan) = &self.egress {
            check_channels(plan)?;
        }
        self.spec_from(self.sandbox.clone())?;
        Ok(())
    }

    /// Parses the request now — its roots are opened and pinned, so a path
    /// swapped from here on is refused when the sandbox binds it — and
    /// returns a launch that starts exactly that spec. For callers that
    /// report bad input before opening anything else (`sandbox exec` opens
    /// its egress log after this).
    pub fn prepare(mut self) -> Result<Prepared, LaunchFailure> {
        if let Some(plan) = &self.egress {
            check_channels(plan)?;
        }
        let sandbox = std::mem::take(&mut self.sandbox);
        let spec = self.spec_from(sandbox)?;
        Ok(Prepared { spec, launch: self })
    }

    /// The parsed spec for `sandbox` (this launch's request or a copy),
    /// with the egress flag, the platform variables and the channel URLs.
    fn spec_from(&self, mut sandbox: SandboxRequest) -> Result<SandboxSpec, SpecError> {
        sandbox.egress = self.egress.is_some();
        let mut spec = SandboxSpec::parse(sandbox)?;
        for (name, value) in &self.platform_env {
            spec = spec.with_platform_env(name, value);
        }
        for ch in self.egress.iter().flat_map(|p| &p.channels) {
            let (name, url) = channel_env(ch);
            spec = spec.with_platform_env(&name, &url);
        }
        Ok(spec)
    }
}

/// A launch whose request is parsed and whose roots are pinned
/// ([`Launch::prepare`]).
#[derive(Debug)]
pub struct Prepared {
    spec: SandboxSpec,
    launch: Launch,
}

impl Prepared {
    /// Where the egress plan's decision lines go, chosen after the request
    /// was parsed (a log that blocks while it opens, a FIFO, cannot delay
    /// the parse). No effect on a launch without egress.
    pub fn with_egress_log(mut self, log: Arc<dyn LogSink>) -> Self {
        if let Some(plan) = &mut self.launch.egress {
            plan.log = log;
        }
        self
    }

    pub(crate) fn into_parts(self) -> (SandboxSpec, Launch) {
        (self.spec, self.launch)
    }
}

/// Every channel asked for is configured. An `Err` policy has none and is
/// "deny everything" anyway, so there is nothing to check against.
fn check_channels(plan: &EgressPlan) -> Result<(), LaunchFailure> {
    if let Ok(policy) = &plan.policy
        && let Some(missing) = plan
            .channels
            .iter()
            .find(|c| !policy.channels.contains_key(*c))
    {
        return Err(LaunchFailure::ChannelNotConfigured(missing.clone()));
    }
    Ok(())
}
