//! `airlock validate`, `airlock gc` and `airlock recover` (DUR-6): the
//! operator's checks, cleanup and recovery of the local data directory and
//! database, through
//! [`airlock_service::Maintenance`]. Local only (never `--remote`, never
//! MCP): gc moves and deletes files on this machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use airlock_service::{EntryState, GcOutcome, Level, Maintenance, Severity, ValidateReport};
use clap::{Args, Subcommand, ValueEnum};

use crate::common::{Paths, block_on, err, fail};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LevelArg {
    /// Database integrity, schema version, key directory permissions.
    Quick,
    /// + audit chains with checkpoints, rows against blobs, orphans.
    Standard,
    /// + every blob rehashed against its digest.
    Full,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[arg(long, value_enum, default_value = "standard")]
    pub level: LevelArg,
    /// `{"level", "findings": [{"kind", "object", "detail", "severity"}],
    /// "notes", "blobs", "references", "workspaces"}` instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GcArgs {
    #[command(subcommand)]
    pub command: Option<GcCommand>,
    /// Move the candidates into `trash/<id>/` under the data directory,
    /// with a manifest (without it: a dry run that changes nothing).
    #[arg(long)]
    pub apply: bool,
    /// With an S3 blob store: how long ago a blob no row names must have
    /// been written to be a candidate (a publication writes its blob
    /// before the row that names it).
    #[arg(long, env = "AIRLOCK_GC_GRACE_SECS", default_value_t = 3600)]
    pub grace_secs: u64,
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// Only list what would be quarantined; settle no run.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The workspace's id (`ws_…`).
    pub workspace: String,
    /// A folder that does not exist yet.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum GcCommand {
    /// Finish an interrupted `gc --apply` from its manifest.
    Resume { manifest: PathBuf },
    /// Put everything a manifest moved back, byte for byte (never over an
    /// existing file).
    Restore { manifest: PathBuf },
    /// Delete a trash area, only once its recovery window has passed.
    Purge {
        manifest: PathBuf,
        /// The recovery window in days.
        #[arg(long, env = "AIRLOCK_GC_RECOVERY_DAYS", default_value_t = 7,
              value_parser = clap::value_parser!(u64).range(1..))]
        recovery_days: u64,
    },
}

fn maintenance(paths: &Paths) -> Maintenance {
    Maintenance::new(&paths.url(), &paths.config())
}

pub fn validate(paths: &Paths, a: &ValidateArgs) -> ExitCode {
    if paths.remote {
        return err("validate checks this machine's data directory: run it without --remote");
    }
    let level = match a.level {
        LevelArg::Quick => Level::Quick,
        LevelArg::Standard => Level::Standard,
        LevelArg::Full => Level::Full,
    };
    block_on(
        async move || match maintenance(paths).validate(level).await {
            Ok(r) => {
                print_report(&r, a.json);
                if r.clean() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => fail(&e),
        },
    )
}

fn print_report(r: &ValidateReport, json: bool) {
    if json {
        println!("{}", serde_json::to_value(r).unwrap_or_default());
        return;
    }
    for n in &r.notes {
        eprintln!("airlock: note: {n}");
    }
    for f in &r.findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        println!("{sev} {} {}: {}", f.kind, f.object, f.detail);
    }
    println!(
        "{}: {} findings ({} blobs, {} references, {} workspaces checked)",
        if r.clean() { "clean" } else { "not clean" },
        r.findings.len(),
        r.blobs,
        r.references,
        r.workspaces
    );
}

