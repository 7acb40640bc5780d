//! Identity from the command line: `airlock login` / `logout` (an API key
//! kept 0600 in the user's config directory, through the server's own
//! routes) and `airlock admin reset-password` (the operator, on the
//! server's own database).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use airlock_protocol::identity::{
    CreateKey, KeyCreated, Login, SecondFactor, SessionIssued, WhoAmI,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::Caller;
use clap::{Args, Subcommand};

use crate::client::{Credentials, Remote, call, credentials, credentials_path, save_credentials};
use crate::common::{Paths, block_on, err, fail, with_service};

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// Server URL, e.g. https://airlock.example.com or http://127.0.0.1:8000.
    #[arg(long, env = "AIRLOCK_SERVER")]
    server: String,
    /// Sign in with this username; the password is prompted for (without
    /// echo) on a terminal, else read from the first line of stdin. A new
    /// API key is minted for this machine.
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
    /// `{"server", "credentials"}` (where the key is stored) on stdout.
    #[arg(long)]
    json: bool,
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

fn to_json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(v).map_err(Error::internal)
}

pub fn login(a: &LoginArgs) -> ExitCode {
    block_on(async || match login_inner(a).await {
        Ok(path) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"server": a.server, "credentials": path})
                );
            }
            eprintln!(
                "airlock: logged in; the API key is stored in {}",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => err(e),
    })
}

async fn login_inner(a: &LoginArgs) -> Result<PathBuf, String> {
    let shown = |e: Error| format!("{}: {}", e.code, e.message);
    let server = a.server.trim_end_matches('/').to_string();
    if a.api_key_stdin {
        let api_key = stdin_line()?;
        let c = Credentials { server, api_key };
        Remote { creds: c.clone() }
            .get::<WhoAmI>("/v1/session")
            .await
            .map_err(shown)?;
        return save_credentials(&c);
    }
    let username = a
        .username
        .as_deref()
        .ok_or("give --username (password on stdin) or --api-key-stdin")?;
    let password = crate::term::read_secret(&format!("Password for {username}: "))?;
    let body = to_json(&Login {
        username: username.to_string(),
        password,
    })
    .map_err(shown)?;
    let r = call(&server, "POST", "/v1/session", &[], Some(body))
        .await
        .map_err(shown)?;
    let set_cookie = r.set_cookie.clone();
    let issued: SessionIssued = r.json().map_err(shown)?;
    let mut cookie = cookie_pair(set_cookie.as_deref()).ok_or("the server set no session")?;
    let mut csrf = issued.csrf_token;
    if issued.mfa_required {
        let code = a.totp.as_deref().ok_or("this account needs --totp CODE")?;
        let body = to_json(&SecondFactor {
            code: Some(code.to_string()),
            recovery_code: None,
        })
        .map_err(shown)?;
        let r = call(
            &server,
            "POST",
            "/v1/session/mfa",
            &[("cookie", &cookie), ("x-csrf-token", &csrf)],
            Some(body),
        )
        .await
        .map_err(shown)?;
        let set_cookie = r.set_cookie.clone();
        csrf = r.json::<SessionIssued>().map_err(shown)?.csrf_token;
        cookie = cookie_pair(set_cookie.as_deref()).ok_or("the server set no session")?;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let mut headers = vec![("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];
    if let Some(w) = &a.workspace {
        headers.push(("x-airlock-workspace", w.as_str()));
    }
    let body = to_json(&CreateKey {
        name: format!("cli@{}", host.trim()),
        scopes: None,
        expires_in_s: Some(a.days.saturating_mul(86_400)),
    })
    .map_err(shown)?;
    let minted = call(&server, "POST", "/v1/keys", &headers, Some(body)).await;
    // The browser-style session is not needed any more: ended either way.
    let ended = call(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
        None,
    )
    .await;
    if let Err(e) = ended.and_then(|r| r.empty()) {
        eprintln!(
            "airlock: warning: the sign-in session could not be ended ({}); it expires on its own",
            e.message
        );
    }
    let created: KeyCreated = minted.and_then(|r| r.json()).map_err(shown)?;
    save_credentials(&Credentials {
        server,
        api_key: created.key,
    })
}

/// Revokes the stored key on the server and forgets it; with `json`,
/// `{"revoked": bool, "forgotten": true}` on stdout.
pub fn logout(json: bool) -> ExitCode {
    let c = match credentials() {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    block_on(async move || {
        let r = Remote { creds: c };
        let revoked = async {
            let me: WhoAmI = r.get("/v1/session").await?;
            let id = me
                .via
                .api_key
                .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "not an API key"))?;
            r.request(
                "DELETE",
                &format!("/v1/keys/{}", crate::client::encode(&id)),
                &[],
                None::<&()>,
            )
            .await?
            .empty()
        }
        .await;
        if let Err(e) = &revoked {
            eprintln!(
                "airlock: could not revoke the key on the server: {}: {}",
                e.code, e.message
            );
        }
        if let Some(p) = credentials_path()
            && let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return err(format!("{}: {e}", p.display()));
        }
        if json {
            println!(
                "{}",
                serde_json::json!({"revoked": revoked.is_ok(), "forgotten": true})
            );
        }
        ExitCode::SUCCESS
    })
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Issue a single-use, expiring password-reset token for a user (also
    /// clears their TOTP when used). Runs on the server's own database.
    ResetPassword {
        username: String,
        /// Minutes until the token expires.
        #[arg(long, default_value_t = 60)]
        ttl_minutes: u64,
        /// `{"username", "token", "expires_in_s"}` instead of the bare token.
        #[arg(long)]
        json: bool,
    },
    /// Apply the database migrations and exit. On PostgreSQL with two
    /// roles, run this as the owner role before the server starts as the
    /// runtime role (README, "PostgreSQL with two roles").
    Migrate,
    /// Print the SQL that gives a PostgreSQL runtime role what the server
    /// needs, and on the audit log only INSERT and SELECT; run it as the
    /// owner after `admin migrate`.
    PgRuntimeGrants {
        /// The runtime role's name.
        #[arg(long, default_value = "airlock_runtime")]
        role: String,
    },
}

pub fn admin(paths: &Paths, cmd: &AdminCommand) -> ExitCode {
    let (username, ttl_minutes, json) = match cmd {
        AdminCommand::ResetPassword {
            username,
            ttl_minutes,
            json,
        } => (username, ttl_minutes, json),
        AdminCommand::Migrate => {
            return block_on(async || {
                match airlock_service::migrate_database(&paths.url()).await {
                    Ok(v) => {
                        println!("{}", serde_json::json!({"schema_version": v}));
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                }
            });
        }
        AdminCommand::PgRuntimeGrants { role } => {
            return match airlock_service::postgres_runtime_grants(role) {
                Ok(sql) => {
                    print!("{sql}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            };
        }
    };
    with_service(paths, async |svc| {
        let op = Caller::operator(&svc.config().workers_workspace);
        let ttl = Duration::from_secs(ttl_minutes.saturating_mul(60));
        match svc.operator_reset_password(&op, username, ttl).await {
            Ok(token) => {
                let valid = ttl.clamp(Duration::from_secs(60), airlock_service::MAX_RESET_TTL);
                if *json {
                    println!(
                        "{}",
                        serde_json::json!({"username": username, "token": token, "expires_in_s": valid.as_secs()})
                    );
                    return ExitCode::SUCCESS;
                }
                println!("{token}");
                eprintln!(
                    "airlock: single-use reset token for {username}, valid {} min; the user sends it with a new password to POST /v1/password/reset (TOTP is cleared on use)",
                    valid.as_secs() / 60
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        }
    })
}
