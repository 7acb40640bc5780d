//! `airlock validate` and `airlock gc` (DUR-6, DUR-7): what an operator runs
//! against a data directory and its database, without a server, the vault
//! or the workers (like [`crate::AuditLog`]). Local only: no destructive
//! retention operation is reachable over HTTP or MCP.
//!
//! - [`Maintenance::validate`] never writes: the database is opened
//!   read-only ([`Store::open_read_only`]), the artifact store is read where
//!   it is ([`ArtifactStore::at`]: nothing created), checkpoints are read.
//!   `quick`: database integrity, schema version, the key directory's
//!   permissions. `standard`: + every workspace's audit chain against its
//!   signed checkpoints, every artifact and upload row against its blob
//!   (present, same size), blobs no row names (orphans), stray entries.
//!   `full`: + every blob rehashed against its name.
//! - [`Maintenance::gc_plan`] lists candidates with reasons (a dry run);
//!   [`Maintenance::gc_apply`] writes a manifest to `trash/<id>/manifest.json`
//!   *first* (every entry `planned`, with the identity and SHA-256 checked
//!   when planning), then moves each entry with
//!   [`airlock_files::trash::move_checked`] and rewrites the manifest after
//!   each move (atomic, fsync'd). An interrupted apply is finished by
//!   [`Maintenance::gc_resume`]: `planned` entries are moved (or recognised
//!   as already moved: gone from their place and present, same inode, in the
//!   trash), `moved` ones are left. [`Maintenance::gc_restore`] puts moved
//!   entries back (never over an existing name) and rehashes them;
//!   [`Maintenance::gc_purge`] deletes a trash area only once its recovery
//!   window (default [`DEFAULT_RECOVERY_WINDOW`]) has passed on the
//!   configured clock. Apply, resume, restore and purge are each one audit
//!   event (`gc.applied`, `gc.restored`, `gc.purged`).
//!
//! With an S3 blob store the same steps work on the bucket: candidates are
//! the bucket's blobs no row names, last written longer ago than the grace
//! ([`DEFAULT_GC_GRACE`]: a publication writes its blob before its row);
//! the manifest stays local and names the bucket, its entries are bucket
//! keys; a move copies the object to `<prefix>/trash/<id>/…`, checks the
//! copy's size, deletes the original and this node's cached copy; restore
//! is a conditional copy back, rehashed; purge deletes the bucket's trash
//! area (see [`crate::blobs`]).
//!
//! What is collected: orphan blobs last written longer ago than the grace
//! ([`DEFAULT_GC_GRACE`], `--grace-secs`: a publication writes its blob
//! before the row that names it, so a young orphan may be one under way) —
//! among them those whose last row a
//! retention pass or a workspace deletion removed (`crate::retention`: rows
//! go there, bytes here). A blob some row names is never a candidate, and gc asks the
//! database again right before each move. Residual race, documented: a
//! publication of the same content *while* gc moves that blob finds the blob
//! present and adds a row naming it; `airlock validate` then reports the
//! missing blob and `gc restore` puts it back. Run gc while the server is
//! quiet.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_files::ArtifactStore;
use airlock_files::trash::{self, Identity, TrashError};
use airlock_iam::Clock;
use airlock_protocol::Error;
use airlock_store::{AuditRecord, SCHEMA_VERSION, Store};
use serde::{Deserialize, Serialize};

use crate::checkpoints::{Checkpoints, verify_with_checkpoints};
use crate::config::Config;
use crate::error::{Result, StoreResultExt};

/// How long a trash area is kept before `gc purge` may delete it.
pub const DEFAULT_RECOVERY_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// How old a blob must be (its last write) before gc considers it.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);
/// The trash area's folder in the data directory.
pub const TRASH_DIR: &str = "trash";
const MANIFEST: &str = "manifest.json";
const FILES: &str = "files";
/// Where blobs are, relative to the data directory.
const BLOB_PREFIX: &str = "artifacts/sha256/";

/// How much `validate` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Quick,
    Standard,
    Full,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something is lost or damaged.
    Error,
    /// Something is out of place (an orphan, a stray file) but nothing is lost.
    Warning,
}

/// One thing `validate` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable: `database_unreachable`, `database_integrity`, `schema_version`,
    /// `key_directory`, `key_file`, `audit_chain`, `missing_blob`,
    /// `size_mismatch`, `orphan_blob`, `stray_entry`, `digest_mismatch`,
    /// `blob_store_unreachable`.
    pub kind: String,
    /// What it is about (a path, `run_id/name`, an upload id, a workspace).
    pub object: String,
    pub detail: String,
    pub severity: Severity,
}

/// What `validate` did and found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidateReport {
    pub level: Level,
    pub findings: Vec<Finding>,
    /// What could not be checked (e.g. no signed checkpoint yet), not a finding.
    pub notes: Vec<String>,
    pub blobs: u64,
    pub references: u64,
    pub workspaces: u64,
}

