//! The in-process harness the API's integration tests share: a run service
//! over a real SQLite store in a temporary folder, with worker folders of
//! the test's choosing, behind the real router (no socket); requests sent
//! with `tower::ServiceExt::oneshot`; the identity steps every test starts
//! with (bootstrap an owner, sign in, mint a key, add a member).
//!
//! Each test file includes this with `mod common;`. Not every file uses
//! every item, hence the `#[allow(dead_code)]`s.

use std::path::Path;
use std::sync::Arc;

use airlock_api::auth::{Auth, AuthConfig};
use airlock_api::limits::LimitConfig;
use airlock_api::{AppState, app};
use airlock_iam::throttle::ThrottleConfig;
use airlock_iam::{Clock, ManualClock, keys};
use airlock_service::{Config, Service};
use airlock_store::{BootstrapState, Store};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, request};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

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
    pub clock: Arc<ManualClock>,
    pub dir: tempfile::TempDir,
    auth: AuthConfig,
    limits: LimitConfig,
}

/// What a [`Harness`] is built with: by default [`quiet`] identity
/// settings, no rate limits (they have their own tests; most tests send
/// many refused requests on purpose), a clock at [`T0`] and the `hello`
/// worker.
#[must_use]
pub struct Builder {
    auth: AuthConfig,
    limits: LimitConfig,
    workers: Vec<(String, String, String)>,
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
        let (app, svc) = open(dir.path(), &self.auth, &self.limits, &clock).await;
        let errors = svc.worker_errors();
        assert!(errors.is_empty(), "{errors:?}");
        Harness {
            app,
            svc,
            clock,
            dir,
            auth: self.auth,
            limits: self.limits,
        }
    }
}

/// A service over the store and workers in `dir`, and its router.
async fn open(
    dir: &Path,
    auth: &AuthConfig,
    limits: &LimitConfig,
    clock: &Arc<ManualClock>,
) -> (Router, Arc<Service>) {
    let url = format!("sqlite://{}", dir.join("a.db").display());
    let store = Store::open(&url).await.unwrap();
    let cfg = Config::with_defaults(dir.join("data"), dir.join("workers"));
    let svc = Service::open(store, cfg).unwrap();
    let auth = Auth::new(auth.clone(), clock.clone());
    let state = AppState::with_limits(svc.clone(), auth, limits.clone());
    (app(state), svc)
}

#[allow(dead_code)]
impl Harness {
    pub fn builder() -> Builder {
        Builder {
            auth: quiet(),
            limits: LimitConfig::unlimited(),
            workers: Vec::new(),
        }
    }

    /// The default harness.
    pub async fn new() -> Harness {
        Harness::builder().build().await
    }

    /// A restart: a new service and router on the same folder, settings
    /// and clock.
    pub async fn reopen(&self) -> (Router, Arc<Service>) {
        open(self.dir.path(), &self.auth, &self.limits, &self.clock).await
    }

    pub fn store(&self) -> &Store {
        self.svc.store()
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
