use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use airlock_sandbox::DriverChoice;
use airlock_store::{Created, NewRun, RunRecord, RunState, Store, StoreError};
use airlock_worker::Bundle;
use serde::Serialize;

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
    /// Operator egress policy (channels live here).
    pub egress_policy: Option<PathBuf>,
    pub driver: DriverChoice,
    /// Key directory (KEK, high-water marks); outside the database.
    pub key_dir: PathBuf,
    /// The workspace the local workers folder belongs to (IAM-6: other
    /// workspaces neither see nor run these workers).
    pub workers_workspace: String,
}

impl Config {
    pub fn with_defaults(data_dir: PathBuf, workers_dir: PathBuf) -> Self {
        Self {
            data_dir: data_dir.clone(),
            workers_dir,
            node_id: format!("node-{}", hostname()),
            max_concurrent: 4,
            lease: Duration::from_secs(30),
            egress_policy: None,
            driver: DriverChoice::Auto,
            key_dir: data_dir.join("keys"),
            workers_workspace: airlock_store::DEFAULT_WORKSPACE.to_string(),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "local".into())
}

/// Why a request to the service failed; `code()` is stable.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("unknown worker {0:?}")]
    UnknownWorker(String),
    #[error("input rejected: {0}")]
    Input(String),
    #[error("idempotency key reused with a different request")]
    Conflict,
    #[error("not found")]
    NotFound,
    #[error("plan refused: {0}")]
    Plan(String),
    #[error("{0}")]
    Store(StoreError),
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::IdempotencyConflict => Self::Conflict,
            StoreError::NotFound => Self::NotFound,
            StoreError::Plan(r) => Self::Plan(r.to_string()),
            other => Self::Store(other),
        }
    }
}

impl ServiceError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownWorker(_) => "unknown_worker",
            Self::Input(_) => "input_invalid",
            Self::Conflict => "idempotency_conflict",
            Self::NotFound => "not_found",
            Self::Plan(_) => "plan_refused",
            Self::Store(_) => "store_error",
        }
    }
}

/// A worker as listed to clients.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    pub id: String,
    pub manifest: serde_json::Value,
}

/// A create request, already parsed by a front end.
#[derive(Debug, Clone)]
pub struct CreateRun {
    pub workspace: String,
    pub worker_id: String,
    pub input: serde_json::Value,
    pub trigger: String,
    pub actor: String,
    pub idempotency_key: Option<String>,
}

/// The workers loaded from the workers folder.
#[derive(Debug, Default)]
pub struct Workers {
    pub bundles: BTreeMap<String, Bundle>,
    pub errors: Vec<(PathBuf, String)>,
}

/// The run service. One per process; front ends share it.
pub struct Service {
    pub(crate) store: Store,
    pub(crate) cfg: Config,
    pub(crate) workers: RwLock<Workers>,
    pub(crate) artifacts: airlock_files::ArtifactStore,
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) owner: String,
    pub(crate) cancels: Mutex<HashMap<String, Arc<AtomicBool>>>,
    pub(crate) secrets: crate::secrets::Secrets,
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

pub(crate) fn sha256_file(p: &Path) -> Option<String> {
    let bytes = std::fs::read(p).ok()?;
    Some(airlock_store::sha256_hex(&bytes))
}

impl Service {
    pub fn open(store: Store, cfg: Config) -> std::io::Result<Arc<Self>> {
        Self::open_with_launcher(store, cfg, Arc::new(airlock_launch::SandboxLauncher::new()))
    }

    /// A service whose executor starts sandboxes through `launcher`.
    pub fn open_with_launcher(
        store: Store,
        cfg: Config,
        launcher: Arc<dyn airlock_launch::Launcher>,
    ) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(cfg.data_dir.join("runs"))?;
        let secrets = crate::secrets::Secrets::open(&cfg.key_dir, store.clone())
            .map_err(std::io::Error::other)?;
        let artifacts = airlock_files::ArtifactStore::open(&cfg.data_dir.join("artifacts"))?;
        let owner = format!("{}:{}", cfg.node_id, std::process::id());
        let svc = Arc::new(Self {
            store,
            cfg,
            workers: RwLock::new(Workers::default()),
            artifacts,
            wake: tokio::sync::Notify::new(),
            owner,
            cancels: Mutex::new(HashMap::new()),
            secrets,
            launcher,
        });
        svc.reload();
        Ok(svc)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn secrets(&self) -> &crate::secrets::Secrets {
        &self.secrets
    }

