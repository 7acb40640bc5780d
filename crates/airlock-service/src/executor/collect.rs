//! Stage 4, collect: what the workload left, judged.
//!
//! Cancelled and timed-out runs end first (their outputs are not read).
//! Then `result.json` is read through the bounded file layer, every file
//! of the output folder is published to the artifact store (text redacted
//! when the run received secrets), and only then does the exit status
//! decide: a run that failed still keeps its artifacts for inspection.
//! Last, the outputs are checked against the manifest.
//!
//! Must not: follow anything out of the output folder (the file layer
//! refuses), or record an artifact that still holds a delivered secret.

use airlock_files::{Collected, FileError};
use airlock_store::{Artifact, Finish, RunErrorCode};
use serde_json::json;

use super::launch::Ran;
use super::{Outcome, RunCx};
use crate::service::Service;

/// Largest text artifact that is redacted in memory; a bigger one in a run
/// that received secrets is not published (`redaction_failed`).
const MAX_REDACTED_BYTES: u64 = 16 << 20;

/// The run code for a file-layer refusal.
pub(crate) fn file_error_code(e: &FileError) -> RunErrorCode {
    match e {
        FileError::Symlink { .. } => RunErrorCode::OutputSymlink,
        FileError::NotRegular { .. } => RunErrorCode::OutputNotRegular,
        FileError::HardLink { .. } => RunErrorCode::OutputHardLink,
        FileError::TooManyFiles { .. } => RunErrorCode::OutputTooManyFiles,
        FileError::TooLarge { .. } => RunErrorCode::OutputTooLarge,
        FileError::TotalTooLarge { .. } => RunErrorCode::OutputTotalTooLarge,
        FileError::TooDeep { .. } => RunErrorCode::OutputTooDeep,
        FileError::BadName { .. } => RunErrorCode::OutputBadName,
        FileError::Io { .. } => RunErrorCode::OutputIo,
    }
}

