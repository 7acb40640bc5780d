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
//! With a bucket the local store is a cache bounded by
//! [`BlobStore::with_cache_max`] ([`BlobStore::evict`]: least recently used
//! first, only blobs known to be in the bucket). Requests to the bucket
//! have bounded timeouts and retries; a failure reaching it is
//! [`BlobError::Remote`], which callers turn into `blob_store_unavailable`
//! ([`BlobError::to_error`]). `airlock gc` moves the bucket's orphans to
//! `<prefix>/trash/<gc id>/` and back through the `gc` primitives below.
//!
//! Credentials come from the standard `AWS_*` environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, or an
//! instance/container role); the location names no secret (a URL with
//! user information is refused) and nothing here formats the client, whose
//! `Debug` could show a key.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_files::{ArtifactStore, FileError};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::ClientConfigKey;
use object_store::aws::AmazonS3ConfigKey;
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

/// The bucket's blobs `(digest, size, last modified ms)` and stray keys.
pub type RemoteListing = (Vec<(String, u64, i64)>, Vec<String>);

impl BlobError {
    /// What a caller is told when `what` failed on this error: a bucket that
    /// cannot be reached (or refuses) is `blob_store_unavailable` (503)
    /// naming the store, with the client's detail in this node's log only;
    /// a missing blob is `not_found`; anything else is internal.
    pub fn to_error(&self, what: &str) -> airlock_protocol::Error {
        match self {
            BlobError::Remote { location, detail } => {
                tracing::warn!(target: "airlock::blobs", location, detail, "{what}: the blob store failed");
                airlock_protocol::Error::new(
                    airlock_protocol::ErrorCode::BlobStoreUnavailable,
                    format!(
                        "{what}: the blob store {location} could not be reached or refused the request; retry later"
                    ),
                )
            }
            BlobError::NotFound(_) => airlock_protocol::Error::not_found(),
            e => airlock_protocol::Error::internal(format!("{what}: {e}")),
        }
    }
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
    cache: Arc<Cache>,
}

/// This node's cache of the bucket's blobs (the local store, when a bucket
/// is configured), kept under a bound: least recently used blobs that are
/// known to be in the bucket are removed first.
struct Cache {
    max: u64,
    /// Digests this process saw in the bucket (published or fetched).
    confirmed: Mutex<std::collections::HashSet<String>>,
    /// What the cache holds, as far as this process knows (`None`: not
    /// counted yet). An estimate: it only decides when to count for real.
    approx: Mutex<Option<u64>>,
    /// One eviction pass at a time.
    evicting: tokio::sync::Mutex<()>,
}

/// What `gc restore` found when it put a blob back into the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Restored {
    /// Back under its name, its bytes hashing to it.
    Done,
    /// An object already has that name; nothing was overwritten.
    Exists,
    /// The copy's bytes hash to this instead (the copy was removed again).
    Damaged(String),
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
/// How long connecting to the bucket may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request to the bucket may take (a part of an upload is at
/// most 10 MiB).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a failed request is retried, and for how long at most.
pub const MAX_RETRIES: usize = 3;
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(20);
/// The default bound on this node's cache of the bucket's blobs.
pub const DEFAULT_CACHE_MAX: u64 = 1 << 30;
/// Where `gc` keeps what it moved out of the bucket: `<prefix>/trash/<id>/`.
pub const TRASH_PREFIX: &str = "trash";

