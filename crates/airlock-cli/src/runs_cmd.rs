//! `airlock run`, `airlock plan` and `airlock runs …`: each written once
//! against the [`Door`], so it works on the local database or, with
//! `--remote`, against a server, through the same service methods.

use std::io::Write;
use std::process::ExitCode;

use airlock_protocol::runs::{
    CreatePlan, ListRuns, ResolveRun, RetryRun, Run, RunDetail, RunEvent, RunResolution, RunState,
};
use clap::{Args, Subcommand};

use crate::common::{Paths, err, fail, parse_input, with_door};
use crate::door::Door;

/// Exit status of `airlock run`: 0 succeeded, 1 ended otherwise, 125 airlock error.
fn run_exit(state: RunState) -> ExitCode {
    if state == RunState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Worker id (omit with --plan).
    #[arg(required_unless_present = "plan")]
    worker: Option<String>,
    /// Input as JSON, or @FILE.
    #[arg(long, default_value = "{}")]
    input: String,
    /// Execute exactly this plan (from `airlock plan`).
    #[arg(long, conflicts_with = "worker")]
    plan: Option<String>,
    /// Idempotency key: the same key and request return the original run.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Print the run as one JSON object.
    #[arg(long)]
    json: bool,
    /// Print log lines as they arrive.
    #[arg(long)]
    follow: bool,
}

