//! `airlock models …`: the workspace's model profiles (AGT-2), through the
//! [`crate::door::Door`] (local or remote). A profile is TOML or JSON in a
//! file; it names a credential channel of the operator's egress policy (or
//! a keyless base URL), never a key.

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_protocol::models::PutModelProfile;
use clap::Subcommand;

use crate::common::{Paths, err, fail, with_door};

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Create or replace a profile from a TOML (or .json) file.
    Put {
        name: String,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The workspace's profiles.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One profile, as stored (JSON; `--json` prints it on one line).
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a profile (agents that name it then end `model_profile_missing`).
    Rm {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// A profile file as JSON: `.json` as is, anything else as TOML.
fn read_profile(path: &PathBuf) -> Result<serde_json::Value, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > 64 * 1024 {
        return Err(format!("{}: a profile is at most 64 KiB", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
    } else {
        let v: toml::Value = toml::from_str(&text)
            .map_err(|e| format!("{}: not TOML: {}", path.display(), e.message()))?;
        serde_json::to_value(v).map_err(|e| e.to_string())
    }
}

pub fn models(paths: &Paths, cmd: &ModelsCommand) -> ExitCode {
    with_door(paths, async |door| match cmd {
        ModelsCommand::Put { name, file, json } => {
            let profile = match read_profile(file) {
                Ok(p) => p,
                Err(e) => return err(e),
            };
            match door
                .put_model_profile(name, &PutModelProfile { profile })
                .await
            {
                Ok(p) if *json => {
                    println!("{}", serde_json::to_value(&p).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(p) => {
                    println!("{} stored", p.name);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        ModelsCommand::List { json } => match door.list_model_profiles().await {
            Ok(list) => {
                if *json {
                    println!("{}", serde_json::to_value(&list).unwrap_or_default());
                } else {
                    for p in list.profiles {
                        let s = |k: &str| {
                            p.profile
                                .get(k)
                                .and_then(|v| v.as_str())
                                .unwrap_or("-")
                                .to_string()
                        };
                        let via = if s("channel") != "-" {
                            format!("channel {}", s("channel"))
                        } else {
                            s("base_url")
                        };
                        println!(
                            "{:<24} {:<20} {:<32} {}",
                            p.name,
                            s("format"),
                            s("model"),
                            via
                        );
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ModelsCommand::Show { name, json } => match door.get_model_profile(name).await {
            Ok(p) if *json => {
                println!("{}", serde_json::to_value(&p).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(p) => {
                println!("{}", serde_json::to_string_pretty(&p).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ModelsCommand::Rm { name, json } => match door.delete_model_profile(name).await {
            Ok(()) if *json => {
                println!("{}", serde_json::json!({"name": name, "deleted": true}));
                ExitCode::SUCCESS
            }
            Ok(()) => {
                println!("{name} deleted");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    })
}
