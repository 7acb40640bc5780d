//! The `airlock` binary: parses the command line, wires the libraries
//! together and renders results. No business logic lives here.

mod iam_cmd;
mod proxy_cmd;
mod runs_cmd;
mod sandbox_cmd;
mod term;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Airlock: run AI agents and automation scripts on your own machines; the
/// agent can use the model, but it cannot have the key.
#[derive(Debug, Parser)]
#[command(name = "airlock", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    paths: runs_cmd::Paths,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run commands inside the airlock sandbox.
    Sandbox {
        #[command(subcommand)]
        command: sandbox_cmd::SandboxCommand,
    },
    /// Run the egress proxy standalone, or check URLs against a policy.
    Proxy(proxy_cmd::ProxyArgs),
    /// Start everything on defaults: HTTP API, queue, executor, reaper.
    Up(runs_cmd::UpArgs),
    /// Run a worker through the full pipeline and print the outcome.
    Run(runs_cmd::RunArgs),
    /// Store a single-use, expiring plan for a worker and input.
    Plan(runs_cmd::PlanArgs),
    /// List, inspect, follow and cancel runs.
    Runs {
        #[command(subcommand)]
        command: runs_cmd::RunsCommand,
    },
    /// Worker bundles.
    Worker {
        #[command(subcommand)]
        command: runs_cmd::WorkerCommand,
    },
    /// The tamper-evident audit log.
    Audit {
        #[command(subcommand)]
        command: runs_cmd::AuditCommand,
    },
    /// Write-only secrets (values from stdin).
    Secrets {
        #[command(subcommand)]
        command: runs_cmd::SecretsCommand,
    },
    /// Key encryption keys: rotate, rewrap, accept a restored backup.
    Keys {
        #[command(subcommand)]
        command: runs_cmd::KeysCommand,
    },
    /// Sign in to a server and store an API key for `--remote` commands.
    Login(iam_cmd::LoginArgs),
    /// Revoke the stored API key and forget it.
    Logout,
    /// Operator tasks on the server's own database.
    Admin {
        #[command(subcommand)]
        command: iam_cmd::AdminCommand,
    },
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
        Command::Up(a) => runs_cmd::up(&cli.paths, &a),
        Command::Run(a) => runs_cmd::run(&cli.paths, &a),
        Command::Plan(a) => runs_cmd::plan(&cli.paths, &a),
        Command::Runs { command } => runs_cmd::runs(&cli.paths, &command),
        Command::Worker { command } => runs_cmd::worker(&command),
        Command::Audit { command } => runs_cmd::audit(&cli.paths, &command),
        Command::Secrets { command } => runs_cmd::secrets(&cli.paths, &command),
        Command::Keys { command } => runs_cmd::keys(&cli.paths, &command),
        Command::Login(a) => iam_cmd::login(&a),
        Command::Logout => iam_cmd::logout(),
        Command::Admin { command } => iam_cmd::admin(&cli.paths, &command),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
