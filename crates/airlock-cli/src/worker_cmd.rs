//! `airlock worker validate DIR`: lints a bundle offline (RUN-2).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Lint a bundle offline (RUN-2): exit 0 and a summary, or exit 1 and one line per problem.
    Validate { dir: PathBuf },
}

pub fn worker(cmd: &WorkerCommand, json: bool) -> ExitCode {
    match cmd {
        WorkerCommand::Validate { dir } => match airlock_worker::load_bundle(dir) {
            Ok(b) if json => {
                let m = &b.manifest;
                println!(
                    "{}",
                    serde_json::json!({
                        "valid": true,
                        "id": b.id.as_str(),
                        "inputs": m.inputs.len(),
                        "outputs": m.outputs.len(),
                        "problems": [],
                    })
                );
                ExitCode::SUCCESS
            }
            Err(e) if json => {
                let problems: Vec<_> = e
                    .problems()
                    .into_iter()
                    .map(|p| serde_json::json!({"field": p.field, "message": p.message}))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"valid": false, "problems": problems})
                );
                ExitCode::from(1)
            }
            Ok(b) => {
                let m = &b.manifest;
                println!(
                    "ok {} ({} inputs, {} outputs, timeout {} s, memory {} MiB)",
                    b.id.as_str(),
                    m.inputs.len(),
                    m.outputs.len(),
                    m.limits.timeout_s,
                    m.limits.memory_mb
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                for p in e.problems() {
                    println!("{p}");
                }
                ExitCode::from(1)
            }
        },
    }
}
