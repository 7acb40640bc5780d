//! The executor: claims runs and drives each one through the sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use airlock_sandbox::{Broker, Hooks, LaunchError, Limits, Mount, SandboxRequest, SandboxSpec};
use airlock_store::{Artifact, Claim, Finish, RunRecord, RunState, StoreError};
use serde_json::json;

use crate::service::Service;

/// Where the bundle, input and output appear inside the sandbox (RUN-3).
pub const WORKER_DIR: &str = "/airlock/worker";
pub const INPUT_FILE: &str = "/airlock/input.json";
pub const OUTPUT_DIR: &str = "/airlock/output";

struct Outcome {
    state: RunState,
    finish: Finish,
}

fn with_error(finish: &Finish, state: RunState, code: &str, msg: String) -> Outcome {
    let mut f = finish.clone();
    f.error_code = Some(code_of(code));
    f.error_message = Some(msg);
    Outcome { state, finish: f }
}

fn failed(state: RunState, code: &str, message: impl Into<String>) -> Outcome {
    Outcome {
        state,
        finish: Finish {
            error_code: Some(code_of(code)),
            error_message: Some(message.into()),
            ..Finish::default()
        },
    }
}

/// Transitional: the executor still names codes as strings.
fn code_of(code: &str) -> airlock_store::RunErrorCode {
    airlock_store::RunErrorCode::parse(code).unwrap_or(airlock_store::RunErrorCode::Internal)
}