impl ValidateReport {
    pub fn clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Where an entry of a gc manifest is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryState {
    /// Recorded, not yet moved.
    Planned,
    /// In the trash area.
    Moved,
    /// Not moved: it changed since it was checked, or a row names it now.
    Refused,
    /// Put back by `gc restore`.
    Restored,
}

/// One candidate of a gc manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcEntry {
    /// Relative to the data directory (`artifacts/sha256/<aa>/<digest>`),
    /// or, in a manifest of a bucket, the blob's key there
    /// (`<prefix>/sha256/<aa>/<digest>`).
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// `orphan_blob`.
    pub reason: String,
    /// What the file was when it was checked (local blobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// When the object was last written, in unix ms, as the bucket said
    /// when it was planned (blobs in a bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ms: Option<i64>,
    pub state: EntryState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A trash area's manifest (`trash/<id>/manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcManifest {
    pub version: u32,
    pub id: String,
    pub created_at_ms: i64,
    /// The bucket (`s3://bucket/prefix`) whose blobs the entries are, by
    /// key; absent: files of the data directory. What a bucket's gc moved
    /// is in the bucket, under `<prefix>/trash/<id>/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    pub entries: Vec<GcEntry>,
}

/// What a gc step did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GcOutcome {
    /// The manifest written or read (absent for a dry run, or an apply with
    /// nothing to do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<PathBuf>,
    pub entries: Vec<GcEntry>,
    /// Notes on what was not considered (no expiry on uploads, no retention).
    pub notes: Vec<String>,
}

impl GcOutcome {
    /// Whether an entry was refused (a step that did not fully succeed).
    pub fn any_refused(&self) -> bool {
        self.entries.iter().any(|e| e.state == EntryState::Refused)
    }
}

/// The operator's maintenance of one data directory and database.
#[derive(Debug, Clone)]
pub struct Maintenance {
    url: String,
    data_dir: PathBuf,
    key_dir: PathBuf,
    checkpoints: Checkpoints,
    clock: Arc<dyn Clock>,
    window: Duration,
    /// How old a bucket's blob must be to be a gc candidate.
    grace: Duration,
    /// The shared bucket, when blobs are kept in one (DUR-5).
    blob_store: Option<crate::blobs::S3Location>,
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal(e.to_string())
}

fn finding(
    kind: &str,
    object: impl Into<String>,
    detail: impl Into<String>,
    s: Severity,
) -> Finding {
    Finding {
        kind: kind.to_string(),
        object: object.into(),
        detail: detail.into(),
        severity: s,
    }
}

impl Maintenance {
    pub fn new(url: &str, cfg: &Config) -> Self {
        Self {
            url: url.to_string(),
            data_dir: cfg.data_dir.clone(),
            key_dir: cfg.key_dir.clone(),
            checkpoints: Checkpoints::new(cfg.key_dir.clone(), cfg.checkpoint_dir.clone()),
            clock: cfg.clock.clone(),
            window: DEFAULT_RECOVERY_WINDOW,
            grace: DEFAULT_GC_GRACE,
            blob_store: cfg.blob_store.clone(),
        }
    }

