//! Identity from the command line: `airlock login` / `logout` (an API key
//! kept 0600 in the user's config directory), `airlock admin
//! reset-password` (operator-assisted, on the server's own database), and
//! the small HTTP client the `--remote` commands use.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

use crate::runs_cmd::{Paths, err, runtime, with_service};

// ------------------------------------------------------------- credentials

/// What `airlock login` stores.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub server: String,
    pub api_key: String,
}

/// `$XDG_CONFIG_HOME/airlock/credentials.json`, else `~/.config/…`.
pub fn credentials_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("airlock").join("credentials.json"))
}

/// The server and key to use: `AIRLOCK_SERVER` + `AIRLOCK_API_KEY` when
/// both are set, else the stored login.
pub fn credentials() -> Result<Credentials, String> {
    if let (Ok(server), Ok(api_key)) = (
        std::env::var("AIRLOCK_SERVER"),
        std::env::var("AIRLOCK_API_KEY"),
    ) {
        return Ok(Credentials { server, api_key });
    }
    let path = credentials_path().ok_or("no home directory for the stored login")?;
    let text = std::fs::read_to_string(&path)
        .map_err(|_| format!("not logged in (no {}); run `airlock login`", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn save_credentials(c: &Credentials) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = credentials_path().ok_or("no home directory to store the login in")?;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    let text = serde_json::to_string_pretty(c).map_err(|e| e.to_string())?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

// ------------------------------------------------------------------ client

/// One HTTP/1.1 exchange with the server (http or https).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub set_cookie: Option<String>,
    pub body: Value,
    /// The body as text (for the routes that answer text).
    pub text: String,
}

pub async fn call(
    server: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Reply, String> {
    let uri: hyper::Uri = server
        .trim_end_matches('/')
        .parse()
        .map_err(|_| format!("{server:?} is not a URL"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{server:?}: use http:// or https://")),
    };
    let host = uri.host().ok_or("the server URL has no host")?.to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(|_| format!("{server}: connection timed out"))?
    .map_err(|e| format!("{server}: {e}"))?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .header(hyper::header::USER_AGENT, "airlock-cli");
    if body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| e.to_string())?;
    let resp = if tls {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| format!("{host:?} is not a valid TLS name"))?;
        let stream = airlock_egress::proxy::tls_connector()
            .connect(name, tcp)
            .await
            .map_err(|e| format!("{server}: TLS: {e}"))?;
        send(hyper_util::rt::TokioIo::new(stream), req).await?
    } else {
        send(hyper_util::rt::TokioIo::new(tcp), req).await?
    };
    let status = resp.status().as_u16();
    let set_cookie = resp
        .headers()
        .get(hyper::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{server}: {e}"))?
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Reply {
        status,
        set_cookie,
        body,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

async fn send<T>(
    io: T,
    req: hyper::Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
        .await
        .map_err(|_| "the server did not answer in 60 s".to_string())?
        .map_err(|e| e.to_string())
}

/// The error message of a non-2xx reply, in the API's error shape.
pub fn reply_error(r: &Reply) -> String {
    let code = r.body["error"]["code"].as_str().unwrap_or("http_error");
    let msg = r.body["error"]["message"].as_str().unwrap_or("");
    format!("{} {code}: {msg}", r.status)
}

/// A GET with the stored API key whose answer is text.
pub async fn authed_text(c: &Credentials, path: &str) -> Result<String, String> {
    let bearer = format!("Bearer {}", c.api_key);
    let r = call(
        &c.server,
        "GET",
        path,
        &[("authorization", bearer.as_str())],
        None,
    )
    .await?;
    if (200..300).contains(&r.status) {
        Ok(r.text)
    } else {
        Err(reply_error(&r))
    }
}

/// A call with the stored API key; non-2xx becomes an error.
pub async fn authed(
    c: &Credentials,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Value, String> {
    let bearer = format!("Bearer {}", c.api_key);
    let mut headers = vec![("authorization", bearer.as_str())];
    headers.extend_from_slice(extra);
    let r = call(&c.server, method, path, &headers, body).await?;
    if (200..300).contains(&r.status) {
        Ok(r.body)
    } else {
        Err(reply_error(&r))
    }
}

// ------------------------------------------------------------- login/logout

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// Server URL, e.g. https://airlock.example.com or http://127.0.0.1:8000.
    #[arg(long, env = "AIRLOCK_SERVER")]
    server: String,
    /// Sign in with this username; the password is read from the first line
    /// of stdin. A new API key is minted for this machine.
    #[arg(long, conflicts_with = "api_key_stdin")]
    username: Option<String>,
    /// TOTP code, when the account has a second factor.
    #[arg(long)]
    totp: Option<String>,
    /// Store an existing API key read from stdin instead of signing in.
    #[arg(long)]
    api_key_stdin: bool,
    /// Workspace the new key acts in (default: your first).
    #[arg(long)]
    workspace: Option<String>,
    /// Days until the new key expires.
    #[arg(long, default_value_t = 90)]
    days: u64,
}

fn stdin_line() -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("stdin: {e}"))?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

fn cookie_pair(set_cookie: Option<&str>) -> Option<String> {
    set_cookie?.split(';').next().map(str::to_string)
}

pub fn login(a: &LoginArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    match rt.block_on(login_inner(a)) {
        Ok(path) => {
            eprintln!(
                "airlock: logged in; the API key is stored in {}",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => err(e),
    }
}

async fn login_inner(a: &LoginArgs) -> Result<PathBuf, String> {
    let server = a.server.trim_end_matches('/').to_string();
    if a.api_key_stdin {
        let api_key = stdin_line()?;
        let c = Credentials { server, api_key };
        authed(&c, "GET", "/v1/session", &[], None).await?;
        return save_credentials(&c);
    }
    let username = a
        .username
        .as_deref()
        .ok_or("give --username (password on stdin) or --api-key-stdin")?;
    let password = stdin_line()?;
    let r = call(
        &server,
        "POST",
        "/v1/session",
        &[],
        Some(&json!({"username": username, "password": password})),
    )
    .await?;
    if r.status != 201 {
        return Err(reply_error(&r));
    }
    let mut cookie = cookie_pair(r.set_cookie.as_deref()).ok_or("the server set no session")?;
    let mut csrf = r.body["csrf_token"].as_str().unwrap_or("").to_string();
    if r.body["mfa_required"] == json!(true) {
        let code = a.totp.as_deref().ok_or("this account needs --totp CODE")?;
        let r = call(
            &server,
            "POST",
            "/v1/session/mfa",
            &[("cookie", &cookie), ("x-csrf-token", &csrf)],
            Some(&json!({"code": code})),
        )
        .await?;
        if r.status != 200 {
            return Err(reply_error(&r));
        }
        cookie = cookie_pair(r.set_cookie.as_deref()).ok_or("the server set no session")?;
        csrf = r.body["csrf_token"].as_str().unwrap_or("").to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = format!("cli@{}", host.trim());
    let mut headers = vec![("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];
    if let Some(w) = &a.workspace {
        headers.push(("x-airlock-workspace", w.as_str()));
    }
    let r = call(
        &server,
        "POST",
        "/v1/keys",
        &headers,
        Some(&json!({"name": name, "expires_in_s": a.days.saturating_mul(86_400)})),
    )
    .await?;
    let key = r.body["key"].as_str().map(str::to_string);
    // The browser-style session is not needed any more.
    let _ = call(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
        None,
    )
    .await;
    if r.status != 201 {
        return Err(reply_error(&r));
    }
    let api_key = key.ok_or("the server returned no key")?;
    save_credentials(&Credentials { server, api_key })
}

/// Revokes the stored key on the server and forgets it.
pub fn logout() -> ExitCode {
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    let c = match credentials() {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    let revoked = rt.block_on(async {
        let me = authed(&c, "GET", "/v1/session", &[], None).await?;
        let id = me["via"]["api_key"].as_str().ok_or("not an API key")?;
        authed(&c, "DELETE", &format!("/v1/keys/{id}"), &[], None).await
    });
    if let Err(e) = revoked {
        eprintln!("airlock: could not revoke the key on the server: {e}");
    }
    if let Some(p) = credentials_path() {
        let _ = std::fs::remove_file(p);
    }
    ExitCode::SUCCESS
}

// ------------------------------------------------------------------- admin

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Issue a single-use, expiring password-reset token for a user (also
    /// clears their TOTP when used). Runs on the server's own database.
    ResetPassword {
        username: String,
        /// Minutes until the token expires.
        #[arg(long, default_value_t = 60)]
        ttl_minutes: u64,
    },
}

pub fn admin(paths: &Paths, cmd: &AdminCommand) -> ExitCode {
    let AdminCommand::ResetPassword {
        username,
        ttl_minutes,
    } = cmd;
    with_service(paths, async |svc| {
        let Ok(name) = airlock_iam::password::normalize_username(username) else {
            return err("not a valid username");
        };
        let store = svc.store();
        let user = match store.user_by_name(&name).await {
            Ok(Some(u)) => u,
            Ok(None) => return err(format!("no user {name:?}")),
            Err(e) => return err(e),
        };
        let ttl = (*ttl_minutes).clamp(1, 7 * 24 * 60);
        let now = airlock_store::now_ms();
        let token = airlock_iam::keys::new_prefixed_token("alr");
        let expires = now + i64::try_from(ttl * 60_000).unwrap_or(i64::MAX / 2);
        if let Err(e) = store
            .create_reset_token(
                &user.id,
                &airlock_iam::keys::token_hash(&token),
                now,
                expires,
            )
            .await
        {
            return err(e);
        }
        let _ = store
            .audit(
                airlock_api::auth::SYSTEM_AUDIT,
                airlock_store::AuditRecord::system("password.reset_issued", None)
                    .with_actor(airlock_audit::chain::Actor::Service("cli".into()))
                    .with_metadata(json!({"user": user.id, "ttl_minutes": ttl})),
            )
            .await;
        println!("{token}");
        eprintln!(
            "airlock: single-use reset token for {name}, valid {ttl} min; the user sends it with a new password to POST /v1/password/reset (TOTP is cleared on use)"
        );
        ExitCode::SUCCESS
    })
}