impl Service {
    /// Claims and runs queued work until `stop` flips, at most
    /// `max_concurrent` at a time.
    pub async fn run_executor(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.cfg.max_concurrent.max(1)));
        // PostgreSQL: LISTEN/NOTIFY wakes this executor when any node queues
        // a run; the 500 ms poll below is the fallback.
        let listener = match self.store.subscribe().await {
            Ok(Some(mut l)) => {
                let svc = self.clone();
                Some(tokio::spawn(async move {
                    while l.recv().await.is_ok() {
                        svc.wake.notify_one();
                    }
                }))
            }
            _ => None,
        };
        loop {
            if *stop.borrow() {
                break;
            }
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            // RUN-7: skip workers already at their own cap.
            let at_cap: Vec<String> = match self.store.running_per_worker().await {
                Ok(counts) => counts
                    .into_iter()
                    .filter(|(w, n)| {
                        self.worker(w).is_some_and(|b| {
                            u64::try_from(*n).unwrap_or(0) >= b.manifest.limits.concurrency
                        })
                    })
                    .map(|(w, _)| w)
                    .collect(),
                Err(_) => Vec::new(),
            };
            let claim = self
                .store
                .claim_next(&self.owner, self.cfg.lease, &at_cap)
                .await;
            match claim {
                Ok(Some(claim)) => {
                    let svc = self.clone();
                    tokio::spawn(async move {
                        svc.execute(claim).await;
                        drop(permit);
                    });
                }
                Ok(None) | Err(_) => {
                    drop(permit);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        }
        if let Some(l) = listener {
            l.abort();
        }
        // Drain: wait for running work to finish (SIGTERM drain, DUR-2).
        let _ = slots
            .acquire_many(u32::try_from(self.cfg.max_concurrent.max(1)).unwrap_or(1))
            .await;
    }

    /// DUR-2 reaper: requeues or marks `unknown` runs whose lease expired.
    pub async fn run_reaper(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let _ = self.reap_once().await;
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.lease / 2) => {}
                _ = stop.changed() => if *stop.borrow() { break },
            }
        }
    }

    pub async fn reap_once(&self) -> Result<Vec<(String, RunState)>, StoreError> {
        let idempotent = |worker: &str| self.worker(worker).is_some_and(|b| b.manifest.idempotent);
        let reaped = self.store.reap_expired(&idempotent).await?;
        if reaped.iter().any(|(_, s)| *s == RunState::Queued) {
            self.wake.notify_one();
        }
        Ok(reaped)
    }

    /// Startup recovery: runs leased by a previous incarnation of this node
    /// are dead; settle them the same way the reaper would.
    pub async fn recover_startup(&self) -> Result<Vec<(String, RunState)>, StoreError> {
        // Owners are `node:pid`. Several processes may share a node id (two
        // `airlock up` on one host): only a holder whose process is gone is
        // known dead; live holders keep their leases until they expire.
        for (run_id, owner) in self
            .store
            .lease_owners(&format!("{}:", self.cfg.node_id))
            .await?
        {
            let pid = owner.rsplit(':').next().and_then(|p| p.parse::<u32>().ok());
            let alive = pid.is_some_and(|p| {
                p != std::process::id() && Path::new(&format!("/proc/{p}")).exists()
            });
            if !alive {
                self.store.expire_lease(&run_id, &owner).await?;
            }
        }
        self.reap_once().await
    }

    /// Runs one claimed run to its terminal state.
    pub async fn execute(self: &Arc<Self>, claim: Claim) {
        let run_id = claim.run.id.clone();
        let token = claim.token;
        let cancel = Arc::new(AtomicBool::new(false));
        if let Ok(mut c) = self.cancels.lock() {
            c.insert(run_id.clone(), cancel.clone());
        }
        let started = std::time::Instant::now();
        let mut outcome = self.execute_inner(&claim, cancel.clone()).await;
        crate::metrics::run_finished(
            outcome.state,
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        );
        if let Ok(mut c) = self.cancels.lock() {
            c.remove(&run_id);
        }
        // KEY-6: nothing a delivered secret touched is stored unredacted.
        let redactor = self
            .redactors
            .lock()
            .ok()
            .and_then(|mut r| r.remove(&run_id));
        if let Some(r) = redactor.filter(|r| !r.is_empty()) {
            let f = &mut outcome.finish;
            f.error_message = f.error_message.as_deref().map(|m| r.redact(m));
            f.outputs = f.outputs.take().map(|o| {
                let text = r.redact(&o.to_string());
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
            });
        }
        let _ = self
            .store
            .append_event(
                &run_id,
                token,
                "finish",
                &json!({"state": outcome.state.as_str(), "error_code": outcome.finish.error_code.map(|c| c.as_str())}),
            )
            .await;
        // A stale token means someone else owns the run now: write nothing.
        let _ = self
            .store
            .finish_run(&run_id, token, outcome.state, &outcome.finish)
            .await;
        let _ = std::fs::remove_dir_all(self.run_dir(&run_id));
    }

    /// Replaces a text artifact that contains a delivered secret with its
    /// redacted bytes and deletes the unredacted blob (KEY-6).
    fn redact_artifact(
        &self,
        f: &airlock_files::Collected,
        r: &airlock_vault::Redactor,
    ) -> (String, u64) {
        let original = (f.sha256.clone(), f.size);
        let textual = f.media_type.starts_with("text/") || f.media_type == "application/json";
        if r.is_empty() || !textual || f.size > 16 << 20 {
            return original;
        }
        let Some(path) = self.artifacts.path(&f.sha256) else {
            return original;
        };
        let Ok(bytes) = std::fs::read(&path) else {
            return original;
        };
        let clean = r.redact_bytes(&bytes);
        if clean == bytes {
            return original;
        }
        match self.artifacts.put(&clean[..], 16 << 20) {
            Ok((digest, size)) => {
                let _ = std::fs::remove_file(&path);
                (digest, size)
            }
            Err(_) => original,
        }
    }

    fn run_dir(&self, run_id: &str) -> PathBuf {
        self.cfg.data_dir.join("runs").join(run_id)
    }

    /// A run created by a user (`usr_…`) starts only if that user is still
    /// a member whose role permits `runs.create`. Local operator actors
    /// (the CLI on the server's own files, the system) are not members.
    async fn actor_may_run(&self, run: &RunRecord) -> Result<bool, StoreError> {
        if !run.actor.starts_with("usr_") {
            return Ok(true);
        }
        let Some(m) = self.store.membership(&run.workspace_id, &run.actor).await? else {
            return Ok(false);
        };
        Ok(airlock_iam::Role::parse(&m.role)
            .is_some_and(|r| r.permits(airlock_iam::Permission::RunsCreate)))
    }

    async fn execute_inner(self: &Arc<Self>, claim: &Claim, cancel: Arc<AtomicBool>) -> Outcome {
        let run = &claim.run;
        let token = claim.token;
        // IAM-6: queued work re-checks its actor's authority when it runs.
        match self.actor_may_run(run).await {
            Ok(true) => {}
            Ok(false) => {
                return failed(
                    RunState::Blocked,
                    "actor_not_authorized",
                    "the member who created this run may no longer create runs in this workspace; it did not start",
                );
            }
            Err(e) => return failed(RunState::Failed, "internal", e.to_string()),
        }
        let Some(bundle) = self.worker(&run.worker_id) else {
            return failed(
                RunState::Failed,
                "worker_missing",
                format!("worker {:?} is not loaded", run.worker_id),
            );
        };
        let mut argv = match bundle.manifest.command(Path::new(WORKER_DIR)) {
            Ok(a) => a,
            Err(e) if e.code() == "agent_unavailable" => {
                return failed(
                    RunState::Blocked,
                    "agent_unavailable",
                    "agent workers execute in a later release; this run did not start",
                );
            }
            Err(e) => return failed(RunState::Failed, "internal", e.to_string()),
        };
        if argv.len() == 1 {
            // A native entry runs from its host path, where the broker
            // resolves and hashes it (it is bound there read-only).
            argv[0] = bundle.entry.display().to_string();
        }

        // Stage.
        let dir = self.run_dir(&run.id);
        let _ = std::fs::remove_dir_all(&dir);
        let staged = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(dir.join("output"))?;
            std::fs::write(
                dir.join("input.json"),
                serde_json::to_vec(&run.input).unwrap_or_default(),
            )?;
            Ok(())
        })();
        if let Err(e) = staged {
            return failed(RunState::Failed, "staging_failed", e.to_string());
        }

        // Egress from the manifest (channels come from the operator policy).
        let m = &bundle.manifest;
        let wants_egress = !m.egress.allow.is_empty() || !m.egress.channels.is_empty();
        let egress = if wants_egress {
            let mut policy = match &self.cfg.egress_policy {
                Some(p) => {
                    // Channel credentials may live in the vault
                    // (`${secret:NAME}`): read them here, for the proxy.
                    let text = std::fs::read_to_string(p).unwrap_or_default();
                    let source = match self
                        .secrets
                        .channel_source(&run.workspace_id, &text, &run.id)
                        .await
                    {
                        Ok(s) => s,
                        Err(e) => return failed(RunState::Blocked, e.code(), e.to_string()),
                    };
                    match airlock_egress::Policy::load(p, &source) {
                        Ok(p) => p,
                        Err(e) => {
                            return failed(
                                RunState::Failed,
                                "egress_policy_invalid",
                                e.to_string(),
                            );
                        }
                    }
                }
                None => airlock_egress::Policy::default(),
            };
            for rule in &m.egress.allow {
                if let Err(e) = policy.add_allow(rule.as_str()) {
                    return failed(RunState::Failed, "egress_policy_invalid", e.to_string());
                }
            }
            let wanted: Vec<String> = m
                .egress
                .channels
                .iter()
                .map(|c| c.as_str().to_string())
                .collect();
            if let Some(missing) = wanted.iter().find(|c| !policy.channels.contains_key(*c)) {
                return failed(
                    RunState::Blocked,
                    "egress_policy_invalid",
                    format!("channel {missing:?} is not configured by the operator"),
                );
            }
            policy.channels.retain(|k, _| wanted.contains(k));
            Some((policy, wanted))
        } else {
            None
        };

        let limits = Limits {
            memory_bytes: Some(m.limits.memory_mb << 20),
            pids: Some(m.limits.pids),
            cpu_millicores: Some((m.limits.cpus * 1000.0).round().max(1.0) as u64),
            file_size_bytes: Some(m.limits.output_bytes.max(1 << 20)),
            tmp_bytes: Some(m.limits.disk_mb << 20),
            ..Limits::default()
        };
        let req = SandboxRequest {
            argv,
            cwd: Some(PathBuf::from(OUTPUT_DIR)),
            mounts: vec![
                Mount {
                    source: bundle.dir.clone(),
                    target: WORKER_DIR.into(),
                    writable: false,
                },
                Mount {
                    source: dir.join("input.json"),
                    target: INPUT_FILE.into(),
                    writable: false,
                },
                Mount {
                    source: dir.join("output"),
                    target: OUTPUT_DIR.into(),
                    writable: true,
                },
            ],
            timeout: Some(Duration::from_secs(m.limits.timeout_s)),
            limits,
            output_budget: Some(1 << 20),
            driver: self.cfg.driver,
            egress: egress.is_some(),
            ..SandboxRequest::default()
        };
        let mut spec = match SandboxSpec::parse(req) {
            Ok(s) => s,
            Err(e) => return failed(RunState::Failed, "sandbox_setup_failed", e.to_string()),
        };
        spec = spec
            .with_platform_env("AIRLOCK_RUN_ID", &run.id)
            .with_platform_env("AIRLOCK_WORKER_ID", &run.worker_id)
            .with_platform_env("AIRLOCK_INPUT", INPUT_FILE)
            .with_platform_env("AIRLOCK_OUTPUT_DIR", OUTPUT_DIR);
        if let Some((_, channels)) = &egress {
            for ch in channels {
                let url = format!(
                    "http://{}{}{ch}",
                    airlock_egress::proxy::SANDBOX_PROXY_ADDR,
                    airlock_egress::proxy::CHANNEL_PREFIX
                );
                spec = spec.with_platform_env(
                    &format!("AIRLOCK_CHANNEL_{}_URL", ch.to_ascii_uppercase()),
                    &url,
                );
            }
        }

        // KEY-5: a channel's credential can never be delivered to a sandbox,
        // whatever a manifest declares.
        if let Some(p) = &self.cfg.egress_policy {
            let channel_secrets = crate::secrets::channel_secret_names(
                &std::fs::read_to_string(p).unwrap_or_default(),
            );
            if let Some(n) = m
                .secrets
                .names
                .iter()
                .find(|n| channel_secrets.iter().any(|c| c == n.as_str()))
            {
                return failed(
                    RunState::Blocked,
                    "secret_forbidden",
                    format!(
                        "secret {} is a channel credential and is never delivered to a sandbox",
                        n.as_str()
                    ),
                );
            }
        }
        // KEY-5: exactly the declared secrets, read (and audited) now; a
        // missing one blocks the run before anything executes.
        let mut delivered = Vec::new();
        for n in &m.secrets.names {
            match self
                .secrets
                .read_for_run(&run.workspace_id, n.as_str(), &run.id)
                .await
            {
                Ok(v) => delivered.push(v),
                Err(e @ crate::secrets::SecretError::Missing(_)) => {
                    return failed(RunState::Blocked, "secret_missing", e.to_string());
                }
                Err(e) => return failed(RunState::Blocked, e.code(), e.to_string()),
            }
        }
        let redactor = Arc::new(crate::secrets::redactor(
            delivered.iter().map(|(n, v)| (n, v)),
        ));
        if let Ok(mut r) = self.redactors.lock() {
            r.insert(run.id.clone(), redactor.clone());
        }
        match m.secrets.delivery {
            airlock_worker::SecretDelivery::File => {
                spec = spec.with_secret_files(
                    delivered
                        .iter()
                        .map(|(n, v)| airlock_sandbox::SecretFile {
                            name: n.as_str().to_string(),
                            value: airlock_sandbox::SecretBytes::new(crate::secrets::bytes(v)),
                        })
                        .collect(),
                );
            }
            airlock_worker::SecretDelivery::Env => {
                let mut env = Vec::new();
                for (n, v) in &delivered {
                    match String::from_utf8(crate::secrets::bytes(v)) {
                        Ok(text) => env.push((n.as_str().to_string(), text)),
                        Err(_) => {
                            return failed(
                                RunState::Blocked,
                                "secret_invalid",
                                format!(
                                    "secret {} is not UTF-8 and cannot be an environment variable",
                                    n.as_str()
                                ),
                            );
                        }
                    }
                }
                spec = match spec.with_declared_env(&env) {
                    Ok(s) => s,
                    Err(e) => return failed(RunState::Blocked, "secret_invalid", e.to_string()),
                };
            }
        }
        drop(delivered);

        // From here on a crash may have had effects (DUR-2).
        if self
            .store
            .mark_workload_started(&run.id, token)
            .await
            .is_err()
        {
            return failed(
                RunState::Failed,
                "internal",
                "lost the run before it started",
            );
        }
        let _ = self
            .store
            .append_event(
                &run.id,
                token,
                "status",
                &json!({"state": "running", "attempt": run.attempt}),
            )
            .await;
        // KEY-6: values too weak to replace everywhere are named (never shown)
        // so the operator can fix them.
        for w in redactor.warnings() {
            let _ = self
                .store
                .append_event(
                    &run.id,
                    token,
                    "warning",
                    &json!({"secret": w.name.as_str(), "warning": "low-entropy secret: redacted only as a whole word, or not at all", "detail": format!("{:?}", w.kind)}),
                )
                .await;
        }

        // Live logs: a bounded channel; a thread turns chunks into events.
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<(airlock_sandbox::output::Stream, Vec<u8>)>(1024);
        let handle = tokio::runtime::Handle::current();
        let store = self.store.clone();
        let log_run = run.id.clone();
        let log_redactor = redactor.clone();
        let logger = std::thread::spawn(move || {
            let mut events = 0u32;
            for (stream, bytes) in rx {
                if events >= 10_000 {
                    continue; // counted in the captured totals; the event log is capped
                }
                events += 1;
                let text = log_redactor.redact(&String::from_utf8_lossy(&bytes));
                let _ = handle.block_on(store.append_event(
                    &log_run,
                    token,
                    "log",
                    &json!({"stream": stream, "text": text}),
                ));
            }
        });

        // Cancel and lease renewal while the workload runs.
        let watcher = {
            let svc = self.clone();
            let cancel = cancel.clone();
            let run_id = run.id.clone();
            tokio::spawn(async move {
                let mut tick = 0u32;
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    tick += 1;
                    if svc.store.cancel_requested(&run_id).await.unwrap_or(false) {
                        cancel.store(true, Ordering::SeqCst);
                    }
                    if tick.is_multiple_of(8)
                        && svc
                            .store
                            .renew_lease(&run_id, token, svc.cfg.lease)
                            .await
                            .is_err()
                    {
                        // Someone else owns the run: stop the workload.
                        cancel.store(true, Ordering::SeqCst);
                    }
                }
            })
        };

        let launched = tokio::task::spawn_blocking(move || {
            let mut served: Option<airlock_egress::SandboxEgress> = None;
            let proxy = match egress {
                Some((policy, _)) => {
                    let resolver: Arc<dyn airlock_egress::Resolve> =
                        match airlock_egress::SystemResolver::new() {
                            Ok(r) => Arc::new(r),
                            Err(_) => Arc::new(airlock_egress::ScriptedResolver::new()),
                        };
                    airlock_egress::Egress::new(
                        Ok(policy),
                        resolver,
                        Arc::new(airlock_egress::proxy::NullLog),
                    )
                    .ok()
                }
                None => None,
            };
            let sandbox_id = spec.argv().first().cloned().unwrap_or_default();
            let mut hook = |listener: std::net::TcpListener| {
                if let Some(p) = &proxy {
                    served = p
                        .serve_sandbox(
                            listener,
                            &sandbox_id,
                            None,
                            airlock_egress::proxy::SANDBOX_PROXY_ADDR,
                        )
                        .ok();
                }
            };
            crate::metrics::COUNTERS
                .sandbox_launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let result = Broker::new().run_with(
                &spec,
                Hooks {
                    on_listener: Some(&mut hook),
                    cancel: Some(cancel),
                    live_output: Some(tx),
                },
            );
            let summary = served.map(|s| s.shutdown());
            drop(proxy);
            (result, summary)
        })
        .await;
        watcher.abort();
        let _ = tokio::task::spawn_blocking(move || logger.join()).await;

        let (result, egress_summary) = match launched {
            Ok(x) => x,
            Err(e) => return failed(RunState::Failed, "internal", e.to_string()),
        };
        if let Some(s) = &egress_summary {
            use std::sync::atomic::Ordering::Relaxed;
            crate::metrics::COUNTERS
                .egress_allowed
                .fetch_add(s.allowed, Relaxed);
            crate::metrics::COUNTERS
                .egress_denied
                .fetch_add(s.denied, Relaxed);
        }
        let egress_json = egress_summary.map(|s| serde_json::to_value(s).unwrap_or_default());
        let r = match result {
            Ok(r) => r,
            Err(e @ LaunchError::ContainmentUnavailable { .. }) => {
                let mut o = failed(RunState::Blocked, "containment_unavailable", e.to_string());
                if let LaunchError::ContainmentUnavailable { report, .. } = &e {
                    o.finish.containment = serde_json::to_value(report).ok();
                }
                return o;
            }
            Err(e) => return failed(RunState::Failed, e.reason(), e.to_string()),
        };
        let mut finish = Finish {
            exit_code: r.exit_code.map(i64::from),
            signal: r.signal.map(i64::from),
            containment: serde_json::to_value(&r.containment).ok(),
            egress: egress_json,
            ..Finish::default()
        };
        if r.cancelled {
            return with_error(
                &finish,
                RunState::Cancelled,
                "cancelled",
                "cancelled while running; every process of the sandbox was killed".into(),
            );
        }
        if r.timed_out {
            return with_error(
                &finish,
                RunState::TimedOut,
                "timeout",
                format!("ran past its {} s timeout", m.limits.timeout_s),
            );
        }

        // Outputs, through the bounded file layer.
        let out_dir = dir.join("output");
        let result_json = match airlock_files::read_bounded(
            &out_dir,
            "result.json",
            m.limits.output_bytes.min(1 << 20),
        ) {
            Ok(Some(bytes)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) if v.is_object() => v,
                _ => {
                    return with_error(
                        &finish,
                        RunState::Failed,
                        "schema_violation",
                        "result.json is not a JSON object".into(),
                    );
                }
            },
            Ok(None) => json!({}),
            Err(e) => return with_error(&finish, RunState::Failed, e.reason(), e.to_string()),
        };
        let budget = airlock_files::Budget {
            max_files: 1000,
            max_total_bytes: m.limits.output_bytes,
            max_file_bytes: m.limits.output_bytes,
            max_depth: 16,
        };
        let collected = {
            let out_dir = out_dir.clone();
            let store_root = self.cfg.data_dir.join("artifacts");
            tokio::task::spawn_blocking(move || {
                let store = airlock_files::ArtifactStore::open(&store_root).map_err(|e| {
                    airlock_files::FileError::Io {
                        path: store_root.display().to_string(),
                        error: e.to_string(),
                    }
                })?;
                airlock_files::collect_into(&out_dir, &budget, &store)
            })
            .await
        };
        let files = match collected {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return with_error(&finish, RunState::Failed, e.reason(), e.to_string()),
            Err(e) => return with_error(&finish, RunState::Failed, "internal", e.to_string()),
        };
        for f in &files {
            let (digest, size) = self.redact_artifact(f, &redactor);
            let a = Artifact {
                name: f.rel_path.clone(),
                digest,
                size: i64::try_from(size).unwrap_or(i64::MAX),
                media_type: f.media_type.to_string(),
            };
            if self.store.add_artifact(&run.id, token, &a).await.is_ok() {
                let _ = self.store.append_event(&run.id, token, "artifact", &json!({"name": a.name, "digest": a.digest, "size": a.size, "media_type": a.media_type})).await;
            }
        }
        finish.outputs = Some(result_json.clone());

        match (r.exit_code, r.signal) {
            (Some(0), _) => {}
            (Some(c), _) => {
                return with_error(
                    &finish,
                    RunState::Failed,
                    "exit_nonzero",
                    format!("exited with status {c}"),
                );
            }
            (None, Some(s)) if r.limit_hits.iter().any(|h| h == "memory") => {
                return with_error(
                    &finish,
                    RunState::Failed,
                    "memory_limit",
                    format!(
                        "killed by signal {s} at the {} MiB memory limit",
                        m.limits.memory_mb
                    ),
                );
            }
            (None, Some(s)) => {
                return with_error(
                    &finish,
                    RunState::Failed,
                    "killed_by_signal",
                    format!("killed by signal {s}"),
                );
            }
            (None, None) => {
                return with_error(
                    &finish,
                    RunState::Failed,
                    "internal",
                    "no exit status".into(),
                );
            }
        }
        let names: Vec<String> = files.iter().map(|f| f.rel_path.clone()).collect();
        if let Err(e) = bundle.manifest.check_outputs(&result_json, &names) {
            return with_error(&finish, RunState::Failed, "schema_violation", e.to_string());
        }
        Outcome {
            state: RunState::Succeeded,
            finish,
        }
    }
}
