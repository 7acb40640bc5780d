//! The service: one per process, shared by every front end. It owns the
//! store (no front end can reach it), the vault, the artifact store, the
//! loaded workers (the identity throttles' state is in the store).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, RwLock};

use airlock_store::Store;
use airlock_worker::Bundle;

use crate::config::Config;
use crate::error::Result;

/// The workers loaded from the workers folder.
#[derive(Debug, Default)]
pub struct Workers {
    pub bundles: BTreeMap<String, Bundle>,
    pub errors: Vec<(PathBuf, String)>,
}

/// The service. One per process; front ends share it.
pub struct Service {
    pub(crate) store: Store,
    pub(crate) cfg: Config,
    pub(crate) workers: RwLock<Workers>,
    pub(crate) artifacts: airlock_files::ArtifactStore,
    /// The same local store, and the bucket every node sees when one is
    /// configured (DUR-5). Blobs other nodes may need go through here.
    pub(crate) blobs: crate::blobs::BlobStore,
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) owner: String,
    pub(crate) cancels: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Per running run on this node: set to kill its sandbox without a
    /// grace period (the emergency stop).
    pub(crate) kills: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Set when the executor stops claiming (SIGTERM drain, DUR-2): a
    /// claimed run that has not started its workload is handed back.
    pub(crate) draining: AtomicBool,
    /// Runs whose sandbox the drain stopped when its grace period ended:
    /// settled by the drain's rules, not finished as cancelled.
    pub(crate) drain_stopped: Mutex<HashSet<String>>,
    /// Per workspace: its emergency stop as this node knows it, read by
    /// the egress proxies of its sandboxes on every request.
    pub(crate) stops: Mutex<HashMap<String, Arc<AtomicBool>>>,
    pub(crate) secrets: crate::secrets::Secrets,
    /// The last bounding of the shared login throttle table by this
    /// process: accounts, clients.
    pub(crate) last_throttle_prune: [AtomicI64; 2],
    /// The last prune of the webhook replay store by this process.
    pub(crate) last_delivery_prune: AtomicI64,
    /// The upload link-signing key, read once from the key directory.
    pub(crate) download_key: tokio::sync::OnceCell<[u8; 32]>,
    /// How the executor starts sandboxes (the real broker and proxy, or a
    /// recording fake in tests).
    pub(crate) launcher: Arc<dyn airlock_launch::Launcher>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// Creates `dir` (and missing parents) 0700, or removes group and other
/// bits from it when an older version left it open: the data directory
/// holds the database, artifacts, uploads and run inputs, which are the
/// airlock user's alone.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !0o077))?;
    }
    Ok(())
}

pub(crate) fn sha256_file(p: &Path) -> Option<String> {
    let bytes = std::fs::read(p).ok()?;
    Some(airlock_store::sha256_hex(&bytes))
}

/// The database at `url` as `airlock doctor` sees it, read without
/// creating, migrating or writing anything: whether it is reachable, the
/// schema version applied and the one this build knows.
pub async fn inspect_database(url: &str) -> Result<DatabaseReport> {
    let state = airlock_store::Store::inspect(url).await.map_err(|e| {
        airlock_protocol::Error::new(airlock_protocol::ErrorCode::Internal, e.to_string())
    })?;
    Ok(DatabaseReport {
        exists: !matches!(state, airlock_store::DatabaseState::Absent),
        schema_version: match state {
            airlock_store::DatabaseState::Absent => 0,
            airlock_store::DatabaseState::Reachable { schema_version } => schema_version,
        },
        known_version: airlock_store::SCHEMA_VERSION,
    })
}

/// Opens `url` and applies every migration this build knows (the owner's
/// step of the two-role PostgreSQL setup, AUD-3): the schema version now.
pub async fn migrate_database(url: &str) -> Result<i64> {
    let store = airlock_store::Store::open(url).await.map_err(|e| {
        airlock_protocol::Error::new(airlock_protocol::ErrorCode::Internal, e.to_string())
    })?;
    store.pool().close().await;
    Ok(airlock_store::SCHEMA_VERSION)
}

/// The SQL the owner runs to give the PostgreSQL runtime role `role` what
/// the server needs and, on the audit log, only INSERT and SELECT (AUD-3).
pub fn postgres_runtime_grants(role: &str) -> Result<String> {
    airlock_store::postgres_runtime_grants(role).ok_or_else(|| {
        airlock_protocol::Error::invalid_query(
            "the role must be a lowercase identifier: a-z, 0-9 and _, at most 63 characters",
        )
    })
}

/// What [`inspect_database`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseReport {
    /// False for a SQLite file not created yet.
    pub exists: bool,
    pub schema_version: i64,
    pub known_version: i64,
}

impl Service {
    /// Opens the database at `url` (`sqlite://…` or `postgres://…`,
    /// migrating it) and the service over it.
    pub async fn connect(url: &str, cfg: Config) -> Result<Arc<Self>> {
        let store = Store::open(url).await.map_err(|e| {
            airlock_protocol::Error::internal(format!("cannot open the database: {e}"))
        })?;
        Self::open(store, cfg)
    }

