//! What every command shares: where things live, the runtime, how errors
//! and exit codes look, and how a command gets its [`Door`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use airlock_service::{Caller, Config, Service};
use clap::Args;

use crate::client::Remote;
use crate::door::Door;

/// Exit status when airlock itself could not do what was asked.
pub const EXIT_AIRLOCK: u8 = 125;

/// Where things live (SPEC §2), from the environment with embedded defaults.
#[derive(Debug, Clone, Args)]
pub struct Paths {
    /// Data directory (SQLite database, artifacts).
    #[arg(long, env = "AIRLOCK_DATA_DIR", default_value = "data", global = true)]
    pub data_dir: PathBuf,
    /// Worker bundles folder.
    #[arg(
        long,
        env = "AIRLOCK_WORKERS_DIR",
        default_value = "workers",
        global = true
    )]
    pub workers_dir: PathBuf,
    /// Database URL; default: SQLite in the data directory.
    #[arg(long, env = "AIRLOCK_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// Operator egress policy (credential channels).
    #[arg(long, env = "AIRLOCK_EGRESS_POLICY", global = true)]
    pub egress_policy: Option<PathBuf>,
    /// Non-public networks (CIDRs, comma-separated) a keyless model profile
    /// (`base_url`) may reach, e.g. `127.0.0.1/32` for a local llama.cpp
    /// server. Cloud metadata addresses are never reachable.
    #[arg(long, env = "AIRLOCK_MODEL_ALLOW_PRIVATE", value_delimiter = ',', value_parser = parse_cidr, global = true)]
    pub model_allow_private: Vec<airlock_egress::policy::Cidr>,
    /// Key directory (KEK, high-water marks): outside the database, 0700.
    #[arg(long, env = "AIRLOCK_KEY_DIR", global = true)]
    pub key_dir: Option<PathBuf>,
    /// Where signed audit checkpoints are kept (default: `checkpoints/` in
    /// the key directory). Keep it where the database's holder cannot write.
    #[arg(long, env = "AIRLOCK_CHECKPOINT_DIR", global = true)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Talk to a server with the stored API key (`airlock login`) instead
    /// of opening the local database (`run`, `plan`, `runs …`,
    /// `secrets …`, `approvals …`, `stop`, `resume`, `audit verify`).
    #[arg(long, env = "AIRLOCK_REMOTE", global = true)]
    pub remote: bool,
    /// Where blobs (artifacts, uploads) are kept: `local` (the data
    /// directory) or `s3://bucket/prefix`, shared by every node on one
    /// database. Credentials, region and endpoint come from the standard
    /// `AWS_*` environment variables, never from this value.
    #[arg(long, env = "AIRLOCK_BLOB_STORE", value_parser = parse_blob_store, global = true)]
    pub blob_store: Option<BlobSetting>,
    /// With an S3 blob store: the bound on this node's cache of the
    /// bucket's blobs (`<data>/artifacts`), in bytes (a `K`, `M` or `G`
    /// suffix multiplies by 1024s); least recently used blobs known to be
    /// in the bucket are evicted. Default 1G.
    #[arg(long, env = "AIRLOCK_BLOB_CACHE_MAX", value_parser = parse_bytes, global = true)]
    pub blob_cache_max: Option<u64>,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("{s:?} is not a size in bytes (e.g. 1073741824 or 1G)"))
}

/// A parsed `--blob-store` (`None` inside: the local directory).
#[derive(Debug, Clone)]
pub struct BlobSetting(pub Option<airlock_service::S3Location>);

fn parse_blob_store(s: &str) -> Result<BlobSetting, String> {
    airlock_service::S3Location::parse_setting(s).map(BlobSetting)
}

fn parse_cidr(s: &str) -> Result<airlock_egress::policy::Cidr, String> {
    airlock_egress::policy::Cidr::parse(s.trim()).map_err(|e| format!("{s:?}: {e}"))
}

