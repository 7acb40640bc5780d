//! Signed audit checkpoints (AUD-4), kept outside the database: the
//! signing key (`audit-signing.key` in the key directory, an Ed25519 seed,
//! 0600, created on first use and never stored in the database) and one
//! append-only JSON Lines file per workspace (`<dir>/<workspace>.jsonl`,
//! `dir` = `<key dir>/checkpoints` unless configured, each line fsync'd).
//! What a checkpoint says and how it is signed is
//! `airlock_audit::checkpoint`; this module does the files and the store.
//!
//! Several nodes may share one checkpoint directory (and key directory) on
//! a local file system: each line is appended by one `write` on an
//! `O_APPEND` descriptor while the writer holds an exclusive `flock` on the
//! file, and readers hold a shared one, so lines never interleave and a
//! reader never sees half of one. Lines are not in sequence order: a node
//! that read the chain earlier may append its (older) checkpoint after
//! another node appended a newer one; readers take the highest sequence
//! number, never the last line. Network file systems are not claimed.
//!
//! A checkpoint is only ever made over a chain that verifies from the
//! previous checkpoint on (linking to its head), so nothing that changed
//! what an earlier checkpoint pinned is ever signed. Reading a file
//! skips lines that do not parse (a torn write, with a warning) and fails
//! on a line whose signature does not verify (a forgery).
//!
//! Verification checks the chain against every valid checkpoint: the
//! newest pins its length (a chain is append-only, so it covers the
//! longest prefix, and any change at or before its `seq` changes the hash
//! there); the earliest one a rewrite changed names the rewrite.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use airlock_audit::checkpoint::{self, Checkpoint, CheckpointFile, SignedCheckpoint};
use airlock_audit::{GENESIS, Verifier};
use airlock_protocol::Error;
use airlock_protocol::audit::{AuditVerification, CheckpointMade, CheckpointUsed};
use airlock_store::Store;
use nix::fcntl::{Flock, FlockArg};
use zeroize::Zeroizing;

use crate::audit::{VERIFY_PAGE, verify_rows};
use crate::error::{Result, StoreResultExt};
use crate::keyfile;
use crate::service::Service;

/// The checkpoint signing key's file in the key directory.
pub const SIGNING_KEY_FILE: &str = "audit-signing.key";
/// The default checkpoint directory, under the key directory.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// How much of a file's end is read to find the newest checkpoint before
/// making the next one (a few hundred lines).
const TAIL_BYTES: u64 = 64 * 1024;
/// The largest checkpoint file read whole (for verification and export).
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Where checkpoints and their key live.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    key_dir: PathBuf,
    dir: PathBuf,
    /// Checks signatures with this key instead of the key directory's (an
    /// auditor's copy, `--public-key`).
    public_key: Option<[u8; 32]>,
}

fn io(what: impl std::fmt::Display, e: std::io::Error) -> Error {
    Error::internal(format!("{what}: {e}"))
}

impl Checkpoints {
    /// `dir`: where the files are (default `<key_dir>/checkpoints`).
    pub fn new(key_dir: PathBuf, dir: Option<PathBuf>) -> Self {
        let dir = dir.unwrap_or_else(|| key_dir.join(CHECKPOINTS_DIR));
        Self {
            key_dir,
            dir,
            public_key: None,
        }
    }

    /// Checks signatures with `key` rather than the key directory's.
    pub fn with_public_key(mut self, key: [u8; 32]) -> Self {
        self.public_key = Some(key);
        self
    }

