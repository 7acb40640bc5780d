//! `airlock secrets …` (through the [`crate::door::Door`], local or
//! remote) and `airlock keys …` (the operator's key maintenance, local).

use std::io::Read;
use std::process::ExitCode;

use airlock_service::Caller;
use clap::Subcommand;

use crate::common::{Paths, err, fail, with_door, with_service};

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Store a new version of a secret; the value is read from stdin, never
    /// argv (prompted for without echo on a terminal).
    Set {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Metadata only: name, version, updated, used by, last used.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a secret.
    Rm {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn secrets(paths: &Paths, cmd: &SecretsCommand) -> ExitCode {
    with_door(paths, async |door| match cmd {
        SecretsCommand::Set { name, json } => {
            let mut value = Vec::new();
            let typed = std::io::IsTerminal::is_terminal(&std::io::stdin());
            if typed {
                // Typed by a person: prompted for, not echoed.
                match crate::term::read_secret(&format!("Value of {name}: ")) {
                    Ok(v) => value = v.into_bytes(),
                    Err(e) => return err(e),
                }
            }
            // One byte over the limit is enough to refuse an oversized value.
            let limit = airlock_protocol::secrets::MAX_SECRET_BYTES as u64 + 1024;
            if !typed && let Err(e) = std::io::stdin().take(limit).read_to_end(&mut value) {
                return err(format!("cannot read the value from stdin: {e}"));
            }
            if value.last() == Some(&b'\n') {
                value.pop();
            }
            match door.put_secret(name, value).await {
                Ok(s) if *json => {
                    println!("{}", serde_json::to_value(&s).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(s) => {
                    println!("{} version {}", s.name, s.version);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        SecretsCommand::List { json } => match door.list_secrets().await {
            Ok(list) => {
                if *json {
                    println!("{}", serde_json::to_value(&list).unwrap_or_default());
                } else {
                    for s in list.secrets {
                        println!(
                            "{:<32} v{:<4} used by: {}",
                            s.name,
                            s.version,
                            s.used_by.join(", ")
                        );
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        SecretsCommand::Rm { name, json } => match door.delete_secret(name).await {
            Ok(()) => {
                if *json {
                    println!("{}", serde_json::json!({"name": name, "deleted": true}));
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    })
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Install a new KEK version (old versions still decrypt).
    Rotate,
    /// Move every data key to the newest KEK version (resumable).
    Rewrap,
    /// Retire a KEK version (rewrap first; data still under it then fails).
    Retire {
        #[arg(value_name = "VERSION")]
        kek_version: u32,
    },
    /// Accept a legitimately restored backup: reset the high-water marks to
    /// the database's versions (audited).
    AcceptRestore,
}

pub fn keys(paths: &Paths, cmd: &KeysCommand, json: bool) -> ExitCode {
    with_service(paths, async |svc| {
        let op = Caller::operator(&svc.config().workers_workspace);
        match cmd {
            KeysCommand::Rotate => match svc.rotate_kek(&op) {
                Ok(v) if json => {
                    println!("{}", serde_json::json!({"kek_version": v}));
                    ExitCode::SUCCESS
                }
                Ok(v) => {
                    println!("kek version {v} is current");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
            KeysCommand::Rewrap => {
                let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
                match svc
                    .rewrap_data_keys(&op, |done, total| {
                        if tty {
                            eprint!("\rrewrapped {done}/{total}");
                        }
                    })
                    .await
                {
                    Ok(r) => {
                        if tty {
                            eprintln!();
                        }
                        if json {
                            println!(
                                "{}",
                                serde_json::json!({"data_keys": r.data_keys, "kek_version": r.kek_version})
                            );
                            return ExitCode::SUCCESS;
                        }
                        println!(
                            "rewrapped {} data key(s) to kek version {}",
                            r.data_keys, r.kek_version
                        );
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                }
            }
            KeysCommand::Retire { kek_version } => match svc.retire_kek(&op, *kek_version) {
                Ok(()) if json => {
                    println!("{}", serde_json::json!({"retired": kek_version}));
                    ExitCode::SUCCESS
                }
                Ok(()) => {
                    println!("kek version {kek_version} retired");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
            KeysCommand::AcceptRestore => match svc.accept_restore(&op).await {
                Ok(n) if json => {
                    println!("{}", serde_json::json!({"changes": n}));
                    ExitCode::SUCCESS
                }
                Ok(n) => {
                    println!("high-water marks reset ({n} change(s)); audited");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            },
        }
    })
}
