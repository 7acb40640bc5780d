//! The in-process harness the API's integration tests share: a run service
//! over a real store (SQLite in a temporary folder, or a fresh PostgreSQL
//! database on 127.0.0.1:5432), with worker folders of the test's choosing,
//! behind the real router (no socket); requests sent with
//! `tower::ServiceExt::oneshot`; the identity steps every test starts with
//! (bootstrap an owner, sign in, mint a key, add a member); and
//! [`on_both_backends!`], which runs one test on each backend.
//!
//! Each test file includes this with `mod common;`. Not every file uses
//! every item, hence the `#[allow(dead_code)]`s.

use std::path::Path;
use std::sync::Arc;

use std::net::IpAddr;
use std::time::Duration;

use airlock_api::auth::HttpConfig;
use airlock_api::limits::Bucket;
use airlock_api::{AppState, Fronts, app_with_fronts};
use airlock_iam::throttle::ThrottleConfig;
use airlock_iam::{Clock, ManualClock, keys};
use airlock_service::{Config, IdentityConfig, Quotas, Service};
use airlock_store::{Backend, BootstrapState, Store, random_id};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, request};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sqlx::Connection;
use tower::ServiceExt;

/// Which database a harness's store runs on.
#[allow(dead_code)]
#[derive(Debug)]
pub enum Db {
    /// A file in the harness's temporary folder (the default).
    Sqlite,
    /// A database of its own on the local PostgreSQL server, dropped with
    /// the harness.
    Postgres(PgDb),
}

#[allow(dead_code)]
impl Db {
    /// A fresh PostgreSQL database, or `None` when the server at
    /// 127.0.0.1:5432 does not answer and `AIRLOCK_TEST_SKIP_POSTGRES` is
    /// set. Without that variable a missing server fails the test.
    pub async fn postgres() -> Option<Db> {
        PgDb::create().await.map(Db::Postgres)
    }

    fn backend(&self) -> Backend {
        match self {
            Db::Sqlite => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    fn url(&self, dir: &Path) -> String {
        match self {
            Db::Sqlite => format!("sqlite://{}", dir.join("a.db").display()),
            Db::Postgres(pg) => pg.url(),
        }
    }
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database created for one harness on 127.0.0.1:5432 (user `postgres`,
/// trust authentication), dropped when the harness is.
#[derive(Debug)]
pub struct PgDb {
    name: String,
}

impl PgDb {
    async fn create() -> Option<PgDb> {
        sqlx::any::install_default_drivers();
        let mut admin = match sqlx::AnyConnection::connect(PG_ADMIN).await {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                    "PostgreSQL at 127.0.0.1:5432 is required for the PostgreSQL variant of this test ({e}); run scripts/test, or set AIRLOCK_TEST_SKIP_POSTGRES=1 to skip locally"
                );
                return None;
            }
        };
        let name = random_id("airlock_api_test").to_lowercase();
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        Some(PgDb { name })
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        // Best effort, like the conformance suite's clean-up. `drop` runs on
        // the test's runtime, which must not block on async work; a thread
        // with a runtime of its own may. `WITH (FORCE)` ends the pool
        // connections the harness may still hold.
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut admin) = sqlx::AnyConnection::connect(PG_ADMIN).await {
                    let _ = sqlx::raw_sql(&sql).execute(&mut admin).await;
                }
            });
        })
        .join();
    }
}

