//! The tools (AGT-3), each run only with a
//! [`DispatchTicket`](crate::journal::DispatchTicket): proof that the
//! journal committed `dispatched` for exactly this payload after the
//! emergency stop, the budgets, the policy and (when asked for) a person's
//! approval said yes.
//!
//! - `run_command`: the argv in a fresh sandbox over the run's work
//!   directory (`/airlock/work`), through the launch seam, with the
//!   worker's limits and egress; the whole output kept as an artifact by
//!   digest, the model shown its head and tail.
//! - `read_file`, `write_file`, `list_files`: the bounded file layer over
//!   the work directory (no symlinks followed, no FIFOs or devices opened,
//!   hostile names escaped).
//! - `http_request`: through an egress proxy with the worker's policy
//!   ([`super::http`]).
//! - `request_approval`, `write_output`, `finish`: the run's own record.
//!
//! What a tool returns to the model is data: each result that carries
//! content from outside the trusted side names itself as taint.
//!
//! Must not: start a process except through the launcher; follow a link
//! in the work directory; let a tool run without a ticket.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use airlock_agent::{Action, bounded};
use airlock_files::workdir::{ListOpts, WriteOpts};
use airlock_launch::{Controls, EgressPlan, Launch};
use airlock_sandbox::{Mount, SandboxRequest};
use airlock_store::Artifact;
use serde_json::{Value, json};

use super::WORK_DIR;
use super::setup::Agent;
use crate::executor::WORKER_DIR;
use crate::journal::DispatchTicket;
use crate::service::Service;

/// What a tool did.
#[derive(Debug, Default)]
pub(crate) struct ToolOutput {
    /// `completed` (true) or `failed`.
    pub(crate) ok: bool,
    /// Killed by a cancel or the emergency stop while it ran.
    pub(crate) aborted: bool,
    /// What the model is shown (bounded).
    pub(crate) content: String,
    /// What the journal records (small: codes, sizes, digests).
    pub(crate) record: Value,
    pub(crate) egress_bytes: u64,
    /// Untrusted content this result brings into the context.
    pub(crate) taint: Option<String>,
    pub(crate) duration_ms: u64,
}

impl ToolOutput {
    fn ok(content: impl Into<String>, record: Value) -> Self {
        Self {
            ok: true,
            content: content.into(),
            record,
            ..Self::default()
        }
    }

    pub(crate) fn failed(content: impl Into<String>, record: Value) -> Self {
        Self {
            ok: false,
            content: content.into(),
            record,
            ..Self::default()
        }
    }
}

/// Cancel and kill flags of the run, read while a tool runs.
#[derive(Clone)]
pub(crate) struct Stops {
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) kill: Arc<AtomicBool>,
}

