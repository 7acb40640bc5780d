//! The real launcher: the egress proxy, then the broker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_egress::proxy::SANDBOX_PROXY_ADDR;
use airlock_egress::{Egress, SandboxEgress, ScriptedResolver, SystemResolver};
use airlock_sandbox::{Broker, Hooks};

use crate::{
    Controls, EgressPlan, Launch, LaunchFailure, Launched, Launcher, Notice, Resolve,
    check_channels,
};

/// Starts sandboxes with the broker and serves their egress.
#[derive(Debug, Clone, Default)]
pub struct SandboxLauncher {
    broker: Broker,
}

impl SandboxLauncher {
    /// Re-executes the running binary as the sandbox init (its `main` must
    /// call `airlock_sandbox::init::main_if_requested`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses another broker (another init binary).
    pub fn with_broker(broker: Broker) -> Self {
        Self { broker }
    }
}

impl Launcher for SandboxLauncher {
    fn launch(&self, launch: Launch, controls: Controls) -> Result<Launched, LaunchFailure> {
        self.launch_prepared(launch.prepare()?, controls)
    }

    fn workload_owner(&self) -> Option<(u32, u32)> {
        self.broker.workload_owner().ok().flatten()
    }
}

impl SandboxLauncher {
    /// Starts a launch prepared earlier (its roots pinned at
    /// [`Launch::prepare`]).
    pub fn launch_prepared(
        &self,
        prepared: crate::Prepared,
        controls: Controls,
    ) -> Result<Launched, LaunchFailure> {
        let (spec, mut launch) = prepared.into_parts();
        let mut notices = Vec::new();

        // The proxy exists before the sandbox does: a workload that was
        // promised egress never starts without a proxy behind its listener.
        let proxy = match launch.egress.take() {
            None => None,
            Some(plan) => Some(start_proxy(plan, &mut notices)?),
        };

        // Stopping the workload when its listener cannot be served needs a
        // flag the broker watches. With the caller's flag we do not set it
        // (it may be shared by every launch of a run): the workload then
        // runs to its end with no network (nothing serves its listener, so
        // every connection is refused) and the launch fails below.
        let own_stop = Arc::new(AtomicBool::new(false));
        let cancel = controls.cancel.clone().unwrap_or_else(|| own_stop.clone());
        let mut served: Option<SandboxEgress> = None;
        let mut serve_error: Option<String> = None;
        let label = launch.label.clone();
        let run = launch.run.clone();
        let mut on_listener = |listener: std::net::TcpListener| {
            let Some(proxy) = &proxy else {
                return; // unreachable: the spec asks for a listener only with a plan
            };
            match proxy.serve_sandbox(listener, &label, run.as_deref(), SANDBOX_PROXY_ADDR) {
                Ok(s) => served = Some(s),
                Err(e) => {
                    serve_error = Some(format!("cannot serve the sandbox's listener: {e}"));
                    own_stop.store(true, Ordering::SeqCst);
                }
            }
        };
        let result = self.broker.run_with(
            &spec,
            Hooks {
                on_listener: Some(&mut on_listener),
                cancel: Some(cancel),
                kill: controls.kill.clone(),
                live_output: controls.live_output,
            },
        );
        let egress = served.map(SandboxEgress::shutdown);
        drop(proxy);
        if let Some(e) = serve_error {
            return Err(LaunchFailure::EgressUnavailable(e));
        }
        Ok(Launched {
            result: result?,
            egress,
            notices,
        })
    }
}

/// The proxy runtime for one sandbox (or the agent harness's
/// `http_request`), its channels narrowed to the plan's, stopped while
/// the plan's halt flag is set.
pub fn start_proxy(plan: EgressPlan, notices: &mut Vec<Notice>) -> Result<Egress, LaunchFailure> {
    check_channels(&plan)?;
    let EgressPlan {
        policy,
        channels,
        log,
        resolver,
        halt,
    } = plan;
    let policy = policy.map(|mut p| {
        // Only the channels this sandbox asked for are reachable from it.
        p.channels.retain(|name, _| channels.contains(name));
        p
    });
    let resolver = resolver.unwrap_or_else(|| system_resolver(notices));
    let egress = Egress::new(policy, resolver, log)
        .map_err(|e| LaunchFailure::EgressUnavailable(format!("cannot start the proxy: {e}")))?;
    if let Some(flag) = halt {
        // A fresh proxy has no flag yet, so this always takes.
        egress.halt_when(flag);
    }
    Ok(egress)
}

/// The system resolver, or one that denies every name (closed, and said).
fn system_resolver(notices: &mut Vec<Notice>) -> Arc<dyn Resolve> {
    match SystemResolver::new() {
        Ok(r) => Arc::new(r),
        Err(e) => {
            notices.push(Notice::ResolverUnavailable(e.to_string()));
            Arc::new(ScriptedResolver::new())
        }
    }
}