    /// [`with_public_key`](Self::with_public_key) from 64 hex digits.
    pub fn with_public_key_hex(self, hex: &str) -> Result<Self> {
        let key =
            checkpoint::parse_public_key(hex).map_err(|e| Error::invalid_query(e.to_string()))?;
        Ok(self.with_public_key(key))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A workspace's file name, for messages (the directory is the
    /// operator's to know, not every reader's).
    fn file_name(workspace: &str) -> String {
        format!("{}.jsonl", file_stem(workspace))
    }

    /// A workspace's file. Ids made of `[A-Za-z0-9_-]` are used as they are;
    /// any other is hex-encoded, so no id names a path elsewhere.
    fn file(&self, workspace: &str) -> PathBuf {
        self.dir.join(format!("{}.jsonl", file_stem(workspace)))
    }

    /// The key that checks signatures: the configured one, or the one of
    /// the key directory's signing key; `None` when there is no key yet.
    /// Never creates anything.
    pub fn public_key(&self) -> Result<Option<[u8; 32]>> {
        if let Some(k) = self.public_key {
            return Ok(Some(k));
        }
        let path = self.key_dir.join(SIGNING_KEY_FILE);
        let Some(seed) = keyfile::read(&path, SIGNING_KEY_FILE)
            .map_err(|e| io("cannot read the checkpoint signing key", e))?
        else {
            return Ok(None);
        };
        let seed = Zeroizing::new(seed);
        checkpoint::public_key(&seed)
            .map(Some)
            .map_err(Error::internal)
    }

    /// The public key, creating the signing key if there is none yet.
    pub fn public_key_creating(&self) -> Result<[u8; 32]> {
        let seed = self.seed()?;
        checkpoint::public_key(&seed).map_err(Error::internal)
    }

    fn seed(&self) -> Result<Zeroizing<[u8; 32]>> {
        keyfile::load_or_create(&self.key_dir, SIGNING_KEY_FILE)
            .map(Zeroizing::new)
            .map_err(|e| io("checkpoint signing key unavailable", e))
    }

    /// Workspaces that have a checkpoint file.
    pub fn workspaces(&self) -> Result<Vec<String>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(self.dir.display(), e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io(self.dir.display(), e))?;
            let name = entry.file_name();
            if let Some(ws) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(workspace_of_stem)
            {
                out.push(ws);
            }
        }
        out.sort();
        Ok(out)
    }

    /// A workspace's file as text ("" when there is none), at most
    /// `limit` bytes from its end (cut to whole lines).
    fn read_text(&self, workspace: &str, limit: u64) -> Result<String> {
        let path = self.file(workspace);
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(String::new()),
            Err(e) => return Err(io(path.display(), e)),
        };
        // Shared: no writer is half-way through a line while we read.
        let mut f = lock(f, FlockArg::LockShared, &path)?;
        let len = f.metadata().map_err(|e| io(path.display(), e))?.len();
        let start = len.saturating_sub(limit);
        f.seek(SeekFrom::Start(start))
            .map_err(|e| io(path.display(), e))?;
        let mut bytes = Vec::new();
        (&*f)
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| io(path.display(), e))?;
        if start > 0 {
            // Drop the partial first line.
            let cut = bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| i + 1);
            bytes.drain(..cut);
        }
        // Invalid UTF-8 can only be a damaged line: it will not parse.
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads a workspace's checkpoints, each signature checked with `key`.
    fn read(
        &self,
        workspace: &str,
        key: &[u8; 32],
        limit: u64,
    ) -> Result<std::result::Result<CheckpointFile, String>> {
        let text = self.read_text(workspace, limit)?;
        Ok(checkpoint::read_checkpoints(&text, workspace, key)
            .map_err(|(line, e)| format!("{} line {line}: {e}", Self::file_name(workspace))))
    }

    /// The lines of a workspace's file that parse as checkpoints (for an
    /// export; their signatures are the reader's to check).
    pub fn lines(&self, workspace: &str) -> Result<Vec<String>> {
        let text = self.read_text(workspace, MAX_FILE_BYTES)?;
        Ok(text
            .split('\n')
            .filter(|l| SignedCheckpoint::from_line(l).is_ok())
            .map(str::to_string)
            .collect())
    }

    /// Appends one line and fsyncs it. A file whose last line was torn
    /// (no final line feed) gets a line feed first, so the torn bytes stay
    /// a line of their own that readers skip.
    fn append(&self, workspace: &str, line: &str) -> Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| io(self.dir.display(), e))?;
        let path = self.file(workspace);
        let created = !path.exists();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io(path.display(), e))?;
        // Exclusive from reading the last byte to the fsync: another node's
        // append cannot land between the torn-line check and our write.
        let mut f = lock(f, FlockArg::LockExclusive, &path)?;
        let len = f.metadata().map_err(|e| io(path.display(), e))?.len();
        let mut buf = Vec::with_capacity(line.len() + 2);
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1))
                .and_then(|_| f.read_exact(&mut last))
                .map_err(|e| io(path.display(), e))?;
            if last[0] != b'\n' {
                buf.push(b'\n');
            }
        }
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        // One write with O_APPEND, under the lock: lines never interleave.
        f.write_all(&buf)
            .and_then(|()| f.sync_all())
            .map_err(|e| io(path.display(), e))?;
        if created {
            std::fs::File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io(self.dir.display(), e))?;
        }
        Ok(())
    }
}