/// Runs the test function `$name(db: Db)` once on SQLite and once on
/// PostgreSQL, as `$name::sqlite` and `$name::postgres`; optional arguments
/// go to `#[tokio::test(...)]`. The PostgreSQL case fails when the server
/// is missing, unless `AIRLOCK_TEST_SKIP_POSTGRES` is set.
#[allow(unused_macros)]
macro_rules! on_both_backends {
    ($name:ident $(, $($test_args:tt)+)?) => {
        mod $name {
            #[tokio::test$(($($test_args)+))?]
            async fn sqlite() {
                super::$name(crate::common::Db::Sqlite).await;
            }

            #[tokio::test$(($($test_args)+))?]
            async fn postgres() {
                if let Some(db) = crate::common::Db::postgres().await {
                    super::$name(db).await;
                }
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both_backends;

/// Where the harness clock starts (milliseconds since the epoch).
#[allow(dead_code)]
pub const T0: i64 = 1_800_000_000_000;
/// Every account's password.
#[allow(dead_code)]
pub const PW: &str = "correct horse battery staple";

/// The worker every harness has unless the test names its own: `hello`, a
/// shell script with no inputs.
#[allow(dead_code)]
pub const HELLO: &str = "[worker]\nid = \"hello\"\ntitle = \"hello\"\ndescription = \"test\"\n\
                     kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n";
/// The script of every worker unless the test names its own.
#[allow(dead_code)]
pub const ECHO: &str = "echo hi\n";

/// What a test sets about identity: the service's rules (timeouts,
/// throttles, invitations) and the HTTP front end's (cookies, proxies),
/// in one place for the tests' convenience.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub idle_timeout: Duration,
    pub absolute_timeout: Duration,
    pub secure_cookies: bool,
    pub trusted_proxies: Vec<IpAddr>,
    pub account_throttle: ThrottleConfig,
    pub client_throttle: ThrottleConfig,
    pub invite_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        let id = IdentityConfig::default();
        Self {
            idle_timeout: id.idle_timeout,
            absolute_timeout: id.absolute_timeout,
            secure_cookies: false,
            trusted_proxies: Vec::new(),
            account_throttle: id.account_throttle,
            client_throttle: id.client_throttle,
            invite_ttl: id.invite_ttl,
        }
    }
}

impl AuthConfig {
    fn split(&self) -> (IdentityConfig, HttpConfig) {
        (
            IdentityConfig {
                idle_timeout: self.idle_timeout,
                absolute_timeout: self.absolute_timeout,
                account_throttle: self.account_throttle,
                client_throttle: self.client_throttle,
                invite_ttl: self.invite_ttl,
            },
            HttpConfig {
                secure_cookies: self.secure_cookies,
                trusted_proxies: self.trusted_proxies.clone(),
                cookie_max_age: self.absolute_timeout,
            },
        )
    }
}

/// What a test sets about limits: the HTTP rate limits and stream caps,
/// and the service's durable daily quotas.
#[derive(Debug, Clone)]
pub struct LimitConfig {
    pub per_client: Option<Bucket>,
    pub auth_failures_per_client: Option<Bucket>,
    pub reads_per_identity: Option<Bucket>,
    pub writes_per_identity: Option<Bucket>,
    pub streams_per_user: usize,
    pub runs_per_user_per_day: i64,
    pub runs_per_workspace_per_day: i64,
}

impl Default for LimitConfig {
    /// The server's defaults: HTTP limits and daily quotas.
    fn default() -> Self {
        let http = airlock_api::limits::LimitConfig::default();
        let q = Quotas::default();
        Self {
            per_client: http.per_client,
            auth_failures_per_client: http.auth_failures_per_client,
            reads_per_identity: http.reads_per_identity,
            writes_per_identity: http.writes_per_identity,
            streams_per_user: http.streams_per_user,
            runs_per_user_per_day: q.runs_per_user_per_day,
            runs_per_workspace_per_day: q.runs_per_workspace_per_day,
        }
    }
}

impl LimitConfig {
    pub fn unlimited() -> Self {
        let http = airlock_api::limits::LimitConfig::unlimited();
        let q = Quotas::unlimited();
        Self {
            per_client: http.per_client,
            auth_failures_per_client: http.auth_failures_per_client,
            reads_per_identity: http.reads_per_identity,
            writes_per_identity: http.writes_per_identity,
            streams_per_user: http.streams_per_user,
            runs_per_user_per_day: q.runs_per_user_per_day,
            runs_per_workspace_per_day: q.runs_per_workspace_per_day,
        }
    }

    fn split(&self) -> (airlock_api::limits::LimitConfig, Quotas) {
        (
            airlock_api::limits::LimitConfig {
                per_client: self.per_client,
                auth_failures_per_client: self.auth_failures_per_client,
                reads_per_identity: self.reads_per_identity,
                writes_per_identity: self.writes_per_identity,
                streams_per_user: self.streams_per_user,
            },
            Quotas {
                runs_per_user_per_day: self.runs_per_user_per_day,
                runs_per_workspace_per_day: self.runs_per_workspace_per_day,
            },
        )
    }
}

/// Identity settings with both login throttles off: the tests that are
/// about throttling pass their own.
pub fn quiet() -> AuthConfig {
    AuthConfig {
        account_throttle: ThrottleConfig::disabled(),
        client_throttle: ThrottleConfig::disabled(),
        ..AuthConfig::default()
    }
}

/// How a request authenticates.
#[allow(dead_code)]
#[derive(Debug, Clone)]
pub enum Cred {
    None,
    /// `Authorization: Bearer <key>`.
    Key(String),
    /// A session cookie and its CSRF token.
    Session {
        cookie: String,
        csrf: String,
    },
    /// A cookie without its CSRF token.
    CookieOnly(String),
}

#[allow(dead_code)]
impl Cred {
    /// A session's `(cookie, csrf)`.
    pub fn parts(&self) -> (String, String) {
        match self {
            Cred::Session { cookie, csrf } => (cookie.clone(), csrf.clone()),
            _ => panic!("not a session"),
        }
    }

    /// A session's cookie (`name=value`).
    pub fn cookie(&self) -> String {
        self.parts().0
    }
}

/// A response, read to the end.
#[allow(dead_code)]
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON, `Null` when it is not JSON.
    pub body: Value,
    pub bytes: Vec<u8>,
    /// The body as (lossy) UTF-8.
    pub text: String,
}

/// Sends one request to `app` and reads the whole response.
pub async fn send(app: Router, req: Request<Body>) -> Resp {
    let r = app.oneshot(req).await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    let bytes = r.into_body().collect().await.unwrap().to_bytes().to_vec();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Resp {
        status,
        headers,
        body,
        bytes,
        text,
    }
}

/// A request builder with `cred`'s headers and, if given, the workspace
/// header; the caller adds the body.
pub fn request_builder(
    cred: &Cred,
    method: &str,
    path: &str,
    ws: Option<&str>,
) -> request::Builder {
    let mut b = Request::builder().method(method).uri(path);
    match cred {
        Cred::None => {}
        Cred::Key(k) => b = b.header("authorization", format!("Bearer {k}")),
        Cred::Session { cookie, csrf } => {
            b = b.header("cookie", cookie).header("x-csrf-token", csrf)
        }
        Cred::CookieOnly(c) => b = b.header("cookie", c),
    }
    if let Some(w) = ws {
        b = b.header("x-airlock-workspace", w);
    }
    b
}

/// A request with a JSON body (or none).
pub fn request(
    cred: &Cred,
    method: &str,
    path: &str,
    body: Option<&Value>,
    ws: Option<&str>,
) -> Request<Body> {
    let b = request_builder(cred, method, path, ws);
    match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .unwrap()
}

/// The session a `201`/`200` login or MFA answer starts: the cookie from
/// `Set-Cookie`, the CSRF token from the body.
pub fn session_of(r: &Resp) -> Cred {
    let sc = r.headers["set-cookie"].to_str().unwrap();
    let cookie = sc.split(';').next().unwrap().to_string();
    let csrf = r.body["csrf_token"].as_str().unwrap().to_string();
    Cred::Session { cookie, csrf }
}

/// The router over a service in `dir`, as configured.
#[allow(dead_code)]
pub struct Harness {
    pub app: Router,
    pub svc: Arc<Service>,
    /// The test's own handle on the database (to stage and inspect rows;
    /// front ends never get one).
    pub store: Store,
    pub clock: Arc<ManualClock>,
    pub dir: tempfile::TempDir,
    auth: AuthConfig,
    limits: LimitConfig,
    /// Where the store is (a restart reopens it).
    url: String,
    /// The web interface's routes, when the test mounts them.
    ui: Option<UiRoutes>,
    /// Declared last: the PostgreSQL database outlives every handle on it.
    db: Db,
}

/// What a [`Harness`] is built with: by default [`quiet`] identity
/// settings, no rate limits (they have their own tests; most tests send
/// many refused requests on purpose), a clock at [`T0`], the `hello`
/// worker and a SQLite store.
#[must_use]
pub struct Builder {
    auth: AuthConfig,
    limits: LimitConfig,
    workers: Vec<(String, String, String)>,
    launcher: Option<Arc<dyn airlock_launch::Launcher>>,
    db: Db,
    ui: Option<UiRoutes>,
}

#[allow(dead_code)]
impl Builder {
    pub fn auth(mut self, cfg: AuthConfig) -> Self {
        self.auth = cfg;
        self
    }

    pub fn limits(mut self, cfg: LimitConfig) -> Self {
        self.limits = cfg;
        self
    }

    /// Runs start sandboxes through `launcher` (a recording fake: this
    /// test binary cannot be a sandbox init, so the real broker would not
    /// start here).
    pub fn launcher(mut self, launcher: Arc<dyn airlock_launch::Launcher>) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// The database the store runs on.
    /// Mounts the web interface (its crate's tests pass `airlock_ui::router`).
    pub fn ui(mut self, routes: UiRoutes) -> Self {
        self.ui = Some(routes);
        self
    }

    pub fn db(mut self, db: Db) -> Self {
        self.db = db;
        self
    }

    /// Adds a worker folder `workers/<id>` with `worker.toml` and `run.sh`;
    /// the first call replaces the default `hello` worker.
    pub fn worker(mut self, id: &str, manifest: &str, script: &str) -> Self {
        self.workers
            .push((id.to_string(), manifest.to_string(), script.to_string()));
        self
    }

    pub async fn build(self) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let mut workers = self.workers;
        if workers.is_empty() {
            workers.push(("hello".into(), HELLO.into(), ECHO.into()));
        }
        for (id, manifest, script) in &workers {
            let w = dir.path().join("workers").join(id);
            std::fs::create_dir_all(&w).unwrap();
            std::fs::write(w.join("worker.toml"), manifest).unwrap();
            std::fs::write(w.join("run.sh"), script).unwrap();
        }
        let clock = Arc::new(ManualClock::new(T0));
        let url = self.db.url(dir.path());
        let (app, svc, store) = open(
            &url,
            dir.path(),
            &self.auth,
            &self.limits,
            &clock,
            self.launcher.clone(),
            self.ui,
        )
        .await;
        // The variant named after a backend really runs on it.
        assert_eq!(store.backend(), self.db.backend());
        let errors = svc.worker_errors();
        assert!(errors.is_empty(), "{errors:?}");
        Harness {
            app,
            svc,
            store,
            clock,
            dir,
            auth: self.auth,
            limits: self.limits,
            url,
            ui: self.ui,
            db: self.db,
        }
    }
}