pub fn gc(paths: &Paths, a: &GcArgs) -> ExitCode {
    if paths.remote {
        return err("gc works on this machine's data directory: run it without --remote");
    }
    block_on(async move || {
        let m = maintenance(paths).with_grace(Duration::from_secs(a.grace_secs));
        let (what, res) = match &a.command {
            None if a.apply => ("moved", m.gc_apply().await),
            None => ("would move", m.gc_plan().await),
            Some(GcCommand::Resume { manifest }) => ("moved", m.gc_resume(manifest).await),
            Some(GcCommand::Restore { manifest }) => ("restored", m.gc_restore(manifest).await),
            Some(GcCommand::Purge {
                manifest,
                recovery_days,
            }) => (
                "purged",
                m.with_recovery_window(Duration::from_secs(recovery_days.saturating_mul(86_400)))
                    .gc_purge(manifest)
                    .await,
            ),
        };
        match res {
            Ok(out) => {
                print_gc(&out, what, a.json);
                // A purge that deleted its area is done, whatever the
                // apply it followed refused.
                let incomplete = (what != "purged" && out.any_refused())
                    || (what == "restored"
                        && out.entries.iter().any(|e| e.state == EntryState::Moved));
                if incomplete {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => fail(&e),
        }
    })
}

fn print_gc(out: &GcOutcome, what: &str, json: bool) {
    if json {
        println!("{}", serde_json::to_value(out).unwrap_or_default());
        return;
    }
    for n in &out.notes {
        eprintln!("airlock: note: {n}");
    }
    for e in &out.entries {
        let state = match e.state {
            EntryState::Planned => "candidate",
            EntryState::Moved => "moved",
            EntryState::Refused => "refused",
            EntryState::Restored => "restored",
        };
        let detail = e
            .detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        println!("{state} {} {} bytes {}{detail}", e.path, e.size, e.reason);
    }
    let bytes: u64 = out.entries.iter().map(|e| e.size).sum();
    println!("{what}: {} entries, {bytes} bytes", out.entries.len());
    if let Some(m) = &out.manifest {
        println!("manifest: {}", m.display());
    }
}

/// `airlock recover`: first the runs (leases held by dead processes of this
/// node expire; the reaper's DUR-2 rules settle them: requeued before the
/// workload started, `unknown` after, never re-run), then the files (see
/// `airlock_service::recover`).
pub fn recover(paths: &Paths, a: &RecoverArgs) -> ExitCode {
    if paths.remote {
        return err("recover works on this machine's data directory: run it without --remote");
    }
    block_on(async move || {
        let mut settled = Vec::new();
        if !a.dry_run {
            let svc = match crate::common::open_with(paths, paths.config()).await {
                Ok(s) => s,
                Err(e) => return err(e),
            };
            match svc.recover_startup().await {
                Ok(r) => settled = r,
                Err(e) => return err(format!("settling runs failed: {e}")),
            }
        }
        let out = match maintenance(paths).recover_files(a.dry_run).await {
            Ok(o) => o,
            Err(e) => return fail(&e),
        };
        let refused = out.entries.iter().any(|e| e.state == "refused");
        if a.json {
            let runs: Vec<_> = settled
                .iter()
                .map(|(id, st)| serde_json::json!({"id": id, "state": st.as_str()}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"runs": runs, "files": serde_json::to_value(&out).unwrap_or_default()})
            );
        } else {
            for (id, st) in &settled {
                println!("run {id}: {}", st.as_str());
            }
            for e in &out.entries {
                match &e.error {
                    Some(why) => println!("{} {} ({}): {why}", e.state, e.path, e.reason),
                    None => println!("{} {} ({})", e.state, e.path, e.reason),
                }
            }
            if let Some(m) = &out.manifest {
                println!("quarantine manifest: {}", m.display());
            }
            if settled.is_empty() && out.entries.is_empty() {
                println!("nothing to recover");
            }
        }
        if refused {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// `airlock export-workspace WS --out DIR` (DUR-7; local only).
pub fn export(paths: &Paths, a: &ExportArgs) -> ExitCode {
    if paths.remote {
        return err(
            "export-workspace reads this machine's data directory: run it without --remote",
        );
    }
    block_on(async move || {
        match maintenance(paths)
            .export_workspace(&a.workspace, &a.out)
            .await
        {
            Ok(o) if a.json => {
                println!("{}", serde_json::to_value(&o).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(o) => {
                let rows: u64 = o.files.iter().filter_map(|f| f.rows).sum();
                println!(
                    "exported {} to {}: {} file(s), {rows} row(s) and audit events; manifest.json lists each with its SHA-256",
                    o.workspace,
                    o.out.display(),
                    o.files.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        }
    })
}