    /// The service over an open store. The caller wires; nobody else
    /// keeps using the store through the service.
    pub fn open(store: Store, cfg: Config) -> Result<Arc<Self>> {
        // A pool that cannot start (no thread) leaves every launch cold.
        let broker = airlock_sandbox::Broker::new();
        let broker = broker.clone().with_pool(cfg.sandbox_pool).unwrap_or(broker);
        // Runs and tool calls of workers that keep the default limits (most
        // do) find sandboxes ready from the first one. Ids that cannot be
        // resolved fail each launch with the reason; nothing to report here.
        let defaults = airlock_worker::Limits::default();
        let _ = broker.stock(&crate::executor::sandbox_limits(&defaults));
        let launcher = airlock_launch::SandboxLauncher::with_broker(broker);
        Self::open_with_launcher(store, cfg, Arc::new(launcher))
    }

    /// A service whose executor starts sandboxes through `launcher` (the
    /// real broker and proxy, or a recording fake in tests).
    pub fn open_with_launcher(
        store: Store,
        cfg: Config,
        launcher: Arc<dyn airlock_launch::Launcher>,
    ) -> Result<Arc<Self>> {
        let dir_error =
            |e: std::io::Error| airlock_protocol::Error::internal(format!("data directory: {e}"));
        private_dir(&cfg.data_dir).map_err(dir_error)?;
        private_dir(&cfg.data_dir.join("runs")).map_err(dir_error)?;
        private_dir(&cfg.data_dir.join("artifacts")).map_err(dir_error)?;
        let secrets = crate::secrets::Secrets::open(&cfg.key_dir, store.clone())?;
        let artifacts = airlock_files::ArtifactStore::open(&cfg.data_dir.join("artifacts"))
            .map_err(|e| airlock_protocol::Error::internal(format!("artifact store: {e}")))?;
        let blobs = crate::blobs::BlobStore::new(artifacts.clone(), cfg.blob_store.as_ref())
            .map_err(airlock_protocol::Error::internal)?
            .with_cache_max(cfg.blob_cache_max);
        let owner = format!("{}:{}", cfg.node_id, std::process::id());
        let svc = Arc::new(Self {
            store,
            cfg,
            workers: RwLock::new(Workers::default()),
            artifacts,
            blobs,
            wake: tokio::sync::Notify::new(),
            owner,
            cancels: Mutex::new(HashMap::new()),
            kills: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            drain_stopped: Mutex::new(HashSet::new()),
            stops: Mutex::new(HashMap::new()),
            secrets,
            last_throttle_prune: [AtomicI64::new(i64::MIN), AtomicI64::new(i64::MIN)],
            last_delivery_prune: AtomicI64::new(i64::MIN),
            download_key: tokio::sync::OnceCell::new(),
            launcher,
        });
        svc.load_workers();
        Ok(svc)
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Unix milliseconds on the service's clock.
    pub fn now(&self) -> i64 {
        self.cfg.clock.now_ms()
    }

    /// How many workers are loaded.
    pub fn loaded_workers(&self) -> usize {
        self.workers.read().map(|w| w.bundles.len()).unwrap_or(0)
    }

    /// `sqlite` or `postgres`.
    pub fn database_backend(&self) -> &'static str {
        match self.store.backend() {
            airlock_store::Backend::Sqlite => "sqlite",
            airlock_store::Backend::Postgres => "postgres",
        }
    }

    /// Where blobs are kept: `local`, or the bucket's `s3://bucket/prefix`
    /// (never a credential).
    pub fn blob_store(&self) -> String {
        self.blobs
            .remote_location()
            .map_or_else(|| "local".to_string(), ToString::to_string)
    }

    /// Whether the database answers and its schema is current (`/readyz`).
    pub async fn ready(&self) -> bool {
        matches!(self.store.ready().await, Ok(true))
    }

    /// `(worker id, declared secret names)` for every loaded worker.
    pub(crate) fn declared_secrets(&self) -> Vec<(String, Vec<String>)> {
        let Ok(w) = self.workers.read() else {
            return Vec::new();
        };
        w.bundles
            .values()
            .map(|b| {
                (
                    b.id.as_str().to_string(),
                    b.manifest
                        .secrets
                        .names
                        .iter()
                        .map(|n| n.as_str().to_string())
                        .collect(),
                )
            })
            .collect()
    }

    /// RUN-2: (re)loads every bundle; a broken one is reported and skipped.
    pub(crate) fn load_workers(&self) -> (Vec<String>, Vec<(PathBuf, String)>) {
        let (bundles, errors) = airlock_worker::load_workers_dir(&self.cfg.workers_dir);
        let ids: Vec<String> = bundles.iter().map(|b| b.id.as_str().to_string()).collect();
        let errors: Vec<(PathBuf, String)> = errors
            .into_iter()
            .map(|(p, e)| (p, e.to_string()))
            .collect();
        if let Ok(mut w) = self.workers.write() {
            w.bundles = bundles
                .into_iter()
                .map(|b| (b.id.as_str().to_string(), b))
                .collect();
            w.errors = errors.clone();
        }
        (ids, errors)
    }

    /// A loaded worker, whatever its workspace (the executor's view).
    pub(crate) fn worker(&self, id: &str) -> Option<Bundle> {
        self.workers.read().ok()?.bundles.get(id).cloned()
    }

    /// A worker as `workspace` sees it: only the workspace that owns the
    /// workers folder sees its bundles.
    pub(crate) fn worker_in(&self, workspace: &str, id: &str) -> Option<Bundle> {
        if workspace != self.cfg.workers_workspace {
            return None;
        }
        self.worker(id)
    }

    /// Load problems of the workers folder.
    pub fn worker_errors(&self) -> Vec<(PathBuf, String)> {
        self.workers
            .read()
            .map(|w| w.errors.clone())
            .unwrap_or_default()
    }
}