impl BlobStore {
    /// The local store `local`, backed by `remote` when given (the client
    /// is built from the `AWS_*` environment; nothing is contacted yet).
    pub fn new(local: ArtifactStore, remote: Option<&S3Location>) -> Result<Self, String> {
        let remote = match remote {
            None => None,
            Some(loc) => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&loc.bucket)
                    // Bounded: a bucket that cannot be reached is an error
                    // within seconds, never a request that hangs.
                    // (Set on the options read from the environment,
                    // which hold `AWS_ALLOW_HTTP` and the like.)
                    .with_config(
                        AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                        format!("{}s", CONNECT_TIMEOUT.as_secs()),
                    )
                    .with_config(
                        AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                        format!("{}s", REQUEST_TIMEOUT.as_secs()),
                    )
                    .with_retry(object_store::RetryConfig {
                        backoff: object_store::BackoffConfig::default(),
                        max_retries: MAX_RETRIES,
                        retry_timeout: RETRY_TIMEOUT,
                    });
                // `gc restore` never overwrites: a copy that completes only
                // when the name is free (a one-part multipart copy finished
                // with `If-None-Match: *`), unless the operator chose
                // another way (`AWS_COPY_IF_NOT_EXISTS`, e.g. a header).
                if std::env::var_os("AWS_COPY_IF_NOT_EXISTS").is_none() {
                    b = b.with_copy_if_not_exists(object_store::aws::S3CopyIfNotExists::Multipart);
                }
                let s3 = b
                    .build()
                    // The builder's errors name settings, not their values.
                    .map_err(|e| format!("blob store {loc}: {e}"))?;
                Some(Arc::new(Remote {
                    store: Arc::new(s3),
                    location: loc.clone(),
                }))
            }
        };
        Ok(Self {
            local,
            remote,
            cache: Arc::new(Cache {
                max: DEFAULT_CACHE_MAX,
                confirmed: Mutex::default(),
                approx: Mutex::new(None),
                evicting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Bounds this node's cache to `max` bytes (with a bucket only: the
    /// local backend's store is the blobs themselves and is never evicted).
    #[must_use]
    pub fn with_cache_max(mut self, max: u64) -> Self {
        self.cache = Arc::new(Cache {
            max,
            confirmed: Mutex::default(),
            approx: Mutex::new(None),
            evicting: tokio::sync::Mutex::new(()),
        });
        self
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
        let key = remote.key(digest)?;
        let head = match remote.store.head(&key).await {
            Ok(meta) => Some(meta.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(remote.err(e)),
        };
        let Some(path) = self.local.path(digest) else {
            // Evicted from this node's cache: it was confirmed in the
            // bucket first, which still has it.
            return match head {
                Some(_) => Ok(()),
                None => Err(BlobError::NotFound(digest.to_string())),
            };
        };
        let size = std::fs::symlink_metadata(&path)
            .map_err(|e| BlobError::File(file_io(digest, e)))?
            .len();
        if head == Some(size) {
            self.cached(digest, size).await;
            return Ok(());
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
        } else {
            self.cached(digest, size).await;
        }
        sent
    }

    /// The local path of blob `digest`, fetched from the bucket first when
    /// this node does not hold it. The fetch reads at most `max_bytes`, is
    /// hashed while it streams and is kept only when the bytes hash to
    /// `digest` ([`BlobError::Damaged`] otherwise; nothing is kept).
    pub async fn fetch(&self, digest: &str, max_bytes: u64) -> Result<PathBuf, BlobError> {
        if let Some(p) = self.local.path(digest) {
            if self.remote.is_some() {
                // Used now: the last to be evicted (best effort; only the
                // cache's order depends on it).
                let _ = std::fs::File::open(&p)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            }
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
        let size = match stored {
            Ok(Ok(size)) => size,
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
        };
        self.cached(digest, size).await;
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

    /// Every blob in the bucket as `(digest, size, last modified in unix
    /// ms)`, and every other key under the prefix (stray; `gc`'s trash area
    /// `<prefix>/trash/` is neither). `None` on the local backend.
    pub async fn remote_blobs(&self) -> Option<Result<RemoteListing, BlobError>> {
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
        Ok(remote.hash_of(&remote.key(digest)?).await? == digest)
    }
}

// ---------------------------------------------------------------- cache

impl BlobStore {
    /// Blob `digest` (`size` bytes) is in this node's cache and in the
    /// bucket: it may be evicted from now on; evicts when the cache is over
    /// its bound (never `digest` itself: its caller is about to use it).
    async fn cached(&self, digest: &str, size: u64) {
        if self.remote.is_none() {
            return;
        }
        if let Ok(mut c) = self.cache.confirmed.lock() {
            c.insert(digest.to_string());
        }
        let over = match self.cache.approx.lock() {
            Ok(mut a) => match a.as_mut() {
                Some(t) => {
                    *t = t.saturating_add(size);
                    *t > self.cache.max
                }
                None => true,
            },
            Err(_) => false,
        };
        if over {
            self.evict(Some(digest)).await;
        }
    }

    /// Removes least recently used cached blobs (oldest modification time
    /// first: a use touches it) until the cache is within its bound. Only
    /// a blob known to be in the bucket goes: one this process published
    /// or fetched, or one a `HEAD` finds there with its size; a blob being
    /// written (still in `tmp/`) or not yet published is never touched.
    /// Answers the bytes left. Local backend: nothing is evicted.
    pub async fn evict(&self, keep: Option<&str>) -> u64 {
        let Some(remote) = &self.remote else {
            return 0;
        };
        let Ok(_one) = self.cache.evicting.try_lock() else {
            return 0;
        };
        let local = self.local.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let blobs = local.blobs().map(|l| l.blobs).unwrap_or_default();
            let mut out: Vec<(std::time::SystemTime, String, PathBuf, u64)> = blobs
                .into_iter()
                .filter_map(|(d, p, size)| {
                    let m = std::fs::symlink_metadata(&p).ok()?.modified().ok()?;
                    Some((m, d, p, size))
                })
                .collect();
            out.sort();
            out
        })
        .await
        .unwrap_or_default();
        let mut total: u64 = listed.iter().map(|(_, _, _, n)| n).sum();
        for (_, digest, path, size) in listed {
            if total <= self.cache.max {
                break;
            }
            if Some(digest.as_str()) == keep {
                continue;
            }
            let known = self
                .cache
                .confirmed
                .lock()
                .is_ok_and(|c| c.contains(&digest));
            let in_bucket = known
                || match remote.key(&digest) {
                    Ok(k) => matches!(remote.store.head(&k).await, Ok(m) if m.size == size),
                    Err(_) => false,
                };
            if in_bucket && std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(size);
                if let Ok(mut c) = self.cache.confirmed.lock() {
                    c.remove(&digest);
                }
            }
        }
        if let Ok(mut a) = self.cache.approx.lock() {
            *a = Some(total);
        }
        total
    }

    /// Removes this node's cached copy of `digest`, if any (with a bucket,
    /// the local store is only a cache).
    pub(crate) fn drop_cached(&self, digest: &str) -> Result<bool, BlobError> {
        let Some(path) = self.local.path(digest) else {
            return Ok(false);
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(BlobError::File(file_io(digest, e))),
        }
        if let Ok(mut c) = self.cache.confirmed.lock() {
            c.remove(digest);
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------- gc

impl BlobStore {
    fn bucket(&self) -> Result<&Remote, BlobError> {
        self.remote
            .as_deref()
            .ok_or_else(|| BlobError::NotFound("no bucket is configured".into()))
    }

    /// The key of blob `digest` in the bucket, as written in a manifest.
    pub(crate) fn key_name(&self, digest: &str) -> Result<String, BlobError> {
        Ok(self.bucket()?.key(digest)?.to_string())
    }

    /// `(size, last modified ms)` of blob `digest` in the bucket.
    pub(crate) async fn remote_meta(&self, digest: &str) -> Result<Option<(u64, i64)>, BlobError> {
        let r = self.bucket()?;
        r.head_of(&r.key(digest)?).await
    }

    /// Whether trash area `id` of the bucket holds `digest` (its size).
    pub(crate) async fn trash_meta(
        &self,
        id: &str,
        digest: &str,
    ) -> Result<Option<u64>, BlobError> {
        let r = self.bucket()?;
        Ok(r.head_of(&r.trash_key(id, digest)?).await?.map(|(n, _)| n))
    }

    /// Moves blob `digest` into trash area `id` of the bucket: copied to
    /// `<prefix>/trash/<id>/sha256/<aa>/<digest>`, the copy's size checked
    /// against the original's, then the original deleted.
    pub(crate) async fn move_to_trash(&self, id: &str, digest: &str) -> Result<(), BlobError> {
        let r = self.bucket()?;
        let (from, to) = (r.key(digest)?, r.trash_key(id, digest)?);
        let Some((size, _)) = r.head_of(&from).await? else {
            return Err(BlobError::NotFound(digest.to_string()));
        };
        r.store.copy(&from, &to).await.map_err(|e| r.err(e))?;
        match r.head_of(&to).await? {
            Some((n, _)) if n == size => {}
            other => {
                return Err(r.err(format!(
                    "the trash copy of {digest} has {other:?} bytes, the blob {size}"
                )));
            }
        }
        r.store.delete(&from).await.map_err(|e| r.err(e))
    }

    /// Puts blob `digest` back from trash area `id`: a copy that happens
    /// only when no object has the blob's name (never overwriting), then
    /// the restored object rehashed as it streams; a copy whose bytes do
    /// not hash to the name is removed again. The trash copy is deleted
    /// once the blob is back intact.
    pub(crate) async fn restore_from_trash(
        &self,
        id: &str,
        digest: &str,
    ) -> Result<Restored, BlobError> {
        let r = self.bucket()?;
        let (from, to) = (r.trash_key(id, digest)?, r.key(digest)?);
        match r.store.copy_if_not_exists(&from, &to).await {
            Ok(()) => {}
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(Restored::Exists),
            Err(e) => return Err(r.err(e)),
        }
        let got = r.hash_of(&to).await?;
        if got != digest {
            r.store.delete(&to).await.map_err(|e| r.err(e))?;
            return Ok(Restored::Damaged(got));
        }
        r.store.delete(&from).await.map_err(|e| r.err(e))?;
        Ok(Restored::Done)
    }

    /// Deletes every object of trash area `id` in the bucket; answers how
    /// many.
    pub(crate) async fn purge_trash(&self, id: &str) -> Result<u64, BlobError> {
        let r = self.bucket()?;
        let prefix = r.trash_root(id)?;
        let mut keys = Vec::new();
        let mut stream = r.store.list(Some(&prefix));
        while let Some(meta) = stream.next().await {
            keys.push(meta.map_err(|e| r.err(e))?.location);
        }
        for k in &keys {
            match r.store.delete(k).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(r.err(e)),
            }
        }
        Ok(keys.len() as u64)
    }
}

impl Remote {
    async fn head_of(&self, key: &ObjectPath) -> Result<Option<(u64, i64)>, BlobError> {
        match self.store.head(key).await {
            Ok(m) => Ok(Some((m.size, m.last_modified.timestamp_millis()))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(e)),
        }
    }

    async fn hash_of(&self, key: &ObjectPath) -> Result<String, BlobError> {
        use sha2::Digest as _;
        let mut stream = self
            .store
            .get(key)
            .await
            .map_err(|e| self.err(e))?
            .into_stream();
        let mut h = sha2::Sha256::new();
        while let Some(chunk) = stream.next().await {
            h.update(chunk.map_err(|e| self.err(e))?);
        }
        Ok(hex(&h.finalize()))
    }

    fn prefixed(&self, rel: &str) -> Result<ObjectPath, BlobError> {
        let full = if self.location.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.location.prefix)
        };
        ObjectPath::parse(full).map_err(|e| self.err(e))
    }

    fn trash_root(&self, id: &str) -> Result<ObjectPath, BlobError> {
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(self.err(format!("{id:?} is not a gc id")));
        }
        self.prefixed(&format!("{TRASH_PREFIX}/{id}"))
    }

    fn trash_key(&self, id: &str, digest: &str) -> Result<ObjectPath, BlobError> {
        self.trash_root(id)?;
        if !well_formed(digest) {
            return Err(BlobError::NotFound(digest.chars().take(80).collect()));
        }
        self.prefixed(&format!(
            "{TRASH_PREFIX}/{id}/sha256/{}/{digest}",
            &digest[..2]
        ))
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

    async fn list(&self) -> Result<RemoteListing, BlobError> {
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
            if rel
                .strip_prefix(TRASH_PREFIX)
                .is_some_and(|r| r.starts_with('/'))
            {
                continue;
            }
            match rel.strip_prefix("sha256/").and_then(|r| r.split_once('/')) {
                Some((shard, d)) if well_formed(d) && d.starts_with(shard) && shard.len() == 2 => {
                    blobs.push((
                        d.to_string(),
                        meta.size,
                        meta.last_modified.timestamp_millis(),
                    ));
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