impl Service {
    /// Runs one dispatched action. `write_output`, `finish` and
    /// `request_approval` are recorded by the loop; they do nothing here.
    pub(crate) async fn run_tool(
        self: &Arc<Self>,
        agent: &Agent,
        ticket: &DispatchTicket,
        action: &Action,
        stops: &Stops,
    ) -> ToolOutput {
        let started = Instant::now();
        let max = usize::try_from(agent.spec.tool_output_bytes).unwrap_or(16 * 1024);
        let mut out = match action {
            Action::RunCommand {
                argv,
                cwd,
                timeout_s,
            } => {
                self.run_command(agent, ticket, argv, cwd.as_deref(), *timeout_s, stops, max)
                    .await
            }
            Action::ReadFile { path } => read_file(agent, path, max).await,
            Action::WriteFile {
                path,
                content,
                content_sha256,
                ..
            } => write_file(agent, path, content, content_sha256).await,
            Action::ListFiles { path } => {
                list_files(agent, path.as_deref().unwrap_or("."), max).await
            }
            Action::HttpRequest {
                method,
                url,
                headers,
                body,
                ..
            } => {
                let Some(egress) = agent.egress.clone() else {
                    return ToolOutput::failed(
                        "http_request refused: this worker has no egress (no [egress] allow rules or channels)",
                        json!({"error": "no_egress"}),
                    );
                };
                let halt = self.stop_flag(&agent.run.workspace_id);
                super::http::request(
                    egress,
                    halt,
                    super::http::Request {
                        method: method.clone(),
                        url: url.clone(),
                        headers: headers.clone(),
                        body: body.clone(),
                    },
                    max,
                )
                .await
            }
            Action::RequestApproval { .. } => ToolOutput::ok(
                "a person approved your request; go on",
                json!({"approved": true}),
            ),
            Action::WriteOutput { name, .. } => {
                ToolOutput::ok(format!("output {name} set"), json!({"output": name}))
            }
            Action::Finish { .. } => ToolOutput::ok("finished", json!({})),
        };
        out.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        out
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_command(
        self: &Arc<Self>,
        agent: &Agent,
        ticket: &DispatchTicket,
        argv: &[String],
        cwd: Option<&str>,
        timeout_s: Option<u64>,
        stops: &Stops,
        max: usize,
    ) -> ToolOutput {
        let run = &agent.run;
        let l = &agent.bundle.manifest.limits;
        let timeout = timeout_s.unwrap_or(l.timeout_s).min(l.timeout_s).max(1);
        let cwd = match cwd {
            Some(c) => PathBuf::from(WORK_DIR).join(c),
            None => PathBuf::from(WORK_DIR),
        };
        let sandbox = SandboxRequest {
            argv: argv.to_vec(),
            cwd: Some(cwd),
            mounts: vec![
                Mount {
                    source: agent.bundle.dir.clone(),
                    target: WORKER_DIR.into(),
                    writable: false,
                },
                Mount {
                    source: agent.work.clone(),
                    target: WORK_DIR.into(),
                    writable: true,
                },
            ],
            timeout: Some(Duration::from_secs(timeout)),
            limits: crate::executor::sandbox_limits(l),
            output_budget: Some(1 << 20),
            driver: self.cfg.driver,
            ..SandboxRequest::default()
        };
        let egress = agent.egress.as_ref().map(|e| EgressPlan {
            policy: Ok(e.policy.clone()),
            channels: e.channels.clone(),
            log: self.cfg.egress_log.clone(),
            resolver: None,
            halt: Some(self.stop_flag(&run.workspace_id)),
        });
        let action_id = ticket.action().id.clone();
        let launch = Launch {
            sandbox,
            platform_env: vec![
                ("AIRLOCK_RUN_ID".into(), run.id.clone()),
                ("AIRLOCK_WORKER_ID".into(), run.worker_id.clone()),
                ("AIRLOCK_ACTION_ID".into(), action_id.clone()),
                ("AIRLOCK_WORK_DIR".into(), WORK_DIR.into()),
            ],
            egress,
            label: format!("{}:{action_id}", run.id),
            run: Some(run.id.clone()),
        };
        let controls = Controls {
            cancel: Some(stops.cancel.clone()),
            kill: Some(stops.kill.clone()),
            live_output: None,
        };
        crate::metrics::COUNTERS
            .sandbox_launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let launcher = self.launcher.clone();
        let launched = tokio::task::spawn_blocking(move || launcher.launch(launch, controls)).await;
        let launched = match launched {
            Ok(Ok(l)) => l,
            Ok(Err(f)) => {
                return ToolOutput::failed(
                    format!("the command could not start: {f}"),
                    json!({"error": f.code()}),
                );
            }
            Err(e) => {
                return ToolOutput::failed(
                    "the command could not start (internal error)",
                    json!({"error": "internal", "detail": e.to_string()}),
                );
            }
        };
        let r = &launched.result;
        let egress_bytes = launched
            .egress
            .map_or(0, |s| s.bytes_up.saturating_add(s.bytes_down));
        // The whole output, by digest.
        let mut artifacts = Vec::new();
        for (stream, captured) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if captured.bytes.is_empty() {
                continue;
            }
            if let Ok((digest, size)) = self
                .blobs
                .put(bytes::Bytes::copy_from_slice(&captured.bytes[..]), 1 << 20)
                .await
            {
                let a = Artifact {
                    name: format!("actions/{action_id}/{stream}.txt"),
                    digest: digest.clone(),
                    size: i64::try_from(size).unwrap_or(i64::MAX),
                    media_type: "text/plain".into(),
                };
                // The artifact row is a convenience; the digest is in the
                // journal's record either way.
                let _ = self.store.add_artifact(&run.id, agent.token, &a).await;
                artifacts.push(json!({"stream": stream, "digest": digest, "size": size}));
            }
        }
        let status = if r.cancelled {
            "stopped by airlock (cancel or emergency stop); every process was killed".to_string()
        } else if r.timed_out {
            format!("timed out after {timeout} s; every process was killed")
        } else {
            match (r.exit_code, r.signal) {
                (Some(c), _) => format!("exit status {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                (None, None) => "no exit status".into(),
            }
        };
        let half = max / 2;
        let mut content = format!("{status}\n");
        for (name, c) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if c.total_bytes == 0 {
                continue;
            }
            content.push_str(&format!("--- {name} ({} bytes) ---\n", c.total_bytes));
            content.push_str(&bounded(&c.bytes, half));
            if c.dropped_bytes > 0 {
                content.push_str(&format!(
                    "\n[… {} more bytes were not captured …]",
                    c.dropped_bytes
                ));
            }
            content.push('\n');
        }
        let record = json!({
            "exit_code": r.exit_code,
            "signal": r.signal,
            "timed_out": r.timed_out,
            "cancelled": r.cancelled,
            "limit_hits": r.limit_hits,
            "duration_ms": r.duration_ms,
            "egress_bytes": egress_bytes,
            "output": artifacts,
        });
        ToolOutput {
            ok: !r.cancelled && !r.timed_out && r.exit_code == Some(0),
            aborted: r.cancelled,
            content,
            record,
            egress_bytes,
            taint: Some(format!("the output of run_command {}", shown_argv(argv))),
            duration_ms: 0,
        }
    }
}

