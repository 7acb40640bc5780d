//! The content-addressed artifact store (DUR-5).
//!
//! Layout under the store root (all directories 0700, blobs 0400):
//!
//! ```text
//! tmp/<pid>-<nanos>-<n>.tmp   staging; never read by anyone but the writer
//! sha256/<aa>/<64 hex>        published blobs, named by the SHA-256 of their bytes
//! ```
//!
//! Publication is stage → hash while writing → `fsync` → `rename` into `sha256/` → `fsync` the
//! shard directory. `rename` within one filesystem is atomic, so a reader of `sha256/` sees either
//! no blob or the complete one, never a prefix. A crash can leave only files in `tmp/`; nothing
//! references them, and `airlock recover` deletes them later (DUR-6). The digest is computed
//! from the bytes this process wrote, never from a size or name the source claimed.
//!
//! Why publish-if-absent instead of compare-and-replace: blobs are immutable and named by their
//! content, so an existing blob already has the right bytes (bit rot is `verify`'s and
//! `airlock validate --level full`'s job). Two concurrent publishers of the same content may both
//! rename; the second atomically replaces the file with identical bytes, which no reader can
//! tell apart.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::OFlag;
use sha2::{Digest, Sha256};

use crate::FileError;
use crate::name::display;
use crate::sniff::SNIFF_LEN;

const TMP: &str = "tmp";
const BLOBS: &str = "sha256";
const COPY_BUF: usize = 64 * 1024;

/// What [`ArtifactStore::blobs`] found under `sha256/`.
#[derive(Debug, Clone, Default)]
pub struct BlobListing {
    /// `(digest, path, size)` of every well-formed blob.
    pub blobs: Vec<(String, PathBuf, u64)>,
    /// Anything else there, relative to the store root.
    pub stray: Vec<String>,
}

/// A content-addressed store of immutable blobs on one filesystem.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
}