/// A service over the store at `url` and the workers in `dir`, and its
/// router.
async fn open(
    url: &str,
    dir: &Path,
    auth: &AuthConfig,
    limits: &LimitConfig,
    clock: &Arc<ManualClock>,
    launcher: Option<Arc<dyn airlock_launch::Launcher>>,
    ui: Option<UiRoutes>,
) -> (Router, Arc<Service>, Store) {
    let store = Store::open(url).await.unwrap();
    let mut cfg = Config::with_defaults(dir.join("data"), dir.join("workers"));
    let (identity, http) = auth.split();
    let (http_limits, quotas) = limits.split();
    cfg.identity = identity;
    cfg.quotas = quotas;
    cfg.clock = clock.clone();
    let svc = match launcher {
        Some(l) => Service::open_with_launcher(store.clone(), cfg, l).unwrap(),
        None => Service::open(store.clone(), cfg).unwrap(),
    };
    let state = AppState::with_limits(svc.clone(), http, http_limits);
    let fronts = Fronts {
        mcp: None,
        ui: ui.map(|f| f()),
    };
    (app_with_fronts(state, fronts), svc, store)
}

/// What builds the web interface's routes.
pub type UiRoutes = fn() -> Router<AppState>;

#[allow(dead_code)]
impl Harness {
    pub fn builder() -> Builder {
        Builder {
            auth: quiet(),
            limits: LimitConfig::unlimited(),
            workers: Vec::new(),
            launcher: None,
            db: Db::Sqlite,
            ui: None,
        }
    }