/// Waits for a `flock` of `op` on `f` (released when the result drops).
fn lock(f: std::fs::File, op: FlockArg, path: &Path) -> Result<Flock<std::fs::File>> {
    Flock::lock(f, op).map_err(|(_, e)| io(path.display(), std::io::Error::from(e)))
}

fn file_stem(workspace: &str) -> String {
    let plain = !workspace.is_empty()
        && workspace.len() <= 128
        && !workspace.starts_with("x-")
        && workspace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        workspace.to_string()
    } else {
        format!("x-{}", airlock_audit::hex::encode(workspace.as_bytes()))
    }
}

fn workspace_of_stem(stem: &str) -> Option<String> {
    match stem.strip_prefix("x-") {
        None => (file_stem(stem) == stem).then(|| stem.to_string()),
        Some(hex) => {
            if hex.len() % 2 != 0 {
                return None;
            }
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect();
            String::from_utf8(bytes?).ok()
        }
    }
}

/// Verifies `workspace`'s stored chain against its newest valid
/// checkpoint: says which one was used, or warns that there is none; a
/// checkpoint whose signature does not verify fails the verification.
pub(crate) async fn verify_with_checkpoints(
    store: &Store,
    workspace: &str,
    cps: &Checkpoints,
) -> Result<AuditVerification> {
    let mut warnings = Vec::new();
    let mut checkpoint_error = None;
    let mut newest = None;
    let mut all = Vec::new();
    // An auditor's copy may come without the key directory (or without
    // the right to read it): that is a warning, and `--public-key` the fix.
    let key = cps.public_key().unwrap_or_else(|e| {
        warnings.push(format!("{}: pass --public-key", e.message));
        None
    });
    match key {
        None => {
            let present = !cps.read_text(workspace, TAIL_BYTES)?.trim().is_empty();
            warnings.push(if present {
                "checkpoints exist but there is no public key to check them: pass --public-key"
                    .to_string()
            } else {
                "no signed checkpoint (no signing key): deleting the newest events would not show"
                    .to_string()
            });
        }
        Some(key) => match cps.read(workspace, &key, MAX_FILE_BYTES)? {
            Err(e) => checkpoint_error = Some(e),
            Ok(file) => {
                if !file.skipped.is_empty() {
                    warnings.push(format!(
                        "skipped {} checkpoint line(s) that do not parse (a torn write?) in {}: line(s) {:?}",
                        file.skipped.len(),
                        Checkpoints::file_name(workspace),
                        file.skipped
                    ));
                }
                all = file.all;
                match file.newest {
                    Some(cp) => newest = Some(cp.checkpoint),
                    None => warnings.push(format!(
                        "no signed checkpoint in {}: deleting the newest events would not show",
                        Checkpoints::file_name(workspace)
                    )),
                }
            }
        },
    }
    // Against every valid checkpoint (the newest pins the length; the
    // earliest one a rewrite changed names it).
    let mut v = Verifier::new().for_workspace(workspace);
    for (seq, head) in all {
        v = v.with_checkpoint(seq, head);
    }
    let r = verify_rows(store, workspace, VERIFY_PAGE, v, 0).await?;
    let mut out = crate::audit::to_verification(r);
    out.checkpoint = newest.map(|cp| CheckpointUsed {
        seq: cp.seq,
        head: airlock_store::hex(&cp.head),
        at: cp.at,
    });
    if checkpoint_error.is_some() {
        out.ok = false;
        out.checkpoint_error = checkpoint_error;
    }
    out.warnings = warnings;
    Ok(out)
}