/// Prints a `log` event's text to stdout or stderr as the workload wrote it.
fn print_log(e: &RunEvent) {
    if e.kind != "log" {
        return;
    }
    let text = e.data["text"].as_str().unwrap_or("");
    if e.data["stream"] == "stderr" {
        eprint!("{text}");
    } else {
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
}

pub fn run(paths: &Paths, a: &RunArgs) -> ExitCode {
    with_door(paths, async |door| {
        let started = match (&a.plan, &a.worker) {
            (Some(token), _) => door.run_plan(token).await.map(|run| (run, true)),
            (None, Some(worker)) => {
                let input = match parse_input(&a.input) {
                    Ok(i) => i,
                    Err(e) => return err(e),
                };
                door.create_run(worker, input, a.idempotency_key.clone())
                    .await
                    .map(|s| (s.run, s.created))
            }
            (None, None) => return err("give a worker id or --plan"),
        };
        let (run, created) = match started {
            Ok(x) => x,
            Err(e) => return fail(&e),
        };
        let id = run.id.clone();
        let progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
        if progress {
            eprintln!(
                "airlock: {id} {} ({})",
                run.worker_id,
                if !created {
                    "existing run"
                } else if run.state == RunState::AwaitingApproval {
                    "waiting for a person to approve it: `airlock approvals list --run` shows the request"
                } else {
                    "queued"
                }
            );
        }
        let clock = std::time::Instant::now();
        // A spinner while the run is under way: only on a terminal, and
        // not while the log is printed as it comes.
        let spinner = (progress && created && !a.follow).then(|| {
            let s = indicatif::ProgressBar::new_spinner();
            s.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            s.set_message(format!("{id} {}", run.worker_id));
            s.enable_steady_tick(std::time::Duration::from_millis(120));
            s
        });
        let waited = wait(&door, &id, created, a.follow).await;
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        if let Err(e) = waited {
            return fail(&e);
        }
        let detail = match door.run_detail(&id).await {
            Ok(d) => d,
            Err(e) => return fail(&e),
        };
        if progress {
            eprintln!(
                "airlock: {id} {} after {:.1} s",
                detail.run.state.as_str(),
                clock.elapsed().as_secs_f64()
            );
        }
        print_run(&detail, a.json);
        run_exit(detail.run.state)
    })
}

/// Waits until a new run is over, printing its log as it comes with
/// `follow`. An idempotent replay answers the original run as it is now.
async fn wait(
    door: &Door,
    id: &str,
    created: bool,
    follow: bool,
) -> Result<(), airlock_protocol::Error> {
    if !created {
        return Ok(());
    }
    let mut print = |e: &RunEvent| print_log(e);
    let sink: Option<&mut (dyn FnMut(&RunEvent) + Send)> =
        if follow { Some(&mut print) } else { None };
    door.wait(id, sink).await
}

/// A retried or resolved run: `ID STATE`, or the run as JSON.
fn print_settled(r: Result<Run, airlock_protocol::Error>, json: bool) -> ExitCode {
    match r {
        Ok(run) if json => {
            println!("{}", serde_json::to_value(&run).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(run) => {
            println!("{} {}", run.id, run.state.as_str());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn print_run(d: &RunDetail, json: bool) {
    if json {
        println!("{}", serde_json::to_value(d).unwrap_or_default());
        return;
    }
    let run = &d.run;
    let code = run
        .error_code
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    println!(
        "{} {} {}{}",
        run.id,
        run.worker_id,
        run.state.as_str(),
        code
    );
    if let Some(m) = &run.error_message {
        println!("  {m}");
    }
    if let Some(o) = &run.outputs
        && o.as_object().is_some_and(|o| !o.is_empty())
    {
        println!("  outputs: {o}");
    }
    for a in &d.artifacts {
        println!(
            "  artifact {} ({} bytes, {}, sha256 {})",
            a.name, a.size, a.media_type, a.digest
        );
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    worker: String,
    #[arg(long, default_value = "{}")]
    input: String,
    /// Seconds until the token expires (at most 7 days).
    #[arg(long, default_value_t = 900)]
    ttl: u64,
}

pub fn plan(paths: &Paths, a: &PlanArgs) -> ExitCode {
    with_door(paths, async |door| {
        let input = match parse_input(&a.input) {
            Ok(i) => i,
            Err(e) => return err(e),
        };
        let req = CreatePlan {
            worker: a.worker.clone(),
            input,
            ttl_s: Some(a.ttl),
        };
        match door.create_plan(&req).await {
            Ok(p) => {
                println!("{}", serde_json::to_value(&p).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        }
    })
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Newest first.
    List {
        /// Only runs in this state (queued, running, succeeded, failed, …).
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    Get {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a run's log (and, with --follow, wait for more until it ends).
    Logs {
        id: String,
        #[arg(long)]
        follow: bool,
        /// Every event as one JSON line (seq, kind, data) instead of the
        /// log text, followed until the run ends.
        #[arg(long)]
        json: bool,
    },
    /// Cancel (idempotent): queued or waiting never starts, running is killed.
    Cancel {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Retry a run whose outcome is `unknown` (DUR-2): it is queued again
    /// for a new attempt. Only `unknown` runs; audited with who and why.
    Retry {
        id: String,
        /// Why (recorded in the audit log).
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Settle by hand a run whose outcome is `unknown` (`--as succeeded|
    /// failed`), or with `--action ID` an agent action in
    /// `outcome_unknown` (`--as executed|not_executed`; the run resumes
    /// without running it again). Audited with who and why.
    Resolve {
        id: String,
        /// The agent action to settle instead of the run.
        #[arg(long)]
        action: Option<String>,
        /// A run: succeeded or failed; an action: executed or not_executed.
        #[arg(long = "as", value_parser = ["succeeded", "failed", "executed", "not_executed"])]
        outcome: String,
        /// Why (required; recorded on the run and in the audit log).
        #[arg(long)]
        reason: String,
        #[arg(long)]
        json: bool,
    },
    /// An agent run's actions (tool calls), in order.
    Actions {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Settle an action whose outcome is unknown (after a crash): it
    /// succeeded, it failed, or re-run it after a new approval.
    Settle {
        #[arg(long)]
        json: bool,
        run: String,
        action: String,
        #[arg(long, value_parser = ["succeeded", "failed", "rerun"])]
        outcome: String,
        #[arg(long)]
        note: Option<String>,
    },
}

pub fn runs(paths: &Paths, cmd: &RunsCommand) -> ExitCode {
    with_door(paths, async |door| match cmd {
        RunsCommand::List {
            state,
            limit,
            cursor,
            json,
        } => {
            let state = match state.as_deref().map(RunState::parse) {
                Some(None) => return err("unknown --state"),
                Some(s) => s,
                None => None,
            };
            let q = ListRuns {
                state,
                limit: Some(*limit),
                cursor: cursor.clone(),
                ..Default::default()
            };
            let list = match door.list_runs(&q).await {
                Ok(l) => l,
                Err(e) => return fail(&e),
            };
            if *json {
                println!("{}", serde_json::to_value(&list).unwrap_or_default());
            } else {
                for r in &list.runs {
                    println!(
                        "{}  {:<12} {:<10} {}",
                        r.id,
                        r.worker_id,
                        r.state.as_str(),
                        r.error_code.as_deref().unwrap_or_default()
                    );
                }
                if let Some(c) = &list.next_cursor {
                    eprintln!("airlock: more with --cursor {c}");
                }
            }
            ExitCode::SUCCESS
        }
        RunsCommand::Get { id, json } => match door.run_detail(id).await {
            Ok(d) => {
                print_run(&d, *json);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        RunsCommand::Logs { id, follow, json } => {
            if *json {
                // Every event as one JSON line (seq, kind, data), followed
                // until the run ends: the same document locally and
                // remotely (an event stream carries no timestamps).
                let mut print = |e: &RunEvent| {
                    let line = serde_json::json!({"seq": e.seq, "kind": e.kind, "data": e.data});
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                };
                match door.follow(id, 0, &mut print).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(&e),
                }
            } else if *follow {
                let mut print = |e: &RunEvent| print_log(e);
                match door.follow(id, 0, &mut print).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(&e),
                }
            } else {
                match door.run_log(id).await {
                    Ok(text) => {
                        print!("{text}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                }
            }
        }
        RunsCommand::Actions { id, json } => match door.list_actions(id).await {
            Ok(list) if *json => {
                println!("{}", serde_json::to_value(&list).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(list) => {
                for a in &list.actions {
                    println!(
                        "{:>3} {}  {:<17} {:<12} attempt {}  sha256 {}",
                        a.seq,
                        a.id,
                        a.state.as_str(),
                        a.kind,
                        a.attempt,
                        a.payload_hash
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        RunsCommand::Settle {
            json,
            run,
            action,
            outcome,
            note,
        } => {
            use airlock_protocol::actions::{SettleAction, Settlement};
            let outcome = match outcome.as_str() {
                "succeeded" => Settlement::Succeeded,
                "failed" => Settlement::Failed,
                _ => Settlement::Rerun,
            };
            let b = SettleAction {
                outcome,
                note: note.clone(),
            };
            match door.settle_action(run, action, &b).await {
                Ok(a) if *json => {
                    println!("{}", serde_json::to_value(&a).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(a) => {
                    println!("{} {}", a.id, a.state.as_str());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        RunsCommand::Retry { id, reason, json } => {
            let b = RetryRun {
                reason: reason.clone(),
            };
            print_settled(door.retry_run(id, &b).await, *json)
        }
        RunsCommand::Resolve {
            id,
            action: Some(action),
            outcome,
            reason,
            json,
        } => {
            use airlock_protocol::actions::{SettleAction, Settlement};
            // The journal's own settlement (`runs settle`), named for a
            // person: executed = it took effect, not_executed = it did not.
            let outcome = match outcome.as_str() {
                "executed" => Settlement::Succeeded,
                "not_executed" => Settlement::Failed,
                _ => return err("an action is resolved --as executed or --as not_executed"),
            };
            let b = SettleAction {
                outcome,
                note: Some(reason.clone()),
            };
            match door.settle_action(id, action, &b).await {
                Ok(a) if *json => {
                    println!("{}", serde_json::to_value(&a).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(a) => {
                    println!("{} {}", a.id, a.state.as_str());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        RunsCommand::Resolve {
            id,
            action: None,
            outcome,
            reason,
            json,
        } => {
            let outcome = match outcome.as_str() {
                "succeeded" => RunResolution::Succeeded,
                "failed" => RunResolution::Failed,
                _ => return err("a run is resolved --as succeeded or --as failed"),
            };
            let b = ResolveRun {
                outcome,
                reason: reason.clone(),
            };
            print_settled(door.resolve_run(id, &b).await, *json)
        }
        RunsCommand::Cancel { id, json } => match door.cancel_run(id).await {
            Ok(c) if *json => {
                println!("{}", serde_json::to_value(&c).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(c) => {
                println!("{} {}", c.id, c.state.as_str());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    })
}
