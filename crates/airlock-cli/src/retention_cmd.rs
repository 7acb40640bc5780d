//! `airlock retention show|set|apply` (DUR-7): a workspace's retention, on
//! the local service as the operator or on a server with the stored key.

use std::process::ExitCode;

use airlock_protocol::retention::{Retention, RetentionApplied};
use clap::Subcommand;

use crate::common::{Paths, fail, with_door};

#[derive(Debug, Subcommand)]
pub enum RetentionCommand {
    /// The workspace's retention (days per kind of material).
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Replace the workspace's retention. A kind not named is kept for
    /// ever. Nothing is removed until the next pass (`apply`, or hourly
    /// under `airlock up`).
    Set {
        /// Runs that ended this many days ago, with what derives from them
        /// (events, artifact records, transcript, actions, approvals).
        /// `unknown` runs wait for a person and are kept.
        #[arg(long, value_name = "DAYS")]
        runs_days: Option<u64>,
        /// Log lines of runs that ended this many days ago.
        #[arg(long, value_name = "DAYS")]
        logs_days: Option<u64>,
        /// Artifact records of runs that ended this many days ago.
        #[arg(long, value_name = "DAYS")]
        artifacts_days: Option<u64>,
        /// Uploads made this many days ago that no unfinished run names.
        #[arg(long, value_name = "DAYS")]
        uploads_days: Option<u64>,
        /// Schedule fires made this many days ago (each schedule's newest
        /// stays).
        #[arg(long, value_name = "DAYS")]
        fires_days: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Delete the workspace ID (yours, against a server) with everything it
    /// owns: runs, uploads, secrets, members, keys, settings. Its audit
    /// chain stays. Refused while a run of it has not ended.
    DeleteWorkspace {
        id: String,
        /// The workspace's name, typed again.
        #[arg(long, value_name = "NAME")]
        confirm: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove now what the retention lets go of (audited). The bytes of
    /// artifacts and uploads no record names any more are `airlock gc`'s.
    Apply {
        /// Only count what would be removed.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

fn days(v: Option<u64>) -> String {
    v.map_or_else(|| "kept".to_string(), |d| format!("{d} days"))
}

fn show(r: &Retention) {
    println!("runs       {}", days(r.runs_days));
    println!("logs       {}", days(r.logs_days));
    println!("artifacts  {}", days(r.artifacts_days));
    println!("uploads    {}", days(r.uploads_days));
    println!("fires      {}", days(r.fires_days));
}

fn applied(a: &RetentionApplied) {
    let r = &a.removed;
    println!(
        "{} {} run(s), {} log line(s), {} artifact record(s), {} upload(s), {} schedule fire(s)",
        if a.dry_run { "would remove" } else { "removed" },
        r.runs,
        r.log_events,
        r.artifacts,
        r.uploads,
        r.fires
    );
    if !a.dry_run && (r.runs > 0 || r.artifacts > 0 || r.uploads > 0) {
        println!("blobs no record names any more are freed by `airlock gc --apply`");
    }
}

/// Prints an answer as one JSON document or as text; an error as the CLI
/// does everywhere.
fn answer<T: serde::Serialize>(
    r: Result<T, airlock_protocol::Error>,
    json: bool,
    text: impl FnOnce(&T),
) -> ExitCode {
    match r {
        Ok(v) if json => {
            println!("{}", serde_json::to_value(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(v) => {
            text(&v);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

pub fn retention(paths: &Paths, cmd: &RetentionCommand) -> ExitCode {
    with_door(paths, async |door| match cmd {
        RetentionCommand::Show { json } => answer(door.get_retention().await, *json, show),
        RetentionCommand::Set {
            runs_days,
            logs_days,
            artifacts_days,
            uploads_days,
            fires_days,
            json,
        } => {
            let want = Retention {
                runs_days: *runs_days,
                logs_days: *logs_days,
                artifacts_days: *artifacts_days,
                uploads_days: *uploads_days,
                fires_days: *fires_days,
            };
            answer(door.set_retention(&want).await, *json, show)
        }
        RetentionCommand::DeleteWorkspace { id, confirm, json } => {
            answer(door.delete_workspace(id, confirm).await, *json, |d| {
                let rows: u64 = d.removed.values().sum();
                println!(
                    "deleted workspace {} ({rows} rows); its audit chain stays",
                    d.id
                );
                println!("blobs no record names any more are freed by `airlock gc --apply`");
            })
        }
        RetentionCommand::Apply { dry_run, json } => {
            answer(door.apply_retention(*dry_run).await, *json, applied)
        }
    })
}