/// Bytes written to `tmp/`, hashed and synced, not yet published. Dropping it removes the
/// temporary file, so an aborted collection never leaves staged files behind.
#[derive(Debug)]
pub(crate) struct Staged {
    tmp: PathBuf,
    pub(crate) digest: String,
    pub(crate) size: u64,
    /// The first [`SNIFF_LEN`] bytes, for media-type sniffing without a second read.
    pub(crate) prefix: Vec<u8>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Best effort: if this fails the file stays in tmp/, where `airlock recover` finds it.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Why staging failed.
#[derive(Debug)]
pub(crate) enum StageError {
    /// The source had more than the allowed number of bytes (we stopped reading at limit + 1).
    Exceeded,
    Io(std::io::Error),
}

impl ArtifactStore {
    /// Opens (creating if needed) a store at `root`, with `tmp/` and `sha256/` created 0700.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        let mut builder = DirBuilder::new();
        builder.recursive(true).mode(0o700);
        builder.create(root.join(TMP))?;
        builder.create(root.join(BLOBS))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// A store at `root` as it is, creating nothing (`airlock validate` never writes).
    pub fn at(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Streams `reader` into `tmp/`, hashing as it goes and failing with
    /// [`FileError::TooLarge`] (path `<stream>`) past `max_bytes`, then publishes the blob
    /// atomically. Returns the lowercase hex SHA-256 and the size. Publishing content that is
    /// already present is a no-op.
    pub fn put(&self, reader: impl Read, max_bytes: u64) -> Result<(String, u64), FileError> {
        let path = "<stream>";
        let staged = self.stage(reader, max_bytes).map_err(|e| match e {
            StageError::Exceeded => FileError::TooLarge {
                path: path.to_owned(),
                limit: max_bytes,
            },
            StageError::Io(e) => FileError::io(path, e),
        })?;
        self.publish(staged)
    }

    /// Like [`ArtifactStore::put`], for bytes that must hash to `expected` (a blob fetched from
    /// another store by its name): staged and hashed as they are read, published only when the
    /// digest matches. A mismatch is [`FileError::Io`] ("digest mismatch") and leaves nothing
    /// behind (the staged file is removed). Returns the size.
    pub fn put_expecting(
        &self,
        reader: impl Read,
        max_bytes: u64,
        expected: &str,
    ) -> Result<u64, FileError> {
        let rel = blob_rel(expected).ok_or_else(|| FileError::BadName {
            path: display(expected.as_bytes()),
        })?;
        let staged = self.stage(reader, max_bytes).map_err(|e| match e {
            StageError::Exceeded => FileError::TooLarge {
                path: rel.clone(),
                limit: max_bytes,
            },
            StageError::Io(e) => FileError::io(&rel, e),
        })?;
        if staged.digest != expected {
            // Dropping `staged` removes the temporary file.
            return Err(FileError::io(&rel, "digest mismatch"));
        }
        self.publish(staged).map(|(_, size)| size)
    }

    /// The path of the blob named `digest`, if `digest` is 64 lowercase hex digits and the blob
    /// exists. Anything else (a traversal attempt, uppercase, a short string) is `None`.
    pub fn path(&self, digest: &str) -> Option<PathBuf> {
        let path = self.blob_path(digest)?;
        let meta = std::fs::symlink_metadata(&path).ok()?;
        meta.file_type().is_file().then_some(path)
    }

    /// Rehashes the blob named `digest`: `Ok(true)` if its bytes still hash to its name,
    /// `Ok(false)` if not. A malformed digest is [`FileError::BadName`]; a missing blob is
    /// [`FileError::Io`].
    pub fn verify(&self, digest: &str) -> Result<bool, FileError> {
        let rel = blob_rel(digest).ok_or_else(|| FileError::BadName {
            path: display(digest.as_bytes()),
        })?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
            .open(self.root.join(&rel))
            .map_err(|e| FileError::io(&rel, e))?;
        let mut hasher = Sha256::new();
        copy_hashing(file, &mut hasher, None, u64::MAX)
            .map_err(|e| FileError::io(&rel, stage_error_text(&e)))?;
        Ok(hex(&hasher.finalize()) == digest)
    }

    /// Copies the blob named `digest` to a new file at `dest` (created with
    /// `O_EXCL`, mode 0400), reading at most `max_bytes` and rehashing as it
    /// goes: a blob larger than `max_bytes` is [`FileError::TooLarge`], one
    /// whose bytes no longer hash to `digest` is [`FileError::Io`] ("digest
    /// mismatch"). On any error the partial copy is removed. Returns the size.
    pub fn copy_out(&self, digest: &str, dest: &Path, max_bytes: u64) -> Result<u64, FileError> {
        let rel = blob_rel(digest).ok_or_else(|| FileError::BadName {
            path: display(digest.as_bytes()),
        })?;
        let src = OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
            .open(self.root.join(&rel))
            .map_err(|e| FileError::io(&rel, e))?;
        let dest_name = display(dest.as_os_str().as_encoded_bytes());
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(dest)
            .map_err(|e| FileError::io(&dest_name, e))?;
        let mut hasher = Sha256::new();
        let mut prefix = Vec::new();
        let copied = copy_hashing(src, &mut hasher, Some((&mut out, &mut prefix)), max_bytes)
            .map_err(|e| match e {
                StageError::Exceeded => FileError::TooLarge {
                    path: rel.clone(),
                    limit: max_bytes,
                },
                StageError::Io(e) => FileError::io(&rel, e),
            })
            .and_then(|size| {
                if hex(&hasher.finalize()) == digest {
                    Ok(size)
                } else {
                    Err(FileError::io(&rel, "digest mismatch"))
                }
            })
            .and_then(|size| {
                out.set_permissions(Permissions::from_mode(0o400))
                    .and_then(|()| out.sync_all())
                    .map_err(|e| FileError::io(&dest_name, e))?;
                Ok(size)
            });
        if copied.is_err() {
            drop(out);
            let _ = std::fs::remove_file(dest);
        }
        copied
    }

    /// Copies at most `limit` bytes of `reader` into a new file in `tmp/`, hashing the bytes as
    /// they are written. Reads at most `limit + 1` bytes, so a source that keeps growing is cut.
    pub(crate) fn stage(&self, reader: impl Read, limit: u64) -> Result<Staged, StageError> {
        let (mut file, tmp) = self.create_tmp().map_err(StageError::Io)?;
        let mut staged = Staged {
            tmp,
            digest: String::new(),
            size: 0,
            prefix: Vec::new(),
        };
        let mut hasher = Sha256::new();
        let mut prefix = Vec::new();
        let size = copy_hashing(reader, &mut hasher, Some((&mut file, &mut prefix)), limit)?;
        file.set_permissions(Permissions::from_mode(0o400))
            .map_err(StageError::Io)?;
        file.sync_all().map_err(StageError::Io)?;
        staged.digest = hex(&hasher.finalize());
        staged.size = size;
        staged.prefix = prefix;
        Ok(staged)
    }

    /// Moves a staged file to `sha256/<aa>/<hex>` unless that blob already exists, and makes
    /// the rename durable.
    pub(crate) fn publish(&self, staged: Staged) -> Result<(String, u64), FileError> {
        let rel = format!("{BLOBS}/{}/{}", &staged.digest[..2], staged.digest);
        let err = |e: std::io::Error| FileError::io(&rel, e);
        let blobs = self.root.join(BLOBS);
        let shard = blobs.join(&staged.digest[..2]);
        match DirBuilder::new().mode(0o700).create(&shard) {
            Ok(()) => sync_dir(&blobs).map_err(err)?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(e)),
        }
        let dest = shard.join(&staged.digest);
        match std::fs::symlink_metadata(&dest) {
            // Already published: identical bytes by construction. Dropping `staged` removes tmp.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::fs::rename(&staged.tmp, &dest).map_err(err)?;
                sync_dir(&shard).map_err(err)?;
            }
            Err(e) => return Err(err(e)),
        }
        Ok((staged.digest.clone(), staged.size))
    }