/// An argv as a short, single-line label.
fn shown_argv(argv: &[String]) -> String {
    let s = serde_json::to_string(argv).unwrap_or_default();
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s
    }
}

async fn read_file(agent: &Agent, path: &str, max: usize) -> ToolOutput {
    let wd = agent.workdir.clone();
    let path_owned = path.to_string();
    let read = tokio::task::spawn_blocking(move || {
        wd.read(&path_owned, 1 << 20).map_err(|e| e.to_string())
    })
    .await;
    match read {
        Ok(Ok(f)) => {
            let mut content = bounded(&f.bytes, max);
            if f.truncated {
                content.push_str(&format!(
                    "\n[… the file is {} bytes; only the first {} were read …]",
                    f.total_size,
                    f.bytes.len()
                ));
            }
            ToolOutput {
                ok: true,
                content,
                record: json!({"path": path, "size": f.total_size}),
                taint: Some(format!("the contents of file {path}")),
                ..ToolOutput::default()
            }
        }
        Ok(Err(e)) => ToolOutput::failed(format!("read_file failed: {e}"), json!({"error": e})),
        Err(e) => ToolOutput::failed(
            "read_file failed (internal error)",
            json!({"error": e.to_string()}),
        ),
    }
}

async fn write_file(agent: &Agent, path: &str, content: &str, sha256: &str) -> ToolOutput {
    // What was approved is what is written: the payload names the
    // content's hash.
    if airlock_store::sha256_hex(content.as_bytes()) != sha256 {
        return ToolOutput::failed(
            "write_file refused: the content is not the approved content",
            json!({"error": "content_changed"}),
        );
    }
    let wd = agent.workdir.clone();
    let (p, c) = (path.to_string(), content.as_bytes().to_vec());
    let opts = WriteOpts {
        owner: agent.work_owner,
        ..WriteOpts::default()
    };
    let written =
        tokio::task::spawn_blocking(move || wd.write(&p, &c, &opts).map_err(|e| e.to_string()))
            .await;
    match written {
        Ok(Ok(w)) => ToolOutput::ok(
            format!("wrote {} bytes to {path}", w.bytes),
            json!({"path": path, "bytes": w.bytes, "sha256": w.sha256}),
        ),
        Ok(Err(e)) => ToolOutput::failed(format!("write_file failed: {e}"), json!({"error": e})),
        Err(e) => ToolOutput::failed(
            "write_file failed (internal error)",
            json!({"error": e.to_string()}),
        ),
    }
}

async fn list_files(agent: &Agent, path: &str, max: usize) -> ToolOutput {
    let wd = agent.workdir.clone();
    let p = path.to_string();
    let listed = tokio::task::spawn_blocking(move || {
        let opts = ListOpts {
            max_entries: 1000,
            max_depth: 4,
        };
        wd.list(&p, &opts).map_err(|e| e.to_string())
    })
    .await;
    match listed {
        Ok(Ok(l)) => {
            let mut text = String::new();
            for e in &l.entries {
                let kind = serde_json::to_value(e.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                text.push_str(&format!("{kind}\t{}\t{}\n", e.size, e.path));
            }
            if l.truncated {
                text.push_str("[… more entries were left out …]\n");
            }
            if l.entries.is_empty() {
                text.push_str("(empty)\n");
            }
            ToolOutput {
                ok: true,
                content: bounded(text.as_bytes(), max),
                record: json!({"path": path, "entries": l.entries.len(), "truncated": l.truncated}),
                taint: Some("the names in the work directory".into()),
                ..ToolOutput::default()
            }
        }
        Ok(Err(e)) => ToolOutput::failed(format!("list_files failed: {e}"), json!({"error": e})),
        Err(e) => ToolOutput::failed(
            "list_files failed (internal error)",
            json!({"error": e.to_string()}),
        ),
    }
}