impl Service {
    pub(crate) async fn collect(&self, cx: &RunCx, ran: Ran) -> Outcome {
        let run = &cx.claim.run;
        let token = cx.claim.token;
        let m = &ran.bundle.manifest;
        let r = &ran.launched.result;
        // Both are plain data: serialising them cannot fail, and a record
        // without them would hide what was (not) in force.
        let containment = match serde_json::to_value(&r.containment) {
            Ok(v) => v,
            Err(e) => return Outcome::fail(RunErrorCode::Internal, e.to_string()),
        };
        let egress = match ran.launched.egress.map(serde_json::to_value).transpose() {
            Ok(v) => v,
            Err(e) => return Outcome::fail(RunErrorCode::Internal, e.to_string()),
        };
        let mut finish = Finish {
            exit_code: r.exit_code.map(i64::from),
            signal: r.signal.map(i64::from),
            containment: Some(containment),
            egress,
            ..Finish::default()
        };
        if r.cancelled {
            // Which cancel it was is in the database (a stop on another
            // node reaches this run only there); unreadable reads as a
            // plain cancel, which the run was in any case.
            let stopped = cx.kill.load(std::sync::atomic::Ordering::SeqCst)
                || matches!(
                    self.store.cancel_kind(&run.id).await,
                    Ok(Some(airlock_store::CANCEL_BY_EMERGENCY_STOP))
                );
            return if stopped {
                Outcome::fail_with(
                    finish,
                    RunErrorCode::EmergencyStop,
                    "killed by the workspace's emergency stop, with every process of the sandbox",
                )
            } else {
                Outcome::fail_with(
                    finish,
                    RunErrorCode::Cancelled,
                    "cancelled while running; every process of the sandbox was killed",
                )
            };
        }
        if r.timed_out {
            return Outcome::fail_with(
                finish,
                RunErrorCode::Timeout,
                format!("ran past its {} s timeout", m.limits.timeout_s),
            );
        }

        // Outputs, through the bounded file layer.
        let out_dir = cx.dir.join("output");
        let result_json = match airlock_files::read_bounded(
            &out_dir,
            "result.json",
            m.limits.output_bytes.min(1 << 20),
        ) {
            Ok(Some(bytes)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) if v.is_object() => v,
                _ => {
                    return Outcome::fail_with(
                        finish,
                        RunErrorCode::SchemaViolation,
                        "result.json is not a JSON object",
                    );
                }
            },
            Ok(None) => json!({}),
            Err(e) => return Outcome::fail_with(finish, file_error_code(&e), e.to_string()),
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
                let store =
                    airlock_files::ArtifactStore::open(&store_root).map_err(|e| FileError::Io {
                        path: store_root.display().to_string(),
                        error: e.to_string(),
                    })?;
                airlock_files::collect_into(&out_dir, &budget, &store)
            })
            .await
        };
        let files = match collected {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return Outcome::fail_with(finish, file_error_code(&e), e.to_string()),
            Err(e) => return Outcome::fail_with(finish, RunErrorCode::Internal, e.to_string()),
        };
        let redactor = cx.redactor.clone();
        for f in &files {
            let (digest, size) = match self.redact_artifact(f, redactor.as_deref()) {
                Ok(x) => x,
                Err(msg) => {
                    return Outcome::fail_with(finish, RunErrorCode::RedactionFailed, msg);
                }
            };
            // Every node may serve it (DUR-5): published before its row.
            if let Err(e) = self.blobs.publish(&digest).await {
                return Outcome::fail_with(
                    finish,
                    RunErrorCode::Internal,
                    format!("artifact {} could not be stored: {e}", f.rel_path),
                );
            }
            let a = Artifact {
                name: f.rel_path.clone(),
                digest,
                size: i64::try_from(size).unwrap_or(i64::MAX),
                media_type: f.media_type.to_string(),
            };
            // The artifact row is the run's result; its event is a log line.
            if let Err(e) = self.store.add_artifact(&run.id, token, &a).await {
                return Outcome::fail_with(
                    finish,
                    RunErrorCode::Internal,
                    format!("artifact {} could not be recorded: {e}", a.name),
                );
            }
            // The crash matrix (DUR-2): killed with part of the outputs
            // published.
            crate::agent::crash_point("during_publication");
            let _ = self
                .store
                .append_event(
                    &run.id,
                    token,
                    "artifact",
                    &json!({"name": a.name, "digest": a.digest, "size": a.size, "media_type": a.media_type}),
                )
                .await;
        }
        finish.outputs = Some(result_json.clone());

        match (r.exit_code, r.signal) {
            (Some(0), _) => {}
            (Some(c), _) => {
                return Outcome::fail_with(
                    finish,
                    RunErrorCode::ExitNonzero,
                    format!("exited with status {c}"),
                );
            }
            (None, Some(s)) if r.limit_hits.iter().any(|h| h == "memory") => {
                return Outcome::fail_with(
                    finish,
                    RunErrorCode::MemoryLimit,
                    format!(
                        "killed by signal {s} at the {} MiB memory limit",
                        m.limits.memory_mb
                    ),
                );
            }
            (None, Some(s)) => {
                return Outcome::fail_with(
                    finish,
                    RunErrorCode::KilledBySignal,
                    format!("killed by signal {s}"),
                );
            }
            (None, None) => {
                return Outcome::fail_with(finish, RunErrorCode::Internal, "no exit status");
            }
        }
        let names: Vec<String> = files.iter().map(|f| f.rel_path.clone()).collect();
        let sizes: Vec<(String, u64)> =
            files.iter().map(|f| (f.rel_path.clone(), f.size)).collect();
        if let Err(e) = m
            .check_outputs(&result_json, &names)
            .and_then(|()| m.check_output_sizes(&sizes))
        {
            return Outcome::fail_with(finish, RunErrorCode::SchemaViolation, e.to_string());
        }
        Outcome::succeeded(finish)
    }

    /// The artifact to record for `f`: itself, or — when it is text and
    /// contains a delivered secret — its redacted bytes, the unredacted
    /// blob deleted (KEY-6). `Err` when a text artifact of a run that
    /// received secrets cannot be checked or redacted: it is not recorded.
    fn redact_artifact(
        &self,
        f: &Collected,
        r: Option<&airlock_vault::Redactor>,
    ) -> Result<(String, u64), String> {
        let original = (f.sha256.clone(), f.size);
        let textual = f.media_type.starts_with("text/") || f.media_type == "application/json";
        let Some(r) = r.filter(|r| !r.is_empty()) else {
            return Ok(original);
        };
        if !textual {
            return Ok(original);
        }
        let unredacted = self.artifacts.path(&f.sha256);
        let refuse = |why: String| -> Result<(String, u64), String> {
            // Not recorded; and not kept either, where it can be removed
            // (no artifact row points to it whatever happens here).
            if let Some(p) = &unredacted {
                let _ = std::fs::remove_file(p);
            }
            Err(format!(
                "artifact {} may hold a delivered secret and was not published: {why}",
                f.rel_path
            ))
        };
        if f.size > MAX_REDACTED_BYTES {
            return refuse(format!(
                "it is {} bytes, more than the {MAX_REDACTED_BYTES} bytes redacted in memory",
                f.size
            ));
        }
        let Some(path) = unredacted.clone() else {
            return refuse("its blob is missing from the artifact store".into());
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => return refuse(format!("cannot read it: {e}")),
        };
        let clean = r.redact_bytes(&bytes);
        if clean == bytes {
            return Ok(original);
        }
        match self.artifacts.put(&clean[..], MAX_REDACTED_BYTES) {
            Ok((digest, size)) => match std::fs::remove_file(&path) {
                Ok(()) => Ok((digest, size)),
                Err(e) => refuse(format!("cannot delete the unredacted copy: {e}")),
            },
            Err(e) => refuse(format!("cannot store the redacted copy: {e}")),
        }
    }
}
