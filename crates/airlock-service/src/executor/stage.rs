//! Stage 2, stage: everything the sandbox will see, prepared on the
//! trusted side — the run's folder (`input.json`, an empty `output/`), its
//! egress plan (the operator policy with the worker's rules added, channel
//! credentials read from the vault for the proxy only), its declared
//! secrets (read now, audited; a missing one blocks the run before
//! anything executes), and the launch request built from the manifest.
//!
//! Must not: start anything, or keep a secret value beyond the request it
//! goes into.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_launch::{EgressPlan, Launch};
use airlock_sandbox::{Limits, Mount, SandboxRequest, SecretFile};
use airlock_store::RunErrorCode;
use airlock_worker::{Bundle, SecretDelivery};

use super::authorise::Authorised;
use super::{INPUT_DIR, INPUT_FILE, OUTPUT_DIR, Outcome, RunCx, WORKER_DIR};
use crate::secrets::SecretError;
use crate::service::Service;

/// A run ready to launch.
pub(crate) struct Staged {
    pub(crate) bundle: Bundle,
    pub(crate) launch: Launch,
    /// Redacts every delivered value (empty when none were delivered).
    pub(crate) redactor: Arc<airlock_vault::Redactor>,
}

/// The run code for a secrets failure: each one blocks the run.
pub(crate) fn secret_code(e: &SecretError) -> RunErrorCode {
    match e {
        SecretError::Invalid(_) => RunErrorCode::SecretInvalid,
        SecretError::Platform(_) => RunErrorCode::SecretForbidden,
        SecretError::Missing(_) => RunErrorCode::SecretMissing,
        SecretError::Vault(airlock_vault::VaultError::Rollback { .. }) => {
            RunErrorCode::SecretRollback
        }
        SecretError::Vault(_) => RunErrorCode::VaultError,
        SecretError::Store(_) => RunErrorCode::StoreError,
        SecretError::Corrupt(_) => RunErrorCode::SecretCorrupt,
    }
}

fn staging_failed(what: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome::fail(RunErrorCode::StagingFailed, format!("{what}: {e}"))
}

impl Service {
    pub(crate) async fn stage(&self, cx: &mut RunCx, a: Authorised) -> Result<Staged, Outcome> {
        let run = &cx.claim.run;
        let dir = &cx.dir;
        // A folder left by an earlier attempt must go: its outputs would
        // otherwise be collected as this attempt's.
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(staging_failed("cannot clear the run folder", e)),
        }
        let (input, staged_files) = self.stage_files(dir, &a.bundle, &run.input).await?;
        let input = serde_json::to_vec(&input)
            .map_err(|e| staging_failed("cannot serialise the input", e))?;
        {
            use std::io::Write;
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            // Private like the rest of the data directory.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join("output"))
                .map_err(|e| staging_failed("cannot create the output folder", e))?;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(dir.join("input.json"))
                .and_then(|mut f| f.write_all(&input))
                .map_err(|e| staging_failed("cannot write input.json", e))?;
        }

        let egress = self.egress_plan(cx, &a).await?;
        let m = &a.bundle.manifest;

        // KEY-5: exactly the declared secrets, read (and audited) now.
        let mut delivered = Vec::new();
        for n in &m.secrets.names {
            match self
                .secrets
                .read_for_run(&run.workspace_id, n.as_str(), &run.id)
                .await
            {
                Ok(v) => delivered.push(v),
                Err(e) => return Err(Outcome::fail(secret_code(&e), e.to_string())),
            }
        }
        // From here on, whatever ends the run is redacted (KEY-6).
        let redactor = Arc::new(crate::secrets::redactor(
            delivered.iter().map(|(n, v)| (n, v)),
        ));
        cx.redactor = Some(redactor.clone());
        let mut secret_files = Vec::new();
        let mut env = Vec::new();
        match m.secrets.delivery {
            SecretDelivery::File => {
                for (n, v) in &delivered {
                    secret_files.push(SecretFile {
                        name: n.as_str().to_string(),
                        value: crate::secrets::secret_bytes(v),
                    });
                }
            }
            SecretDelivery::Env => {
                for (n, v) in &delivered {
                    let Some(text) = crate::secrets::text(v) else {
                        return Err(Outcome::fail(
                            RunErrorCode::SecretInvalid,
                            format!(
                                "secret {} is not UTF-8 and cannot be an environment variable",
                                n.as_str()
                            ),
                        ));
                    };
                    env.push((n.as_str().to_string(), text.to_string()));
                }
            }
        }
        drop(delivered);

        let l = &m.limits;
        let sandbox = SandboxRequest {
            argv: a.argv.clone(),
            cwd: Some(PathBuf::from(OUTPUT_DIR)),
            mounts: vec![
                Mount {
                    source: a.bundle.dir.clone(),
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
            ]
            .into_iter()
            // One read-only file mount per file input: like input.json,
            // each is a platform file the sandbox uid is granted read
            // access to for the launch (a directory would not be).
            .chain(staged_files.iter().map(|name| Mount {
                source: dir.join("input").join(name),
                target: format!("{INPUT_DIR}/{name}").into(),
                writable: false,
            }))
            .collect(),
            secret_files,
            env,
            timeout: Some(Duration::from_secs(l.timeout_s)),
            limits: sandbox_limits(l),
            output_budget: Some(1 << 20),
            driver: self.cfg.driver,
            ..SandboxRequest::default()
        };
        let launch = Launch {
            sandbox,
            platform_env: vec![
                ("AIRLOCK_RUN_ID".into(), run.id.clone()),
                ("AIRLOCK_WORKER_ID".into(), run.worker_id.clone()),
                ("AIRLOCK_INPUT".into(), INPUT_FILE.into()),
                ("AIRLOCK_OUTPUT_DIR".into(), OUTPUT_DIR.into()),
            ],
            egress,
            label: run.id.clone(),
            run: Some(run.id.clone()),
        };
        Ok(Staged {
            bundle: a.bundle,
            launch,
            redactor,
        })
    }