/// Signs a checkpoint of `workspace`'s chain as it is now and appends it
/// to the workspace's file. The events since the newest valid checkpoint
/// are verified first (from that checkpoint's head on); a chain that does
/// not verify, or is shorter than that checkpoint, is refused and nothing
/// is signed. Without `force`, nothing is written when the head has not
/// moved since the newest checkpoint.
pub(crate) async fn make_checkpoint(
    store: &Store,
    cps: &Checkpoints,
    workspace: &str,
    force: bool,
) -> Result<CheckpointMade> {
    let seed = cps.seed()?;
    let key = checkpoint::public_key(&seed).map_err(Error::internal)?;
    let last = cps
        .read(workspace, &key, TAIL_BYTES)?
        .map_err(|e| Error::internal(format!("refusing to sign after a bad checkpoint: {e}")))?
        .newest
        .map(|c| c.checkpoint);
    let (from_seq, from_head) = last.as_ref().map_or((0, GENESIS), |c| (c.seq, c.head));
    let head = store.audit_head(workspace).await.svc()?;
    let head_seq = head
        .as_ref()
        .map_or(0, |(s, _)| u64::try_from(*s).unwrap_or(0));
    let refuse = |why: String| {
        Error::internal(format!(
            "refusing to sign a checkpoint of {workspace}: {why}"
        ))
    };
    if head_seq < from_seq {
        return Err(refuse(format!(
            "the chain ends at {head_seq} but checkpoint {from_seq} covers more"
        )));
    }
    let from = i64::try_from(from_seq).map_err(Error::internal)?;
    let v = Verifier::new()
        .for_workspace(workspace)
        .resume_after(from_seq, from_head);
    let sum = verify_rows(store, workspace, VERIFY_PAGE, v, from)
        .await?
        .map_err(|seq| refuse(format!("event {seq} does not verify")))?;
    if head_seq == from_seq
        && head
            .as_ref()
            .is_some_and(|(_, h)| airlock_audit::hex::decode_hash(h) != Ok(from_head))
    {
        return Err(refuse(format!(
            "event {from_seq} does not match its checkpoint"
        )));
    }
    if let Some(last) = last
        && !force
        && last.seq == sum.count
    {
        return Ok(CheckpointMade {
            workspace: workspace.to_string(),
            seq: last.seq,
            head: airlock_store::hex(&last.head),
            at: last.at,
            written: false,
        });
    }
    let cp = Checkpoint {
        workspace_id: workspace.to_string(),
        seq: sum.count,
        head: sum.head,
        at: airlock_store::rfc3339(airlock_store::now_ms()),
    };
    let signed = cp.sign(&seed).map_err(Error::internal)?;
    cps.append(workspace, &signed.to_line().map_err(Error::internal)?)?;
    let cp = signed.checkpoint;
    Ok(CheckpointMade {
        workspace: cp.workspace_id,
        seq: cp.seq,
        head: airlock_store::hex(&cp.head),
        at: cp.at,
        written: true,
    })
}

