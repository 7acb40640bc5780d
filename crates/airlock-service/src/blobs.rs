//! The blob store every node sees (DUR-5): one interface over two backends.
//!
//! - **Local** (the embedded default): the content-addressed
//!   [`ArtifactStore`] under `<data>/artifacts`, unchanged.
//! - **S3** (`AIRLOCK_BLOB_STORE=s3://bucket/prefix`, through the
//!   `object_store` crate): blobs live at `<prefix>/sha256/<aa>/<64 hex>` in
//!   the bucket, and the local store becomes this node's cache of them. A
//!   blob is written locally first (budgeted, hashed while written, as
//!   before), then [`BlobStore::publish`]ed to the bucket if it is not there
//!   yet; a node that needs a blob it does not hold ([`BlobStore::fetch`])
//!   streams it from the bucket into its local staging area, hashing as it
//!   goes, and publishes it locally only when the bytes hash to the name it
//!   asked for. A damaged object is an error and nothing is kept: a reader
//!   is never served wrong bytes as complete (digests checked on read).
//!
//! Credentials come from the standard `AWS_*` environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, or an
//! instance/container role); the location names no secret (a URL with
//! user information is refused) and nothing here formats the client, whose
//! `Debug` could show a key.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_files::{ArtifactStore, FileError};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