    /// Copies each file input's upload (resolved by run creation to
    /// `{"upload", "name", "size", "sha256"}`) from the artifact store into
    /// the run folder's `input/<input name>` (0400, the digest checked as it
    /// is read, at most the recorded size), and returns the input as the
    /// sandbox sees it — each file input replaced by its path,
    /// `/airlock/input/<input name>` — and the names of the inputs staged.
    async fn stage_files(
        &self,
        dir: &std::path::Path,
        bundle: &Bundle,
        input: &serde_json::Value,
    ) -> Result<(serde_json::Value, Vec<String>), Outcome> {
        let mut input = input.clone();
        let mut staged = Vec::new();
        for (name, spec) in &bundle.manifest.inputs {
            if !matches!(spec.ty, airlock_worker::FieldType::File { .. }) {
                continue;
            }
            let Some(v) = input.get_mut(name.as_str()).filter(|v| !v.is_null()) else {
                continue;
            };
            let (Some(digest), Some(size)) = (
                v.get("sha256").and_then(|d| d.as_str()).map(str::to_string),
                v.get("size").and_then(serde_json::Value::as_u64),
            ) else {
                return Err(staging_failed(
                    &format!("file input {}", name.as_str()),
                    "the run's input does not name a resolved upload",
                ));
            };
            if staged.is_empty() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir.join("input"))
                    .map_err(|e| staging_failed("cannot create the input folder", e))?;
            }
            let dest = dir.join("input").join(name.as_str());
            // Through the shared blob store: an upload made on another node
            // is fetched and checked against its digest first (DUR-5).
            self.blobs
                .copy_out(&digest, &dest, size)
                .await
                .map_err(|e| {
                    staging_failed(&format!("cannot stage file input {}", name.as_str()), e)
                })?;
            *v = serde_json::Value::String(format!("{INPUT_DIR}/{}", name.as_str()));
            staged.push(name.as_str().to_string());
        }
        Ok((input, staged))
    }

    /// The worker's egress (NET-3, NET-6): the operator policy (channels
    /// live there; their credentials may be in the vault) plus the
    /// manifest's allow rules, narrowed to the channels it names. `None`
    /// when the worker asks for no egress: its sandbox has no network.
    async fn egress_plan(&self, cx: &RunCx, a: &Authorised) -> Result<Option<EgressPlan>, Outcome> {
        let run = &cx.claim.run;
        let e = &a.bundle.manifest.egress;
        if e.allow.is_empty() && e.channels.is_empty() {
            return Ok(None);
        }
        let invalid = |msg: String| Outcome::fail(RunErrorCode::EgressPolicyInvalid, msg);
        let mut policy = match &a.policy_text {
            Some(text) => {
                // Channel credentials may live in the vault
                // (`${secret:NAME}`): read them here, for the proxy only.
                let source = self
                    .secrets
                    .channel_source(&run.workspace_id, text, &run.id)
                    .await
                    .map_err(|e| Outcome::fail(secret_code(&e), e.to_string()))?;
                airlock_egress::Policy::from_toml(text, &source)
                    .map_err(|e| invalid(format!("the operator egress policy: {e}")))?
            }
            None => airlock_egress::Policy::default(),
        };
        for rule in &e.allow {
            policy
                .add_allow(rule.as_str())
                .map_err(|err| invalid(err.to_string()))?;
        }
        let channels: Vec<String> = e.channels.iter().map(|c| c.as_str().to_string()).collect();
        if let Some(missing) = channels.iter().find(|c| !policy.channels.contains_key(*c)) {
            return Err(invalid(format!(
                "channel {missing:?} is not configured by the operator"
            )));
        }
        // AGT-6: the proxy refuses new requests while the workspace is
        // stopped. The flag is this node's view, refreshed here from the
        // database (a stop elsewhere sets it through the run watcher).
        let halt = self.stop_flag(&run.workspace_id);
        match self.stopped(&run.workspace_id).await {
            Ok(false) => halt.store(false, std::sync::atomic::Ordering::SeqCst),
            Ok(true) => {
                halt.store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(Outcome::fail(
                    RunErrorCode::EmergencyStop,
                    "the workspace's emergency stop; the run did not start",
                ));
            }
            Err(e) => return Err(Outcome::fail(RunErrorCode::Internal, e.to_string())),
        }
        Ok(Some(EgressPlan {
            policy: Ok(policy),
            channels,
            log: self.cfg.egress_log.clone(),
            resolver: None,
            halt: Some(halt),
        }))
    }
}

/// The sandbox limits of a run or tool call under a worker's `[limits]`.
pub(crate) fn sandbox_limits(l: &airlock_worker::Limits) -> Limits {
    Limits {
        memory_bytes: Some(l.memory_mb << 20),
        pids: Some(l.pids),
        cpu_millicores: Some((l.cpus * 1000.0).round().max(1.0) as u64),
        file_size_bytes: Some(l.output_bytes.max(1 << 20)),
        tmp_bytes: Some(l.disk_mb << 20),
        ..Limits::default()
    }
}