    /// `(worker id, declared secret names)` for every loaded worker.
    pub fn declared_secrets(&self) -> Vec<(String, Vec<String>)> {
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

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn artifacts(&self) -> &airlock_files::ArtifactStore {
        &self.artifacts
    }

    /// RUN-2: (re)loads every bundle; a broken one is reported and skipped.
    pub fn reload(&self) -> (Vec<String>, Vec<(PathBuf, String)>) {
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

    pub fn worker(&self, id: &str) -> Option<Bundle> {
        self.workers.read().ok()?.bundles.get(id).cloned()
    }

    /// A worker as `workspace` sees it: only the workspace that owns the
    /// workers folder sees its bundles.
    pub fn worker_in(&self, workspace: &str, id: &str) -> Option<Bundle> {
        if workspace != self.cfg.workers_workspace {
            return None;
        }
        self.worker(id)
    }

    /// The workers `workspace` may see and run.
    pub fn list_workers_in(&self, workspace: &str) -> Vec<WorkerInfo> {
        if workspace != self.cfg.workers_workspace {
            return Vec::new();
        }
        self.list_workers()
    }

    pub fn list_workers(&self) -> Vec<WorkerInfo> {
        let Ok(w) = self.workers.read() else {
            return Vec::new();
        };
        w.bundles
            .values()
            .map(|b| WorkerInfo {
                id: b.id.as_str().to_string(),
                manifest: serde_json::to_value(&b.manifest).unwrap_or(serde_json::Value::Null),
            })
            .collect()
    }

    pub fn worker_errors(&self) -> Vec<(PathBuf, String)> {
        self.workers
            .read()
            .map(|w| w.errors.clone())
            .unwrap_or_default()
    }

    fn checked_input(
        &self,
        workspace: &str,
        worker_id: &str,
        input: &serde_json::Value,
    ) -> Result<(Bundle, serde_json::Value), ServiceError> {
        let bundle = self
            .worker_in(workspace, worker_id)
            .ok_or_else(|| ServiceError::UnknownWorker(worker_id.to_string()))?;
        let input = bundle
            .manifest
            .check_input(input)
            .map_err(|e| ServiceError::Input(e.to_string()))?;
        Ok((bundle, input))
    }

    /// Creates a queued run (API-8 idempotency when a key is given).
    pub async fn create_run(&self, req: CreateRun) -> Result<Created, ServiceError> {
        let (_, input) = self.checked_input(&req.workspace, &req.worker_id, &req.input)?;
        let request_hash =
            airlock_store::sha256_hex(format!("{}\n{}", req.worker_id, input).as_bytes());
        if let Some(k) = &req.idempotency_key
            && (k.is_empty() || k.len() > 255)
        {
            return Err(ServiceError::Input(
                "Idempotency-Key must be 1 to 255 characters".into(),
            ));
        }
        let created = self
            .store
            .create_run(NewRun {
                workspace_id: req.workspace,
                worker_id: req.worker_id,
                input,
                trigger: req.trigger,
                actor: req.actor,
                plan_id: None,
                idempotency: req.idempotency_key.map(|k| (k, request_hash)),
            })
            .await?;
        self.wake.notify_one();
        Ok(created)
    }

    /// What a plan pins (DUR-3): worker, executable identities, input hash,
    /// limits and egress.
    fn plan_body(bundle: &Bundle, input: &serde_json::Value) -> serde_json::Value {
        let m = &bundle.manifest;
        let runtime = m
            .command(Path::new("/airlock/worker"))
            .ok()
            .and_then(|argv| argv.first().cloned());
        let runtime_identity = runtime.as_deref().and_then(|r| {
            airlock_sandbox::ResolvedExecutable::resolve(
                r,
                airlock_sandbox::env::SANDBOX_PATH,
                Path::new("/"),
            )
            .ok()
            .map(|e| serde_json::json!({"path": e.identity().path, "sha256": e.identity().sha256}))
        });
        serde_json::json!({
            "worker": bundle.id.as_str(),
            "input": input,
            "input_hash": airlock_store::sha256_hex(input.to_string().as_bytes()),
            "entry_sha256": sha256_file(&bundle.entry),
            "runtime": runtime_identity,
            "limits": serde_json::to_value(&m.limits).unwrap_or_default(),
            "egress": serde_json::to_value(&m.egress).unwrap_or_default(),
        })
    }

    /// Stores a plan and returns its opaque single-use token.
    pub async fn plan(
        &self,
        workspace: &str,
        worker_id: &str,
        input: &serde_json::Value,
        ttl: Duration,
    ) -> Result<(String, serde_json::Value), ServiceError> {
        let (bundle, input) = self.checked_input(workspace, worker_id, input)?;
        let body = Self::plan_body(&bundle, &input);
        let (token, stored) = self
            .store
            .create_plan(workspace, worker_id, &body, ttl)
            .await?;
        Ok((
            token,
            serde_json::json!({"plan_id": stored.id, "expires_at": stored.expires_at, "plan": body}),
        ))
    }

    /// Executes exactly a stored plan: the token is consumed atomically and
    /// nothing the plan pinned may have changed.
    pub async fn run_plan(
        &self,
        workspace: &str,
        token: &str,
        actor: &str,
    ) -> Result<Created, ServiceError> {
        let stored = self.store.consume_plan(workspace, token).await?;
        let input = stored.plan.get("input").cloned().unwrap_or_default();
        let (bundle, input) = self.checked_input(workspace, &stored.worker_id, &input)?;
        let now = Self::plan_body(&bundle, &input);
        if now != stored.plan {
            let changed: Vec<&str> = ["input_hash", "entry_sha256", "runtime", "limits", "egress"]
                .into_iter()
                .filter(|k| now.get(*k) != stored.plan.get(*k))
                .collect();
            return Err(ServiceError::Plan(format!(
                "the worker changed since it was planned ({})",
                changed.join(", ")
            )));
        }
        let created = self
            .store
            .create_run(NewRun {
                workspace_id: workspace.to_string(),
                worker_id: stored.worker_id.clone(),
                input,
                trigger: "plan".into(),
                actor: actor.to_string(),
                plan_id: Some(stored.id),
                idempotency: None,
            })
            .await?;
        self.wake.notify_one();
        Ok(created)
    }

    /// RUN-5: idempotent cancel; a running run on this node is killed now.
    pub async fn cancel(
        &self,
        workspace: &str,
        run_id: &str,
        actor: &str,
    ) -> Result<RunState, ServiceError> {
        let state = self.store.cancel_run(workspace, run_id, actor).await?;
        if let Ok(c) = self.cancels.lock()
            && let Some(flag) = c.get(run_id)
        {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(state)
    }

    pub async fn get(&self, workspace: &str, run_id: &str) -> Result<RunRecord, ServiceError> {
        self.store
            .get_run(workspace, run_id)
            .await?
            .ok_or(ServiceError::NotFound)
    }
}
