//! Exporting a workspace (DUR-7): everything the workspace owns, as files an
//! operator hands over or keeps, written by the operator on the server's
//! machine (like `validate`; never over HTTP or MCP). The rows are those a
//! deletion would remove (`airlock_store::WORKSPACE_TABLES`, checked against
//! the schema), so export and deletion cover the same data.
//!
//! ```text
//! <out>/workspace.json            the workspace's row
//! <out>/tables/<table>.jsonl      every row it owns, one JSON object per line
//! <out>/audit.jsonl               its audit chain, then its signed checkpoints
//! <out>/blobs/sha256/<aa>/<hex>   every artifact and upload it names, rehashed on copy
//! <out>/manifest.json             every file above with its size and SHA-256
//! ```
//!
//! Withheld: sealed secret values, wrapped data keys, API key and plan token hashes
//! (`airlock_store::EXPORT_WITHHELD`); secrets appear by name and version.
//! The export is one audit event (`workspace.exported`), appended after the
//! chain was written out.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, Store, WORKSPACE_TABLES};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreResultExt};
use crate::maintenance::Maintenance;

/// One exported file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportedFile {
    /// Relative to the export's folder.
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// Rows, for a table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// What `export_workspace` wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportOutcome {
    pub workspace: String,
    pub out: PathBuf,
    pub files: Vec<ExportedFile>,
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal(e.to_string())
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::InvalidRequest,
        format!("{}: {e}", path.display()),
    )
}

fn new_file(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io(path, e))
}

fn mkdir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| io(path, e))
}

fn describe(out: &Path, rel: &str, rows: Option<u64>) -> Result<ExportedFile> {
    let path = out.join(rel);
    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
    Ok(ExportedFile {
        path: rel.to_string(),
        size: bytes.len() as u64,
        sha256: airlock_store::hex(&Sha256::digest(&bytes)),
        rows,
    })
}

impl Maintenance {
    /// Writes `workspace`'s export into `out`, which must not exist (see
    /// the module docs). A deleted workspace exports what is left: its row
    /// and its audit chain.
    pub async fn export_workspace(&self, workspace: &str, out: &Path) -> Result<ExportOutcome> {
        let store = Store::open(self.url()).await.svc()?;
        let Some(row) = store.workspace_row(workspace).await.svc()? else {
            return Err(Error::new(ErrorCode::NotFound, "no such workspace"));
        };
        if std::fs::symlink_metadata(out).is_ok() {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                format!("{} exists; name a new folder", out.display()),
            ));
        }
        mkdir(&out.join("tables"))?;
        let mut files = Vec::new();
        let mut f = new_file(&out.join("workspace.json"))?;
        f.write_all(&serde_json::to_vec_pretty(&row).map_err(internal)?)
            .map_err(|e| io(out, e))?;
        files.push(describe(out, "workspace.json", None)?);

        let mut digests = BTreeSet::new();
        for table in WORKSPACE_TABLES {
            let rel = format!("tables/{table}.jsonl");
            let mut w = std::io::BufWriter::new(new_file(&out.join(&rel))?);
            let n = store
                .export_rows(table, workspace, |v| {
                    if matches!(*table, "artifacts" | "uploads")
                        && let Some(d) = v.get("digest").and_then(|d| d.as_str())
                    {
                        digests.insert(d.to_string());
                    }
                    serde_json::to_writer(&mut w, &v)?;
                    w.write_all(b"\n")
                })
                .await
                .svc()?;
            w.flush().map_err(|e| io(out, e))?;
            drop(w);
            files.push(describe(out, &rel, Some(n))?);
        }

        let lines = store.audit_lines(workspace).await.svc()?;
        let chain = lines.len() as u64;
        let text = crate::audit::join_lines(lines, self.checkpoints().lines(workspace)?);
        new_file(&out.join("audit.jsonl"))?
            .write_all(text.as_bytes())
            .map_err(|e| io(out, e))?;
        files.push(describe(out, "audit.jsonl", Some(chain))?);

        let blobs = self.blob_store()?;
        for d in &digests {
            let rel = format!("blobs/sha256/{}/{d}", d.get(..2).unwrap_or("xx"));
            let dest = out.join(&rel);
            if let Some(parent) = dest.parent() {
                mkdir(parent)?;
            }
            // Rehashed as it is copied (and, from a shared bucket, as it is
            // fetched): a damaged blob fails the export.
            blobs
                .copy_out(d, &dest, u64::MAX)
                .await
                .map_err(|e| Error::new(ErrorCode::Internal, format!("blob {d}: {e}")))?;
            files.push(describe(out, &rel, None)?);
        }

        let manifest = serde_json::json!({
            "format": "airlock-workspace-export-v1",
            "workspace": row,
            "exported_at": airlock_store::rfc3339(airlock_store::now_ms()),
            "withheld": airlock_store::EXPORT_WITHHELD
                .iter()
                .map(|(t, c)| format!("{t}.{c}"))
                .collect::<Vec<_>>(),
            "files": files,
        });
        new_file(&out.join("manifest.json"))?
            .write_all(&serde_json::to_vec_pretty(&manifest).map_err(internal)?)
            .map_err(|e| io(out, e))?;
        let rec =
            AuditRecord::system("workspace.exported", None).with_metadata(serde_json::json!({
                "out": out.display().to_string(),
                "files": files.len(),
                "audit_events": chain,
            }));
        store.audit(workspace, rec).await.svc()?;
        store.pool().close().await;
        Ok(ExportOutcome {
            workspace: workspace.to_string(),
            out: out.to_path_buf(),
            files,
        })
    }
}