/// Where blobs are kept beyond this node: an S3 bucket and a key prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Key prefix without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://bucket[/prefix]`. No user information, query or
    /// fragment (credentials belong in the environment, never in a value
    /// that ends up in logs or `ps`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let rest = s
            .strip_prefix("s3://")
            .ok_or_else(|| "the blob store must be `local` or `s3://bucket/prefix`".to_string())?;
        if rest.contains(['@', '?', '#']) {
            return Err(
                "the blob store location must name no credentials, query or fragment \
                 (credentials come from AWS_* environment variables)"
                    .into(),
            );
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(format!("{bucket:?} is not an S3 bucket name"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p == "." || p == ".." || (p.is_empty() && !prefix.is_empty()))
        {
            return Err(format!("{prefix:?} is not a usable key prefix"));
        }
        Ok(Self {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// `local` (or empty) is `None`.
    pub fn parse_setting(s: &str) -> Result<Option<Self>, String> {
        match s.trim() {
            "" | "local" => Ok(None),
            s => Self::parse(s).map(Some),
        }
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// Why a blob operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No blob by that name here or in the bucket.
    #[error("no blob {0}")]
    NotFound(String),
    /// The bucket's bytes do not hash to the blob's name.
    #[error("blob {digest} in {location} is damaged: its bytes do not hash to its name")]
    Damaged { digest: String, location: String },
    /// The local store refused (budget, name, I/O).
    #[error(transparent)]
    File(#[from] FileError),
    /// The bucket could not be reached or answered an error.
    #[error("blob store {location}: {detail}")]
    Remote { location: String, detail: String },
}

struct Remote {
    store: Arc<dyn ObjectStore>,
    location: S3Location,
}

/// The blob store: the local content-addressed store, and the bucket when
/// one is configured. Cheap to clone.
#[derive(Clone)]
pub struct BlobStore {
    local: ArtifactStore,
    remote: Option<Arc<Remote>>,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the client: its configuration holds the credentials.
        f.debug_struct("BlobStore")
            .field("local", &self.local.root())
            .field(
                "remote",
                &self.remote.as_ref().map(|r| r.location.to_string()),
            )
            .finish()
    }
}

const CHUNK: usize = 1 << 20;

impl BlobStore {
    /// The local store `local`, backed by `remote` when given (the client
    /// is built from the `AWS_*` environment; nothing is contacted yet).
    pub fn new(local: ArtifactStore, remote: Option<&S3Location>) -> Result<Self, String> {
        let remote = match remote {
            None => None,
            Some(loc) => {
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&loc.bucket)
                    .build()
                    // The builder's errors name settings, not their values.
                    .map_err(|e| format!("blob store {loc}: {e}"))?;
                Some(Arc::new(Remote {
                    store: Arc::new(s3),
                    location: loc.clone(),
                }))
            }
        };
        Ok(Self { local, remote })
    }

    /// The local store (on S3: this node's cache and staging area).
    pub fn local(&self) -> &ArtifactStore {
        &self.local
    }

    /// The bucket, when blobs are kept in one.
    pub fn remote_location(&self) -> Option<&S3Location> {
        self.remote.as_ref().map(|r| &r.location)
    }

    /// Stores `bytes` (at most `max_bytes`) and publishes the blob.
    pub async fn put(&self, bytes: Bytes, max_bytes: u64) -> Result<(String, u64), BlobError> {
        let local = self.local.clone();
        let (digest, size) = tokio::task::spawn_blocking(move || local.put(&bytes[..], max_bytes))
            .await
            .map_err(|e| BlobError::File(file_io("<stream>", e)))??;
        self.publish(&digest).await?;
        Ok((digest, size))
    }

    /// Makes the local blob `digest` visible to every node: uploads it to
    /// the bucket unless an object of its size is already there (writes are
    /// content-addressed, so repeating one is harmless). Local backend: a
    /// no-op.
    pub async fn publish(&self, digest: &str) -> Result<(), BlobError> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        let path = self
            .local
            .path(digest)
            .ok_or_else(|| BlobError::NotFound(digest.to_string()))?;
        let key = remote.key(digest)?;
        let size = std::fs::symlink_metadata(&path)
            .map_err(|e| BlobError::File(file_io(digest, e)))?
            .len();
        match remote.store.head(&key).await {
            Ok(meta) if meta.size == size => return Ok(()),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(remote.err(e)),
        }
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| BlobError::File(file_io(digest, e)))?;
        let mut w = object_store::buffered::BufWriter::new(remote.store.clone(), key);
        let sent = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = file
                    .read(&mut buf)
                    .await
                    .map_err(|e| BlobError::File(file_io(digest, e)))?;
                if n == 0 {
                    break;
                }
                w.put(Bytes::copy_from_slice(&buf[..n]))
                    .await
                    .map_err(|e| remote.err(e))?;
            }
            w.shutdown().await.map_err(|e| BlobError::Remote {
                location: remote.location.to_string(),
                detail: e.to_string(),
            })
        }
        .await;
        if sent.is_err() {
            // No half-written multipart upload left in the bucket.
            let _ = w.abort().await;
        }
        sent
    }

    /// The local path of blob `digest`, fetched from the bucket first when
    /// this node does not hold it. The fetch reads at most `max_bytes`, is
    /// hashed while it streams and is kept only when the bytes hash to
    /// `digest` ([`BlobError::Damaged`] otherwise; nothing is kept).
    pub async fn fetch(&self, digest: &str, max_bytes: u64) -> Result<PathBuf, BlobError> {
        if let Some(p) = self.local.path(digest) {
            return Ok(p);
        }
        let Some(remote) = &self.remote else {
            return Err(BlobError::NotFound(digest.to_string()));
        };
        let key = remote.key(digest)?;
        let got = match remote.store.get(&key).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(BlobError::NotFound(digest.to_string()));
            }
            Err(e) => return Err(remote.err(e)),
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
        let mut stream = got.into_stream();
        let pump = tokio::spawn(async move {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(std::io::Error::other);
                let stop = chunk.is_err();
                if tx.send(chunk).await.is_err() || stop {
                    break;
                }
            }
        });
        let local = self.local.clone();
        let expected = digest.to_string();
        let stored = tokio::task::spawn_blocking(move || {
            let reader = ChannelReader {
                rx,
                cur: Bytes::new(),
            };
            local.put_expecting(reader, max_bytes, &expected)
        })
        .await;
        pump.abort();
        match stored {
            Ok(Ok(_)) => {}
            Ok(Err(FileError::Io { error, .. })) if error == "digest mismatch" => {
                let e = BlobError::Damaged {
                    digest: digest.to_string(),
                    location: remote.location.to_string(),
                };
                tracing::error!(target: "airlock::blobs", digest, "{e}");
                return Err(e);
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => return Err(BlobError::File(file_io(digest, e))),
        }
        self.local
            .path(digest)
            .ok_or_else(|| BlobError::NotFound(digest.to_string()))
    }

    /// Copies blob `digest` to a new file `dest` (see
    /// [`ArtifactStore::copy_out`]), fetching it first if needed.
    pub async fn copy_out(
        &self,
        digest: &str,
        dest: &Path,
        max_bytes: u64,
    ) -> Result<u64, BlobError> {
        self.fetch(digest, max_bytes).await?;
        let local = self.local.clone();
        let (digest, dest) = (digest.to_string(), dest.to_path_buf());
        let d = digest.clone();
        tokio::task::spawn_blocking(move || local.copy_out(&d, &dest, max_bytes))
            .await
            .map_err(|e| BlobError::File(file_io(&digest, e)))?
            .map_err(BlobError::File)
    }

    /// Every blob in the bucket as `(digest, size)`, and every other key
    /// under the prefix (stray). `None` on the local backend.
    pub async fn remote_blobs(
        &self,
    ) -> Option<Result<(Vec<(String, u64)>, Vec<String>), BlobError>> {
        let remote = self.remote.as_ref()?;
        Some(remote.list().await)
    }

    /// The size of blob `digest` in the bucket (`None`: absent). Local
    /// backend: the local blob's size.
    pub async fn size(&self, digest: &str) -> Result<Option<u64>, BlobError> {
        let Some(remote) = &self.remote else {
            return Ok(self
                .local
                .path(digest)
                .and_then(|p| std::fs::symlink_metadata(p).ok())
                .map(|m| m.len()));
        };
        match remote.store.head(&remote.key(digest)?).await {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(remote.err(e)),
        }
    }

    /// Rehashes blob `digest` where it is kept (the bucket, when there is
    /// one), streaming: `Ok(true)` when its bytes hash to its name.
    pub async fn verify(&self, digest: &str) -> Result<bool, BlobError> {
        let Some(remote) = &self.remote else {
            let local = self.local.clone();
            let d = digest.to_string();
            return tokio::task::spawn_blocking(move || local.verify(&d))
                .await
                .map_err(|e| BlobError::File(file_io(digest, e)))?
                .map_err(BlobError::File);
        };
        use sha2::Digest as _;
        let key = remote.key(digest)?;
        let mut stream = remote
            .store
            .get(&key)
            .await
            .map_err(|e| remote.err(e))?
            .into_stream();
        let mut h = sha2::Sha256::new();
        while let Some(chunk) = stream.next().await {
            h.update(chunk.map_err(|e| remote.err(e))?);
        }
        Ok(hex(&h.finalize()) == digest)
    }
}