/// [`make_checkpoint`] for every workspace that has events or checkpoints;
/// a workspace that cannot be checkpointed is an error naming it (the
/// others are still done first).
pub(crate) async fn checkpoint_all(
    store: &Store,
    cps: &Checkpoints,
    force: bool,
) -> Result<Vec<CheckpointMade>> {
    let mut all = store.audit_workspaces().await.svc()?;
    all.extend(cps.workspaces()?);
    all.sort();
    all.dedup();
    let mut made = Vec::new();
    let mut first_error = None;
    for ws in all {
        match make_checkpoint(store, cps, &ws, force).await {
            Ok(m) => made.push(m),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(made),
    }
}

impl Service {
    /// Where this server's checkpoints and their key live.
    pub(crate) fn checkpoints(&self) -> Checkpoints {
        Checkpoints::new(self.cfg.key_dir.clone(), self.cfg.checkpoint_dir.clone())
    }

    /// Signs a checkpoint of every workspace's chain whose head moved
    /// since its newest checkpoint (`force`: of every chain): what
    /// `airlock up` does periodically and at a clean shutdown.
    pub async fn checkpoint_audit(&self, force: bool) -> Result<Vec<CheckpointMade>> {
        checkpoint_all(&self.store, &self.checkpoints(), force).await
    }

    /// Signs checkpoints of the chains whose head moved, every
    /// `checkpoint_interval` (not at all when it is zero), until `stop`,
    /// and hands each pass's outcome to `report` (the caller shows it: a
    /// chain that no longer verifies is refused, never signed, and must
    /// not go unnoticed). A failed pass is retried at the next tick. The
    /// last checkpoint at shutdown is the caller's, after its work stopped.
    pub async fn run_checkpointer(
        self: std::sync::Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
        report: impl Fn(Result<Vec<CheckpointMade>>) + Send + 'static,
    ) {
        let every = self.cfg.checkpoint_interval;
        if every.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => if *stop.borrow() { break },
            }
            report(self.checkpoint_audit(false).await);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aud_4_workspace_ids_map_to_file_names_and_back() {
        for ws in ["ws_default", "ws_system", "a-b_C9"] {
            assert_eq!(file_stem(ws), ws);
            assert_eq!(workspace_of_stem(ws).as_deref(), Some(ws));
        }
        for ws in ["../etc", "a/b", "", "x-1", "ws.1", "é"] {
            let stem = file_stem(ws);
            assert!(stem.starts_with("x-"), "{ws}");
            assert_eq!(workspace_of_stem(&stem).as_deref(), Some(ws));
        }
        assert_eq!(workspace_of_stem("x-zz"), None);
    }

    async fn store_with(n: usize) -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("airlock.db").display());
        let store = Store::open(&url).await.unwrap();
        add(&store, n).await;
        (store, dir)
    }

    async fn add(store: &Store, n: usize) {
        for i in 0..n {
            let rec = airlock_store::AuditRecord::system("config.changed", None)
                .with_metadata(serde_json::json!({ "i": i }));
            store.audit(crate::DEFAULT_WORKSPACE, rec).await.unwrap();
        }
    }

    async fn exec(store: &Store, sql: &str) {
        sqlx::query(sql).execute(store.pool()).await.unwrap();
    }

    /// A checkpoint is signed only over a chain that verifies from the
    /// previous one on: a cut below it, or an edit after it, is never
    /// signed, and nothing is appended. An edit before it leaves every
    /// hash from the checkpoint on as signed (the new checkpoint states
    /// the true head), and verification still names it.
    #[tokio::test]
    async fn aud_4_a_tampered_chain_is_never_signed() {
        let ws = crate::DEFAULT_WORKSPACE;
        for (name, sql, signs, bad) in [
            ("cut", "DELETE FROM audit_events WHERE seq > 3", false, 4),
            (
                "edited before the checkpoint",
                "UPDATE audit_events SET line = replace(line, '\"i\":1', '\"i\":9') WHERE seq = 2",
                true,
                2,
            ),
            (
                "edited after the checkpoint",
                "UPDATE audit_events SET line = replace(line, '\"i\":0', '\"i\":9') WHERE seq = 8",
                false,
                8,
            ),
        ] {
            let (store, dir) = store_with(5).await;
            let cps = Checkpoints::new(dir.path().join("keys"), None);
            let first = make_checkpoint(&store, &cps, ws, false).await.unwrap();
            assert!(first.written && first.seq == 5, "{first:?}");
            // Control: an untouched chain that moved is signed, an unmoved one
            // is not signed again.
            add(&store, 2).await;
            let second = make_checkpoint(&store, &cps, ws, false).await.unwrap();
            assert!(second.written && second.seq == 7, "{second:?}");
            let same = make_checkpoint(&store, &cps, ws, false).await.unwrap();
            assert!(!same.written && same.seq == 7, "{same:?}");
            add(&store, 1).await;
            for t in ["audit_events_no_update", "audit_events_no_delete"] {
                exec(&store, &format!("DROP TRIGGER {t}")).await;
            }
            exec(&store, sql).await;
            let before = std::fs::read_to_string(cps.file(ws)).unwrap();
            let made = make_checkpoint(&store, &cps, ws, true).await;
            assert_eq!(made.is_ok(), signs, "{name}: {made:?}");
            if !signs {
                assert_eq!(
                    std::fs::read_to_string(cps.file(ws)).unwrap(),
                    before,
                    "{name}"
                );
            }
            let v = verify_with_checkpoints(&store, ws, &cps).await.unwrap();
            assert_eq!((v.ok, v.first_bad_seq), (false, Some(bad)), "{name}: {v:?}");
        }
    }

    /// Waits until `/proc/locks` shows a blocked `flock` request on the
    /// file with inode `ino` (a reader or writer queued behind ours),
    /// failing if `waiter` ends first (it did not wait for the lock).
    fn wait_for_blocked_flock(ino: u64, waiter: &std::thread::JoinHandle<impl Sized>) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let locks = std::fs::read_to_string("/proc/locks").unwrap();
            if locks
                .lines()
                .any(|l| l.contains("-> FLOCK") && l.contains(&format!(":{ino} ")))
            {
                return;
            }
            assert!(!waiter.is_finished(), "it did not wait for the lock");
            assert!(
                std::time::Instant::now() < deadline,
                "no blocked request: {locks}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Nodes sharing a checkpoint directory: while a writer holds the
    /// file's lock half-way through a line, a reader waits and then reads
    /// the whole line, and another writer waits and then appends after it
    /// (never inside it). Control: a read that takes no lock, at the same
    /// moment, sees the half line (so without the lock a reader would).
    #[test]
    fn aud_4_readers_and_writers_wait_for_a_writer_mid_line() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let cps = Checkpoints::new(dir.path().join("keys"), None);
        cps.append("ws_a", "one").unwrap();
        let path = cps.file("ws_a");
        let ino = std::fs::metadata(&path).unwrap().ino();
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mut held = Flock::lock(f, FlockArg::LockExclusive).unwrap();
        held.write_all(b"{\"half\":").unwrap();
        // Control: without the lock, the half line is there to be read.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n{\"half\":");
        let reader = {
            let cps = cps.clone();
            std::thread::spawn(move || cps.read_text("ws_a", TAIL_BYTES).unwrap())
        };
        wait_for_blocked_flock(ino, &reader);
        let writer = {
            let cps = cps.clone();
            std::thread::spawn(move || cps.append("ws_a", "two").unwrap())
        };
        // Two waiters now (the reader's and the writer's requests).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|l| l.contains("-> FLOCK") && l.contains(&format!(":{ino} ")))
            .count()
            < 2
        {
            assert!(
                !writer.is_finished(),
                "the writer did not wait for the lock"
            );
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        held.write_all(b"1}\n").unwrap();
        drop(held);
        let read = reader.join().unwrap();
        writer.join().unwrap();
        assert!(
            read == "one\n{\"half\":1}\n" || read == "one\n{\"half\":1}\ntwo\n",
            "{read:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "one\n{\"half\":1}\ntwo\n"
        );
    }

    #[test]
    fn aud_4_append_after_a_torn_line_starts_a_new_line() {
        let dir = tempfile::tempdir().unwrap();
        let cps = Checkpoints::new(dir.path().join("keys"), None);
        cps.append("ws_a", "one").unwrap();
        let path = cps.file("ws_a");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"at\":\"tor")
            .unwrap();
        cps.append("ws_a", "two").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "one\n{\"at\":\"tor\ntwo\n"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(cps.workspaces().unwrap(), vec!["ws_a".to_string()]);
    }
}
