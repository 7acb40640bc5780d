//! The `airlock` binary: parses the command line, wires the concrete
//! parts together (the only crate that does), and renders results. Each
//! command calls the service layer — in this process, or on a server with
//! `--remote` — through [`door::Door`]; no rule lives here.

mod approvals_cmd;
mod audit_cmd;
mod client;
mod common;
mod doctor_cmd;
mod door;
mod logging;
mod login_cmd;
mod maint_cmd;
mod mcp_cmd;
mod models_cmd;
mod proxy_cmd;
mod retention_cmd;
mod runs_cmd;
mod sandbox_cmd;
mod secrets_cmd;
mod term;
mod up_cmd;
mod worker_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Run AI agents and automation scripts on your own machines: the agent can
/// use the model, but it cannot have the key.
///
/// airlock runs worker scripts, the commands of AI agents, and any command
/// given to `airlock sandbox exec`, in a Linux sandbox with no network and
/// no credential of its own. Its only way out is a proxy made for that run,
/// which reaches only the hosts you allow and adds your API keys on the
/// trusted side, so the code never holds them. An agent acts only through
/// typed tool calls that pass a policy and, when risky, a person's approval
/// of exactly that call. Runs are queued and survive crashes, and every
/// state change is written to a tamper-evident audit log; `airlock stop`
/// halts everything of a workspace at once.
///
/// Start with `airlock up` (the HTTP API, MCP at /mcp, queue and executor
/// on 127.0.0.1:8000, the workers in ./workers), then `airlock run WORKER`;
/// or run one command contained with `airlock sandbox exec -- CMD`.
// The doc comment above is the help text (first paragraph for `-h`, all of
// it for `--help`); the crate's `description` must not replace it.
#[derive(Debug, Parser)]
#[command(name = "airlock", version, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    paths: common::Paths,
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
    Up(up_cmd::UpArgs),
    /// Start one role of the server: `--role web|worker|all` (CLI-1,
    /// OPS-2); `all` is `airlock up`.
    Serve(up_cmd::ServeArgs),
    /// Run a worker through the full pipeline and print the outcome.
    Run(runs_cmd::RunArgs),
    /// Store a single-use, expiring plan for a worker and input.
    Plan(runs_cmd::PlanArgs),
    /// List, inspect, follow and cancel runs.
    Runs {
        #[command(subcommand)]
        command: runs_cmd::RunsCommand,
    },
    /// Approval requests: list, show (payload and hash), approve, reject;
    /// standing rules and settings.
    Approvals {
        #[command(subcommand)]
        command: approvals_cmd::ApprovalsCommand,
    },
    /// Emergency stop of the workspace: cancel what waits, kill what runs,
    /// start nothing until `airlock resume`.
    Stop {
        /// Why (recorded in the audit log).
        #[arg(long)]
        reason: Option<String>,
        /// Only show whether the workspace is stopped; change nothing.
        #[arg(long, conflicts_with = "reason")]
        show: bool,
        #[arg(long)]
        json: bool,
    },
    /// Retention per workspace: how long runs, logs, artifacts, uploads and
    /// schedule fires are kept, and a pass that removes the rest.
    Retention {
        #[command(subcommand)]
        command: retention_cmd::RetentionCommand,
    },
    /// Clear the emergency stop. Restarts nothing.
    Resume {
        #[arg(long)]
        json: bool,
    },
    /// Worker bundles.
    Worker {
        #[command(subcommand)]
        command: worker_cmd::WorkerCommand,
        /// One JSON document instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// The tamper-evident audit log.
    Audit {
        #[command(subcommand)]
        command: audit_cmd::AuditCommand,
    },
    /// Check the database, audit chains, blobs and key directory; changes
    /// nothing (exit 1 when something is found).
    Validate(maint_cmd::ValidateArgs),
    /// Collect what nothing references (a dry run unless `--apply`), and
    /// restore or purge a trash area.
    Gc(maint_cmd::GcArgs),
    /// Settle runs a dead process left (DUR-2, without re-running them) and
    /// move what interrupted publications and runs left behind into a
    /// quarantine with reasons.
    Recover(maint_cmd::RecoverArgs),
    /// Write everything a workspace owns (rows, audit chain with
    /// checkpoints, blobs) into a new folder, with a manifest of SHA-256s.
    /// Secret values, data keys, API key and plan token hashes are withheld.
    ExportWorkspace(maint_cmd::ExportArgs),
    /// Model profiles of the workspace: where an agent's model is and
    /// which credential channel carries its key.
    Models {
        #[command(subcommand)]
        command: models_cmd::ModelsCommand,
    },
    /// Write-only secrets (values from stdin).
    Secrets {
        #[command(subcommand)]
        command: secrets_cmd::SecretsCommand,
    },
    /// Key encryption keys: rotate, rewrap, accept a restored backup.
    Keys {
        #[command(subcommand)]
        command: secrets_cmd::KeysCommand,
        /// One JSON document instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell), generated from the command definitions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write one page per command into DIR.
    Man {
        /// Write airlock.1 and airlock-COMMAND.1 … here instead.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Check this host and data directory; say what to fix (exit 1 when
    /// the default containment level cannot be reached).
    Doctor(doctor_cmd::DoctorArgs),
    /// MCP for local hosts: a stdio relay to a server's `/mcp`, and the
    /// configuration snippet for each host.
    Mcp {
        #[command(subcommand)]
        command: mcp_cmd::McpCommand,
    },
    /// Sign in to a server and store an API key for `--remote` commands.
    Login(login_cmd::LoginArgs),
    /// Revoke the stored API key and forget it.
    Logout {
        #[arg(long)]
        json: bool,
    },
    /// Operator tasks on the server's own database.
    Admin {
        #[command(subcommand)]
        command: login_cmd::AdminCommand,
    },
}

fn main() -> ExitCode {
    // Must run before anything else: when this process is a sandbox init,
    // this call never returns.
    airlock_sandbox::init::main_if_requested();
    // An idle server gives back each login's 19 MiB Argon2 block
    // (BENCHMARKS.md: "Server memory").
    airlock_sandbox::return_large_blocks_to_the_system();
    // And memory freed by one thread is not kept in an arena of its own
    // (an idle server held 5 MiB more after 100 runs).
    airlock_sandbox::one_malloc_arena();

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
        Command::Up(a) => up_cmd::up(&cli.paths, &a),
        Command::Serve(a) => up_cmd::serve_role(&cli.paths, &a),
        Command::Run(a) => runs_cmd::run(&cli.paths, &a),
        Command::Plan(a) => runs_cmd::plan(&cli.paths, &a),
        Command::Runs { command } => runs_cmd::runs(&cli.paths, &command),
        Command::Approvals { command } => approvals_cmd::approvals(&cli.paths, &command),
        Command::Stop { reason, show, json } => approvals_cmd::stop(&cli.paths, reason, show, json),
        Command::Resume { json } => approvals_cmd::resume(&cli.paths, json),
        Command::Retention { command } => retention_cmd::retention(&cli.paths, &command),
        Command::Worker { command, json } => worker_cmd::worker(&command, json),
        Command::Audit { command } => audit_cmd::audit(&cli.paths, &command),
        Command::Validate(a) => maint_cmd::validate(&cli.paths, &a),
        Command::Gc(a) => maint_cmd::gc(&cli.paths, &a),
        Command::Recover(a) => maint_cmd::recover(&cli.paths, &a),
        Command::ExportWorkspace(a) => maint_cmd::export(&cli.paths, &a),
        Command::Models { command } => models_cmd::models(&cli.paths, &command),
        Command::Secrets { command } => secrets_cmd::secrets(&cli.paths, &command),
        Command::Keys { command, json } => secrets_cmd::keys(&cli.paths, &command, json),
        Command::Completions { shell } => {
            // Into a buffer first: the generator panics on a failed write
            // (a closed pipe); this answers it with an error instead.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "airlock", &mut buf);
            use std::io::Write;
            match std::io::stdout().write_all(&buf) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => common::err(e),
            }
        }
        Command::Man { out } => man(out.as_deref()),
        Command::Doctor(a) => doctor_cmd::doctor(&cli.paths, &a),
        Command::Mcp { command } => mcp_cmd::mcp(&command),
        Command::Login(a) => login_cmd::login(&a),
        Command::Logout { json } => login_cmd::logout(json),
        Command::Admin { command } => login_cmd::admin(&cli.paths, &command),
    }
}

/// The man page of `airlock` (and, with a folder, of every command), from
/// the same definitions clap parses with.
fn man(out: Option<&std::path::Path>) -> ExitCode {
    let cmd = <Cli as clap::CommandFactory>::command();
    let Some(dir) = out else {
        let mut buf = Vec::new();
        if let Err(e) = clap_mangen::Man::new(cmd).render(&mut buf) {
            return common::err(e);
        }
        use std::io::Write;
        return match std::io::stdout().write_all(&buf) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => common::err(e),
        };
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        return common::err(format!("{}: {e}", dir.display()));
    }
    let mut pages = vec![("airlock".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        pages.push((format!("airlock-{}", sub.get_name()), sub.clone()));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        if let Err(e) = clap_mangen::Man::new(page).title(name).render(&mut buf) {
            return common::err(e);
        }
        if let Err(e) = std::fs::write(&path, buf) {
            return common::err(format!("{}: {e}", path.display()));
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