impl Remote {
    fn key(&self, digest: &str) -> Result<ObjectPath, BlobError> {
        if !well_formed(digest) {
            return Err(BlobError::File(FileError::BadName {
                path: digest.chars().take(80).collect(),
            }));
        }
        let rel = format!("sha256/{}/{digest}", &digest[..2]);
        let full = if self.location.prefix.is_empty() {
            rel
        } else {
            format!("{}/{rel}", self.location.prefix)
        };
        ObjectPath::parse(full).map_err(|e| self.err(e))
    }

    fn err(&self, e: impl std::fmt::Display) -> BlobError {
        BlobError::Remote {
            location: self.location.to_string(),
            detail: e.to_string(),
        }
    }

    async fn list(&self) -> Result<(Vec<(String, u64)>, Vec<String>), BlobError> {
        let prefix = (!self.location.prefix.is_empty())
            .then(|| ObjectPath::parse(&self.location.prefix))
            .transpose()
            .map_err(|e| self.err(e))?;
        let mut stream = self.store.list(prefix.as_ref());
        let mut blobs = Vec::new();
        let mut stray = Vec::new();
        while let Some(meta) = stream.next().await {
            let meta = meta.map_err(|e| self.err(e))?;
            let key = meta.location.to_string();
            let rel = if self.location.prefix.is_empty() {
                key.as_str()
            } else {
                key.strip_prefix(&self.location.prefix)
                    .and_then(|k| k.strip_prefix('/'))
                    .unwrap_or(&key)
            };
            match rel.strip_prefix("sha256/").and_then(|r| r.split_once('/')) {
                Some((shard, d)) if well_formed(d) && d.starts_with(shard) && shard.len() == 2 => {
                    blobs.push((d.to_string(), meta.size));
                }
                _ => stray.push(key),
            }
        }
        blobs.sort();
        stray.sort();
        Ok((blobs, stray))
    }
}

/// A blocking reader over chunks sent from an async task.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

fn file_io(path: &str, e: impl std::fmt::Display) -> FileError {
    FileError::Io {
        path: path.to_string(),
        error: e.to_string(),
    }
}

fn well_formed(d: &str) -> bool {
    d.len() == 64
        && d.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

use airlock_store::hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_5_blob_store_locations() {
        let ok = S3Location::parse("s3://my-bucket/air/lock/").unwrap();
        assert_eq!(ok.bucket, "my-bucket");
        assert_eq!(ok.prefix, "air/lock");
        assert_eq!(ok.to_string(), "s3://my-bucket/air/lock");
        assert_eq!(S3Location::parse("s3://bkt").unwrap().prefix, "");
        assert_eq!(S3Location::parse_setting("local").unwrap(), None);
        for bad in [
            "s3://key:secret@bucket/p",
            "s3://bucket/p?x=1",
            "http://bucket",
            "s3://B/p",
            "s3://bucket/a//b",
            "s3://bucket/../b",
        ] {
            assert!(S3Location::parse(bad).is_err(), "{bad}");
        }
    }
}