    /// The default harness.
    pub async fn new() -> Harness {
        Harness::builder().build().await
    }

    /// A restart: a new service and router on the same folder, settings
    /// and clock.
    pub async fn reopen(&self) -> (Router, Arc<Service>) {
        let (auth, limits, clock) = (&self.auth, &self.limits, &self.clock);
        let (app, svc, _) = open(
            &self.url,
            self.dir.path(),
            auth,
            limits,
            clock,
            None,
            self.ui,
        )
        .await;
        (app, svc)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub async fn send(&self, req: Request<Body>) -> Resp {
        send(self.app.clone(), req).await
    }

    pub async fn call(&self, cred: &Cred, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.call_ws(cred, method, path, body, None).await
    }

    /// [`Harness::call`] naming a workspace in `X-Airlock-Workspace`.
    pub async fn call_ws(
        &self,
        cred: &Cred,
        method: &str,
        path: &str,
        body: Option<Value>,
        ws: Option<&str>,
    ) -> Resp {
        self.send(request(cred, method, path, body.as_ref(), ws))
            .await
    }

    /// Bootstraps the first owner, `owner`, through the API with a
    /// capability placed in the store, and signs them in.
    pub async fn bootstrap_owner(&self) -> Cred {
        let token = keys::new_prefixed_token("alb");
        let hash = keys::token_hash(&token);
        let st = self
            .store()
            .bootstrap_begin(&hash, self.clock.now_ms())
            .await;
        assert_eq!(st.unwrap(), BootstrapState::Open);
        let b = json!({"token": token, "username": "owner", "password": PW});
        let r = self
            .call(&Cred::None, "POST", "/v1/bootstrap", Some(b))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        self.login("owner", PW).await
    }

    pub async fn login_resp(&self, user: &str, pw: &str) -> Resp {
        let b = json!({"username": user, "password": pw});
        self.call(&Cred::None, "POST", "/v1/session", Some(b)).await
    }

    /// A login presenting a cookie, as a browser that is already signed
    /// in would.
    pub async fn login_resp_with_cookie(&self, user: &str, pw: &str, cookie: &str) -> Resp {
        let b = json!({"username": user, "password": pw});
        let cred = Cred::CookieOnly(cookie.to_string());
        self.call(&cred, "POST", "/v1/session", Some(b)).await
    }

    pub async fn login(&self, user: &str, pw: &str) -> Cred {
        let r = self.login_resp(user, pw).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        session_of(&r)
    }

    /// `PUT /v1/members/<user>` with `role`, in the caller's workspace.
    pub async fn put_role(&self, who: &Cred, user: &str, role: &str) -> Resp {
        let path = format!("/v1/members/{user}");
        self.call(who, "PUT", &path, Some(json!({ "role": role })))
            .await
    }

    /// Sets a password with a setup or reset token.
    pub async fn reset_password(&self, token: &str, pw: &str) -> Resp {
        let b = json!({"token": token, "new_password": pw});
        self.call(&Cred::None, "POST", "/v1/password/reset", Some(b))
            .await
    }

    /// Adds `user` with `role` to the caller's workspace (setting the
    /// password of a new account to [`PW`]) and signs them in.
    pub async fn member(&self, admin: &Cred, user: &str, role: &str) -> Cred {
        let r = self.put_role(admin, user, role).await;
        assert!(r.status.is_success(), "{}", r.body);
        if let Some(t) = r.body["setup_token"].as_str() {
            let r = self.reset_password(t, PW).await;
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
        }
        self.login(user, PW).await
    }

    /// Creates a workspace as `who` (who becomes its owner); returns its id.
    pub async fn create_workspace(&self, who: &Cred, name: &str) -> String {
        let b = json!({ "name": name });
        let r = self.call(who, "POST", "/v1/workspaces", Some(b)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["id"].as_str().unwrap().to_string()
    }

    /// Mints an API key as `who`; returns the key and its id.
    pub async fn api_key(&self, who: &Cred, body: Value) -> (String, String) {
        let r = self.call(who, "POST", "/v1/keys", Some(body)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        let key = r.body["key"].as_str().unwrap().to_string();
        (key, r.body["api_key"]["id"].as_str().unwrap().to_string())
    }
}
