//! `airlock recover` (DUR-6), the file half: what an interrupted
//! publication or run leaves in the data directory is moved to a quarantine
//! with its reason, never deleted and never re-run. (The run half —
//! leases of dead holders, then the reaper's DUR-2 rules — is
//! [`crate::Service::recover_startup`], which `airlock recover` calls first.)
//!
//! Candidates:
//! - `artifacts/tmp/<pid>-<nanos>-<n>.tmp` whose writer process is gone
//!   (`interrupted_publication`): staging that never became a blob. A file
//!   whose writer is alive, or whose name does not say who wrote it, is
//!   left.
//! - `runs/<id>/` of a run that has ended (`run_folder_of_ended_run`) or
//!   that no longer exists (`run_folder_without_run`: a retention pass or a
//!   workspace deletion removed it): the executor removes the folder when a
//!   run ends, so one left behind is a leftover. A live run's folder is
//!   left.
//! - `artifacts/sha256/<aa>/<digest>` whose bytes no longer hash to its
//!   name (`corrupted_blob`): every local blob is rehashed. With an S3 blob
//!   store the local copy is only this node's cache: it is removed instead
//!   (`corrupted_cache_copy`, state `dropped`) and fetched again, checked,
//!   from the bucket when it is next needed.
//!
//! Moves go to `quarantine/<id>/files/<relative path>` with
//! `RENAME_NOREPLACE` (a symbolic link is moved as a link, never followed);
//! `quarantine/<id>/manifest.json` lists each entry with its reason, and
//! the quarantine is one audit event (`recover.quarantined`). Nothing is
//! ever deleted here: an operator looks, then removes the folder.
//!
//! A dry run (`--dry-run`) plans the same moves and makes none; it reads
//! the database read-only ([`Store::open_read_only`]), as `validate` does.

use std::path::{Path, PathBuf};

use airlock_files::trash;
use airlock_protocol::Error;
use airlock_store::{AuditRecord, Store};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreResultExt};
use crate::maintenance::Maintenance;

/// The quarantine's folder in the data directory.
pub const QUARANTINE_DIR: &str = "quarantine";

/// One thing recover moved (or, in a dry run, would move).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    /// Relative to the data directory.
    pub path: String,
    pub reason: String,
    /// `moved`, `dropped` (a damaged cache copy removed), `planned` (dry
    /// run) or `refused` (with `error`).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `recover_files` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoverOutcome {
    pub dry_run: bool,
    /// The quarantine folder's manifest, when anything was moved.
    pub manifest: Option<PathBuf>,
    pub entries: Vec<Quarantined>,
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal(e.to_string())
}

/// Whether the staging file `name` (`<pid>-<nanos>-<n>.tmp`) has a living
/// writer; a name that says no pid counts as living (left alone).
fn writer_alive(name: &str) -> bool {
    let Some(pid) = name
        .strip_suffix(".tmp")
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return true;
    };
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The names in `dir`, sorted; none when it cannot be read (not there).
fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

impl Maintenance {
    /// Finds leftovers (see the module docs) and, unless `dry_run`, moves
    /// them to a new quarantine folder.
    pub async fn recover_files(&self, dry_run: bool) -> Result<RecoverOutcome> {
        // A dry run reads the database as `validate` and `gc`'s plan do:
        // read-only, nothing migrated or created.
        let store = if dry_run {
            Store::open_read_only(self.url()).await
        } else {
            Store::open(self.url()).await
        }
        .svc()?;
        let data = self.data_dir().to_path_buf();
        let mut plan: Vec<(String, &'static str)> = Vec::new();
        for n in sorted_names(&data.join("artifacts/tmp")) {
            if !writer_alive(&n) {
                plan.push((format!("artifacts/tmp/{n}"), "interrupted_publication"));
            }
        }
        let cache_only = self.has_bucket();
        let local = airlock_files::ArtifactStore::at(&data.join("artifacts"));
        let listed = local.blobs().map(|l| l.blobs).unwrap_or_default();
        for (digest, _, _) in listed {
            // An unreadable blob is left for validate to report.
            if local.verify(&digest).ok() == Some(false) {
                let rel = format!("artifacts/sha256/{}/{digest}", &digest[..2]);
                plan.push((
                    rel,
                    if cache_only {
                        "corrupted_cache_copy"
                    } else {
                        "corrupted_blob"
                    },
                ));
            }
        }
        for n in sorted_names(&data.join("runs")) {
            let ended = match store.run_state_anywhere(&n).await.svc()? {
                None => Some("run_folder_without_run"),
                Some(s) => airlock_protocol::RunState::parse(&s)
                    .filter(|s| s.is_terminal())
                    .map(|_| "run_folder_of_ended_run"),
            };
            if let Some(reason) = ended {
                plan.push((format!("runs/{n}"), reason));
            }
        }
        if dry_run || plan.is_empty() {
            store.pool().close().await;
            return Ok(RecoverOutcome {
                dry_run,
                manifest: None,
                entries: plan
                    .into_iter()
                    .map(|(path, reason)| Quarantined {
                        path,
                        reason: reason.into(),
                        state: "planned".into(),
                        error: None,
                    })
                    .collect(),
            });
        }
        let id = airlock_store::random_id("q");
        let root = data.join(QUARANTINE_DIR).join(&id);
        trash::make_dirs(&root.join("files")).map_err(internal)?;
        let mut entries = Vec::new();
        for (path, reason) in plan {
            let (state, error) = if reason == "corrupted_cache_copy" {
                match std::fs::remove_file(data.join(&path)) {
                    Ok(()) => ("dropped", None),
                    Err(e) => ("refused", Some(e.to_string())),
                }
            } else {
                match trash::put_back(&data.join(&path), &root.join("files").join(&path)) {
                    Ok(()) => ("moved", None),
                    Err(e) => ("refused", Some(e.to_string())),
                }
            };
            entries.push(Quarantined {
                path,
                reason: reason.into(),
                state: state.into(),
                error,
            });
        }
        let manifest = root.join("manifest.json");
        let doc = serde_json::json!({"id": id, "entries": entries});
        let bytes = serde_json::to_vec_pretty(&doc).map_err(internal)?;
        trash::write_atomic(&manifest, &bytes).map_err(internal)?;
        let moved = entries.iter().filter(|e| e.state == "moved").count();
        let dropped = entries.iter().filter(|e| e.state == "dropped").count();
        let rec = AuditRecord::system("recover.quarantined", None)
            .with_result(if moved + dropped == entries.len() {
                "ok"
            } else {
                "partial"
            })
            .with_metadata(serde_json::json!({
                "manifest": manifest.display().to_string(),
                "moved": moved,
                "dropped": dropped,
                "refused": entries.len() - moved - dropped,
                "reasons": entries.iter().map(|e| e.reason.clone()).collect::<Vec<_>>(),
            }));
        store
            .audit(airlock_store::DEFAULT_WORKSPACE, rec)
            .await
            .svc()?;
        store.pool().close().await;
        Ok(RecoverOutcome {
            dry_run,
            manifest: Some(manifest),
            entries,
        })
    }
}
