//! `airlock proxy` (NET-8): the egress proxy standalone, and `proxy check`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use airlock_egress::policy::EnvAndFiles;
use airlock_egress::proxy::{LogSink, WriterLog};
use airlock_egress::{Egress, Policy, Resolve, ScriptedResolver, SystemResolver};
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProxyArgs {
    #[command(subcommand)]
    command: Option<ProxyCommand>,
    /// Policy file (TOML). Missing or invalid: every request is denied with
    /// reason `no_policy`.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Address to listen on (loopback only: the proxy adds credentials).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:3128")]
    listen: String,
    /// Where each decision and closed connection goes, one JSON line each:
    /// `-` (stdout), a file (appended), or `none` (to measure what the
    /// log costs; the decisions are made the same way). Lines are written
    /// in batches by a thread of their own, a moment behind the decision;
    /// a proxy killed by a signal loses what was queued at that instant.
    #[arg(long, value_name = "-|FILE|none", default_value = "-")]
    log: String,
}

#[derive(Debug, Subcommand)]
pub enum ProxyCommand {
    /// Print the decision for each URL as one JSON line, without connecting.
    Check {
        #[arg(long, value_name = "FILE")]
        policy: PathBuf,
        /// Decide on names only (the policy's `hosts` map still answers).
        #[arg(long)]
        no_resolve: bool,
        #[arg(required = true, value_name = "URL")]
        urls: Vec<String>,
    },
}

pub fn resolver() -> Arc<dyn Resolve> {
    match SystemResolver::new() {
        Ok(r) => Arc::new(r),
        // No resolver configuration: every lookup fails, names are denied.
        Err(_) => Arc::new(ScriptedResolver::new()),
    }
}

pub fn run(args: ProxyArgs) -> ExitCode {
    match args.command {
        Some(ProxyCommand::Check {
            policy,
            no_resolve,
            urls,
        }) => check(&policy, no_resolve, &urls),
        None => serve(args.policy, &args.listen, &args.log),
    }
}

fn check(policy: &std::path::Path, no_resolve: bool, urls: &[String]) -> ExitCode {
    let loaded = Policy::load(policy, &EnvAndFiles);
    if let Err(e) = &loaded {
        eprintln!("airlock: no_policy: {e}");
    }
    let resolver: Arc<dyn Resolve> = if no_resolve {
        Arc::new(ScriptedResolver::new())
    } else {
        resolver()
    };
    let egress = match Egress::new(loaded, resolver, Arc::new(airlock_egress::proxy::NullLog)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("airlock: cannot start the proxy runtime: {e}");
            return ExitCode::from(125);
        }
    };
    let mut out = std::io::stdout().lock();
    for url in urls {
        let _ = writeln!(out, "{}", egress.check(url, !no_resolve));
    }
    ExitCode::SUCCESS
}

fn serve(policy: Option<PathBuf>, listen: &str, log: &str) -> ExitCode {
    let addr: std::net::SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(_) => {
            eprintln!("airlock: --listen {listen:?} is not an address (e.g. 127.0.0.1:3128)");
            return ExitCode::from(125);
        }
    };
    if !addr.ip().is_loopback() {
        eprintln!(
            "airlock: --listen must be a loopback address: the proxy adds credentials for anyone who reaches it"
        );
        return ExitCode::from(125);
    }
    let loaded = match &policy {
        Some(p) => Policy::load(p, &EnvAndFiles),
        None => Err(airlock_egress::PolicyError::Read {
            path: "(none)".into(),
            error: "no --policy given".into(),
        }),
    };
    if let Err(e) = &loaded {
        eprintln!("airlock: warning: no_policy: {e}; every request will be denied");
    }
    let log: Arc<dyn LogSink> = match log {
        "-" => Arc::new(WriterLog::buffered(Box::new(std::io::stdout()))),
        "none" => Arc::new(airlock_egress::proxy::NullLog),
        path => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => Arc::new(WriterLog::buffered(Box::new(f))),
            Err(e) => {
                eprintln!("airlock: cannot open the log {path}: {e}");
                return ExitCode::from(125);
            }
        },
    };
    let egress = match Egress::new(loaded, resolver(), log) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("airlock: cannot start the proxy runtime: {e}");
            return ExitCode::from(125);
        }
    };
    let listener = match std::net::TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("airlock: cannot listen on {addr}: {e}");
            return ExitCode::from(125);
        }
    };
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    println!(
        "{}",
        serde_json::json!({"event": "listening", "address": local})
    );
    match egress.serve_forever(listener, "standalone") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airlock: proxy failed: {e}");
            ExitCode::from(125)
        }
    }
}