impl Paths {
    pub fn url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("airlock.db").display()))
    }

    /// Where checkpoints and their signing key live.
    pub fn checkpoints(&self) -> airlock_service::Checkpoints {
        let cfg = self.config();
        airlock_service::Checkpoints::new(cfg.key_dir, cfg.checkpoint_dir)
    }

    pub fn config(&self) -> Config {
        let mut c = Config::with_defaults(self.data_dir.clone(), self.workers_dir.clone());
        c.egress_policy = self.egress_policy.clone();
        c.model_allow_private = self.model_allow_private.clone();
        if let Some(k) = &self.key_dir {
            c.key_dir = k.clone();
        }
        c.checkpoint_dir = self.checkpoint_dir.clone();
        c.blob_store = self.blob_store.clone().and_then(|b| b.0);
        if let Some(n) = self.blob_cache_max {
            c.blob_cache_max = n;
        }
        if let Some(secs) = std::env::var("AIRLOCK_CHECKPOINT_INTERVAL_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.checkpoint_interval = Duration::from_secs(secs);
        }
        if let Some(ms) = std::env::var("AIRLOCK_LEASE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.lease = Duration::from_millis(ms);
        }
        if let Some(n) = std::env::var("AIRLOCK_MAX_CONCURRENT")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.max_concurrent = n;
        }
        if let Ok(id) = std::env::var("AIRLOCK_NODE_ID")
            && !id.is_empty()
            && id.len() <= 64
            && !id.contains(':')
        {
            c.node_id = id;
        }
        c
    }
}

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// Opens the local database and the service over it.
pub async fn open(paths: &Paths) -> Result<Arc<Service>, String> {
    open_with(paths, paths.config()).await
}

/// [`open`] with a configuration the command adjusted.
pub async fn open_with(paths: &Paths, cfg: Config) -> Result<Arc<Service>, String> {
    std::fs::create_dir_all(&paths.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", paths.data_dir.display()))?;
    Service::connect(&paths.url(), cfg)
        .await
        .map_err(|e| e.message)
}

/// One line on stderr and exit 125.
pub fn err(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("airlock: {msg}");
    ExitCode::from(EXIT_AIRLOCK)
}

/// An error of the service or a server, with its code.
pub fn fail(e: &airlock_protocol::Error) -> ExitCode {
    err(format!("{}: {}", e.code, e.message))
}

/// Runs `f` on a fresh runtime; its error becomes exit 125.
pub fn block_on(f: impl AsyncFnOnce() -> ExitCode) -> ExitCode {
    match runtime() {
        Ok(rt) => rt.block_on(f()),
        Err(e) => err(e),
    }
}

/// Runs `f` with the local service on a fresh runtime: the shape of every
/// operator command on the server's own files.
pub fn with_service(paths: &Paths, f: impl AsyncFnOnce(Arc<Service>) -> ExitCode) -> ExitCode {
    block_on(async move || match open(paths).await {
        Ok(svc) => f(svc).await,
        Err(e) => err(e),
    })
}

/// Runs `f` with the door `--remote` chooses: a server with the stored
/// key, or the local service as the operator of the workers' workspace.
pub fn with_door(paths: &Paths, f: impl AsyncFnOnce(Door) -> ExitCode) -> ExitCode {
    block_on(async move || {
        let door = if paths.remote {
            match Remote::from_login() {
                Ok(r) => Door::Remote(r),
                Err(e) => return err(e),
            }
        } else {
            match open(paths).await {
                Ok(svc) => {
                    let caller = Caller::operator(&svc.config().workers_workspace);
                    Door::Local { svc, caller }
                }
                Err(e) => return err(e),
            }
        };
        f(door).await
    })
}

/// `--input` as JSON text or `@FILE`, at most 1 MiB.
pub fn parse_input(s: &str) -> Result<serde_json::Value, String> {
    let text = match s.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("--input @{path}: {e}"))?,
        None => s.to_string(),
    };
    if text.len() > 1 << 20 {
        return Err("--input is larger than 1 MiB".into());
    }
    serde_json::from_str(&text).map_err(|e| format!("--input is not valid JSON: {e}"))
}
