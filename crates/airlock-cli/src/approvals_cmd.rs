//! `airlock approvals …`, `airlock stop` and `airlock resume`: each written
//! once against the [`Door`], so it works on the local database (as the
//! operator) or, with `--remote`, against a server with the stored key.
//! Who may decide is the service's rule, not this module's.

use std::io::Write;
use std::process::ExitCode;

use airlock_protocol::approvals::{
    Approval, ApprovalState, Approve, Grant, ListApprovals, PutApprovalSettings, Reject,
};
use airlock_protocol::emergency::StopRequest;
use clap::{Subcommand, ValueEnum};

use crate::common::{Paths, err, fail, with_door};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GrantArg {
    /// This request, once (the default).
    Once,
    /// This exact payload, for the rest of this run (agent actions).
    Payload,
    /// Later commands of this worker starting with --prefix (agent actions).
    ArgvPrefix,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Approval requests, newest first.
    List {
        /// Only requests in this state (pending, approved, rejected, expired, consumed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// Only requests of this run.
        #[arg(long)]
        run: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One request: its payload in full and the SHA-256 it is bound to.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve a request. Give the hash you reviewed with --hash to refuse
    /// anything else.
    Approve {
        id: String,
        /// The payload hash you reviewed (`approvals show`).
        #[arg(long)]
        hash: Option<String>,
        #[arg(long)]
        note: Option<String>,
        #[arg(long, value_enum, default_value = "once")]
        grant: GrantArg,
        /// With --grant argv-prefix: the prefix, one element per --prefix.
        #[arg(long = "prefix")]
        prefix: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Reject a request (its run or action does not execute).
    Reject {
        id: String,
        #[arg(long)]
        note: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The standing rules decisions created (revoked ones included).
    Rules {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a standing rule.
    RevokeRule { id: String },
    /// Show, or with --allow-self-approval set, whether the member who
    /// started a run may approve its requests.
    Settings {
        #[arg(long)]
        allow_self_approval: Option<bool>,
        #[arg(long)]
        json: bool,
    },
}

/// Prints JSON for a reader: shown safely when stdout is a terminal (a
/// payload is what a worker or an agent asked for, and may hold control
/// characters that JSON leaves raw).
fn print_json(v: &serde_json::Value, pretty: bool) {
    let text = if pretty {
        serde_json::to_string_pretty(v).unwrap_or_default()
    } else {
        v.to_string()
    };
    let mut out = std::io::stdout();
    let bytes = if std::io::IsTerminal::is_terminal(&out) {
        crate::term::for_terminal(text.as_bytes())
    } else {
        text.into_bytes()
    };
    let _ = out.write_all(&bytes);
    let _ = out.write_all(b"\n");
}

/// Prints a line that may hold a worker's or an agent's text, shown
/// safely on a terminal.
fn print_text(text: &str) {
    let mut out = std::io::stdout();
    let bytes = if std::io::IsTerminal::is_terminal(&out) {
        crate::term::for_terminal(text.as_bytes())
    } else {
        text.as_bytes().to_vec()
    };
    let _ = out.write_all(&bytes);
    let _ = out.write_all(b"\n");
}

fn line(a: &Approval) -> String {
    format!(
        "{}  {:<9} {:<6} {}  run {}  expires {}",
        a.id,
        a.state.as_str(),
        a.kind.as_str(),
        a.worker_id,
        a.run_id,
        a.expires_at
    )
}

fn decided(a: &Approval, json: bool) -> ExitCode {
    if json {
        print_json(&serde_json::to_value(a).unwrap_or_default(), false);
    } else {
        println!("{} {}", a.id, a.state.as_str());
        if let Some(r) = &a.grant_id {
            println!("  rule {r}");
        }
    }
    ExitCode::SUCCESS
}

pub fn approvals(paths: &Paths, cmd: &ApprovalsCommand) -> ExitCode {
    with_door(paths, async |door| match cmd {
        ApprovalsCommand::List {
            state,
            run,
            limit,
            cursor,
            json,
        } => {
            let state = match state.as_deref().map(ApprovalState::parse) {
                Some(None) => return err("unknown --state"),
                Some(s) => s,
                None => None,
            };
            let q = ListApprovals {
                state,
                run: run.clone(),
                limit: Some(*limit),
                cursor: cursor.clone(),
            };
            match door.list_approvals(&q).await {
                Ok(list) if *json => {
                    print_json(&serde_json::to_value(&list).unwrap_or_default(), false);
                    ExitCode::SUCCESS
                }
                Ok(list) => {
                    for a in &list.approvals {
                        print_text(&line(a));
                    }
                    if let Some(c) = &list.next_cursor {
                        eprintln!("airlock: more with --cursor {c}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        ApprovalsCommand::Show { id, json } => match door.get_approval(id).await {
            Ok(a) if *json => {
                print_json(&serde_json::to_value(&a).unwrap_or_default(), false);
                ExitCode::SUCCESS
            }
            Ok(a) => {
                print_text(&line(&a));
                println!(
                    "requested by {} (run started by {})",
                    a.requested_by, a.run_actor
                );
                if let Some(r) = &a.reason {
                    print_text(&format!("reason: {r}"));
                }
                println!("payload sha256 {}", a.payload_hash);
                print_json(&a.payload, true);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ApprovalsCommand::Approve {
            id,
            hash,
            note,
            grant,
            prefix,
            json,
        } => {
            let grant = match grant {
                GrantArg::Once => Grant::Once,
                GrantArg::Payload => Grant::Payload,
                GrantArg::ArgvPrefix => Grant::ArgvPrefix,
            };
            if (grant == Grant::ArgvPrefix) == prefix.is_empty() {
                return err("--prefix goes with --grant argv-prefix, and it needs one");
            }
            let b = Approve {
                grant: Some(grant),
                argv_prefix: (!prefix.is_empty()).then(|| prefix.clone()),
                payload_hash: hash.clone(),
                note: note.clone(),
            };
            match door.approve(id, &b).await {
                Ok(a) => decided(&a, *json),
                Err(e) => fail(&e),
            }
        }
        ApprovalsCommand::Reject { id, note, json } => {
            match door.reject(id, &Reject { note: note.clone() }).await {
                Ok(a) => decided(&a, *json),
                Err(e) => fail(&e),
            }
        }
        ApprovalsCommand::Rules { json } => match door.list_rules().await {
            Ok(list) if *json => {
                print_json(&serde_json::to_value(&list).unwrap_or_default(), false);
                ExitCode::SUCCESS
            }
            Ok(list) => {
                for r in &list.rules {
                    let what = match (&r.argv_prefix, &r.payload_hash) {
                        (Some(p), _) => format!("argv prefix {p:?}"),
                        (None, Some(h)) => {
                            format!("payload {h} in run {}", r.run_id.as_deref().unwrap_or(""))
                        }
                        (None, None) => String::new(),
                    };
                    let live = if r.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "live"
                    };
                    print_text(&format!("{}  {live}  {}  {what}", r.id, r.worker_id));
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ApprovalsCommand::RevokeRule { id } => match door.revoke_rule(id).await {
            Ok(()) => {
                println!("{id} revoked");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ApprovalsCommand::Settings {
            allow_self_approval,
            json,
        } => {
            let got = match allow_self_approval {
                Some(v) => {
                    door.put_approval_settings(&PutApprovalSettings {
                        allow_self_approval: *v,
                    })
                    .await
                }
                None => door.approval_settings().await,
            };
            match got {
                Ok(s) if *json => {
                    print_json(&serde_json::to_value(&s).unwrap_or_default(), false);
                    ExitCode::SUCCESS
                }
                Ok(s) => {
                    println!("allow_self_approval {}", s.allow_self_approval);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
    })
}

/// `airlock stop`: the workspace's emergency stop (`--show`: its state).
pub fn stop(paths: &Paths, reason: Option<String>, show: bool, json: bool) -> ExitCode {
    with_door(paths, async |door| {
        if show {
            return match door.emergency_state().await {
                Ok(s) if json => {
                    print_json(&serde_json::to_value(&s).unwrap_or_default(), false);
                    ExitCode::SUCCESS
                }
                Ok(s) => {
                    println!("stopped: {}", s.stopped);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            };
        }
        match door.emergency_stop(&StopRequest { reason }).await {
            Ok(s) if json => {
                print_json(&serde_json::to_value(&s).unwrap_or_default(), false);
                ExitCode::SUCCESS
            }
            Ok(s) => {
                println!(
                    "stopped: {} run(s) cancelled, {} running run(s) killed, {} approval(s) cancelled, {} action(s) aborted",
                    s.runs_cancelled, s.runs_stopping, s.approvals_cancelled, s.actions_aborted
                );
                println!("nothing starts until `airlock resume`; resuming restarts nothing");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        }
    })
}

/// `airlock resume`: clears the stop; restarts nothing.
pub fn resume(paths: &Paths, json: bool) -> ExitCode {
    with_door(paths, async |door| match door.emergency_resume().await {
        Ok(s) if json => {
            print_json(&serde_json::to_value(&s).unwrap_or_default(), false);
            ExitCode::SUCCESS
        }
        Ok(s) => {
            println!("stopped: {}", s.stopped);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    })
}
