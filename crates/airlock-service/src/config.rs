//! How a service runs: paths, node identity, executor limits, identity
//! timeouts and throttles, durable quotas, and the clock.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_iam::throttle::ThrottleConfig;
use airlock_iam::{Clock, SystemClock};
use airlock_sandbox::DriverChoice;

/// Identity rules that are settings (IAM-2, IAM-3).
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// A session unused this long ends.
    pub idle_timeout: Duration,
    /// A session ends this long after login, used or not.
    pub absolute_timeout: Duration,
    /// Failed logins per account name.
    pub account_throttle: ThrottleConfig,
    /// Failed logins, bootstraps and resets per client address.
    pub client_throttle: ThrottleConfig,
    /// Lifetime of an invitation's set-password token.
    pub invite_ttl: Duration,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(12 * 3600),
            absolute_timeout: Duration::from_secs(7 * 24 * 3600),
            account_throttle: ThrottleConfig::per_account(),
            client_throttle: ThrottleConfig::per_client(),
            invite_ttl: Duration::from_secs(72 * 3600),
        }
    }
}

/// Durable daily quotas (API-4), kept in the database so a restart or a
/// second node does not reset them. `i64::MAX` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub runs_per_user_per_day: i64,
    pub runs_per_workspace_per_day: i64,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            runs_per_user_per_day: 10_000,
            runs_per_workspace_per_day: 50_000,
        }
    }
}

impl Quotas {
    pub fn unlimited() -> Self {
        Self {
            runs_per_user_per_day: i64::MAX,
            runs_per_workspace_per_day: i64::MAX,
        }
    }
}

/// The SIGTERM drain's default grace period (`airlock up --drain-grace`).
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(30);

/// How a service runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub workers_dir: PathBuf,
    /// Stable name of this node (lease owner prefix).
    pub node_id: String,
    /// Global cap on concurrently executing runs on this node (RUN-7).
    pub max_concurrent: usize,
    pub lease: Duration,
    /// SIGTERM drain (DUR-2): how long running runs may go on finishing
    /// after the executor stops claiming; then their sandboxes are
    /// stopped and they are settled.
    pub drain_grace: Duration,
    /// Operator egress policy (channels live here).
    pub egress_policy: Option<PathBuf>,
    pub driver: DriverChoice,
    /// Key directory (KEK, high-water marks); outside the database.
    pub key_dir: PathBuf,
    /// Where signed audit checkpoints are written (AUD-4); default
    /// `<key_dir>/checkpoints`.
    pub checkpoint_dir: Option<PathBuf>,
    /// How often `airlock up` signs a checkpoint of each chain whose head
    /// moved (zero: only at a clean shutdown and on demand).
    pub checkpoint_interval: Duration,
    /// The workspace the local workers folder belongs to (IAM-6: other
    /// workspaces neither see nor run these workers).
    pub workers_workspace: String,
    pub identity: IdentityConfig,
    pub quotas: Quotas,
    /// Time for sessions, tokens, quotas and links (tests move it by hand).
    pub clock: Arc<dyn Clock>,
    /// Non-public networks a keyless model profile (`base_url`) may reach,
    /// e.g. a llama.cpp server on this host (`AIRLOCK_MODEL_ALLOW_PRIVATE`).
    /// Channels name their own upstream, which the operator chose.
    pub model_allow_private: Vec<airlock_egress::policy::Cidr>,
    /// Pre-built sandboxes kept ready per kind of launch (0: none; see
    /// `airlock_sandbox::Broker::with_pool`). `airlock up` keeps 2.
    pub sandbox_pool: usize,
    /// Where sandbox proxies write one line per decision and per closed
    /// connection (NET-7); `airlock up` points it at its structured log.
    pub egress_log: Arc<dyn airlock_egress::proxy::LogSink>,
    /// How often `airlock up` runs the retention pass over workspaces with
    /// retention settings (DUR-7; zero: never).
    pub retention_interval: Duration,
    /// Where blobs (artifacts, uploads) are kept beyond this node
    /// (`--blob-store` / `AIRLOCK_BLOB_STORE`): `None` is the local
    /// directory `<data>/artifacts` alone; an S3 bucket is shared by every
    /// node, with the local directory as this node's cache (DUR-5).
    pub blob_store: Option<crate::blobs::S3Location>,
    /// With a bucket: the bound on this node's cache of its blobs, in bytes
    /// (`--blob-cache-max` / `AIRLOCK_BLOB_CACHE_MAX`, default 1 GiB);
    /// least recently used blobs known to be in the bucket are evicted.
    pub blob_cache_max: u64,
}

impl Config {
    pub fn with_defaults(data_dir: PathBuf, workers_dir: PathBuf) -> Self {
        Self {
            data_dir: data_dir.clone(),
            workers_dir,
            node_id: format!("node-{}", hostname()),
            max_concurrent: 4,
            lease: Duration::from_secs(30),
            drain_grace: DEFAULT_DRAIN_GRACE,
            egress_policy: None,
            driver: DriverChoice::Auto,
            key_dir: data_dir.join("keys"),
            checkpoint_dir: None,
            checkpoint_interval: Duration::from_secs(60),
            workers_workspace: airlock_store::DEFAULT_WORKSPACE.to_string(),
            identity: IdentityConfig::default(),
            quotas: Quotas::default(),
            clock: Arc::new(SystemClock),
            model_allow_private: Vec::new(),
            sandbox_pool: 0,
            egress_log: Arc::new(airlock_egress::proxy::NullLog),
            retention_interval: Duration::from_secs(3600),
            blob_store: None,
            blob_cache_max: crate::blobs::DEFAULT_CACHE_MAX,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "local".into())
}
