//! `airlock audit verify|export`. Locally these read the database alone
//! ([`airlock_service::AuditLog`]: no key directory, no workers, so an
//! auditor can check a copy) and cover every workspace; with `--remote`
//! they ask the server for the key's workspace.

use std::io::Write;
use std::process::ExitCode;

use airlock_protocol::audit::AuditVerification;
use airlock_service::AuditLog;
use clap::Subcommand;

use crate::client::Remote;
use crate::common::{Paths, block_on, err, fail};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify the hash chains (every workspace locally, the key's remotely);
    /// names the first bad sequence number.
    Verify {
        /// `{"workspaces": [{"workspace", "ok", "events", "head",
        /// "first_bad_seq"}]}` instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Write a workspace's events as JSON Lines, verifiable with the
    /// published algorithm (`crates/airlock-audit/verify_export.py`).
    Export {
        /// Locally: which workspace (remotely: the key's).
        #[arg(long, default_value = airlock_service::DEFAULT_WORKSPACE)]
        workspace: String,
    },
}

fn print_verification(ws: &str, v: &AuditVerification) -> bool {
    match (v.ok, v.first_bad_seq) {
        (true, _) => {
            println!(
                "{ws}: ok {} events head={}",
                v.events.unwrap_or(0),
                v.head.as_deref().unwrap_or("")
            );
            true
        }
        (false, Some(seq)) => {
            println!("{ws}: bad seq {seq}");
            false
        }
        (false, None) => {
            println!("{ws}: bad");
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

pub fn audit(paths: &Paths, cmd: &AuditCommand) -> ExitCode {
    block_on(async move || {
        if paths.remote {
            let r = match Remote::from_login() {
                Ok(r) => r,
                Err(e) => return err(e),
            };
            return match cmd {
                AuditCommand::Verify { json } => {
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
            };
        }
        let log = match AuditLog::connect(&paths.url()).await {
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
            AuditCommand::Verify { json } => match log.verify_all().await {
                Ok(all) => report(&all, *json),
                Err(e) => fail(&e),
            },
        }
    })
}
