//! `airlock audit verify|export|checkpoint|public-key`. Locally these read
//! the database and the checkpoint files ([`airlock_service::AuditLog`]:
//! no vault, no workers, so an auditor can check a copy with
//! `--checkpoint-dir` and `--public-key`) and cover every workspace; with
//! `--remote`, `verify` and `export` ask the server for the key's
//! workspace.

use std::io::Write;
use std::process::ExitCode;

use airlock_protocol::audit::AuditVerification;
use airlock_service::AuditLog;
use clap::Subcommand;

use crate::client::Remote;
use crate::common::{Paths, block_on, err, fail};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify the hash chains (every workspace locally, the key's remotely)
    /// against their signed checkpoints (naming the newest); names the
    /// first bad sequence number, or the checkpoint that does not verify.
    Verify {
        /// `{"workspaces": [{"workspace", "ok", "events", "head",
        /// "first_bad_seq", "checkpoint", "checkpoint_error", "warnings"}]}`
        /// instead of lines.
        #[arg(long)]
        json: bool,
        /// Check checkpoint signatures with this key (64 hex digits, from
        /// `airlock audit public-key`) instead of the key directory's.
        #[arg(long)]
        public_key: Option<String>,
    },
    /// Write a workspace's events as JSON Lines, then its signed
    /// checkpoints (lines of `"type":"checkpoint"`), verifiable with the
    /// published algorithm (`crates/airlock-audit/verify_export.py`).
    Export {
        /// Locally: which workspace (remotely: the key's).
        #[arg(long, default_value = airlock_service::DEFAULT_WORKSPACE)]
        workspace: String,
    },
    /// Sign a checkpoint of every workspace's chain now (the chain since
    /// the previous checkpoint is verified first). `airlock up` also does
    /// this periodically and when it stops.
    Checkpoint {
        /// Only where the head moved since the newest checkpoint.
        #[arg(long)]
        if_moved: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print the public key checkpoints are signed with (64 hex digits;
    /// creates the signing key if there is none yet).
    PublicKey,
}

fn print_verification(ws: &str, v: &AuditVerification) -> bool {
    for w in &v.warnings {
        eprintln!("airlock: warning: {ws}: {w}");
    }
    if let Some(e) = &v.checkpoint_error {
        println!("{ws}: bad checkpoint: {e}");
    }
    let used = match &v.checkpoint {
        Some(cp) => format!(" checkpoint seq={} at={}", cp.seq, cp.at),
        None => " no checkpoint".to_string(),
    };
    match (v.ok, v.first_bad_seq) {
        (true, _) => {
            println!(
                "{ws}: ok {} events head={}{used}",
                v.events.unwrap_or(0),
                v.head.as_deref().unwrap_or("")
            );
            true
        }
        (false, Some(seq)) => {
            println!("{ws}: bad seq {seq}{used}");
            false
        }
        (false, None) => {
            if v.checkpoint_error.is_none() {
                println!("{ws}: bad");
            }
            false
        }
    }
}

/// Prints each workspace's verification; exit 1 when one does not verify.
fn report(all: &[(String, AuditVerification)], json: bool) -> ExitCode {
    let ok = if json {
        let rows: Vec<_> = all
            .iter()
            .map(|(ws, v)| {
                let mut row = serde_json::to_value(v).unwrap_or_default();
                row["workspace"] = serde_json::Value::String(ws.clone());
                row
            })
            .collect();
        println!("{}", serde_json::json!({ "workspaces": rows }));
        all.iter().all(|(_, v)| v.ok)
    } else {
        all.iter()
            .fold(true, |ok, (ws, v)| print_verification(ws, v) && ok)
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn remote(cmd: &AuditCommand) -> ExitCode {
    let r = match Remote::from_login() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    match cmd {
        AuditCommand::Verify { json, .. } => {
            match r.get::<AuditVerification>("/v1/audit/verify").await {
                Ok(v) => report(&[("workspace".to_string(), v)], *json),
                Err(e) => fail(&e),
            }
        }
        AuditCommand::Export { .. } => {
            match r.request("GET", "/v1/audit/export", &[], None::<&()>).await {
                Ok(reply) => match reply.text() {
                    Ok(t) => {
                        print!("{t}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                },
                Err(e) => fail(&e),
            }
        }
        AuditCommand::Checkpoint { .. } | AuditCommand::PublicKey => {
            err("checkpoints are the operator's: run this on the server, without --remote")
        }
    }
}

pub fn audit(paths: &Paths, cmd: &AuditCommand) -> ExitCode {
    block_on(async move || {
        if paths.remote {
            return remote(cmd).await;
        }
        let mut checkpoints = paths.checkpoints();
        if let AuditCommand::Verify {
            public_key: Some(k),
            ..
        } = cmd
        {
            match checkpoints.with_public_key_hex(k) {
                Ok(c) => checkpoints = c,
                Err(e) => return err(format!("--public-key: {}", e.message)),
            }
        }
        if matches!(
            cmd,
            AuditCommand::Verify { .. } | AuditCommand::Checkpoint { .. }
        ) {
            // Both read the whole chain in pages of about 600 KB: with
            // glibc's defaults, each page's buffers were given back to the
            // kernel and faulted in again, half of the time at 10^6 events
            // (BENCHMARKS.md, "Audit verification": "Both cores").
            airlock_sandbox::retain_freed_heap(64 << 20);
        }
        let log = match AuditLog::connect(&paths.url(), checkpoints).await {
            Ok(l) => l,
            Err(e) => return err(e.message),
        };
        match cmd {
            AuditCommand::Export { workspace } => match log.export(workspace).await {
                Ok(text) => {
                    if std::io::stdout().lock().write_all(text.as_bytes()).is_err() {
                        return err("cannot write the export");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
            AuditCommand::Verify { json, .. } => match log.verify_all().await {
                Ok(all) => report(&all, *json),
                Err(e) => fail(&e),
            },
            AuditCommand::Checkpoint { if_moved, json } => {
                match log.checkpoint_all(!*if_moved).await {
                    Ok(made) => {
                        if *json {
                            println!("{}", serde_json::json!({ "checkpoints": made }));
                        } else {
                            for m in &made {
                                let what = if m.written { "signed" } else { "unchanged" };
                                println!(
                                    "{}: {what} seq={} head={} at={}",
                                    m.workspace, m.seq, m.head, m.at
                                );
                            }
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                }
            }
            AuditCommand::PublicKey => match log.public_key() {
                Ok(k) => {
                    println!("{k}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
        }
    })
}
