//! The `airlock` binary: parses the command line, wires the libraries
//! together and renders results. No business logic lives here.

mod proxy_cmd;
mod sandbox_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Airlock: run AI agents and automation scripts on your own machines; the
/// agent can use the model, but it cannot have the key.
#[derive(Debug, Parser)]
#[command(name = "airlock", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run commands inside the airlock sandbox.
    Sandbox {
        #[command(subcommand)]
        command: sandbox_cmd::SandboxCommand,
    },
    /// Run the egress proxy standalone, or check URLs against a policy.
    Proxy(proxy_cmd::ProxyArgs),
}

fn main() -> ExitCode {
    // Must run before anything else: when this process is a sandbox init,
    // this call never returns.
    airlock_sandbox::init::main_if_requested();

    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // Usage errors are one line; `--help` has the rest.
            let rendered = e.render().to_string();
            let summary: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
                .collect();
            let summary = summary.join(" ");
            eprintln!(
                "airlock: {} (see --help)",
                summary.trim_start_matches("error: ")
            );
            return ExitCode::from(airlock_sandbox::EXIT_SANDBOX_FAILED as u8);
        }
    };
    match cli.command {
        Command::Sandbox { command } => sandbox_cmd::run(command),
        Command::Proxy(args) => proxy_cmd::run(args),
    }
}