    /// The path `sha256/<aa>/<digest>` would have, for a well-formed digest (whether or not the
    /// blob exists).
    pub fn blob_location(&self, digest: &str) -> Option<PathBuf> {
        self.blob_path(digest)
    }

    /// Every entry under `sha256/`: blobs as `(digest, path, size)` and, separately, anything
    /// that is not a well-formed blob where it belongs (a stray name, a symbolic link, a
    /// directory inside a shard), by its path relative to the store root. Follows no link.
    pub fn blobs(&self) -> std::io::Result<BlobListing> {
        let mut blobs = Vec::new();
        let mut odd = Vec::new();
        let root = self.root.join(BLOBS);
        let mut shards: Vec<_> = std::fs::read_dir(&root)?.collect::<std::io::Result<_>>()?;
        shards.sort_by_key(std::fs::DirEntry::file_name);
        for shard in shards {
            let name = shard.file_name().to_string_lossy().into_owned();
            let ok_shard = name.len() == 2
                && name
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !ok_shard || !shard.file_type()?.is_dir() {
                odd.push(format!("{BLOBS}/{name}"));
                continue;
            }
            let mut entries: Vec<_> =
                std::fs::read_dir(shard.path())?.collect::<std::io::Result<_>>()?;
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for e in entries {
                let file = e.file_name().to_string_lossy().into_owned();
                let ft = e.file_type()?;
                if ft.is_file() && blob_rel(&file).is_some() && file.starts_with(&name) {
                    let size = e.metadata()?.len();
                    blobs.push((file, e.path(), size));
                } else {
                    odd.push(format!("{BLOBS}/{name}/{file}"));
                }
            }
        }
        Ok(BlobListing { blobs, stray: odd })
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        blob_rel(digest).map(|rel| self.root.join(rel))
    }

    fn create_tmp(&self) -> std::io::Result<(File, PathBuf)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = self.root.join(TMP);
        // Uniqueness, not secrecy, is what matters: tmp/ is 0700 and `create_new` never
        // clobbers, so a collision only costs a retry.
        for _ in 0..16 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{}-{nanos}-{n}.tmp", std::process::id()));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(OFlag::O_NOFOLLOW.bits())
                .open(&path)
            {
                Ok(file) => return Ok((file, path)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            ErrorKind::AlreadyExists,
            "could not create a unique staging file",
        ))
    }
}

/// `sha256/<aa>/<hex>` for a well-formed digest (64 lowercase hex digits), else `None`.
fn blob_rel(digest: &str) -> Option<String> {
    let ok = digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then(|| format!("{BLOBS}/{}/{digest}", &digest[..2]))
}

/// Reads `reader` to the end (at most `limit + 1` bytes), feeding `hasher` and, if given, writing
/// to `sink` and keeping the first [`SNIFF_LEN`] bytes. Returns the byte count, or `Exceeded` as
/// soon as more than `limit` bytes were seen. Nothing past that point is read.
fn copy_hashing(
    mut reader: impl Read,
    hasher: &mut Sha256,
    mut sink: Option<(&mut File, &mut Vec<u8>)>,
    limit: u64,
) -> Result<u64, StageError> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut size: u64 = 0;
    let cap = limit.saturating_add(1);
    loop {
        let want = usize::try_from(cap - size).map_or(buf.len(), |left| left.min(buf.len()));
        if want == 0 {
            return Err(StageError::Exceeded);
        }
        let n = match reader.read(&mut buf[..want]) {
            Ok(0) => return Ok(size),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(StageError::Io(e)),
        };
        size += n as u64;
        if size > limit {
            return Err(StageError::Exceeded);
        }
        let chunk = &buf[..n];
        hasher.update(chunk);
        if let Some((file, prefix)) = sink.as_mut() {
            file.write_all(chunk).map_err(StageError::Io)?;
            let keep = SNIFF_LEN.saturating_sub(prefix.len()).min(n);
            prefix.extend_from_slice(&chunk[..keep]);
        }
    }
}