    /// How long a trash area must wait before `purge` deletes it.
    pub fn with_recovery_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How old a blob must be (its last write, in the data directory or the
    /// bucket) before gc considers it: a publication writes the blob before
    /// the row that names it, so a young blob no row names may be one being
    /// published.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The database this maintenance works on.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Where the workspaces' signed checkpoints are.
    pub(crate) fn checkpoints(&self) -> &Checkpoints {
        &self.checkpoints
    }

    /// The blob store the data lives in: the local directory, with the
    /// shared bucket when one is configured.
    pub(crate) fn blob_store(&self) -> Result<crate::blobs::BlobStore> {
        crate::blobs::BlobStore::new(self.artifacts(), self.blob_store.as_ref()).map_err(internal)
    }

    /// Whether blobs are kept in a bucket (the local store is then a cache).
    pub(crate) fn has_bucket(&self) -> bool {
        self.blob_store.is_some()
    }

    /// The data directory this maintenance works on.
    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn artifacts(&self) -> ArtifactStore {
        ArtifactStore::at(&self.data_dir.join("artifacts"))
    }

    // ------------------------------------------------------------ validate

    /// Checks at `level`; writes nothing.
    pub async fn validate(&self, level: Level) -> Result<ValidateReport> {
        let mut r = ValidateReport {
            level,
            findings: Vec::new(),
            notes: Vec::new(),
            blobs: 0,
            references: 0,
            workspaces: 0,
        };
        self.check_key_dir(&mut r.findings);
        let store = match Store::open_read_only(&self.url).await {
            Ok(s) => s,
            Err(e) => {
                r.findings.push(finding(
                    "database_unreachable",
                    "database",
                    e.to_string(),
                    Severity::Error,
                ));
                return Ok(r);
            }
        };
        let out = self.validate_with(&store, level, &mut r).await;
        store.pool().close().await;
        out.map(|()| r)
    }

    async fn validate_with(
        &self,
        store: &Store,
        level: Level,
        r: &mut ValidateReport,
    ) -> Result<()> {
        for p in store.integrity_problems().await.svc()? {
            r.findings.push(finding(
                "database_integrity",
                "database",
                p,
                Severity::Error,
            ));
        }
        let v = store.schema_version().await.svc()?;
        if v != SCHEMA_VERSION {
            r.findings.push(finding(
                "schema_version",
                "database",
                format!("schema version {v}, this build expects {SCHEMA_VERSION}"),
                Severity::Error,
            ));
        }
        if level == Level::Quick {
            return Ok(());
        }

        // The audit chains, against their signed checkpoints.
        let mut all = store.audit_workspaces().await.svc()?;
        all.extend(self.checkpoints.workspaces()?);
        all.sort();
        all.dedup();
        r.workspaces = all.len() as u64;
        for ws in all {
            let v = verify_with_checkpoints(store, &ws, &self.checkpoints).await?;
            for w in &v.warnings {
                r.notes.push(format!("{ws}: {w}"));
            }
            if !v.ok {
                let detail = match (&v.first_bad_seq, &v.checkpoint_error) {
                    (Some(seq), _) => format!("first bad sequence {seq}"),
                    (None, Some(e)) => format!("checkpoint: {e}"),
                    (None, None) => "does not verify".to_string(),
                };
                r.findings
                    .push(finding("audit_chain", ws, detail, Severity::Error));
            }
        }

        if let Some(loc) = &self.blob_store {
            return self.validate_bucket(store, level, loc, r).await;
        }
        // Rows against blobs, blobs against rows.
        let artifacts = self.artifacts();
        let refs = store.blob_refs().await.svc()?;
        r.references = refs.len() as u64;
        let mut named = BTreeSet::new();
        for b in &refs {
            named.insert(b.digest.clone());
            let object = format!("{} {}", b.kind, b.object);
            match artifacts.path(&b.digest) {
                None => r.findings.push(finding(
                    "missing_blob",
                    object,
                    format!("no blob {}", b.digest),
                    Severity::Error,
                )),
                Some(p) => {
                    let size = std::fs::symlink_metadata(&p)
                        .map(|m| m.len())
                        .map_err(internal)?;
                    if i64::try_from(size).ok() != Some(b.size) {
                        r.findings.push(finding(
                            "size_mismatch",
                            object,
                            format!("row says {} bytes, blob {} has {size}", b.size, b.digest),
                            Severity::Error,
                        ));
                    }
                }
            }
        }
        let airlock_files::BlobListing { blobs, stray } = match artifacts.blobs() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(internal(format!("cannot list the artifact store: {e}"))),
        };
        r.blobs = blobs.len() as u64;
        for s in stray {
            r.findings.push(finding(
                "stray_entry",
                format!("artifacts/{s}"),
                "not a blob where blobs are kept",
                Severity::Warning,
            ));
        }
        for (digest, _, _) in &blobs {
            if !named.contains(digest) {
                r.findings.push(finding(
                    "orphan_blob",
                    blob_rel(digest),
                    "no artifact or upload row names it (airlock gc collects it)",
                    Severity::Warning,
                ));
            }
        }
        if level == Level::Full {
            for (digest, _, _) in &blobs {
                let ok = artifacts.verify(digest).map_err(internal)?;
                if !ok {
                    r.findings.push(finding(
                        "digest_mismatch",
                        blob_rel(digest),
                        "its bytes no longer hash to its name",
                        Severity::Error,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Rows against the bucket's blobs and the bucket's blobs against rows,
    /// like the local checks; `full` rehashes every object as it streams
    /// through [`crate::blobs::BlobStore::verify`]. The local directory is
    /// then only this node's cache and is not checked.
    async fn validate_bucket(
        &self,
        store: &Store,
        level: Level,
        loc: &crate::blobs::S3Location,
        r: &mut ValidateReport,
    ) -> Result<()> {
        let blobs_store =
            crate::blobs::BlobStore::new(self.artifacts(), Some(loc)).map_err(internal)?;
        let (blobs, stray) = match blobs_store.remote_blobs().await {
            Some(Ok(x)) => x,
            Some(Err(crate::blobs::BlobError::Remote { location, detail })) => {
                r.findings.push(finding(
                    "blob_store_unreachable",
                    location,
                    format!("the bucket could not be listed: {detail}"),
                    Severity::Error,
                ));
                return Ok(());
            }
            Some(Err(e)) => return Err(internal(e)),
            None => (Vec::new(), Vec::new()),
        };
        let sizes: std::collections::BTreeMap<&str, u64> =
            blobs.iter().map(|(d, s, _)| (d.as_str(), *s)).collect();
        let refs = store.blob_refs().await.svc()?;
        r.references = refs.len() as u64;
        r.blobs = blobs.len() as u64;
        r.notes.push(format!("blobs are kept in {loc}"));
        let mut named = BTreeSet::new();
        for b in &refs {
            named.insert(b.digest.clone());
            let object = format!("{} {}", b.kind, b.object);
            match sizes.get(b.digest.as_str()) {
                None => r.findings.push(finding(
                    "missing_blob",
                    object,
                    format!("no blob {} in {loc}", b.digest),
                    Severity::Error,
                )),
                Some(&size) if i64::try_from(size).ok() != Some(b.size) => {
                    r.findings.push(finding(
                        "size_mismatch",
                        object,
                        format!("row says {} bytes, blob {} has {size}", b.size, b.digest),
                        Severity::Error,
                    ));
                }
                Some(_) => {}
            }
        }
        for s in stray {
            r.findings.push(finding(
                "stray_entry",
                s,
                "not a blob where blobs are kept",
                Severity::Warning,
            ));
        }
        for (digest, _, _) in &blobs {
            if !named.contains(digest) {
                r.findings.push(finding(
                    "orphan_blob",
                    blob_rel(digest),
                    "no artifact or upload row names it",
                    Severity::Warning,
                ));
            }
        }
        if level == Level::Full {
            for (digest, _, _) in &blobs {
                if !blobs_store.verify(digest).await.map_err(internal)? {
                    r.findings.push(finding(
                        "digest_mismatch",
                        blob_rel(digest),
                        format!("its bytes in {loc} no longer hash to its name"),
                        Severity::Error,
                    ));
                }
            }
        }
        Ok(())
    }

    /// The key directory is 0700 and every file in it 0600 (or stricter),
    /// with no symbolic link.
    fn check_key_dir(&self, out: &mut Vec<Finding>) {
        let dir = &self.key_dir;
        let object = dir.display().to_string();
        let meta = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) => {
                out.push(finding(
                    "key_directory",
                    object,
                    e.to_string(),
                    Severity::Error,
                ));
                return;
            }
        };
        if !meta.file_type().is_dir() {
            out.push(finding(
                "key_directory",
                object,
                "not a directory",
                Severity::Error,
            ));
            return;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            out.push(finding(
                "key_directory",
                object.clone(),
                format!("mode {mode:04o}, want 0700"),
                Severity::Error,
            ));
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push(finding(
                "key_directory",
                object,
                "cannot be listed",
                Severity::Error,
            ));
            return;
        };
        let mut entries: Vec<_> = entries.filter_map(std::result::Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let path = e.path().display().to_string();
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            let mode = m.permissions().mode() & 0o777;
            if m.file_type().is_symlink() {
                out.push(finding(
                    "key_file",
                    path,
                    "a symbolic link",
                    Severity::Error,
                ));
            } else if m.file_type().is_file() && mode & 0o077 != 0 {
                out.push(finding(
                    "key_file",
                    path,
                    format!("mode {mode:04o}, want 0600"),
                    Severity::Error,
                ));
            } else if m.file_type().is_dir() && mode & 0o077 != 0 {
                out.push(finding(
                    "key_file",
                    path,
                    format!("directory mode {mode:04o}, want 0700"),
                    Severity::Error,
                ));
            }
        }
    }

    // ------------------------------------------------------------ gc

    /// The candidates, with reasons; changes nothing.
    pub async fn gc_plan(&self) -> Result<GcOutcome> {
        let store = Store::open_read_only(&self.url).await.svc()?;
        let out = self.plan_with(&store).await;
        store.pool().close().await;
        out
    }

    async fn plan_with(&self, store: &Store) -> Result<GcOutcome> {
        let named: BTreeSet<String> = store
            .blob_refs()
            .await
            .svc()?
            .into_iter()
            .map(|b| b.digest)
            .collect();
        if self.blob_store.is_some() {
            return self.plan_bucket(&named).await;
        }
        let blobs = match self.artifacts().blobs() {
            Ok(x) => x.blobs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(internal(format!("cannot list the artifact store: {e}"))),
        };
        let cutoff = self.grace_cutoff();
        let mut entries = Vec::new();
        let mut young = 0usize;
        for (digest, path, _) in blobs {
            if named.contains(&digest) {
                continue;
            }
            let modified = std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .map_err(internal)?;
            let modified_ms = modified
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            if modified_ms > cutoff {
                young += 1;
                continue;
            }
            let identity = trash::identity(&path).map_err(internal)?;
            let sha256 = trash::sha256_file(&path).map_err(internal)?;
            entries.push(GcEntry {
                path: blob_rel(&digest),
                size: identity.size,
                sha256,
                reason: "orphan_blob".into(),
                identity: Some(identity),
                modified_ms: None,
                state: EntryState::Planned,
                detail: None,
            });
        }
        let mut notes = vec![
            "uploads carry no expiry: none is a candidate".into(),
            "no retention setting: nothing is collected by age".into(),
        ];
        notes.extend(self.young_note(young));
        Ok(GcOutcome {
            manifest: None,
            entries,
            notes,
        })
    }

    /// Blobs last written after this instant (unix ms) are left: younger
    /// than the grace.
    fn grace_cutoff(&self) -> i64 {
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        self.clock.now_ms().saturating_sub(grace_ms)
    }

    fn young_note(&self, young: usize) -> Option<String> {
        (young > 0).then(|| {
            format!(
                "{young} blob(s) no row names were written less than {} s ago and are left (a publication may be under way)",
                self.grace.as_secs()
            )
        })
    }

    /// A bucket's candidates: blobs no row names, last written longer ago
    /// than the grace (a younger one may be a publication whose row is not
    /// written yet). Their names are their digests; their bytes are
    /// rehashed when they are restored.
    async fn plan_bucket(&self, named: &BTreeSet<String>) -> Result<GcOutcome> {
        let blobs = self.blob_store()?;
        let (listed, _) = match blobs.remote_blobs().await {
            Some(x) => x.map_err(|e| e.to_error("gc could not list the bucket"))?,
            None => (Vec::new(), Vec::new()),
        };
        let cutoff = self.grace_cutoff();
        let mut entries = Vec::new();
        let mut young = 0usize;
        for (digest, size, modified) in listed {
            if named.contains(&digest) {
                continue;
            }
            if modified > cutoff {
                young += 1;
                continue;
            }
            entries.push(GcEntry {
                path: blobs.key_name(&digest).map_err(|e| e.to_error("gc"))?,
                size,
                sha256: digest,
                reason: "orphan_blob".into(),
                identity: None,
                modified_ms: Some(modified),
                state: EntryState::Planned,
                detail: None,
            });
        }
        let mut notes = vec![format!(
            "blobs are kept in {}: candidates are moved to its trash area",
            blobs
                .remote_location()
                .map(ToString::to_string)
                .unwrap_or_default()
        )];
        notes.extend(self.young_note(young));
        Ok(GcOutcome {
            manifest: None,
            entries,
            notes,
        })
    }

    /// Plans, writes the manifest, moves every candidate to the trash area
    /// and audits the step (`gc.applied`).
    pub async fn gc_apply(&self) -> Result<GcOutcome> {
        let store = Store::open(&self.url).await.svc()?;
        let plan = self.plan_with(&store).await?;
        if plan.entries.is_empty() {
            return Ok(plan);
        }
        let now = self.clock.now_ms();
        let id = format!("{now}-{}", airlock_store::random_id("gc"));
        let area = self.data_dir.join(TRASH_DIR).join(&id);
        let made = if self.blob_store.is_some() {
            trash::make_dirs(&area)
        } else {
            trash::make_dirs(&area.join(FILES))
        };
        made.map_err(internal)?;
        let mut manifest = GcManifest {
            version: 1,
            id,
            created_at_ms: now,
            bucket: self.blob_store.as_ref().map(ToString::to_string),
            entries: plan.entries,
        };
        let path = area.join(MANIFEST);
        write_manifest(&path, &manifest)?;
        let stopped = self
            .move_planned(&store, &area, &path, &mut manifest)
            .await?;
        self.audit_step(&store, "gc.applied", &path, &manifest)
            .await?;
        if let Some(e) = stopped {
            return Err(e);
        }
        Ok(GcOutcome {
            manifest: Some(path),
            entries: manifest.entries,
            notes: plan.notes,
        })
    }

    /// Finishes an interrupted apply from its manifest (`gc.applied`).
    pub async fn gc_resume(&self, manifest_path: &Path) -> Result<GcOutcome> {
        let (area, mut manifest) = self.read_manifest(manifest_path)?;
        let store = Store::open(&self.url).await.svc()?;
        let path = area.join(MANIFEST);
        let stopped = self
            .move_planned(&store, &area, &path, &mut manifest)
            .await?;
        self.audit_step(&store, "gc.applied", &path, &manifest)
            .await?;
        if let Some(e) = stopped {
            return Err(e);
        }
        Ok(GcOutcome {
            manifest: Some(path),
            entries: manifest.entries,
            notes: Vec::new(),
        })
    }

    /// Moves the entries still `planned`, rewriting the manifest after each.
    /// `Some(error)`: the bucket failed and the moves stopped there (what
    /// was done is in the manifest; the caller audits it, then fails).
    async fn move_planned(
        &self,
        store: &Store,
        area: &Path,
        path: &Path,
        manifest: &mut GcManifest,
    ) -> Result<Option<Error>> {
        let bucket = match manifest.bucket {
            Some(_) => Some(self.blob_store()?),
            None => None,
        };
        for i in 0..manifest.entries.len() {
            let e = &manifest.entries[i];
            if e.state != EntryState::Planned {
                continue;
            }
            let digest = e.sha256.clone();
            let (state, detail) = if store.digest_referenced(&digest).await.svc()? {
                (EntryState::Refused, Some("a row names it now".to_string()))
            } else if let Some(blobs) = &bucket {
                match self.move_in_bucket(blobs, &manifest.id, e).await {
                    Ok(x) => x,
                    Err(err) => {
                        manifest.entries[i].detail =
                            Some(format!("not moved yet ({}): run gc resume", err.message));
                        write_manifest(path, manifest)?;
                        return Ok(Some(err));
                    }
                }
            } else {
                let src = self.data_dir.join(&e.path);
                let dest = area.join(FILES).join(&e.path);
                match e.identity {
                    None => (
                        EntryState::Refused,
                        Some("the manifest records no identity for it".to_string()),
                    ),
                    Some(want)
                        if std::fs::symlink_metadata(&src).is_err()
                            && trash::identity(&dest).is_ok_and(|id| id == want) =>
                    {
                        // Moved before an interruption, not yet recorded.
                        (EntryState::Moved, None)
                    }
                    Some(want) => match trash::move_checked(&src, &dest, want, &e.sha256) {
                        Ok(()) => (EntryState::Moved, None),
                        Err(err) => (EntryState::Refused, Some(err.to_string())),
                    },
                }
            };
            manifest.entries[i].state = state;
            manifest.entries[i].detail = detail;
            write_manifest(path, manifest)?;
        }
        Ok(None)
    }

    /// One planned entry of a bucket's manifest: copied into the bucket's
    /// trash area and deleted from its place (an error reaching the bucket
    /// stops the apply, the manifest saying how far it got; `gc resume`
    /// goes on). Already in the trash and gone from its place: moved before
    /// an interruption. Rewritten since it was planned: refused. This
    /// node's cached copy is removed too.
    async fn move_in_bucket(
        &self,
        blobs: &crate::blobs::BlobStore,
        id: &str,
        e: &GcEntry,
    ) -> Result<(EntryState, Option<String>)> {
        let fail = |err: crate::blobs::BlobError| err.to_error("gc");
        let digest = e.sha256.as_str();
        let out = match blobs.remote_meta(digest).await.map_err(fail)? {
            None => match blobs.trash_meta(id, digest).await.map_err(fail)? {
                Some(n) if n == e.size => (EntryState::Moved, None),
                _ => (
                    EntryState::Refused,
                    Some("gone from the bucket, and not in its trash area".to_string()),
                ),
            },
            Some((size, modified)) if size != e.size || Some(modified) != e.modified_ms => (
                EntryState::Refused,
                Some("written again since it was planned".to_string()),
            ),
            Some(_) => {
                blobs.move_to_trash(id, digest).await.map_err(fail)?;
                (EntryState::Moved, None)
            }
        };
        if out.0 == EntryState::Moved {
            blobs.drop_cached(digest).map_err(fail)?;
        }
        Ok(out)
    }

    /// Puts every moved entry of a manifest back, byte for byte, never over
    /// an existing name (`gc.restored`).
    pub async fn gc_restore(&self, manifest_path: &Path) -> Result<GcOutcome> {
        let (area, mut manifest) = self.read_manifest(manifest_path)?;
        let store = Store::open(&self.url).await.svc()?;
        let path = area.join(MANIFEST);
        let bucket = match manifest.bucket {
            Some(_) => Some(self.blob_store()?),
            None => None,
        };
        for i in 0..manifest.entries.len() {
            let e = &manifest.entries[i];
            if e.state != EntryState::Moved {
                continue;
            }
            let (state, detail) = if let Some(blobs) = &bucket {
                use crate::blobs::Restored;
                let restored = match blobs.restore_from_trash(&manifest.id, &e.sha256).await {
                    Ok(r) => r,
                    Err(err) => {
                        // What was put back so far is on record.
                        self.audit_step(&store, "gc.restored", &path, &manifest)
                            .await?;
                        return Err(err.to_error("gc restore"));
                    }
                };
                match restored {
                    Restored::Done => (EntryState::Restored, None),
                    Restored::Exists => (
                        EntryState::Moved,
                        Some(format!("{}: already exists", e.path)),
                    ),
                    Restored::Damaged(h) => (
                        EntryState::Moved,
                        Some(format!(
                            "the trash copy's bytes hash to {h}; nothing was put back"
                        )),
                    ),
                }
            } else {
                let from = area.join(FILES).join(&e.path);
                let to = self.data_dir.join(&e.path);
                match trash::put_back(&from, &to) {
                    Ok(()) => match trash::sha256_file(&to) {
                        Ok(h) if h == e.sha256 => (EntryState::Restored, None),
                        Ok(h) => (
                            EntryState::Restored,
                            Some(format!("restored bytes hash to {h}")),
                        ),
                        Err(err) => (EntryState::Restored, Some(err.to_string())),
                    },
                    Err(err @ TrashError::Exists { .. }) => {
                        (EntryState::Moved, Some(err.to_string()))
                    }
                    Err(err) => (EntryState::Moved, Some(err.to_string())),
                }
            };
            manifest.entries[i].state = state;
            manifest.entries[i].detail = detail;
            write_manifest(&path, &manifest)?;
        }
        self.audit_step(&store, "gc.restored", &path, &manifest)
            .await?;
        Ok(GcOutcome {
            manifest: Some(path),
            entries: manifest.entries,
            notes: Vec::new(),
        })
    }

    /// Deletes a trash area once its recovery window has passed
    /// (`gc.purged`); before that, an error naming when it ends. A bucket's
    /// trash area is deleted from the bucket, then its local manifest.
    pub async fn gc_purge(&self, manifest_path: &Path) -> Result<GcOutcome> {
        let (area, manifest) = self.read_manifest(manifest_path)?;
        let window_ms = i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX);
        let ends = manifest.created_at_ms.saturating_add(window_ms);
        let now = self.clock.now_ms();
        if now < ends {
            return Err(Error::new(
                airlock_protocol::ErrorCode::Conflict,
                format!(
                    "the recovery window of {} ends at {}; nothing purged",
                    manifest.id,
                    airlock_store::rfc3339(ends)
                ),
            ));
        }
        if manifest
            .entries
            .iter()
            .any(|e| e.state == EntryState::Planned)
        {
            return Err(Error::new(
                airlock_protocol::ErrorCode::Conflict,
                "the apply of this manifest did not finish: run `airlock gc resume` first",
            ));
        }
        let store = Store::open(&self.url).await.svc()?;
        // The event first: a purge that fails half-way is still on record.
        self.audit_step(&store, "gc.purged", &area.join(MANIFEST), &manifest)
            .await?;
        if manifest.bucket.is_some() {
            self.blob_store()?
                .purge_trash(&manifest.id)
                .await
                .map_err(|e| e.to_error("gc purge"))?;
        }
        std::fs::remove_dir_all(&area).map_err(|e| internal(format!("{}: {e}", area.display())))?;
        trash::sync_parent(&area).map_err(internal)?;
        Ok(GcOutcome {
            manifest: None,
            entries: manifest.entries,
            notes: Vec::new(),
        })
    }

    /// Reads a manifest that must be `<data dir>/trash/<id>/manifest.json`
    /// (by its real path), with every entry a blob path — of the data
    /// directory, or, for a manifest of the configured bucket, a blob key
    /// there. A manifest of another store than the one configured is
    /// refused.
    fn read_manifest(&self, path: &Path) -> Result<(PathBuf, GcManifest)> {
        let bad = |why: &str| {
            Error::new(
                airlock_protocol::ErrorCode::InvalidRequest,
                format!("{}: {why}", path.display()),
            )
        };
        let real = std::fs::canonicalize(path).map_err(|e| bad(&e.to_string()))?;
        let trash_root = std::fs::canonicalize(self.data_dir.join(TRASH_DIR))
            .map_err(|e| bad(&e.to_string()))?;
        let area = real.parent().ok_or_else(|| bad("not in a trash area"))?;
        if real.file_name() != Some(std::ffi::OsStr::new(MANIFEST))
            || area.parent() != Some(trash_root.as_path())
        {
            return Err(bad("not a manifest of this data directory's trash area"));
        }
        let text = std::fs::read_to_string(&real).map_err(|e| bad(&e.to_string()))?;
        let m: GcManifest = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        if m.version != 1 {
            return Err(bad("unknown manifest version"));
        }
        let configured = self.blob_store.as_ref().map(ToString::to_string);
        if m.bucket != configured {
            let name =
                |b: &Option<String>| b.clone().unwrap_or_else(|| "the local directory".into());
            return Err(bad(&format!(
                "the manifest is of {}, the blob store configured is {}",
                name(&m.bucket),
                name(&configured)
            )));
        }
        let blobs = match &m.bucket {
            Some(_) => Some(self.blob_store()?),
            None => None,
        };
        for e in &m.entries {
            let ok = match &blobs {
                Some(b) => {
                    well_formed(&e.sha256)
                        && b.key_name(&e.sha256).is_ok_and(|k| k == e.path)
                        && m.id
                            .bytes()
                            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
                }
                None => {
                    let digest = e
                        .path
                        .strip_prefix(BLOB_PREFIX)
                        .and_then(|rest| rest.get(3..));
                    digest.is_some_and(|d| blob_rel(d) == e.path && d == e.sha256 && well_formed(d))
                }
            };
            if !ok {
                return Err(bad(&format!("entry {:?} is not a blob path", e.path)));
            }
        }
        Ok((area.to_path_buf(), m))
    }

    async fn audit_step(
        &self,
        store: &Store,
        event: &str,
        path: &Path,
        m: &GcManifest,
    ) -> Result<()> {
        let count = |s: EntryState| m.entries.iter().filter(|e| e.state == s).count();
        let bytes: u64 = m
            .entries
            .iter()
            .filter(|e| e.state == EntryState::Moved)
            .map(|e| e.size)
            .sum();
        let rec = AuditRecord::system(event, None)
            .with_result(
                if count(EntryState::Refused) + count(EntryState::Planned) == 0 {
                    "ok"
                } else {
                    "partial"
                },
            )
            .with_metadata(serde_json::json!({
                "manifest": path.display().to_string(),
                "id": m.id,
                "entries": m.entries.len(),
                "moved": count(EntryState::Moved),
                "refused": count(EntryState::Refused),
                "restored": count(EntryState::Restored),
                "bytes_in_trash": bytes,
                "bucket": m.bucket,
            }));
        store
            .audit(airlock_store::DEFAULT_WORKSPACE, rec)
            .await
            .svc()
    }
}

fn well_formed(d: &str) -> bool {
    d.len() == 64
        && d.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `artifacts/sha256/<aa>/<digest>`, relative to the data directory.
fn blob_rel(digest: &str) -> String {
    format!("{BLOB_PREFIX}{}/{digest}", digest.get(..2).unwrap_or(""))
}

fn write_manifest(path: &Path, m: &GcManifest) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(m).map_err(internal)?;
    trash::write_atomic(path, &bytes).map_err(internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_iam::ManualClock;

    /// A migrated SQLite database, an artifact store with one orphan, and
    /// maintenance on a manual clock.
    async fn setup() -> (Maintenance, Arc<ManualClock>, PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut cfg = Config::with_defaults(data.clone(), dir.path().join("workers"));
        let clock = Arc::new(ManualClock::new(1_800_000_000_000));
        cfg.clock = clock.clone();
        let url = format!("sqlite://{}", dir.path().join("airlock.db").display());
        Store::open(&url).await.unwrap().pool().close().await;
        let store = ArtifactStore::open(&data.join("artifacts")).unwrap();
        let (digest, _) = store.put(&b"orphan"[..], 100).unwrap();
        let blob = store.path(&digest).unwrap();
        // Written long before the manual clock's now: older than the grace
        // whatever day the test runs.
        std::fs::File::open(&blob)
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
            .unwrap();
        (Maintenance::new(&url, &cfg), clock, blob, dir)
    }

    #[tokio::test]
    async fn dur_6_purge_is_refused_until_the_recovery_window_passes_on_the_clock() {
        let (m, clock, blob, _dir) = setup().await;
        let plan = m.gc_plan().await.unwrap();
        assert_eq!(plan.entries.len(), 1);
        assert!(blob.exists(), "a dry run moved something");
        let applied = m.gc_apply().await.unwrap();
        let manifest = applied.manifest.unwrap();
        assert!(!blob.exists());

        clock.advance(DEFAULT_RECOVERY_WINDOW - Duration::from_secs(1));
        let e = m.gc_purge(&manifest).await.unwrap_err();
        assert!(e.message.contains("recovery window"), "{}", e.message);
        assert!(manifest.exists());

        clock.advance(Duration::from_secs(1));
        m.gc_purge(&manifest).await.unwrap();
        assert!(!manifest.parent().unwrap().exists());
    }

    #[tokio::test]
    async fn dur_6_a_blob_a_row_names_before_the_move_is_refused() {
        let (m, _clock, blob, _dir) = setup().await;
        let manifest = m.gc_apply().await.unwrap().manifest.unwrap();
        m.gc_restore(&manifest).await.unwrap();
        assert!(blob.exists());
        // Between the plan and the move, an upload comes to name the blob.
        let mut doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        doc["entries"][0]["state"] = "planned".into();
        std::fs::write(&manifest, serde_json::to_vec(&doc).unwrap()).unwrap();
        let digest = doc["entries"][0]["sha256"].as_str().unwrap().to_string();
        let store = Store::open(&m.url).await.unwrap();
        store
            .create_upload(
                &airlock_store::UploadRecord {
                    id: "upl_1".into(),
                    workspace_id: airlock_store::DEFAULT_WORKSPACE.into(),
                    user_id: "usr_1".into(),
                    name: "a.txt".into(),
                    digest,
                    size: 6,
                    media_type: "text/plain".into(),
                    created_at: 1,
                },
                AuditRecord::system("upload.created", None),
            )
            .await
            .unwrap();
        let out = m.gc_resume(&manifest).await.unwrap();
        assert_eq!(out.entries[0].state, EntryState::Refused);
        assert!(blob.exists());
        // And it is no longer a candidate at all.
        assert!(m.gc_plan().await.unwrap().entries.is_empty());
    }

    #[tokio::test]
    async fn dur_6_a_manifest_entry_outside_the_blob_store_is_refused() {
        let (m, _clock, _blob, _dir) = setup().await;
        let manifest = m.gc_apply().await.unwrap().manifest.unwrap();
        let mut doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        doc["entries"][0]["path"] = "keys/kek-v1".into();
        std::fs::write(&manifest, serde_json::to_vec(&doc).unwrap()).unwrap();
        let e = m.gc_restore(&manifest).await.unwrap_err();
        assert!(e.message.contains("not a blob path"), "{}", e.message);
        // Control: the untouched shape is accepted.
        doc["entries"][0]["path"] = blob_rel(doc["entries"][0]["sha256"].as_str().unwrap()).into();
        std::fs::write(&manifest, serde_json::to_vec(&doc).unwrap()).unwrap();
        m.gc_restore(&manifest).await.unwrap();
    }
}