fn stage_error_text(e: &StageError) -> String {
    match e {
        StageError::Exceeded => "too large".to_owned(),
        StageError::Io(e) => e.to_string(),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_5_digest_rule_table() {
        let good = "a".repeat(64);
        let cases: &[(&str, bool)] = &[
            (&good, true),
            (
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                true,
            ),
            (
                "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
                false,
            ),
            (&good[..63], false),
            ("../../etc/passwd", false),
            ("", false),
            (
                "../aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            (
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaé",
                false,
            ),
        ];
        for (digest, ok) in cases {
            assert_eq!(blob_rel(digest).is_some(), *ok, "{digest}");
        }
    }

    #[test]
    fn dur_5_copy_stops_at_the_budget_on_an_endless_source() {
        let mut hasher = Sha256::new();
        let res = copy_hashing(std::io::repeat(b'x'), &mut hasher, None, 100_000);
        assert!(matches!(res, Err(StageError::Exceeded)));
    }

    #[test]
    fn dur_5_copy_reads_at_most_one_byte_past_the_budget() {
        // A reader that counts what was pulled from it.
        struct Counting(u64);
        impl Read for Counting {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                buf.fill(b'y');
                self.0 += buf.len() as u64;
                Ok(buf.len())
            }
        }
        let mut src = Counting(0);
        let mut hasher = Sha256::new();
        let res = copy_hashing(&mut src, &mut hasher, None, 10);
        assert!(matches!(res, Err(StageError::Exceeded)));
        assert_eq!(src.0, 11);
    }

    #[test]
    fn copy_out_checks_the_digest_and_the_bound_and_leaves_nothing_on_error() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&dir.path().join("store")).unwrap();
        let (digest, size) = store.put(&b"file bytes"[..], 100).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();

        let dest = out.join("doc");
        assert_eq!(store.copy_out(&digest, &dest, size).unwrap(), size);
        assert_eq!(std::fs::read(&dest).unwrap(), b"file bytes");
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o400);
        // Never over an existing file.
        assert!(store.copy_out(&digest, &dest, size).is_err());

        // Larger than allowed: refused, nothing left.
        let small = out.join("small");
        let e = store.copy_out(&digest, &small, size - 1).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e:?}");
        assert!(!small.exists());

        // A blob whose bytes changed: refused, nothing left.
        let blob = store.path(&digest).unwrap();
        std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&blob, b"file bytez").unwrap();
        let bad = out.join("bad");
        let e = store.copy_out(&digest, &bad, size).unwrap_err();
        assert!(e.to_string().contains("digest mismatch"), "{e}");
        assert!(!bad.exists());

        // A malformed digest.
        assert!(store.copy_out("../x", &out.join("x"), 10).is_err());
    }

    #[test]
    fn dur_5_put_expecting_publishes_only_matching_bytes_and_leaves_no_staging() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&dir.path().join("store")).unwrap();
        let other = tempfile::tempdir().unwrap();
        let (digest, size) = ArtifactStore::open(other.path())
            .unwrap()
            .put(&b"remote bytes"[..], 100)
            .unwrap();
        // Wrong bytes under that name: refused, nothing published, nothing staged.
        let e = store
            .put_expecting(&b"remote bytez"[..], 100, &digest)
            .unwrap_err();
        assert!(e.to_string().contains("digest mismatch"), "{e}");
        assert!(store.path(&digest).is_none());
        let tmp = std::fs::read_dir(dir.path().join("store").join(TMP)).unwrap();
        assert_eq!(tmp.count(), 0);
        // Positive control: the right bytes are published under their name.
        assert_eq!(
            store
                .put_expecting(&b"remote bytes"[..], 100, &digest)
                .unwrap(),
            size
        );
        assert_eq!(
            std::fs::read(store.path(&digest).unwrap()).unwrap(),
            b"remote bytes"
        );
        // Over the budget: refused.
        assert!(matches!(
            store.put_expecting(&b"remote bytes"[..], size - 1, &digest),
            Err(FileError::TooLarge { .. })
        ));
    }

    #[test]
    fn dur_5_hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
